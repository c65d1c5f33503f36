"""Codex CLI (npm ``@openai/codex``): its hooks speak Claude Code's JSON.

``~/.codex/hooks.json`` (``$CODEX_HOME``) or ``<repo>/.codex/hooks.json``;
events ``SessionStart``, ``UserPromptSubmit``, ``PostToolUse``,
``PreCompact``, ``Stop``; ``hookSpecificOutput.additionalContext`` becomes a
developer message. Codex runs a new or changed hook only once the user has
trusted it (``/hooks`` in its TUI), and says nothing when it skips one:
``install`` and ``doctor`` say so (``trust_notes``). Its transcript is a
"rollout" file of ``response_item`` lines. Only the standard library.
"""

from __future__ import annotations

from marchdb.hosts import claude_code

HOST = "codex"


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one Codex hook event."""
    return claude_code.parse(raw, options, host=HOST, transcript=latest_assistant_text)


def render(args: dict, data: dict) -> str:
    """Claude Code's answer: ``hookSpecificOutput.additionalContext``."""
    return claude_code.render(args, data)


def latest_assistant_text(transcript_path: object, this_turn: bool = False) -> str:
    """The assistant's latest text in a Codex rollout file ("" when none)."""
    return claude_code.latest_text(claude_code.tail_entries(transcript_path), _rollout_turn, this_turn)


def _rollout_turn(entry: dict) -> tuple[str, str] | None:
    payload = entry.get("payload")
    if entry.get("type") != "response_item" or not isinstance(payload, dict) or payload.get("type") != "message":
        return None
    role, content = payload.get("role"), payload.get("content")
    if role == "user":
        text = claude_code._texts(content, "input_text")
        # Codex puts its own context in user messages too: only a prompt counts.
        return None if text.lstrip().startswith("<environment_context>") else ("user", text)
    if role == "assistant":
        return "assistant", claude_code._texts(content, "output_text")
    return None


def trust_notes(path) -> tuple[str, ...]:
    """What to tell a user who has just written hooks into ``path``: Codex
    skips them until they are trusted."""
    return (
        f"Codex runs new or changed hooks only once you trust them: start `codex`, type /hooks and trust the "
        f"marchdb hooks of {path} (until then Codex skips them without a word; `marchdb doctor` tells)",
    )
