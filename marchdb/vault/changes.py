"""What a ``memory_save`` asks for, checked: the fields, their bounds, the changes to make.

A new memory needs ``name``, ``description``, ``body`` and at least one valid
tag; an update changes only the fields passed (``tags`` replace the old
ones). Bounds: ``MAX_NAME_CHARS``, ``MAX_DESCRIPTION_CHARS`` (one line each),
``MAX_BODY_BYTES``. Pure: values in, a ``Changes`` out.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, replace

from marchdb.errors import InvalidInput, check_text
from marchdb.text import DIRECTION_CONTROLS, unix_line_ends
from marchdb.vault.notes import (
    ID_FIELDS,
    MAX_SUPERSEDES,
    MAX_TAG_CHARS,
    MAX_TAGS,
    STATUSES,
    Note,
    field_ids,
    normalize_tags,
    priority_value,
    read_ids,
)

#: Rounds of re-applying an update onto a file that keeps changing under us.
RACE_RETRIES = 5
#: Largest ``-N`` suffix tried for a taken file name.
MAX_NAME_SUFFIX = 1000


#: Longest name accepted, in characters (the name is a short title).
MAX_NAME_CHARS = 200


#: Longest description accepted, in characters (it is a one-line hint).
MAX_DESCRIPTION_CHARS = 1000


#: Largest body a save accepts, in UTF-8 bytes: every 800 characters are one
#: chunk to embed (a 300 KB body held the MCP server for two minutes). A
#: memory is a note; longer texts belong in several memories. Files written
#: by hand are indexed up to ``notes.MAX_FILE_BYTES``.
MAX_BODY_BYTES = 64 * 1024


@dataclass
class Changes:
    """Validated field values from a caller; ``None`` means "not passed"."""

    name: str | None = None
    description: str | None = None
    body: str | None = None
    tags: list[str] | None = None
    status: str | None = None
    priority: str | None = None  # the ``priority:`` field (an extra field of the file)
    supersedes: list[str] | None = None  # the ``supersedes:`` field ([] removes it)
    conflicts_with: list[str] | None = None  # the ``conflicts_with:`` field ([] removes it)

    def complete(self) -> bool:
        """Whether every field a new memory needs was passed."""
        return None not in (self.name, self.description, self.body, self.tags)

    def new_note(self) -> Note | list[str]:
        """A new memory from these values (id and times still to set), or the
        names of the fields it lacks."""
        if self.name is None or self.description is None or self.body is None or self.tags is None:
            return [f for f in ("name", "description", "body", "tags") if getattr(self, f) is None]
        return Note(
            id="",
            name=self.name,
            description=self.description,
            tags=list(self.tags),
            status=self.status or "active",
            created_at=None,
            updated_at=None,
            body=self.body,
            extra=self._extra({}),
        )

    def _extra(self, extra: dict) -> dict:
        """``extra`` (a file's fields beyond the seed's) with the passed
        ``priority``, ``supersedes`` and ``conflicts_with`` (an empty list removes the field)."""
        out = dict(extra)
        if self.priority is not None:
            out["priority"] = self.priority
        for key in ID_FIELDS:
            ids = getattr(self, key)
            if ids is not None:
                out.pop(key, None)
                if ids:
                    out[key] = ids if len(ids) > 1 else ids[0]
        return out

    def differences(self, note: Note) -> list[str]:
        """Names of the passed fields whose value differs from ``note``'s."""
        out = []
        if self.name is not None and self.name != note.name:
            out.append("name")
        if self.description is not None and self.description != note.description:
            out.append("description")
        if self.body is not None and norm_body(self.body) != norm_body(note.body):
            out.append("body")
        if self.tags is not None and self.tags != note.tags:
            out.append("tags")
        if self.status is not None and self.status != note.status:
            out.append("status")
        if self.priority is not None and self.priority != note.extra.get("priority"):
            out.append("priority")
        for key in ID_FIELDS:
            ids = getattr(self, key)
            if ids is not None and (
                ids != field_ids(note.extra.get(key), key)
                or (not ids and key in note.extra)  # [] clears even a value that names no id
            ):
                out.append(key)
        return out

    def apply(self, note: Note, raw_tags: object, now: str | None) -> Note:
        """``note`` with the passed fields replaced and ``updated_at`` = ``now``
        (the caller passes the note's own to keep it).

        When tags are not passed and the file's own tag list means the same
        tags, that list is written back as the user wrote it (their spelling,
        and entries marchdb ignores), so an update never rewrites what it was
        not asked to change.
        """
        tags = self.tags
        if tags is None:
            keep_raw = isinstance(raw_tags, list) and normalize_tags(raw_tags)[0] == note.tags
            tags = list(raw_tags) if keep_raw and isinstance(raw_tags, list) else list(note.tags)
        return replace(
            note,
            name=self.name if self.name is not None else note.name,
            description=self.description if self.description is not None else note.description,
            body=self.body if self.body is not None else note.body,
            tags=tags,
            status=self.status if self.status is not None else note.status,
            updated_at=now,
            extra=self._extra(note.extra),
            problems=[],
        )


