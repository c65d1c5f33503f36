"""``marchdb demo``: the whole path end to end in a throwaway vault.

Saves a few memories (English and Chinese) into a temporary folder, indexes
and embeds them with the default model (built on first use from a PyPI
package; kept in the usual models folder so the next run is fast), then shows
recall, search and open. The user's own vault and index are never touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marchdb.config import load_config

MEMORIES: list[dict[str, Any]] = [
    {
        "name": "Context cache ordering",
        "description": "Put volatile layers after the large stable context, or the prefix cache is invalidated",
        "tags": ["march/context", "cache", "architecture"],
        "body": "# Context cache ordering\n\nThe prompt is assembled from stable blocks first (system, profiles, "
        "tool schemas) and volatile blocks last (recall hints, the latest messages). Moving a volatile block "
        "in front of a stable one made every request miss the prefix cache.",
    },
    {
        "name": "Passive recall dedup",
        "description": "User-message recall suppresses memories hinted in the conversation's last 10 agent runs",
        "tags": ["march/recall", "dedup"],
        "body": "A memory hinted for a user message is not hinted again for the next 10 agent runs of that "
        "conversation; another conversation, whose context never held it, still gets it. "
        "Within one run, user and assistant recall share a seen set.",
    },
    {
        "name": "数据库凭据轮换",
        "description": "数据库密码保存在保险库里，每月用运维脚本轮换一次",
        "tags": ["运维", "安全", "数据库"],
        "body": "数据库密码不写进代码仓库。每月第一个周一运行 rotate-db-secrets 脚本，"
        "脚本会更新保险库中的密码并滚动重启服务。",
    },
    {
        "name": "Code review style",
        "description": "The user wants short review comments, one issue per comment, each with a suggested fix",
        "tags": ["preferences", "review"],
        "body": "Keep review comments short. One issue per comment. Always suggest a concrete fix.",
    },
    {
        "name": "周末爬山路线",
        "description": "香山适合半天往返，凤凰岭适合全天徒步",
        "tags": ["户外", "爬山"],
        "body": "香山：地铁到北宫门，半天往返。凤凰岭：早上出发，全天徒步，带足水。",
    },
]

QUERIES = [
    "Why does every request miss the prompt cache?",
    "数据库密码多久换一次？",
    "how does the user like code reviews",
    "Where should we go hiking this weekend?",  # an English question, a Chinese memory
    "asdf qwer zxcv",
]


def run_demo(keep: bool = False, progress: Callable[[int, int], None] | None = None, say=print) -> dict:
    """Run the demo; returns what it did as data (``say`` narrates)."""
    from marchdb.store import Store

    base = Path(tempfile.mkdtemp(prefix="marchdb-demo-"))
    real = load_config()  # only to find the shared models folder
    env = {k: v for k, v in os.environ.items() if k not in ("MARCH_HOME", "MARCH_MEMORY_ROOT")}
    env["MARCH_MODELS_DIR"] = str(real.models_dir)
    cfg = load_config(home=base / "home", root=base / "March Memories", env=env)
    cfg.memory_root.mkdir()  # a configured root is never created by the store itself
    say(f"demo vault: {cfg.memory_root} (temporary; your own vault is not touched)")
    out: dict = {"vault": str(cfg.memory_root), "index": str(cfg.index_path), "saved": [], "recall": []}
    store = Store(cfg)
    try:
        for mem in MEMORIES:
            result = store.save(embed=False, **mem)
            out["saved"].append({"id": result["id"], "status": result["status"], "path": result["path"]})
            say(f"saved {result['id']}  {Path(result['path']).relative_to(cfg.memory_root)}")
        say(f"indexing and embedding with the default model (built into {cfg.models_dir} on first use)...")
        report = store.sync(progress=progress)
        out["sync"] = report.to_dict()
        for warning in report.warnings:
            say(f"warning: {warning}")
        say(f"indexed {report.scanned} files, embedded {report.embedded} texts in {report.seconds:.1f}s")
        for query in QUERIES:
            recalled = store.recall(query)
            hints = [h.to_dict() for h in recalled.hints]
            out["recall"].append({"query": query, "hints": hints, "mode": recalled.mode})
            say(f"\n[user] {query}\n[recall]" + ("" if hints else " (no hint: nothing relevant)"))
            if hints:
                say(recalled.text())
        found = store.search("cache", limit=3)
        out["search"] = found
        say("\nmemory_search('cache'): " + ", ".join(f"{r['path']} [{r['id']}]" for r in found["results"]))
        first = next((r["hints"][0]["id"] for r in out["recall"] if r["hints"]), None)
        if first:
            opened = store.open(first)
            out["open"] = {"id": first, "status": opened["status"]}
            say(f"\nmemory_open('{first}'):\n" + opened["markdown"])
    finally:
        store.close()
        if keep:
            say(f"kept the demo vault in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return out
