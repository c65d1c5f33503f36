"""The common shape of frontmatter read without a YAML parser.

Almost every memory's frontmatter is a flat mapping: ``key: scalar`` lines,
a list as ``[a, "b"]`` or as ``- item`` lines under its key. Running
libyaml's parser and PyYAML's constructor on it was a fifth of a cold
sync's CPU. ``FlatReader.load`` reads that shape alone and gives the very
dict the YAML loader would: a plain scalar's type is decided by the
loader's own resolver and built by its own constructors (ints, times,
``yes``/``null``...); quoted scalars are taken only without escapes. Any
line it is not sure of makes it give up (``None``), and the caller runs the
full YAML loader, which also says what is wrong with a broken file.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

#: Most characters of a key read here (libyaml refuses implicit keys past 1,024).
MAX_KEY_CHARS = 200

_STR = "tag:yaml.org,2002:str"
#: Tags whose constructor builds a value from the scalar's text alone.
_SCALAR_TAGS = frozenset(
    (
        _STR,
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
    )
)
_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?: +(.*))?")
# What libyaml reads as a printable character, without the line breaks
# other than \n (\r, U+0085, U+2028, U+2029), the tab and the BOM.
_UNSURE_CHAR = re.compile("[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
# A plain scalar's first character may not be an indicator.
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_FLOW_FORBIDDEN = re.compile(r"[,\[\]{}:#'\"]")


class FlatReader:
    """Reads flat frontmatter as ``loader`` (a PyYAML loader class) would."""

    def __init__(self, loader: Any):
        self._loader = loader("")  # its resolver and constructors only; its parser never runs
        wildcard = loader.yaml_implicit_resolvers.get(None, [])
        self._resolvers: dict = {
            first: [*pairs, *wildcard] for first, pairs in loader.yaml_implicit_resolvers.items() if first
        }
        self._wildcard = wildcard
        self._constructors: dict = loader.yaml_constructors

    def load(self, head: str) -> dict | None:
        """The mapping ``head`` holds, or None when it is not of the flat shape."""
        if _UNSURE_CHAR.search(head):
            return None
        out: dict = {}
        pending: Any = None  # the key of an empty value, whose `- item` lines may follow
        items: list | None = None
        indent = -1
        for line in head.split("\n"):
            if not line.strip(" ") or line[0] == "#":
                continue
            if line[0] == " " or line[0] == "-":
                if pending is None:
                    return None
                stripped = line.lstrip(" ")
                if not stripped.startswith("- ") or (indent >= 0 and len(line) - len(stripped) != indent):
                    return None
                indent = len(line) - len(stripped)
                item = self._block_scalar(stripped[2:].lstrip(" "))
                if item is _UNSURE:
                    return None
                if items is None:
                    items = out[pending] = []
                items.append(item)
                continue
            match = _KEY_LINE.fullmatch(line)
            if match is None or len(match[1]) > MAX_KEY_CHARS:
                return None
            key = self._plain(match[1])
            if key is _UNSURE:
                return None
            text = (match[2] or "").rstrip(" ")
            pending, items, indent = None, None, -1
            if not text:
                pending = key
                out[key] = None
                continue
            value = self._flow_list(text) if text[0] == "[" else self._block_scalar(text)
            if value is _UNSURE:
                return None
            out[key] = value
        return out or None

    def _block_scalar(self, text: str) -> Any:
        text = text.rstrip(" ")
        if not text:
            return _UNSURE
        first = text[0]
        if first == '"':
            return _quoted(text, '"\\')
        if first == "'":
            return _quoted(text, "'")
        if first in _INDICATORS or ": " in text or " #" in text or text[-1] == ":":
            return _UNSURE
        return self._plain(text)

    def _flow_list(self, text: str) -> Any:
        if text[-1] != "]":
            return _UNSURE
        inner = text[1:-1]
        if not inner.strip(" "):
            return []
        out = []
        for raw in inner.split(","):
            item = raw.strip(" ")
            if not item:
                return _UNSURE
            if item[0] in "\"'" and len(item) >= 2 and item[-1] == item[0]:
                value = _quoted(item, '"\\' if item[0] == '"' else "'")
            elif item[0] in _INDICATORS or _FLOW_FORBIDDEN.search(item):
                return _UNSURE
            else:
                value = self._plain(item)
            if value is _UNSURE:
                return _UNSURE
            out.append(value)
        return out

    def _plain(self, text: str) -> Any:
        """A plain scalar as the loader types and builds it."""
        tag = _STR
        for candidate, regexp in self._resolvers.get(text[0], self._wildcard):
            if regexp.match(text):
                tag = candidate
                break
        if tag == _STR:
            return text
        if tag not in _SCALAR_TAGS:
            return _UNSURE
        try:
            return self._constructors[tag](self._loader, yaml.ScalarNode(tag, text))
        except (ValueError, OverflowError, yaml.YAMLError):
            return _UNSURE


def _quoted(text: str, forbidden: str) -> Any:
    """A quoted scalar on one line, or ``_UNSURE`` when it holds an escape
    other than a single-quoted one's ``''``."""
    inner = text[1:-1]
    if len(text) < 2 or text[-1] != text[0]:
        return _UNSURE
    if text[0] == "'" and "''" in inner:
        return _UNSURE if "'" in inner.replace("''", "") else inner.replace("''", "'")
    return _UNSURE if any(c in inner for c in forbidden) else inner


class _Unsure:
    """Not read here: the full YAML loader decides."""


_UNSURE: Any = _Unsure()
