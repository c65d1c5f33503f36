#!/usr/bin/env python3
"""Write a LoCoMo set with longer memories: consecutive sessions merged.

LoCoMo's sessions (shared/bench/locomo) are short, about 3,000 characters each;
real agent memories are often several times longer.  This script merges
consecutive sessions of each conversation, in order, into memories of about
8,000-14,000 characters (2 to 4 of the ~3,000-character sessions; a group
never crosses conversations) and remaps the relevance judgements onto the
merged memories.

    python3 tools/make_locomo_long.py OUTDIR [--src /work/shared/bench/locomo]

Writes OUTDIR/memories.jsonl, queries.jsonl and qrels.tsv in the same format as
the shared sets and prints counts.  Deterministic, standard library only.

Grouping: for each conversation, the split into contiguous groups is chosen by
dynamic programming to minimise the sum of squared distances of the merged
lengths from 11,000 characters, with a heavy extra cost for every character
outside 8,000-14,000, so groups stay inside the band whenever the sessions
allow it.

Merged memory: id ``locomo-cN-mK`` (K counts from 1 within the conversation);
name ``"<A> and <B>, chats of <first date> to <last date>"`` (like the
originals' ``"<A> and <B>, chat of <date>"``); description = the merged
sessions' descriptions (each the first sentences of its session summary), in
order; tags = the originals' tags; created_at = the first session's; body = for each session a heading with its
date (``## <date>``), a blank line and the session's body, sessions separated by
a blank line.

Relevance: every (query, session, grade) line maps to (query, merged memory,
grade); lines that land on the same merged memory are merged keeping the
highest grade.  Every query with at least one relevant memory is kept.
"""

import argparse
import json
import os
import re
import sys

from bench_data import BENCH

TARGET = 11000
LOW, HIGH = 8000, 14000
SEP = "\n\n"

NAME_RE = re.compile(r"^(?P<who>.+), chat of (?P<date>.+)$")
ID_RE = re.compile(r"^locomo-c(?P<c>\d+)-s(?P<s>\d+)$")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def session_parts(mem):
    m = NAME_RE.match(mem["name"])
    if not m:
        raise SystemExit("unexpected session name: {!r}".format(mem["name"]))
    return m.group("who"), m.group("date")


def section(mem):
    _, date = session_parts(mem)
    return "## {}{}{}".format(date, SEP, mem["body"].strip())


def merged_length(sessions):
    return len(SEP.join(section(m) for m in sessions))


def cost(length):
    c = (length - TARGET) ** 2
    if length < LOW:
        c += 100 * (LOW - length) ** 2
    elif length > HIGH:
        c += 100 * (length - HIGH) ** 2
    return c


def split(sessions):
    """Contiguous groups of sessions with lengths near TARGET (DP)."""
    n = len(sessions)
    best = [0.0] + [float("inf")] * n
    back = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):
            length = merged_length(sessions[i:j])
            c = best[i] + cost(length)
            if c < best[j]:
                best[j], back[j] = c, i
            if length > 3 * HIGH:
                break
    groups, j = [], n
    while j > 0:
        groups.append(sessions[back[j] : j])
        j = back[j]
    return groups[::-1]


def merge(conv, k, group):
    who, first_date = session_parts(group[0])
    _, last_date = session_parts(group[-1])
    tags = []
    for mem in group:
        for t in mem.get("tags") or []:
            if t not in tags:
                tags.append(t)
    if len(group) == 1:
        name = group[0]["name"]
    else:
        name = f"{who}, chats of {first_date} to {last_date}"
    return {
        "id": f"locomo-c{conv}-m{k}",
        "name": name,
        "description": " ".join(" ".join(m["description"].split()) for m in group),
        "tags": tags,
        "created_at": group[0].get("created_at"),
        "body": SEP.join(section(m) for m in group),
    }


def quantiles(values):
    v = sorted(values)

    def pick(q):
        return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]

    return f"min {v[0]}, p10 {pick(0.1)}, median {pick(0.5)}, p90 {pick(0.9)}, max {v[-1]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--src", default=str(BENCH / "locomo"), help="the locomo set (default: the shared benchmark sets)")
    args = ap.parse_args()

    mems = read_jsonl(os.path.join(args.src, "memories.jsonl"))
    queries = read_jsonl(os.path.join(args.src, "queries.jsonl"))
    with open(os.path.join(args.src, "qrels.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    if rows and rows[0][0] == "query-id":
        rows = rows[1:]

    by_conv = {}
    for mem in mems:
        m = ID_RE.match(mem["id"])
        if not m:
            raise SystemExit("unexpected memory id: {!r}".format(mem["id"]))
        by_conv.setdefault(int(m.group("c")), []).append((int(m.group("s")), mem))

    merged, where = [], {}
    sizes = []
    for conv in sorted(by_conv):
        sessions = [mem for _, mem in sorted(by_conv[conv], key=lambda p: p[0])]
        for k, group in enumerate(split(sessions), 1):
            out = merge(conv, k, group)
            merged.append(out)
            sizes.append(len(group))
            for mem in group:
                where[mem["id"]] = out["id"]

    grades = {}
    unknown = 0
    for qid, mid, grade in rows:
        if mid not in where:
            unknown += 1
            continue
        key = (qid, where[mid])
        grades[key] = max(grades.get(key, 0), int(grade))
    per_query = {}
    for (qid, mid), g in grades.items():
        per_query.setdefault(qid, []).append((mid, g))
    src_per_query = {}
    for qid, mid, _ in rows:
        src_per_query.setdefault(qid, set()).add(mid)

    kept = [q for q in queries if per_query.get(q["id"])]
    order = {m["id"]: i for i, m in enumerate(merged)}

    os.makedirs(args.outdir, exist_ok=True)
    with open(os.path.join(args.outdir, "memories.jsonl"), "w", encoding="utf-8") as f:
        for m in merged:
            f.write(json.dumps(m, ensure_ascii=False) + "\n")
    with open(os.path.join(args.outdir, "queries.jsonl"), "w", encoding="utf-8") as f:
        for q in kept:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    n_qrels = 0
    with open(os.path.join(args.outdir, "qrels.tsv"), "w", encoding="utf-8") as f:
        f.write("query-id\tmemory-id\tgrade\n")
        for q in kept:
            for mid, g in sorted(per_query[q["id"]], key=lambda p: order[p[0]]):
                f.write(f"{q['id']}\t{mid}\t{g}\n")
                n_qrels += 1

    lengths = [len(m["body"]) for m in merged]
    collapsed = sum(1 for q in kept if len(per_query[q["id"]]) < len(src_per_query.get(q["id"], ())))
    multi = sum(1 for q in kept if len(per_query[q["id"]]) > 1)
    inside = sum(1 for n in lengths if LOW <= n <= HIGH)
    print(f"source: {len(mems)} sessions, {len(queries)} queries, {len(rows)} qrels lines")
    per = ", ".join(f"{s} x{sizes.count(s)}" for s in sorted(set(sizes)))
    print(f"merged memories: {len(merged)} ({len(by_conv)} conversations); sessions per memory: {per}")
    print(f"body length (chars): {quantiles(lengths)}; {inside} of {len(lengths)} inside {LOW}-{HIGH}")
    print(
        f"queries kept: {len(kept)} of {len(queries)}; qrels lines: {n_qrels}; queries whose relevant sessions "
        f"merged into fewer memories: {collapsed}; queries with >1 relevant memory: {multi}"
    )
    if unknown:
        print(f"warning: {unknown} qrels lines name unknown sessions", file=sys.stderr)
    print(f"wrote {args.outdir}")


if __name__ == "__main__":
    main()
