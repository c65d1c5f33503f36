"""What the store writes: save, remember, log, import, maintain, the working page.

Every write redacts secrets before the text reaches a file, the index or a
log, and says what it kept out. Part of ``Store`` (``marchdb.store``).
"""

from __future__ import annotations

import contextlib
import datetime as dt

from marchdb import logfile, ops, redact
from marchdb import save as save_mod
from marchdb.clock import utc_now_iso
from marchdb.errors import InvalidInput
from marchdb.index import db, doctor, sentinel
from marchdb.lifecycle import capture, maintain
from marchdb.lifecycle import now as now_mod
from marchdb.lifecycle.capture import DEFAULT_ONE_LINER_TAG
from marchdb.store.recalling import Recalling
from marchdb.twins import check_conflicts_with, check_supersedes
from marchdb.vault.changes import validate_changes
from marchdb.vault.files import vault_lock
from marchdb.vault.notes import metadata_text


class Writing(Recalling):
    """The operations of ``Store`` that write to the vault (``save`` looks up
    what recall would hint beside a new memory, hence ``Recalling``)."""

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
        crashed_on: str | None = None  # the line saying the model is not given this memory's text
        if embed and changes.complete() and not force:
            # The model loads (slow the first time) and embeds before the
            # saver takes the lock other savers wait on.
            emb = self.embedder()
            if emb is not None:
                text = metadata_text(changes.name or "", changes.description or "", changes.tags or [])
                vec, refused = sentinel.embed_alone(
                    self.cfg.index_path, emb, "meta", text, lambda: emb.embed_passages([text])[0]
                )
                if refused is None:
                    twin_probe = (vec, emb.fingerprint)
                else:
                    crashed_on = (
                        sentinel.refusal("this memory's name and description", refused)
                        + ": near-duplicates were looked for by keywords, and its vectors wait for `marchdb sync`, "
                        "which embeds them apart"
                    )
        related = []
        if changes.complete() and (mem_id is None or not db.id_taken(self.con, mem_id)):
            # Looked up before writing (seed 003's reconcile-before-writing), in
            # the vault as the writer knew it: in a small vault the new memory's
            # own words would lower the others' scores.
            self.ensure_fresh(embed=embed)
            named = {*(changes.supersedes or []), *(changes.conflicts_with or [])}
            # Not the model either when it crashed on the probe: these words hold what it crashed on.
            related = self.related(
                f"{changes.name}\n{changes.description}", named, changes.tags or [], embed and crashed_on is None
            )
        result = save_mod.Saver(self.con, root, self.cfg.index_path).run(mem_id, changes, force, twin_probe)
        if crashed_on is not None:
            result.warnings.append(crashed_on)
        odd_id = doctor.mixed_scripts_warning(result.id) if mem_id is not None and result.rel is not None else None
        if odd_id:
            result.warnings.append(odd_id)  # said, never refused: files may hold such ids already
        if embed and result.rel is not None and result.indexed:
            if crashed_on is not None:
                self.suspect_own([result.rel])
            else:
                # Outside the lock: embedding must not hold up other savers.
                result.warnings.extend(self.embed_own([result.rel]))
        if result.status == "created":
            result.related = [r for r in related if r["id"] != result.id]
        if said and result.rel is not None:
            result.warnings.insert(0, kept_out(said))
        return result.to_dict()

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
        # What only an import reads (the hosts' readers, the notes' walkers) is loaded for one.
        from marchdb.lifecycle import history, importing

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
