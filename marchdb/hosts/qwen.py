"""Qwen Code (npm ``@qwen-code/qwen-code``): Claude-Code-style hooks in its ``settings.json``.

``~/.qwen/settings.json`` or ``<repo>/.qwen/settings.json`` (a project's
hooks load only in a folder Qwen trusts, once its folder trust is on). The
events and the answer are Claude Code's (``hookSpecificOutput`` with
``hookEventName``, which must name the event answered; Qwen puts
``additionalContext`` into a text part of its own), with Qwen's turns:

* ``SessionStart`` → the profiles (``source`` ``clear``/``compact``: the window starts afresh);
* ``UserPromptSubmit`` fires before every model call of a turn, a tool's
  result included: only the one that carries ``submitted_prompt`` (what the
  user typed) opens a run and gets ``[recall]``;
* ``PostToolUse`` → the steer for the model's latest words of this turn
  (read from Qwen's chat file);
* ``PreCompact`` → the window starts afresh; ``Stop`` → the reply
  (``last_assistant_message``) is recorded.

Hook timeouts are written in milliseconds (10000): Qwen reads a value of 1000
or more as milliseconds in every release. Only the standard library.
"""

from __future__ import annotations

import json
import os

from marchdb.hosts import claude_code

HOST = "qwen"
TITLE = "Qwen Code"
DOCS = "qwen.md"
PROGRAM = {"npm": "@qwen-code/qwen-code", "version": "0.24.4", "bin": "node_modules/.bin/qwen"}
EVENTS = claude_code.EVENTS


def home_dir():
    from pathlib import Path

    return Path("~/.qwen").expanduser().absolute()


def installer():
    """``~/.qwen/settings.json``, or the project's ``.qwen/settings.json``."""
    from marchdb.hosts.jsonhooks import JsonHooks

    return JsonHooks(
        HOST,
        tuple(EVENTS),
        lambda: home_dir() / "settings.json",
        lambda project: project / ".qwen" / "settings.json",
        timeout_ms=True,
        after=_after,
    )


def _after(path, project) -> tuple[str, ...]:
    if project is None or folder_trusted(str(project)):
        return ()
    return (
        f"Qwen's folder trust is on and it does not trust {project}: it ignores the hooks of {path} there until "
        "you trust the folder",
    )


def folder_trusted(folder: str) -> bool:
    """Whether Qwen loads a project's hooks in ``folder``: always while its
    folder trust is off (the default), else when its ``trustedFolders.json`` trusts it."""
    from marchdb.hosts import gemini

    return gemini.trusted_in(home_dir(), folder)


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one Qwen Code hook event."""
    data = claude_code.read_json(raw)
    if data.get("hook_event_name") == "UserPromptSubmit":
        typed = data.get("submitted_prompt")
        if not isinstance(typed, str):
            prompt = data.get("prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                return None  # a model call after a tool's result: no new prompt
            typed = prompt  # a release that does not tell the two apart
        data = {**data, "prompt": typed}
    return claude_code.parse(json.dumps(data), options, host=HOST, transcript=latest_model_text)


def render(args: dict, data: dict) -> str:
    """Claude Code's answer: ``hookSpecificOutput.additionalContext``."""
    return claude_code.render(args, data)


def latest_model_text(transcript_path: object, this_turn: bool = False) -> str:
    """The model's latest text in Qwen's chat file ("" when none)."""
    return claude_code.latest_text(claude_code.tail_entries(transcript_path), _chat_turn, this_turn)


def _chat_turn(entry: dict) -> tuple[str, str] | None:
    message = entry.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    texts = [p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)]
    kind = entry.get("type")
    if kind == "assistant":
        return "assistant", "\n".join(t for t in texts if t.strip())
    if kind == "user" and entry.get("provenance", "real_user") == "real_user" and texts:
        return "user", "\n".join(texts)
    return None


def sample_prompt(session: str, text: str) -> str:
    """The event Qwen sends for a typed prompt."""
    return json.dumps(
        {
            "session_id": session,
            "hook_event_name": "UserPromptSubmit",
            "prompt": text,
            "submitted_prompt": text,
            "cwd": "/tmp",
        }
    )


def doctor(rows: list[dict], cwd: str) -> list[dict]:
    """A project's Qwen hooks that Qwen ignores: its folder trust is on and the folder is not trusted."""
    problems = []
    for row in rows:
        if row["host"] != HOST or row["where"] == str(home_dir() / "settings.json"):
            continue
        folder = os.path.dirname(os.path.dirname(row["where"]))
        if not folder_trusted(folder):
            problems.append(
                {
                    "path": row["where"],
                    "kind": "qwen_folder_untrusted",
                    "detail": f"Qwen's folder trust is on and {folder} is not trusted: it ignores these hooks",
                    "advice": "start `qwen` in that folder and trust it",
                }
            )
    return problems
