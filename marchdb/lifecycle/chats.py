"""What every agent host's session importer shares (``marchdb import codex|gemini|qwen|pi|opencode|kilo|openclaw|hermes|cline``).

A reader (``agentlogs`` for the hosts that write a file per session, ``agentdbs``
for those that keep SQLite) walks a host's own store and feeds each
session's messages to a ``Chat``; ``Chat.item`` makes the one memory of the
session, as ``transcripts`` makes a Claude Code session's:

* the body is the conversation as Markdown, a tool call as one short line;
  tool results, thinking, system and developer messages are left out by the
  readers;
* text marchdb or another hook injected into the conversation is cut out
  (``without_injected``): the hosts' wrappers of hook context
  (``<hook_context>`` in Gemini CLI, ``<qwen:user-prompt-submit-context>``
  in Qwen Code, ``<system-reminder>``) and marchdb's own ``[recall]`` blocks
  wherever they are;
* secrets are replaced by markers before anything else is made of the text
  (``marchdb.redact``), so no name, description or body holds one;
* the name is the host's title of the session, else its first request; the
  description says what the user settled, then what they asked
  (``transcripts.described``, as for Claude Code's sessions); the tags are
  the host's name and ``project/<folder>`` of the session's working folder;
* a session too short to remember is skipped, as a chat is
  (``transcripts``' rule).

Each host's folder is known (``default_folder``), so the path of an import
is optional. A source file larger than ``MAX_SESSION_BYTES`` is refused (a
log grown past any conversation, a device), never read in part.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

from marchdb import redact
from marchdb.lifecycle import transcripts
from marchdb.lifecycle.injected import without_injected
from marchdb.lifecycle.sources import Bad, Found, Item, Skip, clean_tags, first_text, one_line, written_before
from marchdb.vault.changes import MAX_NAME_CHARS

#: The agent hosts whose own session stores an import reads, and their names for people.
HOSTS = {
    "codex": "Codex CLI",
    "gemini": "Gemini CLI",
    "qwen": "Qwen Code",
    "pi": "pi",
    "opencode": "opencode",
    "kilo": "Kilo CLI",
    "openclaw": "OpenClaw",
    "hermes": "Hermes Agent",
    "cline": "Cline CLI",
}
#: Largest SQLite store read (opencode's, Hermes Agent's): it is read a
#: session at a time by query, never whole, so its bound is the disk's, not memory's.
MAX_STORE_BYTES = 16 * 1024**3
#: Messages read from one session (the rest said in a warning).
MAX_MESSAGES = 100_000
#: Sessions read from one SQLite store.
MAX_SESSIONS = 100_000


def default_folder(kind: str) -> Path:
    """Where ``kind``'s host keeps its sessions (environment variables as the host reads them)."""
    env = os.environ
    if kind == "codex":
        return Path(env.get("CODEX_HOME") or "~/.codex").expanduser() / "sessions"
    if kind == "gemini":
        return Path(env.get("GEMINI_CLI_HOME") or "~").expanduser() / ".gemini" / "tmp"
    if kind == "qwen":  # its conversations are runtime data (Qwen Code's settings reference)
        return Path(env.get("QWEN_RUNTIME_DIR") or env.get("QWEN_HOME") or "~/.qwen").expanduser()
    if kind == "pi":
        return Path(env.get("PI_CODING_AGENT_DIR") or "~/.pi/agent").expanduser() / "sessions"
    if kind in ("opencode", "kilo"):
        return Path(env.get("XDG_DATA_HOME") or "~/.local/share").expanduser() / kind
    if kind == "hermes":
        return Path(env.get("HERMES_HOME") or "~/.hermes").expanduser()
    if kind == "openclaw":
        return Path(env.get("OPENCLAW_STATE_DIR") or "~/.openclaw").expanduser()
    if kind == "cline":  # the CLI's (the VS Code extension keeps its tasks in the editor's storage)
        return Path(env.get("CLINE_DIR") or "~/.cline").expanduser() / "data" / "sessions"
    raise KeyError(kind)


def project_of(cwd: str | None) -> str | None:
    """The ``project/<name>`` tag of a session's working folder (its last part)."""
    return f"project/{transcripts._project(cwd)}" if cwd and cwd.strip("/\\") else None


