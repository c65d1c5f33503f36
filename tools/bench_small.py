#!/usr/bin/env python3
"""Hint quality by vault size, from a few memories to ten thousand.

    .venv/bin/python tools/bench_small.py locomo [--sizes 5,12,40,100,300,1000,10000] [--out F.json]

A new user's vault is small, and there word statistics mean little: with
five memories a word held by two of them counts as "rare", and one held by
three gets no weight at all; a big vault is full of near-misses. The
big-set benchmark (bench_recall.py) sees one size only. For each size this
tool builds vaults (several for small sizes) around the relevant memories of
a sample of the set's questions, filled up with the set's other memories,
then with the other shared sets' memories (``chats`` first, then whole
sets: a user's vault holds every kind of thing), and past all of them with
copies under fresh ids (never of a relevant memory). Each vault is indexed through marchdb's own sync (vectors
from the bench cache, ``bench_data.CachedEmbedder``) and asked through
``Store.recall`` at the default threshold:

* answerable hinted — questions whose relevant memories are all in the
  vault, with one of them among the hints;
* off-topic quiet — questions of the sets with no memory in the vault,
  questions in the vault's own language about subjects no set holds, and
  chit-chat: no hint at all;
* chit-chat quiet — the chit-chat alone ("ok thanks", "好的谢谢", ...);
* and the quiet of each other kind of off-topic message on its own: other
  sets' questions, questions in the vault's language (no change may bring
  any kind below 97%).

Each figure is given for every message and for each held-out half
(``bench_data.split_of``: train / test), so that a constant chosen with this
tool is chosen on one half and reported on the other.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

from bench_data import (
    BENCH,
    SAME_MEMORIES,
    base_name,
    cached_store,
    chitchat,
    in_language_offtopic,
    set_dir,
    split_of,
)
from bench_recall import load_set, write_vault

from marchdb.config import load_config

SIZES = (5, 12, 40, 100, 300, 1000, 10000)
KINDS = ("answerable", "offtopic", "other", "language", "chitchat")
KEYS = tuple(k + ok for k in KINDS for ok in ("", "_ok"))


def vaults_for(size: int) -> int:
    """How many vaults of ``size`` to sample (fewer as they grow)."""
    return 8 if size <= 40 else 4 if size <= 100 else 2 if size <= 300 else 1


def other_memories(name: str, rng: random.Random) -> list[dict]:
    """The memories a vault is filled with past its own set: the chat
    sessions of ``chats`` first (they have no questions), then the other
    sets one after the other (each shuffled); ``set`` on each memory says
    where it comes from."""
    own = base_name(name)
    others = sorted(
        (p for p in BENCH.iterdir() if p.is_dir() and p.name != own and p.name not in SAME_MEMORIES),
        key=lambda p: p.name != "chats",
    )
    out = []
    for other in others:
        mems = [json.loads(l) for l in (other / "memories.jsonl").read_text().splitlines() if l.strip()]
        out += [{**m, "set": other.name} for m in rng.sample(mems, len(mems))]
    return out


def offtopic_questions(chosen: dict[str, dict]) -> list[str]:
    """Questions of the shared sets none of whose memories is in the vault
    (another set's question is not off-topic in a vault holding that set)."""
    present = {m.get("set") for m in chosen.values()}
    present |= {s for s, same in SAME_MEMORIES.items() if same in present}
    out = []
    for other in sorted(p for p in BENCH.iterdir() if p.is_dir() and p.name not in present):
        out += [json.loads(l)["text"] for l in (other / "queries.jsonl").read_text().splitlines() if l.strip()]
    return out


def build_vault(rng, size, memories, queries, qrels, fill) -> dict[str, dict]:
    """A vault: the relevant memories of a few questions (at most half the
    vault), the set's other memories, then ``fill``, then copies of ``fill``
    under fresh ids."""
    by_id = {m["id"]: m for m in memories}
    chosen: dict[str, dict] = {}
    answerable = [q for q in queries if q["id"] in qrels]
    for q in rng.sample(answerable, len(answerable)):
        rel = [by_id[m] for m in qrels[q["id"]] if m in by_id]
        if len(chosen) + len(rel) > max(size // 2, 1):
            if len(chosen) >= max(size // 2, 1):
                break
            continue
        chosen.update((m["id"], m) for m in rel)
    rest = [m for m in memories if m["id"] not in chosen]
    for m in rng.sample(rest, min(len(rest), size - len(chosen))):
        chosen[m["id"]] = m
    extra = fill[: max(size - len(chosen), 0)]  # in order: chats first, then whole sets
    chosen.update((m["id"], m) for m in extra)
    copy = 0
    while len(chosen) < size:
        m = fill[copy % len(fill)]
        copy += 1
        twin = {**m, "id": f"{m['id']}-copy{copy}"}
        chosen[twin["id"]] = twin
    return chosen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set", help="a set with questions: locomo, cmrc2018, cranfield, cmrc2018-hant")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument(
        "--model", help="GGUF path or recipe name (default: the built-in default, built in each vault's home)"
    )
    ap.add_argument("--vaults", type=int, help="vaults per size (default: 8 up to 40 memories, fewer above)")
    ap.add_argument("--offtopic", type=int, default=20, help="other sets' questions per vault")
    ap.add_argument("--language", type=int, default=20, help="in-language off-topic questions per vault")
    ap.add_argument("--max-answerable", type=int, default=100, help="questions asked per vault at most")
    ap.add_argument("--work", type=Path, default=Path(".bench/small"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--show", action="store_true", help="print every off-topic message that got a hint")
    args = ap.parse_args()

    sdir = set_dir(args.set)
    memories, queries, qrels = load_set(sdir)
    own = base_name(args.set)
    memories = [{**m, "set": own} for m in memories]
    language = in_language_offtopic(args.set)
    chat = chitchat()
    rows = []
    for size in (int(s) for s in args.sizes.split(",") if s):
        rng = random.Random(f"{args.set}-{size}")
        tally = {h: dict.fromkeys(KEYS, 0) for h in ("all", "train", "test")}

        def count(text: str, key: str, ok: bool, tally: dict = tally) -> None:
            for half in ("all", split_of(text)):
                tally[half][key] += 1
                tally[half][key + "_ok"] += ok

        n_vaults = args.vaults or vaults_for(size)
        for v in range(n_vaults):
            fill = other_memories(args.set, rng)
            chosen = build_vault(rng, size, memories, queries, qrels, fill)
            work = args.work.resolve() / f"{sdir.name}-{size}-{v}"
            if work.exists():
                shutil.rmtree(work)
            write_vault(list(chosen.values()), work / "vault")
            store = cached_store(load_config(home=work / "home", root=work / "vault", model=args.model, env={}))
            try:
                store.sync()
                inside = [q for q in queries if q["id"] in qrels and set(qrels[q["id"]]) <= set(chosen)]
                for q in rng.sample(inside, min(len(inside), args.max_answerable)):
                    hinted = any(h.id in qrels[q["id"]] for h in store.recall(q["text"]).hints)
                    count(q["text"], "answerable", hinted)
                others = offtopic_questions(chosen)
                other = rng.sample(others, min(args.offtopic, len(others)))
                own_language = rng.sample(language, min(args.language, len(language)))
                for kind, texts in (("other", other), ("language", own_language), ("chitchat", chat)):
                    for text in texts:
                        hints = store.recall(text).hints
                        count(text, kind, not hints)
                        if kind != "chitchat":
                            count(text, "offtopic", not hints)
                        if hints and args.show:
                            print(f"  {kind} hinted: {text!r} -> {hints[0].id} {hints[0].score:.2f} {hints[0].signals}")
            finally:
                store.close()
            shutil.rmtree(work, ignore_errors=True)  # a vault of 10,000 files is not worth keeping
        row = {"size": size, "vaults": n_vaults}
        for half, t in tally.items():
            share = lambda key, t=t: round(t[key + "_ok"] / max(t[key], 1), 4)  # noqa: E731
            quiet = (t["offtopic_ok"] + t["chitchat_ok"]) / max(t["offtopic"] + t["chitchat"], 1)
            row[half] = {
                "answerable": t["answerable"],
                "answerable_hinted": share("answerable"),
                "offtopic_quiet": round(quiet, 4),
                "chitchat_quiet": share("chitchat"),
                "other_quiet": share("other"),
                "language_quiet": share("language"),
            }
        rows.append(row)
        a, tr, te = row["all"], row["train"], row["test"]
        print(
            f"{args.set} size {size:>6} ({n_vaults} vaults): answerable hinted {a['answerable_hinted']:6.1%} "
            f"({a['answerable']} q; train {tr['answerable_hinted']:.1%} / test {te['answerable_hinted']:.1%}), "
            f"off-topic quiet {a['offtopic_quiet']:6.1%} ({tr['offtopic_quiet']:.1%} / {te['offtopic_quiet']:.1%}), "
            f"chit-chat quiet {a['chitchat_quiet']:6.1%} ({tr['chitchat_quiet']:.1%} / {te['chitchat_quiet']:.1%}); "
            f"quiet by kind: other sets {a['other_quiet']:.1%}, own language {a['language_quiet']:.1%}, "
            f"chit-chat {a['chitchat_quiet']:.1%}",
            flush=True,
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"set": args.set, "sizes": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
