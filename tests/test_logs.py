"""The recall and open logs survive `rebuild` and schema rebuilds."""

from __future__ import annotations

import json

import apsw
import pytest
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.config import load_config
from marchdb.index import db, logs
from marchdb.store import Store


@pytest.fixture
def bm25_cfg(tmp_path, mixed_vault):
    return load_config(home=tmp_path / "home", root=mixed_vault.root, model=str(tmp_path / "missing.gguf"), env={})


def _use_it(store: Store) -> None:
    store.sync()
    assert store.recall("Context cache ordering", run_id="run-1").hints[0].id == "mem_cache"
    store.open("mem_dog")


def _history(store: Store) -> tuple[list, list]:
    hints = store.query("SELECT run_id, trigger, id, run_seq FROM hint_history ORDER BY seq")[1]
    use = store.query("SELECT id, hinted, opened FROM memory_use WHERE hinted + opened > 0 ORDER BY id")[1]
    return hints, use


def test_rebuild_keeps_the_logs_and_says_so(bm25_cfg):
    with Store(bm25_cfg) as store:
        _use_it(store)
        before = _history(store)
        assert before == ([("run-1", "user", "mem_cache", 1)], [("mem_cache", 1, 0), ("mem_dog", 0, 1)])
        store.take_notices()
        store.rebuild()
        assert "kept the logs (runs 1 row, recall_log 1 row, open_log 1 row)" in store.take_notices()
        assert _history(store) == before
        # the rules still see the old run: the next run does not get the same hint
        assert store.recall("Context cache ordering", run_id="run-2").hints == []


def test_cli_rebuild_prints_what_it_kept(tmp_path, bm25_cfg):
    with Store(bm25_cfg) as store:
        _use_it(store)
    args = ["--home", str(bm25_cfg.home), "--root", str(bm25_cfg.memory_root), "--model", str(tmp_path / "x.gguf")]
    result = CliRunner().invoke(app, [*args, "rebuild", "--json"])
    assert result.exit_code == 0, result.stderr
    assert "kept the logs (runs 1 row, recall_log 1 row, open_log 1 row)" in json.loads(result.stdout)["notices"]
    text = CliRunner().invoke(app, [*args, "rebuild"])
    assert "note: kept the logs (runs 1 row, recall_log 1 row, open_log 1 row)" in text.stderr


def test_a_schema_rebuild_keeps_the_logs(bm25_cfg):
    with Store(bm25_cfg) as store:
        _use_it(store)
        before = _history(store)
        with store.con:
            db.set_meta(store.con, "schema_hash", "stale")  # as after an upgrade that edited sql/*.sql
    with Store(bm25_cfg) as store:
        store.sync()
        notices = store.take_notices()
        assert any(
            "schema files changed; rebuilt" in n and "kept the logs (runs 1 row, recall_log 1 row, open_log 1 row)" in n
            for n in notices
        ), notices
        assert _history(store) == before


def test_an_unreadable_old_index_loses_its_logs_and_says_so(bm25_cfg):
    with Store(bm25_cfg) as store:
        _use_it(store)
    # Ours (marchdb's mark survives in the header) but broken past it. (A file
    # that is not marchdb's is never rebuilt at all: test_hostile.py.)
    for suffix in ("-wal", "-shm"):
        bm25_cfg.index_path.with_name(bm25_cfg.index_path.name + suffix).unlink(missing_ok=True)
    data = bytearray(bm25_cfg.index_path.read_bytes())
    data[100:] = b"garbage!" * ((len(data) - 100) // 8)
    bm25_cfg.index_path.write_bytes(bytes(data))
    with Store(bm25_cfg) as store:
        store.rebuild()
        notices = store.take_notices()
        assert any("could not be read" in n and "logs are lost" in n for n in notices), notices
        assert store.status()["memories"] == 5


def test_restore_copies_by_column_name_and_skips_what_it_cannot(tmp_path):
    old = apsw.Connection(str(tmp_path / "old.sqlite"))
    old.execute(
        "CREATE TABLE runs(seq INTEGER PRIMARY KEY, run_id TEXT, at TEXT, extra TEXT);"
        "INSERT INTO runs VALUES (1, 'r1', '2026-01-01T00:00:00.000Z', 'gone');"
        "INSERT INTO runs VALUES (2, 'cc:s1:4', '2026-01-01T00:00:01.000Z', NULL);"
        "INSERT INTO runs VALUES (3, '2026-12-01T10:15:30', '2026-01-01T00:00:02.000Z', NULL);"
        "CREATE TABLE recall_log(seq INTEGER PRIMARY KEY, run_id TEXT, mem_id TEXT);"  # no score, no trigger
        "INSERT INTO recall_log VALUES (1, 'r1', 'mem_a');"
    )
    saved = logs.read(old)
    new, _ = db.open_index(tmp_path / "new.sqlite")
    with new:
        copied, skipped = logs.restore(new, saved)
    assert (copied, skipped) == ({"runs": 3}, ["recall_log"])
    # Runs the Claude Code hook logged before conversations were kept get their session back;
    # any other run id (even one with ':' in it) keeps sharing one window, as before.
    assert new.execute("SELECT seq, run_id, at, conversation FROM runs").fetchall() == [
        (1, "r1", "2026-01-01T00:00:00.000Z", None),
        (2, "cc:s1:4", "2026-01-01T00:00:01.000Z", "cc:s1"),
        (3, "2026-12-01T10:15:30", "2026-01-01T00:00:02.000Z", None),
    ]
    assert (
        logs.describe(copied, skipped)
        == "kept the logs (runs 3 rows); recall_log could not be kept (their columns changed)"
    )
