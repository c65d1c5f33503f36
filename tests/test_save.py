"""memory_save on real files, a real index and real second processes (no model)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TinyEmbedder

from marchdb.errors import Conflict, InvalidInput, NotFound
from marchdb.index import db, vectors
from marchdb.index.recall import RELATED_BELOW
from marchdb.ops import SAVE
from marchdb.save import update_file
from marchdb.twins import find_similar
from marchdb.vault import notes
from marchdb.vault.changes import MAX_BODY_BYTES, Changes, validate_changes
from marchdb.vault.files import TEMP_PREFIX, VAULT_LOCK_NAME

NEW = dict(name="Context cache ordering", description="volatile layers go last", body="Body text.", tags=["cache"])


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones too) → its bytes, but for
    marchdb's own vault lock (empty, never written: files.vault_lock)."""
    out = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if folder == str(root) and name == VAULT_LOCK_NAME:
                continue
            path = Path(folder) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def no_temp_files(root: Path) -> bool:
    return not any(TEMP_PREFIX in name for name in snapshot(root))


def indexed(store) -> dict[str, dict]:
    return {r["id"]: r for r in db.rows(store.con, "SELECT * FROM memory_index")}


def create(store, **kw):
    args = {**NEW, **kw}
    return store.save(embed=False, **args)


# ---------------------------------------------------------------- create


def test_create_writes_bucket_file_with_frontmatter_and_indexes_it(vault, store):
    res = create(store, tags=["Cache", "project/March CLI", "上下文"])
    assert res["status"] == "created" and res["warnings"] == []
    path = Path(res["path"])
    assert path.is_absolute() and path.is_file()
    assert re.fullmatch(r"mem_[0-9a-z]{12}_context_cache_ordering", res["id"])
    note = notes.parse_note(path.read_bytes())
    assert (note.id, note.name, note.description, note.status) == (
        res["id"],
        "Context cache ordering",
        "volatile layers go last",
        "active",
    )
    assert note.tags == ["cache", "project/march-cli", "上下文"]
    assert note.body.strip() == "Body text."
    assert note.created_at == note.updated_at and note.created_at.endswith("Z")
    created = notes.parse_time(note.created_at).astimezone()
    expected = notes.bucket_path(created, "context-cache-ordering")
    assert path.relative_to(vault.root).as_posix() == str(expected)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\nid: ")
    # The index knows it before save returns.
    row = indexed(store)[res["id"]]
    assert row["path"] == str(expected) and json.loads(row["tags_json"]) == note.tags
    assert no_temp_files(vault.root)


def test_create_with_a_chosen_id_and_chinese_name(vault, store):
    res = create(store, id="mem_custom_1", name="写作风格 指南")
    assert res["status"] == "created" and res["id"] == "mem_custom_1"
    assert Path(res["path"]).name.endswith("-写作风格-指南.md")
    assert indexed(store)["mem_custom_1"]["name"] == "写作风格 指南"


def test_slug_collision_gets_suffix_and_never_overwrites(vault, store):
    first = create(store)
    # Someone else's file already sits at the name the next memory would get.
    second = create(store, force=True)
    third = create(store, force=True)
    names = [Path(r["path"]).name for r in (first, second, third)]
    stem = names[0][: -len(".md")]
    assert names == [f"{stem}.md", f"{stem}-2.md", f"{stem}-3.md"]
    assert len({r["id"] for r in (first, second, third)}) == 3
    assert set(indexed(store)) == {r["id"] for r in (first, second, third)}


def test_existing_plain_file_at_the_target_name_is_kept(vault, store):
    when = dt.datetime.now().astimezone()
    rel = notes.bucket_path(when, "context-cache-ordering")
    user_file = vault.write(str(rel), "my own note, not a memory\n")
    res = create(store)
    assert res["status"] == "created"
    assert user_file.read_text() == "my own note, not a memory\n"
    assert Path(res["path"]).name.endswith("-context-cache-ordering-2.md")


# ---------------------------------------------------------------- update


