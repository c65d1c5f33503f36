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

import os
from pathlib import Path
from typing import TYPE_CHECKING

from marchdb.hosts import claude_code

if TYPE_CHECKING:
    from marchdb.hosts.settings import InstallResult

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


def _present():
    # The program past "/usr/bin/env K=V...", and the file it runs when it is Python on marchdb's launcher.
    words = MARCHDB[1:] if os.path.basename(MARCHDB[0]) == "env" else MARCHDB
    while words and "=" in words[0]:
        words = words[1:]
    if not words or not os.access(words[0], os.X_OK):
        return False
    return words[1:3] != ["-I", "-S"] or os.path.isfile(words[3])


def _run(args, payload=""):
    if not _present():
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


class HermesPlugin:
    """Hermes Agent's installer: a memory-provider plugin folder, and the one
    setting that chooses it. (Its imports are its own: the hook that Hermes
    runs imports this module, and needs none of them.)"""

    host = "hermes"
    events: tuple[str, ...] = ("memory provider",)

    @staticmethod
    def home(project: Path | None = None) -> Path:
        """``$HERMES_HOME`` (``~/.hermes``); Hermes has no per-project plugins."""
        from marchdb.errors import ConfigError

        if project is not None:
            raise ConfigError("Hermes has no project settings: install it for the user (without --project)")
        return Path(os.environ.get("HERMES_HOME") or "~/.hermes").expanduser().absolute()

    def path(self, project: Path | None) -> Path:
        """The plugin folder."""
        return self.home(project) / "plugins" / "marchdb"

    def install(self, folder: Path, argv: list[str]) -> InstallResult:
        """Write the provider into ``folder``, and choose it (``hermes config set``) when Hermes is on PATH."""
        from marchdb.errors import FileError
        from marchdb.files import fsync_dir, write_temp
        from marchdb.hosts.settings import InstallResult, check_folder

        init = folder / "__init__.py"
        source = provider_source(argv).encode()
        notes = _choose_hermes_provider()
        if os.path.lexists(folder) and not self.is_ours(folder):
            raise FileError(f"{folder} exists and is not marchdb's plugin; marchdb does not replace it")
        if init.exists() and init.read_bytes() == source:
            return InstallResult(folder, False, " ".join(argv), notes=notes)
        check_folder(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "plugin.yaml").write_text(
            "name: marchdb\ndescription: marchdb memory (Markdown files, one SQLite index)\n"
            "# written by `marchdb install hermes`, removed by `marchdb uninstall hermes`\n",
            encoding="utf-8",
        )
        os.replace(write_temp(folder, source, 0o644), init)
        fsync_dir(folder)
        return InstallResult(folder, True, " ".join(argv), None, self.events, (), notes)

    @staticmethod
    def is_ours(folder: Path) -> bool:
        """Whether ``folder`` is the plugin ``install`` wrote."""
        try:
            if os.path.islink(folder) or not folder.is_dir():
                return False
            text = (folder / "__init__.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        return "Written by `marchdb install hermes`" in text

    def uninstall(self, folder: Path) -> InstallResult:
        """Remove the plugin folder ``install`` wrote."""
        import shutil

        from marchdb.hosts.settings import InstallResult

        if not self.is_ours(folder):
            return InstallResult(folder, False, "")
        shutil.rmtree(folder)
        note = (
            "Hermes still names marchdb as its memory provider: `hermes config set memory.provider builtin` "
            "(or another) chooses another"
        )
        return InstallResult(folder, True, "", None, self.events, (), (note,))


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
