"""Sync rules of seed 000, on real files and a real SQLite index."""

from __future__ import annotations

import json
import os
import time

import apsw
import pytest

from marchdb.config import load_config
from marchdb.errors import Conflict, NotFound, Retry
from marchdb.index import db
from marchdb.index.sync import sync_files
from marchdb.store import Store


def run(store):
    return store.sync(embed=False)


def mem_rows(store):
    return {r["id"]: r for r in db.rows(store.con, "SELECT * FROM memory_index")}


def problem_kinds(store):
    return {(r["path"], r["kind"]) for r in store.doctor()["problems"] if r["kind"] != "missing_vector"}


def bump(path, text=None):
    """Change a file so that its mtime surely differs."""
    if text is not None:
        path.write_text(text, encoding="utf-8")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_first_sync_indexes_memories_chunks_and_fts(vault, store):
    vault.memory(
        "2026/05/week2/a.md", "mem_a", name="Context cache", tags=["cache", "上下文"], body="段落一。\n\nParagraph two."
    )
    vault.memory("2026/05/week2/b.md", "mem_b", name="Other")
    report = run(store)
    assert (report.scanned, report.added, report.unchanged) == (2, 2, 0)
    rows = mem_rows(store)
    assert rows["mem_a"]["path"] == "2026/05/week2/a.md"
    assert json.loads(rows["mem_a"]["tags_json"]) == ["cache", "上下文"]
    assert rows["mem_a"]["content_hash"] and rows["mem_a"]["created_at"] == "2026-05-14T10:30:00.000Z"
    chunks = db.rows(store.con, "SELECT text FROM chunks JOIN memory_index m ON m.rid = mem_rid WHERE m.id='mem_a'")
    assert [c["text"] for c in chunks] == ["段落一。\n\nParagraph two."]
    # Chinese is findable by BM25 (bigrams), name/tags too.
    hits = store.query("SELECT m.id FROM fts JOIN memory_index m ON m.rid = fts.rowid WHERE fts MATCH '\"上下\"'")[1]
    assert hits == [("mem_a",)]


def test_warm_sync_only_stats(vault, store):
    vault.memory("a.md", "mem_a")
    run(store)
    report = run(store)
    assert (report.added, report.updated, report.unchanged) == (0, 0, 1)


def test_a_scan_that_changes_nothing_writes_nothing_to_the_index(vault, store):
    # Every write makes the other connections drop their page caches: the
    # engine's next recall re-read its pages, and every prompt of a session
    # comes with a scan.
    from marchdb.index import sync

    vault.memory("a.md", "mem_a")
    store.sync(embed=False)
    other = db.connect(store.cfg.index_path)
    try:
        before = other.pragma("data_version")
        report = store.sync(embed=False)
        assert report.unchanged == 1 and other.pragma("data_version") == before
        assert time.time() - store.last_scan() < 5  # this process knows: its dirty check waits
        vault.memory("b.md", "mem_b")
        store.sync(embed=False)  # a change is written at once
        assert other.pragma("data_version") != before
        # The shared clock still moves, at most CLOCK_WRITE_SECONDS late.
        with store.con:
            db.set_meta(store.con, "last_scan_epoch", f"{time.time() - sync.CLOCK_WRITE_SECONDS - 1:.3f}")
        before = other.pragma("data_version")
        store.sync(embed=False)
        assert other.pragma("data_version") != before
        assert time.time() - float(db.get_meta(other, "last_scan_epoch")) < 5
    finally:
        other.close()


def test_a_process_leaving_puts_its_last_scan_in_the_index(vault, store):
    # Else a hook right after the engine stopped scanned again for nothing.
    vault.memory("a.md", "mem_a")
    store.sync(embed=False)
    with store.con:
        db.set_meta(store.con, "last_scan_epoch", f"{time.time() - 30:.3f}")
    scanned_at = store.sync(embed=False).scanned_at  # written to memory only
    assert float(db.get_meta(store.con, "last_scan_epoch")) < scanned_at
    store.close()
    other = db.connect(store.cfg.index_path)
    try:
        assert float(db.get_meta(other, "last_scan_epoch")) == pytest.approx(scanned_at, abs=0.001)
    finally:
        other.close()


def test_touch_without_change_is_unchanged(vault, store):
    path = vault.memory("a.md", "mem_a")
    run(store)
    bump(path)
    report = run(store)
    assert (report.added, report.updated, report.unchanged) == (0, 0, 1)


