"""The store end to end with the real default model: sync embeds, recall means something."""

from __future__ import annotations

import os
import subprocess
import sys

from marchdb.index import db


def test_sync_embeds_and_moves_never_reembed(mixed_vault, model_store):
    report = model_store.sync()
    assert report.embedded == 10  # five metadata texts + five one-chunk bodies
    assert report.model and report.model == model_store.embedder().fingerprint
    summary = model_store.status()
    assert summary["memories_without_vector"] == 0 and summary["chunks_without_vector"] == 0
    assert summary["dim"] == 384
    again = model_store.sync()
    assert again.embedded == 0
    src = mixed_vault.root / "2026/05/week2/mem_dog.md"
    os.rename(src, mixed_vault.root / "dog-moved.md")
    moved = model_store.sync()
    assert (moved.moved, moved.embedded) == (1, 0)


def test_editing_an_embedded_memory_replaces_its_vectors(mixed_vault, model_store):
    model_store.sync()
    path = mixed_vault.root / "2026/05/week2/mem_dog.md"
    path.write_text(
        path.read_text(encoding="utf-8")
        .replace(
            "Biscuit takes half a carprofen tablet with breakfast for joint pain",
            "Biscuit now gets fish oil for his joints",
        )
        .replace("Half a tablet with breakfast.", "Fish oil capsule with dinner."),
        encoding="utf-8",
    )
    report = model_store.sync()
    assert (report.updated, report.embedded) == (1, 2)  # new metadata + new body; the old ones are dropped
    con = model_store.con
    assert db.rows(con, "SELECT count(*) AS n FROM vectors")[0]["n"] == 10
    assert (
        db.rows(con, "SELECT count(*) AS n FROM vec_meta")[0]["n"]
        + db.rows(con, "SELECT count(*) AS n FROM vec_chunk")[0]["n"]
        == 10
    )
    assert model_store.recall("what does the dog take for his joints?").hints[0].id == "mem_dog"


def test_recall_related_unrelated_and_chinese(mixed_vault, model_store):
    model_store.sync()
    hit = model_store.recall("why does every request miss the prompt cache?")
    assert hit.mode == "hybrid"
    assert hit.hints and hit.hints[0].id == "mem_cache"
    zh = model_store.recall("数据库密码多久换一次？")
    assert zh.hints and zh.hints[0].id == "mem_db"
    for nonsense in ("asdf qwer zxcv", "ok thanks", "哈哈哈哈", "the the the", "is it on?", "tell me a joke"):
        assert model_store.recall(nonsense).hints == [], nonsense


def test_a_one_memory_vault_still_hints_the_obvious(vault, model_store):
    # In a tiny vault every word is "common"; the README example must work.
    saved = model_store.save(
        name="Deploy day",
        description="We deploy on Tuesdays, never on Fridays",
        tags=["process"],
        body="Friday deploys broke the weekend twice.",
    )
    for question in ("can we ship this on friday?", "when do we deploy?"):
        hints = model_store.recall(question).hints
        assert hints and hints[0].id == saved["id"], question
    assert model_store.recall("what does the dog eat?").hints == []


def test_calibration_is_stored_per_model(mixed_vault, model_store):
    model_store.sync()
    from marchdb.index import calibrate

    calib = calibrate.load(model_store.con, model_store.embedder().fingerprint)
    assert calib and calib["rel_lo"] < calib["rel_hi"] and len(calib["probe_center"]) == 384
    assert calibrate.load(model_store.con, "another-model") is None


def test_model_change_reembeds_everything(mixed_vault, model_store):
    model_store.sync()
    with model_store.con:
        db.set_meta(model_store.con, "model_fingerprint", "some-other-model")
    report = model_store.sync()
    assert report.embedded == 10


