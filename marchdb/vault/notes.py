"""The memory file format of seed 000: parse, validate, render and name (``chunks`` cuts a body).

A memory is a Markdown file with YAML frontmatter (``id, name, description,
tags, status, created_at, updated_at``) and a body. Nothing here touches the
file system: bytes in, data out (new ids also read the clock and a random
source). Reading and writing files lives in ``files``, ``sync`` and ``save``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import frontmatter
import yaml

from marchdb.clock import format_time, parse_time, utc_now_iso  # noqa: F401  (re-exported: the file format's times)
from marchdb.errors import InvalidInput
from marchdb.text import cut_bytes
from marchdb.vault.flatyaml import FlatReader
from marchdb.vault.tags import ASCII_LOWERCASE, MAX_TAG_CHARS, normalize_tag, normalize_tags  # noqa: F401  (re-exported: the file format's tags)

#: Files larger than this are not memories; they get a ``too_large`` row.
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Bounds on one file's frontmatter, so that a hostile or broken file costs
#: milliseconds, never minutes: its size in characters, its fields, its values
#: in all and how deep they nest. A memory needs a dozen values.
MAX_FRONTMATTER_CHARS = 64 * 1024
MAX_FIELDS = 100
MAX_YAML_VALUES = 5_000
MAX_YAML_DEPTH = 10
#: Most tags a memory keeps, and the longest tag, in characters.
MAX_TAGS = 50

FIELD_ORDER = ("id", "name", "description", "tags", "status", "created_at", "updated_at")
#: What ``status:`` may say; only active memories are recalled and searched.
STATUSES = ("active", "deprecated", "archived")

#: The optional ``priority:`` field (seed 003's 优先级) and the value the
#: ranking gives each word (``temperature``): a nudge, never a filter.
PRIORITIES = {"high": 1.0, "normal": 0.0, "medium": 0.0, "low": -1.0, "高": 1.0, "中": 0.0, "低": -1.0}
#: The optional ``supersedes:`` field: the ids of older memories this one
#: replaces (recall leaves them out while this one is active; ``recall``);
#: ``conflicts_with:`` the ids of memories it contradicts (both kept, marked
#: for a person to decide). At most this many ids each.
MAX_SUPERSEDES = 20
#: The frontmatter fields that name other memories by id (``read_ids``).
ID_FIELDS = ("supersedes", "conflicts_with")


# Fast C loader when PyYAML was built with libyaml; the pure-Python one is
# ~10x slower and dominates a cold sync.
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _YAML_LOADER(_BASE_LOADER):  # noqa: N801
    """Safe YAML, except that an impossible date (``2026-02-30``) stays text:
    PyYAML raises on it, which would lose the whole memory over one typo;
    kept as text, the field is reported as invalid and the memory indexed.

    Aliases (``*name``) are refused: a few hundred bytes of nested aliases
    ("billion laughs") expand to billions of values as soon as anything walks
    them, and a memory never needs one."""

    def construct_object(self, node, deep=False):
        # A node met a second time was reached through an alias (or a merge key).
        if node in self.constructed_objects or node in self.recursive_objects:
            raise yaml.constructor.ConstructorError(
                None, None, "uses a YAML alias (*name) or merge key; write the value out instead", node.start_mark
            )
        return super().construct_object(node, deep=deep)

    def flatten_mapping(self, node):
        # A merge key (<<) copies a mapping into another: aliases' way in, and
        # nothing a memory needs; refused alike, as the README says.
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise yaml.constructor.ConstructorError(
                    None, None, "uses a YAML merge key (<<); write the fields out instead", key_node.start_mark
                )
        return super().flatten_mapping(node)


#: The YAML loader of memory files (safe, no aliases), for every reader of frontmatter.
YAML_LOADER = _YAML_LOADER


def _timestamp_or_text(loader, node):
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError:
        return loader.construct_scalar(node)


def _float_or_refusal(loader, node):
    # YAML 1.1 reads "1:59:59.5" as a float in base 60: past 60**173 the
    # int behind it overflows a float, an OverflowError no reader expects.
    try:
        return loader.construct_yaml_float(node)
    except OverflowError:
        raise yaml.constructor.ConstructorError(
            None, None, "a number too large for a float (YAML reads a:b:c.d in base 60); quote it", node.start_mark
        ) from None


_YAML_LOADER.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_or_text)
_YAML_LOADER.add_constructor("tag:yaml.org,2002:float", _float_or_refusal)
#: The usual flat frontmatter, read as the loader would read it without running it.
_FLAT = FlatReader(_YAML_LOADER)
_TOP_KEY = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:", re.M)


class _SeedDumper(yaml.SafeDumper):
    """Lists indented under their key, as in seed 000's examples (and Obsidian's)."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


