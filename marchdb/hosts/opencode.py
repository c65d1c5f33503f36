"""opencode (npm ``opencode-ai``): an in-process plugin, ``plugins/marchdb.js``.

opencode loads every ``{plugin,plugins}/*.{js,ts}`` of its config folders:
``~/.config/opencode/`` (``$XDG_CONFIG_HOME``) for the user, ``.opencode/``
for a project. marchdb's plugin (``opencode_plugin.js`` with the shared
client, ``hosts.plugins``) puts the profiles into the first system message,
each prompt's ``[recall]`` block at the end of that user message's text (its
``experimental.chat.messages.transform``), the steer after a tool into that
tool's output, records the reply when the session goes idle, and starts the
window afresh at a compaction (``experimental.session.compacting``).
Kilo CLI is a fork with the same plugin API (``hosts.kilo``). Only the
standard library.
"""

from __future__ import annotations

import os
from pathlib import Path

from marchdb.hosts import plugins

HOST = "opencode"
TITLE = "opencode"
DOCS = "opencode.md"
PROGRAM = {"npm": "opencode-ai", "version": "1.18.33", "bin": "node_modules/.bin/opencode"}
EVENTS = plugins.EVENTS
#: The plugin's file in a config folder's ``plugins/``.
FILE = "marchdb.js"


def config_dir() -> Path:
    """opencode's user folder: ``$XDG_CONFIG_HOME/opencode`` (``~/.config/opencode``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser().absolute() / "opencode"


def installer(host: str = HOST, title: str = TITLE, user: Path | None = None, project: str = ".opencode"):
    """``plugins/marchdb.js`` in the user's config folder, or the project's."""
    from marchdb.hosts.hookfiles import Plugin

    def files(argv: list[str], env: dict[str, str]) -> dict[str, bytes]:
        return {FILE: plugins.source(host, title, "opencode_plugin.js", argv, env).encode()}

    return Plugin(
        host,
        tuple(EVENTS),
        lambda: (user or config_dir()) / "plugins",
        lambda folder: folder / project / "plugins",
        files,
    )


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event the plugin sent."""
    return plugins.parse(raw, HOST)


def render(args: dict, data: dict) -> str:
    """The plain context text."""
    return plugins.render(args, data)


sample_prompt = plugins.sample_prompt
