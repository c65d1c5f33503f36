"""Issue 11, case by case: real vaults, hostile files and typos never break the
store or touch what is not ours. Each test is written as an attacker or a
careless user would act, against the real CLI, API, watcher and MCP server.
The last test feeds generated hostile frontmatters and file names to sync and save."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest
from conftest import wait_idle
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.config import load_config
from marchdb.engine.watch import Watcher
from marchdb.errors import ConfigError, FileError, IndexUnavailable, InvalidInput, MarchError, NotFound
from marchdb.index.recall import MAX_RUN_ID_CHARS
from marchdb.store import Store
from marchdb.vault import files, notes
from marchdb.vault.changes import MAX_BODY_BYTES
from marchdb.vault.files import VAULT_LOCK_NAME

NO_MODEL = "/nonexistent/model.gguf"  # BM25 only: these tests are about files and errors, not vectors


def marchdb_cli(home: Path, *args: str, root: Path | None = None, input: str | None = None, env: dict | None = None):
    base = ["--home", str(home)] + (["--root", str(root)] if root is not None else [])
    return CliRunner().invoke(app, [*base, *args], input=input, env={"MARCH_EMBED_MODEL": NO_MODEL, **(env or {})})


def one_line_error(result, code: int) -> str:
    """The CLI failed with ``code`` and said why on one line of stderr (its
    last; progress lines may come before it), with no traceback."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().split("\n")
    assert lines[-1].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    assert sum(line.startswith("error: ") for line in lines) == 1, result.stderr
    return lines[-1]


