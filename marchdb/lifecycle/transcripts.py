"""Chat transcripts as memories (``marchdb import claude-code``, and what every chat importer shares): one memory per session.

The body is the conversation as readable Markdown (``**User** · 14:05`` then
the text, turn by turn); the description is what the user asked for (their
messages, joined, cut to one hint line); the name is the session's title, or
its first request. The format, as the real files have it (not documented
by its vendor; see the notes in ``tests/test_transcripts.py``); ChatGPT's
exports are read by ``chatgpt``, with the rendering and rules here:

Claude Code (``~/.claude/projects/<encoded-cwd>/<session-id>.jsonl``): one
JSON object a line. Kept: ``user`` lines (``message.content`` a string, or
``text`` blocks) and ``assistant`` lines (``text`` blocks; ``tool_use``
blocks as one short line; several lines of one answer share
``message.id``). Left out: ``attachment`` lines (hook output such as
marchdb's own recall hints), ``tool_result`` and ``thinking`` blocks,
``isMeta`` / ``isSidechain`` / ``isCompactSummary`` lines, command and
system-reminder texts, and the ``subagents/`` folders (side chains).
A line that is not JSON (a half-written last line) is counted and reported;
the rest of the session is imported.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from marchdb import fts
from marchdb.clock import in_calendar, parse_time
from marchdb.lifecycle.injected import injected_only, without_injected
from marchdb.lifecycle.sources import (
    DESCRIPTION_CHARS,
    MAX_BODY_CHARS,
    OLDER,
    SHAPE_ERRORS,
    Bad,
    Found,
    Item,
    Skip,
    clean_tags,
    first_text,
    one_line,
    too_large,
    unreadable,
    written_before,
)
from marchdb.vault.changes import MAX_NAME_CHARS
from marchdb.vault.files import open_regular

#: A session or conversation in which the person typed fewer than
#: MIN_USER_CHARS characters and which holds fewer than MIN_CONVERSATION_CHARS
#: in all is skipped (a Chinese or Japanese character counts as 3: a word,
#: not a letter): a greeting and its answer ("hey" / "Hello! How can I help
#: you today? ...") is nothing to remember, and a memory that vague looks like
#: every vague message (tools/bench_small.py found one hinted for "can you
#: help me with this" in a vault of 10,000). A short request with a long
#: answer or a long session ("fix the bug") is kept.
MIN_USER_CHARS = 20
MIN_CONVERSATION_CHARS = 400
#: Longest line read from a session file; a longer one is skipped and reported.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: User text that is not something a person typed (commands, reminders, hook output, resumes).
NOISE_PREFIXES = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-",
    "<system-reminder>",
    "<task-notification>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<user-prompt-submit-hook>",
    "Caveat: The messages below were generated",
    "[Request interrupted",
    "This session is being continued",
)


def _guarded(read, source, origin: str) -> Found:
    """``read(source, origin)``, with a shape the reader did not expect
    reported for this item instead of ending the import."""
    try:
        return read(source, origin)
    except SHAPE_ERRORS as exc:
        return Bad(origin, f"could not be read: {type(exc).__name__}: {exc}")


def _dict(value: object) -> dict:
    """``value`` when it is a JSON object, else an empty one (fields of real files may be anything)."""
    return value if isinstance(value, dict) else {}


def _when(value: object) -> dt.datetime | None:
    """An ISO-8601 timestamp or epoch seconds as an aware datetime (None if neither)."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return in_calendar(dt.datetime.fromtimestamp(float(value), dt.UTC))
    except (ValueError, OverflowError, OSError):
        return None
    return parse_time(value) if isinstance(value, str) else None


#: A message that does not fit whole is kept cut when at least this much of it fits.
CUT_MESSAGE_MIN_CHARS = 500
#: Longest title, folder or branch name written into a conversation's first line.
HEADER_FIELD_CHARS = 200


