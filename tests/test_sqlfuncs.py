"""The march_* SQL functions on the store's connection (Store.query, marchdb sql)."""

from __future__ import annotations

import io
import json

import apsw
import apsw.shell
import numpy as np
import pytest
from typer.testing import CliRunner

from marchdb import fts
from marchdb.cli.demo import MEMORIES
from marchdb.cli.main import app
from marchdb.config import load_config
from marchdb.errors import InvalidInput, ModelError, NotFound
from marchdb.index import recall as recall_mod
from marchdb.index import sqlfuncs, terms
from marchdb.index.sqlfuncs import RECALL_COLUMNS, SIMILAR_COLUMNS
from marchdb.store import Store


@pytest.fixture
def bm25_store(tmp_path, mixed_vault):
    """A store on the mixed vault whose model cannot load (BM25 only, announced)."""
    cfg = load_config(home=tmp_path / "home", root=mixed_vault.root, model=str(tmp_path / "missing.gguf"), env={})
    with Store(cfg) as s:
        s.sync()
        yield s


def rows(store, sql, params=(), write=False) -> list[dict]:
    columns, found = store.query(sql, params, write=write)
    return [dict(zip(columns, r)) for r in found]


# ---------------------------------------------------------------- without a model


def test_fts_and_match_are_what_recall_uses(bm25_store):
    text = "数据库密码 rotation"
    assert rows(bm25_store, "SELECT march_fts(?) AS t", (text,))[0]["t"] == fts.index_text(text)
    question = "数据库密码多久换一次？"
    _ceiling, informative = terms.bm25_terms(bm25_store.con, fts.query_terms(question))
    match = rows(bm25_store, "SELECT march_match(?) AS m", (question,))[0]["m"]
    assert match == fts.match_expression(informative) and '"密码"' in match
    # ... so the BM25 side can be redone by hand:
    hits = rows(bm25_store, "SELECT m.id FROM fts JOIN memory_index m ON m.rid = fts.rowid WHERE fts MATCH ?", (match,))
    assert [h["id"] for h in hits] == ["mem_db"]
    assert rows(bm25_store, "SELECT march_match('') AS m, march_fts(NULL) AS f") == [{"m": None, "f": None}]


def test_recall_ranks_the_project_given_as_its_fourth_argument(mixed_vault, bm25_store):
    mixed_vault.memory("p.md", "mem_p", name="Zebra stripes", description="why zebras have stripes", tags=["project/x"])
    bm25_store.sync(embed=False)
    sql = "SELECT id, project_bonus FROM march_recall('zebra stripes', 'user', NULL, 'x') WHERE project_bonus"
    assert rows(bm25_store, sql) == [{"id": "mem_p", "project_bonus": recall_mod.PROJECT_BONUS}]


def test_recall_without_a_model_is_bm25_and_says_so(bm25_store):
    question = "Context cache ordering"
    found = rows(bm25_store, "SELECT * FROM march_recall(?)", (question,))
    assert found and set(found[0]) == set(RECALL_COLUMNS)
    assert {r["mode"] for r in found} == {"bm25"}
    explained = bm25_store.recall(question, explain=True)
    assert [(r["id"], round(r["score"], 6), r["reason"]) for r in found] == [
        (c.id, round(c.score, 6), c.reason) for c in explained.candidates
    ]
    assert found[0]["id"] == "mem_cache" and found[0]["hint"] == 1 and found[0]["bm25_raw"] > 0
    # the ranking adjustments of --explain too: temperature, and the project bonus when one is given
    assert all(isinstance(r["temp_adj"], float) and r["project_bonus"] is None for r in found)
    sql = "SELECT id, project_bonus FROM march_recall(?, 'user', NULL, ?) WHERE project_bonus"
    assert rows(bm25_store, sql, (question, "nobody")) == []
    # the JSON twin holds the same rows
    as_json = json.loads(rows(bm25_store, "SELECT march_recall_json(?) AS j", (question,))[0]["j"])
    assert [(r["id"], r["score"]) for r in as_json] == [(r["id"], r["score"]) for r in found]
    # blank and NULL text: no rows, as SQL functions answer NULL
    assert rows(bm25_store, "SELECT * FROM march_recall('  ')") == []
    assert rows(bm25_store, "SELECT * FROM march_recall(NULL)") == []


