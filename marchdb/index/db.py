"""The SQLite index: open it with apsw, load sqlite-vec, apply the schema.

The index is a cache of the Markdown files. On a schema mismatch or a
corrupt file it is emptied and rebuilt from the files, never migrated.
All DDL lives in ``sql/*.sql`` (shipped in the package as ``marchdb.sql``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import re
import secrets
import urllib.parse
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import apsw

from marchdb.clock import utc_now_iso
from marchdb.errors import IndexUnavailable
from marchdb.index import carry, logs, ownership
from marchdb.index.locks import writer_lock
from marchdb.private import make_private_dirs


@functools.cache
def vec_extension() -> str:
    """The sqlite-vec loadable extension's path (what ``sqlite_vec.loadable_path()``
    returns), found without importing the package: its ``__init__`` imports
    numpy (~130 ms), which a hook answering without the engine, or any
    command that needs no model, does not need."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise IndexUnavailable("the sqlite-vec package is not installed; run: pip install sqlite-vec")
    return os.path.normpath(os.path.join(list(spec.submodule_search_locations)[0], "vec0"))


#: Bump when the meaning of stored data changes; a DDL edit is caught by the hash.
SCHEMA_VERSION = (
    # 7: texts indexed with secrets as markers and without <private> regions; 8: chunks by chat turn, with
    # their role; 9: the FTS5 tables contentless (their copy of every text was a third of the index);
    # 10: a short note's chunk hashed (and embedded) with its name and description
    10
)
#: The oldest SQLite that reads the index's FTS5 tables: they are contentless
#: with contentless_delete (sql/001_schema.sql). apsw bundles a newer one; an
#: older sqlite3 shell or module reads every other table and view.
MIN_SQLITE = (3, 43, 0)
BUSY_TIMEOUT_MS = 10_000


def _sql_text(name: str) -> str:
    return resources.files("marchdb.sql").joinpath(name).read_text(encoding="utf-8")


def schema_files() -> list[str]:
    """The numbered schema files, in the order they are applied."""
    names = [p.name for p in resources.files("marchdb.sql").iterdir() if p.name.endswith(".sql")]
    return sorted(n for n in names if n[:3].isdigit())


def schema_sql() -> str:
    """All numbered ``sql/NNN_*.sql`` files, concatenated in order."""
    return "\n".join(_sql_text(n) for n in schema_files())


#: A quoted SQL string (kept whole), or a ``--`` comment to the line's end.
_STRING_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|--[^\n]*")


def schema_hash(sql: str | None = None) -> str:
    """Hash of the schema's statements (``sql``, else ``schema_sql()``): an
    edited .sql file forces a rebuild even if someone forgot to bump
    SCHEMA_VERSION. Comments and layout are left out, so a comment's edit
    costs users no rebuild."""
    text = schema_sql() if sql is None else sql
    statements = _STRING_OR_COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith("'") else "", text)
    return hashlib.sha256(" ".join(statements.split()).encode()).hexdigest()[:16]


def sql_file(name: str) -> str:
    """The text of one file of ``sql/`` (e.g. the recall query)."""
    return _sql_text(name)


