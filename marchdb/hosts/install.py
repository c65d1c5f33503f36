"""``marchdb install HOST`` / ``uninstall HOST``: wire marchdb's hook into an agent host.

Each host keeps its hooks its own way (``TARGETS``):

* a JSON settings file with ``{"hooks": {Event: [...]}}`` — Claude Code,
  Codex CLI, Gemini CLI (hook groups), Cursor (flat entries);
* one executable file per event — Cline;
* a plugin folder — Hermes Agent (its memory provider, ``hosts.hermes``).

The guarantees are the same everywhere: everything of the user's is kept as
it is; running install twice changes nothing; an older marchdb's hook (another
path) is replaced, not doubled, and said; a file that cannot be parsed, a
link, a read-only file is refused, never rewritten; a backup comes first
(``hosts.settings``); ``uninstall`` removes exactly what ``install`` added
(and a list, an object or a file only when ``install`` created it).

The command every hook runs (``hook_command``) is this installation's
``marchdb`` by its absolute path (hooks run with the host's PATH), with what
only the installing shell says (``--home``, ``--root``, ``--model``, the
``MARCH_*`` settings in its environment), and it exits quietly when marchdb is
gone: removing the venv before ``uninstall`` must not make every host event
fail.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from marchdb.errors import ConfigError, FileError
from marchdb.files import fsync_dir, write_temp
from marchdb.hosts import HOSTS, settings
from marchdb.hosts.hermes import HermesPlugin
from marchdb.hosts.settings import InstallResult

#: Seconds a host gives the hook (it answers in well under one; a prompt
#: waits up to ``hookWaitSeconds`` for an engine that is starting).
TIMEOUT_SECONDS = 10
#: Environment settings the installing shell may hold that change what a hook
#: answers: carried into the command (the host's environment lacks them).
CARRIED_ENV = (
    "MARCH_MEMORY_RECALL_MIN_SCORE",
    "MARCH_MODELS_DIR",
    "MARCH_THREADS",
    "MARCH_ALLOW_UNUSUAL_ROOT",
    "MARCH_DAEMON",
)
#: The first line after the shebang of a hook file marchdb writes (Cline):
#: only a file that holds it is ever replaced or removed.
#: The file a hook command runs (``marchdb_argv(launcher=True)``).
LAUNCHER = os.path.join("marchdb", "cli", "launch.py")
LAUNCHER_FILE = str(Path(__file__).absolute().parent.parent / "cli" / "launch.py")
FILE_MARK = "# marchdb hook: written by `marchdb install`, removed by `marchdb uninstall`"


# ---------------------------------------------------------------- the command


def marchdb_argv(
    home: Path | None = None, root: Path | None = None, model: str | None = None, *, launcher: bool = False
) -> list[str]:
    """This installation's ``marchdb`` (an absolute path), with ``--home``
    when this home is not the default and ``--root`` / ``--model`` when the
    installing shell chose them (the host would not see those). With
    ``launcher``, the form a hook command runs: this Python, isolated and
    without ``site``, on ``cli/launch.py`` (it starts in half the time)."""
    if launcher:
        parts = [sys.executable, "-I", "-S", LAUNCHER_FILE]
    else:
        exe = Path(sys.executable).with_name("marchdb")
        parts = [str(exe)] if exe.exists() else [sys.executable, "-m", "marchdb"]
    if home is not None and Path(home).absolute() != Path("~/.march").expanduser().absolute():
        parts += ["--home", str(Path(home).absolute())]
    if root is not None:
        parts += ["--root", str(Path(root).absolute())]
    if model:
        from marchdb.embedding.recipes import RECIPES

        # A recipe name stays a name; anything else is a file, made absolute
        # (hooks run in the session's folder, not this one).
        parts += ["--model", model if model in RECIPES else str(Path(model).expanduser().absolute())]
    return parts


def hook_command(
    host: str = "claude-code",
    home: Path | None = None,
    root: Path | None = None,
    model: str | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """The shell command a host runs for ``marchdb hook HOST``: exits 0 at once
    when marchdb is gone, else runs it with ``env`` (``CARRIED_ENV`` values)."""
    return _command(host, marchdb_argv(home, root, model, launcher=True), env or {})


def carried_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The ``CARRIED_ENV`` settings of ``environ`` (this process's by default)."""
    found = dict(os.environ) if environ is None else environ
    return {k: found[k] for k in CARRIED_ENV if found.get(k)}


