"""Reading a large JSON array one item at a time (``marchdb import chatgpt``).

A ChatGPT export is one JSON array of up to a gigabyte. Read whole and
decoded, it held ~4x its size in memory (a 243 MB export with emoji: 1 GB);
here the file is decoded in growing pieces and each item parsed as soon as
it is complete, so memory holds about one item. Errors keep the byte offset
in the file (a character cut between two pieces or by the end of the file
included), and a malformed or cut-short item ends the reading with the items
before it given.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator

#: Bytes read at a time (more when an item is larger: re-parsing stays linear).
READ_BYTES = 1024 * 1024
#: The largest one item may be, in characters.
MAX_ITEM_CHARS = 128 * 1024 * 1024
#: Characters from the end of the text read so far where an item or an error
#: may only mean the piece cut it ("nu" of null, "1" of 1e-07): read on first.
NEAR_END = 32


class NotUtf8(Exception):
    """The file is not UTF-8 from byte ``offset`` on."""

    def __init__(self, offset: int):
        super().__init__(offset)
        self.offset = offset  # in the file


class Problem:
    """Why reading stopped (an item of the array is never one: a JSON string
    item stays a ``str``)."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Problem({self.text!r})"


class TextStream:
    """A UTF-8 file as text, read in growing pieces; ``buf[pos:]`` is what is left to parse."""

    def __init__(self, fh):
        self.fh = fh
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False
        self.read_bytes = 0  # of the file so far
        self.started = False  # any text decoded yet (a byte-order mark is dropped from the first)
        self._bad: NotUtf8 | None = None  # raised once the text before it is used up

    def fill(self) -> bool:
        """Read more (at least as much as is left, so re-parsing stays linear); False at the end.
        Raises ``NotUtf8`` only when the text before a bad byte has been used up,
        so every item before it is still given."""
        if self._bad is not None:
            raise self._bad
        if self.eof:
            return False
        chunk = self.fh.read(max(READ_BYTES, 2 * (len(self.buf) - self.pos)))
        held = self.decoder.getstate()[0]  # bytes of a character cut by the last piece
        try:
            text = self.decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:  # exc.start counts from the held bytes
            self._bad = NotUtf8(self.read_bytes - len(held) + exc.start)
            text = (held + chunk)[: exc.start].decode("utf-8")
        if not self.started and text:
            self.started = True
            text = text.removeprefix("\ufeff")  # a byte-order mark
        self.read_bytes += len(chunk)
        self.buf, self.pos = self.buf[self.pos :] + text, 0
        self.eof = not chunk
        return bool(text) or self._bad is None or self.fill()

    def fill_or_stop(self) -> bool:
        """``fill``, but False instead of ``NotUtf8`` (raised again by the next ``fill``)."""
        try:
            return self.fill()
        except NotUtf8:
            return False

    def rest(self) -> str:
        """Everything left, read whole (for a small file, or a form that cannot be streamed)."""
        while self.fill():
            pass
        return self.buf[self.pos :]

    def peek_non_space(self) -> str:
        """The next character that is not white space ('' at the end), not consumed."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf) or not self.fill():
                return self.buf[self.pos : self.pos + 1]


def _incomplete(exc: json.JSONDecodeError, stream: TextStream) -> bool:
    """Whether a decoding error may only mean that the item goes on past
    what was read so far (else it is a real error, reported at once: reading
    on would hold the rest of the file in memory for nothing)."""
    return exc.pos >= len(stream.buf) - NEAR_END or exc.msg.startswith("Unterminated string")


def array_items(stream: TextStream, noun: str) -> Iterator[tuple[int, object]]:
    """``(number, item)`` of a JSON array whose ``[`` was just read, one item
    decoded at a time; a problem ends it as ``(number, Problem)`` (the items
    before it were given). Raises ``NotUtf8``."""
    decoder = json.JSONDecoder()
    number = 0
    while True:
        nxt = stream.peek_non_space()
        if not nxt:
            why = f"the file ends after {noun} {number} without closing the list (cut short: half-written?)"
            yield number + 1, Problem(why)
            return
        if nxt == "]":
            return
        number += 1
        while True:
            try:
                obj, end = decoder.raw_decode(stream.buf, stream.pos)
                # An item ending near the end of the text read so far may go on
                # ("1" of "1e-07" cut by a piece): read on, and decode it again.
                if end <= len(stream.buf) - NEAR_END or not stream.fill_or_stop():
                    break
                continue
            except RecursionError:
                yield (
                    number,
                    Problem(f"{noun} {number} is nested too deeply to read; the rest of the file was not read"),
                )
                return
            except json.JSONDecodeError as exc:
                cut = _incomplete(exc, stream)
                if cut and len(stream.buf) - stream.pos <= MAX_ITEM_CHARS and stream.fill():
                    continue
                if cut and stream.eof:
                    why = f"is not valid JSON ({exc.msg}); the file may be cut short"
                elif cut:
                    why = f"is over {MAX_ITEM_CHARS:,} characters or not valid JSON ({exc.msg})"
                else:
                    why = f"is not valid JSON ({exc.msg} at character {exc.pos - stream.pos} of it)"
                yield number, Problem(f"{noun} {number} {why}; the ones before it were read")
                return
        stream.pos = end
        after = stream.peek_non_space()
        if after not in (",", "]", ""):
            # Junk after it, or a number cut short ("459292." of 459292.238): not given.
            yield number, Problem(f"{noun} {number} is not followed by ',' or ']'; the ones before it were read")
            return
        if not after and isinstance(obj, (int, float)) and not isinstance(obj, bool):
            # The file ends inside or right after a number: it may be cut short.
            yield number, Problem(f"the file ends in {noun} {number} (cut short: half-written?)")
            return
        yield number, obj
        if after == ",":
            stream.pos += 1
