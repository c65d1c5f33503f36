#!/usr/bin/env python
"""Benchmark marchdb's sync on synthetic vaults.

For each size N this script

1. generates (once, then reuses) a deterministic vault of N memory files in
   seed 000's layout ``YYYY/MM/weekN/YYYY-MM-DD-slug.md``;
2. times a cold sync without embeddings into a fresh index
   (``Store(load_config(...)).sync(embed=False)``) and reports files/s;
3. times a warm sync with nothing changed ``--repeat`` times, interleaved with
   a bare ``os.scandir`` walk + ``stat`` of every ``.md`` file of the same
   tree (walk, sync, fresh-store sync, walk, sync, ...), so caches are equally
   warm for all three; reports medians and the ratio sync / walk;
4. reports the size of the index file.

Usage::

    .venv/bin/python tools/bench_sync.py --sizes 10000,100000 --repeat 5 \\
        --out bench-results/sync.json --markdown bench-results/sync.md

Targets (seed 000): cold >= 2,000 files/s at 10,000 files; warm sync <= 2x
the bare walk. The table is always printed on stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from marchdb.config import load_config
from marchdb.store import Store

REPO = Path(__file__).resolve().parent.parent

#: Bump when the generated content changes, so old vaults are regenerated.
GENERATOR_VERSION = 2
SEED = 20240501
MARKER = "complete.json"  # lives next to the vault, not inside it

COLD_TARGET_FPS = 2000
WARM_TARGET_RATIO = 2.0

# ---------------------------------------------------------------- synthetic text

EN_WORDS = (
    "cache index memory agent query recall vector model sync file folder note user prompt context "
    "token budget latency throughput deploy review branch commit test fixture database schema table "
    "column migration release build pipeline worker queue retry timeout error log metric trace span "
    "service client server request response header cookie session config option default fallback "
    "embedding chunk paragraph sentence summary decision meeting customer invoice report dashboard "
    "chart export import parser tokenizer search ranking score threshold weekly monthly plan goal "
    "risk owner deadline estimate design draft feedback approve reject rollback hotfix incident"
).split()

EN_OPENERS = (
    "We decided that",
    "The team noticed that",
    "It turns out",
    "Remember that",
    "Going forward,",
    "During the review",
    "After the incident",
    "The user prefers that",
    "Note for later:",
    "In practice",
)

ZH_SENTENCES = (
    "我们决定把缓存的过期时间调整为十分钟。",
    "用户更喜欢简洁的回答，不要太多客套话。",
    "这个接口在高峰期的延迟明显上升，需要加监控。",
    "记忆系统应该在每次对话开始前检索相关内容。",
    "本周的发布推迟到周四，原因是测试没有全部通过。",
    "数据库迁移脚本必须先在预发布环境验证。",
    "向量检索和全文检索的结果需要合并排序。",
    "客户反馈说导出功能在大文件时会超时。",
    "会议纪要：下个季度的目标是降低运维成本。",
    "不要在生产环境直接修改配置文件。",
    "索引文件损坏时可以从 Markdown 文件重建。",
    "中文分词使用双字组合，这样短词也能被找到。",
    "项目负责人要求每周五提交进度报告。",
    "这个错误只在时区设置为上海时才会出现。",
    "模型文件较大，首次下载需要几分钟。",
)

TAGS = (
    "work",
    "personal",
    "project/marchdb",
    "project/atlas",
    "infra",
    "db",
    "search",
    "ops",
    "meeting",
    "decision",
    "bug",
    "idea",
    "reading",
    "health",
    "travel",
    "客户",
    "会议",
    "决策",
    "缓存",
    "发布",
)

STATUSES = ("active",) * 17 + ("deprecated",) * 2 + ("archived",)
# Names of things (projects, people, services) follow a Zipf law: a few come
# up in many memories, most in a handful. Without them every English word of
# the vault sits in most memories and BM25 has nothing to do, which would
# flatter recall latency.
_SYLLABLES = "ka ro mi ne tu sa vi lo pe da zu fi go ha ri bo".split()
ENTITIES = 20_000


def entity(rank: int) -> str:
    """The name of thing number ``rank`` (0 = the most talked about)."""
    n, out = rank + len(_SYLLABLES) ** 2, []
    while n:
        n, d = divmod(n, len(_SYLLABLES))
        out.append(_SYLLABLES[d])
    return "".join(reversed(out))


_ENTITY_CUM: list[float] = []


def pick_entities(rng: random.Random, k: int) -> list[str]:
    """``k`` thing names drawn by a Zipf law (exponent 1)."""
    if not _ENTITY_CUM:
        total = 0.0
        for r in range(ENTITIES):
            total += 1.0 / (r + 1)
            _ENTITY_CUM.append(total)
    return [entity(r) for r in rng.choices(range(ENTITIES), cum_weights=_ENTITY_CUM, k=k)]


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def _b32(n: int, width: int) -> str:
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(width)))


def _en_sentence(rng: random.Random) -> str:
    words = rng.choices(EN_WORDS, k=rng.randint(6, 16))
    return f"{rng.choice(EN_OPENERS)} {' '.join(words)}."


def _paragraph(rng: random.Random) -> str:
    if rng.random() < 0.35:
        return "".join(rng.choices(ZH_SENTENCES, k=rng.randint(2, 7)))
    if rng.random() < 0.15:  # mixed paragraph
        return " ".join([_en_sentence(rng), rng.choice(ZH_SENTENCES), _en_sentence(rng)])
    return " ".join(_en_sentence(rng) for _ in range(rng.randint(2, 6)))


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text, ensure_ascii=False)


def make_note(rng: random.Random, i: int, start: datetime, span_seconds: int) -> tuple[str, str]:
    """``(relative path, file text)`` of synthetic memory number ``i``."""
    created = start + timedelta(seconds=rng.randrange(span_seconds))
    updated = created + timedelta(seconds=rng.randrange(0, 90 * 86400))
    things = pick_entities(rng, 3)
    title_words = rng.sample(EN_WORDS, rng.randint(1, 4)) + things[:1]
    zh_title = rng.random() < 0.3
    name = rng.choice(ZH_SENTENCES)[:12].rstrip("，。") if zh_title else " ".join(title_words).capitalize()
    slug_words = title_words if not zh_title else title_words[:2]
    slug = "-".join(slug_words) + f"-{i:06d}"
    mem_id = f"mem_{_b32(int(created.timestamp() * 1000), 10)}{_b32(i, 4)}_{'_'.join(slug_words[:2])}"
    description = _en_sentence(rng) if rng.random() < 0.7 else rng.choice(ZH_SENTENCES)
    description = f"{things[1].capitalize()}: {description}"
    tags = rng.sample(TAGS, rng.randint(0, 4))
    status = rng.choice(STATUSES)
    body = "\n\n".join(_paragraph(rng) for _ in range(rng.randint(2, 6)))
    body = f"About {things[0]} and {things[2]}.\n\n{body}"
    if rng.random() < 0.3:
        body = f"# {name}\n\n{body}\n\n- {_en_sentence(rng)}\n- {rng.choice(ZH_SENTENCES)}"
    week = (created.day - 1) // 7 + 1
    rel = f"{created:%Y}/{created:%m}/week{week}/{created:%Y-%m-%d}-{slug}.md"
    tag_lines = "tags: []\n" if not tags else "tags:\n" + "".join(f"  - {_q(t)}\n" for t in tags)
    text = (
        "---\n"
        f"id: {mem_id}\n"
        f"name: {_q(name)}\n"
        f"description: {_q(description)}\n"
        f"{tag_lines}"
        f"status: {status}\n"
        f"created_at: '{created:%Y-%m-%dT%H:%M:%SZ}'\n"
        f"updated_at: '{updated:%Y-%m-%dT%H:%M:%SZ}'\n"
        "---\n\n"
        f"{body}\n"
    )
    return rel, text


def ensure_vault(base: Path, n: int, log) -> tuple[Path, float | None]:
    """The vault of ``n`` files under ``base`` (generated if missing or
    incomplete). Returns ``(vault, seconds spent generating or None)``."""
    vault = base / "vault"
    marker = base / MARKER
    want = {"files": n, "seed": SEED, "generator_version": GENERATOR_VERSION}
    try:
        if json.loads(marker.read_text()) == want and vault.is_dir():
            return vault, None
    except (OSError, ValueError):
        pass
    log(f"generating {n:,} files in {vault} ...")
    started = time.perf_counter()
    marker.unlink(missing_ok=True)
    if vault.exists():
        shutil.rmtree(vault)
    vault.mkdir(parents=True)
    rng = random.Random(SEED * 1_000_003 + n)
    start = datetime(2021, 1, 1, tzinfo=UTC)
    span = int((datetime(2025, 1, 1, tzinfo=UTC) - start).total_seconds())
    made_dirs: set[str] = set()
    for i in range(n):
        rel, text = make_note(rng, i, start, span)
        parent = rel.rsplit("/", 1)[0]
        if parent not in made_dirs:
            (vault / parent).mkdir(parents=True, exist_ok=True)
            made_dirs.add(parent)
        with open(vault / rel, "w", encoding="utf-8") as fh:
            fh.write(text)
    marker.write_text(json.dumps(want))
    return vault, time.perf_counter() - started


# ---------------------------------------------------------------- measurements


def bare_walk(root: str) -> int:
    """The floor: recursive ``os.scandir`` + ``stat`` of every ``.md`` file."""
    found = []
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".md"):
                    st = entry.stat(follow_symlinks=False)
                    found.append((entry.path, st.st_mtime_ns, st.st_size))
    return len(found)


def remove_index(index_path: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{index_path}{suffix}").unlink(missing_ok=True)


def index_bytes(index_path: Path) -> int:
    return sum(os.path.getsize(f"{index_path}{s}") for s in ("", "-wal") if os.path.exists(f"{index_path}{s}"))


def bench_size(n: int, work: Path, repeat: int, cold_runs: int, log) -> dict:
    base = work / f"n{n}"
    vault, gen_seconds = ensure_vault(base, n, log)
    home = base / "home"
    cfg = lambda: load_config(home=home, root=vault, env={})  # noqa: E731

    # -- cold: fresh index each time, Store + open + full sync
    cold, cold_cpu = [], []
    report = None
    for _ in range(cold_runs):
        remove_index(cfg().index_path)
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        store = Store(cfg())
        report = store.sync(embed=False)
        t1, c1 = time.perf_counter(), time.process_time()
        store.close()
        cold.append(t1 - t0)
        cold_cpu.append(c1 - c0)
        log(f"cold sync of {n:,} files: {t1 - t0:.2f}s ({n / (t1 - t0):,.0f} files/s)")
    assert report is not None
    if report.scanned != n or report.added != n:
        log(f"WARNING: cold sync scanned {report.scanned}, added {report.added}, expected {n}")
    cold_report = report.to_dict()
    index_size = index_bytes(cfg().index_path)

    # -- warm: nothing changed; walk / sync on an open Store / fresh Store, interleaved
    store = Store(cfg())
    store.sync(embed=False)  # open the connection, warm SQLite's page cache
    bare_walk(str(vault))
    walks, syncs, fresh = [], [], []
    walks_cpu, syncs_cpu = [], []
    for _ in range(repeat):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        count = bare_walk(str(vault))
        walks.append(time.perf_counter() - t0)
        walks_cpu.append(time.process_time() - c0)
        assert count == n, (count, n)

        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        rep = store.sync(embed=False)
        syncs.append(time.perf_counter() - t0)
        syncs_cpu.append(time.process_time() - c0)
        if rep.unchanged != n or rep.added or rep.updated or rep.removed:
            log(f"WARNING: warm sync was not a no-op: {rep.to_dict()}")

        gc.collect()
        t0 = time.perf_counter()
        s2 = Store(cfg())
        s2.sync(embed=False)
        s2.close()
        fresh.append(time.perf_counter() - t0)
    store.close()

    cold_s = statistics.median(cold)
    walk_s = statistics.median(walks)
    sync_s = statistics.median(syncs)
    fresh_s = statistics.median(fresh)
    return {
        "files": n,
        "generated_seconds": None if gen_seconds is None else round(gen_seconds, 2),
        "vault_bytes": sum(e.stat().st_size for e in _iter_md(vault)) if n <= 200_000 else None,
        "cold_seconds": round(cold_s, 4),
        "cold_files_per_s": round(n / cold_s, 1),
        "cold_runs": [round(x, 4) for x in cold],
        # CPU time of this process (user + system): steadier than wall time
        # when other work shares the machine.
        "cold_cpu_seconds": round(statistics.median(cold_cpu), 4),
        "cold_cpu_files_per_s": round(n / statistics.median(cold_cpu), 1),
        "cold_report": cold_report,
        "warm_sync_ms": round(sync_s * 1000, 2),
        "bare_walk_ms": round(walk_s * 1000, 2),
        "warm_ratio": round(sync_s / walk_s, 3),
        "fresh_store_warm_ms": round(fresh_s * 1000, 2),
        "fresh_ratio": round(fresh_s / walk_s, 3),
        "warm_sync_cpu_ms": round(statistics.median(syncs_cpu) * 1000, 2),
        "bare_walk_cpu_ms": round(statistics.median(walks_cpu) * 1000, 2),
        "warm_sync_runs_ms": [round(x * 1000, 2) for x in syncs],
        "bare_walk_runs_ms": [round(x * 1000, 2) for x in walks],
        "fresh_store_runs_ms": [round(x * 1000, 2) for x in fresh],
        "index_bytes": index_size,
        "index_mb": round(index_size / 1e6, 2),
        "cold_target_met": n / cold_s >= COLD_TARGET_FPS,
        "warm_target_met": sync_s / walk_s <= WARM_TARGET_RATIO,
    }


def _iter_md(root: Path):
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.name.endswith(".md"):
                    yield e


# ---------------------------------------------------------------- output

COLUMNS = (
    ("files", "size", "{:,}"),
    ("cold_files_per_s", "cold files/s", "{:,.0f}"),
    ("warm_sync_ms", "warm sync ms", "{:.1f}"),
    ("bare_walk_ms", "bare walk ms", "{:.1f}"),
    ("warm_ratio", "ratio", "{:.2f}x"),
    ("fresh_store_warm_ms", "fresh-store warm ms", "{:.1f}"),
    ("index_mb", "index MB", "{:.1f}"),
)


def table_rows(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    head = [c[1] for c in COLUMNS]
    body = [[fmt.format(r[key]) for key, _, fmt in COLUMNS] for r in results]
    return head, body


def text_table(results: list[dict]) -> str:
    head, body = table_rows(results)
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in body]
    return "\n".join(out)


def markdown_table(results: list[dict]) -> str:
    head, body = table_rows(results)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(out)


def machine_info() -> dict:
    import apsw

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "nproc": os.cpu_count(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
    }


def parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if not part:
            continue
        mult = 1
        if part.endswith("k"):
            part, mult = part[:-1], 1000
        sizes.append(int(float(part) * mult))
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000", help="comma-separated vault sizes (default 10000; 10k works)")
    ap.add_argument("--work", default=str(REPO / ".bench" / "sync"), help="where vaults are generated and kept")
    ap.add_argument("--repeat", type=int, default=5, help="warm runs per size; the median is reported")
    ap.add_argument("--cold-runs", type=int, default=1, help="cold syncs per size (median; default 1)")
    ap.add_argument("--out", help="write results as JSON to this file")
    ap.add_argument("--markdown", help="write the table as Markdown to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    work = Path(args.work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for n in parse_sizes(args.sizes):
        results.append(bench_size(n, work, max(1, args.repeat), max(1, args.cold_runs), log))

    info = machine_info()
    info["load_average_before"] = load_before
    table = text_table(results)
    print(table)
    print(f"\nmachine: {info['nproc']} cpu, Python {info['python']}, SQLite {info['sqlite']}, {info['platform']}")
    print(
        f"medians of {args.repeat} interleaved warm runs; targets: cold >= {COLD_TARGET_FPS:,} files/s, "
        f"warm sync <= {WARM_TARGET_RATIO:g}x bare walk"
    )
    print(
        "CPU time (steadier on a busy machine): "
        + "; ".join(
            f"{r['files']:,}: cold {r['cold_cpu_files_per_s']:,.0f} files/s, warm sync {r['warm_sync_cpu_ms']:.1f} ms "
            f"vs walk {r['bare_walk_cpu_ms']:.1f} ms"
            for r in results
        )
    )
    if load_before is not None and load_before > (os.cpu_count() or 1) * 0.5:
        print(
            f"note: load average was {load_before:.1f} on {os.cpu_count()} CPUs before the run; "
            "wall-clock figures are noisy"
        )
    for r in results:
        misses = []
        if not r["cold_target_met"]:
            misses.append("cold files/s below target")
        if not r["warm_target_met"]:
            misses.append("warm ratio above target")
        print(f"  {r['files']:,}: " + ("; ".join(misses) if misses else "targets met"))

    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "repeat": args.repeat,
            "machine": info,
            "results": results,
        }
        Path(args.out).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(
            markdown_table(results)
            + f"\n\nMachine: {info['nproc']} CPU, Python {info['python']}, SQLite {info['sqlite']}. "
            f"Medians of {args.repeat} interleaved warm runs. Load average before the run: "
            f"{load_before if load_before is None else round(load_before, 1)}. CPU-time figures: "
            + "; ".join(
                f"{r['files']:,}: cold {r['cold_cpu_files_per_s']:,.0f} files/s, warm sync "
                f"{r['warm_sync_cpu_ms']:.1f} ms vs walk {r['bare_walk_cpu_ms']:.1f} ms"
                for r in results
            )
            + ".\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
