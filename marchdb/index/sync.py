"""Keep the index true to the Markdown files (seed 000, "索引同步").

A light full scan ``stat``s every ``.md`` file under the memory root; only new
or changed files (path, mtime or size) are read and parsed. Vanished files
leave the index; a file that moved with the same id keeps its id and its
chunks; an id held by several files puts all of them in conflict. Bad files
become rows of ``problems`` and never stop the sync. Nothing here writes to
the memory root.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import apsw

from marchdb import fts, redact
from marchdb.clock import utc_now_iso
from marchdb.errors import ConfigError, Retry
from marchdb.index.db import bump_meta, checkpoint, get_meta, scalar, set_meta, sql_file, transaction, writer_lock
from marchdb.vault.chunks import body_chunks, embedded_chunk_text
from marchdb.vault.files import folder_identity, read_under, stat_paths, walk
from marchdb.vault.notes import (
    ID_FIELDS,
    MAX_FILE_BYTES,
    BadNote,
    Note,
    Problem,
    content_hash,
    field_ids,
    index_key,
    metadata_text,
    parse_note,
    priority_value,
    text_hash,
)

#: Files applied per transaction: a killed sync keeps what earlier batches did.
BATCH_FILES = 500
#: A full scan that finds nothing to change writes its time to the index
#: (``meta.last_scan_epoch``, the seed's shared dirty-check clock) at most this
#: often. Any write makes every other connection to the index drop its page
#: cache, and in a session every prompt comes with a scan (the engine runs
#: one after the answer), so the next prompt's recall would re-read its pages
#: and its statement run a good third slower. The process
#: that scanned keeps the exact time (``SyncReport.scanned_at``,
#: ``Store.last_scan``); another one may scan once more than it had to,
#: never less.
CLOCK_WRITE_SECONDS = 60.0
#: Kinds of problem found by the walk itself (not tied to reading one file).
WALK_KINDS = ("symlink", "unreadable_dir", "bad_file_name", "not_regular")


@dataclass
class SyncReport:
    """What one sync did. Memory counts are per id; ``scanned`` is files."""

    scanned: int = 0
    added: int = 0
    updated: int = 0
    moved: int = 0
    removed: int = 0
    unchanged: int = 0
    conflicts: int = 0
    problems: int = 0
    seconds: float = 0.0
    embedded: int = 0
    model: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: When a full scan finished (``time.time()``; None for a sync of some paths).
    scanned_at: float | None = None

    def to_dict(self) -> dict:
        """The report as a JSON-ready dict."""
        data = asdict(self)
        data.pop("scanned_at")
        data["seconds"] = round(self.seconds, 4)
        return data


@dataclass
class _Read:
    """The outcome of reading one changed file."""

    path: str
    mtime_ns: int
    size: int
    hash: str | None = None
    note: Note | None = None
    problems: list[Problem] = field(default_factory=list)
    gone: bool = False
    unreadable: bool = False

    @property
    def mem_id(self) -> str | None:
        return self.note.id if self.note else None


def read_one(root: Path, relpath: str, mtime_ns: int, size: int) -> _Read:
    """Read and parse one file; every failure becomes part of the result."""
    result = _Read(relpath, mtime_ns, size)
    if size > MAX_FILE_BYTES:
        result.problems.append(
            Problem("too_large", f"{size:,} bytes; memories are limited to {MAX_FILE_BYTES:,} bytes")
        )
        return result
    try:
        data, st = read_under(root, relpath, MAX_FILE_BYTES)
    except FileNotFoundError:
        result.gone = True
        return result
    except OSError as exc:
        result.unreadable = True
        result.problems.append(Problem("unreadable", f"cannot read: {exc.strerror}; check permissions"))
        return result
    result.mtime_ns, result.size = st.st_mtime_ns, len(data)
    if len(data) > MAX_FILE_BYTES:
        result.problems.append(Problem("too_large", f"grew past {MAX_FILE_BYTES:,} bytes while read"))
        return result
    result.hash = content_hash(data)
    stem = relpath.rsplit("/", 1)[-1][:-3]
    try:
        note = parse_note(data, stem)
    except BadNote as bad:
        result.problems.append(bad.problem)
        return result
    result.note, withheld = indexable(note)
    result.problems.extend(note.problems + withheld)
    return result


def indexable(note: Note) -> tuple[Note, list[Problem]]:
    """``note`` as the index may hold it: its ``<private>`` regions left out
    of the name, description and body, and every secret in them replaced by
    its marker (``redact``), so that no hint, chunk, vector, search of the
    index or prompt ever carries one. A secret is also a ``secret`` problem
    (``marchdb doctor``): the file is the user's, never rewritten to redact it."""
    fields: dict[str, object] = {"the name": note.name, "the description": note.description, "the body": note.body}
    if any(redact.has_private(str(text)) for text in fields.values()):
        fields = {label: redact.without_private(str(text)) for label, text in fields.items()}
    clean, said = redact.redact_fields(fields)
    if fields == clean and fields["the body"] is note.body:
        return note, []
    kept = replace(
        note, name=str(clean["the name"]), description=str(clean["the description"]), body=str(clean["the body"])
    )
    if not said:
        return kept, []
    return kept, [Problem("secret", f"{'; '.join(said)}, kept out of the index, its hints and vectors")]


