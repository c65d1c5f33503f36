#!/usr/bin/env python
"""Warm recall latency at scale (query embedding included).

    .venv/bin/python tools/bench_latency.py --sizes 10000,100000 [--queries 200] [--out F.json]
        [--against DIR] [--k-coarse 400,2000] [--long-prompts]

Embedding 100,000 memories with the real model would take hours on this
machine, so the vault is the synthetic one of ``bench_sync.py`` (real files,
real sync, real FTS and chunks) and its vectors are synthetic too: each is a
real e5 embedding of a sample text plus noise, re-normalised, so the vector
tables have the size and roughly the cosine spread of a real index. The
query path is the product's own: ``Store.recall`` with the real default
model embedding each query, the SQL of ``sql/recall.sql`` and the hint rules,
timed twice: as a long-lived process runs it (vectors held in memory,
``marchdb/index/vecindex.py``) and as a one-shot CLI call does (vec0 tables only).
Half the queries name things of the vault (see ``bench_sync.entity``).

The floor: where the in-memory copy is exact, each long-lived recall is
paired with the least any recall must do for the same message, in turn
(floor, recall; recall, floor; ...): the model embedding the message alone,
one numpy product of it with every vector of the index, and one FTS5 MATCH
of its words (the top 40 by BM25). The table gives both medians and the
median of the pairs' ratios (recall / floor), which a drift in the machine's
speed moves less than either.

The fast vector tier: where the in-memory copy is coarse (sign bits, then
int8), its nearest neighbours are checked against an exact search of the
float32 vectors for every query: recall@10 and recall@k (k = what recall
asks of each kind: 40 metadata vectors, 80 chunks), and the two KNN calls'
time; ``--k-coarse 400,2000,8000`` does it for each number of coarse
candidates re-ranked (marchdb's own: ``vectors.K_COARSE``).

This code against another: ``--against DIR`` (a checkout, e.g.
``git worktree add /tmp/before main``) prepares the index with this code,
then two long-lived children, one per tree (``PYTHONPATH``), recall each
message in turn (before, after; after, before; ...), each paired with its
floor as above. It prints both against their floor, the median of the
per-message ratios after / before, and whether every candidate (id, order,
score) is the same on both.
"""

from __future__ import annotations

# marchdb first, as in every marchdb process: it sets OpenBLAS's spin timeout,
# which OpenBLAS reads when numpy loads (marchdb/__init__.py). Imported after
# numpy, every product left two threads spinning beside the next embedding.
import marchdb  # isort: skip

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_sync import ensure_vault, machine_info, pick_entities

from marchdb import fts
from marchdb.config import load_config
from marchdb.index import calibrate, db, recall, terms, vectors
from marchdb.index.vecindex import KINDS, TABLES, VectorIndex
from marchdb.index.vectors import K_COARSE
from marchdb.store import Store

REPO = Path(__file__).resolve().parent.parent

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
#: Half the queries name a thing of the vault (drawn by the same Zipf law as
#: the vault's own names, so some match a quarter of the memories, most a few).
TEMPLATES = [
    "what did we decide about {}",
    "{} deploy failed again, why",
    "{}的发布计划是什么",
    "who owns {} and the latency dashboard",
]


