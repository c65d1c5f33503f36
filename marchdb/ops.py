"""The operations an agent, a host or a person asks of marchdb, declared once.

Each ``Operation`` names its parameters (type, default, bounds, help; both
classes are in ``params``) and the ``Store`` method that does the work.
Everything else is read off this table:

* ``call`` checks the arguments here, once, then runs the method, for every
  front-end alike (the engine's dispatch, the MCP server, the CLI in-process);
* the MCP server builds its tool schemas and its prompts from it (``mcp.server``);
* the CLI builds each command's options from it (``cli.app.op_command``),
  and so does the quick path that answers ``recall`` / ``context`` without
  the CLI framework (``cli.entry``) and the ``hook generic`` parser.

A new argument is a ``Param`` here and a keyword of the ``Store`` method.

Seed 000 gives agents three active tools (``memory_search``, ``memory_open``,
``memory_save``) and passive recall (``memory_recall``, ``memory_context``);
seed 003 adds quick capture (``memory_log``) and the working page
(``memory_now``) and reflection (``memory_reflect``, an MCP prompt), seed 004
one-liners (``memory_remember``, for the shell and the API). ``memory_hook`` is a host's
event, translated from the host's JSON by ``hosts``. Only the standard
library: a hook imports this module.
"""

from __future__ import annotations

import functools

from marchdb.errors import Conflict, InvalidInput, NotFound
from marchdb.params import KINDS, Operation, Param, shown

#: Longest memory id (``notes.MAX_ID_LEN``, which a test holds equal).
MAX_ID_CHARS = 128

__all__ = ["KINDS", "Operation", "Param", "call", "checks", "get"]

# ---------------------------------------------------------------- the words agents read

INSTRUCTIONS = (
    "Long-term memory stored as Markdown files. Use memory_recall (or the hints your host injects) "
    "to see what is remembered, memory_open(id) to read a memory, memory_search for literal text "
    "search over the files, memory_save to record something worth keeping, memory_log for a quick "
    "note in today's daily log, and memory_now for the short page of what you are doing now."
)

#: The longest text a message argument may be (recall reads its first 4,000 characters).
MAX_MESSAGE_CHARS = 4 * 1024 * 1024
#: The longest working page (``now``): a few lines, injected into every session.
MAX_NOW_CHARS = 2000

#: Parameters several operations share, spelt once.
RUN_ID = Param(
    "run_id",
    "str",
    "Id of the current agent run (for de-duplication).",
    flag="--run",
    max_chars=200,
    hook=True,
    nonblank=True,
    one_line=True,
)
PROJECT = Param(
    "project",
    "str",
    "Name of the current project (e.g. the repository): memories tagged project/NAME rank a little higher. "
    "Never a filter.",
    flag="--project",
    max_chars=200,
    hook=True,
    one_line=True,
)
CONVERSATION = Param(
    "conversation",
    "str",
    "Id of the conversation or session the run belongs to: a memory hinted in its last 10 runs is not hinted "
    "again, while other conversations still get it.",
    flag="--conversation",
    max_chars=200,
    hook=True,
    nonblank=True,
    one_line=True,
)
TRIGGER = Param(
    "trigger",
    "str",
    "'user' for the user's message, 'assistant' for your own output.",
    "user",
    choices=("user", "assistant"),
    flag="--trigger",
    hook=True,
)
CWD = Param(
    "cwd",
    "str",
    "The folder the agent works in: it names the project when none is given, and a project's switches "
    "apply there (the MCP server passes its own).",
    max_chars=4096,
    mcp=False,
)
RECORD_ONLY = Param(
    "record_only",
    "bool",
    "Record what passes the threshold for this run without injecting it (the final answer at the end of a "
    "run): nothing is hinted, and nothing is suppressed for later runs.",
    False,
    flag="--record-only",
    hook=True,
)

