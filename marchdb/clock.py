"""Timestamps: one format everywhere marchdb writes a time.

Seed 000's form, UTC with milliseconds and a ``Z`` (``2026-05-14T10:30:00.000Z``),
in frontmatter, in the ``meta`` table and in events. The index's log tables
get the same form from SQLite (``strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`` as
their column default, ``sql/001_schema.sql``), so logs and files sort and
compare as text.
"""

from __future__ import annotations

import datetime as dt
import functools


def utc_now_iso() -> str:
    """Now, in the seed's form ``2026-05-14T10:30:00.000Z``."""
    return format_time(dt.datetime.now(dt.UTC))


def format_time(when: dt.datetime) -> str:
    """A datetime in the seed's form (UTC, milliseconds, ``Z``); naive means UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    when = when.astimezone(dt.UTC)
    # The year by hand: strftime writes year 1 as "1", which is not ISO 8601.
    return f"{when.year:04d}-" + when.strftime("%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


#: The times marchdb keeps: years 1 to 9999 in UTC, less a day at each end,
#: where converting to some local zone would leave the calendar.
_FIRST = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
_LAST = dt.datetime(9999, 12, 30, tzinfo=dt.UTC)


def in_calendar(when: dt.datetime | None) -> dt.datetime | None:
    """``when`` (aware) if marchdb can keep it, else None: a time must
    convert to UTC and to any local zone without leaving the years
    ``datetime`` knows — a source's ``9999-12-31T23:59:59-05:00`` is year
    10000 in UTC, and ``0001-01-01T00:00Z`` is year 0 in New York."""
    if when is None:
        return None
    try:
        utc = when.astimezone(dt.UTC)
    except (OverflowError, ValueError):
        return None
    return when if _FIRST <= utc <= _LAST else None


def parse_time(value: object) -> dt.datetime | None:
    """Best-effort read of a timestamp (YAML may already give a datetime or a
    date); None when it is not one, or not one marchdb can keep
    (``in_calendar``). Naive times are taken as UTC."""
    if isinstance(value, dt.datetime):
        return in_calendar(value if value.tzinfo else value.replace(tzinfo=dt.UTC))
    if isinstance(value, dt.date):
        return in_calendar(dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC))
    if isinstance(value, str) and value.strip():
        return _parse_text(value)
    return None


@functools.lru_cache(maxsize=8192)
def _parse_text(value: str) -> dt.datetime | None:
    # Cached: a warm recall reads the same candidates' times again and again
    # (temperature's recency: ~120 parses, ~0.5 ms of each recall).
    text = value.strip().replace("Z", "+00:00")
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return in_calendar(parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC))
