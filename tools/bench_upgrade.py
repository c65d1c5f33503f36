#!/usr/bin/env python
"""What an upgrade that changes the index's schema costs, against a no-model rebuild.

A new marchdb whose schema differs rebuilds the index from the Markdown files
at the next command. Vectors are carried over (``marchdb/index/carry.py``), so
the upgrade should cost a scan, not an embedding of every text. For a vault of
``--size`` memories (tools/bench_sync.py's generator) this script, in
alternating rounds:

1. fills the index with one vector per text under the real default model's
   fingerprint (a stand-in computes them: their values do not matter here, and
   embedding 3,000 memories for real takes most of an hour on 2 cores), marks
   the index as made by an older schema, then times ``marchdb sync`` as a whole
   process: the upgrade, with the model loaded;
2. times ``marchdb rebuild --no-embed`` as a whole process: the floor (files
   and keyword index, no model).

It prints both, their ratio (target: <= 2), and how many texts the upgrade
embedded (target: 0).

    .venv/bin/python tools/bench_upgrade.py --size 3000 --rounds 3
"""

from __future__ import annotations

# marchdb before numpy, as in every marchdb process: it sets OpenBLAS's spin timeout,
# which OpenBLAS reads when numpy loads (see tools/bench_latency.py).
import marchdb  # noqa: F401  # isort: skip

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sync import ensure_vault  # noqa: E402

from marchdb.config import load_config  # noqa: E402
from marchdb.embedding import Embedder, identity  # noqa: E402
from marchdb.embedding.build import build_model  # noqa: E402
from marchdb.index import calibrate, db, vectors  # noqa: E402
from marchdb.index.db import _connect_raw  # noqa: E402
from marchdb.store import Store  # noqa: E402

MARCHDB = str(Path(sys.executable).with_name("marchdb"))


class StandIn(Embedder):
    """Vectors of the right size under the real model's fingerprint."""

    def __init__(self, fingerprint: str, dim: int):
        self.fingerprint, self.dim = fingerprint, dim

    def embed(self, texts, kind, progress=None):
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32)


def timed(args: list[str], env: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    proc = subprocess.run([MARCHDB, *args, "--json"], capture_output=True, text=True, env=env, timeout=3600)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"marchdb {' '.join(args)} failed: {proc.stderr}")
    return seconds, json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path(".bench"))
    args = ap.parse_args()

    vault, _ = ensure_vault(args.work / "sync", args.size, lambda *a: None)
    work = Path(tempfile.mkdtemp(prefix="bench-upgrade-"))
    home, models = work / "home", work / "models"
    model = build_model("e5", models)
    fingerprint = identity.fingerprint_of(model)
    assert fingerprint
    env = {
        **os.environ,
        "MARCH_HOME": str(home),
        "MARCH_MEMORY_ROOT": str(vault),
        "MARCH_MODELS_DIR": str(models),
        "MARCH_DAEMON": "0",
    }
    cfg = load_config(home=home, root=vault, env={"MARCH_MODELS_DIR": str(models)})
    upgrade, floor, embedded = [], [], []
    calibration: list = []
    for _ in range(args.rounds):
        with Store(cfg) as store:
            store.sync(embed=False)
            texts = vectors.embed_pending(store.con, StandIn(fingerprint, 384), cfg.index_path)
            # The model's calibration, as an index that was in use holds it
            # (measured once with the real model, then set in each round).
            if not calibration:
                calibrate.ensure(store.con, store.embedder())
                calibration[:] = db.rows(store.con, "SELECT key, value FROM meta WHERE key LIKE 'calibration%'")
            with db.transaction(store.con):
                for row in calibration:
                    db.set_meta(store.con, row["key"], row["value"])
        con = _connect_raw(cfg.index_path)
        con.pragma("user_version", db.SCHEMA_VERSION - 1)
        con.close()
        seconds, report = timed(["sync"], env)
        upgrade.append(seconds)
        embedded.append(report["embedded"])
        seconds, _ = timed(["rebuild", "--no-embed"], env)
        floor.append(seconds)
    up, fl = statistics.median(upgrade), statistics.median(floor)
    print(f"vault: {args.size} memories, {texts} texts with vectors; {args.rounds} rounds, alternating")
    print("| what | median s | runs |")
    print("|---|---|---|")
    print(
        f"| schema upgrade: `marchdb sync` (the default model configured) | {up:.2f} | {' '.join(f'{s:.2f}' for s in upgrade)} |"
    )
    print(f"| `marchdb rebuild --no-embed` (no model) | {fl:.2f} | {' '.join(f'{s:.2f}' for s in floor)} |")
    print(f"\nupgrade / no-model rebuild: {up / fl:.2f}x (target <= 2); texts embedded by the upgrade: {embedded}")


if __name__ == "__main__":
    main()
