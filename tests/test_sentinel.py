"""A native crash mid-run, on one memory, costs that memory's vectors, not every run.

The crash is real: a shared library given by ``LD_PRELOAD`` wraps
``ggml_backend_sched_graph_compute_async`` (libllama calls it through its
PLT at every embedding) and raises SIGSEGV when the batch's input tokens
hold one token id, chosen so that only one memory's text has it. The model's
check on this machine passes (its probes lack that token); the crash comes
later, in the middle of a backlog, as a text that crashes llama.cpp would.
The same library crashes, on demand, every batch of more than N texts: a
crash no single text explains.

The bookkeeping of suspects and limits is also tested with a deterministic
embedder whose isolated runs report a crash for one text (no native code).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest
from conftest import MIXED_MEMORIES, TinyEmbedder, model_command_env

from marchdb.errors import ModelUnusable
from marchdb.index import sentinel, vectors
from marchdb.store import Store

MARCHDB = str(Path(sys.executable).with_name("marchdb"))
TRIGGER_ENV = "MARCHDB_TEST_CRASH_TOKEN"
CRASH_ON_TOKEN_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include "ggml.h"

typedef int (*compute_fn)(void *, struct ggml_cgraph *);
typedef struct ggml_tensor *(*get_fn)(const struct ggml_cgraph *, const char *);

int ggml_backend_sched_graph_compute_async(void *sched, struct ggml_cgraph *graph) {
    static compute_fn real = 0;
    static get_fn get = 0;
    if (!real) {
        /* libggml-base is dlopen()ed by llama_cpp after this library is
           preloaded, so RTLD_NEXT does not see it: ask that library. */
        void *base = dlopen("libggml-base.so.0", RTLD_LAZY | RTLD_NOLOAD);
        if (!base) base = dlopen("libggml-base.so", RTLD_LAZY | RTLD_NOLOAD);
        if (!base) abort();
        real = (compute_fn)dlsym(base, "ggml_backend_sched_graph_compute_async");
        get = (get_fn)dlsym(base, "ggml_graph_get_tensor");
        if (!real || !get) abort();
    }
    /* Every batch of more than N texts: the pooled output has one column a text. */
    const char *seqs = getenv("MARCHDB_TEST_CRASH_TEXTS_OVER");
    if (seqs) {
        struct ggml_tensor *t = get(graph, "result_embd_pooled");
        if (t && t->ne[1] > atoi(seqs)) raise(SIGSEGV);
    }
    const char *want = getenv("MARCHDB_TEST_CRASH_TOKEN");
    if (want) {
        int32_t token = (int32_t)atoi(want);
        struct ggml_tensor *t = get(graph, "inp_tokens");
        if (t && t->data && t->type == GGML_TYPE_I32) {
            const int32_t *ids = (const int32_t *)t->data;
            for (int64_t i = 0; i < t->ne[0]; i++)
                if (ids[i] == token) raise(SIGSEGV);
        }
    }
    return real(sched, graph);
}
"""
CULPRIT = ("mem_zyzzyva", "Zyzzyva notes", "What the Zyzzyva weevil eats", ["insects"], "Zyzzyva weevils eat palms.")


@pytest.fixture(scope="session")
def crash_on_token_library(tmp_path_factory) -> Path:
    """A library that makes llama.cpp die of SIGSEGV on any batch holding one token."""
    import llama_cpp

    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the crashing library (apt-get install gcc)")
    include = Path(llama_cpp.__file__).parent.parent / "include"
    if not (include / "ggml.h").is_file():
        pytest.skip(f"llama-cpp-python installed no ggml.h in {include}")
    folder = tmp_path_factory.mktemp("crash-on-token")
    (folder / "crash.c").write_text(CRASH_ON_TOKEN_C, encoding="utf-8")
    lib = folder / "libcrashontoken.so"
    subprocess.run(
        [gcc, "-shared", "-fPIC", f"-I{include}", "-o", str(lib), str(folder / "crash.c"), "-ldl"], check=True
    )
    return lib