def test_no_model_degrades_to_bm25_visibly(mixed_vault, tmp_path):
    from marchdb.config import load_config
    from marchdb.store import Store

    cfg = load_config(home=tmp_path / "h2", root=mixed_vault.root, model=str(tmp_path / "nope.gguf"), env={})
    with Store(cfg) as store:
        report = store.sync()
        assert report.added == 5 and report.embedded == 0
        assert any("no vectors" in w for w in report.warnings)
        status = store.status()
        assert status["vector_error"] and "nope.gguf" in status["vector_error"]
        assert status["memories_without_vector"] == 5
        assert any(p["kind"] == "missing_vector" for p in store.doctor()["problems"])
        result = store.recall("Context cache ordering")
        assert result.mode == "bm25" and result.warning
        assert [h.id for h in result.hints][:1] == ["mem_cache"]
        # Said once, in the answer's warning, not again as a notice beside it.
        assert not [n for n in store.take_notices() if "nope.gguf" in n]
        context = store.context("Context cache ordering")
        assert "nope.gguf" in context["warning"] and context["hints"][0]["id"] == "mem_cache"
    with Store(cfg) as store:
        # The API keeps both (the report's warning, the notice); the CLI says it once (test_cli).
        assert "nope.gguf" in store.sync().warnings[0]
        assert [n for n in store.take_notices() if "nope.gguf" in n]


def test_corrupt_model_file_degrades(mixed_vault, tmp_path):
    from marchdb.config import load_config
    from marchdb.store import Store

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(4096))
    cfg = load_config(home=tmp_path / "h3", root=mixed_vault.root, model=str(bad), env={})
    with Store(cfg) as store:
        report = store.sync()
        assert report.added == 5 and report.warnings


def test_a_huge_message_is_recalled_on_its_start(mixed_vault, model_store):
    model_store.sync()
    # ~850 KB (an agent pasting a log): without the cap every window of it
    # was embedded, minutes per recall; now the start decides, in a blink.
    from marchdb.index.recall import MAX_RECALL_CHARS

    message = "Why does every request miss the prompt cache? " + "filler words about nothing. " * 30_000
    whole = model_store.recall(message, explain=True)
    start = model_store.recall(message[:MAX_RECALL_CHARS], explain=True)
    assert whole.candidates and [(c.id, round(c.score, 4)) for c in whole.candidates] == [
        (c.id, round(c.score, 4)) for c in start.candidates
    ]


def test_a_rebuild_by_another_process_is_followed(mixed_vault, model_cfg):
    from marchdb.store import Store

    with Store(model_cfg, keep_vectors=True) as server, Store(model_cfg) as cli:
        server.sync()
        assert server.recall("prompt cache misses").hints[0].id == "mem_cache"
        assert cli.recall("prompt cache misses").mode == "hybrid"
        model, cli_model = server.loaded_embedder(), cli.loaded_embedder()
        (mixed_vault.root / "2026/05/week2/mem_cache.md").unlink()
        cli.rebuild()  # deletes the file and builds a new one
        hints = server.recall("prompt cache misses").hints
        assert all(h.id != "mem_cache" for h in hints)
        assert server.status()["memories"] == 4
        # Following the new file, or making it, reopens the index, never the model.
        assert server.loaded_embedder() is model and model is not None
        assert cli.loaded_embedder() is cli_model and cli_model is not None


def test_a_model_error_does_not_stick_after_a_clean_sync(mixed_vault, model_store, tmp_path):
    from marchdb.config import load_config
    from marchdb.store import Store

    model_store.sync()
    bad = load_config(home=model_store.cfg.home, root=mixed_vault.root, model=str(tmp_path / "nope.gguf"), env={})
    with Store(bad) as broken:
        broken.sync()
        assert "nope.gguf" in (broken.status()["vector_error"] or "")
    model_store.sync()  # the working model again, nothing left to embed
    assert model_store.status()["vector_error"] is None
    assert model_store.doctor()["vector_error"] is None


