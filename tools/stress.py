#!/usr/bin/env python
"""Stress marchdb: index freshness, concurrent load, kill -9 during sync.

Three scenarios (``--only freshness,load,faults``; all by default):

freshness
    A vault of ``--fresh-size`` (200) memories, synced and embedded with the
    default e5 model. (a) ``marchdb watch`` runs as a subprocess; a new memory
    file holding a made-up word is written and a separate Store (own
    connection, own model; its own dirty check switched off so the figure is
    the watcher's) polls until ``Store.recall`` returns the memory with its
    vectors present. ``--fresh-repeats`` times; p50 / max. Target <= 2 s,
    embedding included. (b) No watcher: how long until a plain
    ``Store.recall`` sees a new file through the throttled dirty check alone,
    once with the last scan older than 5 s ("stale") and once right after a
    scan ("recent": up to the 5 s throttle).
load
    ``--writers`` (4) processes calling ``Store.save`` (new memories, default
    behaviour: embedding and the duplicate check) and ``--readers`` (4)
    processes calling ``Store.recall`` in a loop for ``--seconds`` (60), each
    with its own Store. Counts operations, errors (any exception; printed),
    ``database is locked`` reaching a caller, memories lost (every id a
    writer got back must exist exactly once as a file and in memory_index at
    its path after a final sync) and recall / save latency. ``--load-variants
    model,bm25``: with the default model, and BM25-only (a model path that does
    not exist, so no model is ever loaded). ``--update-share 0.3`` makes that
    share of the saves update one of the writer's own memories instead, and
    checks that no update was lost (the file holds the last description saved).
    ``--threads N`` sets MARCH_THREADS for every store and subprocess.
faults
    ``--kill-runs`` (20) times: a fresh home on a generated vault of
    ``--kill-size`` (2,000) memories, ``marchdb sync --no-embed`` as a
    subprocess, kill -9 at a uniformly random moment within the typical
    duration of a full sync (``--kill-clock index``: counted from the moment
    the index file appears, since interpreter start-up is about half of a
    2,000-file sync and a kill there tests nothing; ``process``: from the
    process start), then a normal sync to completion. Checks: no
    file of the vault changed (sha256 of every file, hidden ones included),
    the index matches the files (compared with ``notes.parse_note`` on the
    files directly), ``PRAGMA integrity_check`` and the FTS5 integrity check.
    ``--embed-kill-runs`` (3) more runs kill ``marchdb sync`` (with the model)
    during its embedding phase on a vault of ``--embed-kill-size`` memories
    and also check that every vector is there after recovery.

Usage::

    .venv/bin/python tools/stress.py --out bench-results/stress.json
    .venv/bin/python tools/stress.py --only load --seconds 20 --load-variants bm25

Built models are shared through ``MARCH_MODELS_DIR`` (``--models-dir``,
default ``.bench/models``). Vaults are generated with ``bench_sync.ensure_vault``
under ``--work`` (default ``.bench/stress``) and kept between runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from bench_sync import EN_WORDS, ZH_SENTENCES, _en_sentence, _paragraph, ensure_vault

from marchdb.config import load_config

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent

#: A model path that does not exist: the Store falls back to BM25 only and never loads a model.
NO_MODEL = "/nonexistent/marchdb-stress-no-model.gguf"
#: Seed 000 targets.
FRESH_TARGET_S = 2.0
DIRTY_CHECK_S = 5.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))]


#: ``--threads``: MARCH_THREADS for every Store and subprocess (None: marchdb's default).
THREADS: int | None = None


def make_cfg(home, root, model: str | None, models_dir: str | None, threads: int | None = None):
    env = {"MARCH_MODELS_DIR": str(models_dir)} if models_dir else {}
    threads = THREADS if threads is None else threads
    if threads:
        env["MARCH_THREADS"] = str(threads)
    return load_config(home=home, root=root, model=model, env=env)


def sub_env(home: Path, models_dir: str | None) -> dict:
    """Environment of a ``marchdb`` subprocess: our own home, nothing inherited
    that would point it elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}
    env["MARCH_HOME"] = str(home)
    if models_dir:
        env["MARCH_MODELS_DIR"] = str(models_dir)
    if THREADS:
        env["MARCH_THREADS"] = str(THREADS)
    return env


def marchdb_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "marchdb", *args]


_SYL_C = "bdfgklmnprstvz"
_SYL_V = "aeiou"


def made_up_word(rng: random.Random, syllables: int = 4) -> str:
    """A pronounceable nonsense word no vault contains, e.g. ``zumotabe``."""
    return "".join(rng.choice(_SYL_C) + rng.choice(_SYL_V) for _ in range(syllables)) + rng.choice("xqj")


def copy_tree(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)


# ---------------------------------------------------------------- index checks


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (hidden ones too)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                out[os.path.relpath(full, root)] = "symlink:" + os.readlink(full)
                continue
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def hash_diff(before: dict[str, str], after: dict[str, str]) -> list[str]:
    changed = [f"changed {p}" for p in before if p in after and before[p] != after[p]]
    changed += [f"removed {p}" for p in before if p not in after]
    changed += [f"added {p}" for p in after if p not in before]
    return sorted(changed)


def expected_index(root: Path) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """What the index must hold, from the files alone (``notes.parse_note``):
    ``({id: (path, content_hash)} for ids held by exactly one file,
    {path: content_hash} of every memory-root .md file)``."""
    from marchdb.vault.notes import MAX_FILE_BYTES, BadNote, content_hash, parse_note

    holders: dict[str, list[tuple[str, str]]] = {}
    files: dict[str, str] = {}
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d))]
        for name in names:
            full = os.path.join(dirpath, name)
            if name.startswith(".") or not name.lower().endswith(".md") or os.path.islink(full):
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            with open(full, "rb") as fh:
                data = fh.read()
            files[rel] = content_hash(data)
            if len(data) > MAX_FILE_BYTES:
                continue
            try:
                note = parse_note(data, name[:-3])
            except BadNote:
                continue
            holders.setdefault(note.id, []).append((rel, files[rel]))
    return {i: v[0] for i, v in holders.items() if len(v) == 1}, files