@pytest.fixture(scope="session")
def culprit_token(default_model_path) -> int:
    """A token of the culprit's text that no other text marchdb embeds here has."""
    from marchdb.embedding import nativecheck
    from marchdb.embedding.llama import LlamaEmbedder
    from marchdb.index import probes

    others = [" ".join([n, d, " ".join(t), b]) for _, n, d, t, b in MIXED_MEMORIES]
    others += [*nativecheck.PROBE_PASSAGES, nativecheck.PROBE_LONG, nativecheck.PROBE_QUERY]
    others += [t for pair in probes.PAIRS for t in pair] + list(probes.NONSENSE)
    with LlamaEmbedder(default_model_path, threads=1) as emb:
        seen = {tok for text in others for tok in emb._tokenize(("passage: " + text).encode(), True)}
        seen |= {tok for text in others for tok in emb._tokenize(("query: " + text).encode(), True)}
        mine = [tok for tok in emb._tokenize(b"Zyzzyva", False) if tok not in seen]
    assert mine, "the culprit's word shares every token with other texts: choose another"
    return mine[-1]


def crashing_env(tmp_path: Path, root: Path, model: Path, library: Path, token: int) -> dict:
    """The environment of a command without the engine whose llama.cpp
    crashes on a batch holding ``token`` (``crash_on_token_library``)."""
    env = {**model_command_env(tmp_path / "home", root, model), "LD_PRELOAD": str(library), TRIGGER_ENV: str(token)}
    env.pop("MARCH_MODELS_DIR", None)
    return env


@pytest.fixture
def crash_env(tmp_path, mixed_vault, default_model_path, crash_on_token_library, culprit_token):
    mem_id, name, desc, tags, body = CULPRIT
    mixed_vault.memory(f"2026/05/week2/{mem_id}.md", mem_id, name=name, description=desc, tags=tags, body=body)
    env = crashing_env(tmp_path, mixed_vault.root, default_model_path, crash_on_token_library, culprit_token)
    return env


