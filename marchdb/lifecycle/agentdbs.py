"""Agent hosts that keep their sessions in SQLite: opencode, Kilo CLI, OpenClaw and Hermes Agent.

The store is opened read-only (``mode=ro``: its WAL is read, nothing is
written, a host running meanwhile is waited on for at most
``BUSY_MS``), never through a link, and only when it is a regular file no
larger than ``sources.MAX_SESSION_BYTES``; a store in WAL mode without its
``-wal`` is read as it is (``immutable``), so that SQLite creates no
``-wal`` or ``-shm`` in the host's folder. Columns are looked up before they
are read: a version that lacks one reads as if it were empty. Formats as
the programs wrote them when run here (``tests/hostchats.py``):

opencode (``~/.local/share/opencode/opencode.db``; Kilo CLI, its fork,
``~/.local/share/kilo/kilo.db`` in the same format): ``session`` (``id``,
``parent_id``, ``directory``, ``title``, times in ms), ``message``
(``data``: JSON with ``role``) and ``part`` (``data``: ``text``,
``tool``, ``reasoning``, ``step-*``...). User and assistant ``text``
parts are kept (not ``synthetic`` ones, which opencode adds itself), a
``tool`` part as a tool line; ``reasoning`` and tool output are left out.
A session with a ``parent_id`` is a sub-agent's task: a side chain.

OpenClaw (``$OPENCLAW_STATE_DIR``, else ``~/.openclaw``:
``agents/<agent>/agent/openclaw-agent.sqlite``): ``transcript_events``
(``session_id``, ``seq``, ``event_json``) holds each session's entries in
pi's format (``agentlogs.pi_entries``: the branch shown; tool results,
thinking and custom entries left out). An event stored compressed
(``event_zstd``) is counted and said, not read (the standard library reads
zstd from Python 3.14). A session's working folder inside OpenClaw's own
state (its workspace) names no project.

Hermes Agent (``~/.hermes/state.db``): ``sessions`` (``id``, ``source``,
``parent_session_id``, ``cwd``, ``git_branch``, ``title``, ``started_at``
in epoch seconds) and ``messages`` (``role``, ``content``,
``tool_calls``, ``timestamp``, ``active``). ``user`` and ``assistant``
messages are kept, ``tool_calls`` as tool lines; ``tool`` results, system
text and messages a rewind made inactive are left out. A session with a
parent (a background review, a sub-agent, a continuation after
compression) is a side chain.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import apsw

from marchdb.lifecycle.agentlogs import _typed, _what, pi_entries
from marchdb.lifecycle.chats import HOSTS, MAX_MESSAGES, MAX_SESSIONS, MAX_STORE_BYTES, Chat
from marchdb.lifecycle.injected import without_injected
from marchdb.lifecycle.sources import OLDER, SHAPE_ERRORS, Bad, Found, Skip, too_large, unreadable
from marchdb.lifecycle.transcripts import _dict, _when
from marchdb.vault.files import is_inside, open_regular

#: How long a read waits for a host writing its store meanwhile.
BUSY_MS = 5000
#: The store's file name in a host's folder.
STORE = {"opencode": "opencode.db", "kilo": "kilo.db", "hermes": "state.db", "openclaw": "openclaw-agent.sqlite"}


def _open(path: Path) -> apsw.Connection:
    """``path`` opened read-only: a regular file, never a link (``OSError`` says why not)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(40, "a symlink; links are not followed", str(path))  # ELOOP, as open_regular says it
    if not stat.S_ISREG(st.st_mode):
        raise OSError(22, "not a regular file", str(path))  # EINVAL
    uri = "file:" + urllib.parse.quote(str(path.absolute())) + "?mode=ro"
    if _wal_mode(path):
        # SQLite creates a WAL store's -wal and -shm to read it, even read-only,
        # and leaves them: files in the host's folder that marchdb did not own.
        # Without a -wal, the file holds every commit: it is read as it is
        # (immutable: no lock, nothing created; a host starting meanwhile may
        # make this read fail, never its store). With one, the host's own
        # -shm is used; without that, reading would create it.
        wal, shm = (os.path.lexists(f"{path}{suffix}") for suffix in ("-wal", "-shm"))
        if not wal:
            uri += "&immutable=1"
        elif not shm:
            raise StoreLeftOpen(
                f"its write-ahead log ({path.name}-wal) has no {path.name}-shm beside it, and reading it would "
                "create one in the host's folder; start the host once (it folds the log in), or import while it runs"
            )
    con = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    con.set_busy_timeout(BUSY_MS)
    return con