def tree(folder: Path) -> dict[str, str]:
    """Every entry below ``folder`` → a hash of its bytes (or what it is)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


@pytest.fixture
def bm25_cfg(tmp_path, vault):
    return load_config(home=tmp_path / "home", root=vault.root, model=NO_MODEL, env={})


@pytest.fixture
def bm25_store(bm25_cfg):
    s = Store(bm25_cfg)
    yield s
    s.close()


def ids(store) -> set[str]:
    return {r[0] for r in store.con.execute("SELECT id FROM memory_index")}


def kinds(store) -> set[tuple[str, str]]:
    return {(p["path"], p["kind"]) for p in store.doctor()["problems"] if p["kind"] != "missing_vector"}


def wait_for(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


# ---------------------------------------------------------------- 1. data that is not ours: the index path


def _home_with_index_at(tmp_path: Path, vault, target: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps({"indexPath": str(target), "memoryRoot": str(vault.root)}))
    return home


INDEX_COMMANDS = [("status",), ("sync", "--no-embed"), ("rebuild", "--no-embed"), ("recall", "x"), ("sql", "SELECT 1")]


def test_1_index_path_on_a_users_file_is_refused_and_left_alone(tmp_path, vault):
    vault.memory("a.md", "mem_a")
    notes_dir = tmp_path / "documents"
    notes_dir.mkdir()
    target = notes_dir / "notes.txt"
    target.write_text("precious user data\n" * 200)
    home = _home_with_index_at(tmp_path, vault, target)
    before = tree(notes_dir)
    for args in INDEX_COMMANDS:
        err = one_line_error(marchdb_cli(home, *args), IndexUnavailable.exit_code)
        assert str(target) in err and "did not create" in err and "indexPath" in err, err
    assert tree(notes_dir) == before  # not rewritten, and no -wal, -shm or .lock next to it
    # rebuild said "rebuilding ..." before it refused; it refuses first now.
    assert "rebuilding" not in marchdb_cli(home, "rebuild", "--no-embed").stderr


@pytest.mark.parametrize("kind", ["plain", "wal", "application_id"])
def test_1_index_path_on_another_apps_database_keeps_its_tables(tmp_path, vault, kind):
    vault.memory("a.md", "mem_a")
    other_dir = tmp_path / "other-app"
    other_dir.mkdir()
    target = other_dir / "app.db"
    con = apsw.Connection(str(target))
    if kind == "wal":
        con.pragma("journal_mode", "wal")
    if kind == "application_id":
        con.pragma("application_id", 0x1234)
    con.execute("CREATE TABLE customers(name TEXT); INSERT INTO customers VALUES ('Ann'), ('Bob')")
    con.close()
    before = tree(other_dir)
    home = _home_with_index_at(tmp_path, vault, target)
    for args in INDEX_COMMANDS:
        err = one_line_error(marchdb_cli(home, *args), IndexUnavailable.exit_code)
        assert str(target) in err and "did not create" in err, err
    assert tree(other_dir) == before
    with pytest.raises(IndexUnavailable):  # the API too
        Store(load_config(home=home, env={})).status()
    assert tree(other_dir) == before
    con = apsw.Connection(str(target))
    assert con.execute("SELECT count(*) FROM customers").fetchone()[0] == 2


def test_1_an_empty_file_is_taken_over_only_when_marchdb_left_it(tmp_path, vault):
    vault.memory("a.md", "mem_a")
    target = tmp_path / "empty.sqlite"
    target.write_bytes(b"")
    home = _home_with_index_at(tmp_path, vault, target)
    err = one_line_error(marchdb_cli(home, "status"), IndexUnavailable.exit_code)
    assert "empty file" in err and target.read_bytes() == b""
    tableless = tmp_path / "tableless.sqlite"
    apsw.Connection(str(tableless)).execute("PRAGMA user_version = 7")  # a header and no table
    (tmp_path / "second").mkdir()
    err = one_line_error(marchdb_cli(_home_with_index_at(tmp_path / "second", vault, tableless), "status"), 7)
    assert "it is an SQLite database with no tables" in err
    # marchdb makes its lock file before the index: a killed first start leaves both.
    Path(f"{target}.lock").write_bytes(b"")
    target.write_bytes(b"\0" * 5)  # ... but a few zero bytes are not "empty"
    assert "not an SQLite database" in one_line_error(marchdb_cli(home, "status"), IndexUnavailable.exit_code)
    target.write_bytes(b"")
    result = marchdb_cli(home, "status", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["memories"] == 1


def test_1_a_corrupt_index_of_ours_is_still_rebuilt(tmp_path, vault, bm25_cfg):
    vault.memory("a.md", "mem_a")
    with Store(bm25_cfg) as store:
        store.sync(embed=False)
    data = bytearray(bm25_cfg.index_path.read_bytes())
    data[100:] = os.urandom(len(data) - 100)
    bm25_cfg.index_path.write_bytes(bytes(data))
    with Store(bm25_cfg) as store:
        assert store.status()["memories"] == 1
        notes = store.take_notices()
        # What became of the logs is said, as `marchdb rebuild` says it (it was silent here).
        assert any("corrupt" in n and "logs could not be read and are lost" in n for n in notes), notes


def test_1_our_mark_is_in_the_header_and_a_busy_index_is_never_called_foreign(tmp_path, vault, bm25_cfg):
    from marchdb.index import ownership

    vault.memory("a.md", "mem_a")
    with Store(bm25_cfg) as store:
        store.sync(embed=False)
        # The mark reaches the file's header at creation, not at some later checkpoint.
        head = bm25_cfg.index_path.read_bytes()[:100]
        assert int.from_bytes(head[68:72], "big") == ownership.APPLICATION_ID
        # An index whose mark still waits in the -wal file (made by an earlier
        # version) is ours too, read through the WAL, even while a writer holds it.
        with store.con:
            store.con.pragma("application_id", 0)
        store.con.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        with store.con:
            store.con.pragma("application_id", ownership.APPLICATION_ID)
        assert int.from_bytes(bm25_cfg.index_path.read_bytes()[68:72], "big") == 0
        store.con.execute("BEGIN IMMEDIATE")
        try:
            assert ownership.check_owned(bm25_cfg.index_path) == ownership.OURS
        finally:
            store.con.execute("ROLLBACK")


def test_1_the_ownership_check_keeps_this_processs_locks_on_the_index(tmp_path, vault, bm25_cfg):
    # Closing any descriptor of a file drops every POSIX lock the process holds
    # on it: a check that read the header with os.open/os.close while the
    # engine's first connection was open released that connection's shared
    # lock, and another process, believing itself the last reader, deleted the
    # -wal file still in use (writes were lost).
    vault.memory("a.md", "mem_a")
    with Store(bm25_cfg) as first:
        first.sync(embed=False)
        with Store(bm25_cfg) as second:  # what the engine's watcher does
            second.status()
        wal = Path(f"{bm25_cfg.index_path}-wal")
        assert wal.exists()
        # The stdlib's sqlite3, as a person's shell would be (apsw's own
        # connections keep the -wal file and would not show the loss).
        code = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT count(*) FROM memory_index').fetchall(); c.close()"
        subprocess.run([sys.executable, "-c", code, str(bm25_cfg.index_path)], check=True, timeout=60)
        assert wal.exists(), "another process checkpointed and deleted the -wal file of an open connection"
        assert ids(first) == {"mem_a"}


# ---------------------------------------------------------------- 2. roots that are not a vault


@pytest.mark.parametrize(
    "root",
    ["/", "/usr", "/etc", "/proc", "/usr/share", "/var", "/var/lib", "/var/log/apt", "/home", "/tmp", "/var/tmp"],
)
def test_2_system_folders_are_refused_as_memory_roots(tmp_path, root):
    if not os.path.isdir(root):
        pytest.skip(f"{root} does not exist here")
    for args in (("sync", "--no-embed"), ("search", "x"), ("save", "--name", "n", "-d", "d", "-t", "t", "--body", "b")):
        err = one_line_error(marchdb_cli(tmp_path / "home", *args, root=Path(root)), ConfigError.exit_code)
        assert "not a vault" in err and "allowUnusualRoot" in err, err


def test_2_no_watcher_ever_watches_a_system_folder(tmp_path):
    # `marchdb --root / watch` put inotify watches on /proc and /sys and never exited.
    from marchdb.engine.watch import start_watcher

    marchdb = str(Path(sys.executable).with_name("marchdb"))
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_DAEMON": "0", "MARCH_EMBED_MODEL": NO_MODEL}
    for root in ("/", "/usr"):
        done = subprocess.run([marchdb, "--root", root, "watch"], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == ConfigError.exit_code and "not a vault" in done.stderr, done.stderr[-500:]
        with Store(load_config(home=tmp_path / "home", root=Path(root), model=NO_MODEL, env={})) as store:
            with pytest.raises(ConfigError, match="not a vault"):
                start_watcher(store)  # the MCP server's in-process watcher starts through here


def test_2_the_home_folder_and_marchs_home_are_refused_unless_forced(tmp_path):
    user_home = tmp_path / "alice"
    (user_home / "Documents").mkdir(parents=True)
    (user_home / "Documents" / "todo.md").write_text("---\nid: mem_todo\n---\nbuy milk\n")
    env = {"HOME": str(user_home)}
    save = ("save", "--name", "n", "-d", "d", "-t", "t", "--body", "b")
    err = one_line_error(marchdb_cli(tmp_path / "home", *save, root=user_home, env=env), ConfigError.exit_code)
    assert "home folder" in err
    assert sorted(p.name for p in user_home.iterdir()) == ["Documents"]  # no 2026/... written into it
    march_home = tmp_path / "mh"
    err = one_line_error(marchdb_cli(march_home, "sync", "--no-embed", root=march_home, env=env), ConfigError.exit_code)
    assert "marchdb's home" in err
    # Another home than this one, and a folder of settings and keys, are no vaults either.
    err = one_line_error(marchdb_cli(tmp_path / "other", "sync", "--no-embed", root=march_home, env=env), 3)
    assert "it is a marchdb home (profiles, index), another one than this" in err
    (user_home / ".ssh").mkdir()
    err = one_line_error(marchdb_cli(tmp_path / "home", "sync", "--no-embed", root=user_home / ".ssh", env=env), 3)
    assert "holds your settings and keys, not notes" in err
    # Forced on purpose: it works, and says nothing more.
    (tmp_path / "home" / "config.json").write_text('{"allowUnusualRoot": true}')
    result = marchdb_cli(tmp_path / "home", "sync", "--no-embed", "--json", root=user_home, env=env)
    assert result.exit_code == 0 and json.loads(result.stdout)["added"] == 1
    forced = marchdb_cli(
        march_home, "sync", "--no-embed", root=march_home, env={**env, "MARCH_ALLOW_UNUSUAL_ROOT": "1"}
    )
    assert forced.exit_code == 0, forced.output


def test_2_a_root_that_is_no_vault_is_named_before_the_index_of_another_vault(tmp_path, vault):
    # status suggested `marchdb rebuild` to take / as the index's vault, which rebuild then refused.
    vault.memory("a.md", "mem_a")
    home = tmp_path / "home"
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0
    said = marchdb_cli(home, "status", root=Path("/usr")).stderr
    assert "is not a vault" in said and "marchdb rebuild" not in said, said


def test_2_an_index_inside_the_memory_root_is_refused_before_anything_is_made(tmp_path, vault):
    # indexPath ".../vault/idx.md": its -wal, -shm and lock files landed among the notes, and doctor
    # then listed the index itself as a binary note.
    vault.memory("a.md", "mem_a")
    home = tmp_path / "home"
    for name in ("idx.md", "sub/idx.sqlite"):
        home.mkdir(exist_ok=True)
        (home / "config.json").write_text(json.dumps({"indexPath": str(vault.root / name)}))
        for args in (("sync", "--no-embed"), ("status",), ("rebuild", "--no-embed"), ("recall", "x")):
            err = one_line_error(marchdb_cli(home, *args, root=vault.root), ConfigError.exit_code)
            assert "is inside the memory root" in err, (name, args, err)
        assert sorted(p.name for p in vault.root.iterdir()) == ["a.md"]
    # A hidden folder of the root is skipped by every scan: fine.
    (home / "config.json").write_text(json.dumps({"indexPath": str(vault.root / ".marchdb" / "idx.sqlite")}))
    (vault.root / ".marchdb").mkdir()
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0


def test_2_a_walk_never_enters_proc_or_sys():
    for tree_root in ("/proc", "/sys"):
        if os.path.isdir(tree_root):
            found, problems = files.walk(Path(tree_root))
            assert found == {} and problems == []


# ---------------------------------------------------------------- 3. file names that are not UTF-8


def _bad_names(vault) -> None:
    root = os.fsencode(vault.root)
    with open(root + b"/caf\xe9.md", "wb") as fh:
        fh.write(b"---\nid: mem_cafe\nname: Cafe\ndescription: d\ntags: [t]\n---\nlatte art\n")
    os.mkdir(root + b"/dossier-\xff")
    with open(root + b"/dossier-\xff/inside.md", "wb") as fh:
        fh.write(b"---\nid: mem_inside\nname: In\ndescription: d\ntags: [t]\n---\nlatte\n")


def test_3_a_file_name_that_is_not_utf8_is_reported_never_a_crash(tmp_path, vault, bm25_store):
    vault.memory("good.md", "mem_good", body="latte and milk")
    _bad_names(vault)
    report = bm25_store.sync(embed=False)
    assert ids(bm25_store) == {"mem_good"} and report.problems >= 2
    assert {("caf\\xe9.md", "bad_file_name"), ("dossier-\\xff", "bad_file_name")} <= kinds(bm25_store)
    assert all(p["advice"] for p in bm25_store.doctor()["problems"])
    assert bm25_store.open("mem_good")["status"] == "ok"
    found = bm25_store.search("latte")
    json.dumps(found, ensure_ascii=False).encode("utf-8")  # printable, sendable
    assert [r["id"] for r in found["results"]] == ["mem_good"] and "UTF-8" in " ".join(found["warnings"])
    assert bm25_store.recall("latte art and milk").mode == "bm25"
    saved = bm25_store.save(name="New one", description="d", tags=["t"], body="b", embed=False)
    assert saved["status"] == "created"
    home = bm25_store.cfg.home
    for args in (("sync", "--no-embed"), ("status",), ("doctor",), ("search", "latte"), ("open", "mem_good")):
        result = marchdb_cli(home, *args, root=vault.root)
        assert result.exit_code == 0, (args, result.output, result.exception)
    assert "caf\\xe9.md" in marchdb_cli(home, "doctor", root=vault.root).stdout
    searched = marchdb_cli(home, "search", "latte", root=vault.root)
    assert "warning:" in searched.stderr and "UTF-8" in searched.stderr  # text mode says it too


def test_3_the_watcher_survives_a_bad_name_and_keeps_indexing(tmp_path, vault, bm25_cfg):
    logs: list[str] = []
    with Store(bm25_cfg) as store:
        watcher = Watcher(store, log=logs.append, debounce=0.05).start()
        try:
            assert wait_idle(watcher, 30)
            _bad_names(vault)
            vault.memory("later.md", "mem_later")
            assert wait_for(lambda: "mem_later" in ids(store)), logs
            assert wait_idle(watcher, 30)  # the next file is a batch of its own
            vault.memory("last.md", "mem_last")
            assert wait_for(lambda: "mem_last" in ids(store)), logs
            assert watcher._thread.is_alive()
            assert wait_idle(watcher, 30)
            assert ("caf\\xe9.md", "bad_file_name") in kinds(store)  # reported without waiting for a dirty check
        finally:
            watcher.stop()


# ---------------------------------------------------------------- 4. YAML bombs and huge frontmatters

ALIAS_BOMB = (
    "---\nid: mem_bomb\nname: n\ndescription: d\n"
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "tags: [*c, *c, *c]\n---\nbody\n"
)


def test_4_yaml_aliases_are_refused_and_reported(vault, bm25_store):
    vault.write("bomb.md", ALIAS_BOMB)
    vault.memory("good.md", "mem_good")
    bm25_store.sync(embed=False)
    assert ids(bm25_store) == {"mem_good"}
    detail = next(p["detail"] for p in bm25_store.doctor()["problems"] if p["path"] == "bomb.md")
    # Where, in the frontmatter's own lines; not PyYAML's '"<unicode string>", line 2' with a caret.
    assert "alias" in detail and "(frontmatter line 5, column " in detail and "unicode" not in detail
    assert bm25_store.search("body")["results"]  # search reads the same frontmatter safely
    # A merge key without an alias was merged, though the README says merge keys are refused.
    vault.write("merge.md", "---\nid: mem_merge\nname: n\ndescription: d\ntags: [t]\n<<: {status: archived}\n---\nb\n")
    bm25_store.sync(embed=False)
    assert "mem_merge" not in ids(bm25_store)
    detail = next(p["detail"] for p in bm25_store.doctor()["problems"] if p["path"] == "merge.md")
    assert "merge key" in detail


def test_4_an_update_of_a_file_that_grew_aliases_is_refused_at_once(vault, bm25_store):
    from marchdb.save import update_file
    from marchdb.vault.changes import validate_changes

    path = vault.memory("m.md", "mem_m", description="old")
    bm25_store.sync(embed=False)
    text = path.read_text().replace("status: active", "x: &x [1, 2, 3]\ny: [*x, *x, *x]\nstatus: active")
    path.write_text(text)
    with pytest.raises(MarchError):  # the save's own scan finds it broken: not a memory any more
        bm25_store.save(id="mem_m", description="new", embed=False)
    # And if the aliases arrive between that scan and the write:
    with pytest.raises(FileError, match="alias"):
        update_file(path, "mem_m", validate_changes(description="new"), text.encode(), notes.utc_now_iso())
    assert path.read_text() == text


@pytest.mark.parametrize(
    "head, expected",
    [
        ("".join(f"k{i % 5}: v\n" for i in range(20_000)), "too_large"),  # 1 MB frontmatter class, repeated keys
        ("".join(f"field{i}: v\n" for i in range(500)), "parse_error"),  # too many fields
        ("deep: " + "[" * 50 + "]" * 50 + "\n", "parse_error"),  # nested too deep
        ("many: [" + ", ".join(["1"] * 6000) + "]\n", "parse_error"),  # too many values
    ],
    ids=["repeated-keys", "fields", "depth", "values"],
)
def test_4_frontmatter_work_is_bounded_and_reported(vault, bm25_store, head, expected):
    vault.write("big.md", f"---\nid: mem_big\nname: n\ndescription: d\n{head}---\nbody\n")
    vault.memory("good.md", "mem_good")
    bm25_store.sync(embed=False)
    assert ids(bm25_store) == {"mem_good"}
    assert ("big.md", expected) in kinds(bm25_store)


def test_4_a_number_too_large_for_a_float_is_reported_never_a_crash(tmp_path, vault, bm25_store):
    # "1:59:...:59.5" is a YAML 1.1 float in base 60: past 60**173 Python cannot make it a float
    # (OverflowError), and one such file stopped every sync with exit 1.
    huge = "1" + ":59" * 200 + ".5"
    vault.write("big.md", f"---\nid: mem_big\nname: n\ndescription: d\nk: {huge}\n---\nbody\n")
    vault.memory("good.md", "mem_good")
    bm25_store.sync(embed=False)
    assert ids(bm25_store) == {"mem_good"}
    [row] = [p for p in bm25_store.doctor()["problems"] if p["path"] == "big.md"]
    assert row["kind"] == "parse_error" and "quote it" in row["detail"]
    # The notes of a folder imported, read by the same loader.
    notes_dir = tmp_path / "notes"
    notes_dir.mkdir()
    (notes_dir / "n.md").write_text(f"---\ntitle: t\nk: {huge}\n---\nsome text\n", encoding="utf-8")
    (notes_dir / "m.md").write_text("---\ntitle: fine\n---\nother text\n", encoding="utf-8")
    plan = bm25_store.import_("obsidian", str(notes_dir))
    assert "quote it" in json.dumps(plan, ensure_ascii=False)


def test_4_the_duplicate_key_check_is_linear():
    # 20,000 repeated keys cost 40 s with list.count in a loop; now one pass.
    head = "".join(f"k{i % 7}: v\n" for i in range(6000))
    note = notes.parse_note(f"---\nid: m\n{head}---\nb\n".encode())
    assert sum("appears more than once" in p.detail for p in note.problems) == 7


# ---------------------------------------------------------------- 5. FIFOs


def test_5_a_fifo_named_md_never_blocks_a_writer_while_a_watcher_runs(tmp_path, vault, bm25_cfg):
    vault.memory("a.md", "mem_a", body="pipe dream")
    with Store(bm25_cfg) as store:
        watcher = Watcher(store, debounce=0.05).start()
        try:
            assert wait_idle(watcher, 30)
            os.mkfifo(vault.root / "x.md")
            os.mkfifo(vault.root / "a.md.tmp")
            os.replace(vault.root / "a.md.tmp", vault.root / "a.md")  # an indexed memory becomes a FIFO
            # The watcher has heard of both: the FIFO in a.md's place took it out of the index.
            assert wait_for(lambda: "mem_a" not in ids(store)) and wait_idle(watcher, 30)
            proc = subprocess.run(
                [sys.executable, "-m", "marchdb", "--home", str(bm25_cfg.home), "--root", str(vault.root)]
                + ["save", "--name", "Writer", "-d", "from another process", "-t", "t", "--body", "b", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "MARCH_EMBED_MODEL": NO_MODEL},
            )
            assert proc.returncode == 0, proc.stderr
            assert wait_idle(watcher, 30)
            assert store.search("pipe")["results"] == []
            with pytest.raises((FileError, NotFound)):
                store.open("mem_a")
        finally:
            watcher.stop()


def test_5_a_fifo_or_link_as_a_profile_is_an_error_not_a_hang(tmp_path, bm25_store):
    from marchdb.profiles import read_profiles

    read_profiles(bm25_store.cfg)
    user = bm25_store.cfg.profiles_dir / "user.md"
    user.unlink()
    os.mkfifo(user)
    with pytest.raises(FileError, match="regular file"):
        bm25_store.context()
    user.unlink()
    (tmp_path / "elsewhere.md").write_text("secret")
    os.symlink(tmp_path / "elsewhere.md", user)
    with pytest.raises(FileError, match="symbolic link"):
        bm25_store.context()


@pytest.mark.parametrize("plant", ["fifo", "link", "folder", "socket"])
def test_5_a_fifo_or_link_as_the_vault_lock_is_an_error_not_a_hang(tmp_path, vault, bm25_store, plant):
    import socket

    lock = vault.root / VAULT_LOCK_NAME
    if plant == "fifo":
        os.mkfifo(lock)
    elif plant == "folder":
        lock.mkdir()
    elif plant == "socket":
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(lock))
    else:
        (tmp_path / "elsewhere").write_text("theirs")
        os.symlink(tmp_path / "elsewhere", lock)
    outcome: dict = {}

    def attempt():
        for name, call in (
            ("save", lambda: bm25_store.save(name="Blocked", description="d", tags=["t"], body="b", embed=False)),
            ("log", lambda: bm25_store.log("Blocked", "text")),
        ):
            try:
                call()
                outcome[name] = "written"
            except FileError as exc:
                outcome[name] = str(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "a writer hung on the planted lock file"
    for message in outcome.values():
        assert str(lock) in message and "delete it" in message
    assert set(outcome) == {"save", "log"}
    assert not list(vault.root.rglob("*.md")), "nothing may be written"
    if plant == "link":
        assert (tmp_path / "elsewhere").read_text() == "theirs"


# ---------------------------------------------------------------- 6. a newline in a file name


def test_6_a_file_with_a_newline_in_its_name_is_found_by_search(vault, bm25_store):
    vault.memory("two\nlines.md", "mem_nl", body="needle in a strange name")
    vault.memory("plain.md", "mem_plain", body="needle in a plain name")
    bm25_store.sync(embed=False)
    assert ids(bm25_store) == {"mem_nl", "mem_plain"}
    found = bm25_store.search("needle")
    assert {(r["path"], r["id"]) for r in found["results"]} == {("two\nlines.md", "mem_nl"), ("plain.md", "mem_plain")}


# ---------------------------------------------------------------- 7, 8. symbolic links


def _outside_memory(folder: Path, mem_id: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "secret.md"
    path.write_text(f"---\nid: {mem_id}\nname: s\ndescription: d\n---\nTOP SECRET outside the vault\n")
    return path


def test_7_open_never_reads_through_a_link_to_a_file(tmp_path, vault, bm25_store):
    secret = _outside_memory(tmp_path / "outside", "mem_a")
    vault.memory("a.md", "mem_a", body="mine")
    bm25_store.sync(embed=False)
    (vault.root / "a.md").unlink()
    os.symlink(secret, vault.root / "a.md")  # swapped before the next scan
    with pytest.raises((FileError, NotFound)):
        bm25_store.open("mem_a")
    result = marchdb_cli(bm25_store.cfg.home, "open", "mem_a", "--json", root=vault.root)
    assert result.exit_code != 0 and "TOP SECRET" not in result.stdout


def test_7_open_never_reads_through_a_linked_folder(tmp_path, vault, bm25_store):
    vault.memory("notes/b.md", "mem_b", body="mine")
    bm25_store.sync(embed=False)
    outside = tmp_path / "outside"
    _outside_memory(outside, "mem_b").rename(outside / "b.md")
    shutil.rmtree(vault.root / "notes")
    os.symlink(outside, vault.root / "notes")  # the folder, not the file, is the link
    with pytest.raises(FileError, match="link"):
        bm25_store.open("mem_b")
    result = marchdb_cli(bm25_store.cfg.home, "open", "mem_b", root=vault.root)
    assert result.exit_code != 0 and "TOP SECRET" not in result.stdout


@pytest.mark.parametrize("level", ["year", "month", "week"])
def test_8_save_never_writes_through_a_linked_bucket_folder(tmp_path, vault, bm25_store, level):
    outside = tmp_path / "outside"
    outside.mkdir()
    now = dt.datetime.now().astimezone()
    parts = [f"{now.year:04d}", f"{now.month:02d}", f"week{notes.week_of_month(now.day)}"]
    depth = ["year", "month", "week"].index(level)
    real = vault.root.joinpath(*parts[:depth])
    real.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, real / parts[depth])
    for attempt in range(2):
        with pytest.raises(FileError, match="symbolic link"):
            bm25_store.save(name=f"Escape {attempt}", description="d", tags=["t"], body="b", embed=False)
    assert tree(outside) == {}
    err = one_line_error(
        marchdb_cli(
            bm25_store.cfg.home, "save", "--name", "Via CLI", "-d", "d", "-t", "t", "--body", "b", root=vault.root
        ),
        FileError.exit_code,
    )
    assert "symbolic link" in err and tree(outside) == {}


@pytest.mark.parametrize("plant", ["file", "fifo"])
def test_8_a_file_where_a_bucket_folder_goes_is_named_not_called_a_link(vault, bm25_store, plant):
    # The advice was "replace the link with a real folder" for a plain file or a FIFO too.
    now = dt.datetime.now().astimezone()
    year = vault.root / f"{now.year:04d}"
    vault.root.mkdir(parents=True, exist_ok=True)
    year.write_text("mine") if plant == "file" else os.mkfifo(year)
    with pytest.raises(FileError) as refused:
        bm25_store.save(name="Blocked", description="d", tags=["t"], body="b", embed=False)
    message = str(refused.value)
    assert "link" not in message and "move it away" in message and str(year) in message
    assert year.is_fifo() if plant == "fifo" else year.read_text() == "mine"


def test_8_update_never_writes_through_a_folder_linked_meanwhile(tmp_path, vault, bm25_store):
    path = vault.memory("notes/b.md", "mem_b", description="old")
    bm25_store.sync(embed=False)
    outside = tmp_path / "outside"
    shutil.copytree(vault.root / "notes", outside)
    shutil.rmtree(vault.root / "notes")
    os.symlink(outside, vault.root / "notes")
    before = tree(outside)
    with pytest.raises(MarchError):
        bm25_store.save(id="mem_b", description="new", embed=False)
    assert tree(outside) == before and (vault.root / "notes").is_symlink() and path.parent.resolve() == outside


# ---------------------------------------------------------------- 9. bounded work, the same everywhere


@pytest.mark.parametrize(
    "args, message",
    [
        ({"body": "x" * (MAX_BODY_BYTES + 1)}, "limited to"),
        ({"body": "记" * (MAX_BODY_BYTES // 3 + 1)}, "limited to"),
        ({"tags": [f"t{i}" for i in range(20_000)]}, "at most"),
        ({"tags": [f"t{i}" for i in range(notes.MAX_TAGS + 1)]}, "at most"),
        ({"tags": ["x" * (notes.MAX_TAG_CHARS + 1)]}, "limit is"),
    ],
    ids=["body", "body-cjk", "20000-tags", "51-tags", "long-tag"],
)
def test_9_save_limits_are_the_same_in_api_cli_and_tools(tmp_path, vault, bm25_store, args, message):
    from marchdb import ops

    full = {"name": "n", "description": "d", "body": "b", "tags": ["t"], **args}
    with pytest.raises(InvalidInput, match=message):
        bm25_store.save(**full, embed=False)
    with pytest.raises(InvalidInput, match=message):
        ops.call(bm25_store, "memory_save", full)
    cli_args = ["save", "--name", "n", "-d", "d", "--body", full["body"]]
    for tag in full["tags"][:200]:  # argv has its own limits; the rule is the same
        cli_args += ["-t", tag]
    if "tags" in args and len(args["tags"]) <= 200 or "body" in args:
        err = one_line_error(marchdb_cli(bm25_store.cfg.home, *cli_args, root=vault.root), InvalidInput.exit_code)
        assert message in err
    assert not list(vault.root.rglob("*.md"))


def test_9_recall_and_search_inputs_are_bounded(vault, bm25_store):
    vault.memory("a.md", "mem_a", body="apples")
    bm25_store.sync(embed=False)
    with pytest.raises(InvalidInput, match="run_id"):
        bm25_store.recall("apples", run_id="r" * (MAX_RUN_ID_CHARS + 1))
    assert bm25_store.recall("apples " * 200_000).mode == "bm25"  # 1.4 MB message: its start is read
    with pytest.raises(InvalidInput, match="limit is"):
        bm25_store.search("x" * 5000)
    with pytest.raises(InvalidInput):
        bm25_store.open("m" * 10_000)


# ---------------------------------------------------------------- 10. two homes, one vault


SAVER = """
import sys, time
from pathlib import Path
from marchdb.store import Store
home, root, gate = sys.argv[1], sys.argv[2], Path(sys.argv[3])
store = Store(home=home, root=root, model="/nonexistent.gguf")
store.sync(embed=False)
Path(home + ".ready").touch()
while not gate.exists():
    time.sleep(0.001)
