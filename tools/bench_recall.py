#!/usr/bin/env python3
"""Retrieval benchmark: recall@5/10, nDCG@10, MRR@10 for bm25, dense, hybrid.

    python tools/bench_recall.py locomo [--model PATH] [--work DIR] [--out FILE.json]

Builds a real vault from a set in ``../shared/bench`` format (one Markdown
file per memory, time-bucketed by ``created_at``) or a variant of one
(``cmrc2018-hant``: see ``bench_data``), indexes it through marchdb's own sync
(kept in ``--work`` and reused while the set and model are unchanged: the
index is a cache, and its vectors are cached apart so a schema change
re-embeds nothing), runs every query, and prints a table: whole set, and
nDCG@10 on each held-out half (``bench_data.split_of``). It also reports, at
the default threshold, the share of queries whose relevant memory is among
the hints, and the share of off-topic messages that get no hint at all, by
kind: other sets' questions, questions in the vault's own language about
subjects no set holds, chit-chat; and both over a range of thresholds
(``CURVE``: the curve hinted against quiet, so that the default point is a
visible choice). ``--latency N`` times N recalls through
``Store.recall`` (quality runs leave it off).
"""

from __future__ import annotations

# marchdb before numpy, as in every marchdb process: it sets OpenBLAS's spin timeout,
# which OpenBLAS reads when numpy loads (see tools/bench_latency.py).
import marchdb  # noqa: F401  # isort: skip

import argparse
import datetime as dt
import hashlib
import json
import math
import sys
import time
from pathlib import Path

from bench_data import BENCH, CachedEmbedder, cached_store, offtopic, set_dir, split_of

from marchdb.config import load_config
from marchdb.index.recall import score
from marchdb.vault import notes

try:
    from marchdb.index import focus as focus_mod
    from marchdb.index.focus import focus
except ImportError:  # the code before focus (a before/after pair run from an older checkout)
    focus_mod = None  # type: ignore[assignment]

    def focus(text: str, budget: int | None = None) -> str:
        return text


__all__ = ["BENCH", "load_set", "metrics", "open_set", "rankings", "write_vault"]


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
            extra=m.get("extra") or {},
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
        "hit@1": float(any(m in rel for m in ranked[:1])),
        "hit@5": float(any(m in rel for m in ranked[:5])),
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


def open_set(name: str, work_root: Path, model: str | None = None, threads: int | None = None):
    """Materialise set ``name`` (a shared set, a variant or a path) as a vault,
    sync it through marchdb (vectors from the bench cache) and return
    ``(store, set_dir, memories, queries, qrels, report, index_seconds)``."""
    sdir = set_dir(name)
    memories, queries, qrels = load_set(sdir)
    queries = [q for q in queries if q["id"] in qrels]
    set_hash = hashlib.sha256((sdir / "memories.jsonl").read_bytes()).hexdigest()[:12]
    work = work_root.resolve() / f"{sdir.name}-{set_hash}"
    vault, home = work / "vault", work / "home"
    if not (work / "vault.done").exists():
        write_vault(memories, vault)
        (work / "vault.done").write_text("ok")
    cfg = load_config(home=home, root=vault, model=model, env={"MARCH_THREADS": str(threads or "")})
    store = cached_store(cfg)
    t0 = time.perf_counter()
    report = store.sync()
    return store, sdir, memories, queries, qrels, report, time.perf_counter() - t0


def long_prompt(text: str) -> str:
    """``text`` as a long prompt: a pasted piece of marchdb's own source
    (2,500-3,800 characters, as users paste code, logs and stack traces),
    the message before it or after it; the same for the same text on every run."""
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    files = sorted(Path(__file__).resolve().parents[1].glob("marchdb/**/*.py"))
    source = files[seed % len(files)].read_text(encoding="utf-8")
    length = 2500 + seed % 1300
    start = (seed // 7) % max(len(source) - length, 1)
    paste = source[start : start + length]
    if seed % 2:
        return f"{text}\n\n```python\n{paste}\n```"
    return f"Here is the file:\n\n```python\n{paste}\n```\n\n{text}"


#: Thresholds of the curve (answerable hinted against off-topic quiet), so
#: the default point is seen as one choice among them.
CURVE = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)


