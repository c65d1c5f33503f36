#!/usr/bin/env python3
"""Hint quality in small vaults (a few to a few dozen memories).

    .venv/bin/python tools/bench_small.py ../shared/bench/locomo [--size 12] [--vaults 8] [--out F.json]

A new user's vault is small, and there word statistics mean little: with
five memories a word held by two of them counts as "rare", and one held by
three gets no weight at all. The big-set benchmark (bench_recall.py) cannot
see that regime. This tool samples ``--vaults`` vaults of ``--size``
memories from a set (each built around the relevant memories of a few
queries), indexes each through marchdb's own sync with the default model,
and reports at the default threshold:

* answerable hinted — the share of queries whose relevant memory (inside the
  vault) is among the hints;
* off-topic quiet — the share of queries of the other sets, plus chit-chat
  and nonsense, that get no hint at all;
* chit-chat quiet — the same for the chit-chat and nonsense lines alone.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

from bench_recall import BENCH, load_set, write_vault

from marchdb.config import load_config
from marchdb.store import Store

#: Messages no memory should answer, in the languages of the sets.
CHITCHAT = [
    "ok thanks",
    "the the the",
    "is it on?",
    "what is this",
    "how are you today",
    "tell me a joke",
    "can you help me with this",
    "sounds good, go ahead",
    "lorem ipsum dolor sit amet",
    "asdf qwer zxcv",
    "hmm let me think",
    "yes please",
    "好的谢谢",
    "我们今天做什么",
    "哈哈哈哈",
    "你好",
    "继续",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("--size", type=int, default=12, help="memories per vault")
    ap.add_argument("--vaults", type=int, default=8)
    ap.add_argument("--offtopic", type=int, default=20, help="off-topic queries of other sets per vault")
    ap.add_argument("--work", type=Path, default=Path(".bench/small"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    set_dir = args.set_dir.resolve()
    memories, queries, qrels = load_set(set_dir)
    by_id = {m["id"]: m for m in memories}
    others = []
    for other in sorted(p for p in BENCH.iterdir() if p.is_dir() and p.name != set_dir.name):
        others += [json.loads(l)["text"] for l in (other / "queries.jsonl").read_text().splitlines() if l.strip()]
    rng = random.Random(11)
    answered = hinted = off_total = off_quiet = chat_total = chat_quiet = 0
    for v in range(args.vaults):
        # A vault: the relevant memories of a few queries, then random others.
        chosen: dict[str, dict] = {}
        for q in rng.sample([q for q in queries if q["id"] in qrels], len(queries) // 4 or 1):
            rel = [by_id[m] for m in qrels[q["id"]] if m in by_id]
            if len(chosen) + len(rel) > args.size // 2:
                continue
            chosen.update((m["id"], m) for m in rel)
        while len(chosen) < args.size:
            m = rng.choice(memories)
            chosen[m["id"]] = m
        work = args.work.resolve() / f"{set_dir.name}-{args.size}-{v}"
        if work.exists():
            shutil.rmtree(work)
        write_vault(list(chosen.values()), work / "vault")
        with Store(load_config(home=work / "home", root=work / "vault", env={})) as store:
            store.sync()
            inside = [q for q in queries if q["id"] in qrels and set(qrels[q["id"]]) <= set(chosen)]
            for q in inside:
                answered += 1
                hinted += any(h.id in qrels[q["id"]] for h in store.recall(q["text"]).hints)
            for text in rng.sample(others, args.offtopic):
                off_total += 1
                off_quiet += not store.recall(text).hints
            for text in CHITCHAT:
                chat_total += 1
                chat_quiet += not store.recall(text).hints
    result = {
        "set": set_dir.name,
        "vault_size": args.size,
        "vaults": args.vaults,
        "answerable": answered,
        "answerable_hinted": round(hinted / max(answered, 1), 4),
        "offtopic_quiet": round((off_quiet + chat_quiet) / max(off_total + chat_total, 1), 4),
        "chitchat_quiet": round(chat_quiet / max(chat_total, 1), 4),
    }
    print(
        f"{result['set']}: {args.vaults} vaults of {args.size}: answerable hinted {result['answerable_hinted']:.1%} "
        f"({answered} queries), off-topic quiet {result['offtopic_quiet']:.1%}, "
        f"chit-chat quiet {result['chitchat_quiet']:.1%}"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