def norm_body(body: str) -> str:
    """A body as compared for "is it the same text": leading and trailing
    blank lines are not content (render_note drops them too), and a CRLF
    file's body means the same as the caller's "\\n" text."""
    return body.replace("\r\n", "\n").strip("\n").rstrip()


def _text(value: object, field: str, limit: int | None, one_line: bool) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInput(f"{field} holds a NUL character; memories are plain text")
    check_text(value, field)
    # A lone CR (a progress bar's output) would make a file that cannot be edited in place.
    text = " ".join(value.split()) if one_line else unix_line_ends(value)
    if one_line and not text.isprintable() and any(unicodedata.category(c) == "Cc" for c in text):
        raise InvalidInput(f"{field} holds a control character (an escape sequence?); a {field} is plain text")
    if one_line and not DIRECTION_CONTROLS.isdisjoint(text):
        raise InvalidInput(
            f"{field} holds a text-direction control (U+202A-U+202E, U+2066-U+2069), which makes it read "
            f"as something else; a {field} is plain text"
        )
    if not text.strip():
        raise InvalidInput(
            f"{field} is empty; give some text (an update keeps the current {field} when it is left out)"
        )
    if limit is not None and len(text) > limit:
        raise InvalidInput(f"{field} is {len(text)} characters; the limit is {limit}, put details in the body")
    return text


def validate_changes(
    name: object = None,
    description: object = None,
    body: object = None,
    tags: object = None,
    status: object = None,
    priority: object = None,
    supersedes: object = None,
    conflicts_with: object = None,
) -> Changes:
    """Check and normalise caller input; raise ``InvalidInput`` on anything bad.

    Name and description become single lines. Tags follow seed 000's rules
    (``notes.normalize_tags``); any tag that is not valid is an error rather
    than silently dropped, and a list that normalises to nothing is an error.
    """
    changes = Changes(
        name=_text(name, "name", MAX_NAME_CHARS, one_line=True),
        description=_text(description, "description", MAX_DESCRIPTION_CHARS, one_line=True),
        body=_text(body, "body", None, one_line=False),
    )
    if changes.body is not None and len(changes.body.encode("utf-8")) > MAX_BODY_BYTES:
        raise InvalidInput(
            f"body is {len(changes.body.encode('utf-8')):,} bytes; a memory body is limited to "
            f"{MAX_BODY_BYTES:,} bytes; split it into several memories"
        )
    if tags is not None:
        if not isinstance(tags, (list, tuple, str)):
            raise InvalidInput(f"invalid tags: {tags!r}"[:200] + "; pass tags as a list of strings")
        # Counted after de-duplication below ("t" sixty times is one tag); this
        # bound only keeps 20,000 given tags from costing minutes.
        if isinstance(tags, (list, tuple)) and len(tags) > MAX_TAGS * 10:
            raise InvalidInput(f"{len(tags)} tags; a memory has at most {MAX_TAGS}, keep the telling ones")
        for tag in tags if isinstance(tags, (list, tuple)) else []:
            if isinstance(tag, str) and len(tag.strip()) > MAX_TAG_CHARS:  # say so, not "bad characters"
                raise InvalidInput(f"tag {tag[:30]!r}... is {len(tag)} characters; the limit is {MAX_TAG_CHARS}")
        normalised, rejected = normalize_tags(tags)
        if rejected:
            raise InvalidInput(
                f"invalid tags: {', '.join(rejected)[:200]}; a tag holds letters, digits, '/ - _ . + #' and a name's middle dot '·' "
                "(pass tags as a list of strings)"
            )
        if not normalised:
            raise InvalidInput('tags are empty; give at least one tag, e.g. ["project/name", "topic"]')
        if len(normalised) > MAX_TAGS:
            raise InvalidInput(f"{len(normalised)} tags; a memory has at most {MAX_TAGS}, keep the telling ones")
        changes.tags = normalised
    if status is not None:
        if not isinstance(status, str) or status.strip().lower() not in STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(STATUSES)}, got {str(status)[:40]!r}")
        changes.status = status.strip().lower()
    if priority is not None:
        if not isinstance(priority, str) or priority_value(priority) is None:
            raise InvalidInput(f"priority must be high, normal or low, got {str(priority)[:40]!r}")
        changes.priority = priority.strip().lower()
    for key, raw, what in (
        ("supersedes", supersedes, "replaces"),
        ("conflicts_with", conflicts_with, "contradicts"),
    ):
        if raw is None:
            continue
        values = list(raw) if isinstance(raw, tuple) else raw
        if isinstance(values, list) and len(values) > MAX_SUPERSEDES:
            raise InvalidInput(f"{key} names {len(values)} ids; a memory {what} at most {MAX_SUPERSEDES}")
        ids, problems = read_ids(values, key)
        if problems:
            raise InvalidInput(f"{problems[0]}; pass the ids of the memories this one {what}")
        setattr(changes, key, ids)
    return changes
