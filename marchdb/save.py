"""``memory_save``: create or update one Markdown memory, safely.

Rules (seed 000, "主动回忆工具"):

* A new memory needs ``name``, ``description``, ``body`` and at least one
  valid tag. It gets an id (``notes.new_id``) unless the caller names one,
  and a file at the time-bucket path ``YYYY/MM/weekN/YYYY-MM-DD-slug.md``
  (the local calendar day, since file names are for people browsing the
  vault); a taken name gets ``-2``, ``-3``... and no file is ever overwritten.
* An update (the id exists) changes only the fields passed; ``tags``
  replace the old ones; ``created_at`` and any extra frontmatter fields the
  user added are kept; ``updated_at`` is set; the file stays where it is.
  Identical values write nothing (status ``unchanged``).
* Reconcile before writing (seed 003): a new memory whose name equals an
  active memory's name (ignoring case), or whose metadata is nearly the same
  text as one (when a model is loaded), is not written; the caller is told
  which memory to update instead, or to pass ``force=True``.

Safety:

* Every write goes to a temp file in the target folder (named
  ``.marchdb-tmp-*.md``: hidden, so sync, the watcher and search ignore it),
  is fsynced, then moved into place; the folder is fsynced afterwards.
* New files are placed with ``os.link`` (fails if the name exists), so two
  programs creating the same slug can never overwrite each other.
* Saves hold ``db.writer_lock`` from reading the index to re-indexing the
  file, so concurrent saves from several processes serialise.
* Race with a person editing the file (Obsidian, an editor): the file's
  bytes are read again just before the replace. If they changed since the
  update was computed, the update is re-applied onto the newest content
  (our change is a set of field assignments, so re-applying it is well
  defined and keeps the person's edit). After ``RACE_RETRIES`` rounds of a
  file that keeps changing, nothing is written and the caller is told to
  retry. What remains is the sub-millisecond window between that last read
  and ``os.replace``, which no file system lets us close without the
  editor's co-operation.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import secrets
import stat
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import db
from .errors import Conflict, InvalidInput, MarchError
from .notes import (
    MAX_FILE_BYTES,
    BadNote,
    Note,
    bucket_path,
    edit_note,
    format_time,
    metadata_text,
    new_id,
    normalize_tags,
    parse_note,
    render_note,
    slugify,
    utc_now_iso,
    validate_id,
)

SAVE_TOOL_DESCRIPTION = (
    "Create or update a Markdown memory file. To create one, pass name (a short human title), "
    "description (one sentence: the short text shown in passive recall hints, so say what the "
    "memory is about), body (the memory itself, Markdown) and tags (at least one: lowercase "
    "words, '/', '-' and '_' allowed, e.g. project/march-cli, cache). To update one, pass its id "
    "and only the fields to change: omitted fields keep their values, and tags, when given, "
    "replace all old tags. Set status to 'deprecated' to retire a memory. If a memory with the "
    "same name already exists, nothing is written and you get its id: update that memory "
    "instead, or pass force=true if a second memory is really wanted. The index is refreshed "
    "before this returns."
)

#: Longest name accepted, in characters (the name is a short title).
MAX_NAME_CHARS = 200
#: Longest description accepted, in characters (it is a one-line hint).
MAX_DESCRIPTION_CHARS = 1000
#: Values of ``status`` a caller may set (seed 000).
STATUSES = ("active", "deprecated")
#: Cosine similarity of metadata vectors above which a new memory is a near-duplicate.
#: Deliberately high: raw cosines of unrelated texts reach 0.8-0.9 with e5,
#: so only a restatement of the same memory should pass this.
DUPLICATE_COSINE = 0.97
#: Rounds of re-applying an update onto a file that keeps changing under us.
RACE_RETRIES = 5
#: Largest ``-N`` suffix tried for a taken file name.
MAX_NAME_SUFFIX = 1000
TEMP_PREFIX = ".marchdb-tmp-"


# ---------------------------------------------------------------- input


@dataclass
class Changes:
    """Validated field values from a caller; ``None`` means "not passed"."""

    name: str | None = None
    description: str | None = None
    body: str | None = None
    tags: list[str] | None = None
    status: str | None = None

    def differences(self, note: Note) -> list[str]:
        """Names of the passed fields whose value differs from ``note``'s."""
        out = []
        if self.name is not None and self.name != note.name:
            out.append("name")
        if self.description is not None and self.description != note.description:
            out.append("description")
        if self.body is not None and _norm_body(self.body) != _norm_body(note.body):
            out.append("body")
        if self.tags is not None and self.tags != note.tags:
            out.append("tags")
        if self.status is not None and self.status != note.status:
            out.append("status")
        return out

    def apply(self, note: Note, raw_tags: object, now: str) -> Note:
        """``note`` with the passed fields replaced and ``updated_at`` = ``now``.

        When tags are not passed and the file's own tag list means the same
        tags, that list is written back as the user wrote it (their spelling,
        and entries marchdb ignores), so an update never rewrites what it was
        not asked to change.
        """
        tags = self.tags
        if tags is None:
            keep_raw = isinstance(raw_tags, list) and normalize_tags(raw_tags)[0] == note.tags
            tags = list(raw_tags) if keep_raw else list(note.tags)
        return replace(
            note,
            name=self.name if self.name is not None else note.name,
            description=self.description if self.description is not None else note.description,
            body=self.body if self.body is not None else note.body,
            tags=tags,
            status=self.status if self.status is not None else note.status,
            updated_at=now,
            problems=[],
        )


