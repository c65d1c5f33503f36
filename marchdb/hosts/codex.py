"""Codex CLI (npm ``@openai/codex``): its hooks speak Claude Code's JSON.

``~/.codex/hooks.json`` (``$CODEX_HOME``) or ``<repo>/.codex/hooks.json``;
events ``SessionStart``, ``UserPromptSubmit``, ``PostToolUse``,
``PreCompact``, ``Stop``; ``hookSpecificOutput.additionalContext`` becomes a
developer message. Codex runs a new or changed hook only once the user has
trusted it (``/hooks`` in its TUI), and a project's hooks only in a project
it trusts; it says nothing when it skips one: ``install`` says so, and
``doctor`` asks Codex (``trust_status``) and reads its ``config.toml``
(``project_trusted``). Its transcript is a "rollout" file of
``response_item`` lines. Only the standard library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from marchdb.hosts import claude_code

HOST = "codex"
TITLE = "Codex CLI"
DOCS = "codex.md"
PROGRAM = {"npm": "@openai/codex", "version": "0.171.0", "bin": "node_modules/.bin/codex"}
EVENTS = claude_code.EVENTS


def home_dir():
    """Codex's folder: ``$CODEX_HOME``, else ``~/.codex``."""
    from pathlib import Path

    return Path(os.environ.get("CODEX_HOME") or "~/.codex").expanduser().absolute()


def installer():
    """``~/.codex/hooks.json`` (``$CODEX_HOME``), or the project's ``.codex/hooks.json``."""
    from pathlib import Path

    from marchdb.hosts.jsonhooks import JsonHooks

    return JsonHooks(
        HOST,
        tuple(EVENTS),
        lambda: home_dir() / "hooks.json",
        lambda project: project / ".codex" / "hooks.json",
        after=_after,
        user_base=lambda: home_dir() if os.environ.get("CODEX_HOME") else Path.home(),
    )


def _after(path, project) -> tuple[str, ...]:
    # Codex skips a new or changed hook, without a word, until the user trusts it;
    # a project's hooks are read only in a project Codex trusts.
    notes = [
        f"Codex runs new or changed hooks only once you trust them: start `codex`, type /hooks and trust the "
        f"marchdb hooks of {path} (until then Codex skips them without a word; `marchdb doctor` tells)"
    ]
    if project is not None and not project_trusted(str(project)):
        notes.append(
            f"Codex reads {path} only in a project it trusts, and it does not trust {project} yet: start `codex` "
            'there and trust the folder when it asks (or set trust_level = "trusted" for it in '
            f"{home_dir() / 'config.toml'})"
        )
    return tuple(notes)


def sample_prompt(session: str, text: str) -> str:
    """The event Codex sends for a prompt."""
    return claude_code.sample_prompt(session, text)


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one Codex hook event. After a compaction
    Codex keeps the context its session started with (the profiles) and
    starts the session again (``source`` ``compact``): the window starts
    afresh, and the profiles are not given twice."""
    args = claude_code.parse(raw, options, host=HOST, transcript=latest_assistant_text)
    if args is not None and args["event"] == "session_start" and args.get("source") == "compact":
        return {**args, "event": "compact"}
    return args


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


def project_trusted(folder: str) -> bool:
    """Whether Codex's ``config.toml`` trusts ``folder`` (it, or a folder
    holding it, with ``trust_level = "trusted"`` under ``[projects]``):
    Codex reads a project's ``.codex/hooks.json`` only then."""
    import tomllib

    try:
        with open(home_dir() / "config.toml", "rb") as fh:
            config = tomllib.load(fh)
    except (OSError, ValueError):
        return False
    projects = config.get("projects")
    if not isinstance(projects, dict):
        return False
    here = os.path.realpath(folder)
    for path, entry in projects.items():
        if not isinstance(entry, dict) or entry.get("trust_level") != "trusted":
            continue
        root = os.path.realpath(os.path.expanduser(str(path)))
        if here == root or here.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False


def doctor(rows: list[dict], cwd: str) -> list[dict]:
    """Codex skips hooks it has not been told to trust, and a project's
    hooks in a project it does not trust, without a word: its own list of
    hooks is asked (``trust_status``), and its ``config.toml``."""
    from marchdb.hosts import install

    mine = [r for r in rows if r["host"] == HOST]
    if not mine:
        return []
    problems = []
    for row in mine:
        folder = os.path.dirname(os.path.dirname(row["where"]))
        if row["where"] != str(home_dir() / "hooks.json") and not project_trusted(folder):
            problems.append(
                {
                    "path": row["where"],
                    "kind": "codex_project_untrusted",
                    "detail": f"Codex does not trust {folder}, so it never reads the hooks of {row['where']}",
                    "advice": "start `codex` in that folder and trust it when it asks",
                }
            )
    seen = trust_status(cwd, lambda command: install.command_is_ours(command, HOST))
    if seen is None:
        # Only Codex knows which hooks it trusts; silence here would read as "all is well".
        problems.append(
            {
                "path": mine[0]["where"],
                "kind": "codex_trust_unknown",
                "detail": "codex is not on PATH here (or did not answer), so doctor cannot tell whether Codex "
                "trusts marchdb's hooks; until it does, it skips them without a word",
                "advice": "start `codex`, type /hooks and trust marchdb's hooks if they are not",
            }
        )
    for hook in seen or []:
        if hook["status"] != "trusted":
            problems.append(
                {
                    "path": str(hook["key"]),
                    "kind": "codex_untrusted",
                    "detail": f"Codex sees marchdb's {hook['event']} hook as {hook['status']}: it skips it",
                    "advice": "start `codex`, type /hooks and trust marchdb's hooks",
                }
            )
    return problems


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
