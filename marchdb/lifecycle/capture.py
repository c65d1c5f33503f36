"""Quick capture (seed 003's ``memlog.sh "title" "text"``): one entry appended to today's daily log.

A daily log is a memory of marchdb's own, one per local calendar day (file
names and the day are for people, so local time, as ``save`` does):

* id ``log_YYYY-MM-DD``, name ``Daily log YYYY-MM-DD``, tag ``daily-log``;
* path ``YYYY/MM/weekN/YYYY-MM-DD-daily-log.md`` (seed 000's time buckets);
* description: the titles of the day's entries, rewritten with every entry,
  so a recall hint says what the day holds;
* body: entries ``### HH:MM - title`` then their text (seed 003's format).
  Each entry is its own chunk (``chunks.chunk_body``), so recall scores the
  entries one by one and points at the day.

Appends from several processes lose nothing and never interleave: each one
holds the index's writer lock (taken by every marchdb writer, CLI, MCP
server or agent loop) from reading the file to re-indexing it, and replaces
the whole file atomically. A person editing the log at the same moment is
handled as ``save`` does: the file is read again just before the replace,
and the entry is appended to whatever it holds then.

A hurried caller who has no description or tags for ``memory_save`` is
pointed here: an entry needs only a title.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import stat
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path

from marchdb.errors import Conflict, FileError, InvalidInput, Retry, check_text
from marchdb.index import db
from marchdb.index.sync import sync_files
from marchdb.save import RACE_RETRIES, create_file, index_written
from marchdb.text import plain_line, unix_line_ends
from marchdb.twins import refuse_twin
from marchdb.vault.chunks import ENTRY_HEADING
from marchdb.vault.edit import edit_note
from marchdb.vault.files import fsync_dir, read_file, replace_if_same, safe_folder, vault_lock, write_temp
from marchdb.vault.notes import MAX_FILE_BYTES, BadNote, Note, bucket_path, format_time, parse_note

#: The tag every daily log carries (maintenance and import know a log by it).
LOG_TAG = "daily-log"
#: Longest entry title, in characters (it is one line of the day's description).
MAX_TITLE_CHARS = 200
#: Longest entry text, in bytes of UTF-8 (as a memory body).
MAX_TEXT_BYTES = 64 * 1024
#: Longest description of a day: the first titles that fit, then "(+N more)".
DESCRIPTION_CHARS = 300


def log_id(day: dt.date) -> str:
    """The id of the daily log of ``day``: ``log_YYYY-MM-DD``."""
    return f"log_{day.isoformat()}"


def log_name(day: dt.date) -> str:
    """The name of the daily log of ``day``."""
    return f"Daily log {day.isoformat()}"


def entry_titles(body: str) -> list[str]:
    """The titles of a daily log's ``### HH:MM - title`` entries, in order."""
    return [m.group(2).strip() or m.group(1) for m in ENTRY_HEADING.finditer(body)]


def describe(day: dt.date, titles: list[str]) -> str:
    """A daily log's description: as many of its entry titles as fit in
    ``DESCRIPTION_CHARS``, then how many more there are. (The name holds the
    day; a hint line shows 80 characters of this, so it starts with the titles.)"""
    if not titles:
        return f"Daily log {day.isoformat()}"
    for shown in range(len(titles), 0, -1):
        more = f" (+{len(titles) - shown} more)" if shown < len(titles) else ""
        text = "; ".join(titles[:shown])
        if len(text) + len(more) <= DESCRIPTION_CHARS:
            return text + more
    return titles[0][: DESCRIPTION_CHARS - 12].rstrip() + f"… (+{len(titles) - 1} more)"


def format_entry(when: dt.datetime, title: str, text: str | None) -> str:
    """One entry: ``### HH:MM - title``, a blank line, the text. A line of the
    text that reads as an entry heading is escaped (``\\### 10:00 - x``, shown
    as typed): it would start an entry of its own, with its own title in the
    day's description and its own chunk."""
    head = f"### {when:%H:%M} - {title}"
    if not text or not text.strip():
        return head + "\n"
    body = ENTRY_HEADING.sub(lambda m: "\\" + m.group(0), text.strip())
    return f"{head}\n\n{body}\n"


