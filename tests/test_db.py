"""The index file: schema, version checks, rebuilds, views without extensions."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from marchdb.errors import IndexUnavailable
from marchdb.index import db, ownership


def test_fresh_index_has_schema_and_vec(tmp_path):
    con, rebuilt = db.open_index(tmp_path / "i.sqlite")
    assert rebuilt is None
    assert con.pragma("user_version") == db.SCHEMA_VERSION
    assert con.pragma("journal_mode") == "wal"
    assert con.execute("SELECT vec_version()").fetchone()[0].startswith("v")
    db.ensure_vector_tables(con, 8)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    assert {
        "files",
        "memory_index",
        "chunks",
        "fts",
        "meta",
        "vec_meta",
        "vec_chunk",
        "diag_summary",
        "diag_problems",
    } <= names


def test_schema_mismatch_rebuilds(tmp_path):
    path = tmp_path / "i.sqlite"
    con, _ = db.open_index(path)
    con.execute("INSERT INTO files(path, mtime_ns, size, parse_status) VALUES ('x.md', 1, 1, 'ok')")
    con.pragma("user_version", 999)
    con.close()
    con, rebuilt = db.open_index(path)
    assert rebuilt and "999" in rebuilt
    assert con.execute("SELECT count(*) FROM files").fetchone()[0] == 0


def test_a_schema_rebuild_gives_the_old_pages_back_to_the_disk(tmp_path):
    # An upgrade rebuilds in place: without compacting, the old tables' pages
    # stayed free inside the file, which kept its size (a third of it was the
    # FTS5 tables' copy of every text, which the new schema no longer keeps).
    path = tmp_path / "i.sqlite"
    con, _ = db.open_index(path)
    with db.transaction(con):
        con.executemany(
            "INSERT INTO files(path, mtime_ns, size, parse_status, error) VALUES (?, 1, 1, 'ok', ?)",
            [(f"{i}.md", "x" * 2000) for i in range(2000)],
        )
    con.pragma("user_version", db.SCHEMA_VERSION - 1)
    con.close()
    big = path.stat().st_size
    assert big > 4_000_000
    con, rebuilt = db.open_index(path)
    assert rebuilt and "rebuilt" in rebuilt
    assert con.pragma("freelist_count") == 0 and con.pragma("user_version") == db.SCHEMA_VERSION
    assert con.pragma("application_id") == ownership.APPLICATION_ID  # still provably marchdb's
    con.close()
    assert path.stat().st_size < big / 10
    assert not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") == 0


def test_edited_schema_text_rebuilds(tmp_path):
    path = tmp_path / "i.sqlite"
    con, _ = db.open_index(path)
    db.set_meta(con, "schema_hash", "stale")
    con.close()
    _, rebuilt = db.open_index(path)
    assert rebuilt and "changed" in rebuilt


def test_corrupt_file_is_rebuilt(tmp_path):
    # Ours (marchdb's mark survives in the header) but broken past it: a cache, rebuilt.
    # A file that is not marchdb's is refused instead (test_hostile.py).
    path = tmp_path / "i.sqlite"
    con, _ = db.open_index(path)
    con.close()
    data = bytearray(path.read_bytes())
    data[100:] = b"garbage!" * ((len(data) - 100) // 8)
    path.write_bytes(bytes(data))
    con, rebuilt = db.open_index(path)
    assert rebuilt and "corrupt" in rebuilt and "recall/open logs could not be read and are lost" in rebuilt
    assert con.execute("SELECT count(*) FROM files").fetchone()[0] == 0


def test_writer_lock_is_reentrant_and_exclusive(tmp_path):
    import threading

    entered = threading.Event()
    nested_done = threading.Event()
    outer_released = threading.Event()

    def other_thread():
        with db.writer_lock(tmp_path / "i"):
            entered.set()

    def holder():
        # Nested in a thread of its own: if re-entry broke, the inner ``with`` would block for
        # ever; here the join below times out and the test fails instead of hanging.
        with db.writer_lock(tmp_path / "i"):
            with db.writer_lock(tmp_path / "i"):  # the same thread again: no deadlock
                nested_done.set()
                worker = threading.Thread(target=other_thread, daemon=True)
                worker.start()
                assert not entered.wait(0.3), "another thread got the lock while it was held"
            assert not entered.wait(0.1), "released by the inner exit while the outer still holds it"
        outer_released.set()
        worker.join(5)

    errors: list[BaseException] = []

    def run():
        try:
            holder()
        except BaseException as exc:  # carried to the test thread, which fails with it
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the nested acquisition deadlocked (the lock is not re-entrant)"
    if errors:
        raise errors[0]
    assert nested_done.is_set() and outer_released.is_set()
    assert entered.is_set(), "the lock was never released"


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 shell on this machine")
def test_views_readable_from_stock_sqlite3_shell(vault, store):
    vault.memory("a.md", "mem_a")
    vault.write("bad.md", "---\nid: [x\n---\n")
    store.sync(embed=False)
    store.open("mem_a")
    with store.con:  # what a recall with a run id logs
        store.con.execute("INSERT INTO runs(run_id) VALUES ('run-1')")
        store.con.execute(
            "INSERT INTO recall_log(run_id, trigger, mem_id, score) VALUES ('run-1', 'user', 'mem_a', 0.7)"
        )
    store.close()
    out = subprocess.run(
        [
            "sqlite3",
            str(store.cfg.index_path),
            "SELECT files, memories FROM diag_summary; SELECT path, kind FROM diag_problems ORDER BY path;"
            "SELECT run_id, run_seq, trigger, id, name, score FROM hint_history;"
            "SELECT id, hinted, opened, last_hinted IS NOT NULL, last_opened IS NOT NULL FROM memory_use;",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0] == "2|1"
    assert "bad.md|parse_error" in out
    assert out[-2:] == ["run-1|1|user|mem_a|A memory|0.7", "mem_a|1|1|1|1"]


def test_logs_keep_their_last_rows_and_prune_in_the_writers_transaction(tmp_path):
    con, _ = db.open_index(tmp_path / "index.sqlite")
    bounds = dict(con.execute("SELECT log, keep_rows FROM log_bounds"))
    assert bounds == {"recall_log": 100_000, "open_log": 50_000, "runs": 20_000}
    # Row by row (each INSERT ... SELECT row fires the AFTER INSERT triggers, as a writer's
    # INSERT does), in one transaction; generated in SQL, at twice the speed of executemany.
    count = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) "
    with con:
        recall = "SELECT 'r' || i, 'user', 'mem_' || (i % 50), 0.5 FROM n"
        con.execute(count + "INSERT INTO recall_log(run_id, trigger, mem_id, score) " + recall, (101_500,))
        con.execute(count + "INSERT INTO open_log(mem_id) SELECT 'mem_' || i FROM n", (50_999,))
        con.execute(count + "INSERT INTO runs(run_id) SELECT 'r' || i FROM n", (22_000,))
    sizes = {r["log"]: r for r in db.rows(con, "SELECT * FROM diag_logs")}
    # Pruned every 1000th row: never more than keep_rows + 1000, the newest always kept.
    assert 100_000 <= sizes["recall_log"]["rows"] <= 101_000
    assert db.scalar(con, "SELECT max(seq) FROM recall_log") == 101_500
    assert 49_999 <= sizes["open_log"]["rows"] <= 51_000 and 20_000 <= sizes["runs"]["rows"] <= 21_000
    assert sizes["recall_log"]["keep_rows"] == 100_000 and sizes["recall_log"]["oldest"] is not None
    con.close()


def _modes(path) -> dict[str, str]:
    import os
    import stat

    return {
        s: oct(stat.S_IMODE(os.stat(f"{path}{s}").st_mode))
        for s in ("", "-wal", "-shm")
        if os.path.exists(f"{path}{s}")
    }


def test_the_index_and_its_companions_are_private_wherever_it_lives(tmp_path, vault):
    # indexPath outside the 0700 home: the index (every memory's text, the logs)
    # and its -wal and -shm were 0644 under a usual umask; the export is 0600 already.
    import json
    import os

    from marchdb.config import load_config
    from marchdb.store import Store

    outside = tmp_path / "shared"
    outside.mkdir(mode=0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"indexPath": str(outside / "index.sqlite")}))
    vault.memory("a.md", "mem_a")
    old = os.umask(0o022)
    try:
        cfg = load_config(home=home, root=vault.root, model=str(tmp_path / "none.gguf"), env={})
        with Store(cfg) as store:
            store.sync(embed=False)
            assert _modes(cfg.index_path) == {"": "0o600", "-wal": "0o600", "-shm": "0o600"}
        # A rebuild creates the file afresh: private too.
        with Store(cfg) as store:
            store.rebuild(embed=False)
            assert set(_modes(cfg.index_path).values()) == {"0o600"}
        # An index made world-readable before (by an older marchdb) is made private when opened.
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(f"{cfg.index_path}{suffix}"):
                os.chmod(f"{cfg.index_path}{suffix}", 0o644)
        with Store(cfg) as store:
            store.status()
            assert set(_modes(cfg.index_path).values()) == {"0o600"}
    finally:
        os.umask(old)


def test_a_comment_or_layout_edit_in_the_schema_is_no_rebuild_but_a_statement_is():
    base = db.schema_sql()
    before = db.schema_hash()
    assert db.schema_hash(base.replace("-- ", "--   edited: ", 3) + "\n\n-- a new comment\n") == before
    assert db.schema_hash(base.replace("DEFAULT ''", "DEFAULT 'x'", 1)) != before
    # a quoted '--' is part of a statement, not a comment
    assert db.schema_hash(base + "\nSELECT '-- one';") != db.schema_hash(base + "\nSELECT '-- two';")


@pytest.mark.parametrize("plant", ["folder", "fifo", "link"])
def test_something_else_at_the_lock_s_name_is_refused_with_what_to_do(tmp_path, plant):
    lock = Path(f"{tmp_path / 'index.sqlite'}.lock")
    {"folder": lock.mkdir, "fifo": lambda: os.mkfifo(lock), "link": lambda: lock.symlink_to(tmp_path / "x")}[plant]()
    with pytest.raises(IndexUnavailable, match="move it away"):
        with db.writer_lock(tmp_path / "index.sqlite"):
            pass
