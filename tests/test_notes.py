"""The memory file format: tags, paths, ids, parsing, rendering, chunking."""

from __future__ import annotations

import datetime as dt

import pytest

from marchdb.errors import InvalidInput
from marchdb.vault import chunks, notes
from marchdb.vault.chunks import chunk_body
from marchdb.vault.notes import (
    BadNote,
    bucket_path,
    new_id,
    normalize_tag,
    normalize_tags,
    parse_note,
    render_note,
    slugify,
    validate_id,
    week_of_month,
)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("  Cache  ", "cache"),
        ("Prefix Cache", "prefix-cache"),
        ("project/March-CLI", "project/march-cli"),
        ("snake_case", "snake_case"),
        ("记忆系统", "记忆系统"),
        ("上下文 Cache", "上下文-cache"),
        ("#obsidian", "obsidian"),
        ("Straße", "straße"),  # only ASCII letters are lowercased
        ("node.js", "node.js"),
        ("C++", "c++"),
        ("c#", "c#"),
        ("#C#", "c#"),  # Obsidian's leading mark goes, the language's stays
        (".NET", ".net"),
        # The middle dots between the parts of a transliterated name (Chinese ·,
        # Japanese ・, and the half-width form NFKC turns into it) are kept.
        ("莱昂德罗·内托", "莱昂德罗·内托"),
        ("ジョン・スミス", "ジョン・スミス"),
        ("ｼﾞｮﾝ･ｽﾐｽ", "ジョン・スミス"),
        ("Jean‧Paul", "jean‧paul"),
    ],
)
def test_normalize_tag(raw, expected):
    assert normalize_tag(raw) == expected


@pytest.mark.parametrize("raw", ["", "   ", "#", "a,b", "semi;colon", "---", "+.#", "a&b", "·", "·・‧", None, ["x"]])
def test_invalid_tags_are_refused(raw):
    with pytest.raises(InvalidInput):
        normalize_tag(raw)


def test_normalize_tags_dedupes_and_reports_rejects():
    tags, rejected = normalize_tags(["Cache", "cache ", "a;b", "中文", "CACHE"])
    assert tags == ["cache", "中文"]
    assert rejected == ["'a;b'"]
    assert normalize_tags("one, Two") == (["one", "two"], [])
    assert normalize_tags("machine learning") == (["machine-learning"], [])
    assert normalize_tags(2026) == normalize_tags([2026]) == (["2026"], [])  # a lone number was refused
    # Obsidian's inline form: "#books #scifi" is two tags (it was one, "books-#scifi").
    assert normalize_tags("#books #scifi, #c++") == (["books", "scifi", "c++"], [])


@pytest.mark.parametrize(
    "day, week", [(1, 1), (7, 1), (8, 2), (14, 2), (15, 3), (21, 3), (22, 4), (28, 4), (29, 5), (31, 5)]
)
def test_week_buckets(day, week):
    assert week_of_month(day) == week


def test_bucket_path_and_slug():
    when = dt.datetime(2026, 5, 14, 10, 30, tzinfo=dt.UTC)
    assert (
        str(bucket_path(when, slugify("Context cache ordering")))
        == "2026/05/week2/2026-05-14-context-cache-ordering.md"
    )
    assert slugify("记忆 召回: 去重!") == "记忆-召回-去重"
    assert slugify("../../etc/passwd") == "etc-passwd"
    assert slugify("!!!") == "memory"


def test_new_ids_sort_by_time_and_validate():
    a = new_id("Context cache", dt.datetime(2026, 5, 14, tzinfo=dt.UTC))
    b = new_id("Context cache", dt.datetime(2026, 5, 15, tzinfo=dt.UTC))
    assert a.startswith("mem_") and a.endswith("_context_cache")
    assert a < b
    assert validate_id(a) == a
    assert new_id("只有中文").startswith("mem_")


@pytest.mark.parametrize("bad", ["", " ", "a/b", "../x", "..", "a\x00b", "x" * 500, "has space", 42])
def test_bad_ids_are_refused(bad):
    with pytest.raises(InvalidInput):
        validate_id(bad)


GOOD = b"""---
id: mem_01hx_context_cache
name: Context cache ordering
description: keep volatile layers after stable ones
tags:
  - march/context
  - Cache
status: active
created_at: 2026-05-14T10:30:00.000Z
custom: kept
---

# Context cache ordering

Body.
"""


