"""``marchdb maintain``: forgetting as a proposal (seed 003's GC; DESIGN, "Forgetting is a proposal").

What it proposes, each with its reason:

* **archive** a daily log (tag ``daily-log``) older than ``log_days`` days
  that no recall ever hinted, showed or recorded and nobody opened;
* **archive** a finished action (tag ``action/done`` or a folder
  ``actions/done``, seed 003) done ``action_days`` (14) days ago, and a
  reflection (tag ``reflection`` or a folder ``reflections``) written
  ``reflection_days`` (30) days ago, when no recall or open used it in
  that time;
* **archive** a memory whose status has been ``deprecated`` for
  ``deprecated_days`` days (since its ``updated_at`` or its file's last
  change, whichever is later: a note deprecated by hand in an editor keeps
  its grace period), or that an active memory has superseded (its
  ``supersedes:``) and that has not changed for as long;
* **merge** active memories whose metadata vectors (name + description +
  tags) are nearly the same, as clusters listing every id;
* **describe** a memory without a description (it is never a hint);
* **archive** an imported chat that holds nothing (``transcripts.hollow``:
  the rule an import applies now, so only older imports have such memories);
* **decide** between two active memories that contradict each other
  (``conflicts_with``): a person's call, never applied.

"Never used" means as far as the kept logs remember (they are bounded,
``sql/003_lifecycle.sql``). Never proposed (seed 003: decisions and user
profiles stay): a memory tagged ``decision``, ``decisions``, ``profile`` or
``profiles``, one in a folder named ``decisions`` or ``profiles``, and one
with ``priority: high``. Imports tag seed 003's ``decisions/`` notes
``decision`` and seed 004's ``user/`` notes ``profile``, so they stay too.

A dry run unless ``apply``; applying acts on the archive proposals only,
each through save's update path (``status: archived`` is the only line
rewritten: filing is no update, so ``updated_at`` stays, and so does the
undo; the file stays where it is). Archived memories
leave recall and default search, and stay readable by ``open`` and by
``search --archived``; ``marchdb save --id ID --status active`` brings one
back. Merge, describe and decide proposals need a person and are never applied.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import apsw

from marchdb.clock import format_time, parse_time
from marchdb.errors import InvalidInput, MarchError
from marchdb.index import db, vectors
from marchdb.index.sync import sync_files
from marchdb.lifecycle.capture import LOG_TAG
from marchdb.lifecycle.transcripts import hollow
from marchdb.save import update_file
from marchdb.vault.changes import Changes
from marchdb.vault.files import read_file
from marchdb.vault.notes import MAX_FILE_BYTES, BadNote, parse_note
from marchdb.vault.tags import normalize_tag

#: Daily logs older than this many days, never used, are proposed for the archive (seed 003: ~30 days).
LOG_DAYS = 30
#: Memories deprecated this many days ago are proposed for the archive.
DEPRECATED_DAYS = 90
#: Finished actions (seed 003's ``actions/done/``) this many days old are proposed for the archive (~14 days).
ACTION_DAYS = 14
#: Reflections this many days old, and unused as long, are proposed for the archive (seed 003: ~30 days).
REFLECTION_DAYS = 30
#: What marks a finished action: the tag (an import of ``actions/done/`` gives it) or the folders.
ACTION_DONE_TAG = "action/done"
#: What marks a reflection (seed 003's ``reflections/``, the ``reflection`` tag ``marchdb reflect`` asks for).
REFLECTION_TAGS = frozenset({"reflection", "reflections"})
#: Metadata cosine from which two active memories are proposed for a merge.
#: Below save's refusal threshold (0.97: a restatement), since this only asks.
MERGE_COSINE = 0.95
#: The near-duplicate scan compares every pair; above this many memories it is skipped (and said so).
MAX_MERGE_SCAN = 20_000
#: ``source:`` prefixes of imported chats, and the longest body looked at for a hollow one.
CHAT_SOURCES = ("chatgpt:", "claude-code:")
HOLLOW_SCAN_CHARS = 2_000
#: Tags and folders of memories never proposed (seed 003: decisions and profiles stay).
PROTECTED_TAGS = frozenset({"decision", "decisions", "profile", "profiles"})
PROTECTED_FOLDERS = frozenset({"decisions", "profiles"})


@dataclass
class Proposal:
    """One proposal: ``action`` archive | merge | describe | decide, the memories it is about, and why."""

    action: str
    ids: list[str]
    paths: list[str]
    reason: str
    applied: bool = False
    error: str | None = None
    #: What an applied archive changed: the memory's ``status`` before, and its
    #: ``updated_at`` (kept as it was; both recorded in lifecycle.log; ``undo``
    #: puts the status back).
    was: dict | None = None

    @property
    def undo(self) -> str | None:
        """The command that puts an applied archive back (None if not applied)."""
        if not self.applied or self.was is None:
            return None
        return f"marchdb save --id {self.ids[0]} --status {self.was['status']}"

    def to_dict(self) -> dict:
        """JSON-ready form (with ``undo``)."""
        return {**asdict(self), "undo": self.undo}


@dataclass
class MaintainReport:
    """Every proposal, whether they were applied, and what could not be looked at."""

    applied: bool
    proposals: list[Proposal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """``{"applied", "counts": {action: n}, "proposals": [...], "notes"}``."""
        counts: dict[str, int] = {}
        for p in self.proposals:
            counts[p.action] = counts.get(p.action, 0) + 1
        return {
            "applied": self.applied,
            "counts": counts,
            "proposals": [p.to_dict() for p in self.proposals],
            "notes": list(self.notes),
        }


def check_days(**days: object) -> None:
    """Raise ``InvalidInput`` unless every value is a whole number of days, 0 or more."""
    for name, value in days.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100_000:
            raise InvalidInput(f"{name.replace('_', '-')} must be a whole number of days from 0, got {value!r}")


def protected(tags: list[str], path: str, priority: float | None) -> bool:
    """Whether a memory is never proposed: a decision or a profile (by tag or
    folder), or ``priority: high``."""
    folders = {part.lower() for part in path.split("/")[:-1]}
    return bool(PROTECTED_TAGS & set(tags) or PROTECTED_FOLDERS & folders or (priority or 0) > 0)


def _age_days(now: dt.datetime, *stamps: object, fallback: object = None) -> float | None:
    """Days since the latest of ``stamps``; ``fallback`` (the file's last
    change, for daily logs: an import, a copy or a git checkout gives every
    file today's time, and an old day would never look old) only when none
    of them is a time."""
    times = [t for t in (parse_time(s) for s in stamps) if t is not None]
    if not times and fallback is not None:
        times = [t for t in (parse_time(fallback),) if t is not None]
    return None if not times else (now - max(times)).total_seconds() / 86400.0


def finished_action(tags: list[str], path: str) -> bool:
    """Whether a memory is a finished action: tagged ``action/done``, or in a
    folder ``actions/done`` (seed 003's ``actions/{open,in-progress,done}/``)."""
    folders = [part.lower() for part in path.split("/")[:-1]]
    in_done = any(a == "actions" and b == "done" for a, b in zip(folders, folders[1:]))
    return ACTION_DONE_TAG in tags or in_done


def reflection(tags: list[str], path: str) -> bool:
    """Whether a memory is a reflection: tagged ``reflection(s)`` or in a folder ``reflections``."""
    return bool(REFLECTION_TAGS & set(tags)) or "reflections" in {p.lower() for p in path.split("/")[:-1]}


def _cold_archive(now: dt.datetime, r, tags: list[str], mtime: str, rules) -> Proposal | None:
    """Archiving an active memory by the first of ``rules`` it meets (the
    memory is of that kind and cold past its days), or None."""
    if r["status"] != "active":
        return None
    for test, days, since_change, what in rules:
        if test(tags, r["path"]):
            age = _cold(now, r, mtime, days, since_change=since_change)
            if age is not None:
                rule = f"more than {days}, and not hinted nor opened in as long"
                return Proposal("archive", [r["id"]], [r["path"]], f"{what} {age:.0f} days ago ({rule})")
    return None


def _cold(now: dt.datetime, r: dict, mtime: str, days: int, since_change: bool) -> float | None:
    """The age of a memory (its last change, from its times; with
    ``since_change`` the file's too, whichever is later: moving a note into
    ``actions/done/`` by hand changes no frontmatter) when it is older than
    ``days`` and no hint or open used it in that time (a candidate shown for
    display or recorded at a run's end was never seen by an agent); else None."""
    age = (
        _age_days(now, r["updated_at"], mtime)
        if since_change
        else _age_days(now, r["created_at"], r["updated_at"], fallback=mtime)
    )
    used = _age_days(now, r["last_hinted"], r["last_opened"])
    if age is None or age <= days or (used is not None and used <= days):
        return None
    return age


def propose(
    con: apsw.Connection,
    now: dt.datetime | None = None,
    log_days: int = LOG_DAYS,
    deprecated_days: int = DEPRECATED_DAYS,
    merge_cosine: float = MERGE_COSINE,
    project_prefix: str = "project/",
    action_days: int = ACTION_DAYS,
    reflection_days: int = REFLECTION_DAYS,
) -> tuple[list[Proposal], list[str]]:
    """Every proposal for the index's memories now, and notes on what was
    skipped (``project_prefix``: the tag form of a project, config's
    ``projectTagPrefix``: memories of different projects are never merged)."""
    now = now or dt.datetime.now(dt.UTC)
    proposals: list[Proposal] = []
    rows = db.rows(
        con,
        "SELECT m.rid, m.id, m.path, m.name, m.description, m.tags_json, m.status, m.created_at, m.updated_at, "
        "m.mtime_ms, u.hinted, u.opened, u.last_hinted, u.last_opened, u.priority, u.source, "
        "s.by_id AS superseded_by, coalesce(n.updated_at, n.created_at) AS superseded_at "
        "FROM memory_index m JOIN diag_usage u ON u.id = m.id "
        "LEFT JOIN superseded s ON s.id = m.id LEFT JOIN memory_index n ON n.id = s.by_id ORDER BY m.path",
    )
    # seed 003's other cold data: (test, days, counted since its last change, what it is)
    cold_rules = (
        (finished_action, action_days, True, "a finished action, done"),
        (reflection, reflection_days, False, "a reflection written"),
    )
    keep: set[str] = set()
    for r in rows:
        tags = json.loads(r["tags_json"])
        mtime = format_time(dt.datetime.fromtimestamp(r["mtime_ms"] / 1000, dt.UTC))
        if protected(tags, r["path"], r["priority"]):
            keep.add(r["id"])
            continue
        if r["status"] == "active" and LOG_TAG in tags:
            age = _age_days(now, r["created_at"], r["updated_at"], fallback=mtime)
            if age is not None and age > log_days and not r["hinted"] and not r["opened"]:
                proposals.append(
                    Proposal(
                        "archive",
                        [r["id"]],
                        [r["path"]],
                        f"daily log last written {age:.0f} days ago (more than {log_days}), never hinted nor opened",
                    )
                )
                continue
        cold = _cold_archive(now, r, tags, mtime, cold_rules)
        if cold is not None:
            proposals.append(cold)
            continue
        if r["status"] == "deprecated" or (r["status"] == "active" and r["superseded_by"]):
            # superseded: counted from the later of its own change and its successor's
            age = _age_days(now, r["updated_at"], mtime, r["superseded_at"] if r["status"] == "active" else None)
            if age is not None and age > deprecated_days:
                state = "deprecated" if r["status"] == "deprecated" else f"superseded by {r['superseded_by']}"
                proposals.append(
                    Proposal(
                        "archive",
                        [r["id"]],
                        [r["path"]],
                        f"{state}, unchanged for {age:.0f} days (more than {deprecated_days})",
                    )
                )
                continue
        if r["status"] == "active" and str(r["source"] or "").startswith(CHAT_SOURCES) and not r["opened"]:
            why = _hollow_chat(con, r["rid"])
            if why:
                proposals.append(Proposal("archive", [r["id"]], [r["path"]], f"an imported chat that is {why}"))
                continue
        if r["status"] == "active" and not r["description"]:
            proposals.append(
                Proposal(
                    "describe",
                    [r["id"]],
                    [r["path"]],
                    "no description, so it is never shown as a recall hint; add one "
                    f'(marchdb save --id {r["id"]} --description "...") or archive it',
                )
            )
    skip = keep | {r["id"] for r in rows if LOG_TAG in json.loads(r["tags_json"])}
    merges, notes = _merge_proposals(con, skip, merge_cosine, project_prefix)
    return proposals + merges + _contradictions(con), notes


def _contradictions(con: apsw.Connection) -> list[Proposal]:
    """A ``decide`` proposal per undecided contradiction (``conflicts_with``,
    the view ``diag_contradictions``): which of the two holds is a person's
    call, so it is never applied (decisions and profiles too are listed)."""
    out = []
    for a, a_path, a_name, b, b_path, b_name in con.execute(
        "SELECT id, path, name, other_id, other_path, other_name FROM diag_contradictions WHERE id < other_id "
        "ORDER BY id, other_id"
    ):
        out.append(
            Proposal(
                "decide",
                [a, b],
                [a_path, b_path],
                f"{a_name!r} and {b_name!r} contradict each other (conflicts_with) and both are active; decide "
                f"which holds: supersede the other (marchdb save --id {a} --supersedes {b}, or the other way "
                "round), deprecate one, or remove conflicts_with if both hold",
            )
        )
    return out


def _hollow_chat(con: apsw.Connection, rid: int) -> str | None:
    """``transcripts.hollow`` of a short imported chat, from its chunks (long ones are not read)."""
    row = con.execute(
        "SELECT sum(length(text)), group_concat(text, char(10) || char(10)) FROM "
        "(SELECT text FROM chunks WHERE mem_rid = ? ORDER BY seq)",
        (rid,),
    ).fetchone()
    if not row or row[0] is None or row[0] > HOLLOW_SCAN_CHARS:
        return None
    return hollow(row[1])


def _tag_form(prefix: str) -> str:
    # As tags.project_tag compares it: "Project/" is "project/".
    try:
        return normalize_tag(prefix) if prefix.strip("/") else ""
    except InvalidInput:
        return ""


def _merge_proposals(
    con: apsw.Connection, skip: set[str], threshold: float, project_prefix: str
) -> tuple[list[Proposal], list[str]]:
    """Clusters of active memories whose metadata vectors are within
    ``threshold``, never joining two memories tagged with different projects:
    "Deploy window" of billing and of search read alike and are not one."""
    if not vectors.usable(con):
        return [], ["no vectors yet, so near-duplicates were not looked for; run `marchdb sync` with a model"]
    found = [
        r
        for r in con.execute(
            "SELECT m.id, m.path, m.name, vm.embedding, m.tags_json FROM memory_index m "
            "JOIN vectors v ON v.kind = 'meta' AND v.hash = m.meta_hash JOIN vec_meta vm ON vm.rowid = v.vid "
            "WHERE m.status = 'active' ORDER BY m.id"
        )
        if r[0] not in skip
    ]
    if len(found) > MAX_MERGE_SCAN:
        return [], [f"{len(found):,} memories: more than {MAX_MERGE_SCAN:,}, so near-duplicates were not looked for"]
    if len(found) < 2:
        return [], []
    import numpy as np  # here: commands that never embed skip its ~130 ms import

    vecs = np.stack([np.frombuffer(r[3], dtype=np.float32) for r in found])
    prefix = _tag_form(project_prefix)
    # The projects of each cluster, kept at its root: two clusters join only
    # when one has no project or they share one (an untagged memory alike to
    # both must not bridge billing's and search's).
    projects = [frozenset(t for t in json.loads(r[4]) if prefix and t.startswith(prefix)) for r in found]
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    parent = list(range(len(found)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    best: dict[int, float] = {}
    for start in range(0, len(found), 512):
        sims = vecs[start : start + 512] @ vecs.T
        for a, b in zip(*np.nonzero(sims >= threshold)):
            i, j = start + int(a), int(b)
            if j <= i:
                continue
            ri, rj = root(i), root(j)
            if ri != rj:
                if projects[ri] and projects[rj] and not projects[ri] & projects[rj]:
                    continue
                parent[rj] = ri
                projects[ri] = projects[ri] | projects[rj]
            best[i] = max(best.get(i, 0.0), float(sims[a, b]))
    clusters: dict[int, list[int]] = {}
    for i in range(len(found)):
        clusters.setdefault(root(i), []).append(i)
    out = []
    for members in clusters.values():
        if len(members) < 2:
            continue
        top = max(best.get(i, 0.0) for i in members)
        names = "; ".join(repr(found[i][2]) for i in members)
        out.append(
            Proposal(
                "merge",
                [found[i][0] for i in members],
                [found[i][1] for i in members],
                f"nearly the same name, description and tags (their metadata's cosine up to {top:.2f}): {names}; "
                "keep one, "
                "fold the others into it and set their status to deprecated",
            )
        )
    return out, []


def apply(con: apsw.Connection, root: Path, index_path, proposals: list[Proposal], now: str) -> list[str]:
    """Archive what the archive proposals name, through save's update path;
    the caller holds the writer lock and the vault's (``files.vault_lock``). Returns the paths written. A proposal
    that cannot be applied gets its ``error`` and the others go on."""
    written = []
    for prop in proposals:
        if prop.action != "archive":
            continue
        mem_id = prop.ids[0]
        holders = db.file_holders(con, mem_id)
        if len(holders) != 1:
            prop.error = f"{len(holders)} files hold {mem_id} now; nothing was written"
            continue
        path = Path(root) / holders[0]
        try:
            # root: no folder between it and the file may have become a link since the scan
            base, _ = read_file(path, MAX_FILE_BYTES, root=root)
            before = parse_note(base)
            state, _note, _changed = update_file(path, mem_id, Changes(status="archived"), base, now, root=root)
        except (OSError, MarchError, BadNote) as exc:
            prop.error = f"not archived: {exc}"
            continue
        prop.applied = True
        prop.was = {"status": before.status, "updated_at": before.updated_at}
        if state == "updated":
            written.append(holders[0])
    if written:
        sync_files(con, root, index_path, written)
    return written
