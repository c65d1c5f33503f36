"""The marchdb store: one object an agent, the CLI or the MCP server holds.

It returns data (dicts, dataclasses); formatting lives in ``cli`` and ``mcp``.
Each operation of ``ops`` is a method here (checked against the table by
``ops.checks``); the plumbing under them is ``index.keeper.Keeper``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
from typing import TYPE_CHECKING

from marchdb import fts, hooks, logfile, ops, profiles, redact, switches
from marchdb import save as save_mod
from marchdb import search as search_mod
from marchdb.clock import utc_now_iso
from marchdb.errors import ConfigError, Conflict, InvalidInput, NotFound, check_text
from marchdb.index import db, doctor, runs, sentinel, vectors
from marchdb.index import query as query_mod
from marchdb.index.recall import RELATED_BELOW, W_DENSE
from marchdb.index.recall import recall as recall_hints
from marchdb.index.recall import related as related_hints
from marchdb.index.results import RecallResult
from marchdb.index.terms import memory_count
from marchdb.lifecycle import capture, history, importing, maintain
from marchdb.lifecycle import keep as keep_mod
from marchdb.lifecycle import now as now_mod
from marchdb.lifecycle import reflect as reflect_mod
from marchdb.lifecycle.capture import DEFAULT_ONE_LINER_TAG
from marchdb.twins import check_conflicts_with, check_supersedes
from marchdb.vault.changes import validate_changes
from marchdb.vault.files import read_memory_text, vault_lock
from marchdb.vault.notes import MAX_FILE_BYTES, metadata_text
from marchdb.vault.tags import project_tag

if TYPE_CHECKING:
    pass
from marchdb.index.keeper import DIRTY_CHECK_EMBED_LIMIT, Keeper, as_of


class Store(Keeper):
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
        summary["model_crashed_on"] = sentinel.summary(con, self.cfg.index_path)
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
            + sentinel.problems(self.con, self.cfg.index_path)
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
        cwd: str | None = None,
        switched: bool = True,
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

        ``cwd``: the folder the agent works in, which names the project when
        ``project`` is not given (as a host's hook does). The user's switches
        (``switches``: the pause, ``#norecall``, the conversation's session,
        ``MARCH_RECALL``, the project) are honoured: recall that is off answers
        no hint, mode ``off``, and says why in ``warning`` (``switched=False``:
        the caller checked them itself). A project kept apart (``apart`` in its
        ``projects`` entry) recalls only memories tagged for it (and untagged
        ones, unless ``untagged`` is false); ``explain`` shows who was left out.
        """
        if not text.strip():
            raise InvalidInput("recall needs the text of a message")
        where = hooks.project_here(self.cfg, project, cwd)
        if switched:
            off = switches.recall_off(
                self.cfg, text=text, sessions=conversation_keys(conversation), project=where, cwd=cwd
            )
            if off:
                return RecallResult(trigger, run_id, self.cfg.min_score, [], mode="off", warning=off, explained=explain)
        # A secret in a message (a pasted key, a transcript's tail) is no word to match on.
        text = redact.redact(text, marker=redact.blank)[0]
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1
        ):
            # as recallMinScore: below 0 (or NaN) every memory would be hinted, above 1 none ever
            raise InvalidInput(f"threshold={threshold!r} is out of range; use a number from 0 to 1, e.g. 0.5")
        self.ensure_fresh()
        emb = self.embedder()
        if emb is not None and self.scan_in_background is None and not vectors.usable(self.con, emb.fingerprint):
            # The index holds no vectors of this model (built while it could not
            # run, or by another): the dirty check's bounded embedding now, not
            # keyword recall until its next scan. A warm engine's watcher does it.
            self.sync(embed_limit=DIRTY_CHECK_EMBED_LIMIT, embed_wait=False, background=False)
        self._recalls += 1
        tag = project_tag(self.cfg.project_tag_prefix, where)
        rules = switches.project_rules(self.cfg, where)
        apart = (
            (tag, bool(rules["untagged"]), self.cfg.project_tag_prefix) if rules and rules["apart"] and tag else None
        )
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
            apart=apart,
            conversation=conversation or None,
            deadline=self.deadline,
            # Only the hybrid statement reads them, and only for memories in the
            # other script than the message: a vault all in one script never loads them.
            words=self.words() if emb is not None and self._other_script_held(text) else None,
        )
        if explain:
            result.settings = {
                "threshold": result.threshold,
                "threshold_from": "threshold="
                if threshold is not None
                else self.cfg.sources.get("min_score", "default"),
                "dense_weight": W_DENSE if self.cfg.dense_weight is None else self.cfg.dense_weight,
                "dense_weight_from": self.cfg.sources.get("dense_weight", "default"),
            }
            if where and tag:
                result.settings["project"] = {
                    "name": where,
                    "tag": tag,
                    "apart": apart is not None,
                    "untagged": bool(apart and apart[1]),
                    "from": "projects in config.json" if rules else "ranking only",
                }
        if emb is None:
            result.warning = f"BM25 only: {self._embedder_error}"
            self._told_in_result(str(self._embedder_error))
        if where and where.strip() and tag is None:
            odd = (
                f"project {where.strip()[:60]!r} cannot be a tag (letters, digits and '/', '-', '_', '.', '+', "
                "'#'), so it ranks nothing"
            )
            result.warning = f"{result.warning}; {odd}" if result.warning else odd
        if not result.hints and not memory_count(self.con):
            # a new user's first recall: "no hint" alone reads as "recall does not work"
            empty = (
                f"no memories in {self.cfg.memory_root} yet, so nothing to recall: save one "
                "(marchdb remember, marchdb save, memory_save) or bring notes in (marchdb import)"
            )
            result.warning = f"{result.warning}; {empty}" if result.warning else empty
        return result

    def _other_script_held(self, text: str) -> bool:
        """Whether an active memory is in the other script than ``text``
        (Chinese against the rest, as ``fts.cjk_share`` tells), known once per
        change of the index."""
        generation = (db.get_meta(self.con, "index_id"), db.get_meta(self.con, "fts_gen"))
        if self._scripts is None or self._scripts[0] != generation:
            row = self.con.execute(
                "SELECT max(cjk >= 0.5), min(cjk >= 0.5) FROM memory_index WHERE status = 'active'"
            ).fetchone()
            self._scripts = (generation, {bool(v) for v in (row or ()) if v is not None})
        return (fts.cjk_share(text) < 0.5) in self._scripts[1]

    @ops.checks("memory_hook")
    def hook(
        self,
        *,
        event: str,
        host: str = "generic",
        session: str | None = None,
        text: str | None = None,
        cwd: str | None = None,
        source: str | None = None,
        run_id: str | None = None,
        trigger: str = "user",
        record_only: bool = False,
        profiles: bool = False,
        project: str | None = None,
        conversation: str | None = None,
        keep: list[str] | None = None,
    ) -> dict:
        """``memory_hook``: what a host injects for one of its events, and
        what is recorded (the host adapters in ``hosts`` translate the host's
        JSON into these arguments and the answer back). The rules are
        ``hooks.plan``'s, the session's runs ``index.runs``'; returns
        ``hooks.answer``'s ``{"context", "hints", "run_id", "note"}``."""
        where = hooks.project_here(self.cfg, project, cwd)
        off = hooks.switched_off(
            self.cfg,
            event=event,
            host=host,
            session=session,
            text=text,
            cwd=cwd,
            project=where,
            conversation=conversation,
        )
        if off:
            return hooks.answer("", [], None, [off])
        plan = hooks.plan(event, text=text, source=source, trigger=trigger, record_only=record_only, profiles=profiles)
        if plan.skip:
            return hooks.answer("", [], None, [plan.skip])
        key = hooks.session_key(host, session)
        if plan.afresh:
            runs.new_window(self.con, key, keep or [])
        notes: list[str] = []
        hinted: list[dict] = []
        run = run_id
        if plan.recall:
            self.cfg.require_root()  # a missing vault must not hint from a stale index
            if plan.run != "given":
                run = (runs.current_run_id(self.con, key) if plan.run == "current" else None) or runs.next_run_id(
                    self.con, key
                )
                conversation = runs.conversation_of(self.con, key)
            result = self.recall(
                text or "",
                run_id=run,
                trigger=plan.trigger,
                record_only=plan.record_only,
                project=where,
                conversation=conversation,
                switched=False,
            )
            notes += [result.warning] if result.warning else []
            hinted = [h.to_dict() for h in result.hints] if plan.inject else []
        context = hooks.context(plan, hinted, self.cfg, notes)
        if plan.start_imports and (started := keep_mod.start(self.cfg, host)):
            notes.append(started)
        return hooks.answer(context, hinted, run, notes)

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
        conflicts_with: list[str] | str | None = None,
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
        this one is active, and ranks them below it. ``conflicts_with`` (ids
        of memories this one contradicts; ``[]`` removes the field) keeps both
        and marks them for a person to decide (``doctor``, ``maintain``, and
        recall's answer when it hints either). Returns ``{"status":
        created|updated|unchanged|duplicate, "id", "path", "message",
        "warnings"}`` (``duplicate``: nothing written, a near-twin exists;
        update it by id, or pass ``force=True``). Raises ``InvalidInput`` for
        bad input, ``Conflict`` when several files hold the id, ``FileError``
        when the file cannot be written. ``embed=False`` re-indexes without
        computing vectors (and never loads a model). See ``save`` for the rules.
        """
        clean, said = redact.redact_fields({"the name": name, "the description": description, "the body": body})
        name, description, body = clean["the name"], clean["the description"], clean["the body"]  # type: ignore[assignment]
        _refuse_secret_tags(tags)
        changes = validate_changes(name, description, body, tags, status, priority, supersedes, conflicts_with)
        mem_id = save_mod.checked_id(self.con, id) if id is not None else None
        rescan = (lambda: self.sync(embed=False)) if self.cfg.memory_root.is_dir() else None
        if changes.supersedes:
            check_supersedes(self.con, mem_id, changes.supersedes, rescan)
        if changes.conflicts_with:
            check_conflicts_with(self.con, mem_id, changes.conflicts_with, changes.supersedes, rescan)
        root = self.cfg.require_root()
        twin_probe = None
        if embed and changes.complete() and not force:
            # The model loads (slow the first time) and embeds before the
            # saver takes the lock other savers wait on.
            emb = self.embedder()
            if emb is not None:
                text = metadata_text(changes.name or "", changes.description or "", changes.tags or [])
                twin_probe = (emb.embed_passages([text])[0], emb.fingerprint)
        related = []
        if changes.complete() and (mem_id is None or not db.id_taken(self.con, mem_id)):
            # Looked up before writing (seed 003's reconcile-before-writing), in
            # the vault as the writer knew it: in a small vault the new memory's
            # own words would lower the others' scores.
            self.ensure_fresh(embed=embed)
            named = {*(changes.supersedes or []), *(changes.conflicts_with or [])}
            related = self.related(f"{changes.name}\n{changes.description}", named, changes.tags or [], embed)
        result = save_mod.Saver(self.con, root, self.cfg.index_path).run(mem_id, changes, force, twin_probe)
        odd_id = doctor.mixed_scripts_warning(result.id) if mem_id is not None and result.rel is not None else None
        if odd_id:
            result.warnings.append(odd_id)  # said, never refused: files may hold such ids already
        if embed and result.rel is not None and result.indexed:
            # Outside the lock: embedding must not hold up other savers.
            result.warnings.extend(self.embed_own([result.rel]))
        if result.status == "created":
            result.related = [r for r in related if r["id"] != result.id]
        if said and result.rel is not None:
            result.warnings.insert(0, kept_out(said))
        return result.to_dict()

    def related(self, text: str, exclude: set[str], tags: list[str], use_model: bool = True) -> list[dict]:
        """Active memories on the subject of ``text`` (a new memory's name and
        description), none of ``exclude``: what recall would hint beside it
        (``recall.related``). Each ``{"id", "name", "description", "score",
        "shared_tags", "why"}``, for the writer to reconcile (seed 003's
        ADD / UPDATE / CONFLICT): update one, supersede it, or keep both.
        ``use_model=False``: BM25 alone, no model loaded."""
        emb = self.embedder() if use_model else None
        found = related_hints(
            self.con,
            text,
            emb,
            threshold=max(0.0, self.cfg.min_score - RELATED_BELOW),
            exclude=exclude,
            w_dense=self.cfg.dense_weight,
            # as in recall: only the hybrid statement reads them, for memories in the other script
            words=self.words() if emb is not None and self._other_script_held(text) else None,
        )
        tags_of = dict(
            self.con.execute(
                "SELECT id, tags_json FROM memory_index WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps([h.id for h in found]),),
            )
        )
        out = []
        for hint in found:
            shared = [t for t in json.loads(tags_of.get(hint.id) or "[]") if t in tags]
            why = f"recall scores it {hint.score:.2f} for this memory's name and description"
            out.append(
                {
                    "id": hint.id,
                    "name": hint.name,
                    "description": hint.description,
                    "score": round(hint.score, 4),
                    "shared_tags": shared,
                    "why": why + (f"; shares the tags {', '.join(shared)}" if shared else ""),
                }
            )
        return out

    @ops.checks("memory_remember")
    def remember(self, text: str, tags: list[str] | str | None = None, force: bool = False, embed: bool = True) -> dict:
        """``memory_remember``: a memory from one sentence (``capture.one_liner``
        makes its name, description and body; ``tags`` default to ``note``),
        through ``save`` and its checks (a near-duplicate writes nothing).
        Returns save's answer with the ``name`` and ``description`` made."""
        text, findings = redact.redact(text) if isinstance(text, str) else (text, [])
        name, description, body = capture.one_liner(text)
        tags = tags or [DEFAULT_ONE_LINER_TAG]
        result = self.save(name=name, description=description, body=body, tags=tags, force=force, embed=embed)
        if findings and result["status"] in ("created", "updated", "unchanged"):
            result["warnings"].insert(0, kept_out([f"the text held {redact.summary(findings)}"]))
        return {**result, "name": name, "description": description}

    @ops.checks("memory_log")
    def log(self, title: str, text: str | None = None, *, embed: bool = True, now=None) -> dict:
        """Quick capture: append ``### HH:MM - title`` (and ``text``) to today's
        daily log, creating it for the day's first entry (``capture``).
        Returns ``{"status": created|appended, "id", "path", "entry",
        "message", "warnings"}``. ``embed=False`` indexes the entry for BM25
        now and leaves its vector to the next sync."""
        clean, said = redact.redact_fields({"the title": title, "the text": text})
        title, text = clean["the title"], clean["the text"]  # type: ignore[assignment]
        result = capture.Logger(self.con, self.cfg.require_root(), self.cfg.index_path).run(title, text, now)
        if said:
            result.warnings.insert(0, kept_out(said))
        if embed and result.indexed:
            result.warnings.extend(self.embed_own([result.rel]))
        return result.to_dict()

    def import_(
        self,
        kind: str,
        path=None,
        *,
        apply: bool = False,
        embed: bool = True,
        progress=None,
        since: str | None = None,
        quiet_minutes: float | None = None,
        by: str = "command",
    ) -> dict:
        """``marchdb import``: plan (or with ``apply``, make) a memory for each
        note or conversation of ``path`` (``importing``; None for an agent
        host: its own folder; kind ``ALL``: every host's). ``since`` (``7d``,
        a date) leaves older chats out, ``quiet_minutes`` chats still going
        on; ``by`` says in the lifecycle log what started it. Idempotent,
        never overwrites. See ``importing.ImportReport.to_dict`` for the result."""
        window = importing.Window(
            history.parse_since(since) if since is not None else None,
            dt.timedelta(minutes=quiet_minutes) if quiet_minutes else None,
        )
        report = importing.Importer(self.con, self.cfg.require_root(), self.cfg.index_path, self.cfg.home).run(
            kind, path, apply, window
        )
        data = report.to_dict()
        if report.created_rels:
            created = [r.id for r in report.rows if r.id and r.action == "created"]
            record = {"op": "import", "kind": kind, "path": report.path, "created": created, "by": by}
            self._record({**record, "since": since} if since else record)
            if embed:
                data["embed_warnings"] = self.sync(paths=report.created_rels, progress=progress).warnings
        return data

    def import_history(self, limit: int = 20) -> dict:
        """``marchdb import --history``: the memories imports made, by kind,
        and the latest runs (``history.history``)."""
        self.ensure_fresh()
        return history.history(self.con, self.cfg.home, limit)

    def maintain(
        self,
        *,
        apply: bool = False,
        log_days: int = maintain.LOG_DAYS,
        deprecated_days: int = maintain.DEPRECATED_DAYS,
        action_days: int = maintain.ACTION_DAYS,
        reflection_days: int = maintain.REFLECTION_DAYS,
        now=None,
    ) -> dict:
        """``marchdb maintain``: what could be archived, merged, described or
        decided, with the reason for each (``maintain``). ``apply`` archives what
        the archive proposals name (through save's update path); nothing is ever deleted."""
        maintain.check_days(
            log_days=log_days, deprecated_days=deprecated_days, action_days=action_days, reflection_days=reflection_days
        )
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
                self.con,
                now,
                log_days,
                deprecated_days,
                project_prefix=self.cfg.project_tag_prefix,
                action_days=action_days,
                reflection_days=reflection_days,
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

    @ops.checks("memory_now")
    def now(self, text: str | None = None, clear: bool = False) -> dict:
        """``memory_now``: the working page (``now``). ``text`` replaces it
        whole, ``clear`` empties it, neither reads it. Returns
        ``now.read_page``'s data (``text``, ``updated_at``, ``age``,
        ``stale``...) with ``status`` (set | cleared | read) and ``block``, the
        ``[now]`` text hosts inject ("" for no page). Needs neither the index
        nor the model."""
        if text is not None and clear:
            raise InvalidInput("pass the page's text or clear, not both")
        warnings = []
        if clear:
            now_mod.clear_page(self.cfg.home)
        elif text is not None:
            text, findings = redact.redact(text) if isinstance(text, str) else (text, [])
            now_mod.write_page(self.cfg.home, text)
            if findings:
                warnings.append(kept_out([f"the page held {redact.summary(findings)}"]))
        page = now_mod.read_page(self.cfg.home, self.cfg.now_stale_hours)
        status = "cleared" if clear else "set" if text is not None else "read"
        return {"status": status, **page, "block": now_mod.block(page), "warnings": warnings}

    @ops.checks("memory_reflect")
    def reflect(self, date: str | None = None, since: str | None = None, until: str | None = None, today=None) -> dict:
        """``memory_reflect``: the daily logs of ``date`` (default today), or
        of ``since`` to ``until``, with the routing rules, as the text the
        host's model reflects on (``reflect.reflection``; days as YYYY-MM-DD,
        ``today`` or ``yesterday``, local; ``today`` a ``datetime.date`` to
        count from). Reads only."""
        first, last = reflect_mod.day_range(date, since, until, today or dt.date.today())
        self.ensure_fresh(embed=False)
        return reflect_mod.reflection(self.con, self.cfg.require_root(), first, last)

    @ops.checks("memory_context")
    def context(
        self,
        text: str | None = None,
        run_id: str | None = None,
        project: str | None = None,
        conversation: str | None = None,
        cwd: str | None = None,
    ) -> dict:
        """The profiles as ``[agent_profile]`` / ``[user_profile]`` blocks, the
        working page as ``[now]`` (with its age; ``now``), plus the recall
        hints for ``text`` (``project``, ``conversation``, ``cwd``: see ``recall``):
        ``{"text", "agent_profile", "user_profile", "now", "hints", "warning"}``,
        ready to put into a prompt (``warning``: the recall's, e.g. BM25 only).
        Where the user's switches turn recall off (``switches``) it is all
        empty, and ``off`` and ``warning`` say why."""
        where = hooks.project_here(self.cfg, project, cwd)
        off = switches.recall_off(self.cfg, text=text, sessions=conversation_keys(conversation), project=where, cwd=cwd)
        if off:
            empty: dict = {"text": "", "path": None, "updated_at": None, "age_seconds": None, "age": None}
            empty.update(stale=False, stale_after_hours=self.cfg.now_stale_hours)
            return {
                "text": "",
                "agent_profile": "",
                "user_profile": "",
                "now": empty,
                "hints": [],
                "warning": off,
                "off": off,
            }
        blocks = profiles.read_profiles(self.cfg)
        page = now_mod.read_page(self.cfg.home, self.cfg.now_stale_hours)
        hints, warning = [], None
        if text and text.strip():
            result = self.recall(text, run_id=run_id, project=where, conversation=conversation, switched=False)
            hints, warning = [h.to_dict() for h in result.hints], result.warning
        return {
            "text": profiles.format_context(blocks, hints, now=now_mod.block(page)),
            "agent_profile": blocks["agent_profile"],
            "user_profile": blocks["user_profile"],
            "now": page,
            "hints": hints,
            "warning": warning,
        }

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


