"""Text marchdb hands a model: one rule for all of it, here.

Hints, the profiles, the working page's ``[now]`` block, the daily logs of a
reflection, and every field of a tool's answer (ids, names, descriptions,
warnings...) reach a model's context, inside the blocks marchdb and the hosts
mark out (``[recall]``, ``[user_profile]``, ``<system-reminder>``). A memory
written by anyone (an imported chat, a web page saved as a note) must not be
able to end such a block or pose as another (``[user]`` ...). So each of
those texts goes through ``for_model`` on its way out, and nothing else
decides what a model may read:

* what reads as a block marker is shown as text: ``[user]`` as ``⟦user⟧``,
  ``</system-reminder>`` as ``‹/system-reminder›``. Brackets a model reads
  alike count (full-width ``［ ］``, ``【 】``, ``〈 〉``, ``＜ ＞``), and so
  does a marker with invisible characters inside (zero-width spaces and
  joiners, U+034F, variation selectors, combining marks: a model reads
  past them, as an eye does) or with look-alike letters (Cyrillic ``е``);
* control characters other than newline and tab are dropped.

Bracketed numbers (``[1]``), comparisons (``a < b``) and empty checkboxes
stay as they are. The files and the index keep the text as written; so do
the answers that are a file's own text, read on request (``memory_open``'s
Markdown, ``memory_search``'s lines: ``ops.Operation.as_written``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

#: Where a marker may start, in the text as a model reads it (``_Fold``).
_OPENER = re.compile("[\\[【〔〖<〈⟨]")
_BRACKETED = re.compile(r"[\[【〔〖]([^\[\]【】〔〕〖〗]{1,60})[\]】〕〗]")
_TAGGED = re.compile(r"[<〈⟨](\s*/?\s*[^\W\d][\w:.\-]{0,40}(?:\s[^<>〈〉⟨⟩]{0,200})?/?\s*)[>〉⟩]")
#: A bracketed word or two, starting with a letter: ``[1]`` or ``[x, y]`` is no marker.
_MARKER_WORDS = re.compile(r"/?[^\W\d][\w .:\-]{0,59}")
#: Where a secret was removed (``redact.marker``: ``[redacted: github token]``),
#: in plain ASCII as marchdb writes it; shown to a model as it is.
_REDACTED = re.compile(r"\[redacted: [a-z0-9][a-z0-9 .\-]{0,40}\]")
#: Default-ignorable code points that are neither format characters nor
#: combining marks (Hangul fillers, unassigned ``FFF0``–``FFF8``).
_OTHER_IGNORABLE = frozenset("\u115f\u1160\u3164\uffa0") | frozenset(map(chr, range(0xFFF0, 0xFFF9)))
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class _Fold(dict):
    """``str.translate``'s table for reading a text as a model does: what does
    not show is deleted (format characters such as zero-width spaces and
    joiners, combining marks such as U+034F or a variation selector, other
    default-ignorables), a character whose NFKC form is one other character
    becomes it (full-width ``［`` is ``[``); every other one stays. Filled as
    characters are met."""

    def __missing__(self, code: int) -> str | None:
        char = chr(code)
        if char in _OTHER_IGNORABLE or unicodedata.category(char) in ("Cf", "Mn", "Me"):
            value = None
        else:
            folded = unicodedata.normalize("NFKC", char)
            value = folded if len(folded) == 1 else char
        self[code] = value
        return value


_TABLE = _Fold()


def for_model(text: str) -> str:
    """``text`` as a model may read it: block markers shown as text, control
    characters (but newline and tab) dropped. See the module's doc."""
    text = _CONTROLS.sub("", str(text))
    shown = text.translate(_TABLE)
    if _OPENER.search(shown) is None:
        return text
    # Where each character of ``shown`` is in ``text``: the same place, unless
    # some were deleted (the folding maps the others one to one).
    where = None if len(shown) == len(text) else [i for i, c in enumerate(text) if _TABLE[ord(c)] is not None]
    out: list[str] = []
    done = 0  # in text
    pos = 0  # in shown
    while (found := _OPENER.search(shown, pos)) is not None:
        start = found.start()
        replacement = None
        match = _BRACKETED.match(shown, start)
        if match is not None:
            inner = match.group(1)
            first, last = (start, match.end() - 1) if where is None else (where[start], where[match.end() - 1])
            if _REDACTED.fullmatch(text, first, last + 1):
                pass  # marchdb's own mark of a removed secret, as written: it tells, it poses as no block
            elif _MARKER_WORDS.fullmatch(" ".join(inner.split()).replace("/ ", "/")):
                replacement = f"⟦{inner}⟧"
        else:
            match = _TAGGED.match(shown, start)
            if match is not None:
                replacement = f"‹{match.group(1)}›"
        if match is None or replacement is None:
            pos = start + 1
            continue
        first, last = (start, match.end() - 1) if where is None else (where[start], where[match.end() - 1])
        out += [text[done:first], replacement]
        done = last + 1
        pos = match.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def answer_for_model(data: object, as_written: Iterable[str] = ()) -> object:
    """An operation's answer with ``for_model`` applied to every string in it,
    but under the keys ``as_written`` (a file's own text read on request, a
    block already made for a model; ``results.matches``: the key ``matches``
    of each item under ``results``) and under ``path`` / ``paths`` at any
    depth (where a file is, to be opened as it is named)."""
    kept = {tuple(key.split(".")) for key in as_written}

    def walk(value: object, where: tuple[str, ...]) -> object:
        if isinstance(value, str):
            return for_model(value)
        if isinstance(value, dict):
            return {
                k: v if (*where, k) in kept or k in ("path", "paths") else walk(v, (*where, k))
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [walk(v, where) for v in value]
        return value

    return walk(data, ())
