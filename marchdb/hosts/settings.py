"""A host's settings file, edited safely: read strictly, backed up, replaced atomically.

Every other setting and hook is kept as it is; a file that is not valid JSON
(or not an object, or a symlink, or read-only) is refused, never rewritten; a
backup of the previous file is written next to it first, with its own
permissions (it may hold keys); what marchdb created in it (a key, the whole
file) is noted beside it (``<file>.marchdb-install``) so that ``uninstall``
removes exactly that.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from marchdb.clock import utc_now_iso
from marchdb.errors import FileError
from marchdb.files import fsync_dir, write_temp

#: In the install note: the settings file did not exist before install made it.
FILE_CREATED = "(file)"


#: Largest settings file read (Claude Code's are a few KB).
MAX_SETTINGS_BYTES = 4 * 1024 * 1024


def record_path(path: Path) -> Path:
    """The note beside ``path`` of what ``install`` created in it."""
    return path.with_name(f"{path.name}.marchdb-install")


def read_record(path: Path) -> list[str] | None:
    """The keys ``install`` created in ``path`` (None: no note)."""
    record = record_path(path)
    try:
        if not stat.S_ISREG(os.lstat(record).st_mode) or os.lstat(record).st_size > 64 * 1024:
            return None
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    created = data.get("created") if isinstance(data, dict) else None
    return [str(k) for k in created] if isinstance(created, list) else None


def write_record(path: Path, created: list[str]) -> None:
    record = record_path(path)
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


def read(path: Path) -> dict:
    """The JSON object in ``path`` ({} for none or an empty file), or a
    ``FileError`` saying why it cannot be edited (nothing is changed)."""
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


def write(path: Path, settings: dict) -> Path | None:  # noqa: D401
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
    #: What the user still has to do (Codex: trust the hooks; Hermes: choose the provider).
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "settings": str(self.settings),
            "changed": self.changed,
            "command": self.command,
            "backup": None if self.backup is None else str(self.backup),
            "events": list(self.events),
            "replaced": list(self.replaced),
            "notes": list(self.notes),
        }


def check_folder(folder: Path) -> None:
    """Refuse a hook folder that is a symbolic link: marchdb never writes through one."""
    if os.path.islink(folder):
        raise FileError(f"{folder} is a symbolic link; marchdb does not write through links")