for i in range(8):
    store.save(id=f"mem_race_{i}", name=f"Race {i} " + home[-1], description="d", tags=["t"], body=home, embed=False)
    store.save(name="Same name", description="d", tags=["t"], body=home, embed=False)
"""


def test_10_two_homes_saving_into_one_vault_never_share_an_id(tmp_path, vault):
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    gate = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / f"home{n}"), str(vault.root), str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (1, 2)
    ]
    assert wait_for(lambda: all((tmp_path / f"home{n}.ready").exists() for n in (1, 2)), 60)
    gate.touch()  # both start saving at the same moment
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    holders: dict[str, list[str]] = {}
    for path in vault.root.rglob("*.md"):
        note = notes.parse_note(path.read_bytes())
        holders.setdefault(note.id, []).append(str(path))
    shared = {k: v for k, v in holders.items() if len(v) > 1}
    assert not shared, shared
    assert {f"mem_race_{i}" for i in range(8)} <= set(holders)
    assert sum(1 for p in vault.root.rglob("*.md") if "Same name" in p.read_text()) == 1


# ---------------------------------------------------------------- 11. CRLF, BOM, "---  "

LAYOUT_NOTE = """---
# keep this comment
id: mem_layout
name: Layout   # and this one
description: old words
flag: yes
day: 2026-05-14
tags:
- a
status: active
created_at: 2026-05-14T10:30:00.000Z
---

