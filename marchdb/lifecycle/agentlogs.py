"""Agent hosts that keep each session in a file: Codex CLI, Gemini CLI, Qwen Code, pi (JSONL), the Cline CLI (JSON).

None of these formats is documented as a contract; the readers follow what
the programs wrote when run here (``tests/hostchats.py`` runs them, and
``tests/data/chats/`` keeps what they wrote), and pass over records and
fields they do not know. Each file is read a line at a time
(``transcripts._lines``: a line over 16 MB is skipped and said, a
half-written last line is counted and the rest imported).

Codex CLI (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``): records
``{"timestamp", "type", "payload"}``. ``session_meta`` gives the id and the
working folder; ``response_item`` messages of role ``user`` and
``assistant`` are the conversation (the ``developer`` role is instructions
and hook context; user texts that are Codex's own context,
``<environment_context>`` and the like, are left out), ``function_call``
a tool line; results and ``reasoning`` are left out. A session of a
sub-agent (``source.subagent``) is a side chain, skipped.

Gemini CLI (``~/.gemini/tmp/<project>/chats/session-*.jsonl``, earlier
``session-*.json``): a header line ``{"sessionId", "startTime", "kind"}``,
message records upserted by ``id``, and ``{"$set": {...}}`` records that
set a field (``messages``: merged by ``id``, since a resumed session sets
a rebuilt history that lacks some prompts). ``user`` messages (their
``<session_context>`` message and ``<hook_context>`` parts left out) and
``gemini`` messages (``content`` and ``toolCalls``; ``thoughts`` left out)
are kept. The folder's ``.project_root`` names the working folder. A
session whose ``kind`` is not ``main`` is a side chain.

Qwen Code (``~/.qwen/projects/<folder>/chats/<session>.jsonl``; older
versions wrote Gemini's ``tmp/<hash>/chats/session-*.json``, read as
Gemini's): records ``{"type": "user"|"assistant"|"tool_result"|"system",
"message": {"parts": [...]}}``; user parts (the hook's
``<qwen:user-prompt-submit-context>`` part left out), assistant ``text``
parts (not ``thought`` ones) and ``functionCall`` parts are kept.

pi (``~/.pi/agent/sessions/--<folder>--/<time>_<id>.jsonl``): a ``session``
header with the id and working folder, then entries linked by
``parentId`` (a tree: a session can branch). The branch shown is followed
back from the last entry; ``message`` entries of role ``user`` and
``assistant`` are kept (``thinking`` blocks and ``toolResult`` messages
left out, ``toolCall`` as a tool line), ``custom_message`` entries
(extensions' context, marchdb's among them) are left out.

The Cline CLI (``$CLINE_DIR``, else ``~/.cline``: ``data/sessions/<id>/``):
``<id>.json`` holds the session (``session_id``, ``cwd``, ``started_at``,
``metadata.title``), ``<id>.messages.json`` its messages, one JSON object
(``messages``: ``role``, ``content`` blocks, ``ts`` in ms). A user message's
``text`` is what was typed inside ``<user_input>`` (``tool_result`` blocks
left out); an assistant's ``text`` is kept, ``tool_use`` as a tool line,
``thinking`` left out. The CLI stores neither the system prompt's rules nor
what a plugin's message builder adds (marchdb's hints).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from pathlib import Path

from marchdb.lifecycle.chats import Chat, walk
from marchdb.lifecycle.injected import injected_only
from marchdb.lifecycle.sources import OLDER, SHAPE_ERRORS, Bad, Found, Skip, too_large, unreadable
from marchdb.lifecycle.transcripts import _dict, _lines, _when
from marchdb.vault.files import open_regular

#: Longest ``.project_root`` read (one path).
MAX_ROOT_FILE = 8192
#: Largest chat file written as one JSON object (older Gemini CLI and Qwen
#: Code versions), read whole: it is decoded at once, so its bound is lower.
MAX_JSON_CHAT_BYTES = 64 * 1024 * 1024
#: User texts that are a host's own context, not something a person typed.
HOST_CONTEXT = (
    "<environment_context>",
    "<user_instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<permissions instructions>",
    "<skills_instructions>",
    "<INSTRUCTIONS>",
    "# AGENTS.md instructions",
    "<session_context>",
    "This is the Gemini CLI. We are setting up the context",
    "This is the Qwen Code. We are setting up the context",
)


class _Lines:
    """The JSON objects of a session file, and what could not be read (for the warnings)."""

    def __init__(self, path: Path):
        self.path = path
        self.bad = 0
        self.errors: list[str] = []

    def __iter__(self) -> Iterator[dict]:
        for _number, obj in _lines(self.path):
            if isinstance(obj, str):
                self.bad += 1  # the first and the last are said (a garbage file must not fill memory)
                if self.errors:
                    self.errors[1:] = [obj]
                else:
                    self.errors.append(obj)
                continue
            if isinstance(obj, dict):
                yield obj

    def warn(self, chat: Chat) -> None:
        if self.bad:
            more = f"; … {self.errors[-1]}" if len(self.errors) > 1 else ""
            chat.warnings.append(f"{self.bad} lines left out: {self.errors[0]}{more}")


def _read(reader, path: Path, origin: str | None) -> Found:
    """``reader(path, origin)``: a file too large, unreadable or of an
    unexpected shape is that session's problem, and the import goes on
    (``origin`` None: a file older than ``--since``, passed over unread)."""
    if origin is None:
        return Skip(path.name, OLDER)
    if (why := too_large(path)) is not None:
        return Bad(origin, why)
    try:
        return reader(path, origin)
    except OSError as exc:
        return Bad(origin, unreadable(exc))
    except SHAPE_ERRORS as exc:
        return Bad(origin, f"could not be read: {type(exc).__name__}: {exc}")


def _text_blocks(content: object, *kinds: str) -> str:
    """The text of a message's content: a string, or its blocks of ``kinds``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") in kinds]
    return "\n\n".join(t for t in texts if isinstance(t, str) and t.strip())


