"""The vault's files: which ones are memories, and reading and writing them safely.

One rule decides which files under the memory root are memory files, for the
full scan, the watcher and ``memory_search`` alike: a regular file whose name
ends in ``.md`` (any letter case), with no hidden part in its path
(``.obsidian``, ``.trash``, ``.git``, dotfiles, marchdb's own
``.marchdb-tmp-*`` files). Symlinks are never followed, so nothing outside the
root is read or written through one, and no file is seen twice.

Writes are atomic: a hidden temp file in the target folder, fsynced, then
moved into place (``os.replace``) or linked to a new name (``os.link``, which
never overwrites), and the folder fsynced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

#: Hidden temp files of atomic writes (sync, the watcher and search skip them).
TEMP_PREFIX = ".marchdb-tmp-"

#: A stat walk's findings: relative path -> (mtime_ns, size).
Found = dict[str, tuple[int, int]]
#: Problems found by the walk itself: (relative path, kind, detail).
WalkProblem = tuple[str, str, str]


def is_memory_path(rel: str) -> bool:
    """Whether ``rel`` ('/'-separated, relative to the root) names a possible
    memory file by the rule above (the file itself is not looked at)."""
    parts = rel.split("/")
    if any(not p or p in (".", "..") or p.startswith(".") for p in parts):
        return False
    return rel.lower().endswith(".md")


def walk(root: str | os.PathLike) -> tuple[Found, list[WalkProblem]]:
    """Every memory file below ``root`` → ``(mtime_ns, size)``, by relative path,
    and the problems met on the way (symlinks, unreadable folders)."""
    found: Found = {}
    problems: list[WalkProblem] = []
    stack: list[tuple[str, str]] = [("", os.fspath(root))]
    while stack:
        rel, absdir = stack.pop()
        try:
            entries = os.scandir(absdir)
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append((rel or ".", "unreadable_dir", f"cannot list folder: {exc.strerror}"))
            continue
        with entries:
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                relpath = f"{rel}/{name}" if rel else name
                try:
                    if entry.is_symlink():
                        if entry.is_dir() or name.lower().endswith(".md"):
                            problems.append(
                                (relpath, "symlink", "symlinks are not followed; move the file into the memory root")
                            )
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((relpath, entry.path))
                        continue
                    if not name.lower().endswith(".md"):
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        continue  # a FIFO or device named .md would block or lie
                except FileNotFoundError:
                    continue  # vanished between listing and stat
                except OSError as exc:
                    problems.append((relpath, "unreadable", f"cannot stat: {exc.strerror}"))
                    continue
                found[relpath] = (st.st_mtime_ns, st.st_size)
    return found, problems


def stat_paths(root: Path, rels: Iterable[str]) -> Found:
    """``walk``'s answer for just ``rels`` (the watcher's and save's incremental
    syncs): the ones that are memory files now, with their mtime and size."""
    found: Found = {}
    for rel in rels:
        if not is_memory_path(rel):
            continue
        try:
            st = os.lstat(root / rel)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):  # never a symlink, FIFO or device
            found[rel] = (st.st_mtime_ns, st.st_size)
    return found


def is_inside(root: str, candidate: str) -> bool:
    """True when ``candidate`` (a real path) is ``root`` or below it."""
    root = os.path.realpath(root)
    candidate = os.path.realpath(candidate)
    return candidate == root or candidate.startswith(root.rstrip(os.sep) + os.sep)


def read_file(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """Read at most ``limit + 1`` bytes of the regular file ``path`` (so a
    caller can tell "larger than limit"), without following a symlink and
    without blocking on a FIFO. Returns ``(data, stat)``; raises
    ``FileNotFoundError`` and other ``OSError`` (``ELOOP`` for a symlink,
    ``EINVAL`` for something that is not a regular file)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new name in ``folder`` durable."""
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


def place_new(tmp: Path, target: Path) -> bool:
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