def render(turns: list[tuple[str, dt.datetime | None, str]], header: str, origin: str) -> tuple[str, list[str]]:
    """The conversation as Markdown, cut at ``MAX_BODY_CHARS`` (a warning says so)."""
    parts = [header]
    size = len(header)
    warnings: list[str] = []
    for n, (role, when, text) in enumerate(turns):
        label = f"**{role}**" + (f" · {when:%H:%M}" if when else "")
        piece = f"{label}\n\n{text.strip()}"
        if size + len(piece) > MAX_BODY_CHARS:
            # The message that does not fit is cut, not dropped: one huge paste
            # left a memory of the header alone (and a second import skips it).
            room = MAX_BODY_CHARS - size - len(label) - 400
            if room >= CUT_MESSAGE_MIN_CHARS:
                parts.append(f"{label}\n\n{text.strip()[:room].rstrip()} …*(cut)*")
                n += 1
            left = len(turns) - n
            if left:
                parts.append(
                    f"*({left} more messages not imported: the memory is cut at {MAX_BODY_CHARS:,} characters; "
                    f"the whole conversation is in {origin})*"
                )
            warnings.append(f"cut at {MAX_BODY_CHARS:,} characters, in message {min(n, len(turns))} of {len(turns)}")
            break
        parts.append(piece)
        size += len(piece) + 2
    return "\n\n".join(parts) + "\n", warnings


def _size(text: str) -> int:
    text = text.strip()
    return len(text) + 2 * len(fts.cjk_chars(text))


def _too_short(turns: list[tuple[str, dt.datetime | None, str]]) -> str | None:
    """Why a conversation holds nothing to remember (None when it holds something)."""
    typed = sum(_size(text) for role, _when, text in turns if role == "User")
    chars = sum(_size(text) for _role, _when, text in turns)
    if typed >= MIN_USER_CHARS or chars >= MIN_CONVERSATION_CHARS:
        return None
    return (
        f"too short to keep: {typed} characters typed (under {MIN_USER_CHARS}), "
        f"{chars} in all (under {MIN_CONVERSATION_CHARS})"
    )


_TURN_LABEL = re.compile(r"^\*\*(User|Assistant)\*\*(?: · \d{1,2}:\d\d)?$")


def hollow(body: str) -> str | None:
    """Why an imported conversation's body (as ``render`` wrote it) holds
    nothing to remember, by the rule an import applies now (None when it
    holds something): imports made before that rule kept "hey" / "How can I
    help you today?" sessions, which look like every vague message."""
    turns: list[tuple[str, dt.datetime | None, str]] = []
    for line in body.splitlines():
        label = _TURN_LABEL.match(line.strip())
        if label:
            turns.append((label.group(1), None, ""))
        elif turns:
            role, when, text = turns[-1]
            turns[-1] = (role, when, text + line + "\n")
    return _too_short(turns) if turns else None


def asked(prompts: list[str]) -> str:
    """What the user asked for: their messages, joined, on one hint line."""
    return one_line(" / ".join(one_line(p, DESCRIPTION_CHARS) for p in prompts[:8]), DESCRIPTION_CHARS)