Body line one.
Body line two.
"""


@pytest.mark.parametrize("variant", ["crlf", "bom", "fence", "all"])
def test_11_an_update_keeps_line_ends_bom_fences_and_comments(vault, bm25_store, variant):
    text = LAYOUT_NOTE
    if variant in ("fence", "all"):
        text = text.replace("---\n", "---  \n", 1)
    if variant in ("crlf", "all"):
        text = text.replace("\n", "\r\n")
    raw = text.encode("utf-8")
    if variant in ("bom", "all"):
        raw = b"\xef\xbb\xbf" + raw
    path = vault.write("layout.md", raw)
    bm25_store.sync(embed=False)
    assert bm25_store.save(id="mem_layout", description="new words", embed=False)["status"] == "updated"
    out = path.read_bytes()
    assert out.startswith(b"\xef\xbb\xbf") == (variant in ("bom", "all"))
    lines = out.decode("utf-8-sig").split("\n")
    crlf = variant in ("crlf", "all")
    assert all(line.endswith("\r") == crlf for line in lines[:-1]), lines
    bare = [line.rstrip("\r") for line in lines]
    for kept in (
        "# keep this comment",
        "name: Layout   # and this one",
        "flag: yes",
        "day: 2026-05-14",
        "Body line two.",
    ):
        assert kept in bare, kept
    assert bare[0] == ("---  " if variant in ("fence", "all") else "---")
    assert "description: new words" in bare and "old words" not in out.decode("utf-8-sig")
    bm25_store.save(id="mem_layout", body="A new body.\nSecond line.", embed=False)
    lines = path.read_bytes().decode("utf-8-sig").split("\n")
    assert all(line.endswith("\r") == crlf for line in lines[:-1]) and "# keep this comment" in lines[1]
    bm25_store.sync(embed=False)
    row = bm25_store.con.execute("SELECT description FROM memory_index WHERE id = 'mem_layout'").fetchone()
    assert row == ("new words",)


def test_11_a_layout_that_cannot_be_edited_in_place_is_refused_with_the_reason(vault, bm25_store):
    text = "---\n{id: mem_flow, name: Flow, description: old, tags: [a]}\n---\nbody # keep\n"
    path = vault.write("flow.md", text)
    bm25_store.sync(embed=False)
    with pytest.raises(FileError, match=r"cannot update .* in place: the frontmatter is one \{...\} mapping"):
        bm25_store.save(id="mem_flow", description="new", embed=False)
    assert path.read_text() == text


# ---------------------------------------------------------------- 12. one-line errors


def test_12_a_full_disk_under_the_index_is_one_line(tmp_path, vault):
    home = tmp_path / "home"
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0
    for i in range(300):
        vault.memory(f"m{i}.md", f"mem_{i}", body="words " * 300)
    size = (home / "index.sqlite").stat().st_size

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 8192, size + 8192))

    proc = subprocess.run(
        [sys.executable, "-m", "marchdb", "--home", str(home), "--root", str(vault.root), "sync", "--no-embed"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_file_size,
        env={**os.environ, "MARCH_EMBED_MODEL": NO_MODEL},
    )
    assert proc.returncode == IndexUnavailable.exit_code, proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("error: the index") and "\n" not in err and "Traceback" not in err, err


def test_12_an_immutable_index_is_one_line(tmp_path, vault):
    home = tmp_path / "home"
    vault.memory("a.md", "mem_a")
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0
    index = home / "index.sqlite"
    if subprocess.run(["chattr", "+i", str(index)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and ext4)")
    try:
        vault.memory("b.md", "mem_b")
        for args in (("sync", "--no-embed"), ("rebuild", "--no-embed")):
            err = one_line_error(marchdb_cli(home, *args, root=vault.root), IndexUnavailable.exit_code)
            assert "index" in err
    finally:
        subprocess.run(["chattr", "-i", str(index)], check=True)


@pytest.mark.parametrize(
    "config",
    [
        b"\xff\xfe{\x00}\x00",  # UTF-16, as some editors save
        b'{"recallMinScore": -5}',
        b'{"recallMinScore": NaN}',
        b'{"recallMinScore": 1.5}',
        b'{"recallMinScore": true}',
        b'{"threads": 0}',
        b'{"threads": -1}',
        b'{"threads": 2.5}',
        b'{"recallDenseWeight": true}',
        b'{"indexPath": 5}',
        b'{"modelsDir": ["x"]}',
        b'{"allowUnusualRoot": "yes"}',
        b'{"embeddingPrefixes": {"query": 1}}',
        b'{"projectTagPrefix": "proj:"}',  # no tag can start so: the bonus would never apply
        b'{"projectTagPrefix": 5}',
        b"[" * 100_000,
    ],
)
def test_12_bad_settings_are_one_line_config_errors(tmp_path, vault, config):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_bytes(config)
    one_line_error(marchdb_cli(home, "status", root=vault.root), ConfigError.exit_code)


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "2"])
def test_12_a_bad_threshold_in_the_environment_is_refused(tmp_path, vault, value):
    err = one_line_error(
        marchdb_cli(tmp_path / "home", "status", root=vault.root, env={"MARCH_MEMORY_RECALL_MIN_SCORE": value}),
        ConfigError.exit_code,
    )
    assert "MARCH_MEMORY_RECALL_MIN_SCORE" in err


@pytest.mark.parametrize("value", [-5, float("nan"), float("inf"), 2, "0.5", True])
def test_12_a_bad_threshold_in_the_api_is_refused(bm25_store, value):
    with pytest.raises(InvalidInput, match="threshold"):
        bm25_store.recall("anything at all", threshold=value)


def test_12_a_config_json_that_is_a_fifo_does_not_hang(tmp_path, vault):
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / "config.json")
    one_line_error(marchdb_cli(home, "status", root=vault.root), ConfigError.exit_code)


def test_12_endless_stdin_stops_at_the_body_limit(tmp_path, vault):
    proc = subprocess.Popen(
        [sys.executable, "-m", "marchdb", "--home", str(tmp_path / "home"), "--root", str(vault.root)]
        + ["save", "--name", "n", "-d", "d", "-t", "t", "--body", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MARCH_EMBED_MODEL": NO_MODEL},
    )
    written = 0
    chunk = b"y\n" * 32768
    try:
        while written < 64 * 1024 * 1024:  # `yes |`, as far as a test goes
            assert proc.stdin is not None
            proc.stdin.write(chunk)
            written += len(chunk)
    except BrokenPipeError:
        pass
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == InvalidInput.exit_code, err
    assert written < MAX_BODY_BYTES + 4 * 1024 * 1024  # the pipe buffer, not the whole stream
    assert "Traceback" not in err.decode() and "a memory body is limited to 65,536 bytes" in err.decode()


def test_12_any_sqlite_error_escaping_a_command_is_one_line(tmp_path, vault):
    # A full disk in the middle of a save's index update, as the CLI meets it.
    home = tmp_path / "home"
    vault.memory("a.md", "mem_a")
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0
    con = apsw.Connection(str(home / "index.sqlite"))
    pages = con.pragma("page_count")
    con.close()
    script = (
        "import sys, apsw\n"
        "from marchdb.index import db\n"
        "real = db._connect_raw\n"
        "def tight(path):\n"
        "    con = real(path)\n"
        f"    con.pragma('max_page_count', {pages})\n"
        "    return con\n"
        "db._connect_raw = tight\n"
        "from marchdb.cli.main import main\n"
        "sys.argv = ['marchdb'] + sys.argv[1:]\n"
        "main()\n"
    )
    for i in range(100):
        vault.memory(f"m{i}.md", f"mem_{i}", body="words " * 200)
    proc = subprocess.run(
        [sys.executable, "-c", script, "--home", str(home), "--root", str(vault.root), "sync", "--no-embed"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MARCH_EMBED_MODEL": NO_MODEL},
    )
    assert proc.returncode == IndexUnavailable.exit_code, proc.stderr
    assert "disk is full" in proc.stderr and "Traceback" not in proc.stderr
    # which index: the command's store was looked up through click's context, which typer's is not
    assert f"the index {home / 'index.sqlite'} cannot be used" in proc.stderr, proc.stderr


TIGHT_INDEX = (
    "import sys, apsw\n"
    "from marchdb.index import db\n"
    "real = db._connect_raw\n"
    "def tight(path):\n"
    "    con = real(path)\n"
    "    con.pragma('max_page_count', con.pragma('page_count'))\n"
    "    return con\n"
    "db._connect_raw = tight\n"
    "from marchdb.cli.main import main\n"
    "sys.argv = ['marchdb'] + sys.argv[1:]\n"
    "main()\n"
)


def test_12_a_save_on_a_full_index_disk_says_the_file_was_written(tmp_path, vault):
    # The memory file was written, and the save said exit 7 "the index cannot be used":
    # a user (or an agent) saving again then made a second file.
    home = tmp_path / "home"
    vault.memory("a.md", "mem_a")
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0

    def tight(*args):
        return subprocess.run(
            [sys.executable, "-c", TIGHT_INDEX, "--home", str(home), "--root", str(vault.root), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MARCH_EMBED_MODEL": NO_MODEL},
        )

    logged = tight("log", "A note", "text " * 3000)
    assert logged.returncode == 0 and "the file was written" in logged.stderr, logged.stderr
    # With room again, the next command indexes the note (and a save's own scan would have to, first).
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0
    body = "words " * 3000  # more than the index's free pages hold
    saved = tight(
        "save", "--json", "--name", "Full disk", "-d", "a memory saved on a full disk", "-t", "t", "--body", body
    )
    assert saved.returncode == 0, saved.stderr
    data = json.loads(saved.stdout)
    assert data["status"] == "created" and Path(data["path"]).is_file()
    warning = " ".join(data["warnings"])
    assert "the file was written" in warning and "next sync" in warning and "disk is full" in warning, warning
    assert "Traceback" not in saved.stderr
    # Once the disk has room, the index catches up by itself.
    found = marchdb_cli(home, "open", data["id"], root=vault.root)
    assert found.exit_code == 0 and "words words" in found.stdout


# ---------------------------------------------------------------- 13. marchdb sql


def test_13_introspection_is_allowed_and_the_shell_cannot_write(tmp_path, vault):
    home = tmp_path / "home"
    vault.memory("a.md", "mem_a")
    assert marchdb_cli(home, "sync", "--no-embed", root=vault.root).exit_code == 0
    data = json.loads(marchdb_cli(home, "sql", "PRAGMA table_info(files)", "--json", root=vault.root).stdout)
    assert "path" in [r["name"] for r in data["rows"]]
    assert marchdb_cli(home, "sql", "PRAGMA index_list(files)", "--json", root=vault.root).exit_code == 0
    for sneaky in ("PRAGMA user_version = 5", "PRAGMA query_only = 0; DELETE FROM files", "ATTACH 'x.db' AS x"):
        assert marchdb_cli(home, "sql", sneaky, root=vault.root).exit_code == InvalidInput.exit_code, sneaky
    empty = tmp_path / "empty.db"
    apsw.Connection(str(empty)).execute("CREATE TABLE t(x)")
    shell_input = f".restore {empty}\n.restore main {empty}\nDELETE FROM files;\nDROP TABLE meta;\n"
    said = marchdb_cli(home, "sql", root=vault.root, input=shell_input).stderr
    # Why, as `marchdb sql "DELETE ..."` says it; not a bare "not authorized".
    assert said.count("the index is read-only here: it is rebuilt from the Markdown files") == 2, said
    assert "not authorized" not in said
    con = apsw.Connection(str(home / "index.sqlite"))
    assert con.execute("SELECT count(*) FROM files").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM memory_index").fetchone()[0] == 1
    con.close()
    result = marchdb_cli(home, "sql", root=vault.root, input="PRAGMA table_info(memory_index);\n")
    assert "description" in result.stdout
    # ... nor run a program or Python.
    marker = tmp_path / "ran"
    script = tmp_path / "evil.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    sql_file = tmp_path / "evil.sql"
    sql_file.write_text(f".shell touch {marker}\n")
    for command in (
        f".shell touch {marker}",
        f".py open({str(marker)!r}, 'w').write('x')",
        f".read {script}",
        f".read {sql_file}",
    ):
        result = marchdb_cli(home, "sql", root=vault.root, input=command + "\n")
        assert not marker.exists() and "not available in a read-only" in result.output, command
    # ... nor write a file: a typo must not overwrite the index or another program's file.
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    index_bytes = (home / "index.sqlite").read_bytes()
    for command in (
        f".output {precious}\nSELECT 1;",
        f".log {precious}",
        f".backup temp {home / 'index.sqlite'}",
        f".backup main {precious}",
        ".dbconfig defensive off",
    ):
        result = marchdb_cli(home, "sql", root=vault.root, input=command + "\n")
        assert "not available in a read-only" in result.output, command
        assert precious.read_text() == "mine\n" and (home / "index.sqlite").read_bytes() == index_bytes, command
    assert "memory_index" in marchdb_cli(home, "sql", root=vault.root, input=".tables\n").stdout
    # The commands that only look work, .help lists them all (they failed: "not authorized", a traceback).
    dump = marchdb_cli(home, "sql", root=vault.root, input=".dump memory_index\n").stdout
    assert "CREATE TABLE memory_index" in dump and "INSERT INTO" in dump
    assert "number of tables" in marchdb_cli(home, "sql", root=vault.root, input=".dbinfo\n").stdout
    shown = marchdb_cli(home, "sql", root=vault.root, input=".help\n").output  # apsw writes help to stderr
    assert ".dump ?TABLE?" in shown and ".backup" in shown and "not available in a read-only" in shown
    assert (home / "index.sqlite").read_bytes() == index_bytes
    # --write still writes, on purpose.
    assert marchdb_cli(home, "sql", "DELETE FROM open_log", "--write", root=vault.root).exit_code == 0


# ---------------------------------------------------------------- 14. the MCP server


class McpProcess:
    """``marchdb mcp`` over real pipes, line by line (BM25 only, so it starts fast)."""

    def __init__(self, home: Path, root: Path):
        env = {**os.environ, "MARCH_HOME": str(home), "MARCH_MEMORY_ROOT": str(root), "MARCH_EMBED_MODEL": NO_MODEL}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "marchdb", "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.answers: dict[object, dict] = {}
        self.lines: list[dict] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            0,
        )
        assert "result" in self.wait(0)
        self.send_line(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            msg = json.loads(raw)
            with self._cond:
                self.lines.append(msg)
                self.answers[msg.get("id")] = msg
                self._cond.notify_all()

    def send_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode("utf-8", "surrogatepass") + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict, mid: object) -> None:
        self.send_line(json.dumps({"jsonrpc": "2.0", "id": mid, "method": method, "params": params}))

    def call(self, name: str, args: dict, mid: object) -> dict:
        self.request("tools/call", {"name": name, "arguments": args}, mid)
        return self.wait(mid)

    def wait(self, mid: object, timeout: float = 60.0) -> dict:
        with self._cond:
            assert self._cond.wait_for(lambda: mid in self.answers, timeout), f"no answer to {mid!r}"
            return self.answers[mid]

    def close(self) -> tuple[float, int, str]:
        """Close stdin like a client does: (seconds to exit, exit code, stderr)."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        started = time.monotonic()
        self.proc.stdin.close()
        code = self.proc.wait(30)
        return time.monotonic() - started, code, self.proc.stderr.read().decode()