@functools.cache
def named_statements(name: str) -> dict[str, str]:
    """The statements of ``sql/NAME``, each after its ``-- name: NAME`` line."""
    parts = re.split(r"^-- name: (\w+)\s*$", sql_file(name), flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def connect(path: str | os.PathLike) -> apsw.Connection:
    """An apsw connection with sqlite-vec loaded and our best-practice settings.

    Settings are applied to this connection only (not process-wide), so code
    embedding marchdb keeps its own SQLite defaults.
    """
    try:
        return _connect_raw(path)
    except apsw.Error as exc:
        raise IndexUnavailable(f"cannot open the index {path}: {exc}; delete it and run `marchdb rebuild`") from None


def connect_read_only(path: str | os.PathLike) -> apsw.Connection:
    """A connection that cannot write the index: opened ``mode=ro`` (so the
    SQL shell's dot commands such as ``.restore`` cannot write either),
    sqlite-vec loaded, and an authorizer that lets reads and introspection
    (``PRAGMA table_info(files)``) through and nothing else — for reading SQL
    a person types."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        con = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            con.enable_load_extension(True)
            con.load_extension(vec_extension())
            con.enable_load_extension(False)
            con.set_busy_timeout(BUSY_TIMEOUT_MS)
        except apsw.Error:
            con.close()
            raise
    except apsw.Error as exc:
        raise IndexUnavailable(
            f"cannot open the index {path} read-only: {exc}; check the folder's permissions"
        ) from None
    con.authorizer = _read_only_authorizer
    return con


_READ_OPS = {apsw.SQLITE_SELECT, apsw.SQLITE_READ, apsw.SQLITE_FUNCTION, apsw.SQLITE_RECURSIVE}


#: Pragmas that take an argument and only describe (``PRAGMA table_info(files)``).
_LOOKING_PRAGMAS = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
}


def _read_only_authorizer(op, arg1, arg2, db_name, trigger):
    # Reads, pragmas that only ask (no value given) or describe, and
    # transactions (a shell's .dump reads inside one; the connection is
    # read-only, so none can write); nothing else.
    if op in _READ_OPS or op in (apsw.SQLITE_TRANSACTION, apsw.SQLITE_SAVEPOINT):
        return apsw.SQLITE_OK
    if op == apsw.SQLITE_PRAGMA and str(arg1).lower() == "wal_checkpoint":
        return apsw.SQLITE_DENY  # it writes even when asked without a value ("disk I/O error" on mode=ro)
    if op == apsw.SQLITE_PRAGMA and (arg2 is None or str(arg1).lower() in _LOOKING_PRAGMAS):
        return apsw.SQLITE_OK
    if op == apsw.SQLITE_PRAGMA and str(arg1).lower() == "journal_mode" and arg2 in ("main", "temp"):
        return apsw.SQLITE_OK  # apsw's Connection.pragma("journal_mode") asks it so (the shell's .dbinfo)
    return apsw.SQLITE_DENY


def _connect_raw(path: str | os.PathLike) -> apsw.Connection:
    con = apsw.Connection(str(path))
    try:
        con.enable_load_extension(True)
        con.load_extension(vec_extension())
        con.enable_load_extension(False)
        # apsw.bestpractice's settings, written out: importing it loads apsw.ext,
        # tens of milliseconds of every hook that answers without the engine.
        con.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)  # double quotes name columns, never strings
        con.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)
        con.pragma("foreign_keys", "ON")
        con.set_busy_timeout(BUSY_TIMEOUT_MS)
        if not con.readonly("main"):
            with contextlib.suppress(apsw.ReadOnlyError):  # its journal may still be read-only
                con.pragma("journal_mode", "wal")
        con.pragma("synchronous", "NORMAL")
        # 32 MB page cache: a cold sync's random inserts into the chunk-hash
        # index were half its insert time with the 2 MB default.
        con.pragma("cache_size", -32768)
    except apsw.Error:
        con.close()
        raise
    return con


def index_error(exc: apsw.Error, path: str | os.PathLike | None = None) -> IndexUnavailable:
    """An SQLite error that escaped a command, as the one-line error a person
    can act on (the Markdown files are never at risk: the index is a cache)."""
    where = f" {path}" if path else ""
    return IndexUnavailable(f"the index{where} cannot be used: {exc}; {index_trouble(exc)}")


def index_trouble(exc: apsw.Error) -> str:
    """What an SQLite error means for the index, and what to do about it."""
    if isinstance(exc, apsw.FullError):
        why = "the disk is full; free some space and run the command again"
    elif isinstance(exc, (apsw.ReadOnlyError, apsw.PermissionsError, apsw.AuthError)):
        why = "it is read-only (permissions, an immutable flag or a read-only mount); make it writable"
    elif isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        why = "another process holds it for too long; try again"
    elif isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        why = "it is damaged; run `marchdb rebuild`"
    elif isinstance(exc, (apsw.IOError, apsw.CantOpenError)):
        why = "the disk refused a read or a write (full, removed, a file size limit?); check it and try again"
    else:
        why = "run `marchdb doctor`, or `marchdb rebuild` if it persists"
    return why


def rows(con: apsw.Connection, sql: str, params: tuple | dict = ()) -> list[dict]:
    """Run a query and return its rows as dicts."""
    cur = con.execute(sql, params)
    try:
        names = [d[0] for d in cur.getdescription()]
    except apsw.ExecutionCompleteError:
        return []  # the statement produced no rows
    return [dict(zip(names, row)) for row in cur]


def scalar(con: apsw.Connection, sql: str, params: tuple | dict = ()) -> Any:
    """The first column of the first row of a query (None when there is no row)."""
    row = con.execute(sql, params).fetchone()
    return None if row is None else row[0]


def has_table(con: apsw.Connection, name: str) -> bool:
    """Whether the index holds a table (or virtual table) called ``name``; the
    vec0 tables exist only once a model's dimension is known."""
    return con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


def file_holders(con: apsw.Connection, mem_id: str) -> list[str]:
    """Relative paths of every file whose frontmatter declares ``mem_id``
    (more than one: a conflict), in path order."""
    return [r[0] for r in con.execute("SELECT path FROM files WHERE mem_id = ? ORDER BY path", (mem_id,))]


def id_taken(con: apsw.Connection, mem_id: str) -> bool:
    """Whether any file's frontmatter declares ``mem_id`` (``file_holders``
    without listing them: enough to pick a free id or accept a held one)."""
    return con.execute("SELECT 1 FROM files WHERE mem_id = ?", (mem_id,)).fetchone() is not None


def get_meta(con: apsw.Connection, key: str, default: str | None = None) -> str | None:
    """A value of the ``meta`` table."""
    for (value,) in con.execute("SELECT value FROM meta WHERE key = ?", (key,)):
        return value
    return default


def set_meta(con: apsw.Connection, key: str, value: object) -> None:
    """Set (or with ``None``, delete) a value of the ``meta`` table."""
    if value is None:
        con.execute("DELETE FROM meta WHERE key = ?", (key,))
    else:
        con.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, str(value)),
        )


