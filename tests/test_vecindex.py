"""In-memory vectors of long-lived processes: same ranking as the SQL path,
kept in step with writes from any process, and the coarse tier's arithmetic."""

from __future__ import annotations

import hashlib

import apsw
import numpy as np
import pytest

from marchdb.embedding import Embedder
from marchdb.index import db, vectors
from marchdb.index.vecindex import VectorIndex
from marchdb.store import Store

QUERIES = [
    "why does every request miss the prompt cache?",
    "数据库密码多久换一次？",
    "how should review comments look",
    "what does the dog take with breakfast",
    "asdf qwer zxcv",
]


def ranking(store: Store, text: str) -> list[tuple[str, float]]:
    return [(h.id, round(h.score, 4)) for h in store.recall(text, explain=True).candidates]


def test_memory_path_ranks_like_the_sql_path(mixed_vault, model_cfg):
    with Store(model_cfg, keep_vectors=False) as sql_store:
        sql_store.sync()
        by_sql = [ranking(sql_store, q) for q in QUERIES]
        assert sql_store.vector_index() is None
    with Store(model_cfg, keep_vectors=True) as mem_store:
        by_memory = [ranking(mem_store, q) for q in QUERIES]
        vindex = mem_store.vector_index()
        assert vindex is not None and vindex.loads == 1 and not vindex.coarse
    for q, a, b in zip(QUERIES, by_sql, by_memory):
        assert [i for i, _ in a] == [i for i, _ in b], q
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-3), q


def test_each_recall_answers_for_its_own_query_and_the_cosine_function_is_not_left_behind(mixed_vault, model_cfg):
    # query_cosine is registered once per connection (registering it per recall
    # re-prepared every statement); each recall must still read its own query.
    with Store(model_cfg, keep_vectors=True) as store:
        first = [ranking(store, q) for q in QUERIES]
        again = [ranking(store, q) for q in reversed(QUERIES)][::-1]
        assert first == again
        with pytest.raises(apsw.SQLError, match="only valid inside a recall"):
            store.con.execute("SELECT query_cosine('meta', 1)").fetchall()


def test_default_store_switches_to_memory_from_the_second_recall(mixed_vault, model_store):
    model_store.sync()
    model_store.recall("prompt cache")
    assert model_store.vector_index() is None  # a one-shot call never loads the vectors
    model_store.recall("prompt cache")
    assert model_store.vector_index() is not None and model_store.vector_index().loads == 1


def test_copy_follows_saves_edits_and_other_processes(mixed_vault, model_cfg):
    with Store(model_cfg, keep_vectors=True) as store, Store(model_cfg) as other:
        store.sync()
        assert store.recall("prompt cache misses").hints[0].id == "mem_cache"
        vindex = store.vector_index()
        # Another process saves a memory (new vectors) ...
        saved = other.save(
            name="Sourdough starter feeding",
            description="Feed the sourdough starter twice a day with equal flour and water",
            tags=["baking"],
            body="Keep it at room temperature; discard half before feeding.",
        )
        hit = store.recall("how often do I feed the sourdough starter?").hints
        assert hit and hit[0].id == saved["id"]
        # ... and edits one (its old vectors are deleted, new ones added).
        path = mixed_vault.root / "2026/05/week2/mem_dog.md"
        path.write_text(path.read_text(encoding="utf-8").replace("carprofen", "fish oil"), encoding="utf-8")
        other.sync()
        assert store.recall("does the dog get fish oil for his joints?").hints[0].id == "mem_dog"
        assert vindex.loads == 1 and vindex.refreshes >= 2
        live = {r["vid"] for r in db.rows(store.con, "SELECT vid FROM vectors")}
        held = set(vindex.kinds["meta"].vids.tolist()) | set(vindex.kinds["chunk"].vids.tolist())
        assert held == live


class TopicEmbedder(Embedder):
    """Deterministic vectors in ten topics (a topic direction plus noise), like
    real embeddings' clusters; for arithmetic tests only."""

    def __init__(self, dim: int = 384):
        self.fingerprint, self.dim = f"topics-{dim}", dim
        self.topics = np.random.default_rng(0).normal(size=(10, dim)).astype(np.float32)

    def embed(self, texts, kind="passage", progress=None):
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            rng = np.random.default_rng(seed)
            v = self.topics[seed % 10] + rng.normal(size=self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32)


def test_coarse_tier_finds_the_exact_neighbours(vault, store):
    for i in range(300):
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"note {i}", body=f"body {i}")
    store.sync(embed=False)
    vectors.embed_pending(store.con, TopicEmbedder(), store.cfg.index_path)
    # Coarse: sign bits pick 60 of the 300 vectors of a kind, int8 copies re-rank them.
    exact, coarse = VectorIndex(), VectorIndex(exact_bytes=0, k_coarse=60)
    assert exact.sync(store.con) and coarse.sync(store.con)
    assert not exact.coarse and coarse.coarse
    assert coarse.nbytes() < exact.nbytes() / 3
    queries = TopicEmbedder().embed_queries([f"question {i}" for i in range(8)])
    for q in queries:
        e, c = exact.query(q), coarse.query(q)
        # The same neighbours, up to near-ties (within the int8 error) at the edge.
        for kind, k in (("chunk", 10), ("meta", 5)):
            edge = e.cosine(kind, e.knn(kind, k)[-1])
            assert c.knn(kind, k)[0] == e.knn(kind, k)[0]
            assert all(e.cosine(kind, v) >= edge - 0.005 for v in c.knn(kind, k))
        for vid in e.knn("meta", 5):
            assert c.cosine("meta", vid) == pytest.approx(e.cosine("meta", vid), abs=0.005)
    assert exact.query(queries[0]).cosine("meta", 10**9) is None
    # Edits and deletions reach the coarse copy without a full reload.
    vault.memory("m5.md", "mem_5", name="note 5, renamed", body="body 5, rewritten")
    (vault.root / "m6.md").unlink()
    store.sync(embed=False)
    vectors.embed_pending(store.con, TopicEmbedder(), store.cfg.index_path)
    assert coarse.sync(store.con) and (coarse.loads, coarse.refreshes) == (1, 1)
    fresh = VectorIndex()
    fresh.sync(store.con)
    for kind in ("meta", "chunk"):
        assert coarse.kinds[kind].vids.tolist() == fresh.kinds[kind].vids.tolist()
        assert coarse.kinds[kind].bits.shape == (384 // 64, len(fresh.kinds[kind].vids))
    for q in queries:
        c, e = coarse.query(q), fresh.query(q)
        assert c.knn("chunk", 10)[0] == e.knn("chunk", 10)[0]


def test_copy_reloads_when_the_index_is_rebuilt_in_place(mixed_vault, model_cfg):
    # Another process rebuilds the index in place (e.g. a newer schema): counters
    # and vids restart from 1, so only the new index_id can tell the copy.
    with Store(model_cfg, keep_vectors=True) as store, Store(model_cfg) as other:
        store.sync()
        assert store.recall("prompt cache misses").hints[0].id == "mem_cache"
        db._apply_schema(other.con)
        (mixed_vault.root / "2026/05/week2/mem_cache.md").unlink()
        other.sync()
        vindex = store.vector_index()
        assert [h.id for h in store.recall("what does the dog take with breakfast").hints][:1] == ["mem_dog"]
        assert vindex.loads == 2
        live = {r["vid"] for r in db.rows(store.con, "SELECT vid FROM vectors")}
        assert set(vindex.kinds["meta"].vids.tolist()) | set(vindex.kinds["chunk"].vids.tolist()) == live