def is_ours(handler: object, host: str | None = None) -> bool:
    """Whether a hook handler (a ``{"command": ...}`` entry) is one ``install``
    wrote: any marchdb's hook, for ``host`` when given."""
    if not isinstance(handler, dict) or handler.get("type", "command") != "command":
        return False
    return command_is_ours(str(handler.get("command", "")), host)


def command_is_ours(command: str, host: str | None = None) -> bool:
    """Whether a shell command runs marchdb's hook (of ``host`` when given):
    its last simple command, past ``exec`` and ``env K=V...``, is a marchdb (any
    path, or a Python running it as a module) ending in ``hook HOST``."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return False
    separators = {";", "||", "&&", "|", "&"}
    last = max((i for i, w in enumerate(words) if w in separators), default=-1)
    words = words[last + 1 :]
    if words[:1] == ["exec"]:
        words = words[1:]
    if words[:1] == ["env"]:
        words = words[1:]
        while words and "=" in words[0] and not words[0].startswith("="):
            words = words[1:]
    if len(words) < 3 or words[-2] != "hook" or words[-1] not in HOSTS or (host and words[-1] != host):
        return False
    # The user's own "marchdb-audit.sh hook claude-code" is not ours to replace.
    if os.path.basename(words[0]) == "marchdb" or words[1:3] == ["-m", "marchdb"]:
        return True
    return words[1:3] == ["-I", "-S"] and words[3].endswith(LAUNCHER)


# ---------------------------------------------------------------- hosts' settings files


@dataclass
class JsonHooks:
    """A host whose hooks live in a JSON file: ``{"hooks": {Event: [entry]}}``,
    an entry a group ``{"matcher"?, "hooks": [handler]}`` (``grouped``) or the
    handler itself (Cursor)."""

    host: str
    events: tuple[str, ...]
    user_file: Callable[[], Path]
    project_file: Callable[[Path], Path]
    grouped: bool = True
    #: The handler's timeout: ``timeout`` in seconds, or in milliseconds (``ms``).
    timeout_ms: bool = False
    #: Keys the file must hold when marchdb creates it (Cursor's ``version``).
    top: dict = field(default_factory=dict)
    #: What to tell the user once the hooks are written.
    after: Callable[[Path], tuple[str, ...]] = lambda path: ()

    def handler(self, command: str) -> dict:
        """The entry marchdb writes for one event."""
        timeout = TIMEOUT_SECONDS * 1000 if self.timeout_ms else TIMEOUT_SECONDS
        return {"type": "command", "command": command, "timeout": timeout}

    def path(self, project: Path | None) -> Path:
        """The file to edit: the user's, or the project's."""
        return self.user_file() if project is None else self.project_file(project)

    def ours_in(self, entries: list) -> list[dict]:
        """marchdb's handlers in an event's list."""
        if not self.grouped:
            return [e for e in entries if is_ours(e)]
        return [
            h
            for g in entries
            if isinstance(g, dict) and isinstance(g.get("hooks"), list)
            for h in g["hooks"]
            if is_ours(h)
        ]

    def drop_ours(self, entries: list) -> bool:
        """Remove marchdb's handlers from an event's list (a group left empty goes too)."""
        changed = False
        for entry in list(entries):
            if not self.grouped:
                if is_ours(entry):
                    entries.remove(entry)
                    changed = True
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
                continue
            kept = [h for h in entry["hooks"] if not is_ours(h)]
            if len(kept) != len(entry["hooks"]):
                changed = True
                if kept:
                    entry["hooks"] = kept
                else:
                    entries.remove(entry)
        return changed

    def install(self, path: Path, command: str) -> InstallResult:
        """Add marchdb's hook for every event to ``path``."""
        existed = os.path.lexists(path)
        data = settings.read(path)
        noted = settings.read_record(path)
        # Hooks of a marchdb that kept no note: what it created cannot be told
        # apart, so no note now either (uninstall then removes emptied lists, as before).
        legacy = (
            noted is None
            and isinstance(data.get("hooks"), dict)
            and any(isinstance(v, list) and self.ours_in(v) for v in data["hooks"].values())
        )
        created = [k for k in ("hooks", *self.top) if k not in data]
        if not existed:
            created.append(settings.FILE_CREATED)  # uninstall removes the file again
        for key, value in self.top.items():
            data.setdefault(key, value)
        hooks = data.setdefault("hooks", {})
        if not isinstance(hooks, dict):
            raise FileError(f'{path}: "hooks" is not an object; fix it by hand, then run this again')
        handler = self.handler(command)
        added: list[str] = []
        replaced: list[str] = []
        for event in self.events:
            if event not in hooks:
                created.append(event)
            entries = hooks.setdefault(event, [])
            if not isinstance(entries, list):
                raise FileError(f"{path}: hooks.{event} is not a list; fix it by hand, then run this again")
            mine = self.ours_in(entries)
            if any(h == handler for h in mine) and len(mine) == 1:
                continue
            replaced += [str(h.get("command")) for h in mine if h.get("command") != command]
            self.drop_ours(entries)  # an older marchdb's hook (another path): replaced, not doubled
            entries.append({"hooks": [handler]} if self.grouped else handler)
            added.append(event)
        if not added:
            return InstallResult(path, False, command, notes=self.after(path))
        # Always (unless legacy), even when nothing was created: without a note,
        # uninstall takes every emptied list for one an older marchdb made.
        if not legacy:
            settings.write_record(path, sorted(set(noted or []) | set(created)))
        backup = settings.write(path, data)
        replaced_once = tuple(dict.fromkeys(replaced))
        return InstallResult(path, True, command, backup, tuple(added), replaced_once, self.after(path))

    def uninstall(self, path: Path) -> InstallResult:
        """Remove the handlers ``install`` added from ``path``; everything else stays."""
        if not path.exists():
            return InstallResult(path, False, "")
        data = settings.read(path)
        # What install created; an install by a marchdb that kept no note created
        # whatever is left empty (it only ever added to what was there).
        created = settings.read_record(path)
        hooks = data.get("hooks")
        removed = []
        if isinstance(hooks, dict):
            for event in list(hooks):
                entries = hooks[event]
                if isinstance(entries, list) and self.drop_ours(entries):
                    removed.append(event)
                    if not entries and (created is None or event in created):
                        del hooks[event]
            if not hooks and (created is None or "hooks" in created):
                del data["hooks"]
                for key in self.top:
                    if created is not None and key in created and data.get(key) == self.top[key]:
                        del data[key]
        if not removed:
            return InstallResult(path, False, "")
        if not data and created is not None and settings.FILE_CREATED in created:
            path.unlink()  # install made it, and nothing but marchdb's hooks was ever in it
            backup = None
        else:
            backup = settings.write(path, data)
        record = settings.record_path(path)
        if os.path.lexists(record) and stat.S_ISREG(os.lstat(record).st_mode):
            record.unlink()
        return InstallResult(path, True, "", backup, tuple(removed))


