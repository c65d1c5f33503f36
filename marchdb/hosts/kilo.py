"""Kilo CLI (npm ``@kilocode/cli``): opencode's fork, with opencode's plugin API.

The same plugin as opencode's (``hosts.opencode``), in Kilo's folders:
``~/.config/kilo/plugins/`` for the user, ``.kilo/plugins/`` for a project.
Only the standard library.
"""

from __future__ import annotations

import os
from pathlib import Path

from marchdb.hosts import opencode, plugins

HOST = "kilo"
TITLE = "Kilo CLI"
DOCS = "kilo.md"
PROGRAM = {"npm": "@kilocode/cli", "version": "7.7.7", "bin": "node_modules/.bin/kilo"}
EVENTS = plugins.EVENTS


def config_dir() -> Path:
    """Kilo's user folder: ``$XDG_CONFIG_HOME/kilo`` (``~/.config/kilo``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser().absolute() / "kilo"


def installer():
    """``plugins/marchdb.js`` in Kilo's user folder, or the project's ``.kilo``."""
    return opencode.installer(HOST, TITLE, config_dir(), ".kilo")


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event the plugin sent."""
    return plugins.parse(raw, HOST)


def render(args: dict, data: dict) -> str:
    """The plain context text."""
    return plugins.render(args, data)


sample_prompt = plugins.sample_prompt
