#!/usr/bin/env python3
"""An imported session: one memory, or one per topic? Described by its opening, or by what was asked?

    python tools/bench_split.py [--work DIR] [--variants session,asked,topics,exchanges] [--out FILE.json]

chats-qa's 269 long chat sessions and its 70 questions (asked days later,
about what the user said in a session) are written as four vaults, each
indexed by marchdb's own sync (``bench_recall.open_set``: vectors from the
bench cache), and every question is scored against each:

* ``session`` — one memory per session, described by its opening words (the set as it is);
* ``asked`` — one memory per session, described as an import describes it:
  the user's messages joined (``transcripts.asked``);
* ``topics`` — a session split where its subject changes: consecutive
  exchanges (a user message and its answers) stay together while their words
  overlap the running segment's (cosine of word counts at least ``TOPIC_COSINE``);
  each segment a memory, described as an import describes it;
* ``exchanges`` — one memory per exchange.

A question counts as answered by a session, whichever of its memories is
found: ``hit@1`` / ``hit@5`` over sessions (the ranking's memories mapped
to their sessions, first place kept), ``hinted`` (a memory of a relevant
session among the three hints at the default threshold: what reaches the
agent), and ``quiet`` (off-topic messages, other sets' questions and
chit-chat, that get no hint at all). Session-level credit favours the split
vaults (any segment counts, even one without the answer), so a split that
does not win here does not win.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import BENCH, offtopic  # noqa: E402
from bench_recall import load_set, machine, open_set, top_scores  # noqa: E402

from marchdb.index import calibrate  # noqa: E402
from marchdb.index.recall import score  # noqa: E402
from marchdb.lifecycle.transcripts import asked  # noqa: E402

#: Consecutive exchanges whose words overlap the segment's at least this much
#: (cosine of tf-idf weights) are one topic: 422 segments of 269 sessions (1,388 exchanges).
TOPIC_COSINE = 0.15
_TURN = re.compile(r"^\*\*(user|assistant)\*\*: ?", re.M)
_WORD = re.compile(r"[^\W\d_]{3,}")
VARIANTS = ("session", "asked", "topics", "exchanges")


def turns(body: str) -> tuple[str, list[tuple[str, str]]]:
    """A bench chat's header line and its ``(role, text)`` turns."""
    marks = list(_TURN.finditer(body))
    head = body[: marks[0].start()].strip() if marks else body.strip()
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        out.append((m.group(1), body[m.end() : end].strip()))
    return head, out