# ---------------------------------------------------------------- one file per event (Cline)


@dataclass
class FileHooks:
    """A host that runs one executable file per event, named after it."""

    host: str
    events: tuple[str, ...]
    user_dirs: Callable[[], list[Path]]
    project_dir: Callable[[Path], Path]

    def folders(self, project: Path | None) -> list[Path]:
        """Where the hook files go: the user's folders, or the project's."""
        return self.user_dirs() if project is None else [self.project_dir(project)]

    def path(self, project: Path | None) -> Path:
        """The first folder (what the result names)."""
        return self.folders(project)[0]

    @staticmethod
    def script(command: str) -> bytes:
        """The hook file: a shell script running ``command``."""
        return f"#!/bin/sh\n{FILE_MARK}\n{command}\n".encode()

    @staticmethod
    def is_ours_file(path: Path) -> bool:
        """Whether ``path`` is a hook file marchdb wrote (a regular file with ``FILE_MARK``)."""
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > 64 * 1024:
                return False
            return FILE_MARK in path.read_text(encoding="utf-8", errors="replace").splitlines()[1:2]
        except OSError:
            return False

    def install_in(self, folder: Path, command: str) -> InstallResult:
        """Write the hook files into ``folder`` (never over a file marchdb did not write)."""
        added, replaced = [], []
        data = self.script(command)
        for event in self.events:
            target = folder / event
            if os.path.lexists(target):
                if not self.is_ours_file(target):
                    raise FileError(
                        f"{target} exists and is not marchdb's hook; marchdb does not replace it: merge the two "
                        "by hand (call `marchdb hook cline` from it), or move it away and run this again"
                    )
                if target.read_bytes() == data:
                    continue
                replaced.append(next(line for line in target.read_text().splitlines()[2:] if line.strip()))
            settings.check_folder(folder)
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(write_temp(folder, data, 0o755), target)
            added.append(event)
        if added:
            fsync_dir(folder)
        return InstallResult(folder, bool(added), command, None, tuple(added), tuple(replaced))

    def uninstall_in(self, folder: Path) -> InstallResult:
        """Remove the hook files marchdb wrote from ``folder``."""
        removed = [e for e in self.events if self.is_ours_file(folder / e)]
        for event in removed:
            (folder / event).unlink()
        return InstallResult(folder, bool(removed), "", None, tuple(removed))


