"""How fast secrets are looked for, and that the shared sets lose nothing.

    .venv/bin/python tools/bench_redact.py [--runs 3] [--sync 4]

For each shared benchmark set (and all of them together): the texts
(names, descriptions, bodies, queries), their size, the time ``redact.find``
takes over them (the best of ``--runs``), the throughput, and the markers it
would put in (0 is right: none of them holds a secret). Then the one-off cost
of compiling the patterns, which a process pays at its first redaction.

``--sync N``: N pairs of cold syncs without embedding of the four sets as one
vault, in turn with sync's withholding (``sync.indexable``) and without it,
each in a fresh home: the CPU time and wall time of each, and their ratio.
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
    parser.add_argument("--sync", type=int, default=0, help="pairs of cold syncs with and without withholding")
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
    if args.sync:
        sync_pairs(args.sync)


def sync_pairs(pairs: int) -> None:
    import tempfile

    from bench_recall import write_vault

    from marchdb.index import sync
    from marchdb.store import Store

    memories = []
    for name in SETS:
        with open(BENCH / name / "memories.jsonl", encoding="utf-8") as f:
            memories += [{**json.loads(line), "id": f"{name}_{json.loads(line)['id']}"} for line in f if line.strip()]
    work = Path(tempfile.mkdtemp(prefix="bench-redact-"))
    write_vault(memories, work / "vault")
    withholding = sync.indexable
    rows = []
    for n in range(pairs):
        pair = {}
        for label in ("without", "with"):
            sync.indexable = withholding if label == "with" else (lambda note: (note, []))
            store = Store(home=work / f"home-{n}-{label}", root=work / "vault", model=str(work / "none.gguf"))
            wall, cpu = time.perf_counter(), time.process_time()
            store.sync(embed=False)
            pair[label] = (time.perf_counter() - wall, time.process_time() - cpu)
            store.close()
        sync.indexable = withholding
        rows.append(pair)
    print(f"\ncold sync without embedding, {len(memories):,} files: without / with withholding")
    print(f"{'pair':>4} {'cpu without':>12} {'cpu with':>9} {'ratio':>6} {'wall without':>13} {'wall with':>10}")
    for n, pair in enumerate(rows, 1):
        (w0, c0), (w1, c1) = pair["without"], pair["with"]
        print(f"{n:4} {c0:11.2f}s {c1:8.2f}s {c1 / c0:6.2f} {w0:12.2f}s {w1:9.2f}s")


if __name__ == "__main__":
    main()
