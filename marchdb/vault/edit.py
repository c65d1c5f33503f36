"""Editing a memory file in place, keeping its layout (``memory_save`` updates).

An update rewrites only the lines of the fields it changes (and
``updated_at``): the user's comments, key order, quoting, list styles,
unknown keys, a byte-order mark, CRLF line ends and a ``---  `` fence stay
byte for byte. A frontmatter this cannot edit line by line is left alone
and the reason is given; rewriting it whole would silently drop comments
and reformat values (``yes`` → ``true``). Pure: text in, text out.
"""

from __future__ import annotations

import re

import yaml

from marchdb.vault.notes import (
    FIELD_ORDER,
    MAX_TAGS,
    YAML_LOADER,
    BadNote,
    Note,
    normalize_tags,
    parse_note,
    render_field,
)


def _field_spans(head: list[str], why: list[str]) -> dict[str, tuple[int, int]] | None:
    """Line ranges ``[start, stop)`` of each top-level field of a frontmatter
    block (its key line and its value's lines, without trailing blank or
    comment lines), from YAML's own node positions. None (and the reason in
    ``why``) for layouts not to be edited line by line: flow mappings,
    complex or duplicate keys."""
    try:
        # The loader sync reads files with (libyaml when built in: it takes a tab
        # after "name:", which the pure-Python one refuses).
        node = yaml.compose("\n".join(head), Loader=YAML_LOADER)
    except (yaml.YAMLError, RecursionError):
        why.append("the frontmatter is not valid YAML")
        return None
    if not isinstance(node, yaml.MappingNode) or node.flow_style:
        why.append("the frontmatter is one {...} mapping rather than one field per line")
        return None
    spans: dict[str, tuple[int, int]] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value in spans or key.start_mark.column != 0:
            why.append(f"the field {getattr(key, 'value', '?')!r} is written twice, indented or not plain text")
            return None
        start = key.start_mark.line
        stop = value.end_mark.line + (1 if value.end_mark.column > 0 else 0)
        while stop > start + 1 and (not head[stop - 1].strip() or head[stop - 1].lstrip().startswith("#")):
            stop -= 1
        spans[key.value] = (start, stop)
    return spans


#: A frontmatter fence as ``parse_note`` accepts it: three or more dashes,
#: trailing spaces allowed.
_FENCE = re.compile(r"-{3,}[ \t]*")


def edit_note(text: str, new: Note, fields: list[str], why: list[str] | None = None, stamp: bool = True) -> str | None:
    """``text`` (a memory file) with only ``fields`` (and ``updated_at``,
    unless ``stamp`` is False) rewritten from ``new``; comments, key order, quoting, flow lists and
    unknown keys elsewhere stay byte for byte, and so do a byte-order mark,
    CRLF (or mixed) line ends and a fence written ``---  ``: new lines end
    like the opening fence. ``"body"`` in ``fields`` replaces the body. None
    when the file's layout is not one this can edit safely (the reason goes
    to ``why`` when given); the result is parsed back and must hold exactly
    ``new``.
    """
    why = [] if why is None else why
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    raw = text[len(bom) :].split("\n")
    # Each line keeps its own "\r" (CRLF files); YAML and the fences are read without it.
    bare = [line[:-1] if line.endswith("\r") else line for line in raw]
    if any("\r" in line for line in bare):
        why.append("a line ends with a lone carriage return (old Mac line ends)")
        return None
    if not _FENCE.fullmatch(bare[0]):
        why.append("the file does not start with a '---' line")
        return None
    end = next((i for i in range(1, len(bare)) if _FENCE.fullmatch(bare[i])), None)
    if end is None:
        why.append("the frontmatter has no closing '---' line")
        return None
    eol = "\r" if raw[0].endswith("\r") else ""
    spans = _field_spans(bare[1:end], why)
    if spans is None:
        return None
    head = raw[1:end]
    keys = [f for f in fields if f != "body"] + (["updated_at"] if stamp else [])
    # Bottom-up, so the spans above stay valid; fields not there go last.
    for key in sorted((k for k in keys if k in spans), key=lambda k: -spans[k][0]):
        start, stop = spans[key]
        if key not in FIELD_ORDER and key not in new.extra:  # an extra field removed (``supersedes: []``)
            del head[start:stop]
            continue
        lines = render_field(key, _value(new, key))
        comment = _inline_comment(bare[1 + start]) if stop - start == 1 else None
        if comment and len(lines) == 1:  # `status: deprecated  # retired` keeps its note
            lines = [f"{lines[0]}  {comment}"]
        head[start:stop] = [line + eol for line in lines]
    for key in (k for k in keys if k not in spans and (k in FIELD_ORDER or k in new.extra)):
        head.extend(line + eol for line in render_field(key, _value(new, key)))
    if "body" in fields:
        body = new.body if new.body.endswith("\n") else new.body + "\n"
        body = body.lstrip("\n")
        if eol:
            body = body.replace("\r\n", "\n").replace("\n", "\r\n")
        rest = eol + "\n" + body
    else:
        rest = "\n".join(raw[end + 1 :])
    out = bom + "\n".join([raw[0], *head, raw[end]]) + "\n" + rest
    try:
        back = parse_note(out.encode("utf-8"))
    except BadNote:
        why.append("the edited file would not read back")
        return None
    same = (back.id, back.name, back.description, back.status, back.created_at, back.updated_at) == (
        new.id,
        new.name,
        new.description,
        new.status,
        new.created_at,
        new.updated_at,
    )
    same = same and back.tags == normalize_tags(new.tags)[0][:MAX_TAGS] and _same_body(back.body, new.body)
    if same and back.extra == new.extra:
        return out
    why.append("the edited file would not read back with exactly the new values")
    return None


def _inline_comment(line: str) -> str | None:
    """The ``# comment`` ending a one-line ``key: value`` (None without one):
    what follows the value's last token, as YAML's scanner reads the line
    (so a ``#`` inside a quoted value is no comment). One pass: a line of
    many ``#`` costs no more than a short one."""
    if "#" not in line:
        return None
    try:
        tokens = [
            t
            for t in yaml.scan(line, Loader=yaml.SafeLoader)
            if not isinstance(t, (yaml.StreamEndToken, yaml.BlockEndToken))
        ]
    except yaml.YAMLError:
        return None
    end = max((t.end_mark.index for t in tokens), default=0)
    rest = line[end:]
    return rest.strip() if rest[:1] in (" ", "\t") and rest.strip().startswith("#") else None


def _value(note: Note, key: str) -> object:
    """A field's value: one of the seed's fields, or an extra one (``priority``)."""
    return note.extra[key] if key in note.extra and key not in FIELD_ORDER else getattr(note, key)


def _same_body(a: str, b: str) -> bool:
    return a.replace("\r\n", "\n").strip() == b.replace("\r\n", "\n").strip()
