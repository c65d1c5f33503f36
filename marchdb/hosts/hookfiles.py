"""Files marchdb writes whole for a host: hook scripts (one per event: Cline) and plugins.

A file is marchdb's when it is a regular file carrying ``MARK`` near its start
(a comment, or a description where the format has no comments): only such a
file is ever replaced or removed. A file of the same name that is not
marchdb's stops the install (nothing is written over it); ``uninstall``
removes exactly the files install wrote, and a folder only when install made
it for itself and nothing else is left in it. Nothing is written through a
link that leads out of the project (or the home) being installed into.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from marchdb.errors import ConfigError, FileError
from marchdb.hosts import settings
from marchdb.hosts.install import command_for
from marchdb.hosts.settings import InstallResult
from marchdb.vault.files import fsync_dir, write_temp

#: What every file marchdb writes for a host says of itself.
MARK = "written by `marchdb install`, removed by `marchdb uninstall`"
#: What files of an earlier marchdb said instead (its Hermes plugin).
OLDER_MARKS = ("Written by `marchdb install hermes`",)
#: The first line after the shebang of a hook script marchdb writes (Cline).
FILE_MARK = f"# marchdb hook: {MARK}"
#: Largest file that can be marchdb's (its plugins are a few KB).
MAX_OURS_BYTES = 256 * 1024


def is_ours_file(path: Path) -> bool:
    """Whether ``path`` is a file marchdb wrote (a regular file with ``MARK`` near its start)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_OURS_BYTES:
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            head = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return False
    return any(mark.encode() in head for mark in (MARK, *OLDER_MARKS))


def write_whole(path: Path, data: bytes, mode: int, base: Path | None) -> bool:
    """Write ``data`` as ``path`` (atomically, ``mode``), unless it holds it
    already (False); a file there that is not marchdb's is refused."""
    settings.check_place(path, base)
    if os.path.lexists(path):
        if not is_ours_file(path):
            raise FileError(
                f"{path} exists and is not marchdb's; marchdb does not replace it: move it away and run this again"
            )
        if path.read_bytes() == data:
            return False
    settings.ensure_folder(path.parent, base)
    owner = None
    if os.geteuid() == 0:  # a root install into a user's folder: the file is the folder owner's
        st = os.stat(path.parent)
        owner = None if st.st_uid == 0 else (st.st_uid, st.st_gid)
    tmp = write_temp(path.parent, data, mode)
    try:
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return True


def remove_ours(path: Path) -> bool:
    """Remove ``path`` when it is marchdb's (True), else leave it."""
    if not is_ours_file(path):
        return False
    path.unlink()
    return True


# ---------------------------------------------------------------- one executable file per event (Cline)


@dataclass
class FileHooks:
    """A host that runs one executable file per event, named after it."""

    host: str
    events: tuple[str, ...]
    user_dirs: Callable[[], list[Path]]
    project_dir: Callable[[Path], Path]
    #: Folders an earlier marchdb also wrote to, emptied of its files by install and uninstall.
    legacy_dirs: Callable[[], list[Path]] = lambda: []
    #: Why the legacy folders are emptied (said when they were).
    legacy_note: str = ""

    def places(self, project: Path | None) -> list[Path]:
        """Where the hook files go: the user's folder, or the project's."""
        return self.user_dirs() if project is None else [self.project_dir(project)]

    @staticmethod
    def script(command: str) -> bytes:
        """The hook file: a shell script running ``command``."""
        return f"#!/bin/sh\n{FILE_MARK}\n{command}\n".encode()

    def install(self, project: Path | None, argv: list[str], env: dict[str, str]) -> list[InstallResult]:
        command = command_for(self.host, argv, env)
        base = project if project is not None else Path.home()
        results = [self.install_in(folder, command, base) for folder in self.places(project)]
        if project is None:
            results += [r for r in (self.uninstall_in(f, self.legacy_note) for f in self.legacy_dirs()) if r.changed]
        return results

    def uninstall(self, project: Path | None) -> list[InstallResult]:
        folders = self.places(project) + (self.legacy_dirs() if project is None else [])
        return [self.uninstall_in(folder) for folder in folders]

    def found(self, project: Path | None) -> list[dict]:
        out = []
        for folder in self.places(project) + (self.legacy_dirs() if project is None else []):
            events = [e for e in self.events if is_ours_file(folder / e)]
            if events:
                out.append({"host": self.host, "where": str(folder), "events": events})
        return out

    def install_in(self, folder: Path, command: str, base: Path | None = None) -> InstallResult:
        """Write the hook files into ``folder`` (never over a file marchdb did not write)."""
        added, replaced = [], []
        data = self.script(command)
        for event in self.events:
            target = folder / event
            if os.path.lexists(target) and not is_ours_file(target):
                raise FileError(
                    f"{target} exists and is not marchdb's hook; marchdb does not replace it: merge the two "
                    f"by hand (call `marchdb hook {self.host}` from it), or move it away and run this again"
                )
        for event in self.events:
            target = folder / event
            before = target.read_text(errors="replace").splitlines()[2:] if os.path.lexists(target) else None
            if write_whole(target, data, 0o755, base):
                added.append(event)
                if before is not None:
                    replaced.append(next((line for line in before if line.strip()), ""))
        return InstallResult(folder, bool(added), command, None, tuple(added), tuple(dict.fromkeys(replaced)))

    def uninstall_in(self, folder: Path, note: str = "") -> InstallResult:
        """Remove the hook files marchdb wrote from ``folder``."""
        removed = [e for e in self.events if remove_ours(folder / e)]
        return InstallResult(folder, bool(removed), "", None, tuple(removed), (), (note,) if removed and note else ())


