"""``marchdb browse``: look at the index in a browser, through Datasette.

Not a web app of our own: Datasette (the ``browse`` extra) serves the index
file read-only on 127.0.0.1, with sqlite-vec loaded, the ``march_*``
functions registered and a few canned queries (``browse_plugin``).

Why it is put together this way:

* Datasette uses ``pysqlite3`` when it is importable, else the stdlib
  ``sqlite3``, which on many Pythons cannot load extensions; the extra
  installs ``pysqlite3-binary`` (Linux wheels).
* Its connections are ``pysqlite3`` ones, with no virtual-table API, so in
  Datasette ``march_recall`` and ``march_similar`` are the JSON twins
  (``json_each(march_recall_json(:text))``). They run marchdb's own code on a
  read-only apsw connection to the same file.
* The plugin is registered in-process (no entry point): installing the extra
  changes nothing for other Datasette uses.
* Datasette opens the file with ``mode=ro``: it sees what sync writes, live,
  and can write nothing. Arbitrary SQL stays allowed — it cannot change the
  index, and reading the index in SQL is the point.
* Who may ask (``guard``): only this machine's names in ``Host`` (DNS
  rebinding), only reads, only requests a page of this server made or the
  user typed (``Sec-Fetch-Site``, ``Origin``, ``Referer``: a page of another
  site could fire ``<img src=".../marchdb?sql=...">`` and time the answers
  to read a memory's text), and only with this run's key (other users of the
  machine reach 127.0.0.1 too): printed in the address, kept in a cookie.
  The cookie is sent from every port of this machine, so a request that
  says nothing of where it comes from (a browser without Fetch Metadata)
  runs no SQL of its own and has ``KEYLESS_TIME_LIMIT_MS``. No WebSocket.
* Every query stops after ``SQL_TIME_LIMIT_MS``; the model is loaded before
  the server says it is up, so the first recall fits in it.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import secrets
import signal
import socket
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from marchdb.errors import ConfigError, IndexUnavailable
from marchdb.index import db

#: The database's name in Datasette's URLs: http://127.0.0.1:PORT/marchdb
DB_NAME = "marchdb"
HOST = "127.0.0.1"  # loopback only, on purpose: the index holds the user's memories
INSTALL_HINT = "marchdb browse needs Datasette: pip install -e '.[browse]' (or pip install 'marchdb[browse]')"
#: Datasette stops every query after this long: an endless recursive CTE burnt
#: 20 s of CPU per request under the old limit. Recall fits easily (the model
#: is loaded before serving: ``check``), and a longer query has `marchdb sql`.
SQL_TIME_LIMIT_MS = 2_000
#: The query parameter of the printed address that carries this run's key.
KEY_PARAM = "marchdb_key"
#: The time limit of a request that cannot say where it comes from (no
#: Fetch Metadata, no Origin or Referer of this server): what timing one
#: answer can cost, and tell.
KEYLESS_TIME_LIMIT_MS = 250
#: Query parameters that carry SQL of the caller's own (the SQL box, a raw WHERE).
SQL_PARAMS = frozenset({"sql", "_where"})


def require_datasette() -> None:
    """Raise a one-line ``ConfigError`` when Datasette, or an sqlite3 module
    that can load sqlite-vec, is missing."""
    try:
        from datasette.utils.sqlite import sqlite3
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        raise ConfigError(
            "Datasette's sqlite3 module cannot load extensions (sqlite-vec); " + INSTALL_HINT.split(": ", 1)[1]
        )
    problem = sqlite_too_old(sqlite3.sqlite_version_info)
    if problem:
        raise ConfigError(problem)


def sqlite_too_old(version: tuple[int, ...]) -> str | None:
    """Why Datasette's sqlite3 module, built on SQLite ``version``, cannot
    read the index (its full-text tables), or None."""
    if tuple(version[:3]) >= db.MIN_SQLITE:
        return None
    have, need = ".".join(map(str, version[:3])), ".".join(map(str, db.MIN_SQLITE))
    return (
        f"Datasette's sqlite3 module is SQLite {have}; the index's full-text tables need {need} or later; "
        + INSTALL_HINT.split(": ", 1)[1]
    )


def open_read_only(path: str | Path) -> apsw.Connection:
    """A read-only apsw connection to the index with sqlite-vec loaded, for
    the functions Datasette calls."""
    if not Path(path).is_file():
        raise IndexUnavailable(f"there is no index at {path} yet; run `marchdb sync` first")
    try:
        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        con.enable_load_extension(True)
        con.load_extension(db.vec_extension())
        con.enable_load_extension(False)
        con.set_busy_timeout(db.BUSY_TIMEOUT_MS)
    except apsw.Error as exc:
        raise IndexUnavailable(f"cannot open the index {path} read-only: {exc}") from None
    return con


def hidden_tables(con: apsw.Connection) -> list[str]:
    """Tables a person has no use for: shadow tables of FTS5 and vec0, and
    the sign-bit tables of the coarse KNN."""
    tables = [(name, kind) for _schema, name, kind, *_rest in con.execute("PRAGMA main.table_list")]
    virtual = [name for name, kind in tables if kind == "virtual"]
    names = []
    for name, kind in tables:
        # vec0 keeps its vectors in <table>_vector_chunksNN, which SQLite
        # lists as plain tables, not as shadow tables.
        vector_chunks = any(re.fullmatch(re.escape(v) + r"_vector_chunks\d+", name) for v in virtual)
        if kind == "shadow" or vector_chunks or name.endswith("_bits") or name == "sqlite_sequence":
            names.append(name)
    return sorted(names)


def metadata(con: apsw.Connection) -> dict[str, Any]:
    """Datasette metadata: titles and hidden tables (the canned queries come
    from the plugin)."""
    return {
        "title": "marchdb",
        "description": "The marchdb index, read-only. It is rebuilt from the Markdown files: edit those, not this.",
        "databases": {
            DB_NAME: {
                "tables": {name: {"hidden": True} for name in hidden_tables(con)},
            }
        },
    }


def build(store) -> Any:
    """A Datasette instance serving ``store``'s index read-only, with the
    marchdb plugin attached (``browse_plugin.detach`` when done)."""
    require_datasette()
    from datasette.app import Datasette
    from datasette.database import Database
    from datasette.plugins import pm

    from marchdb.browse import plugin as browse_plugin

    # Datasette's default error handler prints a rich traceback, locals and
    # all, for every query it refuses (a typo in the SQL box, a write) when
    # rich is importable, and typer brings rich. Without it, a refused query
    # prints nothing and a real failure (a 500) still prints its traceback.
    # (Looked up after datasette.plugins, which loads it as a default plugin:
    # imported first, it would be registered half-initialised, with no handler.)
    setattr(importlib.import_module("datasette.handle_exception"), "rich", None)  # noqa: B010 - not typed there

    path = store.cfg.index_path
    if any(c in str(path) for c in "?#%"):
        # Datasette puts the path into an SQLite URI without escaping it.
        raise ConfigError(f"Datasette cannot open {path} (a ?, # or % in the path); move the index (indexPath)")
    con = open_read_only(path)
    if not pm.is_registered(browse_plugin):
        pm.register(browse_plugin, name="marchdb")
    ds = Datasette(metadata=metadata(con), settings={"sql_time_limit_ms": SQL_TIME_LIMIT_MS})
    ds.add_database(Database(ds, path=str(path), is_mutable=True), name=DB_NAME)
    browse_plugin.attach(ds, store.sql_engine, con, DB_NAME)
    return ds


async def check(ds: Any) -> None:
    """Start Datasette's plugins and run one query through them: a missing
    extension or function fails here, before the server says it is up. Then
    one recall outside any time limit: it loads the model, the calibration
    and the dictionary, which the first recall of a page would otherwise
    load within its query's ``SQL_TIME_LIMIT_MS``."""
    from marchdb.browse import plugin as browse_plugin

    await ds.invoke_startup()
    try:
        await ds.get_database(DB_NAME).execute("SELECT vec_version(), march_fts('x'), count(*) FROM memory_index")
    except Exception as exc:  # sqlite3 errors of whichever module Datasette uses
        raise IndexUnavailable(f"Datasette cannot read the index: {exc}") from None
    browse_plugin.warm_up(ds)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def cookie_name(port: int) -> str:
    """The cookie that holds the run's key (cookies do not tell ports apart:
    one per port, so two browse servers do not log each other out)."""
    return f"marchdb_browse_{port}"


