"""Per-model calibration of the dense signal, stored in the index.

Raw cosines are not comparable across models (multilingual-e5 puts unrelated
texts at 0.75-0.85, MiniLM near 0.0-0.2). We embed the probe pairs of
``probes.py`` once per model fingerprint and keep three levels in ``meta``:

* ``dense_lo`` — the median cosine between unrelated probe texts;
* ``dense_hi`` — the median cosine of related probe pairs;
* the 99th percentile of unrelated cosines (or the typical nonsense-message
  cosine, if higher): the level a candidate without any keyword support must
  clearly pass.

``sql/recall.sql`` maps a cosine through a logistic curve centred halfway
between them, with a third of the gap as its scale. BM25 needs no model
calibration: its ceiling is computed per query from term statistics.

The shape (logistic dense, 1 - exp BM25, tau 0.15, dense weight 0.5) was
chosen on whole benchmark sets with ``tools/fusion_lab.py``; see the README.
"""

from __future__ import annotations

import json

import apsw
import numpy as np

from ..db import get_meta, set_meta, transaction
from .probes import NONSENSE, PAIRS

#: BM25 share-of-query scale: a memory holding 15% of the query's
#: information scores 0.63, 30% scores 0.86.
BM25_TAU = 0.15
#: Logistic scale of the dense signal, as a fraction of the related-unrelated gap.
DENSE_SLOPE = 3.0


def measure(embedder) -> dict:
    """Embed the probes and return the calibration levels for this model."""
    messages = [m for _, m, _ in PAIRS]
    passages = list(dict.fromkeys(p for _, _, p in PAIRS))
    index = {p: i for i, p in enumerate(passages)}
    q = embedder.embed_queries(messages)
    p = embedder.embed_passages(passages)
    sims = q @ p.T
    related = np.array([sims[i, index[pair[2]]] for i, pair in enumerate(PAIRS)])
    mask = np.ones_like(sims, dtype=bool)
    for i, pair in enumerate(PAIRS):
        mask[i, index[pair[2]]] = False
    unrelated = sims[mask]
    nonsense = (embedder.embed_queries(NONSENSE) @ p.T).max(axis=1)
    lo = float(np.median(unrelated))
    hi = float(np.median(related))
    strict = float(max(np.percentile(unrelated, 99), np.median(nonsense)))
    if hi <= lo + 0.02:
        # A model this flat cannot separate related from unrelated text.
        hi = lo + 0.02
    return {
        "version": VERSION,
        "fingerprint": embedder.fingerprint,
        "dense_lo": round(lo, 5),
        "dense_hi": round(hi, 5),
        "unrelated_p50": round(float(np.median(unrelated)), 5),
        "unrelated_p75": round(float(np.percentile(unrelated, 75)), 5),
        "unrelated_p90": round(float(np.percentile(unrelated, 90)), 5),
        "unrelated_p99": round(float(np.percentile(unrelated, 99)), 5),
        "nonsense_p50": round(float(np.median(nonsense)), 5),
        "related_p25": round(float(np.percentile(related, 25)), 5),
        "related_p50": round(hi, 5),
        "related_above_unrelated": round(float((related[:, None] > unrelated[None, :]).mean()), 4),
        "dense_mid": round((lo + hi) / 2, 5),
        "dense_scale": round((hi - lo) / DENSE_SLOPE, 5),
        # A candidate with no keyword support needs a cosine beyond chance.
        "alone_mid": round((strict + hi) / 2, 5),
        "alone_scale": round(max(hi - strict, 0.02) / DENSE_SLOPE, 5),
        "bm25_tau": BM25_TAU,
    }


def load(con: apsw.Connection, fingerprint: str | None) -> dict | None:
    """The stored calibration for ``fingerprint`` (None when missing or stale)."""
    raw = get_meta(con, "calibration")
    if raw is None:
        return None
    data = json.loads(raw)
    current = data.get("fingerprint") == fingerprint and data.get("version") == VERSION
    return data if current else None


#: Bump when the calibration's meaning changes: stored ones are then remeasured.
VERSION = 3
_MEASURED: dict[str, dict] = {}  # per process: the same model measures the same


def ensure(con: apsw.Connection, embedder) -> dict:
    """The calibration for ``embedder``'s model, measured and stored if needed."""
    data = load(con, embedder.fingerprint)
    if data is None:
        data = _MEASURED.get(embedder.fingerprint) or measure(embedder)
        _MEASURED[embedder.fingerprint] = data
        with transaction(con):
            set_meta(con, "calibration", json.dumps(data))
    return data


def bm25_only() -> dict:
    """Calibration used when no model is available: BM25 needs none."""
    return {
        "fingerprint": None,
        "dense_mid": 0.5,
        "dense_scale": 0.1,
        "alone_mid": 0.5,
        "alone_scale": 0.1,
        "bm25_tau": BM25_TAU,
    }
