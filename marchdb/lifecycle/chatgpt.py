"""ChatGPT's exports as memories (``marchdb import chatgpt``): one memory per conversation.

ChatGPT (``conversations.json``, a JSON array, sometimes wrapped as
``{"conversations": [...]}``, or split into ``conversations-000.json``…):
each conversation's ``mapping`` is a tree; the displayed thread is found by
walking from ``current_node`` back through ``parent`` (never
``children[0]``, which would mix in abandoned branches). Kept: user and
assistant ``text`` / ``multimodal_text`` messages with text; left out:
hidden, system and tool messages, and assistant messages to tools. The file
is decoded one conversation at a time, so a file cut short still yields
every conversation before the cut.

The body, description and name are made as for every chat (``transcripts``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from marchdb.lifecycle import jsonstream
from marchdb.lifecycle.jsonstream import Problem
from marchdb.lifecycle.sources import (
    Bad,
    Found,
    Item,
    Skip,
    first_text,
    one_line,
    unreadable,
)
from marchdb.lifecycle.transcripts import (
    HEADER_FIELD_CHARS,
    _dict,
    _guarded,
    _too_short,
    _when,
    described,
    render,
)
from marchdb.vault.changes import MAX_NAME_CHARS
from marchdb.vault.files import open_regular

#: Largest export file read (it is decoded one conversation at a time).
MAX_JSON_BYTES = 1024 * 1024 * 1024
#: Messages in one ChatGPT thread followed back from its current node.
MAX_THREAD = 100_000
_SPLIT_EXPORT = re.compile(r"^conversations-\d+\.json$")


def _chatgpt_text(message: dict) -> str:
    content = _dict(message.get("content"))
    if content.get("content_type") not in ("text", "multimodal_text"):
        return ""
    pieces = []
    parts = content.get("parts") or []
    if isinstance(parts, str):  # one string, not a list of them: not one piece per character
        parts = [parts]
    elif not isinstance(parts, list):
        parts = []
    for part in parts:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict):
            if isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif "image" in str(part.get("content_type", "")):
                pieces.append("[image]")
    return "\n".join(pieces).strip()


def _visible(message: object) -> str | None:
    """The role of a message worth keeping (``user`` / ``assistant``), or None."""
    if not isinstance(message, dict):
        return None
    author = _dict(message.get("author"))
    role = author.get("role")
    meta = _dict(message.get("metadata"))
    if meta.get("is_visually_hidden_from_conversation") or role not in ("user", "assistant"):
        return None
    if role == "assistant" and message.get("recipient", "all") != "all":
        return None  # a call to a tool, not an answer
    return role


def thread(conv: dict) -> tuple[list[dict], list[str]]:
    """The displayed thread of a conversation (oldest first) and warnings."""
    mapping = conv.get("mapping")
    if not isinstance(mapping, dict):
        return [], []
    node_id = conv.get("current_node")
    if not isinstance(node_id, str) or node_id not in mapping:
        leaves = [n for n in mapping.values() if isinstance(n, dict) and not n.get("children")]

        def born(node: dict) -> float:
            msg = node.get("message")
            t = msg.get("create_time") if isinstance(msg, dict) else None
            return float(t) if isinstance(t, (int, float)) else 0.0

        node_id = max(leaves, key=born).get("id") if leaves else None
    chain: list[dict] = []
    seen: set = set()
    warnings: list[str] = []
    while isinstance(node_id, str) and node_id in mapping:
        if node_id in seen:
            warnings.append("the message tree loops back on itself; the thread was cut there")
            break
        if len(chain) >= MAX_THREAD:
            warnings.append(f"the thread is longer than {MAX_THREAD:,} messages; its latest {MAX_THREAD:,} are read")
            break
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            break
        chain.append(node)
        node_id = node.get("parent")
    return [n["message"] for n in reversed(chain) if isinstance(n.get("message"), dict)], warnings


def conversation_item(conv: object, origin: str) -> Found:
    """One conversation of an export as an ``Item`` (or ``Skip`` / ``Bad``)."""
    if not isinstance(conv, dict):
        return Bad(origin, "not a conversation object")
    conv_id = conv.get("conversation_id") or conv.get("id")
    if not isinstance(conv_id, str) or not conv_id.strip():
        return Bad(origin, "the conversation has no id")
    origin = f"{origin} ({conv_id})"
    if not isinstance(conv.get("mapping"), dict):
        return Bad(origin, "the conversation has no message mapping")
    messages, warnings = thread(conv)
    turns: list[tuple[str, dt.datetime | None, str]] = []
    prompts: list[str] = []
    for message in messages:
        role = _visible(message)
        text = _chatgpt_text(message) if role else ""
        if not text:
            continue
        turns.append(("User" if role == "user" else "Assistant", _when(message.get("create_time")), text))
        if role == "user":
            prompts.append(text)
    if not prompts:
        return Skip(origin, "no message typed by a person in it")
    if (short := _too_short(turns)) is not None:
        return Skip(origin, short)
    created = _when(conv.get("create_time")) or next((t for _r, t, _x in turns if t), None)
    if created is None:
        return Bad(origin, "the conversation has no time (create_time)")
    updated = _when(conv.get("update_time"))
    title = conv["title"] if first_text(conv.get("title"), limit=HEADER_FIELD_CHARS) else None
    header = f"ChatGPT conversation “{one_line(title or 'untitled', HEADER_FIELD_CHARS)}”, {created:%Y-%m-%d %H:%M} UTC, id `{one_line(conv_id, HEADER_FIELD_CHARS)}`."
    body, cut = render(turns, header, origin)
    return Item(
        source=f"chatgpt:{conv_id}",
        origin=origin,
        name=first_text(title, prompts[0], limit=min(MAX_NAME_CHARS, 100)),
        description=described(prompts),
        body=body,
        tags=["chatgpt"],
        created=created,
        updated=updated if updated and updated > created else None,
        warnings=warnings + cut,
    )


def conversations(path: Path) -> Iterator[tuple[int, object]]:
    """``(number, conversation or a jsonstream.Problem)`` of one export file,
    decoded one conversation at a time: the file is read in pieces, so a
    large export holds one conversation in memory, not the whole file
    (decoded, a 243 MB export with emoji took 1 GB)."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_JSON_BYTES:
            why = f"{size:,} bytes; the limit is {MAX_JSON_BYTES:,} (ChatGPT splits large exports into conversations-000.json …)"
            yield 0, Problem(why)
            return
        if fh.read(4) == b"PK\x03\x04":  # ChatGPT sends its export as a ZIP archive
            yield (
                0,
                Problem(
                    "a ZIP archive, not a JSON file: unzip the export, then import its folder (or conversations.json)"
                ),
            )
            return
        fh.seek(0)
        stream = jsonstream.TextStream(fh)
        try:
            first = stream.peek_non_space()
            if first == "{":
                yield from _wrapped_export(stream)
                return
            if first != "[":
                yield 0, Problem("not a JSON array of conversations: not a ChatGPT export")
                return
            stream.pos += 1
            yield from jsonstream.array_items(stream, "conversation")
        except jsonstream.NotUtf8 as exc:
            yield 0, Problem(f"not UTF-8 at byte {exc.offset}")


