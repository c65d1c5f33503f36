"""The Datasette plugin of ``marchdb browse`` (imported only when Datasette is).

For a Datasette instance ``browse.build`` attached an ``sqlfuncs.Engine`` to,
every connection gets sqlite-vec and the scalar ``march_*`` functions, and the
``marchdb`` database gets canned queries. Datasette's connections cannot host
virtual tables, so the table-valued functions come as their JSON twins; the
functions compute with marchdb's own code on a read-only apsw connection.
Instances nothing was attached to are left alone.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import sqlite_vec
from datasette import hookimpl

from marchdb.errors import MarchError
from marchdb.index.sqlfuncs import SIMILAR_K, Engine, no_extra


@dataclass
class _Attached:
    engine: Engine
    con: apsw.Connection  # read-only, sqlite-vec loaded
    database: str  # the index's name in Datasette's URLs


_ATTACHED: weakref.WeakKeyDictionary[Any, _Attached] = weakref.WeakKeyDictionary()


def attach(datasette: Any, engine: Engine, con: apsw.Connection, database: str) -> None:
    """Serve ``engine``'s functions (computed on ``con``) in ``datasette``,
    and the marchdb queries on its ``database``."""
    _ATTACHED[datasette] = _Attached(engine, con, database)


def detach(datasette: Any) -> None:
    """Forget ``datasette`` and close its read-only connection."""
    attached = _ATTACHED.pop(datasette, None)
    if attached is not None:
        attached.con.close()


_VEC0_COPY: str | None = None
_KEEP: list = []  # both libraries stay mapped for the life of the process
_VEC0_GUARD = threading.Lock()


def vec0_for_datasette() -> str:
    """A private copy of sqlite-vec's library, for Datasette's connections.

    apsw and pysqlite3 each bundle their own SQLite. A loadable extension
    keeps the API table of the SQLite that loaded it in an exported global
    (``sqlite3_api``). Loaded by path into both, the dynamic loader hands
    back the same library, the second load overwrites that global, and
    apsw's vec0 queries call into the other SQLite: a segfault (seen here).

    So Datasette gets a copy (another file: mapped separately). That is not
    enough on its own: SQLite loads extensions with RTLD_GLOBAL, so a library
    mapped after the copy binds its exported names (``sqlite3_api``, the
    vec0 methods) to the copy's — and SQLite unloads an extension when its
    last connection closes, so apsw's next connection maps the original
    again, bound to the copy (also seen here). Hence both are loaded here
    first with RTLD_DEEPBIND (each binds to itself, whatever is global) and
    kept loaded for the life of the process; SQLite's own loads then reuse
    these mappings. The copy is removed at exit.
    """
    global _VEC0_COPY
    with _VEC0_GUARD:
        if _VEC0_COPY is None:
            original = next(
                p for p in (sqlite_vec.loadable_path() + ext for ext in (".so", ".dylib", ".dll")) if Path(p).is_file()
            )
            deep = getattr(os, "RTLD_DEEPBIND", 0)  # glibc; elsewhere libraries do not interpose like this
            if deep:
                # Already mapped by apsw (bound to itself then: no copy existed)
                # or mapped now; either way never unloaded from here on.
                _KEEP.append(ctypes.CDLL(original, mode=os.RTLD_NOW | deep))
            folder = tempfile.mkdtemp(prefix="marchdb-vec0-")
            atexit.register(shutil.rmtree, folder, True)
            copy = Path(folder) / Path(original).name
            shutil.copyfile(original, copy)
            if deep:
                _KEEP.append(ctypes.CDLL(str(copy), mode=os.RTLD_NOW | deep))
            _VEC0_COPY = str(copy.with_suffix(""))  # load_extension adds the suffix
        return _VEC0_COPY


def _fail(name: str, exc: MarchError) -> None:
    # pysqlite3 reports any exception of a function as "user-defined function
    # raised exception", without its message: the server log gets it.
    message = str(exc)
    print(f"marchdb browse: {message if message.startswith(name) else f'{name}: {message}'}", file=sys.stderr)


def _json_or_error(name: str, compute) -> str:
    """The rows as JSON; a refusal becomes one row ``{"error": message}``,
    which the canned queries show, instead of SQLite's message-less error."""
    try:
        return json.dumps(compute(), ensure_ascii=False)
    except MarchError as exc:
        _fail(name, exc)
        return json.dumps([{"error": str(exc)}], ensure_ascii=False)


def register_functions(conn: Any, attached: _Attached) -> None:
    """The scalar ``march_*`` functions on a Datasette (pysqlite3) connection."""
    engine, con = attached.engine, attached.con

    def march_embed(text=None, kind="query", *extra):
        try:
            no_extra("march_embed", extra)
            return engine.embed(text, kind)
        except MarchError as exc:
            _fail("march_embed", exc)
            raise

    def march_match(text):
        try:
            return engine.match(con, text)
        except MarchError as exc:
            _fail("march_match", exc)
            raise

    def march_recall_json(text=None, trigger="user", run_id=None, project=None, conversation=None, *extra):
        def rows():
            no_extra("march_recall_json", extra)  # as the apsw function does
            return engine.recall(con, text, trigger, run_id, project, conversation)

        return _json_or_error("march_recall_json", rows)

    def march_similar_json(mem_id=None, k=SIMILAR_K, *extra):
        def rows():
            no_extra("march_similar_json", extra)
            return engine.similar(con, mem_id, k)

        return _json_or_error("march_similar_json", rows)

    conn.create_function("march_embed", -1, march_embed, deterministic=True)
    conn.create_function("march_fts", 1, engine.fts_text, deterministic=True)
    conn.create_function("march_match", 1, march_match)
    conn.create_function("march_recall_json", -1, march_recall_json)
    conn.create_function("march_similar_json", -1, march_similar_json)


