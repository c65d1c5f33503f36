"""The dirty check's quick scan: seed 000's path / mtime / size rule over the
folders that changed, not every file.

A full scan ``stat``s every file: about 0.7 s of CPU at 100,000 memories,
paid by one recall in ten in a process that recalls often without the
engine's watcher (an agent loop on the Python API, an MCP server started
with no engine). After one full scan a process keeps each folder's mtime
(``FolderClock``); a later check looks at:

* the folders: one ``lstat`` each (a few hundred at 100,000 memories). A
  folder whose mtime moved had a file added, removed or renamed in it (an
  editor saving through a temp file and a rename, ``memory_save``, a sync
  tool): it is listed again, and every file in it, or known in it, is looked
  at; a new folder is walked whole, a folder gone takes its files with it;
* the files changed in the last ``RECENT_SECONDS`` as the index knows them
  (what a person is editing now), at most ``RECENT_MAX``;
* one file in ``ROTATION`` of the others, in turn.

What it cannot see at once: a file rewritten in place (a folder's mtime does
not move for that) that was not changed recently. Such an edit is seen
within ``ROTATION`` checks, or at the next full scan (``FULL_SCAN_SECONDS``);
the engine's watcher sees it at once. Symlinks, unreadable folders and bad
names are reported by full scans only.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from marchdb.vault.files import folder_identity, hidden, is_memory_path, name_ok, walk

#: A process's checks go back to a full scan this often.
FULL_SCAN_SECONDS = 300.0
#: Vaults smaller than this get a full scan at every check, as seed 000 has
#: it: an edit in place of any file is seen at the next check. A full stat
#: walk of 20,000 files costs about 0.3 s of CPU; past that, quick checks.
QUICK_FROM_FILES = 20_000
#: Each quick check looks at one known file in this many, in turn: with a
#: check every 5 s (``keeper.DIRTY_CHECK_SECONDS``), every file within a minute.
ROTATION = 12
#: Files the index saw change this recently are looked at by every check ...
RECENT_SECONDS = 24 * 3600
#: ... at most this many of them.
RECENT_MAX = 1000
#: A folder whose mtime is this close to when it was listed is listed again
#: at the next check: a file system with a coarse clock (FAT: 2 s) may give a
#: file added just after the listing the mtime the folder already had.
RACY_NS = 2_000_000_000


@dataclass
class FolderClock:
    """What a process saw of the vault's folders at its last full scan (and
    the quick checks since)."""

    root: tuple[int, int] | None
    #: Relative folder ("" for the root) -> its mtime (ns) before it was listed.
    folders: dict[str, int]
    #: ``time.time_ns()`` when each folder was last listed.
    listed: dict[str, int] = field(default_factory=dict)
    full_at: float = field(default_factory=time.time)
    turn: int = 0
    #: Files the full scan saw.
    files: int = 0

    @classmethod
    def after_walk(cls, root: Path, folders: dict[str, int], started_ns: int, files: int = 0) -> FolderClock:
        return cls(folder_identity(root), folders, dict.fromkeys(folders, started_ns), files=files)

    def fresh(self) -> bool:
        """Whether a quick check may stand in for a full scan now: a vault
        large enough for a full scan to cost (``QUICK_FROM_FILES``), scanned
        in full lately (``FULL_SCAN_SECONDS``)."""
        return self.files >= QUICK_FROM_FILES and time.time() - self.full_at < FULL_SCAN_SECONDS


def paths_to_check(con: apsw.Connection, root: Path, clock: FolderClock) -> list[str] | None:
    """The relative paths a quick check hands to an incremental sync (see the
    module), the clock brought up to date; None when only a full scan can
    tell (the root replaced, a folder turned into a link or a file, a folder
    that cannot be read)."""
    if folder_identity(root) != clock.root:
        return None
    base = os.path.realpath(root)
    moved, gone = [], []
    for rel, mtime in clock.folders.items():
        try:
            st = os.lstat(os.path.join(base, rel) if rel else base)
        except FileNotFoundError:
            gone.append(rel)
            continue
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        if st.st_mtime_ns != mtime or clock.listed.get(rel, 0) - mtime < RACY_NS:
            moved.append(rel)
    paths: set[str] = set()
    for rel in gone:
        if rel == "":
            return None
        del clock.folders[rel]
        clock.listed.pop(rel, None)
        paths.update(_known_below(con, rel, recursive=True))
    for rel in moved:
        if rel in clock.folders and not _relist(base, rel, clock, paths):
            return None
        paths.update(_known_below(con, rel, recursive=False))
    recent = time.time_ns() - int(RECENT_SECONDS * 1e9)
    paths.update(r[0] for r in con.execute("SELECT path FROM files WHERE mtime_ns >= ? LIMIT ?", (recent, RECENT_MAX)))
    # One slice of the rowids in turn (a range of the table's own b-tree, not a scan of it).
    top = int(con.execute("SELECT coalesce(max(rowid), 0) FROM files").fetchone()[0])  # type: ignore[index]
    step = top // ROTATION + 1
    low = (clock.turn % ROTATION) * step
    paths.update(r[0] for r in con.execute("SELECT path FROM files WHERE rowid > ? AND rowid <= ?", (low, low + step)))
    clock.turn += 1
    return sorted(paths)


def _relist(base: str, rel: str, clock: FolderClock, paths: set[str]) -> bool:
    """List one folder whose mtime moved: its memory files go into ``paths``,
    a folder new in it is walked whole. False when it cannot be listed."""
    absdir = os.path.join(base, rel) if rel else base
    try:
        mtime = os.lstat(absdir).st_mtime_ns
        listed = time.time_ns()
        entries = list(os.scandir(absdir))
    except OSError:
        return False
    clock.folders[rel], clock.listed[rel] = mtime, listed
    for entry in entries:
        name = entry.name
        relpath = f"{rel}/{name}" if rel else name
        if hidden(name) or not name_ok(name):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                if relpath not in clock.folders:
                    folders: dict[str, int] = {}
                    started = time.time_ns()
                    found, _ = walk(base, folders, top=relpath)
                    paths.update(found)
                    clock.folders.update(folders)
                    clock.listed.update(dict.fromkeys(folders, started))
            elif is_memory_path(relpath):
                paths.add(relpath)
        except OSError:
            continue
    return True


def _known_below(con: apsw.Connection, rel: str, recursive: bool) -> list[str]:
    """The files the index knows in folder ``rel`` (and below it when
    ``recursive``): a range of the ``files`` primary key."""
    if rel == "":
        sql = "SELECT path FROM files" + ("" if recursive else " WHERE instr(path, '/') = 0")
        return [r[0] for r in con.execute(sql)]
    low, high = rel + "/", rel + "0"  # "0" follows "/" in code point order
    rows = con.execute("SELECT path FROM files WHERE path >= ? AND path < ?", (low, high))
    return [p for (p,) in rows if recursive or "/" not in p[len(low) :]]
