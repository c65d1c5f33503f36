"""``marchdb install claude-code``: wire the hooks into Claude Code's settings.

What it writes: one hook group for each of ``SessionStart``,
``UserPromptSubmit`` and ``Stop``, running ``<this marchdb> hook
claude-code`` with a 10-second timeout. Where: ``--user`` (the default)
edits ``~/.claude/settings.json`` (``$CLAUDE_CONFIG_DIR`` when set);
``--project DIR`` edits ``DIR/.claude/settings.local.json`` — the file
Claude Code keeps out of git, since the command holds a path of this
machine.

How: every other setting and hook is kept as it is; running it twice
changes nothing; a backup of the previous file is written next to it
first; a file that is not valid JSON (or not an object, or a symlink) is
refused, never rewritten; the new file replaces the old one atomically.
``marchdb uninstall claude-code`` removes exactly the handlers whose
command is marchdb's hook, and nothing else: an event list or ``hooks``
object is deleted only when ``install`` created it, which it notes in a
small file beside the settings (``settings.json.marchdb-install``; removed
by ``uninstall``) — a ``"Stop": []`` the user had stays. Backups keep the
settings file's permissions (it may hold keys).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from marchdb.clock import utc_now_iso
from marchdb.errors import ConfigError, FileError
from marchdb.files import fsync_dir, write_temp

EVENTS = ("SessionStart", "UserPromptSubmit", "Stop")
#: Seconds Claude Code gives the hook (it answers in well under one; a
#: timed-out UserPromptSubmit hook's context is dropped, the prompt goes on).
TIMEOUT_SECONDS = 10
HOOK_ARGS = ("hook", "claude-code")
#: In the install note: the settings file did not exist before install made it.
FILE_CREATED = "(file)"
#: Largest settings file read (Claude Code's are a few KB).
MAX_SETTINGS_BYTES = 4 * 1024 * 1024


@dataclass
class InstallResult:
    """What ``install`` / ``uninstall`` did."""

    settings: Path
    changed: bool
    command: str
    backup: Path | None = None
    events: tuple[str, ...] = ()
    #: Commands of earlier marchdb hooks install put its own in place of
    #: (another path, home, root or model): said, and kept in the backup.
    replaced: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "settings": str(self.settings),
            "changed": self.changed,
            "command": self.command,
            "backup": None if self.backup is None else str(self.backup),
            "events": list(self.events),
            "replaced": list(self.replaced),
        }


def settings_path(project: str | os.PathLike | None = None) -> Path:
    """The settings file ``install`` edits: the user's, or a project's local one."""
    if project is not None:
        if not str(project).strip():  # an unset shell variable: never "the current folder" by accident
            raise ConfigError("give the project folder, e.g. --project ~/code/app (an empty name was given)")
        folder = Path(project).expanduser().absolute()
        if not folder.is_dir():
            raise ConfigError(f"project folder {folder} does not exist; pass the folder Claude Code runs in")
        return folder / ".claude" / "settings.local.json"
    base = os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude"
    return Path(base).expanduser().absolute() / "settings.json"


def hook_command(home: Path | None = None, root: Path | None = None, model: str | None = None) -> str:
    """The shell command the hooks run: this installation's ``marchdb`` (an
    absolute path: hooks run with Claude Code's PATH and environment), with
    ``--home`` when this home is not the default, and ``--root`` / ``--model``
    when the installing shell chose them by flag or environment variable
    (Claude Code's hooks would not see those: they would recall from another
    vault)."""
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
    return " ".join(shlex.quote(p) for p in [*parts, *HOOK_ARGS])


def is_ours(handler: object) -> bool:
    """Whether a hook handler is one ``install`` wrote (any marchdb's hook)."""
    if not isinstance(handler, dict) or handler.get("type") != "command":
        return False
    try:
        words = shlex.split(str(handler.get("command", "")))
    except ValueError:
        return False
    if len(words) < 3 or tuple(words[-2:]) != HOOK_ARGS:
        return False
    # marchdb itself (any path), or a Python running it as a module: the
    # user's own "marchdb-audit.sh hook claude-code" is not ours to replace.
    return os.path.basename(words[0]) == "marchdb" or words[1:3] == ["-m", "marchdb"]


def install(path: Path, command: str) -> InstallResult:
    """Add marchdb's hooks to the settings file ``path`` (see the module docstring)."""
    existed = os.path.lexists(path)
    settings = _read(path)
    noted = _read_record(path)
    # Hooks of a marchdb that kept no note: what it created cannot be told
    # apart, so no note now either (uninstall then removes emptied lists, as before).
    legacy = (
        noted is None
        and isinstance(settings.get("hooks"), dict)
        and any(isinstance(groups, list) and _ours_in(groups) for groups in settings["hooks"].values())
    )
    created = [] if "hooks" in settings else ["hooks"]
    if not existed:
        created.append(FILE_CREATED)  # uninstall removes the file again
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise FileError(f'{path}: "hooks" is not an object; fix it by hand, then run this again')
    added: list[str] = []
    replaced: list[str] = []
    for event in EVENTS:
        if event not in hooks:
            created.append(event)
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise FileError(f"{path}: hooks.{event} is not a list; fix it by hand, then run this again")
        mine = _ours_in(groups)
        if any(h.get("command") == command and h.get("timeout") == TIMEOUT_SECONDS for h in mine):
            continue
        replaced += [str(h.get("command")) for h in mine if h.get("command") != command]
        _drop_ours(groups)  # an older marchdb's hook (another path): replaced, not doubled
        groups.append({"hooks": [{"type": "command", "command": command, "timeout": TIMEOUT_SECONDS}]})
        added.append(event)
    if not added:
        return InstallResult(path, False, command)
    # Always (unless legacy), even when nothing was created: without a note,
    # uninstall takes every emptied list for one an older marchdb made.
    if not legacy:
        _write_record(path, sorted(set(noted or []) | set(created)))
    backup = _write(path, settings)
    return InstallResult(path, True, command, backup, tuple(added), tuple(dict.fromkeys(replaced)))


def uninstall(path: Path) -> InstallResult:
    """Remove the handlers ``install`` added from ``path``; everything else stays."""
    if not path.exists():
        return InstallResult(path, False, "")
    settings = _read(path)
    # What install created; an install by a marchdb that kept no note created
    # whatever is left empty (it only ever added to what was there).
    created = _read_record(path)
    hooks = settings.get("hooks")
    removed = []
    if isinstance(hooks, dict):
        for event in list(hooks):
            groups = hooks[event]
            if isinstance(groups, list) and _drop_ours(groups):
                removed.append(event)
                if not groups and (created is None or event in created):
                    del hooks[event]
        if not hooks and (created is None or "hooks" in created):
            del settings["hooks"]
    if not removed:
        return InstallResult(path, False, "")
    if not settings and created is not None and FILE_CREATED in created:
        path.unlink()  # install made it, and nothing but marchdb's hooks was ever in it
        backup = None
    else:
        backup = _write(path, settings)
    record = _record_path(path)
    if os.path.lexists(record) and stat.S_ISREG(os.lstat(record).st_mode):
        record.unlink()
    return InstallResult(path, True, "", backup, tuple(removed))


def _ours_in(groups: list) -> list[dict]:
    """marchdb's handlers in an event's list of hook groups."""
    return [
        h for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list) for h in g["hooks"] if is_ours(h)
    ]