def bump_meta(con: apsw.Connection, key: str) -> None:
    """Add one to a counter of the ``meta`` table (inside the writer's
    transaction). Counters tell long-lived processes that their in-memory
    copies (vectors, term statistics) are out of date."""
    con.execute(
        "INSERT INTO meta(key, value) VALUES (?, '1') "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
        (key,),
    )


def _schema_state(con: apsw.Connection) -> str:
    """'fresh', 'current' or a reason the schema must be rebuilt."""
    version = con.pragma("user_version")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if version == 0 and not tables:
        return "fresh"
    if con.pragma("application_id") != ownership.APPLICATION_ID:
        return "index made before marchdb marked its files"
    if version != SCHEMA_VERSION:
        return f"schema version {version} != {SCHEMA_VERSION}"
    if "meta" not in tables or get_meta(con, "schema_hash") != schema_hash():
        return "schema files changed"
    return "current"


def _drop_everything(con: apsw.Connection) -> None:
    # Triggers first: a table's drop deletes its rows, cascading to other
    # tables whose triggers may name a virtual table already gone (chunks ->
    # fts_chunk). Then virtual tables: dropping them removes their shadow
    # tables too.
    for (name,) in list(con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")):
        con.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    objects = list(
        con.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "ORDER BY CASE WHEN sql LIKE 'CREATE VIRTUAL%' THEN 0 WHEN type = 'view' THEN 1 ELSE 2 END"
        )
    )
    dropped: set[str] = set()
    for kind, name, _sql in objects:
        if kind not in ("table", "view") or name in dropped:
            continue
        exists = con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchall()
        if exists:
            con.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
        dropped.add(name)


def _apply_schema(con: apsw.Connection) -> str:
    """(Re)create the schema; the recall/open logs, which the files cannot
    give back, are carried over (``logs``). Returns what happened to them."""
    # The old tables may hold what a newer marchdb keeps out of the index (a
    # secret of a file indexed before redaction): their freed pages are zeroed.
    con.pragma("secure_delete", True)
    with transaction(con):
        try:
            saved = logs.read(con)
        except apsw.Error:  # an index too old or odd to read its logs
            saved = None
        stashed = carry.stash(con, named_statements("carry.sql"))
        _drop_everything(con)
        con.execute(schema_sql())
        copied, skipped = logs.restore(con, saved)
        carry.restore(con, stashed, named_statements("carry.sql"), ensure_vector_tables)
        set_meta(con, "schema_hash", schema_hash())
        set_meta(con, "created_at", utc_now_iso())
        # Tells caches of long-lived processes (vecindex, term statistics)
        # that this is another index, even when counters and vids restart
        # from the same values after a rebuild in place.
        set_meta(con, "index_id", secrets.token_hex(8))
        con.pragma("user_version", SCHEMA_VERSION)
        # The mark that lets marchdb prove later that this file is its own
        # (ownership.py): nothing else is ever rebuilt or deleted.
        con.pragma("application_id", ownership.APPLICATION_ID)
    # Into the file's header now, where ownership.py reads it first (in WAL
    # mode it would wait in the -wal file for the next checkpoint).
    con.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
    con.pragma("secure_delete", False)
    kept = [logs.describe(copied, skipped) if saved and saved.rows() else "", carry.describe(stashed)]
    return "; ".join(k for k in kept if k)


