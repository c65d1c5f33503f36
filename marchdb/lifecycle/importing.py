"""``marchdb import KIND PATH``: bring existing notes and chats into the vault.

Kinds:

* ``workspace`` — seed 003's layout: ``NOW.md`` (the working page, ``now``:
  taken over when marchdb's is empty, never a memory), ``memory/INDEX.md``, daily
  logs ``memory/YYYY-MM-DD.md``, ``decisions/ lessons/ people/ projects/
  preferences/ reflections/ actions/``, ``.archive/``;
* ``typed`` — seed 004's layout: ``MEMORY.md`` and ``user/ feedback/
  project/ reference/`` folders (under any user-id folders);
* ``obsidian`` — plain Markdown notes without marchdb's frontmatter;
* ``claude-code`` — Claude Code session files (``~/.claude/projects/**.jsonl``),
  one memory per session (``transcripts``);
* ``chatgpt`` — a ChatGPT data export (``conversations.json`` or the split
  ``conversations-000.json``…), one memory per conversation.

Rules:

* a dry run unless ``apply``: the report lists what would be created, what
  is skipped and why, and the problems;
* idempotent: every memory gets ``source: KIND:...`` in its frontmatter, and a
  source already in the vault (any status) is skipped, so a second import
  creates nothing twice (delete an imported memory and the next import
  brings it back); a chat grown since or a note changed since its import
  is skipped too, saying so and how to bring the change in;
* never overwrites: only new files, through save's ``create_file`` (a taken
  name gets ``-2``; placed with a link, never a replace); nothing in the vault
  is changed and the source is only read; a source inside the memory root is
  refused, and a vault holding the memory root is imported without it;
* new memories go to the time buckets of the source's own time, which also
  gives ``created_at`` and ``updated_at``;
* every item is reported on its own: a malformed, half-written or huge item
  is a problem line, and the rest goes on.

The readers: ``notefolders`` (Markdown folders), ``transcripts`` (Claude
Code's sessions), ``chatgpt`` (ChatGPT's exports), ``agentlogs`` and
``agentdbs`` (the other hosts' sessions), each giving ``sources.Item`` / ``Skip`` / ``Bad`` per source item; this
module plans and writes them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import apsw

from marchdb import redact
from marchdb.clock import format_time, parse_time
from marchdb.errors import FileError, InvalidInput
from marchdb.index import db
from marchdb.index.sync import sync_files
from marchdb.lifecycle import now
from marchdb.lifecycle.chats import HOSTS
from marchdb.lifecycle.notefolders import read_notes
from marchdb.lifecycle.sources import HOST_KINDS, KINDS, NOTE_KINDS, OLDER, Bad, Found, Item, Page, Skip, source_key
from marchdb.save import create_file
from marchdb.text import mend_surrogates, unix_line_ends
from marchdb.twins import unreadable_holders, unreadable_sources
from marchdb.vault.changes import norm_body
from marchdb.vault.files import is_inside, read_file, vault_lock
from marchdb.vault.notes import MAX_FILE_BYTES, BadNote, Note, new_id, parse_note, render_note
from marchdb.vault.roots import unusual_root

#: The kind that imports every agent host's sessions, each from its own folder.
ALL = "ALL"
#: Most items one import looks at; the rest are reported as not looked at.
MAX_ITEMS = 100_000
#: Memories created per writer-lock hold: other writers wait at most one batch.
BATCH = 100


# ---------------------------------------------------------------- the report


@dataclass
class Row:
    """One line of an import report."""

    action: str  # create (dry run) | created | now (the working page) | skip | problem
    origin: str
    source: str | None = None
    id: str | None = None
    path: str | None = None
    detail: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    """What an import did (or, in a dry run, would do), item by item."""

    kind: str
    path: str
    applied: bool
    rows: list[Row] = field(default_factory=list)
    created_rels: list[str] = field(default_factory=list)
    #: Chats left out as older than ``--since`` (not one row each).
    older: int = 0

    def count(self, *actions: str) -> int:
        """Rows with one of ``actions``."""
        return sum(1 for r in self.rows if r.action in actions)

    def to_dict(self) -> dict:
        """``{"kind", "path", "applied", "created", "skipped", "problems", "warnings", "older", "items": [...]}``;
        ``created`` counts what was (or in a dry run would be) created, ``older`` the chats
        left out as older than ``--since``."""
        return {
            "kind": self.kind,
            "path": self.path,
            "applied": self.applied,
            "created": self.count("created", "create"),
            "skipped": self.count("skip"),
            "problems": self.count("problem"),
            "warnings": sum(len(r.warnings) for r in self.rows),
            "older": self.older,
            "items": [asdict(r) for r in self.rows],
        }


# ---------------------------------------------------------------- running an import


def readers(kind: str, path: Path, root: Path | None = None, since: dt.datetime | None = None) -> Iterator[Found]:
    """The items of ``path`` for an import of ``kind`` (the memory ``root``,
    when it lies inside ``path``, is left out; with ``since``, the agent
    hosts' readers pass over sessions not written to since then unread)."""
    if kind in NOTE_KINDS:
        return read_notes(path, kind, root)
    from marchdb.lifecycle import agentdbs, agentlogs, chatgpt, transcripts

    if kind == "claude-code":
        return transcripts.read_claude_code(path, since)
    if kind == "chatgpt":
        return chatgpt.read_chatgpt(path)
    read = {
        "codex": agentlogs.read_codex,
        "gemini": agentlogs.read_gemini,
        "qwen": agentlogs.read_qwen,
        "pi": agentlogs.read_pi,
        "opencode": agentdbs.read_opencode,
        "kilo": agentdbs.read_kilo,
        "openclaw": agentdbs.read_openclaw,
        "hermes": agentdbs.read_hermes,
        "cline": agentlogs.read_cline,
    }[kind]
    return read(path, since=since)


@dataclass
class Window:
    """Which chats an import takes by their time: none whose last message is
    before ``since`` (``--since 7d``: a scheduled run reads a week, not
    years), and none still going on (a last message less than ``quiet``
    ago: an import never rewrites, so a session imported while open would
    stay cut where it was)."""

    since: dt.datetime | None = None
    quiet: dt.timedelta | None = None

    def verdict(self, item: Item, now: dt.datetime) -> str | None:
        """Why ``item`` is left for another import (None: it is taken)."""
        latest = item.updated or item.created
        if self.since is not None and latest < self.since:
            return "old"
        if self.quiet is not None and latest > now - self.quiet:
            minutes = max(1, int((now - latest).total_seconds() // 60))
            return (
                f"still going on (its last message is {minutes} min old); it is imported once it has been "
                f"quiet for {int(self.quiet.total_seconds() // 60)} min"
            )
        return None


def claude_code_projects() -> Path:
    """Where Claude Code keeps its sessions: ``$CLAUDE_CONFIG_DIR/projects``,
    else ``~/.claude/projects`` (as Claude Code itself, and ``install``, read it)."""
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude").expanduser() / "projects"


def host_folder(kind: str) -> Path:
    """Where the agent host ``kind`` keeps its sessions (``chats.default_folder``)."""
    if kind == "claude-code":
        return claude_code_projects()
    from marchdb.lifecycle.chats import default_folder

    return default_folder(kind)


#: Where each host's folder is, said when it is not there.
_WHERE = {
    "claude-code": "CLAUDE_CONFIG_DIR, else ~/.claude",
    "codex": "CODEX_HOME, else ~/.codex",
    "gemini": "GEMINI_CLI_HOME, else your home: .gemini/tmp",
    "qwen": "QWEN_RUNTIME_DIR, else QWEN_HOME, else ~/.qwen",
    "pi": "PI_CODING_AGENT_DIR, else ~/.pi/agent",
    "opencode": "XDG_DATA_HOME, else ~/.local/share",
    "kilo": "XDG_DATA_HOME, else ~/.local/share",
    "openclaw": "OPENCLAW_STATE_DIR, else ~/.openclaw",
    "hermes": "HERMES_HOME, else ~/.hermes",
    "cline": "CLINE_DIR, else ~/.cline: data/sessions",
}


def check_source(kind: object, path: object, root: Path, home: Path | None = None) -> Path:
    """The source path of an import, or ``InvalidInput`` saying what is wrong
    (a folder that is obviously not one of notes — ``/``, a system folder, the
    home folder, marchdb's home — is refused as a memory root would be).
    ``path`` None: an agent host's own folder (``host_folder``)."""
    if kind not in KINDS:
        raise InvalidInput(f"unknown import kind {kind!r}; use one of {', '.join(KINDS)}, or ALL")
    if path is None and kind in HOST_KINDS:
        path = host_folder(str(kind))
        if not path.is_dir():
            title = "Claude Code" if kind == "claude-code" else HOSTS[str(kind)]
            raise InvalidInput(
                f"{title}'s sessions are not at {path} ({_WHERE[str(kind)]}); "
                f"give their folder: `marchdb import {kind} PATH`"
            )
    if path is None:
        raise InvalidInput(f"give the folder (or file) to import from: `marchdb import {kind} PATH`")
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise InvalidInput("give the file or folder to import")
    source = Path(os.path.expanduser(str(path))).absolute()
    try:
        os.lstat(source)
    except FileNotFoundError:
        pass  # said just below
    except OSError as exc:  # a name too long, a folder that cannot be looked into
        raise InvalidInput(f"cannot look at {source}: {exc.strerror}; give the file or folder to import") from None
    if source.is_symlink():
        # The path the user names may be a link (to an export in Downloads);
        # links found inside a source are never followed.
        source = Path(os.path.realpath(source))
    if not source.exists():
        raise InvalidInput(f"{source} does not exist; give the file or folder to import")
    if not source.is_dir() and not source.is_file():
        raise InvalidInput(
            f"{source} is not a file or a folder (a FIFO, a socket, a device?); give the file or folder to import"
        )
    if is_inside(str(root), str(source)):
        raise InvalidInput(
            f"{source} is inside the memory root {root}; its files are indexed already (import from outside the root)"
        )
    if source.is_dir():
        reason = unusual_root(source, home if home is not None else root)
        if reason:
            raise InvalidInput(
                f"{source} is not a folder of notes to import: {reason}; give the folder that holds them"
            )
    return source


class Importer:
    """One import into the files under ``root`` and the index ``con``, in the shape of ``save.Saver``."""

    def __init__(self, con: apsw.Connection, root: Path, index_path, home: Path | None = None):
        self.con = con
        self.root = Path(root)
        self.index_path = index_path
        self.home = home

    def run(self, kind: str, path: object, apply: bool = False, window: Window | None = None) -> ImportReport:
        """Import (or with ``apply`` False, plan to import) every item of
        ``path``; ``window`` picks chats by their time. ``kind`` ``ALL``: every
        agent host whose folder is there, each from its own folder."""
        window = window or Window()
        if kind == ALL:
            return self._all(path, apply, window)
        source = check_source(kind, path, self.root, self.home)
        report = ImportReport(kind, str(source), apply)
        try:
            return self._run(source, report, window)
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            raise FileError(
                f"cannot write{where}: {exc.strerror or exc}; {len(report.created_rels)} memories were created "
                "before it stopped (importing again skips them); check the disk and permissions"
            ) from None

    def _all(self, path: object, apply: bool, window: Window) -> ImportReport:
        """``import ALL``: each agent host's sessions from its own folder, in one report."""
        if path is not None:
            raise InvalidInput(
                "`marchdb import ALL` reads each host's own folder; name no PATH (or import one KIND PATH)"
            )
        report = ImportReport(ALL, "", apply)
        for kind in HOST_KINDS:
            folder = host_folder(kind)
            if not folder.is_dir():
                report.rows.append(Row("skip", kind, detail=f"no sessions at {folder}"))
                continue
            try:
                part = self.run(kind, None, apply, window)
            except InvalidInput as exc:  # this host's folder is refused: the others are still read
                report.rows.append(Row("problem", kind, detail=f"{exc} (the folder comes from {_WHERE[kind]})"))
                continue
            report.rows.extend(replace(r, origin=f"{kind}: {r.origin}") for r in part.rows)
            report.created_rels.extend(part.created_rels)
            report.older += part.older
        return report

    def _run(self, source: Path, report: ImportReport, window: Window) -> ImportReport:
        kind, apply = report.kind, report.applied
        found = readers(kind, source, self.root, window.since)
        now_ = dt.datetime.now(dt.UTC)
        batch: list[tuple[Item, Row]] = []
        seen: set[str] = set()
        # What is in the vault already, by source key: an item imported before
        # is found by a look-up (a note whose file is newer is then read once,
        # to tell a real change from a touched file). The vault is scanned
        # first, --apply too: a memory moved out of the vault (to import a
        # grown session again) would be skipped by an index that had not seen
        # it go. _write scans again under the writer lock for what came meanwhile.
        sync_files(self.con, self.root, self.index_path)
        known = self._known()
        stuck = unreadable_sources(self.con, self.root)
        for n, thing in enumerate(found):
            if n >= MAX_ITEMS:
                report.rows.append(
                    Row("problem", str(source), detail=f"stopped after {MAX_ITEMS:,} items; import the rest separately")
                )
                break
            if isinstance(thing, Skip):
                if thing.reason == OLDER:
                    report.older += 1  # counted, not listed: a week's run would list years
                else:
                    report.rows.append(Row("skip", thing.origin, detail=thing.reason))
                continue
            if isinstance(thing, Bad):
                report.rows.append(Row("problem", thing.origin, detail=thing.detail))
                continue
            if isinstance(thing, Page):
                report.rows.append(self._page(thing, apply))
                continue
            if (later := window.verdict(thing, now_)) == "old":
                report.older += 1  # counted, not listed: a week's run would list years
                continue
            if later is not None:
                report.rows.append(Row("skip", thing.origin, detail=later))
                continue
            _storable(thing)
            if thing.source in seen:
                report.rows.append(
                    Row("skip", thing.origin, thing.source, detail="the same source appears twice in this import")
                )
            elif done := thing.known_as(known):
                seen.add(thing.source)
                report.rows.append(Row("skip", thing.origin, thing.source, done, detail=self._skipped(thing, done)))
            elif held := thing.known_as(stuck):
                seen.add(thing.source)
                report.rows.append(Row("problem", thing.origin, thing.source, detail=_held_unread(held)))
            elif (problem := self._check(thing)) is not None:
                report.rows.append(Row("problem", thing.origin, thing.source, detail=problem))
            else:
                seen.add(thing.source)
                row = Row("create", thing.origin, thing.source, warnings=thing.warnings)
                report.rows.append(row)  # in the source's order; with --apply, _write says what happened
                if apply:
                    batch.append((thing, row))
                    if len(batch) >= BATCH:
                        self._write(batch, report)
                        batch = []
        if batch:
            self._write(batch, report)
        return report

    def _page(self, page: Page, apply: bool) -> Row:
        """A workspace's ``NOW.md`` becomes the working page (``now``), keeping
        its age (a month-old page is injected as stale, not as current) — when
        the page is empty: one that holds text already is the user's now, and
        an import never overwrites."""
        if self.home is None:
            return Row("skip", page.origin, detail="no marchdb home to hold the working page")
        page.text, findings = redact.redact(page.text)
        try:
            held = now.read_page(self.home, float("inf"))["text"]
        except FileError as exc:  # marchdb's page is a link, a FIFO...: this item's problem, the rest goes on
            return Row("problem", page.origin, detail=str(exc))
        if held == page.text:
            return Row("skip", page.origin, detail="the working page holds it already")
        if held:
            return Row(
                "skip",
                page.origin,
                detail="the working page holds other text (marchdb now prints it) and is not overwritten; "
                f"`marchdb now - < {page.origin}` takes this one",
            )
        if apply:
            try:
                now.write_page(self.home, page.text, page.changed.timestamp())
            except FileError as exc:
                return Row("problem", page.origin, detail=str(exc))
        warnings = [f"secrets kept out of the page: {redact.summary(findings)}"] if findings else []
        return Row(
            "now",
            page.origin,
            detail=f"{'became' if apply else 'becomes'} the working page (marchdb now), not a memory; "
            f"written {format_time(page.changed)}",
            warnings=warnings,
        )

    def _skipped(self, item: Item, mem_id: str) -> str:
        """Why an item is skipped as imported already — and, for a chat that
        went on after its import (a session imported while still open) or a
        note edited since, that the memory lacks the change (an import never
        rewrites a memory)."""
        row = self.con.execute("SELECT updated_at, path FROM memory_index WHERE id = ?", (mem_id,)).fetchone()
        was = parse_time(row[0]) if row else None
        if item.source.split(":", 1)[0] in NOTE_KINDS:
            newest = max(t for t in (item.created, item.updated, item.changed) if t is not None)
            # A newer file time alone is no change (a checkout, a copy, a sync tool
            # touches files): the note must also read differently from its memory.
            if row is None or was is None or format_time(newest) <= format_time(was) or self._holds(row[1], item):
                return "imported already"
            return (
                f"imported already, but the note has changed since (last changed {format_time(newest)}, the memory "
                f"holds it as of {format_time(was)}); the memory is not rewritten: to bring the change in, copy it "
                f"into {mem_id} (marchdb save --id {mem_id}, or edit its file), or move {mem_id} out of the vault "
                "and import again"
            )
        newest = item.updated or item.created
        # At the index's millisecond precision: an export's times carry microseconds.
        if was is None or format_time(newest) <= format_time(was):
            return "imported already"
        return (
            f"imported already, but it has grown since (last message {format_time(newest)}, the memory ends "
            f"at {format_time(was)}); to bring in the rest, move {mem_id} out of the vault and import again"
        )

    def _holds(self, rel: str, item: Item) -> bool:
        """Whether the memory file ``rel`` holds what ``item`` would write
        (name, description, text, and tags when the same kind of import made
        it: the folder tags of ``workspace`` and ``obsidian`` differ); a file
        that cannot be read does not."""
        try:
            data, _ = read_file(self.root / rel, MAX_FILE_BYTES, root=self.root)
            note = parse_note(data)
        except (OSError, BadNote, ValueError):
            return False
        same_kind = str(note.extra.get("source", "")).split(":", 1)[0] == item.source.split(":", 1)[0]
        held = (note.name, note.description, norm_body(note.body))
        return held == (item.name, item.description, norm_body(item.body)) and (note.tags == item.tags or not same_kind)

    def _known(self) -> dict[str, str]:
        return dict(
            self.con.execute(
                "SELECT a.source, m.id FROM memory_attrs a JOIN memory_index m ON m.rid = a.rid WHERE a.source IS NOT NULL"
            )
        )

    def _write(self, batch: list[tuple[Item, Row]], report: ImportReport) -> None:
        """Create a batch of memories under the writer lock and the vault's (a
        full scan first: the sources already in the vault and the ids taken
        must be current). The vault's lock, as save and log take it: a second
        home on the same vault (another agent, another index) importing the
        same sessions meanwhile would otherwise write a twin of each."""
        with db.writer_lock(self.index_path), vault_lock(self.root):
            sync_files(self.con, self.root, self.index_path)
            known = self._known()
            taken = {r[0] for r in self.con.execute("SELECT DISTINCT mem_id FROM files WHERE mem_id IS NOT NULL")}
            written: list[str] = []
            try:
                for item, row in batch:
                    if done := item.known_as(known):
                        row.action, row.id, row.detail = "skip", done, self._skipped(item, done)
                        continue
                    # A file the index cannot read (a hand edit broke it) may still declare the id.
                    mem_id = item.want_id
                    if mem_id is not None and (mem_id in taken or unreadable_holders(self.con, self.root, mem_id)):
                        mem_id = None
                    if item.want_id and mem_id is None:
                        # The vault has that day's log already: this one is kept beside it, under its own id.
                        row.warnings.append(
                            f"{item.want_id} exists already, so this one gets an id of its own; "
                            "merge the two by hand if you like"
                        )
                    while mem_id is None or mem_id in taken:
                        mem_id = new_id(item.name, item.created)
                    taken.add(mem_id)
                    try:
                        rel = self._create(item, mem_id)
                    except (InvalidInput, ValueError, OverflowError) as exc:  # too large once rendered
                        row.action, row.detail = "problem", str(exc)
                        continue
                    written.append(rel)
                    row.action, row.id, row.path = "created", mem_id, str(self.root / rel)
            finally:
                if written:
                    sync_files(self.con, self.root, self.index_path, written)
                    report.created_rels.extend(written)

    def _note(self, item: Item, mem_id: str) -> Note:
        created = format_time(item.created)
        return Note(
            id=mem_id,
            name=item.name,
            description=item.description,
            tags=item.tags,
            status=item.status,
            created_at=created,
            updated_at=format_time(item.updated) if item.updated else created,
            body=item.body if item.body.endswith("\n") else item.body + "\n",
            extra={"source": item.source, **item.extra},
        )

    def _check(self, item: Item) -> str | None:
        """Why ``item`` (made storable: ``_storable``) cannot become a memory
        file (None: it can). The file it would become is read back as sync
        reads it: what sync would refuse or flag (YAML aliases, a frontmatter
        too large or too deep, a time out of range, fields that do not read
        back as written) is this item's problem — written, it would be a
        broken memory, and each import would write it again."""
        try:
            note = self._note(item, new_id(item.name, item.created))
            back = parse_note(render_note(note).encode("utf-8"))
        except (BadNote, ValueError, OverflowError, RecursionError) as exc:
            why = exc.problem.detail if isinstance(exc, BadNote) else f"{type(exc).__name__}: {exc}"
            return f"cannot be written as a memory: {why}"
        if back.problems:
            return "cannot be written as a memory: " + "; ".join(p.detail for p in back.problems)
        for key in ("id", "name", "description", "tags", "status", "created_at", "updated_at"):
            if getattr(back, key) != getattr(note, key):
                return f"cannot be written as a memory: its {key} would not read back as written"
        if back.extra.get("source") != item.source:
            return "cannot be written as a memory: its source key would not read back as written"
        return None

    def _create(self, item: Item, mem_id: str) -> str:
        rel = create_file(self.root, self._note(item, mem_id), item.created.astimezone(), slug=item.slug)
        # The new file keeps its source's age: maintain counts a finished
        # action's from the file's last change too, and a month-old note
        # imported today was not proposed for another two weeks.
        when = (item.changed or item.updated or item.created).timestamp()
        if when < time.time():
            with contextlib.suppress(OSError):  # the file is written; its time is a nicety
                os.utime(self.root / rel, (when, when), follow_symlinks=False)
        return rel


def _held_unread(rel: str) -> str:
    """Why an item whose memory marchdb cannot read now is not imported again."""
    return (
        f"imported already as {rel}, which marchdb cannot read as a memory now (a hand edit broke it?); "
        "a second copy would be its twin once it is fixed: fix it (`marchdb doctor` says how), then import again"
    )


def _storable(item: Item) -> None:
    """Make ``item`` storable, saying so in its warnings: a lone surrogate
    (``"\\ud800"`` in JSON, half an emoji) and NUL characters become
    U+FFFD; its source key becomes one the index keeps as written
    (``sources.source_key``), its raw keys staying known as aliases (an
    earlier import may have stored one)."""
    changed = False

    def fix(value):
        nonlocal changed
        if isinstance(value, str):
            clean = mend_surrogates(value).replace("\x00", "\ufffd")
            changed = changed or clean != value
            return clean
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {fix(k): fix(v) for k, v in value.items()}
        return value

    # A lone CR (terminal output pasted into a chat) would make a file that
    # cannot be edited in place: no archive, no status change, ever.
    item.body = unix_line_ends(item.body)
    item.name, item.description, item.body = fix(item.name), fix(item.description), fix(item.body)
    item.tags, item.extra = fix(item.tags), fix(item.extra)
    if changed:
        item.warnings.append("text that is not Unicode (a lone surrogate) or NUL characters were replaced by U+FFFD")
    # Secrets never reach the vault: a chat with a pasted key becomes a memory
    # that recall could put before a hosted model.
    clean, said = redact.redact_fields(
        {"the name": item.name, "the description": item.description, "the text": item.body, "its fields": item.extra}
    )
    item.name, item.description, item.body = clean["the name"], clean["the description"], clean["the text"]  # type: ignore[assignment]
    item.extra = clean["its fields"]  # type: ignore[assignment]
    # The source key is written too (frontmatter and index), and a session id
    # comes from the file: a secret in it becomes a marker, with a hash of the
    # whole id so that the key stays one per session and the same next time.
    raw = (item.source, *item.aliases)
    key, in_key = redact.redact(item.source)
    if in_key:
        digest = hashlib.sha256(item.source.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        key = f"{key}#{digest}"
        said.append(f"the source key held {redact.summary(in_key)}")
    secret_tags = [t for t in item.tags if redact.find(t)]
    if secret_tags:
        item.tags = [t for t in item.tags if t not in secret_tags] or ["imported"]
        said.append(
            f"{len(secret_tags)} tag{'s' if len(secret_tags) > 1 else ''} looked like a secret and were left out"
        )
    if said:
        item.warnings.append(
            f"secrets kept out of the memory: {'; '.join(said)}, each replaced by a [redacted: ...] marker"
        )
    item.source = source_key(key)
    item.aliases = tuple(dict.fromkeys(k for k in (*(source_key(a) for a in item.aliases), *raw) if k != item.source))
