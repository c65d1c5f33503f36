"""Seed 000's hint line: how a recall hint reads wherever it is shown.

``- <id> | score=0.62 | <name> | <short description>`` — in ``[recall]``
blocks, the CLI, hooks and MCP answers alike. Kept apart from ``recall`` so
that showing hints needs neither numpy nor the index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marchdb.modeltext import for_model
from marchdb.text import plain_line

#: Characters of a description shown in a hint line.
DESCRIPTION_CHARS = 80
#: Characters of a name shown in a hint line (``save`` takes names of at most
#: 200; a hand-written one may be longer, and must not fill a host's context).
NAME_CHARS = 200
#: Characters of an id shown (ids are at most 128, ``notes.MAX_ID_LEN``).
ID_CHARS = 128
#: The first line of the block the hints are injected in (seed 000).
RECALL_HEADER = "[recall]\n"


def cut(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """``text`` on one line (``plain_line``), cut to ``limit`` characters with
    an ellipsis; what importers store (a name keeps its own brackets)."""
    text = plain_line(str(text))
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def short(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """``text`` as a hint shows it: on one line, cut to ``limit`` characters
    with an ellipsis; control and direction-control characters dropped (a
    hand-written name may hold an escape sequence, and a hint goes to hosts
    and terminals) and block markers shown as text (``modeltext.for_model``)."""
    return cut(for_model(plain_line(str(text))), limit)


def hint_line(mem_id: str, score: float, name: str, description: str = "") -> str:
    """Seed 000's hint line ``- <id> | score=0.62 | <name> | <short description>``
    (no description part when there is none)."""
    parts = [short(mem_id, ID_CHARS), f"score={float(score):.2f}", _field(short(name, NAME_CHARS))]
    if description:
        parts.append(_field(short(description)))
    return "- " + " | ".join(parts)


def _field(text: str) -> str:
    """A name or description as a field of a hint line: its own ``|`` shown
    as ``¦``, so that a title holding ``| score=1.00 |`` reads as one field,
    not as a second score to a model or a host parsing the line."""
    return text.replace("|", "¦")


def contradiction_lines(found: list) -> list[str]:
    """A line for each undecided contradiction among hints (dicts or
    ``recall.Hint`` objects whose ``signals`` name the memories they are
    disputed by, ``contradicts``; ``conflicts_with``): two memories that
    contradict each other are never hinted side by side without saying so,
    nor one of them alone. Each pair is said once."""
    shown = {str(_get(h, "id")) for h in found}
    lines, said = [], set()
    for hint in found:
        mem_id = str(_get(hint, "id"))
        for other in (_get(hint, "signals") or {}).get("contradicts") or ():
            pair = frozenset((mem_id, str(other)))
            if pair in said:
                continue
            said.add(pair)
            a, b = short(mem_id, ID_CHARS), short(str(other), ID_CHARS)
            if str(other) in shown:
                lines.append(f"! {a} and {b} contradict each other ({_UNDECIDED}): say so before relying on either")
            else:
                lines.append(f"! {a} is disputed by {b} ({_UNDECIDED}): open both before relying on it")
    return lines


_UNDECIDED = "conflicts_with, not yet decided by a person"


def _get(hint: object, key: str) -> Any:
    # Hints arrive as dicts (JSON, MCP) or as recall.Hint objects.
    return hint.get(key) if isinstance(hint, Mapping) else getattr(hint, key, None)


def recall_block(found: list[dict] | str) -> str:
    """Seed 000's ``[recall]`` block for hints (dicts with ``id``, ``score``,
    ``name``, ``description`` and ``signals``, or their lines already made),
    with its trailing newline and the lines of ``contradiction_lines``; ""
    when there is none."""
    lines = (
        found
        if isinstance(found, str)
        else "\n".join(
            [hint_line(h["id"], h["score"], h["name"], h.get("description") or "") for h in found]
            + contradiction_lines(found)
        )
    )
    return f"{RECALL_HEADER}{lines.strip()}\n" if lines.strip() else ""
