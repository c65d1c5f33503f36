"""Text safe to show: one line, no terminal controls, no lone surrogates.

Names, descriptions and error messages come from files and hosts marchdb
does not control; before they reach a terminal, a hook's injected context or
a log line they pass through here. Only the standard library.
"""

from __future__ import annotations

import re


def mend_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (``"\\ud800"`` in JSON: half an emoji
    a host or an export cut in two) as U+FFFD, a pair joined into its
    character: text that can be stored and matched."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def escaped(text: str, keep: str = " ") -> str:
    """``text`` with the characters a terminal would act on shown escaped
    (``\\n``, ``\\x1b``, ``\\u202e``, ``\\udce9``), except those in ``keep``:
    control characters (C0, DEL, C1: a newline, an escape sequence),
    text-direction controls (they reorder what follows) and lone surrogates
    (bytes of a name that are not UTF-8). Other characters print as they are:
    a no-break space or the joiner inside an emoji is text, not a command."""
    return ACTS_ON_TERMINAL.sub(lambda m: m.group() if m.group() in keep else repr(m.group())[1:-1], text)


#: Characters that reorder the text around them (bidi embeddings, overrides,
#: isolates): a name holding U+202E before "gnp.exe" reads as "exe.png".
DIRECTION_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


#: Control characters (C0, DEL, C1) and direction controls, as a regex class.
_CONTROLS = "\x00-\x1f\x7f-\x9f" + "".join(sorted(DIRECTION_CONTROLS))


#: What ``escaped`` shows escaped: those, and lone surrogates.
ACTS_ON_TERMINAL = re.compile(f"[{_CONTROLS}\ud800-\udfff]")


_DROPPED = re.compile(f"[{_CONTROLS}]")


def plain_line(text: str) -> str:
    """``text`` as one line of plain text: runs of whitespace as one space,
    control and direction-control characters (an escape sequence, U+202E) dropped."""
    return _DROPPED.sub("", " ".join(text.split()))


def unix_line_ends(text: str) -> str:
    """``text`` with CRLF and lone CR line ends made ``\\n``. A lone CR (a
    progress bar piped in, a chat pasting terminal output, old Mac text) left
    in a memory makes a file that cannot be edited in place: a log's next
    entry, a status change or an archive would be refused."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def one_line(message: object) -> str:
    """``message`` as one line of a terminal (``escaped``): an error is always one line."""
    return escaped(str(message))


#: Characters of an error message shown at most: it may quote what it was
#: given (SQLite's "near ...", a path, an option's value), and a 10 MB line
#: once came back whole.
MAX_ERROR_CHARS = 600


def bounded(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` with its middle left out past ``limit`` characters, saying
    how much: the start says what went wrong, the end what to do next."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    for _ in range(2):  # the note's own length depends on the count it gives
        note = f" … ({len(text) - head - tail:,} characters left out) … "
        head = max(0, limit - tail - len(note))
    return text[:head] + f" … ({len(text) - head - tail:,} characters left out) … " + text[-tail:]


def error_line(message: object) -> str:
    """An error (or a note) as one bounded line of a terminal: ``one_line``, then ``bounded``."""
    return bounded(one_line(message))


def cut_bytes(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, never inside a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")
