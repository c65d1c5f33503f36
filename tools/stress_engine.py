#!/usr/bin/env python
"""The warm engine under load, killed with SIGKILL again and again: nothing a save reported is lost.

For ``--seconds`` (60): ``--savers`` (4) processes saving new memories one
after the other with ``marchdb save`` (through the engine, as a user's
shell does), ``--recallers`` (4) running ``marchdb recall``, and
``--hooks`` (2) running the hook command ``marchdb install claude-code``
writes, with a prompt's event; meanwhile the engine is killed with SIGKILL
``--kills`` (10) times, evenly spread (the next client starts another).
Optionally ``--backlog N`` texts land in the vault at the start, so the
engine embeds a backlog the whole time.

Then, the engine stopped and a ``MARCH_DAEMON=0 marchdb sync`` run: every
memory a save reported (exit 0, its id printed) must be in exactly one file
and in the index; a save that exited 12 (the engine took it and did not
answer) may or may not have been done, and is counted apart; no memory may
be there twice (two files with the name a saver used once); every hook must
have exited 0; ``PRAGMA integrity_check`` and the FTS5 checks must pass.
Exit 1 when any of that fails.

Usage::

    .venv/bin/python tools/stress_engine.py --seconds 60 --kills 10 --out bench-results/stress-engine.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
from bench_sync import ensure_vault

from marchdb.engine import client, daemon
from marchdb.hosts import install

REPO = Path(__file__).resolve().parent.parent
MARCHDB = str(Path(sys.executable).with_name("marchdb"))
PROMPTS = [
    "how do we deploy the payments service?",
    "what did we decide about the cache?",
    "who owns the search index?",
    "why did the release slip last week?",
]


def log(msg: str) -> None:
    print(f"[stress_engine {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--savers", type=int, default=4)
    ap.add_argument("--recallers", type=int, default=4)
    ap.add_argument("--hooks", type=int, default=2)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--size", type=int, default=200, help="memories in the vault before the load")
    ap.add_argument("--backlog", type=int, default=0, help="texts written into the vault at the start")
    ap.add_argument("--work", type=Path, default=REPO / ".bench" / "stress-engine")
    ap.add_argument("--models-dir", type=Path, default=REPO / ".bench" / "models")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    source, _ = ensure_vault(args.work / "vaults" / f"n{args.size}", args.size, log)
    run = args.work / "run"
    if run.exists():
        shutil.rmtree(run)
    vault, home = run / "vault", run / "home"
    shutil.copytree(source, vault)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}
    env.update(MARCH_HOME=str(home), MARCH_MEMORY_ROOT=str(vault), MARCH_MODELS_DIR=str(args.models_dir))
    quiet = {**env, "MARCH_DAEMON": "0"}
    log(f"indexing {args.size} memories with the model")
    subprocess.run([MARCHDB, "sync"], env=quiet, check=True, capture_output=True)
    if args.backlog:
        folder = vault / "backlog"
        folder.mkdir()
        for i in range(max(1, args.backlog // 3)):
            body = "\n\n".join(
                f"Part {j} of note {i}: " + " ".join(f"word{i}-{j}-{k}" for k in range(90)) for j in range(2)
            )
            (folder / f"n{i}.md").write_text(
                f"---\nid: backlog_{i}\nname: Backlog {i}\ndescription: note {i} of the backlog\ntags: [b]\n---\n\n{body}\n"
            )

    stop = threading.Event()
    lock = threading.Lock()
    saved: dict[str, str] = {}  # id -> name
    unanswered: list[str] = []  # names whose save exited 12
    failures: list[str] = []
    counts = {"saves": 0, "recalls": 0, "hooks": 0, "hook_failures": 0, "recall_failures": 0, "kills": 0}

    def saver(k: int) -> None:
        n = 0
        while not stop.is_set():
            name = f"Stress memory {k}-{n}"
            out = subprocess.run(
                [MARCHDB, "save", "--name", name, "--description", f"saver {k} memory {n} about topic {n % 13}",
                 "--body", f"Body of {name}.", "--tag", "stress", "--force", "--json"],
                env=env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            with lock:
                counts["saves"] += 1
                if out.returncode == 0:
                    saved[json.loads(out.stdout)["id"]] = name
                elif out.returncode == 12:
                    unanswered.append(name)
                else:
                    failures.append(f"save {name}: exit {out.returncode}: {out.stderr.strip()[-300:]}")
            n += 1

    def recaller(k: int) -> None:
        n = 0
        while not stop.is_set():
            out = subprocess.run(
                [MARCHDB, "recall", PROMPTS[(k + n) % len(PROMPTS)], "--json"],
                env=env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            with lock:
                counts["recalls"] += 1
                if out.returncode != 0:
                    counts["recall_failures"] += 1
                    failures.append(f"recall: exit {out.returncode}: {out.stderr.strip()[-300:]}")
            n += 1

    def hook(k: int) -> None:
        n = 0
        command = ["sh", "-c", install.hook_command("claude-code")]
        while not stop.is_set():
            event = {"session_id": f"hook-{k}", "hook_event_name": "UserPromptSubmit", "cwd": str(run)}
            event["prompt"] = PROMPTS[(k + n) % len(PROMPTS)]
            out = subprocess.run(command, input=json.dumps(event), env=env, capture_output=True, text=True, timeout=300)
            with lock:
                counts["hooks"] += 1
                if out.returncode != 0:
                    counts["hook_failures"] += 1
            n += 1

    def killer() -> None:
        gap = args.seconds / (args.kills + 1)
        for _ in range(args.kills):
            if stop.wait(gap * random.uniform(0.7, 1.3)):
                return
            pid = client.engine_pid(home)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                    with lock:
                        counts["kills"] += 1
                except ProcessLookupError:
                    pass

    threads = [threading.Thread(target=saver, args=(k,)) for k in range(args.savers)]
    threads += [threading.Thread(target=recaller, args=(k,)) for k in range(args.recallers)]
    threads += [threading.Thread(target=hook, args=(k,)) for k in range(args.hooks)]
    threads.append(threading.Thread(target=killer))
    log(
        f"{args.savers} savers, {args.recallers} recallers, {args.hooks} hooks for {args.seconds:g} s, {args.kills} kills"
    )
    started = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join(600)
    elapsed = time.monotonic() - started
    daemon.stop(home)
    log("checking: a sync without the engine, then every save against the files and the index")
    subprocess.run([MARCHDB, "sync"], env=quiet, check=True, capture_output=True)
    result = check(vault, home, saved, unanswered)
    result.update(counts, seconds=round(elapsed, 1), failures=failures[:20], failure_count=len(failures))
    result["ok"] = (
        not result["lost"] and not result["duplicates"] and not result["index_problems"]
        and counts["hook_failures"] == 0 and not failures
    )  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k != "failures"}, indent=2))
    for line in failures[:20]:
        print(f"failure: {line}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["ok"] else 1


def check(vault: Path, home: Path, saved: dict[str, str], unanswered: list[str]) -> dict:
    """Every reported save once in the files and the index; nothing twice; the index sound."""
    by_name: dict[str, list[str]] = {}
    by_id: dict[str, int] = {}
    for path in vault.rglob("*.md"):
        text = path.read_text(encoding="utf-8", errors="replace")
        head = text.split("\n---", 1)[0]
        fields = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)
        if fields.get("tags") == "[stress]" or "\n  - stress" in head or "- stress" in head:
            by_name.setdefault(fields.get("name", "").strip("'\""), []).append(str(path))
        if "id" in fields:
            by_id[fields["id"].strip("'\"")] = by_id.get(fields["id"].strip("'\""), 0) + 1
    con = apsw.Connection(str(home / "index.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    indexed = {r[0] for r in con.execute("SELECT id FROM memory_index")}
    problems = []
    integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
    if integrity != "ok":
        problems.append(f"integrity_check: {integrity}")
    con.close()
    rw = apsw.Connection(str(home / "index.sqlite"))
    for table in ("fts", "fts_chunk"):
        try:
            rw.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        except apsw.Error as exc:
            problems.append(f"{table}: {exc}")
    rw.close()
    lost = [i for i in saved if by_id.get(i, 0) != 1 or i not in indexed]
    duplicates = {n: p for n, p in by_name.items() if len(p) > 1}
    done_unanswered = sum(1 for n in unanswered if n in by_name)
    return {
        "saved_ok": len(saved),
        "lost": lost,
        "duplicates": duplicates,
        "unanswered_saves": len(unanswered),
        "unanswered_found_done": done_unanswered,
        "index_problems": problems,
    }


if __name__ == "__main__":
    sys.exit(main())