def checkpoint(con: apsw.Connection, truncate: bool = False) -> tuple[int, int] | None:
    """Copy what the WAL holds into the index file, so that the file alone is
    the cache (a plain copy of ``index.sqlite`` held 0 memories while the
    engine ran: all of it sat in the ``-wal`` file). PASSIVE by default: as
    far as readers allow, never waiting for one; ``truncate``: all of it and
    the ``-wal`` file cut to 0 bytes, only if no reader or writer is in the
    way right now (it never waits either: for an idle moment). Returns
    ``(frames in the WAL, frames in the file)``; None when it could not run
    (busy, inside a transaction, not in WAL mode): a later one will."""
    if con.in_transaction:
        return None
    try:
        if not truncate:
            return con.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        con.set_busy_timeout(0)
        try:
            return con.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        finally:
            con.set_busy_timeout(BUSY_TIMEOUT_MS)
    except apsw.Error:
        return None


def wal_state(con: apsw.Connection, path: str | os.PathLike) -> dict[str, int]:
    """How much of the index sits in its WAL, after a PASSIVE checkpoint:
    ``wal_bytes`` (the ``-wal`` file's size), ``wal_pages`` (pages it holds)
    and ``wal_pages_pending`` (of those, not yet in the index file: a reader
    holds them back; a plain copy of the file lacks them)."""
    done = checkpoint(con)
    try:
        size = os.stat(f"{path}-wal").st_size
    except OSError:
        size = 0
    log, copied = done if done is not None and done[0] >= 0 else (0, 0)
    return {"wal_bytes": size, "wal_pages": log, "wal_pages_pending": max(0, log - copied)}


def remove_index_files(path: str | os.PathLike) -> None:
    """Delete an index file and its WAL/SHM companions, once the file has
    shown it is an index marchdb created (``ownership``); anything else raises
    ``IndexUnavailable`` and nothing is deleted."""
    if ownership.check_owned(path) == ownership.MISSING:
        return  # companions of a file that is not there may be anyone's
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise IndexUnavailable(
                f"cannot delete the index {path}{suffix}: {exc.strerror} (an immutable flag, a read-only folder?); "
                "fix that, or set indexPath in config.json to another file"
            ) from None


def _adopt(con: apsw.Connection) -> None:
    """Mark an exported copy (``marchdb export``) that a home now uses as its
    index: from then on it holds that home's logs, and another export with
    ``--force`` must not replace it (``export.check_target``)."""
    if get_meta(con, "exported_at") and not get_meta(con, "adopted_at"):
        # Best effort: a read-only, busy or full index still opens (the next
        # open tries again).
        with contextlib.suppress(apsw.Error), transaction(con):
            set_meta(con, "adopted_at", utc_now_iso())


