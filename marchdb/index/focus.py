"""What of a long message recall embeds: its question, its start and its end.

Embedding costs about a millisecond a token on two cores, and a message is
embedded on every prompt a host sends. A short message (a question, a
request) is embedded whole. A long one (a pasted log, a stack trace, a file,
up to ``recall.MAX_RECALL_CHARS``) would take its model's whole window, half
a second, for a vector that says "a wall of code": what recall should find
is what the person asks about it, which its question sentences, its opening
and its closing lines say. ``focus`` keeps those, in their order, within
``BUDGET`` (about 100 tokens); BM25 still reads the message's words
(``words``: the kept part's first, then the rest).

Only the standard library: the hook's engine calls it on every prompt.
"""

from __future__ import annotations

import re

from marchdb.fts import CJK_CHAR

#: How much of a message is embedded, in units of about a quarter of a token:
#: a Latin character counts 1, a CJK character 3 (it is a word, about one
#: token of e5's). 400 is about 100 English tokens, 130 Chinese characters.
BUDGET = 400
#: A piece kept from a long message (a sentence, a line) is cut past this.
PIECE = 200

# sentence ends (also CJK ones) or line breaks
_PIECES = re.compile(r"[^\n.!?。！？；;:：]*(?:[.!?。！？；;:：]+|\n|$)")
_QUESTION = re.compile(r"[?？]\s*$")
_ASKS = re.compile(
    r"^\s*(?:what|which|who|whom|whose|when|where|why|how|did|do|does|can|could|should|would|is|are|was|were|"
    r"remind|tell|any idea)\b",
    re.I,
)


def size(text: str) -> int:
    """``text``'s length in budget units (a CJK character counts 3)."""
    return len(text) + 2 * len(CJK_CHAR.findall(text))


def _cut(text: str, limit: int, tail: bool = False) -> str:
    # its first (``tail``: last) ``limit`` units
    out, used = [], 0
    for ch in reversed(text) if tail else text:
        used += 3 if CJK_CHAR.match(ch) else 1
        if used > limit:
            break
        out.append(ch)
    return ("".join(reversed(out)) if tail else "".join(out)).strip()


def focus(text: str, budget: int | None = None) -> str:
    """The part of ``text`` recall embeds: all of it when it fits ``budget``,
    else its question sentences (the last first), its first and its last
    sentence, each cut to ``PIECE``, kept in the message's order while they
    fit."""
    budget = BUDGET if budget is None else budget
    text = text.strip()
    if size(text) <= budget:
        return text
    pieces = [p.strip() for p in _PIECES.findall(text) if p.strip()]
    if not pieces:
        return _cut(text, budget)
    order: list[int] = []
    asks = [i for i, p in enumerate(pieces) if _QUESTION.search(p) or _ASKS.match(p)]
    for i in [*reversed(asks[-2:]), 0, len(pieces) - 1, *reversed(asks[:-2])]:
        if i not in order:
            order.append(i)
    kept: dict[int, str] = {}
    used = 0
    for i in order:
        # a question at the end of a long line is its end
        piece = _cut(pieces[i], min(PIECE, budget - used), tail=bool(_QUESTION.search(pieces[i])))
        if not piece:
            break
        kept[i] = piece
        used += size(piece) + 1
        if used >= budget:
            break
    return " ".join(kept[i] for i in sorted(kept))
