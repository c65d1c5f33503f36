#!/usr/bin/env python
"""The index's size and cold sync, this code against another checkout, and
that recall answers the same on both.

    .venv/bin/python tools/bench_index.py --base /tmp/marchdb-before --sizes 10000 \\
        [--pairs 3] [--queries 300] [--edits 1000] [--out F.json]

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

``--edits K``: on a copy of the vault, an index per tree, then rounds of K
files edited and each tree's sync of them, in turn (CPU time of each), then
FTS5's integrity check of both tables on each index.
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


def child_resync(home: Path, vault: Path, models: Path) -> dict:
    from marchdb.config import load_config
    from marchdb.store import Store

    cfg = load_config(home=home, root=vault, env={"MARCH_MODELS_DIR": str(models)})
    with Store(cfg) as store:
        if os.environ.get("BENCH_INDEX_UNTIMED"):
            store.sync(embed=False)
            return {"ok": True}
        assert store.con is not None  # the index opened, its schema checked: not timed
        c0, t0 = time.process_time(), time.perf_counter()
        report = store.sync(embed=False)
        return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0, "report": report.to_dict()}


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


def edit_files(vault: Path, count: int, round_no: int) -> None:
    """Rewrite the bodies of ``count`` files spread over ``vault`` (a
    sentence added, one word of the body changed), their times moved on."""
    files = sorted(vault.rglob("*.md"))
    for path in files[:: max(1, len(files) // count)][:count]:
        text = path.read_text(encoding="utf-8")
        text = text.rstrip("\n") + f"\n\nEdited in round {round_no}: the rollback plan changed again.\n"
        path.write_text(text.replace(" the ", " a ", 1), encoding="utf-8")
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000 * (round_no + 1)))


def bench_edits(n: int, work: Path, trees: dict[str, Path], models: Path, edits: int, rounds: int, log) -> dict:
    """Syncs of ``edits`` edited files each, on a copy of the vault, both
    trees in turn: the FTS5 rows deleted and written again."""
    from bench_sync import ensure_vault

    vault, _ = ensure_vault(work / "sync" / f"n{n}", n, log)
    copy = work / "index" / f"n{n}-edited-vault"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(vault, copy, symlinks=True)
    homes = {label: work / "index" / f"n{n}-edited-{label}" for label in trees}
    for label, tree in trees.items():
        shutil.rmtree(homes[label], ignore_errors=True)
        os.environ["BENCH_INDEX_UNTIMED"] = "1"
        try:
            run_child(tree, ["resync", str(homes[label]), str(copy), str(models)])
        finally:
            del os.environ["BENCH_INDEX_UNTIMED"]
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(rounds):
        edit_files(copy, edits, r)
        for label in ("before", "after") if r % 2 == 0 else ("after", "before"):
            res = run_child(trees[label], ["resync", str(homes[label]), str(copy), str(models)])
            assert res["report"]["updated"] == edits, res["report"]
            runs[label].append(res)
            log(f"n={n} {label}: sync of {edits} edited files {res['cpu_s']:.2f} s CPU, {res['wall_s']:.2f} s")
    checked = {label: run_child(REPO, ["check", str(homes[label])]) for label in trees}
    log(f"n={n} after the edits: {checked}")
    return {
        "checked": checked,
        "edited_files": edits,
        "before_cpu_s": [round(x["cpu_s"], 3) for x in runs["before"]],
        "after_cpu_s": [round(x["cpu_s"], 3) for x in runs["after"]],
        "ratios": [round(b["cpu_s"] / a["cpu_s"], 3) for a, b in zip(runs["before"], runs["after"])],
    }


def child_check(home: Path) -> dict:
    """FTS5's own check of both tables, their row counts, and digests of
    what they answer (every term's document and occurrence counts; the BM25
    of every memory matching the edits' words, by id): equal digests on two
    indexes of the same files mean the same answers."""
    import hashlib

    import apsw

    con = apsw.Connection(str(home / "index.sqlite"))
    for table in ("fts", "fts_chunk"):
        con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    out = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("fts", "fts_chunk")}
    vocab = hashlib.sha256()
    for table in ("fts_vocab", "fts_chunk_vocab"):
        for row in con.execute(f"SELECT term, doc, cnt FROM {table} ORDER BY term"):
            vocab.update(repr(row).encode())
    scores = con.execute(
        "SELECT m.id, round(bm25(fts, 2.0, 1.0), 9) FROM fts JOIN memory_index m ON m.rid = fts.rowid "
        "WHERE fts MATCH 'rollback OR edited OR plan' ORDER BY m.id"
    ).fetchall()
    con.close()
    return {
        "integrity_check": "ok",
        **out,
        "vocab_sha256": vocab.hexdigest()[:16],
        "bm25_sha256": hashlib.sha256(repr(scores).encode()).hexdigest()[:16],
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
        elif kind == "resync":
            home, vault, models = map(Path, rest)
            print(json.dumps(child_resync(home, vault, models)))
        elif kind == "check":
            print(json.dumps(child_check(Path(rest[0]))))
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
    ap.add_argument(
        "--edits", type=int, default=0, help="also time syncs of this many edited files (a copy of the vault)"
    )
    ap.add_argument("--edit-rounds", type=int, default=4)
    ap.add_argument("--edits-only", action="store_true", help="only the edited syncs")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    models = args.models or args.work / "latency" / "n10000" / "models"

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    sys.path.insert(0, str(TOOLS))
    results = []
    for size in args.sizes.split(","):
        n, work = int(size), args.work.absolute()
        out = (
            {}
            if args.edits_only
            else bench(n, work, args.base.absolute(), models.absolute(), args.pairs, args.queries, log)
        )
        if args.edits:
            trees = {"before": args.base.absolute(), "after": REPO}
            out["edits"] = bench_edits(n, work, trees, models.absolute(), args.edits, args.edit_rounds, log)
        results.append(out)
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
