"""The watcher: changes on disk reach the index without an explicit sync."""

from __future__ import annotations

import os
import time

import pytest
from conftest import wait_idle

from marchdb.config import load_config
from marchdb.engine.watch import Watcher
from marchdb.index import db
from marchdb.store import Store


@pytest.fixture
def watched(tmp_path, vault):
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})
    store = Store(cfg)
    watcher = Watcher(store, debounce=0.05).start()
    assert wait_idle(watcher, 30)
    yield store, watcher
    watcher.stop()
    store.close()


def ids(store):
    return {r[0] for r in store.con.execute("SELECT id FROM memory_index")}


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def check_root_every(watcher, monkeypatch, seconds: float) -> None:
    """Make the watcher check its root now, then every ``seconds``."""
    monkeypatch.setattr("marchdb.engine.watch.ROOT_CHECK_SECONDS", seconds)
    with watcher._cond:
        watcher._next_root_check = 0.0
        watcher._cond.notify()


def test_create_modify_move_delete(watched, vault):
    store, watcher = watched
    assert watcher.mode == "watching"
    path = vault.memory("a.md", "mem_a", name="First")
    assert wait_for(lambda: "mem_a" in ids(store))
    path.write_text(path.read_text().replace("First", "Second"))
    assert wait_for(
        lambda: store.con.execute("SELECT name FROM memory_index WHERE id='mem_a'").fetchone() == ("Second",)
    )
    (vault.root / "sub").mkdir()
    os.rename(path, vault.root / "sub" / "b.md")
    assert wait_for(
        lambda: store.con.execute("SELECT path FROM memory_index WHERE id='mem_a'").fetchone() == ("sub/b.md",)
    )
    (vault.root / "sub" / "b.md").unlink()
    assert wait_for(lambda: "mem_a" not in ids(store))


def test_editor_save_by_rename_and_temp_files(watched, vault):
    store, watcher = watched
    path = vault.memory("note.md", "mem_n", name="Before")
    assert wait_for(lambda: "mem_n" in ids(store))
    # An editor writes a hidden temp file, then renames it over the original.
    tmp = vault.root / ".note.md.swp"
    tmp.write_text(path.read_text().replace("Before", "After"))
    os.replace(tmp, path)
    assert wait_for(
        lambda: store.con.execute("SELECT name FROM memory_index WHERE id='mem_n'").fetchone() == ("After",)
    )
    assert wait_idle(watcher, 10)
    files = {r[0] for r in store.con.execute("SELECT path FROM files")}
    assert files == {"note.md"}  # the temp file never entered the index


def test_folder_moves_trigger_a_full_scan(watched, vault):
    store, watcher = watched
    vault.memory("x/one.md", "mem_1")
    vault.memory("x/two.md", "mem_2")
    assert wait_for(lambda: {"mem_1", "mem_2"} <= ids(store))
    os.rename(vault.root / "x", vault.root / "y")
    assert wait_for(
        lambda: {r[0] for r in store.con.execute("SELECT path FROM memory_index")} == {"y/one.md", "y/two.md"}
    )


def test_watcher_keeps_the_scan_clock_fresh(watched, vault):
    store, watcher = watched
    vault.memory("a.md", "mem_a")
    assert wait_for(lambda: "mem_a" in ids(store))
    assert time.time() - float(db.get_meta(store.con, "last_scan_epoch")) < 10


def test_dirty_check_runs_on_the_watchers_thread(watched, vault):
    store, watcher = watched
    watcher._observer.stop()  # from now on the watcher hears nothing: only a scan finds changes
    watcher._observer.join(5)
    vault.memory("late.md", "mem_late")
    with store.con:
        db.set_meta(store.con, "last_scan_epoch", "0")
    store.scanned_at = None  # the watcher's start-up scan, as this process knows it
    store.scan_in_background = watcher.request_scan
    assert store.ensure_fresh() is None  # asked for, not done inline
    assert wait_for(lambda: "mem_late" in ids(store))
    # The scan clock is set when the scan finishes, just after the new memory lands.
    assert wait_for(lambda: time.time() - float(db.get_meta(store.con, "last_scan_epoch")) < 10)


