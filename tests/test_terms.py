"""A message's words as BM25 weighs them: the chunk table kept in step with
the memories, and the ceiling of a message on chunk statistics."""

from __future__ import annotations

import math

import pytest

from marchdb.index import terms as terms_mod


def chunk_rows(store) -> list[tuple[str, str]]:
    """(memory id, chunk text) of every row of fts_chunk (which holds the
    words only: the text is the chunk's)."""
    return sorted(
        store.con.execute(
            "SELECT m.id, c.text FROM fts_chunk f JOIN chunks c ON c.rid = f.rowid "
            "JOIN memory_index m ON m.rid = c.mem_rid"
        ).fetchall()
    )


def chunk_matches(store, word: str) -> list[str]:
    """The memory ids of the chunks fts_chunk finds ``word`` in."""
    return sorted(
        r[0]
        for r in store.con.execute(
            "SELECT m.id FROM fts_chunk f JOIN chunks c ON c.rid = f.rowid "
            "JOIN memory_index m ON m.rid = c.mem_rid WHERE fts_chunk MATCH ?",
            (f'"{word}"',),
        )
    )


def test_fts_chunk_holds_the_chunks_of_active_memories_only(vault, store):
    vault.memory("a.md", "mem_a", body="Alpha paragraph one.\n\nAlpha paragraph two.")
    vault.memory("b.md", "mem_b", body="Beta body.", status="deprecated")
    store.sync(embed=False)
    assert chunk_rows(store) == [("mem_a", "Alpha paragraph one.\n\nAlpha paragraph two.")]
    assert store.con.execute("SELECT count(*) FROM fts_chunk").fetchone()[0] == 1

    # an edited body replaces its rows; a retired memory takes them along
    vault.memory("a.md", "mem_a", body="Gamma now.")
    vault.memory("b.md", "mem_b", body="Beta body.")
    store.sync(embed=False)
    assert chunk_rows(store) == [("mem_a", "Gamma now."), ("mem_b", "Beta body.")]
    assert chunk_matches(store, "alpha") == [] and chunk_matches(store, "gamma") == ["mem_a"]
    vault.memory("a.md", "mem_a", body="Gamma now.", status="archived")
    (vault.root / "b.md").unlink()
    store.sync(embed=False)
    assert chunk_rows(store) == []
    assert store.con.execute("SELECT count(*) FROM fts_chunk").fetchone()[0] == 0


def test_chinese_chunks_are_indexed_as_bigrams(vault, store):
    vault.memory("z.md", "mem_z", body="密码在抽屉里")
    store.sync(embed=False)
    assert chunk_rows(store) == [("mem_z", "密码在抽屉里")]
    terms = [r[0] for r in store.con.execute("SELECT term FROM fts_chunk_vocab")]
    assert sorted(terms) == sorted(["密码", "码在", "在抽", "抽屉", "屉里"])
    assert chunk_matches(store, "抽屉") == ["mem_z"]


def test_chunk_ceiling_is_fts5s_bound_on_chunk_statistics(vault, store):
    # three chunks: "apple" is in one of them
    vault.memory("a.md", "mem_a", body="apple pie\n\n" + "x" * 790 + "\n\nbanana split")
    vault.memory("b.md", "mem_b", body="cherry")
    store.sync(embed=False)
    n = terms_mod.chunk_count(store.con)
    assert n == 4
    idf_apple = math.log((n - 1 + 0.5) / (1 + 0.5))
    idf_absent = math.log((n + 0.5) / 0.5)
    assert terms_mod.chunk_ceiling(store.con, ["apple", "zzz"]) == pytest.approx((idf_apple + idf_absent) * 2.2)
    assert terms_mod.chunk_ceiling(store.con, []) == 1.0