def verify_index(index_path: Path, root: Path, vectors: bool = False) -> dict:
    """Compare the index with the files; run SQLite's and FTS5's integrity checks."""
    from marchdb.index import db

    want, want_files = expected_index(root)
    con = db.connect(index_path)
    try:
        integrity = [r[0] for r in con.execute("PRAGMA integrity_check")]
        try:
            con.execute("INSERT INTO fts(fts) VALUES ('integrity-check')")
            fts_ok = "ok"
        except Exception as exc:  # noqa: BLE001 - reported
            fts_ok = f"{type(exc).__name__}: {exc}"
        have = {r[0]: (r[1], r[2]) for r in con.execute("SELECT id, path, content_hash FROM memory_index")}
        active = con.execute("SELECT count(*) FROM memory_index WHERE status = 'active'").fetchone()[0]
        have_files = {r[0]: r[1] for r in con.execute("SELECT path, content_hash FROM files")}
        fts_rows = con.execute("SELECT count(*) FROM fts").fetchone()[0]
        orphan_chunks = con.execute(
            "SELECT count(*) FROM chunks WHERE mem_rid NOT IN (SELECT rid FROM memory_index)"
        ).fetchone()[0]
        vec = {}
        if vectors:
            summary = db.rows(con, "SELECT * FROM diag_summary")[0]
            vec["memories_without_vector"] = summary["memories_without_vector"]
            vec["chunks_without_vector"] = summary["chunks_without_vector"]
            has_vec = con.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_meta'").fetchone()
            vec["vectors_rows"] = con.execute("SELECT count(*) FROM vectors").fetchone()[0]
            vec["vec0_rows"] = (
                con.execute("SELECT (SELECT count(*) FROM vec_meta) + (SELECT count(*) FROM vec_chunk)").fetchone()[0]
                if has_vec
                else 0
            )
            vec["calibrated"] = bool(
                con.execute("SELECT count(*) FROM meta WHERE key LIKE 'calibration%'").fetchone()[0]
            )
    finally:
        con.close()
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    wrong = sorted(i for i in set(want) & set(have) if want[i] != have[i])
    files_missing = sorted(set(want_files) - set(have_files))
    files_extra = sorted(set(have_files) - set(want_files))
    files_wrong = sorted(
        p for p in set(want_files) & set(have_files) if have_files[p] is not None and have_files[p] != want_files[p]
    )
    problems = []
    if integrity != ["ok"]:
        problems.append(f"integrity_check: {integrity[:5]}")
    if fts_ok != "ok":
        problems.append(f"fts integrity-check: {fts_ok}")
    for label, items in (
        ("ids missing from memory_index", missing),
        ("ids in memory_index but not in the files", extra),
        ("ids with wrong path/content_hash", wrong),
        ("files missing from files", files_missing),
        ("paths in files that do not exist", files_extra),
        ("files with a wrong content_hash", files_wrong),
    ):
        if items:
            problems.append(f"{len(items)} {label}: {', '.join(items[:3])}")
    if fts_rows != active:  # only active memories are in the fts table
        problems.append(f"fts has {fts_rows} rows for {active} active memories")
    if orphan_chunks:
        problems.append(f"{orphan_chunks} chunks without a memory")
    if vectors:
        if vec["memories_without_vector"] or vec["chunks_without_vector"]:
            problems.append(
                f"vectors missing: {vec['memories_without_vector']} memories, {vec['chunks_without_vector']} chunks"
            )
        if vec["vectors_rows"] != vec["vec0_rows"]:
            problems.append(f"vectors table has {vec['vectors_rows']} rows, vec0 tables {vec['vec0_rows']}")
        if not vec["calibrated"]:
            problems.append("no calibration stored")
    return {
        "ok": not problems,
        "problems": problems,
        "integrity": integrity[0] if len(integrity) == 1 else integrity[:5],
        "memories": len(have),
        "expected_memories": len(want),
        **vec,
    }


# ---------------------------------------------------------------- freshness


def prepare_base(work: Path, n: int, models_dir: str | None, embed: bool) -> tuple[Path, Path]:
    """A vault of ``n`` memories and a home whose index holds it (embedded with
    the default model when ``embed``). Kept between runs; a no-op sync when current."""
    from marchdb.store import Store

    base = work / f"base{n}{'' if embed else '-bm25'}"
    vault, _ = ensure_vault(base, n, log)
    home = base / "home"
    cfg = make_cfg(home, vault, None if embed else NO_MODEL, models_dir)
    t0 = time.perf_counter()
    last = [0.0]

    def progress(done, total):
        if time.monotonic() - last[0] > 10 or done == total:
            last[0] = time.monotonic()
            log(f"  base {n}: embedded {done}/{total}")

    with Store(cfg) as store:
        report = store.sync(embed=embed, progress=progress)
        for w in report.warnings:
            if embed:
                raise SystemExit(f"base vault sync: {w}")
    if report.added or report.embedded:
        log(
            f"base vault of {n}: +{report.added} memories, {report.embedded} texts embedded "
            f"in {time.perf_counter() - t0:.1f}s"
        )
    return vault, home


def write_memory(root: Path, word: str, i: int) -> tuple[str, str, str]:
    """Write a new memory file mentioning ``word``; return ``(id, rel, query)``."""
    from marchdb.vault.notes import bucket_path, slugify, utc_now_iso

    now = datetime.now(UTC)
    name = f"{word.capitalize()} rollout checklist"
    mem_id = f"mem_stress_{word}_{i}"
    rel = str(bucket_path(now.astimezone(), slugify(f"{name} {i}")))
    stamp = utc_now_iso()
    text = (
        "---\n"
        f"id: {mem_id}\n"
        f"name: {name}\n"
        f"description: Steps we follow before the {word} rollout reaches customers\n"
        "tags:\n  - stress\n  - release\n"
        "status: active\n"
        f"created_at: '{stamp}'\n"
        f"updated_at: '{stamp}'\n"
        "---\n\n"
        f"# {name}\n\nBefore the {word} rollout, freeze the schema, run the migration on staging and "
        f"tell support. The {word} dashboard must stay green for an hour before the next step.\n"
    )
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return mem_id, rel, f"what are the steps of the {word} rollout?"


def _find(result, mem_id: str):
    for h in list(result.hints) + list(result.candidates):
        if h.id == mem_id:
            return h
    return None


def _vectors_present(con, mem_id: str) -> tuple[bool, bool]:
    """(indexed, all its vectors present)."""
    row = con.execute("SELECT meta_missing, chunks_missing FROM diag_vectors WHERE id = ?", (mem_id,)).fetchone()
    if row is None:
        return False, False
    return True, (not row[0] and row[1] == 0)


def _mark_arrival(out: dict, probe, mem_id: str, t0: float) -> tuple[bool, float]:
    """Note when the memory first showed up indexed and with vectors;
    returns (has vectors, seconds since t0)."""
    indexed, vec = _vectors_present(probe.con, mem_id)
    now = time.perf_counter() - t0
    if indexed and out["indexed_s"] is None:
        out["indexed_s"] = now
    if vec and out["vectors_s"] is None:
        out["vectors_s"] = now
    return vec, now


