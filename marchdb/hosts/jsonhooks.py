"""Hooks in a JSON settings file: ``{"hooks": {Event: [entry]}}`` (Claude Code, Codex, Gemini, Qwen, Cursor).

An entry is a group ``{"matcher"?, "hooks": [handler]}`` (``grouped``) or the
handler itself (Cursor, VS Code). ``install`` adds marchdb's handler to each
event it answers and keeps everything else; running it twice changes
nothing; an earlier marchdb's handler (another path, or edited by hand) is
replaced, not doubled, and said. ``uninstall`` removes exactly what install
added (a list, an object or the file only when install created it) and gives
back the user's own bytes when nothing else changed since (``hosts.settings``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from marchdb.errors import FileError
from marchdb.hosts import settings
from marchdb.hosts.install import TIMEOUT_SECONDS, command_for, is_ours
from marchdb.hosts.settings import InstallResult


@dataclass
class JsonHooks:
    """A host whose hooks live in a JSON file."""

    host: str
    events: tuple[str, ...]
    user_file: Callable[[], Path]
    project_file: Callable[[Path], Path] | None
    grouped: bool = True
    #: The handler's timeout: ``timeout`` in seconds, or in milliseconds (``ms``).
    timeout_ms: bool = False
    #: Keys the file must hold when marchdb creates it (Cursor's ``version``).
    top: dict = field(default_factory=dict)
    #: What to tell the user once the hooks are written (given the file and the project).
    after: Callable[[Path, Path | None], tuple[str, ...]] = lambda path, project: ()
    #: The folder the user's file must stay in, links followed (``settings.check_place``).
    user_base: Callable[[], Path] = lambda: Path.home()
    #: Another host whose hooks these are (VS Code runs Claude Code's): ``installed`` lists them once.
    alias_of: str | None = None

    # ------------------------------------------------------------ the installer's interface

    def places(self, project: Path | None) -> list[Path]:
        """The file to edit: the user's, or the project's."""
        if project is None:
            return [self.user_file()]
        if self.project_file is None:
            from marchdb.errors import ConfigError

            raise ConfigError(f"{self.host} has no project settings: install it for the user (without --project)")
        return [self.project_file(project)]

    def install(self, project: Path | None, argv: list[str], env: dict[str, str]) -> list[InstallResult]:
        command = command_for(self.host, argv, env)
        base = project if project is not None else self.user_base()
        return [self.install_file(path, command, base, project) for path in self.places(project)]

    def uninstall(self, project: Path | None) -> list[InstallResult]:
        return [self.uninstall_file(path) for path in self.places(project)]

    def found(self, project: Path | None) -> list[dict]:
        """Where marchdb's hooks are in this scope, for ``doctor``."""
        out = []
        for path in self.places(project):
            if not os.path.lexists(path):
                continue
            try:
                hooks = settings.read(path).get("hooks")
            except FileError as exc:
                out.append({"host": self.host, "where": str(path), "events": [], "error": str(exc)})
                continue
            mine = (
                {e: self.ours_in(v) for e, v in hooks.items() if isinstance(v, list)} if isinstance(hooks, dict) else {}
            )
            events = [e for e, handlers in mine.items() if handlers]
            if events:
                commands = sorted({str(h.get("command")) for handlers in mine.values() for h in handlers})
                out.append({"host": self.host, "where": str(path), "events": events, "commands": commands})
        return out

    # ------------------------------------------------------------ one file

    def handler(self, command: str) -> dict:
        """The entry marchdb writes for one event."""
        timeout = TIMEOUT_SECONDS * 1000 if self.timeout_ms else TIMEOUT_SECONDS
        return {"type": "command", "command": command, "timeout": timeout}

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

    def install_file(
        self, path: Path, command: str, base: Path | None = None, project: Path | None = None
    ) -> InstallResult:
        """Add marchdb's hook for every event to ``path`` (``base``: the folder it must stay in)."""
        handler = self.handler(command)
        plan: dict = {}

        def change(data: dict) -> tuple[dict | None, None]:
            plan.clear()
            existed = os.path.lexists(path)
            note = settings.read_note(path)
            # Hooks of a marchdb that kept no note: what it created cannot be told
            # apart, so no note now either (uninstall then removes emptied lists, as before).
            legacy = (
                note is None
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
                self.drop_ours(entries)  # an older or edited marchdb hook: replaced, not doubled
                entries.append({"hooks": [handler]} if self.grouped else handler)
                added.append(event)
            plan.update(added=added, replaced=replaced, created=created, legacy=legacy, note=note, existed=existed)
            return (data if added else None), None

        undo: list = []

        def before(backup: Path | None) -> None:
            # The note is written with the file, never for a refused edit: always
            # (unless legacy), so that uninstall never takes an emptied list of
            # the user's for one install made.
            if plan["legacy"]:
                return
            note = plan["note"] or {}
            record = settings.record_path(path)
            if not undo:  # the first try: what a failed write must put back
                previous = record.read_bytes() if note else None
                undo.append(lambda: _restore(record, previous))
            made = [*note.get("backups", []), *([backup.name] if backup else [])]
            settings.write_note(
                path,
                {
                    "created": sorted(set(note.get("created", [])) | set(plan["created"])),
                    # The file as it was before marchdb first touched it: uninstall gives these bytes back.
                    "pristine": note.get("pristine") if note else (backup.name if backup else None),
                    "backups": made,
                },
            )

        try:
            done = settings.edit(path, change, base, before=before)
        except BaseException:
            for job in undo:
                job()
            raise
        notes = self.after(path, project)
        if not done.changed:
            return InstallResult(path, False, command, notes=notes)
        replaced = tuple(dict.fromkeys(plan["replaced"]))
        return InstallResult(path, True, command, done.backup, tuple(plan["added"]), replaced, notes)

    def uninstall_file(self, path: Path) -> InstallResult:
        """Remove the handlers ``install`` added from ``path``; everything else stays."""
        if not os.path.lexists(path):
            return InstallResult(path, False, "")
        settings.read_bytes(path)  # a link or a device is refused before the folder is locked
        removed: list[str] = []
        outcome: dict = {}

        def change(data: dict) -> tuple[dict | None, None]:
            removed.clear()
            note = settings.read_note(path)
            # What install created; an install by a marchdb that kept no note created
            # whatever is left empty (it only ever added to what was there).
            created = None if note is None else [str(k) for k in note["created"]]
            hooks = data.get("hooks")
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
                return None, None
            if note is not None and _give_back(path, data, note, created or []):
                outcome["given_back"] = True
                return None, None
            return data, None

        done = settings.edit(path, change, None)
        if not removed:
            return InstallResult(path, False, "")
        settings.remove_note(path)
        return InstallResult(path, True, "", done.backup, tuple(removed))


def _restore(record: Path, previous: bytes | None) -> None:
    """Put an install note back as it was before a write that failed."""
    try:
        if previous is None:
            if os.path.lexists(record) and stat.S_ISREG(os.lstat(record).st_mode):
                record.unlink()
        else:
            record.write_bytes(previous)
    except OSError:
        pass


def _give_back(path: Path, data: dict, note: dict, created: list[str]) -> bool:
    """Put the user's own file back (called under the folder's lock): the
    bytes it had before marchdb first touched it when, without marchdb's
    hooks, it holds the same settings; nothing when install made it and
    nothing else is in it. The backups marchdb made of it go. False when the
    user changed something since (the file is then written as it is now)."""
    made = [path.with_name(str(n)) for n in note.get("backups", []) if isinstance(n, str) and "/" not in n]
    pristine = note.get("pristine")
    if not data and settings.FILE_CREATED in created:
        path.unlink()
    elif isinstance(pristine, str) and "/" not in pristine:
        original = path.with_name(pristine)
        try:
            raw, st = settings.read_bytes(original)
            if raw is None or st is None or settings.parse(original, raw) != data:
                return False
        except FileError:
            return False
        os.replace(original, path)  # its bytes, its permissions, its owner
        settings.fsync_dir(path.parent)
    else:
        return False
    for backup in made:
        if backup != path and os.path.lexists(backup) and stat.S_ISREG(os.lstat(backup).st_mode):
            backup.unlink()
    return True
