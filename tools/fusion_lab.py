#!/usr/bin/env python3
"""Compare fusion rules offline on a benchmark set (how the recall rule was chosen).

    python tools/fusion_lab.py ../shared/bench/locomo [--work DIR]

Uses the index that ``tools/bench_recall.py`` built in ``--work`` (run that
first), collects every candidate's raw signals once per query, then scores
several fusion rules on the same candidates and prints nDCG@10 for each plus
the hint figures at threshold 0.5. Rules are whole-set comparisons; nothing
here is tuned per query.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from pathlib import Path

import numpy as np
from bench_recall import BENCH, load_set, metrics

from marchdb.config import load_config
from marchdb.embedding import calibrate
from marchdb.recall import score
from marchdb.store import Store


def background(store, emb):
    """Vectors a query is compared with to see how much its best match stands
    out: the probe passages plus up to 200 of the vault's metadata vectors."""
    from marchdb.embedding.probes import PAIRS

    probes = emb.embed_passages(list(dict.fromkeys(p for _, _, p in PAIRS)))
    rows = store.con.execute("SELECT embedding FROM vec_meta ORDER BY rowid LIMIT 200").fetchall()
    vault = np.array([np.frombuffer(r[0], dtype=np.float32) for r in rows]) if rows else np.zeros((0, probes.shape[1]))
    return probes, vault


def collect(store, emb, calib, texts):
    vecs = emb.embed_queries(texts)
    probes, vault = background(store, emb)
    out = []
    for text, v in zip(texts, vecs):
        cands = score(store.con, text, v, calib, limit=60)
        bp = probes @ v
        bv = vault @ v if len(vault) else bp
        out.append(
            [
                {
                    "id": c.id,
                    "desc": bool(c.description),
                    "meta": c.signals.get("meta_cos"),
                    "body": c.signals.get("body_cos"),
                    "dense": c.signals.get("dense_cos"),
                    "ratio": c.signals.get("bm25_ratio"),
                    "bg_probe": [float(bp.mean()), float(bp.std()), float(np.percentile(bp, 95))],
                    "bg_vault": [float(bv.mean()), float(bv.std()), float(np.percentile(bv, 95))],
                }
                for c in cands
            ]
        )
    return out


def sig(x):
    return 1.0 / (1.0 + math.exp(-x))


def rule(lo, hi, w, tau, slope, bm25_curve="exp"):
    """A fusion rule: logistic dense (centre between lo and hi, scale gap/slope),
    BM25 share-of-query through 1 - exp(-r/tau) (or clipped r/(2 tau)), weight w."""
    mid, scale = (lo + hi) / 2, (hi - lo) / slope

    def f(c, any_bm25=False):
        d = None if c["dense"] is None else sig((c["dense"] - mid) / scale)
        r = c["ratio"]
        b = None if r is None else (1 - math.exp(-r / tau) if bm25_curve == "exp" else min(1.0, r / (2 * tau)))
        if d is not None and b is not None:
            return w * d + (1 - w) * b
        return d if d is not None else (b if b is not None else 0.0)

    return f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("--work", type=Path, default=Path(".bench/recall"))
    ap.add_argument("--offtopic", type=int, default=300)
    args = ap.parse_args()
    set_dir = args.set_dir.resolve()
    memories, queries, qrels = load_set(set_dir)
    queries = [q for q in queries if q["id"] in qrels]
    set_hash = hashlib.sha256((set_dir / "memories.jsonl").read_bytes()).hexdigest()[:12]
    work = args.work.resolve() / f"{set_dir.name}-{set_hash}"
    store = Store(
        load_config(home=work / "home", root=work / "vault", env={"MARCH_THREADS": "1"})
    )  # one thread: steady under load
    emb = store.embedder()
    calib = calibrate.ensure(store.con, emb)
    fresh = calibrate.measure(emb)  # every level, whatever the stored rule
    cache = work / "lab.json"
    if cache.exists():
        data = json.loads(cache.read_text())
    else:
        rng = random.Random(7)
        others = []
        for other in sorted(p for p in BENCH.iterdir() if p.is_dir() and p.name != set_dir.name):
            others += [json.loads(l)["text"] for l in (other / "queries.jsonl").read_text().splitlines() if l.strip()]
        off = rng.sample(others, min(args.offtopic, len(others)))
        data = {"on": collect(store, emb, calib, [q["text"] for q in queries]), "off": collect(store, emb, calib, off)}
        cache.write_text(json.dumps(data))
    print(
        f"{set_dir.name}: probe levels "
        + ", ".join(f"{k}={fresh[k]}" for k in ("unrelated_p50", "unrelated_p75", "unrelated_p99", "related_p50"))
    )
    base = {"bm25": lambda c, a: c["ratio"] if c["ratio"] is not None else -1, "dense": lambda c, a: c["dense"] or -1}
    variants = {}
    for lo_key in ("unrelated_p50", "unrelated_p75", "unrelated_p99"):
        for w in (0.7, 0.6, 0.5):
            for tau in (0.15, 0.25):
                for slope in (3, 4):
                    for curve in ("exp", "lin"):
                        name = f"lo={lo_key[-3:]} w={w} tau={tau} slope={slope} {curve}"
                        variants[name] = rule(fresh[lo_key], fresh["related_p50"], w, tau, slope, curve)
    for name, rule_f in {**base, **variants}.items():
        nd, hinted = [], 0
        for q, cands in zip(queries, data["on"]):
            any_b = any(c["ratio"] is not None for c in cands)
            ranked = sorted(cands, key=lambda c: rule_f(c, any_b), reverse=True)
            nd.append(metrics([c["id"] for c in ranked], qrels[q["id"]])["ndcg@10"])
            kept = [c["id"] for c in ranked if c["desc"] and rule_f(c, any_b) >= 0.5][:3]
            hinted += any(k in qrels[q["id"]] for k in kept)
        quiet = 0
        for cands in data["off"]:
            any_b = any(c["ratio"] is not None for c in cands)
            quiet += not any(c["desc"] and rule_f(c, any_b) >= 0.5 for c in cands)
        print(
            f"{name:44} nDCG@10 {np.mean(nd):.4f}  hinted {hinted / len(queries):6.1%}  off-topic quiet {quiet / len(data['off']):6.1%}"
        )


if __name__ == "__main__":
    main()
