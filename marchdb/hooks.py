"""Passive recall inside agent hosts: the library's answer to a host's event (seed 000's 被动召回).

Seed 000 injects hints without the model asking: the profiles once per
session, a ``[recall]`` block at the start of every agent run (the user's
message), a hidden steer after an intermediate assistant turn with tool
calls (at most 2 hints, none already hinted in the run), and at the end of a
run the assistant's output is *recorded*, never injected. The host adapters
(``hosts``) translate each host's JSON into one of these events
(``ops.HOOK``) and the answer back into the host's JSON; the rules, the run
numbering and the text injected are made here, once for every host.

Runs: every prompt of a host's session is a new run ``<prefix>:<session>:<turn>``
(``cc:`` for Claude Code, the host's name for others), one turn after the
highest the session has used, in the conversation ``<prefix>:<session>``: the
10-run window counts the session's prompts (not other sessions', whose
contexts never held those hints). A tool event and the run's end belong to
the latest run. After ``/clear`` or a compaction the model's context no
longer holds the hints the window remembers: the session's window starts
afresh (a new conversation ``<prefix>:<session>~N``), so a memory hinted
before can be hinted again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from marchdb import hints, profiles, switches
from marchdb.errors import FileError
from marchdb.index.db import transaction
from marchdb.lifecycle import now
from marchdb.tags import project_tag

#: Claude Code keeps at most 10,000 characters of injected context whole;
#: every host gets at most this many.
MAX_CONTEXT_CHARS = 9000
#: Longest session id kept as written: ``cc:<session>:<turn>`` must fit a run
#: id (``recall.MAX_RUN_ID_CHARS``, 200); a longer one is cut and hashed.
MAX_SESSION_ID = 160
#: The run-id prefix of a host's sessions (its name, unless listed).
RUN_PREFIXES = {"claude-code": "cc"}
#: Folders walked up from a working directory looking for its git root.
MAX_PROJECT_DEPTH = 40


def handle(
    store,
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
    """The answer to one host event (``ops.HOOK`` says what each argument
    is): ``{"context", "hints", "run_id", "note"}`` — ``context`` is the text
    to inject ("" for none), ``note`` what the hook log should say (why
    nothing was injected, a profile that cannot be read)."""
    notes: list[str] = []
    hinted: list[dict] = []
    run: str | None = run_id
    context = ""
    sid = session_id(session)
    where = project_here(store.cfg, project, cwd)
    off = switched_off(
        store.cfg, event=event, host=host, session=session, text=text, cwd=cwd, project=where, conversation=conversation
    )
    if off:
        return _answer("", [], None, [off])
    if event in ("session_start", "compact"):
        if source in ("clear", "compact") or event == "compact":
            new_window(store.con, host, sid, keep or [])
        if event == "session_start":
            context = profile_blocks(store, notes)
            # importSessions: the sessions that ended before this one are imported in the background.
            from marchdb.lifecycle import keep as keeping

            notes += [started] if (started := keeping.start(store.cfg, host)) else []
    elif event == "message":  # the generic contract: the caller names its run
        if text and text.strip():
            store.cfg.require_root()
            result = store.recall(
                text,
                run_id=run_id,
                trigger=trigger,
                record_only=record_only,
                project=where,
                conversation=conversation,
                switched=False,
            )
            hinted, note = [h.to_dict() for h in result.hints], result.warning
            notes += [note] if note else []
        block = hints.recall_block(hinted)
        context = profile_blocks(store, notes, block) if profiles else block
    else:
        if not text or not text.strip():
            why = {
                "prompt": "a prompt without its text; nothing injected",
                "tool": "a tool event without the assistant's text; nothing injected",
                "stop": "a run's end without the reply's text; nothing recorded",
            }[event]
            return _answer("", [], None, [why])
        store.cfg.require_root()  # a missing vault must not hint from a stale index
        if event == "prompt":
            run = next_run_id(store.con, host, sid)
        else:
            run = current_run_id(store.con, host, sid) or next_run_id(store.con, host, sid)
        result = store.recall(
            text,
            run_id=run,
            trigger="user" if event == "prompt" else "assistant",
            record_only=event == "stop" or record_only,
            project=where,
            conversation=conversation_of(store.con, host, sid),
            switched=False,
        )
        notes += [result.warning] if result.warning else []
        # The run's end is recorded, never injected (seed 000); so is what a
        # host cannot take (VS Code's prompts): never shown, it suppresses nothing.
        if event != "stop" and not record_only:
            hinted = [h.to_dict() for h in result.hints]
            context = hints.recall_block(hinted)
    return _answer(context, hinted, run, notes)


def switched_off(
    cfg,
    *,
    event: str,
    host: str = "generic",
    session: str | None = None,
    text: str | None = None,
    cwd: str | None = None,
    project: str | None = None,
    conversation: str | None = None,
    **_ignored,
) -> str | None:
    """Why the user's switches turn recall off for this event (``switches``),
    or None. A prompt also notes whether its turn said ``#norecall``, so the
    turn's steers and its end stay quiet too. The arguments are
    ``memory_hook``'s (``project``: the one to use, named or from ``cwd``)."""
    sid = session_id(session)
    if event == "message":  # the generic contract: its caller names the conversation
        keys: tuple[str, ...] = (conversation or "", (conversation or "").split("~", 1)[0])
    else:
        keys = (_base(host, sid), sid)
    if event == "prompt":
        switches.note_turn(cfg.home, keys[0], switches.says_no_recall(text))
    return switches.recall_off(
        cfg,
        text=text if event in ("prompt", "message") else None,
        sessions=keys,
        turn=keys[0] if event in ("tool", "stop") else None,
        project=project,
        cwd=cwd,
    )