def test_a_dirty_checks_scan_waits_for_clients_to_be_quiet(watched, vault, monkeypatch):
    store, watcher = watched
    monkeypatch.setattr("marchdb.engine.watch.SCAN_DEFER_SECONDS", 30.0)
    watcher._observer.stop()  # only a scan finds changes now
    watcher._observer.join(5)
    busy = {"on": True}
    watcher.quiet_for = lambda: 0.0 if busy["on"] else 60.0
    vault.memory("late.md", "mem_late")
    watcher.want_scan()
    watcher.start_wanted_scan()
    time.sleep(0.5)
    assert "mem_late" not in ids(store) and not watcher.idle  # waiting: a client is being served
    busy["on"] = False
    assert wait_for(lambda: "mem_late" in ids(store))  # a quiet moment: the scan ran


def test_a_waiting_scan_runs_after_its_bound_and_at_once_for_a_change(watched, vault, monkeypatch):
    store, watcher = watched
    watcher.quiet_for = lambda: 0.0  # clients never stop
    monkeypatch.setattr("marchdb.engine.watch.SCAN_DEFER_SECONDS", 1.0)
    started = time.monotonic()
    watcher.want_scan()
    watcher.start_wanted_scan()
    assert wait_idle(watcher)
    assert time.monotonic() - started >= 0.9  # it waited, then ran anyway

    monkeypatch.setattr("marchdb.engine.watch.SCAN_DEFER_SECONDS", 60.0)
    watcher.want_scan()
    watcher.start_wanted_scan()
    vault.memory("new.md", "mem_new")  # heard by the watcher: applied without waiting for quiet
    assert wait_for(lambda: "mem_new" in ids(store), timeout=30.0)
    assert wait_idle(watcher, 30.0)


def test_a_root_replaced_by_another_folder_is_watched_again(watched, vault, tmp_path, monkeypatch):
    # The platform watcher kept watching the old folder: changes in the new one went unheard.
    store, watcher = watched
    check_root_every(watcher, monkeypatch, 0.2)
    old = tmp_path / "old-root"
    vault.root.rename(old)
    vault.root.mkdir()
    vault.memory("fresh.md", "mem_fresh")
    assert wait_for(lambda: "mem_fresh" in ids(store))
    vault.memory("after.md", "mem_after")  # heard by the new watch
    assert wait_for(lambda: "mem_after" in ids(store), timeout=5)


def test_what_changed_while_the_root_was_away_is_found_when_it_is_back(watched, vault, tmp_path, monkeypatch):
    store, watcher = watched
    check_root_every(watcher, monkeypatch, 0.2)
    said: list[str] = []
    watcher.log = said.append
    away = tmp_path / "away"
    vault.root.rename(away)
    (away / "e.md").write_text("---\nid: mem_away\nname: e\ndescription: d\ntags: [t]\n---\nbody\n")
    # The watcher hears it, and fails to sync it: the root is gone (its root check says so too).
    # Both are said within a few tenths of a second (a fixed second was slept here).
    wait_for(lambda: any(m.startswith("sync failed") for m in said) and any("is gone" in m for m in said), 5)
    away.rename(vault.root)
    assert wait_for(lambda: "mem_away" in ids(store))


def test_a_rebuild_by_another_process_is_followed(watched, vault, tmp_path):
    store, watcher = watched
    vault.memory("one.md", "mem_one")
    assert wait_for(lambda: "mem_one" in ids(store))
    other = Store(store.cfg)
    other.rebuild(embed=False)  # a new index file; the watcher's connection held the old one
    other.close()
    vault.memory("two.md", "mem_two")
    fresh = Store(store.cfg)
    try:
        assert wait_for(lambda: {"mem_one", "mem_two"} <= ids(fresh))
    finally:
        fresh.close()


