"""How fast secrets are looked for, and that the shared sets lose nothing.

    .venv/bin/python tools/bench_redact.py [--runs 3]

For each shared benchmark set (and all of them together): the texts
(names, descriptions, bodies, queries), their size, the time ``redact.find``
takes over them (the best of ``--runs``), the throughput, and the markers it
would put in (0 is right: none of them holds a secret). Then the one-off cost
of compiling the patterns, which a process pays at its first redaction.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_data import BENCH

from marchdb import redact

SETS = ("locomo", "chats", "cmrc2018", "cranfield")


def texts_of(name: str) -> list[str]:
    out = []
    for path in sorted((BENCH / name).glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    out += [row[k] for k in ("name", "description", "body", "text") if isinstance(row.get(k), str)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    redact.find("warm up: password = x1")
    rows = []
    every: list[str] = []
    for name in (*SETS, "all"):
        texts = every if name == "all" else texts_of(name)
        if name != "all":
            every += texts
        size = sum(len(t.encode("utf-8")) for t in texts)
        best = float("inf")
        markers = 0
        for _ in range(args.runs):
            started = time.perf_counter()
            markers = sum(len(redact.find(t)) for t in texts)
            best = min(best, time.perf_counter() - started)
        rows.append((name, len(texts), size / 1e6, best, size / 1e6 / best, markers))
    print(f"{'set':10} {'texts':>7} {'MB':>6} {'seconds':>8} {'MB/s':>6} {'markers':>8}")
    for name, n, mb, sec, rate, markers in rows:
        print(f"{name:10} {n:7,} {mb:6.2f} {sec:8.3f} {rate:6.1f} {markers:8}")
    code = (
        f"import time, sys; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r}); "
        "t = time.perf_counter(); from marchdb import redact; "
        "i = time.perf_counter(); redact.find('x'); print(i - t, time.perf_counter() - i)"
    )
    imports, compiles = [], []
    for _ in range(5):
        out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
        a, b = (float(x) for x in out.stdout.split())
        imports.append(a)
        compiles.append(b)
    print(
        f"import marchdb.redact (python -I -S, the median of 5): {sorted(imports)[2] * 1000:.1f} ms; "
        f"compiling its patterns at the first redaction: {sorted(compiles)[2] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