#: A full scan finding no file at all while the index lists this many is
#: refused (an unmounted drive); deleting every memory on purpose: rebuild.
EMPTY_ROOT_GUARD = 10


class Syncer:
    """One sync of the files under ``root`` into the index ``con``."""

    def __init__(
        self,
        con: apsw.Connection,
        root: str | os.PathLike,
        index_path: str | os.PathLike,
        folders: dict[str, int] | None = None,
    ):
        self.con = con
        #: Filled by a full scan with every folder's mtime (``files.walk``).
        self.folders = folders
        self.root = Path(root)
        self.index_path = index_path
        self.report = SyncReport()
        self.parsed: dict[str, Note] = {}
        self.known: dict[str, tuple] = {}
        # FTS5 rows written at the end of each transaction: any statement that
        # opens a statement journal (an INSERT into a table with a UNIQUE index,
        # an upsert...) makes SQLite call xSavepoint on FTS5, which flushes its
        # pending terms as a new segment. Interleaved, that is one tiny segment
        # (plus merge work) per memory.
        self._fts_rows: list[tuple[int, str, str]] = []
        self._fts_chunk_rows: list[tuple[int, str]] = []

    # ------------------------------------------------------------ entry point

    def run(self, paths: Iterable[str] | None = None) -> SyncReport:
        """Scan and apply. With ``paths`` (relative), only those files are
        looked at (the watcher's incremental mode); otherwise the whole root."""
        started = time.perf_counter()
        if paths is not None:
            paths = list(paths)  # read three times below; a generator would sync nothing
        with writer_lock(self.index_path):
            self._check_owner()
            if paths is None:
                before = folder_identity(self.root)
                seen, walk_problems = walk(self.root, self.folders)
                unlisted = {rel for rel, kind, _ in walk_problems if kind == "unreadable_dir"}
                # Listed but not looked at (a folder with r but not x: every stat fails).
                unstatted = {rel for rel, kind, _ in walk_problems if kind == "unreadable"}
                if "." in unlisted:
                    detail = next(d for rel, kind, d in walk_problems if rel == "." and kind == "unreadable_dir")
                    raise ConfigError(
                        f"the memory root {self.root} cannot be read ({detail.removeprefix('cannot list folder: ')}); "
                        "fix its permissions (chmod u+rx) or point MARCH_MEMORY_ROOT elsewhere; the index was not changed"
                    )
                if folder_identity(self.root) != before:
                    # Renamed, replaced by a link, remounted mid-scan: what was
                    # seen is half of one folder and half of another.
                    raise Retry(f"the memory root {self.root} changed while it was scanned; the index was not changed")
            else:
                seen, walk_problems = stat_paths(self.root, paths), None
            self.known = {
                row[0]: row[1:]
                for row in self.con.execute(
                    "SELECT path, mtime_ns, size, content_hash, mem_id FROM files"
                    if paths is None
                    else "SELECT path, mtime_ns, size, content_hash, mem_id FROM files WHERE path IN "
                    "(SELECT value FROM json_each(?))",
                    () if paths is None else (json.dumps(list(paths)),),
                )
            }
            if paths is None and not seen and len(self.known) >= EMPTY_ROOT_GUARD:
                # An unmounted drive or a cloud folder not synced yet looks
                # exactly like this: never empty the index on it silently
                # (the files are safe either way; their vectors would be lost).
                raise ConfigError(
                    f"the memory root {self.root} holds no .md files, but the index lists {len(self.known)}; "
                    "if it is a drive or synced folder, bring it back; if you deleted every memory, "
                    "run `marchdb rebuild`"
                )
            changed = [
                p for p, st in seen.items() if (k := self.known.get(p)) is None or k[0] != st[0] or k[1] != st[1]
            ]
            vanished = {p for p in self.known if p not in seen}
            if paths is not None:
                asked = set(paths)
                vanished = {p for p in vanished if p in asked}
            else:
                # A folder that could not be listed (or whose files could not be
                # looked at) hides its files, it does not delete them: they keep
                # their rows (and vectors) until they can be read.
                vanished = {
                    p for p in vanished if p not in unstatted and not any(p.startswith(d + "/") for d in unlisted)
                }
            self.report.scanned = len(seen)
            self.report.unchanged = len(seen) - len(changed)
            walk_changed = walk_problems is not None and self._walk_problems_changed(walk_problems)

            applied = bool(changed or vanished or walk_changed)
            if applied:
                self._apply(sorted(changed), seen, vanished, walk_problems if walk_changed else None)
                self._store_counts()
            now = time.time()
            owner = {"memory_root": os.path.realpath(self.root), "memory_root_index": os.path.realpath(self.index_path)}
            if paths is None:
                self.report.scanned_at = now
            if (
                applied
                or get_meta(self.con, "last_sync_at") is None
                or (
                    paths is None
                    and (
                        now - scan_epoch(get_meta(self.con, "last_scan_epoch")) >= CLOCK_WRITE_SECONDS
                        or any(get_meta(self.con, k) != v for k, v in owner.items())
                    )
                )
            ):
                with transaction(self.con):
                    set_meta(self.con, "last_sync_at", utc_now_iso())
                    if paths is None:
                        # Only a full scan proves nothing was missed: an incremental
                        # sync (watcher, save) must not postpone the dirty check.
                        set_meta(self.con, "last_scan_epoch", f"{now:.3f}")
                        for key, value in owner.items():
                            set_meta(self.con, key, value)
            if applied:
                # A write batch is done: into the index file itself, as far as
                # readers allow (never waiting for them), so the file alone is the cache.
                checkpoint(self.con)
            self.report.conflicts = int(get_meta(self.con, "count_conflicts", "0") or 0)
            self.report.problems = int(get_meta(self.con, "count_problems", "0") or 0)
        self.report.seconds = time.perf_counter() - started
        return self.report

    def _check_owner(self) -> None:
        # One index, one vault. Two roots sharing a home (and so its index)
        # took turns replacing each other's memories and re-embedding every
        # time; a vault that was moved (its old folder gone), an index copied
        # with its vault (its own path changed) or an export used elsewhere
        # is taken over instead.
        problem = owner_problem(self.con, self.root, self.index_path)
        if problem:
            raise ConfigError(problem)

    # ------------------------------------------------------------ applying

    def _apply(self, changed: list[str], seen: dict, vanished: set[str], walk_problems) -> None:
        vanished_by_id: dict[str, list[str]] = {}
        for p in vanished:
            mem_id = self.known[p][3]
            if mem_id:
                vanished_by_id.setdefault(mem_id, []).append(p)

        for start in range(0, max(len(changed), 1), BATCH_FILES):
            batch = [read_one(self.root, p, *seen[p]) for p in changed[start : start + BATCH_FILES]]
            with transaction(self.con):
                touched: set[str] = set()
                # Each file read replaces its problems and its row; as three
                # statements for the batch rather than three a file.
                self.con.execute(
                    "DELETE FROM problems WHERE path IN (SELECT value FROM json_each(?))",
                    (json.dumps([res.path for res in batch if not res.gone]),),
                )
                problem_rows: list[tuple] = []
                file_rows: list[tuple] = []
                for res in batch:
                    if res.gone:
                        if res.path in self.known:
                            vanished.add(res.path)
                            if self.known[res.path][3]:
                                vanished_by_id.setdefault(self.known[res.path][3], []).append(res.path)
                        continue
                    problem_rows += [(res.path, p.kind, p.detail) for p in res.problems]
                    row = self._apply_read(res, touched, vanished, vanished_by_id)
                    if row is not None:
                        file_rows.append(row)
                self.con.executemany("INSERT INTO problems(path, kind, detail) VALUES (?, ?, ?)", problem_rows)
                self.con.executemany(
                    "INSERT INTO files(path, mtime_ns, size, content_hash, mem_id, parse_status, error) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET mtime_ns = excluded.mtime_ns, "
                    "size = excluded.size, content_hash = excluded.content_hash, mem_id = excluded.mem_id, "
                    "parse_status = excluded.parse_status, error = excluded.error",
                    file_rows,
                )
                self._resolve(touched)
                self._flush_fts()
                bump_meta(self.con, "fts_gen")  # term statistics cached by recall are stale

        with transaction(self.con):
            touched = set()
            for p in sorted(vanished):
                old_id = self.known[p][3]
                self.con.execute("DELETE FROM files WHERE path = ?", (p,))
                self.con.execute("DELETE FROM problems WHERE path = ?", (p,))
                if old_id:
                    touched.add(old_id)
            self._resolve(touched)
            self._flush_fts()
            bump_meta(self.con, "fts_gen")
            if vanished:
                # Their vectors are garbage now: the next embedding pass must
                # run (it collects them) even when nothing new needs a vector.
                set_meta(self.con, "vectors_complete", None)
            if walk_problems is not None:
                self.con.execute(f"DELETE FROM problems WHERE kind IN ({','.join('?' * len(WALK_KINDS))})", WALK_KINDS)
                self.con.executemany("INSERT INTO problems(path, kind, detail) VALUES (?, ?, ?)", walk_problems)
            # Who replaces whom follows every change of a memory (its supersedes:, status, description).
            self.con.execute(sql_file("superseded.sql"))

    def _apply_read(self, res: _Read, touched: set, vanished: set, vanished_by_id: dict) -> tuple | None:
        """What a file read changes (a move's old path, an unreadable file),
        and its ``files`` row to write, if any (its problems are the caller's)."""
        con = self.con
        old = self.known.get(res.path)
        if res.unreadable:
            # Keep what the index knew; mtime -1 makes the next sync try again.
            if old is None:
                con.execute(
                    "INSERT INTO files(path, mtime_ns, size, parse_status, error) VALUES (?, -1, ?, 'error', ?)",
                    (res.path, res.size, res.problems[0].detail),
                )
            else:
                con.execute("UPDATE files SET mtime_ns = -1 WHERE path = ?", (res.path,))
            return None
        if old is not None and old[3]:
            touched.add(old[3])
        mem_id = res.mem_id
        if mem_id and mem_id in vanished_by_id and (old is None or old[3] != mem_id):
            # The same id left another path that vanished in this scan: a move.
            gone_path = vanished_by_id[mem_id].pop()
            if not vanished_by_id[mem_id]:
                del vanished_by_id[mem_id]
            vanished.discard(gone_path)
            con.execute("DELETE FROM files WHERE path = ?", (gone_path,))
            con.execute("DELETE FROM problems WHERE path = ?", (gone_path,))
        blocking = res.note is None
        status = "error" if blocking else ("problem" if res.problems else "ok")
        error = res.problems[0].kind + ": " + res.problems[0].detail if res.problems else None
        if res.note is not None:
            self.parsed[res.path] = res.note
            touched.add(mem_id)
        return (res.path, res.mtime_ns, res.size, res.hash, mem_id, status, error)

    def _resolve(self, ids: set[str]) -> None:
        """Make ``memory_index`` right for each id: 0 files → gone, 1 → indexed
        from that file, more → conflict (left out until fixed)."""
        con = self.con
        order = sorted(i for i in ids if i)
        wanted = json.dumps(order)
        # Read for all ids at once: the writes below touch only their own id's rows.
        holders_of: dict[str, list[Any]] = {}
        for mem_id, *holder in con.execute(
            "SELECT mem_id, path, content_hash, mtime_ns, size FROM files "
            "WHERE mem_id IN (SELECT value FROM json_each(?))",
            (wanted,),
        ):
            holders_of.setdefault(mem_id, []).append(holder)
        mem_of: dict[str, Any] = {
            row[0]: row[1:]
            for row in con.execute(
                "SELECT id, rid, path, content_hash FROM memory_index WHERE id IN (SELECT value FROM json_each(?))",
                (wanted,),
            )
        }
        written = False
        for mem_id in order:
            holders = holders_of.get(mem_id, [])
            mem: Any = mem_of.get(mem_id)
            if len(holders) != 1:
                if mem is not None:
                    con.execute("DELETE FROM memory_index WHERE rid = ?", (mem[0],))
                    if not holders:
                        self.report.removed += 1
                continue
            path, chash, mtime_ns, size = holders[0]
            if mem is not None and mem[2] == chash:
                if mem[1] != path:
                    con.execute(
                        "UPDATE memory_index SET path = ?, mtime_ms = ?, size = ? WHERE rid = ?",
                        (path, mtime_ns // 1_000_000, size, mem[0]),
                    )
                    self.report.moved += 1
                else:
                    con.execute(
                        "UPDATE memory_index SET mtime_ms = ?, size = ? WHERE rid = ?",
                        (mtime_ns // 1_000_000, size, mem[0]),
                    )
                    self.report.unchanged += 1  # touched, same bytes
                continue
            note = self.parsed.get(path) or self._reparse(path)
            if note is None or note.id != mem_id:
                continue
            if mem is not None and mem[1] != path:
                self.report.moved += 1
            self._write_memory(note, path, chash, mtime_ns, size, mem[0] if mem else None)
            written = True
            if mem is None:
                self.report.added += 1
            else:
                self.report.updated += 1
        if written:
            # New texts may need vectors: the next embedding pass must look.
            set_meta(con, "vectors_complete", None)

    def _reparse(self, path: str) -> Note | None:
        """Read a file again (it was unchanged, but a conflict partner went away)."""
        try:
            st = os.lstat(self.root / path)
        except OSError:
            return None
        res = read_one(self.root, path, st.st_mtime_ns, st.st_size)
        if res.note is None:
            self.con.execute("UPDATE files SET mtime_ns = -1 WHERE path = ?", (path,))
        return res.note

    def _write_memory(self, note: Note, path: str, chash: str, mtime_ns: int, size: int, rid: int | None) -> None:
        con = self.con
        meta_text = metadata_text(note.name, note.description, note.tags)
        values = (
            note.id,
            path,
            note.name,
            note.description,
            json.dumps(note.tags, ensure_ascii=False),
            note.status,
            note.created_at,
            note.updated_at,
            mtime_ns // 1_000_000,
            size,
            chash,
            text_hash(meta_text),
            fts.cjk_share(meta_text),
        )
        fresh = rid is None
        if rid is None:
            rid = scalar(
                con,
                "INSERT INTO memory_index(id, path, name, description, tags_json, status, created_at, "
                "updated_at, mtime_ms, size, content_hash, meta_hash, cjk) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
                "RETURNING rid",
                values,
            )
        else:
            con.execute(
                "UPDATE memory_index SET id=?, path=?, name=?, description=?, tags_json=?, status=?, "
                "created_at=?, updated_at=?, mtime_ms=?, size=?, content_hash=?, meta_hash=?, cjk=? WHERE rid=?",
                (*values, rid),
            )
            con.execute("DELETE FROM chunks WHERE mem_rid = ?", (rid,))
            con.execute("DELETE FROM fts WHERE rowid = ?", (rid,))
        pieces = body_chunks(note.body)
        chunks = [text for text, _role in pieces]
        added = con.executemany(
            "INSERT INTO chunks(mem_rid, seq, text, hash, cjk, role) VALUES (?, ?, ?, ?, ?, ?) RETURNING rid",
            [
                (
                    rid,
                    i,
                    text,
                    text_hash(embedded_chunk_text(note.name, note.description, text, role, len(pieces))),
                    fts.cjk_share(text),
                    role,
                )
                for i, (text, role) in enumerate(pieces)
            ],
        )
        crids = [row[0] for row in added]  # in seq order: the order they were inserted
        if note.status == "active":
            # Only active memories are searched: a deprecated one must not
            # make the words of active ones look common (their IDF).
            indexed = [fts.index_text(text) for text in chunks]
            body = fts.index_text_of_parts(note.body, chunks, indexed)
            self._fts_rows.append((rid, fts.index_text(meta_text), body))
            # each chunk on its own too (sql/001_schema.sql: fts_chunk); its
            # old rows went with its old chunks (trigger chunks_delete)
            self._fts_chunk_rows.extend(zip(crids, indexed, strict=True))
        _write_attrs(con, rid, note, fresh)

    def _flush_fts(self) -> None:
        if self._fts_rows:
            self.con.executemany("INSERT INTO fts(rowid, meta, body) VALUES (?, ?, ?)", self._fts_rows)
            self._fts_rows = []
        if self._fts_chunk_rows:
            self.con.executemany("INSERT INTO fts_chunk(rowid, body) VALUES (?, ?)", self._fts_chunk_rows)
            self._fts_chunk_rows = []

    # ------------------------------------------------------------ bookkeeping

    def _walk_problems_changed(self, walk_problems: list) -> bool:
        current = sorted(
            tuple(r)
            for r in self.con.execute(
                f"SELECT path, kind, detail FROM problems WHERE kind IN ({','.join('?' * len(WALK_KINDS))})",
                WALK_KINDS,
            )
        )
        return current != sorted(walk_problems)

    def _store_counts(self) -> None:
        # Cached so that a sync with nothing to do stays a bare stat walk.
        conflicts = scalar(self.con, "SELECT count(*) FROM diag_conflicts")
        problems = scalar(self.con, "SELECT count(*) FROM diag_problems WHERE kind != 'missing_vector'")
        docs = scalar(self.con, "SELECT count(*) FROM memory_index WHERE status = 'active'")
        chunks = scalar(
            self.con,
            "SELECT count(*) FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.status = 'active'",
        )
        with transaction(self.con):
            set_meta(self.con, "fts_docs", docs)  # N of the BM25 IDF, for recall
            set_meta(self.con, "fts_chunks", chunks)  # the same among chunks
            set_meta(self.con, "recall_texts", docs + chunks)  # texts a message is compared with
            set_meta(self.con, "count_conflicts", conflicts)
            set_meta(self.con, "count_problems", problems)


def _write_attrs(con: apsw.Connection, rid: int, note: Note, fresh: bool = False) -> None:
    """The lifecycle fields of ``note`` (``memory_attrs``: priority for the
    ranking, source for import's idempotency; no row when it has neither) and
    the ids it supersedes and contradicts (``supersedes``, ``conflicts_with``).
    ``fresh``: ``rid`` was just inserted, so it has no rows to replace (those
    of a deleted row with the same rid went with it: ON DELETE CASCADE)."""
    priority = priority_value(note.extra.get("priority"))
    source = note.extra.get("source")
    source = index_key(source) if isinstance(source, str) and source.strip() else None
    if not fresh:
        con.execute("DELETE FROM memory_attrs WHERE rid = ?", (rid,))
    if priority is not None or source is not None:
        con.execute("INSERT INTO memory_attrs(rid, priority, source) VALUES (?, ?, ?)", (rid, priority, source))
    for table in ID_FIELDS:  # each field has its table of the same name (sql/003_lifecycle.sql)
        if not fresh:
            con.execute(f"DELETE FROM {table} WHERE rid = ?", (rid,))
        for target in field_ids(note.extra.get(table), table):
            if target != note.id:
                con.execute(f"INSERT INTO {table}(rid, target) VALUES (?, ?)", (rid, target))


def sync_files(
    con: apsw.Connection,
    root: str | os.PathLike,
    index_path: str | os.PathLike,
    paths: Iterable[str] | None = None,
    folders: dict[str, int] | None = None,
) -> SyncReport:
    """Bring the index in line with the files under ``root`` (no embedding).
    ``folders``: see ``Syncer.folders``."""
    return Syncer(con, root, index_path, folders).run(paths)


def owner_problem(con: apsw.Connection, root: Path, index_path: str | os.PathLike) -> str | None:
    """Why the index at ``index_path`` must not take ``root`` (None when it
    may): it belongs to another vault that still exists and that it holds
    memories of. Taken over: an index of nothing (a first run on the default
    root, then the vault configured), a vault that moved (its old folder
    gone), an index copied with its vault (its own path changed), an export."""
    recorded = get_meta(con, "memory_root")
    here = os.path.realpath(root)
    if not recorded or recorded == here or not os.path.isdir(recorded):
        return None
    if get_meta(con, "memory_root_index") != os.path.realpath(index_path):
        return None
    if scalar(con, "SELECT count(*) FROM files") == 0:
        return None
    return (
        f"the index {index_path} belongs to the memory root {recorded}, and {here} is another "
        "vault; give it a home of its own (MARCH_HOME) or its own indexPath, or run `marchdb rebuild` "
        f"to index {here} in place of {recorded}"
    )


#: A stored scan time this far ahead of the clock is not believed (the
#: three decimals it is written with may put it a fraction ahead).
FUTURE_SLACK_SECONDS = 1.0


def scan_epoch(value: str | float | None, now: float | None = None) -> float:
    """A ``meta.last_scan_epoch`` as a number (0 when absent, not one, or in
    the future): a clock that was once ahead (a wrong time at boot, then
    corrected) left a time that would keep the dirty check off until real
    time caught up with it — every hand edit missed meanwhile."""
    try:
        epoch = float(value or 0)
    except ValueError:
        return 0.0
    if not epoch == epoch or epoch > (time.time() if now is None else now) + FUTURE_SLACK_SECONDS:
        return 0.0  # NaN, or ahead of the clock
    return epoch
