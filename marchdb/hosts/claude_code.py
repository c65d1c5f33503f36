"""Claude Code's hooks (``marchdb hook claude-code``): its JSON in, its JSON out.

Events, as Claude Code's hooks reference specifies them (stdin JSON with
``hook_event_name``, ``session_id``, ``cwd``, ``transcript_path``):

* ``SessionStart`` → the profiles; with ``source`` ``clear`` or ``compact``
  the session's 10-run window also starts afresh (``hooks``);
* ``UserPromptSubmit`` → ``[recall]`` for ``prompt``, as a new agent run;
* ``PostToolUse`` → ``[recall]`` for the assistant's latest text of this
  turn (read from the transcript's tail), at most 2 hints none of which
  the run has had: seed 000's steer after an intermediate turn;
* ``PreCompact`` → the window starts afresh, nothing injected;
* ``Stop`` → the reply (``last_assistant_message``, else the transcript's)
  is recorded, nothing printed: Claude reads nothing from a Stop hook, and a
  ``"decision": "block"`` answer would make it go on.

Context goes out as ``hookSpecificOutput.additionalContext``. Codex CLI and
Qwen Code read and write the same JSON (``hosts.codex``, ``hosts.qwen``).
VS Code's agent runs these same hooks from ``~/.claude/settings.json``, with
its own spelling of the fields (``hookEventName``, ``sessionId``): such an
event is read and answered as VS Code takes it (``hosts.vscode``). Only the
standard library.
"""

from __future__ import annotations

import json
import os
import stat

from marchdb.hosts import BadEvent, adapter
from marchdb.text import mend_surrogates

TITLE = "Claude Code"
DOCS = "claude-code.md"
#: The real program the tests drive (``hosts.programs``).
PROGRAM = {"npm": "@anthropic-ai/claude-code", "version": "2.1.332", "bin": "node_modules/.bin/claude"}
#: Most memories a compaction says the context still holds.
MAX_KEPT = 200
#: Bytes read from the end of a transcript for the assistant's latest text.
TRANSCRIPT_TAIL_BYTES = 512 * 1024
#: Events that can take context, and the event each becomes.
EVENTS = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "prompt",
    "PostToolUse": "tool",
    "PreCompact": "compact",
    "Stop": "stop",
}
HOST = "claude-code"
#: The host whose events come in this host's hooks, in its own spelling (``hosts.vscode``).
VSCODE = "vscode"


def installer():
    """``~/.claude/settings.json`` (``$CLAUDE_CONFIG_DIR``), or the project's
    ``.claude/settings.local.json`` (kept out of git: the command holds a path of this machine)."""
    from pathlib import Path

    from marchdb.hosts.jsonhooks import JsonHooks

    return JsonHooks(
        HOST,
        tuple(EVENTS),
        lambda: config_dir() / "settings.json",
        lambda project: project / ".claude" / "settings.local.json",
        user_base=lambda: config_dir() if os.environ.get("CLAUDE_CONFIG_DIR") else Path.home(),
    )


