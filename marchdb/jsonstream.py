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


class NotUtf8(Exception):
    """The file is not UTF-8 from byte ``offset`` on."""

    def __init__(self, offset: int):
        super().__init__(offset)
        self.offset = offset  # in the file


class TextStream:
    """A UTF-8 file as text, read in growing pieces; ``buf[pos:]`` is what is left to parse."""

    def __init__(self, fh):
        self.fh = fh
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False
        self.read_bytes = 0  # of the file so far
        self.started = False  # any text decoded yet (a byte-order mark is dropped from the first)

    def fill(self) -> bool:
        """Read more (at least as much as is left, so re-parsing stays linear); False at the end."""
        if self.eof:
            return False
        chunk = self.fh.read(max(READ_BYTES, 2 * (len(self.buf) - self.pos)))
        held = len(self.decoder.getstate()[0])  # bytes of a character cut by the last piece
        try:
            text = self.decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:  # exc.start counts from the held bytes
            raise NotUtf8(self.read_bytes - held + exc.start) from None
        if not self.started and text:
            self.started = True
            text = text.removeprefix("\ufeff")  # a byte-order mark
        self.read_bytes += len(chunk)
        self.buf, self.pos = self.buf[self.pos :] + text, 0
        self.eof = not chunk
        return True

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


def array_items(stream: TextStream, noun: str) -> Iterator[tuple[int, object]]:
    """``(number, item)`` of a JSON array whose ``[`` was just read, one item
    decoded at a time; a problem ends it as ``(number, text saying what)``
    (the items before it were given)."""
    decoder = json.JSONDecoder()
    number = 0
    while True:
        nxt = stream.peek_non_space()
        if not nxt:
            yield (
                number + 1,
                f"the file ends after {noun} {number} without closing the list (cut short: half-written?)",
            )
            return
        if nxt == "]":
            return
        number += 1
        while True:
            try:
                obj, end = decoder.raw_decode(stream.buf, stream.pos)
                break
            except RecursionError:
                yield number, f"{noun} {number} is nested too deeply to read; the rest of the file was not read"
                return
            except json.JSONDecodeError as exc:
                # Most often the piece read so far ends inside the item: read on.
                if len(stream.buf) - stream.pos <= MAX_ITEM_CHARS and stream.fill():
                    continue
                if stream.eof:
                    why = f"is not valid JSON ({exc.msg}); the file may be cut short"
                else:
                    why = f"is over {MAX_ITEM_CHARS:,} characters or not valid JSON ({exc.msg})"
                yield number, f"{noun} {number} {why}; the ones before it were read"
                return
        stream.pos = end
        yield number, obj
        if stream.peek_non_space() == ",":
            stream.pos += 1
