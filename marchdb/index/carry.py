"""Vectors survive a rebuild of the schema.

A new schema (a view added, a column changed) rebuilds the index from the
Markdown files; that is cheap. Embedding every text again is not: most of an
hour for 10,000 memories on two cores. Vectors are keyed by what was
embedded (kind and content hash) and by the model's fingerprint, not by
anything the schema shapes, so they are stashed in a temporary table before
the old tables are dropped and put back into the new ones, with the model's
settings (fingerprint, dimension, centre, calibration). The sync that
follows finds them by hash; the few no text refers to any more are collected
as garbage, as after any edit.

The statements live in ``sql/carry.sql``; ``db`` (which applies the schema)
hands them in, with its way to create the vec0 tables, so this module needs
nothing of it. An index whose vectors cannot be read (an old shape, a
damaged vec0 table) carries nothing: it is embedded again, and the caller
says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import apsw

#: The model's settings that belong with its vectors (``meta`` keys; every
#: ``calibration*`` key too).
MODEL_KEYS = ("model_fingerprint", "dim", "vector_center")


@dataclass
class Stash:
    """What ``stash`` put aside: the model's ``meta`` rows and how many vectors."""

    meta: dict[str, str] = field(default_factory=dict)
    count: int = 0
    error: str | None = None


def _scalar(con: apsw.Connection, sql: str, params: tuple = ()):
    row = con.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _has_table(con: apsw.Connection, name: str) -> bool:
    return _scalar(con, "SELECT 1 FROM sqlite_master WHERE name = ?", (name,)) is not None


def stash(con: apsw.Connection, statements: dict[str, str]) -> Stash:
    """Copy the index's vectors into ``temp.carried_vectors`` (inside the
    caller's transaction, before the old tables are dropped); ``statements``:
    ``sql/carry.sql``'s, by name."""
    out = Stash()
    con.execute(statements["drop"])
    if not (_has_table(con, "meta") and _has_table(con, "vectors") and _has_table(con, "vec_meta")):
        return out
    try:
        rows = con.execute(
            "SELECT key, value FROM meta WHERE key IN (?, ?, ?) OR key LIKE 'calibration%'", MODEL_KEYS
        ).fetchall()
        meta = {k: v for k, v in rows if v is not None}
        if not meta.get("model_fingerprint") or not str(meta.get("dim", "")).isdigit():
            return out
        con.execute(statements["stash"])
        out.count = int(_scalar(con, "SELECT count(*) FROM temp.carried_vectors"))
        out.meta = {str(k): str(v) for k, v in meta.items()}
    except apsw.Error as exc:
        con.execute(statements["drop"])
        out.error = str(exc)
    return out


def restore(
    con: apsw.Connection,
    stashed: Stash,
    statements: dict[str, str],
    make_vector_tables: Callable[[apsw.Connection, int], None],
) -> int:
    """Put the stashed vectors into the new (empty) schema, inside the
    caller's transaction (``make_vector_tables(con, dim)`` creates the vec0
    tables). Returns how many."""
    if not stashed.meta:
        return 0
    dim = int(stashed.meta["dim"])
    con.executemany(
        "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        list(stashed.meta.items()),
    )
    make_vector_tables(con, dim)
    con.execute(statements["restore_keys"])
    con.execute(statements["restore_meta"])
    con.execute(statements["restore_chunk"])
    if dim % 8 == 0:
        center = bytes.fromhex(stashed.meta.get("vector_center", ""))
        if center:
            for table in ("vec_meta", "vec_chunk"):
                con.execute(
                    f"INSERT INTO {table}_bits(rowid, embedding) "
                    f"SELECT rowid, vec_quantize_binary(vec_sub(embedding, ?)) FROM {table}",
                    (center,),
                )
    con.execute(statements["drop"])
    return stashed.count


def describe(stashed: Stash) -> str:
    """One line for the user: what a rebuild did with the vectors."""
    if stashed.error:
        return f"the vectors could not be kept ({stashed.error}) and are computed again"
    if stashed.count:
        return f"kept {stashed.count:,} vector{'' if stashed.count == 1 else 's'}"
    return ""