# ---------------------------------------------------------------- a plugin: files in a folder


@dataclass
class Plugin:
    """A host that loads a plugin marchdb writes: ``files(argv, env)`` names
    each file and its bytes (each carries ``MARK``), in ``user_folder()`` or
    ``project_folder(project)``. ``own_folder``: the folder is the plugin's
    alone (removed with it when nothing else is in it)."""

    host: str
    events: tuple[str, ...]
    user_folder: Callable[[], Path]
    project_folder: Callable[[Path], Path] | None
    files: Callable[[list[str], dict[str, str]], dict[str, bytes]]
    own_folder: bool = False
    #: Run once the files are written (a host setting that enables the plugin): notes for the user.
    configure: Callable[[Path, Path | None], tuple[str, ...]] = lambda folder, project: ()
    #: Run once the files are removed: notes for the user.
    unconfigure: Callable[[Path, Path | None], tuple[str, ...]] = lambda folder, project: ()
    user_base: Callable[[], Path] = lambda: Path.home()
    project_scope: bool = True

    def places(self, project: Path | None) -> list[Path]:
        if project is None:
            return [self.user_folder()]
        if self.project_folder is None:
            raise ConfigError(f"{self.host} has no project settings: install it for the user (without --project)")
        return [self.project_folder(project)]

    def names(self) -> list[str]:
        return list(self.files(["/marchdb"], {}))

    def install(self, project: Path | None, argv: list[str], env: dict[str, str]) -> list[InstallResult]:
        folder = self.places(project)[0]
        base = project if project is not None else self.user_base()
        files = self.files(argv, env)
        settings.check_place(folder / "x", base)
        if self.own_folder and os.path.islink(folder):
            raise FileError(f"{folder} is a symbolic link; marchdb does not write through links")
        for name in files:
            if os.path.lexists(folder / name) and not is_ours_file(folder / name):
                raise FileError(
                    f"{folder / name} exists and is not marchdb's; marchdb does not replace it: "
                    "move it away and run this again"
                )
        written = [name for name, data in files.items() if write_whole(folder / name, data, 0o644, base)]
        notes = self.configure(folder, project)
        return [InstallResult(folder, bool(written), " ".join(argv), None, self.events if written else (), (), notes)]

    def uninstall(self, project: Path | None) -> list[InstallResult]:
        folder = self.places(project)[0]
        removed = [name for name in self.names() if remove_ours(folder / name)]
        for name in removed:
            _remove_compiled(folder, name)
        if removed and self.own_folder:
            try:
                folder.rmdir()  # only when nothing of the user's is in it
            except OSError:
                pass
        notes = self.unconfigure(folder, project) if removed else ()
        return [InstallResult(folder, bool(removed), "", None, self.events if removed else (), (), notes)]

    def found(self, project: Path | None) -> list[dict]:
        folder = self.places(project)[0]
        mine = [name for name in self.names() if is_ours_file(folder / name)]
        return [{"host": self.host, "where": str(folder), "events": list(self.events)}] if mine else []


def _remove_compiled(folder: Path, name: str) -> None:
    """The bytecode Python wrote for a module marchdb wrote (a host that
    imported it: Hermes), and ``__pycache__`` when nothing else is in it."""
    stem, dot, suffix = name.rpartition(".")
    cache = folder / "__pycache__"
    if suffix != "py" or not dot or os.path.islink(cache) or not cache.is_dir():
        return
    for compiled in cache.iterdir():
        if compiled.name.startswith(f"{stem}.") and compiled.suffix == ".pyc" and compiled.is_file():
            if not compiled.is_symlink():
                compiled.unlink()
    try:
        cache.rmdir()
    except OSError:
        pass


# ---------------------------------------------------------------- several at once (Cline)


@dataclass
class Together:
    """A host wired in several ways at once (Cline: hook files for its
    extension, a plugin for its CLI): each is installed in turn, and when
    one is refused, the ones before it that were not installed already are
    removed again: a refused install leaves things as they were."""

    parts: tuple

    @property
    def events(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(event for part in self.parts for event in part.events))

    @property
    def project_scope(self) -> bool:
        return all(getattr(part, "project_scope", True) for part in self.parts)

    def install(self, project: Path | None, argv: list[str], env: dict[str, str]) -> list[InstallResult]:
        results: list[InstallResult] = []
        new: list = []  # the parts this run installed where nothing of marchdb's was
        for part in self.parts:
            fresh = not part.found(project)
            try:
                results += part.install(project, argv, env)
            except (ConfigError, FileError):
                for earlier in new:
                    earlier.uninstall(project)
                raise
            if fresh:
                new.append(part)
        return results

    def uninstall(self, project: Path | None) -> list[InstallResult]:
        return [result for part in self.parts for result in part.uninstall(project)]

    def found(self, project: Path | None) -> list[dict]:
        return [row for part in self.parts for row in part.found(project)]
