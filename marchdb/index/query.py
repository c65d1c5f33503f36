"""SQL a person or an agent runs on the index: one statement, read-only unless asked.

``marchdb sql "..."``, ``Store.query`` and the browse page read through a
read-only connection (``db.connect_read_only``): the index is derived from
the files, and a hand edit (``DELETE FROM memory_index``) would leave it out
of step with them until a rebuild.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator

import apsw

from marchdb.errors import InvalidInput
from marchdb.index import sqlfuncs

#: SQLite VM steps between two looks at the clock. The handler is Python, so
#: a Ctrl-C is also acted on there: without one, Python runs no code while a
#: statement steps, and SIGINT waited for the statement's end.
PROGRESS_STEPS = 1000

#: Why a change through ``query`` or the read-only ``marchdb sql`` shell is refused.
READ_ONLY_SQL = (
    "the index is read-only here: it is rebuilt from the Markdown files, so edit those "
    "(or pass --write if you really mean to change the index)"
)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?(\*/|$)", re.S)


def _one_statement_only(con: apsw.Connection, sql: str, params: tuple) -> tuple:
    """The columns of ``sql``'s one statement, read without running it;
    several statements are refused (``ExecTraceAbort``, as ``one_statement``
    does once they run)."""
    from apsw import ext  # only here: tens of milliseconds a read need not pay

    info = ext.query_info(con, sql, params)
    if _COMMENTS.sub("", info.query_remaining or "").strip(" \t\r\n;"):
        raise apsw.ExecTraceAbort
    return info.description or ()


def too_long(seconds: float) -> str:
    """What a statement stopped at its time bound says."""
    return (
        f"the statement ran for more than {seconds:g} s and was stopped (a recursive CTE without an end?); "
        "add a LIMIT, or give it longer with --timeout SECONDS (0: no limit)"
    )


@contextlib.contextmanager
def time_bound(con: apsw.Connection, seconds: float | None) -> Iterator[list[bool]]:
    """Stop what ``con`` runs inside this block after ``seconds`` (None or 0:
    never) with ``apsw.InterruptError``; the list yielded gets ``True`` when
    the bound stopped it. A Ctrl-C meanwhile raises ``KeyboardInterrupt`` out
    of the statement (Python's SIGINT handler runs in the progress handler)."""
    deadline = time.monotonic() + seconds if seconds else None
    stopped: list[bool] = []

    def progress() -> bool:
        if deadline is not None and time.monotonic() > deadline:
            stopped.append(True)
            return True
        return False

    con.set_progress_handler(progress, PROGRESS_STEPS)
    try:
        yield stopped
    finally:
        con.set_progress_handler(None)


def run_one(
    con: apsw.Connection,
    sql: str,
    params: tuple = (),
    max_rows: int | None = None,
    timeout: float | None = None,
) -> tuple[list[str], list[tuple]]:
    """Run one SQL statement on ``con``: ``(columns, rows)``, at most
    ``max_rows`` rows (None: all; the statement is not run further), within
    ``timeout`` seconds (None or 0: no limit). Several statements, a change on
    a read-only connection, an SQL error, a statement past its time and an
    answer too large for memory are ``InvalidInput`` with a message saying
    what to do; a Ctrl-C stops the statement with ``KeyboardInterrupt``."""
    statements = 0

    def one_statement(_cursor, text, _bindings) -> bool:
        # Several would mix their rows under the first one's columns (a
        # comment after the last ';' is no statement).
        nonlocal statements
        if not _COMMENTS.sub("", text).strip(" \t\r\n;"):
            return True
        statements += 1
        return statements == 1

    rows: list[tuple] = []
    try:
        # On a connection that writes, several statements are refused before any runs (stopped
        # at the second, the first had changed the index), and the columns are read before the
        # statement runs (prepared again afterwards, a CREATE TABLE finds its table there).
        described = None if con.readonly("main") else _one_statement_only(con, sql, params)
        with time_bound(con, timeout) as stopped:
            cursor = con.cursor()
            cursor.exec_trace = one_statement
            cur = cursor.execute(sql, params)
            try:
                columns = [d[0] for d in cur.getdescription()]
            except apsw.ExecutionCompleteError:
                # No rows: ask the statement itself for its columns.
                from apsw import ext  # only here: tens of milliseconds a hook need not pay

                last = described if described is not None else ext.query_info(con, sql, params).description
                columns = [d[0] for d in last or ()]
            for row in cur:
                if max_rows is not None and len(rows) >= max_rows:
                    break
                rows.append(row)
            cursor.close(force=True)  # a statement cut short is not run further
    except apsw.InterruptError:
        if stopped:
            raise InvalidInput(too_long(timeout or 0)) from None
        raise KeyboardInterrupt from None  # another thread's interrupt(): a Ctrl-C of the caller's
    except MemoryError:
        rows.clear()
        raise InvalidInput("the answer does not fit in memory; add a LIMIT, or read fewer rows (--max-rows)") from None
    except apsw.ExecTraceAbort:
        raise InvalidInput(
            "give one SQL statement per call (nothing was changed); the shell, `marchdb sql` without a "
            "query, takes several"
        ) from None
    except (apsw.ReadOnlyError, apsw.AuthError):
        raise InvalidInput(READ_ONLY_SQL) from None
    except apsw.Error as exc:
        raise InvalidInput(f"SQL error: {exc}{sqlfuncs.hint_for(str(exc))}") from None
    return columns, rows