def _record_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.marchdb-install")


def _read_record(path: Path) -> list[str] | None:
    """The keys ``install`` created in ``path`` (None: no note)."""
    record = _record_path(path)
    try:
        if not stat.S_ISREG(os.lstat(record).st_mode) or os.lstat(record).st_size > 64 * 1024:
            return None
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    created = data.get("created") if isinstance(data, dict) else None
    return [str(k) for k in created] if isinstance(created, list) else None


def _write_record(path: Path, created: list[str]) -> None:
    record = _record_path(path)
    if os.path.lexists(record) and not stat.S_ISREG(os.lstat(record).st_mode):
        raise FileError(f"{record} is not a regular file; marchdb does not write through it")
    note = {"created": created, "note": "written by `marchdb install`, removed by `marchdb uninstall`"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = write_temp(path.parent, (json.dumps(note, indent=2) + "\n").encode("utf-8"), 0o600)
        os.replace(tmp, record)
    except OSError as exc:
        raise FileError(
            f"cannot write {exc.filename or record}: {exc.strerror or exc}; {path} was not changed"
        ) from None


def _drop_ours(groups: list) -> bool:
    changed = False
    for group in list(groups):
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            continue
        kept = [h for h in group["hooks"] if not is_ours(h)]
        if len(kept) != len(group["hooks"]):
            changed = True
            if kept:
                group["hooks"] = kept
            else:
                groups.remove(group)
    return changed


def _read(path: Path) -> dict:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:  # a file where a folder should be (.claude)
        raise FileError(f"cannot read {path}: {exc.strerror or exc}; nothing was changed") from None
    if stat.S_ISLNK(st.st_mode):
        raise FileError(
            f"{path} is a symlink; marchdb does not write through links: edit {os.path.realpath(path)} or run this on it"
        )
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SETTINGS_BYTES:
        raise FileError(f"{path} is not a settings file marchdb can edit (not a regular file, or over 4 MB)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FileError(f"cannot read {path}: {exc}; nothing was changed") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text, parse_constant=_not_json, object_pairs_hook=_no_twice)
        _check_numbers(data)
    except RecursionError:
        raise FileError(f"{path} is nested too deeply to be settings; nothing was changed") from None
    except ValueError as exc:
        raise FileError(
            f"{path} is not valid JSON ({exc}); nothing was changed — fix it, then run this again"
        ) from None
    if not isinstance(data, dict):
        raise FileError(f"{path} does not hold a JSON object; nothing was changed")
    return data


def _no_twice(pairs: list[tuple[str, object]]) -> dict:
    # json keeps the last of two equal keys: written back, the first would be gone.
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is written twice in one object, and only one could be kept")
        out[key] = value
    return out


def _not_json(word: str) -> object:
    raise ValueError(f"{word} is not JSON")


def _check_numbers(value: object) -> None:
    """A number written back must say what it said: ``1e400`` reads as
    infinity, which would be written back as ``Infinity`` (not JSON)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("a number too large for a double (such as 1e400) would not be written back as it is")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _write(path: Path, settings: dict) -> Path | None:
    """Back the old file up, then replace it atomically; returns the backup."""
    try:
        return _replace(path, settings)
    except OSError as exc:
        where = exc.filename or path
        raise FileError(f"cannot write {where}: {exc.strerror or exc}; {path} was not changed") from None


def _replace(path: Path, settings: dict) -> Path | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    mode = None
    if path.exists():
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if not mode & stat.S_IWUSR:
            # Made read-only on purpose (a managed or frozen setup): replacing
            # it would go around that.
            raise FileError(f"{path} is read-only; make it writable (chmod u+w) to let marchdb edit it")
        stamp = utc_now_iso().replace(":", "").replace("-", "")
        backup = path.with_name(f"{path.name}.marchdb-backup-{stamp}")
        # The settings' own permissions: a 0600 file holding an API key must
        # not get a world-readable copy.
        os.replace(write_temp(path.parent, path.read_bytes(), mode), backup)
    data = (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    tmp = write_temp(path.parent, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    _prune_backups(path)
    return backup


#: Backups of a settings file kept (the newest): each install and uninstall makes one.
KEEP_BACKUPS = 5


def _prune_backups(path: Path) -> None:
    # Only files marchdb wrote: its own name pattern, regular files, never a link.
    prefix = f"{path.name}.marchdb-backup-"
    ours = sorted(p for p in path.parent.iterdir() if p.name.startswith(prefix) and stat.S_ISREG(os.lstat(p).st_mode))
    for old in ours[:-KEEP_BACKUPS]:
        old.unlink(missing_ok=True)