def tool_data(answer: dict) -> dict:
    assert "result" in answer and not answer["result"].get("isError"), answer
    return json.loads(answer["result"]["content"][0]["text"])


def test_14_every_mcp_request_gets_an_answer(tmp_path, vault):
    vault.memory("a.md", "mem_a", body="hello world")
    mcp = McpProcess(tmp_path / "home", vault.root)
    try:
        mcp.send_line(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "memory_search", "arguments": {"query": "hello \ud83d"}},
                }
            )
        )
        answer = mcp.wait(1)
        assert answer["error"]["code"] == -32602 and "surrogate" in answer["error"]["message"]
        mcp.send_line('{"jsonrpc": "2.0", "id": 2, "method": ')
        mcp.send_line("[1, 2, 3]")
        mcp.send_line('{"jsonrpc": "2.0", "id": 3, "params": {}}')
        assert mcp.wait(3)["error"]["code"] == -32600
        assert [m["error"]["code"] for m in mcp.lines if m.get("id") is None] == [-32700, -32600]
        # A request whose id cannot be used is answered with id null (JSON-RPC 2.0 §5), and a
        # notification (no id) or a response is not answered.
        for bad_id in ("true", '{"a": 1}', "[1]", "1.5", "null"):
            mcp.send_line('{"jsonrpc": "2.0", "id": ' + bad_id + ', "method": "ping"}')
        mcp.send_line('{"jsonrpc": "2.0", "method": "no/such/notification", "params": 7}')
        mcp.send_line('{"jsonrpc": "2.0", "id": 99, "result": {}}')
        mcp.send_line('{"hello": "world"}')  # no method, no result: not JSON-RPC at all (it got no answer)
        mcp.call("memory_open", {"id": "mem_a"}, 6)
        nulls = [m["error"]["code"] for m in mcp.lines if m.get("id") is None]
        assert nulls == [-32700, -32600] + [-32600] * 6, nulls
        mcp.send_line("5")  # not an object, and not a batch either (it was told "not a batch")
        mcp.call("memory_open", {"id": "mem_a"}, 7)
        said = [m["error"]["message"] for m in mcp.lines if m.get("id") is None]
        assert said[1].endswith("not a batch") and said[-1].endswith("not a number"), said
        # A line past the bound is answered, not read whole (a 400 MB line held 3.5 GB).
        from marchdb.mcp.wire import MAX_LINE_BYTES

        big = {"name": "memory_search", "arguments": {"query": "x" * (MAX_LINE_BYTES + 10)}}
        mcp.send_line(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": big}))
        mcp.call("memory_open", {"id": "mem_a"}, 8)
        assert any("limited to" in m.get("error", {}).get("message", "") for m in mcp.lines if m.get("id") is None)
        # ...and the session goes on.
        assert tool_data(mcp.call("memory_open", {"id": "mem_a"}, 4))["status"] == "ok"
        assert tool_data(mcp.call("memory_search", {"query": "hello"}, 5))["results"][0]["id"] == "mem_a"
    finally:
        seconds, code, stderr = mcp.close()
    assert code == 0 and seconds < 1.5, (seconds, code, stderr)  # the SDK client sends SIGTERM after 2 s
    assert "falling back" not in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_14_a_signal_ends_the_mcp_server(tmp_path, vault, signum):
    mcp = McpProcess(tmp_path / "home", vault.root)
    tool_data(mcp.call("memory_recall", {"text": "anything"}, 1))
    mcp.proc.send_signal(signum)
    assert mcp.proc.wait(10) == 128 + signum
    mcp.proc.communicate(timeout=10)  # closes the pipes


def test_14_mcp_says_when_the_memory_root_is_missing_and_opens_new_files_at_once(tmp_path, vault):
    vault.memory("a.md", "mem_a", body="apples and pears")
    mcp = McpProcess(tmp_path / "home", vault.root)
    try:
        assert tool_data(mcp.call("memory_open", {"id": "mem_a"}, 1))["status"] == "ok"
        # A file lands; search sees it at once, and so must open (the watcher is still debouncing).
        vault.memory("fresh.md", "mem_fresh", body="kiwi")
        assert tool_data(mcp.call("memory_search", {"query": "kiwi"}, 2))["results"][0]["id"] == "mem_fresh"
        assert tool_data(mcp.call("memory_open", {"id": "mem_fresh"}, 3))["status"] == "ok"
        vault.root.rename(vault.root.with_name("vault.unmounted"))
        for mid, (name, args) in enumerate(
            [("memory_recall", {"text": "apples"}), ("memory_context", {"text": "apples"})], start=10
        ):
            data = tool_data(mcp.call(name, args, mid))
            assert any("memory root" in n and "missing" in n for n in data.get("notices", [])), data
    finally:
        mcp.close()


def test_14_an_mcp_argument_a_tool_does_not_take_is_refused_not_ignored(tmp_path, vault):
    # The SDK dropped arguments outside a tool's schema: a misspelt run_id ran
    # the recall without it (hints again in the same run), as the CLI, the
    # engine and the Python API refuse.
    vault.memory("a.md", "mem_a", name="Apples", description="apples and pears", body="apples")
    mcp = McpProcess(tmp_path / "home", vault.root)
    try:
        for mid, (name, args, bad) in enumerate(
            [
                ("memory_recall", {"text": "apples", "run_idd": "r1"}, "run_idd"),
                ("memory_search", {"query": "apples", "limt": 3}, "limt"),
                ("memory_recall", {"text": "apples", "cwd": "/elsewhere"}, "cwd"),  # the server's own to set
            ],
            start=1,
        ):
            answer = mcp.call(name, args, mid)
            assert answer["result"]["isError"], answer
            said = answer["result"]["content"][0]["text"]
            assert said.startswith(f"{name} takes no argument '{bad}'; it takes "), said
            assert "cwd" not in said.partition("; it takes ")[2], said
        assert tool_data(mcp.call("memory_recall", {"text": "apples", "run_id": "r1"}, 9))["hints"]
    finally:
        mcp.close()


def test_14_requests_sent_before_stdin_closes_are_answered(tmp_path, vault):
    # `printf '...' | marchdb mcp`: the SDK cancelled the calls in flight at
    # the end of input, so a piped log or save was done without an answer, or
    # not done at all, and the server exited 0 either way.
    vault.memory("a.md", "mem_a", name="Apples", description="apples and pears", body="apples")
    mcp = McpProcess(tmp_path / "home", vault.root)
    mcp.request("tools/call", {"name": "memory_log", "arguments": {"title": "Piped", "text": "kiwi seen"}}, 1)
    mcp.request("tools/call", {"name": "memory_search", "arguments": {"query": "apples"}}, 2)
    seconds, code, stderr = mcp.close()
    assert code == 0 and "Traceback" not in stderr, stderr
    assert tool_data(mcp.wait(1, 5))["status"] == "created"  # the process is gone: all it wrote is read
    assert tool_data(mcp.wait(2, 5))["results"][0]["id"] == "mem_a"
    assert any("kiwi seen" in p.read_text() for p in vault.root.rglob("*daily-log.md"))


def test_14_a_request_before_the_handshake_or_with_odd_params_says_what_is_wrong(tmp_path, vault):
    # The SDK answered both with "Invalid request parameters" and nothing more:
    # a script that skipped `initialize` could not tell why every call failed.
    def line(mid, method, params=None):
        message = {"jsonrpc": "2.0", "method": method, **({"id": mid} if mid is not None else {})}
        return json.dumps({**message, **({"params": params} if params is not None else {})})

    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        line(1, "tools/call", {"name": "memory_open", "arguments": {"id": "mem_a"}}),
        line(2, "initialize", init),
        line(None, "notifications/initialized"),
        line(3, "tools/call", {"name": 5}),
        line(4, "tools/call", {"name": "memory_open", "arguments": [1, 2]}),
        line(5, "tools/call", {"name": "memory_open", "arguments": {"id": "mem_a"}}),
    ]
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(vault.root)}
    done = subprocess.run(
        [sys.executable, "-m", "marchdb", "mcp"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "MARCH_EMBED_MODEL": NO_MODEL},
    )
    answers = {m.get("id"): m for m in map(json.loads, done.stdout.splitlines())}
    said = {mid: answers[mid].get("error", {}).get("message", "") for mid in (1, 3, 4)}
    assert "initialize" in said[1] and "tools/call" in said[1], said
    assert said[3].startswith("Invalid params for tools/call: ") and "name" in said[3], said
    assert said[4].startswith("Invalid params for tools/call: ") and "arguments" in said[4], said
    assert all("\n" not in s for s in said.values())
    assert answers[5]["result"]["content"], answers[5]  # the session goes on