def test_parse_good_note():
    note = parse_note(GOOD, "x")
    assert note.id == "mem_01hx_context_cache"
    assert note.tags == ["march/context", "cache"]
    assert note.status == "active"
    assert note.created_at == "2026-05-14T10:30:00.000Z"
    assert note.extra == {"custom": "kept"}
    assert note.problems == []
    assert "Body." in note.body


@pytest.mark.parametrize(
    "data, kind",
    [
        (b"no frontmatter at all", "missing_id"),
        (b"---\nname: x\ndescription: y\n---\nbody", "missing_id"),
        (b"---\nid: [unclosed\n---\nbody", "parse_error"),
        (b"---\n- a\n- b\n---\nbody", "parse_error"),
        (b"---\njust a string\n---\nbody", "parse_error"),
        (b"---\nid: 12345\nname: n\n---\n", "invalid_id"),
        (b"\xff\xfe---\nid: x\n---", "not_utf8"),
        (b"---\nid: x\n---\n\x00\x01\x02binary", "not_utf8"),
    ],
)
def test_bad_notes(data, kind):
    with pytest.raises(BadNote) as info:
        parse_note(data, "stem")
    assert info.value.problem.kind == kind


def test_a_number_too_long_for_python_is_said_plainly():
    # It gave Python's "Exceeds the limit (4300 digits) ... use sys.set_int_max_str_digits()".
    for head in (b"id: m\npriority: " + b"9" * 5000, b"id: " + b"9" * 5000):
        with pytest.raises(BadNote, match="a number of more than 4,300 digits; quote it or shorten it"):
            parse_note(b"---\n" + head + b"\n---\nbody")


def test_soft_problems_still_parse():
    note = parse_note(b"---\nid: m1\ntags: one, two\nstatus: Deprecated\n---\nbody", "my-file")
    kinds = {p.kind for p in note.problems}
    assert {"missing_description", "missing_name", "invalid_field"} <= kinds
    assert note.name == "my-file"
    assert note.tags == ["one", "two"]
    assert note.status == "deprecated"


def test_impossible_dates_are_reported_not_fatal():
    note = parse_note(
        b"---\nid: m1\nname: n\ndescription: d\ncreated_at: 2026-02-30\nupdated_at: 2026-13-45\n---\nb", "f"
    )
    assert note.id == "m1" and note.created_at == "2026-02-30"
    assert [p.kind for p in note.problems] == ["invalid_field", "invalid_field"]
    assert "2026-02-30" in note.problems[0].detail
    assert parse_note(b"---\nid: m2\ncreated_at: 2026-02-03\n---\nb", "f").created_at == "2026-02-03T00:00:00.000Z"


def test_unterminated_frontmatter_says_what_is_missing():
    with pytest.raises(BadNote) as info:
        parse_note(b"---\nid: mem_x\nname: n\n", "f")
    assert info.value.problem.kind == "parse_error" and "no closing '---'" in info.value.problem.detail


def test_render_round_trips():
    note = parse_note(GOOD, "x")
    again = parse_note(render_note(note).encode(), "x")
    assert (again.id, again.name, again.description, again.tags, again.created_at, again.extra) == (
        note.id,
        note.name,
        note.description,
        note.tags,
        note.created_at,
        note.extra,
    )
    assert again.body.strip() == note.body.strip()


def test_chunks_are_bounded_paragraph_groups():
    body = "\n\n".join(["Short paragraph."] * 3 + ["x" * 2000, "第一句。" * 300])
    chunks = chunk_body(body, max_chars=800)
    assert all(0 < len(c) <= 800 for c in chunks)
    assert chunks[0].count("Short paragraph.") == 3
    assert "".join(chunks).count("x") == 2000
    assert chunk_body("") == []


def _note_with(text: str, **changes):
    from dataclasses import replace

    return replace(parse_note(text.encode(), "f"), updated_at="2026-12-01T00:00:00.000Z", **changes)


