"""The agent-facing operations: their names, the words agents read, one data shape.

Seed 000 gives agents three active tools (``memory_search``, ``memory_open``,
``memory_save``) and passive recall (``memory_recall``, ``memory_context``);
seed 003 adds quick capture (``memory_log``).
Every front-end — the MCP server, the local daemon, hooks, the CLI's
``--json`` — offers them through ``call``, so each answers with the same
fields, and the descriptions an agent reads are written once, here.
"""

from __future__ import annotations

from typing import Any

from marchdb.errors import Conflict, NotFound

INSTRUCTIONS = (
    "Long-term memory stored as Markdown files. Use memory_recall (or the hints your host injects) "
    "to see what is remembered, memory_open(id) to read a memory, memory_search for literal text "
    "search over the files, memory_save to record something worth keeping, and memory_log for a quick "
    "note in today's daily log."
)

SEARCH = (
    "Full-text search of the Markdown memory files with ripgrep. This is literal text search "
    "over the files as they are on disk right now, NOT semantic recall: it finds only the words "
    "you type (case-insensitive; regex characters are plain text). Passive recall hints (id, "
    "score, name, description) reach you separately; use this tool when you want to look "
    "something up yourself. Several words match files holding ANY of them, ranked by how many "
    "of the words a file holds; put a phrase in double quotes to match it exactly. Try "
    "synonyms and other languages if nothing comes back. Each result gives the file path, the "
    "memory id, matching lines with line numbers and a few lines of context. Call "
    "memory_open(id) to read a whole memory. Deprecated and archived memories, and files that "
    "share their id with another file (a conflict memory_open reports), are not searched; pass "
    "include_archived=true to search archived memories too."
)

OPEN = (
    "Open one memory by its id and return its full Markdown (frontmatter and body). "
    "Recall hints and memory_search results give ids; call this when you need a memory's details. "
    "superseded_by lists newer memories that replace it (read those for what holds now). "
    "Returns status 'not_found' for an unknown id, and status 'conflict' with every file path when "
    "several files claim the same id (ask the user to fix them)."
)

SAVE = (
    "Create or update a Markdown memory file. To create one, pass name (a short human title), "
    "description (one sentence: the short text shown in passive recall hints, so say what the "
    "memory is about), body (the memory itself, Markdown) and tags (at least one: lowercase "
    "words, '/ - _ . + #' allowed, e.g. project/march-cli, cache, node.js). To update one, pass its id "
    "and only the fields to change: omitted fields keep their values, and tags, when given, "
    "replace all old tags. Set status to 'deprecated' to retire a memory; when a new memory replaces "
    "an older one whose facts changed, pass supersedes=[its id] so recall hints only the new one. If a memory with the "
    "same name already exists, nothing is written and you get its id: update that memory "
    "instead, or pass force=true if a second memory is really wanted. The index is refreshed "
    "before this returns. No description or tags at hand? memory_log appends a quick note to "
    "today's daily log instead."
)

LOG = (
    "Quick capture: append a timestamped note ('### HH:MM - title', then the text) to today's daily "
    "log, a memory of its own (id log_YYYY-MM-DD) whose description lists the day's titles, so recall "
    "can point at the day later. Use it for what happened, was done or decided today, when a name, "
    "description and tags would be too much; use memory_save for a lasting fact worth its own memory."
)

RECALL = (
    "Passive-recall hints for a message: the ids, scores, names and short descriptions of the stored "
    "memories most related to it (semantic + keyword match, calibrated so that 0.5 means 'clearly "
    "related'); never the bodies. Pass the same run_id for every call of one agent run so hints are "
    "not repeated; trigger is 'user' for the user's message, 'assistant' for your own output."
)

CONTEXT = (
    "The [agent_profile] and [user_profile] blocks (the user's standing preferences and how the agent "
    "should work) plus [recall] hints for a message, ready to put into a prompt."
)

#: What each argument means, for tool schemas (MCP) and help texts.
ARGS = {
    "query": "Words or a literal phrase to find in the memory files.",
    "limit": "Most files to return.",
    "id": "The memory id, e.g. mem_01hx_context_cache.",
    "save_id": "Id of the memory to update; omit to create a new one.",
    "name": "Short human-readable name (required for a new memory).",
    "description": "One-line summary shown in recall hints (required for a new memory).",
    "body": "The memory text in Markdown (required for a new memory).",
    "tags": "Tags; at least one for a new memory. Replaces all tags on update.",
    "status": "'active', 'deprecated' or 'archived' (both leave search and recall; archived ones "
    "stay searchable with include_archived).",
    "priority": "'high', 'normal' or 'low': a small ranking nudge in recall (never a filter); omit to keep it.",
    "supersedes": "Ids of older memories this one replaces (a fact that changed): recall stops hinting them "
    "while this one is active. [] removes the field; omit to keep it.",
    "include_archived": "Search archived memories too.",
    "title": "One line saying what happened (the entry's heading).",
    "log_text": "Details of the entry (optional).",
    "force": "Create even when a near-duplicate memory exists.",
    "text": "The user message or your own output.",
    "context_text": "The user message to recall for (optional).",
    "run_id": "Id of the current agent run (for de-duplication).",
    "conversation": "Id of the conversation or session the run belongs to: a memory hinted in its last 10 "
    "runs is not hinted again, while other conversations still get it.",
    "trigger": "'user' or 'assistant'.",
    "record_only": "Record what passes the threshold for this run without injecting it (the final answer at "
    "the end of a run, seed 000): nothing is hinted, and nothing is suppressed for later runs.",
    "project": "Name of the current project (e.g. the repository): memories tagged project/NAME rank a "
    "little higher. Never a filter.",
}


#: The operations ``call`` runs (and the warm engine answers).
OPERATIONS = ("memory_search", "memory_open", "memory_save", "memory_log", "memory_recall", "memory_context")


def call(store, name: str, args: dict[str, Any]) -> dict:
    """Run the operation ``name`` on ``store`` and return its data.

    ``memory_open`` answers a missing or conflicting id with data
    (``status`` ``not_found`` / ``conflict``) rather than an error, since an
    agent acts on it. Other refusals raise the usual ``MarchError``. Things
    the user should be told once (a rebuilt index, a model that cannot load)
    come back under ``notices``.
    """
    if name == "memory_search":
        data = store.search(
            args["query"], limit=args.get("limit", 10), include_archived=args.get("include_archived", False)
        )
    elif name == "memory_open":
        try:
            data = store.open(args["id"])
        except (NotFound, Conflict) as exc:
            data = exc.to_dict()
    elif name == "memory_save":
        data = store.save(**args)
    elif name == "memory_recall":
        data = store.recall(
            args["text"],
            run_id=args.get("run_id"),
            trigger=args.get("trigger", "user"),
            explain=args.get("explain", False),
            record_only=bool(args.get("record_only", False)),
            project=args.get("project"),
            conversation=args.get("conversation"),
        ).to_dict()
    elif name == "memory_log":
        data = store.log(args["title"], args.get("text"), embed=args.get("embed", True))
    elif name == "memory_context":
        data = store.context(
            args.get("text"),
            run_id=args.get("run_id"),
            project=args.get("project"),
            conversation=args.get("conversation"),
        )
    else:
        raise ValueError(f"unknown operation {name!r}")
    notices = store.take_notices()
    if notices:
        data["notices"] = notices
    return data
