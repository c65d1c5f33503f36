"""JSON for the hook's fast path, on the same C code the ``json`` package runs.

A host starts a hook process for every prompt and tool call. The ``json``
package imports ``re``, ``enum``, ``functools`` and ``collections`` on the
way (most of a bare Python start again, on the small machines marchdb runs
on); its C accelerator ``_json``, which does the actual work of
``json.loads`` and ``json.dumps``, imports nothing. ``loads`` and ``dumps``
here are those two calls made without the package: same results (held by
``tests/test_wire.py``), same errors (a ``ValueError``). Anything not on the
hook's path uses ``json``.
"""

from __future__ import annotations

try:
    import _json
except ImportError:  # a Python without the accelerator: the package does the same
    _json = None  # type: ignore[assignment]


class _Decoding:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity, as json.loads reads them


def _no_default(obj: object) -> object:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


_WHITESPACE = " \t\n\r"
# It reads those attributes of any object (typeshed names only JSONDecoder's own class).
_scan = _json.make_scanner(_Decoding()) if _json is not None else None  # type: ignore[arg-type]


def loads(text: str | bytes) -> object:
    """``json.loads(text)``."""
    if _scan is None:
        import json

        return json.loads(text)
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def dumps(obj: object, ensure_ascii: bool = True) -> str:
    """``json.dumps(obj, ensure_ascii=ensure_ascii)``."""
    if _json is None:
        import json

        return json.dumps(obj, ensure_ascii=ensure_ascii)
    string = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    if isinstance(obj, str):
        return string(obj)
    # A new encoder each time, as json.dumps makes: its markers (the
    # containers being encoded, to refuse one that holds itself) start empty.
    encode = _json.make_encoder({}, _no_default, string, None, ": ", ", ", False, False, True)
    return "".join(encode(obj, 0))
