"""The watcher: changes on disk reach the index without an explicit sync."""

from __future__ import annotations

import os
import time

import pytest

from marchdb import db
from marchdb.config import load_config
from marchdb.store import Store
from marchdb.watch import Watcher


@pytest.fixture
def watched(tmp_path, vault):
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})
    store = Store(cfg)
    watcher = Watcher(store, debounce=0.05).start()
    assert watcher.wait_idle(30)
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
        time.sleep(0.05)
    return False


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
    assert watcher.wait_idle(10)
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
    store.scan_in_background = watcher.request_scan
    assert store.ensure_fresh() is None  # asked for, not done inline
    assert wait_for(lambda: "mem_late" in ids(store))
    # The scan clock is set when the scan finishes, just after the new memory lands.
    assert wait_for(lambda: time.time() - float(db.get_meta(store.con, "last_scan_epoch")) < 10)