def test_a_root_swapped_while_events_keep_coming_never_deadlocks(watched, vault, tmp_path, monkeypatch):
    # Restarting the platform watcher under the watcher's lock deadlocked with its event thread
    # (which holds its own lock while it hands an event over): the engine hung for good.
    store, watcher = watched
    check_root_every(watcher, monkeypatch, 0.05)
    for i in range(15):
        old = tmp_path / f"old-{i}"
        vault.root.rename(old)
        vault.root.mkdir()
        for j in range(5):  # events from the old folder while the watcher swaps
            (old / f"n{j}.md").write_text("x")
            time.sleep(0.01)
    vault.memory("last.md", "mem_last")
    assert wait_for(lambda: "mem_last" in ids(store), timeout=20)
    assert wait_idle(watcher, 20)


def test_a_failing_scan_is_said_once_and_not_retried_every_few_seconds(watched, vault, monkeypatch):
    store, watcher = watched
    check_root_every(watcher, monkeypatch, 0.05)  # (the retry on a timer came with the root check)
    said, calls = [], []
    watcher.log = said.append

    def broken(**kw):
        calls.append(kw)
        raise RuntimeError("a bug")

    monkeypatch.setattr(watcher.store, "sync", broken)
    vault.memory("a.md", "mem_a")
    assert wait_for(lambda: calls)
    time.sleep(0.5)  # ten root checks
    assert len(calls) == 1 and sum("sync failed unexpectedly" in m for m in said) == 1


def test_a_failing_root_check_falls_back_to_polling_and_says_so(tmp_path, vault, monkeypatch):
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})
    logs: list[str] = []
    with Store(cfg) as store:
        watcher = Watcher(store, log=logs.append, debounce=0.05).start()
        try:
            assert wait_idle(watcher, 30) and watcher.mode == "watching"

            def fails():
                observer = watcher._observer
                if observer is not None and observer.is_alive():  # no events from now on: only polling can find files
                    observer.stop()
                    observer.join(5)
                raise RuntimeError("an odd file system")

            monkeypatch.setattr(watcher, "_follow_root", fails)  # a fault injected into this one watcher
            monkeypatch.setattr("marchdb.engine.watch.FALLBACK_SCAN_SECONDS", 0.2)  # poll soon, not in 5 s
            with watcher._cond:
                watcher._next_poll = 0.0
            check_root_every(watcher, monkeypatch, 0.05)
            assert wait_for(lambda: watcher.mode == "polling"), logs
            assert any("an odd file system" in m and "falling back" in m for m in logs), logs
            vault.memory("later.md", "mem_later")
            assert wait_for(lambda: "mem_later" in ids(store), timeout=20), logs
            assert watcher._thread.is_alive()
            assert sum("an odd file system" in m for m in logs) == 1  # said once, not every check
        finally:
            watcher.stop()


def test_a_stop_that_outlasts_its_wait_leaves_the_store_to_the_watcher_s_thread(tmp_path, vault):
    # The engine stops its watcher with a wait of 10 s; a first scan of a large
    # vault (or a model's batch on a loaded machine) lasts longer. Closing the
    # store from the stopping thread then raised ThreadingViolationError (the
    # connection was busy in the scan), and the engine's shutdown ended there.
    for i in range(2000):
        vault.memory(f"d{i % 20}/m{i}.md", f"mem_{i}", name=f"Note {i}", body=f"body {i} " + "word " * 100)
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})
    with Store(cfg) as store:
        watcher = Watcher(store, debounce=0.05).start()
        assert wait_for(lambda: watcher._busy, 10)  # the start-up scan is running
        watcher.stop(timeout=0.001)
        assert watcher._thread.is_alive()  # the scan goes on, on its own thread
        watcher._thread.join(60)
        assert not watcher._thread.is_alive() and watcher.store._con is None  # closed by that thread
        assert len(ids(store)) == 2000  # the scan it finished is in the index