SEARCH = Operation(
    "memory_search",
    command="search",
    summary="memory_search: ripgrep full-text search of the memory files (not semantic).",
    description=(
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
    ),
    params=(
        Param("query", "str", "Words or a literal phrase to find in the memory files.", required=True, flag=""),
        Param("limit", "int", "Most files to return.", 10, low=1, high=100, flag="--limit", short="-n"),
        Param("include_archived", "bool", "Search archived memories too.", False, flag="--archived"),
    ),
    method="search",
    as_written=("results.matches",),
)

OPEN = Operation(
    "memory_open",
    command="open",
    summary="Print a memory's Markdown by id (exit 5: no such id, 6: several files hold it).",
    description=(
        "Open one memory by its id and return its full Markdown (frontmatter and body). "
        "Recall hints and memory_search results give ids; call this when you need a memory's details. "
        "superseded_by lists newer memories that replace it (read those for what holds now). "
        "Returns status 'not_found' for an unknown id, and status 'conflict' with every file path when "
        "several files claim the same id (ask the user to fix them)."
    ),
    params=(
        Param(
            "id",
            "str",
            "The memory id, e.g. mem_01hx_context_cache.",
            required=True,
            flag="",
            metavar="ID",
            nonblank=True,
            max_chars=MAX_ID_CHARS,
        ),
    ),
    method="open",
    as_written=("markdown",),
    errors_as_data=(NotFound, Conflict),
)

SAVE = Operation(
    "memory_save",
    command="save",
    summary="memory_save: create or update a memory (new ones need name, description, body, a tag).",
    description=(
        "Create or update a Markdown memory file. To create one, pass name (a short human title), "
        "description (one sentence: the short text shown in passive recall hints, so say what the "
        "memory is about), body (the memory itself, Markdown) and tags (at least one: lowercase "
        "words, '/ - _ . + #' allowed, e.g. project/march-cli, cache, node.js). To update one, pass its id "
        "and only the fields to change: omitted fields keep their values, and tags, when given, "
        "replace all old tags. Set status to 'deprecated' to retire a memory; when a new memory replaces "
        "an older one whose facts changed, pass supersedes=[its id] so recall hints only the new one. If a "
        "memory with the same name already exists, nothing is written and you get its id: update that memory "
        "instead, or pass force=true if a second memory is really wanted. The index is refreshed before this "
        "returns. A created memory's answer lists "
        "related: active memories on the same subject (id, name, description, why). Read them: if the new "
        "one replaces one (a fact changed), save again with id=<new id> and supersedes=[its id]; if it only "
        "adds to one, put it into that one (update it by id) and set the new one's status to deprecated; if "
        "they contradict and you cannot tell which holds, save again with conflicts_with=[its id] so a person "
        "decides; otherwise keep both. No description or tags at hand? memory_log appends a quick note to "
        "today's daily log instead."
    ),
    params=(
        Param("id", "str", "Id of the memory to update; omit to create a new one.", flag="--id"),
        Param("name", "str", "Short human-readable name (required for a new memory).", flag="--name"),
        Param(
            "description",
            "str",
            "One-line summary shown in recall hints (required for a new memory).",
            flag="--description",
            short="-d",
        ),
        Param(
            "body",
            "str",
            "The memory text in Markdown (required for a new memory); on the CLI '-' or piped stdin reads stdin.",
            flag="--body",
        ),
        Param(
            "tags",
            "strs",
            "Tags; at least one for a new memory. Replaces all tags on update (the CLI's --tag is repeatable).",
            flag="--tag",
            short="-t",
        ),
        Param(
            "status",
            "str",
            "'active', 'deprecated' or 'archived' (both leave search and recall; archived ones stay searchable "
            "with include_archived).",
            flag="--status",
        ),
        Param(
            "priority",
            "str",
            "'high', 'normal' or 'low': a small ranking nudge in recall (never a filter); omit to keep it.",
            flag="--priority",
        ),
        Param(
            "supersedes",
            "strs",
            "Ids of older memories this one replaces (a fact that changed): recall stops hinting them while this "
            "one is active. [] removes the field (the CLI: --supersedes ''); omit to keep it.",
            flag="--supersedes",
        ),
        Param(
            "conflicts_with",
            "strs",
            "Ids of memories this one contradicts when you cannot tell which holds: both are kept, marked for a "
            "person to decide, and said when recall hints either. [] removes the field; omit to keep it.",
            flag="--conflicts-with",
        ),
        Param("force", "bool", "Create even when a near-duplicate memory exists.", False, flag="--force"),
        Param("embed", "bool", "Compute the new vectors now (False: the next sync does).", True, mcp=False),
    ),
    method="save",
    writes=True,
)

