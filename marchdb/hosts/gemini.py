"""Gemini CLI (npm ``@google/gemini-cli``): its hooks in ``settings.json``.

``~/.gemini/settings.json`` or ``<repo>/.gemini/settings.json``; events
``SessionStart`` (profiles; ``source`` ``clear`` starts the window afresh),
``BeforeAgent`` (the prompt: ``[recall]``), ``AfterTool`` (seed 000's steer
after a tool), ``AfterAgent`` (the reply: recorded). Not ``PreCompress``:
Gemini fires it before nearly every model call, compressing or not. Only JSON may go to stdout: ``hookSpecificOutput.additionalContext``.
Gemini wraps injected context in ``<hook_context>`` and puts what
SessionStart gave into the next prompt: that is not the user's words, and a
prompt is never recalled on it. Its transcript is a JSONL chat whose
``gemini`` entries hold the model's text. Only the standard library.
"""

from __future__ import annotations

import re

from marchdb.hosts import claude_code

HOST = "gemini"
EVENTS = {
    "SessionStart": "session_start",
    "BeforeAgent": "prompt",
    "AfterTool": "tool",
    "AfterAgent": "stop",
}
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
