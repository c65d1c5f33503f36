"""marchdb's own log files, with a bound: ``$MARCH_HOME/logs/*.log``.

One JSON object a line (``at`` plus the record). A file that would pass
``MAX_BYTES`` is rotated first (seed 004: size + backups): ``x.log`` becomes
``x.log.1``, ``.1`` becomes ``.2`` ... and the oldest of ``BACKUPS`` goes, so a
log never takes more than ``(BACKUPS + 1) · MAX_BYTES``. Only files marchdb
named are rotated, and never through a symlink.

``lifecycle.log`` records what ``import --apply`` created and what
``maintain --apply`` archived (so a person can see, and undo, what changed);
``hooks.log`` and ``daemon.log`` are plain text lines (``logfile.log``: why a
hook injected nothing, what the engine did: ``log``), written here too. The recall and
open logs live in the index and have their own bounds
(``sql/003_lifecycle.sql``); ``doctor`` reports both.

Only the standard library (a hook imports this when it logs).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path

from marchdb.private import DAEMON_OUT as DAEMON_OUT
from marchdb.private import LOG_DIR, make_private_dirs

#: A log file is rotated before it would grow past this many bytes (the
#: same bound as the hook and engine logs of ``marchdb serve``).
MAX_BYTES = 256 * 1024
#: Rotated files kept (``x.log.1``, ``x.log.2``).
BACKUPS = 2
#: The log of imports and maintenance actions.
LIFECYCLE = "lifecycle.log"


def logs_dir(home: Path) -> Path:
    """Where marchdb's log files live: ``$MARCH_HOME/logs``."""
    return Path(home) / "logs"


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def append(path: Path, record: dict, max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> None:
    """Append ``record`` (plus ``at``) as one JSON line (``append_line``)."""
    from marchdb import redact
    from marchdb.clock import utc_now_iso  # datetime: not for the hooks, which log plain lines

    record = redact.redact_fields(record)[0]  # no secret in a log, whatever a message quotes
    text = json.dumps({"at": utc_now_iso(), **record}, ensure_ascii=False, default=str) + "\n"
    # A path that is not UTF-8 (a lone surrogate) stays readable JSON: \\udce9.
    line = text.encode("utf-8", "backslashreplace")
    append_line(path, line, max_bytes, backups)


def append_line(path: Path, line: bytes, max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> None:
    """Append ``line`` (bytes ending in a newline) to the log at ``path``,
    rotating first when the file would pass ``max_bytes``. Safe across
    processes: one ``flock`` on a lock file next to the log decides both the
    rotation and the write, so a writer that waited never rotates a file
    another has just rotated (which would lose a whole log's worth), and
    the line goes out in one ``write``. Never through a symlink; a log path
    that is not a regular file raises ``OSError``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    lock = os.open(f"{path}.lock", os.O_RDWR | flags, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.lexists(path) and not _regular(path):
            raise OSError(f"{path} is not a regular file; marchdb writes only its own log files")
        size = os.lstat(path).st_size if os.path.lexists(path) else 0
        if size and size + len(line) > max_bytes:
            _rotate(path, backups)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | flags, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    finally:
        os.close(lock)  # releases the flock


def _rotate(path: Path, backups: int) -> None:
    oldest = Path(f"{path}.{backups}")
    if _regular(oldest):
        oldest.unlink()
    for n in range(backups - 1, 0, -1):
        older = Path(f"{path}.{n}")
        if _regular(older):
            os.replace(older, f"{path}.{n + 1}")
    if backups > 0:
        os.replace(path, f"{path}.1")
    else:
        path.unlink()


def sizes(folder: Path) -> list[dict]:
    """Every marchdb log file in ``folder`` (``*.log`` and their rotated
    copies): ``{"file", "bytes", "keep_bytes", "rotated": True}``, by name."""
    out = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if ".log" not in entry.name or entry.name.endswith(".lock") or not entry.is_file(follow_symlinks=False):
                continue
            out.append(
                {
                    "file": entry.name,
                    "bytes": entry.stat(follow_symlinks=False).st_size,
                    "keep_bytes": MAX_BYTES,
                    "rotated": True,
                }
            )
    return out


#: ``DAEMON_OUT`` is begun afresh when an engine starts and finds it past this.
DAEMON_OUT_BYTES = 1024 * 1024


def log(home: Path, name: str, message: str, make_home: bool = True) -> None:
    """Append one line to ``$MARCH_HOME/logs/<name>.log`` (rotated by size,
    ``append_line``). Never raises: a log that cannot be written
    must not break a hook. ``make_home=False``: a home that is not there is
    not made for a log line (an engine whose home was deleted must not bring
    it back)."""
    if not make_home and not os.path.isdir(home):
        return
    # To the second, for a person reading the log; not clock.utc_now_iso
    # (milliseconds, for the index): its datetime import would cost every hook.
    from marchdb import redact  # no secret in a log, whatever a message quotes (an event, a refused value)

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    message = redact.redact(message)[0]
    line = f"{stamp}Z pid={os.getpid()} {' '.join(message.split())}\n".encode("utf-8", "replace")
    with contextlib.suppress(OSError):
        make_private_dirs(home / LOG_DIR, top=home)
        append_line(home / LOG_DIR / f"{name}.log", line)


def read_log(home: Path, name: str, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a log (``[]`` when there is none)."""
    path = home / LOG_DIR / f"{name}.log"
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            tail = fh.read().decode("utf-8", "replace").splitlines()
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return []
        return [f"(cannot read {path}: {exc.strerror})"]
    return tail[-lines:]
