"""Vector bookkeeping: content-hash keys, garbage collection, sign-bit tables
(a deterministic stand-in embedder; the real model is exercised in test_store)."""

from __future__ import annotations

from conftest import TinyEmbedder

from marchdb.index import db, vectors


def counts(con) -> dict:
    """Rows in the plain vectors table and in each vec0 table."""
    return {
        t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("vectors", "vec_meta", "vec_chunk", "vec_meta_bits", "vec_chunk_bits")
    }


def test_edit_and_delete_drop_stale_vectors_everywhere(vault, store):
    vault.memory("a.md", "mem_a", name="Alpha", body="first body")
    vault.memory("b.md", "mem_b", name="Beta", body="second body")
    store.sync(embed=False)
    emb = TinyEmbedder("tiny-8", dim=8)  # a multiple of 8: the sign-bit tables exist
    con, index = store.con, store.cfg.index_path
    assert vectors.embed_pending(con, emb, index) == 4
    assert counts(con) == {"vectors": 4, "vec_meta": 2, "vec_chunk": 2, "vec_meta_bits": 2, "vec_chunk_bits": 2}

    vault.memory("a.md", "mem_a", name="Alpha", description="changed", body="first body, edited")
    (vault.root / "b.md").unlink()
    store.sync(embed=False)
    assert vectors.embed_pending(con, emb, index) == 2  # mem_a's new metadata and body
    assert counts(con) == {"vectors": 2, "vec_meta": 1, "vec_chunk": 1, "vec_meta_bits": 1, "vec_chunk_bits": 1}
    kept = {r["hash"] for r in db.rows(con, "SELECT hash FROM vectors")}
    wanted = {r["meta_hash"] for r in db.rows(con, "SELECT meta_hash FROM memory_index")}
    wanted |= {r["hash"] for r in db.rows(con, "SELECT hash FROM chunks")}
    assert kept == wanted


def test_same_text_twice_is_embedded_once(vault, store):
    vault.memory("a.md", "mem_a", name="Same", body="same body")
    vault.memory("b.md", "mem_b", name="Same", body="same body")
    store.sync(embed=False)
    assert vectors.embed_pending(store.con, TinyEmbedder("tiny-8", dim=8), store.cfg.index_path) == 2


def test_deleting_a_memory_alone_frees_its_vectors(vault, store):
    vault.memory("a.md", "mem_a", name="Alpha", body="first body")
    vault.memory("b.md", "mem_b", name="Beta", body="second body")
    store.sync(embed=False)
    emb = TinyEmbedder("tiny-8", dim=8)
    con, index = store.con, store.cfg.index_path
    vectors.embed_pending(con, emb, index)
    (vault.root / "b.md").unlink()
    store.sync(embed=False)
    assert vectors.embed_pending(con, emb, index) == 0  # nothing new to embed ...
    assert counts(con)["vectors"] == 2  # ... but mem_b's two vectors are gone


def test_two_processes_never_embed_the_same_backlog(tmp_path, vault, default_model_path):
    """The embedding lease: the second sync waits, then finds the texts done."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    for i in range(40):
        body = "\n\n".join(f"Paragraph {j} of note {i} about topic {i % 7} and detail {j}." for j in range(4))
        vault.memory(f"n{i}.md", f"mem_{i}", name=f"Note {i}", description=f"note number {i}", body=body)
    exe = str(Path(sys.executable).with_name("marchdb"))
    args = [exe, "--home", str(tmp_path / "home"), "--root", str(vault.root), "--model", str(default_model_path)]
    assert subprocess.run([*args, "sync", "--no-embed"], capture_output=True).returncode == 0
    procs = [subprocess.Popen([*args, "sync", "--json"], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    reports = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    total = 40 + 40  # one metadata text and one body chunk (four short paragraphs) per memory
    assert sorted(r["embedded"] for r in reports) == [0, total]
