#!/usr/bin/env python
"""The index's size and cold sync, this code against another checkout, and
that recall answers the same on both.

    .venv/bin/python tools/bench_index.py --base /tmp/marchdb-before --sizes 10000 \\
        [--pairs 3] [--queries 300] [--out F.json]

``--base`` is a checkout of marchdb to compare with (``git worktree add`` or
``git archive REV | tar -x -C DIR``; its ``sql/`` folder is used as it is).
Each build runs in a child process with ``PYTHONPATH`` set to one tree, on
``bench_sync.py``'s generated vault of each size, in pairs taken in turn
(before, after; after, before; ...), so a drift in the machine's load falls on
both alike. For each build: the CPU time of the cold sync without embedding
(``Store.sync(embed=False)`` into a fresh home: user + system of the child),
its wall time, the index file's size, and what the FTS5 tables take of it
(``dbstat``: every table and index, the FTS5 shadow tables summed per FTS5 table).

Then recall, once per tree on its last index: every metadata text and chunk
gets a synthetic vector (``bench_latency.fill_vectors``: real e5 embeddings
of sample texts plus noise, the same on both trees), and ``--queries``
messages (``bench_latency.query_texts``) are recalled with ``explain``: every
candidate with every signal and score, compared exactly (floats as stored).
Last, the ``--base`` index with its vectors is opened by this code (a schema
rebuild when the schema differs: vectors carried, ``marchdb/index/carry.py``),
synced and asked the same messages: the answers must be the same again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent


def fts_owner(name: str) -> str:
    """The FTS5 table a shadow table belongs to, or the name itself."""
    for table in ("fts_chunk", "fts"):
        if name.startswith(table + "_") and name.rsplit("_", 1)[1] in ("data", "idx", "content", "docsize", "config"):
            return table
    return name


# ---------------------------------------------------------------- children (one tree each)


def child_cold(home: Path, vault: Path, models: Path) -> dict:
    import apsw

    from marchdb.config import load_config
    from marchdb.store import Store

    cfg = load_config(home=home, root=vault, env={"MARCH_MODELS_DIR": str(models)})
    c0, t0 = time.process_time(), time.perf_counter()
    store = Store(cfg)
    report = store.sync(embed=False)
    t1, c1 = time.perf_counter(), time.process_time()
    store.close()
    con = apsw.Connection(str(cfg.index_path), flags=apsw.SQLITE_OPEN_READONLY)
    tables: dict[str, int] = {}
    for name, size in con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
        tables[fts_owner(name)] = tables.get(fts_owner(name), 0) + size
    (memories,) = con.execute("SELECT count(*) FROM memory_index").fetchone()
    (chunks,) = con.execute("SELECT count(*) FROM chunks").fetchone()
    (version,) = con.execute("PRAGMA user_version").fetchone()
    con.close()
    return {
        "cpu_s": c1 - c0,
        "wall_s": t1 - t0,
        "added": report.added,
        "index_bytes": os.path.getsize(cfg.index_path),
        "tables": tables,
        "memories": memories,
        "chunks": chunks,
        "schema_version": version,
    }


def child_recall(home: Path, vault: Path, models: Path, tree: Path, queries: Path, out: Path, fill: bool) -> dict:
    sys.path.insert(0, str(tree / "tools"))
    from bench_latency import fill_vectors

    from marchdb.config import load_config
    from marchdb.store import Store

    cfg = load_config(home=home, root=vault, env={"MARCH_MODELS_DIR": str(models)})
    texts = json.loads(queries.read_text(encoding="utf-8"))
    with Store(cfg) as store:
        t0 = time.perf_counter()
        report = store.sync(embed=False)
        sync_s = time.perf_counter() - t0
        if fill:
            fill_vectors(store, lambda msg: print(msg, file=sys.stderr, flush=True))
        (vectors,) = store.con.execute("SELECT count(*) FROM vectors").fetchone()
        (missing,) = store.con.execute("SELECT count(*) FROM diag_problems WHERE kind = 'missing_vector'").fetchone()
        store.recall(texts[0])  # model loaded, vectors in memory
        answers, times = [], []
        for text in texts:
            t = time.perf_counter()
            res = store.recall(text, explain=True)
            times.append((time.perf_counter() - t) * 1000)
            answers.append(
                {
                    "mode": res.mode,
                    "hints": [h.id for h in res.hints],
                    "candidates": [dataclasses.asdict(h) for h in res.candidates],
                }
            )
    out.write_text(json.dumps(answers, ensure_ascii=False), encoding="utf-8")
    return {
        "index_bytes_with_vectors": os.path.getsize(cfg.index_path),
        "sync": report.to_dict(),
        "sync_s": sync_s,
        "vectors": vectors,
        "missing_vectors": missing,
        "recall_ms_p50": statistics.median(times),
    }


# ---------------------------------------------------------------- parent


def run_child(tree: Path, args: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "MARCH_DAEMON": "0"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    if proc.returncode:
        raise SystemExit(f"child failed ({tree}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: Signals computed from the clock: two runs minutes apart differ in them.
CLOCK_SIGNALS = ("recency", "temperature", "temp_adj")


def timeless(answer: dict) -> dict:
    """``answer`` without the signals the clock moves."""
    candidates = [
        {**c, "signals": {k: v for k, v in c["signals"].items() if k not in CLOCK_SIGNALS}}
        for c in answer["candidates"]
    ]
    return {**answer, "candidates": candidates}


def compare(a: list[dict], b: list[dict]) -> dict:
    """How many answers are the same: hints in order, and every candidate
    with every score and signal exactly (but those the clock moves)."""
    same_hints = sum(x["hints"] == y["hints"] for x, y in zip(a, b))
    same_all = sum(timeless(x) == timeless(y) for x, y in zip(a, b))
    candidates = [c for x in a for c in x["candidates"]]
    return {
        "queries": len(a),
        "candidates": len(candidates),
        # how many of them FTS5 matched (BM25 over whole memories, over chunks)
        "bm25_matched": sum(1 for c in candidates if c["signals"].get("bm25_raw")),
        "cbm25_matched": sum(1 for c in candidates if c["signals"].get("cbm25_raw")),
        "hints": sum(len(x["hints"]) for x in a),
        "same_hints": same_hints,
        "identical": same_all,
    }


def bench(n: int, work: Path, base: Path, models: Path, pairs: int, queries: int, log) -> dict:
    sys.path.insert(0, str(TOOLS))
    from bench_latency import query_texts
    from bench_sync import ensure_vault

    vault, _ = ensure_vault(work / "sync" / f"n{n}", n, log)
    vault_bytes = sum(p.stat().st_size for p in vault.rglob("*.md"))
    trees = {"before": base, "after": REPO}
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    homes = {label: work / "index" / f"n{n}-{label}" for label in trees}
    for i in range(pairs):
        for label in ("before", "after") if i % 2 == 0 else ("after", "before"):
            shutil.rmtree(homes[label], ignore_errors=True)
            res = run_child(trees[label], ["cold", str(homes[label]), str(vault), str(models)])
            runs[label].append(res)
            log(
                f"n={n} {label}: cold sync {res['cpu_s']:.2f} s CPU, {res['wall_s']:.2f} s, {res['index_bytes'] / 1e6:.1f} MB"
            )
    ratios = [b["cpu_s"] / a["cpu_s"] for a, b in zip(runs["before"], runs["after"])]

    qfile = work / "index" / f"n{n}-queries.json"
    qfile.write_text(json.dumps(query_texts(queries), ensure_ascii=False), encoding="utf-8")
    answers, recall = {}, {}
    for label in ("before", "after"):
        out = work / "index" / f"n{n}-{label}-answers.json"
        recall[label] = run_child(
            trees[label],
            ["recall", str(homes[label]), str(vault), str(models), str(trees[label]), str(qfile), str(out), "1"],
        )
        answers[label] = json.loads(out.read_text(encoding="utf-8"))
        log(f"n={n} {label}: recall {recall[label]}")
    # The index built by the code before, vectors and all, opened by this code.
    carried_home = work / "index" / f"n{n}-carried"
    shutil.rmtree(carried_home, ignore_errors=True)
    carried_home.mkdir(parents=True)
    shutil.copy2(homes["before"] / "index.sqlite", carried_home / "index.sqlite")
    out = work / "index" / f"n{n}-carried-answers.json"
    recall["carried"] = run_child(
        REPO, ["recall", str(carried_home), str(vault), str(models), str(REPO), str(qfile), str(out), "0"]
    )
    answers["carried"] = json.loads(out.read_text(encoding="utf-8"))
    log(f"n={n} carried: recall {recall['carried']}")

    def summary(label: str) -> dict:
        rs = runs[label]
        size = statistics.median(r["index_bytes"] for r in rs)
        tables = rs[-1]["tables"]
        return {
            "cold_cpu_s": [round(r["cpu_s"], 3) for r in rs],
            "cold_wall_s": [round(r["wall_s"], 3) for r in rs],
            "cold_cpu_files_per_s": round(n / statistics.median(r["cpu_s"] for r in rs), 1),
            "index_mb": round(size / 1e6, 2),
            "kb_per_memory": round(size / n / 1e3, 2),
            "times_markdown": round(size / vault_bytes, 2),
            "fts_mb": round(tables.get("fts", 0) / 1e6, 2),
            "fts_chunk_mb": round(tables.get("fts_chunk", 0) / 1e6, 2),
            "schema_version": rs[-1]["schema_version"],
            "recall": recall[label],
        }

    return {
        "memories": n,
        "vault_mb": round(vault_bytes / 1e6, 2),
        "before": summary("before"),
        "after": summary("after"),
        "cpu_ratio_after_before": [round(r, 3) for r in ratios],
        "after_vs_before": compare(answers["before"], answers["after"]),
        "carried": {**recall["carried"], **compare(answers["before"], answers["carried"])},
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, *rest = sys.argv[2:]
        if kind == "cold":
            home, vault, models = map(Path, rest)
            print(json.dumps(child_cold(home, vault, models)))
        else:
            home, vault, models, tree, queries, out = map(Path, rest[:6])
            print(json.dumps(child_recall(home, vault, models, tree, queries, out, rest[6] == "1")))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="a checkout of marchdb to compare with")
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--pairs", type=int, default=3, help="cold syncs of each tree, taken in turn")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--work", type=Path, default=REPO / ".bench")
    ap.add_argument(
        "--models", type=Path, help="where the default model is built (default: WORK/latency/n10000/models)"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    models = args.models or args.work / "latency" / "n10000" / "models"

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = [
        bench(int(s), args.work.absolute(), args.base.absolute(), models.absolute(), args.pairs, args.queries, log)
        for s in args.sizes.split(",")
    ]
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
