"""Cursor (``.cursor/hooks.json``): profiles at a session's start, a steer after a tool.

Cursor's ``beforeSubmitPrompt`` can only let a prompt through or block it:
no context can be added to a message, so **per-prompt hints are not possible
in Cursor** (use its MCP support: ``marchdb mcp``). What can be done is done:

* ``sessionStart`` → ``{"additional_context": profiles}`` (the session's
  initial context);
* ``postToolUse`` → ``{"additional_context": "[recall]..."}`` for the
  assistant's message that came with the tool call (``agent_message``),
  injected after the tool's result;
* ``afterAgentResponse`` → the reply is recorded, nothing returned.

Runs are named after ``conversation_id``. Only the standard library.
"""

from __future__ import annotations

import json

from marchdb.hosts import claude_code

HOST = "cursor"
EVENTS = {"sessionStart": "session_start", "postToolUse": "tool", "afterAgentResponse": "stop"}


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one Cursor hook event."""
    data = claude_code.read_json(raw)
    args = claude_code.event_of(data, EVENTS, HOST, data.get("conversation_id") or data.get("session_id"))
    if args is None:
        return None
    event = args["event"]
    roots = data.get("workspace_roots")
    if "cwd" not in args and isinstance(roots, list) and roots and isinstance(roots[0], str):
        args["cwd"] = roots[0]
    if event == "tool":
        text = claude_code.text_of(data.get("agent_message"))
        if not text or not text.strip():
            return None
        args["text"] = text
    elif event == "stop":
        args["text"] = claude_code.text_of(data.get("text"))
    return args


def render(args: dict, data: dict) -> str:
    """``{"additional_context": ...}``, or nothing."""
    context = str(data.get("context") or "").strip()
    if not context or args["event"] == "stop":
        return ""
    return json.dumps({"additional_context": context}, ensure_ascii=False)