def test_status_counts_a_file_added_since_the_last_scan(mixed_vault, store):
    store.sync(embed=False)
    assert store.status()["memories"] == 5
    # Within the dirty check's 5 seconds of that scan too: status looks (a stat walk).
    mixed_vault.memory("new.md", "mem_new", name="New one")
    status = store.status()
    assert status["memories"] == 6 and status["files"] == 6
    assert store._embedder is None  # status never loads a model


FIFTEEN = [
    ("Standup time", "The daily standup is at 9:30 in the small meeting room", "process"),
    ("Coffee machine", "Descale the office coffee machine every second Monday", "office"),
    ("Dentist", "Dental cleaning booked for June 9 at 10:30", "health"),
    ("Dog food", "Biscuit eats grain-free kibble, two cups a day", "pets"),
    ("VPN setup", "Use WireGuard for the office VPN; the config lives in the vault", "ops"),
    ("Tax papers", "Keep the tax receipts in the blue folder until April", "finance"),
    ("Code review style", "Short review comments, one issue each, with a concrete fix", "review"),
    ("Backup disk", "The nightly backup fails when the disk is over 90 percent full", "ops"),
    ("Logo colours", "The logo uses deep teal and warm sand", "design"),
    ("Flaky tests", "Tests sharing a temporary folder fail at random under parallel runs", "ci"),
    ("Sourdough", "Feed the starter equal weights of flour and water twice a day", "baking"),
    ("Running plan", "Three easy runs and one long run a week before the half marathon", "fitness"),
    ("API dates", "API timestamps are ISO 8601 in UTC with a trailing Z", "api"),
]


def test_a_deprecated_memory_does_not_hide_the_friday_release(vault, model_store):
    """Issue 13: in a vault of 15 memories, "can we ship the release on
    friday?" scored 0.395 against the memory about Friday releases (no hint):
    a deprecated memory holding "friday" made the word look common."""
    for i, (name, description, tag) in enumerate(FIFTEEN):
        vault.memory(f"m{i}.md", f"mem_{i}", name=name, description=description, tags=[tag], body=description + ".")
    vault.memory(
        "release.md",
        "mem_release",
        name="Release day",
        description="Releases go out on Tuesdays; never ship a release on a Friday",
        tags=["process", "release"],
        body="A Friday release broke the weekend twice. Tuesday releases only.",
    )
    vault.memory(
        "old.md",
        "mem_old",
        name="Friday lunch",
        description="Team lunch every Friday at noon",
        tags=["office"],
        body="Friday lunch, Friday pizza.",
        status="deprecated",
    )
    model_store.sync()
    hints = model_store.recall("can we ship the release on friday?").hints
    assert hints and hints[0].id == "mem_release"
    assert "mem_old" not in {h.id for h in hints}


def test_each_notice_is_told_once(store):
    store.notices += ["index rebuilt", "the model is missing", "index rebuilt"]
    assert store.take_notices() == ["index rebuilt", "the model is missing"]
    assert store.take_notices() == []  # told, then gone


def test_following_a_replaced_index_writes_nothing_into_the_old_file(mixed_vault, cfg):
    # A scan that changed nothing keeps its time in memory and leaves it in
    # the index on close; the close that follows a rebuild by another
    # process must not leave it in the deleted file.
    import time

    from marchdb.store import Store

    with Store(cfg) as server, Store(cfg) as other:
        server.sync(embed=False)
        with server.con:
            db.set_meta(server.con, "last_scan_epoch", f"{time.time() - 30:.3f}")
        server.sync(embed=False)  # nothing changed: the scan's time stays in memory
        olds = []
        for suffix in ("", "-wal"):
            old = cfg.index_path.with_name(f"old{suffix}")
            os.link(f"{cfg.index_path}{suffix}", old)  # the deleted files stay reachable here
            olds.append(old)
        before = [(p.stat().st_size, p.stat().st_mtime_ns) for p in olds]
        other.rebuild(embed=False)
        assert server.follow_index()
        assert [(p.stat().st_size, p.stat().st_mtime_ns) for p in olds] == before