def query_texts(n: int) -> list[str]:
    """``n`` distinct queries: the fixed ones above and thing-naming ones."""
    import random

    rng = random.Random(7)
    out = []
    for i in range(n):
        if i % 2 == 0:
            text = QUERIES[(i // 2) % len(QUERIES)]
            out.append(text if i // 2 < len(QUERIES) else f"{text} {i}")
        else:
            out.append(TEMPLATES[(i // 2) % len(TEMPLATES)].format(pick_entities(rng, 1)[0]))
    return out


def fill_vectors(store: Store, log) -> None:
    """Give every metadata text and chunk a synthetic vector (once)."""
    emb = store.embedder()
    con = store.con
    vectors.prepare_model(con, emb)
    vectors.collect_garbage(con)  # a regenerated vault leaves the old texts' vectors behind
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


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))], 2)


def run_queries(store: Store, texts: list[str]) -> dict:
    """Warm recall latency (query embedding and dirty check included)."""
    store.recall(texts[0])  # warm: model loaded, pages cached, vectors loaded
    store.recall(texts[1])
    total_ms = []
    for text in texts:
        t = time.perf_counter()
        store.recall(text)
        total_ms.append((time.perf_counter() - t) * 1000)
    return {"p50": round(statistics.median(total_ms), 2), "p95": _pct(total_ms, 0.95), "max": _pct(total_ms, 1.0)}


class Floor:
    """The least any recall must do for a message (see the module's doc),
    timed in turn with the recall itself."""

    def __init__(self, store: Store, texts: list[str]):
        store.recall(texts[0])
        store.recall(texts[1])
        vindex = store.vector_index()
        assert vindex is not None
        self.store, self.texts = store, texts
        # every vector, one matrix; the coarse tier has none to pair with (no floor)
        self.matrix = None if vindex.coarse else np.concatenate([vindex.kinds[kind].f32 for kind in KINDS])
        con = store.con
        self.matches = [fts.match_expression(terms.bm25_terms(con, fts.query_terms(t))[1]) for t in texts]

    def floor(self, i: int) -> tuple[float, float, float]:
        """Embedding, product, FTS5 top 40 of message ``i``, in ms."""
        top = "SELECT rowid, bm25(fts, 2.0, 1.0) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts, 2.0, 1.0) LIMIT 40"
        t0 = time.perf_counter()
        q = self.store.embedder().embed_queries([self.texts[i]])[0]
        t1 = time.perf_counter()
        self.matrix @ q
        t2 = time.perf_counter()
        self.store.con.execute(top, (self.matches[i],)).fetchall()
        t3 = time.perf_counter()
        return (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000

    def whole(self, i: int) -> float:
        t = time.perf_counter()
        self.store.recall(self.texts[i])
        return (time.perf_counter() - t) * 1000

    def pair(self, i: int) -> tuple[float, tuple[float, float, float] | None]:
        """Message ``i``'s recall and its floor, in turn (odd ``i``: the recall
        first); no floor on the coarse tier."""
        if self.matrix is None:
            return self.whole(i), None
        if i % 2:
            rec = self.whole(i)
            return rec, self.floor(i)
        parts = self.floor(i)
        return self.whole(i), parts


def _med(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def floor_summary(rec: list[float], parts: list) -> dict:
    out = {"recall_p50": _med(rec), "recall_p95": _pct(rec, 0.95)}
    if any(p is None for p in parts):
        return out
    flo = [sum(p) for p in parts]
    return {
        **out,
        "floor_p50": _med(flo),
        "ratio_p50": round(statistics.median(r / f for r, f in zip(rec, flo)), 3),
        "floor_parts_p50": {k: _med([p[j] for p in parts]) for j, k in enumerate(("embed", "product", "fts"))},
    }


def run_paired(store: Store, texts: list[str]) -> dict:
    """Warm recall in turn with its floor (see the module's doc), per message."""
    paired = Floor(store, texts)
    rec: list[float] = []
    parts: list = []
    for i in range(len(texts)):
        r, p = paired.pair(i)
        rec.append(r)
        parts.append(p)
    return floor_summary(rec, parts)


# ---------------------------------------------------------------- this code against another checkout


def worker(home: Path, vault: Path) -> None:
    """A child of ``--against``: one tree's warm recall (``PYTHONPATH``), on
    the index the parent prepared. Reads the messages (one JSON line), then
    message numbers; answers each with its recall and floor times and every
    candidate of the same recall asked again with ``explain`` (untimed)."""
    cfg = load_config(home=home, root=vault, env={})
    texts = json.loads(sys.stdin.readline())
    with Store(cfg, keep_vectors=True) as store:
        paired = Floor(store, texts)
        (version,) = store.con.execute("PRAGMA user_version").fetchone()
        print(json.dumps({"marchdb": marchdb.__file__, "schema": version}), flush=True)
        for line in sys.stdin:
            i = int(line)
            rec, parts = paired.pair(i)
            res = store.recall(texts[i], explain=True)
            ranked = [[h.id, h.score, h.rank_score] for h in res.candidates]
            print(json.dumps({"recall_ms": rec, "parts": parts, "ranked": ranked}), flush=True)


def run_against(home: Path, vault: Path, base: Path, texts: list[str], log) -> dict:
    """This code and ``base`` (another checkout) recalling the same messages
    on the same index, message by message in turn (before, after; after,
    before; ...): each one's recall against its floor, the ratio of the two
    recalls, and whether their candidates (ids, order, scores) are identical."""
    trees = {"before": base.absolute(), "after": REPO}
    procs = {}
    for label, tree in trees.items():
        procs[label] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(home), str(vault)],
            env={**os.environ, "PYTHONPATH": str(tree), "MARCH_DAEMON": "0"},
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    out: dict[str, list[dict]] = {label: [] for label in trees}
    try:
        for proc in procs.values():
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(texts) + "\n")
            proc.stdin.flush()
        heads = {label: json.loads(procs[label].stdout.readline()) for label in trees}  # type: ignore[union-attr]
        for label, head in heads.items():
            assert head["marchdb"].startswith(str(trees[label])), (label, head)
        assert heads["before"]["schema"] == heads["after"]["schema"], heads
        for i in range(len(texts)):
            for label in ("before", "after") if i % 2 == 0 else ("after", "before"):
                proc = procs[label]
                proc.stdin.write(f"{i}\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
                out[label].append(json.loads(proc.stdout.readline()))  # type: ignore[union-attr]
    finally:
        for proc in procs.values():
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait()
    summary = {
        label: floor_summary([r["recall_ms"] for r in rs], [r["parts"] for r in rs]) for label, rs in out.items()
    }
    same_ids = sum(
        [c[0] for c in a["ranked"]] == [c[0] for c in b["ranked"]] for a, b in zip(out["before"], out["after"])
    )
    identical = sum(a["ranked"] == b["ranked"] for a, b in zip(out["before"], out["after"]))
    diff = max(
        (abs(x[1] - y[1]) for a, b in zip(out["before"], out["after"]) for x, y in zip(a["ranked"], b["ranked"])),
        default=0.0,
    )
    ratios = [b["recall_ms"] / a["recall_ms"] for a, b in zip(out["before"], out["after"])]
    return {
        **summary,
        "after_over_before_p50": round(statistics.median(ratios), 3),
        "queries": len(texts),
        "candidates": sum(len(a["ranked"]) for a in out["before"]),
        "same_ids_in_order": same_ids,
        "identical": identical,
        "max_score_diff": diff,
    }


def exact_knn(con, kind: str, qmat: np.ndarray, k: int) -> list[set[int]]:
    """The ``k`` nearest vids of ``kind`` for each row of ``qmat``, by exact
    cosine over the float32 vectors (read in batches: 400 MB at 100,000)."""
    best_ids = np.zeros((len(qmat), 0), np.int64)
    best_cos = np.zeros((len(qmat), 0), np.float32)
    dim = qmat.shape[1]
    cur = con.execute(f"SELECT rowid, embedding FROM {TABLES[kind]}")
    while rows := list(itertools.islice(cur, 20000)):
        ids = np.array([r[0] for r in rows], np.int64)
        mat = np.frombuffer(b"".join(r[1] for r in rows), np.float32).reshape(len(rows), dim)
        cos = np.concatenate([best_cos, qmat @ mat.T], axis=1)
        every = np.concatenate([best_ids, np.broadcast_to(ids, (len(qmat), len(ids)))], axis=1)
        if cos.shape[1] <= k:
            best_cos, best_ids = cos, every
            continue
        keep = np.argpartition(-cos, k - 1, axis=1)[:, :k]
        best_cos = np.take_along_axis(cos, keep, axis=1)
        best_ids = np.take_along_axis(every, keep, axis=1)
    return [set(row.tolist()) for row in best_ids]


def tier_recall(store: Store, qvecs: np.ndarray, k_coarse: tuple[int, ...] = (K_COARSE,)) -> dict:
    """The coarse in-memory tier's KNN against exact search (recall@10, @k),
    and what its two KNN calls take (p50, ms), for each number of coarse
    candidates re-ranked (``k_coarse``; marchdb's own: ``K_COARSE``)."""
    vindex = VectorIndex()
    vindex.sync(store.con)
    if not vindex.coarse:
        return {"tier": "exact"}
    ks = dict(zip(KINDS, (recall.K_DENSE, recall.K_CHUNK)))
    truth = {(kind, k): exact_knn(store.con, kind, qvecs, k) for kind in KINDS for k in (10, ks[kind])}
    by_k: dict[int, dict] = {}
    for kc in k_coarse:
        vindex.k_coarse = kc
        fast: dict[str, list[list[int]]] = {kind: [] for kind in KINDS}
        ms = []
        for q in qvecs:
            t = time.perf_counter()
            query = vindex.query(q)
            for kind in KINDS:
                fast[kind].append(query.knn(kind, ks[kind]))
            ms.append((time.perf_counter() - t) * 1000)
        row: dict = {"knn_ms_p50": round(statistics.median(ms), 2)}
        for kind in KINDS:
            k = ks[kind]
            row[kind] = {
                f"recall@{n}": round(
                    statistics.mean(len(set(f[:n]) & t) / n for f, t in zip(fast[kind], truth[kind, n])), 3
                )
                for n in (10, k)
            }
        by_k[kc] = row
    first = by_k[k_coarse[0]]
    return {"tier": "coarse", "meta": first["meta"], "chunk": first["chunk"], "by_k_coarse": by_k}


#: Prompt lengths timed with ``--long-prompts`` (recall reads at most 4,000 characters).
LONG_PROMPTS = (100, 500, 1000, 2000, 4000)


def long_prompt(question: str, chars: int) -> str:
    """``question`` after a paste of marchdb's own source, ``chars`` characters in all."""
    files = sorted((REPO / "marchdb").glob("**/*.py"))
    source = files[len(question) % len(files)].read_text(encoding="utf-8") * 4
    room = max(chars - len(question) - 30, 0)
    return f"Here is the file:\n\n{source[:room]}\n\n{question}"[:chars] if room else question[:chars]


def bench(
    n: int,
    work: Path,
    queries: int,
    log,
    long_prompts: bool = False,
    against: Path | None = None,
    k_coarse: tuple[int, ...] = (K_COARSE,),
) -> dict:
    vault, _ = ensure_vault(work / "sync" / f"n{n}", n, log)  # bench_sync.py's vaults
    home = work / "latency" / f"n{n}"
    cfg = load_config(home=home, root=vault, env={})
    store = Store(cfg)
    t0 = time.perf_counter()
    store.sync(embed=False)
    log(f"n={n}: structural sync {time.perf_counter() - t0:.1f}s")
    fill_vectors(store, log)
    counts = db.rows(
        store.con,
        "SELECT (SELECT count(*) FROM vectors WHERE kind='meta') AS meta, "
        "(SELECT count(*) FROM vectors WHERE kind='chunk') AS chunk",
    )[0]
    texts = query_texts(queries)
    if against is not None:
        store.close()
        ab = run_against(home, vault, against, texts, log)
        log(f"n={n} against {against}: {ab}")
        return {"memories": n, "vectors": counts, "against": ab}
    emb = store.embedder()
    embed_ms = []
    for text in texts:
        t = time.perf_counter()
        emb.embed_queries([text])
        embed_ms.append((time.perf_counter() - t) * 1000)
    # The in-memory copy a long-lived process keeps: load time and size.
    vindex = VectorIndex()
    t = time.perf_counter()
    vindex.sync(store.con)
    load_s = time.perf_counter() - t
    store.close()
    modes = {}
    # "memory": a long-lived process (MCP server, agent loop); "sql": the
    # vec0 path a one-shot CLI call takes.
    for mode, keep in (("memory", True), ("sql", False)):
        with Store(cfg, keep_vectors=keep) as s:
            modes[mode] = run_queries(s, texts)
        log(f"n={n} {mode}: {modes[mode]}")
    floor = None
    if not vindex.coarse:
        with Store(cfg, keep_vectors=True) as s:
            floor = run_paired(s, texts)
        log(f"n={n} against the floor: {floor}")
    with Store(cfg) as s:
        knn = tier_recall(s, np.asarray(s.embedder().embed_queries(texts), np.float32), k_coarse)
    log(f"n={n} vector tier: {knn}")
    by_length = {}
    if long_prompts:
        # prompts of every length up to recall's bound: a question beside a
        # pasted piece of marchdb's own source, as a long-lived process answers them
        with Store(cfg, keep_vectors=True) as s:
            for chars in LONG_PROMPTS:
                by_length[chars] = run_queries(s, [long_prompt(t, chars) for t in texts[: max(queries // 2, 2)]])
                log(f"n={n} prompts of {chars} characters: {by_length[chars]}")
    return {
        "by_prompt_chars": by_length,
        "memories": n,
        "vectors": counts,
        "recall_ms": modes,
        "query_embed_ms": {"p50": round(statistics.median(embed_ms), 2)},
        "floor": floor,
        "knn": knn,
        "in_memory": {
            "tier": "coarse" if vindex.coarse else "exact",
            "load_s": round(load_s, 2),
            "mb": round(vindex.nbytes() / 1e6, 1),
        },
        "index_mb": round(cfg.index_path.stat().st_size / 1e6, 1),
    }


def print_against(results: list[dict], base: Path) -> None:
    print(f"before: {base}   after: {REPO}   (each message recalled by both in turn, warm, vectors in memory)")
    print(
        f"{'memories':>9} {'code':>7} {'recall p50':>11} {'p95':>8} {'p95/p50':>8} {'floor p50':>10} "
        f"{'recall/floor':>13}   floor: embed, product, FTS"
    )
    for r in results:
        ab = r["against"]
        for label in ("before", "after"):
            f = ab[label]
            line = (
                f"{r['memories']:>9,} {label:>7} {f['recall_p50']:>9.1f}ms {f['recall_p95']:>6.1f}ms "
                f"{f['recall_p95'] / f['recall_p50']:>7.2f}x"
            )
            if "floor_p50" in f:
                p = f["floor_parts_p50"]
                line += (
                    f" {f['floor_p50']:>8.1f}ms {f['ratio_p50']:>12.2f}x"
                    f"   {p['embed']:.1f} + {p['product']:.1f} + {p['fts']:.1f} ms"
                )
            else:
                line += "  (coarse tier: no exact product to pair with)"
            print(line)
        print(
            f"{r['memories']:>9,} after/before p50 of the per-message ratios {ab['after_over_before_p50']:.3f}; "
            f"same candidates in the same order {ab['same_ids_in_order']}/{ab['queries']}, identical scores "
            f"{ab['identical']}/{ab['queries']} ({ab['candidates']:,} candidates, largest score difference "
            f"{ab['max_score_diff']:.2g})"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--work", type=Path, default=REPO / ".bench")
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--long-prompts",
        action="store_true",
        help="also time prompts of 100 to 4,000 characters (a paste and a question)",
    )
    ap.add_argument(
        "--against",
        type=Path,
        help="a checkout of marchdb (git worktree add DIR REV) to recall in turn with this code, "
        "message by message on the same index: both against their floor, and their candidates compared",
    )
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    ap.add_argument(
        "--k-coarse",
        default=str(K_COARSE),
        help=f"coarse candidates re-ranked, for the vector tier's recall (a list: 400,2000,8000; marchdb's: {K_COARSE})",
    )
    args = ap.parse_args()
    k_coarse = tuple(int(x) for x in args.k_coarse.split(","))
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results = [
        bench(int(s.replace("_", "")), args.work, args.queries, log, args.long_prompts, args.against, k_coarse)
        for s in args.sizes.split(",")
    ]
    if args.against is not None:
        print_against(results, args.against)
        print(machine_info())
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"results": results, "machine": machine_info()}, indent=2))
        return 0
    print(
        f"{'memories':>9} {'vectors':>8} {'in-memory p50':>14} {'p95':>7} {'max':>7} "
        f"{'SQL path p50':>13} {'p95':>7} {'embed p50':>10} {'copy':>15} {'index MB':>9}"
    )
    for r in results:
        m, q, c = r["recall_ms"]["memory"], r["recall_ms"]["sql"], r["in_memory"]
        print(
            f"{r['memories']:>9,} {r['vectors']['meta'] + r['vectors']['chunk']:>8,} {m['p50']:>12.1f}ms "
            f"{m['p95']:>5.1f}ms {m['max']:>5.0f}ms {q['p50']:>11.1f}ms {q['p95']:>5.1f}ms "
            f"{r['query_embed_ms']['p50']:>8.1f}ms {c['tier']:>6} {c['mb']:>4.0f}MB {c['load_s']:>3.1f}s {r['index_mb']:>9.1f}"
        )
    print()
    print(f"{'memories':>9} {'recall p50':>11} {'floor p50':>10} {'recall/floor':>13}   floor: embed, product, FTS")
    for r in results:
        f = r["floor"]
        if f:
            p = f["floor_parts_p50"]
            print(
                f"{r['memories']:>9,} {f['recall_p50']:>9.1f}ms {f['floor_p50']:>8.1f}ms {f['ratio_p50']:>12.2f}x"
                f"   {p['embed']:.1f} + {p['product']:.1f} + {p['fts']:.1f} ms"
            )
        else:
            print(f"{r['memories']:>9,}  (coarse tier: no exact product to pair with)")
    print()
    print(f"{'memories':>9} {'vector tier':>12} {'meta @10':>9} {'@40':>6} {'chunk @10':>10} {'@80':>6} {'KNN p50':>9}")
    for r in results:
        k = r["knn"]
        if k["tier"] == "exact":
            print(f"{r['memories']:>9,} {'exact':>12}  (recall 1.0 by construction)")
            continue
        for kc, row in k["by_k_coarse"].items():
            m, c = row["meta"], row["chunk"]
            print(
                f"{r['memories']:>9,} {f'coarse {kc}':>12} {m['recall@10']:>9.3f} {m['recall@40']:>6.3f} "
                f"{c['recall@10']:>10.3f} {c['recall@80']:>6.3f} {row['knn_ms_p50']:>7.2f}ms"
            )
    for r in results:
        for chars, m in r["by_prompt_chars"].items():
            print(
                f"{r['memories']:>9,} memories, prompts of {chars:>5,} characters: p50 {m['p50']:.1f} ms, p95 {m['p95']:.1f} ms"
            )
    print(machine_info())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"results": results, "machine": machine_info()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
