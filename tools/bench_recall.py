#!/usr/bin/env python3
"""Retrieval benchmark: recall@5/10, nDCG@10, MRR@10 for bm25, dense, hybrid.

    python tools/bench_recall.py ../shared/bench/locomo [--model PATH] [--work DIR] [--out FILE.json]

Builds a real vault from a set in ``../shared/bench`` format (one Markdown
file per memory, time-bucketed by ``created_at``), indexes it through
marchdb's own sync (kept in ``--work`` and reused while the set and model are
unchanged: the index is a cache), runs every query, and prints a table. It
also reports, at the default threshold, the share of queries whose relevant
memory is among the hints, and the share of off-topic queries (queries of the
other sets) that get no hint at all; and warm recall latency (query embedding
included) through ``Store.recall``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path

from marchdb import notes
from marchdb.config import load_config
from marchdb.recall import score
from marchdb.store import Store

# ../shared/bench from the checkout (two levels up from /work/main, three from a worktree in /work/wt/NAME).
BENCH = next(
    (p / "shared" / "bench" for p in Path(__file__).resolve().parents if (p / "shared" / "bench").is_dir()),
    Path(__file__).resolve().parents[2] / "shared" / "bench",
)


def load_set(set_dir: Path):
    """memories, queries, qrels of one benchmark set."""
    memories = [json.loads(l) for l in (set_dir / "memories.jsonl").read_text().splitlines() if l.strip()]
    queries = [json.loads(l) for l in (set_dir / "queries.jsonl").read_text().splitlines() if l.strip()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (set_dir / "qrels.tsv").read_text().splitlines()[1:]:
        if line.strip():
            qid, mid, grade = line.split("\t")
            if int(grade) >= 1:
                qrels.setdefault(qid, {})[mid] = int(grade)
    return memories, queries, qrels


def write_vault(memories: list[dict], root: Path) -> None:
    """One Markdown file per memory, in the seed's time buckets."""
    used: set[str] = set()
    for m in memories:
        created = notes.parse_time(m.get("created_at"))
        slug = notes.slugify(m["name"])[:50]
        rel = str(notes.bucket_path(created, slug)) if created else f"undated/{slug}.md"
        base, n = rel[:-3], 2
        while rel in used:
            rel = f"{base}-{n}.md"
            n += 1
        used.add(rel)
        note = notes.Note(
            id=m["id"],
            name=m["name"],
            description=m.get("description") or "",
            tags=notes.normalize_tags(m.get("tags") or [])[0] or ["bench"],
            status="active",
            created_at=notes.format_time(created) if created else None,
            updated_at=None,
            body=m.get("body") or "",
        )
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(notes.render_note(note), encoding="utf-8")


def metrics(ranked: list[str], rel: dict[str, int]) -> dict[str, float]:
    """recall@5, recall@10, nDCG@10 (graded), MRR@10 for one query."""
    n_rel = len(rel)
    top = ranked[:10]
    dcg = sum((2 ** rel.get(mid, 0) - 1) / math.log2(i + 2) for i, mid in enumerate(top))
    ideal = sorted(rel.values(), reverse=True)[:10]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    mrr = next((1.0 / (i + 1) for i, mid in enumerate(top) if mid in rel), 0.0)
    return {
        "recall@5": sum(1 for m in ranked[:5] if m in rel) / n_rel,
        "recall@10": sum(1 for m in top if m in rel) / n_rel,
        "ndcg@10": dcg / idcg if idcg else 0.0,
        "mrr@10": mrr,
    }


