#!/usr/bin/env python3
"""Cross-lingual recall: a Chinese question about an English memory, and the reverse.

    .venv/bin/python tools/bench_crosslingual.py [--background 160] [--out F.json]

``tools/data/crosslingual.jsonl`` holds 40 memories written for this test
(20 English, 20 Chinese), each with a question in the other language that it
answers. Two vaults are built through marchdb's own sync: the 40 memories
alone (a small vault), and the 40 among ``--background`` others sampled from
the shared sets (English chat sessions from ``chats``, Chinese paragraphs from
``cmrc2018``). For each vault the tool reports, at the default threshold:

* rank 1 — the question's memory is the best-scored candidate;
* hinted — it is among the hints;
* off-topic quiet — English and Chinese questions about subjects no memory
  holds (``tools/data/offtopic_*.txt``) and chit-chat get no hint.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from bench_data import cached_store, chitchat, crosslingual_background, crosslingual_items, read_lines
from bench_recall import write_vault

from marchdb.config import load_config


def run(label: str, memories: list[dict], items: list[dict], work: Path) -> dict:
    """Index ``memories`` and ask every question and off-topic message."""
    if work.exists():
        shutil.rmtree(work)
    write_vault(memories, work / "vault")
    store = cached_store(load_config(home=work / "home", root=work / "vault", env={}))
    try:
        store.sync()
        by_dir: dict[str, dict[str, int]] = {}
        for item in items:
            res = store.recall(item["question"], explain=True)
            direction = "zh question -> en memory" if item["id"].startswith("xl-en") else "en question -> zh memory"
            tally = by_dir.setdefault(direction, {"questions": 0, "rank1": 0, "hinted": 0})
            tally["questions"] += 1
            tally["rank1"] += bool(res.candidates) and res.candidates[0].id == item["id"]
            tally["hinted"] += any(h.id == item["id"] for h in res.hints)
        off = read_lines("offtopic_en.txt") + read_lines("offtopic_zh.txt") + chitchat()
        quiet = sum(not store.recall(text).hints for text in off)
    finally:
        store.close()
    shutil.rmtree(work, ignore_errors=True)
    result = {"vault": label, "memories": len(memories), "offtopic_quiet": round(quiet / len(off), 4)}
    for direction, t in by_dir.items():
        result[direction] = {
            "questions": t["questions"],
            "rank1": round(t["rank1"] / t["questions"], 4),
            "hinted": round(t["hinted"] / t["questions"], 4),
        }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--background", type=int, default=160, help="memories from the shared sets around the 40")
    ap.add_argument("--work", type=Path, default=Path(".bench/crosslingual"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    items = crosslingual_items()
    own = [i["memory"] for i in items]
    results = [
        run("the 40 memories alone", own, items, args.work.resolve() / "alone"),
        run(
            f"40 among {args.background} others",
            own + crosslingual_background(args.background),
            items,
            args.work.resolve() / "bg",
        ),
    ]
    for r in results:
        dirs = "; ".join(
            f"{k}: rank 1 {v['rank1']:.0%}, hinted {v['hinted']:.0%} ({v['questions']})"
            for k, v in r.items()
            if isinstance(v, dict)
        )
        print(f"{r['vault']} ({r['memories']} memories): {dirs}; off-topic quiet {r['offtopic_quiet']:.1%}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