def _answer(context: str, hinted: list[dict], run: str | None, notes: list[str]) -> dict:
    return {
        "context": cut(context.strip(), MAX_CONTEXT_CHARS) + ("\n" if context.strip() else ""),
        "hints": hinted,
        "run_id": run,
        "note": "; ".join(n for n in notes if n) or None,
    }


def profile_blocks(store, notes: list[str], recall_block: str = "") -> str:
    """The ``[agent_profile]`` and ``[user_profile]`` blocks, the working
    page's ``[now]`` block with its age (``now``; bounded, so it fits), then
    ``recall_block``; each profile cut to its share of the rest of the context
    bound so that a long one keeps its start and never pushes the other out;
    a profile or page that cannot be read is left out and said in ``notes``."""
    blocks = profiles.read_profiles(store.cfg, notes)
    try:
        page = now.block(now.read_page(store.cfg.home, store.cfg.now_stale_hours))
    except FileError as exc:
        notes.append(str(exc))
        page = ""
    share = (MAX_CONTEXT_CHARS - len(recall_block) - len(page)) // len(blocks) - 40  # each with its block header
    blocks = {key: cut(text, share) for key, text in blocks.items()}
    return profiles.format_context(blocks, recall_block.removeprefix(hints.RECALL_HEADER), now=page)


def session_id(raw: object) -> str:
    """A host's session id as runs are named after it: printable, at most
    ``MAX_SESSION_ID`` characters (a longer one cut and hashed, so two that
    differ further on stay apart)."""
    text = raw if isinstance(raw, str) and raw.strip() else "unknown"
    text = "".join(c if c.isprintable() else "_" for c in text.strip())
    if len(text) > MAX_SESSION_ID:
        text = text[: MAX_SESSION_ID - 17] + "#" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
    return text


