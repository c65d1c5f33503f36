#!/usr/bin/env python
"""How fast passive recall reaches a host: hooks and the CLI through the warm engine.

Every figure is a whole process timed from outside the way a host runs it
(spawn → exit, stdin event in, stdout out), except the engine's own time,
which it reports per request. On a vault of ``--size`` memories (the
generated vaults of bench_sync.py; synthetic vectors, as bench_latency.py,
so building the index does not take an hour), with the default model:

* baseline — ``python -c pass`` of the same interpreter: the floor every
  hook pays; the hook's time is also given as a ratio to it;
* hook warm, per host — the command ``marchdb install HOST`` writes, run as
  the host runs it (``sh -c``; Hermes' plugin: the same argv, no shell), with
  the event each host sends for a prompt (Claude Code, Codex, Hermes:
  UserPromptSubmit; Gemini: BeforeAgent; Cline: userPromptSubmit; Cursor:
  postToolUse); generic: ``marchdb hook generic`` with the text on stdin, as
  a script runs it, and the launcher form of it (``generic-launcher``); the
  engine running (each prompt a new turn of one session);
* engine — the engine's own time for the same hook request and for a plain
  ``memory_recall`` (query embedding and dirty check included);
* CLI warm — ``marchdb recall TEXT`` with the engine running;
* paced — the hook, and the engine's time for a recall, after a pause of
  ``--pause`` seconds each, as prompts come in a session: every one of them
  then asks for the seed's dirty check (a scan older than 5 s), and the
  cores have gone idle;
* hook cold — no engine running: the hook starts one and waits for it
  (``hookWaitSeconds``) when it can be warm in time, else keyword recall;
  then how long until the engine is warm;
* frozen — the engine stopped with SIGSTOP (a suspended laptop): three hooks
  in a row, the time of all three (and of the first, and of the next two);
  ``--only-frozen`` times only this, and ``--before DIR`` (a checkout of
  other code, e.g. ``git archive``d into DIR) runs that checkout's hook
  commands and plugin client in turn with this one's, round by round;
* while a backlog embeds — ``--backlog`` texts (3,000: a third of them
  notes' names and descriptions, the rest their chunks) land in the vault at
  once, as an import does, and the hook is timed one prompt after the other
  until they all have vectors: against the hook just before on the idle
  engine, with the hooks that fell back to keyword recall counted (from
  ``hooks.log``). Twice: embedded by the engine's watcher, and by a
  ``MARCH_DAEMON=0 marchdb sync`` in another process.

Usage::

    .venv/bin/python tools/bench_hosts.py --size 10000 --out bench-results/hosts.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import apsw
from bench_latency import fill_vectors, query_texts
from bench_sync import ensure_vault, machine_info

from marchdb.config import load_config
from marchdb.engine import client, daemon
from marchdb.hosts import HOSTS, adapter, install, plugins
from marchdb.store import Store

REPO = Path(__file__).resolve().parent.parent
MARCHDB = str(Path(sys.executable).with_name("marchdb"))


def log(msg: str) -> None:
    print(f"[bench_hosts] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))], 1)


def summary(values: list[float]) -> dict:
    return {
        "p50": round(statistics.median(values), 1),
        "p95": pct(values, 0.95),
        "max": pct(values, 1.0),
        "n": len(values),
    }


def timed(cmd: list[str], stdin: str = "", env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=120)
    return (time.perf_counter() - t) * 1000, out


def prepare(size: int, work: Path, models: Path) -> tuple[Path, Path]:
    vault, _ = ensure_vault(work / "sync" / f"n{size}", size, log)  # bench_sync.py's vaults, shared
    home = work / "hosts" / f"n{size}"
    cfg = load_config(home=home, root=vault, env={"MARCH_MODELS_DIR": str(models)})
    with Store(cfg) as store:
        store.sync(embed=False)
        fill_vectors(store, log)
    return vault, home


def event(session: str, prompt: str) -> str:
    return json.dumps({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": prompt, "cwd": "/tmp"})


#: What each host sends for a prompt (its module's ``sample_prompt``: for VS Code, whose
#: prompts take no context, a tool's end), every host of the registry; and the generic
#: hook once more as a script runs the command ``marchdb install`` writes.
HOST_EVENTS = {host: adapter(host).sample_prompt for host in HOSTS}
HOST_EVENTS["generic-launcher"] = HOST_EVENTS["generic"]
#: Hosts whose plugin runs in their own process (its client relays to the engine over the
#: socket; the hook command is only its fallback): timed in Node as well.
PLUGIN_HOSTS = ("opencode", "kilo", "pi", "openclaw")


def launcher_argv(tree: Path | None = None) -> list[str]:
    """The launcher form of ``marchdb`` (what installed hooks run): this
    checkout's, or the one in ``tree`` (its ``launch.py`` puts its own tree
    on the path)."""
    argv = install.marchdb_argv(launcher=True)
    if tree is not None:
        argv[3] = str(tree / "marchdb" / "cli" / "launch.py")
    return argv


def hook_cmd(host: str, session: str, tree: Path | None = None) -> list[str]:
    """The process a host starts for a hook: the command ``marchdb install``
    writes, run by ``sh -c`` (Hermes' plugin and the in-process plugins run
    the same argv without a shell; a script runs ``marchdb hook generic``);
    with ``tree``, that of the checkout there."""
    if host == "generic":
        return [MARCHDB, "hook", host, "--run", f"{session}-run"]
    if host == "generic-launcher":
        return [*launcher_argv(tree), "hook", "generic", "--run", f"{session}-run"]
    if host == "hermes" or host in PLUGIN_HOSTS:
        return [*launcher_argv(tree), "hook", host]
    return ["sh", "-c", install.command_for(host, launcher_argv(tree), {})]


def plugin_times(host: str, events: list[str], env: dict, work: Path, tree: Path | None = None) -> list[float] | None:
    """Milliseconds of each ``ask`` of ``host``'s in-process plugin client,
    timed inside one Node process as the host runs it (None: no Node here);
    with ``tree``, the client and launcher of the checkout there."""
    node = shutil.which("node", path=env.get("PATH"))
    if node is None:
        return None
    source = plugins.client_source(host, host, launcher_argv(tree), {})
    if tree is not None:
        own = (REPO / "marchdb" / "hosts" / "plugin_client.js").read_text(encoding="utf-8")
        other = (tree / "marchdb" / "hosts" / "plugin_client.js").read_text(encoding="utf-8")
        source = source[: -len(own)] + other
    script = work / f"bench-plugin-{host}{'-before' if tree else ''}.mjs"
    script.write_text(
        source
        + f"\nconst events = {json.dumps([json.loads(e) for e in events])};\n"
        + "const times = [];\n"
        + "for (const e of events) { const t = performance.now(); await ask(e); times.push(performance.now() - t); }\n"
        + "console.log(JSON.stringify(times));\n",
        encoding="utf-8",
    )
    out = subprocess.run([node, str(script)], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"the {host} plugin client failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=40, help="hook and CLI processes timed warm")
    ap.add_argument("--cold-runs", type=int, default=5)
    ap.add_argument("--paced", type=int, default=10, help="hooks and engine recalls timed after a pause each")
    ap.add_argument("--pause", type=float, default=6.0, help="seconds before each paced run (default 6)")
    ap.add_argument("--frozen-rounds", type=int, default=3, help="rounds of three prompts per host, engine frozen")
    ap.add_argument("--only-frozen", action="store_true", help="time only the three prompts against a frozen engine")
    ap.add_argument(
        "--before", type=Path, help="a checkout of other code: its hooks timed in turn with this one's (frozen only)"
    )
    ap.add_argument("--backlog", type=int, default=3000, help="texts embedded while hooks are timed (0: skip)")
    ap.add_argument("--only-backlog", action="store_true", help="time only the hooks while a backlog embeds")
    ap.add_argument("--work", type=Path, default=REPO / ".bench")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    models = args.work / "models"
    vault, home = prepare(args.size, args.work, models)
    # A user's Python writes bytecode; with PYTHONDONTWRITEBYTECODE set (as in
    # some sandboxes) every hook would compile marchdb's modules at every start.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(MARCH_HOME=str(home), MARCH_MEMORY_ROOT=str(vault), MARCH_MODELS_DIR=str(models))
    cfg = load_config(home=home, root=vault, env=env)
    texts = query_texts(max(args.runs, args.cold_runs) * 2)
    daemon.stop(home)
    clear_backlog(vault, home, env)
    if args.only_backlog:
        backlog = {source: backlog_phase(vault, home, env, texts, args, source) for source in BACKLOG_SOURCES}
        print(backlog_table(args.size, backlog))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(
                json.dumps({"memories": args.size, "machine": machine_info(), "backlog": backlog}, indent=2) + "\n"
            )
        daemon.stop(home)
        return 0

    if args.only_frozen:
        return only_frozen(home, env, texts, args)

    timed([sys.executable, "-c", "import marchdb.cli.entry, marchdb.hosts.hook, marchdb.store"], env=env)  # bytecode
    baseline = [timed([sys.executable, "-c", "pass"], env=env)[0] for _ in range(args.runs)]
    log(f"python -c pass: p50 {statistics.median(baseline):.1f} ms")

    cold, ready = [], []
    for i in range(args.cold_runs):
        daemon.stop(home)
        ms, out = timed(hook_cmd("claude-code", ""), event(f"cold-{i}", texts[i]), env)
        assert out.returncode == 0, out.stderr
        cold.append(ms)
        t = time.perf_counter()
        if not client.wait_ready(home, 300):
            raise SystemExit("the engine did not start; see logs/daemon.log")
        ready.append((time.perf_counter() - t) * 1000 + ms)
    log(f"hook cold: {summary(cold)}; engine warm after {summary(ready)}")

    for i in range(10):  # the engine's first requests after its start load what later ones reuse
        timed(hook_cmd("claude-code", ""), event("warm-up", texts[i % len(texts)]), env)
    per_host: dict[str, dict] = {}
    hinted = 0
    # Round robin, with python -c pass in every round: on a shared machine the load drifts,
    # and each host (and the floor) must see the same drift for the ratios to mean something.
    warm: dict[str, list[float]] = {host: [] for host in HOST_EVENTS}
    paired: list[float] = []
    for i in range(args.runs):
        paired.append(timed([sys.executable, "-c", "pass"], env=env)[0])
        for host, make in HOST_EVENTS.items():
            ms, out = timed(hook_cmd(host, f"warm-{host}-{i}"), make(f"warm-{host}", texts[i]), env)
            assert out.returncode == 0, out.stderr
            warm[host].append(ms)
            hinted += bool(out.stdout)
    baseline = paired
    for host, times in warm.items():
        per_host[host] = summary(times)
        log(f"hook warm, {host}: {per_host[host]} ({statistics.median(times) / statistics.median(paired):.2f}x python)")

    per_plugin: dict[str, dict] = {}
    for host in PLUGIN_HOSTS:
        times = plugin_times(
            host, [HOST_EVENTS[host](f"plugin-{host}-{i}", texts[i]) for i in range(args.runs)], env, args.work
        )
        if times is None:
            log("no node on PATH: the in-process plugins are not timed")
            break
        per_plugin[host] = summary(times)
        log(f"plugin in process, {host}: {per_plugin[host]}")

    ident = client.identity(cfg)
    engine_hook, engine_recall = [], []
    for i in range(args.runs * 3):
        text = texts[i % len(texts)]
        hook_args = {"event": "prompt", "host": "claude-code", "session": "eng", "text": text, "cwd": "/tmp"}
        engine_hook.append(client.request(home, "memory_hook", hook_args, ident)[1])
        engine_recall.append(client.request(home, "memory_recall", {"text": text}, ident)[1])
    log(f"engine: hook {summary(engine_hook)}, recall {summary(engine_recall)}")

    cli = [timed([MARCHDB, "recall", texts[i]], env=env)[0] for i in range(args.runs)]
    log(f"CLI warm: {summary(cli)}")

    paced_hook, paced_engine = [], []
    for i in range(args.paced):
        time.sleep(args.pause)
        ms, out = timed(hook_cmd("claude-code", ""), event("paced", texts[i]), env)
        assert out.returncode == 0, out.stderr
        paced_hook.append(ms)
    for i in range(args.paced):
        time.sleep(args.pause)
        paced_engine.append(client.request(home, "memory_recall", {"text": texts[-1 - i]}, ident)[1])
    if paced_hook:
        log(f"paced (a {args.pause:g} s pause before each): hook {summary(paced_hook)}, engine {summary(paced_engine)}")
    rss = _rss_mb(client.engine_pid(home))
    frozen = frozen_phase(home, env, texts, args, with_plugins=bool(per_plugin))
    backlog = (
        {source: backlog_phase(vault, home, env, texts, args, source) for source in BACKLOG_SOURCES}
        if args.backlog
        else {}
    )
    daemon.stop(home)

    result = {
        "memories": args.size,
        "machine": machine_info(),
        "python": platform.python_version(),
        "python_c_pass_ms": summary(baseline),
        "hook_warm_ms": per_host["claude-code"],
        "hook_warm_by_host_ms": per_host,
        "hook_warm_over_python": {
            host: round(s["p50"] / statistics.median(baseline), 2) for host, s in per_host.items()
        },
        "three_prompts_frozen_engine_ms": {host: f["three"] for host, f in frozen.items()},
        "frozen_engine_by_prompt_ms": frozen,
        "plugin_in_process_ms": per_plugin,
        "hook_warm_hinted": hinted,
        "engine_hook_ms": summary(engine_hook),
        "engine_recall_ms": summary(engine_recall),
        "cli_recall_warm_ms": summary(cli),
        "hook_cold_ms": summary(cold),
        "engine_warm_after_cold_ms": summary(ready),
        "pause_s": args.pause,
        "hook_paced_ms": summary(paced_hook) if paced_hook else None,
        "engine_recall_paced_ms": summary(paced_engine) if paced_engine else None,
        "engine_rss_mb": rss,
        "backlog": backlog,
    }
    print(table(result))
    if backlog:
        print(backlog_table(args.size, backlog))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def frozen_phase(home: Path, env: dict, texts: list[str], args, with_plugins: bool) -> dict[str, dict]:
    """Three prompts in a row against the engine stopped with SIGSTOP, in
    every host: by its hook command, and for the in-process plugins by their
    client in Node. ``{host: {"three", "first", "next"}}`` (ms: the three
    together, the first prompt, each of the next two); with ``args.before``,
    that checkout's as ``"HOST [before]"``, timed in turn with this one's
    (which goes first alternates round by round)."""
    pid = client.engine_pid(home)
    assert pid, "no engine runs"
    trees: list[Path | None] = [None] + ([args.before.resolve()] if args.before else [])
    hosts = [h for h in HOST_EVENTS if h != "generic"] + (
        [f"{h} (plugin)" for h in PLUGIN_HOSTS] if with_plugins else []
    )
    frozen: dict[str, dict] = {}
    for host in hosts:
        times: dict[Path | None, dict[str, list[float]]] = {t: {"three": [], "first": [], "next": []} for t in trees}
        for round_ in range(args.frozen_rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                events = [HOST_EVENTS[host.split()[0]](f"frozen-{host}-{round_}-{i}", texts[i]) for i in range(3)]
                os.kill(pid, signal.SIGSTOP)
                try:
                    if host.endswith("(plugin)"):
                        # Inside the host's process, which is running already: the asks alone.
                        each = plugin_times(host.split()[0], events, env, args.work, tree) or [0.0]
                        three = sum(each)
                    else:
                        each = []
                        for e in events:
                            ms, out = timed(hook_cmd(host, f"frozen-{round_}", tree), e, env)
                            assert out.returncode == 0, out.stderr
                            each.append(ms)
                        three = sum(each)
                finally:
                    os.kill(pid, signal.SIGCONT)
                times[tree]["three"].append(three)
                times[tree]["first"].append(each[0])
                times[tree]["next"] += each[1:]
                time.sleep(0.5)  # the hook's own recheck clears the mark once the engine answers again
                (home / client.STUCK_NAME).unlink(missing_ok=True)
        for tree in trees:
            name = host if tree is None else f"{host} [before]"
            frozen[name] = {k: summary(v) for k, v in times[tree].items()}
            log(f"three prompts against a frozen engine, {name}: {frozen[name]}")
    return frozen


def only_frozen(home: Path, env: dict, texts: list[str], args) -> int:
    """``--only-frozen``: start the engine, warm it, time the frozen phase."""
    if not client.wait_ready(home, 0.1):
        timed(hook_cmd("claude-code", ""), event("frozen-start", texts[0]), env)
        if not client.wait_ready(home, 300):
            raise SystemExit("the engine did not start; see logs/daemon.log")
    for i in range(10):  # the engine's first requests after its start load what later ones reuse
        timed(hook_cmd("claude-code", ""), event("warm-up", texts[i % len(texts)]), env)
        if args.before:
            timed(hook_cmd("claude-code", "", args.before.resolve()), event("warm-up", texts[i % len(texts)]), env)
    with_node = shutil.which("node", path=env.get("PATH")) is not None
    frozen = frozen_phase(home, env, texts, args, with_plugins=with_node)
    daemon.stop(home)
    lines = [
        f"{args.size:,} memories; three prompts against an engine stopped with SIGSTOP ({args.frozen_rounds} rounds)",
        f"{'':34} {'three':>17} {'first':>17} {'each next':>17}",
        f"{'':34} " + " ".join(f"{'p50 ms':>8} {'max ms':>8}" for _ in range(3)),
    ]
    for host, f in frozen.items():
        lines.append(f"{host:34} " + " ".join(f"{f[k]['p50']:>8} {f[k]['max']:>8}" for k in ("three", "first", "next")))
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"memories": args.size, "machine": machine_info(), "frozen_engine_ms": frozen}, indent=2) + "\n"
        )
    return 0


#: Who embeds the backlog: the engine's watcher, or a one-shot sync in another process.
BACKLOG_SOURCES = ("engine", "sync")
BACKLOG_DIR = "bench-backlog"
#: Seconds between two timed hooks while a backlog embeds (prompts one after the other).
BACKLOG_PACE = 0.25
#: Hooks are timed until the backlog is done, or this long.
BACKLOG_DEADLINE_S = 3600


def backlog_notes(vault: Path, n_texts: int) -> int:
    """Write notes holding ``n_texts`` texts to embed (each: its name and
    description, and two chunks of ~600 characters). Returns the files written."""
    folder = vault / BACKLOG_DIR
    folder.mkdir()
    n_files = max(1, n_texts // 3)
    for i in range(n_files):
        parts = [
            f"Part {j} of imported note {i}: the {WORDS[(i + j) % len(WORDS)]} service keeps its state in "
            + " ".join(f"{WORDS[(i * 7 + j * 3 + k) % len(WORDS)]}-{k}" for k in range(60))
            for j in range(2)
        ]
        (folder / f"note-{i}.md").write_text(
            f"---\nid: backlog_{i}\nname: Imported note {i}\ndescription: what the {WORDS[i % len(WORDS)]} "
            f"team decided in meeting {i}\ntags: [import]\n---\n\n" + "\n\n".join(parts) + "\n",
            encoding="utf-8",
        )
    return n_files


WORDS = "payments search billing deploy cache queue mail auth storage metrics frontend backend".split()


def clear_backlog(vault: Path, home: Path, env: dict) -> None:
    """Remove the notes of an earlier backlog run (and their rows)."""
    folder = vault / BACKLOG_DIR
    if folder.exists():
        shutil.rmtree(folder)
        subprocess.run([MARCHDB, "sync", "--no-embed"], env={**env, "MARCH_DAEMON": "0"}, capture_output=True)


def pending_vectors(home: Path) -> int:
    con = apsw.Connection(
        f"file:{home / 'index.sqlite'}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        con.set_busy_timeout(5000)
        # Active memories only: the others are never embedded (diag_vectors).
        return con.execute("SELECT coalesce(sum(meta_missing + chunks_missing), 0) FROM diag_vectors").fetchone()[0]
    finally:
        con.close()


def fallbacks(home: Path) -> int:
    """Hooks so far that answered without the engine (keyword recall)."""
    path = home / "logs" / "hooks.log"
    try:
        return path.read_text(encoding="utf-8", errors="replace").count("answered without the warm engine")
    except FileNotFoundError:
        return 0


def backlog_phase(vault: Path, home: Path, env: dict, texts: list[str], args, source: str) -> dict:
    """Hooks on the idle engine, then while ``args.backlog`` texts embed
    (``source``: the engine's watcher, or a one-shot sync in another process)."""
    clear_backlog(vault, home, env)
    if not client.wait_ready(home, 0.1):
        timed(hook_cmd("claude-code", ""), event("backlog-start", texts[0]), env)
        if not client.wait_ready(home, 300):
            raise SystemExit("the engine did not start; see logs/daemon.log")
    for i in range(5):
        timed(hook_cmd("claude-code", ""), event("backlog-warm", texts[i % len(texts)]), env)
    idle = []
    for i in range(args.runs):
        idle.append(timed(hook_cmd("claude-code", ""), event(f"idle-{source}", texts[i % len(texts)]), env)[0])
        time.sleep(BACKLOG_PACE)
    before = fallbacks(home)
    files = backlog_notes(vault, args.backlog)
    syncer = None
    started = time.perf_counter()
    if source == "sync":
        syncer = subprocess.Popen(
            [MARCHDB, "sync"], env={**env, "MARCH_DAEMON": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    busy, pending_seen, finished = [], 0, False
    deadline = time.monotonic() + BACKLOG_DEADLINE_S
    i = 0
    while time.monotonic() < deadline:
        ms, out = timed(hook_cmd("claude-code", ""), event(f"busy-{source}", texts[i % len(texts)]), env)
        assert out.returncode == 0, out.stderr
        i += 1
        pending = pending_vectors(home)
        pending_seen = max(pending_seen, pending)
        if pending_seen and not pending and (syncer is None or syncer.poll() is not None):
            finished = True
            break
        busy.append(ms)  # timed while texts were still waiting for their vectors
        time.sleep(BACKLOG_PACE)
    seconds = time.perf_counter() - started
    if syncer is not None:
        _, err = syncer.communicate(timeout=600)
        assert syncer.returncode == 0, err
    result = {
        "files": files,
        "texts_pending_at_most": pending_seen,
        "embedded_in_s": round(seconds, 1),
        "finished": finished,  # False: still pending at the deadline
        "hook_idle_ms": summary(idle),
        "hook_while_embedding_ms": summary(busy) if busy else None,
        "keyword_fallbacks": fallbacks(home) - before,
    }
    if busy:
        result["p50_ratio"] = round(result["hook_while_embedding_ms"]["p50"] / result["hook_idle_ms"]["p50"], 2)
        result["p95_ratio"] = round(result["hook_while_embedding_ms"]["p95"] / result["hook_idle_ms"]["p95"], 2)
    log(f"backlog embedded by the {source}: {result}")
    clear_backlog(vault, home, env)
    return result


def backlog_table(size: int, backlog: dict) -> str:
    lines = [
        f"{size:,} memories; the hook while a backlog embeds (prompts {BACKLOG_PACE:g} s apart)",
        f"{'':44} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'n':>4}",
    ]
    for source, r in backlog.items():
        who = "the engine's watcher" if source == "engine" else "a MARCH_DAEMON=0 sync"
        lines.append(f"{'idle engine, just before':44} " + _cells(r["hook_idle_ms"]))
        if r["hook_while_embedding_ms"]:
            name = f"{r['texts_pending_at_most']:,} texts embedded by {who}"
            lines.append(f"{name:44} " + _cells(r["hook_while_embedding_ms"]))
        lines.append(
            f"  ratio p50 {r.get('p50_ratio')}x, p95 {r.get('p95_ratio')}x; {r['keyword_fallbacks']} fell back to "
            f"keyword recall; backlog {'done' if r['finished'] else 'still pending'} after {r['embedded_in_s']} s"
        )
    return "\n".join(lines)


def _cells(s: dict) -> str:
    return f"{s['p50']:>8} {s['p95']:>8} {s['max']:>8} {s['n']:>4}"


def _rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def table(r: dict) -> str:
    rows = [("python -c pass (floor)", r["python_c_pass_ms"])]
    rows += [(f"hook {host}, warm engine", s) for host, s in r["hook_warm_by_host_ms"].items()]
    rows += [(f"plugin {host} in its process, warm", s) for host, s in r["plugin_in_process_ms"].items()]
    rows += [
        ("  engine time for a hook event", r["engine_hook_ms"]),
        ("  engine time for a recall", r["engine_recall_ms"]),
        ("marchdb recall, warm engine", r["cli_recall_warm_ms"]),
        ("hook, no engine yet (starts it, waits)", r["hook_cold_ms"]),
        ("  engine warm after the cold hook", r["engine_warm_after_cold_ms"]),
        (f"hook after a {r['pause_s']:g} s pause", r["hook_paced_ms"]),
        (f"  engine recall after a {r['pause_s']:g} s pause", r["engine_recall_paced_ms"]),
    ]
    rows += [(f"3 prompts, frozen engine: {host}", s) for host, s in r["three_prompts_frozen_engine_ms"].items()]
    ratios = ", ".join(f"{h} {x}x" for h, x in r["hook_warm_over_python"].items())
    lines = [
        f"{r['memories']:,} memories; hook p50 over python -c pass: {ratios}; engine RSS {r['engine_rss_mb']} MB",
        f"{'':46} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'n':>4}",
    ]
    for name, s in rows:
        if s is None:  # not measured (--paced 0)
            continue
        lines.append(f"{name:46} {s['p50']:>8} {s['p95']:>8} {s['max']:>8} {s['n']:>4}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
