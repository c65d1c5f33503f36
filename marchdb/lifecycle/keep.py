"""Keep importing: each agent host's finished sessions become memories by themselves (``importSessions``).

Off unless the user turns it on (``"importSessions": true`` in config.json,
or ``MARCH_IMPORT_SESSIONS=1``). Then the start of a host's session (its
``SessionStart`` event, which every wired host sends, answered by the
engine or the hook) starts, in a process of its own (``cli.keeprun``), the import of that
host's sessions of the last ``SINCE`` that have been quiet for
``QUIET_MINUTES``: the session that just ended, and any other finished
since. The event's answer does not wait for it: the process is started and
left (``start``), at most once every ``EVERY_SECONDS`` per host, one at a
time per host (a lock), and it writes only new memories, as ``marchdb
import HOST --since 7d --apply`` does (without embedding them: the engine's
watcher, or the next sync, does). What it did goes to the lifecycle log
(``by: session-start``, listed by ``marchdb import --history``) and a
line in ``$MARCH_HOME/logs/imports.log``.

A session still going on is left for a later start: an import never
rewrites a memory, so one imported while open would stay cut where it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from marchdb.lifecycle.sources import HOST_KINDS

#: How far back a background import looks (files not written since are not read).
SINCE = "7d"
#: A session whose last message is newer than this is still going on: left for a later start.
QUIET_MINUTES = 30
#: At most one background import per host this often.
EVERY_SECONDS = 600
#: The log a background import writes its summary to.
LOG = "imports"
_started: list[subprocess.Popen] = []  # the background imports of this process, until reaped


def imports_folder(home: Path) -> Path:
    return Path(home) / "imports"


def start(cfg, host: str, now: float | None = None) -> str | None:
    """On a session's start in ``host``: start the background import of its
    finished sessions when ``importSessions`` is on and none ran for it in the
    last ``EVERY_SECONDS``. Returns what was done, for the hook log (None: nothing)."""
    if not getattr(cfg, "import_sessions", False) or host not in HOST_KINDS:
        return None
    folder = imports_folder(cfg.home)
    stamp = folder / f"{host}.started"
    now = time.time() if now is None else now
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path in (folder, stamp):
            if path.is_symlink():
                return f"{path} is a link; marchdb writes only its own files (no background import)"
        # A stamp from the future (a clock once set ahead) is no recent run:
        # it would hold every import back until the clock caught up.
        if stamp.exists() and 0 <= now - stamp.stat().st_mtime < EVERY_SECONDS:
            return None
        stamp.touch()
        os.utime(stamp, (now, now))
        # -I: the hook runs in the host's project folder; a marchdb/ or a
        # sitecustomize.py there (or on the host's PYTHONPATH) is not imported.
        argv = [sys.executable, "-I", "-m", "marchdb.cli.keeprun", str(cfg.home), str(cfg.memory_root), host]
        _started[:] = [p for p in _started if p.poll() is None]  # the finished ones reaped
        with open(os.devnull, "rb") as null:
            _started.append(
                subprocess.Popen(
                    argv,
                    stdin=null,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # the host's Ctrl-C and exit do not end it
                    close_fds=True,
                )
            )
    except OSError as exc:
        return f"cannot start the background import of {host}'s sessions: {exc}"
    return f"importing {host}'s finished sessions in the background (importSessions)"


def install_note(cfg, host: str) -> str | None:
    """The line ``marchdb install HOST`` adds for a host whose sessions an import reads."""
    if host not in HOST_KINDS:
        return None
    if getattr(cfg, "import_sessions", False):
        return (
            f"importSessions is on: each {host} session's start imports the {host} sessions that ended "
            "(marchdb import --history lists them)"
        )
    return (
        f"to keep {host}'s sessions as memories: `marchdb import {host}` brings in the past ones, and "
        '"importSessions": true in config.json each one that ends (docs/lifecycle.md#keep-importing)'
    )
