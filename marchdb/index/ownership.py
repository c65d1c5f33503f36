"""Whose file is at the index path? marchdb deletes or rebuilds only its own.

``indexPath`` in config.json is a path a person typed: it may name their
notes, another application's SQLite database, or a link. The index is a
cache marchdb rebuilds at will (schema change, corruption, ``marchdb
rebuild``), so before anything is dropped, deleted or even opened for
writing (opening switches the file to WAL mode) the file must prove it is an
index marchdb created:

* its SQLite header carries marchdb's ``application_id`` (every index marchdb
  creates sets it; a corrupt index whose header survived is still ours and
  is rebuilt), or
* ``application_id`` is 0 and its ``meta`` table holds marchdb's
  ``schema_hash`` and ``index_id`` (an index made before marchdb set the id).

Anything else — a text file, another program's database, a folder, a
symbolic link — is an ``IndexUnavailable`` error that names the file; it is
never opened for writing, deleted or emptied.

An *empty* file (0 bytes, or an SQLite database with no table at all) holds
nothing to lose, and it is exactly what a marchdb process killed while it
created the index leaves behind. It is taken over only when the writer lock
file ``<index>.lock`` lies next to it: marchdb creates that file before it
creates an index, so an empty file without it was made by someone else.
"""

from __future__ import annotations

import os
import stat
import urllib.parse
from pathlib import Path

import apsw

from marchdb.errors import IndexUnavailable

#: ``PRAGMA application_id`` of every index marchdb creates: "MrDB".
APPLICATION_ID = 0x4D724442
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The states ``index_file_state`` answers.
MISSING, EMPTY, OURS = "missing", "empty", "ours"


def lock_path(index_path: str | os.PathLike) -> str:
    """The writer lock file next to an index (``db.writer_lock``)."""
    return os.path.abspath(f"{index_path}.lock")


def _refuse(path: Path, why: str) -> IndexUnavailable:
    return IndexUnavailable(
        f"{path} is not a marchdb index ({why}); marchdb never deletes or rewrites a file it did not create: "
        "set indexPath in config.json to another file (or move this one away)"
    )


def _read_head(path: Path) -> bytes:
    """The first 100 bytes of the file (fewer when it is shorter).

    Read through SQLite's own file layer, never with ``os.open``/``os.close``:
    closing *any* descriptor of a file drops every POSIX lock this process
    holds on it, so a check run while another connection of this process has
    the index open (the engine's watcher opens a second Store) silently
    released that connection's shared lock. Another process's connection
    then believed it was the last one, checkpointed and deleted the ``-wal``
    file still in use, and writes were lost. SQLite's unix layer keeps a
    descriptor open until its inode's locks are gone, so this read is safe.
    The caller has already checked with ``lstat`` that this is a regular
    file and not a link (SQLite opens with ``O_NOFOLLOW`` too; a FIFO swapped
    in between the two would block the open — only someone who can already
    write into MARCH_HOME could do that).
    """
    f = apsw.VFSFile("", os.fspath(path), [apsw.SQLITE_OPEN_MAIN_DB | apsw.SQLITE_OPEN_READONLY, 0])
    try:
        # Exactly the bytes there are: a short read would drop trailing zeros
        # (a file of a few zero bytes is not "empty").
        size = min(100, int(f.xFileSize()))
        return bytes(f.xRead(size, 0)) if size else b""
    finally:
        f.xClose()


def _tables_and_meta(path: Path, wal: bool) -> tuple[set[str], dict[str, str], int]:
    """Table names and (when there is one) the ``meta`` table of an SQLite
    file, read without writing anything: ``immutable=1`` creates no -wal or
    -shm file next to another program's database; a WAL file that has a
    live ``-wal`` is opened read-only instead, so its newest content counts
    (also its ``application_id``: set in a transaction, the mark stays in the
    ``-wal`` file until a checkpoint copies it into the header)."""
    immutable = not (wal and os.path.exists(f"{path}-wal"))
    uri = f"file:{urllib.parse.quote(os.fspath(path))}?mode=ro" + ("&immutable=1" if immutable else "")
    con = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    # A writer in another process (a sync, the engine) may hold the file for
    # a moment: wait, as marchdb's own connections do, rather than call a
    # busy index "not ours".
    con.set_busy_timeout(10_000)
    try:
        app_id = int(con.pragma("application_id") or 0)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        meta: dict[str, str] = {}
        if "meta" in tables:
            try:
                meta = {str(k): str(v) for k, v in con.execute("SELECT key, value FROM meta")}
            except apsw.Error:
                meta = {}
        return tables, meta, app_id
    finally:
        con.close()