def test_edit_updates(vault, store):
    path = vault.memory("a.md", "mem_a", name="Old name")
    run(store)
    bump(path, path.read_text().replace("Old name", "New name"))
    report = run(store)
    assert report.updated == 1
    assert mem_rows(store)["mem_a"]["name"] == "New name"
    assert store.query("SELECT count(*) FROM fts WHERE fts MATCH 'new'")[1] == [(1,)]
    assert store.query("SELECT count(*) FROM fts WHERE fts MATCH 'old'")[1] == [(0,)]


def test_delete_removes(vault, store):
    path = vault.memory("a.md", "mem_a")
    run(store)
    path.unlink()
    report = run(store)
    assert report.removed == 1 and mem_rows(store) == {}
    assert store.query("SELECT count(*) FROM chunks")[1] == [(0,)]
    assert store.query("SELECT count(*) FROM fts")[1] == [(0,)]
    with pytest.raises(NotFound):
        store.open("mem_a")


def test_move_keeps_id_and_chunks(vault, store):
    path = vault.memory("2026/05/week2/a.md", "mem_a")
    run(store)
    before = mem_rows(store)["mem_a"]
    chunk_ids = store.query("SELECT rid FROM chunks")[1]
    dest = vault.root / "elsewhere" / "renamed.md"
    dest.parent.mkdir()
    path.rename(dest)
    report = run(store)
    assert (report.moved, report.added, report.removed, report.updated) == (1, 0, 0, 0)
    after = mem_rows(store)["mem_a"]
    assert after["path"] == "elsewhere/renamed.md" and after["rid"] == before["rid"]
    assert store.query("SELECT rid FROM chunks")[1] == chunk_ids  # not re-processed
    assert store.open("mem_a")["path"].endswith("elsewhere/renamed.md")


def fts_state(con) -> dict:
    """What the two FTS5 tables answer, keyed by memory id and chunk seq
    (rowids differ between two indexes of one vault): every term's document
    and occurrence counts, each text's BM25 for each term, which rows exist."""
    vocab = {
        table: sorted(con.execute(f"SELECT term, doc, cnt FROM {table}").fetchall())
        for table in ("fts_vocab", "fts_chunk_vocab")
    }
    scores = {}
    for (term,) in con.execute("SELECT term FROM fts_vocab UNION SELECT term FROM fts_chunk_vocab").fetchall():
        quoted = '"' + term.replace('"', '""') + '"'
        scores[term] = (
            sorted(
                (mem_id, round(score, 9))
                for mem_id, score in con.execute(
                    "SELECT m.id, bm25(fts, 2.0, 1.0) FROM fts JOIN memory_index m ON m.rid = fts.rowid "
                    "WHERE fts MATCH ?",
                    (quoted,),
                )
            ),
            sorted(
                (mem_id, seq, round(score, 9))
                for mem_id, seq, score in con.execute(
                    "SELECT m.id, c.seq, bm25(fts_chunk) FROM fts_chunk JOIN chunks c ON c.rid = fts_chunk.rowid "
                    "JOIN memory_index m ON m.rid = c.mem_rid WHERE fts_chunk MATCH ?",
                    (quoted,),
                )
            ),
        )
    rows = (
        sorted(r[0] for r in con.execute("SELECT m.id FROM fts JOIN memory_index m ON m.rid = fts.rowid")),
        sorted(
            con.execute(
                "SELECT m.id, c.seq FROM fts_chunk JOIN chunks c ON c.rid = fts_chunk.rowid "
                "JOIN memory_index m ON m.rid = c.mem_rid"
            ).fetchall()
        ),
    )
    return {"vocab": vocab, "scores": scores, "rows": rows}


def assert_fts_matches_a_fresh_index(store, tmp_path, name: str) -> dict:
    """The FTS5 tables of ``store``, after any edits, pass FTS5's own check and
    answer exactly as those of an index built from scratch on the same files."""
    from marchdb.config import load_config
    from marchdb.store import Store

    for table in ("fts", "fts_chunk"):
        store.con.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    (total,) = store.con.execute("SELECT count(*) FROM fts").fetchone()
    (active,) = store.con.execute("SELECT count(*) FROM memory_index WHERE status = 'active'").fetchone()
    assert total == active
    (chunk_rows,) = store.con.execute("SELECT count(*) FROM fts_chunk").fetchone()
    (active_chunks,) = store.con.execute(
        "SELECT count(*) FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.status = 'active'"
    ).fetchone()
    assert chunk_rows == active_chunks
    fresh = Store(load_config(home=tmp_path / name, root=store.cfg.memory_root, model=str(tmp_path / "none"), env={}))
    try:
        fresh.sync(embed=False)
        expected = fts_state(fresh.con)
    finally:
        fresh.close()
    state = fts_state(store.con)
    assert state == expected
    return state