def rankings(cands) -> dict[str, list[str]]:
    """bm25, dense and hybrid rankings from one scored candidate list."""
    by = lambda key: [c.id for c in sorted((c for c in cands if key(c) is not None), key=key, reverse=True)]  # noqa: E731
    return {
        "bm25": by(lambda c: c.signals.get("bm25_raw")),
        "dense": by(lambda c: c.signals.get("dense_cos")),
        "hybrid": [c.id for c in cands],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("--model", help="GGUF path or recipe name (default: the built-in default)")
    ap.add_argument("--work", type=Path, default=Path(".bench/recall"))
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument("--limit", type=int, help="only the first N queries (quick look; report whole sets)")
    ap.add_argument("--offtopic", type=int, default=300, help="off-topic queries sampled from the other sets")
    ap.add_argument("--latency", type=int, default=200, help="queries timed through Store.recall")
    ap.add_argument("--threads", type=int, help="llama.cpp threads (default: the configured or CPU count)")
    ap.add_argument("--index-only", action="store_true", help="build or update the index, then stop")
    args = ap.parse_args()

    set_dir = args.set_dir.resolve()
    memories, queries, qrels = load_set(set_dir)
    queries = [q for q in queries if q["id"] in qrels][: args.limit]
    set_hash = hashlib.sha256((set_dir / "memories.jsonl").read_bytes()).hexdigest()[:12]
    work = args.work.resolve() / f"{set_dir.name}-{set_hash}"
    vault, home = work / "vault", work / "home"
    if not (work / "vault.done").exists():
        write_vault(memories, vault)
        (work / "vault.done").write_text("ok")
    cfg = load_config(home=home, root=vault, model=args.model, env={"MARCH_THREADS": str(args.threads or "")})
    store = Store(cfg)
    t0 = time.perf_counter()
    report = store.sync()
    index_seconds = time.perf_counter() - t0
    state_file = work / "index.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    if report.embedded or report.added or state.get("model") != report.model:
        state = {"model": report.model, "index_seconds": round(index_seconds, 2), "embedded": report.embedded}
        state_file.write_text(json.dumps(state))
    if args.index_only:
        print(f"{set_dir.name}: indexed in {index_seconds:.1f}s ({report.embedded} texts embedded)")
        return 0
    emb = store.embedder()
    if emb is None:
        print(f"no model: {store.notices}", file=sys.stderr)
        return 1
    from marchdb.embedding import calibrate

    calib = calibrate.ensure(store.con, emb)
    threshold = cfg.min_score

    sums = {s: {"recall@5": 0.0, "recall@10": 0.0, "ndcg@10": 0.0, "mrr@10": 0.0} for s in ("bm25", "dense", "hybrid")}
    hinted = 0
    t_embed = time.perf_counter()
    qvecs = emb.embed_queries([q["text"] for q in queries])
    embed_seconds = time.perf_counter() - t_embed
    for q, qvec in zip(queries, qvecs):
        cands = score(store.con, q["text"], qvec, calib, limit=500)  # the whole union: no cut before ranking
        for signal, ranked in rankings(cands).items():
            for key, value in metrics(ranked, qrels[q["id"]]).items():
                sums[signal][key] += value
        kept = [c.id for c in cands if c.score >= threshold and c.description][:3]
        hinted += any(mid in qrels[q["id"]] for mid in kept)
    n = len(queries)
    figures = {s: {k: round(v / n, 4) for k, v in m.items()} for s, m in sums.items()}

    # Off-topic: queries of the other sets must get no hint here.
    rng = random.Random(7)
    others = []
    for other in sorted(p for p in BENCH.iterdir() if p.is_dir() and p.name != set_dir.name):
        others += [json.loads(l)["text"] for l in (other / "queries.jsonl").read_text().splitlines() if l.strip()]
    offtopic = rng.sample(others, min(args.offtopic, len(others)))
    off_vecs = emb.embed_queries(offtopic)
    quiet = sum(
        1
        for text, v in zip(offtopic, off_vecs)
        if not any(c.score >= threshold and c.description for c in score(store.con, text, v, calib))
    )

    # Warm latency, end to end through the API (dirty check + embedding + SQL + rules).
    from bench_latency import run_queries

    latency = run_queries(store, [q["text"] for q in queries[: max(args.latency, 2)]])
    result = {
        "set": set_dir.name,
        "queries": n,
        "memories": len(memories),
        "model": report.model,
        "calibration": {k: calib.get(k) for k in ("dense_lo", "dense_hi", "dense_mid", "dense_scale", "bm25_tau")},
        "signals": figures,
        "hints": {
            "threshold": threshold,
            "answerable_hinted": round(hinted / n, 4),
            "offtopic_quiet": round(quiet / len(offtopic), 4),
            "offtopic_queries": len(offtopic),
        },
        "latency_ms": {"p50": latency["p50"], "p95": latency["p95"]},
        "query_embed_ms_avg": round(1000 * embed_seconds / max(n, 1), 2),
        "index_seconds": state.get("index_seconds"),
        "this_sync_seconds": round(index_seconds, 2),
        "machine": machine(),
        "date": dt.date.today().isoformat(),
    }
    print_table(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return 0


def machine() -> str:
    import os
    import platform

    return f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}"


def print_table(r: dict) -> None:
    print(f"\n{r['set']}: {r['memories']} memories, {r['queries']} queries, model {r['model']}")
    print(f"{'signal':8} {'R@5':>7} {'R@10':>7} {'nDCG@10':>8} {'MRR@10':>7}")
    for signal, m in r["signals"].items():
        print(f"{signal:8} {m['recall@5']:7.3f} {m['recall@10']:7.3f} {m['ndcg@10']:8.3f} {m['mrr@10']:7.3f}")
    h = r["hints"]
    print(
        f"hints at {h['threshold']}: answerable hinted {h['answerable_hinted']:.1%}, "
        f"off-topic quiet {h['offtopic_quiet']:.1%} ({h['offtopic_queries']} queries)"
    )
    print(
        f"latency p50 {r['latency_ms']['p50']} ms, p95 {r['latency_ms']['p95']} ms; "
        f"index {r['index_seconds']} s (this run's sync {r['this_sync_seconds']} s); {r['machine']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
