"""What the store reads and reports: status, doctor, open, search, SQL.

The operations that look at the vault and its index and change neither
(an ``open`` logs that it happened, a ``status`` scans for changed files
first). Part of ``Store`` (``marchdb.store``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re

from marchdb import hooks, logfile, ops, switches
from marchdb.errors import ConfigError, Conflict, InvalidInput, NotFound, check_text
from marchdb.index import db, doctor, sentinel
from marchdb.index import query as query_mod
from marchdb.index.keeper import Keeper, as_of
from marchdb.lifecycle import now as now_mod
from marchdb.vault.files import read_memory_text
from marchdb.vault.notes import MAX_FILE_BYTES


class Reading(Keeper):
    """The operations of ``Store`` that read the vault and the index."""

    def export(self, dest: str | os.PathLike, force: bool = False) -> dict:
        """Write the index to ``dest`` as one portable SQLite file (see
        ``export.export_index``; ``force`` replaces an earlier export)."""
        from marchdb.index.export import export_index

        return export_index(self.con, self.cfg, dest, force=force)

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
        summary.update(db.wal_state(con, self.cfg.index_path))
        summary.update(
            index_path=str(self.cfg.index_path),
            memory_root=str(self.root),
            home=str(self.cfg.home),
            model_config=self.cfg.embedding_model or "e5 (default)",
        )
        path, verdict = self.model_verdict()
        if path is None:
            summary["model_check"] = "no model file yet (the first embedding builds it)"
        elif verdict is None:
            summary["model_check"] = "not checked on this CPU yet (the first embedding checks it)"
        else:
            summary["model_check"] = verdict.summary()
        crashed_on = sentinel.summary(con, self.cfg.index_path, self.crash_key())
        if crashed_on:  # said only when there is something to say
            summary["model_crashed_on"] = crashed_on
        summary.update(self.recall_switches())
        return summary

    def recall_switches(self, cwd: str | None = None) -> dict:
        """What the user's switches say (``switches``): ``recall`` ("on", or
        paused and until when), ``recall_sessions`` (sessions switched off or
        on, by key), and with ``cwd`` ``recall_here``: on, or why it is off
        in that folder (its project, a ``.marchdb-norecall``, ``MARCH_RECALL``)."""
        pause = switches.paused(self.cfg.home)
        if pause is None:
            state = "on"
        else:
            since = dt.datetime.fromtimestamp(pause["since"]).strftime("%Y-%m-%d %H:%M")
            until = dt.datetime.fromtimestamp(pause["until"]).strftime("%Y-%m-%d %H:%M") if pause["until"] else None
            state = f"paused since {since}" + (f" until {until}" if until else "") + " (marchdb resume)"
        sessions = {k: v.get("recall") for k, v in switches.read_state(self.cfg.home)["sessions"].items()}
        out: dict = {"recall": state, "recall_sessions": sessions}
        if cwd is not None:
            where = hooks.project_here(self.cfg, None, cwd)
            out["recall_here"] = switches.recall_off(self.cfg, project=where, cwd=cwd) or "on"
        return out

    def switch_session(self, recall: str, session: str | None = None) -> dict:
        """Turn recall ``"off"`` or ``"on"`` for a session (``switches``): its
        id as the host gives it, or its conversation (``cc:ID``); without one,
        the session whose hook ran last. ``{"session", "recall", "last_seen"}``;
        ``InvalidInput`` when no hook has run yet and no id is given."""
        last_seen = None
        if session is None or not session.strip():
            row = self.con.execute(
                "SELECT conversation, at FROM runs WHERE conversation IS NOT NULL ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            if row is None:
                raise InvalidInput(
                    "no host session has asked for recall yet; give its id: marchdb off --session ID "
                    "(or pause recall everywhere: marchdb pause)"
                )
            session, last_seen = str(row[0]).split("~", 1)[0], row[1]
        check_text(session, "the session")
        key = session.strip()
        if len(key) > 300:
            raise InvalidInput(f"the session id is {len(key)} characters; a host's is at most 160")
        switches.set_session(self.cfg.home, key, recall)
        return {"session": key, "recall": recall, "last_seen": last_seen}

    def doctor(self) -> dict:
        """Every problem with the vault or the index and what to do about it:
        ``{"problems": [{"path", "kind", "detail", "advice"}], "vector_error",
        "hook_log"}`` (the last lines of ``logs/hooks.log``: why a hook
        injected nothing)."""
        summary = self.status()
        path, verdict = self.model_verdict()
        model_rows = []
        if verdict is not None and not verdict.usable:
            model_rows.append(
                {
                    "path": str(path),
                    "kind": "model_unusable",
                    "detail": f"{verdict.detail} (CPU: {verdict.cpu}; checked {verdict.checked_at})",
                    "advice": "llama.cpp crashes with this model on this machine, so recall uses keywords only: "
                    "upgrade llama-cpp-python, or try MARCH_LLAMA_EXTRA_BUFFERS=off, then `marchdb model check`",
                }
            )
        return {
            "problems": model_rows
            + doctor.root_problems(self.cfg, as_of(summary.get("last_sync_at")))
            + doctor.problems(self.con)
            + sentinel.problems(self.con, self.cfg.index_path, self.crash_key())
            + doctor.home_problems(
                [
                    self.cfg.profiles_dir / "agent.md",
                    self.cfg.profiles_dir / "user.md",
                    now_mod.page_path(self.cfg.home),
                ],
                now_mod.MAX_NOW_BYTES,
            ),
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
        mem_id = id.strip()  # checked by the operations table (ops.checks): text, not blank, bounded
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

    @ops.checks("memory_search")
    def search(self, query: str, limit: int = 10, context: int = 2, include_archived: bool = False) -> dict:
        """``memory_search``: ripgrep full-text search of the files as they
        are now. The index is asked only which ids are in conflict (left out,
        seed 000, as are ids several of the files found hold) and for the ids
        of files being rewritten; seed 000's throttled dirty check runs first,
        as for recall (index only: search needs no vectors). Archived memories
        are searched only with ``include_archived``. See ``search.search``
        for the result."""
        self.ensure_fresh(embed=False)

        def ids_for(paths: list[str]) -> dict[str, str]:
            return dict(
                self.con.execute(
                    "SELECT path, mem_id FROM files WHERE mem_id IS NOT NULL "
                    "AND path IN (SELECT value FROM json_each(?))",
                    (json.dumps(paths),),
                )
            )

        conflicts = frozenset(r[0] for r in self.con.execute("SELECT id FROM diag_conflicts"))
        from marchdb import search as search_mod  # ripgrep's wrapper: not every process searches

        return search_mod.search(
            self.cfg.require_root(),
            query,
            limit=limit,
            context=context,
            mem_ids=ids_for,
            exclude_ids=conflicts,
            statuses=("active", "archived") if include_archived else ("active",),
        )

    def import_history(self, limit: int = 20) -> dict:
        """``marchdb import --history``: the memories imports made, by kind,
        and the latest runs (``history.history``)."""
        self.ensure_fresh()
        from marchdb.lifecycle import history

        return history.history(self.con, self.cfg.home, limit)

    @ops.checks("memory_reflect")
    def reflect(self, date: str | None = None, since: str | None = None, until: str | None = None, today=None) -> dict:
        """``memory_reflect``: the daily logs of ``date`` (default today), or
        of ``since`` to ``until``, with the routing rules, as the text the
        host's model reflects on (``reflect.reflection``; days as YYYY-MM-DD,
        ``today`` or ``yesterday``, local; ``today`` a ``datetime.date`` to
        count from). Reads only."""
        from marchdb.lifecycle import reflect as reflect_mod

        first, last = reflect_mod.day_range(date, since, until, today or dt.date.today())
        self.ensure_fresh(embed=False)
        return reflect_mod.reflection(self.con, self.cfg.require_root(), first, last)

    def query(
        self,
        sql: str,
        params: tuple = (),
        write: bool = False,
        max_rows: int | None = None,
        timeout: float | None = None,
    ) -> tuple[list[str], list[tuple]]:
        """Run SQL on the index (sqlite-vec loaded). Returns (columns, rows).

        Read-only unless ``write``: the index is derived from the files, and
        a hand edit (``DELETE FROM memory_index``) would leave it silently
        out of step with them until a rebuild. Reads run on ``reader()``.
        ``max_rows``: read at most this many rows; ``timeout``: stop the
        statement after this many seconds (``InvalidInput``); both unbounded
        by default (``marchdb sql`` bounds them: ``query.DEFAULT_*``).
        """
        check_text(sql, "the SQL")
        if _RECALLS_IN_SQL.search(sql):
            # As `marchdb recall` does: answer from an index that is up to date.
            self.ensure_fresh()
        if _EMBEDS_IN_SQL.search(sql) and self.use_model:
            # The model (built and checked on this CPU on first use) and the
            # word list recall reads are loaded before the statement's clock
            # starts, not inside it: seconds that are not the statement's.
            self.embedder()
            self.words()
        return query_mod.run_one(self.con if write else self.reader(), sql, params, max_rows, timeout)


#: Statements that recall from the index get the dirty check first.
_RECALLS_IN_SQL = re.compile(r"\bmarch_(recall|similar)", re.IGNORECASE)
#: Statements whose functions embed text with the model.
_EMBEDS_IN_SQL = re.compile(r"\bmarch_(recall|similar|embed)", re.IGNORECASE)