def test_fts_stays_exact_through_edits_moves_deletes_and_status_changes(vault, store, tmp_path):
    # The FTS5 tables keep no copy of the texts (contentless): a row left behind
    # by an edit, a move or a delete would still match and skew every BM25.
    paragraph = "The release pipeline retries a flaky deploy step {} times before paging the owner. "
    long_body = "\n\n".join(paragraph.format(i) * 6 for i in range(4))
    a = vault.memory("a.md", "mem_a", name="Release pipeline", tags=["deploy"], body=long_body)
    token = "ghp_" + "Zq7XwK2pLm9RtY4vBn8CdE1fGh5JkS3aUo6I"
    b = vault.memory(
        "b.md",
        "mem_b",
        name="缓存策略",
        body=f"缓存的过期时间调整为十分钟。\n\n<private>zebrafishword</private> CI pushes with {token}",
    )
    c = vault.memory("c.md", "mem_c", name="Old cache note", status="deprecated", body="cache expiry was five minutes")
    d = vault.memory("d.md", "mem_d", name="Deploy checklist", body="deploy checklist: tag, build, release")
    e = vault.memory("e.md", "mem_e", name="Moving note", body="a note about the sync folder layout")
    f = vault.memory("f.md", "mem_f", name="Flaky tests", body="flaky tests retried three times")
    h = vault.memory("h.md", "mem_h", name="Renamed id", body="queue worker timeout")
    vault.memory("dup1.md", "mem_dup", name="Duplicate one", body="duplicate words here")
    run(store)
    state = assert_fts_matches_a_fresh_index(store, tmp_path, "fresh1")
    terms = {term for term, _doc, _cnt in state["vocab"]["fts_vocab"] + state["vocab"]["fts_chunk_vocab"]}
    assert "zebrafishword" not in terms and token.lower() not in terms and "redact" in terms
    assert len(state["rows"][1]) > 3  # the long body is several chunks

    bump(a, a.read_text().replace(long_body, "A short body now: the pipeline was rewritten."))
    bump(b, b.read_text().replace("十分钟", "二十分钟"))
    bump(c, c.read_text().replace("status: deprecated", "status: active"))
    d.unlink()
    (vault.root / "sub").mkdir()
    e.rename(vault.root / "sub" / "e2.md")
    bump(f, f.read_text().replace("status: active", "status: deprecated"))
    bump(h, h.read_text().replace("mem_h", "mem_h2"))
    vault.memory("g.md", "mem_g", name="New memory", body="a brand new release note")
    vault.memory("dup2.md", "mem_dup", name="Duplicate two", body="other duplicate words")
    report = run(store)
    assert report.conflicts == 1 and report.moved == 1 and report.removed >= 1
    assert_fts_matches_a_fresh_index(store, tmp_path, "fresh2")

    (vault.root / "dup1.md").unlink()  # the conflict resolves: mem_dup is dup2.md's
    bump(c, c.read_text().replace("five minutes", "seven minutes"))
    run(store)
    state = assert_fts_matches_a_fresh_index(store, tmp_path, "fresh3")
    assert ("mem_dup" in state["rows"][0]) and "mem_f" not in state["rows"][0]


def test_id_changed_in_place(vault, store):
    path = vault.memory("a.md", "mem_old")
    run(store)
    bump(path, path.read_text().replace("mem_old", "mem_new"))
    report = run(store)
    assert (report.removed, report.added) == (1, 1)
    assert set(mem_rows(store)) == {"mem_new"}


def test_duplicate_ids_conflict_until_fixed(vault, store):
    a = vault.memory("a.md", "mem_dup", name="First")
    vault.memory("b.md", "mem_dup", name="Second")
    vault.memory("c.md", "mem_ok")
    report = run(store)
    assert report.conflicts == 1
    assert set(mem_rows(store)) == {"mem_ok"}  # both conflicting files excluded
    assert {("a.md", "duplicate_id"), ("b.md", "duplicate_id")} <= problem_kinds(store)
    with pytest.raises(Conflict) as opened:
        store.open("mem_dup")
    assert len(opened.value.paths) == 2 and opened.value.to_dict()["status"] == "conflict"
    # Fix one: the other becomes the memory again.
    a.unlink()
    report = run(store)
    assert report.conflicts == 0
    assert mem_rows(store)["mem_dup"]["name"] == "Second"
    assert store.open("mem_dup")["status"] == "ok"


