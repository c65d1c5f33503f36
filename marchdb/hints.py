"""Seed 000's hint line: how a recall hint reads wherever it is shown.

``- <id> | score=0.62 | <name> | <short description>`` — in ``[recall]``
blocks, the CLI, hooks and MCP answers alike. Kept apart from ``recall`` so
that showing hints needs neither numpy nor the index.
"""

from __future__ import annotations

from marchdb.text import plain_line

#: Characters of a description shown in a hint line.
DESCRIPTION_CHARS = 80


def short(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis;
    control and direction-control characters dropped (a hand-written name
    may hold an escape sequence, and a hint goes to hosts and terminals)."""
    text = plain_line(str(text))
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def hint_line(mem_id: str, score: float, name: str, description: str = "") -> str:
    """Seed 000's hint line ``- <id> | score=0.62 | <name> | <short description>``
    (no description part when there is none)."""
    parts = [short(mem_id, 10_000), f"score={float(score):.2f}", short(name, 10_000)]
    if description:
        parts.append(short(description))
    return "- " + " | ".join(parts)