def index_file_state(path: str | os.PathLike) -> str:
    """``MISSING``, ``EMPTY`` (0 bytes or no table: may be taken over, see
    ``may_take_over``) or ``OURS``; raises ``IndexUnavailable`` naming the file
    for anything marchdb did not create. Reads at most the header and the
    schema; writes nothing."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return MISSING
    except OSError as exc:
        raise IndexUnavailable(f"cannot look at the index file {path}: {exc.strerror}; check the folder") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "it is a symbolic link, and marchdb never writes through links; name the real file")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "it is a folder or a device, not a file")
    try:
        head = _read_head(path)
    except apsw.Error as exc:
        raise IndexUnavailable(f"cannot read the index file {path}: {exc}; check its permissions") from None
    if not head:
        return EMPTY
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise _refuse(path, "it is not an SQLite database")
    app_id = int.from_bytes(head[68:72], "big")
    if app_id == APPLICATION_ID:
        return OURS
    if app_id != 0:
        raise _refuse(path, f"it is another application's SQLite database, application_id {app_id:#x}")
    try:
        tables, meta, app_id = _tables_and_meta(path, wal=head[18:20] == b"\x02\x02")
    except apsw.BusyError:
        raise IndexUnavailable(
            f"the index {path} stayed locked by another process for 10 s; try again in a moment"
        ) from None
    except apsw.Error as exc:
        raise _refuse(path, f"an SQLite file without marchdb's mark that cannot be read: {exc}") from None
    if app_id == APPLICATION_ID:
        return OURS  # the mark is still in the -wal file (no checkpoint since the index was made)
    if not tables:
        return EMPTY
    if "schema_hash" in meta and "index_id" in meta:
        return OURS  # made by a marchdb from before the application_id
    shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    raise _refuse(path, f"an SQLite database of another program, with tables {shown}")


def may_take_over(path: str | os.PathLike) -> bool:
    """Whether an ``EMPTY`` index file may be used: only when marchdb's lock
    file lies next to it (see the module's doc)."""
    return os.path.lexists(lock_path(path))


def check_owned(path: str | os.PathLike) -> str:
    """``index_file_state``, with an empty file nobody can show is ours refused too."""
    state = index_file_state(path)
    if state == EMPTY and not may_take_over(path):
        what = "an SQLite database with no tables" if os.path.getsize(path) else "an empty file"
        raise _refuse(Path(path), f"it is {what}, and no marchdb lock file lies next to it; delete it if it is yours")
    return state


#: The index's files: SQLite gives its -wal and -shm the mode of the database file.
INDEX_FILE_MODE = 0o600


def create_private(path: str | os.PathLike) -> None:
    """Create the index file empty with mode 0600 before SQLite opens it (an
    existing one is left to ``make_index_private``): SQLite would create it
    under the umask, 0644 as a rule, and an ``indexPath`` outside the 0700
    home then showed every memory's text and the logs to every user (the
    export is 0600 for the same reason)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), INDEX_FILE_MODE))
    except FileExistsError:
        pass
    except OSError as exc:
        raise IndexUnavailable(f"cannot create the index {path}: {exc.strerror}; check the folder") from None


def make_index_private(path: str | os.PathLike) -> None:
    """Take group and other access off the index and its -wal and -shm (an
    index made by an earlier marchdb, or copied in under a wider umask);
    only this user's regular files, never a link. Best effort: a file that
    cannot be changed (a read-only mount) is used as it is.

    By path, never through a descriptor: closing any descriptor of the file
    drops every POSIX lock this process holds on it, and another process
    could then delete the -wal file of a connection still open here (the
    ownership check reads the header the same way for the same reason).
    Between the look and the change a link could be swapped in; the change
    only ever takes access away, and only from files of this user."""
    for suffix in ("", "-wal", "-shm"):
        name = f"{path}{suffix}"
        try:
            st = os.lstat(name)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
                os.chmod(name, INDEX_FILE_MODE)
        except OSError:
            continue  # absent, or cannot be changed: used as it is
