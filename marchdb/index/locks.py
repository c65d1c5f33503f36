"""The index's two cross-process locks: one writer at a time, one embedder at a time.

Both are ``flock``s on files next to the index, released by the kernel when
their holder dies (``kill -9`` included), and never opened through a link.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator

from marchdb import flocks
from marchdb.errors import IndexUnavailable
from marchdb.index import ownership


@contextlib.contextmanager
def writer_lock(index_path: str | os.PathLike) -> Iterator[None]:
    """Cross-process (and cross-thread) lock: one index writer at a time.

    SQLite would serialise the writes themselves, but a sync reads files and
    embeds between its transactions; the lock keeps two syncs from doing the
    same work twice and racing on the same rows. Readers never take it (WAL
    lets them read while a writer works). Re-entrant within a thread.

    The wait is a blocking ``flock``: the kernel queues waiters, where
    polling let a process that had just released the lock win it straight
    back and starved the others for seconds. Holders keep it only for short
    steps (a scan, one save, one batch of vectors), and a killed holder
    releases it with its descriptor.
    """
    with flocks.hold(ownership.lock_path(index_path), _open_lock):
        yield


def _open_lock(lock_path: str) -> int:
    """A lock file next to the index, opened for ``flock`` (made 0644 when
    missing). Never through a link: one planted at its name would make us
    create or lock a file elsewhere. Nor a FIFO's reader: it is opened
    without blocking, then must be a regular file."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock_path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise IndexUnavailable(
                f"{lock_path} is a link, not marchdb's lock file; move it away (marchdb never writes through links)"
            ) from None
        if exc.errno == errno.EISDIR:
            raise IndexUnavailable(f"{lock_path} is a folder, not marchdb's lock file; move it away") from None
        raise IndexUnavailable(
            f"cannot create the lock file {lock_path}: {exc.strerror}; check the permissions of its folder"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IndexUnavailable(f"{lock_path} is not a regular file, so not marchdb's lock file; move it away")
    os.set_blocking(fd, True)
    return fd


class Lease:
    """A held ``embed_lease``; ``release()`` gives it up before the ``with`` ends (idempotent)."""

    def __init__(self, fd: int | None):
        self._fd = fd

    def __bool__(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Close the lease's descriptor, which releases the flock."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def embed_lease(index_path: str | os.PathLike, wait: bool = True) -> Iterator[Lease]:
    """Cross-process lease on embedding the index's pending texts: yields a
    ``Lease``, true when held (``wait=False`` gives up at once when another
    process, or another Store in this one, is embedding).

    One embedder at a time: a second process waiting here then finds the
    backlog already done instead of embedding the same texts again, and a
    quick dirty check skips embedding while the daemon (or a sync) is at it.
    Killed holders release it with their descriptor.
    """
    lock_path = os.path.abspath(f"{index_path}.embed.lock")
    fd = _open_lock(lock_path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        yield Lease(None)
        return
    except BaseException:
        os.close(fd)
        raise
    lease = Lease(fd)
    try:
        yield lease
    finally:
        lease.release()