def test_conflict_appears_when_a_second_file_claims_an_id(vault, store):
    vault.memory("a.md", "mem_x")
    run(store)
    vault.memory("b.md", "mem_x")
    report = run(store)
    assert report.conflicts == 1 and "mem_x" not in mem_rows(store)


def test_rules_for_missing_fields_and_status(vault, store):
    vault.write("plain.md", "Just an ordinary note.\n")
    vault.memory("nodesc.md", "mem_nodesc", description=None)
    vault.memory("old.md", "mem_old", status="deprecated")
    vault.memory("typo.md", "mem_typo", status="actve")  # hid the memory and doctor said "no problems"
    run(store)
    rows = mem_rows(store)
    assert rows["mem_typo"]["status"] == "actve"
    assert any("status 'actve' is not one of" in r["detail"] for r in store.doctor()["problems"])
    assert "mem_nodesc" in rows and rows["mem_nodesc"]["description"] == ""
    assert rows["mem_old"]["status"] == "deprecated"
    kinds = problem_kinds(store)
    assert ("plain.md", "missing_id") in kinds
    assert ("nodesc.md", "missing_description") in kinds
    summary = store.status()
    assert (summary["memories"], summary["active"], summary["deprecated"]) == (3, 1, 1)


def test_hidden_folders_non_md_and_symlinks_are_ignored(vault, store, tmp_path):
    vault.memory(".obsidian/x.md", "mem_hidden")
    vault.memory(".trash/y.md", "mem_trash")
    vault.memory(".git/z.md", "mem_git")
    vault.write("notes.txt", "---\nid: mem_txt\n---\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("---\nid: mem_secret\ndescription: x\n---\nsecret\n")
    os.symlink(outside, vault.root / "linked-dir")
    os.symlink(outside / "secret.md", vault.root / "linked.md")
    vault.memory("real.md", "mem_real")
    report = run(store)
    assert report.scanned == 1
    assert set(mem_rows(store)) == {"mem_real"}
    assert ("linked-dir", "symlink") in problem_kinds(store)


def test_bad_input_never_stops_sync_or_changes_files(vault, store):
    files = {
        "broken.md": b"---\nid: [oops\n---\nbody\n",
        "list.md": b"---\n- a\n- b\n---\nbody\n",
        "types.md": b"---\nid: 123\nname: n\n---\n",
        "tagstr.md": b"---\nid: mem_tagstr\nname: n\ndescription: d\ntags: alpha, beta\n---\nbody\n",
        "latin1.md": "---\nid: mem_l\nname: caf\xe9\n---\n".encode("latin-1"),
        "binary.md": bytes(range(256)) * 20,
        "huge.md": b"---\nid: mem_huge\n---\n" + b"x" * (50 * 1024 * 1024),
    }
    for name, data in files.items():
        vault.write(name, data)
    vault.memory("good.md", "mem_good")
    before = {p.name: p.read_bytes() for p in vault.root.iterdir()}
    report = run(store)
    assert set(mem_rows(store)) == {"mem_good", "mem_tagstr"}
    assert json.loads(mem_rows(store)["mem_tagstr"]["tags_json"]) == ["alpha", "beta"]
    kinds = problem_kinds(store)
    for expected in [
        ("broken.md", "parse_error"),
        ("list.md", "parse_error"),
        ("types.md", "invalid_id"),
        ("tagstr.md", "invalid_field"),
        ("latin1.md", "not_utf8"),
        ("binary.md", "not_utf8"),
        ("huge.md", "too_large"),
    ]:
        assert expected in kinds
    assert report.problems >= 7
    after = {p.name: p.read_bytes() for p in vault.root.iterdir()}
    assert before == after  # nothing written to the user's files


def test_fixing_a_broken_file_indexes_it(vault, store):
    path = vault.write("a.md", b"---\nid: [oops\n---\n")
    run(store)
    assert mem_rows(store) == {}
    bump(path, "---\nid: mem_fixed\nname: n\ndescription: d\ntags: [x]\n---\nbody\n")
    run(store)
    assert "mem_fixed" in mem_rows(store)
    assert not any(k == "parse_error" for _, k in problem_kinds(store))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(vault, store):  # pragma: no cover - CI runs as root
    path = vault.memory("a.md", "mem_a")
    path.chmod(0)
    run(store)
    assert ("a.md", "unreadable") in problem_kinds(store)


def test_file_vanishing_mid_sync(vault, store, monkeypatch):
    vault.memory("a.md", "mem_a")
    vault.memory("b.md", "mem_b")
    import marchdb.index.sync as sync_mod

    real_read = sync_mod.read_one

    def read_then_vanish(root, rel, *args):
        if rel == "a.md":
            (root / rel).unlink()  # the user deletes it between stat and read
        return real_read(root, rel, *args)

    monkeypatch.setattr(sync_mod, "read_one", read_then_vanish)
    report = run(store)
    assert set(mem_rows(store)) == {"mem_b"} and report.added == 1
    assert store.query("SELECT path FROM files")[1] == [("b.md",)]


def test_a_root_swapped_for_another_folder_mid_scan_changes_nothing(vault, store, monkeypatch):
    # mv vault vault.real; ln -s elsewhere vault — during a scan, the walk saw
    # half of each: applying it would drop half the index (and its vectors).
    for i in range(4):
        vault.memory(f"m{i}.md", f"mem_{i}")
    run(store)
    import marchdb.index.sync as sync_mod

    real_walk = sync_mod.walk
    elsewhere = vault.root.parent / "elsewhere"
    elsewhere.mkdir()

    def walk_then_swap(root, *args):
        found, problems = real_walk(root, *args)
        vault.root.rename(vault.root.parent / "vault.real")
        vault.root.symlink_to(elsewhere)
        # the swap came halfway: the rest of the walk listed the empty folder
        return {p: st for p, st in found.items() if p in ("m0.md", "m1.md")}, problems

    monkeypatch.setattr(sync_mod, "walk", walk_then_swap)
    with pytest.raises(Retry, match="changed while it was scanned"):
        run(store)
    assert set(mem_rows(store)) == {f"mem_{i}" for i in range(4)}


def test_many_files_span_batches(vault, store):
    from marchdb.index.sync import BATCH_FILES

    count = BATCH_FILES + 3  # a full batch, then a partial one
    for i in range(count):
        vault.memory(f"{i % 7}/m{i}.md", f"mem_{i}")
    report = run(store)
    assert report.added == count
    assert store.status()["memories"] == count


def test_incremental_paths(vault, store):
    vault.memory("a.md", "mem_a")
    run(store)
    vault.memory("b.md", "mem_b")
    report = sync_files(store.con, vault.root, store.cfg.index_path, paths=["b.md", "gone.md"])
    assert report.added == 1 and set(mem_rows(store)) == {"mem_a", "mem_b"}


def test_summary_view_counts(vault, store):
    vault.memory("a.md", "mem_a", body="one\n\ntwo")
    vault.memory("b.md", "mem_b", status="deprecated")
    run(store)
    summary = store.status()
    assert summary["files"] == 2 and summary["memories"] == 2 and summary["chunks"] == 2
    assert summary["last_sync_at"] and time.strftime("%Y") in summary["last_sync_at"]


def test_fifo_named_md_does_not_hang(vault, store):
    os.mkfifo(vault.root / "pipe.md")
    vault.memory("a.md", "mem_a")
    assert run(store).added == 1

    # ... nor goes unsaid (open answered "not found" and doctor showed nothing).
    def odd() -> list:
        return [(p["path"], p["kind"]) for p in store.doctor()["problems"] if p["kind"] != "missing_vector"]

    assert odd() == [("pipe.md", "not_regular")]
    (vault.root / "pipe.md").unlink()
    run(store)
    assert odd() == []  # gone with it


def test_an_empty_root_never_empties_the_index(vault, store):
    # An unmounted drive leaves an empty mount point behind.
    from marchdb.errors import ConfigError

    names = [f"m{i}.md" for i in range(10)]
    for i, name in enumerate(names):
        vault.memory(name, f"mem_{i}")
    store.sync(embed=False)
    for name in names:
        (vault.root / name).rename(vault.root.parent / name)
    with pytest.raises(ConfigError, match="holds no .md files"):
        store.sync(embed=False)
    assert store.con.execute("SELECT count(*) FROM memory_index").fetchone()[0] == 10
    assert store.rebuild(embed=False).scanned == 0  # deleting everything on purpose: rebuild
    assert store.con.execute("SELECT count(*) FROM memory_index").fetchone()[0] == 0


def test_incremental_sync_takes_any_iterable_of_paths(vault, store):
    vault.memory("a.md", "mem_a")
    vault.memory("b.md", "mem_b")
    report = store.sync(embed=False, paths=(p for p in ["a.md", "b.md"]))  # a generator, read once
    assert report.added == 2 and set(mem_rows(store)) == {"mem_a", "mem_b"}


def test_folders_that_cannot_be_listed_hide_nothing_and_delete_nothing(tmp_path):
    # Permissions are what they test, and root ignores them: the commands run
    # as an unprivileged user (nobody, through setpriv) when the test is root.
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="marchdb-perms-", dir="/tmp"))  # nobody cannot enter pytest's tmp
    try:
        base.chmod(0o755)
        root, home = base / "vault", base / "home"
        for i, folder in enumerate(["2026/01", "2026/01", "2026/02", "2026/02", "2026/02"]):
            path = root / folder / f"m{i}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"---\nid: mem_{i}\nname: Note {i}\ndescription: about {i}\ntags: [t]\n---\nbody {i}\n")
        prefix = []
        if os.geteuid() == 0:
            if not shutil.which("setpriv"):
                pytest.skip("running as root without setpriv to drop privileges")
            shutil.chown(base, 65534, 65534)
            for p in base.rglob("*"):
                shutil.chown(p, 65534, 65534)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        env = {"PATH": os.environ["PATH"], "MARCH_HOME": str(home), "MARCH_MEMORY_ROOT": str(root), "MARCH_DAEMON": "0"}
        marchdb = str(Path(sys.executable).with_name("marchdb"))

        def sync() -> subprocess.CompletedProcess:
            return subprocess.run(
                [*prefix, marchdb, "sync", "--no-embed", "--json"], capture_output=True, text=True, env=env, timeout=120
            )

        def ids() -> list[str]:
            # What the index holds, read here (only the syncs need the unprivileged user; as
            # root, SQLite gives any -wal or -shm file it makes to the index's owner).
            con = apsw.Connection(str(home / "index.sqlite"))
            try:
                return [r[0] for r in con.execute("SELECT id FROM memory_index ORDER BY id")]
            finally:
                con.close()

        assert sync().returncode == 0 and ids() == [f"mem_{i}" for i in range(5)]
        (root / "2026/02").chmod(0)
        done = sync()
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["removed"] == 0
        assert ids() == [f"mem_{i}" for i in range(5)]  # hidden for now, not deleted
        (root / "2026/02").chmod(0o644)  # listed, but its files cannot be looked at (chmod -R 644)
        done = sync()
        assert done.returncode == 0 and json.loads(done.stdout)["removed"] == 0, done.stdout
        assert ids() == [f"mem_{i}" for i in range(5)]
        (root / "2026/02").chmod(0o755)
        root.chmod(0)
        done = sync()
        assert done.returncode == 3 and "cannot be read" in done.stderr and "chmod" in done.stderr
        root.chmod(0o755)
        assert ids() == [f"mem_{i}" for i in range(5)]
    finally:
        for p in [base, *base.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(base)


def test_one_index_serves_one_vault_until_it_moves(tmp_path, vault, store):
    # Two roots sharing a home took turns emptying each other's index (and re-embedding).
    from marchdb.config import load_config
    from marchdb.errors import ConfigError
    from marchdb.store import Store

    # A first run on one root (the default one, say) that indexed nothing: the next root takes it.
    empty = tmp_path / "empty"
    empty.mkdir()
    with Store(load_config(home=store.cfg.home, root=empty, env={}), use_model=False) as first:
        first.sync(embed=False)
    vault.memory("a.md", "mem_a")
    run(store)
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.md").write_text("---\nid: mem_b\nname: b\ndescription: b\ntags: [t]\n---\nb\n")
    with Store(load_config(home=store.cfg.home, root=other, env={}), use_model=False) as second:
        with pytest.raises(ConfigError, match="belongs to the memory root .* run `marchdb rebuild`"):
            second.sync(embed=False)
        assert set(mem_rows(second)) == {"mem_a"}  # untouched
        # ... nor does it answer for the other vault, even right after that vault's scan.
        with pytest.raises(ConfigError, match="belongs to the memory root"):
            second.recall("a")
        second.rebuild(embed=False)  # what the message offers: this vault in place of the other
        assert set(mem_rows(second)) == {"mem_b"}
    # A vault that moved (its old folder gone) is followed, nothing re-read twice.
    moved = tmp_path / "moved"
    other.rename(moved)
    with Store(load_config(home=store.cfg.home, root=moved, env={}), use_model=False) as third:
        report = third.sync(embed=False)
        assert set(mem_rows(third)) == {"mem_b"} and (report.unchanged, report.added) == (1, 0)


def test_ids_that_read_alike_are_named_in_doctor(vault, store):
    # Accepted side by side with no word: an agent told one could open the other.
    vault.memory("a.md", "mem_a")
    vault.memory("b.md", "mem_A")
    vault.memory("c.md", "mem_caf\u00e9")
    vault.memory("d.md", "mem_cafe\u0301")  # the same word, decomposed
    vault.memory("e.md", "mem_other")
    run(store)
    alike = {r["path"]: r["detail"] for r in store.doctor()["problems"] if r["kind"] == "lookalike_id"}
    assert set(alike) == {"a.md", "b.md", "c.md", "d.md"}
    assert "reads like 'mem_A'" in alike["a.md"] and len(mem_rows(store)) == 5  # told, not dropped


def test_many_memories_replacing_many_others_resolve_to_the_newest(vault, store):
    # Each of 60 memories supersedes the 20 before it: a graph whose walk grows as the square
    # of its size (bounded in sql/superseded.sql); the newest replaces all the others.
    for i in range(60):
        sup = f"supersedes: [{', '.join(f'm{j}' for j in range(max(0, i - 20), i))}]\n" if i else ""
        vault.write(
            f"m{i}.md",
            f"---\nid: m{i}\nname: n{i}\ndescription: d\ntags: [t]\nupdated_at: 2026-01-01T00:{i:02d}:00Z\n{sup}---\nB.\n",
        )
    store.sync(embed=False)
    assert dict(store.con.execute("SELECT id, by_id FROM superseded").fetchall()) == {f"m{i}": "m59" for i in range(59)}
    (vault.root / "m59.md").unlink()  # gone: the one before it holds now
    store.sync(embed=False)
    assert store.con.execute("SELECT DISTINCT by_id FROM superseded").fetchall() == [("m58",)]


def test_a_scan_time_in_the_future_is_ignored(vault, cfg):
    # A clock that was once a year ahead left its scan time in the index:
    # every dirty check took the index for fresh until real time caught up,
    # and hand edits were missed.
    from marchdb.store import Store

    vault.memory("a.md", "mem_a", name="Old name")
    with Store(cfg) as store:
        store.sync(embed=False)
    con = db.connect(cfg.index_path)  # the scan of that process, its clock a year ahead
    with con:
        db.set_meta(con, "last_scan_epoch", f"{time.time() + 365 * 86400:.3f}")
    con.close()
    vault.memory("a.md", "mem_a", name="Hand edited")
    with Store(cfg) as store:  # a new process, as a hook without the engine is
        assert store.last_scan() is None or store.last_scan() <= time.time()
        store.ensure_fresh(embed=False)
        assert store.query("SELECT name FROM memory_index WHERE id = 'mem_a'")[1] == [("Hand edited",)]
        # ... and the clock in the index is real time again, once that scan ran.
        assert float(db.get_meta(store.con, "last_scan_epoch")) <= time.time()


def test_ids_mixing_scripts_inside_a_word_are_flagged_not_refused(vault, store):
    # mem_gооd with two Cyrillic о's reads as mem_good, and nothing said so.
    vault.memory("a.md", "mem_g\u043e\u043ed")
    vault.memory("b.md", "mem_good")
    vault.memory("c.md", "\u0437\u0430\u043c\u0435\u0442\u043a\u0430_db")  # a Russian word and a Latin one: fine
    vault.memory("d.md", "mem_\u03b1lpha")  # Greek alpha inside a Latin word
    run(store)
    mixed = {r["path"]: r for r in store.doctor()["problems"] if r["kind"] == "mixed_script_id"}
    assert set(mixed) == {"a.md", "d.md"}, mixed
    assert "Cyrillic" in mixed["a.md"]["detail"] and "Latin" in mixed["a.md"]["detail"]
    assert mixed["a.md"]["advice"]
    assert len(mem_rows(store)) == 4  # told, not dropped
    # A save that names such an id says so, and saves.
    saved = store.save(id="mem_b\u0430d", name="Bad", description="d", body="b", tags=["t"], embed=False)
    assert saved["status"] == "created" and any("mixes scripts" in w for w in saved["warnings"]), saved
    updated = store.save(id="mem_g\u043e\u043ed", body="new body", embed=False)
    assert updated["status"] == "updated" and any("mixes scripts" in w for w in updated["warnings"])
    plain = store.save(id="mem_good", body="new body", embed=False)
    assert not any("mixes scripts" in w for w in plain["warnings"])


def test_doctor_names_links_that_cannot_do_what_they_say(vault, store):
    # supersedes and conflicts_with that name their own memory, an id no memory
    # has, or go round in a ring: doctor said nothing, and a ring hid nothing.
    def memory(rel, mem_id, extra):
        vault.write(rel, f"---\nid: {mem_id}\nname: {mem_id}\ndescription: d\ntags: [t]\n{extra}---\n\nBody.\n")

    memory("self.md", "mem_self", "supersedes: mem_self\nconflicts_with: [mem_self]\n")
    memory("typo.md", "mem_typo", "supersedes: mem_nope\nconflicts_with: mem_gone\n")
    memory("ring1.md", "mem_r1", "supersedes: mem_r2\n")
    memory("ring2.md", "mem_r2", "supersedes: mem_r3\n")
    memory("ring3.md", "mem_r3", "supersedes: mem_r1\n")
    memory("both.md", "mem_both", "supersedes: mem_r1\nconflicts_with: mem_r1\n")
    memory("fine.md", "mem_fine", "supersedes: mem_typo\n")
    store.sync(embed=False)
    problems = [p for p in store.doctor()["problems"] if p["kind"] != "missing_vector"]  # no model here
    found = {(p["path"], p["kind"]) for p in problems}
    assert {
        ("self.md", "supersedes_itself"),
        ("self.md", "conflicts_with_itself"),
        ("typo.md", "unknown_id"),
        ("ring1.md", "supersedes_ring"),
        ("ring2.md", "supersedes_ring"),
        ("ring3.md", "supersedes_ring"),
        ("both.md", "supersedes_and_conflicts"),
    } <= found, found
    unknown = " ".join(p["detail"] for p in problems if p["kind"] == "unknown_id")
    assert "mem_nope" in unknown and "mem_gone" in unknown
    assert not any(path == "fine.md" for path, _ in found)  # it names a memory that exists
    assert all(p["advice"] for p in problems)
    # The same rows from the stock view, as the sqlite3 shell reads them.
    kinds = {r[0] for r in store.con.execute("SELECT kind FROM diag_problems")}
    assert {"supersedes_itself", "supersedes_ring", "unknown_id"} <= kinds


def _terms(con):
    return (
        sorted(con.execute("SELECT term, doc, cnt FROM fts_vocab")),
        sorted(con.execute("SELECT term, doc, cnt FROM fts_chunk_vocab")),
        sorted(con.execute("SELECT m.id, d.sz FROM fts_docsize d JOIN memory_index m ON m.rid = d.id")),
        sorted(
            con.execute(
                "SELECT m.id, c.seq, d.sz FROM fts_chunk_docsize d JOIN chunks c ON c.rid = d.id "
                "JOIN memory_index m ON m.rid = c.mem_rid"
            )
        ),
    )


def test_an_index_kept_up_to_date_holds_the_terms_of_one_built_afresh(vault, store, tmp_path):
    # FTS rows are written at the end of a batch, after the statements that
    # deleted the old rows of memories rewritten, moved, deactivated or deleted
    # (their chunks' rids may be reused): the terms and lengths must be
    # exactly those of a fresh index of the last state.
    for i in range(8):
        vault.memory(
            f"m{i}.md", f"mem_{i}", name=f"Name {i} 记忆", body=f"Cache word{i}.\n\n数据库 {i} 段落。\n\nEnd {i}."
        )
    run(store)
    bump(vault.root / "m1.md", (vault.root / "m1.md").read_text().replace("Cache", "Release notes"))
    bump(vault.root / "m5.md", (vault.root / "m5.md").read_text().replace("status: active", "status: archived"))
    (vault.root / "m2.md").unlink()
    os.rename(vault.root / "m3.md", vault.root / "z3.md")
    vault.memory("m8.md", "mem_8", body="One paragraph only, 中文。")
    bump(
        vault.root / "m6.md", (vault.root / "m6.md").read_text().replace("End 6.", "End 6.\n\nAnd one more paragraph.")
    )
    run(store)
    kept = _terms(store.con)
    fresh = Store(load_config(home=tmp_path / "fresh", root=vault.root, model=str(tmp_path / "none.gguf"), env={}))
    try:
        run(fresh)
        assert _terms(fresh.con) == kept
    finally:
        fresh.close()
