"""marchdb.engine.wire: json.loads and json.dumps without the json package's imports."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from marchdb.engine import wire


def values(rng: random.Random, depth: int = 0):
    kinds = ["int", "float", "str", "none", "bool"] + (["list", "dict"] if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, -1, 2**70, rng.randint(-(10**9), 10**9)])
    if kind == "float":
        return rng.choice([0.5, -0.0, 1e300, 1e-300, rng.uniform(-1e6, 1e6), math.inf, -math.inf])
    if kind == "str":
        alphabet = 'aZ "\\/\n\t\x00\x1f\x7f é中文\u2028\U0001f600\ud800'
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "list":
        return [values(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {str(values(rng, depth + 1)): values(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_it_writes_and_reads_what_json_writes_and_reads():
    rng = random.Random(7)
    for _ in range(2000):
        value = values(rng)
        for ascii_only in (True, False):
            text = json.dumps(value, ensure_ascii=ascii_only)
            assert wire.dumps(value, ensure_ascii=ascii_only) == text
            assert repr(wire.loads(text)) == repr(json.loads(text))  # repr: NaN-free, -0.0 kept
    assert math.isnan(wire.loads("NaN"))  # read as json reads it
    assert wire.loads(b' {"a": [1, 2]}\n') == {"a": [1, 2]}


@pytest.mark.parametrize("text", ["", " ", "{", '{"a": }', "[1] 2", "nul", '"open', "{'a': 1}", "[1,]"])
def test_what_json_refuses_it_refuses_with_a_value_error(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        wire.loads(text)


def test_what_json_cannot_write_it_cannot_write():
    looped: list = []
    looped.append(looped)
    for value in (looped, {1j: 1}, object(), {"a": {1, 2}}):
        with pytest.raises((TypeError, ValueError)):
            json.dumps(value)
        with pytest.raises((TypeError, ValueError)):
            wire.dumps(value)
    assert wire.dumps({"after": "a failure"}) == '{"after": "a failure"}'


def test_it_imports_no_more_than_the_accelerator():
    code = (
        "import sys; from marchdb.engine import wire; wire.dumps(wire.loads('{\"a\": [1]}'));"
        "print(sorted(m for m in ('json', 're', 'enum', 'functools') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
