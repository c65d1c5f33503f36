"""Reading a folder of Markdown notes for ``marchdb import workspace | typed |
obsidian`` (see ``importing`` for the rules every import follows).

Markdown notes: name from ``name``/``title`` or the first heading (else the
file name); description from ``description`` or the first sentence; tags
from the frontmatter, from ``#tags`` in the text and from the folder (seed
003's ``decisions/`` → ``decision``, ``people/`` → ``person``…; seed 004's
``user/`` → ``user`` + ``profile``…; any other folder path as one nested tag);
a folder named ``archive`` or ``.archive`` gives status ``archived``; a
workspace's ``NOW.md`` is its working page (``Page``), not a memory. Other
frontmatter fields are kept as they are. A note without a description that
is empty or holds only headings is skipped, with the reason.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

from marchdb.clock import in_calendar, parse_time
from marchdb.lifecycle.capture import LOG_TAG, describe, entry_titles, log_id, log_name
from marchdb.lifecycle.sources import (
    DESCRIPTION_CHARS,
    NOTE_KINDS,
    SHAPE_ERRORS,
    Bad,
    Found,
    Item,
    Page,
    Skip,
    clean_tags,
    first_text,
    one_line,
    unreadable,
)
from marchdb.ops import MAX_NOW_CHARS
from marchdb.text import unix_line_ends
from marchdb.vault.changes import MAX_NAME_CHARS
from marchdb.vault.files import VIRTUAL_TREES, read_file
from marchdb.vault.notes import MAX_FILE_BYTES, STATUSES, YAML_LOADER, normalize_tags, priority_value, slugify

WORKSPACE_FOLDERS = {
    "decisions": ["decision"],
    "lessons": ["lesson"],
    "people": ["person"],
    "projects": ["project"],
    "preferences": ["preference"],
    "reflections": ["reflection"],
    "actions": ["action"],
}
TYPED_FOLDERS = {
    "user": ["user", "profile"],
    "feedback": ["feedback"],
    "project": ["project"],
    "reference": ["reference"],
}
ARCHIVE_FOLDERS = frozenset({"archive", ".archive"})
_DAY_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$", re.I)

_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_INLINE_TAG = re.compile(r"(?<![\w#&/\\])#([\w][\w/-]*)", re.U)
_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_WIKI = re.compile(r"\[\[([^\]|]+)(?:\|([^\]]+))?\]\]")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_SENTENCE = re.compile(r"(.+?(?:[.!?](?=\s|$)|[。！？]))", re.S)
_TIME_KEYS = ("created_at", "created", "date", "updated_at", "updated", "modified")
_CONSUMED = {
    "id",
    "name",
    "title",
    "description",
    "tags",
    "tag",
    *_TIME_KEYS,
    "status",
    "source",
}


def _inline_tags(body: str) -> list[str]:
    text = _CODE.sub("", _FENCE.sub("", body))
    return [t for t in _INLINE_TAG.findall(text) if not t.replace("/", "").isdigit()]


def first_sentence(body: str) -> str:
    """The first sentence of a note's text (headings, code and markup left out)."""
    text = _FENCE.sub("", body)
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in para.splitlines() if ln.strip() and not _HEADING.match(ln.strip())]
        if not lines:
            continue
        plain = " ".join(re.sub(r"^(?:[-*+]\s+(?:\[.\]\s+)?|>\s*|\d+[.)]\s+)", "", ln) for ln in lines)
        plain = _WIKI.sub(lambda m: m.group(2) or m.group(1), plain)
        plain = _LINK.sub(r"\1", plain).replace("**", "").replace("__", "")
        plain = " ".join(plain.split())
        if not plain or plain.startswith("|"):
            continue
        match = _SENTENCE.match(plain)
        return one_line(match.group(1) if match else plain, DESCRIPTION_CHARS)
    return ""


#: Seed 003's working page, at the workspace's top (``workspace/NOW.md``) or in its ``memory/``.
NOW_FILES = ("NOW.md", "memory/NOW.md")


