"""``jsonstream``: a JSON array read one item at a time from a real file, in small pieces."""

from __future__ import annotations

import json

import pytest

from marchdb.lifecycle import jsonstream


def items(path, noun="item", problems_as_text=True):
    """``(number, item or the problem)``, as the ChatGPT reader consumes them."""
    with open(path, "rb") as fh:
        stream = jsonstream.TextStream(fh)
        assert stream.peek_non_space() == "["
        stream.pos += 1
        try:
            for n, obj in jsonstream.array_items(stream, noun):
                yield n, (str(obj) if problems_as_text and isinstance(obj, jsonstream.Problem) else obj)
        except jsonstream.NotUtf8 as exc:  # a cut inside a character too
            text = f"not UTF-8 at byte {exc.offset}"
            yield 0, text if problems_as_text else jsonstream.Problem(text)


@pytest.mark.parametrize("piece", [1, 3, 7, 64, 4096])
def test_every_item_whatever_the_piece_size(tmp_path, monkeypatch, piece):
    monkeypatch.setattr(jsonstream, "READ_BYTES", piece)
    data = [{"n": i, "text": f"条目 {i} 🚀 " * (i % 5 + 1), "nested": [[i], {"k": None}]} for i in range(40)]
    data += [12345, "a string item", 6.25e10, True, None]  # a number cut by a piece is read whole
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf \n" + json.dumps(data, ensure_ascii=False, indent=2).encode())
    assert [obj for _, obj in items(path)] == data


def test_a_cut_short_or_broken_array_gives_the_items_before(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonstream, "READ_BYTES", 16)
    path = tmp_path / "a.json"
    path.write_text('[{"a": 1}, {"a": 2}, {"a": ', encoding="utf-8")
    got = list(items(path, "row"))
    assert got[:2] == [(1, {"a": 1}), (2, {"a": 2})]
    assert got[2][0] == 3 and "row 3 is not valid JSON" in got[2][1] and "cut short" in got[2][1]
    path.write_text('[{"a": 1}, {"a": 2}', encoding="utf-8")
    assert "ends after row 2 without closing the list" in list(items(path, "row"))[-1][1]
    path.write_text('[{"a": 1}, {"a": nope}, {"a": 3}]', encoding="utf-8")
    assert [n for n, _ in items(path)] == [1, 2] and "item 2 is not valid JSON" in list(items(path))[-1][1]
    path.write_text('[{"a": 1} {"a": 2}]', encoding="utf-8")
    assert list(items(path))[-1] == (1, "item 1 is not followed by ',' or ']'; the ones before it were read")


def test_a_broken_item_is_reported_without_reading_the_rest_of_the_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[{"a": nope}, ' + ", ".join(['{"pad": "' + "x" * 1000 + '"}'] * 20_000) + "]")
    with open(path, "rb") as fh:
        stream = jsonstream.TextStream(fh)
        stream.peek_non_space()
        stream.pos += 1
        (got,) = list(jsonstream.array_items(stream, "item"))
        assert "item 1 is not valid JSON" in str(got[1])
        assert stream.read_bytes <= jsonstream.READ_BYTES  # not the 20 MB after it


def test_the_offset_of_a_byte_that_is_not_utf8_and_the_items_before_it(tmp_path, monkeypatch):
    path = tmp_path / "a.json"
    head = '[{"a": "好"}, {"b": 2}, {"a": "'.encode()
    path.write_bytes(head + b"\xff" + b'"}]')
    for piece in (5, 4096):  # the bad byte in a later piece, or in the same one as the good items
        monkeypatch.setattr(jsonstream, "READ_BYTES", piece)
        assert list(items(path)) == [(1, {"a": "好"}), (2, {"b": 2}), (0, f"not UTF-8 at byte {len(head)}")]


def test_generated_arrays_whole_and_cut_anywhere(tmp_path, monkeypatch):
    # Whole: every item, whatever the piece size. Cut anywhere: a prefix of the
    # items, then a problem — never a wrong item (a number cut in two).
    import random

    rng = random.Random(3)

    def value(depth=0):
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice(
                [rng.randint(-(10**9), 10**9), rng.random() * 1e6, "s" * rng.randint(0, 9) + "好🚀", True, None, 1e-7]
            )
        if r < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 4))}

    path = tmp_path / "a.json"
    for _ in range(300):
        data = [value() for _ in range(rng.randint(0, 10))]
        raw = json.dumps(data, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1])).encode()
        monkeypatch.setattr(jsonstream, "READ_BYTES", rng.choice([1, 2, 3, 5, 8, 13, 4096]))
        path.write_bytes(raw)
        assert [obj for _, obj in items(path)] == data
        path.write_bytes(raw[: rng.randint(1, max(1, len(raw) - 1))])
        got = [obj for _, obj in items(path, problems_as_text=False)]
        assert got and isinstance(got[-1], jsonstream.Problem) and got[:-1] == data[: len(got) - 1]