def top_scores(store, emb, calib, texts: list[str]) -> list[float]:
    """Per text, the best score of a candidate that could be hinted (one
    with a description); 0 when none: the text is quiet at any threshold
    above it."""
    if not texts:
        return []
    vecs = emb.embed_queries([focus(t) for t in texts])  # as recall embeds a message
    return [
        max((c.score for c in score(store.con, text, v, calib, words=store.words()) if c.description), default=0.0)
        for text, v in zip(texts, vecs)
    ]


def hinted_at(cands, rel: dict[str, int], threshold: float) -> bool:
    """Whether a relevant memory is among the hints at ``threshold``: the
    first three candidates with a description scoring at least it."""
    return any(c.id in rel for c in [c for c in cands if c.score >= threshold and c.description][:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "set", help="a shared set (locomo, cmrc2018, cranfield, chats), a variant (cmrc2018-hant) or a path"
    )
    ap.add_argument("--model", help="GGUF path or recipe name (default: the built-in default)")
    ap.add_argument("--work", type=Path, default=Path(".bench/recall"))
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument("--limit", type=int, help="only the first N queries (quick look; report whole sets)")
    ap.add_argument("--offtopic", type=int, default=300, help="off-topic queries sampled from the other sets")
    ap.add_argument("--latency", type=int, default=0, help="queries timed through Store.recall (0: none)")
    ap.add_argument("--threads", type=int, help="llama.cpp threads (default: the configured or CPU count)")
    ap.add_argument("--index-only", action="store_true", help="build or update the index, then stop")
    ap.add_argument(
        "--long-prompts",
        action="store_true",
        help="every message inside a pasted file of marchdb's own source, 2,500-3,800 characters (long_prompt)",
    )
    ap.add_argument("--no-focus", action="store_true", help="embed a message's first window, not its focus")
    args = ap.parse_args()

    store, sdir, memories, queries, qrels, report, index_seconds = open_set(
        args.set, args.work, args.model, args.threads
    )
    queries = queries[: args.limit]
    if args.index_only:
        print(f"{args.set}: indexed in {index_seconds:.1f}s ({report.embedded} texts embedded)")
        return 0
    emb = store.embedder()
    if emb is None:
        print(f"no model: {store.notices}", file=sys.stderr)
        return 1
    from marchdb.index import calibrate

    calib = calibrate.ensure(store.con, emb)
    threshold = store.cfg.min_score

    halves = ("all", "train", "test")
    blank = lambda: dict.fromkeys(("hit@1", "hit@5", "recall@5", "recall@10", "ndcg@10", "mrr@10"), 0.0)  # noqa: E731
    sums = {h: {s: blank() for s in ("bm25", "dense", "hybrid")} for h in halves}
    hinted = dict.fromkeys(halves, 0)
    count = dict.fromkeys(halves, 0)
    if args.long_prompts:
        queries = [{**q, "text": long_prompt(q["text"])} for q in queries]
    if args.no_focus and focus_mod is not None:
        focus_mod.BUDGET = 10**9  # embed the message's first window, as before focus
    qvecs = emb.embed_queries([focus(q["text"]) for q in queries])
    on_curve: list[list[bool]] = []
    for q, qvec in zip(queries, qvecs):
        # the whole union: no cut before ranking
        cands = score(store.con, q["text"], qvec, calib, limit=500, words=store.words())
        on_curve.append([hinted_at(cands, qrels[q["id"]], t) for t in CURVE])
        for half in ("all", split_of(q["text"])):
            count[half] += 1
            for signal, ranked in rankings(cands).items():
                for key, value in metrics(ranked, qrels[q["id"]]).items():
                    sums[half][signal][key] += value
            hinted[half] += hinted_at(cands, qrels[q["id"]], threshold)
    figures = {
        h: {s: {k: round(v / max(count[h], 1), 4) for k, v in m.items()} for s, m in sums[h].items()} for h in halves
    }

    # Off-topic: other sets' questions, questions in the vault's own language
    # about subjects no set holds, and chit-chat must get no hint here.
    off = offtopic(args.set, args.offtopic)
    if args.long_prompts:
        off = {kind: [long_prompt(t) for t in texts] for kind, texts in off.items()}
    best = {kind: top_scores(store, emb, calib, texts) for kind, texts in off.items()}
    quiet = {kind: round(sum(b < threshold for b in v) / max(len(v), 1), 4) for kind, v in best.items()}
    pooled = [b for v in best.values() for b in v]
    curve = [
        {
            "threshold": t,
            "answerable_hinted": round(sum(h[i] for h in on_curve) / len(on_curve), 4) if on_curve else None,
            "offtopic_quiet": round(sum(b < t for b in pooled) / len(pooled), 4) if pooled else None,
        }
        for i, t in enumerate(CURVE)
    ]
    result = {
        "set": args.set,
        "queries": len(queries),
        "queries_by_half": {h: count[h] for h in ("train", "test")},
        "memories": len(memories),
        "model": report.model,
        "calibration": {k: calib.get(k) for k in ("rel_lo", "rel_hi", "raw_unrelated_p50", "raw_related_p50")},
        "signals": figures["all"],
        "signals_by_half": {h: figures[h] for h in ("train", "test")},
        "hints": {
            "threshold": threshold,
            "answerable_hinted": round(hinted["all"] / max(count["all"], 1), 4),
            "answerable_hinted_by_half": {h: round(hinted[h] / max(count[h], 1), 4) for h in ("train", "test")},
            "offtopic_quiet": quiet,
            "offtopic_queries": {kind: len(texts) for kind, texts in off.items()},
        },
        "curve": curve,
        "machine": machine(),
        "date": dt.date.today().isoformat(),
    }
    if args.latency and queries:
        # Warm latency, end to end through the API (dirty check + embedding + SQL + rules),
        # with the real model: the bench cache would answer the query embedding.
        from bench_latency import run_queries

        if isinstance(store._embedder, CachedEmbedder):
            store._embedder = store._embedder.inner

        latency = run_queries(store, [q["text"] for q in queries[: max(args.latency, 2)]])
        result["latency_ms"] = {"p50": latency["p50"], "p95": latency["p95"]}
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
    if r["queries"]:
        print(
            f"{'signal':8} {'hit@1':>7} {'hit@5':>7} {'R@5':>7} {'R@10':>7} {'nDCG@10':>8} {'MRR@10':>7}"
            "   nDCG@10 train / test"
        )
        for signal, m in r["signals"].items():
            tr, te = (r["signals_by_half"][h][signal]["ndcg@10"] for h in ("train", "test"))
            print(
                f"{signal:8} {m['hit@1']:7.3f} {m['hit@5']:7.3f} {m['recall@5']:7.3f} {m['recall@10']:7.3f} {m['ndcg@10']:8.3f} {m['mrr@10']:7.3f}"
                f"   {tr:.3f} / {te:.3f}"
            )
    h = r["hints"]
    by = h["answerable_hinted_by_half"]
    quiet = ", ".join(f"{k} {v:.1%} ({h['offtopic_queries'][k]})" for k, v in h["offtopic_quiet"].items())
    if r["queries"]:
        print(
            f"hints at {h['threshold']}: answerable hinted {h['answerable_hinted']:.1%} "
            f"(train {by['train']:.1%} / test {by['test']:.1%})"
        )
    print(f"off-topic quiet: {quiet}")
    print("threshold  answerable hinted / off-topic quiet (all kinds pooled)")
    for point in r["curve"]:
        a, q = point["answerable_hinted"], point["offtopic_quiet"]
        mark = "  <- default" if abs(point["threshold"] - h["threshold"]) < 1e-9 else ""
        print(
            f"  {point['threshold']:.2f}     {'-' if a is None else f'{a:.1%}'} / {'-' if q is None else f'{q:.1%}'}{mark}"
        )
    if "latency_ms" in r:
        print(f"latency p50 {r['latency_ms']['p50']} ms, p95 {r['latency_ms']['p95']} ms; {r['machine']}")


if __name__ == "__main__":
    raise SystemExit(main())
