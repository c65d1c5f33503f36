"""``memory_save``: create or update one Markdown memory, safely.

Rules (seed 000, "主动回忆工具"):

* A new memory needs ``name``, ``description``, ``body`` and at least one
  valid tag. It gets an id (``notes.new_id``) unless the caller names one,
  and a file at the time-bucket path ``YYYY/MM/weekN/YYYY-MM-DD-slug.md``
  (the local calendar day, since file names are for people browsing the
  vault); a taken name gets ``-2``, ``-3``... and no file is ever overwritten.
* An update (the id exists) changes only the fields passed; ``tags``
  replace the old ones; ``created_at`` and any extra frontmatter fields the
  user added are kept; ``updated_at`` is set — except when the status alone
  moves into or out of ``archived`` (filing, not an edit: recency and
  ``maintain`` read ``updated_at``); the file stays where it is.
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
  file, so concurrent saves from several processes serialise; and the
  vault's own lock (``files.vault_lock``), so processes with different homes
  (different indexes) saving into one vault serialise too: two of them never
  create two files with the same id.
* Nothing is written through a symbolic link: every folder between the root
  and the file is checked (``files.safe_folder``) before the temp file is
  written and again just before it takes its name.
* An update edits the changed lines only (``notes.edit_note``: comments,
  layout, CRLF line ends and a byte-order mark stay); a frontmatter it
  cannot edit that way (one ``{...}`` mapping, a field written twice) is
  refused with the reason rather than rewritten whole.
* Input is bounded (``MAX_BODY_BYTES``, ``notes.MAX_TAGS``,
  ``notes.MAX_TAG_CHARS``, name and description lengths) here, in the
  library, so the CLI, the API and the MCP server refuse the same things.
* Race with a person editing the file (Obsidian, an editor): the file's
  bytes are read again just before the replace. If they changed since the
  update was computed, the update is re-applied onto the newest content
  (our change is a set of field assignments, so re-applying it is well
  defined and keeps the person's edit). After ``RACE_RETRIES`` rounds of a
  file that keeps changing, nothing is written and the caller is told to
  retry. The replace itself checks that the file is still the one last read
  (``files.replace_if_same``): on Linux a write that lands between that
  check and the replace gets its name back and is re-applied onto, so no
  edit is lost; elsewhere a window of microseconds stays.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

import apsw

from marchdb.errors import Conflict, FileError, InvalidInput, NotFound, Retry
from marchdb.index import db
from marchdb.index.sync import sync_files
from marchdb.text import cut_bytes
from marchdb.twins import find_same_name, find_similar, refuse_twin
from marchdb.vault.changes import Changes
from marchdb.vault.edit import edit_note
from marchdb.vault.files import fsync_dir, place_new, read_file, replace_if_same, safe_folder, vault_lock, write_temp
from marchdb.vault.notes import (
    MAX_FILE_BYTES,
    MAX_SLUG_BYTES,
    YAML_LOADER,
    BadNote,
    Note,
    bucket_path,
    format_time,
    new_id,
    parse_note,
    render_note,
    slugify,
    utc_now_iso,
    validate_id,
)

#: Rounds of re-applying an update onto a file that keeps changing under us.
RACE_RETRIES = 5
#: Largest ``-N`` suffix tried for a taken file name.
MAX_NAME_SUFFIX = 1000


# ---------------------------------------------------------------- input


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


def create_file(root: Path, note: Note, when: dt.datetime, slug: str | None = None) -> str:
    """Write ``note`` as a new file at its time-bucket path under ``root``
    (named after ``slug``, by default the note's name).

    Returns the relative path. A taken name gets ``-2``, ``-3``...; an
    existing file is never overwritten.
    """
    data = _render(note)
    # A slug given by a caller is held to the bound slugify keeps, so that the
    # whole name with its "-N" fits a file name (255 bytes).
    rel = bucket_path(when, cut_bytes(slug, MAX_SLUG_BYTES).rstrip("-") or "memory" if slug else slugify(note.name))
    # Folder by folder, refusing a link: a YYYY folder linked to elsewhere
    # would take the memory out of the vault (and it would vanish at the next scan).
    folder = safe_folder(root, rel.parent, create=True)
    stem = rel.name[: -len(".md")]
    tmp = write_temp(folder, data)
    try:
        for n in range(1, MAX_NAME_SUFFIX + 1):
            name = f"{stem}.md" if n == 1 else f"{stem}-{n}.md"
            target = folder / name
            if os.path.lexists(target):
                continue
            safe_folder(root, rel.parent)  # again: swapped for a link meanwhile?
            if place_new(tmp, target):
                fsync_dir(folder)
                return str(rel.parent / name)
        raise FileError(f"{MAX_NAME_SUFFIX} files named {stem}*.md exist in {folder}; choose another name")
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
        meta = handler.load(handler.split(text)[0], Loader=YAML_LOADER)
    except (UnicodeDecodeError, ValueError, RecursionError, yaml.YAMLError):
        return None
    return meta.get("tags") if isinstance(meta, dict) else None


def _parse_existing(data: bytes, path: Path, mem_id: str) -> Note:
    try:
        note = parse_note(data, path.stem)
    except BadNote as bad:
        raise FileError(
            f"cannot update {path}: {bad.problem.kind}: {bad.problem.detail}; fix the file by hand, then save again"
        ) from None
    if note.id != mem_id:
        raise Retry(
            f"{path} now holds id {note.id!r}, not {mem_id!r} (it was edited while saving); nothing was written, "
            "call memory_save again"
        )
    return note


def _read(path: Path, mem_id: str, root: Path | None = None) -> tuple[bytes, os.stat_result]:
    try:
        data, st = read_file(path, MAX_FILE_BYTES, root=root)
    except FileNotFoundError:
        raise Retry(
            f"{path} (memory {mem_id}) was moved or deleted while saving; nothing was written, call memory_save again"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise FileError(f"{path} is larger than {MAX_FILE_BYTES:,} bytes; it is not a memory any more, fix it by hand")
    return data, st


def update_file(
    path: Path, mem_id: str, changes: Changes, base: bytes, now: str, root: Path | None = None
) -> tuple[str, Note, list[str]]:
    """Apply ``changes`` to the memory file ``path`` in place (with ``root``,
    the memory root it lies in: no folder between them may be a link).

    ``base`` is the file content the caller read (and looked at). The
    update is computed from it; just before the replace the file is read
    again, and if it no longer holds what the update was computed from (a
    person edited it meanwhile), the update is re-applied onto the newest
    content, up to ``RACE_RETRIES`` times. Returns ``(status, note,
    changed_fields)`` with status ``updated`` or ``unchanged``.

    Only the changed lines are rewritten (``notes.edit_note``); a frontmatter
    that cannot be edited that way is refused (``FileError``, with the
    reason): rewriting it whole would drop the user's comments and layout.
    """
    current = base

    def check_folders() -> None:
        if root is not None:  # no folder between the root and the file became a link
            safe_folder(root, path.parent.relative_to(root))

    mode = stat.S_IMODE(os.lstat(path).st_mode)
    for _ in range(RACE_RETRIES):
        note = _parse_existing(current, path, mem_id)
        changed = changes.differences(note)
        if not changed:
            # Nothing to write; still make sure we judged the file's newest content.
            latest, _ = _read(path, mem_id, root)
            if latest == current:
                return "unchanged", note, []
            current = latest
            continue
        # Filing a memory into the archive or bringing it back (maintain --apply,
        # its undo line) changes no word of it: updated_at stays, or recency
        # would warm it and maintain would take a month-old unused log for new.
        refile = changed == ["status"] and "archived" in (note.status, changes.status)
        new = changes.apply(note, _raw_tags(current), note.updated_at if refile else now)
        why: list[str] = []
        edited = edit_note(current.decode("utf-8"), new, changed, why, stamp=not refile)
        if edited is None:
            raise FileError(
                f"cannot update {path} in place: {why[0] if why else 'its layout is unusual'}; rewriting it whole "
                "would lose its comments and formatting, so nothing was written: write the frontmatter as one "
                "`key: value` field per line between two '---' lines, then save again"
            )
        data = _checked_size(edited.encode("utf-8"))
        check_folders()
        tmp = write_temp(path.parent, data, mode)
        try:
            latest, st = _read(path, mem_id, root)
            mode = stat.S_IMODE(st.st_mode)
            if latest != current:
                current = latest  # edited under us: re-apply onto the edit
                continue
            check_folders()
            try:
                placed = replace_if_same(tmp, path, st)
            except FileNotFoundError:
                placed = False  # moved or deleted meanwhile: the read below says so
            if not placed:
                current = _read(path, mem_id, root)[0]  # edited in the last moment: re-apply onto that
                continue
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        fsync_dir(path.parent)
        return "updated", new, changed
    raise Retry(
        f"{path} kept changing while saving (edited by another program); nothing was written, "
        "call memory_save again when the edits stop"
    )


# ---------------------------------------------------------------- reconcile


# ---------------------------------------------------------------- entry point


@dataclass
class SaveResult:
    """What one save did. ``rel`` is the file written (None: nothing was);
    ``indexed`` False when the index could not take it (a warning says so)."""

    status: str  # created | updated | unchanged | duplicate
    id: str
    path: Path
    message: str
    warnings: list[str] = field(default_factory=list)
    rel: str | None = None
    #: For a created memory: active memories on the same subject (``Store.save``).
    related: list[dict] = field(default_factory=list)
    indexed: bool = True

    def to_dict(self) -> dict:
        """``{"status", "id", "path" (absolute), "message", "warnings", "related"}``."""
        return {
            "status": self.status,
            "id": self.id,
            "path": str(self.path),
            "message": self.message,
            "warnings": list(self.warnings),
            "related": list(self.related),
        }


def index_written(con, root: Path, index_path, rel: str, warnings: list[str]) -> bool:
    """Index the file just written at ``rel``; False, with a warning in
    ``warnings``, when the index cannot take it (a full disk, a read-only
    index). The file is the memory: the save is done, and the index learns of
    it at its next scan. Said as an error, the save was done again by users
    and agents alike, and a second file made."""
    try:
        sync_files(con, root, index_path, [rel])
        return True
    except apsw.Error as exc:
        warnings.append(
            f"the file was written ({rel}), so this is saved; but the index could not be updated "
            f"({exc}: {db.index_trouble(exc)}): it catches up at the next sync (the next recall, search "
            "or `marchdb sync`); do not save it again"
        )
        return False


def checked_id(con, raw: object) -> str:
    """A caller's id: the strict rule of new ids, or any id a file already
    holds (hand-written ids such as ``my note`` are indexed, so they must be
    updatable too; the id is only looked up, never used as a path)."""
    try:
        return validate_id(raw)
    except InvalidInput:
        ident = raw.strip() if isinstance(raw, str) else None
        if ident and db.id_taken(con, ident):
            return ident
        raise


class Saver:
    """One ``memory_save`` (seed 000) into the files under ``root`` and the
    index ``con``, in the shape of ``sync.Syncer``: the Store hands it what it
    needs (validated ``Changes``, the would-be metadata vector for the
    near-duplicate check) and re-embeds what it wrote afterwards."""

    def __init__(self, con, root: Path, index_path):
        self.con = con
        self.root = Path(root)
        self.index_path = index_path

    def run(self, mem_id: str | None, changes: Changes, force: bool = False, twin_probe=None) -> SaveResult:
        """Create or update under the writer lock (so concurrent saves from
        several processes serialise). ``twin_probe`` is ``(vector,
        fingerprint)`` of the new metadata, or None to skip the vector check."""
        try:
            # The index's lock first, the vault's second: one order everywhere.
            with db.writer_lock(self.index_path), vault_lock(self.root):
                return self._locked(mem_id, changes, force, twin_probe)
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            if exc.errno == errno.ENOTDIR:
                raise FileError(
                    f"cannot write{where}: {exc.strerror}; nothing was saved: move it away (the memory's folder "
                    "is made there) or save into another memory root"
                ) from None
            if exc.errno == errno.ELOOP:
                raise FileError(
                    f"cannot write{where}: {exc.strerror}; marchdb never writes through a symbolic link, so nothing "
                    "was saved: replace the link with a real folder inside the memory root"
                ) from None
            if exc.errno == errno.ENAMETOOLONG:
                raise FileError(
                    f"cannot write{where}: the file name or path is too long for the file system; nothing was "
                    "saved: give the memory a shorter name, or move the memory root to a shorter path"
                ) from None
            raise FileError(
                f"cannot write{where}: {exc.strerror or exc}; nothing was saved, check the disk and permissions"
            ) from None

    def _sync(self, paths=None) -> None:
        sync_files(self.con, self.root, self.index_path, paths)

    def _locked(self, mem_id: str | None, changes: Changes, force: bool, twin_probe) -> SaveResult:
        con, root = self.con, self.root
        # A full stat scan: the index must know every file before we decide
        # between update and create (the user may have moved or copied files).
        self._sync()
        if mem_id is not None:
            holders = db.file_holders(con, mem_id)
            if len(holders) > 1:
                raise Conflict(
                    f"{len(holders)} files hold id {mem_id}: {', '.join(holders)}; give all but one a new id, "
                    "then save again",
                    mem_id,
                    [str(root / p) for p in holders],
                )
            if holders:
                return self._update(mem_id, holders[0], changes)
            refuse_twin(con, root, mem_id)
        new = changes.new_note()
        if isinstance(new, list):
            lead = f"no memory has id {mem_id}; to create it" if mem_id else "to create a memory"
            message = (
                f"{lead} also pass {', '.join(new)} (tags: at least one; the description is what recall "
                'shows). In a hurry? `marchdb log "title" "text"` (memory_log) appends a note to today\'s '
                "daily log instead"
            )
            # An update of an id nobody holds is "not found" (exit 5), as for open.
            raise NotFound(message, mem_id) if mem_id else InvalidInput(message)
        if not force:
            twin = find_same_name(con, new.name)
            if twin is None and twin_probe is not None:
                twin = find_similar(con, *twin_probe)
            # The one it replaces or contradicts may look alike ("... allowed" / "... not allowed").
            if twin is not None and twin["id"] not in (changes.supersedes or []) + (changes.conflicts_with or []):
                message = (
                    f"{twin['why']} (id {twin['id']}); pass its id to update it, or force it "
                    "(--force; force=true in the tool) to add a new one"
                )
                return SaveResult("duplicate", twin["id"], root / twin["path"], message)
        return self._create(mem_id, new)

    def _update(self, mem_id: str, rel: str, changes: Changes) -> SaveResult:
        path = self.root / rel
        base, _ = _read(path, mem_id, self.root)
        state, _note, changed = update_file(path, mem_id, changes, base, utc_now_iso(), root=self.root)
        if state == "unchanged":
            return SaveResult(
                "unchanged", mem_id, path, f"memory {mem_id} already holds these values; nothing was written"
            )
        result = SaveResult("updated", mem_id, path, f"updated memory {mem_id}: {', '.join(changed)}", rel=rel)
        result.indexed = index_written(self.con, self.root, self.index_path, rel, result.warnings)
        if result.indexed:
            self._check_indexed(result)
        return result

    def _create(self, mem_id: str | None, note: Note) -> SaveResult:
        con = self.con
        when = dt.datetime.now(dt.UTC)
        if mem_id is None:
            mem_id = new_id(note.name, when)
            while db.id_taken(con, mem_id):
                mem_id = new_id(note.name, when)
        stamp = format_time(when)
        note = replace(note, id=mem_id, created_at=stamp, updated_at=stamp)
        rel = create_file(self.root, note, when.astimezone())
        result = SaveResult("created", mem_id, self.root / rel, f"created memory {mem_id} at {rel}", rel=rel)
        result.indexed = index_written(self.con, self.root, self.index_path, rel, result.warnings)
        if result.indexed:
            self._check_indexed(result)
        return result

    def _check_indexed(self, result: SaveResult) -> None:
        row = self.con.execute("SELECT path FROM memory_index WHERE id = ?", (result.id,)).fetchone()
        if row is None or row[0] != result.rel:
            result.warnings.append(
                f"the file was written but the index does not list {result.id} at {result.rel} "
                "(another file may hold the same id); run `marchdb doctor`"
            )
