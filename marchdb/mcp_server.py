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

from .errors import MarchError

OPEN_DESCRIPTION = (
    "Open one memory by its id and return its full Markdown (frontmatter and body). "
    "Recall hints and memory_search results give ids; call this when you need a memory's details. "
    "Returns status 'not_found' for an unknown id, and status 'conflict' with every file path when "
    "several files claim the same id (ask the user to fix them)."
)

RECALL_DESCRIPTION = (
    "Passive-recall hints for a message: the ids, scores, names and short descriptions of the stored "
    "memories most related to it (semantic + keyword match, calibrated so that 0.5 means 'clearly "
    "related'); never the bodies. Pass the same run_id for every call of one agent run so hints are "
    "not repeated; trigger is 'user' for the user's message, 'assistant' for your own output."
)

CONTEXT_DESCRIPTION = (
    "The [agent_profile] and [user_profile] blocks (the user's standing preferences and how the agent "
    "should work) plus [recall] hints for a message, ready to put into a prompt."
)


def build_server(store):
    """An MCPServer exposing marchdb's tools on ``store``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from .save import SAVE_TOOL_DESCRIPTION
    from .search import SEARCH_TOOL_DESCRIPTION

    server = MCPServer(
        name="marchdb",
        instructions=(
            "Long-term memory stored as Markdown files. Use memory_recall (or the hints your host injects) "
            "to see what is remembered, memory_open(id) to read a memory, memory_search for literal text "
            "search over the files, and memory_save to record something worth keeping."
        ),
    )

    # The SDK runs each call of a (sync) tool on a worker thread, so calls
    # may overlap; the store has one connection (its transactions and the
    # per-query SQL function of recall must not interleave): one at a time.
    one_at_a_time = threading.Lock()

    def guarded(fn, *args, **kwargs) -> Any:
        try:
            with one_at_a_time:
                return fn(*args, **kwargs)
        except MarchError as exc:
            # A tool error the model can read and act on, not a crash.
            raise ToolError(str(exc)) from None

    @server.tool(name="memory_search", description=SEARCH_TOOL_DESCRIPTION)
    def memory_search(
        query: Annotated[str, Field(description="Words or a literal phrase to find in the memory files.")],
        limit: Annotated[int, Field(description="Most files to return.", ge=1, le=100)] = 10,
    ) -> dict:
        return guarded(store.search, query, limit=limit)

    @server.tool(name="memory_open", description=OPEN_DESCRIPTION)
    def memory_open(id: Annotated[str, Field(description="The memory id, e.g. mem_01hx_context_cache.")]) -> dict:
        return guarded(store.open, id)

    @server.tool(name="memory_save", description=SAVE_TOOL_DESCRIPTION)
    def memory_save(
        name: Annotated[str | None, Field(description="Short human-readable name (required for a new memory).")] = None,
        description: Annotated[
            str | None, Field(description="One-line summary shown in recall hints (required for a new memory).")
        ] = None,
        body: Annotated[str | None, Field(description="The memory text in Markdown (required for a new memory).")] = None,
        tags: Annotated[
            list[str] | None, Field(description="Tags; at least one for a new memory. Replaces all tags on update.")
        ] = None,
        id: Annotated[str | None, Field(description="Id of the memory to update; omit to create a new one.")] = None,
        status: Annotated[
            str | None, Field(description="'active' or 'deprecated' (deprecated memories leave search and recall).")
        ] = None,
        force: Annotated[
            bool, Field(description="Create even when a near-duplicate memory exists.")
        ] = False,
    ) -> dict:
        return guarded(
            store.save, id=id, name=name, description=description, body=body, tags=tags, status=status, force=force
        )

    @server.tool(name="memory_recall", description=RECALL_DESCRIPTION)
    def memory_recall(
        text: Annotated[str, Field(description="The user message or your own output.")],
        run_id: Annotated[str | None, Field(description="Id of the current agent run (for de-duplication).")] = None,
        trigger: Annotated[str, Field(description="'user' or 'assistant'.")] = "user",
    ) -> dict:
        result = guarded(store.recall, text, run_id=run_id, trigger=trigger)
        data = {
            "hints": [h.to_dict() for h in result.hints],
            "text": "\n".join(h.line() for h in result.hints),
            "mode": result.mode,
        }
        if trigger == "assistant":
            data["display"] = [{"id": h.id, "score": round(h.score, 4), "name": h.name} for h in result.display]
        if result.warning:
            data["warning"] = result.warning
        return data

    @server.tool(name="memory_context", description=CONTEXT_DESCRIPTION)
    def memory_context(
        text: Annotated[str | None, Field(description="The user message to recall for (optional).")] = None,
        run_id: Annotated[str | None, Field(description="Id of the current agent run.")] = None,
    ) -> dict:
        return guarded(store.context, text, run_id=run_id)

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