_CUT_NOTE = "\n(cut: marchdb keeps injected context under 9,000 characters)"


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so at the end."""
    return text if len(text) <= limit else text[: max(0, limit - len(_CUT_NOTE))].rstrip() + _CUT_NOTE


def _base(host: str, session: str) -> str:
    return f"{RUN_PREFIXES.get(host, host)}:{session}"


def _runs_of(con, base: str, columns: str, tail: str = "") -> list[tuple]:
    # ';' sorts right after ':': the session's run ids lie between "base:" and "base;".
    return list(
        con.execute(f"SELECT {columns} FROM runs WHERE run_id >= ? AND run_id < ? {tail}", (f"{base}:", f"{base};"))
    )


def _turn(run_id: str, prefix: str) -> int:
    """The turn of a run id ``<prefix><turn>`` (0 for any other id)."""
    turn = run_id[len(prefix) :] if run_id.startswith(prefix) else ""
    return int(turn) if turn.isascii() and turn.isdigit() else 0


def next_run_id(con, host: str, session: str) -> str:
    """A new agent run for ``session``: ``<prefix>:<session>:<turn>``, one
    turn after the highest the session has used (runs are registered by
    recall; other run ids are passed over). Old runs are pruned
    (sql/003_lifecycle.sql): a session whose runs are all gone starts after
    the last turn the recall log still names, so no logged hint of an
    earlier run is taken for one of the new run."""
    base = _base(host, session)
    prefix = f"{base}:"
    ids = [r[0] for r in _runs_of(con, base, "run_id")]
    if not ids:
        ids = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT run_id FROM recall_log WHERE run_id >= ? AND run_id < ?", (prefix, f"{base};")
            )
        ]
    return f"{prefix}{max((_turn(i, prefix) for i in ids), default=0) + 1}"


def current_run_id(con, host: str, session: str) -> str | None:
    """The session's latest run (the prompt a tool event or a run's end belongs to)."""
    rows = _runs_of(con, _base(host, session), "run_id", "ORDER BY seq DESC LIMIT 1")
    return str(rows[0][0]) if rows else None


def conversation_of(con, host: str, session: str) -> str:
    """The conversation the session's runs belong to now: ``<prefix>:<session>``,
    or ``...~N`` after its N-th ``/clear`` or compaction."""
    rows = _runs_of(con, _base(host, session), "conversation", "ORDER BY seq DESC LIMIT 1")
    return str(rows[0][0]) if rows and rows[0][0] else _base(host, session)


def new_window(con, host: str, session: str, keep: list[str] | None = None) -> str:
    """Start the session's 10-run window afresh (its context was cleared or
    compacted): the next runs belong to a new conversation, opened by a run
    of its own. ``keep``: memories hinted in the old conversation whose hints
    the context still holds (a host that keeps its first messages whole): the
    opening run carries them, so they are not hinted twice. Returns the new
    conversation."""
    base = _base(host, session)
    current = conversation_of(con, host, session)
    generation = current.rsplit("~", 1)[1] if current.startswith(f"{base}~") else "0"
    fresh = f"{base}~{int(generation) + 1 if generation.isdigit() else 1}"
    with transaction(con):
        run = next_run_id(con, host, session)
        con.execute("INSERT INTO runs(run_id, conversation) VALUES (?, ?)", (run, fresh))
        for mem_id in dict.fromkeys(keep or []):
            # Only a hint the old conversation gave, with the score it had.
            con.execute(
                "INSERT INTO recall_log(run_id, trigger, mem_id, score) SELECT ?, 'user', mem_id, score "
                "FROM recall_log WHERE mem_id = ? AND trigger IN ('user', 'assistant') AND run_id IN "
                "(SELECT run_id FROM runs WHERE conversation IS ?) ORDER BY seq DESC LIMIT 1",
                (run, mem_id, current),
            )
    return fresh


def project_for(cwd: object, projects: dict[str, str]) -> str | None:
    """The project a host's working directory names (seed 000: a ranking
    signal, never a filter): the ``projects`` map of config.json (the
    longest folder that holds ``cwd``), else the name of the git repository
    around it (the folder holding ``.git``), else None — an arbitrary folder
    name would rank memories on a guess."""
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\x00" in cwd:
        return None
    folder = Path(os.path.normpath(cwd))
    mapped = [(len(k), v) for k, v in projects.items() if folder == Path(k) or Path(k) in folder.parents]
    if mapped:
        return max(mapped)[1]
    for candidate in [folder, *folder.parents][:MAX_PROJECT_DEPTH]:
        if candidate == candidate.parent:
            break  # the file system's root is nobody's project
        try:
            if os.path.lexists(candidate / ".git"):
                return candidate.name
        except OSError:
            return None
    return None


def project_here(cfg, project: str | None, cwd: object) -> str | None:
    """The project an event is about: the one it names, else the one its
    working folder names (``project_for``) when that can be a tag. A
    repository's folder name that cannot be a tag ("app (old)") ranks
    nothing; said on every prompt it would only fill the hook log."""
    if project:
        return project
    found = project_for(cwd, cfg.projects) if cwd else None
    return found if project_tag(cfg.project_tag_prefix, found) else None
