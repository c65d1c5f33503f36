"""What was imported, and when (``marchdb import --history``), and the ``--since`` of a scheduled import.

Two sources, each for what it knows: the vault (every memory an import
made carries ``source: KIND:...``, so the index counts them by kind, with
the span of their sessions, whatever happened to the logs), and
``$MARCH_HOME/logs/lifecycle.log`` (each ``import --apply`` that created
something: when, which kind, from where, how many, and whether a person or
the end of a session started it). The log rotates (``logfile``), so its
runs reach back as far as its files do.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from marchdb import logfile
from marchdb.clock import parse_time
from marchdb.errors import InvalidInput
from marchdb.lifecycle.sources import KINDS

#: Runs listed at most.
MAX_RUNS = 200
#: Largest log file read for the runs (a log rotates at ``logfile.MAX_BYTES``).
MAX_LOG_BYTES = 4 * 1024 * 1024
_AGO = re.compile(r"^\s*(\d{1,5})\s*(m|min|h|d|w)\s*$", re.I)
_UNITS = {"m": "minutes", "min": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: object, now: dt.datetime | None = None) -> dt.datetime:
    """``--since``: ``7d``, ``12h``, ``30m``, ``2w`` ago, or a date or time
    (``2026-11-01``, ISO-8601); ``InvalidInput`` saying the forms otherwise."""
    now = now or dt.datetime.now(dt.UTC)
    if isinstance(text, str):
        ago = _AGO.match(text)
        if ago:
            return now - dt.timedelta(**{_UNITS[ago.group(2).lower()]: int(ago.group(1))})
        when = parse_time(text.strip())
        if when is not None:
            return when
    raise InvalidInput(f"--since {text!r} is no time; give an age (7d, 12h, 30m, 2w) or a date (2026-11-01)")


def _log_lines(home: Path) -> list[dict]:
    """The import records of the lifecycle log and its rotated files, oldest first."""
    folder = logfile.logs_dir(home)
    records = []
    for name in (f"{logfile.LIFECYCLE}.2", f"{logfile.LIFECYCLE}.1", logfile.LIFECYCLE):
        path = folder / name
        try:
            if path.is_symlink() or not path.is_file():
                continue
            with open(path, "rb") as fh:
                data = fh.read(MAX_LOG_BYTES)
        except OSError:
            continue
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # a line nested past what json decodes is no record either
                continue
            if isinstance(record, dict) and record.get("op") == "import":
                records.append(record)
    return records


def history(con, home: Path, limit: int = 20) -> dict:
    """``{"kinds": [{"kind", "memories", "first", "last"}], "runs": [{"at",
    "kind", "path", "created", "by", "since"}]}``: the memories imports made,
    by kind (from the index), and the latest ``limit`` runs that created
    something (from the lifecycle log), newest first."""
    rows = con.execute(
        """SELECT substr(a.source, 1, instr(a.source, ':') - 1) AS kind, count(*),
                  min(m.created_at), max(coalesce(m.updated_at, m.created_at))
           FROM memory_attrs a JOIN memory_index m ON m.rid = a.rid
           WHERE a.source IS NOT NULL AND instr(a.source, ':') > 1
           GROUP BY kind ORDER BY kind"""
    ).fetchall()
    kinds = [
        {"kind": kind, "memories": n, "first": first, "last": last} for kind, n, first, last in rows if kind in KINDS
    ]
    runs = []
    for record in reversed(_log_lines(home)):
        created = record.get("created")
        runs.append(
            {
                "at": record.get("at"),
                "kind": record.get("kind"),
                "path": record.get("path"),
                "created": len(created) if isinstance(created, list) else 0,
                "by": record.get("by") or "command",
                "since": record.get("since"),
            }
        )
        if len(runs) >= min(limit, MAX_RUNS):
            break
    return {"kinds": kinds, "runs": runs}