_YAML_DUMPER = _SeedDumper
_PLAIN_TIME = re.compile(r"^(created_at|updated_at): '(\d{4}-\d\d-\d\dT[\d:.]+Z)'$", re.M)
_FM_HANDLER = frontmatter.YAMLHandler()


@dataclass
class Problem:
    """Something wrong with one file, as shown by the ``diag_problems`` view."""

    kind: str
    detail: str


@dataclass
class Note:
    """A parsed memory file. ``problems`` are warnings that do not stop indexing."""

    id: str
    name: str
    description: str
    tags: list[str]
    status: str
    created_at: str | None
    updated_at: str | None
    body: str
    extra: dict = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


class BadNote(Exception):
    """The file cannot become a memory; ``problem`` says why. Internal to sync."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.problem = Problem(kind, detail)


# ---------------------------------------------------------------- hashing


def content_hash(data: bytes) -> str:
    """A short, stable hash of file bytes (or UTF-8 text) used to detect real changes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def text_hash(text: str) -> str:
    """``content_hash`` of a string's UTF-8 bytes."""
    return content_hash(text.encode("utf-8"))


# ---------------------------------------------------------------- names and paths


def week_of_month(day: int) -> int:
    """Seed 000's 7-day buckets: days 1-7 → 1, 8-14 → 2, ..., 29-31 → 5."""
    if not 1 <= day <= 31:
        raise ValueError(f"day of month out of range: {day}")
    return (day - 1) // 7 + 1


#: Most UTF-8 bytes of a slug: ``YYYY-MM-DD-<slug>-1000.md`` must fit the
#: 255 bytes a file name may have (60 four-byte characters did not, with ``-2``).
MAX_SLUG_BYTES = 200


def slugify(name: str, max_len: int = 60) -> str:
    """A file-name-safe slug: ASCII lowercased, CJK and other letters kept,
    everything else folded to single ``-``; at most ``max_len`` characters
    and ``MAX_SLUG_BYTES`` bytes. Never empty (``memory``)."""
    text = unicodedata.normalize("NFKC", name).translate(ASCII_LOWERCASE)
    text = re.sub(r"[^\w]+", "-", text).replace("_", "-")
    text = re.sub(r"-{2,}", "-", text).strip("-")
    return cut_bytes(text[:max_len], MAX_SLUG_BYTES).rstrip("-") or "memory"


def bucket_dir(when: dt.datetime | dt.date) -> PurePosixPath:
    """``YYYY/MM/weekN`` for a creation date."""
    return PurePosixPath(f"{when.year:04d}", f"{when.month:02d}", f"week{week_of_month(when.day)}")


def bucket_path(when: dt.datetime | dt.date, slug: str) -> PurePosixPath:
    """The seed's time-bucket path ``YYYY/MM/weekN/YYYY-MM-DD-slug.md``."""
    return bucket_dir(when) / f"{when.year:04d}-{when.month:02d}-{when.day:02d}-{slug}.md"


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_ID_OK = re.compile(r"^[\w.:\-]+$")
MAX_ID_LEN = 128


