"""A process run in a child of its own: what ends one by a native crash, and its ties to its parent.

The ``marchdb`` commands (``cli.guard``) and the MCP server (``mcp.supervise``)
run their work in a forked child, so that a crash of llama.cpp (native code,
which Python cannot catch) costs a warning and one more try, never the
caller's process. Both need the same things: which signals are a native
crash, a child that cannot outlive its parent, a parent that ends as its
child did, and its one line on stderr.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

#: What a native crash (llama.cpp's, or any C code's) ends a process with.
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT})
_PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> None:
    """In a child: die when the parent ``parent`` does (``kill -9`` of the
    command, a harness's time limit): nothing else would stop it, as nobody
    knows its pid."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


def die_of(signum: int) -> None:
    """End this process by ``signum``, as its child ended: the caller's status is what it would have been."""
    sys.stderr.flush()
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # their action cannot be set, nor blocked
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default action is not to end (never one of CRASH_SIGNALS)


def say(text: str) -> None:
    """One line on stderr, as marchdb's (the parent's words on what happened to its child)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"marchdb: {text}\n")
        sys.stderr.flush()