def exchanges(parts: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Turns grouped as exchanges: a user message and the answers after it
    (answers before the first user message join the first exchange)."""
    groups: list[list[tuple[str, str]]] = []
    for role, text in parts:
        if role == "user" or not groups:
            if groups and all(r == "assistant" for r, _t in groups[-1]):
                groups[-1].append((role, text))
                continue
            groups.append([(role, text)])
        else:
            groups[-1].append((role, text))
    return groups


def _bag(group: list[tuple[str, str]]) -> Counter:
    return Counter(w.lower() for _r, t in group for w in _WORD.findall(t))


def _weights(group: list[tuple[str, str]], idf: dict[str, float]) -> Counter:
    return Counter({w: n * idf.get(w, 0.0) for w, n in _bag(group).items()})


def idf_of(memories: list[dict]) -> dict[str, float]:
    """Inverse document frequency of each word over every exchange of the set."""
    groups = [g for m in memories for g in exchanges(turns(m.get("body") or "")[1])]
    df = Counter(w for g in groups for w in set(_bag(g)))
    return {w: math.log(len(groups) / n) for w, n in df.items()}


def _cosine(a: Counter, b: Counter) -> float:
    dot = sum(v * b[k] for k, v in a.items() if k in b)
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


def topics(parts: list[tuple[str, str]], idf: dict[str, float]) -> list[list[tuple[str, str]]]:
    """Exchanges merged while their words overlap the running segment's."""
    segments: list[list[tuple[str, str]]] = []
    words: Counter = Counter()
    for group in exchanges(parts):
        bag = _weights(group, idf)
        if segments and _cosine(bag, words) >= TOPIC_COSINE:
            segments[-1].extend(group)
            words.update(bag)
        else:
            segments.append(list(group))
            words = bag
    return segments


def render(head: str, group: list[tuple[str, str]]) -> str:
    return head + "\n\n" + "\n\n".join(f"**{r}**: {t}" for r, t in group) + "\n"


def variant(memories: list[dict], kind: str) -> tuple[list[dict], dict[str, str]]:
    """The memories of vault ``kind`` and, for each, the session it came from."""
    out, session_of = [], {}
    idf = idf_of(memories) if kind == "topics" else {}
    for m in memories:
        head, parts = turns(m.get("body") or "")
        prompts = [t for r, t in parts if r == "user"]
        if kind == "session" or not parts:
            groups = None
        elif kind == "asked":
            groups = None
            m = {**m, "description": asked(prompts) if prompts else m.get("description")}
        else:
            groups = topics(parts, idf) if kind == "topics" else exchanges(parts)
        if groups is None:
            out.append(m)
            session_of[m["id"]] = m["id"]
            continue
        for n, group in enumerate(groups, 1):
            said = [t for r, t in group if r == "user"]
            seg_id = f"{m['id']}-p{n}"
            out.append(
                {
                    **m,
                    "id": seg_id,
                    "name": f"{m['name']} ({n}/{len(groups)})",
                    "description": asked(said) if said else m.get("description"),
                    "body": render(head, group),
                }
            )
            session_of[seg_id] = m["id"]
    return out, session_of


def write_set(memories: list[dict], source: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in memories)
    if not (dest / "memories.jsonl").exists() or (dest / "memories.jsonl").read_text() != text:
        (dest / "memories.jsonl").write_text(text)
    for name in ("queries.jsonl", "qrels.tsv"):
        (dest / name).write_text((source / name).read_text())


def run(kind: str, work: Path, off: dict[str, list[str]]) -> dict:
    source = BENCH / "chats-qa"
    memories, _queries, _qrels = load_set(source)
    mems, session_of = variant(memories, kind)
    sdir = work / "sets" / f"chats-qa-{kind}"
    write_set(mems, source, sdir)
    store, _sdir, _m, queries, qrels, _report, seconds = open_set(str(sdir), work / "recall")
    emb = store.embedder()
    if emb is None:
        raise SystemExit(f"no model: {store.notices}")
    calib = calibrate.ensure(store.con, emb)
    threshold = store.cfg.min_score
    hit1 = hit5 = hinted = 0
    for q, qvec in zip(queries, emb.embed_queries([q["text"] for q in queries])):
        relevant = set(qrels[q["id"]])
        cands = score(store.con, q["text"], qvec, calib, limit=500, words=store.words())
        ranked = list(dict.fromkeys(session_of.get(c.id, c.id) for c in cands))
        hit1 += bool(ranked[:1] and ranked[0] in relevant)
        hit5 += any(s in relevant for s in ranked[:5])
        hints = [c for c in cands if c.score >= threshold and c.description][:3]
        hinted += any(session_of.get(c.id, c.id) in relevant for c in hints)
    n = max(len(queries), 1)
    best = [b for texts in off.values() for b in top_scores(store, emb, calib, texts)]
    return {
        "variant": kind,
        "memories": len(mems),
        "queries": len(queries),
        "hit@1": round(hit1 / n, 4),
        "hit@5": round(hit5 / n, 4),
        "hinted": round(hinted / n, 4),
        "offtopic_quiet": round(sum(b < threshold for b in best) / max(len(best), 1), 4),
        "offtopic": len(best),
        "threshold": threshold,
        "index_seconds": round(seconds, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path(".bench"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--offtopic", type=int, default=300)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    off = offtopic("chats-qa", args.offtopic)
    print(f"chats-qa; {machine()}")
    print(f"{'variant':10} {'memories':>8} {'hit@1':>6} {'hit@5':>6} {'hinted':>7} {'quiet':>6}", flush=True)
    rows = []
    for kind in args.variants.split(","):
        r = run(kind, args.work.resolve(), off)  # a row as soon as its vault is done: each takes minutes
        rows.append(r)
        print(
            f"{r['variant']:10} {r['memories']:8} {r['hit@1']:6.3f} {r['hit@5']:6.3f} {r['hinted']:7.3f} "
            f"{r['offtopic_quiet']:6.3f}",
            flush=True,
        )
    print(f"{rows[0]['queries']} questions; hints at {rows[0]['threshold']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows, "date": dt.date.today().isoformat(), "machine": machine()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