def test_update_keeps_omitted_fields_replaces_tags_keeps_created_and_extra(vault, store):
    path = vault.write(
        "2026/05/week2/2026-05-14-mine.md",
        """\
        ---
        id: mem_mine
        name: My memory
        description: short text
        tags:
          - old
          - other
        status: active
        created_at: 2026-05-14T10:30:00.000Z
        updated_at: 2026-05-14T10:30:00.000Z
        aliases:
          - mm
        source: obsidian
        ---

        Original body.
        """,
    )
    store.sync(embed=False)
    res = store.save(id="mem_mine", tags=["new", "Another Tag"], name="Renamed", embed=False)
    assert res["status"] == "updated" and res["path"] == str(path)
    assert "name" in res["message"] and "tags" in res["message"]
    note = notes.parse_note(path.read_bytes())
    assert note.name == "Renamed" and note.description == "short text"
    assert note.tags == ["new", "another-tag"]
    assert note.body.strip() == "Original body."
    assert note.created_at == "2026-05-14T10:30:00.000Z"
    assert note.updated_at != note.created_at
    assert note.extra == {"aliases": ["mm"], "source": "obsidian"}
    # The file did not move, even though the name changed.
    assert sorted(snapshot(vault.root)) == ["2026/05/week2/2026-05-14-mine.md"]
    row = indexed(store)["mem_mine"]
    assert row["name"] == "Renamed" and json.loads(row["tags_json"]) == ["new", "another-tag"]


def test_update_without_tags_keeps_the_users_tag_spelling(vault, store):
    path = vault.write(
        "m.md",
        "---\nid: mem_m\nname: M\ndescription: d\ntags:\n  - Cache\n  - '#Obsidian'\nstatus: active\n---\n\nBody.\n",
    )
    store.sync(embed=False)
    assert store.save(id="mem_m", body="New body.", embed=False)["status"] == "updated"
    text = path.read_text(encoding="utf-8")
    assert "- Cache" in text and "'#Obsidian'" in text and "New body." in text


def test_update_status_deprecated_and_file_mode_kept(vault, store):
    res = create(store)
    path = Path(res["path"])
    os.chmod(path, 0o640)
    out = store.save(id=res["id"], status="Deprecated", embed=False)
    assert out["status"] == "updated"
    assert notes.parse_note(path.read_bytes()).status == "deprecated"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert indexed(store)[res["id"]]["status"] == "deprecated"


def test_a_body_with_lone_carriage_returns_is_saved_with_newlines_and_stays_editable(vault, store):
    # A progress bar's output given to memory_save: its lone CRs made a file that could not be
    # edited in place, so a later status change or archive was refused.
    res = store.save(
        name="Backup run",
        description="Nightly backup output",
        tags=["ops"],
        body="10%\r50%\r100% done\r\nok",
        embed=False,
    )
    path = Path(res["path"])
    assert b"\r" not in path.read_bytes()
    assert notes.parse_note(path.read_bytes()).body.strip() == "10%\n50%\n100% done\nok"
    assert store.save(id=res["id"], status="deprecated", embed=False)["status"] == "updated"


def test_same_values_are_unchanged_and_nothing_is_written(vault, store):
    res = create(store)
    path = Path(res["path"])
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    again = store.save(
        id=res["id"], name="Context  cache ordering ", tags=["CACHE"], body="Body text.\n\n", embed=False
    )
    assert again["status"] == "unchanged" and again["id"] == res["id"]
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    assert store.save(id=res["id"], embed=False)["status"] == "unchanged"


def test_update_follows_a_file_the_user_moved(vault, store):
    res = create(store)
    old = Path(res["path"])
    new = vault.root / "elsewhere" / "moved.md"
    new.parent.mkdir()
    os.rename(old, new)
    out = store.save(id=res["id"], description="after the move", embed=False)
    assert out["status"] == "updated" and out["path"] == str(new)
    assert notes.parse_note(new.read_bytes()).description == "after the move"
    assert not old.exists()


def test_user_edit_racing_a_save_is_kept(vault, store):
    """The update was computed from content the user has since changed: the
    re-check before the replace re-applies it onto the user's version."""
    res = create(store)
    path = Path(res["path"])
    stale = path.read_bytes()
    # The user edits the body and adds a field in their editor meanwhile.
    edited = stale.decode().replace("Body text.", "Body text.\n\nA line the user just typed.")
    edited = edited.replace("status: active", "status: active\nreviewed: true")
    path.write_text(edited, encoding="utf-8")
    state, note, changed = update_file(
        path, res["id"], validate_changes(description="new description"), stale, notes.utc_now_iso()
    )
    assert state == "updated" and changed == ["description"]
    final = notes.parse_note(path.read_bytes())
    assert final.description == "new description"
    assert "A line the user just typed." in final.body
    assert final.extra == {"reviewed": True}
    assert no_temp_files(vault.root)