def wait_visible(probe, mem_id: str, query: str, t0: float, timeout: float, poll_sql: bool) -> dict:
    """Poll until ``probe.recall(query)`` returns ``mem_id`` with all its vectors.

    ``poll_sql``: poll the index with a cheap query first and only run recall
    once the vectors are there (so the probe does not load the CPU); else call
    recall back to back (the dirty-check case, where recall itself does the work).
    """
    out = {"indexed_s": None, "vectors_s": None, "recall_s": None, "probes": 0, "hint": False, "dense": False}
    while time.perf_counter() - t0 < timeout:
        if poll_sql:
            vec, now = _mark_arrival(out, probe, mem_id, t0)
            if not vec:
                time.sleep(0.01)
                continue
        t_call = time.perf_counter()
        res = probe.recall(query, explain=True)
        out["last_recall_call_s"] = time.perf_counter() - t_call
        out["probes"] += 1
        hit = _find(res, mem_id)
        vec, now = _mark_arrival(out, probe, mem_id, t0)
        if hit is not None and vec:
            out["recall_s"] = now
            out["hint"] = any(h.id == mem_id for h in res.hints)
            out["dense"] = "dense_cos" in hit.signals
            out["score"] = round(hit.score, 3)
            out["mode"] = res.mode
            return out
        if poll_sql:
            time.sleep(0.01)
    return out


