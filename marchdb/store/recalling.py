"""How the store recalls: hints for a message, a host's event, a prompt's context.

``recall`` is the one door to ``index.recall``; ``hook`` conducts a host's
event with ``hooks.plan`` and ``index.runs``; ``context`` adds the profiles
and the working page; ``related`` is what a new memory would be hinted beside.
Part of ``Store`` (``marchdb.store``).
"""

from __future__ import annotations

import json

from marchdb import fts, hooks, ops, profiles, redact, switches
from marchdb.errors import InvalidInput
from marchdb.index import db, runs, vectors
from marchdb.index.keeper import DIRTY_CHECK_EMBED_LIMIT, Keeper
from marchdb.index.recall import RELATED_BELOW, W_DENSE
from marchdb.index.recall import recall as recall_hints
from marchdb.index.recall import related as related_hints
from marchdb.index.results import RecallResult
from marchdb.index.terms import memory_count
from marchdb.lifecycle import keep as keep_mod
from marchdb.lifecycle import now as now_mod
from marchdb.vault.tags import project_tag


class Recalling(Keeper):
    """The operations of ``Store`` that recall."""

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


def conversation_keys(conversation: str | None) -> tuple[str, ...]:
    """The keys a conversation's session may be switched by: itself, and
    before its ``~N`` (a host session's window after a ``/clear``)."""
    if not conversation:
        return ()
    return (conversation, conversation.split("~", 1)[0])
