"""What the relay in front of the MCP server costs a message (`marchdb mcp` against the server alone).

`marchdb mcp` runs the server in a child and passes the messages on, so that
a crash of llama.cpp costs one answer and not the session. This measures
that hop: the same server, started by `marchdb mcp` (relayed) and started
alone (`marchdb.mcp.server.main` in a process of its own), answering the
same requests in turn: a `tools/list` (a few KB) and a `memory_open` of a
memory of 55 KB (a body's bound is 64 KB) and of one of 1 MB (written by hand). Prints a table of
median and 95th percentile round trips, and their ratios.

    .venv/bin/python tools/bench_mcp_relay.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ALONE = (
    "import sys; from marchdb.config import load_config; from marchdb.mcp.server import main; "
    "from marchdb.store import Store; cfg = load_config(); main(cfg, lambda: Store(cfg), watch=False)"
)


class Session:
    def __init__(self, argv: list[str], env: dict) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.buf = b""
        self.n = 0

    def ask(self, method: str, params: dict) -> tuple[float, dict]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.n += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}).encode() + b"\n"
        start = time.perf_counter()
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            if not select.select([fd], [], [], 120)[0]:
                raise SystemExit(f"no answer to {method} within 120 s")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise SystemExit("the server ended")
            self.buf += chunk
        answer, self.buf = self.buf.split(b"\n", 1)
        return time.perf_counter() - start, json.loads(answer)

    def start(self) -> None:
        info = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
        self.ask("initialize", info)
        assert self.proc.stdin is not None
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    work = Path(tempfile.mkdtemp(prefix="bench-mcp-relay-"))
    root = work / "vault"
    root.mkdir()
    for mem_id, paragraphs in (("mem_big", 1100), ("mem_usual", 60)):
        body = "\n\n".join(
            f"Paragraph {i}: " + "the quick brown fox jumps over the lazy dog " * 20 for i in range(paragraphs)
        )
        (root / f"{mem_id}.md").write_text(
            f"---\nid: {mem_id}\nname: {mem_id}\ndescription: a memory\ntags: [bench]\n---\n{body}\n", encoding="utf-8"
        )
    env = {**os.environ, "MARCH_HOME": str(work / "home"), "MARCH_MEMORY_ROOT": str(root), "MARCH_DAEMON": "0"}
    # No model: embedding a 1 MB memory takes minutes on 2 cores, and the hop is what is measured.
    env["MARCH_EMBED_MODEL"] = str(work / "no-model.gguf")
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    subprocess.run([marchdb, "sync"], env=env, check=True, capture_output=True, timeout=300)
    kinds = {"relayed": [marchdb, "mcp", "--no-watch"], "alone": [sys.executable, "-c", ALONE]}
    sessions = {kind: Session(argv, env) for kind, argv in kinds.items()}
    for s in sessions.values():
        s.start()
    asks = {
        "tools/list": ("tools/list", {}),
        "memory_open, 55 KB": ("tools/call", {"name": "memory_open", "arguments": {"id": "mem_usual"}}),
        "memory_open, 1 MB": ("tools/call", {"name": "memory_open", "arguments": {"id": "mem_big"}}),
    }
    times: dict[tuple[str, str], list[float]] = {(k, a): [] for k in kinds for a in asks}
    for n in range(rounds + 1):
        for ask, (method, params) in asks.items():
            for kind, s in sessions.items():  # in turn, so that the machine's noise falls on both
                took, answer = s.ask(method, params)
                assert "result" in answer, answer
                if n:  # the first round warms both up
                    times[(kind, ask)].append(took)
    for s in sessions.values():
        s.close()
    print(f"{rounds} rounds, each request to both servers in turn\n")
    print("| request | alone p50 | relayed p50 | ratio | alone p95 | relayed p95 | ratio |")
    print("|---|---|---|---|---|---|---|")
    for ask in asks:
        a, r = times[("alone", ask)], times[("relayed", ask)]
        a50, r50 = statistics.median(a), statistics.median(r)
        a95, r95 = statistics.quantiles(a, n=20)[18], statistics.quantiles(r, n=20)[18]
        print(
            f"| {ask} | {a50 * 1e3:.2f} ms | {r50 * 1e3:.2f} ms | {r50 / a50:.2f} | {a95 * 1e3:.2f} ms | "
            f"{r95 * 1e3:.2f} ms | {r95 / a95:.2f} |"
        )


if __name__ == "__main__":
    main()