@pytest.mark.parametrize(
    "text, changes, fields, kept, gone",
    [
        # a quoted key is the same field: edited where it is, not added twice
        (
            '---\nid: m1\n"name": Old name\ndescription: d\n---\nb\n',
            {"name": "New"},
            ["name"],
            ["\nname: New\ndescription: d"],
            ["Old name", '"name"'],
        ),
        # a blank line inside a list belongs to the list
        (
            "---\nid: m1\nname: n\ntags:\n  - a\n\n  - b\n# after the tags\nstatus: active\n---\nb\n",
            {"tags": ["c"]},
            ["tags"],
            ["tags:\n  - c\n# after the tags\nstatus: active"],
            ["- a", "- b"],
        ),
        # a comment under a field we change stays
        (
            "---\nid: m1\nname: Old\n  # reviewed by Ann, keep\ndescription: d\n---\nb\n",
            {"name": "New"},
            ["name"],
            ["name: New\n  # reviewed by Ann, keep\ndescription: d"],
            ["Old"],
        ),
        # a folded multi-line description is replaced whole
        (
            "---\nid: m1\nname: n\ndescription: >\n  line one\n  line two\nstatus: active\n---\nb\n",
            {"description": "short"},
            ["description"],
            ["description: short\nstatus: active"],
            ["line one", "line two"],
        ),
    ],
)
def test_edit_note_touches_only_the_changed_fields(text, changes, fields, kept, gone):
    from marchdb.vault.edit import edit_note

    out = edit_note(text, _note_with(text, **changes), fields)
    assert out is not None
    for piece in kept:
        assert piece in out, piece
    for piece in gone:
        assert piece not in out, piece
    assert "updated_at: 2026-12-01T00:00:00.000Z" in out


def test_edit_note_declines_layouts_it_cannot_edit_safely():
    from marchdb.vault.edit import edit_note

    for text in ("---\n{id: m1, name: n}\n---\nb\n", "---\nid: m1\nname: a\nname: b\n---\nb\n"):
        assert edit_note(text, _note_with(text, name="x"), ["name"]) is None


def test_a_field_written_twice_is_reported():
    note = parse_note(b"---\nid: m1\nname: first\ndescription: d\nname: second\n---\nb", "f")
    assert note.name == "second"
    assert [p.detail for p in note.problems] == [
        "field 'name' appears more than once; the last one counts, delete the others"
    ]


def test_daily_log_entries_are_chunks_of_their_own_other_bodies_unchanged():
    body = "### 09:05 - Review\n\nShort.\n\n### 14:30 - Deploy fixed\n\nAlso short.\n\n### 9:45 fix\n\nx"
    assert chunks.chunk_body(body) == [
        "### 09:05 - Review\n\nShort.",
        "### 14:30 - Deploy fixed\n\nAlso short.",
        "### 9:45 fix\n\nx",
    ]
    plain = "Intro.\n\n### Not an entry\n\nText under a heading.\n\nMore."
    assert chunks.chunk_body(plain) == ["Intro.\n\n### Not an entry\n\nText under a heading.\n\nMore."]
    long_entry = "### 10:00 - Long\n\n" + "\n\n".join(["word " * 100] * 4)
    assert all(len(c) <= chunks.CHUNK_CHARS for c in chunks.chunk_body(long_entry))


def test_priority_field_values_and_a_bad_one_is_reported():
    assert [notes.priority_value(v) for v in ("high", " Low ", "normal", "高", "urgent", 5, None)] == [
        1.0,
        -1.0,
        0.0,
        1.0,
        None,
        None,
        None,
    ]
    good = notes.parse_note(b"---\nid: a\nname: n\ndescription: d\npriority: high\n---\nbody\n")
    assert good.extra["priority"] == "high" and not good.problems
    bad = notes.parse_note(b"---\nid: a\nname: n\ndescription: d\npriority: 7\n---\nbody\n")
    assert [p.kind for p in bad.problems] == ["invalid_field"] and "priority 7" in bad.problems[0].detail


def test_times_at_the_ends_of_the_calendar():
    from marchdb.clock import format_time, parse_time

    assert format_time(parse_time("0002-03-04T05:06:07Z")) == "0002-03-04T05:06:07.000Z"  # four digits
    assert parse_time("0001-01-01T00:00:00Z") is None  # year 0 in any zone west of UTC
    assert parse_time("9999-12-31T23:59:59-05:00") is None  # year 10000 in UTC
    assert parse_time("9999-06-01T00:00:00Z") is not None and parse_time("0001-06-01") is not None


