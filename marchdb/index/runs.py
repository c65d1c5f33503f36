"""Agent runs in the index: their registration, their numbering within a host's session, their windows.

A run is one turn of an agent (``runs``, ``sql/001_schema.sql``): recall
registers it with the conversation it belongs to (``register``), and the
10-run window that keeps a memory from being hinted twice counts the runs of
that conversation (``suppressed_ids``). A host's session numbers its runs
``<session key>:<turn>`` (``next_run_id``; the key is ``hooks.session_key``),
and after ``/clear`` or a compaction opens a new window, a conversation of
its own (``new_window``). The log of hints and runs lives in the index, so
the hook processes, the engine and the MCP server share it.
"""

from __future__ import annotations

import apsw

from marchdb.index.db import scalar, transaction

#: How many runs of a conversation a hint keeps a memory from being hinted again.
SUPPRESSION_RUNS = 10


def register(con: apsw.Connection, run_id: str, conversation: str | None) -> str | None:
    """Register ``run_id`` (a run keeps the conversation it was first
    registered with) and return the conversation it belongs to."""
    con.execute("INSERT INTO runs(run_id, conversation) VALUES (?, ?) ON CONFLICT DO NOTHING", (run_id, conversation))
    known = scalar(con, "SELECT conversation FROM runs WHERE run_id = ?", (run_id,))
    return None if known is None else str(known)


def suppressed_ids(con: apsw.Connection, run_id: str, conversation: str | None) -> set[str]:
    """Memories hinted in the current run or in the 10 runs of its
    conversation (the one stored with the run) before it: other
    conversations never saw those hints."""
    return {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT l.mem_id FROM recall_log l WHERE l.trigger IN ('user', 'assistant') AND l.run_id IN "
            "(SELECT run_id FROM runs WHERE conversation IS :conversation "
            f" AND seq <= (SELECT seq FROM runs WHERE run_id = :run) ORDER BY seq DESC LIMIT {SUPPRESSION_RUNS + 1})",
            {"run": run_id, "conversation": conversation},
        )
    }


def seen_in_run(con: apsw.Connection, run_id: str, triggers: tuple[str, ...]) -> set[str]:
    """Memories logged in this run under the given triggers."""
    marks = ",".join("?" * len(triggers))
    return {
        r[0]
        for r in con.execute(
            f"SELECT DISTINCT mem_id FROM recall_log WHERE run_id = ? AND trigger IN ({marks})", (run_id, *triggers)
        )
    }


# ---------------------------------------------------------------- a host session's runs


def _runs_of(con: apsw.Connection, key: str, columns: str, tail: str = "") -> list[tuple]:
    # ';' sorts right after ':': the session's run ids lie between "key:" and "key;".
    return list(
        con.execute(f"SELECT {columns} FROM runs WHERE run_id >= ? AND run_id < ? {tail}", (f"{key}:", f"{key};"))
    )


def _turn(run_id: str, prefix: str) -> int:
    """The turn of a run id ``<prefix><turn>`` (0 for any other id)."""
    turn = run_id[len(prefix) :] if run_id.startswith(prefix) else ""
    return int(turn) if turn.isascii() and turn.isdigit() else 0


def next_run_id(con: apsw.Connection, key: str) -> str:
    """A new agent run for the session ``key``: ``<key>:<turn>``, one turn
    after the highest the session has used (runs are registered by recall;
    other run ids are passed over). Old runs are pruned
    (sql/003_lifecycle.sql): a session whose runs are all gone starts after
    the last turn the recall log still names, so no logged hint of an
    earlier run is taken for one of the new run."""
    prefix = f"{key}:"
    ids = [r[0] for r in _runs_of(con, key, "run_id")]
    if not ids:
        ids = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT run_id FROM recall_log WHERE run_id >= ? AND run_id < ?", (prefix, f"{key};")
            )
        ]
    return f"{prefix}{max((_turn(i, prefix) for i in ids), default=0) + 1}"


def current_run_id(con: apsw.Connection, key: str) -> str | None:
    """The session's latest run (the prompt a tool event or a run's end belongs to)."""
    rows = _runs_of(con, key, "run_id", "ORDER BY seq DESC LIMIT 1")
    return str(rows[0][0]) if rows else None


def conversation_of(con: apsw.Connection, key: str) -> str:
    """The conversation the session's runs belong to now: ``<key>``, or
    ``<key>~N`` after its N-th ``/clear`` or compaction."""
    rows = _runs_of(con, key, "conversation", "ORDER BY seq DESC LIMIT 1")
    return str(rows[0][0]) if rows and rows[0][0] else key


def new_window(con: apsw.Connection, key: str, keep: list[str] | None = None) -> str:
    """Start the session's 10-run window afresh (its context was cleared or
    compacted): the next runs belong to a new conversation, opened by a run
    of its own. ``keep``: memories hinted in the old conversation whose hints
    the context still holds (a host that keeps its first messages whole): the
    opening run carries them, so they are not hinted twice. Returns the new
    conversation."""
    current = conversation_of(con, key)
    generation = current.rsplit("~", 1)[1] if current.startswith(f"{key}~") else "0"
    fresh = f"{key}~{int(generation) + 1 if generation.isdigit() else 1}"
    with transaction(con):
        run = next_run_id(con, key)
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