EDITOR = """
import os, sys, time
path, stop = sys.argv[1], sys.argv[2]
n = 0
while not os.path.exists(stop):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    tmp = path + ".editor~"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text.rstrip("\\n") + f"\\nedit {n}\\n")
    os.replace(tmp, path)
    print(f"edit {n}", flush=True)
    n += 1
    time.sleep(0.004)
"""


def test_an_editor_saving_again_and_again_loses_no_line_to_saves(vault, store):
    # An edit that landed between the save's last check and its replace was lost to os.replace;
    # the replace now finds it (the names are swapped, the file taken away is checked) and the
    # save is re-applied onto it. The editor is a process of its own, as Obsidian is.
    from marchdb.errors import Retry

    res = create(store)
    path = Path(res["path"])
    stop = vault.root.parent / "stop-editing"
    editor = subprocess.Popen([sys.executable, "-c", EDITOR, str(path), str(stop)], stdout=subprocess.PIPE, text=True)
    first = editor.stdout.readline() if editor.stdout else ""
    saved = 0
    try:
        for i in range(60):
            try:
                update_file(
                    path, res["id"], validate_changes(description=f"take {i}"), path.read_bytes(), notes.utc_now_iso()
                )
                saved += 1
            except Retry:
                pass  # the editor kept writing through every re-check: nothing written, and said so
            time.sleep(0.003)
    finally:
        stop.touch()
        out, _ = editor.communicate(timeout=30)
    written = [first.strip(), *out.strip().splitlines()]
    assert saved >= 10 and len(written) >= 10, (saved, len(written))
    body = path.read_text(encoding="utf-8")
    assert [line for line in written if line not in body] == []


def test_stale_base_already_holding_the_values_is_still_checked(vault, store):
    res = create(store)
    path = Path(res["path"])
    stale = path.read_bytes()
    path.write_text(stale.decode().replace("volatile layers go last", "user changed it"), encoding="utf-8")
    # Judged on the stale bytes this would be "unchanged"; the newest file differs.
    state, _note, changed = update_file(
        path, res["id"], validate_changes(description="volatile layers go last"), stale, notes.utc_now_iso()
    )
    assert state == "updated" and changed == ["description"]


def test_tags_are_counted_once_deduplicated(vault, store):
    # "t" sixty times is one tag: it was refused as "60 tags; a memory has at most 50".
    done = store.save(name="Dup tags", description="d", tags=["t"] * 60 + ["T "], body="b", embed=False)
    assert done["status"] == "created"
    with pytest.raises(InvalidInput, match="51 tags; a memory has at most 50"):
        store.save(name="Many", description="d", tags=[f"t{i}" for i in range(51)], body="b", embed=False)


def test_duplicate_ids_are_a_conflict(vault, store):
    vault.memory("a.md", "mem_twin", body="one")
    vault.memory("b.md", "mem_twin", body="two")
    before = snapshot(vault.root)
    with pytest.raises(Conflict) as err:
        store.save(id="mem_twin", description="x", embed=False)
    assert sorted(Path(p).name for p in err.value.paths) == ["a.md", "b.md"]
    assert "new id" in str(err.value)
    assert snapshot(vault.root) == before


def test_an_id_held_by_a_file_that_cannot_be_read_gets_no_twin(vault, store):
    vault.write("broken.md", "---\nid: 'mem_pears'\nname: [broken\ndescription: d\ntags: [x]\n---\npears\n")
    store.sync(embed=False)
    before = snapshot(vault.root)
    with pytest.raises(Conflict, match=r"id mem_pears is held by a file .*broken\.md: frontmatter is not valid YAML"):
        store.save(id="mem_pears", name="Pears", description="d", tags=["x"], body="b", force=True, embed=False)
    assert snapshot(vault.root) == before
    # An id line in a broken file's body, or in a note without frontmatter, is no id of theirs.
    vault.write("notes.md", "---\nname: [broken\n---\nid: mem_plums\n")
    vault.write("plain.md", "A note.\n\n```yaml\nid: mem_plums\n```\n")
    store.sync(embed=False)
    assert store.save(id="mem_plums", name="Plums", description="d", tags=["x"], body="b", embed=False)["status"] == (
        "created"
    )


