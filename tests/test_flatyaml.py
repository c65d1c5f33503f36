"""Flat frontmatter read without the YAML parser: the loader's very dict, or nothing."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest
import yaml

from marchdb.vault import notes
from marchdb.vault.flatyaml import FlatReader

READER = FlatReader(notes.YAML_LOADER)


def _bench() -> Path:
    env = os.environ.get("MARCHDB_BENCH")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    return next((p / "shared" / "bench" for p in here.parents if (p / "shared" / "bench").is_dir()), here / "none")


BENCH = _bench()


def _shown(value: object) -> str:
    # repr tells True from 1 and 1.0, a date from its text; big sexagesimal ints need the digit limit off
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return repr(value)
    finally:
        sys.set_int_max_str_digits(limit)


def _same_or_unsure(head: str) -> bool:
    """The reader's answer for ``head`` is None or exactly the loader's.
    True when it answered."""
    got = READER.load(head)
    if got is None:
        return False
    try:
        want = yaml.load(head, Loader=notes.YAML_LOADER)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        pytest.fail(f"read {head!r} as {got!r}; the loader refuses it: {exc}")
    assert _shown(got) == _shown(want), head
    return True


COMMON = [
    # what render_note writes, what the benchmark vaults hold, what people type
    "id: mem_01\nname: Cache policy\ndescription: Keep it short.\ntags:\n- work\n- project/x\nstatus: active\n"
    "created_at: 2024-05-01T10:00:00Z\nupdated_at: 2024-05-02T10:00:00.250Z\n",
    'id: mem_x\nname: "这个错误"\ndescription: "Ro: x"\ntags:\n  - "idea"\n  - "决策"\nstatus: active\n'
    "created_at: '2021-01-01T06:27:48Z'\n",
    "id: a\ntags: []\n",
    "id: a\ntags: [a, 'b c', \"d\", 3]\npriority: high\nsupersedes: [mem_1, mem_2]\n",
    "id: a\nname: 'it''s here: a ''quote'''\n",
    "id: a\nname: C# and a:b and x.y/z\ndescription: 黑彩陶器(希腊语:μελανόμορφα)\n",
    "id: a\nn: 12\nf: 1.5\nb: yes\nz: ~\nempty:\nday: 2024-05-01\nbad_day: 2026-02-30\non: off\n",
    "# a comment\nid: a\n\n\nname: b   \n",
]

UNSURE = [
    "",  # the loader says None, not {}
    "# only a comment\n",
    "name: |\n  block\n",
    "name: >\n  folded\n",
    "name: a\n  continued on the next line\n",
    "name: 'two\n\n  lines'\n",
    'name: "an \\"escape\\""\n',
    "name: &anchor a\nother: *anchor\n",
    "<<: {a: 1}\n",
    "name: !!str 1\n",
    "tags: [a, [b]]\n",
    "tags: [a, {b: c}]\n",
    "tags: [a,]\n",
    'tags: ["a, b"]\n',
    "tags:\n  - a\n    - b\n",
    "tags:\n  - a\n - b\n",
    "tags:\n  -\n",
    "tags:\n  - a: b\n",
    "name: a # comment\n",
    "name: a: b\n",
    "name:value\n",
    "name: a\n- b\n",
    "  name: a\n",
    "name: \ta\n",
    "name: a\r\nid: b\r\n",
    "name: a\u2028b\n",
    "name: a\x85b\n",
    "name: \ufeffa\n",
    "name: a\x07\n",
    "? name\n: a\n",
    "%YAML 1.1\n---\nname: a\n",
    "name: -1\n",
    "name: @a\n",
    "k" * 1100 + ": a\n",
    "id: 1" + "0" * 5000 + "\n",
    "=: a\n",
    "name: 'a'b'\n",
]


@pytest.mark.parametrize("head", COMMON)
def test_common_shapes_are_read_as_the_loader_reads_them(head):
    assert _same_or_unsure(head), f"{head!r} fell back to the YAML parser"


@pytest.mark.parametrize("head", UNSURE)
def test_other_shapes_are_left_to_the_loader(head):
    assert READER.load(head) is None


_ATOMS = [
    *"aZ09 :#-\"'\\,[]{}&*!|>%@`?.~\t\xa0\u2028\x85\ufeff中é+_=<eExonyTF\r\n/",
    *"yes No null ~ .inf -.5 0x1F 0o7 1_000 1:20 2021-01-01 2021-02-30 2021-01-01T10:00:00Z".split(),
    *".NaN on OFF True 1.5 0 007 1e3 +1 0b101 12:30:00 << = mem_x --- ... ''''".split(),
    "2021-01-01 10:00:00",
    "1" * 5000,
    " - ",
    ": ",
    " #",
    "'it''s'",
]
_KEYS = ["id", "name", "tags", "true", "null", "on", "1", "a-b", "_x", "Y", "k" * 1100, "x y", "<<", "=", "é"]
_SAFE = [
    *"mem_x active C# x.y yes 1 -1 1.5 ~ null 2021-01-01T10:00:00Z 2021-02-30 2021-01-01".split(),
    *["a b", "a:b", "中文 名字", "a  b", "a\xa0b", "\xa0a", "'s # x'", '"q: x"', '"a\\"b"', '""', "''"],
    *["'it''s'", "''''", "'a'''", "'''a'", "a''b"],
]


def _value(rng: random.Random) -> str:
    return "".join(rng.choice(_ATOMS) for _ in range(rng.randint(0, 6)))


def _wild_head(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        if kind < 0.5:
            lines.append(rng.choice(_KEYS) + rng.choice([":", ": ", ":  ", ":\t", " :", ""]) + _value(rng))
        elif kind < 0.65:
            lines.append(f"{rng.choice(_KEYS)}: [{', '.join(_value(rng) for _ in range(rng.randint(0, 3)))}]")
        elif kind < 0.8:
            lines.append(f"{rng.choice(_KEYS)}:")
            for _ in range(rng.randint(0, 3)):
                lines.append(" " * rng.choice([0, 2, 2, 4]) + rng.choice(["- ", "-", "-  "]) + _value(rng))
        elif kind < 0.9:
            lines.append(rng.choice(["", "   ", "# c", " # c", "#"]))
        else:
            lines.append(_value(rng))
    return "\n".join(lines) + rng.choice(["", "\n"])


def _tame_head(rng: random.Random) -> str:
    lines = []
    keys = ["id", "name", "description", "tags", "status", "created_at", "x", "true", "on", "1"]
    for key in rng.sample(keys, rng.randint(1, 6)):
        kind = rng.random()
        if kind < 0.6:
            lines.append(f"{key}: {rng.choice(_SAFE)}{rng.choice(['', ' ', '  '])}")
        elif kind < 0.8:
            lines.append(f"{key}: [{', '.join(rng.choice(_SAFE) for _ in range(rng.randint(0, 3)))}]")
        else:
            lines.append(f"{key}:")
            indent = " " * rng.choice([0, 2])
            lines += [indent + rng.choice(["- ", "-  "]) + rng.choice(_SAFE) for _ in range(rng.randint(0, 3))]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("make, least", [(_wild_head, 50), (_tame_head, 1000)])
def test_random_frontmatter_is_read_as_the_loader_reads_it_or_left_to_it(make, least):
    rng = random.Random(20261207)
    answered = sum(_same_or_unsure(make(rng)) for _ in range(4000))
    assert answered >= least  # the property says something about the reader, not only about its refusals


def test_a_memory_written_by_marchdb_is_read_without_the_parser():
    note = notes.Note(
        id="mem_01jdx3k7p2mq_cache",
        name="Cache: keep it 'short'",
        description="yes",
        tags=["work", "项目"],
        status="active",
        created_at="2024-05-01T10:00:00Z",
        updated_at="2024-05-02T10:00:00.125Z",
        body="Body.\n",
        extra={"priority": "high", "supersedes": ["mem_a", "mem_b"], "count": 3},
    )
    assert _same_or_unsure(notes._FM_HANDLER.split(notes.render_note(note))[0])


@pytest.mark.skipif(not BENCH.is_dir(), reason="the shared benchmark sets are not beside this checkout (MARCHDB_BENCH)")
@pytest.mark.parametrize("name", ["cranfield", "chats", "cmrc2018", "locomo"])
def test_the_benchmark_vaults_are_read_as_the_loader_reads_them(name):
    answered = total = 0
    for line in (BENCH / name / "memories.jsonl").read_text(encoding="utf-8").splitlines():
        m = json.loads(line)
        created = notes.parse_time(m.get("created_at"))
        note = notes.Note(
            id=m["id"],
            name=m["name"],
            description=m.get("description") or "",
            tags=notes.normalize_tags(m.get("tags") or [])[0],
            status="active",
            created_at=notes.format_time(created) if created else None,
            updated_at=None,
            body="",
            extra=m.get("extra") or {},
        )
        answered += _same_or_unsure(notes._FM_HANDLER.split(notes.render_note(note))[0])
        total += 1
    assert answered >= 0.95 * total
