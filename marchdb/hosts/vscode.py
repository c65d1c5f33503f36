"""VS Code's agent (GitHub Copilot's agent hooks): it runs Claude Code's hooks, in its own spelling.

VS Code loads the hooks of ``~/.claude/settings.json`` (and a workspace's
``.claude/settings*.json``) by default, so ``marchdb install vscode`` writes
the same hooks as ``install claude-code`` into the same file: one set of
hooks serves both, never twice. VS Code sends ``hookEventName`` and
``sessionId`` (camelCase) where Claude Code sends ``hook_event_name`` and
``session_id``; the Claude Code adapter hands such an event here. What VS
Code takes back (its hooks reference):

* ``SessionStart`` → ``hookSpecificOutput.additionalContext``: the profiles;
* ``UserPromptSubmit`` takes no context at all (its output is the common
  ``continue`` / ``systemMessage``, shown to the user, not the model): the
  prompt opens a new run, and what it would have hinted is only recorded
  (it was never shown, so it suppresses nothing);
* ``PostToolUse`` → ``hookSpecificOutput.additionalContext``: at most 2 hints
  for what the tool was asked to do (VS Code's transcript is not a stable
  format to read the agent's words from);
* ``PreCompact`` → the window starts afresh; ``Stop`` carries no reply: nothing.

Only the standard library.
"""

from __future__ import annotations

import json

from marchdb.hosts import claude_code

HOST = "vscode"
TITLE = "VS Code (agent hooks)"
DOCS = "vscode.md"
#: VS Code's agent cannot be run headless here; its documented JSON is tested.
PROGRAM = None
NOT_RUN = "VS Code's agent runs inside the editor, signed in to GitHub: its documented JSON is tested"
EVENTS = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "prompt",
    "PostToolUse": "tool",
    "PreCompact": "compact",
}


def installer():
    """Claude Code's hooks, in Claude Code's file (VS Code reads it)."""
    import dataclasses

    def after(path, project) -> tuple[str, ...]:
        return (
            f"VS Code's agent runs the hooks of {path} (its default hook files include Claude Code's); "
            "the same hooks serve Claude Code, never twice",
        )

    return dataclasses.replace(claude_code.installer(), after=after, alias_of="claude-code")


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one VS Code hook event (either spelling)."""
    return parse_data(claude_code.read_json(raw))


def parse_data(data: dict) -> dict | None:
    """The ``memory_hook`` event of a VS Code event already read."""
    name = data.get("hookEventName", data.get("hook_event_name"))
    event = EVENTS.get(name) if isinstance(name, str) else None
    if event is None:
        return None
    session = data.get("sessionId", data.get("session_id"))
    args: dict = {"event": event, "host": HOST, "session": claude_code.text_of(session)}
    if isinstance(data.get("cwd"), str):
        args["cwd"] = data["cwd"]
    if event == "session_start":
        args["source"] = data.get("source") if data.get("source") in ("startup", "resume", "clear", "compact") else None
    elif event == "prompt":
        args["text"] = claude_code.text_of(data.get("prompt"))
        args["record_only"] = True  # VS Code cannot take context for a prompt
    elif event == "tool":
        asked = claude_code.tool_asked(data.get("tool_input", data.get("toolInput")))
        if not asked:
            return None
        args["text"] = asked
    return args


def render(args: dict, data: dict) -> str:
    """``hookSpecificOutput.additionalContext`` where VS Code reads it (a
    session's start, after a tool); nothing for a prompt or a compaction."""
    context = str(data.get("context") or "").strip()
    if not context or args["event"] not in ("session_start", "tool"):
        return ""
    name = {"session_start": "SessionStart", "tool": "PostToolUse"}[args["event"]]
    return json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": context}}, ensure_ascii=False)


def sample_prompt(session: str, text: str) -> str:
    """The event VS Code sends after a tool (its prompts take no context)."""
    return json.dumps(
        {
            "sessionId": session,
            "hookEventName": "PostToolUse",
            "tool_name": "runInTerminal",
            "tool_input": {"command": text},
            "cwd": "/tmp",
        }
    )
