"""What an import reads, item by item — shared by the readers of Markdown
folders (``notefolders``) and of chats (``transcripts``), and by ``importing``,
which writes the items:

* ``Item`` — one memory an import would create;
* ``Skip`` — a source item left out on purpose (with the reason);
* ``Bad`` — one that could not be read (malformed, half-written, too large);
* ``Page`` — a workspace's ``NOW.md``, for the working page (``now``).
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import os
import unicodedata
from dataclasses import dataclass, field

from marchdb.errors import InvalidInput
from marchdb.hints import cut
from marchdb.vault.notes import MAX_SOURCE_CHARS, MAX_TAGS, index_key, normalize_tag

#: The agent hosts whose own session stores are read (``chats``), in the order ``import ALL`` takes them.
HOST_KINDS = ("claude-code", "codex", "gemini", "qwen", "pi", "opencode", "kilo", "openclaw", "hermes", "cline")
KINDS = ("workspace", "typed", "obsidian", "claude-code", "chatgpt", *HOST_KINDS[1:])
#: The kinds that read a folder of Markdown notes (a file is one source whatever the kind).
NOTE_KINDS = KINDS[:3]
#: Longest body imported, in characters (a longer conversation is cut, and the report says so):
#: ~75 chunks, ~4 s of embedding on 2 cores. The memory points at the day and
#: the session; the whole transcript stays where it was.
MAX_BODY_CHARS = 60_000
#: Longest description made from a source (it is one hint line).
DESCRIPTION_CHARS = 300
#: What an undocumented format may throw at a reader (a field of an
#: unexpected type, JSON nested too deep): reported for that item, and the
#: import goes on.
SHAPE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError, OverflowError)


@dataclass
class Item:
    """One memory an import would create."""

    source: str  # the idempotency key, written as `source:`
    origin: str  # where it came from, for people (a path, path#conversation)
    name: str
    description: str
    body: str
    tags: list[str]
    created: dt.datetime
    updated: dt.datetime | None = None
    status: str = "active"
    want_id: str | None = None  # an id it should get when free (daily logs: log_YYYY-MM-DD)
    slug: str | None = None  # its file name, when not the name's slug (daily logs: daily-log)
    extra: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: The key an earlier marchdb wrote for this source (folder name + path):
    #: a memory holding it counts as this source, imported already.
    legacy_source: str | None = None
    #: Other keys of the same source: a note file imported as another kind of
    #: folder (``workspace`` then ``obsidian``) is the same file.
    aliases: tuple[str, ...] = ()
    #: When the source last changed, as far as it can be told (a note file's
    #: last change; its frontmatter times may be older than an edit): a later
    #: import says that it changed since.
    changed: dt.datetime | None = None

    def known_as(self, known: dict[str, str]) -> str | None:
        """The id of the memory already imported from this source, if any."""
        for key in (self.source, self.legacy_source, *self.aliases):
            if key and index_key(key) in known:  # ``known`` holds keys as the index keeps them
                return known[index_key(key)]
        return None


@dataclass
class Skip:
    """A source item that is not imported, on purpose."""

    origin: str
    reason: str


#: The reason of a ``Skip`` for a chat older than an import's ``--since``,
#: passed over unread (counted, not listed).
OLDER = "older than --since"


@dataclass
class Bad:
    """A source item that could not be read (malformed, half-written, too large)."""

    origin: str
    detail: str


@dataclass
class Page:
    """A workspace's working page (seed 003's ``NOW.md``): it becomes marchdb's
    working page (``now``), never a memory that recall would later hint as if
    it were current."""

    origin: str
    text: str
    changed: dt.datetime  # when it was last written: the page keeps that age


Found = Item | Skip | Bad | Page


#: ``text`` on one line of plain text (``text.plain_line``: no escape
#: sequence or direction control, which ``save`` refuses too), cut to
#: ``limit`` characters with an ellipsis: the hint line's own cut, without
#: its neutralising of block markers (how a hint shows a name, never what is stored).
one_line = cut


def first_text(*candidates: object, limit: int) -> str:
    """The first of ``candidates`` that still holds text on one plain line
    (``one_line``), cut to ``limit``; "" when none does. A title of control,
    direction or space characters alone reads as nothing, so the next source
    of a name (a heading, the first request) stands in, not an empty name."""
    for candidate in candidates:
        if isinstance(candidate, str) and (line := one_line(candidate, limit)):
            return line
    return ""


def clean_tags(raw: list, fallback: str, warnings: list[str] | None = None) -> list[str]:
    """Valid tags of ``raw`` (invalid ones dropped), at most ``MAX_TAGS``
    (the rest dropped, said in ``warnings``), or ``[fallback]``."""
    tags: list[str] = []
    for value in raw:
        try:
            tag = normalize_tag(value)
        except InvalidInput:
            continue
        if tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS and warnings is not None:
        warnings.append(f"{len(tags)} tags; the first {MAX_TAGS} are kept (a memory holds at most {MAX_TAGS})")
    return tags[:MAX_TAGS] or [fallback]


def source_key(raw: str) -> str:
    """The ``source:`` an import writes for ``raw`` (a path, an id): a key
    that reads back from YAML as written and that the index keeps
    unchanged (``index_key(k) == k``), so the next import finds it. ``%``,
    control characters, unpaired surrogates (a file name that is not UTF-8)
    and any whitespace but one space between words are %-escaped (UTF-8
    bytes); a key longer than the index keeps ends in a hash of the whole."""

    def escaped(c: str) -> str:
        return "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))

    out = []
    for i, c in enumerate(raw):
        plain_space = c == " " and 0 < i < len(raw) - 1 and raw[i - 1] != " " and not raw[i + 1].isspace()
        if c == "%" or unicodedata.category(c) in ("Cc", "Cs") or (c.isspace() and not plain_space):
            out.append(escaped(c))
        else:
            out.append(c)
    key = "".join(out)
    if len(key) > MAX_SOURCE_CHARS:
        key = key[: MAX_SOURCE_CHARS - 17].rstrip() + "#" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return key


def unreadable(exc: OSError) -> str:
    """Why a source file could not be read, for its problem line."""
    if exc.errno == errno.ELOOP:
        return "a symlink; links are not followed"
    if exc.errno in (errno.EINVAL, errno.ENXIO):  # ENXIO: a socket, which open() cannot open
        return "not a regular file (a FIFO, a socket, a device?); only files are read"
    return f"cannot read: {exc.strerror or exc}"


#: Largest session file (or SQLite store) read. Sessions are read a line or a
#: message at a time, so memory stays small; the bound keeps a runaway file
#: (a log appended to for months, a sparse file) from holding an import for minutes.
MAX_SESSION_BYTES = 1024 * 1024 * 1024


def too_large(path: str | os.PathLike, limit: int = MAX_SESSION_BYTES, what: str = "a session file") -> str | None:
    """Why ``path`` is not read for its size (None: it is small enough, or is no file)."""
    try:
        size = os.lstat(path).st_size
    except OSError:
        return None  # reading it says why
    if size > limit:
        return f"{size:,} bytes; {what} is read up to {limit:,} bytes (left out)"
    return None


def written_before(path: str | os.PathLike, floor: float) -> bool:
    """Whether ``path`` was last written before ``floor`` (epoch seconds); False when it cannot be looked at."""
    try:
        return os.lstat(path).st_mtime < floor
    except OSError:
        return False  # reading it says why
