#!/usr/bin/env python
"""Warm recall latency at scale (query embedding included).

    .venv/bin/python tools/bench_latency.py --sizes 10000,100000 [--queries 200] [--out F.json]

Embedding 100,000 memories with the real model would take hours on this
machine, so the vault is the synthetic one of ``bench_sync.py`` (real files,
real sync, real FTS and chunks) and its vectors are synthetic too: each is a
real e5 embedding of a sample text plus noise, re-normalised, so the vector
tables have the size and roughly the cosine spread of a real index. The
query path is the product's own: ``Store.recall`` with the real default
model embedding each query, the SQL of ``sql/recall.sql`` and the hint rules.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
try:
    import marchdb  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO))

from bench_sync import ensure_vault, machine_info  # noqa: E402

from marchdb import calibrate, db, vectors  # noqa: E402
from marchdb.config import load_config  # noqa: E402
from marchdb.store import Store  # noqa: E402

QUERIES = [
    "why does the prompt cache keep missing",
    "how do we rotate database credentials",
    "向量索引的召回延迟太高了怎么办",
    "what did we decide about the sync folder layout",
    "memory agent recall vector model",
    "用户偏好的回答风格",
    "the nightly job failed again",
    "asdf qwer zxcv",
]


def fill_vectors(store: Store, log) -> None:
    """Give every metadata text and chunk a synthetic vector (once)."""
    emb = store.embedder()
    con = store.con
    vectors.prepare_model(con, emb)
    todo = vectors.pending_texts(con)
    if not todo:
        return
    log(f"synthesising {len(todo):,} vectors")
    rng = np.random.default_rng(11)
    sample = [t for _, _, t in todo[:: max(1, len(todo) // 64)]][:64]
    base = emb.embed_passages(sample)
    for start in range(0, len(todo), 5000):
        part = todo[start : start + 5000]
        picks = base[rng.integers(0, len(base), len(part))]
        noisy = picks + rng.normal(0, 0.03, picks.shape).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        vectors.store_vectors(con, [(k, h) for k, h, _ in part], noisy)
    calibrate.ensure(con, emb)


def bench(n: int, work: Path, queries: int, log) -> dict:
    vault, _ = ensure_vault(work / "sync" / f"n{n}", n, log)  # bench_sync.py's vaults
    home = work / "latency" / f"n{n}"
    cfg = load_config(home=home, root=vault, env={})
    store = Store(cfg)
    t0 = time.perf_counter()
    store.sync(embed=False)
    log(f"n={n}: structural sync {time.perf_counter() - t0:.1f}s")
    fill_vectors(store, log)
    counts = db.rows(store.con, "SELECT (SELECT count(*) FROM vectors WHERE kind='meta') AS meta, "
                                "(SELECT count(*) FROM vectors WHERE kind='chunk') AS chunk")[0]
    texts = [QUERIES[i % len(QUERIES)] + ("" if i < len(QUERIES) else f" {i}") for i in range(queries)]
    store.recall(texts[0])  # warm: model loaded, pages cached
    emb = store.embedder()
    embed_ms, total_ms = [], []
    for text in texts:
        t = time.perf_counter()
        emb.embed_queries([text])
        embed_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        store.recall(text)
        total_ms.append((time.perf_counter() - t) * 1000)
    total_ms.sort()
    embed_ms.sort()
    result = {
        "memories": n,
        "vectors": counts,
        "recall_ms": {"p50": round(statistics.median(total_ms), 2), "p95": round(total_ms[int(0.95 * (len(total_ms) - 1))], 2)},
        "query_embed_ms": {"p50": round(statistics.median(embed_ms), 2)},
        "index_mb": round(cfg.index_path.stat().st_size / 1e6, 1),
    }
    store.close()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--work", type=Path, default=REPO / ".bench")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results = [bench(int(s.replace("_", "")), args.work, args.queries, log) for s in args.sizes.split(",")]
    print(f"{'memories':>9} {'meta vec':>9} {'chunk vec':>10} {'recall p50':>11} {'p95':>8} {'embed p50':>10} {'index MB':>9}")
    for r in results:
        print(
            f"{r['memories']:>9,} {r['vectors']['meta']:>9,} {r['vectors']['chunk']:>10,} "
            f"{r['recall_ms']['p50']:>9.1f}ms {r['recall_ms']['p95']:>6.1f}ms {r['query_embed_ms']['p50']:>8.1f}ms "
            f"{r['index_mb']:>9.1f}"
        )
    print(machine_info())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"results": results, "machine": machine_info()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