LOG = Operation(
    "memory_log",
    command="log",
    summary="Quick capture: append '### HH:MM - title' and the text to today's daily log.",
    description=(
        "Quick capture: append a timestamped note ('### HH:MM - title', then the text) to today's daily "
        "log, a memory of its own (id log_YYYY-MM-DD) whose description lists the day's titles, so recall "
        "can point at the day later. Use it for what happened, was done or decided today, when a name, "
        "description and tags would be too much; use memory_save for a lasting fact worth its own memory."
    ),
    params=(
        Param("title", "str", "One line saying what happened (the entry's heading).", required=True, flag=""),
        Param(
            "text",
            "str",
            "Details of the entry (optional); on the CLI '-' or piped stdin reads stdin.",
            flag="",
        ),
        Param(
            "embed",
            "bool",
            "Embed the entry now (loads the model when no engine runs); otherwise the next sync or recall does.",
            True,
            flag="--embed",
            mcp=False,
            cli_default=False,
        ),
    ),
    method="log",
    writes=True,
)

REMEMBER = Operation(
    "memory_remember",
    command="remember",
    summary="A memory from one sentence: name and description made from it, with save's checks.",
    description=(
        "Remember one sentence as a memory of its own (a quick retain): its description is the sentence, its "
        "name the sentence's subject or first words, its body the text; tags as given (else 'note'). The same "
        "checks and answer as memory_save: a near-duplicate writes nothing and names it, and a created memory "
        "lists related ones."
    ),
    params=(
        Param("text", "str", "The sentence to remember (at most 1,000 characters).", required=True, flag=""),
        Param(
            "tags", "strs", "Tags (the CLI's --tag is repeatable); 'note' when none is given.", flag="--tag", short="-t"
        ),
        Param("force", "bool", "Create even when a near-duplicate memory exists.", False, flag="--force"),
        Param("embed", "bool", "Compute the new vectors now (False: the next sync does).", True, mcp=False),
    ),
    method="remember",
    writes=True,
    # The shell's and the API's: agents on MCP write a name and a description of their own
    # (memory_save), which make better hints, or a quick note (memory_log).
    mcp=False,
)

NOW = Operation(
    "memory_now",
    command="now",
    summary="The working page: what is being done now and where it is stuck (no TEXT: print it).",
    description=(
        "The working page (a NOW.md of the agent's): one short page of what you are doing now, what comes next and "
        "where you are stuck, overwritten as the work moves on. It is not a memory (never searched nor hinted): "
        "hosts show it beside the profiles at a session's start as [now], with its age, and an old page as "
        "stale. Pass text to replace the whole page (a few lines), clear=true to empty it when the work is done, "
        "nothing to read it. Lasting facts go to memory_save, what happened to memory_log."
    ),
    params=(
        Param(
            "text",
            "str",
            "The new page, replacing the old one whole; on the CLI '-' or piped stdin reads stdin.",
            flag="",
            max_chars=MAX_NOW_CHARS,
        ),
        Param("clear", "bool", "Empty the page.", False, flag="--clear"),
    ),
    method="now",
    as_written=("block",),
    writes=True,
)