def _page(origin: str, body: str, changed: dt.datetime) -> Page | Skip | Bad:
    """A workspace's ``NOW.md`` for the working page: its text without a
    frontmatter and a lone top heading (``# Now``), within the page's bound."""
    text = _HEADING.sub("", body, count=1) if re.match(r"#[ \t]", body.lstrip()) else body
    text = text.strip()
    if not text:
        return Skip(origin, "the working page is empty: nothing to take over")
    if len(text) > MAX_NOW_CHARS:
        return Bad(
            origin,
            f"{len(text):,} characters; marchdb's working page holds at most {MAX_NOW_CHARS:,}: shorten it and import "
            "again, or move its lasting facts into memories",
        )
    return Page(origin, text, changed)


def _only_headings(body: str) -> str | None:
    """Why a note's text holds nothing to remember when it is nothing but
    headings (``# Empty``), else None. Entry headings of a daily log
    (``### 09:10 - title``) are what was logged, so they count as text."""
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    headings = [m.group(1) for m in (_HEADING.match(ln) for ln in lines) if m]
    if not headings or len(headings) < len(lines) or entry_titles(body):
        return None
    shown = one_line("; ".join(headings), 100)
    what = "a heading" if len(headings) == 1 else "headings"
    return f"the note holds only {what} ({shown}), no text: nothing to remember"


def _split_frontmatter(text: str) -> tuple[dict, str]:
    """``(fields, body)``; raises ValueError for a frontmatter block that is broken."""
    if not text.startswith("---"):
        return {}, text
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return {}, text
    end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
    if end is None:
        raise ValueError("the frontmatter has no closing '---' line (a half-written file?)")
    try:
        # marchdb's own loader: no aliases (a few bytes can expand to billions of values)
        meta = yaml.load("\n".join(lines[1:end]), Loader=YAML_LOADER) or {}
    except yaml.MarkedYAMLError as exc:
        where = f" (line {exc.problem_mark.line + 2})" if exc.problem_mark else ""
        raise ValueError(f"the frontmatter is not valid YAML: {exc.problem or exc.context}{where}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"the frontmatter is not valid YAML: {' '.join(str(exc).split())[:200]}") from None
    except ValueError as exc:  # e.g. an impossible date
        raise ValueError(f"the frontmatter has a bad value: {exc}") from None
    if not isinstance(meta, dict):
        raise ValueError("the frontmatter is not a list of fields")
    return meta, "\n".join(lines[end + 1 :])


def _folder_tags(kind: str, folders: list[str]) -> list[str]:
    folders = [f for f in folders if f.lower() not in ARCHIVE_FOLDERS]
    if kind == "typed":
        tags: list[str] = []
        for part in folders:
            tags += TYPED_FOLDERS.get(part.lower(), [])
        return tags
    if kind == "workspace" and folders and folders[0].lower() == "memory":
        folders = folders[1:]
    if not folders:
        return []
    slugs = [slugify(f) for f in folders]
    mapped = WORKSPACE_FOLDERS.get(folders[0].lower()) if kind == "workspace" else None
    if mapped:
        return mapped + (["/".join([mapped[0], *slugs[1:]])] if len(slugs) > 1 else [])
    return ["/".join(slugs)]


def _special(kind: str, rel: str) -> str | None:
    """Why a file of a known layout is not a memory (None: it is one)."""
    name = rel.rsplit("/", 1)[-1]
    if kind == "workspace" and rel in ("AGENTS.md", "HEARTBEAT.md"):
        return f"{name} is the agent's operating manual, not a memory; put what matters into marchdb's agent profile"
    if kind == "workspace" and name == "INDEX.md":
        return "INDEX.md is a table of contents of the notes; marchdb's index takes its place"
    if kind == "typed" and name == "MEMORY.md":
        return "MEMORY.md is an index of the typed notes; marchdb's index takes its place"
    return None


def _time_of(meta: dict, *keys: str) -> dt.datetime | None:
    for key in keys:
        parsed = parse_time(meta.get(key))
        if parsed is not None:
            return parsed
    return None


def _day_of(text: str) -> dt.date | None:
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:  # 2026-02-30.md: an ordinary note
        return None
    # 9999-12-31.md: its times would leave the calendar in some time zones
    return day if in_calendar(dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC)) else None


def _entry_time(day: dt.date, body: str, last: bool = False) -> dt.datetime:
    """The local time of a daily log's first (or ``last``) ``### HH:MM``
    entry (noon without one)."""
    entries = re.findall(r"^### (\d{1,2}):(\d\d)", body, re.M)
    try:
        hour, minute = map(int, entries[-1 if last else 0]) if entries else (12, 0)
        return dt.datetime(day.year, day.month, day.day, hour, minute).astimezone()
    except ValueError:  # ### 25:99
        return dt.datetime(day.year, day.month, day.day, 12, 0).astimezone()