def check_entry(title: object, text: object) -> tuple[str, str | None]:
    """Validate a caller's title and text; raise ``InvalidInput`` on anything bad."""
    if not isinstance(title, str) or not title.strip():
        raise InvalidInput('give the entry a title, e.g. marchdb log "Finished the code review" "details"')
    if text is not None and not isinstance(text, str):
        raise InvalidInput(f"text must be text, got {type(text).__name__}")
    for label, value in (("title", title), ("text", text or "")):
        if "\x00" in value:
            raise InvalidInput(f"the {label} holds a NUL character; log entries are plain text")
        check_text(value, f"the {label}")
    # Control characters (an escape sequence, a bell, U+202E) are no part of a title.
    one_line = plain_line("".join(" " if unicodedata.category(c) == "Cc" else c for c in title))
    if not one_line:
        raise InvalidInput("the title holds only control characters; give the entry a title in words")
    if len(one_line) > MAX_TITLE_CHARS:
        raise InvalidInput(
            f"the title is {len(one_line)} characters; the limit is {MAX_TITLE_CHARS}, put details in the text"
        )
    if text is not None:
        text = unix_line_ends(text)
    if text is not None and len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise InvalidInput(
            f"the text is {len(text.encode('utf-8')):,} bytes; an entry is limited to {MAX_TEXT_BYTES:,} (UTF-8); "
            "save long material as a memory of its own (marchdb save)"
        )
    return one_line, text if text and text.strip() else None


#: Longest one-liner ``remember`` takes: it becomes the memory's description
#: (``changes.MAX_DESCRIPTION_CHARS``), the line recall hints.
MAX_ONE_LINER_CHARS = 1000
#: A one-liner's name: its first words, at most this many characters.
NAME_CHARS = 60
#: A one-liner's tag when none is given (``save`` needs one).
DEFAULT_ONE_LINER_TAG = "note"
_FIRST_SENTENCE = re.compile(r"(.+?(?:[.!?](?=\s|$)|[。！？]))", re.S)
#: Where a sentence's subject usually ends: "Release freeze on Fridays: ..." is named "Release freeze on Fridays".
_SUBJECT_END = re.compile(r"\s*(?::\s|\s[-–—]\s|;\s|[：；，])")


