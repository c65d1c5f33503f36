"""``marchdb export FILE``: the index as one portable SQLite file.

``VACUUM INTO`` writes a consistent snapshot (the WAL folded in) to a fresh
file: every table — memories, chunks, FTS5, the vec0 vectors, the model's
calibration in ``meta``, the recall and open logs. Paths in the index are
relative to the memory root and vectors are keyed by content hash and model
fingerprint, so the same Markdown vault at another path, with the same model,
uses the copy as its index without embedding anything again.

Safety: the copy is written to a temporary name beside the target and then
renamed over it, so a crash never leaves a half file under the name; an
existing file is replaced only with ``force`` and only when it is an earlier
export that no home has taken as its index (nor has open); nothing is
written inside the memory root; a symlink is never followed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import apsw

from marchdb.clock import utc_now_iso
from marchdb.config import Config
from marchdb.errors import FileError, InvalidInput
from marchdb.vault.files import fsync_dir, is_inside, place_new


def _is_earlier_export(path: Path) -> bool:
    """Whether ``path`` is a copy ``marchdb export`` wrote that no home has
    taken as its index since (``db._adopt``): the one file ``--force`` may
    replace. A home's own index — in use or not — is never one."""
    try:
        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error:
        return False
    try:
        keys = {row[0] for row in con.execute("SELECT key FROM meta WHERE key IN ('exported_at', 'adopted_at')")}
        return keys == {"exported_at"}
    except apsw.Error:
        return False
    finally:
        con.close()


#: Names SQLite gives a database's companion files: a file of that name
#: beside a database is taken for its journal (and deleted, or rolled back).
_COMPANIONS = ("-journal", "-wal", "-shm")


#: Longest file name of an export, in bytes: the copy is first written beside
#: it as ``.<name>.<12 hex>.tmp``, whose ``-journal`` must fit 255 bytes too.
MAX_NAME_BYTES = 255 - len(".") - len(".0123456789ab.tmp") - len("-journal")


def check_target(cfg: Config, dest: str | os.PathLike, force: bool) -> Path:
    """The absolute target path, or an ``InvalidInput`` saying why not."""
    raw = Path(os.path.expanduser(str(dest)))
    if not str(dest).strip() or raw.name in ("", ".", ".."):
        raise InvalidInput("give the file to write, e.g. `marchdb export ~/march-index.sqlite`")
    target = raw.absolute()
    size = len(os.fsencode(target.name))
    if size > MAX_NAME_BYTES:
        raise InvalidInput(
            f"the file name is too long ({size} bytes; an export's name may have {MAX_NAME_BYTES}: its copy is "
            "written beside it under a longer one first); choose a shorter name"
        )
    try:
        os.lstat(target.parent)
    except FileNotFoundError:
        pass  # said just below
    except OSError as exc:  # a folder name too long, a folder that cannot be looked into
        raise InvalidInput(f"cannot look at {target.parent}: {exc.strerror}; choose another folder") from None
    if not target.parent.is_dir():
        raise InvalidInput(f"{target.parent} does not exist; create the folder first")
    if is_inside(str(cfg.memory_root), str(target)):
        raise InvalidInput(
            f"{target} is inside the memory root {cfg.memory_root}; marchdb writes nothing there, choose another folder"
        )
    index = os.path.realpath(cfg.index_path)
    if os.path.realpath(target) in (index, index + ".lock", *(index + c for c in _COMPANIONS)):
        raise InvalidInput(f"{target} is the index itself; export to another file")
    home = os.path.realpath(cfg.home)
    parent = os.path.realpath(target.parent)
    if is_inside(home, parent) and (parent != home or not target.name.endswith((".sqlite", ".db"))):
        # Its config.json, logs, profiles and models: an export there breaks the home.
        raise InvalidInput(
            f"{target} is among marchdb's own files in its home {cfg.home}; export elsewhere, or to a "
            "file directly in the home named like backup.sqlite"
        )
    if target.name.endswith(_COMPANIONS):
        raise InvalidInput(
            f"{target.name} ends like a name SQLite gives a database's journal, which it would take for one "
            "(and delete); choose a name ending in .sqlite"
        )
    if target.is_dir():
        raise InvalidInput(f"{target} is a folder; give the name of the file to write in it")
    if target.is_symlink():
        raise InvalidInput(f"{target} is a symlink; marchdb never writes through a link, give the real path")
    if target.exists():
        if not force:
            raise InvalidInput(f"{target} exists; pass --force to replace it (only an earlier export is replaced)")
        if not target.is_file() or not _is_earlier_export(target):
            raise InvalidInput(
                f"{target} exists and is not an earlier export (another file, or an index a marchdb home "
                "uses: replacing it would lose that home's logs); marchdb never overwrites such a file, "
                "choose another name"
            )
        if any(os.path.lexists(f"{target}{c}") for c in _COMPANIONS):
            raise InvalidInput(
                f"{target} is open in another program (it has a journal or -wal file beside it); "
                "close that program or choose another name"
            )
    return target


def export_index(con: apsw.Connection, cfg: Config, dest: str | os.PathLike, force: bool = False) -> dict:
    """Write the index ``con`` to ``dest`` as one self-contained SQLite file.

    Returns ``{"path", "bytes", "memories", "vectors", "model",
    "calibrated", "recall_log", "open_log", "exported_at"}``.
    """
    target = check_target(cfg, dest, force)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        try:
            # Made empty and private first (VACUUM INTO fills an empty file):
            # the copy holds every memory's text and the logs, readable by
            # its owner only, as the home it comes from.
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
            con.execute("VACUUM INTO ?", (str(tmp),))
        except (apsw.Error, OSError) as exc:
            raise FileError(f"cannot write {target}: {exc}; check the folder's permissions and free space") from None
        exported_at = utc_now_iso()
        copy = apsw.Connection(str(tmp))
        try:
            with copy:
                # Another file from now on: caches keyed by the index's
                # identity (vecindex, term statistics) must not mix the two.
                copy.execute(
                    "INSERT INTO meta(key, value) VALUES ('index_id', ?), ('exported_at', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (secrets.token_hex(8), exported_at),
                )
                # An export of a copy a home had adopted is a fresh export again,
                # and belongs to whichever vault first uses it (paths are relative).
                copy.execute("DELETE FROM meta WHERE key IN ('adopted_at', 'memory_root', 'memory_root_index')")
            counts = copy.execute(
                "SELECT (SELECT count(*) FROM memory_index), (SELECT count(*) FROM vectors), "
                "(SELECT value FROM meta WHERE key = 'model_fingerprint'), "
                "EXISTS (SELECT 1 FROM meta WHERE key = 'calibration'), "
                "(SELECT count(*) FROM recall_log), (SELECT count(*) FROM open_log)"
            ).fetchone()
            assert counts is not None  # a SELECT without FROM always gives one row
            info = dict(zip(("memories", "vectors", "model", "calibrated", "recall_log", "open_log"), counts))
        finally:
            copy.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        if force:
            os.replace(tmp, target)
        elif not place_new(tmp, target):  # the name was taken meanwhile
            raise InvalidInput(f"{target} exists; pass --force to replace it (only an earlier export is replaced)")
        fsync_dir(target.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    info["calibrated"] = bool(info["calibrated"])
    return {"path": str(target), "bytes": target.stat().st_size, **info, "exported_at": exported_at}
