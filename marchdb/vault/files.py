"""The vault's files: which ones are memories, and reading and writing them safely.

One rule decides which files under the memory root are memory files, for the
full scan, the watcher and ``memory_search`` alike: a regular file whose name
ends in ``.md`` (any letter case), with no hidden part in its path
(``.obsidian``, ``.trash``, ``.git``, dotfiles, marchdb's own
``.marchdb-tmp-*`` files). Symlinks are never followed, so nothing outside the
root is read or written through one, and no file is seen twice.

A file name that is not valid UTF-8 (``caf\\xe9.md`` from an old Latin-1
system) cannot be stored, printed or sent as JSON: such a file (or folder) is
left out and reported as a ``bad_file_name`` problem, under a printable
spelling of its name (``display_path``).

Reads go through ``read_file``: a regular file only, opened without following
a link in its name or in any folder between the root and it, and without
blocking on a FIFO. Writes check every folder between the root and the
target the same way (``safe_folder``) and refuse a link.

Writes are atomic: a hidden temp file in the target folder, fsynced, then
moved into place (``os.replace``) or linked to a new name (``os.link``, which
never overwrites), and the folder fsynced. Processes saving into one vault —
even from different homes with different indexes — take ``vault_lock`` (a
hidden ``.marchdb.lock`` in the memory root), so two of them never create two
files with the same id.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from marchdb import flocks
from marchdb.errors import FileError
from marchdb.private import open_private

#: Hidden temp files of atomic writes (sync, the watcher and search skip them).
TEMP_PREFIX = ".marchdb-tmp-"

#: A stat walk's findings: relative path -> (mtime_ns, size).
Found = dict[str, tuple[int, int]]
#: Problems found by the walk itself: (relative path, kind, detail).
WalkProblem = tuple[str, str, str]
#: Pseudo file systems a walk never enters, whatever the root (a forced ``/``).
VIRTUAL_TREES = ("/proc", "/sys", "/dev")
#: The vault's save lock, hidden so that sync, the watcher and search skip it.
VAULT_LOCK_NAME = ".marchdb.lock"


def name_ok(rel: str) -> bool:
    """Whether a path (as ``os`` decodes it) is valid UTF-8, so that it can be
    stored in the index, printed and sent as JSON."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def display_path(rel: str) -> str:
    """A printable spelling of a path whose name is not valid UTF-8: each
    undecodable byte as ``\\xNN`` (``caf\\xe9.md``). Valid names are returned as they are."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


def bad_name_problem(rel: str) -> WalkProblem:
    """The ``bad_file_name`` problem row of a path that is not valid UTF-8."""
    return (
        display_path(rel),
        "bad_file_name",
        "the name is not valid UTF-8, so this file (or folder) is left out; rename it",
    )


def hidden(rel: str) -> bool:
    """Whether ``rel`` ('/'-separated, relative to the root) is never
    scanned: a part of it is hidden (``.git``, an editor's or marchdb's own
    temp file), empty, ``.`` or ``..``."""
    return any(not p or p in (".", "..") or p.startswith(".") for p in rel.split("/"))


def is_memory_path(rel: str) -> bool:
    """Whether ``rel`` ('/'-separated, relative to the root) names a possible
    memory file by the rule above (the file itself is not looked at)."""
    return not hidden(rel) and rel.lower().endswith(".md")


def walk(
    root: str | os.PathLike, folders: dict[str, int] | None = None, top: str = ""
) -> tuple[Found, list[WalkProblem]]:
    """Every memory file below ``root`` → ``(mtime_ns, size)``, by relative path,
    and the problems met on the way (symlinks, unreadable folders).

    ``folders``: filled with every folder listed, by relative path (the root
    is ``""``), and its mtime just before it was listed (``dirty``'s quick
    check). ``top``: walk only that folder of the root (relative), the
    paths still relative to the root."""
    found: Found = {}
    problems: list[WalkProblem] = []
    # From the real path down: no link is followed below it, so every folder's
    # path is real and a pseudo file system is recognised by its name.
    base = os.path.realpath(root)
    stack: list[tuple[str, str]] = [(top, os.path.join(base, top) if top else base)]
    while stack:
        rel, absdir = stack.pop()
        if any(absdir == tree or absdir.startswith(tree + "/") for tree in VIRTUAL_TREES):
            continue  # /proc and friends: endless, and nothing there is a memory
        try:
            if folders is not None:
                folders[rel] = os.lstat(absdir).st_mtime_ns  # before listing: a change meanwhile shows next time
            entries = os.scandir(absdir)
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append((rel or ".", "unreadable_dir", f"cannot list folder: {exc.strerror}"))
            continue
        with entries:
            for entry in entries:
                name = entry.name
                if hidden(name):
                    continue
                relpath = f"{rel}/{name}" if rel else name
                try:
                    if not name_ok(name):
                        if entry.is_dir(follow_symlinks=False) or name.lower().endswith(".md"):
                            problems.append(bad_name_problem(relpath))
                        continue
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
                        # A FIFO or device named .md would block or lie: never read, but said.
                        problems.append((relpath, "not_regular", "a FIFO, socket or device named .md; never read"))
                        continue
                except FileNotFoundError:
                    continue  # vanished between listing and stat
                except OSError as exc:
                    problems.append((relpath, "unreadable", f"cannot stat: {exc.strerror}"))
                    continue
                found[relpath] = (st.st_mtime_ns, st.st_size)
    return found, problems


def stat_paths(root: Path, rels: Iterable[str]) -> Found:
    """``walk``'s answer for just ``rels`` (the watcher's and save's incremental
    syncs, the dirty check's quick scan): the ones that are memory files now,
    with their mtime and size."""
    found: Found = {}
    real: dict[str, bool] = {}  # folders looked at in this call: thousands of paths share a few hundred
    base = os.fspath(root).rstrip(os.sep) or os.sep
    for rel in rels:
        if not is_memory_path(rel) or not name_ok(rel):
            continue  # a bad name waits for a full scan, which reports it
        try:
            st = os.lstat(f"{base}{os.sep}{rel}")
            folder = rel.rpartition("/")[0]
            ok = real.get(folder)
            if ok is None:
                ok = real[folder] = _folders_are_real(root, rel)
            if not ok:
                continue
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):  # never a symlink, FIFO or device
            found[rel] = (st.st_mtime_ns, st.st_size)
    return found


def _folders_are_real(root: Path, rel: str) -> bool:
    """Whether every folder between ``root`` and ``rel`` is a real folder (not
    a link): a file below a linked folder is not in the vault."""
    parts = rel.split("/")[:-1]
    here = Path(root)
    for part in parts:
        here = here / part
        if not stat.S_ISDIR(os.lstat(here).st_mode):
            return False
    return True


def folder_identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """Which folder is at ``path`` (device and inode: another drive mounted
    there has inode 2 too, a folder renamed into its place another inode);
    None when nothing is. The watcher and a full scan both tell by it that the
    root was replaced."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def is_inside(root: str, candidate: str) -> bool:
    """True when ``candidate`` (a real path) is ``root`` or below it."""
    root = os.path.realpath(root)
    candidate = os.path.realpath(candidate)
    return candidate == root or candidate.startswith(root.rstrip(os.sep) + os.sep)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRFLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_under(root: Path, rel: str, flags: int) -> int:
    """Open ``root/rel`` with ``flags`` where neither the file nor any folder
    between ``root`` and it may be a symbolic link (``ELOOP`` or ``ENOTDIR``
    otherwise). Each step is opened relative to the folder before it, so a
    folder swapped for a link meanwhile is caught too."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise OSError(errno.EINVAL, "not a path inside the memory root", rel)
    if os.open not in os.supports_dir_fd:  # pragma: no cover - Windows: check, then open
        if not _folders_are_real(root, rel):
            raise OSError(errno.ELOOP, "a folder on the path is a symbolic link", str(root / rel))
        return os.open(root / rel, flags | _NOFOLLOW)
    fd = os.open(root, _DIRFLAGS & ~_NOFOLLOW)  # the root itself may be a link the user set up
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIRFLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(exc.errno, "a folder on the path is a symbolic link", str(root / rel)) from None
                raise
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags | _NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def read_file(path: Path, limit: int, root: Path | None = None) -> tuple[bytes, os.stat_result]:
    """Read at most ``limit + 1`` bytes of the regular file ``path`` (so a
    caller can tell "larger than limit"), without following a symlink and
    without blocking on a FIFO. With ``root`` (``path`` lies below it), no
    folder between the two may be a link either. Returns ``(data, stat)``;
    raises ``FileNotFoundError`` and other ``OSError`` (``ELOOP`` for a
    symlink, ``EINVAL`` for something that is not a regular file)."""
    if root is not None:
        return read_under(Path(root), Path(path).relative_to(root).as_posix(), limit)
    return _read_open(os.open(path, _READ_FLAGS), path, limit)


def read_under(root: Path, rel: str, limit: int) -> tuple[bytes, os.stat_result]:
    """``read_file(root / rel, limit, root=root)`` for a ``/``-separated
    ``rel`` already relative to ``root`` (a sync reads thousands)."""
    return _read_open(_open_under(root, rel, _READ_FLAGS), f"{root}/{rel}", limit)


_READ_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_open(fd: int, path: str | os.PathLike, limit: int) -> tuple[bytes, os.stat_result]:
    """What ``read_file`` returns, from the file open as ``fd`` (closed here)."""
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


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading as a binary file object, when it is a
    regular file: never through a symlink (``ELOOP``), never blocking on a
    FIFO or a device (``EINVAL``: "not a regular file"). For sources read
    in a stream (an import's chat files); ``read_file`` reads a whole file."""
    fd = open_private(path, os.O_RDONLY)
    try:
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def safe_folder(root: Path, rel_dir: str | os.PathLike, create: bool = False) -> Path:
    """``root/rel_dir``, after checking (and with ``create``, making) every
    folder between the two: each must be a real folder, never a symbolic link,
    so that nothing is written outside the root through one. Raises
    ``OSError`` (``ELOOP`` for a link, ``ENOTDIR`` for a file in the way)."""
    here = Path(root)
    for part in Path(rel_dir).parts:
        if part in ("", ".", "..") or "/" in part:
            raise OSError(errno.EINVAL, "not a folder inside the memory root", str(rel_dir))
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(here)
            st = os.lstat(here)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "a folder on the path is a symbolic link", str(here))
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(errno.ENOTDIR, "a file stands where a folder should be", str(here))
    return here


