"""Codex CLI (npm ``@openai/codex``): its hooks speak Claude Code's JSON.

``~/.codex/hooks.json`` (``$CODEX_HOME``) or ``<repo>/.codex/hooks.json``;
events ``SessionStart``, ``UserPromptSubmit``, ``PostToolUse``,
``PreCompact``, ``Stop``; ``hookSpecificOutput.additionalContext`` becomes a
developer message. Codex runs a new or changed hook only once the user has
trusted it (``/hooks`` in its TUI), and says nothing when it skips one:
``install`` says so, and ``doctor`` asks Codex (``trust_status``). Its transcript is a
"rollout" file of ``response_item`` lines. Only the standard library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

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


#: Seconds ``trust_status`` gives Codex's app server to answer.
TRUST_TIMEOUT = 20.0


def trust_status(cwd: str, ours, env: dict | None = None) -> list[dict] | None:
    """Codex's own word on the hooks it sees from ``cwd`` whose command
    ``ours(command)`` says is marchdb's: each
    ``{"key", "event", "status"}`` (``trusted``, ``untrusted``, ``modified``),
    asked of ``codex app-server`` (the JSON-RPC server behind its TUI's
    /hooks); None when Codex is not on PATH or does not answer."""
    program = shutil.which("codex", path=(env or os.environ).get("PATH"))
    if program is None:
        return None
    lines = [
        {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "marchdb-doctor", "version": "1"}}},
        {"method": "initialized"},
        {"id": 2, "method": "hooks/list", "params": {"cwds": [cwd]}},
    ]
    try:
        proc = subprocess.Popen(
            [program, "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            text=True,
        )
    except OSError:
        return None
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
        proc.stdin.flush()
        listing = _answer_to(proc, 2)
    finally:
        proc.kill()
        proc.wait()
    if listing is None:
        return None
    return [
        {"key": h.get("key"), "event": h.get("eventName"), "status": h.get("trustStatus")}
        for entry in listing.get("data", [])
        for h in entry.get("hooks", [])
        if ours(str(h.get("command", "")))
    ]


def _answer_to(proc, wanted: int) -> dict | None:
    import selectors
    import time

    deadline = time.monotonic() + TRUST_TIMEOUT
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                return None
            line = proc.stdout.readline()
            if not line:
                return None
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == wanted:
                result = message.get("result")
                return result if isinstance(result, dict) else None
    return None