def test_14_a_client_that_closes_the_servers_stdout_is_told_in_words(tmp_path, vault):
    # `marchdb mcp | head -1`, a client that stopped reading: the answer's write
    # failed and the server said "ExceptionGroup: unhandled errors in a TaskGroup".
    vault.memory("a.md", "mem_a", name="Apples", description="apples and pears", body="apples")
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(vault.root)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "marchdb", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env, "MARCH_EMBED_MODEL": NO_MODEL},
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}).encode() + b"\n")
    proc.stdin.flush()
    assert b'"result"' in proc.stdout.readline()
    proc.stdout.close()  # no reader left
    call = {"name": "memory_search", "arguments": {"query": "apples"}}
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}).encode() + b"\n")
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode() + b"\n")
    proc.stdin.flush()
    time.sleep(1)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    code = proc.wait(30)
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert code == 1, (code, stderr)
    last = stderr.strip().splitlines()[-1]
    assert "closed" in last and "stdout" in last and "ExceptionGroup" not in stderr, stderr


# ---------------------------------------------------------------- fuzz: hostile frontmatters and names

FRONTMATTER_PIECES = [
    "id: {id}",
    "id: [{id}]",
    "id: 12345",
    "id: !!binary aGVsbG8=",
    "id: &a {id}\nname: *a",
    "name: " + "n" * 5000,
    "name: [1, 2, {a: b}]",
    "description: >\n  folded\n  text",
    "description: |\n  " + "\u202e\u200b\ufeff" * 20,
    "tags: " + "[" * 30 + "x" + "]" * 30,
    "tags: [" + ", ".join(f"t{i}" for i in range(300)) + "]",
    "tags: {a: 1}",
    "tags: '#one, #two'",
    "status: [active]",
    "created_at: 0001-01-01T00:00:00+14:00",
    "created_at: 9999-12-31T23:59:59-12:00",
    "updated_at: 2026-02-30",
    "big: " + "9" * 5000,
    "<<: {x: 1}",
    "x: !!python/object:os.system echo",
    "x: !!set {a, b}",
    "\t- tab",
    "key: 'unterminated",
    "key: \x00\x01\x7f",
    "? [complex, key]\n: value",
    "dup: 1\ndup: 2",
    "k: " + "&a [*a]",
]
MILD_PIECES = [
    "# a comment of mine",
    "aliases: [x, 'y z']",
    "flag: yes",
    "day: 2026-05-14",
    'quoted: "a: b # not a comment"',
    "emoji: 😀 ✓",
    "rtl: \u202eevil\u200b",
    "multi: |\n  line one\n  line two",
    "nested:\n  a: 1\n  b: [2, 3]",
    "status: active",
    "created_at: 2026-05-14T10:30:00.000Z",
]
BODY_PIECES = ["body", "", "---", "\r\n\r\n", "x" * 10_000, "日本語 " * 100, "# heading\n\n- item", "\x00binary"]
NAME_PIECES = [
    "plain",
    "-dash",
    "--flag",
    " space ",
    "new\nline",
    "tab\tname",
    "émoji😀",
    "..dots",
    "a" * 200,
    "UPPER.MD",
    "back\\slash",
    "q'uote\"",
    "%s%n",
    "$(touch PWNED)",
    "`id`",
    "*",
    "?",
    "[x]",
]