def note_item(base: Path, rel: str, kind: str) -> Found:
    """One Markdown file of a folder import as an ``Item``, ``Skip``, ``Bad``
    or (a workspace's ``NOW.md``) ``Page``."""
    origin = rel
    reason = _special(kind, rel)
    if reason:
        return Skip(origin, reason)
    try:
        # Regular files only, never through a link, never blocking on a FIFO.
        data, st = read_file(base / rel, MAX_FILE_BYTES, root=base)
    except OSError as exc:
        return Bad(origin, unreadable(exc))
    if len(data) > MAX_FILE_BYTES:
        return Bad(origin, f"{st.st_size:,} bytes; a memory is limited to {MAX_FILE_BYTES:,}: split it first")
    if b"\x00" in data[:8192]:
        return Bad(origin, "a binary file named .md")
    try:
        text = unix_line_ends(data.decode("utf-8").lstrip("\ufeff"))
    except UnicodeDecodeError as exc:
        return Bad(origin, f"not UTF-8 at byte {exc.start}; re-save it as UTF-8")
    try:
        meta, body = _split_frontmatter(text)
    except ValueError as exc:
        return Bad(origin, str(exc))
    if kind == "workspace" and rel in NOW_FILES:
        return _page(origin, body, dt.datetime.fromtimestamp(st.st_mtime, dt.UTC))
    if meta.get("id") not in (None, ""):
        return Skip(
            origin,
            f"it already has an id ({str(meta['id'])[:60]}): it is a marchdb memory; copy the file into the memory root instead",
        )
    body = body.strip("\n")
    if not body.strip() and not meta.get("description"):
        return Skip(origin, "the note is empty")
    if not meta.get("description") and (only := _only_headings(body)):
        # Its description would be its name: a memory with nothing to remember,
        # whose hint line matches any message about its title. (A daily log's
        # entry headings are what was logged: not "only headings".)
        return Skip(origin, only)
    folders = rel.split("/")[:-1]
    stem = rel.rsplit("/", 1)[-1][:-3]
    day_match = _DAY_FILE.match(rel.rsplit("/", 1)[-1])
    mtime = dt.datetime.fromtimestamp(st.st_mtime, dt.UTC)
    (tags_a, rejected_a), (tags_b, rejected_b) = normalize_tags(meta.get("tags")), normalize_tags(meta.get("tag"))
    tags_raw, rejected = tags_a + tags_b, rejected_a + rejected_b
    if isinstance(meta.get("type"), str):
        tags_raw += TYPED_FOLDERS.get(meta["type"].strip().lower(), [meta["type"]])
    tags_raw += _folder_tags(kind, folders) + _inline_tags(body)
    created = _time_of(meta, "created_at", "created", "date")
    updated = _time_of(meta, "updated_at", "updated", "modified")
    want_id = slug = None
    day = _day_of(day_match.group(1)) if day_match and not meta.get("name") and not meta.get("title") else None
    if day is not None:
        # A daily log (seed 003: YYYY-MM-DD.md with ### HH:MM - title entries).
        titles = entry_titles(body)
        created = created or _entry_time(day, body)
        # Its day says when it was written; the file's time says when it was
        # copied (a cloned workspace is all "today", and `maintain` would
        # never see an old log as old).
        updated = updated or max(created, _entry_time(day, body, last=True))
        name, want_id, slug = log_name(day), log_id(day), LOG_TAG
        description = describe(day, titles) if titles else (first_sentence(body) or describe(day, []))
        tags_raw.append(LOG_TAG)
    else:
        heading = _HEADING.search(body)
        name = first_text(
            meta.get("name"),
            meta.get("title"),
            heading.group(1) if heading else None,
            re.sub(r"[-_]+", " ", stem),
            stem,
            limit=MAX_NAME_CHARS,
        )
        described = meta.get("description")
        description = (
            described if isinstance(described, str) and first_text(described, limit=DESCRIPTION_CHARS) else None
        ) or first_sentence(body)
        if not description:
            description = one_line(name, DESCRIPTION_CHARS)
    warnings: list[str] = []
    if rejected:
        warnings.append(
            f"tags left out, not valid tags: {', '.join(rejected)} (letters, digits and '/', '-', '_', '.', '+', '#')"
        )
    status = "archived" if any(f.lower() in ARCHIVE_FOLDERS for f in folders) else "active"
    extra = {k: v for k, v in meta.items() if k not in _CONSUMED}
    for key in _TIME_KEYS:
        # A date marchdb cannot read ("Jan 5, 2024") is kept as written, not dropped.
        if meta.get(key) is not None and parse_time(meta[key]) is None:
            extra[key if key not in ("created_at", "updated_at") else f"original_{key}"] = meta[key]
    for key in ("status", "source"):
        value = meta.get(key)
        if value is not None and not (key == "status" and isinstance(value, str) and value.strip().lower() in STATUSES):
            extra[f"original_{key}"] = value
    if "priority" in extra and priority_value(extra["priority"]) is None:  # another tool's words for it
        extra["original_priority"] = extra.pop("priority")
    # Another tool's ids (an ADR's "[[adr-0003]]"): imported notes get new ones.
    for key in ("supersedes", "conflicts_with"):
        if key in extra:
            extra[f"original_{key}"] = extra.pop(key)
    if isinstance(meta.get("status"), str) and meta["status"].strip().lower() in STATUSES and status == "active":
        status = meta["status"].strip().lower()
    return Item(
        source="",
        origin=origin,
        name=one_line(name, MAX_NAME_CHARS),
        description=one_line(description, DESCRIPTION_CHARS),
        body=body if body.strip() else description,
        tags=clean_tags(tags_raw, kind if kind != "obsidian" else "imported", warnings),
        created=created or mtime,
        updated=updated or (mtime if created and mtime > created else None),
        status=status,
        want_id=want_id,
        slug=slug,
        extra=extra,
        warnings=warnings,
        changed=mtime,
    )


