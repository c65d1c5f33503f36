"""Gemini CLI (npm ``@google/gemini-cli``): its hooks in ``settings.json``.

``~/.gemini/settings.json`` or ``<repo>/.gemini/settings.json`` (read only
in a folder Gemini trusts, once its folder trust is on); events
``SessionStart`` (profiles; ``source`` ``clear`` starts the window afresh),
``BeforeAgent`` (the prompt: ``[recall]``), ``AfterTool`` (seed 000's steer
after a tool), ``AfterAgent`` (the reply: recorded), ``PreCompress``. Gemini
fires ``PreCompress`` before nearly every model call, and only then decides
whether the chat is long enough to compress; so a ``manual`` one (``/compress``)
starts the window afresh, and an ``auto`` one only when the chat file is past
the size at which Gemini compresses (``COMPRESS_AT_BYTES``). Only JSON may go
to stdout: ``hookSpecificOutput.additionalContext``. Gemini wraps injected
context in ``<hook_context>`` and puts what SessionStart gave into the next
prompt: that is not the user's words, and a prompt is never recalled on it.
Its transcript is a JSONL chat whose ``gemini`` entries hold the model's
text. Only the standard library.
"""

from __future__ import annotations

import json
import os
import re

from marchdb.hosts import claude_code

HOST = "gemini"
TITLE = "Gemini CLI"
DOCS = "gemini.md"
PROGRAM = {"npm": "@google/gemini-cli", "version": "0.61.0", "bin": "node_modules/.bin/gemini"}
EVENTS = {
    "SessionStart": "session_start",
    "BeforeAgent": "prompt",
    "AfterTool": "tool",
    "AfterAgent": "stop",
    "PreCompress": "compact",
}
#: Gemini compresses a chat past half its model's window (1,048,576 tokens for
#: its 2.x models); at about 4 bytes a token of its chat file, that is this size.
COMPRESS_AT_BYTES = 2 * 1024 * 1024


def home_dir():
    from pathlib import Path

    return Path("~/.gemini").expanduser().absolute()


def installer():
    """``~/.gemini/settings.json``, or the project's ``.gemini/settings.json`` (timeouts in ms)."""
    from marchdb.hosts.jsonhooks import JsonHooks

    return JsonHooks(
        HOST,
        tuple(EVENTS),
        lambda: home_dir() / "settings.json",
        lambda project: project / ".gemini" / "settings.json",
        timeout_ms=True,
        after=_after,
    )


def _after(path, project) -> tuple[str, ...]:
    if project is None or folder_trusted(str(project)):
        return ()
    return (
        f"Gemini's folder trust is on and it does not trust {project}: it ignores {path} there until you trust the "
        "folder (start `gemini` in it and trust it, or /permissions)",
    )


def folder_trusted(folder: str) -> bool:
    """Whether Gemini reads a project's settings in ``folder``: always while
    its folder trust is off (the default), else when ``trustedFolders.json``
    trusts the folder or one holding it (``TRUST_PARENT``: its parent)."""
    return trusted_in(home_dir(), folder)