def test_errors_are_sql_errors_with_a_clear_message(bm25_store):
    with pytest.raises(
        ModelError,
        match="march_embed: no embedding model could be loaded: .*missing.gguf does not exist; fix embeddingModel",
    ):
        bm25_store.query("SELECT march_embed('hello')")
    with pytest.raises(InvalidInput, match="kind must be 'query' or 'passage'"):
        bm25_store.query("SELECT march_embed('hello', 'document')")
    # march_recall's arguments are memory_recall's, refused in its words (ops.py)
    with pytest.raises(InvalidInput, match="march_recall: trigger must be one of user, assistant, got 'system'"):
        bm25_store.query("SELECT * FROM march_recall('cache', 'system')")
    with pytest.raises(NotFound, match="march_similar: no memory has id mem_nope"):
        bm25_store.query("SELECT * FROM march_similar('mem_nope')")
    with pytest.raises(ModelError, match="mem_cache has no vector yet; run `marchdb sync`"):
        bm25_store.query("SELECT * FROM march_similar('mem_cache')")
    with pytest.raises(InvalidInput, match="k must be a whole number from 1 to 100"):
        bm25_store.query("SELECT * FROM march_similar('mem_cache', 1000)")
    with pytest.raises(InvalidInput, match="march_recall: run_id is 201 characters; at most 200 are taken"):
        bm25_store.query("SELECT * FROM march_recall('cache', 'user', ?)", ("r" * 201,), write=True)
    # the connection is still fine afterwards
    assert rows(bm25_store, "SELECT count(*) AS n FROM memory_index") == [{"n": 5}]


def test_march_embed_on_a_connection_of_your_own_names_its_text_beside_the_stores_index(
    tmp_path, mixed_vault, cfg, monkeypatch
):
    # The text was named beside the connection's file: for an in-memory one,
    # beside the current folder (its parent, as `<folder>.embedding.<pid>`),
    # and for another file where no process loading the model looks (a
    # crash on it was never quarantined, and crashed again).
    from conftest import TinyEmbedder

    class Spy(TinyEmbedder):
        def embed(self, texts, kind, progress=None):
            self.named = sorted(p for p in tmp_path.rglob("*.embedding.*"))
            return super().embed(texts, kind, progress)

    spy = Spy()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with Store(cfg, embedder=spy) as store:
        store.sync(embed=False)
        con = apsw.Connection(":memory:")
        sqlfuncs.register(con, store.sql_engine, tables=False)
        assert len(con.execute("SELECT march_embed('prefix cache layers')").fetchone()[0]) == 4 * spy.dim
        # A NULL kind takes the default, as a null argument does for every operation.
        assert con.execute(
            "SELECT march_embed('prefix cache layers', NULL) = march_embed('prefix cache layers')"
        ).fetchone() == (1,)
        con.close()
    assert [p.parent for p in spy.named] == [cfg.index_path.parent], spy.named
    assert list(elsewhere.iterdir()) == [] and not list(tmp_path.glob("elsewhere.*"))


