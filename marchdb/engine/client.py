"""Talking to the warm engine (``marchdb serve``): find it, start it, ask it.

One engine per ``MARCH_HOME`` holds what is slow to get ready — the model,
the in-memory vectors, a watcher — and answers the same operations as
``ops.call`` over a Unix domain socket, ``$MARCH_HOME/marchdb.sock``, mode
0600: only the user who owns the home can connect, and nothing listens on
the network.

The protocol is one request per connection: a JSON object on one line,
``{"v": 1, "op": "memory_recall", "args": {...}, "identity": {...}}``, and
one JSON line back, ``{"ok": true, "data": {...}, "ms": 12.3}`` or
``{"ok": false, "error": {"kind", "message", "exit_code", ...}}``, with the
error's own fields beside (``id``, ``paths``). ``identity`` is the client's
resolved memory root, index and model: an engine serving another
configuration refuses, and the client answers in-process instead.

A hook's fast path stands on this module, so it imports no more of the
standard library than it must (no ``json`` package, ``pathlib`` or
``contextlib``: ``engine.wire`` speaks the JSON; paths are strings or
``os.PathLike``).
"""

from __future__ import annotations

# The C socket module, not socket.py: a hook connects, sends one line and
# reads one, and socket.py (with the selectors and enum it imports) costs
# every prompt's process more than that.
import _socket
import fcntl
import os
import stat
import sys
import time

from marchdb.engine import wire
from marchdb.private import DAEMON_OUT, LOG_DIR, make_private_dirs, open_private, untrusted_home

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

PROTOCOL = 1
SOCKET_NAME = "marchdb.sock"
#: Held (flock) by the running engine for its whole life: proves it is alive.
LOCK_NAME = "daemon.lock"
#: Largest request or answer line, in bytes (a hook event carries a prompt of
#: up to ``hosts.hook.MAX_EVENT_BYTES``).
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: Longest socket path bind/connect take (sun_path is 108 bytes on Linux);
#: longer ones are reached through /proc/self/fd.
_MAX_SUN_PATH = 100


class Unavailable(Exception):
    """The engine cannot answer this request (not running, starting, another
    configuration, died mid-request); ``reason`` says which. Callers answer
    in-process instead — except a write the engine may have done already
    (``may_redo``)."""

    def __init__(self, reason: str, detail: str = "", sent: bool = False):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail
        #: The engine had the request (found stuck while it ran it, say).
        self.sent = sent

    def may_redo(self, op: str) -> bool:
        """Whether ``op`` may be run in-process after this failure: always,
        unless it writes and the engine had the request (it may be done)."""
        from marchdb import ops

        return op not in ops.WRITE_OPERATIONS or not (self.sent or self.reason in SENT_REASONS)


#: ``Unavailable`` reasons after which the engine may have run the request.
SENT_REASONS = frozenset({"timeout", "connection lost", "bad answer"})
#: Seconds before the client's timeout at which the engine stops recording:
#: room for the answer to travel back.
DEADLINE_MARGIN = 0.5


class RemoteError(Exception):
    """The engine ran the request and refused it (a ``MarchError`` there;
    ``fields``: what that error carried besides its message, such as a
    conflict's ``paths``)."""

    def __init__(self, kind: str, message: str, exit_code: int, fields: dict | None = None):
        super().__init__(message)
        self.kind, self.exit_code = kind, exit_code
        self.fields = fields or {}


