"""``marchdb mcp``: the memory tools over MCP (stdio), for any MCP client.

One Store lives for the whole session, so the embedding model stays loaded
between calls; the index is kept fresh by a watcher thread (when the
platform's watcher works) and by the throttled dirty check before every
recall and open. Tool results are the library's data as JSON. Lines the
SDK cannot parse are answered with a JSON-RPC error (``mcp_wire``).

The process ends promptly when the client closes stdin (the SDK's client
sends SIGTERM after two seconds), on SIGINT and on SIGTERM: it waits for a
tool call in progress, then leaves with ``os._exit`` — freeing the model and
joining the watcher's threads at interpreter exit took one to three
seconds, and the index and the files are crash-safe by design.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Annotated, Any

from pydantic import Field

from . import tools
from .errors import MarchError

#: The SDK runs each call of a (sync) tool on a worker thread, so calls may
#: overlap; the store has one connection (its transactions and the per-query
#: SQL function of recall must not interleave): one at a time. Shutdown waits
#: for it too.
ONE_AT_A_TIME = threading.Lock()
#: Seconds a shutdown waits for a tool call in progress (a save) to finish.
SHUTDOWN_WAIT_SECONDS = 10.0


def build_server(store):
    """An MCPServer exposing marchdb's tools on ``store`` (``tools.call``)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="marchdb", instructions=tools.INSTRUCTIONS)

    def call(op: str, /, **args: Any) -> dict:
        try:
            with ONE_AT_A_TIME:
                return tools.call(store, op, args)
        except MarchError as exc:
            # A tool error the model can read and act on, not a crash.
            raise ToolError(str(exc)) from None
        except Exception as exc:
            apsw = sys.modules.get("apsw")
            if apsw is not None and isinstance(exc, apsw.Error):  # a full disk, a read-only index
                from .db import index_error

                raise ToolError(str(index_error(exc, store.cfg.index_path))) from None
            raise

    @server.tool(name="memory_search", description=tools.SEARCH)
    def memory_search(
        query: Annotated[str, Field(description=tools.ARGS["query"])],
        limit: Annotated[int, Field(description=tools.ARGS["limit"], ge=1, le=100)] = 10,
    ) -> dict:
        return call("memory_search", query=query, limit=limit)

    @server.tool(name="memory_open", description=tools.OPEN)
    def memory_open(id: Annotated[str, Field(description=tools.ARGS["id"])]) -> dict:
        return call("memory_open", id=id)

    @server.tool(name="memory_save", description=tools.SAVE)
    def memory_save(
        name: Annotated[str | None, Field(description=tools.ARGS["name"])] = None,
        description: Annotated[str | None, Field(description=tools.ARGS["description"])] = None,
        body: Annotated[str | None, Field(description=tools.ARGS["body"])] = None,
        tags: Annotated[list[str] | None, Field(description=tools.ARGS["tags"])] = None,
        id: Annotated[str | None, Field(description=tools.ARGS["save_id"])] = None,
        status: Annotated[str | None, Field(description=tools.ARGS["status"])] = None,
        force: Annotated[bool, Field(description=tools.ARGS["force"])] = False,
    ) -> dict:
        return call(
            "memory_save", id=id, name=name, description=description, body=body, tags=tags, status=status, force=force
        )

    @server.tool(name="memory_recall", description=tools.RECALL)
    def memory_recall(
        text: Annotated[str, Field(description=tools.ARGS["text"])],
        run_id: Annotated[str | None, Field(description=tools.ARGS["run_id"])] = None,
        trigger: Annotated[str, Field(description=tools.ARGS["trigger"])] = "user",
    ) -> dict:
        return call("memory_recall", text=text, run_id=run_id, trigger=trigger)

    @server.tool(name="memory_context", description=tools.CONTEXT)
    def memory_context(
        text: Annotated[str | None, Field(description=tools.ARGS["context_text"])] = None,
        run_id: Annotated[str | None, Field(description=tools.ARGS["run_id"])] = None,
    ) -> dict:
        return call("memory_context", text=text, run_id=run_id)

    return server


def serve(store, watch: bool = True, stop_watcher: bool = True) -> None:
    """Run the MCP server on stdio until the client disconnects.
    ``stop_watcher=False`` leaves the watcher's thread running at the end
    (the process is about to exit: ``main``)."""
    import anyio

    from . import mcp_wire

    # A session recalls many times: search the vectors in memory (vecindex).
    store.keep_vectors = True
    watcher = None
    if watch:
        from .watch import start_watcher

        watcher = start_watcher(store, log=lambda msg: print(f"marchdb: {msg}", file=sys.stderr))
        store.scan_in_background = watcher.request_scan
    try:
        # No sync before serving: the watcher thread does the start-up scan,
        # so a large first embedding run never delays the client's handshake.
        anyio.run(mcp_wire.serve, build_server(store))
    finally:
        if watcher is not None:
            store.scan_in_background = None
            if stop_watcher:
                watcher.stop()


def _leave(code: int) -> None:
    """End the process now, once a tool call in progress has finished."""
    finished = ONE_AT_A_TIME.acquire(timeout=SHUTDOWN_WAIT_SECONDS)
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(code if finished else 1)


def main(store, watch: bool = True) -> None:
    """``marchdb mcp``: serve until stdin closes, SIGINT or SIGTERM, then exit
    at once (see the module's doc). Never returns."""

    def on_signal(signum, _frame):
        _leave(128 + signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        # The watcher's thread and the model die with the process: a watcher
        # mid-scan is like a killed sync (the next scan repairs it), and
        # nothing it does touches the Markdown files.
        serve(store, watch=watch, stop_watcher=False)
    except Exception as exc:  # noqa: BLE001 - one line, then leave like any other end
        print(f"marchdb: the MCP server stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
        _leave(1)
    _leave(0)
