#!/usr/bin/env python3
"""What a save answers as ``related``: the old memory a new one contradicts or adds to, and nothing else.

    python tools/bench_related.py [--model PATH] [--chats] [--work DIR]

Fifteen agent memories (decisions, preferences, people, projects; English and
Chinese) and twenty filler notes (``--chats``: plus the 269 LongMemEval chats
of ``../shared/bench/chats``, the background of a real vault) are indexed;
then twelve new facts are scored against them as a save scores its related
memories (``recall.related``: the new memory's name and description as the
query, nothing logged): three contradictions, five additions, four unrelated
facts. Reported per new fact: the recall score of the memory it is about, and
the best score of any other memory, then the threshold a save uses
(``recallMinScore - recall.RELATED_BELOW``) and what it would list.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench_data import BENCH

from marchdb.config import load_config
from marchdb.index.recall import RELATED_BELOW
from marchdb.store import Store

OLD = [
    (
        "mem_freeze",
        "Release freeze on Fridays",
        "No production releases on Fridays, nobody is on call over the weekend",
        ["release", "process"],
    ),
    (
        "mem_pg",
        "Database choice PostgreSQL",
        "We chose PostgreSQL over MySQL for the billing service, for its JSON support",
        ["decision", "project/billing"],
    ),
    (
        "mem_review",
        "Code review style",
        "The user wants short review comments, one issue per comment, each with a fix",
        ["preference", "review"],
    ),
    ("mem_tabs", "Indentation", "The user prefers 4 spaces, never tabs, in Python code", ["preference", "python"]),
    (
        "mem_wu",
        "Wu, the product lead",
        "Wu decides the roadmap; send him a one-page summary before meetings",
        ["person"],
    ),
    (
        "mem_deploy",
        "Deploy with blue-green",
        "Production deploys go through blue-green switching on the load balancer",
        ["project/billing", "deploy"],
    ),
    (
        "mem_cache",
        "Context cache ordering",
        "Put volatile layers after the large stable context, or the prefix cache is invalidated",
        ["cache"],
    ),
    (
        "mem_tz",
        "Timestamps in UTC",
        "All timestamps are stored in UTC and shown in the user's local time zone",
        ["architecture"],
    ),
    (
        "mem_ci",
        "CI runs on GitHub Actions",
        "The CI pipeline runs on GitHub Actions with a self-hosted runner for GPU tests",
        ["ci"],
    ),
    ("mem_dog", "Dog's medication", "Biscuit takes half a carprofen tablet with breakfast for joint pain", ["pets"]),
    ("mem_hike", "周末爬山路线", "香山适合半天往返，凤凰岭适合全天徒步", ["户外"]),
    ("mem_db", "数据库凭据轮换", "数据库密码保存在保险库里，每月用运维脚本轮换一次", ["运维"]),
    (
        "mem_lint",
        "Linting with ruff",
        "The repository uses ruff for linting and formatting, line length 120",
        ["python", "tooling"],
    ),
    ("mem_meet", "Standup time", "The team standup is at 9:30 every weekday, 15 minutes", ["team"]),
    (
        "mem_api",
        "API versioning",
        "Public API versions live in the URL path (/v1/, /v2/), never in headers",
        ["api", "decision"],
    ),
]
# (kind, name, description, the old memory it is about)
NEW = [
    (
        "contradicts",
        "Friday releases allowed",
        "Production releases on Fridays are allowed again now that on-call covers weekends",
        "mem_freeze",
    ),
    (
        "contradicts",
        "Database choice MySQL",
        "Billing moves to MySQL, the team knows it better than PostgreSQL",
        "mem_pg",
    ),
    ("contradicts", "Tabs in Python", "The user now wants tabs for indentation in Python", "mem_tabs"),
    ("adds to", "Review comments in Chinese", "The user wants code review comments written in Chinese", "mem_review"),
    ("adds to", "Wu prefers mornings", "Wu, the product lead, takes meetings only before noon", "mem_wu"),
    (
        "adds to",
        "Blue-green rollback",
        "To roll back a billing deploy, switch the load balancer back to the old colour",
        "mem_deploy",
    ),
    ("adds to", "香山路线补充", "香山北宫门入口周末人很多，最好早上七点前到", "mem_hike"),
    ("adds to", "Standup moved", "The standup moved to 10:00 on Mondays only", "mem_meet"),
    ("unrelated", "Coffee beans", "The user likes light roast Ethiopian beans for pour-over", None),
    ("unrelated", "Kubernetes namespaces", "Each team gets its own Kubernetes namespace with a resource quota", None),
    ("unrelated", "Favourite book", "The user's favourite novel is The Left Hand of Darkness", None),
    ("unrelated", "Train to Shanghai", "The G7 train to Shanghai leaves at 8:00 from Beijing South", None),
]


def write(root: Path, mem_id: str, name: str, description: str, tags: list[str]) -> None:
    """One memory file (JSON strings are valid YAML scalars, whatever they hold)."""
    head = [f"id: {mem_id}", f"name: {json.dumps(name)}", f"description: {json.dumps(description)}", "tags:"]
    head += [f"  - {json.dumps(t)}" for t in tags]
    (root / f"{mem_id}.md").write_text("---\n" + "\n".join(head) + f"\n---\n\n{description}\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="GGUF model path or recipe (default: the configured one)")
    parser.add_argument("--chats", action="store_true", help="add the 269 chats of ../shared/bench/chats")
    parser.add_argument("--work", help="folder for the vault and home (default: a temp folder)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-related-"))
    root = work / "vault"
    root.mkdir(parents=True, exist_ok=True)
    for mem_id, name, description, tags in OLD:
        write(root, mem_id, name, description, tags)
    for i in range(20):
        write(root, f"mem_g{i}", f"Garden note {i}", f"tomatoes and basil, bed {i}", ["garden"])
    if args.chats:
        for line in (BENCH / "chats" / "memories.jsonl").open(encoding="utf-8"):
            m = json.loads(line)
            write(root, m["id"], m["name"], " ".join(m["description"].split())[:300], ["chat"])
    with Store(load_config(home=work / "home", root=root, model=args.model)) as store:
        store.sync()
        threshold = store.cfg.min_score - RELATED_BELOW
        print(f"{store.status()['memories']} memories; a save lists related memories from {threshold:.2f}\n")
        print(f"{'new fact':30} {'kind':12} {'its memory':>10} {'best other':>10}  listed")
        for kind, name, description, target in NEW:
            found = store.recall(f"{name}\n{description}", explain=True, threshold=0.0).candidates
            mine = next((c.score for c in found if c.id == target), None)
            other = max((c.score for c in found if c.id != target), default=0.0)
            listed = [r["id"] for r in store.related(f"{name}\n{description}", set(), [])]
            shown = "-" if mine is None else f"{mine:.3f}"
            print(f"{name[:30]:30} {kind:12} {shown:>10} {other:10.3f}  {', '.join(listed) or '(none)'}")


if __name__ == "__main__":
    main()
