"""Vector bookkeeping: content-hash keys, garbage collection, sign-bit tables
(a deterministic stand-in embedder; the real model is exercised in test_store)."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest
from conftest import TinyEmbedder

from marchdb.errors import IndexUnavailable
from marchdb.index import db, vectors
from marchdb.store import Store


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


def _old_schema(path) -> None:
    """Make the index at ``path`` look like one an older marchdb made."""
    from marchdb.index.db import _connect_raw

    con = _connect_raw(path)
    con.pragma("user_version", db.SCHEMA_VERSION - 1)
    con.close()


def test_a_schema_change_keeps_every_vector(vault, cfg):
    from marchdb.store import Store

    for i in range(6):
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"Memory {i}", body=f"body number {i}\n\nsecond part {i}")
    emb = TinyEmbedder("tiny-8", dim=8)
    with Store(cfg) as store:
        store.sync(embed=False)
        assert vectors.embed_pending(store.con, emb, store.cfg.index_path) == 12
        before = {
            (r["kind"], r["hash"]): r["embedding"]
            for r in db.rows(
                store.con,
                "SELECT v.kind, v.hash, e.embedding FROM vectors v JOIN vec_meta e ON e.rowid = v.vid "
                "UNION ALL SELECT v.kind, v.hash, e.embedding FROM vectors v JOIN vec_chunk e ON e.rowid = v.vid",
            )
        }
        counted = counts(store.con)
        center = db.get_meta(store.con, "vector_center")
    _old_schema(cfg.index_path)
    with Store(cfg) as store:
        assert store.con is not None  # opening it rebuilds the schema
        notes = store.take_notices()
        assert any("kept 12 vectors" in n for n in notes), notes
        report = store.sync(embed=False)
        assert report.added == 6
        assert vectors.embed_pending(store.con, emb, store.cfg.index_path) == 0  # nothing embedded again
        after = {
            (r["kind"], r["hash"]): r["embedding"]
            for r in db.rows(
                store.con,
                "SELECT v.kind, v.hash, e.embedding FROM vectors v JOIN vec_meta e ON e.rowid = v.vid "
                "UNION ALL SELECT v.kind, v.hash, e.embedding FROM vectors v JOIN vec_chunk e ON e.rowid = v.vid",
            )
        }
        assert after == before
        assert counts(store.con) == counted
        assert db.get_meta(store.con, "model_fingerprint") == "tiny-8"
        assert db.get_meta(store.con, "vector_center") == center


def test_a_schema_change_with_the_model_embeds_nothing_again(vault, model_cfg):
    from marchdb.store import Store

    vault.memory("deploy.md", "mem_deploy", name="Deploy day", description="We deploy on Tuesdays, never on Fridays")
    vault.memory("dog.md", "mem_dog", name="Dog's medication", description="Biscuit takes carprofen with breakfast")
    with Store(model_cfg) as store:
        assert store.sync().embedded == 4  # two names and descriptions, two short notes embedded whole
        first = store.recall("can we ship this on friday?", threshold=0.0)
    _old_schema(model_cfg.index_path)
    with Store(model_cfg) as store:
        report = store.sync()
        assert report.added == 2 and report.embedded == 0
        again = store.recall("can we ship this on friday?", threshold=0.0)
        assert again.mode == first.mode != "bm25"
        assert [(h.id, round(h.score, 4)) for h in again.hints] == [(h.id, round(h.score, 4)) for h in first.hints]


def test_the_embedding_lease_is_never_opened_through_a_link(vault, store, tmp_path):
    vault.memory("a.md", "mem_a", name="Alpha", body="first body")
    store.sync(embed=False)
    target = tmp_path / "elsewhere" / "planted"
    target.parent.mkdir()
    lease = f"{store.cfg.index_path}.embed.lock"
    os.symlink(target, lease)
    with pytest.raises(IndexUnavailable, match="embed.lock"):
        vectors.embed_pending(store.con, TinyEmbedder("tiny-8", dim=8), store.cfg.index_path)
    assert not target.exists()  # the link's target was never created
    assert os.path.islink(lease)  # nor the link removed: it is not marchdb's


def hold_lease(index_path) -> int:
    """Take the embedding lease as another process embedding a backlog would."""
    fd = os.open(f"{index_path}.embed.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_save_never_waits_for_a_backlog_another_process_embeds(vault, cfg):
    vault.memory("a.md", "mem_a", name="Alpha", body="first body")
    with Store(cfg, embedder=TinyEmbedder("tiny-8", dim=8)) as store:
        store.sync()
        fd = hold_lease(store.cfg.index_path)  # a `marchdb sync` of an import, minutes long
        answer: dict = {}
        saver = threading.Thread(
            target=lambda: answer.update(
                store.save(name="Beta", description="a second memory", body="second body", tags=["t"])
            )
        )
        try:
            saver.start()
            saver.join(60)
            saved_in_time = not saver.is_alive()
        finally:
            os.close(fd)
            saver.join(60)
        assert saved_in_time
        assert answer["status"] == "created"
        # Its own texts have their vectors already: nothing of it waits for the backlog.
        assert vectors.pending_texts(store.con) == []


def test_texts_indexed_while_a_backlog_embeds_are_embedded_by_that_run(vault, store, cfg):
    for i in range(3):
        vault.memory(f"n{i}.md", f"mem_{i}", name=f"Note {i}", body=f"body {i}")
    store.sync(embed=False)
    emb = TinyEmbedder("tiny-8", dim=8)
    added = []

    def another_writer(done: int, total: int) -> None:
        if done and not added:  # a save in another process, while this run embeds
            vault.memory("late.md", "mem_late", name="Late", body="written meanwhile")
            with Store(cfg) as other:
                other.sync(embed=False)
            added.append(True)

    vectors.embed_pending(store.con, emb, store.cfg.index_path, progress=another_writer, batch=2)
    assert added
    assert vectors.pending_texts(store.con) == []
    assert db.get_meta(store.con, "vectors_complete") == emb.fingerprint


class RecordingEmbedder(TinyEmbedder):
    """TinyEmbedder that keeps every text it was asked to embed."""

    def __init__(self):
        super().__init__("tiny-8", dim=8)
        self.texts: list[str] = []

    def embed(self, texts, kind, progress=None):
        self.texts += list(texts)
        return super().embed(texts, kind, progress)


def test_a_short_note_is_embedded_whole_a_long_one_by_its_chunks(vault, store):
    # A short note's body rarely says what it is about on its own ("Friday
    # deploys broke the weekend twice."): its one chunk is embedded under its
    # name and description. A long body's chunks and a chat's turns are not.
    vault.memory("a.md", "mem_a", name="Deploy day", description="We deploy on Tuesdays", body="Fridays broke it.")
    vault.memory(
        "d.md",
        "mem_d",
        name="Lemons",
        description="Lemons are yellow.",
        body="Lemons are yellow. Their pigment is a flavonoid.",
    )
    long_body = "\n\n".join(f"Paragraph {i}: " + "words about something " * 20 for i in range(4))
    vault.memory("b.md", "mem_b", name="Long", description="a long note", body=long_body)
    vault.memory(
        "c.md",
        "mem_c",
        name="Chat",
        description="a chat",
        body="**user**: my dog is Max\n\n**assistant**: ok\n\n**user**: and the cat?\n\n**assistant**: Tom",
    )
    store.sync(embed=False)
    emb = RecordingEmbedder()
    vectors.embed_pending(store.con, emb, store.cfg.index_path)
    assert "Deploy day\nWe deploy on Tuesdays\nFridays broke it." in emb.texts
    assert "Fridays broke it." not in emb.texts
    assert "Lemons\nLemons are yellow. Their pigment is a flavonoid." in emb.texts  # its description once
    chunks = [
        r["text"]
        for r in db.rows(
            store.con,
            "SELECT c.text FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.id IN ('mem_b', 'mem_c')",
        )
    ]
    assert len(chunks) > 2 and all(text in emb.texts for text in chunks)
    # the chunk's own text is what FTS and --explain read
    assert (
        db.rows(store.con, "SELECT c.text FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.id = 'mem_a'")[
            0
        ]["text"]
        == "Fridays broke it."
    )

    # renamed, the note's chunk is embedded again under its new name
    vault.memory("a.md", "mem_a", name="Release day", description="We deploy on Tuesdays", body="Fridays broke it.")
    store.sync(embed=False)
    emb.texts.clear()
    vectors.embed_pending(store.con, emb, store.cfg.index_path)
    assert "Release day\nWe deploy on Tuesdays\nFridays broke it." in emb.texts
    assert vectors.pending_texts(store.con) == []
