"""``marchdb serve``: the warm engine one ``MARCH_HOME`` shares.

A hook must answer in well under a second, and loading the model alone takes
longer. So one long-lived process per home holds the model, the in-memory
vectors and a watcher, and answers the CLI, hooks and the MCP server over
``$MARCH_HOME/marchdb.sock`` (protocol: ``client``).

Lifecycle:

* It takes ``daemon.lock`` (flock) first: a second engine for the same home
  exits at once, so clients racing to start one end with one. The lock also
  tells clients whether an engine is alive.
* It warms up (model, calibration, vectors, a first recall) *before* it
  binds the socket: a client that can connect gets a warm answer; one that
  cannot answers in-process meanwhile.
* A socket file left by a killed engine is replaced (the lock proves no
  engine owns it); a path that is not a socket is never removed — the engine
  refuses to start and says why.
* The socket is created with mode 0600 (umask, then chmod): only the owner
  of the home can connect. Nothing listens on the network.
* It exits after ``daemonIdleMinutes`` without a request (default 30), on
  SIGTERM / SIGINT, on ``marchdb serve --stop``, when config.json changes
  (the next client starts one that reads it), and when marchdb's own code
  changes (an upgrade: the next client starts one that runs the new code,
  instead of the old engine answering new options the old way).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import stat
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import apsw

from marchdb import __version__, logfile, ops, private
from marchdb.config import MAX_NOW_STALE_HOURS, REQUEST_SETTINGS, Config, with_settings
from marchdb.engine import client
from marchdb.errors import ConfigError, Expired, FileError, MarchError
from marchdb.index.db import index_error

#: Seconds between idle checks of the accept loop.
TICK = 0.5
#: Seconds one connection may take to send its request.
READ_TIMEOUT = 10.0
#: Seconds without a request after which the engine folds the whole WAL
#: into the index file and cuts the -wal file to 0 bytes (once per quiet
#: spell; it never waits for a reader): the file alone is then the cache.
IDLE_CHECKPOINT_SECONDS = 5.0
#: Texts embedded before the engine starts answering (~5 s on 2 cores); the
#: rest of a large backlog is embedded by the watcher while it serves.
WARM_UP_EMBED_LIMIT = 128


class Engine:
    """The engine of one home. ``run()`` blocks until it stops."""

    def __init__(self, cfg: Config, idle_seconds: float | None = None, handlers: dict | None = None):
        self.cfg = cfg
        #: Requests answered beyond the operations: op -> ``handler(args, home, ask)``,
        #: ``ask(op, args, identity)`` running an operation as a client's request
        #: would (``marchdb serve`` gives ``hosts.relay``'s raw hook events).
        self.handlers = dict(handlers or {})
        self.home = cfg.home
        self.idle_seconds = idle_seconds if idle_seconds is not None else cfg.daemon_idle_minutes * 60
        self.identity = client.identity(cfg)
        self.stopping = threading.Event()
        self.busy = threading.Lock()  # one Store, one connection: one request at a time
        # Every operation on the Store runs on this one long-lived thread; the
        # connection threads only read and write their sockets. llama.cpp's
        # OpenMP team and OpenBLAS's buffers belong to the thread that calls
        # them, and a recall on a fresh thread each time paid for new ones
        # (a fifth of a warm recall).
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marchdb-store")
        self.last_request = time.monotonic()
        #: The quiet moment (the last request's time) whose idle checkpoint is
        #: done, and whether one is queued: it is tried at every tick until done.
        self._folded_for: float | None = None
        self._folding = False
        self.requests = 0
        self.started_at = time.time()
        self.store: Any = None
        self.watcher: Any = None
        #: Set when the engine stops because its home, socket or index went
        #: away: it then writes nothing more (no scan clock, no socket removal).
        self.orphaned = False
        self._lock_fd: int | None = None
        self._listener: socket.socket | None = None
        self._socket_ino: int | None = None
        self._config_mtime = _mtime(cfg.home / "config.json")
        self.code_dirs = code_folders()
        self._code = code_fingerprint(self.code_dirs)

    def log(self, message: str) -> None:
        """One line in ``logs/daemon.log`` (never making a home that was deleted)."""
        logfile.log(self.home, "daemon", message, make_home=False)

    def say(self, message: str) -> None:
        """A line for whoever started ``marchdb serve`` by hand (stderr; a
        client's background start sends it to ``logs/daemon.out``)."""
        print(f"marchdb serve: {message}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------ start and stop

    def run(self) -> int:
        """Serve until stopped; returns the process exit code (0 also when
        another engine already serves this home)."""
        if not self._take_lock():
            pid = client.engine_pid(self.home)
            self.say(f"an engine already serves {self.home}{f' (pid {pid})' if pid else ''}; nothing to do")
            return 0
        try:
            self._check_socket_path()
            self.say(
                f"warming up (model, vectors) for {self.cfg.memory_root}; log: {self.home / 'logs' / 'daemon.log'}"
            )
            self._warm_up()  # a SIGTERM until here ends the process as it would any (no socket yet)
            # From the socket on, a SIGTERM stops cleanly: clients can connect
            # as soon as it is bound (before the watcher and the accept loop).
            signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
            signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
            self._bind()
            self._start_watcher()
            self.log(f"serving {self.cfg.memory_root} on {client.socket_path(self.home)} (pid {os.getpid()})")
            self.say(
                f"ready on {client.socket_path(self.home)} (pid {os.getpid()}); Ctrl-C or `marchdb serve --stop` ends it"
            )
            self._accept_loop()
            return 0
        except MarchError as exc:
            self.log(f"cannot serve: {exc}")
            raise
        finally:
            self._shutdown()

    def _take_lock(self) -> bool:
        why = private.untrusted_home(self.home)
        if why:
            raise ConfigError(
                f"{why}; the engine keeps its socket there, so it does not start: use a home only you can write"
            )
        lock = self.home / client.LOCK_NAME
        try:
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = private.open_private(lock, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC):
                raise FileError(f"cannot write {lock}: {exc.strerror}; the engine needs a writable home") from None
            raise ConfigError(
                f"{lock} is not a file the engine made (a link, a folder, a FIFO?); move it away "
                "(marchdb never deletes what it did not create)"
            ) from None
        os.set_blocking(fd, True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        return True

    def _check_socket_path(self) -> None:
        path = client.socket_path(self.home)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ConfigError(
                f"{path} exists and is not a socket, so marchdb's engine cannot listen there; "
                "move that file away (marchdb never deletes what it did not create)"
            )
        # We hold the lock: no engine owns this socket any more (killed -9).
        os.unlink(path)
        self.log(f"replaced a stale socket left by an engine that did not stop cleanly: {path}")

    def _warm_up(self) -> None:
        from marchdb.store import Store

        started = time.perf_counter()
        store = Store(self.cfg, keep_vectors=True)
        store.say = self.log
        self.store = store
        # The model loads (and, the first time on this CPU, is checked in a
        # child process) on a thread of its own while this one makes the word
        # list and scans the files: a first start costs the longer of the two.
        loading = threading.Thread(target=store.embedder, name="marchdb-load-model", daemon=True)
        loading.start()
        with contextlib.suppress(ConfigError):
            store.words()
            store.sync(embed=False)
        loading.join()
        with contextlib.suppress(ConfigError):
            # Scan and embed what is new (a bounded batch: a large backlog is
            # left to the watcher, so clients are not kept waiting minutes),
            # then load the calibration and the in-memory vectors, so the
            # first client is served warm. A missing root is reported per
            # request instead (the engine still serves the profiles).
            # In the foreground: nobody is served yet, and clients wait for this.
            store.sync(embed_limit=WARM_UP_EMBED_LIMIT, background=False)
            store.recall("warm up", threshold=1.0)
            # Once more on the thread that serves, so its own llama.cpp and
            # OpenBLAS threads are ready for the first client too.
            self._worker.submit(store.recall, "warm up", threshold=1.0).result()
        self.log(f"warm in {time.perf_counter() - started:.2f}s ({store.embedder_error or 'model loaded'})")

    def _bind(self) -> None:
        path = client.socket_path(self.home)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        dir_fd = None
        try:
            target = str(path)
            if len(os.fsencode(target)) > client._MAX_SUN_PATH:
                dir_fd = os.open(path.parent, os.O_RDONLY)
                target = f"/proc/self/fd/{dir_fd}/{path.name}"
            listener.bind(target)
        finally:
            os.umask(old_umask)
            if dir_fd is not None:
                os.close(dir_fd)
        os.chmod(path, 0o600)
        listener.listen(64)
        listener.settimeout(TICK)
        self._listener = listener
        self._socket_ino = os.lstat(path).st_ino

    def _start_watcher(self) -> None:
        from marchdb.engine.watch import start_watcher

        assert self.store is not None
        try:
            self.cfg.require_root()
        except ConfigError as exc:
            self.log(f"not watching: {exc}")
            return
        self.watcher = start_watcher(self.store, log=lambda m: self.log(f"watch: {m}"))
        self.watcher.quiet_for = self._quiet_for  # a dirty check's scan waits for a quiet moment
        self.store.scan_in_background = self.watcher.want_scan  # started once the answer is sent
        self.store.embed_in_background = self.watcher.want_embed  # a save's body: beside the next requests

    def _quiet_for(self) -> float:
        """Seconds since a client was last served (0 while one is)."""
        return 0.0 if self.busy.locked() else max(0.0, time.monotonic() - self.last_request)

    def _shutdown(self) -> None:
        self.stopping.set()  # requests still queued (idle, outdated, SIGTERM alike) are answered "stopping"
        if self._listener is not None:
            path = client.socket_path(self.home)
            with contextlib.suppress(OSError):
                if os.lstat(path).st_ino == self._socket_ino:  # never another engine's socket
                    os.unlink(path)  # first: no new client reaches this engine
            self._refuse_waiting()
            self._listener.close()
        with self.busy:  # let a request in flight finish
            if self.watcher is not None:
                if self.store is not None:
                    self.store.scan_in_background = None
                    self.store.embed_in_background = None
                self.watcher.stop()
            if self.store is not None:
                self.store.close(keep_clock=not self.orphaned)
        self._worker.shutdown(wait=False)  # what is queued still runs, and says "stopping"
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.log("stopped")

    def _refuse_waiting(self) -> None:
        """Answer the connections still queued on the listener "stopping":
        closed unanswered, their clients could not tell a request never run
        from one lost mid-way (a save would not be done in-process again)."""
        assert self._listener is not None
        self._listener.setblocking(False)
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # BlockingIOError: none left
                return
            _refuse(conn)

    # ------------------------------------------------------------ serving

    def _accept_loop(self) -> None:
        assert self._listener is not None
        checked = time.monotonic()
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                quiet = time.monotonic() - self.last_request
                if quiet > self.idle_seconds:
                    self.log(f"idle for {self.idle_seconds / 60:g} min; stopping")
                    return
                if self._outdated():
                    return
                if quiet > IDLE_CHECKPOINT_SECONDS and self._folded_for != self.last_request and not self._folding:
                    # Tried again at every tick until it is done: a reader holding a
                    # snapshot at the first quiet moment left the file without the
                    # last writes until the next request, minutes later.
                    self._folding = True
                    with contextlib.suppress(RuntimeError):  # the worker shut down: stopping anyway
                        self._worker.submit(self._idle_chores, self.last_request)
                checked = time.monotonic()
                continue
            except OSError as exc:
                self.log(f"accept failed: {exc}")
                continue
            # Busy or not, a changed config.json or upgraded code is noticed
            # within a check interval (a steady stream of requests once kept
            # the old settings answering: the checks ran only when idle).
            if time.monotonic() - checked >= TICK:
                checked = time.monotonic()
                if self._outdated():
                    _refuse(conn)  # its client answers on its own, or starts the new engine
                    return
            self.last_request = time.monotonic()
            threading.Thread(target=self._serve_one, args=(conn,), name="marchdb-request", daemon=True).start()

    def _orphaned(self) -> str | None:
        """Why the engine has nothing left to serve: its home, its socket or
        its index is gone (deleted, moved, replaced); None while all are there."""
        if not os.path.isdir(self.home):
            return f"its home {self.home} is gone"
        try:
            if os.lstat(client.socket_path(self.home)).st_ino != self._socket_ino:
                return "its socket was replaced"
        except OSError:
            return "its socket is gone"
        if not os.path.exists(self.cfg.index_path):
            return f"its index {self.cfg.index_path} is gone"
        return None

    def _idle_chores(self, quiet_since: float) -> None:
        """On the worker thread, between requests: the WAL into the file
        (remembered as done for the quiet moment after ``quiet_since``), and
        the memory a long prompt took given back (its query's output buffer:
        a 3.9 MB prompt kept the engine at 800 MB instead of 300)."""
        try:
            with self.busy:
                if self.store is None or self.stopping.is_set():
                    return
                try:
                    if self.store.idle_checkpoint():
                        self._folded_for = quiet_since
                except Exception as exc:  # noqa: BLE001 - a quiet moment's chore must not end the engine
                    self._folded_for = quiet_since  # not tried again and again
                    self.log(f"idle checkpoint failed: {type(exc).__name__}: {exc}")
                embedder = self.store.loaded_embedder()
                if embedder is not None and embedder.release_buffers(background=False):
                    _trim_heap()
        finally:
            self._folding = False

    def _outdated(self) -> bool:
        """Whether the engine must stop: its home, socket or index is gone, or
        config.json or marchdb's code changed under it (said in its log)."""
        gone = self._orphaned()
        if gone:
            self.log(f"{gone}; stopping (nothing of it is made again)")
            self.orphaned = True
            return True
        if _mtime(self.home / "config.json") != self._config_mtime:
            self.log("config.json changed; stopping (the next client starts an engine that reads it)")
            return True
        if self.code_changed():
            self.log("marchdb's code changed (an upgrade?); stopping (the next client starts the new one)")
            return True
        return False

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                line = client._read_line(conn, "the request", READ_TIMEOUT)
                answer = self.answer(line)
            except client.Unavailable as exc:
                self.log(f"request not read: {exc}")
                if exc.reason != "too large":  # cut short, or too slow: nobody to answer
                    return
                # Past the bound: said to the client, which would otherwise wait for its own timeout,
                # once it has sent its line (read and dropped), so that it reads the answer.
                _drop_rest(conn, READ_TIMEOUT)
                answer = _refusal("protocol", f"{exc.detail}; marchdb's requests are at most that", 2)
            except OSError as exc:
                self.log(f"request not read: {exc}")
                return
            try:
                with contextlib.suppress(OSError):
                    conn.settimeout(READ_TIMEOUT)  # a client that stops reading is not waited for long
                    conn.sendall(json.dumps(answer, ensure_ascii=False).encode("utf-8", "replace") + b"\n")
            finally:
                watcher = self.watcher
                if watcher is not None:
                    watcher.start_wanted_scan()

    def answer(self, line: bytes) -> dict:
        """The answer to one request line (never raises)."""
        started = time.perf_counter()
        try:
            req = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested past any request's depth
            self.last_request = time.monotonic()
            return _refusal("protocol", "the request is not JSON", 2)
        try:
            if not isinstance(req, dict) or req.get("v") != client.PROTOCOL:
                return _refusal("protocol", f"expected a protocol {client.PROTOCOL} request", 2)
            op, args, ident = req.get("op"), req.get("args"), req.get("identity")
            args = {} if args is None else args
            if not isinstance(op, str) or not isinstance(args, dict) or not isinstance(ident, (dict, type(None))):
                # A list of arguments was "the engine failed" (exit 1, "a bug").
                return _refusal(
                    "protocol", '"op" must be a string, "args" an object and "identity" an object or null', 2
                )
            deadline = req.get("deadline")
            deadline = (
                float(deadline) if isinstance(deadline, (int, float)) and not isinstance(deadline, bool) else None
            )
            data = self.dispatch(op, args, ident, deadline)
        except MarchError as exc:
            return _refusal(exc.kind, str(exc), exc.exit_code, exc.to_dict())
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            # This process's connections will not recover (a -wal file another
            # process deleted under them heals in a new one): stop, and the
            # next client starts an engine that opens the index afresh. A file
            # damaged for good says so there too: `marchdb rebuild`.
            error = index_error(exc, self.cfg.index_path)
            self.log(f"{error}; stopping")
            self.stopping.set()
            return _refusal(error.kind, str(error), error.exit_code)
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the engine down
            self.log(f"request failed: {type(exc).__name__}: {exc}")
            return _refusal("error", f"the engine failed: {type(exc).__name__}: {exc}", 1)
        finally:
            self.last_request = time.monotonic()
        return {"ok": True, "data": data, "ms": round((time.perf_counter() - started) * 1000, 3)}

    def code_changed(self) -> bool:
        """Whether the files of the marchdb package differ from those this engine started with."""
        return code_fingerprint(self.code_dirs) != self._code

    def dispatch(self, op: str, args: dict, ident: dict | None, deadline: float | None = None) -> dict:
        """Run one operation (see ``client`` for the protocol). ``deadline``
        (a ``time.time()``) is when the client stops waiting: a request still
        queued then is dropped, and a recall that passes it records nothing
        (``Store.deadline``), since the client has answered on its own."""
        if op == "ping":
            return {
                "pid": os.getpid(),
                "version": __version__,
                "started_at": self.started_at,
                "requests": self.requests,
                "identity": self.identity,
                "model": None if self.store is None else (self.store.embedder_error or "loaded"),
            }
        if op == "stop":
            self.stopping.set()
            return {"stopping": True}
        handler = self.handlers.get(op)
        if handler is not None:
            return handler(args, self.home, lambda op_, args_, ident_: self.dispatch(op_, args_, ident_, deadline))
        if ident is not None:
            differing = client.differing(ident, self.identity)
            if differing:
                raise _OtherConfig(
                    f"this engine serves {self.identity['root']} with model {self.identity['model'] or 'e5'}; "
                    f"the client's {', '.join(differing)} differ{'s' if len(differing) == 1 else ''}"
                )
        settings = _request_settings(ident)
        if self.stopping.is_set():
            raise _Stopping("the engine is stopping")
        try:
            future = self._worker.submit(self._run, op, args, deadline, settings)
        except RuntimeError:  # shut down between the check above and here
            raise _Stopping("the engine is stopping") from None
        return future.result()

    def _run(self, op: str, args: dict, deadline: float | None, settings: tuple[dict, dict] | None) -> dict:
        """``dispatch``'s work on the Store, on the engine's one worker thread,
        with the client's own ``settings`` (and their sources) in place of the engine's."""
        if self.stopping.is_set():
            raise _Stopping("the engine is stopping")
        assert self.store is not None
        with self.busy:
            if deadline is not None and time.time() > deadline:
                raise Expired(f"the client stopped waiting while the engine was busy; {op} was not run")
            self.requests += 1
            self.store.deadline = deadline
            own = self.store.cfg
            if settings is not None:
                self.store.cfg = with_settings(own, *settings)
            try:
                if op in ops.OPERATIONS:
                    return ops.call(self.store, op, args)
            finally:
                self.store.deadline = None
                self.store.cfg = own
        raise _BadOp(f"unknown operation {op!r}")


def _request_settings(ident: object) -> tuple[dict, dict] | None:
    """The settings a request asks to be answered with, and their sources;
    None for none. Their values are checked as config.json's are: a request
    that names other keys or odd values is a protocol error."""
    if not isinstance(ident, dict) or ident.get("settings") is None:
        return None
    settings, sources = ident.get("settings"), ident.get("sources") or {}
    if not isinstance(settings, dict) or not isinstance(sources, dict) or set(settings) - set(REQUEST_SETTINGS):
        raise _BadOp("the request's settings are not the protocol's")
    score, weight = settings.get("min_score"), settings.get("dense_weight")
    numbers = [(score, False), (weight, True)]
    for value, may_be_none in numbers:
        if value is None and may_be_none:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _BadOp("the request's settings are not the protocol's")
    stale = settings.get("now_stale_hours", 24.0)
    if isinstance(stale, bool) or not isinstance(stale, (int, float)) or not 0 < stale <= MAX_NOW_STALE_HOURS:
        raise _BadOp("the request's settings are not the protocol's")
    projects = settings.get("projects", {})
    if not isinstance(settings.get("project_tag_prefix", ""), str) or not isinstance(projects, dict):
        raise _BadOp("the request's settings are not the protocol's")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in projects.items()):
        raise _BadOp("the request's settings are not the protocol's")
    rules = settings.get("project_rules", {})
    if not isinstance(rules, dict) or not all(
        isinstance(name, str)
        and isinstance(r, dict)
        and set(r) == {"recall", "apart", "untagged"}
        and r["recall"] in (None, True, False)
        and isinstance(r["apart"], bool)
        and isinstance(r["untagged"], bool)
        for name, r in rules.items()
    ):
        raise _BadOp("the request's settings are not the protocol's")
    if settings.get("recall_env") not in (None, "off", "on"):
        raise _BadOp("the request's settings are not the protocol's")
    if not isinstance(settings.get("import_sessions", False), bool):
        raise _BadOp("the request's settings are not the protocol's")
    return settings, {k: str(v) for k, v in sources.items() if k in REQUEST_SETTINGS}


class _OtherConfig(MarchError):
    kind = "other_config"


class _Stopping(MarchError):
    kind = "stopping"


class _BadOp(MarchError):
    kind = "protocol"
    exit_code = 2


def _refuse(conn: socket.socket) -> None:
    """Answer one connection "stopping": closed unanswered, its client could
    not tell a request never run from one lost mid-way."""
    refusal = json.dumps(_refusal("stopping", "the engine is stopping", 1)).encode() + b"\n"
    with conn, contextlib.suppress(OSError, client.Unavailable):
        conn.setblocking(True)
        conn.settimeout(1.0)
        client._read_line(conn)  # read first: a socket closed unread may reset the answer
        conn.sendall(refusal)


def _drop_rest(conn: socket.socket, seconds: float) -> None:
    """Read and drop what the client still sends of its line, for ``seconds`` at most."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(OSError):
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            chunk = conn.recv(1 << 20)
            if not chunk or b"\n" in chunk:
                return


def _refusal(kind: str, message: str, exit_code: int, data: dict | None = None) -> dict:
    # The fields an error's to_dict adds (NotFound's id, Conflict's paths) travel too: the client
    # rebuilds the same error with them (errors.remote_error).
    fields = {k: v for k, v in (data or {}).items() if k not in ("status", "message")}
    return {"ok": False, "error": {**fields, "kind": kind, "message": message, "exit_code": exit_code}}


def code_folders() -> list[Path]:
    """The folders of marchdb's code: the package, its subpackages and its
    SQL (``sql/`` beside the package in a checkout, inside it once installed)."""
    package = Path(__file__).resolve().parent.parent
    folders = [package, *sorted(p.parent for p in package.glob("*/__init__.py"))]
    return [*folders, Path(str(resources.files("marchdb.sql")))]


def code_fingerprint(folders: list[Path]) -> tuple:
    """Name, size and modification time of every ``.py`` and ``.sql`` file
    in ``folders`` (about 70 stat calls: one tick's check)."""
    found = []
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".py", ".sql")):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    found.append((folder.name, entry.name, st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))


def _trim_heap() -> None:
    """Hand the C heap's free memory back to the system (glibc's
    ``malloc_trim``; nothing elsewhere): a long prompt's text and its
    tokens, freed, otherwise stay in this process's resident memory."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


#: How long ``stop`` waits for the engine to be gone (a request it is
#: running finishes first).
STOP_WAIT_SECONDS = 15.0


def stop(home: Path, timeout: float | None = None) -> bool:
    """Ask the engine of ``home`` to stop and wait until it has, up to
    ``timeout`` seconds (``STOP_WAIT_SECONDS``); False when none was running."""
    if not client.engine_alive(home):
        return False
    try:
        client.request(home, "stop", {}, timeout=5.0)
    except (client.Unavailable, client.RemoteError):
        # Still warming up (it binds its socket only when warm): a plain
        # SIGTERM ends it, as it would any process.
        pid = client.engine_pid(home)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    client.wait_gone(home, STOP_WAIT_SECONDS if timeout is None else timeout)
    return True