def test_cli_and_shell_report_function_errors_on_one_line(tmp_path, mixed_vault):
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(mixed_vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    assert runner.invoke(app, [*base, "sync"], env=env).exit_code == 0
    result = runner.invoke(app, [*base, "sql", "SELECT * FROM march_similar('mem_nope')"], env=env)
    assert result.exit_code == NotFound.exit_code
    assert result.stderr.strip() == "error: march_similar: no memory has id mem_nope in the index"
    scalar = runner.invoke(app, [*base, "sql", "SELECT march_recall('cache')"], env=env)
    assert scalar.exit_code == InvalidInput.exit_code and "march_recall is a table: SELECT * FROM" in scalar.stderr
    # The interactive shell prints the message and carries on.
    with Store(load_config(home=tmp_path / "home", root=mixed_vault.root, model="/nope.gguf", env={})) as store:
        out, err = io.StringIO(), io.StringIO()
        script = "SELECT march_embed('x');\nSELECT count(*) FROM march_recall('cache');\n"
        shell = apsw.shell.Shell(db=store.con, stdin=io.StringIO(script), stdout=out, stderr=err)
        shell.cmdloop()
        assert "no embedding model could be loaded" in err.getvalue()
        assert out.getvalue().strip().splitlines()[-1].strip() == "1"


def test_a_run_id_is_refused_read_only_and_logged_with_write(bm25_store):
    sql = "SELECT id, hint, reason FROM march_recall('Context cache ordering', 'user', 'run-1')"
    with pytest.raises(InvalidInput, match="records its hints in the recall log.*read-only.*--write"):
        bm25_store.query(sql)
    assert rows(bm25_store, "SELECT count(*) AS n FROM recall_log") == [{"n": 0}]
    first = rows(bm25_store, sql, write=True)
    assert first[0] == {"id": "mem_cache", "hint": 1, "reason": None}
    logged = rows(bm25_store, "SELECT run_id, trigger, id FROM hint_history")
    assert logged == [{"run_id": "run-1", "trigger": "user", "id": "mem_cache"}]
    # the hint rules: the next run does not get it again (suppressed for 10 runs)
    again = rows(bm25_store, sql.replace("run-1", "run-2"), write=True)
    assert again[0]["id"] == "mem_cache" and again[0]["reason"] == "hinted in the last 10 runs"
    # without a run id nothing is suppressed, nothing logged
    assert rows(bm25_store, "SELECT hint FROM march_recall('Context cache ordering') LIMIT 1") == [{"hint": 1}]
    assert rows(bm25_store, "SELECT count(*) AS n FROM recall_log") == [{"n": 1}]
    # a run of another conversation was never shown it: hinted there
    other = "SELECT id, hint FROM march_recall('Context cache ordering', 'user', 'run-3', NULL, 'chat-x') LIMIT 1"
    assert rows(bm25_store, other, write=True) == [{"id": "mem_cache", "hint": 1}]
    assert rows(bm25_store, "SELECT conversation FROM runs WHERE run_id = 'run-3'") == [{"conversation": "chat-x"}]


def test_a_run_id_inside_a_write_transaction_joins_it(bm25_store):
    con = bm25_store.con
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO open_log(mem_id) VALUES ('mem_cache')")
    found = con.execute("SELECT id FROM march_recall('Context cache ordering', 'user', 'run-t') WHERE hint").fetchall()
    assert found == [("mem_cache",)]
    assert con.execute("SELECT count(*) FROM recall_log").fetchone()[0] == 1  # visible inside the transaction
    con.execute("ROLLBACK")  # ... and gone with it: no second connection waited on our lock
    assert con.execute("SELECT count(*) FROM recall_log").fetchone()[0] == 0


def test_recall_in_sql_runs_the_dirty_check_first(bm25_store, mixed_vault):
    mixed_vault.memory(
        "new.md", "mem_kayak", name="Kayak trip", description="Paddling the fjord in a sea kayak", tags=["outdoor"]
    )
    with bm25_store.con:
        bm25_store.con.execute("UPDATE meta SET value = '0' WHERE key = 'last_scan_epoch'")  # the scan is old
    bm25_store.scanned_at = None  # ... for this process too
    found = rows(bm25_store, "SELECT id FROM march_recall('sea kayak fjord') WHERE hint")
    assert found == [{"id": "mem_kayak"}]


# ---------------------------------------------------------------- with the real model


def _demo_store(model_cfg, vault) -> Store:
    store = Store(model_cfg)
    for mem in MEMORIES:
        store.save(embed=False, **mem)
    store.sync()
    return store


def test_march_recall_answers_like_recall_explain_on_the_demo_vault(tmp_path, vault, model_cfg, default_model_path):
    question = "why does the prompt cache miss?"
    with _demo_store(model_cfg, vault) as store:
        cache_id = next(m for m in store.query("SELECT id, name FROM memory_index")[1] if m[1] == MEMORIES[0]["name"])[
            0
        ]
    runner = CliRunner()
    base = ["--home", str(model_cfg.home), "--root", str(vault.root), "--model", str(default_model_path)]
    sql = runner.invoke(app, [*base, "sql", f"SELECT id, score FROM march_recall('{question}')", "--json"])
    explain = runner.invoke(app, [*base, "recall", question, "--explain", "--json"])
    assert sql.exit_code == 0 and explain.exit_code == 0, (sql.stderr, explain.stderr)
    from_sql = [(r["id"], round(r["score"], 4)) for r in json.loads(sql.stdout)["rows"]]
    explained = json.loads(explain.stdout)
    assert from_sql == [(c["id"], c["score"]) for c in explained["candidates"]]
    assert from_sql[0][0] == cache_id and explained["hints"][0]["id"] == cache_id
    # the table output people read starts with that memory too
    table = runner.invoke(app, [*base, "sql", f"SELECT id, score FROM march_recall('{question}')"])
    assert table.stdout.splitlines()[2].startswith(cache_id)


def test_march_embed_is_the_stored_vector(mixed_vault, model_store):
    model_store.sync()
    store = model_store
    # a chunk's text embedded as a passage is the vector the index holds for it; a short
    # note's one chunk is embedded with its name and description (embedded_chunk_text)
    whole = "Dog's medication\nBiscuit takes half a carprofen tablet with breakfast for joint pain\n"
    whole += "The vet prescribed carprofen in March. Half a tablet with breakfast."
    (distance,) = store.query(
        "SELECT vec_distance_cosine(vc.embedding, march_embed(?, 'passage')) FROM chunks c "
        "JOIN memory_index m ON m.rid = c.mem_rid JOIN vectors v ON v.kind = 'chunk' AND v.hash = c.hash "
        "JOIN vec_chunk vc ON vc.rowid = v.vid WHERE m.id = 'mem_dog'",
        (whole,),
    )[1][0]
    assert distance < 1e-3  # sync embeds in batches; llama.cpp's batched sums differ by ~3e-5
    blob = store.query("SELECT march_embed('what does the dog take?')")[1][0][0]
    query_vec = store.embedder().embed_queries(["what does the dog take?"])[0]
    assert np.allclose(np.frombuffer(blob, dtype=np.float32), query_vec, atol=1e-5)
    nearest = store.query(
        "SELECT m.id FROM memory_index m JOIN vectors v ON v.kind = 'meta' AND v.hash = m.meta_hash "
        "JOIN vec_meta vm ON vm.rowid = v.vid "
        "ORDER BY vec_distance_cosine(vm.embedding, march_embed('what does the dog take for his joints?')) LIMIT 1"
    )[1]
    assert nearest == [("mem_dog",)]
    assert store.query("SELECT march_embed(NULL), march_embed('  ')")[1] == [(None, None)]


def test_march_similar_ranks_by_stored_vectors(mixed_vault, model_store):
    model_store.sync()
    mixed_vault.memory(
        "2026/05/week2/cache2.md",
        "mem_cache2",
        name="Prompt cache misses",
        description="Volatile blocks placed before stable ones invalidate the prefix cache",
        tags=["cache"],
    )
    model_store.sync()
    found = rows(model_store, "SELECT * FROM march_similar('mem_cache', 3)")
    assert set(found[0]) == set(SIMILAR_COLUMNS) and len(found) == 3
    assert found[0]["id"] == "mem_cache2" and "mem_cache" not in [r["id"] for r in found]
    assert [r["rank"] for r in found] == [1, 2, 3]
    assert found[0]["cos"] > found[1]["cos"] >= found[2]["cos"] and 0 < found[0]["dense"] <= 1
    as_json = json.loads(rows(model_store, "SELECT march_similar_json('mem_cache', 3) AS j")[0]["j"])
    assert [r["id"] for r in as_json] == [r["id"] for r in found]


def test_a_join_that_runs_the_function_first_is_an_error_not_zero_rows(bm25_store):
    store = bm25_store
    with pytest.raises(InvalidInput, match="CROSS JOIN"):
        store.query("SELECT m.id, s.id FROM memory_index m, march_similar(m.id, 2) s")
    with pytest.raises(InvalidInput, match="without a message text"):
        store.query("SELECT * FROM march_recall")
    assert store.query("SELECT * FROM march_recall(NULL)")[1] == []  # NULL in, nothing out
    cross = store.query("SELECT m.id, s.id FROM memory_index m CROSS JOIN march_recall(m.name) s WHERE s.hint")[1]
    assert ("mem_cache", "mem_cache") in cross


def test_march_recall_has_a_column_for_every_signal_recall_reports():
    # cbm25_raw came to recall's signals and not to march_recall's columns.
    from marchdb.index import recall, sqlfuncs

    assert set(recall.SIGNALS) <= set(sqlfuncs.RECALL_COLUMNS)