# ---------------------------------------------------------------- Hermes' plugin folder


# ---------------------------------------------------------------- where each host keeps them


def _claude_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude").expanduser().absolute()


def _codex_dir() -> Path:
    return Path(os.environ.get("CODEX_HOME") or "~/.codex").expanduser().absolute()


def _gemini_dir() -> Path:
    return Path("~/.gemini").expanduser().absolute()


def _codex_after(path: Path) -> tuple[str, ...]:
    # Codex skips a new or changed hook, without a word, until the user trusts it.
    return (
        f"Codex runs new or changed hooks only once you trust them: start `codex`, type /hooks and trust the "
        f"marchdb hooks of {path} (until then Codex skips them without a word; `marchdb doctor` tells)",
    )


def _cline_user_dirs() -> list[Path]:
    documents = Path("~/Documents").expanduser()
    return [documents / "Cline" / "Hooks", Path(os.environ.get("CLINE_DIR") or "~/.cline").expanduser() / "hooks"]


TARGETS: dict[str, JsonHooks | FileHooks | HermesPlugin] = {
    "claude-code": JsonHooks(
        "claude-code",
        ("SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact", "Stop"),
        lambda: _claude_dir() / "settings.json",
        # The file Claude Code keeps out of git: the command holds a path of this machine.
        lambda project: project / ".claude" / "settings.local.json",
    ),
    "codex": JsonHooks(
        "codex",
        ("SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact", "Stop"),
        lambda: _codex_dir() / "hooks.json",
        lambda project: project / ".codex" / "hooks.json",
        after=_codex_after,
    ),
    "gemini": JsonHooks(
        "gemini",
        # Not PreCompress: Gemini fires it before nearly every model call (trigger "auto"),
        # whether or not it then compresses: the window would start afresh at each.
        ("SessionStart", "BeforeAgent", "AfterTool", "AfterAgent"),
        lambda: _gemini_dir() / "settings.json",
        lambda project: project / ".gemini" / "settings.json",
        timeout_ms=True,
    ),
    "cursor": JsonHooks(
        "cursor",
        ("sessionStart", "postToolUse", "afterAgentResponse"),
        lambda: Path("~/.cursor").expanduser().absolute() / "hooks.json",
        lambda project: project / ".cursor" / "hooks.json",
        grouped=False,
        top={"version": 1},
    ),
    "cline": FileHooks(
        "cline",
        ("TaskStart", "UserPromptSubmit", "PostToolUse", "TaskComplete"),
        _cline_user_dirs,
        lambda project: project / ".clinerules" / "hooks",
    ),
    "hermes": HermesPlugin(),
}