def run(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([MARCHDB, *args], capture_output=True, text=True, timeout=timeout, env=env)


def missing_vectors(index: Path) -> dict[str, int]:
    """Per memory id, how many of its texts lack a vector (only those lacking any)."""
    con = apsw.Connection(str(index), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = con.execute("SELECT id, meta_missing + chunks_missing FROM diag_vectors").fetchall()
        return {mem_id: n for mem_id, n in rows if n}
    finally:
        con.close()


def the_culprit_is_reported(env: dict) -> None:
    status = json.loads(run(env, "status", "--json").stdout)
    assert "mem_zyzzyva" in status["model_crashed_on"] and status["model_check"].startswith("usable")
    doctor = json.loads(run(env, "doctor", "--json").stdout)
    rows = [p for p in doctor["problems"] if p["kind"] == "model_crashed_on"]
    assert rows and {r["path"] for r in rows} == {"2026/05/week2/mem_zyzzyva.md"}
    assert "keywords" in rows[0]["advice"] and "model check" in rows[0]["advice"]


def test_the_library_crashes_llama_cpp_only_on_the_culprit(crash_on_token_library, culprit_token, default_model_path):
    code = (
        "import sys; from marchdb.embedding.llama import LlamaEmbedder; "
        "e = LlamaEmbedder(sys.argv[1], threads=1); e.embed(['Biscuit takes carprofen'], 'passage'); "
        "print('innocent ok', flush=True); e.embed(['Biscuit takes carprofen', sys.argv[2]], 'passage')"
    )
    env = {**os.environ, "LD_PRELOAD": str(crash_on_token_library), TRIGGER_ENV: str(culprit_token)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(default_model_path), CULPRIT[4]], env=env, capture_output=True, text=True
    )
    assert "innocent ok" in proc.stdout
    assert proc.returncode == -signal.SIGSEGV


def test_sync_crashes_once_then_quarantines_the_culprit_and_embeds_the_rest(crash_env, tmp_path):
    index = tmp_path / "home" / "index.sqlite"
    first = run(crash_env, "sync")
    # The process embedding the backlog dies on the batch holding the culprit; the command says so
    # and syncs again, that batch's texts one at a time apart: the culprit is quarantined.
    assert first.returncode == 0, (first.returncode, first.stderr)
    assert "llama.cpp crashed (SIGSEGV) while this command embedded a batch of texts" in first.stderr
    assert "llama.cpp crashed on the text of mem_zyzzyva" in first.stderr + first.stdout
    assert set(missing_vectors(index)) == {"mem_zyzzyva"}  # every other memory is embedded
    assert not [p for p in index.parent.iterdir() if p.name.startswith("index.sqlite.embedding.")]
    the_culprit_is_reported(crash_env)

    third = run(crash_env, "sync", "--json")
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["embedded"] == 0  # the culprit is never given to the model again
    # Found by its keywords (a message holding the culprit's word: test_sentinel_queries).
    recall = run(crash_env, "recall", "what the weevil eats", "--json")
    assert recall.returncode == 0, recall.stderr
    answer = json.loads(recall.stdout)
    assert answer["mode"] != "bm25" and answer["hints"][0]["id"] == "mem_zyzzyva"

    # Quarantined for this model, llama.cpp build and CPU (LD_PRELOAD counts, as for the model's check):
    # without the crashing library, the next sync gives it to the model again, unasked.
    healthy = {k: v for k, v in crash_env.items() if k not in ("LD_PRELOAD", TRIGGER_ENV)}
    retried = run(healthy, "sync", "--json")
    assert retried.returncode == 0 and json.loads(retried.stdout)["embedded"] >= 1, retried.stderr
    assert missing_vectors(index) == {}
    assert "model_crashed_on" not in json.loads(run(healthy, "status", "--json").stdout)
    # `model check` forgets every quarantined text, of every build and CPU.
    check = run(healthy, "model", "check")
    assert check.returncode == 0 and "crashed on are given to it again" in check.stdout, check.stdout
    assert run(healthy, "sync").returncode == 0
    assert missing_vectors(index) == {}


def test_the_engine_dies_once_then_embeds_all_but_the_culprit(crash_env, tmp_path):
    from marchdb.engine import daemon

    env = {k: v for k, v in crash_env.items() if k != "MARCH_DAEMON"}
    home = tmp_path / "home"
    index = home / "index.sqlite"
    serve = [MARCHDB, "--home", str(home), "serve"]
    first = subprocess.run(serve, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode in (-signal.SIGSEGV, 128 + signal.SIGSEGV), (first.returncode, first.stderr)
    engine = subprocess.Popen(serve, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and engine.poll() is None:
            if index.is_file() and set(missing_vectors(index)) == {"mem_zyzzyva"}:
                break
            time.sleep(0.5)
        assert engine.poll() is None, engine.stderr.read() if engine.stderr else ""
        assert set(missing_vectors(index)) == {"mem_zyzzyva"}
        the_culprit_is_reported(crash_env)
    finally:
        daemon.stop(home)
        engine.wait(60)


def test_crashes_no_text_explains_end_with_the_model_unusable_not_a_loop(crash_env, tmp_path):
    # The model's check embeds 4 passages in one batch and passes; the index's own
    # probes (more than 4 texts a batch) then crash at every start, before any memory.
    env = {k: v for k, v in crash_env.items() if k != TRIGGER_ENV}
    env["MARCHDB_TEST_CRASH_TEXTS_OVER"] = "4"
    # Each sync dies twice (its own process, then the second run), the third crash making the
    # model unusable: the second sync says so and goes on, with keywords.
    first = run(env, "sync")
    assert first.returncode == -signal.SIGSEGV, (first.returncode, first.stderr)
    assert "while this command embedded a batch" in first.stderr  # said once; the second run crashed too
    last = run(env, "sync")
    assert last.returncode == 0, last.stderr
    assert "cannot run on this machine" in last.stderr and "3 times in a row" in last.stderr
    status = json.loads(run(env, "status", "--json").stdout)
    assert status["model_check"].startswith("UNUSABLE")
    recall = run(env, "recall", "Biscuit carprofen tablet breakfast", "--json")
    assert recall.returncode == 0 and json.loads(recall.stdout)["hints"][0]["id"] == "mem_dog"


def test_a_crash_on_the_model_s_own_calibration_is_counted_not_repeated(
    tmp_path, mixed_vault, default_model_path, crash_on_token_library
):
    # The calibration's nonsense probes hold a token no memory, no check probe and no
    # centre probe has: the backlog embeds, then every start crashes on the calibration.
    from marchdb.embedding import nativecheck
    from marchdb.embedding.llama import LlamaEmbedder
    from marchdb.index import probes

    others = [" ".join([n, d, " ".join(t), b]) for _, n, d, t, b in MIXED_MEMORIES]
    others += [*nativecheck.PROBE_PASSAGES, nativecheck.PROBE_LONG, nativecheck.PROBE_QUERY]
    others += [p for _, _, p in probes.PAIRS]
    with LlamaEmbedder(default_model_path, threads=1) as emb:
        seen = {tok for text in others for tok in emb._tokenize(("passage: " + text).encode(), True)}
        seen |= {tok for text in others for tok in emb._tokenize(("query: " + text).encode(), True)}
        nonsense = [tok for text in probes.NONSENSE for tok in emb._tokenize(("query: " + text).encode(), True)]
    token = next(tok for tok in nonsense if tok not in seen)
    env = crashing_env(tmp_path, mixed_vault.root, default_model_path, crash_on_token_library, token)
    # The sync's process crashes on the calibration; run again, the sync embeds the backlog.
    synced = run(env, "sync")
    assert synced.returncode == 0 and "crashed (SIGSEGV)" in synced.stderr, (synced.returncode, synced.stderr)
    assert missing_vectors(tmp_path / "home" / "index.sqlite") == {}  # the memories were embedded
    # Every recall then calibrates the model first, and crashes (its process, then its second run):
    # counted, until the model is set aside, at the third crash in a row.
    crashed = run(env, "recall", "Biscuit carprofen tablet breakfast")
    assert crashed.returncode == -signal.SIGSEGV, (crashed.returncode, crashed.stderr)
    recall = run(env, "recall", "Biscuit carprofen tablet breakfast", "--json")
    assert recall.returncode == 0, recall.stderr
    answer = json.loads(recall.stdout)
    assert answer["mode"] == "bm25" and answer["hints"][0]["id"] == "mem_dog"
    assert "cannot run on this machine" in answer["warning"] and "3 times in a row" in answer["warning"]


def test_a_sync_stopped_by_sigterm_leaves_no_batch_to_take_for_a_crash(tmp_path, mixed_vault, default_model_path):
    # `timeout`, or an agent's time limit, stops a long sync with SIGTERM. Killed outright, it
    # left the file naming the batch being embedded, and the next run took that for a crash of
    # llama.cpp: the batch's texts embedded apart, the crash counted against the model.
    for i in range(300):
        mixed_vault.memory(f"bulk/m{i}.md", f"mem_bulk{i}", name=f"Bulk {i}", body=f"filler text {i} " * 40)
    env = model_command_env(tmp_path / "home", mixed_vault.root, default_model_path)
    home = tmp_path / "home"
    proc = subprocess.Popen([MARCHDB, "sync"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not list(home.glob("index.sqlite.embedding.*")):
        time.sleep(0.002)
    assert proc.poll() is None, "the sync ended before the model embedded anything"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated" in err, err
    assert list(home.glob("index.sqlite.embedding.*")) == []


# ---------------------------------------------------------------- the bookkeeping, without native code


class CrashesOn(TinyEmbedder):
    """Embeds like TinyEmbedder; its isolated runs report a crash on texts holding ``word``."""

    def __init__(self, word: str):
        super().__init__("tiny-8", dim=8)
        self.word, self.isolated = word, []

    def embed_isolated(self, texts, crash_limit):
        self.isolated.append(list(texts))
        return ["crashed" if self.word in t else self._vectors([t])[0] for t in texts]


def dead_batch(index: str, fingerprint: str, items: list[tuple[str, str]]) -> None:
    """A batch file as a process killed mid-batch leaves it (pid 2**22 + 7 is beyond pid_max's default)."""
    record = {"pid": 2**22 + 7, "boot": "", "start": "", "model": fingerprint, "texts": [f"{k}:{h}" for k, h in items]}
    Path(f"{index}.embedding.{2**22 + 7}.0").write_text(json.dumps(record), encoding="utf-8")


def test_a_dead_batch_s_texts_are_retried_apart_and_the_culprit_quarantined(vault, store):
    for i in range(4):
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"Note {i}", body="a zyzzyva" if i == 2 else f"body {i}")
    store.sync(embed=False)
    con, index = store.con, store.cfg.index_path
    emb = CrashesOn("zyzzyva")
    everything = [(k, h) for k, h, _ in vectors.pending_texts(con)]
    vectors.prepare_model(con, emb)
    dead_batch(index, emb.fingerprint, everything)
    assert vectors.embed_pending(con, emb, index) == len(everything) - 1
    assert len(emb.isolated) == 1 and len(emb.isolated[0]) == len(everything)
    ledger = sentinel.Sentinel(index, emb.fingerprint).read()
    assert len(ledger.quarantined) == 1 and not ledger.suspects and ledger.crashes == 0
    assert [r["id"] for r in sentinel.quarantined_memories(con, index, None)] == ["mem_2"]
    # Complete as far as the model goes: the next run is the usual stat walk.
    assert vectors.embed_pending(con, emb, index) == 0 and len(emb.isolated) == 1


def test_a_culprit_s_memory_has_its_other_texts_embedded_apart_too(vault, store):
    # Its name and description hold the same word, in a batch the dead process never reached.
    vault.memory("a.md", "mem_a", name="Zyzzyva notes", body="a zyzzyva eats palms")
    vault.memory("b.md", "mem_b", name="Beta", body="second")
    store.sync(embed=False)
    con, index = store.con, store.cfg.index_path
    emb = CrashesOn("yzzyva")
    vectors.prepare_model(con, emb)
    chunk = [(k, h) for k, h, t in vectors.pending_texts(con) if k == "chunk" and "palms" in t]
    dead_batch(index, emb.fingerprint, chunk)
    assert vectors.embed_pending(con, emb, index) == 2  # mem_b's two texts
    assert [len(texts) for texts in emb.isolated] == [1, 1]  # the chunk, then its memory's name and description
    assert len(sentinel.Sentinel(index, emb.fingerprint).read().quarantined) == 2


def test_a_bounded_run_leaves_suspects_to_a_full_one(vault, store):
    vault.memory("a.md", "mem_a", name="Alpha", body="a zyzzyva")
    vault.memory("b.md", "mem_b", name="Beta", body="second")
    store.sync(embed=False)
    con, index = store.con, store.cfg.index_path
    emb = CrashesOn("zyzzyva")
    vectors.prepare_model(con, emb)
    suspects = [(k, h) for k, h, t in vectors.pending_texts(con) if "zyzzyva" in t or "Alpha" in t]
    dead_batch(index, emb.fingerprint, suspects)
    # A hook's dirty check embeds a few texts, quickly: not the suspects, which need a process apart.
    assert vectors.embed_pending(con, emb, index, limit=10, wait=False) == 4 - len(suspects)
    assert emb.isolated == [] and len(sentinel.Sentinel(index, emb.fingerprint).read().suspects) == len(suspects)
    assert vectors.embed_pending(con, emb, index) == len(suspects) - 1
    assert len(emb.isolated) == 1


def test_a_batch_of_a_living_process_is_left_alone(vault, store):
    vault.memory("a.md", "mem_a", name="Alpha", body="first")
    store.sync(embed=False)
    con, index = store.con, store.cfg.index_path
    emb = CrashesOn("zyzzyva")
    vectors.prepare_model(con, emb)
    name = Path(f"{index}.embedding.{os.getpid()}.99")
    record = {"pid": os.getpid(), "boot": sentinel._boot_id(), "start": sentinel._start_time(os.getpid())}
    name.write_text(json.dumps({**record, "model": emb.fingerprint, "texts": ["meta:x"]}), encoding="utf-8")
    other = Path(f"{index}.embedding.notes")  # not a name marchdb gives: never read nor deleted
    other.write_text("mine", encoding="utf-8")
    assert vectors.embed_pending(con, emb, index) == 2
    assert name.exists() and emb.isolated == [] and other.read_text() == "mine"


def test_crashes_no_text_explains_make_the_model_unusable(vault, store):
    con, index = store.con, store.cfg.index_path
    emb = CrashesOn("never there")
    for round_ in range(sentinel.CRASH_LIMIT):
        vault.memory(f"m{round_}.md", f"mem_{round_}", name=f"Note {round_}", body=f"body {round_}")
        store.sync(embed=False)
        vectors.prepare_model(con, emb)
        dead_batch(index, emb.fingerprint, [(k, h) for k, h, _ in vectors.pending_texts(con)])
        if round_ < sentinel.CRASH_LIMIT - 1:
            # Every suspect embeds fine alone: the crash stays unexplained, and is counted.
            assert vectors.embed_pending(con, emb, index) == 2
            assert sentinel.Sentinel(index, emb.fingerprint).read().crashes == round_ + 1
    with pytest.raises(ModelUnusable, match="crashed 3 times in a row"):
        vectors.embed_pending(con, emb, index)
    assert emb.condemned is not None
    assert Store(store.cfg, embedder=emb).embedder() is None  # nothing more goes to it in this process


def test_a_linked_ledger_is_never_followed(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text('{"fp": {"quarantined": {"meta:x": {"detail": "planted"}}}}', encoding="utf-8")
    index = tmp_path / "index.sqlite"
    guard = sentinel.Sentinel(index, "fp")
    Path(guard.ledger_path).symlink_to(target)
    assert guard.read().quarantined == {}
    guard.write(sentinel.Ledger(crashes=1))  # refused quietly: the next crash is found again
    assert "planted" in target.read_text() and Path(guard.ledger_path).is_symlink()


# A dead process's file and the ledger are found by name beside the index:
# whatever lies there (planted, cut short, another program's) is read as
# nothing, never as a traceback in every command that embeds.
_PLANTED = {
    "a ledger nested past Python's recursion limit": (".crashes.json", b"[" * 200_000),
    "a folder at the ledger's name": (".crashes.json", None),
    "ledger entries that are not objects": (
        ".crashes.json",
        json.dumps({"tiny-8": {"alone": {"query:x": 5}, "quarantined": {"meta:y": "text"}}}).encode(),
    ),
    "a batch file nested past Python's recursion limit": (f".embedding.{2**22 + 7}.0", b"[" * 60_000),
    "a batch file whose pid is a superscript digit": (".embedding.\u00b2.0", b"cut short"),
    "a batch file whose pid does not fit a pid": (f".embedding.{'9' * 30}.0", b"cut short"),
    "a batch whose pid does not fit a pid": (".embedding.7.0", json.dumps({"pid": 2**31, "texts": []}).encode()),
    "a batch whose pid is a list": (".embedding.7.0", json.dumps({"pid": [7], "model": "tiny-8"}).encode()),
    "a batch whose pid is infinite": (".embedding.7.0", b'{"pid": 1e400, "model": "tiny-8"}'),
    "a batch whose texts are a number": (
        ".embedding.7.0",
        json.dumps({"pid": 2**22 + 7, "model": "tiny-8", "texts": 5}).encode(),
    ),
}


@pytest.mark.parametrize("what", list(_PLANTED))
def test_garbage_beside_the_index_never_stops_a_sync_or_a_recall(vault, cfg, what):
    suffix, content = _PLANTED[what]
    vault.memory("dog.md", "mem_dog", name="Dog's medication", description="Biscuit takes carprofen at breakfast")
    store = Store(cfg, embedder=TinyEmbedder("tiny-8", dim=8))
    try:
        store.sync(embed=False)
        planted = Path(f"{cfg.index_path}{suffix}")
        if content is None:
            planted.mkdir()
        else:
            planted.write_bytes(content)
        store.sync()
        assert store.recall("Biscuit carprofen breakfast").mode == "hybrid"
    finally:
        store.close()


def test_the_ledger_stays_readable_with_every_model_at_its_bounds(tmp_path):
    # Each model keeps up to MAX_QUARANTINED + MAX_ALONE texts; past MAX_LEDGER_BYTES the file
    # reads as empty, and every text quarantined, of every model, would go to the model again.
    index = tmp_path / "index.sqlite"
    for model in ("old", "new"):
        ledger = sentinel.Ledger()
        for i in range(sentinel.MAX_QUARANTINED):
            at = f"2026-12-07T10:00:{i % 60:02d}.{i:03d}Z"
            ledger.quarantined[f"chunk:{model}{i:060d}"] = {"at": at, "detail": "crashed alone (signal 11, SIGSEGV)"}
            ledger.alone[f"query:{model}{i:060d}"] = {"at": at, "detail": "llama.cpp crashed on it, embedded alone"}
        sentinel.Sentinel(index, model).write(ledger)
    assert os.path.getsize(sentinel.Sentinel(index, "new").ledger_path) <= sentinel.MAX_LEDGER_BYTES
    kept = sentinel.Sentinel(index, "new").read()
    assert (len(kept.quarantined), len(kept.alone)) == (sentinel.MAX_QUARANTINED, sentinel.MAX_ALONE)
