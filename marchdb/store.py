"""The marchdb store: one object an agent, the CLI or the MCP server holds.

It returns data (dicts, dataclasses); formatting lives in ``cli`` and ``mcp``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import apsw.ext

from . import db, doctor, profiles
from . import save as save_mod
from . import search as search_mod
from .config import Config, ensure_layout, load_config
from .embedding import calibrate, load_embedder, vectors
from .embedding.vecindex import VectorIndex
from .errors import ConfigError, Conflict, FileError, InvalidInput, ModelError, NotFound
from .files import read_file
from .notes import MAX_FILE_BYTES, metadata_text
from .recall import RecallResult, project_tag
from .recall import recall as recall_hints
from .sync import SyncReport, sync_files

#: Seed 000: a search or recall re-scans when the last scan is older than this.
DIRTY_CHECK_SECONDS = 5.0
#: Texts a dirty check may embed before answering.
DIRTY_CHECK_EMBED_LIMIT = 64


class Store:
    """A memory vault and its index.

    ``Store()`` resolves the configuration the usual way (flags, environment,
    config.json); pass ``home=``, ``root=``, ``model=`` to override.

    ``keep_vectors``: whether recall searches a copy of the vectors held in
    this process's memory (``vecindex``: ~5x faster KNN, loaded once, kept in
    step with the index) instead of the vec0 tables. ``None`` (default) turns
    it on from the second recall, so a one-shot call never pays the loading;
    long-lived processes (MCP server, watcher) pass ``True``.
    """

    def __init__(self, cfg: Config | None = None, keep_vectors: bool | None = None, **overrides):
        self.cfg = cfg or load_config(**overrides)
        self.notices: list[str] = []  # things the user should be told once
        self._con: apsw.Connection | None = None
        self._embedder = None
        self._embedder_error: str | None = None
        ensure_layout(self.cfg)
        self.keep_vectors = keep_vectors
        self._vindex: VectorIndex | None = None
        self._recalls = 0
        self._rebuilt = False
        self._index_ino: int | None = None
        #: Set by a process that runs a watcher (the MCP server): the dirty
        #: check asks it for a full scan instead of scanning inline.
        self.scan_in_background: Callable[[], None] | None = None

    # ------------------------------------------------------------ plumbing

    @property
    def con(self) -> apsw.Connection:
        """The index connection, opened (and created or rebuilt) on first use."""
        if self._con is None:
            con, rebuilt = db.open_index(self.cfg.index_path)
            if rebuilt:
                self.notices.append(f"index {self.cfg.index_path}: {rebuilt}")
            self._con = con
            self._rebuilt = bool(rebuilt)
            self._index_ino = _inode(self.cfg.index_path)
        return self._con

    @property
    def root(self) -> Path:
        """The memory root (only this folder is indexed)."""
        return self.cfg.memory_root

    def close(self) -> None:
        """Close the index connection."""
        if self._con is not None:
            self._con.close()
            self._con = None
        self._vindex = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def take_notices(self) -> list[str]:
        """The notices gathered since the last call (each is shown once)."""
        notes, self.notices = self.notices, []
        return notes

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
    ) -> SyncReport:
        """Bring the index in line with the files, then embed what is new
        (at most ``embed_limit`` texts when given; the rest waits for the
        next sync).

        Without a usable model the BM25 side still completes; the report's
        ``warnings`` and ``status()`` say why vectors are missing.
        """
        started = time.perf_counter()
        report = sync_files(self.con, self.cfg.require_root(), self.cfg.index_path, paths)
        if embed:
            emb = self.embedder()
            if emb is None:
                report.warnings.append(f"no vectors: {self._embedder_error}")
                with db.transaction(self.con):
                    db.set_meta(self.con, "vector_error", self._embedder_error)
            else:
                report.model = emb.fingerprint
                try:
                    report.embedded = vectors.embed_pending(
                        self.con, emb, self.cfg.index_path, progress, limit=embed_limit
                    )
                    calibrate.ensure(self.con, emb)  # once per model, so recall starts fast
                    if db.get_meta(self.con, "vector_error") is not None:
                        # A working model ran cleanly: an old error (a bad path
                        # fixed since) must not stay in status and doctor.
                        with db.transaction(self.con):
                            db.set_meta(self.con, "vector_error", None)
                except ModelError as exc:
                    report.warnings.append(f"embedding stopped: {exc}")
                    with db.transaction(self.con):
                        db.set_meta(self.con, "vector_error", str(exc))
        report.seconds = time.perf_counter() - started
        return report

    def ensure_fresh(self, max_age: float = DIRTY_CHECK_SECONDS, embed: bool = True) -> SyncReport | None:
        """Seed 000's throttled dirty check: re-scan when the last scan (by
        any process) is older than ``max_age`` seconds (``embed=False``:
        index only, never loading a model)."""
        if self._con is not None and _inode(self.cfg.index_path) != self._index_ino:
            # `marchdb rebuild` in another process replaced the file: a
            # connection to the old one would read and write a deleted file.
            # (The new file cannot reuse the inode: ours still holds the old one open.)
            self.close()
        last = db.get_meta(self.con, "last_scan_epoch")
        if last is not None and time.time() - float(last) < max_age:
            return None
        if self.scan_in_background is not None and last is not None:
            # A watcher already applies every change it hears of; the dirty
            # check only catches what it missed, so it need not hold up this
            # answer (a full stat walk takes ~0.5 s at 100,000 files).
            self.scan_in_background()
            return None
        # Bounded embedding: a dirty check must stay quick; a big backlog is
        # left to `marchdb sync` or the watcher (recall announces BM25 gaps).
        return self.sync(embed=embed, embed_limit=DIRTY_CHECK_EMBED_LIMIT)

    def rebuild(self, embed: bool = True, progress=None) -> SyncReport:
        """Delete the index and build it again from the Markdown files."""
        self.close()
        with db.writer_lock(self.cfg.index_path):
            db.remove_index_files(self.cfg.index_path)
        return self.sync(embed=embed, progress=progress)

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
                # The throttled dirty check (a stat walk; no model, no
                # embedding): counts are fresh right after a file was added.
                self.ensure_fresh(embed=False)
            con = self.con  # the check may have followed a rebuilt index file
        except ConfigError as exc:  # status still answers, and says why it could not scan
            self.notices.append(str(exc))
        summary = db.rows(con, "SELECT * FROM diag_summary")[0]
        summary.update(
            index_path=str(self.cfg.index_path),
            memory_root=str(self.root),
            home=str(self.cfg.home),
            model_config=self.cfg.embedding_model or "e5 (default)",
        )
        return summary

    def doctor(self) -> dict:
        """Every problem with the vault or the index and what to do about it:
        ``{"problems": [{"path", "kind", "detail", "advice"}], "vector_error"}``."""
        summary = self.status()
        return {"problems": doctor.problems(self.con), "vector_error": summary.get("vector_error")}

    def open(self, mem_id: str, log: bool = True) -> dict:
        """A memory's Markdown by id: ``{"status": "ok", "id", "path", "markdown"}``.

        Raises ``NotFound`` for an unknown id and ``Conflict`` (with every
        path) when several files hold it. Reads the file as it is now; the
        index only says where it is.
        """
        if not isinstance(mem_id, str) or not mem_id.strip():
            raise InvalidInput("give the id of a memory, e.g. mem_01hx_context_cache")
        mem_id = mem_id.strip()
        self.ensure_fresh()
        holders = db.file_holders(self.con, mem_id)
        if len(holders) > 1:
            raise Conflict(
                f"{len(holders)} files hold id {mem_id}; give all but one a new id, then sync",
                mem_id,
                [str(self.root / p) for p in holders],
            )
        row = self.con.execute("SELECT path FROM memory_index WHERE id = ?", (mem_id,)).fetchone()
        if row is None:
            raise NotFound(f"no memory has id {mem_id}", mem_id)
        path = self.root / row[0]
        try:
            data, _st = read_file(path, MAX_FILE_BYTES)
            if len(data) > MAX_FILE_BYTES:
                raise FileError(f"{path} is larger than {MAX_FILE_BYTES:,} bytes; it is not a memory any more")
            text = data.decode("utf-8")
        except FileNotFoundError:
            self.sync(embed=False)
            if self._still_indexed(mem_id):
                return self.open(mem_id, log=log)
            raise NotFound(f"no memory has id {mem_id} (its file was just deleted)", mem_id) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise FileError(f"cannot read {path}: {exc}; check the file, then `marchdb sync`") from None
        if log:
            with db.transaction(self.con):
                self.con.execute("INSERT INTO open_log(mem_id) VALUES (?)", (mem_id,))
        return {"status": "ok", "id": mem_id, "path": str(path), "markdown": text}

    def recall(
        self,
        text: str,
        run_id: str | None = None,
        trigger: str = "user",
        explain: bool = False,
        threshold: float | None = None,
        record_only: bool = False,
        project: str | None = None,
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
        never lifts a memory over the threshold by itself. Falls back to BM25
        (announced in ``result.warning``) when no model can be loaded.
        """
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("recall needs the text of a message")
        if trigger not in ("user", "assistant"):
            raise InvalidInput("trigger must be 'user' or 'assistant'")
        self.ensure_fresh()
        emb = self.embedder()
        self._recalls += 1
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
            project_tag=project_tag(self.cfg.project_tag_prefix, project),
        )
        if emb is None:
            result.warning = f"BM25 only: {self._embedder_error}"
        return result

    def vector_index(self) -> VectorIndex | None:
        """The in-memory copy of the vectors recall should use now, or None
        for the SQL path (see ``keep_vectors``)."""
        if self.keep_vectors is False or (self.keep_vectors is None and self._recalls < 2):
            return None
        if self._vindex is None:
            self._vindex = VectorIndex()
        return self._vindex

    def search(self, query: str, limit: int = 20, context: int = 2) -> dict:
        """``memory_search``: ripgrep full-text search of the files as they
        are now. The index is asked only which ids are in conflict (left out,
        seed 000) and for the ids of files being rewritten. See
        ``search.search`` for the result."""

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
            self.cfg.require_root(), query, limit=limit, context=context, mem_ids=ids_for, exclude_ids=conflicts
        )

    def save(
        self,
        *,
        id: str | None = None,
        name: str | None = None,
        description: str | None = None,
        body: str | None = None,
        tags: list[str] | str | None = None,
        status: str | None = None,
        force: bool = False,
        embed: bool = True,
    ) -> dict:
        """``memory_save``: create or update a memory file, then re-index it.

        A new memory needs name, description, body and a tag; an update (an
        existing ``id``) changes only the fields passed. Returns ``{"status":
        created|updated|unchanged|duplicate, "id", "path", "message",
        "warnings"}`` (``duplicate``: nothing written, a near-twin exists;
        update it by id, or pass ``force=True``). Raises ``InvalidInput`` for
        bad input, ``Conflict`` when several files hold the id, ``FileError``
        when the file cannot be written. ``embed=False`` re-indexes without
        computing vectors (and never loads a model). See ``save`` for the rules.
        """
        changes = save_mod.validate_changes(name, description, body, tags, status)
        mem_id = save_mod.checked_id(self.con, id) if id is not None else None
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

    def context(self, text: str | None = None, run_id: str | None = None, project: str | None = None) -> dict:
        """The profiles as ``[agent_profile]`` / ``[user_profile]`` blocks plus
        the recall hints for ``text`` (``project``: see ``recall``):
        ``{"text", "agent_profile", "user_profile", "hints"}``, ready to put
        into a prompt."""
        blocks = profiles.read_profiles(self.cfg)
        hints = []
        if text and text.strip():
            hints = [h.to_dict() for h in self.recall(text, run_id=run_id, project=project).hints]
        return {
            "text": profiles.format_context(blocks, hints),
            "agent_profile": blocks["agent_profile"],
            "user_profile": blocks["user_profile"],
            "hints": hints,
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
        out of step with them until a rebuild.
        """
        if not write:
            self.read_only(True)
        try:
            cur = self.con.execute(sql, params)
            try:
                columns = [d[0] for d in cur.getdescription()]
            except apsw.ExecutionCompleteError:
                # No rows: ask the statement itself for its columns.
                last = apsw.ext.query_info(self.con, sql, params).description or ()
                columns = [d[0] for d in last]
            rows = cur.fetchall()
        except (apsw.ReadOnlyError, apsw.AuthError):
            raise InvalidInput(
                "the index is read-only here: it is rebuilt from the Markdown files, so edit those "
                "(or pass --write if you really mean to change the index)"
            ) from None
        except apsw.Error as exc:
            raise InvalidInput(f"SQL error: {exc}") from None
        finally:
            if not write:
                self.read_only(False)
        return columns, rows

    def read_only(self, on: bool) -> None:
        """Refuse (or allow again) every write on the index connection.

        An authorizer, not only ``PRAGMA query_only``: a statement list such
        as ``PRAGMA query_only=0; DELETE ...`` would switch the pragma off.
        """
        if on:
            self.con.pragma("query_only", True)
            self.con.authorizer = _read_only_authorizer
        else:
            self.con.authorizer = None
            self.con.pragma("query_only", False)


_READ_OPS = {apsw.SQLITE_SELECT, apsw.SQLITE_READ, apsw.SQLITE_FUNCTION, apsw.SQLITE_RECURSIVE}


def _read_only_authorizer(op, arg1, arg2, db_name, trigger):
    # Reads, and pragmas that only ask (no value given); nothing else.
    if op in _READ_OPS or (op == apsw.SQLITE_PRAGMA and arg2 is None):
        return apsw.SQLITE_OK
    return apsw.SQLITE_DENY


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None
