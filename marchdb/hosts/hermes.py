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

import json
import os
from pathlib import Path

from marchdb.hosts import claude_code

HOST = "hermes"
TITLE = "Hermes Agent"
DOCS = "hermes.md"
PROGRAM = {"pypi": "hermes-agent", "version": "0.19.0", "bin": "hermes/bin/hermes", "venv": "hermes"}
#: Hermes' calls of its memory provider, each sent as the Claude Code event it is.
EVENTS = {
    "system_prompt_block": "session_start",
    "prefetch": "prompt",
    "sync_turn": "stop",
    "on_pre_compress": "compact",
}
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

This file was written by `marchdb install`, removed by `marchdb uninstall`.
Each call runs marchdb (its warm engine answers in milliseconds); whatever
goes wrong, Hermes goes on without memory for that call.
"""

import json
import os
import re
import subprocess

from agent.memory_provider import MemoryProvider

MARCHDB = {command}
#: Hermes waits 8 s for prefetch; a call of marchdb gets less.
TIMEOUT = 7.0
TOOLS = {tools}
#: A hint line of a [recall] block: its memory's id.
HINT = re.compile(r"^- (\\S+) \\| score=", re.M)


def _present():
    # The program past "/usr/bin/env K=V...", and the file it runs when it is Python on marchdb's launcher.
    words = MARCHDB[1:] if os.path.basename(MARCHDB[0]) == "env" else MARCHDB
    while words and "=" in words[0]:
        words = words[1:]
    if not words or not os.access(words[0], os.X_OK):
        return False
    return words[1:3] != ["-I", "-S"] or os.path.isfile(words[3])


def _call(args, payload=""):
    """marchdb's exit code, stdout and stderr for ``args`` (None: it could not be run)."""
    if not _present():
        return None  # marchdb was removed: memory is off, Hermes runs on
    try:
        done = subprocess.run(MARCHDB + args, input=payload, capture_output=True, text=True, timeout=TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    return done


def _run(args, payload=""):
    done = _call(args, payload)
    return "" if done is None else done.stdout


class MarchdbMemoryProvider(MemoryProvider):
    """Profiles at a session's start, [recall] hints for each message, the tools to search and save."""

    def __init__(self):
        self._session = "unknown"
        self._cwd = os.getcwd()
        self._primary = True
        self._tools = None
        self._hinted = []  # ids of the memories hinted in this session, in order

    @property
    def name(self):
        return "marchdb"

    def is_available(self):
        return _present()

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
        block = self._hook("UserPromptSubmit", prompt=query)
        self._hinted += HINT.findall(block)
        return block

    def sync_turn(self, user_content, assistant_content, *, session_id="", messages=None):
        if self._primary and assistant_content:
            self._hook("Stop", last_assistant_message=assistant_content)

    def on_pre_compress(self, messages):
        # Hermes keeps its first messages whole: hints there stay in the context, and are
        # not hinted again; those in the messages it summarizes may be.
        gone = set()
        for message in messages or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                content = "\\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            gone.update(HINT.findall(content if isinstance(content, str) else ""))
        kept = [i for i in dict.fromkeys(self._hinted) if i not in gone]
        self._hinted = kept
        self._hook("PreCompact", keep=kept)
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
        if tool_name not in TOOLS:  # never a word of marchdb's command line ("--help")
            return json.dumps({{"error": f"marchdb has no tool {{tool_name!r}}; its tools: {{', '.join(TOOLS)}}"}})
        done = _call(["call", tool_name, "-"], json.dumps(args if isinstance(args, dict) else {{}}))
        if done is None:
            return json.dumps({{"error": "marchdb did not answer; see `marchdb doctor`"}})
        if done.returncode != 0:  # a refusal: marchdb said why (a missing id, a bad argument)
            said = done.stderr.strip().removeprefix("error: ")
            return json.dumps({{"error": said or f"marchdb refused the call (exit {{done.returncode}})"}})
        return done.stdout.strip() or json.dumps({{"error": "marchdb did not answer; see `marchdb doctor`"}})


def register(ctx):
    ctx.register_memory_provider(MarchdbMemoryProvider())
'''


def provider_source(command: list[str]) -> str:
    """The plugin's ``__init__.py`` for this installation's ``command`` (argv)."""
    return PROVIDER.format(command=repr(command), tools=repr(TOOLS))


#: The plugin's ``plugin.yaml`` (how Hermes names it).
PLUGIN_YAML = (
    "name: marchdb\ndescription: marchdb memory (Markdown files, one SQLite index)\n"
    "# written by `marchdb install`, removed by `marchdb uninstall`\n"
)


def home() -> Path:
    """``$HERMES_HOME`` (``~/.hermes``)."""
    return Path(os.environ.get("HERMES_HOME") or "~/.hermes").expanduser().absolute()


def installer():
    """A plugin folder, ``$HERMES_HOME/plugins/marchdb/`` (Hermes has no
    project settings), and the one setting that chooses it."""
    from marchdb.hosts.hookfiles import Plugin

    def files(argv: list[str], env: dict[str, str]) -> dict[str, bytes]:
        command = [*argv] if not env else ["/usr/bin/env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]
        return {"__init__.py": provider_source(command).encode(), "plugin.yaml": PLUGIN_YAML.encode()}

    def unconfigure(folder: Path, project: Path | None) -> tuple[str, ...]:
        return (
            "Hermes still names marchdb as its memory provider: `hermes config set memory.provider builtin` "
            "(or another) chooses another",
        )

    return Plugin(
        HOST,
        ("memory provider",),
        lambda: home() / "plugins" / "marchdb",
        None,
        files,
        own_folder=True,
        configure=lambda folder, project: _choose_hermes_provider(),
        unconfigure=unconfigure,
        user_base=lambda: home() if os.environ.get("HERMES_HOME") else Path.home(),
        project_scope=False,
    )


def sample_prompt(session: str, text: str) -> str:
    """What the provider sends for a prefetch (Claude Code's event)."""
    return json.dumps({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": text, "cwd": "/tmp"})


def _choose_hermes_provider() -> tuple[str, ...]:
    import shutil
    import subprocess

    hermes = shutil.which("hermes")
    line = "hermes config set memory.provider marchdb"
    if hermes is None:
        return (f"Hermes is not on PATH here: run `{line}` where it is (the one line that chooses marchdb)",)
    try:
        done = subprocess.run([hermes, "config", "set", "memory.provider", "marchdb"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return (f"could not run `{line}` ({exc}); run it yourself",)
    if done.returncode != 0:
        return (f"`{line}` failed ({done.stderr.decode(errors='replace').strip()[:200]}); run it yourself",)
    return (f"ran `{line}`",)