def _origin(url: bytes) -> str | None:
    """``scheme://host[:port]`` of a URL header (None when it has none)."""
    parts = urllib.parse.urlsplit(url.decode("latin-1").strip())
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def _cookies(header: bytes) -> dict[str, str]:
    found: dict[str, str] = {}
    for piece in header.decode("latin-1").split(";"):
        name, eq, value = piece.strip().partition("=")
        if eq:
            found.setdefault(name, value)
    return found


def _proven(port: int, headers: dict[bytes, bytes]) -> bool:
    """Whether the request says it comes from this server's pages or from the
    user (``Sec-Fetch-Site`` same-origin or none, or an ``Origin`` or
    ``Referer`` of this server): what a page of another site cannot forge.
    A browser without Fetch Metadata (before 2023), a page that sends no
    Referer, a script: not proven. (``_refusal`` has refused the rest.)"""
    origins = {f"http://{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}
    site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
    origin = headers.get(b"origin")
    referer = headers.get(b"referer")
    return (
        site in ("same-origin", "none")
        or (origin is not None and _origin(origin) in origins)
        or (referer is not None and _origin(referer) in origins)
    )


def _refusal(port: int, key: str, headers: dict[bytes, bytes], method: str) -> tuple[int, str] | None:
    """Why a request is not answered (status, text), or None."""
    hosts = {f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}
    if headers.get(b"host", b"").decode("latin-1").lower() not in hosts:
        return 421, "marchdb browse answers requests for 127.0.0.1 and localhost only"
    if method not in ("GET", "HEAD"):
        return 405, "marchdb browse is read-only"
    origins = {f"http://{h}" for h in hosts}
    site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
    origin = headers.get(b"origin")
    referer = headers.get(b"referer")
    if (
        (site and site not in ("same-origin", "none"))
        or (origin is not None and _origin(origin) not in origins)
        or (referer is not None and _origin(referer) not in origins)
    ):
        return 403, (
            "marchdb browse answers its own pages only, not a request made by another site; "
            "open its address yourself (the one `marchdb browse` printed)"
        )
    given = _cookies(headers.get(b"cookie", b"")).get(cookie_name(port), "")
    if not secrets.compare_digest(given.encode(), key.encode()):
        return 403, (
            "this needs the key of this run of marchdb browse: open the address `marchdb browse` printed "
            f"(it ends in ?{KEY_PARAM}=...)"
        )
    return None


def guard(app: Any, port: int, key: str) -> Any:
    """``app`` answering only what ``_refusal`` lets through: bound to
    loopback, the server is still reachable from a web page (an ``<img>``,
    a form, DNS rebinding: evil.example resolving to 127.0.0.1) and from
    other users of this machine. A request whose query holds ``KEY_PARAM``
    equal to ``key`` (the printed address) gets the key as a cookie
    (HttpOnly, SameSite=Strict) and a redirect to the same address without
    it, so the key stays out of the page's links and the history."""

    async def guarded(scope, receive, send):
        if scope["type"] == "lifespan":  # the server's start and stop, not a request
            return await app(scope, receive, send)
        if scope["type"] != "http":
            # A WebSocket (uvicorn takes them when `websockets` is installed,
            # though `serve` asks it not to): Datasette has none, and nothing
            # may pass this guard unchecked. Closed before it is accepted: a 403.
            if scope["type"] == "websocket":
                await receive()  # websocket.connect
                await send({"type": "websocket.close", "code": 1008})
            return None
        headers = dict(scope.get("headers") or [])
        query = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        offered = [v for k, v in query if k == KEY_PARAM]
        offer_ok = bool(offered) and secrets.compare_digest(offered[-1].encode(), key.encode())
        if offer_ok:
            headers[b"cookie"] = f"{cookie_name(port)}={key}".encode()  # checked as the cookie will be
        why = _refusal(port, key, headers, scope.get("method", ""))
        if why is None and not offered and not _proven(port, headers):
            # The cookie comes with requests from every port of this machine
            # (cookies do not tell ports apart): without a word on where it
            # comes from, a request may be a page elsewhere timing answers.
            # It runs no SQL of its own and under a short limit.
            if any(k in SQL_PARAMS for k, _ in query):
                why = (
                    403,
                    (
                        "this browser does not say which page a request comes from (Fetch Metadata, every browser "
                        "since 2023), so marchdb browse runs no SQL of its own for it: use a current browser, the "
                        "SQL box of these pages, or `marchdb sql`"
                    ),
                )
            else:
                limited = [(k, v) for k, v in query if k != "_timelimit"] + [("_timelimit", str(KEYLESS_TIME_LIMIT_MS))]
                scope = {**scope, "query_string": urllib.parse.urlencode(limited).encode("latin-1")}
        if why is not None:
            await _send(send, why[0], [(b"content-type", b"text/plain; charset=utf-8")], why[1].encode() + b"\n")
            return None
        if offered:
            # The key leaves the address (the page's links, the history); a
            # table page would also take the parameter for a column filter.
            rest = urllib.parse.urlencode([(k, v) for k, v in query if k != KEY_PARAM])
            location = urllib.parse.quote(scope.get("path", "/")) + (f"?{rest}" if rest else "")
            out = [(b"location", location.encode())]
            if offer_ok:
                cookie = f"{cookie_name(port)}={key}; Path=/; HttpOnly; SameSite=Strict"
                out.append((b"set-cookie", cookie.encode()))
            await _send(send, 302, out, b"")
            return None
        return await app(scope, receive, send)

    return guarded


async def _send(send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve(store, port: int = 8001, say: Callable[[str], None] = print) -> None:
    """Bring the index up to date, then serve it on http://127.0.0.1:PORT
    until Ctrl-C."""
    require_datasette()
    import uvicorn

    if not _port_free(port):
        raise ConfigError(f"port {port} on {HOST} is in use; pass another one with --port")
    try:
        store.ensure_fresh()
    except ConfigError as exc:  # the memory root is away: the index can still be looked at
        say(f"note: {exc}; serving the index as it is")
    for note in store.take_notices():
        say(f"note: {note}")
    store.close_index()  # Datasette and the functions read through connections of their own
    ds = build(store)
    try:
        asyncio.run(check(ds))
        key = secrets.token_urlsafe(18)
        say(f"marchdb browse: http://{HOST}:{port}/{DB_NAME}?{KEY_PARAM}={key}  (read-only; Ctrl-C to stop)")
        # uvicorn ends on SIGTERM by raising it again once it has stopped: with
        # this handler that is an exit, and the vec0 copy in /tmp is removed
        # (atexit) instead of left behind at every `kill`.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        # ws="none": a WebSocket request is a plain HTTP one, which the guard checks.
        uvicorn.run(guard(ds.app(), port, key), host=HOST, port=port, log_level="warning", lifespan="on", ws="none")
    finally:
        from marchdb.browse import plugin as browse_plugin

        browse_plugin.detach(ds)