def identity(cfg) -> dict:
    """What a client tells the engine of its own settings (of a
    ``config.Config``): the memory root, the index, the model and how it runs
    (threads, prefixes) must be the engine's own, or it refuses and the
    client answers in-process; ``settings`` (``config.REQUEST_SETTINGS``:
    the threshold, the dense share, projects) it answers with, whatever its
    own, and ``sources`` says where they came from (for ``--explain``)."""
    from marchdb.config import request_settings

    model = cfg.embedding_model or ""
    if model and (os.sep in model or model.endswith(".gguf")):
        # A file: the same model given as a relative and an absolute path is one model.
        model = os.path.abspath(os.path.expanduser(model))
    return {
        "root": os.path.abspath(cfg.memory_root),
        "index": os.path.abspath(cfg.index_path),
        "model": model,
        "threads": cfg.threads,
        "prefixes": cfg.prefixes,
        "settings": request_settings(cfg),
        "sources": {k: v for k, v in cfg.sources.items() if k in request_settings(cfg)},
    }


#: The part of ``identity`` an engine and its client must share: what it
#: answers from. How many threads it embeds with is its own affair (a client
#: with another MARCH_THREADS was refused, silently, and answered in 3.6 s
#: instead of 0.1 s); the query prefixes change the vectors, so they count.
SHARED = ("root", "index", "model", "prefixes")
#: How each shared part is named to a person (the refusal says which differs).
SHARED_NAMES = {
    "root": "memory root",
    "index": "index file",
    "model": "embedding model",
    "prefixes": "embeddingPrefixes",
}


def differing(ident: object, own: dict) -> list[str]:
    """What of a client's ``identity`` is not the engine's ``own`` (by
    ``SHARED_NAMES``); every part when it is not an identity at all."""
    if not isinstance(ident, dict):
        return [SHARED_NAMES[k] for k in SHARED]
    return [SHARED_NAMES[k] for k in SHARED if ident.get(k) != own.get(k)]


def socket_path(home: str | os.PathLike) -> Path:
    """Where the engine of ``home`` listens."""
    from pathlib import Path

    return Path(_socket_file(home))


def _socket_file(home: str | os.PathLike) -> str:
    return os.path.join(home, SOCKET_NAME)


# ---------------------------------------------------------------- liveness


def engine_alive(home: str | os.PathLike) -> bool:
    """Whether an engine process holds ``home``'s lock (running or starting);
    False for a home whose engine files cannot be trusted (``untrusted_home``)."""
    if untrusted_home(home):
        return False
    try:
        fd = open_private(os.path.join(home, LOCK_NAME), os.O_RDONLY)
    except OSError:
        return False  # none, or not a file an engine made (the engine refuses to start on it)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock if we got it
    return False


def engine_pid(home: str | os.PathLike) -> int | None:
    """The pid the running engine wrote into its lock file (None if none runs,
    or when that pid is not a ``marchdb serve`` of this user: a pid is only
    ever signalled after this check)."""
    if not engine_alive(home):
        return None
    try:
        fd = open_private(os.path.join(home, LOCK_NAME), os.O_RDONLY)
        try:
            text = os.read(fd, 32).decode("ascii").strip()
        finally:
            os.close(fd)
    except (OSError, UnicodeDecodeError):
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    return pid if _is_engine_process(pid, home) else None