class StoreLeftOpen(Exception):
    """A store in WAL mode whose log lies beside it without its shared-memory file."""


def _wal_mode(path: Path) -> bool:
    """Whether the SQLite file ``path`` is in WAL mode (its header's read and write versions are 2)."""
    with open_regular(path) as fh:
        header = fh.read(20)
    return header.startswith(b"SQLite format 3\x00") and header[18:20] == b"\x02\x02"


#: What a session row becomes when its id, title or folder is not UTF-8 text.
NOT_UTF8 = "its id, title or folder is not UTF-8 text (apsw reads none other); this session is left out"


def _listed(cursor: apsw.Cursor) -> list[tuple | None]:
    """The rows of a store's list of sessions; ``None`` for a row holding text
    that is not UTF-8 (a damaged title, an id written by another program):
    decoded in one go, one such row ended the whole import."""
    rows: list[tuple | None] = []
    while True:
        try:
            rows.append(next(cursor))
        except StopIteration:
            return rows
        except UnicodeDecodeError:  # apsw goes on with the next row
            rows.append(None)


def _columns(con: apsw.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def _pick(columns: set[str], *names: str) -> str:
    """A select list of ``names``, NULL for those the table lacks."""
    return ", ".join(n if n in columns else "NULL" for n in names)


def _store(path: Path, kind: str) -> tuple[Path, str]:
    """The store file of ``path`` (a host's folder, or the file itself) and its origin."""
    return (path / STORE[kind], STORE[kind]) if path.is_dir() else (path, path.name)


def _sessions(path: Path, kind: str, read, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session of a host's store, through ``read(con, origin, since)``
    (``since``: sessions last active before then are passed over unread)."""
    file, origin = _store(path, kind)
    if not os.path.lexists(file):
        why = f"no {STORE[kind]} in {path}"
        if kind in ("opencode", "kilo") and (path / "storage" / "session").is_dir():
            why += " (opencode's earlier storage/ folder is not read: start opencode once, and it moves it in)"
        yield Bad(str(path), why)
        return
    if (large := too_large(file, MAX_STORE_BYTES, "a host's SQLite store")) is not None:
        yield Bad(origin, large)
        return
    try:
        con = _open(file)
    except OSError as exc:
        yield Bad(origin, unreadable(exc) if exc.errno in (22, 40) else f"cannot read: {exc.strerror or exc}")
        return
    except apsw.Error as exc:
        yield Bad(origin, f"cannot open it as SQLite: {exc}")
        return
    except StoreLeftOpen as exc:
        yield Bad(origin, str(exc))
        return
    try:
        yield from read(con, origin, since)
    except apsw.BusyError:
        title = HOSTS[kind]
        yield Bad(
            origin,
            f"{title} held its store locked for over {BUSY_MS / 1000:g} s (writing it); import again in a moment",
        )
    except apsw.Error as exc:
        yield Bad(origin, f"cannot read it as SQLite: {exc} (another version of {kind}? a damaged file?)")
    finally:
        con.close()


# ---------------------------------------------------------------- opencode


def _ms(value: object):
    return _when(value / 1000) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _older(since: dt.datetime | None, *times) -> bool:
    """Whether a session whose times are ``times`` was last active before ``since``."""
    known = [t for t in times if t is not None]
    return since is not None and bool(known) and max(known) < since


def _opencode(con: apsw.Connection, origin: str, since: dt.datetime | None, host: str = "opencode") -> Iterator[Found]:
    cols = _columns(con, "session")
    if not {"id"} <= cols:
        yield Bad(origin, "no session table: not opencode's store")
        return
    rows = con.execute(
        f"SELECT {_pick(cols, 'id', 'parent_id', 'directory', 'title', 'time_created', 'time_updated')} "
        "FROM session ORDER BY time_created, id LIMIT ?",
        (MAX_SESSIONS,),
    )
    for number, row in enumerate(_listed(rows), start=1):
        if row is None:
            yield Bad(f"{origin} (session {number})", NOT_UTF8)
            continue
        session_id, parent, directory, title, created, updated = row
        where = f"{origin}#{session_id}"
        if parent:
            yield Skip(where, f"a sub-agent's task (a side chain of session {parent})")
            continue
        if _older(since, _ms(created), _ms(updated)):
            yield Skip(where, OLDER)
            continue
        try:
            yield _opencode_session(con, host, str(session_id), where, directory, title, created, updated)
        except SHAPE_ERRORS as exc:
            yield Bad(where, f"could not be read: {type(exc).__name__}: {exc}")


def _opencode_session(con, host: str, session_id: str, origin: str, directory, title, created, updated) -> Found:
    chat = Chat(host, session_id, origin)
    chat.cwd = directory if isinstance(directory, str) and directory else None
    # opencode names a session "New session - <time>" until its title is made.
    if isinstance(title, str) and title.strip() and not title.startswith("New session - "):
        chat.title = title
    chat.saw(_ms(created))
    chat.saw(_ms(updated))
    roles = {}
    for message_id, data in con.execute(
        "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id LIMIT ?",
        (session_id, MAX_MESSAGES),
    ):
        info = _dict(json.loads(data)) if isinstance(data, str) else {}
        roles[message_id] = (info.get("role"), _ms(_dict(info.get("time")).get("created")))
    last_message = None
    for message_id, data in con.execute(
        "SELECT message_id, data FROM part WHERE session_id = ? ORDER BY time_created, id LIMIT ?",
        (session_id, MAX_MESSAGES * 4),
    ):
        role, when = roles.get(message_id, (None, None))
        part = _dict(json.loads(data)) if isinstance(data, str) else {}
        kind = part.get("type")
        if kind == "text" and not part.get("synthetic") and isinstance(part.get("text"), str):
            if role == "user":
                text = _typed(_unquoted(without_injected(part["text"])))
                if text:
                    chat.user(text, when)
            elif role == "assistant":
                chat.assistant(part["text"], when, same_message=message_id == last_message)
        elif kind == "tool" and role == "assistant":
            chat.tool(part.get("tool"), _what(_dict(part.get("state")).get("input")), when)
        last_message = message_id
    return chat.item()


def _unquoted(text: str) -> str:
    """A prompt without the double quotes ``opencode run "..."`` wraps a
    one-argument prompt in (opencode 1.18 stores them as typed)."""
    if len(text) > 1 and text[0] == text[-1] == '"' and '"' not in text[1:-1]:
        return text[1:-1].strip()
    return text


def read_opencode(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session of opencode's store (its data folder, or ``opencode.db``)."""
    return _sessions(path, "opencode", _opencode, since)


def read_kilo(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session of Kilo CLI's store (its data folder, or ``kilo.db``): opencode's format."""
    return _sessions(path, "kilo", lambda con, origin, since: _opencode(con, origin, since, "kilo"), since)


# ---------------------------------------------------------------- OpenClaw


def _openclaw(con: apsw.Connection, origin: str, since: dt.datetime | None, state: Path | None) -> Iterator[Found]:
    if "transcript_events" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}:
        yield Bad(origin, "no transcript_events table: not an OpenClaw agent store")
        return
    rows = con.execute(
        "SELECT session_id, max(created_at) FROM transcript_events GROUP BY session_id ORDER BY min(created_at) LIMIT ?",
        (MAX_SESSIONS,),
    )
    for number, row in enumerate(_listed(rows), start=1):
        if row is None:
            yield Bad(f"{origin} (session {number})", NOT_UTF8)
            continue
        session_id, latest = row
        where = f"{origin}#{session_id}"
        if _older(since, _ms(latest)):
            yield Skip(where, OLDER)
            continue
        try:
            yield _openclaw_session(con, str(session_id), where, state)
        except SHAPE_ERRORS as exc:
            yield Bad(where, f"could not be read: {type(exc).__name__}: {exc}")


def _openclaw_session(con, session_id: str, origin: str, state: Path | None) -> Found:
    chat = Chat("openclaw", session_id, origin)
    packed = 0

    def entries() -> Iterator[dict]:
        nonlocal packed
        for event, compressed in con.execute(
            "SELECT event_json, event_zstd IS NOT NULL FROM transcript_events WHERE session_id = ? ORDER BY seq LIMIT ?",
            (session_id, MAX_MESSAGES * 4),
        ):
            if isinstance(event, str):
                obj = json.loads(event)
                if isinstance(obj, dict):
                    yield obj
            elif compressed:
                packed += 1  # zstd, which Python's standard library reads from 3.14 on

    pi_entries(chat, entries())
    if chat.cwd and state is not None and is_inside(str(state), chat.cwd):
        chat.cwd = None  # OpenClaw's own workspace: no project of the user's
    if packed:
        chat.warnings.append(f"{packed} events OpenClaw stored compressed (zstd) were not read")
    return chat.item()


def _agent_stores(path: Path) -> list[Path]:
    """OpenClaw's agent stores under ``path`` (its state folder, an agent's folder, or a store)."""
    if not path.is_dir():
        return [path]
    agents = path / "agents"
    base = agents if agents.is_dir() else path
    found = []
    for folder in sorted(base.iterdir()) if base.is_dir() else []:
        for store in (folder / "agent" / "openclaw-agent.sqlite", folder / "openclaw-agent.sqlite"):
            if os.path.lexists(store):
                found.append(store)
    direct = path / "openclaw-agent.sqlite"
    return found or ([direct] if os.path.lexists(direct) else [])


def read_openclaw(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session of every OpenClaw agent under ``path`` (``~/.openclaw``:
    ``agents/<agent>/agent/openclaw-agent.sqlite``, table ``transcript_events``)."""
    stores = _agent_stores(path)
    if not stores:
        yield Bad(str(path), "no agents/<agent>/agent/openclaw-agent.sqlite under it: not OpenClaw's state folder")
        return
    state = path if path.is_dir() else None
    for store in stores:
        name = str(store.relative_to(path)) if state else store.name
        yield from _sessions(
            store, "openclaw", lambda con, _origin, since, name=name: _openclaw(con, name, since, state), since
        )


# ---------------------------------------------------------------- Hermes Agent


def _hermes(con: apsw.Connection, origin: str, since: dt.datetime | None) -> Iterator[Found]:
    cols = _columns(con, "sessions")
    if "id" not in cols:
        yield Bad(origin, "no sessions table: not Hermes Agent's store")
        return
    listed = _pick(cols, "id", "parent_session_id", "cwd", "git_branch", "title", "started_at", "ended_at")
    rows = con.execute(
        f"SELECT {listed} FROM sessions ORDER BY {'started_at, ' if 'started_at' in cols else ''}id LIMIT ?",
        (MAX_SESSIONS,),
    )
    mcols = _columns(con, "messages")
    for number, row in enumerate(_listed(rows), start=1):
        if row is None:
            yield Bad(f"{origin} (session {number})", NOT_UTF8)
            continue
        session_id, parent, cwd, branch, title, started, ended = row
        where = f"{origin}#{session_id}"
        if parent:
            yield Skip(where, f"a continuation or side task of session {parent} (a side chain)")
            continue
        if _older(since, _when(started), _when(ended), _last_message(con, mcols, str(session_id))):
            yield Skip(where, OLDER)
            continue
        try:
            yield _hermes_session(con, mcols, str(session_id), where, cwd, branch, title, started, ended)
        except SHAPE_ERRORS as exc:
            yield Bad(where, f"could not be read: {type(exc).__name__}: {exc}")


def _hermes_session(con, mcols: set[str], session_id: str, origin: str, cwd, branch, title, started, ended) -> Found:
    chat = Chat("hermes", session_id, origin)
    chat.cwd = cwd if isinstance(cwd, str) and cwd else None
    chat.branch = branch if isinstance(branch, str) and branch not in ("", "HEAD") else None
    chat.title = title if isinstance(title, str) and title.strip() else None
    chat.saw(_when(started))
    chat.saw(_when(ended))
    active = "AND (active IS NULL OR active != 0)" if "active" in mcols else ""
    for role, content, calls, when in con.execute(
        f"SELECT {_pick(mcols, 'role', 'content', 'tool_calls', 'timestamp')} FROM messages "
        f"WHERE session_id = ? {active} ORDER BY {'timestamp, ' if 'timestamp' in mcols else ''}id LIMIT ?",
        (session_id, MAX_MESSAGES),
    ):
        at = _when(when)
        text = content if isinstance(content, str) else ""
        if role == "user":
            text = _typed(text)
            if text:
                chat.user(text, at)
        elif role == "assistant":
            chat.assistant(text, at)
            for call in json.loads(calls) if isinstance(calls, str) and calls.strip() else []:
                function = _dict(_dict(call).get("function"))
                chat.tool(function.get("name"), _what(function.get("arguments")), at)
    return chat.item()


def _last_message(con, mcols: set[str], session_id: str):
    if "timestamp" not in mcols:
        return None
    return _when(con.execute("SELECT max(timestamp) FROM messages WHERE session_id = ?", (session_id,)).fetchone()[0])


def read_hermes(path: Path, since: dt.datetime | None = None) -> Iterator[Found]:
    """Every session of Hermes Agent's store (its home folder, or ``state.db``)."""
    return _sessions(path, "hermes", _hermes, since)
