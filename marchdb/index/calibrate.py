"""Per-model calibration of the dense signal, stored in the index.

Raw cosines are not comparable across models (multilingual-e5 puts unrelated
texts at 0.75-0.85, MiniLM near 0.0-0.2), nor across queries: with e5 a short
or generic message ("ok thanks", "how are you today") sits close to every
text, a specific one less so. So the dense signal is a cosine *relative to
the query's own background*: its cosine minus its mean cosine to a fixed set
of unrelated texts, the probe passages of ``probes.py``. That mean is one dot
product with the probes' centre vector, stored here, so it costs nothing.

We embed the probe pairs once per model fingerprint and keep, in that
relative space:

* ``rel_lo`` — the median of unrelated probe pairs;
* ``rel_hi`` — the median of related probe pairs;
* ``rel_sigma`` — the spread of unrelated pairs;
* ``script_offset`` — how much lower a cosine runs across scripts (a
  Chinese message, an English text: one mostly CJK, ``fts.cjk_share``, the
  other not) than within one, for unrelated pairs alike; recall adds
  ``SCRIPT_WEIGHT`` of it back to pairs across scripts, and the levels above
  are measured after it.

``curves`` turns them into the logistic curves ``sql/recall.sql`` maps a
relative cosine through, for a vault of N texts: centred where the best of N
unrelated texts would land by chance (``DENSE_K``; ``ALONE_K`` for a
candidate sharing no informative word with the message), with a third of
the related-unrelated gap as scale. BM25 needs no
model calibration: its ceiling is computed per query from term statistics.

The shape and every constant were chosen on the training halves of the
benchmark sets with ``tools/fusion_lab.py`` and reported on the held-out
halves; see the README.
"""

from __future__ import annotations

import json
import math

import apsw

from marchdb.fts import cjk_share
from marchdb.index import sentinel
from marchdb.index.db import get_meta, set_meta, transaction
from marchdb.index.probes import NONSENSE, PAIRS

#: BM25 share-of-query scale: a memory holding 30% of the query's
#: information scores 1 - exp(-0.3 / tau).
BM25_TAU = 0.5
#: Logistic scale of the dense signal, as a fraction of the related-unrelated gap.
DENSE_SLOPE = 3.0
#: Where the dense curve crosses 0.5: above the typical unrelated pair by
#: DENSE_K times what the best of N unrelated texts reaches by chance
#: (rel_sigma * sqrt(2 ln N), N the metadata texts and body chunks of the
#: vault's active memories). Five short notes give a look-alike few
#: chances; ten thousand chat logs of twenty chunks each give it many.
DENSE_K = 1.0
#: Share of the measured cross-script offset recall adds back (0: none).
SCRIPT_WEIGHT = 1.0
#: The same for a candidate that shares no informative word with the message:
#: a little further out, so that a look-alike no word supports ranks below
#: the memories that hold the question's words (BM25 beat the fusion on
#: cmrc2018-hant at 1.2). Chosen by tools/fusion_lab.py leaving one set
#: out; it moves no hint on any set.
ALONE_K = 1.3


