"""llama.cpp's CPU paths for the embedding model, on this machine: which one
marchdb chooses, and what each costs.

For each setting of llama.cpp's extra buffer types (``on``: AMX or repacked
weights, where the CPU and the build have them; ``off``: plain CPU buffers)
a child process loads the model and times passages (a sync) and queries (a
hook), rounds alternating so that the machine's load falls on both alike. A
child that dies of a signal is reported as such: that is what the decision
in ``marchdb/embedding/cpu.py`` keeps users away from.

    python tools/bench_cpu_paths.py [--model PATH] [--rounds 3] [--python /other/venv/bin/python]

``--python`` runs the children with another interpreter (another build of
llama-cpp-python, e.g. one compiled for AVX2 only: ``CMAKE_ARGS="-DGGML_NATIVE=OFF
-DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF ..." pip install llama-cpp-python``)
with this checkout on its path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, random, sys, time
from marchdb.embedding.llama import LlamaEmbedder
from marchdb.embedding import backend
path, mode, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
emb = LlamaEmbedder(path, threads=threads, extra_buffers=(mode == "on"))
random.seed(7)
words = ("deploy cache model vault memory sqlite friday tuesday recall prompt index vector engine host hook "
         "save open search file review weekend broke twice migration worker restart").split()
passages = [" ".join(random.choice(words) for _ in range(110)) for _ in range(48)]
queries = ["why does the prompt cache miss when we deploy on friday?", "如何重置密码？", "what did we decide about reviews?"]
emb.embed(passages[:4], "passage"); emb.embed(queries[:1], "query")
t = time.perf_counter(); emb.embed(passages, "passage"); tp = time.perf_counter() - t
times = []
for i in range(30):
    t = time.perf_counter(); emb.embed([queries[i % 3]], "query"); times.append(time.perf_counter() - t)
times.sort()
lc = backend.load_llama_cpp()
print(json.dumps({"passages_per_s": len(passages) / tp, "query_ms": 1000 * times[len(times) // 2],
                  "build": backend.system_info(lc).strip()}))
"""


def run_child(python: str, model: str, mode: str, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [python, "-c", CHILD, model, mode, str(threads)], capture_output=True, text=True, env=env, timeout=900
    )
    if proc.returncode < 0:
        return {"crash": signal.Signals(-proc.returncode).name}
    if proc.returncode != 0:
        return {"crash": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF file (default: the e5 recipe, built into a temp folder)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--python", default=sys.executable, help="interpreter whose llama-cpp-python build is measured")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from marchdb.embedding import cpu

    model = args.model
    if model is None:
        import tempfile

        from marchdb.embedding.build import build_model

        model = str(build_model("e5", Path(tempfile.mkdtemp(prefix="bench-cpu-"))))
    the_cpu = cpu.read_cpu()
    print(f"CPU: {the_cpu.model} ({the_cpu.arch}); widest SIMD {the_cpu.simd()}")
    print("flags:", " ".join(sorted(f for f in the_cpu.flags if f.startswith(("avx", "amx", "fma", "f16c", "sse4")))))
    results: dict[str, list[dict]] = {"on": [], "off": []}
    build = ""
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            r = run_child(args.python, model, mode, args.threads)
            build = r.get("build", build)
            results[mode].append(r)
    print(f"llama.cpp build: {build}")
    decision = cpu.decide_extra_buffers(the_cpu, cpu.parse_build_features(build) if build else None, os.environ)
    print(f"marchdb's decision here: {decision.reason}")
    print()
    print("| extra buffers | passages/s (median) | query p50 ms (median) | crashes |")
    print("|---|---|---|---|")
    for mode in ("off", "on"):
        ok = [r for r in results[mode] if "crash" not in r]
        crashes = [r["crash"] for r in results[mode] if "crash" in r]
        p = f"{statistics.median(r['passages_per_s'] for r in ok):.1f}" if ok else "-"
        q = f"{statistics.median(r['query_ms'] for r in ok):.1f}" if ok else "-"
        print(f"| {mode} | {p} | {q} | {len(crashes)} of {args.rounds} {' '.join(sorted(set(crashes)))} |")
    on = [r for r in results["on"] if "crash" not in r]
    off = [r for r in results["off"] if "crash" not in r]
    if on and off:
        ratio = statistics.median(r["passages_per_s"] for r in on) / statistics.median(r["passages_per_s"] for r in off)
        qratio = statistics.median(r["query_ms"] for r in off) / statistics.median(r["query_ms"] for r in on)
        print(f"\nextra buffers on / off: passages {ratio:.2f}x as fast, queries {qratio:.2f}x as fast")


if __name__ == "__main__":
    main()