def trusted_in(home, folder: str) -> bool:
    """``folder_trusted`` for a host that keeps Gemini's files in ``home``
    (Gemini's ``~/.gemini``, Qwen Code's ``~/.qwen``): its ``settings.json``
    says whether folder trust is on, its ``trustedFolders.json`` what it trusts."""
    try:
        user = json.loads((home / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        user = {}
    trust = ((user.get("security") or {}).get("folderTrust") or {}) if isinstance(user, dict) else {}
    if not (isinstance(trust, dict) and trust.get("enabled") is True):
        return True
    return trusted_by(home / "trustedFolders.json", folder)


def trusted_by(rules_file, folder: str) -> bool:
    """Whether a ``trustedFolders.json`` (Gemini's, Qwen's) trusts ``folder``:
    ``TRUST_FOLDER`` on it or a folder holding it, ``TRUST_PARENT`` on a
    folder beside it."""
    try:
        rules = json.loads(rules_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    here = os.path.realpath(folder)
    for path, level in rules.items() if isinstance(rules, dict) else []:
        root = os.path.realpath(os.path.expanduser(str(path)))
        if level == "TRUST_PARENT":
            root = os.path.dirname(root)
        if level in ("TRUST_FOLDER", "TRUST_PARENT") and (
            here == root or here.startswith(root.rstrip(os.sep) + os.sep)
        ):
            return True
    return False


def doctor(rows: list[dict], cwd: str) -> list[dict]:
    """A project's Gemini hooks that Gemini ignores: its folder trust is on and the folder is not trusted."""
    problems = []
    for row in rows:
        if row["host"] != HOST or row["where"] == str(home_dir() / "settings.json"):
            continue
        folder = os.path.dirname(os.path.dirname(row["where"]))
        if not folder_trusted(folder):
            problems.append(
                {
                    "path": row["where"],
                    "kind": "gemini_folder_untrusted",
                    "detail": f"Gemini's folder trust is on and {folder} is not trusted: it ignores these hooks",
                    "advice": "start `gemini` in that folder and trust it",
                }
            )
    return problems


def sample_prompt(session: str, text: str) -> str:
    """The event Gemini sends for a prompt."""
    return json.dumps({"session_id": session, "hook_event_name": "BeforeAgent", "prompt": text, "cwd": "/tmp"})


#: What Gemini wraps injected context in (a hook's own answer, echoed back).
_HOOK_CONTEXT = re.compile(r"<hook_context\b[^>]*>.*?</hook_context>", re.S)


def users_words(prompt: str | None) -> str | None:
    """The prompt without the context hooks injected into it."""
    return None if prompt is None else _HOOK_CONTEXT.sub("", prompt).strip()


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one Gemini CLI hook event."""
    data = claude_code.read_json(raw)
    args = claude_code.event_of(data, EVENTS, HOST)
    if args is None:
        return None
    event = args["event"]
    if event == "compact" and data.get("trigger") != "manual" and not _long_chat(data.get("transcript_path")):
        return None  # Gemini asks before every call; a chat this short it does not compress
    if event == "prompt":
        args["text"] = users_words(claude_code.text_of(data.get("prompt")))
    elif event == "tool":
        text = latest_model_text(data.get("transcript_path"), this_turn=True)
        if not text:
            return None
        args["text"] = text
    elif event == "stop":
        answer = claude_code.text_of(data.get("prompt_response"))
        args["text"] = answer or latest_model_text(data.get("transcript_path"))
    return args


def render(args: dict, data: dict) -> str:
    """JSON only: the context as ``hookSpecificOutput.additionalContext``."""
    return claude_code.render(args, data, EVENTS)


def _long_chat(transcript_path: object) -> bool:
    """Whether Gemini's chat file is past the size at which it compresses."""
    if not isinstance(transcript_path, str) or not transcript_path or "\x00" in transcript_path:
        return False
    try:
        return os.stat(os.path.expanduser(transcript_path)).st_size >= COMPRESS_AT_BYTES
    except OSError:
        return False


def latest_model_text(transcript_path: object, this_turn: bool = False) -> str:
    """The model's latest text in a Gemini CLI chat file ("" when none)."""
    return claude_code.latest_text(claude_code.tail_entries(transcript_path), _chat_turn, this_turn)


def _chat_turn(entry: dict) -> tuple[str, str] | None:
    kind, content = entry.get("type"), entry.get("content")
    if kind == "gemini":
        return ("assistant", content) if isinstance(content, str) else None
    if kind == "user" and isinstance(content, list):
        texts = [str(b["text"]) for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
        words = users_words("\n".join(texts)) if texts else ""
        return ("user", words) if words else None  # a tool's result, or only injected context
    return None