def open_index(path: str | os.PathLike) -> tuple[apsw.Connection, str | None]:
    """Open (creating or rebuilding as needed) the index at ``path``.

    Returns ``(connection, rebuilt)`` where ``rebuilt`` is None when the
    existing index was usable, else why it was (re)created — the caller says so.
    A file marchdb did not create is never opened for writing, emptied or
    deleted: ``IndexUnavailable`` names it (``ownership``).
    """
    path = Path(path)
    try:
        make_private_dirs(path.parent)  # the home, usually: private (private.untrusted_home)
    except OSError as exc:
        raise IndexUnavailable(f"cannot create {path.parent}: {exc.strerror}") from None
    if ownership.check_owned(path) != ownership.OURS:
        # The lock (and its file) first, the index file second: an empty file
        # left by a process killed in between is then provably ours.
        with writer_lock(path):
            state = ownership.check_owned(path)  # another process may have made it meanwhile
            if state != ownership.OURS:
                ownership.create_private(path)
                ownership.make_index_private(path)  # an empty file left by a killed process: ours (see above)
                new = connect(path)
                try:
                    _apply_schema(new)
                except apsw.Error as exc:
                    new.close()
                    raise IndexUnavailable(f"cannot create the index {path}: {exc}; check the disk") from None
                return new, None if state == ownership.MISSING else "the index file was empty"
    ownership.make_index_private(path)
    con = None
    try:
        con = _connect_raw(path)
        state = _schema_state(con)
    except (apsw.NotADBError, apsw.CorruptError) as exc:
        if con is not None:
            con.close()
        with writer_lock(path):
            con, kept, unreadable = recreate_index(path)
        logs_note = ""
        if kept:
            logs_note = f"; {kept}"
        elif unreadable:
            logs_note = "; its recall/open logs could not be read and are lost"
        return con, f"the index file was corrupt ({exc}); rebuilt from the Markdown files{logs_note}"
    except apsw.Error as exc:
        if con is not None:
            con.close()
        raise IndexUnavailable(
            f"cannot open the index {path}: {exc}; check the file's and folder's permissions"
        ) from None
    if state == "current":
        _adopt(con)
        return con, None
    with writer_lock(path):
        state = _schema_state(con)  # another process may have done it meanwhile
        if state == "current":
            return con, None
        kept = _apply_schema(con)
        if state != "fresh":
            kept = "; ".join(k for k in (kept, _compact(con)) if k)
    if state == "fresh":
        return con, "the index file was empty"
    return con, f"{state}; rebuilt from the Markdown files" + (f" ({kept})" if kept else "")


def _compact(con: apsw.Connection) -> str:
    """Give the pages of the old schema's tables back to the disk. A rebuild
    in place leaves them free inside the file, which keeps its size: what a
    new schema stops storing (schema 9: the FTS5 tables' copy of every text,
    a third of the index) was never given back. Right after the rebuild the
    file holds only the carried vectors and the logs, so this copies little.
    Returns what to tell the user when it could not run (a full disk: the
    index works, at its old size), else ""."""
    try:
        con.execute("VACUUM")
    except apsw.Error as exc:
        return f"its file keeps its old size: {exc}"
    checkpoint(con, truncate=True)
    return ""


def recreate_index(path: str | os.PathLike) -> tuple[apsw.Connection, str | None, str | None]:
    """Delete the index at ``path`` (``remove_index_files`` checks again that
    it is ours) and create it empty, with the recall and open logs of the old
    one copied in: they are what the files cannot give back. The caller holds
    the ``writer_lock``. Returns the new connection, what was kept
    (``logs.describe``; None when there were no log rows) and why the old
    logs could not be read (None when they could)."""
    saved, unreadable = logs.read_file(path)
    remove_index_files(path)
    ownership.create_private(path)
    con = connect(path)
    _apply_schema(con)
    kept = None
    if saved is not None and saved.rows():
        with transaction(con):
            kept = logs.describe(*logs.restore(con, saved))
    return con, kept, unreadable


def ensure_vector_tables(con: apsw.Connection, dim: int) -> None:
    """Create the vec0 tables for a model of dimension ``dim`` (idempotent)."""
    con.execute(_sql_text("vectors.sql").replace("{dim}", str(int(dim))))
    if int(dim) % 8 == 0:
        con.execute(_sql_text("vectors_bits.sql").replace("{dim}", str(int(dim))))


def has_vector_tables(con: apsw.Connection) -> bool:
    """Whether the vec0 tables exist (made by ``ensure_vector_tables`` once a
    model's dimension is known, dropped with every vector on a model change)."""
    return has_table(con, "vec_meta")


def drop_vector_tables(con: apsw.Connection) -> None:
    """Drop every vector (the model changed: everything is re-embedded)."""
    for table in ("vec_meta", "vec_chunk", "vec_meta_bits", "vec_chunk_bits"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute("DELETE FROM vectors")


@contextlib.contextmanager
def transaction(con: apsw.Connection) -> Iterator[apsw.Connection]:
    """A write transaction that takes SQLite's write lock up front.

    ``with con:`` starts a deferred transaction: one that reads first and
    writes later fails at once with "database is locked" if another
    connection wrote in between (WAL cannot upgrade a stale snapshot).
    BEGIN IMMEDIATE waits (busy timeout) for the lock instead.
    """
    if not con.in_transaction:
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            # SQLite may have rolled back already (a full disk does): a second
            # ROLLBACK would fail and hide the real error.
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    else:
        with con:
            yield con