# ---------------------------------------------------------------- reconcile


def test_same_name_is_a_duplicate_unless_forced(vault, store):
    first = create(store)
    before = snapshot(vault.root)
    dup = create(store, name="CONTEXT cache ORDERING", body="another body")
    assert dup["status"] == "duplicate" and dup["id"] == first["id"] and dup["path"] == first["path"]
    assert first["id"] in dup["message"] and "force" in dup["message"]
    assert snapshot(vault.root) == before
    forced = create(store, name="CONTEXT cache ORDERING", body="another body", force=True)
    assert forced["status"] == "created" and forced["id"] != first["id"]


def test_non_ascii_name_duplicate_and_deprecated_twin_does_not_block(vault, store):
    first = create(store, name="Straße Ärger")
    assert create(store, name="STRASSE ärger")["status"] == "duplicate"
    store.save(id=first["id"], status="deprecated", embed=False)
    assert create(store, name="Straße Ärger")["status"] == "created"


def test_find_similar_uses_the_stored_metadata_vectors(vault, store):
    vault.memory("a.md", "mem_a", name="Alpha")
    vault.memory("b.md", "mem_b", name="Beta")
    store.sync(embed=False)
    con = store.con
    dim = 4
    vectors.prepare_model(con, TinyEmbedder("fp-test", dim))
    hashes = {r["id"]: r["meta_hash"] for r in db.rows(con, "SELECT id, meta_hash FROM memory_index")}
    vecs = np.eye(2, 4, dtype=np.float32)
    vectors.store_vectors(con, [("meta", hashes["mem_a"]), ("meta", hashes["mem_b"])], vecs)
    near_a = np.array([1, 0.05, 0, 0], dtype=np.float32)
    hit = find_similar(con, near_a, "fp-test")
    assert hit["id"] == "mem_a" and hit["path"] == "a.md" and "similarity" in hit["why"]
    assert find_similar(con, np.array([1, 1, 0, 0], dtype=np.float32), "fp-test") is None
    assert find_similar(con, near_a, "another-model") is None


# ---------------------------------------------------------------- bad input


BAD_INPUTS = [
    ({"name": ""}, "name is empty"),
    ({"name": "   "}, "name is empty"),
    ({"description": "\n\t"}, "description is empty"),
    ({"body": "  \n "}, "body is empty"),
    ({"name": None}, "also pass name"),
    ({"description": None}, "also pass description"),
    ({"body": None}, "also pass body"),
    ({"tags": None}, "also pass tags"),
    ({"tags": []}, "tags are empty"),
    ({"tags": ["  ", ""]}, "invalid tags: '  ', ''"),
    ({"tags": ["ok", "bad!tag"]}, "invalid tags"),
    ({"tags": [{"x": 1}]}, "tags must be a list of texts"),
    ({"tags": 5}, "tags must be a list of texts"),
    ({"name": 42}, "name must be text"),
    ({"body": "a\x00b"}, "NUL"),
    ({"name": "x" * 500}, "limit is 200"),
    ({"status": "forgotten"}, "status must be one of"),
    ({"id": "../escape"}, "may hold only"),
    ({"id": "a/b"}, "may hold only"),
    ({"id": ".."}, "may hold only"),
    ({"id": "mem\x00x"}, "may hold only"),
    ({"id": "x" * 500}, "limit is 128"),
    ({"id": "   "}, "id is empty"),
    ({"body": "x" * (10 * 1024 * 1024)}, "limited to"),
    ({"body": "y" * (MAX_BODY_BYTES + 1)}, "body is limited to"),
    ({"body": "\ud800 lone surrogate"}, "not valid Unicode"),
]