@contextlib.contextmanager
def vault_lock(root: Path) -> Iterator[None]:
    """Cross-process lock of one memory root, for saves: held from "which
    file holds this id?" to the file being written, so two processes (even
    with different homes and indexes) never both create the same id. A
    hidden ``.marchdb.lock`` in the root (created once, never deleted, never
    written to); re-entrant within a thread. Take it after the index writer
    lock, never before (one order, no deadlock)."""
    with flocks.hold(os.path.join(os.path.realpath(root), VAULT_LOCK_NAME), _open_vault_lock):
        yield


def _open_vault_lock(path: str) -> int:
    """The vault lock's descriptor: a regular file, created when missing.
    No-follow (a link planted at that name must not make us create a file
    elsewhere) and non-blocking (a FIFO planted there would block the open,
    and with it every writer, while the index lock is held)."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    advice = "delete it (marchdb creates its lock file again); nothing was written"
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileError(f"{path} is a symbolic link, not marchdb's lock file: {advice}") from None
        if exc.errno in (errno.EISDIR, errno.ENXIO):  # a folder, a socket
            raise FileError(f"{path} is not a regular file, so it is not marchdb's lock file: {advice}") from None
        raise
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise FileError(f"{path} is not a regular file, so it is not marchdb's lock file: {advice}")
    return fd


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


#: renameat2's flag that swaps two names in one step (Linux 3.15+).
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one atomic step; False where the
    system or the file system cannot (then nothing was done).

    A replace that must not lose another program's write uses it: after the
    swap, ``a`` holds exactly the file that ``b`` had the moment ours took
    its place, so a write that came after our last read is found there, never
    overwritten unseen (``os.replace`` leaves a window in which it is).
    ``FileNotFoundError`` when either name is gone.
    """
    if not sys.platform.startswith("linux"):  # renameat2 is a Linux call
        return False
    import ctypes  # here: only an edit that swaps needs it

    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:  # a C library older than glibc 2.28
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # a kernel or a file system (some network and FUSE mounts) without it
    raise OSError(err, os.strerror(err), str(b))