def _base32(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        out.append(_CROCKFORD[n & 31])
        n >>= 5
    return "".join(reversed(out))


def new_id(name: str, now: dt.datetime | None = None) -> str:
    """A fresh id in the seed's style: ``mem_`` + a time-sortable part + a short slug.

    The time part is the creation time in milliseconds (Crockford base32, so
    ids sort by creation) plus two random characters against same-millisecond
    collisions, e.g. ``mem_01jdx3k7p2mq_context_cache``.
    """
    now = now or dt.datetime.now(dt.UTC)
    ms = int(now.timestamp() * 1000)
    stamp = _base32(ms, 10) + _base32(secrets.randbits(10), 2)
    words = re.findall(r"[a-z0-9]+", unicodedata.normalize("NFKC", name).translate(ASCII_LOWERCASE))
    slug = "_".join(words[:3])[:24].strip("_")
    return f"mem_{stamp}_{slug}" if slug else f"mem_{stamp}"


def validate_id(raw: object) -> str:
    """Check an id given by a caller; return it stripped or raise ``InvalidInput``.

    Ids are references, never paths: letters, digits and ``_ - . :`` only, at
    most 128 characters, not ``.`` or ``..``.
    """
    if not isinstance(raw, str):
        raise InvalidInput(f"id must be text, got {type(raw).__name__}")
    ident = raw.strip()
    if not ident:
        raise InvalidInput("id is empty; leave it out to have one generated")
    if len(ident) > MAX_ID_LEN:
        raise InvalidInput(f"id is {len(ident)} characters; the limit is {MAX_ID_LEN}")
    if "\x00" in ident or "/" in ident or "\\" in ident or ident in (".", "..") or not _ID_OK.match(ident):
        raise InvalidInput(f"id {raw!r} may hold only letters, digits and _ - . : (no spaces or path characters)")
    return ident


# ---------------------------------------------------------------- time


def _time_field(meta: dict, key: str, problems: list[Problem]) -> str | None:
    value = meta.get(key)
    if value is None or value == "":
        return None
    try:
        parsed = parse_time(value)
        shown = format_time(parsed) if parsed is not None and not isinstance(value, str) else None
    except (OverflowError, ValueError):  # a time at the very edge of the calendar
        parsed = shown = None
    if parsed is None:
        problems.append(
            Problem(
                "invalid_field",
                f"{key} {str(value)[:60]!r} is not an ISO 8601 time between 0001-01-02 and 9999-12-30 (UTC)",
            )
        )
        return str(value)[:200]
    return shown if shown is not None else str(value).strip()


# ---------------------------------------------------------------- parsing


def decode(data: bytes) -> str:
    """Bytes → text, or ``BadNote`` for binary junk and non-UTF-8 files."""
    if b"\x00" in data[:8192]:
        raise BadNote("not_utf8", "binary file (NUL bytes); a memory must be UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadNote("not_utf8", f"not UTF-8 at byte {exc.start}; re-save the file as UTF-8") from None
    return text[1:] if text.startswith("\ufeff") else text


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # PyYAML's own text names its input ('in "<unicode string>", line 3,
    # column 7') and prints the offending line with a caret beneath: what is
    # wrong and where, in the frontmatter's own lines, reads better.
    problem = getattr(exc, "problem", None)
    if not problem:
        return " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    mark = getattr(exc, "problem_mark", None)
    where = f" (frontmatter line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join(f"{problem}{f', {context}' if context else ''}{where}".split())


def parse_note(data: bytes, stem: str = "") -> Note:
    """Parse a memory file's bytes into a ``Note`` or raise ``BadNote``.

    ``stem`` (the file name without ``.md``) stands in for a missing name.
    Rules from seed 000: no id → not a memory (``missing_id``); no
    description → a memory, flagged; unknown fields are kept in ``extra``.
    """
    text = decode(data)
    if not _FM_HANDLER.detect(text):
        raise BadNote("missing_id", "no YAML frontmatter; not a memory (add id, name, description)")
    try:
        head, body = _FM_HANDLER.split(text)
    except ValueError:
        raise BadNote(
            "parse_error", "frontmatter has no closing '---' line; end the fields with a line holding only ---"
        ) from None
    if len(head) > MAX_FRONTMATTER_CHARS:
        raise BadNote(
            "too_large",
            f"frontmatter is {len(head):,} characters; the limit is {MAX_FRONTMATTER_CHARS:,}, move text to the body",
        )
    try:
        meta = _FLAT.load(head)
        if meta is None:
            meta = _FM_HANDLER.load(head, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise BadNote("parse_error", f"frontmatter is not valid YAML: {_yaml_problem(exc)[:300]}") from None
    except (ValueError, RecursionError) as exc:
        if "integer string conversion" in str(exc):  # Python's own words, and its advice, are no help here
            raise BadNote(
                "parse_error", "frontmatter has a number of more than 4,300 digits; quote it or shorten it"
            ) from None
        raise BadNote("parse_error", f"frontmatter block is malformed: {str(exc)[:300]}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise BadNote("parse_error", "frontmatter is not a mapping of fields")
    too_much = _too_complex(meta)
    if too_much:
        raise BadNote("parse_error", f"frontmatter has {too_much}; a memory needs a few plain fields")
    problems: list[Problem] = []
    # YAML keeps the last of two equal keys without a word; say so.
    counts = Counter(_TOP_KEY.findall(head))
    for key in sorted(k for k, n in counts.items() if n > 1):
        problems.append(
            Problem("invalid_field", f"field {key!r} appears more than once; the last one counts, delete the others")
        )

    raw_id = meta.get("id")
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        raise BadNote("missing_id", "frontmatter has no id; not indexed")
    if not isinstance(raw_id, str):
        raise BadNote("invalid_id", f"id {raw_id!r} is a {type(raw_id).__name__}; quote it to make it text")
    ident = raw_id.strip()
    if len(ident) > MAX_ID_LEN or any(c in ident for c in "\x00\n\r"):
        raise BadNote("invalid_id", f"id {ident[:40]!r}... is too long or holds control characters")

    hidden = (
        []  # printable ASCII holds neither
        if ident.isascii() and ident.isprintable()
        else sorted({f"U+{ord(c):04X}" for c in ident if unicodedata.category(c) in ("Cc", "Cf")})
    )
    if hidden:
        # Indexed as written, but told: "mem_a\u200b" beside "mem_a", or a
        # U+202E turning "gnp.exe" around, lets an agent open the wrong memory.
        problems.append(
            Problem("invalid_field", f"id {ident[:40]!r} holds invisible or direction characters ({', '.join(hidden)})")
        )

    name = _text_field(meta, "name", problems)
    if not name:
        name = stem or ident
        problems.append(Problem("missing_name", "no name; the file name stands in"))
    description = _text_field(meta, "description", problems)
    if not description:
        problems.append(Problem("missing_description", "no description; indexed but never shown as a hint"))

    raw_tags = meta.get("tags")
    tags, rejected = normalize_tags(raw_tags)
    if isinstance(raw_tags, str):
        problems.append(Problem("invalid_field", "tags is a string; write it as a YAML list"))
    if rejected:
        problems.append(Problem("invalid_tags", "ignored tags: " + ", ".join(rejected)[:300]))
    if len(tags) > MAX_TAGS:
        problems.append(Problem("invalid_tags", f"{len(tags)} tags; only the first {MAX_TAGS} are used"))
        tags = tags[:MAX_TAGS]

    status = meta.get("status", "active")
    if status is None:
        status = "active"
    if not isinstance(status, str):
        problems.append(Problem("invalid_field", f"status {status!r} is not text"))
        status = str(status)
    status = status.strip().lower() or "active"
    if status not in STATUSES:
        # Kept as written (a "draft" may mean "not yet"), but never silently:
        # recall and search read active memories only.
        problems.append(
            Problem(
                "invalid_field",
                f"status {status[:40]!r} is not one of {', '.join(STATUSES)}; the memory is left out of "
                "recall and search until it is",
            )
        )

    if meta.get("priority") is not None and priority_value(meta["priority"]) is None:
        problems.append(Problem("invalid_field", f"priority {meta['priority']!r} is not one of high, normal, low"))
    for key in ID_FIELDS:
        if meta.get(key) is not None:
            ids, bad = read_ids(meta[key], key)
            problems += [Problem("invalid_field", f"{p}; left out") for p in bad]
            if ident is not None and ident in ids:  # left out by sync: a memory neither replaces nor contradicts itself
                problems.append(Problem(f"{key}_itself", f"{key} names {ident}, the memory's own id; left out"))

    extra = {k: v for k, v in meta.items() if k not in FIELD_ORDER}
    return Note(
        id=ident,
        name=name,
        description=description,
        tags=tags,
        status=status,
        created_at=_time_field(meta, "created_at", problems),
        updated_at=_time_field(meta, "updated_at", problems),
        body=body,
        extra=extra,
        problems=problems,
    )


def _too_complex(meta: dict) -> str | None:
    """What makes a frontmatter mapping too big to be a memory's (None if
    nothing): too many fields, values, or levels of nesting."""
    if len(meta) > MAX_FIELDS:
        return f"{len(meta)} fields (the limit is {MAX_FIELDS})"
    flat = 1 + 2 * len(meta)  # the mapping, its keys and values: at most 3 levels when no list holds a container
    for value in meta.values():
        if isinstance(value, (dict, tuple, set)):
            break
        if isinstance(value, list):
            if any(isinstance(item, (dict, list, tuple, set)) for item in value):
                break
            flat += len(value)
    else:
        if flat <= MAX_YAML_VALUES:
            return None
    stack: list[tuple[object, int]] = [(meta, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_YAML_VALUES:
            return f"more than {MAX_YAML_VALUES:,} values"
        if depth > MAX_YAML_DEPTH:
            return f"values nested more than {MAX_YAML_DEPTH} levels deep"
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple, set)):
            stack.extend((item, depth + 1) for item in value)
    return None


def priority_value(raw: object) -> float | None:
    """The ranking value of a ``priority:`` field (``PRIORITIES``), or None
    when it is absent or not one of those words."""
    if not isinstance(raw, str):
        return None
    return PRIORITIES.get(raw.strip().lower())


def read_ids(raw: object, key: str = "supersedes") -> tuple[list[str], list[str]]:
    """``(ids, problems)`` of a field naming memories (``supersedes:``,
    ``conflicts_with:``): one id or a list of ids, each as a memory's ``id:``
    may be written (text, at most ``MAX_ID_LEN`` characters, no control
    characters; hand-written ids may hold spaces), without repeats. A bad
    entry is left out on its own and said; past ``MAX_SUPERSEDES`` entries
    the rest are left out."""
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list):
        return [], [f"{key} {str(raw)[:60]!r} is not an id or a list of ids"]
    problems = []
    if len(values) > MAX_SUPERSEDES:
        problems.append(f"{key} names {len(values)} ids; only the first {MAX_SUPERSEDES} count")
        values = values[:MAX_SUPERSEDES]
    out: list[str] = []
    for value in values:
        ident = value.strip() if isinstance(value, str) else ""
        if not ident or len(ident) > MAX_ID_LEN or any(c in ident for c in "\x00\n\r"):
            problems.append(f"{key} entry {str(value)[:60]!r} is not a memory id")
        elif ident not in out:
            out.append(ident)
    return out, problems


def field_ids(raw: object, key: str = "supersedes") -> list[str]:
    """The ids a ``supersedes:`` / ``conflicts_with:`` field names (``read_ids`` without its problems)."""
    return read_ids(raw, key)[0]


def supersedes_ids(raw: object) -> list[str]:
    """The ids a ``supersedes:`` field names."""
    return field_ids(raw, "supersedes")


def _text_field(meta: dict, key: str, problems: list[Problem]) -> str:
    value = meta.get(key)
    if value is None:
        return ""
    if isinstance(value, (int, float, dt.date)) and not isinstance(value, bool):
        problems.append(Problem("invalid_field", f"{key} is a {type(value).__name__}, read as text"))
        value = str(value)
    if not isinstance(value, str):
        problems.append(Problem("invalid_field", f"{key} is not text; ignored"))
        return ""
    return " ".join(value.split())


# ---------------------------------------------------------------- rendering


def render_note(note: Note) -> str:
    """The Markdown text of a memory: frontmatter in the seed's field order,
    then any extra fields the user added, then the body."""
    meta: dict = {
        "id": note.id,
        "name": note.name,
        "description": note.description,
        "tags": list(note.tags),
        "status": note.status,
    }
    if note.created_at:
        meta["created_at"] = note.created_at
    if note.updated_at:
        meta["updated_at"] = note.updated_at
    for key, value in note.extra.items():
        meta.setdefault(key, value)
    head = _dump_fields(meta)
    body = note.body if note.body.endswith("\n") else note.body + "\n"
    return f"---\n{head}---\n\n{body.lstrip(chr(10))}"


def _dump_fields(fields: dict) -> str:
    """Frontmatter fields as YAML text, in the seed's style."""
    head = yaml.dump(
        fields, Dumper=_YAML_DUMPER, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1000
    )
    # Timestamps unquoted, as the seed writes them (YAML reads them back as
    # times; parse_note turns those into the same text).
    return _PLAIN_TIME.sub(r"\1: \2", head)


def render_field(key: str, value: object) -> list[str]:
    """One top-level frontmatter field as ``render_note`` writes it, as lines."""
    return _dump_fields({key: value}).rstrip("\n").split("\n")


def metadata_text(name: str, description: str, tags: list[str]) -> str:
    """The text of the metadata dense signal: name + description + tags."""
    parts = [name, description]
    if tags:
        parts.append(" ".join(tags))
    return "\n".join(p for p in parts if p)


#: Longest source key the index keeps (``memory_attrs.source``).
MAX_SOURCE_CHARS = 500


def index_key(source: str) -> str:
    """A ``source:`` value as the index keeps it (``sync``): runs of
    whitespace as one space, at most ``MAX_SOURCE_CHARS`` characters."""
    return " ".join(source.split())[:MAX_SOURCE_CHARS]
