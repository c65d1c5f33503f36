"""Hermes Agent (PyPI ``hermes-agent``): marchdb as its memory provider.

Hermes takes one external memory provider, found as a folder under
``$HERMES_HOME/plugins/<name>/`` and chosen by one line of its
``config.yaml`` (``memory: {provider: marchdb}``). ``marchdb install hermes``
writes that folder: a small ``MemoryProvider`` (``PROVIDER`` below) that runs
this installation's ``marchdb`` for each call, so that Hermes' Python and
marchdb's never share a process:

* ``system_prompt_block`` (once a session) → ``marchdb hook hermes`` with a
  session start: the profiles;
* ``prefetch(query)`` (each user message) → a prompt: the ``[recall]`` block
  (Hermes puts it beside the message, inside its ``<memory-context>``);
* ``sync_turn`` (each finished turn) → the run's end: the reply is recorded;
* ``on_pre_compress`` → the session's 10-run window starts afresh;
* ``get_tool_schemas`` / ``handle_tool_call`` → ``marchdb tools`` and
  ``marchdb call``: memory_search, memory_open, memory_save (Hermes'
  "retain"), memory_log.

The events use Claude Code's JSON (``hosts.claude_code``), so this module
only says how the answer reads: the plain context text.
"""

from __future__ import annotations

from marchdb.hosts import claude_code

HOST = "hermes"
#: The operations Hermes' model gets as tools (recall reaches it by itself, through prefetch).
TOOLS = ("memory_search", "memory_open", "memory_save", "memory_log")


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one call of the provider (Claude Code's JSON)."""
    return claude_code.parse(raw, options, host=HOST)


def render(args: dict, data: dict) -> str:
    """The text Hermes injects (nothing for a run's end or a compaction)."""
    if args["event"] in ("stop", "compact"):
        return ""
    return str(data.get("context") or "")


#: The provider ``marchdb install hermes`` writes as the plugin's ``__init__.py``
#: (``{command}``: this installation's marchdb, as a Python list). Hermes finds
#: it by the word MemoryProvider in its first lines, and imports only the
#: standard library and Hermes' own base class.
PROVIDER = '''"""marchdb as Hermes' memory provider (MemoryProvider).

Written by `marchdb install hermes`; `marchdb uninstall hermes` removes it.
Each call runs marchdb (its warm engine answers in milliseconds); whatever
goes wrong, Hermes goes on without memory for that call.
"""

import json
import os
import subprocess

from agent.memory_provider import MemoryProvider

MARCHDB = {command}
#: Hermes waits 8 s for prefetch; a call of marchdb gets less.
TIMEOUT = 7.0
TOOLS = {tools}


def _run(args, payload=""):
    if not os.access(MARCHDB[0], os.X_OK):
        return ""  # marchdb was removed: memory is off, Hermes runs on
    try:
        done = subprocess.run(MARCHDB + args, input=payload, capture_output=True, text=True, timeout=TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


class MarchdbMemoryProvider(MemoryProvider):
    """Profiles at a session's start, [recall] hints for each message, the tools to search and save."""

    def __init__(self):
        self._session = "unknown"
        self._cwd = os.getcwd()
        self._primary = True
        self._tools = None

    @property
    def name(self):
        return "marchdb"

    def is_available(self):
        return os.access(MARCHDB[0], os.X_OK)

    def initialize(self, session_id, **kwargs):
        self._session = session_id or "unknown"
        # Subagents, cron runs and flushes read memory; only the primary agent's turns are recorded.
        self._primary = kwargs.get("agent_context", "primary") == "primary"

    def _hook(self, event, **fields):
        payload = json.dumps({{"hook_event_name": event, "session_id": self._session, "cwd": self._cwd, **fields}})
        return _run(["hook", "hermes"], payload).strip()

    def system_prompt_block(self):
        return self._hook("SessionStart", source="startup")

    def prefetch(self, query, *, session_id=""):
        return self._hook("UserPromptSubmit", prompt=query)

    def sync_turn(self, user_content, assistant_content, *, session_id="", messages=None):
        if self._primary and assistant_content:
            self._hook("Stop", last_assistant_message=assistant_content)

    def on_pre_compress(self, messages):
        self._hook("PreCompact")
        return ""

    def on_session_switch(self, new_session_id, *, parent_session_id="", reset=False, rewound=False, **kwargs):
        self._session = new_session_id or self._session

    def get_tool_schemas(self):
        if self._tools is None:
            try:
                found = json.loads(_run(["tools"]) or "{{}}").get("tools", [])
            except ValueError:
                found = []
            self._tools = [t for t in found if t.get("name") in TOOLS]
        return self._tools

    def handle_tool_call(self, tool_name, args, **kwargs):
        out = _run(["call", tool_name, "-"], json.dumps(args))
        return out.strip() or json.dumps({{"error": "marchdb did not answer; see `marchdb doctor`"}})


def register(ctx):
    ctx.register_memory_provider(MarchdbMemoryProvider())
'''


def provider_source(command: list[str]) -> str:
    """The plugin's ``__init__.py`` for this installation's ``command`` (argv)."""
    return PROVIDER.format(command=repr(command), tools=repr(TOOLS))