def replace_if_same(tmp: Path, target: Path, seen: os.stat_result) -> bool:
    """Give ``tmp``'s content the name ``target`` if ``target`` is still the
    file ``seen`` (its inode, size and modification time); False, with
    nothing changed, when another program wrote it since.

    The last check and the replace are two steps, and a program that writes
    between them would lose its write to ``os.replace``. Where names can be
    swapped (``exchange``), the file the swap took away is checked as well,
    and a write that landed in between goes back at once: that window is
    closed. Elsewhere it stays (microseconds). ``FileNotFoundError`` when
    ``target`` is gone."""
    if _identity(os.lstat(target)) != _identity(seen):
        return False
    if not exchange(tmp, target):
        os.replace(tmp, target)
        return True
    if _identity(os.lstat(tmp)) != _identity(seen):
        exchange(tmp, target)  # written in between: that write gets its name back
        return False
    return True


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


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


def read_memory_text(path: Path, root: Path, limit: int) -> str:
    """The text of the memory file ``path`` under ``root``, read as it is now:
    ``FileNotFoundError`` when it is gone (the caller rescans), ``FileError``
    saying what to do when it is a link, too large, unreadable or not UTF-8."""
    try:
        data, _st = read_file(path, limit, root=root)
        if len(data) > limit:
            raise FileError(f"{path} is larger than {limit:,} bytes; it is not a memory any more")
        return data.decode("utf-8")
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise FileError(
                f"{path} is a symbolic link or lies in a linked folder; marchdb never reads through links "
                "(the link may point anywhere): move the real file into the memory root, then `marchdb sync`"
            ) from None
        raise FileError(f"cannot read {path}: {exc.strerror or exc}; check the file, then `marchdb sync`") from None
    except UnicodeDecodeError as exc:
        raise FileError(f"cannot read {path}: {exc}; re-save it as UTF-8, then `marchdb sync`") from None