def walk_notes(base: Path, kind: str, skip: Path | None = None) -> Iterator[str | Bad | Skip]:
    """Relative paths of the ``.md`` files under ``base`` (sorted; hidden
    folders left out except seed 003's ``.archive``; symlinks reported, never
    followed; the folder ``skip`` — the memory root inside a vault — left out)."""
    skip_real = os.path.realpath(skip) if skip is not None else None
    for folder, dirs, files in os.walk(base, followlinks=False):
        rel_dir = os.path.relpath(folder, base)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        keep = []
        for d in sorted(dirs):
            full = os.path.join(folder, d)
            if os.path.islink(full):
                yield Bad(rel_dir + d, "a symlink; links are not followed")
            elif os.path.realpath(full) in VIRTUAL_TREES:
                continue  # /proc and friends mounted below the source: endless, never notes
            elif skip_real is not None and os.path.realpath(full) == skip_real:
                yield Skip(rel_dir + d, "the memory root: its memories are indexed already")
            elif not d.startswith(".") or (d.lower() == ".archive" and kind == "workspace"):
                keep.append(d)
        dirs[:] = keep
        for name in sorted(files):
            if name.startswith(".") or not name.lower().endswith(".md"):
                continue
            if os.path.islink(os.path.join(folder, name)):
                yield Bad(rel_dir + name, "a symlink; links are not followed")
                continue
            yield rel_dir + name


def read_notes(base: Path, kind: str, skip: Path | None = None) -> Iterator[Found]:
    """Every note of a folder import (``skip``: a folder to leave out)."""
    if base.is_file():
        items: Iterator[str | Bad | Skip] = iter([base.name])
        base = base.parent
    else:
        items = walk_notes(base, kind, skip)
    # The real path: the same folder reached through '..' or a link is one source.
    real = Path(os.path.realpath(base))
    for rel in items:
        if isinstance(rel, (Bad, Skip)):
            yield rel
            continue
        try:
            found = note_item(base, rel, kind)
        except SHAPE_ERRORS as exc:
            found = Bad(rel, f"could not be read as a note: {type(exc).__name__}: {exc}")
        if isinstance(found, Item):
            # The file's absolute path: two folders of one name are two
            # sources, and a subfolder or one file of a folder imported
            # before is the same source (not a second copy).
            found.source = f"{kind}:{real / rel}"
            found.legacy_source = f"{kind}:{base.name}/{rel}"
            found.aliases = tuple(f"{other}:{real / rel}" for other in NOTE_KINDS if other != kind)
        yield found