def test_an_id_with_invisible_or_direction_characters_is_indexed_and_told():
    # "mem_a" and "mem_a\u200b" look the same; "\u202egnp.exe" reads as "exe.png".
    from marchdb.vault.notes import parse_note

    for ident, shown in (("mem_a\u200b", "U+200B"), ("mem_\u202egnp.exe", "U+202E")):
        note = parse_note(f'---\nid: "{ident}"\nname: n\ndescription: d\ntags: [t]\n---\nb\n'.encode(), "a")
        assert note.id == ident
        assert any(p.kind == "invalid_field" and shown in p.detail for p in note.problems), note.problems
    plain = parse_note(b"---\nid: mem_caf\xc3\xa9\nname: n\ndescription: d\ntags: [t]\n---\nb\n", "a")
    assert plain.problems == []


@pytest.mark.parametrize(
    ("value", "ids", "problems"),
    [
        ("mem_a", ["mem_a"], 0),
        ("[mem_a, mem_b, mem_a]", ["mem_a", "mem_b"], 0),
        ("[]", [], 0),
        ('"deploy notes"', ["deploy notes"], 0),  # hand-written ids may hold spaces
        ("3", [], 1),
        ("{a: b}", [], 1),
        ("[mem_b, 3, [x], '']", ["mem_b"], 3),  # a bad entry is left out on its own
        ("[" + ", ".join(f"m{i}" for i in range(21)) + "]", [f"m{i}" for i in range(20)], 1),
    ],
)
@pytest.mark.parametrize("key", notes.ID_FIELDS)
def test_supersedes_field(value, ids, problems, key):
    note = parse_note(f"---\nid: mem_new\nname: n\n{key}: {value}\n---\nBody.\n".encode())
    assert notes.field_ids(note.extra.get(key), key) == ids
    assert sum(key in p.detail for p in note.problems) == problems


def test_a_chat_keeps_what_the_user_said_apart_from_the_answers():
    body = (
        "Chat on 2023/05/29.\n\n**user**: I'm ordering a new bike helmet from Specialized.\n\n"
        "**assistant**: Good choice.\n\nSpecialized makes light helmets.\n\n"
        "**user**: My sister's dog is called Max.\n\n**assistant**: " + "Max is a fine name. " * 60
    )
    cut = chunks.body_chunks(body)
    assert [role for _, role in cut] == ["user", "assistant", "user", "assistant", "assistant"]
    assert cut[0][0] == "Chat on 2023/05/29.\n\n**user**: I'm ordering a new bike helmet from Specialized."
    assert cut[2][0] == "**user**: My sister's dog is called Max."
    assert all(len(text) <= chunks.CHUNK_CHARS for text, _ in cut)
    assert chunks.chunk_body(body) == [text for text, _ in cut]


def test_chat_turns_in_every_form_written_and_two_people_talking():
    imported = "**User** · 14:05\n\nfix the deploy\n\n**Assistant** · 14:06\n\nDone.\n\n**User**\n\nthanks\n\n**Assistant**\n\nok"
    assert [r for _, r in chunks.body_chunks(imported)] == ["user", "assistant", "user", "assistant"]
    bold_colon = "**User:** one\n\n**Claude:** two\n\n**User:** three\n\n**Claude:** four"
    assert [r for _, r in chunks.body_chunks(bold_colon)] == ["user", "assistant", "user", "assistant"]
    # two people: their turns are packed as paragraphs are, all of them a person's
    talk = (
        "**Caroline**: Hey Mel!\n\n**Melanie**: Hi!\n\n**Caroline**: I went to a support group.\n\n**Melanie**: Cool."
    )
    assert chunks.body_chunks(talk) == [(talk, "user")]


def test_bold_labels_in_a_note_are_not_a_chat():
    for body in (
        "**Pros**: fast\n\n**Cons**: loud",
        "**Pros**: fast\n\n**Cons**: loud\n\n**Verdict**: buy\n\n**Price**: 30",
        "**user**: one\n\n**user**: two\n\n**user**: three\n\n**assistant**: four",
    ):
        assert {role for _, role in chunks.body_chunks(body)} == {""}, body
