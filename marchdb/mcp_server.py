"""``marchdb mcp``: the memory tools over MCP (stdio), for any MCP client.

One Store lives for the whole session, so the embedding model stays loaded
between calls; the index is kept fresh by a watcher thread (when the
platform's watcher works) and by the throttled dirty check before every
recall and open. Tool results are the library's data as JSON.
"""

from __future__ import annotations

import sys
import threading
from typing import Annotated, Any

from pydantic import Field

from . import tools
from .errors import MarchError


def build_server(store):
    """An MCPServer exposing marchdb's tools on ``store`` (``tools.call``)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="marchdb", instructions=tools.INSTRUCTIONS)

    # The SDK runs each call of a (sync) tool on a worker thread, so calls
    # may overlap; the store has one connection (its transactions and the
    # per-query SQL function of recall must not interleave): one at a time.
    one_at_a_time = threading.Lock()

    def call(op: str, /, **args: Any) -> dict:
        try:
            with one_at_a_time:
                return tools.call(store, op, args)
        except MarchError as exc:
            # A tool error the model can read and act on, not a crash.
            raise ToolError(str(exc)) from None

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
        project: Annotated[str | None, Field(description=tools.ARGS["project"])] = None,
    ) -> dict:
        return call("memory_recall", text=text, run_id=run_id, trigger=trigger, project=project)

    @server.tool(name="memory_context", description=tools.CONTEXT)
    def memory_context(
        text: Annotated[str | None, Field(description=tools.ARGS["context_text"])] = None,
        run_id: Annotated[str | None, Field(description=tools.ARGS["run_id"])] = None,
        project: Annotated[str | None, Field(description=tools.ARGS["project"])] = None,
    ) -> dict:
        return call("memory_context", text=text, run_id=run_id, project=project)

    return server


def serve(store, watch: bool = True) -> None:
    """Run the MCP server on stdio until the client disconnects."""
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
        build_server(store).run("stdio")
    finally:
        if watcher is not None:
            store.scan_in_background = None
            watcher.stop()
