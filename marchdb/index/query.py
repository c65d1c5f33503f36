"""SQL a person or an agent runs on the index: one statement, read-only unless asked.

``marchdb sql "..."``, ``Store.query`` and the browse page read through a
read-only connection (``db.connect_read_only``): the index is derived from
the files, and a hand edit (``DELETE FROM memory_index``) would leave it out
of step with them until a rebuild.
"""

from __future__ import annotations

import re

import apsw
import apsw.ext

from marchdb.errors import InvalidInput
from marchdb.index import sqlfuncs

#: Why a change through ``query`` or the read-only ``marchdb sql`` shell is refused.
READ_ONLY_SQL = (
    "the index is read-only here: it is rebuilt from the Markdown files, so edit those "
    "(or pass --write if you really mean to change the index)"
)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?(\*/|$)", re.S)


def run_one(con: apsw.Connection, sql: str, params: tuple = ()) -> tuple[list[str], list[tuple]]:
    """Run one SQL statement on ``con``: ``(columns, rows)``. Several
    statements, a change on a read-only connection and an SQL error are
    ``InvalidInput`` with a message saying what to do."""
    statements = 0

    def one_statement(_cursor, text, _bindings) -> bool:
        # Several would mix their rows under the first one's columns (a
        # comment after the last ';' is no statement).
        nonlocal statements
        if not _COMMENTS.sub("", text).strip(" \t\r\n;"):
            return True
        statements += 1
        return statements == 1

    try:
        cursor = con.cursor()
        cursor.exec_trace = one_statement
        cur = cursor.execute(sql, params)
        try:
            columns = [d[0] for d in cur.getdescription()]
        except apsw.ExecutionCompleteError:
            # No rows: ask the statement itself for its columns.
            last = apsw.ext.query_info(con, sql, params).description or ()
            columns = [d[0] for d in last]
        rows = cur.fetchall()
    except apsw.ExecTraceAbort:
        raise InvalidInput(
            "give one SQL statement per call (only the first one ran); the shell, `marchdb sql` "
            "without a query, takes several"
        ) from None
    except (apsw.ReadOnlyError, apsw.AuthError):
        raise InvalidInput(READ_ONLY_SQL) from None
    except apsw.Error as exc:
        raise InvalidInput(f"SQL error: {exc}{sqlfuncs.hint_for(str(exc))}") from None
    return columns, rows
