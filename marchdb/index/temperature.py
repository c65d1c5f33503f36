"""Temperature: recency, use and priority as a small ranking adjustment of recall.

Seed 003: "T = 0.5×recency + 0.3×references + 0.2×priority; hot → weighted up
in retrieval, cold → down", and not a replacement for the archive rules.
Seed 004: relevance = sim × importance × recency. Here, for each candidate of
a recall:

* recency ``r`` in [0, 1]: ``0.5 ** (age / HALF_LIFE_DAYS)``, the age counted
  from the memory's ``updated_at`` (else ``created_at``) in its frontmatter;
  no time at all → 0. File mtimes are not used: a git checkout or a file
  sync tool gives every file the same one.
* use ``u`` in [-1, 1]: of the times the memory was hinted in the last
  ``USE_DAYS`` days, how often it was opened within a day after:
  ``2 · (opened + 1) / (hinted + 2) − 1`` — 0 without history, towards +1
  when its hints were followed, towards −1 when they were ignored.
* priority ``p``: the optional ``priority:`` field (high 1, normal 0, low −1;
  ``notes.PRIORITIES``).

``T = 0.5·r + 0.3·u + 0.2·p`` (in [−0.5, 1]) and the adjustment is
``MAX_ADJUST · T``.

It only reorders. Candidates are ranked by ``score + adjustment``, but the
hint rules (threshold, de-duplication) go on reading the calibrated score,
which stays as it was: temperature can neither push an unrelated memory over
the threshold nor keep a relevant one out (never a filter). It decides
between candidates whose relevance is within a few hundredths — an older and
a newer memory on the same subject (``tools/bench_temperature.py``).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import apsw

from marchdb.clock import format_time, parse_time
from marchdb.index.db import sql_file

if TYPE_CHECKING:
    from marchdb.index.results import Hint

#: Largest change of a candidate's ranking key (seed 000 scores are 0..1).
#: Chosen on whole sets with tools/bench_temperature.py (a small grid): with
#: recall's relative calibration the newer of two memories on one subject
#: ranks first in 75% of the pairs at 0.03, 80% at 0.04, 85% from 0.05 (65%
#: without); locomo replayed "as if live" (recency differs between sessions,
#: most questions ask about older ones) keeps its nDCG@10 at 0.03 (0.8251)
#: and loses from 0.04 on (0.8249; 0.05: 0.8245). Not lowering nDCG comes first.
MAX_ADJUST = 0.03
#: Weights of recency, use and priority (seed 003's formula).
W_RECENCY, W_USE, W_PRIORITY = 0.5, 0.3, 0.2
#: A memory updated this many days ago has half the recency of one updated now.
HALF_LIFE_DAYS = 30.0
#: How far back the recall and open logs count for use.
USE_DAYS = 180


@functools.cache
def _statement() -> str:
    return sql_file("temperature.sql")


def recency(updated_at: str | None, created_at: str | None, now: dt.datetime) -> float:
    """``0.5 ** (age in days / HALF_LIFE_DAYS)`` from the newest of the two
    times (0 when neither is a time; 1 for a time in the future)."""
    times = [t for t in (parse_time(updated_at), parse_time(created_at)) if t is not None]
    if not times:
        return 0.0
    age_days = (now - max(times)).total_seconds() / 86400.0
    return 1.0 if age_days <= 0 else 0.5 ** (age_days / HALF_LIFE_DAYS)


def use(hinted: int, opened: int) -> float:
    """How often hints of a memory were followed by an open, in [-1, 1]
    (0 without history; Laplace-smoothed so one event moves it little)."""
    hinted = max(int(hinted), 0)
    opened = min(max(int(opened), 0), hinted)
    return 2.0 * (opened + 1) / (hinted + 2) - 1.0


def adjustment(r: float, u: float, p: float) -> tuple[float, float]:
    """``(temperature, ranking adjustment)`` from recency, use and priority."""
    temp = W_RECENCY * r + W_USE * u + W_PRIORITY * p
    return temp, MAX_ADJUST * temp


def rerank(con: apsw.Connection, hints: Sequence[Hint], now: dt.datetime | None = None) -> list[Hint]:
    """``hints`` ordered by score (``rank_score`` where ``sql/recall.sql``
    ranks a candidate apart from its score) + temperature adjustment +
    project bonus (ties: by dense cosine, as ``sql/recall.sql`` orders them), a memory another one
    supersedes right below it (``superseded_by``). Each hint's ``signals`` gain
    ``recency``, ``use``, ``priority``, ``temperature`` and ``temp_adj``;
    ``score`` is left as it is (the hint rules read it). Calling it again
    (another ``now``) recomputes, never accumulates."""
    if not hints:
        return list(hints)
    now = now or dt.datetime.now(dt.UTC)
    since = format_time(now - dt.timedelta(days=USE_DAYS))
    facts = {
        row[0]: row[1:] for row in con.execute(_statement(), {"ids": json.dumps([h.id for h in hints]), "since": since})
    }
    for hint in hints:
        created_at, updated_at, priority, hinted, opened, by = facts.get(hint.id, (None, None, None, 0, 0, None))
        r, u, p = recency(updated_at, created_at, now), use(hinted, opened), float(priority or 0.0)
        temp, adj = adjustment(r, u, p)
        hint.signals.update(recency=r, use=u, priority=p, temperature=temp, temp_adj=adj)
        if by is not None:
            hint.signals["superseded_by"] = by
        else:
            hint.signals.pop("superseded_by", None)

    def key(hint: Hint) -> tuple[float, float]:
        cos = hint.signals.get("dense_cos")
        order = hint.rank_score + hint.signals["temp_adj"] + hint.signals.get("project_bonus", 0.0)
        return order, cos if isinstance(cos, float) else -math.inf

    keys = {h.id: key(h) for h in hints}
    # A superseded memory goes right below the memory that replaces it when
    # both are candidates (an answer of old goes below the answer of now);
    # the hint rules leave it out anyway. Chains settle within len(hints) passes.
    for _ in range(len(hints)):
        moved = False
        for hint in hints:
            by = keys.get(hint.signals.get("superseded_by"))  # type: ignore[arg-type]
            if by is not None and keys[hint.id] >= by:
                keys[hint.id] = (
                    (by[0], by[1] - 1.0) if math.isfinite(by[1]) else (math.nextafter(by[0], -math.inf), by[1])
                )
                moved = True
        if not moved:
            break
    return sorted(hints, key=lambda h: keys[h.id], reverse=True)
