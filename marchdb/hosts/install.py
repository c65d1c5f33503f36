"""``marchdb install HOST`` / ``uninstall HOST``: wire marchdb's hook (or plugin) into an agent host.

Each host module says where its hooks live and how (``installer()``, see
``hosts``): hooks in a JSON settings file (``hosts.jsonhooks``), one
executable file per event or a plugin file marchdb writes whole
(``hosts.hookfiles``), a plugin folder (Hermes, OpenClaw). This module makes
the command they all run and dispatches to them.

The guarantees are the same everywhere: everything of the user's is kept as
it is; running install twice changes nothing; an older marchdb's hook
(another path, or one edited by hand) is replaced, not doubled, and said; a
file that cannot be parsed, a link, a read-only file, another user's file is
refused, never rewritten; nothing is written through a link that leads out of
the project (or the home) being installed into; a backup comes first
(``hosts.settings``); ``uninstall`` removes exactly what ``install`` added
(and a list, an object or a file only when ``install`` created it).

The command every hook runs (``hook_command``) is this installation's
``marchdb`` by its absolute path (hooks run with the host's PATH), with what
only the installing shell says (``--home``, ``--root``, ``--model``, the
``MARCH_*`` settings in its environment), and it exits quietly when marchdb is
gone: removing the venv before ``uninstall`` must not make every host event
fail. Plugins (JavaScript in the host's own process) carry the same argv.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from marchdb.errors import ConfigError
from marchdb.hosts import HOSTS, adapter
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
    "MARCH_NOW_STALE_HOURS",
    "MARCH_LLAMA_EXTRA_BUFFERS",
    "MARCH_IMPORT_SESSIONS",
)
#: Settings not carried as they are: the home, the root and the model travel
#: as ``--home`` / ``--root`` / ``--model``; ``MARCH_RECALL`` turns recall off
#: for one shell's session, not for every session the host will ever run.
NOT_CARRIED_ENV = ("MARCH_HOME", "MARCH_MEMORY_ROOT", "MARCH_EMBED_MODEL", "MARCH_RECALL")
#: The file a hook command runs (``marchdb_argv(launcher=True)``).
LAUNCHER = os.path.join("marchdb", "cli", "launch.py")
LAUNCHER_FILE = str(Path(__file__).absolute().parent.parent / "cli" / "launch.py")


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
    return command_for(host, marchdb_argv(home, root, model, launcher=True), env or {})


def carried_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The ``CARRIED_ENV`` settings of ``environ`` (this process's by default)."""
    found = dict(os.environ) if environ is None else environ
    return {k: found[k] for k in CARRIED_ENV if found.get(k)}


def env_words(env: dict[str, str]) -> list[str]:
    """``K=V`` words of ``env``, sorted (what ``env`` runs a command with)."""
    return [f"{k}={v}" for k, v in sorted(env.items())]


def command_for(host: str, argv: list[str], env: dict[str, str]) -> str:
    """The shell command a hook file or setting holds for ``host``: ``argv``
    (``marchdb_argv``) run with ``env``, quiet when the program is gone."""
    run = " ".join(shlex.quote(p) for p in [*(["env", *env_words(env)] if env else []), *argv, "hook", host])
    present = f"test -x {shlex.quote(argv[0])}"
    if argv[1:3] == ["-I", "-S"]:  # the launcher: Python stays when marchdb is uninstalled from it
        present += f" && test -f {shlex.quote(argv[3])}"
    return f"{present} || exit 0; exec {run}"


def is_ours(handler: object, host: str | None = None) -> bool:
    """Whether a hook handler (a ``{"command": ...}`` entry) is one ``install``
    wrote: any marchdb's hook, for ``host`` when given."""
    if not isinstance(handler, dict) or handler.get("type", "command") != "command":
        return False
    return command_is_ours(str(handler.get("command", "")), host)


_SEPARATORS = {";", "||", "&&", "|", "&", "\n"}
_REDIRECTS = {">", ">>", "<", "<<", ">&", "<&", "&>", "&>>", ">|", "<>"}
_GLOBAL_OPTIONS = {"--home", "--root", "--model"}


def command_is_ours(command: str, host: str | None = None) -> bool:
    """Whether a shell command runs marchdb's hook (of ``host`` when given):
    one of its simple commands, past ``exec``, ``env K=V...`` and
    redirections, is a marchdb (any path, a Python running it as a module,
    or Python on its launcher) given ``hook HOST`` after its global options.
    A hook the user edited (output sent to a log, a setting put before it)
    is still recognised, so uninstall removes it and install replaces it."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return False
    segment: list[str] = []
    for word in [*words, ";"]:
        if word in _SEPARATORS:
            if _runs_marchdb_hook(segment, host):
                return True
            segment = []
        else:
            segment.append(word)
    return False


def _runs_marchdb_hook(words: list[str], host: str | None) -> bool:
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in _REDIRECTS:
            skip = True  # its target
            if kept and kept[-1].isdigit():
                kept.pop()  # the descriptor it redirects
            continue
        kept.append(word)
    while kept and (kept[0] in ("exec", "env") or ("=" in kept[0] and not kept[0].startswith(("=", "-", "/")))):
        kept = kept[1:]
    if not kept:
        return False
    if os.path.basename(kept[0]) == "marchdb":
        rest = kept[1:]
    elif kept[1:3] == ["-m", "marchdb"]:
        rest = kept[3:]
    elif kept[1:3] == ["-I", "-S"] and len(kept) > 3 and kept[3].endswith(LAUNCHER):
        rest = kept[4:]
    else:
        return False  # the user's own "marchdb-audit.sh hook claude-code" is not ours to replace
    while rest and rest[0].split("=", 1)[0] in _GLOBAL_OPTIONS:
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return len(rest) >= 2 and rest[0] == "hook" and rest[1] in HOSTS and (host is None or rest[1] == host)


# ---------------------------------------------------------------- the hosts' installers


def installable() -> list[str]:
    """The hosts ``marchdb install`` wires, in the registry's order."""
    return [h for h in HOSTS if getattr(adapter(h), "installer", None) is not None]


def target(host: str):
    """The installer of ``host`` (``ConfigError`` naming the known ones)."""
    if host not in HOSTS or host not in installable():
        raise ConfigError(f"unknown host {host!r}; marchdb installs hooks for: {', '.join(installable())}")
    return adapter(host).installer()


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


def install(host: str, project: Path | None, argv: list[str], env: dict[str, str]) -> list[InstallResult]:
    """Wire ``host``'s hooks (user-wide, or for ``project``)."""
    return target(host).install(project, argv, env)


def uninstall(host: str, project: Path | None) -> list[InstallResult]:
    """Remove what ``install`` wrote for ``host``."""
    return target(host).uninstall(project)


def installed(project: Path | None = None) -> list[dict]:
    """Where marchdb's hooks are installed now, for ``doctor``: ``{"host",
    "where", "events"}`` for the user's settings of every host (and those of
    ``project``); settings that cannot be read are said as ``error``."""
    found = []
    for host in installable():
        spec = target(host)
        if getattr(spec, "alias_of", None):
            continue  # its hooks are another host's, listed there
        places: list[Path | None] = [None]
        if project is not None and getattr(spec, "project_scope", True):
            places.append(project)
        for place in places:
            try:
                found += spec.found(place)
            except ConfigError:
                continue
    return found
