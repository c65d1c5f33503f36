"""A command that llama.cpp crashes in gets a warning line and runs again, without the text it crashed on.

llama.cpp is native code: a crash on one text (a message recalled, a save's
near-duplicate check, a batch of a sync) kills the process embedding it, and
Python cannot catch it. The crash sentinel (``index.sentinel``) names each
text while the model runs, so the next process to load the model puts that
text aside; but the command that met the crash died of it (exit 139), its
answer lost.

So the ``marchdb`` command forks before it does anything else: the child runs
the command, the parent (the process the caller started, signals and waits
for) waits. When the child dies of a native crash *while the model embedded*
(its in-flight file beside the index names what), the parent says so in one
line and runs the command itself, once: the sentinel now refuses that text,
so a recall is answered by keywords, a save writes its file with its vectors
left to a sync, a sync embeds the rest apart. A command that may have written
a memory before the crash (a save's own vectors, a log, an import) is not run
again: the parent says what was kept and exits with the model error's code.
Any other death (a crash outside the model, ``kill -9``) is the parent's too,
by the same signal, as if the command had run in it.

A fork costs a few milliseconds (1-2% of a ``marchdb status``); the servers
(``serve``, ``mcp``, ``browse``) and hooks are not forked (they have their
own fallbacks: a client restarts the engine, a hook answers by keywords).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys

from marchdb.forked import CRASH_SIGNALS, die_of, die_with, say

#: Commands that serve or answer a host: not run in a child (see the module's doc).
UNGUARDED = frozenset({"serve", "mcp", "browse", "hook"})
#: Commands that write no memory, so running them twice does what running them once does.
REPLAYABLE = frozenset({"recall", "context", "search", "open", "sync", "rebuild", "status", "doctor", "model", "demo"})
#: What the parent waits for: the child's end, and signals to pass on to it.
_PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: ``_stdin_offset`` for a stdin that needs no putting back (a terminal, none, or not read).
_UNREAD = -1
#: In the child: the pipe on which it tells its parent that it read stdin (``stdin_taken``).
_told: int | None = None


def guard(flags: dict, rest: list[str]) -> None:
    """Run the command ``rest`` in a child and return in it; or, in the
    parent, wait for the child and exit as it did, or return (the command is
    run here, once more) after a crash of the model the sentinel now knows.
    Returns at once, unforked, for the commands in ``UNGUARDED``, a help
    request, or where a fork or ``sigwaitinfo`` is not to be had (the
    command then runs here, as it did before the guard)."""
    if not rest or rest[0] in UNGUARDED or rest[0].startswith("-"):
        return
    if not (hasattr(os, "fork") and hasattr(signal, "sigwaitinfo")):  # macOS has no sigwaitinfo
        return
    mask = {*_PASSED_ON, signal.SIGCHLD}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, mask)
    stdin_at = _stdin_offset()
    told, tell = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        pid = os.fork()
    except OSError:
        os.close(told)
        os.close(tell)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return  # no process to spare: the command runs here, as it did before the guard
    if pid == 0:
        global _told
        os.close(told)
        _told = tell
        die_with(os.getppid())
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return
    os.close(tell)
    status = _wait(pid, mask)
    read_stdin = _drained(told)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else signal.SIGKILL
    if signum in CRASH_SIGNALS:
        again = _after_crash(flags, rest, pid, signum, stdin_at if read_stdin else _UNREAD)
        if again:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            return
        if again is False:
            os._exit(_model_error_code())
    die_of(signum)


def stdin_taken() -> None:
    """Said by the command before it reads stdin: a second run could not
    read what the first one took from a pipe."""
    global _told
    if _told is not None:
        with contextlib.suppress(OSError):
            os.write(_told, b"i")
            os.close(_told)
        _told = None


def _drained(fd: int) -> bool:
    """Whether the child said it read stdin. Read without waiting: a process
    the child forked may hold the pipe's other end open still."""
    try:
        os.set_blocking(fd, False)
        return bool(os.read(fd, 16))
    except OSError:  # BlockingIOError: nothing was said
        return False
    finally:
        os.close(fd)


def _wait(pid: int, mask: set) -> int:
    """The child's wait status. Signals sent to this process by another
    (``kill``, ``timeout``) are passed on; those the terminal sends (Ctrl-C)
    reach the child already, as it is in the same process group."""
    while True:
        info = signal.sigwaitinfo(mask)
        if info.si_signo == signal.SIGCHLD:
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    return status
            continue
        if info.si_code <= 0:  # SI_USER, SI_QUEUE, SI_TKILL: from a process, not from the kernel
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, info.si_signo)


def _stdin_offset() -> int | None:
    """Where stdin stands if a second run can read it as the first did:
    ``_UNREAD`` for a terminal, ``/dev/null`` or no stdin, the offset of a
    regular file; None for a pipe or a socket, which a first run may read."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return _UNREAD
    if stat.S_ISCHR(mode):
        return _UNREAD
    if stat.S_ISREG(mode):
        with contextlib.suppress(OSError):
            return os.lseek(0, 0, os.SEEK_CUR)
    return None


def _after_crash(flags: dict, rest: list[str], pid: int, signum: int, stdin_at: int | None) -> bool | None:
    """After the child ``pid`` died of ``signum``: True to run the command
    again here (said on stderr), False when it must not be (said too), None
    when the model was not embedding (the crash is not one the sentinel
    knows: this process dies of it as well). ``stdin_at``: where to put stdin
    back for the second run, None when the first one read it from a pipe."""
    records = _in_flight(flags, pid)
    if not records:
        return None
    name = signal.Signals(signum).name
    alone = all(r.get("alone") for r in records)
    command = rest[0]
    writes = command not in REPLAYABLE and not (command == "sql" and "--write" not in rest)
    if (not writes or alone) and (stdin_at is not None):
        if stdin_at != _UNREAD:
            with contextlib.suppress(OSError):
                os.lseek(0, stdin_at, os.SEEK_SET)
        if alone:
            say(
                f"llama.cpp crashed ({name}) on a text this command gave the model, which is not given that "
                "text again on this machine: running the command once more without it"
            )
        else:
            say(
                f"llama.cpp crashed ({name}) while this command embedded a batch of texts: running it once "
                "more, with that batch's texts embedded one at a time apart, so that a crash costs only its text"
            )
        return True
    if alone or not writes:
        say(
            f"llama.cpp crashed ({name}) on a text this command gave the model, before it wrote anything; "
            "run it again: the model is not given that text again on this machine"
        )
    else:
        say(
            f"llama.cpp crashed ({name}) while this command embedded what it had written: that is kept, and "
            "its vectors are left to `marchdb sync`, which embeds them apart (`marchdb status` names what "
            "the model crashed on)"
        )
    return False


def _in_flight(flags: dict, pid: int) -> list[dict]:
    """The in-flight records the dead child left beside its index: what the model was embedding when it died."""
    from marchdb.config import load_config
    from marchdb.errors import MarchError
    from marchdb.index import sentinel

    try:
        cfg = load_config(home=flags.get("home"), root=flags.get("root"), model=flags.get("model"))
    except (MarchError, OSError, TypeError):
        return []
    return sentinel.in_flight_of(cfg.index_path, pid)


def _model_error_code() -> int:
    from marchdb.errors import ModelError

    return ModelError.exit_code