def conversation_keys(conversation: str | None) -> tuple[str, ...]:
    """The keys a conversation's session may be switched by: itself, and
    before its ``~N`` (a host session's window after a ``/clear``)."""
    if not conversation:
        return ()
    return (conversation, conversation.split("~", 1)[0])


def kept_out(said: list[str]) -> str:
    """The warning of a write that redacted secrets (``redact.redact_fields``'s lines)."""
    return (
        f"secrets were kept out of what was stored: {'; '.join(said)}, each replaced by a [redacted: ...] marker "
        "(keep secrets in a password manager, not in memories)"
    )


def _refuse_secret_tags(tags: object) -> None:
    """``InvalidInput`` for a tag that looks like a secret: a tag is shown in
    every hint of its memory, and cannot hold a marker."""
    for tag in [tags] if isinstance(tags, str) else tags if isinstance(tags, (list, tuple)) else []:
        found = redact.find(tag) if isinstance(tag, str) else []
        if found:
            raise InvalidInput(
                f"a tag looks like a secret ({redact.summary(found)}); tags are shown in recall hints and "
                "cannot hold one: leave it out"
            )


#: Statements that recall from the index get the dirty check first.
_RECALLS_IN_SQL = re.compile(r"\bmarch_(recall|similar)", re.IGNORECASE)
#: Statements whose functions embed text with the model.
_EMBEDS_IN_SQL = re.compile(r"\bmarch_(recall|similar|embed)", re.IGNORECASE)