def _typed(text: str) -> str:
    """A user text, or "" when it is the host's own context or only injected context."""
    stripped = text.strip()
    if stripped.startswith(HOST_CONTEXT) or injected_only(stripped):
        return ""
    return stripped


def _what(arguments: object) -> str:
    """The gist of a tool call's arguments (a command, a path, a pattern)."""
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = json.loads(text)
        except (ValueError, RecursionError):
            return text
    data = _dict(arguments)
    for key in (
        "description",
        "command",
        "commands",
        "cmd",
        "file_path",
        "path",
        "absolute_path",
        "pattern",
        "query",
        "url",
    ):
        value = data.get(key)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _done(chat: Chat, lines: _Lines) -> Found:
    lines.warn(chat)
    if not chat.turns and lines.bad:
        return Bad(chat.origin, f"{lines.bad} lines, none of them a message: " + "; … ".join(lines.errors))
    return chat.item()


# ---------------------------------------------------------------- Codex CLI


def codex_session(path: Path, origin: str) -> Found:
    """One Codex CLI rollout file."""
    chat = Chat("codex", path.stem.removeprefix("rollout-"), origin)
    lines = _Lines(path)
    for obj in lines:
        when = _when(obj.get("timestamp"))
        kind, payload = obj.get("type"), _dict(obj.get("payload"))
        if kind == "session_meta":
            if isinstance(payload.get("id"), str):
                chat.session_id = payload["id"]
            chat.cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else chat.cwd
            branch = _dict(payload.get("git")).get("branch")
            chat.branch = branch if isinstance(branch, str) else chat.branch
            source = payload.get("source")
            if isinstance(source, dict) and "subagent" in source or payload.get("thread_source") == "subagent":
                return _side_chain(origin)
            chat.saw(_when(payload.get("timestamp")))
        elif kind == "response_item":
            item = payload.get("type")
            if item == "message" and payload.get("role") == "user":
                text = _typed(_text_blocks(payload.get("content"), "input_text", "text"))
                if text:
                    chat.user(text, when)
            elif item == "message" and payload.get("role") == "assistant":
                chat.assistant(_text_blocks(payload.get("content"), "output_text", "text"), when)
            elif item in ("function_call", "custom_tool_call", "local_shell_call"):
                chat.tool(payload.get("name") or item, _what(payload.get("arguments") or payload.get("input")), when)
    return _done(chat, lines)


def _side_chain(origin: str) -> Found:
    return Skip(origin, "a sub-agent's session (a side chain of another session)")


