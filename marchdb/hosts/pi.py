"""pi (npm ``@mariozechner/pi-coding-agent``): an extension, ``extensions/marchdb.ts``.

pi loads ``~/.pi/agent/extensions/*.ts`` (``$PI_CODING_AGENT_DIR``) for the
user and ``.pi/extensions/*.ts`` for a project, through jiti (plain
JavaScript is valid there). marchdb's extension (``pi_extension.js`` with the
shared client, ``hosts.plugins``) adds the profiles to each turn's system
prompt, returns each prompt's ``[recall]`` block from ``before_agent_start``
as a hidden message (it reaches the model as a user message right after the
prompt), adds the steer after a tool to that tool's result, records the run's
last reply (``agent_end``) and starts the window afresh at a compaction
(``session_compact``). Only the standard library.
"""

from __future__ import annotations

import os
from pathlib import Path

from marchdb.hosts import plugins

HOST = "pi"
TITLE = "pi"
DOCS = "pi.md"
PROGRAM = {"npm": "@mariozechner/pi-coding-agent", "version": "0.73.1", "bin": "node_modules/.bin/pi"}
EVENTS = plugins.EVENTS
FILE = "marchdb.ts"


def agent_dir() -> Path:
    """pi's user folder: ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``."""
    return Path(os.environ.get("PI_CODING_AGENT_DIR") or "~/.pi/agent").expanduser().absolute()


def installer():
    """``extensions/marchdb.ts`` in pi's user folder, or the project's ``.pi``."""
    from marchdb.hosts.hookfiles import Plugin

    def files(argv: list[str], env: dict[str, str]) -> dict[str, bytes]:
        return {FILE: plugins.source(HOST, TITLE, "pi_extension.js", argv, env).encode()}

    return Plugin(
        HOST,
        tuple(EVENTS),
        lambda: agent_dir() / "extensions",
        lambda project: project / ".pi" / "extensions",
        files,
        user_base=lambda: agent_dir() if os.environ.get("PI_CODING_AGENT_DIR") else Path.home(),
    )


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event the extension sent."""
    return plugins.parse(raw, HOST)


def render(args: dict, data: dict) -> str:
    """The plain context text."""
    return plugins.render(args, data)


sample_prompt = plugins.sample_prompt