def warm_up(datasette: Any) -> None:
    """One recall on an attached instance, outside any query's time limit:
    it loads the model, its calibration and the dictionary (a second or
    more), which the first recall of a page would otherwise spend of its
    query's limit."""
    attached = _ATTACHED.get(datasette)
    if attached is not None:
        try:
            attached.engine.recall(attached.con, "warm up")
        except MarchError as exc:
            _fail("march_recall_json", exc)  # said once in the terminal; the page shows it again


#: What a query stopped at browse's time limit says (Datasette's own words
#: name a setting of its own a marchdb user cannot reach).
STOPPED = (
    "<p>The query ran for more than {seconds:g} s and was stopped: marchdb browse stops every query "
    "after {seconds:g} s (a recursive CTE without an end?). A longer one can run in a terminal: "
    '<code>marchdb sql --timeout 60 "..."</code>.</p>'
)


@hookimpl
def handle_exception(datasette, request, exception):
    """A query stopped at the time limit, said in marchdb's words (then
    Datasette's own handler shows it)."""
    if datasette in _ATTACHED and getattr(exception, "title", None) == "SQL Interrupted":
        exception.message = STOPPED.format(seconds=datasette.setting("sql_time_limit_ms") / 1000)
        exception.message_is_html = True
    return None


@hookimpl
def prepare_connection(conn, database, datasette):
    """sqlite-vec and the march functions on every connection of an attached instance."""
    attached = _ATTACHED.get(datasette)
    if attached is None:
        return
    # vec0 tables cannot even be listed without the extension.
    conn.enable_load_extension(True)
    conn.load_extension(vec0_for_datasette())
    conn.enable_load_extension(False)
    register_functions(conn, attached)


#: Canned queries: Datasette turns each :name into a form field.
QUERIES: dict[str, dict[str, Any]] = {
    "recall": {
        "title": "Recall, explained",
        "description": "Type a message: every candidate memory, its score, each signal and why it was or was not "
        "hinted (march_recall_json; a pure query, nothing is logged).",
        "sql": """SELECT j.value ->> 'rank' AS rank,
       j.value ->> 'id' AS id,
       coalesce(j.value ->> 'name', j.value ->> 'error') AS name,
       round(j.value ->> 'score', 3) AS score,
       CASE WHEN j.value ->> 'hint' THEN 'HINT' ELSE j.value ->> 'reason' END AS verdict,
       round(j.value ->> 'dense', 3) AS dense,
       round(j.value ->> 'dense_alone', 3) AS dense_alone,
       round(j.value ->> 'dense_cos', 3) AS cosine,
       round(j.value ->> 'bm25', 3) AS bm25,
       round(j.value ->> 'bm25_raw', 2) AS bm25_raw,
       j.value ->> 'mode' AS mode
FROM json_each(march_recall_json(:text)) AS j""",
        "hide_sql": True,  # long; the page is about the answer ("show" reveals it)
    },
    "neighbours": {
        "title": "A memory's nearest neighbours",
        "description": "Give a memory id: the active memories whose name, description and tags are nearest in "
        "meaning (march_similar_json, from the stored vectors).",
        "sql": """SELECT j.value ->> 'rank' AS rank,
       j.value ->> 'id' AS id,
       coalesce(j.value ->> 'name', j.value ->> 'error') AS name,
       round(j.value ->> 'cos', 3) AS cosine,
       round(j.value ->> 'dense', 3) AS dense,
       j.value ->> 'description' AS description
FROM json_each(march_similar_json(:id)) AS j""",
        "hide_sql": True,
    },
    "problems": {
        "title": "Problems",
        "description": "Files that are not memories as they should be, and why (`marchdb doctor` says what to do).",
        "sql": "SELECT kind, path, detail FROM diag_problems ORDER BY kind, path",
    },
    "hint_history": {
        "title": "Hint history",
        "description": "The latest hints logged by agent runs (the hint_history view).",
        "sql": "SELECT at, conversation, run_id, trigger, id, name, round(score, 3) AS score FROM hint_history "
        "ORDER BY seq DESC LIMIT 500",
    },
    "memory_use": {
        "title": "Memory use",
        "description": "How often each memory was hinted and opened, and when last (the memory_use view).",
        "sql": "SELECT id, name, status, hinted, last_hinted, opened, last_opened FROM memory_use "
        "ORDER BY hinted + opened DESC, max(coalesce(last_hinted, ''), coalesce(last_opened, '')) DESC, name",
    },
}


@hookimpl
def canned_queries(datasette, database, actor):
    """The marchdb queries, for the index of an attached instance."""
    attached = _ATTACHED.get(datasette)
    if attached is None or database != attached.database:
        return None
    return QUERIES
