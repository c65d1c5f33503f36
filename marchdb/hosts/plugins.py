"""Plugins that run inside a host's own process (opencode, Kilo, pi, OpenClaw, the Cline CLI): their events, and their source.

Such a plugin is a small JavaScript file ``marchdb install`` writes: the
host's own event (a prompt, a tool's end, a compaction) becomes one event in
Claude Code's hook JSON, sent through ``plugin_client.js`` to the same warm
engine relay (``hosts.relay``) and the same hook command (``cli/launch.py``)
the hooks use, and answered by the host's adapter (this module's ``parse``
and ``render``) like any hook's. There is no second recall path: only the
transport differs (a socket from the host's process, instead of a process
the host starts). The answer is the plain context text; the plugin puts it
where the host takes it.

Events (``hook_event_name``): ``SessionStart`` (the profiles),
``UserPromptSubmit`` (``prompt``: a new run's ``[recall]``), ``PostToolUse``
(``assistant_text``: the assistant's words of the turn, for the steer),
``PreCompact`` (the window starts afresh), ``Stop``
(``last_assistant_message``: recorded). Only the standard library.
"""

from __future__ import annotations

import json
from pathlib import Path

from marchdb.hosts import claude_code

#: Plugin events, as Claude Code names them.
EVENTS = claude_code.EVENTS
#: Where the plugins' JavaScript lies (package data).
HERE = Path(__file__).parent


def parse(raw: str, host: str) -> dict | None:
    """The ``memory_hook`` event a plugin sent."""
    data = claude_code.read_json(raw)
    args = claude_code.event_of(data, EVENTS, host)
    if args is None:
        return None
    event = args["event"]
    if event == "prompt":
        args["text"] = claude_code.text_of(data.get("prompt"))
    elif event == "tool":
        text = claude_code.text_of(data.get("assistant_text"))
        if not text or not text.strip():
            return None
        args["text"] = text
    elif event == "stop":
        args["text"] = claude_code.text_of(data.get("last_assistant_message"))
    return args


def render(args: dict, data: dict) -> str:
    """The plain context text (nothing for a run's end or a compaction)."""
    if args["event"] in ("stop", "compact"):
        return ""
    return str(data.get("context") or "")


def client_source(host: str, title: str, argv: list[str], env: dict[str, str]) -> str:
    """What the plugin is, this installation's command, and the shared
    client (``plugin_client.js``: ``ask(event)``)."""
    from marchdb.hosts.hookfiles import MARK

    header = (
        f"// marchdb for {title}: {MARK} ({host}).\n"
        "// Each event goes to this installation of marchdb (its warm engine, else its hook command);\n"
        "// when marchdb is gone, this plugin does nothing and the host runs on.\n"
        f"const MARCHDB = {json.dumps(argv)};\n"
        f"const ENV = {json.dumps(env, sort_keys=True)};\n"
        f"const HOST = {json.dumps(host)};\n\n"
    )
    return header + (HERE / "plugin_client.js").read_text(encoding="utf-8")


def source(host: str, title: str, glue: str, argv: list[str], env: dict[str, str]) -> str:
    """A plugin's whole file: ``client_source`` and the host's own part
    (``glue``, a file next to this module)."""
    return client_source(host, title, argv, env) + "\n" + (HERE / glue).read_text(encoding="utf-8")


def sample_prompt(session: str, text: str) -> str:
    """What a plugin sends for a prompt."""
    return json.dumps({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": text, "cwd": "/tmp"})