def measure(embedder, script_weight: float | None = None) -> dict:
    """Embed the probes and return the calibration levels for this model
    (``script_weight``: instead of ``SCRIPT_WEIGHT``, for tools/fusion_lab.py)."""
    import numpy as np  # not at module level: commands that never embed skip its ~130 ms import

    script_weight = SCRIPT_WEIGHT if script_weight is None else script_weight
    messages = [m for _, m, _ in PAIRS]
    passages = list(dict.fromkeys(p for _, _, p in PAIRS))
    index = {p: i for i, p in enumerate(passages)}
    q = embedder.embed_queries(messages)
    p = embedder.embed_passages(passages)
    center = p.mean(axis=0)
    raw = q @ p.T
    sims = raw - (q @ center)[:, None]  # relative to each message's background
    mask = np.ones_like(sims, dtype=bool)
    for i, pair in enumerate(PAIRS):
        mask[i, index[pair[2]]] = False
    # Across scripts (a Chinese message, an English text) cosines run lower,
    # related or not: the offset between unrelated pairs in one script and
    # unrelated pairs across two; recall adds SCRIPT_WEIGHT of it back to
    # every pair across scripts (one text mostly CJK, the other not).
    q_cjk = np.array([cjk_share(m) >= 0.5 for m in messages])
    p_cjk = np.array([cjk_share(t) >= 0.5 for t in passages])
    mismatch = q_cjk[:, None] != p_cjk[None, :]
    same, across = mask & ~mismatch, mask & mismatch
    offset = float(np.median(sims[same]) - np.median(sims[across])) if same.any() and across.any() else 0.0
    offset = max(offset, 0.0)
    sims = sims + script_weight * offset * mismatch
    unrelated, related = sims[mask], sims[~mask]
    nq = embedder.embed_queries(NONSENSE)
    nonsense = ((nq @ p.T) - (nq @ center)[:, None]).max(axis=1)
    lo = float(np.median(unrelated))
    hi = float(np.median(related))
    # A robust standard deviation of unrelated pairs (IQR / 1.349).
    sigma = float(np.subtract(*np.percentile(unrelated, [75, 25]))) / 1.349
    if hi <= lo + 0.02:
        # A model this flat cannot separate related from unrelated text.
        hi = lo + 0.02
    return {
        "version": VERSION,
        "fingerprint": embedder.fingerprint,
        "probe_center": [round(float(x), 6) for x in center],
        "rel_lo": round(lo, 5),
        "rel_hi": round(hi, 5),
        "rel_sigma": round(max(sigma, 1e-4), 5),
        "script_offset": round(offset, 5),
        "script_weight": script_weight,
        "unrelated_p90": round(float(np.percentile(unrelated, 90)), 5),
        "unrelated_p99": round(float(np.percentile(unrelated, 99)), 5),
        "nonsense_p50": round(float(np.median(nonsense)), 5),
        "related_p25": round(float(np.percentile(related, 25)), 5),
        "related_above_unrelated": round(float((related[:, None] > unrelated[None, :]).mean()), 4),
        # raw cosine levels, for people comparing models
        "raw_unrelated_p50": round(float(np.median(raw[mask])), 5),
        "raw_related_p50": round(float(np.median(raw[~mask])), 5),
    }


def curves(calib: dict, texts: int, dense_k: float = DENSE_K, alone_k: float = ALONE_K) -> dict:
    """The logistic curves recall maps a relative cosine through, for a
    vault whose active memories hold ``texts`` texts (metadata texts and
    body chunks, each compared with the message): ``dense_mid``,
    ``alone_mid``, ``dense_scale`` (``sql/recall.sql``). A curve is centred
    where the best of that many unrelated texts lands by chance (``rel_lo``
    plus ``k * rel_sigma * sqrt(2 ln N)``: the expected maximum of N draws),
    so 0.5 means "closer than chance would bring anything in this vault"."""
    if calib.get("rel_lo") is None:  # bm25_only: no dense signal
        return {k: calib[k] for k in ("dense_mid", "dense_scale", "alone_mid")}
    lo, gap = calib["rel_lo"], calib["rel_hi"] - calib["rel_lo"]
    chance = calib["rel_sigma"] * math.sqrt(2.0 * math.log(max(texts, 2)))
    return {
        "dense_mid": lo + dense_k * chance,
        "alone_mid": lo + alone_k * chance,
        "dense_scale": gap / DENSE_SLOPE,
    }


def load(con: apsw.Connection, fingerprint: str | None) -> dict | None:
    """The stored calibration for ``fingerprint`` (None when missing or stale)."""
    raw = get_meta(con, "calibration")
    if raw is None:
        return None
    data = json.loads(raw)
    current = (
        data.get("fingerprint") == fingerprint
        and data.get("version") == VERSION
        and data.get("script_weight") == SCRIPT_WEIGHT
    )
    return data if current else None


#: Bump when the calibration's meaning changes: stored ones are then remeasured.
VERSION = 6
_MEASURED: dict[str, dict] = {}  # per process: the same model measures the same


def ensure(con: apsw.Connection, embedder) -> dict:
    """The calibration for ``embedder``'s model, measured and stored if needed."""
    data = load(con, embedder.fingerprint)
    if data is None:
        data = _MEASURED.get(embedder.fingerprint)
        if data is None:
            # Named on disk as a batch of no text (``sentinel``): a crash on
            # the probes, from recall or a sync, is counted, not repeated forever.
            with sentinel.Sentinel(con.filename, embedder.crash_key).inflight([]):
                data = measure(embedder)
        _MEASURED[embedder.fingerprint] = data
        with transaction(con):
            set_meta(con, "calibration", json.dumps(data))
    return data


def bm25_only() -> dict:
    """Calibration used when no model is available: BM25 needs none."""
    return {
        "fingerprint": None,
        "probe_center": None,
        "dense_mid": 0.5,
        "dense_scale": 0.1,
        "alone_mid": 0.5,
    }