@pytest.mark.parametrize("change,message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_refused_and_nothing_changes(vault, store, change, message):
    existing = create(store, name="Existing one")
    before = snapshot(vault.root)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        create(store, **change)
    assert snapshot(vault.root) == before
    assert no_temp_files(vault.root)
    assert set(indexed(store)) == {existing["id"]}


def test_bad_update_input_leaves_the_file_alone(vault, store):
    res = create(store)
    before = snapshot(vault.root)
    for change in ({"name": " "}, {"tags": []}, {"body": ""}, {"status": 1}):
        with pytest.raises(InvalidInput):
            store.save(id=res["id"], embed=False, **change)
    assert snapshot(vault.root) == before


def test_unknown_id_without_fields_says_what_to_pass(vault, store):
    with pytest.raises(NotFound, match="no memory has id mem_nope; to create it also pass") as caught:
        store.save(id="mem_nope", description="d", embed=False)
    assert caught.value.exit_code == 5  # as open says for an id nobody holds
    assert snapshot(vault.root) == {}


# ---------------------------------------------------------------- concurrency

CHILD = textwrap.dedent(
    """
    import sys, time, os, json
    from marchdb.config import load_config
    from marchdb.store import Store
    home, root, go, name, ready = sys.argv[1:6]
    store = Store(load_config(home=home, root=root, env={}))
    store.con  # open the index before the start signal
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    res = store.save(name=name, description="written by " + name, body="body of " + name,
               tags=["race"], force=True, embed=False)
    print(json.dumps(res))
    """
)


def test_two_processes_saving_at_once(tmp_path, vault, cfg, store):
    go = tmp_path / "go"
    assert store.con is not None  # create the index first, as a running marchdb would have
    names = ["Same slug", "Same slug", "Other memory"]
    ready = [tmp_path / f"ready{i}" for i in range(len(names))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(cfg.home), str(vault.root), str(go), name, str(flag)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, flag in zip(names, ready)
    ]
    # Let them import and open the index (a fixed second was slept here: too long on a
    # quiet machine, too short on a busy one).
    deadline = time.monotonic() + 60
    while not all(flag.exists() for flag in ready) and time.monotonic() < deadline:
        assert all(proc.poll() is None for proc in procs), [proc.communicate() for proc in procs]
        time.sleep(0.01)
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert [r["status"] for r in results] == ["created"] * 3
    paths = {Path(r["path"]) for r in results}
    assert len(paths) == 3
    for res in results:
        note = notes.parse_note(Path(res["path"]).read_bytes())
        assert note.id == res["id"] and note.body.strip() == "body of " + note.name
    store.sync(embed=False)
    rows = indexed(store)
    assert set(rows) == {r["id"] for r in results}
    assert no_temp_files(vault.root)
    assert [p for p in store.doctor()["problems"] if p["kind"] != "missing_vector"] == []


def test_tool_description_states_the_rules():
    text = SAVE.description.lower()
    for phrase in ("create or update", "at least one", "omitted fields keep", "replace", "recall hints"):
        assert phrase in text


def test_changes_differences_ignores_blank_line_padding():
    note = notes.parse_note(b"---\nid: m\nname: N\ndescription: d\ntags: [a]\n---\n\nBody\n")
    assert Changes(body="\nBody\n\n").differences(note) == []
    assert Changes(body="Body!").differences(note) == ["body"]


def test_hand_written_id_that_sync_accepts_can_be_updated(vault, store):
    vault.memory("mine.md", "my note", name="Mine", description="old words")
    store.sync(embed=False)
    res = store.save(id="my note", description="new words", embed=False)
    assert res["status"] == "updated" and "new words" in (vault.root / "mine.md").read_text()
    with pytest.raises(InvalidInput):
        store.save(id="not there yet", name="n", description="d", body="b", tags=["t"], embed=False)


OBSIDIAN_NOTE = """---
# my own comment: keep me
id: mem_obs
name: Obsidian note   # trailing comment on a field we do not touch
description: old words
aliases: [obs, "Obs Note"]
tags:
- project/x
- topic
status: active
created_at: 2026-05-14T10:30:00.000Z
---

Body as I wrote it.
"""


def test_a_changed_field_keeps_its_own_comment(vault, store):
    text = OBSIDIAN_NOTE.replace("status: active", "status: active   # until the launch").replace(
        "description: old words", 'description: "old # words"  # a note'
    )
    path = vault.write("obs.md", text)
    store.sync(embed=False)
    store.save(id="mem_obs", status="deprecated", name="Renamed", description="new words", embed=False)
    text = path.read_text(encoding="utf-8")
    assert "status: deprecated  # until the launch\n" in text and "name: Renamed  # trailing comment" in text
    assert "description: new words  # a note\n" in text  # the '#' inside the quotes was no comment
    assert notes.parse_note(text.encode()).description == "new words"


def test_update_rewrites_only_the_changed_lines(vault, store):
    path = vault.write("obs.md", OBSIDIAN_NOTE)
    store.sync(embed=False)
    res = store.save(id="mem_obs", description="new words", embed=False)
    assert res["status"] == "updated"
    text = path.read_text(encoding="utf-8")
    for kept in (
        "# my own comment: keep me",
        "name: Obsidian note   # trailing comment",
        'aliases: [obs, "Obs Note"]',
        "tags:\n- project/x\n- topic\n",
        "created_at: 2026-05-14T10:30:00.000Z",
        "\nBody as I wrote it.\n",
    ):
        assert kept in text, kept
    assert "description: new words\n" in text and "updated_at: " in text and "old words" not in text
    # Tags and body too: the list block and the body are replaced, nothing else.
    store.save(id="mem_obs", tags=["topic", "new-tag"], body="A new body.", embed=False)
    text = path.read_text(encoding="utf-8")
    assert "tags:\n  - topic\n  - new-tag\nstatus: active" in text and text.endswith("\nA new body.\n")
    assert "# my own comment: keep me" in text and 'aliases: [obs, "Obs Note"]' in text
    store.sync(embed=False)
    row = store.con.execute("SELECT description, tags_json FROM memory_index WHERE id = 'mem_obs'").fetchone()
    assert row == ("new words", '["topic", "new-tag"]')


def test_tags_of_programming_names_are_kept(vault, store):
    """node.js, C++ and c# were refused by save and dropped from hand-written files."""
    res = create(store, tags=["node.js", "C++", "c#"])
    assert res["status"] == "created"
    assert notes.parse_note(Path(res["path"]).read_bytes(), "x").tags == ["node.js", "c++", "c#"]
    vault.write(
        "hand.md",
        "---\nid: mem_hand\nname: Hand\ndescription: d\ntags:\n  - Node.js\n  - C++\n  - c#\n  - a&b\n---\nbody\n",
    )
    store.sync(embed=False)
    row = store.con.execute("SELECT tags_json FROM memory_index WHERE id = 'mem_hand'").fetchone()
    assert json.loads(row[0]) == ["node.js", "c++", "c#"]
    problems = store.con.execute("SELECT kind, detail FROM problems WHERE path = 'hand.md'").fetchall()
    assert problems == [("invalid_tags", "ignored tags: 'a&b'")]  # what is dropped is said


def test_tags_of_transliterated_names_are_kept(vault, store):
    """A name's middle dot (莱昂德罗·内托) was refused: 193 files of one vault were flagged."""
    res = create(store, tags=["莱昂德罗·内托"])
    assert res["status"] == "created"
    vault.write(
        "names.md",
        "---\nid: mem_names\nname: Names\ndescription: d\ntags:\n  - 莱昂德罗·内托\n  - ジョン・スミス\n---\nbody\n",
    )
    store.sync(embed=False)
    row = store.con.execute("SELECT tags_json FROM memory_index WHERE id = 'mem_names'").fetchone()
    assert json.loads(row[0]) == ["莱昂德罗·内托", "ジョン・スミス"]
    assert store.con.execute("SELECT count(*) FROM problems WHERE path = 'names.md'").fetchone() == (0,)


def test_priority_is_set_by_save_and_changed_in_place(vault, store):
    res = create(store, priority="High")
    assert res["status"] == "created"
    text = Path(res["path"]).read_text(encoding="utf-8")
    assert "\npriority: high\n" in text
    path = vault.write("obs.md", OBSIDIAN_NOTE)
    store.sync(embed=False)
    assert store.save(id="mem_obs", priority="low", embed=False)["status"] == "updated"
    text = path.read_text(encoding="utf-8")
    assert "\npriority: low\n" in text and "# my own comment: keep me" in text and 'aliases: [obs, "Obs Note"]' in text
    assert store.save(id="mem_obs", priority="low", embed=False)["status"] == "unchanged"
    store.save(id="mem_obs", priority="normal", embed=False)
    assert path.read_text(encoding="utf-8").count("priority:") == 1
    store.sync(embed=False)
    rid = store.con.execute("SELECT rid FROM memory_index WHERE id = 'mem_obs'").fetchone()[0]
    assert store.con.execute("SELECT priority FROM memory_attrs WHERE rid = ?", (rid,)).fetchone()[0] == 0.0
    for bad in ("urgent", ""):
        with pytest.raises(InvalidInput, match="priority must be high, normal or low"):
            store.save(id="mem_obs", priority=bad, embed=False)
    with pytest.raises(InvalidInput, match="priority must be text, got 3"):
        store.save(id="mem_obs", priority=3, embed=False)


def test_a_field_written_with_a_tab_is_updated_like_any_other(vault, store):
    # Sync read it (libyaml takes a tab after the colon) but an update said "not valid YAML".
    path = vault.write("tabs.md", "---\nid: mem_tabs\nname:\tTabs\ndescription: old\ntags: [t]\n---\nBody.\n")
    store.sync(embed=False)
    assert store.save(id="mem_tabs", description="new words", embed=False)["status"] == "updated"
    text = path.read_text()
    assert "name:\tTabs\n" in text and "description: new words\n" in text


def test_supersedes_is_written_checked_and_removed(vault, store):
    old = vault.write("obs.md", OBSIDIAN_NOTE)  # a hand-written memory: never rewritten by what replaces it
    before = old.read_bytes()
    store.sync(embed=False)
    res = create(store, name="Deploy day", supersedes=["mem_obs"])
    assert res["status"] == "created"
    path = Path(res["path"])
    assert "\nsupersedes: mem_obs\n" in path.read_text(encoding="utf-8") and old.read_bytes() == before
    rid = store.con.execute("SELECT rid FROM memory_index WHERE id = ?", (res["id"],)).fetchone()[0]
    assert store.con.execute("SELECT target FROM supersedes WHERE rid = ?", (rid,)).fetchall() == [("mem_obs",)]
    assert store.save(id=res["id"], supersedes="mem_obs", embed=False)["status"] == "unchanged"
    with pytest.raises(NotFound, match="no memory has id mem_nope"):
        store.save(id=res["id"], supersedes=["mem_nope"], embed=False)
    with pytest.raises(InvalidInput, match="cannot supersede itself"):
        store.save(id=res["id"], supersedes=[res["id"]], embed=False)
    for bad, message in (
        (3, "supersedes must be a list of texts"),
        (["mem_obs", "a\nb"], "is not a memory id"),
        ([f"mem_{i}" for i in range(notes.MAX_SUPERSEDES + 1)], "replaces at most"),
    ):
        with pytest.raises(InvalidInput, match=message):
            store.save(id=res["id"], supersedes=bad, embed=False)
    # [] removes the field, and only that line
    text = path.read_text(encoding="utf-8")
    assert store.save(id=res["id"], supersedes=[], embed=False)["status"] == "updated"
    after = path.read_text(encoding="utf-8")
    assert "supersedes" not in after
    assert [l for l in after.splitlines() if not l.startswith("updated_at")] == [
        l for l in text.splitlines() if not l.startswith(("updated_at", "supersedes"))
    ]
    assert store.con.execute("SELECT count(*) FROM supersedes").fetchone()[0] == 0


def test_an_empty_supersedes_clears_a_value_that_names_no_id(vault, store):
    path = vault.write("odd.md", "---\nid: mem_odd\nname: Odd\ndescription: d\ntags: [t]\nsupersedes: 3\n---\nB.\n")
    store.sync(embed=False)
    assert store.save(id="mem_odd", supersedes=[], embed=False)["status"] == "updated"
    assert "supersedes" not in path.read_text()


# ---------------------------------------------------------------- conflicts_with, related


def test_conflicts_with_is_written_checked_and_removed(vault, store):
    vault.memory("freeze.md", "mem_freeze", name="Release freeze on Fridays", description="no releases on Fridays")
    vault.memory("other.md", "mem_other", name="Tea", description="green tea at 80 degrees")
    store.sync(embed=False)
    # A memory of the same name is a duplicate, unless the new one says it contradicts it.
    assert create(store, name="Release freeze on Fridays")["status"] == "duplicate"
    res = create(store, name="Release freeze on Fridays", description="releases allowed", conflicts_with="mem_freeze")
    assert res["status"] == "created"
    path = Path(res["path"])
    assert "\nconflicts_with: mem_freeze\n" in path.read_text(encoding="utf-8")
    rid = store.con.execute("SELECT rid FROM memory_index WHERE id = ?", (res["id"],)).fetchone()[0]
    assert store.con.execute("SELECT target FROM conflicts_with WHERE rid = ?", (rid,)).fetchall() == [("mem_freeze",)]
    pairs = store.con.execute("SELECT id, other_id FROM diag_contradictions ORDER BY id").fetchall()
    assert sorted(pairs) == sorted([(res["id"], "mem_freeze"), ("mem_freeze", res["id"])])  # both sides
    assert store.save(id=res["id"], conflicts_with=["mem_freeze"], embed=False)["status"] == "unchanged"
    with pytest.raises(NotFound, match="no memory has id mem_nope, so it cannot be contradicted"):
        store.save(id=res["id"], conflicts_with=["mem_nope"], embed=False)
    with pytest.raises(InvalidInput, match="cannot contradict itself"):
        store.save(id=res["id"], conflicts_with=[res["id"]], embed=False)
    with pytest.raises(InvalidInput, match="both supersedes and conflicts_with"):
        store.save(id=res["id"], conflicts_with=["mem_other"], supersedes=["mem_other"], embed=False)
    with pytest.raises(InvalidInput, match="contradicts at most"):
        store.save(id=res["id"], conflicts_with=[f"m{i}" for i in range(notes.MAX_SUPERSEDES + 1)], embed=False)
    # Settled by a person: the newer one replaces the older, and the contradiction is gone.
    assert store.save(id=res["id"], supersedes=["mem_freeze"], embed=False)["status"] == "updated"
    assert store.con.execute("SELECT count(*) FROM diag_contradictions").fetchone()[0] == 0
    assert store.save(id=res["id"], conflicts_with=[], embed=False)["status"] == "updated"
    assert "conflicts_with" not in path.read_text(encoding="utf-8")
    assert store.con.execute("SELECT count(*) FROM conflicts_with").fetchone()[0] == 0


def test_a_created_memory_answers_with_the_related_ones(vault, store):
    vault.memory(
        "freeze.md",
        "mem_freeze",
        name="Release freeze on Fridays",
        description="No production releases on Fridays, the weekend has no on-call",
        tags=["release", "process"],
    )
    for i in range(8):
        vault.memory(f"g{i}.md", f"mem_g{i}", name=f"Garden note {i}", description=f"tomatoes and basil, bed {i}")
    store.sync(embed=False)
    res = create(
        store,
        name="Friday releases allowed",
        description="Production releases on Fridays are allowed again, on-call covers the weekend",
        tags=["release"],
    )
    assert res["status"] == "created"
    (rel,) = res["related"]
    assert (rel["id"], rel["name"], rel["shared_tags"]) == ("mem_freeze", "Release freeze on Fridays", ["release"])
    assert rel["score"] >= store.cfg.min_score - RELATED_BELOW and "shares the tags release" in rel["why"]
    assert rel["description"].startswith("No production releases")
    # Nothing is recorded: the writer's look is no hint.
    assert store.con.execute("SELECT count(*) FROM recall_log").fetchone()[0] == 0
    # What it names already (it replaces or contradicts them) is not listed again; updates list nothing.
    again = create(
        store,
        name="Friday releases now fine",
        description="Production releases on Fridays are fine, on-call covers the weekend",
        tags=["release"],
        supersedes=["mem_freeze"],
    )
    assert "mem_freeze" not in [r["id"] for r in again["related"]]
    assert store.save(id="mem_g1", description="tomatoes only", embed=False)["related"] == []
    unrelated = create(store, name="Dog's medication", description="Biscuit takes carprofen", tags=["pets"])
    assert unrelated["related"] == []


def test_a_second_save_of_a_name_of_four_byte_characters_fits_the_file_name_limit(store):
    # The slug kept 60 characters (240 bytes): with "-2" the name passed 255 bytes,
    # and the save failed with a message blaming the disk.
    name = "\U00020000" * 70  # CJK Extension B: four bytes each in UTF-8
    paths = []
    for n in range(3):
        saved = store.save(name=name, description=f"take {n}", body=f"body {n}", tags=["t"], force=True, embed=False)
        assert saved["status"] == "created", saved
        paths.append(saved["path"])
    for path in paths:
        assert len(os.path.basename(path).encode()) <= 255, path
    assert len(set(paths)) == 3
