"""The background import a session's start begins (``keep.start``): ``python -I -m marchdb.cli.keeprun HOME ROOT HOST``.

A front of its own, apart from ``lifecycle.keep`` (which the hook path imports), so that the hook path does
not reach up to the ``Store`` that this process stands on.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from marchdb.lifecycle.keep import LOG, QUIET_MINUTES, SINCE, imports_folder


def run(home: str, root: str, host: str) -> int:
    """The background import (``python -I -m marchdb.cli.keeprun HOME ROOT HOST``):
    one at a time per host; a summary line in ``imports.log``."""
    from marchdb import logfile
    from marchdb.config import load_config
    from marchdb.errors import MarchError
    from marchdb.store import Store

    folder = imports_folder(Path(home))
    lock_path = folder / f"{host}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:
        logfile.log(Path(home), LOG, f"{host}: cannot take {lock_path}: {exc}")
        return 1
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another one runs for this host
        try:
            cfg = load_config(home=home, root=root)
            store = Store(cfg, keep_vectors=False, use_model=False)
            try:
                data = store.import_(
                    host, None, apply=True, embed=False, since=SINCE, quiet_minutes=QUIET_MINUTES, by="session-start"
                )
            finally:
                store.close()
        except MarchError as exc:
            logfile.log(Path(home), LOG, f"{host}: {type(exc).__name__}: {exc}")
            return 1
        later = sum(1 for r in data["items"] if r["action"] == "skip" and "still going on" in (r["detail"] or ""))
        logfile.log(
            Path(home),
            LOG,
            f"{host}: created {data['created']}, skipped {data['skipped']} ({later} still going on), "
            f"problems {data['problems']}",
        )
        return 0
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(run(*sys.argv[1:4]))