def _is_engine_process(pid: int, home: str | os.PathLike) -> bool:
    """Whether ``pid`` is this home's engine: a process of this user, running
    ``marchdb ... serve``, that has this home's lock file open. Another pid
    namespace (a container sharing the home) writes pids that mean other
    processes here; so does a stale or forged lock file; and a command line
    alone is any ``marchdb serve``, another home's engine included."""
    proc = f"/proc/{pid}"
    if not os.path.exists("/proc/self"):
        return True  # no /proc (macOS): the lock's owner is vouched for by the home's mode
    try:
        if os.stat(proc).st_uid != os.getuid():
            return False
        with open(f"{proc}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        if not (any(b"marchdb" in a for a in args) and b"serve" in args):
            return False
        lock = os.stat(os.path.join(home, LOCK_NAME), follow_symlinks=False)
        for fd in os.listdir(f"{proc}/fd"):
            try:
                st = os.stat(f"{proc}/fd/{fd}")  # the file the descriptor is open on
            except OSError:  # closed meanwhile
                continue
            if (st.st_dev, st.st_ino) == (lock.st_dev, lock.st_ino):
                return True
    except OSError:
        return False
    return False


def _socket_kind(path: str | os.PathLike) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    return "socket" if stat.S_ISSOCK(st.st_mode) else "other"


# ---------------------------------------------------------------- requests


def _connect(path: str | os.PathLike, timeout: float) -> _socket.socket:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    dir_fd = None
    try:
        target = os.fspath(path)
        if len(os.fsencode(target)) > _MAX_SUN_PATH:
            dir_fd = os.open(os.path.dirname(target), os.O_RDONLY)
            target = f"/proc/self/fd/{dir_fd}/{os.path.basename(target)}"
        sock.connect(target)
    except BaseException:
        sock.close()
        raise
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    return sock


def _read_line(sock: _socket.socket, what: str = "the engine's answer", seconds: float | None = None) -> bytes:
    """One message line from ``sock`` (``what`` it is, for errors); with
    ``seconds``, the whole line must arrive within them (a peer sending a
    byte now and then must not hold the reader for good)."""
    chunks: list[bytes] = []
    size = 0
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable("timeout", f"{what} did not arrive whole within {seconds:g} s")
            sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if deadline is None:
                raise
            raise Unavailable("timeout", f"{what} did not arrive whole within {seconds:g} s") from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n") or b"\n" in chunk:
            break
        if size > MAX_MESSAGE_BYTES:
            raise Unavailable("too large", f"{what} is over {MAX_MESSAGE_BYTES:,} bytes")
    line = b"".join(chunks)
    return line.split(b"\n", 1)[0]


def request(
    home: str | os.PathLike,
    op: str,
    args: dict,
    identity: dict | None = None,
    timeout: float = 30.0,
    patience: float | None = None,
    recheck: bool = True,
    ping_seconds: float | None = None,
) -> tuple[dict, float]:
    """Ask the engine of ``home`` to run ``op``; returns ``(data, server ms)``.

    Raises ``Unavailable`` when it cannot answer (and the caller should run
    the operation itself) and ``RemoteError`` when it refused the request.

    A frozen engine (a suspended laptop, SIGSTOP, a stuck disk) must not
    hold every client for its whole timeout. One that is a stopped process
    (``stopped``) is marked stuck before anything is sent; else after ``patience`` seconds
    without an answer (default ``PATIENCE``) the client pings it on a second
    connection; an engine that answers is busy and is waited for, up to
    ``timeout``; one that does not is marked stuck (``engine.stuck`` in the
    home) and this request, and every one of the next ``STUCK_QUIET``
    seconds, is ``Unavailable("stuck")`` at once. After that a ping decides
    again, and an engine stuck for ``STUCK_REPLACE`` seconds is killed so
    that the next client starts a fresh one. A hook (``recheck`` False) never
    waits on that ping: while the mark stands it is refused at once, and it
    asks again once its answer is out (``recheck_stuck``).
    """
    path = _socket_file(home)
    why = untrusted_home(home)
    if why:
        raise Unavailable("untrusted", f"{why}: its socket is not used")
    _check_stuck(home, recheck)
    if stopped(home):
        # A stopped process answers nothing until it is continued: found without waiting.
        _mark_stuck(home)
        raise Unavailable("stuck", "the warm engine is stopped (SIGSTOP, Ctrl-Z): it answers once it is continued")
    # The engine drops the request, or records nothing, once the client has
    # stopped waiting: a hint the client never printed must not count as shown.
    deadline = time.time() + timeout - min(DEADLINE_MARGIN, timeout / 4)
    message = wire.dumps(
        {"v": PROTOCOL, "op": op, "args": args, "identity": identity, "deadline": deadline}, ensure_ascii=False
    )
    data = message.encode("utf-8", "surrogatepass") + b"\n"
    if len(data) > MAX_MESSAGE_BYTES:
        raise Unavailable("too large", f"the request is {len(data):,} bytes")
    try:
        sock = _connect(path, min(timeout, 2.0))
    except FileNotFoundError:
        raise Unavailable("not running") from None
    except ConnectionRefusedError:
        if os.path.lexists(path) and not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise Unavailable("cannot start", f"{path} is taken by a file that is not a socket") from None
        raise Unavailable("not running", "stale socket") from None
    except OSError as exc:
        raise Unavailable("cannot connect", exc.strerror or str(exc)) from None
    try:
        sock.settimeout(timeout)
        sock.sendall(data)
        sock.shutdown(_socket.SHUT_WR)
        line = _answer_line(
            home, sock, timeout, PATIENCE if patience is None else patience, ping_seconds or PING_SECONDS
        )
    except TimeoutError:
        raise Unavailable("timeout", f"no answer within {timeout:.1f}s") from None
    except OSError as exc:
        raise Unavailable("connection lost", exc.strerror or str(exc)) from None
    finally:
        sock.close()
    if not line:
        raise Unavailable("connection lost", "the engine closed the connection without answering")
    try:
        answer = wire.loads(line)
    except ValueError:
        raise Unavailable("bad answer", "the engine's answer is not JSON") from None
    # An answer of another shape (an engine of another version, or not ours)
    # is no answer: the caller runs the operation itself.
    odd = Unavailable("bad answer", "the engine's answer does not have the protocol's shape")
    if not isinstance(answer, dict):
        raise odd
    if answer.get("ok"):
        result, ms = answer.get("data") or {}, answer.get("ms") or 0.0
        if not isinstance(result, dict) or isinstance(ms, bool) or not isinstance(ms, (int, float)):
            raise odd
        return result, float(ms)
    error = answer.get("error") or {}
    if not isinstance(error, dict):
        raise odd
    # "expired": the engine dropped the request, or rolled its recall back,
    # because this client had stopped waiting: nothing was done, answer here.
    if error.get("kind") in ("other_config", "stopping", "protocol", "expired"):
        raise Unavailable(error["kind"], str(error.get("message", "")))
    code = error.get("exit_code", 1)
    if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 125:
        raise odd
    fields = {k: v for k, v in error.items() if k not in ("kind", "message", "exit_code")}
    raise RemoteError(str(error.get("kind", "error")), str(error.get("message", "")), code, fields)


#: Seconds a client waits for an answer before it asks whether the engine is alive.
PATIENCE = 2.0
#: Seconds a ping may take: the engine answers it on its connection thread,
#: whatever its store is busy with.
PING_SECONDS = 0.25
#: Seconds after an engine was found stuck during which clients do not try it.
STUCK_QUIET = 5.0
#: Seconds an engine may stay stuck before a client kills it (a fresh one is started).
STUCK_REPLACE = 30.0
#: The mark a client leaves when the engine did not answer a ping, or is a stopped
#: process: ``<pid> <time>``.
STUCK_NAME = "engine.stuck"


def _answer_line(
    home: str | os.PathLike, sock: _socket.socket, timeout: float, patience: float, ping_seconds: float = 0.25
) -> bytes:
    """The engine's answer line, waited for up to ``timeout`` seconds; every
    ``patience`` seconds without it the engine is pinged, and one that does
    not answer is marked stuck (``Unavailable("stuck")``)."""
    chunks: list[bytes] = []
    size = 0
    started = time.monotonic()
    while True:
        left = timeout - (time.monotonic() - started)
        if left <= 0:
            raise TimeoutError
        sock.settimeout(min(left, patience))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if time.monotonic() - started >= timeout:
                raise
            if not ping(home, ping_seconds):
                _mark_stuck(home)
                # It read the request: frozen while it ran it, it goes on once continued.
                raise Unavailable(
                    "stuck", f"the warm engine answered neither the request nor a ping within {patience:g} s", sent=True
                ) from None
            continue  # alive, and busy: wait on
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if b"\n" in chunk:
            break
        if size > MAX_MESSAGE_BYTES:
            raise Unavailable("bad answer", f"the engine's answer is over {MAX_MESSAGE_BYTES:,} bytes")
    return b"".join(chunks).split(b"\n", 1)[0]


def ping(home: str | os.PathLike, seconds: float = PING_SECONDS) -> bool:
    """Whether the engine of ``home`` answers a ping within ``seconds``."""
    try:
        sock = _connect(_socket_file(home), seconds)
    except OSError:
        return False
    try:
        sock.settimeout(seconds)
        sock.sendall(wire.dumps({"v": PROTOCOL, "op": "ping", "args": {}}).encode() + b"\n")
        sock.shutdown(_socket.SHUT_WR)
        line = _read_line(sock, "the engine's ping", seconds)
        answer = wire.loads(line) if line else None
        return isinstance(answer, dict) and bool(answer.get("ok"))
    except (OSError, ValueError, Unavailable):
        return False
    finally:
        sock.close()


def stopped(home: str | os.PathLike) -> bool:
    """Whether the engine of ``home`` is a stopped process (SIGSTOP, or
    Ctrl-Z on ``marchdb serve`` in a terminal: state ``T`` or ``t`` in
    ``/proc``). It answers nothing until it is continued, so a client need
    not wait for an answer or a ping to know. False where there is no
    ``/proc``, and for a pid that is not this home's engine (``engine_pid``):
    the pid in the lock file is read first, and vouched for only when its
    process is stopped, so a running engine costs its clients two small reads."""
    try:
        fd = open_private(os.path.join(home, LOCK_NAME), os.O_RDONLY)
        try:
            text = os.read(fd, 32)
        finally:
            os.close(fd)
        pid = int(text.strip() or b"0")
        if pid <= 0:
            return False
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            line = os.read(fd, 1024)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    # "pid (name) state ...": the name may hold spaces and parentheses.
    state = line.rpartition(b")")[2].split(None, 1)[:1]
    return state in ([b"T"], [b"t"]) and engine_pid(home) == pid


def _stuck_mark(home: str | os.PathLike) -> tuple[int, float] | None:
    try:
        fd = open_private(os.path.join(home, STUCK_NAME), os.O_RDONLY)
        try:
            pid_text, since_text = os.read(fd, 64).decode("ascii").split()
        finally:
            os.close(fd)
        return int(pid_text), float(since_text)
    except (OSError, ValueError):
        return None


def _mark_stuck(home: str | os.PathLike) -> None:
    """Remember that the engine of ``home`` is stuck (kept: the first time it was found so)."""
    if _stuck_mark(home) is not None or not os.path.isdir(home):
        return
    try:
        fd = open_private(os.path.join(home, STUCK_NAME), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, f"{engine_pid(home) or 0} {time.time():.3f}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _clear_stuck(home: str | os.PathLike) -> None:
    path = os.path.join(home, STUCK_NAME)
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def recheck_stuck(home: str | os.PathLike) -> bool:
    """Ask an engine marked stuck again, as ``request`` would before its next
    request: the mark goes when it answers a ping, and one stuck too long is
    stopped (True: the caller starts a new one). For a hook, once its answer
    is out (``hosts.hook``)."""
    try:
        _check_stuck(home, True, quiet=0.0)
    except Unavailable as exc:
        return exc.reason == "replaced"
    return False


def _check_stuck(home: str | os.PathLike, recheck: bool = True, quiet: float = STUCK_QUIET) -> None:
    """Refuse at once while the engine is marked stuck (see ``request``);
    past ``quiet`` seconds (with ``recheck``) a ping that is answered clears
    the mark, and an engine stuck too long is killed
    (``Unavailable("replaced")``: the caller starts a new one)."""
    mark = _stuck_mark(home)
    if mark is None:
        return
    pid, since = mark
    age = time.time() - since
    current = engine_pid(home)
    if current is None or (pid and current != pid):
        _clear_stuck(home)  # that engine is gone: whatever runs now is judged afresh
        return
    if not recheck:
        raise Unavailable("stuck", f"the warm engine was found stuck {age:.0f} s ago; it is asked again later")
    if 0 <= age < quiet:
        raise Unavailable("stuck", f"the warm engine was found stuck {age:.0f} s ago")
    if not stopped(home) and ping(home):
        _clear_stuck(home)
        return
    if age >= STUCK_REPLACE or age < 0:
        import signal

        try:
            os.kill(current, signal.SIGKILL)  # a stopped process cannot catch it; the index is crash-safe
        except OSError:
            pass
        wait_gone(home, 2.0)  # its lock is let go when it is gone: then a new one can start
        _clear_stuck(home)
        raise Unavailable("replaced", f"the warm engine (pid {current}) was stuck for {age:.0f} s and was stopped")
    raise Unavailable("stuck", f"the warm engine has not answered a ping for {age:.0f} s")


# ---------------------------------------------------------------- starting


def start(home: str | os.PathLike, args: list[str] | None = None) -> str | None:
    """Start an engine for ``home`` in the background (detached, its output
    to ``logs/daemon.out``). Returns None when started, else why not (a file
    at the socket path that is not a socket, never ours to remove; a home not
    to be trusted; a read-only home; a link or FIFO where the output goes)."""
    if _socket_kind(_socket_file(home)) == "other":
        return f"{_socket_file(home)} is taken by a file that is not a socket"
    why = untrusted_home(home)
    if why:
        return why
    import subprocess  # only when starting one

    from marchdb.logfile import DAEMON_OUT_BYTES

    logs = os.path.join(home, LOG_DIR)
    try:
        make_private_dirs(logs, top=home)
        path = os.path.join(logs, DAEMON_OUT)
        # Two lines an engine start; begun afresh past a bound, never grown for good.
        big = os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) > DAEMON_OUT_BYTES
        out = open_private(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if big else os.O_APPEND))
    except OSError as exc:
        return f"cannot write {os.path.join(logs, DAEMON_OUT)}: {exc.strerror or exc}"
    try:
        os.set_blocking(out, True)
        subprocess.Popen(
            # Isolated, as the hook's own Python (-I: -E -P -s): neither the
            # folder a hook runs in (a project, perhaps a stranger's) nor the
            # host's PYTHONPATH or PYTHONSTARTUP (a sitecustomize.py there)
            # may put its code into the engine, which reads every prompt.
            [sys.executable, "-I", "-m", "marchdb", "--home", str(home), *(args or []), "serve"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,  # not killed with the hook or terminal that started it
            close_fds=True,
        )
    except OSError as exc:
        return f"cannot start {sys.executable}: {exc.strerror or exc}"
    finally:
        os.close(out)
    return None


def wait_gone(home: str | os.PathLike, seconds: float) -> bool:
    """Wait until no engine of ``home`` is alive (one stopping has let go of
    its lock); False on timeout."""
    started = time.monotonic()
    while engine_alive(home):
        if time.monotonic() - started > seconds:
            return False
        time.sleep(0.05)
    return True


def wait_ready(home: str | os.PathLike, seconds: float) -> bool:
    """Wait until the engine of ``home`` accepts connections (False on timeout,
    or when no engine process holds the lock a few seconds after the start)."""
    started = time.monotonic()
    path = _socket_file(home)
    while time.monotonic() - started < seconds:
        if _socket_kind(path) == "socket":
            try:
                _connect(path, 0.5).close()
                return True
            except OSError:
                pass
        if time.monotonic() - started > 3.0 and not engine_alive(home):
            return False  # it died, or refused to start (see logs/daemon.log)
        time.sleep(0.05)
    return False