def _fuzz_files(rng: random.Random, count: int) -> list[tuple[bytes, bytes]]:
    """Memory files, most of them valid at heart: a real id, name,
    description and tags, plus layout quirks and (in some) hostile pieces."""
    out = []
    for i in range(count):
        name = rng.choice(NAME_PIECES).encode() + str(i).encode()
        if rng.random() < 0.1:
            name += bytes([rng.choice([0xE9, 0xFF, 0xC3, 0x80])])  # not UTF-8
        name += rng.choice([b".md", b".MD", b".md", b".md", b".markdown"])
        lines = [f"id: mem_fz{i}", f"name: Fuzz {i}", f"description: fuzzed memory {i}", "tags: [fuzz, t/x]"]
        lines += rng.sample(MILD_PIECES, rng.randint(0, 4))
        if rng.random() < 0.4:
            lines += [p.replace("{id}", f"mem_fz{i}") for p in rng.sample(FRONTMATTER_PIECES, rng.randint(1, 3))]
        rng.shuffle(lines)
        fence = rng.choice(["---", "---", "---  ", "-----"])
        text = (
            f"{fence}\n"
            + "\n".join(lines)
            + f"\n---\n{rng.choice(BODY_PIECES[:-1] if rng.random() < 0.95 else BODY_PIECES)}\n"
        )
        data = text.encode("utf-8", "surrogatepass")
        if rng.random() < 0.25:
            data = data.replace(b"\n", b"\r\n")
        if rng.random() < 0.15:
            data = b"\xef\xbb\xbf" + data
        if rng.random() < 0.05:
            data = data[: rng.randint(0, len(data))]
        out.append((name, data))
    return out