def test_a_sync_with_nothing_to_embed_never_loads_the_model(model_store, vault, default_model_path):
    # A warm `marchdb sync` of unchanged files loaded the model (1.1-1.4 s at
    # 3,000 files) only to learn its fingerprint: it is read off the file.
    vault.memory("a.md", "mem_a", body="Some text to embed.")
    assert model_store.sync().embedded > 0
    model_store.close()
    code = (
        "import sys; from marchdb import Store; from marchdb.config import load_config;"
        f"s = Store(load_config(home={str(model_store.cfg.home)!r}, root={str(vault.root)!r}, "
        f"model={str(default_model_path)!r}, env={{}}));"
        "r = s.sync(); print(r.embedded, r.model is not None, 'llama_cpp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["0", "True", "False"], out.stderr
    vault.memory("b.md", "mem_b", body="A new memory: now the model is loaded and it is embedded.")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[0] != "0" and out.stdout.split()[2] == "True", out.stderr


def test_a_plain_copy_of_the_index_file_holds_what_a_long_lived_store_saved(vault, store, tmp_path):
    # While the engine ran, a copy of index.sqlite held 0 memories: all of it sat in the WAL.
    import shutil

    import apsw

    for i in range(3):
        store.save(name=f"Memory {i}", description="kept in the file", body=f"body {i}", tags=["t"], embed=False)
    vault.memory("hand.md", "mem_hand")
    store.sync(embed=False)
    reader = db.connect(store.cfg.index_path)  # another long-lived connection, as the engine's watcher has
    reader.execute("SELECT count(*) FROM memory_index").fetchall()
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(store.cfg.index_path, copy)  # the file alone, without its -wal
    con = apsw.Connection(str(copy))
    try:
        assert con.execute("SELECT count(*) FROM memory_index").fetchone()[0] == 4
    finally:
        con.close()
        reader.close()


def test_status_says_how_much_sits_in_the_wal_and_an_idle_checkpoint_empties_it(vault, store):
    vault.memory("a.md", "mem_a")
    store.sync(embed=False)
    reader = db.connect(store.cfg.index_path)
    try:
        # A reader in the middle of a read holds back what was written after its snapshot.
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM memory_index").fetchall()
        store.save(name="Later", description="after the reader began", body="b", tags=["t"], embed=False)
        status = store.status()
        assert status["wal_bytes"] > 0 and status["wal_pages"] > 0
        assert 0 < status["wal_pages_pending"] <= status["wal_pages"]
        assert store.idle_checkpoint() is False  # a reader is in the WAL: nothing waits for it
        reader.execute("COMMIT")
        assert store.idle_checkpoint() is True
        status = store.status()
        assert (status["wal_bytes"], status["wal_pages"], status["wal_pages_pending"]) == (0, 0, 0)
    finally:
        reader.close()


def test_a_recall_in_an_empty_vault_says_there_is_nothing_yet(vault, store):
    # A new user's first `marchdb recall` said only "no hint at threshold 0.50".
    result = store.recall("how do we deploy?")
    assert not result.hints and "no memories in" in (result.warning or "")
    vault.memory("a.md", "mem_a")
    store.sync(embed=False)
    assert "no memories" not in (store.recall("how do we deploy?").warning or "")


def test_a_model_usable_again_embeds_on_the_next_recall_even_right_after_a_sync(mixed_vault, model_cfg):
    # The index was built by a process whose model could not run (a native
    # crash, a missing file); a recall seconds later, whose model runs, must
    # not stay on keywords until the dirty check's next scan.
    from marchdb.store import Store

    with Store(model_cfg, use_model=False) as keywords_only:
        keywords_only.sync()
    with Store(model_cfg) as store:
        result = store.recall("what does the dog take for its joints?")
        assert result.mode == "hybrid", result.warning
        assert result.hints and result.hints[0].id == "mem_dog"