def project_folder(project: str | os.PathLike | None) -> Path | None:
    """The project folder ``--project`` names (None for the user's settings)."""
    if project is None:
        return None
    if not str(project).strip():  # an unset shell variable: never "the current folder" by accident
        raise ConfigError("give the project folder, e.g. --project ~/code/app (an empty name was given)")
    folder = Path(project).expanduser().absolute()
    if not folder.is_dir():
        raise ConfigError(f"project folder {folder} does not exist; pass the folder the host runs in")
    return folder


def target(host: str):
    """The install target of ``host`` (``ConfigError`` naming the known ones)."""
    if host not in TARGETS:
        raise ConfigError(f"unknown host {host!r}; marchdb installs hooks for: {', '.join(TARGETS)}")
    return TARGETS[host]


def install(host: str, project: Path | None, argv: list[str], env: dict[str, str]) -> list[InstallResult]:
    """Wire ``host``'s hooks (user-wide, or for ``project``)."""
    spec = target(host)
    if isinstance(spec, HermesPlugin):
        return [spec.install(spec.path(project), [*argv] if not env else ["/usr/bin/env", *_env_words(env), *argv])]
    command = _command(host, argv, env)
    if isinstance(spec, FileHooks):
        return [spec.install_in(folder, command) for folder in spec.folders(project)]
    return [spec.install(spec.path(project), command)]


def uninstall(host: str, project: Path | None) -> list[InstallResult]:
    """Remove what ``install`` wrote for ``host``."""
    spec = target(host)
    if isinstance(spec, HermesPlugin):
        return [spec.uninstall(spec.path(project))]
    if isinstance(spec, FileHooks):
        return [spec.uninstall_in(folder) for folder in spec.folders(project)]
    return [spec.uninstall(spec.path(project))]


def _env_words(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(env.items())]


def _command(host: str, argv: list[str], env: dict[str, str]) -> str:
    run = " ".join(shlex.quote(p) for p in [*(["env", *_env_words(env)] if env else []), *argv, "hook", host])
    present = f"test -x {shlex.quote(argv[0])}"
    if argv[1:3] == ["-I", "-S"]:  # the launcher: Python stays when marchdb is uninstalled from it
        present += f" && test -f {shlex.quote(argv[3])}"
    return f"{present} || exit 0; exec {run}"


def installed(project: Path | None = None) -> list[dict]:
    """Where marchdb's hooks are installed now, for ``doctor``: ``{"host",
    "where", "events"}`` for the user's settings of every host (and those of
    ``project``); settings that cannot be read are said as ``error``."""
    found = []
    for host, spec in TARGETS.items():
        places: list[Path | None] = [None] + ([project] if project is not None and host != "hermes" else [])
        for place in places:
            if isinstance(spec, HermesPlugin):
                folder = spec.path(None)
                if spec.is_ours(folder):
                    found.append({"host": host, "where": str(folder), "events": list(spec.events)})
                continue
            if isinstance(spec, FileHooks):
                for folder in spec.folders(place):
                    events = [e for e in spec.events if spec.is_ours_file(folder / e)]
                    if events:
                        found.append({"host": host, "where": str(folder), "events": events})
                continue
            path = spec.path(place)
            if not os.path.lexists(path):
                continue
            try:
                hooks = settings.read(path).get("hooks")
            except FileError as exc:
                found.append({"host": host, "where": str(path), "events": [], "error": str(exc)})
                continue
            mine = (
                {e: spec.ours_in(v) for e, v in hooks.items() if isinstance(v, list)} if isinstance(hooks, dict) else {}
            )
            events = [e for e, handlers in mine.items() if handlers]
            if events:
                commands = sorted({str(h.get("command")) for handlers in mine.values() for h in handlers})
                found.append({"host": host, "where": str(path), "events": events, "commands": commands})
    return found