def _norm_body(body: str) -> str:
    # Leading/trailing blank lines are not content (render_note drops them too).
    return body.strip("\r\n").rstrip()


def _text(value: object, field: str, limit: int | None, one_line: bool) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInput(f"{field} holds a NUL character; memories are plain text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{field} holds characters that are not valid Unicode (lone surrogates)") from None
    text = " ".join(value.split()) if one_line else value
    if not text.strip():
        raise InvalidInput(f"{field} is empty; give some text (or leave it out to keep the current value)")
    if limit is not None and len(text) > limit:
        raise InvalidInput(f"{field} is {len(text)} characters; the limit is {limit}, put details in the body")
    return text


def validate_changes(
    name: object = None,
    description: object = None,
    body: object = None,
    tags: object = None,
    status: object = None,
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
    if changes.body is not None and len(changes.body.encode("utf-8")) > MAX_FILE_BYTES:
        raise InvalidInput(
            f"body is {len(changes.body.encode('utf-8')):,} bytes; a memory file is limited to "
            f"{MAX_FILE_BYTES:,} bytes; split it into several memories"
        )
    if tags is not None:
        normalised, rejected = normalize_tags(tags)
        if rejected:
            raise InvalidInput(
                f"invalid tags: {', '.join(rejected)[:200]}; a tag holds letters, digits, '/', '-' or '_' "
                "(pass tags as a list of strings)"
            )
        if not normalised:
            raise InvalidInput("tags are empty; give at least one tag, e.g. [\"project/name\", \"topic\"]")
        changes.tags = normalised
    if status is not None:
        if not isinstance(status, str) or status.strip().lower() not in STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        changes.status = status.strip().lower()
    return changes


def _render(note: Note) -> bytes:
    return _checked_size(render_note(note).encode("utf-8"))


def _checked_size(data: bytes) -> bytes:
    if len(data) > MAX_FILE_BYTES:
        raise InvalidInput(
            f"the memory would be {len(data):,} bytes; a memory file is limited to {MAX_FILE_BYTES:,} bytes "
            "including its frontmatter; shorten the body or split it into several memories"
        )
    return data


# ---------------------------------------------------------------- files


def _fsync_dir(folder: Path) -> None:
    if os.name == "nt":
        return  # directories cannot be opened for fsync there; NTFS journals renames
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems (certain FUSE and network mounts) reject fsync on
        # a directory; the data itself is already synced.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_temp(folder: Path, data: bytes, mode: int | None = None) -> Path:
    """Write ``data`` to a new hidden temp file in ``folder`` and fsync it.

    ``mode`` None creates the file with the process umask (like any new
    file); otherwise the file gets exactly ``mode`` (an update keeps the
    permissions of the file it replaces).
    """
    while True:
        tmp = folder / f"{TEMP_PREFIX}{secrets.token_hex(8)}.md"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        break
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _place_new(tmp: Path, target: Path) -> bool:
    """Give ``tmp``'s content the name ``target`` unless that name exists.

    Returns False when the name is taken. ``os.link`` is atomic and fails on
    an existing name; on file systems without hard links an ``O_EXCL``
    placeholder claims the name first and is then replaced (readers may see
    an empty file for a moment, which sync reports and re-reads).
    """
    try:
        os.link(tmp, target)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except FileExistsError:
        return False
    os.replace(tmp, target)
    return True


def create_file(root: Path, note: Note, when: dt.datetime) -> str:
    """Write ``note`` as a new file at its time-bucket path under ``root``.

    Returns the relative path. A taken name gets ``-2``, ``-3``...; an
    existing file is never overwritten.
    """
    data = _render(note)
    rel = bucket_path(when, slugify(note.name))
    folder = root / rel.parent
    folder.mkdir(parents=True, exist_ok=True)
    stem = rel.name[: -len(".md")]
    tmp = write_temp(folder, data)
    try:
        for n in range(1, MAX_NAME_SUFFIX + 1):
            name = f"{stem}.md" if n == 1 else f"{stem}-{n}.md"
            target = folder / name
            if os.path.lexists(target):
                continue
            if _place_new(tmp, target):
                _fsync_dir(folder)
                return str(rel.parent / name)
        raise MarchError(f"{MAX_NAME_SUFFIX} files named {stem}*.md exist in {folder}; choose another name")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _raw_tags(data: bytes) -> object:
    """The ``tags`` value exactly as the file's YAML holds it (None if unreadable)."""
    import frontmatter
    import yaml

    handler = frontmatter.YAMLHandler()
    try:
        text = data.decode("utf-8").lstrip("\ufeff")
        meta = handler.load(handler.split(text)[0])
    except (UnicodeDecodeError, ValueError, yaml.YAMLError):
        return None
    return meta.get("tags") if isinstance(meta, dict) else None


def _parse_existing(data: bytes, path: Path, mem_id: str) -> Note:
    try:
        note = parse_note(data, path.stem)
    except BadNote as bad:
        raise MarchError(
            f"cannot update {path}: {bad.problem.kind}: {bad.problem.detail}; fix the file by hand, then save again"
        ) from None
    if note.id != mem_id:
        raise MarchError(
            f"{path} now holds id {note.id!r}, not {mem_id!r} (it was edited while saving); nothing was written, "
            "call memory_save again"
        )
    return note


def _read(path: Path, mem_id: str) -> tuple[bytes, os.stat_result]:
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise MarchError(
            f"{path} (memory {mem_id}) was moved or deleted while saving; nothing was written, call memory_save again"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise MarchError(f"{path} is larger than {MAX_FILE_BYTES:,} bytes; it is not a memory any more, fix it by hand")
    return data, st


def update_file(path: Path, mem_id: str, changes: Changes, base: bytes, now: str) -> tuple[str, Note, list[str]]:
    """Apply ``changes`` to the memory file ``path`` in place.

    ``base`` is the file content the caller read (and looked at). The
    update is computed from it; just before the replace the file is read
    again, and if it no longer holds what the update was computed from (a
    person edited it meanwhile), the update is re-applied onto the newest
    content, up to ``RACE_RETRIES`` times. Returns ``(status, note,
    changed_fields)`` with status ``updated`` or ``unchanged``.
    """
    current = base
    mode = stat.S_IMODE(os.stat(path).st_mode)
    for _ in range(RACE_RETRIES):
        note = _parse_existing(current, path, mem_id)
        changed = changes.differences(note)
        if not changed:
            # Nothing to write; still make sure we judged the file's newest content.
            latest, _ = _read(path, mem_id)
            if latest == current:
                return "unchanged", note, []
            current = latest
            continue
        new = changes.apply(note, _raw_tags(current), now)
        # Only the changed lines are rewritten (the user's comments, key order
        # and list styles stay); a layout too unusual to edit safely is
        # rendered whole instead.
        edited = edit_note(current.decode("utf-8"), new, changed)
        data = _render(new) if edited is None else _checked_size(edited.encode("utf-8"))
        tmp = write_temp(path.parent, data, mode)
        try:
            latest, st = _read(path, mem_id)
            mode = stat.S_IMODE(st.st_mode)
            if latest != current:
                current = latest  # edited under us: re-apply onto the edit
                continue
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(path.parent)
        return "updated", new, changed
    raise MarchError(
        f"{path} kept changing while saving (edited by another program); nothing was written, "
        "call memory_save again when the edits stop"
    )


# ---------------------------------------------------------------- reconcile


def find_same_name(con, name: str) -> dict | None:
    """An active memory whose name equals ``name`` ignoring case, or None."""
    if name.isascii():
        row = con.execute(
            "SELECT id, path, name FROM memory_index WHERE lower(name) = lower(?) AND status = 'active' "
            "ORDER BY id LIMIT 1",
            (name,),
        ).fetchone()
    else:
        # SQLite's lower() folds ASCII letters only; fold the rest in Python.
        folded = name.casefold()
        row = next(
            (
                r
                for r in con.execute("SELECT id, path, name FROM memory_index WHERE status = 'active' ORDER BY id")
                if r[2].casefold() == folded
            ),
            None,
        )
    if row is None:
        return None
    return {"id": row[0], "path": row[1], "why": f"a memory named {row[2]!r} exists"}


def find_similar(con, vector, fingerprint: str, threshold: float = DUPLICATE_COSINE) -> dict | None:
    """The active memory whose metadata vector is most similar to ``vector``,
    if its cosine similarity is at least ``threshold``; else None.

    Only vectors of the model ``fingerprint`` count (the index's vectors
    belong to the model named in ``meta``).
    """
    if db.get_meta(con, "model_fingerprint") != fingerprint:
        return None
    if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_meta'").fetchall():
        return None
    dim = db.get_meta(con, "dim")
    if str(len(vector)) != dim:
        raise MarchError(
            f"the index stores {dim}-dimensional vectors for this model but it produced {len(vector)}; "
            "run `marchdb rebuild`"
        )
    blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
    # sqlite-vec: KNN in a CTE with a capped k, join afterwards.
    row = con.execute(
        "WITH knn AS (SELECT rowid, distance FROM vec_meta WHERE embedding MATCH ? AND k = 8) "
        "SELECT m.id, m.path, m.name, knn.distance FROM knn JOIN vectors v ON v.vid = knn.rowid AND v.kind = 'meta' "
        "JOIN memory_index m ON m.meta_hash = v.hash WHERE m.status = 'active' ORDER BY knn.distance, m.id LIMIT 1",
        (blob,),
    ).fetchone()
    if row is None:
        return None
    similarity = 1.0 - float(row[3])
    if similarity < threshold:
        return None
    return {"id": row[0], "path": row[1], "why": f"memory {row[2]!r} says nearly the same (similarity {similarity:.2f})"}


# ---------------------------------------------------------------- entry point


def save(
    store,
    *,
    id: str | None = None,
    name: str | None = None,
    description: str | None = None,
    body: str | None = None,
    tags: list[str] | str | None = None,
    status: str | None = None,
    force: bool = False,
    embed: bool = True,
) -> dict:
    """Create or update a memory (seed 000's ``memory_save``).

    Returns ``{"status", "id", "path" (absolute), "message", "warnings"}``
    with status ``created``, ``updated``, ``unchanged`` or ``duplicate``
    (nothing written: a near-twin exists; update it by id, or pass
    ``force=True``). Raises ``InvalidInput`` for bad input, ``Conflict`` when
    several files hold the id, ``MarchError`` when the file cannot be written.
    ``embed=False`` re-indexes without computing vectors (and never loads a model).
    """
    changes = validate_changes(name, description, body, tags, status)
    mem_id = _checked_id(store, id) if id is not None else None
    creating_like = None not in (changes.name, changes.description, changes.body, changes.tags)
    # Load the model (slow the first time) before taking the lock that other savers wait on.
    embedder = store.embedder() if embed and creating_like and not force else None
    # Embed the would-be metadata now, not under the lock other savers wait on.
    twin_probe = None
    if embedder is not None:
        vec = embedder.embed_passages([metadata_text(changes.name, changes.description, changes.tags)])[0]
        twin_probe = (vec, embedder.fingerprint)
    root = Path(store.root)
    try:
        with db.writer_lock(store.cfg.index_path):
            result, rel = _save_locked(store, root, mem_id, changes, force, twin_probe)
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        raise MarchError(f"cannot write{where}: {exc.strerror or exc}; nothing was saved, check the disk and permissions") from None
    if embed and rel is not None:
        # Outside the lock: embedding must not hold up other savers.
        report = store.sync(paths=[rel], embed=True)
        result["warnings"].extend(report.warnings)
    return result


def _checked_id(store, raw) -> str:
    """A caller's id: the strict rule of new ids, or any id a file already
    holds (hand-written ids such as ``my note`` are indexed, so they must be
    updatable too; the id is only looked up, never used as a path)."""
    try:
        return validate_id(raw)
    except InvalidInput:
        ident = raw.strip() if isinstance(raw, str) else None
        if ident and store.con.execute("SELECT 1 FROM files WHERE mem_id = ?", (ident,)).fetchone():
            return ident
        raise


def _save_locked(
    store, root: Path, mem_id: str | None, changes: Changes, force: bool, twin_probe
) -> tuple[dict, str | None]:
    """The read-decide-write part of ``save``; returns the result and the
    relative path written (None when nothing was written)."""
    con = store.con
    # A full stat scan: the index must know every file before we decide
    # between update and create (the user may have moved or copied files).
    store.sync(embed=False)
    warnings: list[str] = []
    if mem_id is not None:
        holders = [r[0] for r in con.execute("SELECT path FROM files WHERE mem_id = ? ORDER BY path", (mem_id,))]
        if len(holders) > 1:
            raise Conflict(
                f"{len(holders)} files hold id {mem_id}: {', '.join(holders)}; give all but one a new id, "
                "then save again",
                [str(root / p) for p in holders],
            )
        if holders:
            rel = holders[0]
            path = root / rel
            base, _ = _read(path, mem_id)
            state, _note, changed = update_file(path, mem_id, changes, base, utc_now_iso())
            if state == "unchanged":
                message = f"memory {mem_id} already holds these values; nothing was written"
                return _result("unchanged", mem_id, path, message, warnings), None
            store.sync(paths=[rel], embed=False)
            _check_indexed(con, mem_id, rel, warnings)
            return _result("updated", mem_id, path, f"updated memory {mem_id}: {', '.join(changed)}", warnings), rel

    missing = [f for f in ("name", "description", "body", "tags") if getattr(changes, f) is None]
    if missing:
        lead = f"no memory has id {mem_id}; to create it" if mem_id else "to create a memory"
        raise InvalidInput(f"{lead} also pass {', '.join(missing)} (tags: at least one)")
    if not force:
        twin = find_same_name(con, changes.name)
        if twin is None and twin_probe is not None:
            twin = find_similar(con, *twin_probe)
        if twin is not None:
            message = f"{twin['why']} (id {twin['id']}); pass its id to update it, or force it (--force; force=true in the tool) to add a new one"
            return _result("duplicate", twin["id"], root / twin["path"], message, warnings), None
    when = dt.datetime.now(dt.timezone.utc)
    if mem_id is None:
        mem_id = new_id(changes.name, when)
        while con.execute("SELECT 1 FROM files WHERE mem_id = ?", (mem_id,)).fetchone():
            mem_id = new_id(changes.name, when)
    stamp = format_time(when)
    note = Note(
        id=mem_id,
        name=changes.name,
        description=changes.description,
        tags=list(changes.tags),
        status=changes.status or "active",
        created_at=stamp,
        updated_at=stamp,
        body=changes.body,
    )
    rel = create_file(root, note, when.astimezone())
    store.sync(paths=[rel], embed=False)
    _check_indexed(con, mem_id, rel, warnings)
    return _result("created", mem_id, root / rel, f"created memory {mem_id} at {rel}", warnings), rel


def _check_indexed(con, mem_id: str, rel: str, warnings: list[str]) -> None:
    row = con.execute("SELECT path FROM memory_index WHERE id = ?", (mem_id,)).fetchone()
    if row is None or row[0] != rel:
        warnings.append(
            f"the file was written but the index does not list {mem_id} at {rel} "
            "(another file may hold the same id); run `marchdb doctor`"
        )


def _result(status: str, mem_id: str, path: Path, message: str, warnings: list[str]) -> dict:
    return {"status": status, "id": mem_id, "path": str(path), "message": message, "warnings": warnings}

