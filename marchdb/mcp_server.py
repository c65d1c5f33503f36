"""``marchdb mcp``: the memory tools over MCP (stdio), for any MCP client.

A thin front over the warm engine (``marchdb serve``) of its home, started
when none runs: the model, the vectors and the watcher live there once, for
this session, the hooks and the CLI alike, instead of a second copy in every
MCP session. When the engine cannot be used (``daemonAutoStart`` off and none
running, or it serves another root) the server holds its own Store: the
model stays loaded between calls and a watcher thread plus the throttled
dirty check keep the index fresh. Tool results are ``tools.call``'s data.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from . import tools
from .errors import MarchError, remote_error


def build_server(run: Callable[[str, dict], dict]):
    """An MCPServer exposing marchdb's tools; ``run(op, args)`` answers them
    (``tools.call`` on a Store, or the warm engine)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="marchdb", instructions=tools.INSTRUCTIONS)

    # The SDK runs each call of a (sync) tool on a worker thread, so calls
    # may overlap; a store has one connection (its transactions and the
    # per-query SQL function of recall must not interleave): one at a time.
    one_at_a_time = threading.Lock()

    def call(op: str, /, **args: Any) -> dict:
        try:
            with one_at_a_time:
                return run(op, args)
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
    ) -> dict:
        return call("memory_recall", text=text, run_id=run_id, trigger=trigger)

    @server.tool(name="memory_context", description=tools.CONTEXT)
    def memory_context(
        text: Annotated[str | None, Field(description=tools.ARGS["context_text"])] = None,
        run_id: Annotated[str | None, Field(description=tools.ARGS["run_id"])] = None,
    ) -> dict:
        return call("memory_context", text=text, run_id=run_id)

    return server


class _Local:
    """The server's own Store, used when the warm engine cannot serve it."""

    def __init__(self, make_store: Callable[[], Any], watch: bool):
        self.make_store, self.watch = make_store, watch
        self.store: Any = None
        self.watcher: Any = None

    def __call__(self, op: str, args: dict) -> dict:
        if self.store is None:
            self.store = self.make_store()
            # A session recalls many times: search the vectors in memory (vecindex).
            self.store.keep_vectors = True
            if self.watch:
                from .watch import start_watcher

                self.store.embedder()  # loaded once, shared with the watcher's thread

                # No sync before serving: the watcher thread does the start-up
                # scan, so a large first embedding run never delays the client.
                self.watcher = start_watcher(self.store, log=lambda msg: print(f"marchdb: {msg}", file=sys.stderr))
                self.store.scan_in_background = self.watcher.request_scan
        return tools.call(self.store, op, args)

    def close(self) -> None:
        if self.watcher is not None:
            self.store.scan_in_background = None
            self.watcher.stop()
        if self.store is not None:
            self.store.close()


def serve(cfg, make_store: Callable[[], Any], watch: bool = True, use_engine: bool = True) -> None:
    """Run the MCP server on stdio until the client disconnects: through the
    warm engine of ``cfg.home`` when ``use_engine`` (falling back to a Store
    of its own, made by ``make_store``, whenever the engine cannot answer)."""
    from . import client

    local = _Local(make_store, watch)
    if use_engine and (cfg.daemon_autostart or client.engine_alive(cfg.home)):

        def run(op: str, args: dict) -> dict:
            if local.store is None:
                try:
                    return client.call(cfg, op, args, autostart=cfg.daemon_autostart, wait=60.0)
                except client.RemoteError as exc:
                    raise remote_error(exc.kind, str(exc), exc.exit_code) from None
                except client.Unavailable as exc:
                    print(f"marchdb: the warm engine cannot answer ({exc}); serving from this process", file=sys.stderr)
            return local(op, args)

    else:
        run = local
    try:
        build_server(run).run("stdio")
    finally:
        local.close()
