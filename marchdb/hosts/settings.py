"""A host's settings file, edited safely: read strictly, locked, backed up, replaced atomically.

Every other setting and hook is kept as it is, in the file's own layout (its
indent, one line or many, its final newline); a file that is not valid JSON
(or not an object, or a symlink, or read-only, or another user's) is refused,
never rewritten. An edit happens under a lock of the file's folder and is
written only if the file still holds what was read: a marchdb running beside
it waits, and a host that wrote meanwhile has its write read again, never
lost. A backup of the previous file is written next to it first, with its own
permissions and owner (it may hold keys); what marchdb created in it (a key,
the whole file) and the backup of the file as it was before marchdb touched
it are noted beside it (``<file>.marchdb-install``) so that ``uninstall``
removes exactly that, and gives the user's own bytes back when nothing else
changed. Nothing is written outside the folder the edit is for (a project,
the user's home) through a link.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from marchdb.clock import utc_now_iso
from marchdb.errors import FileError
from marchdb.vault.files import fsync_dir, is_inside, place_new, replace_if_same, write_temp

#: In the install note: the settings file did not exist before install made it.
FILE_CREATED = "(file)"
#: Largest settings file read (Claude Code's are a few KB).
MAX_SETTINGS_BYTES = 4 * 1024 * 1024
#: Backups of a settings file kept (the newest): each install and uninstall makes one.
KEEP_BACKUPS = 5
#: Times an edit is tried again when the file changed under it (a host writing it).
EDIT_TRIES = 50


# ---------------------------------------------------------------- where marchdb may write


def check_place(path: Path, base: Path | None) -> None:
    """Refuse to write ``path`` when it, or a folder on the way to it, would
    take the write outside ``base`` (the project, or the user's home): a
    ``.claude`` that links to another program's folder. A link that stays
    inside ``base`` (dotfiles kept in the home) is followed; the file itself
    is never a link (``read`` refuses it)."""
    if base is None:
        return
    if not is_inside(_real(Path(base)), _real(path.parent)):
        raise FileError(
            f"{path.parent} leads outside {base} (a symbolic link on the way points elsewhere); "
            "marchdb does not write through it: nothing was changed"
        )


def _real(path: Path) -> str:
    """Where ``path`` lies once its links are followed; the part that does
    not exist yet will be made as real folders."""
    here, rest = Path(os.path.abspath(path)), list[str]()
    while not os.path.lexists(here) and here != here.parent:
        here, rest = here.parent, [here.name, *rest]
    return os.path.join(os.path.realpath(here), *rest)


def ensure_folder(folder: Path, base: Path | None) -> None:
    """Make ``folder`` (and its parents) after checking where they lead (``check_place``)."""
    check_place(folder / "x", base)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FileError(f"cannot make {folder}: {exc.strerror or exc}; nothing was changed") from None
    check_place(folder / "x", base)  # made meanwhile by someone else?


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock of ``folder`` (flock on the folder itself: no
    lock file is left behind) while a settings file in it is edited."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileError(f"cannot open {folder}: {exc.strerror or exc}; nothing was changed") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets go of the lock


# ---------------------------------------------------------------- reading


def read_bytes(path: Path) -> tuple[bytes | None, os.stat_result | None]:
    """The file's bytes and stat (``(None, None)`` when there is none), or a
    ``FileError`` saying why marchdb will not edit it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:  # a file where a folder should be (.claude)
        raise FileError(f"cannot read {path}: {exc.strerror or exc}; nothing was changed") from None
    if stat.S_ISLNK(st.st_mode):
        raise FileError(
            f"{path} is a symlink; marchdb does not write through links: edit {os.path.realpath(path)} or run this on it"
        )
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SETTINGS_BYTES:
        raise FileError(f"{path} is not a settings file marchdb can edit (not a regular file, or over 4 MB)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            data = b""
            while chunk := os.read(fd, 1 << 20):
                data += chunk
                if len(data) > MAX_SETTINGS_BYTES:
                    raise FileError(f"{path} is over 4 MB: not a settings file marchdb edits")
            return data, os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise FileError(f"cannot read {path}: {exc.strerror or exc}; nothing was changed") from None


def parse(path: Path, raw: bytes | None) -> dict:
    """The JSON object in ``raw`` ({} for none or an empty file), or a
    ``FileError`` saying why it cannot be edited (nothing is changed)."""
    if raw is None:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(f"cannot read {path}: {exc}; nothing was changed") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text.removeprefix("\ufeff"), parse_constant=_not_json, object_pairs_hook=_no_twice)
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


def read(path: Path) -> dict:
    """The JSON object in ``path`` ({} for none or an empty file), or a
    ``FileError`` saying why it cannot be edited (nothing is changed)."""
    return parse(path, read_bytes(path)[0])


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


# ---------------------------------------------------------------- writing in the file's own layout


_INDENT = re.compile(rb"[\[{][ \t]*\r?\n([ \t]+)\S")


def dumps_like(data: dict, original: bytes | None) -> bytes:
    """``data`` as JSON in the layout of ``original``: its indent (two spaces
    when it has none to copy), one line when it was one line, its final
    newline or none, ``\\uXXXX`` escapes when it used only those."""
    text = (original or b"").decode("utf-8", "replace")
    ascii_only = bool(original) and "\\u" in text and text.isascii()
    if original and original.strip() and b"\n" not in original.strip():
        out = json.dumps(data, ensure_ascii=ascii_only)
        return (out + ("\n" if original.endswith(b"\n") else "")).encode("utf-8")
    found = _INDENT.search(original or b"")
    indent: str | int = found.group(1).decode() if found else 2
    out = json.dumps(data, indent=indent, ensure_ascii=ascii_only)
    newline = original is None or not original.strip() or original.endswith(b"\n")
    return (out + ("\n" if newline else "")).encode("utf-8")


class Changed(Exception):
    """The file changed between the read and the write (a host wrote it): read it again."""


def _owner_for(path: Path, st: os.stat_result | None) -> tuple[int, int] | None:
    """The owner a file written at ``path`` must have (the file's own, or
    for a new file its folder's), when it is not this process's; a
    ``FileError`` when this process could not give it (not root)."""
    if st is None:
        st = os.stat(path.parent)
        if os.geteuid() != 0:
            return None  # a new file of this user in a folder this user may write
    if (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid()):
        return None
    if os.geteuid() == 0:
        return st.st_uid, st.st_gid
    if st.st_uid != os.geteuid():
        raise FileError(
            f"{path} belongs to another user (uid {st.st_uid}); marchdb does not take it over: "
            "run this as that user. Nothing was changed"
        )
    return None


def put(path: Path, data: bytes, expected: bytes | None, st: os.stat_result | None, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically, with its permissions and
    owner, if it still holds ``expected`` (``Changed`` otherwise).

    The check ends with the file's identity (``st``), and a host's write that
    lands between it and the replace gets its place back
    (``files.replace_if_same``): the edit reads again."""
    owner = _owner_for(path, st)
    tmp = write_temp(path.parent, data, stat.S_IMODE(st.st_mode) if st is not None else mode)
    try:
        if owner is not None:
            os.chown(tmp, *owner)
        if expected is None or st is None:
            if not place_new(tmp, path):  # created meanwhile: never replace a file we did not read
                raise Changed
            return
        if read_bytes(path)[0] != expected or not replace_if_same(tmp, path, st):
            raise Changed
    except FileNotFoundError:
        raise Changed from None  # removed meanwhile
    finally:
        tmp.unlink(missing_ok=True)
        fsync_dir(path.parent)


def backup_of(path: Path, raw: bytes, st: os.stat_result) -> Path:
    """A copy of the file as it was (its permissions and owner: it may hold keys)."""
    stamp = utc_now_iso().replace(":", "").replace("-", "").replace(".", "")
    backup = path.with_name(f"{path.name}.marchdb-backup-{stamp}")
    n = 1
    while os.path.lexists(backup):
        backup = path.with_name(f"{path.name}.marchdb-backup-{stamp}-{n}")
        n += 1
    tmp = write_temp(path.parent, raw, stat.S_IMODE(st.st_mode))
    try:
        owner = _owner_for(path, st)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, backup)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return backup


@dataclass
class Edit:
    """What an edit of a settings file did."""

    changed: bool
    backup: Path | None = None
    #: Whatever the change function gave back besides the new settings.
    result: object = None


def edit(
    path: Path,
    change: Callable[[dict], tuple[dict | None, object]],
    base: Path | None,
    before: Callable[[Path | None], None] | None = None,
) -> Edit:
    """Edit the JSON settings ``path``: ``change(data)`` returns the new
    settings (None: nothing to change) and a result of its own. Under the
    folder's lock; the file is read again and ``change`` run again when it
    changed before the write (a host writing it). A read-only file or
    another user's is refused; a backup of the old file comes first, then
    ``before(backup)`` (the install note), then the file."""
    check_place(path, base)
    ensure_folder(path.parent, base)
    try:
        with locked(path.parent):
            for attempt in range(EDIT_TRIES):
                if attempt:
                    time.sleep(min(0.05, 0.005 * attempt))  # let the other writer finish
                raw, st = read_bytes(path)
                new, result = change(parse(path, raw))
                if new is None:
                    return Edit(False, None, result)
                if st is not None and not stat.S_IMODE(st.st_mode) & stat.S_IWUSR:
                    # Made read-only on purpose (a managed or frozen setup): replacing it would go around that.
                    raise FileError(f"{path} is read-only; make it writable (chmod u+w) to let marchdb edit it")
                _owner_for(path, st)  # refused before anything is written
                backup = backup_of(path, raw, st) if raw is not None and st is not None else None
                try:
                    if before is not None:
                        before(backup)
                    put(path, dumps_like(new, raw), raw, st)
                except Changed:
                    if backup is not None:
                        backup.unlink(missing_ok=True)
                    continue
                except BaseException:
                    if backup is not None:
                        backup.unlink(missing_ok=True)
                    raise
                prune_backups(path)
                return Edit(True, backup, result)
    except OSError as exc:
        raise FileError(f"cannot write {exc.filename or path}: {exc.strerror or exc}; {path} was not changed") from None
    raise FileError(f"{path} kept changing while marchdb edited it ({EDIT_TRIES} tries); nothing was changed")


def prune_backups(path: Path, keep: int = KEEP_BACKUPS) -> None:
    # Only files marchdb wrote: its own name pattern, regular files, never a link.
    prefix = f"{path.name}.marchdb-backup-"
    ours = sorted(p for p in path.parent.iterdir() if p.name.startswith(prefix) and stat.S_ISREG(os.lstat(p).st_mode))
    for old in ours[: max(0, len(ours) - keep)]:
        old.unlink(missing_ok=True)


def backups(path: Path) -> list[Path]:
    """The backups marchdb made of ``path``, oldest first."""
    prefix = f"{path.name}.marchdb-backup-"
    try:
        return sorted(
            p for p in path.parent.iterdir() if p.name.startswith(prefix) and stat.S_ISREG(os.lstat(p).st_mode)
        )
    except OSError:
        return []


# ---------------------------------------------------------------- the install note


def record_path(path: Path) -> Path:
    """The note beside ``path`` of what ``install`` created in it."""
    return path.with_name(f"{path.name}.marchdb-install")


def read_note(path: Path) -> dict | None:
    """The install note of ``path`` (None: none, or not one marchdb wrote)."""
    record = record_path(path)
    try:
        if not stat.S_ISREG(os.lstat(record).st_mode) or os.lstat(record).st_size > 64 * 1024:
            return None
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("created"), list):
        return None
    return data


def read_record(path: Path) -> list[str] | None:
    """The keys ``install`` created in ``path`` (None: no note)."""
    note = read_note(path)
    return None if note is None else [str(k) for k in note["created"]]


def write_note(path: Path, note: dict) -> None:
    record = record_path(path)
    if os.path.lexists(record) and not stat.S_ISREG(os.lstat(record).st_mode):
        raise FileError(f"{record} is not a regular file; marchdb does not write through it")
    body = {**note, "note": "written by `marchdb install`, removed by `marchdb uninstall`"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        owner = _owner_for(path, read_bytes(path)[1])  # the settings file's, or its folder's
        tmp = write_temp(path.parent, (json.dumps(body, indent=2) + "\n").encode("utf-8"), 0o600)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, record)
    except OSError as exc:
        raise FileError(
            f"cannot write {exc.filename or record}: {exc.strerror or exc}; {path} was not changed"
        ) from None


def remove_note(path: Path) -> None:
    record = record_path(path)
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(record).st_mode):
            record.unlink()


# ---------------------------------------------------------------- what install and uninstall say


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
