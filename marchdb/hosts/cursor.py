"""Cursor (``.cursor/hooks.json``): hints for each prompt, profiles at a session's start, a steer after a tool.

* ``sessionStart`` → ``{"additional_context": profiles}`` (the session's
  initial context);
* ``beforeSubmitPrompt`` → ``{"continue": true, "additional_context":
  "[recall]..."}``: Cursor's reference documents only ``continue`` for it,
  but Cursor 3.20 and later take ``additional_context`` too (it reaches the
  model as a reminder for that turn, 10,000 characters at most); releases
  that ignore it still have the profiles of ``sessionStart``;
* ``postToolUse`` → ``{"additional_context": "[recall]..."}`` after the
  tool's result: at most 2 hints for the agent's latest words of the turn,
  read from Cursor's transcript (``transcript_path``), or, where Cursor
  gives none (its CLI), for what the tool was asked to do (``tool_name``,
  ``tool_input``);
* ``afterAgentResponse`` → the reply is recorded, nothing returned.

Runs are named after ``conversation_id``. Only the standard library.
"""

from __future__ import annotations

import json

from marchdb.hosts import claude_code

HOST = "cursor"
TITLE = "Cursor"
DOCS = "cursor.md"
PROGRAM = None
NOT_RUN = "Cursor's agent needs Cursor's own servers and account: its documented JSON is tested"
EVENTS = {
    "sessionStart": "session_start",
    "beforeSubmitPrompt": "prompt",
    "postToolUse": "tool",
    "preCompact": "compact",
    "afterAgentResponse": "stop",
}


def installer():
    """``~/.cursor/hooks.json``, or the project's ``.cursor/hooks.json``: flat entries, ``"version": 1``."""
    from pathlib import Path

    from marchdb.hosts.jsonhooks import JsonHooks

    return JsonHooks(
        HOST,
        tuple(EVENTS),
        lambda: Path("~/.cursor").expanduser().absolute() / "hooks.json",
        lambda project: project / ".cursor" / "hooks.json",
        grouped=False,
        top={"version": 1},
    )


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
    if event == "prompt":
        args["text"] = claude_code.text_of(data.get("prompt"))
    elif event == "tool":
        text = latest_agent_text(data.get("transcript_path"), this_turn=True) or _asked(data)
        if not text.strip():
            return None
        args["text"] = text
    elif event == "stop":
        args["text"] = claude_code.text_of(data.get("text"))
    return args


def _asked(data: dict) -> str:
    return claude_code.tool_asked(data.get("tool_input"))


def render(args: dict, data: dict) -> str:
    """``{"additional_context": ...}`` (with ``continue`` for a prompt), or nothing."""
    context = str(data.get("context") or "").strip()
    if args["event"] in ("stop", "compact"):
        return ""
    if args["event"] == "prompt":
        return json.dumps({"continue": True, **({"additional_context": context} if context else {})})
    return json.dumps({"additional_context": context}, ensure_ascii=False) if context else ""


def latest_agent_text(transcript_path: object, this_turn: bool = False) -> str:
    """The agent's latest text in a Cursor transcript (JSONL of
    ``{"role", "message": {"content": [...]}}``), "" when none."""
    return claude_code.latest_text(claude_code.tail_entries(transcript_path), _turn, this_turn)


def _turn(entry: dict) -> tuple[str, str] | None:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    role = entry.get("role")
    text = claude_code._texts(content, "text")
    if role == "assistant":
        return "assistant", text
    if role == "user" and "<user_query>" in text:
        return "user", text
    return None


def sample_prompt(session: str, text: str) -> str:
    """The event Cursor sends for a prompt."""
    return json.dumps(
        {
            "conversation_id": session,
            "hook_event_name": "beforeSubmitPrompt",
            "prompt": text,
            "workspace_roots": ["/tmp"],
        }
    )