def _wrapped_export(stream: jsonstream.TextStream) -> Iterator[tuple[int, object]]:
    """``{"conversations": [...]}``: a rare form, read whole."""
    try:
        wrapped = json.loads(stream.rest())
    except (ValueError, RecursionError) as exc:
        yield 0, Problem(f"not valid JSON: {exc}")
        return
    items = wrapped.get("conversations") if isinstance(wrapped, dict) else None
    if not isinstance(items, list):
        yield 0, Problem('a JSON object without a "conversations" list: not a ChatGPT export')
        return
    yield from enumerate(items, start=1)


def export_files(path: Path) -> list[Path]:
    """The export files of ``path``: the file itself, or a folder's
    ``conversations.json`` and split ``conversations-NNN.json`` files."""
    if not path.is_dir():
        return [path]
    # Links and other non-files are listed too: reading them says why they are left out.
    files = sorted(p for p in path.iterdir() if _SPLIT_EXPORT.match(p.name))
    single = path / "conversations.json"
    return ([single] if os.path.lexists(single) else []) + files


def read_chatgpt(path: Path) -> Iterator[Found]:
    """Every conversation of a ChatGPT export."""
    files = export_files(path)
    if not files:
        yield Bad(str(path), "no conversations.json (nor conversations-000.json …) in this folder")
        return
    for file in files:
        try:
            for number, conv in conversations(file):
                origin = f"{file.name}#{number}"
                if isinstance(conv, Problem):
                    yield Bad(origin if number else file.name, str(conv))
                else:
                    yield _guarded(conversation_item, conv, origin)
        except OSError as exc:
            yield Bad(file.name, unreadable(exc))