def read_codex(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every rollout file under ``path`` (``sessions/`` and ``archived_sessions/`` alike)."""
    for full, origin in walk(path, lambda n: n.startswith("rollout-") and n.endswith(".jsonl"), since):
        yield _read(codex_session, full, origin)


# ---------------------------------------------------------------- Gemini CLI, Qwen Code


def _project_root(chats_folder: Path) -> str | None:
    """The working folder a Gemini CLI project folder names in ``.project_root``."""
    try:
        with open_regular(chats_folder.parent / ".project_root") as fh:
            text = fh.read(MAX_ROOT_FILE).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.startswith("/") and "\n" not in text else None


def _json_file(path: Path) -> dict:
    """A session file written as one JSON object, read whole up to ``MAX_JSON_CHAT_BYTES``."""
    with open_regular(path) as fh:
        data = fh.read(MAX_JSON_CHAT_BYTES + 1)
    if len(data) > MAX_JSON_CHAT_BYTES:
        raise ValueError(f"a chat file in one JSON object is read up to {MAX_JSON_CHAT_BYTES:,} bytes")
    return _dict(json.loads(data.decode("utf-8")))


def _gemini_messages(path: Path, lines: _Lines) -> tuple[dict, list[dict]]:
    """The header fields and the messages of a Gemini CLI chat file (JSONL or JSON)."""
    if path.suffix == ".json":
        whole = _json_file(path)
        messages = whole.get("messages")
        return whole, [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    header: dict = {}
    by_id: dict[object, dict] = {}
    order: list[object] = []
    for obj in lines:
        if isinstance(obj.get("$set"), dict):
            for key, value in obj["$set"].items():
                if key == "messages" and isinstance(value, list):
                    # Merged, never replaced: a resumed session sets its history
                    # again, rebuilt for the model, and without the prompts that
                    # carried hook context (Gemini CLI 0.61); they are kept.
                    for m in value:
                        if isinstance(m, dict):
                            key_ = m.get("id", json.dumps(m, sort_keys=True))
                            if key_ not in by_id:
                                order.append(key_)
                            by_id[key_] = m
                else:
                    header[key] = value
        elif "sessionId" in obj and "type" not in obj:
            for key, value in obj.items():
                header.setdefault(key, value)  # a resumed session writes its header again: the first holds
        elif isinstance(obj.get("type"), str):
            key_ = obj.get("id", f"#{len(order)}")
            if key_ not in by_id:
                order.append(key_)
            by_id[key_] = obj
    return header, [by_id[k] for k in order if k in by_id]


def gemini_session(path: Path, origin: str, host: str = "gemini") -> Found:
    """One Gemini CLI chat file (or an older Qwen Code one, ``host`` ``qwen``)."""
    lines = _Lines(path)
    header, messages = _gemini_messages(path, lines)
    session = header.get("sessionId")
    chat = Chat(host, session if isinstance(session, str) and session else path.stem, origin)
    if header.get("kind") not in (None, "main"):
        return _side_chain(origin)
    chat.cwd = _project_root(path.parent)
    chat.saw(_when(header.get("startTime")))
    chat.saw(_when(header.get("lastUpdated")))
    for message in messages:
        when = _when(message.get("timestamp"))
        kind, content = message.get("type"), message.get("content")
        if kind == "user":
            parts = content if isinstance(content, list) else [{"text": content}]
            texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
            text = _typed("\n\n".join(_typed(t) for t in texts if _typed(t)))
            if text:
                chat.user(text, when)
        elif kind in ("gemini", "model", "assistant"):
            if isinstance(content, list):
                content = "\n\n".join(
                    p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
                )
            chat.assistant(content if isinstance(content, str) else "", when)
            for call in message.get("toolCalls") or []:
                if isinstance(call, dict):
                    chat.tool(call.get("displayName") or call.get("name"), _what(call.get("args")), when)
    return _done(chat, lines)


def read_gemini(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every chat file under ``path`` (``<project>/chats/session-*.json[l]``)."""
    for full, origin in walk(path, _chat_file, since):
        yield _read(gemini_session, full, origin)


def _chat_file(name: str) -> bool:
    return name.startswith("session-") and name.endswith((".json", ".jsonl"))


def qwen_session(path: Path, origin: str) -> Found:
    """One Qwen Code chat file (``projects/<folder>/chats/<session>.jsonl``)."""
    if path.suffix == ".json":
        return gemini_session(path, origin, "qwen")
    chat = Chat("qwen", path.stem, origin)
    lines = _Lines(path)
    for obj in lines:
        when = _when(obj.get("timestamp"))
        chat.saw(when)
        if isinstance(obj.get("sessionId"), str):
            chat.session_id = obj["sessionId"]
        if isinstance(obj.get("cwd"), str):
            chat.cwd = chat.cwd or obj["cwd"]
        if obj.get("isSidechain"):
            continue
        kind = obj.get("type")
        parts = _dict(obj.get("message")).get("parts")
        parts = [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
        if kind == "user" and obj.get("provenance", "real_user") == "real_user":
            texts = [_typed(p["text"]) for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
            text = "\n\n".join(t for t in texts if t)
            if text:
                chat.user(text, when)
        elif kind == "assistant":
            text = "\n\n".join(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))
            chat.assistant(text, when, same_message=False)
            for part in parts:
                call = _dict(part.get("functionCall"))
                if call:
                    chat.tool(call.get("name"), _what(call.get("args")), when)
    return _done(chat, lines)


def read_qwen(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every chat file under ``path`` (``projects/*/chats/*.jsonl``, older ``tmp/*/chats/session-*.json``)."""

    def wanted(name: str) -> bool:
        return name.endswith(".jsonl") or _chat_file(name)

    for full, origin in walk(path, wanted, since):
        if full.parent.name != "chats" and full != path:
            continue  # Qwen's other JSONL files (usage records, logs) are no chats
        yield _read(qwen_session, full, origin)


# ---------------------------------------------------------------- pi


def pi_session(path: Path, origin: str) -> Found:
    """One pi session file: the branch shown, followed back from its last entry."""
    chat = Chat("pi", path.stem.rsplit("_", 1)[-1], origin)
    lines = _Lines(path)
    pi_entries(chat, lines)
    return _done(chat, lines)


def pi_entries(chat: Chat, entries) -> None:
    """The entries of a pi session (a tree linked by ``parentId``) into
    ``chat``: the branch shown, followed back from the last entry. OpenClaw
    keeps its transcripts in the same entries (``agentdbs``)."""
    parent: dict[str, object] = {}
    kept: dict[str, tuple[str, dt.datetime | None, object]] = {}  # entry id -> (role, when, content)
    last = None
    for obj in entries:
        kind = obj.get("type")
        if kind == "session":
            chat.session_id = obj["id"] if isinstance(obj.get("id"), str) else chat.session_id
            chat.cwd = obj.get("cwd") if isinstance(obj.get("cwd"), str) else None
            chat.saw(_when(obj.get("timestamp")))
            continue
        if kind == "session_info" and isinstance(obj.get("name"), str):
            chat.title = obj["name"]
        entry = obj.get("id")
        if not isinstance(entry, str):
            continue
        parent[entry] = obj.get("parentId")
        last = entry
        message = _dict(obj.get("message"))
        if kind == "message" and message.get("role") in ("user", "assistant"):
            kept[entry] = (message["role"], _when(obj.get("timestamp")), message.get("content"))
    branch: list[str] = []
    seen: set[str] = set()
    while isinstance(last, str) and last in parent and last not in seen:
        seen.add(last)
        branch.append(last)
        last = parent[last]  # type: ignore[assignment]
    for entry in reversed(branch):
        if entry not in kept:
            continue
        role, when, content = kept[entry]
        if role == "user":
            text = _typed(_text_blocks(content, "text"))
            if text:
                chat.user(text, when)
            continue
        chat.assistant(_text_blocks(content, "text"), when)
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                chat.tool(block.get("name"), _what(block.get("arguments")), when)


def read_pi(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session file under ``path`` (``sessions/--<folder>--/*.jsonl``)."""
    for full, origin in walk(path, lambda n: n.endswith(".jsonl"), since):
        yield _read(pi_session, full, origin)


# ---------------------------------------------------------------- the Cline CLI

#: What the Cline CLI wraps around what was typed.
_USER_INPUT = re.compile(r"<user_input\b[^>]*>(.*?)</user_input>", re.S)


def cline_session(path: Path, origin: str) -> Found:
    """One Cline CLI session: ``<id>.messages.json`` and, beside it, ``<id>.json``."""
    session = path.name.removesuffix(".messages.json")
    chat = Chat("cline", session, origin)
    meta_path = path.with_name(f"{session}.json")
    meta = _json_file(meta_path) if meta_path.is_file() and not meta_path.is_symlink() else {}
    if isinstance(meta.get("cwd"), str):
        chat.cwd = meta["cwd"]
    title = _dict(meta.get("metadata")).get("title")
    chat.title = title if isinstance(title, str) and title.strip() else None
    chat.saw(_when(meta.get("started_at")))
    chat.saw(_when(meta.get("ended_at")))
    messages = _json_file(path).get("messages")
    for message in messages if isinstance(messages, list) else []:
        message = _dict(message)
        ts = message.get("ts")  # milliseconds
        when = _when(ts / 1000) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None
        content = message.get("content")
        if message.get("role") == "user":
            typed = [m.group(1) for m in _USER_INPUT.finditer(_text_blocks(content, "text"))]
            text = _typed("\n\n".join(typed))
            if text:
                chat.user(text, when)
        elif message.get("role") == "assistant":
            chat.assistant(_text_blocks(content, "text"), when)
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    chat.tool(block.get("name"), _what(block.get("input")), when)
    return chat.item()


def read_cline(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session under ``path`` (``data/sessions/<id>/<id>.messages.json``)."""
    for full, origin in walk(path, lambda n: n.endswith(".messages.json"), since):
        yield _read(cline_session, full, origin)
