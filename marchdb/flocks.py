"""Cross-process ``flock``s by path, re-entrant within a thread.

The index's writer and embedding locks (``index/locks.py``) and the vault's
save lock (``vault/files.py``) are all held this way: a thread that holds a
path's lock may take it again (counted), other threads of the process wait on
a ``threading.RLock``, other processes on the kernel's ``flock``. The wait is
blocking: the kernel queues waiters, where polling let a process that had just
released the lock win it straight back. Closing the descriptor releases the
lock, so a killed holder (``kill -9`` included) lets it go.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator

_LOCKS: dict[str, threading.RLock] = {}
_HELD: dict[str, list[int]] = {}  # path -> [fd, depth]
_GUARD = threading.Lock()


@contextlib.contextmanager
def hold(path: str, opener: Callable[[str], int]) -> Iterator[None]:
    """Hold the ``flock`` of ``path``, its descriptor opened by ``opener``
    (which refuses what is not the lock file it expects: a link, a FIFO)."""
    with _GUARD:
        local = _LOCKS.setdefault(path, threading.RLock())
    with local:
        held = _HELD.get(path)
        if held is not None:
            held[1] += 1
        else:
            fd = opener(path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            held = _HELD[path] = [fd, 1]
        try:
            yield
        finally:
            held[1] -= 1
            if held[1] == 0:
                del _HELD[path]
                os.close(held[0])  # closing the descriptor releases the flock