REFLECT = Operation(
    "memory_reflect",
    command="reflect",
    summary="The day's log (or a range) with routing rules, for your agent's model to keep what lasts.",
    description=(
        "Reflect on the day's log (or a range of days): hands you the daily logs and the routing rules "
        "(decision, lesson, person, project, preference, log only, nothing) so that you write what lasts as "
        "memories of their own with memory_save (updating, superseding or marking conflicts_with), and refresh "
        "the working page."
    ),
    params=(
        Param("date", "str", "The day: YYYY-MM-DD, 'today' (the default) or 'yesterday'.", flag="--date", max_chars=40),
        Param(
            "since",
            "str",
            "The first day of a range (YYYY-MM-DD or 'yesterday'), instead of date.",
            flag="--since",
            max_chars=40,
        ),
        Param(
            "until", "str", "The last day of the range (default today; at most 31 days).", flag="--until", max_chars=40
        ),
    ),
    method="reflect",
    as_written=("text",),
    # Not a tool: an MCP prompt, which hands its text to the model as a message (mcp.server).
    mcp=False,
    prompt=True,
)

RECALL = Operation(
    "memory_recall",
    command="recall",
    summary="Passive recall hints for a message (id, score, name, short description).",
    description=(
        "Passive-recall hints for a message: the ids, scores, names and short descriptions of the stored "
        "memories most related to it (semantic + keyword match, calibrated so that 0.5 means 'clearly "
        "related'); never the bodies. Pass the same run_id for every call of one agent run so hints are "
        "not repeated; trigger is 'user' for the user's message, 'assistant' for your own output."
    ),
    params=(
        Param(
            "text",
            "str",
            "The user message or your own output.",
            required=True,
            flag="",
            max_chars=MAX_MESSAGE_CHARS,
        ),
        RUN_ID,
        TRIGGER,
        Param(
            "explain",
            "bool",
            "Show every candidate, its signals and why it was cut.",
            False,
            flag="--explain",
            mcp=False,
        ),
        PROJECT,
        CONVERSATION,
        RECORD_ONLY,
        CWD,
    ),
    method="recall",
)

CONTEXT = Operation(
    "memory_context",
    command="context",
    summary="The profiles plus recall hints, ready to put into a prompt.",
    description=(
        "The [agent_profile] and [user_profile] blocks (the user's standing preferences and how the agent "
        "should work) plus [recall] hints for a message, ready to put into a prompt."
    ),
    params=(
        Param("text", "str", "The user message to recall for (optional).", flag="", max_chars=MAX_MESSAGE_CHARS),
        RUN_ID,
        PROJECT,
        CONVERSATION,
        CWD,
    ),
    method="context",
    as_written=("text",),
)

HOOK = Operation(
    "memory_hook",
    command=None,
    summary="One event of an agent host, as the host adapters translate it (hosts/).",
    description=(
        "What a host injects for one of its events: the profiles at a session's start, the [recall] block for "
        "a prompt, nothing (only a record) at a run's end."
    ),
    params=(
        Param(
            "event",
            "str",
            "What happened: a session started (or restarted after /clear or a compaction), a prompt was "
            "submitted, a tool ran in the middle of a run, a run ended, the context is about to be compacted, "
            "or a plain message (the generic hook).",
            required=True,
            choices=("session_start", "prompt", "tool", "stop", "compact", "message"),
        ),
        Param("source", "str", "Why a session started: startup, resume, clear or compact.", max_chars=40),
        Param("host", "str", "The host whose event this is (for the hook log).", "generic", max_chars=40),
        Param("session", "str", "The host's session id (runs are numbered within it).", max_chars=100_000),
        Param(
            "text",
            "str",
            "The prompt; the assistant's latest text for a tool event; the reply at a run's end.",
            max_chars=MAX_MESSAGE_CHARS,
        ),
        Param("cwd", "str", "The host's working directory (names the project).", max_chars=4096),
        Param(
            "keep",
            "strs",
            "At a compaction: ids of memories whose hints the host's context still holds (Hermes keeps its "
            "first messages whole): the new window counts them as hinted.",
        ),
        RUN_ID,
        TRIGGER,
        RECORD_ONLY,
        Param("profiles", "bool", "Put the profile blocks first.", False, flag="--profiles", hook=True),
        PROJECT,
        CONVERSATION,
    ),
    method="hook",
    as_written=("context",),
    mcp=False,
)

