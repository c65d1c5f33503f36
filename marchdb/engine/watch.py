"""Keep the index fresh while files change: a watcher plus dirty checks.

Seed 000: a watcher alone is not enough (editors, sync tools, ``git pull``
and sleep all lose events), so there are three layers: a full light scan at
start, a watcher applying changes incrementally, and the throttled dirty
check before each search or recall (``Store.ensure_fresh``).

The watcher collects changed paths, waits until they have been quiet for a
short debounce (editors save by writing a temp file and renaming it over the
original: one quiet period coalesces that into one change), then syncs just
those paths into the index. It runs on its own thread with its own Store (its
own connection; the model is the main Store's, shared), so callers of the
main Store are never blocked by it. Then it embeds what has no vector yet, a
batch at a time, in the model's background lane (beside the queries of the
process, at a lower CPU priority: ``embedding.context``), going back to
changes that arrive meanwhile before the next batch: a 600 KB note or an
import of thousands never holds up a recall, a save, or the next change. If the platform watcher cannot start or stops, it says so and
falls back to periodic full scans instead of going stale silently; events it
never delivers are caught by the dirty check's full scans. A sync that fails
unexpectedly (a bug, a file nobody foresaw) never ends the thread: it says
so, and the next wake-up runs a full scan.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marchdb.vault.files import folder_identity, hidden, is_memory_path, name_ok

#: Quiet time before a batch of changes is applied.
DEBOUNCE_SECONDS = 0.25
#: Full light scan period when the platform watcher is unavailable.
FALLBACK_SCAN_SECONDS = 5.0
#: A batch larger than this becomes a full scan (e.g. a git checkout).
MAX_INCREMENTAL = 2000
#: How often an idle watcher checks that its root is the folder it watches
#: (a root renamed away and another put in its place sends no event).
ROOT_CHECK_SECONDS = 5.0
#: A dirty check's scan (``start_wanted_scan``) waits until clients have been
#: quiet this long, at most SCAN_DEFER_SECONDS: requests one after the other
#: otherwise meet the scan's stat walk on the other core and in the
#: interpreter, and their query embedding runs on one thread beside it.
SCAN_QUIET_SECONDS = 0.5
SCAN_DEFER_SECONDS = 5.0
#: While another process holds the embedding lease (a `marchdb sync` or an
#: import embedding), the watcher asks again this often: that process embeds
#: what the watcher indexes meanwhile too, this only catches the end of it.
EMBED_RETRY_SECONDS = 5.0
#: A long backlog says how far it got in the log at most this often.
EMBED_LOG_SECONDS = 60.0


class Watcher:
    """Watch the memory root and apply changes to the index."""

    def __init__(self, store, log: Callable[[str], None] = lambda m: None, debounce: float = DEBOUNCE_SECONDS):
        from marchdb.store import Store

        # Own Store (own SQLite connection), so a sync here never holds up the
        # caller's transactions; the same model: a second llama.cpp instance
        # costs ~700 MB (its output buffer alone is 512 tokens x 250,037
        # vocabulary floats), while sharing costs a recall at most one
        # embedding batch of wait (the embedder serialises its calls). A
        # Store that never loads a model makes a watcher that never does.
        self.store = Store(store.cfg, embedder=store.loaded_embedder(), use_model=store.use_model)
        self.parent = store  # told when a scan finishes (Store.scanned_at): its dirty check reads it
        self.root = Path(store.root)
        self.log = log
        self.debounce = debounce
        self._pending: set[str] = set()
        self._full_scan = True  # the start-up scan
        self._scan_wanted = threading.Event()
        # The pending full scan is only a dirty check's (nothing else asked for
        # one): it may wait for a quiet moment (``quiet_for``).
        self._deferrable = False
        #: Seconds since a client was last served (0 while one is), from the
        #: process serving clients; None: scans never wait.
        self.quiet_for: Callable[[], float] | None = None
        self._last_event = 0.0
        self._cond = threading.Condition()
        self._stop = False
        self._observer: Any = None
        self.mode = "starting"
        self._busy = False
        self._retry_full = False
        #: Texts may lack vectors (set at start, after a change, on request):
        #: embedded a batch at a time between changes (``_embed_backlog``).
        self._backlog = True
        self._next_embed = 0.0  # when to ask for the embedding lease again (another process held it)
        self._embedded = 0  # texts embedded since it was last said in the log
        self._embed_said = time.monotonic()
        self._root_id = folder_identity(self.root)
        self._next_root_check = time.monotonic() + ROOT_CHECK_SECONDS
        self._next_poll = time.monotonic() + FALLBACK_SCAN_SECONDS
        self._last_failure: str | None = None
        self._retry_on_timer = False  # a scan failed on a missing root: try again every root check
        # Starting and stopping the platform watcher happens under this lock,
        # never under _cond: its event thread holds its own lock while it
        # calls _note_event, which takes _cond (both held at once: a deadlock).
        self._observer_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="marchdb-watch", daemon=True)

    # ------------------------------------------------------------ events

    def _rel(self, path: str | bytes) -> str | None:
        path = os.fsdecode(path)
        try:
            rel = Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return None
        if hidden(rel):
            return None  # hidden folders, editors' and marchdb's own temp files
        return rel

    def _on_event(self, event) -> None:
        try:
            self._note_event(event)
        except Exception as exc:  # the observer's thread must not die of one odd event
            self.log(f"ignored a file event ({type(exc).__name__}: {exc}); a full scan will catch up")
            self.request_scan()

    def _note_event(self, event) -> None:
        paths = [event.src_path] + ([event.dest_path] if getattr(event, "dest_path", "") else [])
        with self._cond:
            for raw in paths:
                rel = self._rel(raw)
                if rel is None:
                    continue
                if not name_ok(rel):
                    self._scan_now()  # only a full scan reports a name that is not UTF-8
                    continue
                if event.is_directory or not is_memory_path(rel):
                    if event.is_directory and event.event_type in ("moved", "deleted", "created"):
                        self._scan_now()  # a whole folder came or went
                    continue
                self._pending.add(rel)
            self._last_event = time.monotonic()
            self._cond.notify()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Watcher:
        """Start watching (falls back to periodic scans if watching fails)."""
        self._start_observer()
        self._thread.start()
        return self

    def _start_observer(self) -> None:
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer

            watcher = self

            class Handler(FileSystemEventHandler):
                def on_any_event(self, event):
                    if event.event_type in ("created", "modified", "deleted", "moved", "closed"):
                        watcher._on_event(event)

            # No mkdir: a missing configured root is an error the scans
            # report (Config.require_root), never an empty vault.
            observer = Observer()
            observer.schedule(Handler(), str(self.root), recursive=True)
            observer.start()
            self._observer = observer
            self.mode = "watching"
        except (OSError, RuntimeError, ImportError) as exc:
            self._poll_instead(f"file watcher unavailable ({exc})")

    def _poll_instead(self, why: str) -> None:
        """Fall back to a full scan every ``FALLBACK_SCAN_SECONDS``, and say why."""
        self.mode = "polling"
        self.log(f"{why}; falling back to a full scan every {FALLBACK_SCAN_SECONDS:.0f}s")

    def _follow_root(self) -> None:
        """Follow the memory root when the folder at its path changed: gone
        (scans fail and say so; the one once it is back is full), or
        another folder in its place (the platform watcher still watches the
        old one: watch the new one, and scan it whole). Called without
        ``_cond`` held."""
        found = folder_identity(self.root)
        rescan = False
        if found != self._root_id:
            self._root_id = found
            if found is None:
                self.log(f"the memory root {self.root} is gone; waiting for it to come back")
            else:
                self.log(f"the memory root {self.root} is another folder now; watching it, and scanning it whole")
                with self._observer_lock:
                    old, self._observer = self._observer, None
                    if old is not None:
                        old.stop()
                        old.join(5.0)
                    if not self._stop:
                        self._start_observer()
                rescan = True
        with self._cond:
            if rescan or self._retry_on_timer:
                self._scan_now()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching and wait for the current batch to finish."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        with self._observer_lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():
            # A scan or a batch that cannot be cut short holds the store's
            # connection on the watcher's thread: closing it from here raised
            # ThreadingViolationError (or closed it under the scan). That
            # thread closes it as it ends (``_loop``).
            self.log(f"stopping: the current scan or batch goes on past {timeout:g}s, then the watcher ends")
            return
        self.store.close()

    def request_scan(self, when_quiet: bool = False) -> None:
        """Ask for a full light scan on the watcher's thread (non-blocking):
        the dirty check of a process whose watcher keeps the index fresh.
        ``when_quiet``: it may wait for a quiet moment (``start_wanted_scan``)."""
        with self._cond:
            if not when_quiet:
                self._scan_now()
                self._cond.notify()
            elif not self._full_scan:
                self._full_scan = True
                self._deferrable = True
                self._cond.notify()

    def _scan_now(self) -> None:
        # Holding _cond: a full scan for a reason that must not wait for quiet clients.
        self._full_scan = True
        self._deferrable = False

    def want_embed(self) -> None:
        """Ask for the texts that have no vector yet to be embedded (a save
        left its body's chunks to the watcher: ``Store.embed_in_background``)."""
        with self._cond:
            self._backlog = True
            self._next_embed = 0.0
            self._cond.notify()

    def want_scan(self) -> None:
        """Note a dirty check for ``start_wanted_scan`` to ask for: a
        server's ``Store.scan_in_background``, so the scan starts once the
        answer is out rather than competing with the request for the cores
        and the interpreter (0.10-0.16 s of CPU at 10,000 files; in a
        session every prompt that comes more than 5 s after the last scan
        asks for one; at 10,000 files the difference was within the noise)."""
        self._scan_wanted.set()

    def start_wanted_scan(self) -> None:
        """Ask for the scan ``want_scan`` noted, if any (a request is
        answered). It runs once clients have been quiet for
        ``SCAN_QUIET_SECONDS`` (``quiet_for``), or after ``SCAN_DEFER_SECONDS``
        at the latest; a change the watcher hears of is applied at once."""
        if self._scan_wanted.is_set():
            self._scan_wanted.clear()
            self.request_scan(when_quiet=True)

    @property
    def idle(self) -> bool:
        """Whether no change is waiting or being applied, nor a text being
        embedded: the index holds every change the watcher has seen, with
        its vectors."""
        with self._cond:
            return not self._pending and not self._full_scan and not self._busy and not self._backlog

    def _changes_waiting(self) -> bool:
        # Read without the lock, between two batches of embedding: a change
        # seen a batch late is applied a batch late, never lost.
        return bool(self._pending or self._full_scan or self._stop)

    # ------------------------------------------------------------ worker

    def _loop(self) -> None:
        try:
            self._watch()
        finally:
            if self._stop:
                self.store.close()  # on its own thread: stop() may have stopped waiting for it

    def _watch(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._pending and not self._full_scan:
                    now = time.monotonic()
                    if now >= self._next_root_check:
                        break
                    if self._backlog and now >= self._next_embed:
                        break
                    if self.mode != "watching" and now >= self._next_poll:
                        self._next_poll = now + FALLBACK_SCAN_SECONDS
                        self._scan_now()
                        break
                    # Woken by events too, yet the root check keeps its time:
                    # events from the old folder must not put it off.
                    wake = (
                        self._next_root_check
                        if self.mode == "watching"
                        else min(self._next_root_check, self._next_poll)
                    )
                    if self._backlog:
                        wake = min(wake, self._next_embed)
                    self._cond.wait(max(0.0, wake - now))
                if self._stop:
                    return
                root_due = time.monotonic() >= self._next_root_check
                if root_due:
                    self._next_root_check = time.monotonic() + ROOT_CHECK_SECONDS
            if root_due:
                try:
                    self._follow_root()  # outside _cond: it may stop and start the platform watcher
                except Exception as exc:  # noqa: BLE001 - the watcher's thread must not end
                    if self.mode == "watching":
                        self._poll_instead(f"following the memory root failed ({type(exc).__name__}: {exc})")
                continue
            with self._cond:
                embed_now = not self._pending and not self._full_scan
            if embed_now:
                self._embed_backlog()
                continue
            with self._cond:
                if not self._pending and not self._full_scan:
                    continue
                # Debounce: wait until events have been quiet for a moment.
                while not self._stop and time.monotonic() - self._last_event < self.debounce:
                    self._cond.wait(self.debounce)
                self._wait_for_quiet()
                full = self._full_scan or self._retry_full or len(self._pending) > MAX_INCREMENTAL
                self._retry_full = False
                paths = None if full else sorted(self._pending)
                self._pending.clear()
                self._full_scan = False
                self._busy = True
            try:
                self._apply(paths)
            finally:
                with self._cond:
                    self._busy = False
            observer = self._observer
            # (At a clean stop the observer is stopped first: not a failure to announce.)
            if observer is not None and not observer.is_alive() and self.mode == "watching" and not self._stop:
                self._poll_instead("file watcher stopped")

    def _wait_for_quiet(self) -> None:
        # Holding _cond; quiet_for takes no lock. An event, a stop or another
        # reason for a full scan ends the wait (they clear _deferrable).
        quiet_for = self.quiet_for
        give_up = time.monotonic() + SCAN_DEFER_SECONDS
        while self._deferrable and quiet_for is not None and not self._stop and not self._pending:
            left = min(SCAN_QUIET_SECONDS - quiet_for(), give_up - time.monotonic())
            if left <= 0:
                break
            self._cond.wait(left)
        self._deferrable = False

    def _apply(self, paths: list[str] | None) -> None:
        from marchdb.errors import MarchError

        try:
            # The index only: vectors come after, a batch at a time (_embed_backlog).
            report = self.store.sync(paths=paths, embed=False)
        except Exception as exc:  # noqa: BLE001 - the watcher's thread must not end, nor the index go stale
            expected = isinstance(exc, MarchError)  # a root away for a moment, a full disk
            message = (
                f"sync failed: {exc}"
                if expected
                else f"sync failed unexpectedly ({type(exc).__name__}: {exc}); the next change runs a full scan"
            )
            self._say_failure(message)
            with self._cond:
                self._retry_full = True
                # A root that is back is found by the next root check; a bug
                # waits for the next change rather than failing every 5 s.
                self._retry_on_timer = expected
            return
        if report.scanned_at is not None:
            self.parent.scanned_at = max(self.parent.scanned_at or 0.0, report.scanned_at)
        if self._last_failure is not None:
            self.log("sync works again")
            self._last_failure = None
        changed = report.added + report.updated + report.moved + report.removed
        with self._cond:
            self._retry_on_timer = False
            if changed:
                self._backlog = True
                self._next_embed = 0.0
        if changed:
            self.log(
                f"{'scan' if paths is None else 'update'}: +{report.added} ~{report.updated} "
                f">{report.moved} -{report.removed}"
            )
        for warning in report.warnings:
            self.log(warning)

    def _say_failure(self, message: str) -> None:
        if message != self._last_failure:  # a failure that repeats is said once
            self.log(message)
        self._last_failure = message

    def _embed_backlog(self) -> None:
        """Embed what has no vector yet, in the model's background lane,
        until it is done or a change is waiting (applied first, then this
        goes on). Another process embedding (the lease is taken): asked
        again in ``EMBED_RETRY_SECONDS``."""
        from marchdb.errors import MarchError

        interrupted = False

        def keep_going() -> bool:
            nonlocal interrupted
            interrupted = self._changes_waiting()
            return not interrupted

        try:
            embedded, warnings = self.store.embed_backlog(keep_going)
        except Exception as exc:  # noqa: BLE001 - the watcher's thread must not end
            expected = isinstance(exc, MarchError)
            self._say_failure(
                f"embedding failed: {exc}"
                if expected
                else f"embedding failed unexpectedly ({type(exc).__name__}: {exc}); the next change tries again"
            )
            with self._cond:
                self._backlog = False
            return
        with self._cond:
            if embedded is None:
                self._next_embed = time.monotonic() + EMBED_RETRY_SECONDS
            elif not interrupted:
                self._backlog = False
        # Said once a backlog is done (or once a minute while it lasts), not
        # at every pause a change or a dirty check's scan makes in it.
        self._embedded += embedded or 0
        now = time.monotonic()
        if self._embedded and (not interrupted or now - self._embed_said >= EMBED_LOG_SECONDS):
            self.log(f"embedded {self._embedded}" + (", going on" if interrupted else ""))
            self._embedded, self._embed_said = 0, now
        if embedded is not None and not interrupted:
            embedder = self.store.loaded_embedder()
            if embedder is not None:
                embedder.release_buffers()  # a long-lived process: back to a query-sized buffer
        for warning in warnings:
            self.log(warning)


def start_watcher(store, log: Callable[[str], None] = lambda m: None) -> Watcher:
    """Start a Watcher for ``store``'s memory root (it does the start-up scan).
    Raises ``ConfigError`` for a root that is missing or not a vault (``/``,
    ``/usr``, the home folder): never a watch over a whole system tree."""
    store.cfg.require_root()
    return Watcher(store, log=log).start()
