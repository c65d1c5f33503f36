#!/usr/bin/env python3
"""Temperature benchmark: where recency should decide, and that nothing else gets worse.

    python tools/bench_temperature.py [SET_DIR ...] [--model PATH] [--work DIR] [--out FILE.json]

1. **Pairs** (the case temperature is for): an older and a newer memory on the
   same subject ("we deploy on Tuesdays" written in 2025, "we deploy on
   Thursdays" written last week), English and Chinese, among 100 unrelated
   memories; one neutral question per subject. Reported: the share of
   questions where the newer memory ranks above the older one, without and
   with temperature, and whether any hint decision (score >= threshold)
   changed (it must not: temperature only reorders). Then the same vault
   with each newer memory naming the older one in ``supersedes:`` (what
   ``marchdb save --supersedes`` writes): newer first, and older ones still
   hinted (none should be).
2. **Benchmark sets** (``../shared/bench``; default locomo, cmrc2018,
   cranfield; the same cached index as ``tools/bench_recall.py``): nDCG@10 /
   MRR@10 of the hybrid ranking without temperature, with it (now), and "as
   if live" (now = the day after the set's newest memory, so recency differs
   between memories; only locomo has dates). It must not lower any of them.

The recall and open logs are empty in both (a benchmark has no history), so
this measures recency and priority; ``tests/test_temperature.py`` covers use.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
from pathlib import Path

from bench_recall import BENCH, load_set, metrics, write_vault

from marchdb.config import load_config
from marchdb.index import calibrate, temperature
from marchdb.index.recall import score
from marchdb.store import Store
from marchdb.vault import notes

#: "Now" of the pairs vault: recency is measured from here, so the figures do not drift with the calendar.
ANCHOR = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
OLD = ANCHOR - dt.timedelta(days=540)
NEW = ANCHOR - dt.timedelta(days=3)

# (old name, old description, new name, new description, question)
PAIRS = [
    (
        "Deploy schedule",
        "We deploy to production on Tuesdays",
        "Deploy day",
        "We deploy to production on Thursdays",
        "Which day do we deploy to production?",
    ),
    (
        "Standup",
        "The daily standup is at 9:30 in the small room",
        "Daily standup time",
        "The daily standup is at 10:00 on video",
        "When is the daily standup?",
    ),
    (
        "Password rotation",
        "Database passwords are rotated every quarter",
        "DB credentials",
        "Database passwords are rotated every month by the ops script",
        "How often are database passwords rotated?",
    ),
    (
        "Runtime",
        "The billing service runs on Python 3.10",
        "Python version",
        "The billing service runs on Python 3.12",
        "Which Python version does the billing service use?",
    ),
    (
        "Editor",
        "The user writes code in VS Code",
        "Editor preference",
        "The user writes code in Neovim with a minimal config",
        "Which editor does the user prefer?",
    ),
    (
        "Office",
        "The office is on the 5th floor of building A",
        "Office location",
        "The office moved to the 12th floor of building C",
        "Where is the office?",
    ),
    (
        "API endpoint",
        "The public API base URL is api.example.com/v1",
        "API base URL",
        "The public API base URL is api.example.com/v2",
        "What is the API base URL?",
    ),
    (
        "Payments on call",
        "Alice is on call for the payments service",
        "On-call rota",
        "Bob is on call for the payments service this month",
        "Who is on call for payments?",
    ),
    (
        "CI",
        "Continuous integration runs on Jenkins",
        "CI system",
        "Continuous integration runs on GitHub Actions",
        "Where does CI run?",
    ),
    (
        "Team lunch",
        "Team lunch is on Fridays at noon",
        "Lunch day",
        "Team lunch is on Wednesdays at noon",
        "When is the team lunch?",
    ),
    (
        "Review rule",
        "A pull request needs one approval to merge",
        "Approvals",
        "A pull request needs two approvals to merge",
        "How many approvals does a pull request need?",
    ),
    (
        "Backups",
        "Database backups run nightly at 2 am",
        "Backup schedule",
        "Database backups run every six hours",
        "How often do database backups run?",
    ),
    (
        "Dog food",
        "Biscuit eats twice a day",
        "Feeding",
        "Biscuit eats three small meals a day since the vet visit",
        "How often does Biscuit eat?",
    ),
    (
        "Gym",
        "The user goes to the gym on Monday and Thursday",
        "Workout days",
        "The user goes to the gym on Tuesday and Saturday",
        "Which days does the user go to the gym?",
    ),
    ("周会", "周会在周一上午十点开", "周会时间", "周会改在周二下午三点开", "周会什么时候开？"),
    ("订单库", "订单库用的是 MySQL", "订单数据库", "订单库已经迁到 PostgreSQL", "订单库用的是什么数据库？"),
    ("报销", "报销单每月五号前提交给财务", "报销截止", "报销单每月十号前提交给财务", "报销单什么时候提交？"),
    ("发布窗口", "发布窗口是每周三晚上", "上线时间", "发布窗口是每周四晚上", "什么时候可以发布上线？"),
    ("密码规则", "账号密码至少八位", "密码长度", "账号密码至少十二位，需要包含符号", "密码要求几位？"),
    ("值班", "张三负责周末值班", "周末值班", "李四负责周末值班", "周末谁值班？"),
]


def plain_order(cands):
    """The ranking without temperature: the ranking key (the score, or
    rank_score where it differs), then dense cosine, as sql/recall.sql orders."""
    return sorted(
        cands,
        key=lambda c: (c.rank_score, c.signals.get("dense_cos") or -math.inf),
        reverse=True,
    )


def open_store(memories: list[dict], work: Path, model: str | None) -> Store:
    if not (work / "vault.done").exists():
        write_vault(memories, work / "vault")
        (work / "vault.done").write_text("ok")
    store = Store(load_config(home=work / "home", root=work / "vault", model=model, env={}))
    store.sync()
    return store


def pairs_vault(declared: bool = False) -> list[dict]:
    filler = [
        json.loads(l) for l in (BENCH / "cranfield" / "memories.jsonl").read_text().splitlines()[:100] if l.strip()
    ]
    out = list(filler)
    for i, (old_name, old_desc, new_name, new_desc, _q) in enumerate(PAIRS):
        for kind, name, desc, when in (("old", old_name, old_desc, OLD), ("new", new_name, new_desc, NEW)):
            out.append(
                {
                    "id": f"pair{i}-{kind}",
                    "name": name,
                    "description": desc,
                    "tags": ["team"],
                    "created_at": notes.format_time(when),
                    "body": desc + ".",
                    "extra": {"supersedes": f"pair{i}-old"} if declared and kind == "new" else {},
                }
            )
    return out


def run_pairs(work: Path, model: str | None, declared: bool = False) -> dict:
    memories = pairs_vault(declared)
    digest = hashlib.sha256(json.dumps(memories, sort_keys=True).encode()).hexdigest()[:12]
    store = open_store(memories, work / f"pairs-{digest}", model)
    emb = store.embedder()
    calib = calibrate.ensure(store.con, emb)
    threshold = store.cfg.min_score
    qvecs = emb.embed_queries([p[4] for p in PAIRS])
    newer_first = {"plain": 0, "temperature": 0}
    changed = old_hinted = 0
    rows = []
    for i, qvec in enumerate(qvecs):
        cands = score(store.con, PAIRS[i][4], qvec, calib, limit=500, words=store.words())
        orders = {"plain": plain_order(cands), "temperature": temperature.rerank(store.con, cands, now=ANCHOR)}
        row = {"question": PAIRS[i][4]}
        for label, ranked in orders.items():
            ids = [c.id for c in ranked]
            first = ids.index(f"pair{i}-new") < ids.index(f"pair{i}-old")
            newer_first[label] += first
            row[label] = first
        hinted = {
            label: [c.id for c in ranked if c.score >= threshold and c.description] for label, ranked in orders.items()
        }
        changed += set(hinted["plain"]) != set(hinted["temperature"])
        # with the hint rules (a superseded memory is never a hint)
        old_hinted += f"pair{i}-old" in {h.id for h in store.recall(PAIRS[i][4]).hints}
        gap = next(c.score for c in cands if c.id == f"pair{i}-old") - next(
            c.score for c in cands if c.id == f"pair{i}-new"
        )
        row["score_gap_old_minus_new"] = round(gap, 4)
        rows.append(row)
    n = len(PAIRS)
    return {
        "pairs": n,
        "newer_first": {k: round(v / n, 4) for k, v in newer_first.items()},
        "hint_decisions_changed": changed,
        "older_hinted": old_hinted,
        "rows": rows,
    }


def run_set(set_dir: Path, work: Path, model: str | None) -> dict:
    memories, queries, qrels = load_set(set_dir)
    queries = [q for q in queries if q["id"] in qrels]
    set_hash = hashlib.sha256((set_dir / "memories.jsonl").read_bytes()).hexdigest()[:12]
    store = open_store(memories, work / f"{set_dir.name}-{set_hash}", model)
    emb = store.embedder()
    calib = calibrate.ensure(store.con, emb)
    dates = [t for t in (notes.parse_time(m.get("created_at")) for m in memories) if t]
    live = max(dates) + dt.timedelta(days=1) if dates else None
    sums = {k: {"ndcg@10": 0.0, "mrr@10": 0.0} for k in ("plain", "temperature", "as_if_live")}
    moved = 0
    for q, qvec in zip(queries, emb.embed_queries([q["text"] for q in queries])):
        cands = score(store.con, q["text"], qvec, calib, limit=500, words=store.words())
        orders = {
            "plain": plain_order(cands),
            "temperature": list(cands),
            "as_if_live": temperature.rerank(store.con, cands, now=live) if live else list(cands),
        }
        moved += [c.id for c in orders["plain"][:10]] != [c.id for c in orders["temperature"][:10]]
        for label, ranked in orders.items():
            m = metrics([c.id for c in ranked], qrels[q["id"]])
            sums[label]["ndcg@10"] += m["ndcg@10"]
            sums[label]["mrr@10"] += m["mrr@10"]
    n = len(queries)
    return {
        "set": set_dir.name,
        "queries": n,
        "live_now": live.date().isoformat() if live else None,
        "top10_changed_now": moved,
        "figures": {k: {m: round(v / n, 4) for m, v in d.items()} for k, d in sums.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", type=Path, help="benchmark set folders (default: locomo cmrc2018 cranfield)")
    ap.add_argument("--model", help="GGUF path or recipe name (default: the built-in default)")
    ap.add_argument(
        "--work", type=Path, default=Path(".bench"), help="holds recall/ (shared with bench_recall) and temperature/"
    )
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument("--pairs-only", action="store_true")
    args = ap.parse_args()
    sets = args.sets or [BENCH / name for name in ("locomo", "cmrc2018", "cranfield")]
    work = args.work.resolve()
    result = {"max_adjust": temperature.MAX_ADJUST, "half_life_days": temperature.HALF_LIFE_DAYS}
    result["pairs"] = run_pairs(work / "temperature", args.model)
    result["pairs_declared"] = run_pairs(work / "temperature", args.model, declared=True)
    p, d = result["pairs"], result["pairs_declared"]
    print(f"\npairs: {p['pairs']} subjects, an older and a newer memory each, among 100 unrelated ones")
    print(
        f"newer ranked first: without temperature {p['newer_first']['plain']:.1%}, with {p['newer_first']['temperature']:.1%}"
    )
    print(
        f"hint decisions changed by temperature: {p['hint_decisions_changed']}; older memory hinted: {p['older_hinted']}"
    )
    print(
        f"each newer naming the older in supersedes: newer ranked first {d['newer_first']['temperature']:.1%}, "
        f"older memory hinted: {d['older_hinted']}"
    )
    if not args.pairs_only:
        result["sets"] = [run_set(s.resolve(), work / "recall", args.model) for s in sets]
        print(
            f"\n{'set':10} {'queries':>7} {'nDCG plain':>10} {'now':>7} {'as if live':>10}   {'MRR plain':>9} {'now':>7} {'live':>7}"
        )
        for r in result["sets"]:
            f = r["figures"]
            print(
                f"{r['set']:10} {r['queries']:7} {f['plain']['ndcg@10']:10.4f} {f['temperature']['ndcg@10']:7.4f} "
                f"{f['as_if_live']['ndcg@10']:10.4f}   {f['plain']['mrr@10']:9.4f} {f['temperature']['mrr@10']:7.4f} "
                f"{f['as_if_live']['mrr@10']:7.4f}"
            )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