@dataclass
class Chat:
    """One session as a reader finds it; ``item`` makes its memory."""

    host: str  # the import kind: codex, gemini...
    session_id: str
    origin: str
    cwd: str | None = None
    title: str | None = None
    branch: str | None = None
    first: dt.datetime | None = None
    last: dt.datetime | None = None
    turns: list[tuple[str, dt.datetime | None, str]] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    secrets: list[redact.Finding] = field(default_factory=list)
    left_out: int = 0  # messages past MAX_MESSAGES

    def saw(self, when: dt.datetime | None) -> None:
        """A record of the session at ``when`` (its span)."""
        if when is not None:
            self.first = min(self.first or when, when)
            self.last = max(self.last or when, when)

    def _clean(self, text: str) -> str:
        text, found = redact.redact(without_injected(text))
        self.secrets.extend(found)
        return text.strip()

    def user(self, text: str, when: dt.datetime | None = None) -> None:
        """A message the person typed (injected context cut out)."""
        self.saw(when)
        text = self._clean(text)
        if text and self._room():
            self.turns.append(("User", when, text))
            self.prompts.append(text)

    def assistant(self, text: str, when: dt.datetime | None = None, same_message: bool = False) -> None:
        """The assistant's text (``same_message``: more of the answer just given)."""
        self.saw(when)
        text = self._clean(text)
        if not text:
            return
        if same_message and self.turns and self.turns[-1][0] == "Assistant":
            role, at, before = self.turns[-1]
            self.turns[-1] = (role, at, f"{before}\n\n{text}")
        elif self._room():
            self.turns.append(("Assistant", when, text))

    def tool(self, name: object, what: object = "", when: dt.datetime | None = None) -> None:
        """A tool call of the assistant, as one short line (its result is never kept)."""
        label = name if isinstance(name, str) and name.strip() else "tool"
        detail = what if isinstance(what, str) else ""
        line = f"*[{one_line(label, 60)}] {one_line(detail, 160)}*" if detail.strip() else f"*[{one_line(label, 60)}]*"
        self.assistant(line, when, same_message=True)

    def _room(self) -> bool:
        if len(self.turns) < MAX_MESSAGES:
            return True
        self.left_out += 1
        return False

    def item(self) -> Found:
        """The session's memory (or why not)."""
        title = HOSTS[self.host]
        if not self.prompts:
            return Skip(self.origin, "no message typed by a person in it")
        if (short := transcripts._too_short(self.turns)) is not None:
            return Skip(self.origin, short)
        if self.first is None:
            return Bad(self.origin, "the session has no time in it")
        where = f" in `{one_line(self.cwd, transcripts.HEADER_FIELD_CHARS)}`" if self.cwd else ""
        if self.cwd and self.branch:
            where += f" (branch `{one_line(self.branch, transcripts.HEADER_FIELD_CHARS)}`)"
        span = f"{self.first:%Y-%m-%d %H:%M}" + (
            f"–{self.last:%H:%M}"
            if self.last and self.last.date() == self.first.date() and self.last != self.first
            else ""
        )
        header = f"{title} session{where}, {span} UTC, session `{one_line(self.session_id, transcripts.HEADER_FIELD_CHARS)}`."
        body, cut = transcripts.render(self.turns, header, self.origin)
        warnings = list(self.warnings) + cut
        if self.left_out:
            warnings.append(f"{self.left_out:,} messages past the first {MAX_MESSAGES:,} left out")
        if self.secrets:
            warnings.append(
                f"secrets kept out of the memory: {redact.summary(self.secrets)}, each replaced by a [redacted: ...] marker"
            )
        name_from = self._clean(self.title) if self.title else ""
        tags = [self.host] + ([tag] if (tag := project_of(self.cwd)) else [])
        return Item(
            source=f"{self.host}:{self.session_id}",
            origin=self.origin,
            name=first_text(name_from, self.prompts[0], limit=min(MAX_NAME_CHARS, 100)),
            description=transcripts.described(self.prompts),
            body=body,
            tags=clean_tags(tags, self.host),
            created=self.first,
            updated=self.last if self.last and self.last != self.first else None,
            extra={"session_cwd": self.cwd} if self.cwd else {},
            warnings=warnings,
        )


def walk(path: Path, wanted, since: dt.datetime | None = None) -> list[tuple[Path, str | None]]:
    """The files under ``path`` (or ``path`` itself) whose name ``wanted(name)``
    accepts, sorted, with their origin (the path below ``path``); hidden
    folders are not entered and links are listed, never followed (reading
    one says why it is left out). ``since``: files last written before then
    are passed over unread (no message in them can be newer): their origin is None."""
    if not path.is_dir():
        return [(path, path.name)]
    floor = since.timestamp() if since is not None else None
    found = []
    for folder, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "node_modules")
        for name in sorted(files):
            if wanted(name) and not name.startswith("."):
                full = Path(folder) / name
                old = floor is not None and written_before(full, floor)
                found.append((full, None if old else str(full.relative_to(path))))
    return found
