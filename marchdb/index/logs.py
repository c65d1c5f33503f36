"""The recall and open logs survive a rebuild of the index.

Everything else in the index is derived from the Markdown files and is
rebuilt from them; the logs (``runs``, ``recall_log``, ``open_log``) are not:
they are what the agent was hinted and what it opened, which recall's
per-run de-duplication and the ``hint_history`` / ``memory_use`` views need.
They refer to memories by id, which a rebuild keeps, so ``marchdb rebuild``
and the rebuild after a schema change copy them into the new index.

Rows are copied by column name: a column the new schema dropped is left
out, and a table whose new shape needs a column the old one lacks is not
copied (the caller says so). A change of a column's meaning needs its own
handling here, with the schema version bump that makes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import apsw

#: In dependency order (recall_log rows name runs).
LOG_TABLES = ("runs", "recall_log", "open_log")


@dataclass
class Saved:
    """The log tables of an index, as read: columns and rows per table."""

    tables: dict[str, tuple[list[str], list[tuple]]] = field(default_factory=dict)

    def rows(self) -> int:
        """How many rows were read, all tables together."""
        return sum(len(r) for _, r in self.tables.values())


def hook_conversation(run_id: str) -> str | None:
    """The conversation of a run id the Claude Code hook made,
    ``cc:SESSION:TURN`` → ``cc:SESSION`` (None for any other run id)."""
    conversation, _sep, turn = run_id.rpartition(":")
    hook_made = run_id.startswith("cc:") and conversation.count(":") >= 1 and turn.isascii() and turn.isdigit()
    return conversation if hook_made else None


def _columns(con: apsw.Connection, table: str) -> list[tuple[str, bool]]:
    """(name, required) of each column: required = NOT NULL without a default."""
    return [
        (name, bool(notnull) and default is None and not pk)
        for _cid, name, _type, notnull, default, pk in con.execute(f"PRAGMA table_info({table})")
    ]


def read(con: apsw.Connection) -> Saved:
    """The log tables of the index ``con`` (tables it lacks are skipped)."""
    saved = Saved()
    for table in LOG_TABLES:
        cols = [name for name, _ in _columns(con, table)]
        if not cols:
            continue
        names = ", ".join(f'"{c}"' for c in cols)
        saved.tables[table] = (cols, con.execute(f"SELECT {names} FROM {table} ORDER BY rowid").fetchall())
    return saved


def read_file(path: str | os.PathLike) -> tuple[Saved | None, str | None]:
    """The logs of the index file ``path``, opened read-only: ``(saved, None)``,
    ``(None, None)`` when there is no file, ``(None, why)`` when it cannot be read."""
    if not os.path.exists(path):
        return None, None
    try:
        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        return None, str(exc)
    try:
        return read(con), None
    except apsw.Error as exc:
        return None, str(exc)
    finally:
        con.close()


def restore(con: apsw.Connection, saved: Saved | None) -> tuple[dict[str, int], list[str]]:
    """Insert the saved rows into the (new, empty) log tables of ``con``,
    inside the caller's transaction. Returns (rows copied per table, tables left out)."""
    copied: dict[str, int] = {}
    skipped: list[str] = []
    if saved is None:
        return copied, skipped
    for table in LOG_TABLES:
        if table not in saved.tables:
            continue
        old_cols, rows = saved.tables[table]
        new_cols = _columns(con, table)
        keep = [i for i, c in enumerate(old_cols) if c in {n for n, _ in new_cols}]
        kept_names = {old_cols[i] for i in keep}
        if not new_cols or any(req and name not in kept_names for name, req in new_cols):
            skipped.append(table)
            continue
        if not rows:
            continue
        names = ", ".join(f'"{old_cols[i]}"' for i in keep)
        marks = ", ".join("?" * len(keep))
        con.executemany(
            f"INSERT INTO {table}({names}) VALUES ({marks})",
            ([row[i] for i in keep] for row in rows),
        )
        if table == "runs" and "conversation" not in old_cols:
            # Runs logged before conversations were kept: the Claude Code
            # hook's run ids name their session; other runs share one window, as before.
            run_ids = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE run_id LIKE 'cc:%'")]
            con.executemany(
                "UPDATE runs SET conversation = ? WHERE run_id = ?", ((hook_conversation(r), r) for r in run_ids)
            )
        copied[table] = len(rows)
    return copied, skipped


def describe(copied: dict[str, int], skipped: list[str]) -> str:
    """One line for the user: what a rebuild did with the logs."""
    counts = ", ".join(f"{t} {n:,} row{'' if n == 1 else 's'}" for t, n in copied.items()) or "no rows"
    text = f"kept the logs ({counts})"
    if skipped:
        text += f"; {', '.join(skipped)} could not be kept (their columns changed)"
    return text