class WatchProcess:
    """``marchdb watch --json`` as a subprocess, its events collected."""

    def __init__(self, home: Path, root: Path, models_dir: str | None, logfile: Path):
        self.events: list[str] = []
        self.err = open(logfile, "w")
        self.proc = subprocess.Popen(
            marchdb_cmd("--root", str(root), "watch", "--json"),
            env=sub_env(home, models_dir),
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.append(line.strip())

    def wait_for(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(needle in e for e in self.events):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        self.err.close()
        return self.proc.returncode


def run_freshness(args, work: Path) -> dict:
    from marchdb.store import Store

    result: dict = {"load_before": loadavg(), "size": args.fresh_size}
    vault_src, home_src = prepare_base(work, args.fresh_size, args.models_dir, embed=True)
    run_dir = work / "freshness-run"
    vault, home = run_dir / "vault", run_dir / "home"
    copy_tree(vault_src, vault)
    copy_tree(home_src, home)
    cfg = make_cfg(home, vault, None, args.models_dir)
    rng = random.Random(args.seed)

    # (a) watcher
    log(f"freshness (a): starting `marchdb watch` on {args.fresh_size} memories")
    watch = WatchProcess(home, vault, args.models_dir, run_dir / "watch.log")
    samples = []
    try:
        if not watch.wait_for("watching", 120):
            raise RuntimeError(f"marchdb watch did not start: {(run_dir / 'watch.log').read_text()[-2000:]}")
        probe = Store(cfg)
        probe.ensure_fresh = lambda *a, **k: None  # measure the watcher, not this store's own dirty check
        probe.embedder()
        probe.recall("warm up the probe", explain=True)
        for i in range(args.fresh_repeats + 1):  # the first one warms the watcher up and is not counted
            word = made_up_word(rng)
            t0 = time.perf_counter()
            mem_id, rel, query = write_memory(vault, word, i)
            s = wait_visible(probe, mem_id, query, t0, timeout=60, poll_sql=True)
            s.update(word=word, warmup=i == 0)
            samples.append(s)
            log(
                f"  {'warm-up' if i == 0 else f'#{i}'} {word}: indexed {s['indexed_s'] and round(s['indexed_s'], 3)}s, "
                f"vectors {s['vectors_s'] and round(s['vectors_s'], 3)}s, recall {s['recall_s'] and round(s['recall_s'], 3)}s"
                f"{'' if s['dense'] else ' (no dense signal)'}"
            )
            time.sleep(args.fresh_pause)
        probe.close()
    finally:
        rc = watch.stop()
    counted = [s for s in samples if not s["warmup"]]
    got = [s["recall_s"] for s in counted if s["recall_s"] is not None]
    result["watcher"] = {
        "runs": len(counted),
        "seen": len(got),
        "p50_s": pct(got, 50),
        "max_s": max(got) if got else None,
        "indexed_p50_s": pct([s["indexed_s"] for s in counted if s["indexed_s"] is not None], 50),
        "vectors_p50_s": pct([s["vectors_s"] for s in counted if s["vectors_s"] is not None], 50),
        "probe_recall_call_p50_s": pct([s["last_recall_call_s"] for s in counted if "last_recall_call_s" in s], 50),
        "with_dense_signal": sum(1 for s in counted if s["dense"]),
        "as_hint": sum(1 for s in counted if s["hint"]),
        "target_s": FRESH_TARGET_S,
        "target_met": bool(got) and len(got) == len(counted) and max(got) <= FRESH_TARGET_S,
        "watch_exit_code": rc,
        "watch_events": watch.events[-20:],
        "samples": samples,
    }

    # (b) dirty check only
    log("freshness (b): no watcher, the throttled dirty check alone")
    dirty: dict[str, list] = {"stale": [], "recent": []}
    probe = Store(cfg)
    probe.embedder()
    probe.recall("warm up the probe")
    n = max(1, args.dirty_repeats)
    for i in range(n):
        for case in ("stale", "recent"):
            if case == "stale":
                last = probe.last_scan() or 0.0
                wait = DIRTY_CHECK_S + 0.3 - (time.time() - last)
                if wait > 0:
                    time.sleep(wait)
            else:
                probe.ensure_fresh(max_age=0)  # a scan right now: the next one is throttled
            word = made_up_word(rng)
            t0 = time.perf_counter()
            mem_id, _rel, query = write_memory(vault, word, 1000 + 2 * i + (case == "recent"))
            s = wait_visible(probe, mem_id, query, t0, timeout=30, poll_sql=False)
            s.update(word=word)
            dirty[case].append(s)
            log(
                f"  {case} #{i + 1} {word}: recall sees it after {s['recall_s'] and round(s['recall_s'], 3)}s "
                f"({s['probes']} recall calls)"
            )
    probe.close()
    result["dirty_check"] = {
        case: {
            "runs": len(v),
            "seen": sum(1 for s in v if s["recall_s"] is not None),
            "p50_s": pct([s["recall_s"] for s in v if s["recall_s"] is not None], 50),
            "max_s": max((s["recall_s"] for s in v if s["recall_s"] is not None), default=None),
            "samples": v,
        }
        for case, v in dirty.items()
    }
    result["load_after"] = loadavg()
    return result


# ---------------------------------------------------------------- load


def _load_worker(
    role: str, k: int, cfg_args: dict, seconds: float, seed: int, ready_q, start_evt, out_q, update_share: float = 0.0
) -> None:
    """One writer or reader process: own Store, loop until ``seconds`` passed.

    A writer creates new memories; with ``update_share`` > 0 that share of its
    saves instead updates one of its own earlier memories (new description and
    body), and the last description it wrote must be what the file holds at the end."""
    import apsw

    from marchdb.store import Store

    rng = random.Random(seed * 100 + k + (0 if role == "writer" else 50))
    out = {
        "role": role,
        "k": k,
        "ops": 0,
        "errors": [],
        "locked": 0,
        "lat": [],
        "saved": [],
        "statuses": {},
        "warnings": [],
        "hints": 0,
        "modes": {},
        "last_desc": {},
    }
    try:
        store = Store(make_cfg(**cfg_args))
        store.embedder()  # load the model (if any) before the clock starts
        if role == "reader":
            store.recall("warm up")
        else:
            store.sync(embed=False)
    except Exception:  # noqa: BLE001
        out["errors"].append("setup: " + traceback.format_exc())
        ready_q.put(k)
        out_q.put(out)
        return
    ready_q.put(k)
    start_evt.wait()
    end = time.monotonic() + seconds
    t_begin = time.perf_counter()
    i = 0
    while time.monotonic() < end:
        i += 1
        t0 = time.perf_counter()
        try:
            if role == "writer":
                word = made_up_word(rng)
                desc = f"{_en_sentence(rng)[:-1]} ({word})" if rng.random() < 0.8 else rng.choice(ZH_SENTENCES) + word
                body = "\n\n".join(_paragraph(rng) for _ in range(rng.randint(1, 3)))
                mine = [m for st, m, _ in out["saved"] if st == "created"]
                if mine and rng.random() < update_share:
                    target = rng.choice(mine)
                    res = store.save(id=target, description=desc, body=body)
                else:
                    res = store.save(
                        name=f"Stress {word} w{k}-{i}", description=desc, body=body, tags=["stress", f"writer-{k}"]
                    )
                out["statuses"][res["status"]] = out["statuses"].get(res["status"], 0) + 1
                out["saved"].append((res["status"], res["id"], res["path"]))
                if res["status"] in ("created", "updated"):
                    out["last_desc"][res["id"]] = desc
                for w in res["warnings"]:
                    if not w.startswith("no vectors"):
                        out["warnings"].append(w)
            else:
                words = rng.sample(EN_WORDS, rng.randint(2, 6))
                text = " ".join(words) + "?" if rng.random() < 0.8 else rng.choice(ZH_SENTENCES)
                # Half the calls log hints under a run id (writes to recall_log), half are dry runs.
                run_id = f"stress-r{k}-{i // 4}" if i % 2 else None
                res = store.recall(text, run_id=run_id, trigger=rng.choice(("user", "assistant")))
                out["hints"] += len(res.hints)
                out["modes"][res.mode] = out["modes"].get(res.mode, 0) + 1
            took = time.perf_counter() - t0
            out["lat"].append(took)
            out["ops"] += 1
            if took > 1.0:  # slow operations, with when they started (s after the start)
                out.setdefault("slow", []).append((round(t0 - t_begin, 2), round(took, 3)))
        except Exception as exc:  # noqa: BLE001 - every exception is a finding
            text = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, apsw.BusyError) or "locked" in str(exc).lower() or "busy" in str(exc).lower():
                out["locked"] += 1
            out["errors"].append(text + "\n" + traceback.format_exc(limit=6))
    store.close()
    out_q.put(out)


def run_load(
    args, work: Path, variant: str, seconds: float | None = None, writers: int | None = None, readers: int | None = None
) -> dict:
    """4 writers + 4 readers (by default) for ``seconds``; then check nothing was lost."""
    from marchdb.store import Store

    seconds = args.seconds if seconds is None else seconds
    writers = args.writers if writers is None else writers
    readers = args.readers if readers is None else readers
    embed = variant == "model"
    vault_src, home_src = prepare_base(work, args.load_size, args.models_dir, embed=embed)
    run_dir = work / f"load-{variant}"
    vault, home = run_dir / "vault", run_dir / "home"
    copy_tree(vault_src, vault)
    copy_tree(home_src, home)
    cfg_args = {
        "home": str(home),
        "root": str(vault),
        "model": None if embed else NO_MODEL,
        "models_dir": args.models_dir,
        "threads": THREADS,
    }
    with Store(make_cfg(**cfg_args)) as s:
        before = s.con.execute("SELECT count(*) FROM memory_index").fetchone()[0]

    result: dict = {
        "variant": variant,
        "seconds": seconds,
        "writers": writers,
        "readers": readers,
        "memories_before": before,
        "load_before": loadavg(),
    }
    log(f"load ({variant}): {writers} writers + {readers} readers for {seconds:g}s on {before} memories")
    ctx = mp.get_context("spawn")
    ready_q, out_q, start_evt = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = []
    for role, count in (("writer", writers), ("reader", readers)):
        for k in range(count):
            p = ctx.Process(
                target=_load_worker,
                args=(
                    role,
                    k,
                    cfg_args,
                    seconds,
                    args.seed,
                    ready_q,
                    start_evt,
                    out_q,
                    getattr(args, "update_share", 0.0),
                ),
            )
            p.start()
            procs.append(p)
    for _ in procs:
        ready_q.get(timeout=600)
    t_start = time.perf_counter()
    start_evt.set()
    outs = []
    load_mid = None
    deadline = time.monotonic() + seconds + 600
    while len(outs) < len(procs) and time.monotonic() < deadline:
        try:
            outs.append(out_q.get(timeout=1))
        except Exception:  # noqa: BLE001 - queue.Empty
            pass
        if load_mid is None and time.perf_counter() - t_start > seconds / 2:
            load_mid = loadavg()
    wall = time.perf_counter() - t_start
    for p in procs:
        p.join(30)
    crashed = [p.exitcode for p in procs if p.exitcode != 0]
    result["wall_seconds"] = round(wall, 2)
    result["load_mid"] = load_mid

    w_outs = [o for o in outs if o["role"] == "writer"]
    r_outs = [o for o in outs if o["role"] == "reader"]
    errors = [e for o in outs for e in o["errors"]]
    statuses: dict[str, int] = {}
    for o in w_outs:
        for k_, v in o["statuses"].items():
            statuses[k_] = statuses.get(k_, 0) + v
    created = [(i, p) for o in w_outs for (st, i, p) in o["saved"] if st == "created"]
    rlat = [x for o in r_outs for x in o["lat"]]
    wlat = [x for o in w_outs for x in o["lat"]]

    # The final sync, then: every created id exactly once as a file, in memory_index at that path.
    log(f"load ({variant}): final sync and loss check")
    with Store(make_cfg(**cfg_args)) as s:
        vec_before = None
        if embed:
            summ = s.status()
            vec_before = {
                "memories_without_vector": summ["memories_without_vector"],
                "chunks_without_vector": summ["chunks_without_vector"],
            }
        s.sync(embed=False)
        index = {r[0]: r[1] for r in s.con.execute("SELECT id, path FROM memory_index")}
        conflicts = s.con.execute("SELECT count(*) FROM diag_conflicts").fetchone()[0]
    from marchdb.vault.notes import BadNote, parse_note

    holders: dict[str, list[str]] = {}
    descs: dict[str, str] = {}
    for dirpath, dirs, names in os.walk(vault):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if name.endswith(".md") and not name.startswith("."):
                full = Path(dirpath) / name
                try:
                    note = parse_note(full.read_bytes(), name[:-3])
                except BadNote:
                    continue
                holders.setdefault(note.id, []).append(full.relative_to(vault).as_posix())
                descs[note.id] = note.description
    lost = []
    for mem_id, path in created:
        rel = Path(path).relative_to(vault).as_posix()
        files = holders.get(mem_id, [])
        if files != [rel] or index.get(mem_id) != rel:
            lost.append({"id": mem_id, "returned_path": rel, "files": files, "index_path": index.get(mem_id)})
    # Lost updates: the file must hold the last description its writer saved.
    stale = [
        {"id": mem_id, "want": want, "file": descs.get(mem_id)}
        for o in w_outs
        for mem_id, want in o["last_desc"].items()
        if descs.get(mem_id) != " ".join(want.split())
    ]
    dup_ids = len(created) - len({i for i, _ in created})
    leftovers = sorted(
        os.path.relpath(os.path.join(d, n), vault)
        for d, _, ns in os.walk(vault)
        for n in ns
        if n.startswith(".marchdb-tmp-")
    )
    check = verify_index(home / "index.sqlite", vault)
    result.update(
        writer_ops=sum(o["ops"] for o in w_outs),
        reader_ops=sum(o["ops"] for o in r_outs),
        save_statuses=statuses,
        created=len(created),
        duplicate_ids_returned=dup_ids,
        errors=len(errors),
        error_samples=errors[:10],
        locked_errors=sum(o["locked"] for o in outs),
        crashed_processes=crashed,
        missing_results=len(procs) - len(outs),
        lost=len(lost),
        lost_samples=lost[:10],
        update_share=getattr(args, "update_share", 0.0),
        lost_updates=len(stale),
        lost_update_samples=stale[:10],
        save_warnings=[w for o in w_outs for w in o["warnings"]][:10],
        temp_files_left=leftovers[:10],
        conflicts_after=conflicts,
        memories_after=len(index),
        recall_p50_ms=pct(rlat, 50) and round(pct(rlat, 50) * 1000, 1),
        recall_p95_ms=pct(rlat, 95) and round(pct(rlat, 95) * 1000, 1),
        recall_max_ms=rlat and round(max(rlat) * 1000, 1),
        save_p50_ms=pct(wlat, 50) and round(pct(wlat, 50) * 1000, 1),
        save_p95_ms=pct(wlat, 95) and round(pct(wlat, 95) * 1000, 1),
        save_max_ms=wlat and round(max(wlat) * 1000, 1),
        slow_saves=sorted(((o["k"], *x) for o in w_outs for x in o.get("slow", [])), key=lambda x: -x[2])[:10],
        slow_recalls=sorted(((o["k"], *x) for o in r_outs for x in o.get("slow", [])), key=lambda x: -x[2])[:10],
        saves_over_1s=sum(len(o.get("slow", [])) for o in w_outs),
        recalls_over_1s=sum(len(o.get("slow", [])) for o in r_outs),
        ops_per_process={f"{o['role']}{o['k']}": o["ops"] for o in outs},
        recall_modes={m: sum(o["modes"].get(m, 0) for o in r_outs) for m in {m for o in r_outs for m in o["modes"]}},
        hints_returned=sum(o["hints"] for o in r_outs),
        vectors_missing_before_final_sync=vec_before,
        index_check=check,
        load_after=loadavg(),
    )
    result["ok"] = (
        not errors
        and not lost
        and not stale
        and not crashed
        and not result["missing_results"]
        and check["ok"]
        and not leftovers
    )
    for e in errors[:10]:
        log(f"  ERROR: {e}")
    return result


# ---------------------------------------------------------------- faults


def _timed_sync(
    home: Path, vault: Path, models_dir: str | None, embed: bool, timeout: float = 1800, watch_index: bool = False
) -> tuple[float, dict] | tuple[float, dict, float | None]:
    """Run ``marchdb sync`` to completion; its wall time and JSON report (and
    with ``watch_index``, when the index file appeared: the sync's own work
    starts there, after interpreter start-up and imports)."""
    args = ["--root", str(vault), "sync", "--json"] + ([] if embed else ["--no-embed"])
    index_path = home / "index.sqlite"
    t0 = time.perf_counter()
    t_index = None
    with subprocess.Popen(
        marchdb_cmd(*args), env=sub_env(home, models_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        if watch_index:
            while proc.poll() is None and time.perf_counter() - t0 < timeout:
                if t_index is None and index_path.exists():
                    t_index = time.perf_counter() - t0
                    break
                time.sleep(0.002)
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"marchdb sync exited {proc.returncode}: {stderr[-2000:]}")
    report = json.loads(stdout.strip().splitlines()[-1])
    return (dt, report, t_index) if watch_index else (dt, report)


def _index_state(index_path: Path) -> str:
    """What a killed sync left behind (read before recovery)."""
    if not index_path.exists():
        return "no index"
    import apsw

    try:
        con = apsw.Connection(str(index_path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "memory_index" not in tables:
                return "no schema"
            n = con.execute("SELECT count(*) FROM memory_index").fetchone()[0]
            parts = [f"{n} memories"]
            if "vectors" in tables:
                parts.append(f"{con.execute('SELECT count(*) FROM vectors').fetchone()[0]} vectors")
            return ", ".join(parts)
        finally:
            con.close()
    except apsw.Error as exc:
        return f"unreadable: {exc}"


def kill_runs(
    vault: Path,
    runs_dir: Path,
    runs: int,
    typical: float,
    models_dir: str | None,
    embed: bool,
    rng: random.Random,
    lo: float = 0.0,
    clock: str = "process",
) -> list[dict]:
    """``runs`` times: fresh home, sync (embedding or not) killed with SIGKILL at
    uniform(lo, typical) seconds, a normal sync to completion, checks.

    ``clock`` "process": seconds from the process start; "index": from the
    moment the index file appears (the sync's own work, without interpreter
    start-up, which a kill can teach nothing about)."""
    before = file_hashes(vault)
    out = []
    for i in range(runs):
        home = runs_dir / f"home{i:02d}"
        if home.exists():
            shutil.rmtree(home)
        home.mkdir(parents=True)
        index_path = home / "index.sqlite"
        delay = rng.uniform(lo, typical)
        args = ["--root", str(vault), "sync", "--json"] + ([] if embed else ["--no-embed"])
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            marchdb_cmd(*args), env=sub_env(home, models_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if clock == "index":
            while proc.poll() is None and not index_path.exists():
                time.sleep(0.001)
            t_start = time.perf_counter() - t0
        else:
            t_start = 0.0
        time.sleep(max(0.0, t_start + delay - (time.perf_counter() - t0)))
        killed = proc.poll() is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
        t_kill = time.perf_counter() - t0
        proc.wait()
        state = _index_state(index_path)
        rec: dict = {
            "run": i + 1,
            "clock": clock,
            "kill_at_s": round(delay, 3),
            "kill_after_start_s": round(t_kill, 3),
            "killed": killed,
            "state_at_kill": state,
        }
        try:
            rec["recovery_s"], report = _timed_sync(home, vault, models_dir, embed)
            rec["recovery_report"] = {
                k: report.get(k) for k in ("added", "updated", "removed", "embedded", "warnings", "notices")
            }
            check = verify_index(index_path, vault, vectors=embed)
        except Exception as exc:  # noqa: BLE001 - a failed recovery is the finding
            check = {"ok": False, "problems": [f"recovery failed: {type(exc).__name__}: {exc}"]}
        changed = hash_diff(before, file_hashes(vault))
        rec.update(
            files_changed=len(changed), files_changed_samples=changed[:5], check=check, ok=check["ok"] and not changed
        )
        out.append(rec)
        where = f"{delay:.2f}s after the index appeared" if clock == "index" else f"{delay:.2f}s"
        log(
            f"  kill {i + 1}/{runs} at {where} ({'killed' if killed else 'had finished'}; {state}): "
            f"{'ok' if rec['ok'] else 'FAILED ' + '; '.join(check.get('problems', [])[:3] + changed[:3])}"
        )
    return out


def kill_states(runs: list[dict], size: int) -> dict[str, int]:
    """Where the kills landed: before the index existed, mid file phase, after it."""
    out: dict[str, int] = {}
    for r in runs:
        st = r["state_at_kill"]
        if not r["killed"]:
            key = "finished before the kill"
        elif st in ("no index", "no schema"):
            key = "before the schema existed"
        elif st.startswith(f"{size} memories"):
            key = (
                "files indexed, later phase" if "vectors" not in st or st.endswith(" 0 vectors") else "while embedding"
            )
        elif "memories" in st:
            key = "mid file phase"
        else:
            key = st
        out[key] = out.get(key, 0) + 1
    return out


def run_faults(
    args,
    work: Path,
    runs: int | None = None,
    size: int | None = None,
    embed_runs: int | None = None,
    embed_size: int | None = None,
) -> dict:
    runs = args.kill_runs if runs is None else runs
    size = args.kill_size if size is None else size
    embed_runs = args.embed_kill_runs if embed_runs is None else embed_runs
    embed_size = args.embed_kill_size if embed_size is None else embed_size
    rng = random.Random(args.seed + 7)
    result: dict = {"load_before": loadavg(), "runs": runs, "size": size}
    vault, _ = ensure_vault(work / f"n{size}", size, log)
    runs_dir = work / "faults"
    # The typical duration of a full `marchdb sync --no-embed`: process start to exit, and
    # from the index file appearing to exit (the sync's own work). The median of two runs
    # (tests/test_concurrency.py, which only needs a window to kill in, times one).
    durations, works = [], []
    for j in range(getattr(args, "kill_calibrations", 2)):
        home = runs_dir / f"calib{j}"
        if home.exists():
            shutil.rmtree(home)
        dt, _, t_index = _timed_sync(home, vault, args.models_dir, embed=False, watch_index=True)
        durations.append(dt)
        works.append(dt - (t_index or 0.0))
    typical = statistics.median(durations)
    typical_work = statistics.median(works)
    clock = getattr(args, "kill_clock", "process")
    window = typical if clock == "process" else typical_work
    result["typical_sync_s"] = round(typical, 3)
    result["typical_sync_work_s"] = round(typical_work, 3)
    result["kill_clock"] = clock
    log(
        f"faults: {runs} kill -9 runs of `marchdb sync --no-embed` on {size:,} memories, kill at uniform(0, "
        f"{window:.2f}s) {'after the process started' if clock == 'process' else 'after the index file appeared'} "
        f"(full sync {typical:.2f}s, {typical_work:.2f}s of it after the index appeared)"
    )
    result["no_embed"] = kill_runs(vault, runs_dir, runs, window, args.models_dir, False, rng, clock=clock)
    result["no_embed_ok"] = sum(1 for r in result["no_embed"] if r["ok"])
    result["no_embed_killed"] = sum(1 for r in result["no_embed"] if r["killed"])
    result["no_embed_files_changed"] = sum(r["files_changed"] for r in result["no_embed"])
    result["no_embed_states"] = kill_states(result["no_embed"], size)

    if embed_runs:
        evault, _ = ensure_vault(work / f"n{embed_size}", embed_size, log)
        home = runs_dir / "calib-embed"
        if home.exists():
            shutil.rmtree(home)
        t_files, _ = _timed_sync(home, evault, args.models_dir, embed=False)
        shutil.rmtree(home)
        t_full, report = _timed_sync(home, evault, args.models_dir, embed=True)
        result["embed_size"] = embed_size
        result["embed_typical_s"] = {
            "files_only": round(t_files, 3),
            "full": round(t_full, 3),
            "texts_embedded": report.get("embedded"),
        }
        log(
            f"faults: {embed_runs} kill -9 runs of `marchdb sync` (embedding) on {embed_size} memories, "
            f"kill at uniform({t_files:.2f}, {t_full:.2f}s)"
        )
        result["embed"] = kill_runs(
            evault, runs_dir / "embed", embed_runs, t_full, args.models_dir, True, rng, lo=t_files
        )
        result["embed_ok"] = sum(1 for r in result["embed"] if r["ok"])
        result["embed_killed"] = sum(1 for r in result["embed"] if r["killed"])
        result["embed_states"] = kill_states(result["embed"], embed_size)
    result["load_after"] = loadavg()
    return result


# ---------------------------------------------------------------- output


def _f(v, fmt="{:.3f}", none="-"):
    if v is None:
        return none
    return fmt.format(v)


def table(results: dict) -> str:
    rows: list[tuple[str, str, str, str]] = []  # scenario, figure, value, target/verdict

    def add(scn, fig, val, tgt=""):
        rows.append((scn, fig, val, tgt))

    fr = results.get("freshness")
    if fr:
        w = fr["watcher"]
        add(
            "freshness",
            f"watcher: new memory → recall with vectors, p50 ({w['seen']}/{w['runs']} seen)",
            _f(w["p50_s"], "{:.3f} s"),
            f"<= {FRESH_TARGET_S:g} s",
        )
        add("freshness", "watcher: same, max", _f(w["max_s"], "{:.3f} s"), "MET" if w["target_met"] else "MISSED")
        add(
            "freshness",
            "watcher: in memory_index p50 / vectors p50",
            f"{_f(w['indexed_p50_s'], '{:.3f}')} / {_f(w['vectors_p50_s'], '{:.3f}')} s",
            "",
        )
        add(
            "freshness",
            "watcher: the probe's last recall call alone, p50",
            _f(w.get("probe_recall_call_p50_s"), "{:.3f} s"),
            "",
        )
        add(
            "freshness",
            "watcher: returned with a dense signal / as a hint",
            f"{w['with_dense_signal']}/{w['runs']} / {w['as_hint']}/{w['runs']}",
            "",
        )
        for case, label in (("stale", "last scan > 5 s ago"), ("recent", "right after a scan")):
            d = fr["dirty_check"][case]
            add(
                "freshness",
                f"dirty check only, {label}: p50 / max ({d['seen']}/{d['runs']} seen)",
                f"{_f(d['p50_s'], '{:.3f}')} / {_f(d['max_s'], '{:.3f}')} s",
                "immediate" if case == "stale" else f"<= {DIRTY_CHECK_S:g} s + sync",
            )
    for key in ("load_model", "load_bm25"):
        ld = results.get(key)
        if not ld:
            continue
        scn = f"load ({'e5 model' if ld['variant'] == 'model' else 'BM25 only'})"
        add(
            scn,
            f"{ld['writers']} writers + {ld['readers']} readers, seconds",
            f"{ld['seconds']:g} (wall {ld['wall_seconds']})",
            "",
        )
        add(scn, "saves done (statuses)", f"{ld['writer_ops']} {ld['save_statuses']}", "")
        add(scn, "recalls done", str(ld["reader_ops"]), "")
        add(scn, "errors (any exception)", str(ld["errors"]), "0 " + ("OK" if not ld["errors"] else "FAIL"))
        add(
            scn,
            "'database is locked' reaching a caller",
            str(ld["locked_errors"]),
            "0 " + ("OK" if not ld["locked_errors"] else "FAIL"),
        )
        add(
            scn,
            "memories lost (of created)",
            f"{ld['lost']} of {ld['created']}",
            "0 " + ("OK" if not ld["lost"] else "FAIL"),
        )
        if ld.get("update_share"):
            add(
                scn,
                f"lost updates ({ld['update_share']:.0%} of saves update an own memory)",
                f"{ld['lost_updates']} of {ld['save_statuses'].get('updated', 0)} updates",
                "0 " + ("OK" if not ld["lost_updates"] else "FAIL"),
            )
        add(
            scn,
            "recall latency p50 / p95 / max",
            f"{_f(ld['recall_p50_ms'], '{:.0f}')} / "
            f"{_f(ld['recall_p95_ms'], '{:.0f}')} / {_f(ld['recall_max_ms'], '{:.0f}')} ms",
            "",
        )
        add(
            scn,
            "save latency p50 / p95 / max",
            f"{_f(ld['save_p50_ms'], '{:.0f}')} / "
            f"{_f(ld['save_p95_ms'], '{:.0f}')} / {_f(ld['save_max_ms'], '{:.0f}')} ms",
            "",
        )
        add(scn, "saves / recalls slower than 1 s", f"{ld['saves_over_1s']} / {ld['recalls_over_1s']}", "")
        add(scn, "operations per process", " ".join(f"{k}={v}" for k, v in sorted(ld["ops_per_process"].items())), "")
        add(
            scn,
            "index after final sync",
            f"{ld['memories_after']} memories, integrity "
            f"{ld['index_check'].get('integrity')}, matches files: {ld['index_check']['ok']}",
            "",
        )
        if ld.get("vectors_missing_before_final_sync"):
            v = ld["vectors_missing_before_final_sync"]
            add(
                scn,
                "vectors missing right after the load",
                f"{v['memories_without_vector']} memories, {v['chunks_without_vector']} chunks",
                "",
            )
        add(
            scn,
            "load average before / mid / after",
            f"{ld['load_before'] and ld['load_before'][0]} / {ld['load_mid'] and ld['load_mid'][0]} / "
            f"{ld['load_after'] and ld['load_after'][0]}",
            "",
        )
    fa = results.get("faults")
    if fa:
        clock = (
            "from process start" if fa.get("kill_clock", "process") == "process" else "from the index file appearing"
        )
        add(
            "faults",
            f"kill -9 `sync --no-embed`, {fa['size']:,} memories (full sync {fa['typical_sync_s']} s, "
            f"{fa.get('typical_sync_work_s')} s after the index appears; kill clock {clock})",
            f"{fa['no_embed_ok']}/{fa['runs']} recovered ok ({fa['no_embed_killed']} killed mid-run)",
            f"{fa['runs']}/{fa['runs']} " + ("OK" if fa["no_embed_ok"] == fa["runs"] else "FAIL"),
        )
        add("faults", "  where the kills landed", ", ".join(f"{k}: {v}" for k, v in fa["no_embed_states"].items()), "")
        add("faults", "  files changed by marchdb", str(fa["no_embed_files_changed"]), "0")
        ic = [r["check"].get("integrity") for r in fa["no_embed"]]
        add("faults", "  integrity_check after recovery", f"{sum(1 for x in ic if x == 'ok')}/{len(ic)} ok", "")
        if fa.get("embed") is not None:
            et = fa["embed_typical_s"]
            add(
                "faults",
                f"kill -9 `sync` while embedding, {fa['embed_size']} memories "
                f"(files {et['files_only']} s, full {et['full']} s)",
                f"{fa['embed_ok']}/{len(fa['embed'])} recovered ok ({fa['embed_killed']} killed mid-run)",
                f"{len(fa['embed'])}/{len(fa['embed'])} " + ("OK" if fa["embed_ok"] == len(fa["embed"]) else "FAIL"),
            )
            add("faults", "  where the kills landed", ", ".join(f"{k}: {v}" for k, v in fa["embed_states"].items()), "")
            add("faults", "  files changed by marchdb", str(sum(r["files_changed"] for r in fa["embed"])), "0")
    heads = ("scenario", "figure", "value", "target")
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(heads), line(["-" * w for w in widths])] + [line(r) for r in rows])


def machine_info() -> dict:
    import apsw

    return {
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "sqlite": apsw.sqlite_lib_version(),
        "load_average_start": loadavg(),
        "code": code_version(),
    }


def code_version() -> str:
    """The commit under test, and whether marchdb/ or sql/ had uncommitted edits."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "marchdb", "sql"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.split("\n")
        dirty = [line[3:] for line in dirty if line.strip() and not line.rstrip().endswith(".pyc")]
        return head + (f" + uncommitted edits in {', '.join(dirty[:5])}" if dirty else " (clean marchdb/, sql/)")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="freshness,load,faults", help="comma-separated: freshness,load,faults")
    ap.add_argument("--work", default=str(REPO / ".bench" / "stress"), help="vaults, homes and logs")
    ap.add_argument(
        "--models-dir",
        default=os.environ.get("MARCH_MODELS_DIR") or str(REPO / ".bench" / "models"),
        help="MARCH_MODELS_DIR: where the default model is built once and shared",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fresh-size", type=int, default=200)
    ap.add_argument("--fresh-repeats", type=int, default=10)
    ap.add_argument("--fresh-pause", type=float, default=1.0, help="seconds between freshness runs")
    ap.add_argument("--dirty-repeats", type=int, default=5, help="runs of each dirty-check case")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each load run")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--load-size", type=int, default=200, help="memories in the vault before the load")
    ap.add_argument("--load-variants", default="model,bm25", help="model (default e5) and/or bm25 (no model)")
    ap.add_argument(
        "--update-share",
        type=float,
        default=0.0,
        help="share of writer saves that update one of the writer's own memories (default 0: only new)",
    )
    ap.add_argument("--kill-runs", type=int, default=20)
    ap.add_argument("--kill-size", type=int, default=2000)
    ap.add_argument(
        "--kill-clock",
        choices=("process", "index"),
        default="index",
        help="kill at uniform(0, typical) seconds after the process started, or after the index file "
        "appeared (default: index; the interpreter start-up is half of a 2,000-file sync)",
    )
    ap.add_argument("--embed-kill-runs", type=int, default=3)
    ap.add_argument("--embed-kill-size", type=int, default=40)
    ap.add_argument(
        "--threads",
        type=int,
        help="MARCH_THREADS for every store and subprocess (default: marchdb's own, the CPU count)",
    )
    ap.add_argument("--out", help="write all results as JSON to this file")
    args = ap.parse_args(argv)
    global THREADS
    THREADS = args.threads

    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {"freshness", "load", "faults"}
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    work = Path(args.work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    args.models_dir = str(Path(args.models_dir).absolute())
    started = datetime.now(UTC)
    info = machine_info()
    info["threads"] = THREADS or f"default ({min(8, os.cpu_count() or 1)})"
    log(f"machine: {info['nproc']} cpu, Python {info['python']}, load average {info['load_average_start']}")

    variants = [v.strip() for v in args.load_variants.split(",") if v.strip()]
    needs_model = (
        "freshness" in only or ("load" in only and "model" in variants) or ("faults" in only and args.embed_kill_runs)
    )
    if needs_model:
        from marchdb.embedding.build import build_model
        from marchdb.embedding.recipes import DEFAULT_RECIPE

        t0 = time.perf_counter()
        path = build_model(DEFAULT_RECIPE, Path(args.models_dir))
        log(f"model: {path} ({time.perf_counter() - t0:.1f}s to build or find)")

    results: dict = {}
    if "freshness" in only:
        results["freshness"] = run_freshness(args, work)
    if "load" in only:
        for v in variants:
            if v not in ("model", "bm25"):
                ap.error(f"unknown load variant {v!r}")
            results[f"load_{v}"] = run_load(args, work, v)
    if "faults" in only:
        results["faults"] = run_faults(args, work)
    info["load_average_end"] = loadavg()

    print(table(results))
    print()
    print(f"date: {started.strftime('%Y-%m-%d %H:%M:%SZ')} (took {(datetime.now(UTC) - started).seconds} s)")
    print(f"machine: {info['nproc']} cpu, Python {info['python']}, SQLite {info['sqlite']}, {info['platform']}")
    print(f"embedding threads per process: {info['threads']}; code: {info['code']}")
    print(f"load average (1/5/15 min) at start {info['load_average_start']}, at end {info['load_average_end']}")
    if "load" in only:
        for v in variants:
            ld = results[f"load_{v}"]
            for e in ld["error_samples"]:
                print(f"load {v} error: {e}")
            for lost in ld["lost_samples"]:
                print(f"load {v} lost: {lost}")
            for lost in ld["lost_update_samples"]:
                print(f"load {v} lost update: {lost}")
            for w in ld["save_warnings"]:
                print(f"load {v} save warning: {w}")
            if ld["slow_saves"]:
                print(f"load {v} slowest saves (writer, started at s, took s): {ld['slow_saves'][:5]}")
            if ld["slow_recalls"]:
                print(f"load {v} slowest recalls (reader, started at s, took s): {ld['slow_recalls'][:5]}")
            if ld["temp_files_left"]:
                print(f"load {v} temp files left in the vault: {ld['temp_files_left']}")
            for p in ld["index_check"]["problems"]:
                print(f"load {v} index problem: {p}")
    if "faults" in only:
        for r in results["faults"]["no_embed"] + results["faults"].get("embed", []):
            if not r["ok"]:
                print(f"faults run {r['run']} FAILED: {r['check'].get('problems')} {r['files_changed_samples']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "when": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
            "machine": info,
            "results": results,
        }
        Path(args.out).write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    ok = all(r.get("ok", True) for k, r in results.items() if k.startswith("load_")) and (
        not results.get("faults")
        or (
            results["faults"]["no_embed_ok"] == results["faults"]["runs"]
            and results["faults"].get("embed_ok", 0) == len(results["faults"].get("embed", []))
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
