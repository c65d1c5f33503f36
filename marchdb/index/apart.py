"""Projects kept apart, on request: recall in a project only from memories tagged for it.

Seed 000 makes the current project a ranking signal, never a filter, and that
stays the default. A ``projects`` entry with ``"apart": true`` asks for the
opposite there: recall in that project hints only memories tagged for it
(its tag or below it: ``project/acme``, ``project/acme/billing``), plus
memories tagged for no project at all unless ``"untagged": false``. What is
left out keeps its score and says why in ``--explain``; nothing is logged
for it, so it suppresses nothing later.
"""

from __future__ import annotations

import json

import apsw


def keep_apart(con: apsw.Connection, scored: list, tag: str, untagged: bool, prefix: str) -> tuple[list, list]:
    """``(kept, left_out)`` of ``scored`` candidates (``recall.Hint``) for a
    project kept apart: kept are those tagged ``tag`` or below it, and with
    ``untagged`` those tagged for no project (no tag starting with
    ``prefix``); the others get their ``reason``."""
    if not scored:
        return scored, []
    tags_of = dict(
        con.execute(
            "SELECT id, tags_json FROM memory_index WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([c.id for c in scored]),),
        )
    )
    kept, left_out = [], []
    why = f"kept apart: this project recalls only memories tagged {tag}" + (" or no project" if untagged else "")
    for cand in scored:
        tags = json.loads(tags_of.get(cand.id) or "[]")
        mine = any(t == tag or t.startswith(tag + "/") for t in tags)
        none = not any(t.startswith(prefix) for t in tags)
        if mine or (untagged and none):
            kept.append(cand)
        else:
            cand.reason = why
            left_out.append(cand)
    return kept, left_out
