"""Tags by seed 000's rules: the one normaliser every path uses (save, sync,
imports, the project signal, config checks).

Its own module, with nothing but ``re`` and ``unicodedata``: config.py checks
``projectTagPrefix`` with it on every load, hooks included, and importing
``notes`` (YAML, frontmatter) there cost a hook ~45 ms.
"""

from __future__ import annotations

import re
import unicodedata

from marchdb.errors import InvalidInput

#: Longest tag, in characters.
MAX_TAG_CHARS = 100

#: Letters, digits, ``_ / -`` and the ``. + #`` of names such as node.js,
#: C++ and c# (inside or at the end of a tag: a leading ``#`` is Obsidian's
#: inline-tag mark and is dropped), and the middle dots that join the parts
#: of a transliterated name (莱昂德罗·内托, ジョン・スミス; NFKC has already
#: turned the half-width ･ into ・).
_TAG_OK = re.compile(r"^[\w/\-.+#\u00b7\u2027\u30fb]+$")
_TAG_PUNCT = "/-_.+#\u00b7\u2027\u30fb"
#: Lowercases ASCII letters only (other scripts are kept as written).
ASCII_LOWERCASE = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def normalize_tag(raw: object) -> str:
    """Normalise one tag by seed 000's rules or raise ``InvalidInput``.

    Trim; ASCII letters lowercased (other scripts, Chinese included, kept as
    written); runs of whitespace become ``-``; a leading ``#`` (Obsidian's
    inline form) is dropped; only letters, digits, ``_ / - . + #`` and a
    name's middle dots ``· ‧ ・`` may remain (``node.js``, ``c++``, ``c#``,
    ``莱昂德罗·内托``), and at least one letter or digit.
    Empty, or longer than ``MAX_TAG_CHARS``, is invalid.
    """
    if not isinstance(raw, str):
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            raw = str(raw)
        else:
            raise InvalidInput(f"tag {raw!r} is not text; write tags as a list of words")
    tag = unicodedata.normalize("NFKC", raw).strip().lstrip("#").strip()
    tag = re.sub(r"\s+", "-", tag).translate(ASCII_LOWERCASE)
    if not tag:
        raise InvalidInput("empty tag; a tag needs at least one letter or digit")
    if len(tag) > MAX_TAG_CHARS:
        raise InvalidInput(f"tag {tag[:30]!r}... is {len(tag)} characters; the limit is {MAX_TAG_CHARS}")
    if not _TAG_OK.match(tag) or tag.strip(_TAG_PUNCT) == "":
        raise InvalidInput(
            f"tag {str(raw)[:60]!r} has characters a tag cannot hold; use letters, digits, '/', '-', '_', '.', '+', '#' or a name's middle dot '·'"
        )
    return tag


def normalize_tags(raw: object) -> tuple[list[str], list[str]]:
    """Normalise a tag list. Returns ``(tags, rejected)``: valid tags deduplicated
    in first-seen order, and the raw values that were not valid tags.

    A single string is accepted as a comma-separated list (a common hand-edit),
    or, when every word of it starts with ``#``, as Obsidian's inline form
    (``"#books #scifi"``: two tags, not ``books-#scifi``).
    """
    if raw is None:
        return [], []
    if isinstance(raw, str):
        words = [w for w in re.split(r"[\s,]+", raw) if w]
        inline = bool(words) and all(w.startswith("#") for w in words)
        items: list[object] = list(words) if inline else [p for p in raw.split(",")]
    elif isinstance(raw, (list, tuple)):
        items = list(raw)
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        items = [raw]  # "tags: 2026" is one tag, as [2026] is
    else:
        return [], [repr(raw)]
    tags: list[str] = []
    seen: set[str] = set()  # a list would make 20,000 tags cost minutes
    rejected: list[str] = []
    for item in items:
        try:
            tag = normalize_tag(item)
        except InvalidInput:
            if not (isinstance(item, str) and not item.strip()) or not isinstance(raw, str):
                rejected.append(repr(item)[:60])
            continue
        if tag not in seen:
            seen.add(tag)
            tags.append(tag)
    return tags, rejected


def project_tag(prefix: str, project: str | None) -> str | None:
    """The tag that marks memories of ``project`` (``prefix`` + name,
    normalised as tags are: "March CLI" -> ``project/march-cli``), or None
    without a project (or when the name cannot be a tag)."""
    if not project or not project.strip():
        return None
    try:
        return normalize_tag(prefix + project.strip())
    except InvalidInput:
        return None