#: Every operation, by name, in the order help and tool lists show them.
OPERATIONS: dict[str, Operation] = {
    op.name: op for op in (SEARCH, OPEN, SAVE, REMEMBER, LOG, NOW, REFLECT, RECALL, CONTEXT, HOOK)
}
#: Operations that change the vault: never run twice (``engine.client``).
WRITE_OPERATIONS = frozenset(op.name for op in OPERATIONS.values() if op.writes)


_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def json_schema(op: Operation) -> dict:
    """The JSON schema of the arguments agents may pass to ``op`` (the ones
    with ``mcp``): for hosts that take tools as JSON schemas (Hermes)."""
    properties: dict[str, dict] = {}
    for p in op.params:
        if not p.mcp:
            continue
        if p.kind == "strs":
            prop: dict = {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]}
        else:
            prop = {"type": _JSON_TYPES[p.kind]}
        if p.choices is not None:
            prop["enum"] = list(p.choices)
        prop.update(p.bounds())
        if not p.required and p.default is not None:
            prop["default"] = p.default
        properties[p.name] = {"description": p.help, **prop}
    return {
        "type": "object",
        "properties": properties,
        "required": [p.name for p in op.params if p.mcp and p.required],
        "additionalProperties": False,
    }


def tools() -> list[dict]:
    """Every operation agents may call, as ``{"name", "description", "parameters"}``
    (OpenAI's function form, which Hermes takes)."""
    return [
        {"name": op.name, "description": op.description, "parameters": json_schema(op)}
        for op in OPERATIONS.values()
        if op.mcp
    ]


def get(name: object) -> Operation:
    """The operation called ``name`` (``InvalidInput`` for any other)."""
    op = OPERATIONS.get(name) if isinstance(name, str) else None
    if op is None:
        raise InvalidInput(f"unknown operation {shown(name)}; marchdb answers {', '.join(OPERATIONS)}")
    return op


def call(store, name: str, args: object) -> dict:
    """Run the operation ``name`` on ``store`` with ``args`` (checked here
    first) and return its data, the same for every front-end.

    An operation's ``errors_as_data`` come back as data (``memory_open``'s
    ``status`` ``not_found`` / ``conflict``: an agent acts on them). Other
    refusals raise the usual ``MarchError``. Things the user should be told
    once (a rebuilt index, a model that cannot load) come back under
    ``notices``. Every text of the answer is as a model may read it
    (``modeltext.for_model``), but the operation's ``as_written`` keys.
    """
    op = get(name)
    checked = op.checked(args)
    try:
        result = getattr(store, op.method)(**checked)
    except op.errors_as_data as exc:
        result = exc.to_dict()  # type: ignore[attr-defined]
    data = result.to_dict() if hasattr(result, "to_dict") else result
    notices = store.take_notices()
    if notices:
        data["notices"] = notices
    from marchdb.modeltext import answer_for_model  # the one rule for what reaches a model

    return answer_for_model(data, op.as_written)  # type: ignore[return-value]


def checks(name: str):
    """Decorate the ``Store`` method that is the operation ``name``: the
    arguments it is given (by keyword or in order) are checked against the
    table first, so the Python API refuses what the CLI, the engine and the
    MCP server refuse, with the same words. Arguments the table does not
    declare (``threshold``) are the method's own to check."""
    op = OPERATIONS[name]
    declared = {p.name: p for p in op.params}

    def decorate(fn):
        code = fn.__code__
        names = code.co_varnames[1 : code.co_argcount]  # after self

        @functools.wraps(fn)
        def checked(self, *args, **kwargs):
            kwargs.update(zip(names, args))
            for key, value in kwargs.items():
                param = declared.get(key)
                if param is not None:
                    kwargs[key] = param.check(value, op.name)
            return fn(self, **kwargs)

        return checked

    return decorate