def one_liner(text: object) -> tuple[str, str, str]:
    """``(name, description, body)`` of a memory made from one sentence
    (seed 004's ``retain "text"``; ``Store.remember``): the description is the
    sentence on one line, the body the text as given, the name its subject
    (what comes before a colon, a dash or a semicolon) or its first words,
    at most ``NAME_CHARS`` characters. Raises ``InvalidInput`` for no text or
    more than ``MAX_ONE_LINER_CHARS``."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput('give the sentence to remember, e.g. marchdb remember "Deploys are on Tuesdays"')
    check_text(text, "the text")
    line = " ".join(text.split())
    if len(line) > MAX_ONE_LINER_CHARS:
        raise InvalidInput(
            f"the text is {len(line):,} characters; remember takes one sentence (at most {MAX_ONE_LINER_CHARS:,}): "
            "save a longer memory with marchdb save (memory_save), which takes a name, a description and a body"
        )
    first = _FIRST_SENTENCE.match(line)
    name = (first.group(1) if first else line).rstrip(".!?。！？ ")
    head = _SUBJECT_END.split(name, maxsplit=1)[0].strip()
    if len(head) >= 3 and head != name:
        name = head
    if len(name) > NAME_CHARS:
        cut = name[:NAME_CHARS]
        words = cut.rsplit(" ", 1)[0] if " " in cut.strip() else cut
        name = words.rstrip(",;:-–— ") + "…"
    return name or line[:NAME_CHARS], line, unix_line_ends(text).strip()


@dataclass
class LogResult:
    """What one capture did. ``rel``: the log file, relative to the root."""

    status: str  # created | appended
    id: str
    path: Path
    entry: str
    message: str
    rel: str
    warnings: list[str] = field(default_factory=list)
    indexed: bool = True  # False: the index could not take it (a warning says so)

    def to_dict(self) -> dict:
        """``{"status", "id", "path" (absolute), "entry" (its heading), "message", "warnings"}``."""
        return {
            "status": self.status,
            "id": self.id,
            "path": str(self.path),
            "entry": self.entry,
            "message": self.message,
            "warnings": list(self.warnings),
        }


class Logger:
    """Quick capture into the files under ``root`` and the index ``con``, in
    the shape of ``save.Saver``: the Store re-embeds what it wrote afterwards."""

    def __init__(self, con, root: Path, index_path):
        self.con = con
        self.root = Path(root)
        self.index_path = index_path

    def run(self, title: object, text: object = None, now: dt.datetime | None = None) -> LogResult:
        """Append one entry to the daily log of ``now`` (default: now), creating the log when it is the day's first."""
        title, text = check_entry(title, text)
        when = (now or dt.datetime.now(dt.UTC)).astimezone()
        entry = format_entry(when, title, text)
        try:
            # The vault's lock too: two homes on one vault append in turn.
            with db.writer_lock(self.index_path), vault_lock(self.root):
                return self._locked(when, entry)
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            raise FileError(
                f"cannot write{where}: {exc.strerror or exc}; nothing was logged, check the disk and permissions"
            ) from None

    def _locked(self, when: dt.datetime, entry: str) -> LogResult:
        day = when.date()
        mem_id = log_id(day)
        stamp = format_time(when)
        heading = entry.split("\n", 1)[0]
        usual = str(bucket_path(day, LOG_TAG))
        rel = self._find(mem_id, usual)
        if rel is None:
            # The day's log may be there and unreadable (broken YAML, a link):
            # a second one with its id would be a conflict for every later entry.
            there = self.root / usual
            odd = os.path.lexists(there) and (os.path.islink(there) or not os.path.isfile(there))
            refuse_twin(self.con, self.root, mem_id, [usual] if odd else None, then="log again")
            note = Note(
                id=mem_id,
                name=log_name(day),
                description=describe(day, entry_titles(entry)),
                tags=[LOG_TAG],
                status="active",
                created_at=stamp,
                updated_at=stamp,
                body=entry,
            )
            rel = create_file(self.root, note, when, slug=LOG_TAG)
            result = LogResult("created", mem_id, self.root / rel, heading, f"started {mem_id} at {rel}", rel)
        else:
            try:
                status = self._append(self.root / rel, mem_id, day, entry, stamp)
            except FileNotFoundError:
                # Moved since the index last looked: find it again, once.
                sync_files(self.con, self.root, self.index_path)
                rel = self._find(mem_id, str(bucket_path(day, LOG_TAG)))
                if rel is None:
                    raise Retry(
                        f"{mem_id} was moved or deleted while logging; nothing was written, log again"
                    ) from None
                status = self._append(self.root / rel, mem_id, day, entry, stamp)
            result = LogResult("appended", mem_id, self.root / rel, heading, f"appended to {mem_id} ({rel})", rel)
            if status != "active":
                result.warnings.append(
                    f"{mem_id} has status {status}: its entries stay out of recall and search until it is active again"
                )
        result.indexed = index_written(self.con, self.root, self.index_path, rel, result.warnings)
        return result

    def _find(self, mem_id: str, usual: str) -> str | None:
        """Where the day's log is: at its usual path (a cheap check), else
        wherever a full scan finds its id (the user may have moved it)."""
        sync_files(self.con, self.root, self.index_path, [usual])
        holders = db.file_holders(self.con, mem_id)
        if len(holders) != 1:
            # None here, or several: the index may be behind (a copy deleted
            # since, as the conflict message asked); a full scan decides.
            sync_files(self.con, self.root, self.index_path)
            holders = db.file_holders(self.con, mem_id)
        if len(holders) > 1:
            raise Conflict(
                f"{len(holders)} files hold id {mem_id}: {', '.join(holders)}; give all but one a new id, then log again",
                mem_id,
                [str(self.root / p) for p in holders],
            )
        return holders[0] if holders else None

    def _append(self, path: Path, mem_id: str, day: dt.date, entry: str, stamp: str) -> str:
        """Append ``entry`` to the log at ``path`` and refresh its description;
        returns the log's status. Raises ``FileNotFoundError`` when it is gone."""
        for _ in range(RACE_RETRIES):
            # Never through a link, the file's or a folder's on the way from the root.
            safe_folder(self.root, path.parent.relative_to(self.root))
            current, st = read_file(path, MAX_FILE_BYTES, self.root)
            if len(current) > MAX_FILE_BYTES:
                raise FileError(f"{path} is larger than {MAX_FILE_BYTES:,} bytes; fix it by hand, then log again")
            try:
                note = parse_note(current)
            except BadNote as bad:
                raise FileError(
                    f"cannot append to {path}: {bad.problem.kind}: {bad.problem.detail}; fix the file by hand, "
                    "then log again"
                ) from None
            text = current.decode("utf-8")  # parse_note proved it is UTF-8
            if note.id != mem_id:
                raise Retry(f"{path} now holds id {note.id!r}, not {mem_id!r}; nothing was written, log again")
            body = note.body.rstrip() + "\n\n" + entry if note.body.strip() else entry
            new = replace(note, body=body, description=describe(day, entry_titles(body)), updated_at=stamp, problems=[])
            fields = ["body"] + (["description"] if new.description != note.description else [])
            why: list[str] = []
            edited = edit_note(text, new, fields, why)
            if edited is None:  # as save does: rewritten whole, a hand-edited log would lose its comments and layout
                raise FileError(
                    f"cannot append to {path} in place: {why[0] if why else 'its layout is unusual'}; nothing was "
                    "written: write its frontmatter as one `key: value` field per line between two '---' lines, "
                    "then log again"
                )
            data = edited.encode("utf-8")
            if len(data) > MAX_FILE_BYTES:
                raise InvalidInput(
                    f"{mem_id} would grow past {MAX_FILE_BYTES:,} bytes; save this as a memory of its own (marchdb save)"
                )
            tmp = write_temp(path.parent, data, stat.S_IMODE(st.st_mode))
            try:
                latest, seen = read_file(path, MAX_FILE_BYTES, self.root)
                # Edited under us (an editor), up to the replace itself: append to the newest content.
                if latest != current or not replace_if_same(tmp, path, seen):
                    continue
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            fsync_dir(path.parent)
            return note.status
        raise Retry(f"{path} kept changing while logging (edited by another program); nothing was written, log again")