def test_fuzz_hostile_frontmatters_and_names_never_break_sync_or_save(tmp_path, vault, bm25_cfg):
    rng = random.Random(11)
    outside = tmp_path / "outside"
    _outside_memory(outside, "mem_outside")
    root = os.fsencode(vault.root)
    os.symlink(outside, root + b"/linked-folder")
    os.symlink(outside / "secret.md", root + b"/linked.md")
    os.mkfifo(root + b"/pipe.md")
    os.mkdir(root + b"/folder.md")
    good = {f"mem_good{i}" for i in range(10)}
    for i, mem_id in enumerate(sorted(good)):
        vault.memory(f"good/{i}.md", mem_id, body=f"good body {i}")
    fuzz = _fuzz_files(rng, 150)
    for name, data in fuzz:
        sub = os.path.join(root, rng.choice([b"", b"2026", b"2026/05", "ünï".encode()]))
        os.makedirs(sub, exist_ok=True)
        path = os.path.join(sub, name.replace(b"/", b"_"))
        try:
            with open(path, "wb") as fh:
                fh.write(data)
        except OSError:  # a name the file system refuses (too long...)
            continue
    outside_before = tree(outside)
    home_before = None
    with Store(bm25_cfg) as store:
        for _ in range(2):
            store.sync(embed=False)  # no exception, twice (the second one is warm)
        assert good <= ids(store)
        assert "mem_outside" not in ids(store)
        json.dumps(store.doctor(), ensure_ascii=False).encode("utf-8")
        json.dumps(store.search("body"), ensure_ascii=False).encode("utf-8")
        home_before = tree(bm25_cfg.home / "memory")
        fuzzed = sorted(i for i in ids(store) if i.startswith("mem_fz"))
        assert len(fuzzed) > 40  # most files are memories at heart: the update path is exercised
        outcomes: dict[str, set[str]] = {}
        for mem_id in fuzzed:
            for change in (
                {"description": "fuzzed update"},
                {"tags": ["fz"], "body": "new body\nline two"},
                {"status": "deprecated"},
            ):
                try:
                    outcomes.setdefault(store.save(id=mem_id, embed=False, **change)["status"], set()).add(mem_id)
                except MarchError:
                    pass  # a refusal with a message is fine; anything else fails the test
            assert store.open(mem_id, log=False)["status"] == "ok"
        assert len(outcomes.get("updated", ())) > 40, outcomes.keys()
        for i in range(20):
            fields = {
                "name": rng.choice(NAME_PIECES) + str(i),
                "description": rng.choice(["d", "\u202e", "x" * 999]),
                "tags": [rng.choice(["a", "b/c", "日本", "#x"])],
                "body": rng.choice(BODY_PIECES[:-1]) or "b",
            }
            try:
                store.save(embed=False, force=True, **fields)
            except MarchError:
                pass
        store.sync(embed=False)
        assert good <= ids(store) and set(fuzzed) <= ids(store)  # every update still reads back
        assert store.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert tree(outside) == outside_before
    assert tree(bm25_cfg.home / "memory") == home_before
    assert not list(Path("/").glob("PWNED*")) and not (tmp_path / "PWNED").exists()
    for path in vault.root.rglob("*"):
        assert not path.name.startswith(files.TEMP_PREFIX)
