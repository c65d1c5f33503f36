"""The dirty check's quick scan (marchdb/index/dirty.py): after one full scan,
a check looks at the folders that changed, the files changed lately and a
share of the others in turn, and finds what a full scan would."""

from __future__ import annotations

import os
import time

import pytest

from marchdb.index import dirty


def ids(store) -> set[str]:
    return {r[0] for r in store.con.execute("SELECT id FROM memory_index")}


def check(store):
    """One dirty check, unthrottled; whether it was a full scan."""
    before = store.scanned_at
    store.ensure_fresh(max_age=0, embed=False)
    return store.scanned_at != before


def age(path, days: float) -> None:
    """Give ``path`` an mtime ``days`` ago (as a file nobody touched lately)."""
    when = time.time() - days * 86400
    os.utime(path, (when, when))


def settle(vault) -> None:
    """Folder mtimes older than the racy window, as between real checks."""
    old = time.time() - 10
    for folder, _, _ in os.walk(vault.root):
        os.utime(folder, (old, old))


@pytest.fixture
def scanned(vault, store, monkeypatch):
    monkeypatch.setattr(dirty, "QUICK_FROM_FILES", 0)  # quick checks at this size too
    for i in range(12):
        vault.memory(f"2026/05/week{i % 3 + 1}/m{i}.md", f"mem_{i}")
    settle(vault)
    assert check(store)  # the first check of a process is a full scan
    assert store.folder_clock is not None
    return store


def test_new_moved_and_deleted_files_are_found_without_a_full_scan(vault, scanned):
    store = scanned
    vault.memory("2026/05/week1/new.md", "mem_new")
    os.rename(vault.root / "2026/05/week2/m1.md", vault.root / "2026/05/week3/m1.md")
    (vault.root / "2026/05/week3/m2.md").unlink()
    assert not check(store)
    assert ids(store) == {f"mem_{i}" for i in range(12)} - {"mem_2"} | {"mem_new"}
    path = store.con.execute("SELECT path FROM memory_index WHERE id = 'mem_1'").fetchone()[0]
    assert path == "2026/05/week3/m1.md"


def test_new_and_deleted_folders_are_found(vault, scanned):
    store = scanned
    vault.memory("2026/06/week1/june.md", "mem_june")
    vault.memory("2026/06/week1/deep/er/deeper.md", "mem_deep")
    for name in os.listdir(vault.root / "2026/05/week2"):
        (vault.root / "2026/05/week2" / name).unlink()
    (vault.root / "2026/05/week2").rmdir()
    assert not check(store)
    assert ids(store) == {f"mem_{i}" for i in range(12) if i % 3 != 1} | {"mem_june", "mem_deep"}


def test_an_edit_in_place_of_a_recent_file_is_found_at_the_next_check(vault, scanned):
    store = scanned
    path = vault.root / "2026/05/week1/m0.md"
    path.write_text(path.read_text(encoding="utf-8").replace("A memory", "Renamed memory"), encoding="utf-8")
    settle(vault)  # writing in place moves no folder's mtime
    assert not check(store)
    assert store.con.execute("SELECT name FROM memory_index WHERE id = 'mem_0'").fetchone()[0] == "Renamed memory"


def test_an_edit_in_place_of_an_old_file_is_found_within_one_rotation(vault, scanned):
    store = scanned
    for name in ("m3.md", "m6.md"):
        age(vault.root / "2026/05/week1" / name, days=30)
    check(store)  # the index learns the old mtimes
    path = vault.root / "2026/05/week1/m3.md"
    path.write_text(path.read_text(encoding="utf-8").replace("A memory", "Edited long after"), encoding="utf-8")
    age(path, days=29)  # an mtime the index has never seen, but not a recent one
    settle(vault)
    name = "SELECT name FROM memory_index WHERE id = 'mem_3'"
    for _ in range(dirty.ROTATION):
        if store.con.execute(name).fetchone()[0] == "Edited long after":
            break
        assert not check(store)
    assert store.con.execute(name).fetchone()[0] == "Edited long after"


def test_a_folder_turned_into_a_link_takes_a_full_scan(vault, scanned, tmp_path):
    store = scanned
    elsewhere = tmp_path / "elsewhere"
    (vault.root / "2026/05/week3").rename(elsewhere)
    (vault.root / "2026/05/week3").symlink_to(elsewhere, target_is_directory=True)
    assert check(store)
    assert ids(store) == {f"mem_{i}" for i in range(12) if i % 3 != 2}
    kinds = [r[0] for r in store.con.execute("SELECT kind FROM problems WHERE path = '2026/05/week3'")]
    assert kinds == ["symlink"]


def test_full_scans_come_back_after_a_while(vault, scanned, monkeypatch):
    store = scanned
    assert not check(store)
    monkeypatch.setattr(dirty, "FULL_SCAN_SECONDS", 0.0)
    assert check(store)


def test_a_quick_check_costs_a_share_of_the_files(vault, scanned):
    store = scanned
    for i in range(12, 240):
        vault.memory(f"2026/05/week{i % 3 + 1}/m{i}.md", f"mem_{i}")
    for folder, _, names in os.walk(vault.root):
        for name in names:
            age(os.path.join(folder, name), days=30)
    settle(vault)
    assert not check(store)  # new files in every folder: each listed again
    assert len(ids(store)) == 240
    paths = dirty.paths_to_check(store.con, vault.root, store.folder_clock)
    assert paths is not None and 0 < len(paths) <= 240 // dirty.ROTATION + 1


def test_a_quick_check_that_fails_forgets_what_it_saw(vault, scanned, monkeypatch):
    from marchdb.errors import Retry
    from marchdb.index import keeper

    store = scanned
    vault.memory("2026/05/week1/late.md", "mem_late")
    settle(vault)

    def fails(*args, **kwargs):
        raise Retry("the memory root changed while it was scanned")

    monkeypatch.setattr(keeper, "sync_files", fails)
    with pytest.raises(Retry):
        check(store)
    monkeypatch.undo()
    check(store)  # its folder was listed by the check that failed: it must be looked at again
    assert "mem_late" in ids(store)


def test_a_vault_below_the_quick_size_is_scanned_whole_at_every_check(vault, store):
    # An edit in place of an old file moves no folder's mtime: in a vault where a full
    # scan is cheap, it is seen at the next check, as seed 000's rule has it.
    path = vault.memory("2026/05/week1/old.md", "mem_old", name="Old name")
    age(path, days=30)
    settle(vault)
    assert check(store)
    path.write_text(path.read_text().replace("Old name", "New name"))
    age(path, days=30)
    assert check(store)  # a full scan again
    assert store.con.execute("SELECT name FROM memory_index WHERE id = 'mem_old'").fetchone()[0] == "New name"