def config_dir():
    """Claude Code's folder: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    from pathlib import Path

    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude").expanduser().absolute()


def sample_prompt(session: str, text: str) -> str:
    """The event Claude Code sends for a prompt."""
    return json.dumps({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": text, "cwd": "/tmp"})


def read_json(raw: str) -> dict:
    """The event object a host sent (``BadEvent`` saying what is wrong)."""
    if not raw.strip():
        raise BadEvent("the event is empty (nothing came on stdin); nothing injected")
    try:
        data = json.loads(raw.removeprefix("\ufeff"))  # a BOM some writers put first
    except ValueError as exc:
        raise BadEvent(f"the event is not JSON ({exc}); nothing injected") from None
    except RecursionError:
        raise BadEvent("the event is not JSON a host sends (nested too deeply); nothing injected") from None
    if not isinstance(data, dict):
        raise BadEvent("the event is not a JSON object; nothing injected")
    return data


def text_of(value: object) -> str | None:
    """A text field of the event, a lone surrogate (half an emoji a host cut)
    as U+FFFD so the rest of it is still recalled; None when it is no text."""
    return mend_surrogates(value) if isinstance(value, str) else None


#: Characters of a tool's input recalled on after the tool ran.
TOOL_TEXT_CHARS = 2000


def tool_asked(given: object) -> str:
    """What a tool was asked to do, for the steer after it: the texts of its
    input (``{"command": "deploy friday"}`` is "deploy friday"), at most
    ``TOOL_TEXT_CHARS``. Not the tool's name nor the input's keys: ``Shell``,
    ``runInTerminal``, ``command`` or ``file_path`` say nothing a memory is
    about, and counted as words of the message they made the words it is
    about a smaller share of it."""
    texts: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(given)
    return (mend_surrogates("\n".join(t.strip() for t in texts if t.strip())))[:TOOL_TEXT_CHARS]


def event_of(data: dict, events: dict[str, str], host: str, session: object = None) -> dict | None:
    """The ``memory_hook`` arguments every event has — which event
    (``events`` maps the host's names to marchdb's), the host, the session (the
    event's ``session_id`` unless ``session`` is given), the working folder —
    or None for an event that is not in ``events``."""
    name = data.get("hook_event_name")
    event = events.get(name) if isinstance(name, str) else None
    if event is None:
        return None
    args: dict = {
        "event": event,
        "host": host,
        "session": text_of(data.get("session_id") if session is None else session),
    }
    if isinstance(data.get("cwd"), str):
        args["cwd"] = data["cwd"]
    if event == "session_start":
        args["source"] = data.get("source") if isinstance(data.get("source"), str) else None
    return args


def parse(raw: str, options: list[str], host: str = HOST, transcript=None) -> dict | None:
    """The ``memory_hook`` event of one Claude Code hook event, or None for an
    event that takes nothing (``transcript(path, this_turn)``: how the host's
    transcript gives the assistant's latest text; Claude Code's by default)."""
    transcript = latest_assistant_text if transcript is None else transcript
    data = read_json(raw)
    if host == HOST and "hookEventName" in data and "hook_event_name" not in data:
        # VS Code's, handed to its adapter through the registry: VS Code's module builds on this
        # one (its installer and readers), so this one never imports it.
        return adapter(VSCODE).parse_data(data)
    args = event_of(data, EVENTS, host)
    if args is None:
        return None
    event = args["event"]
    if event == "prompt":
        args["text"] = text_of(data.get("prompt"))
    elif event == "tool":
        text = transcript(data.get("transcript_path"), True)
        if not text:
            return None  # a tool call with no text around it: nothing to recall on
        args["text"] = text
    elif event == "stop":
        reply = text_of(data.get("last_assistant_message"))
        args["text"] = reply if reply and reply.strip() else transcript(data.get("transcript_path"), False)
    elif event == "compact":
        keep = data.get("keep")
        if isinstance(keep, list) and keep:
            args["keep"] = [str(k) for k in keep if isinstance(k, str)][:MAX_KEPT]
    return args


def render(args: dict, data: dict, events: dict[str, str] = EVENTS) -> str:
    """The hook's stdout: ``hookSpecificOutput.additionalContext`` under the
    host's name of the event (``events``), or nothing (never at a run's end:
    a Stop hook's output would steer Claude; Codex marks it failed)."""
    if args.get("host") == VSCODE:
        return adapter(VSCODE).render(args, data)
    context = str(data.get("context") or "").strip()
    if not context or args["event"] in ("stop", "compact"):
        return ""
    name = {v: k for k, v in events.items()}[args["event"]]
    return json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": context}}, ensure_ascii=False)


def latest_assistant_text(transcript_path: object, this_turn: bool = False) -> str:
    """The text of the last assistant message in a Claude Code transcript
    (JSONL), read from its end: "" when there is none or it cannot be read.
    ``this_turn``: only what the assistant wrote since the user's last prompt
    (a tool's result is no prompt), so a tool event never recalls on the
    previous turn's answer."""
    return latest_text(tail_entries(transcript_path), _claude_turn, this_turn)


def latest_text(entries: list[dict], reader, this_turn: bool) -> str:
    """The newest assistant text of ``entries`` (newest first), ``reader(entry)``
    telling each entry's ``(role, text)``: ``("user", ...)`` for a prompt,
    ``("assistant", text)``, None for anything else (a tool result)."""
    for entry in entries:
        seen = reader(entry)
        if seen is None:
            continue
        role, text = seen
        if role == "user" and this_turn:
            return ""
        if role == "assistant" and text.strip():
            return text
    return ""


def _claude_turn(entry: dict) -> tuple[str, str] | None:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    kind = entry.get("type")
    if kind == "user":
        return None if _only_tool_results(content) else ("user", "")
    if kind != "assistant":
        return None
    return "assistant", _texts(content, "text")


def _texts(content: object, kind: str) -> str:
    """The text of a message's content: a string, or its blocks of ``kind``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == kind]
        return "\n".join(t for t in texts if isinstance(t, str) and t.strip())
    return ""


def _only_tool_results(content: object) -> bool:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def tail_entries(transcript_path: object) -> list[dict]:
    """The JSON objects of a transcript's last ``TRANSCRIPT_TAIL_BYTES``,
    newest first; [] when it cannot be read. A regular file only, never
    through a link: a FIFO named as the transcript would block the hook."""
    if not isinstance(transcript_path, str) or not transcript_path or "\x00" in transcript_path:
        return []
    try:
        path = os.path.expanduser(transcript_path)  # "~nosuchuser/x" stays as it is
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return []
            size = os.fstat(fd).st_size
            os.lseek(fd, max(0, size - TRANSCRIPT_TAIL_BYTES), os.SEEK_SET)
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError:
        return []
    out = []
    for line in reversed(b"".join(chunks).decode("utf-8", "replace").splitlines()):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the first, cut line of the tail; a line being written
        if isinstance(entry, dict):
            out.append(entry)
    return out