#: A sentence in which the person settles something ("I think I'll go with
#: the Liquid Air case", "let's use Postgres", "I booked the 9:40 train").
_DECIDED = re.compile(
    r"\b(?:I(?:'|’)?ll (?:go|take|use|try|stick|start|get|order|book|buy|keep|make|do)\b|I will (?:go|use|take)\b"
    r"|I(?:'|’)?m going (?:with|to go|to use|to try|to buy|to order|to book)\b|I(?:'|’)?ve decided|I decided"
    r"|I chose|I(?:'|’)?ve chosen|I picked|I settled|settled on|going with|let(?:'|’)?s (?:go with|use|do|keep|stick)\b"
    r"|we(?:'|’)?ll (?:go with|use)\b|we decided|I booked|I ordered|I bought|leaning towards?)",
    re.I,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
#: Decisions a description names at most (the last ones: a later one revises an earlier).
DECISIONS = 3


def described(prompts: list[str]) -> str:
    """An imported conversation's description: what the person settled in
    it (``_DECIDED``: their sentences that choose, book, buy or decide,
    after their first message; the last ``DECISIONS``), then what they
    asked; what they asked alone when they settled nothing.

    A hint shows a description's start, and recall reads it in the
    memory's metadata: "remind me which case I went with" is answered by
    "I think I'll go with the Liquid Air case", not by the first request
    ("I need a phone case"), which the name already says."""
    decided = [
        one_line(m.group().strip(), 120)
        for prompt in prompts[1:]
        for m in _SENTENCE.finditer(prompt)
        if _DECIDED.search(m.group())
    ]
    if not decided:
        return asked(prompts)
    return one_line(" / ".join([*list(dict.fromkeys(decided))[-DECISIONS:], *prompts[:1]]), DESCRIPTION_CHARS)


# ---------------------------------------------------------------- Claude Code


def _user_text(content: object) -> str:
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                pieces.append(block["text"])
            elif block.get("type") == "image":
                pieces.append("[image]")
        text = "\n\n".join(pieces)
    else:
        return ""
    # Hook output kept in the message's own text (an older build's wrapper,
    # marchdb's blocks bare) is cut out as every host's reader does.
    text = without_injected(text, open_wrapper=False)
    return "" if text.startswith(NOISE_PREFIXES) or injected_only(text, open_wrapper=False) else text


def _tool_line(block: dict) -> str:
    data = _dict(block.get("input"))
    what = next(
        (
            data[k]
            for k in ("description", "command", "file_path", "pattern", "url", "prompt")
            if isinstance(data.get(k), str)
        ),
        "",
    )
    name = block.get("name") if isinstance(block.get("name"), str) else "tool"
    return f"*[{name}] {one_line(what, 160)}*" if what else f"*[{name}]*"


def _assistant_text(content: object) -> str:
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    pieces = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"].strip():
            pieces.append(block["text"].strip())
        elif block.get("type") == "tool_use":
            pieces.append(_tool_line(block))
    return "\n\n".join(pieces)


def _lines(path: Path) -> Iterator[tuple[int, object]]:
    """``(line number, parsed object or an error text)`` of a JSONL file, streamed."""
    with open_regular(path) as fh:
        number = 0
        while True:
            line = fh.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while True:  # skip the rest of the overlong line
                    more = fh.readline(1 << 20)
                    if not more or more.endswith(b"\n"):
                        break
                yield number, f"line {number} is longer than {MAX_LINE_BYTES:,} bytes; skipped"
                continue
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except (ValueError, UnicodeDecodeError, RecursionError):
                cut = "" if line.endswith(b"\n") else " (the last line, cut short: a session still being written?)"
                yield number, f"line {number} is not JSON{cut}"


def read_session(path: Path, origin: str) -> Found:
    """One Claude Code session file as an ``Item`` (or ``Skip`` / ``Bad``)."""
    session_id = path.stem
    title = ai_title = cwd = branch = None
    summaries: list[tuple[str, object]] = []  # (summary, leafUuid)
    uuids: set[str] = set()  # of every record: a summary names its conversation by one
    turns: list[tuple[str, dt.datetime | None, str]] = []
    prompts: list[str] = []
    seen: set[str] = set()
    last_msg_id = None
    first = last = None
    errors: list[str] = []  # the first and the last (a garbage file must not fill memory)
    bad_lines = 0
    try:
        for _number, obj in _lines(path):
            if isinstance(obj, str):
                bad_lines += 1
                if errors:
                    errors[1:] = [obj]
                else:
                    errors.append(obj)
                continue
            if not isinstance(obj, dict):
                continue
            kind = obj.get("type")
            if isinstance(obj.get("uuid"), str):
                uuids.add(obj["uuid"])
            if kind == "custom-title" and isinstance(obj.get("customTitle"), str):
                title = obj["customTitle"]
            elif kind == "ai-title" and isinstance(obj.get("aiTitle"), str) and obj["aiTitle"].strip():
                ai_title = obj["aiTitle"]  # written again as the session goes on: the last is the latest
            elif kind == "summary" and isinstance(obj.get("summary"), str):
                summaries.append((obj["summary"], obj.get("leafUuid")))
            if (
                kind not in ("user", "assistant")
                or obj.get("isSidechain")
                or obj.get("isMeta")
                or obj.get("isCompactSummary")
            ):
                continue
            uuid = obj.get("uuid")
            if isinstance(uuid, str):
                if uuid in seen:
                    continue
                seen.add(uuid)
            if isinstance(obj.get("sessionId"), str):
                session_id = obj["sessionId"]
            cwd = cwd or (obj.get("cwd") if isinstance(obj.get("cwd"), str) else None)
            branch = branch or (obj.get("gitBranch") if obj.get("gitBranch") not in (None, "", "HEAD") else None)
            when = _when(obj.get("timestamp"))
            if when is not None:  # lines are not always in time order
                first, last = min(first or when, when), max(last or when, when)
            message = _dict(obj.get("message"))
            if kind == "user":
                text = _user_text(message.get("content"))
                if text:
                    turns.append(("User", when, text))
                    prompts.append(text)
                last_msg_id = None
            else:
                text = _assistant_text(message.get("content"))
                if not text:
                    continue
                msg_id = message.get("id")
                if msg_id is not None and msg_id == last_msg_id and turns and turns[-1][0] == "Assistant":
                    # One answer written as several lines (one content block each).
                    turns[-1] = ("Assistant", turns[-1][1], turns[-1][2] + "\n\n" + text)
                else:
                    turns.append(("Assistant", when, text))
                last_msg_id = msg_id
    except OSError as exc:
        return Bad(origin, unreadable(exc))
    warnings = (
        [f"{bad_lines} lines left out: {errors[0]}" + (f"; … {errors[-1]}" if len(errors) > 1 else "")]
        if errors
        else []
    )
    if not prompts:
        if errors and not turns:
            return Bad(origin, f"{bad_lines} lines, none of them a message: " + "; … ".join(errors))
        return Skip(origin, "no message typed by a person in it")
    if (short := _too_short(turns)) is not None:
        return Skip(origin, short)
    if first is None:
        first = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    where = (
        f" in `{one_line(cwd, HEADER_FIELD_CHARS)}`"
        + (f" (branch `{one_line(branch, HEADER_FIELD_CHARS)}`)" if branch else "")
        if cwd
        else ""
    )
    span = f"{first:%Y-%m-%d %H:%M}" + (
        f"–{last:%H:%M}" if last and last.date() == first.date() and last != first else ""
    )
    header = f"Claude Code session{where}, {span} UTC, session `{session_id}`."
    body, cut = render(turns, header, origin)
    tags = ["claude-code"] + ([f"project/{_project(cwd)}"] if cwd else [])
    # Claude Code writes summaries of *other* sessions into a file too: only a
    # summary whose leafUuid is a message of this file describes it.
    summary = next((text for text, leaf in summaries if leaf is None or leaf in uuids), None)
    return Item(
        source=f"claude-code:{session_id}",
        origin=origin,
        name=first_text(title, ai_title, summary, prompts[0], limit=min(MAX_NAME_CHARS, 100)),
        description=described(prompts),
        body=body,
        tags=clean_tags(tags, "claude-code"),
        created=first,
        updated=last if last and last != first else None,
        extra={"session_cwd": cwd} if cwd else {},
        warnings=warnings + cut,
    )


def _project(cwd: str) -> str:
    from marchdb.vault.notes import slugify

    return slugify(cwd.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or "root", 40)


def _sized(path: Path, origin: str) -> Found:
    """A session file read, unless it is larger than any session (``sources.too_large``)."""

    if (why := too_large(path)) is not None:
        return Bad(origin, why)
    return _guarded(read_session, path, origin)


def read_claude_code(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session file under ``path`` (or ``path`` itself), sorted; side
    chains (``subagents/``), ``tool-results/`` and hidden folders left out.
    ``since``: a file last written before then is passed over unread (no
    message in it can be newer), as the other hosts' readers do: a
    background import would read every session Claude Code kept."""
    if path.is_file():
        yield _sized(path, path.name)
        return
    floor = since.timestamp() if since is not None else None
    for folder, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("subagents", "tool-results"))
        for name in sorted(files):
            if not name.endswith(".jsonl") or name.startswith("."):
                continue
            full = Path(folder) / name
            origin = str(full.relative_to(path))
            if full.is_symlink():
                yield Bad(origin, "a symlink; links are not followed")
                continue
            if floor is not None and written_before(full, floor):
                yield Skip(origin, OLDER)
                continue
            yield _sized(full, origin)


# ---------------------------------------------------------------- ChatGPT
