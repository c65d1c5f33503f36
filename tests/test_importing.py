"""Importing folders of Markdown notes (seed 003's workspace, seed 004's typed layout, plain
Obsidian notes) into a real vault and index; the CLI's dry run and --apply."""

from __future__ import annotations

import datetime as dt
import json
import os
import textwrap
import time
from pathlib import Path

import pytest
from test_save import snapshot
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.errors import InvalidInput
from marchdb.index import db
from marchdb.lifecycle.notefolders import first_sentence
from marchdb.vault import notes


def put(base: Path, rel: str, text: str | bytes) -> Path:
    path = base / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def workspace(tmp_path) -> Path:
    """Seed 003's workspace layout."""
    ws = tmp_path / "agent-ws"
    put(ws, "NOW.md", "# Now\n\nMigrating the gateway to the new cluster; blocked on DNS.\n")
    put(ws, "AGENTS.md", "# Operating manual\n\nAlways log decisions.\n")
    put(ws, "HEARTBEAT.md", "# Heartbeat\n\nRefresh NOW.md.\n")
    put(ws, "memory/INDEX.md", "# Index\n\n- decisions/db-choice.md\n")
    put(ws, "memory/memlog.sh", '#!/bin/sh\necho "### $(date +%H:%M) - $1" >> memory/$(date +%F).md\n')
    put(
        ws,
        "memory/2026-11-02.md",
        """
        ### 09:10 - 完成代码审查

        审了 bf-gateway-service PR #42，三个潜在问题。

        ### 15:40 - Deploy fixed

        Raised the gateway timeout to 30 s.
        """,
    )
    put(
        ws,
        "memory/decisions/db-choice.md",
        "# Use Postgres for the ledger\n\nWe chose Postgres over MySQL for its JSONB support. Decided on 2026-10-01.\n",
    )
    put(ws, "memory/people/wu.md", "# Wu\n\nWu leads the payments team. Likes short meetings. #payments #team/lead\n")
    put(ws, "memory/actions/done/rotate-keys.md", "# Rotate the API keys\n\nDone in October.\n")
    put(ws, "memory/.archive/old-idea.md", "# An old idea\n\nA cache in front of the ledger.\n")
    return ws


def memories(store) -> dict[str, dict]:
    store.sync(embed=False)
    rows = db.rows(store.con, "SELECT m.*, a.source FROM memory_index m LEFT JOIN memory_attrs a ON a.rid = m.rid")
    return {r["source"] or r["id"]: r for r in rows}


def test_workspace_dry_run_then_apply_then_nothing_twice(vault, store, workspace):
    before = snapshot(vault.root)
    plan = store.import_("workspace", workspace)
    assert snapshot(vault.root) == before, "a dry run writes nothing"
    actions = {r["origin"]: r["action"] for r in plan["items"]}
    assert actions == {
        "AGENTS.md": "skip",
        "HEARTBEAT.md": "skip",
        "NOW.md": "now",
        "memory/2026-11-02.md": "create",
        "memory/INDEX.md": "skip",
        "memory/actions/done/rotate-keys.md": "create",
        "memory/decisions/db-choice.md": "create",
        "memory/people/wu.md": "create",
        "memory/.archive/old-idea.md": "create",
    }
    assert (plan["created"], plan["skipped"], plan["problems"]) == (5, 3, 0)
    assert store.now()["text"] == ""  # a dry run: the working page too is left alone
    done = store.import_("workspace", workspace, apply=True, embed=False)
    assert done["created"] == 5 and all(Path(r["path"]).is_file() for r in done["items"] if r["action"] == "created")
    mems = memories(store)
    key = f"workspace:{workspace}/"
    log = mems[key + "memory/2026-11-02.md"]
    assert (log["id"], log["name"]) == ("log_2026-11-02", "Daily log 2026-11-02")
    assert log["description"] == "完成代码审查; Deploy fixed"
    assert json.loads(log["tags_json"]) == ["daily-log"] and log["path"] == "2026/11/week1/2026-11-02-daily-log.md"
    assert db.scalar(store.con, "SELECT count(*) FROM chunks WHERE mem_rid = ?", (log["rid"],)) == 2
    decision = mems[key + "memory/decisions/db-choice.md"]
    assert (decision["name"], json.loads(decision["tags_json"])) == ("Use Postgres for the ledger", ["decision"])
    assert decision["description"] == "We chose Postgres over MySQL for its JSONB support."
    wu = mems[key + "memory/people/wu.md"]
    assert json.loads(wu["tags_json"]) == ["person", "payments", "team/lead"]
    action = mems[key + "memory/actions/done/rotate-keys.md"]
    assert json.loads(action["tags_json"]) == ["action", "action/done"]
    assert mems[key + "memory/.archive/old-idea.md"]["status"] == "archived"
    # NOW.md is the working page, not a memory recall would hint as if it were current; it keeps its age.
    assert key + "NOW.md" not in mems
    page = store.now()
    assert page["text"] == "Migrating the gateway to the new cluster; blocked on DNS."
    assert page["updated_at"] == dt.datetime.fromtimestamp(
        (workspace / "NOW.md").stat().st_mtime
    ).astimezone().isoformat(timespec="seconds")
    # The file says where it came from; the source is untouched.
    text = (vault.root / decision["path"]).read_text()
    assert f"source: workspace:{workspace}/memory/decisions/db-choice.md" in text
    again = store.import_("workspace", workspace, apply=True, embed=False)
    assert (again["created"], again["skipped"]) == (0, 9)
    assert {r["detail"] for r in again["items"] if r["origin"] == "NOW.md"} == {"the working page holds it already"}


def test_a_source_is_its_file_not_its_folders_name(vault, store, tmp_path):
    for ws in (tmp_path / "a" / "workspace", tmp_path / "b" / "workspace"):
        put(ws, "notes/kafka.md", f"# Kafka in {ws.parent.name}\n\nPartitions are the unit of order.\n")
    first = store.import_("obsidian", tmp_path / "a" / "workspace", apply=True, embed=False)
    assert first["created"] == 1
    # Another folder of the same name holds other notes: they are imported.
    assert store.import_("obsidian", tmp_path / "b" / "workspace", apply=True, embed=False)["created"] == 1
    # A subfolder or a single file of a folder imported before: nothing twice.
    # ... nor the same folder reached through '..' or a link.
    (tmp_path / "link").symlink_to(tmp_path / "a")
    for again in (
        tmp_path / "a" / "workspace" / "notes",
        tmp_path / "a" / "workspace" / "notes" / "kafka.md",
        tmp_path / "b" / ".." / "a" / "workspace",
        tmp_path / "link" / "workspace",
    ):
        plan = store.import_("obsidian", again)
        assert (plan["created"], plan["skipped"]) == (0, 1), again
    assert len(memories(store)) == 2


def test_a_memory_imported_by_an_earlier_version_is_not_imported_again(vault, store, tmp_path):
    put(tmp_path / "Vault", "kafka.md", "# Kafka\n\nPartitions are the unit of order.\n")
    # Earlier versions keyed a note by its folder's name and path.
    vault.write("old.md", "---\nid: mem_old\nname: Kafka\ndescription: d\nsource: obsidian:Vault/kafka.md\n---\n\nx\n")
    plan = store.import_("obsidian", tmp_path / "Vault")
    assert (plan["created"], plan["skipped"]) == (0, 1)
    assert store.import_("obsidian", tmp_path / "Vault", apply=True, embed=False)["created"] == 0


def test_typed_layout_of_seed_004(vault, store, tmp_path):
    base = tmp_path / "personal"
    put(base, "MEMORY.md", "# Memory\n\n- user/profile.md\n")
    put(
        base,
        "feishu:oc_x/user/profile.md",
        """
        ---
        name: ui_preference
        description: The user wants minimal interfaces
        type: user
        ---
        Fewer buttons, no animations.
        """,
    )
    put(
        base,
        "feishu:oc_x/feedback/reviews.md",
        "---\nname: review style\ndescription: one issue per comment\ntype: feedback\n---\nShort comments.\n",
    )
    put(base, "feishu:oc_x/project/gateway.md", "# Gateway\n\nThe gateway moves to the new cluster in December.\n")
    put(base, "feishu:oc_x/reference/runbook.md", "# Runbook\n\nThe runbook is in the wiki under Ops/Gateway.\n")
    put(base, "feishu:oc_x/archive/old.md", "# Old\n\nSomething old.\n")
    out = store.import_("typed", base, apply=True, embed=False)
    assert (out["created"], out["skipped"]) == (5, 1)
    by_name = {m["name"]: m for m in memories(store).values()}
    profile = by_name["ui_preference"]
    assert (profile["description"], json.loads(profile["tags_json"])) == (
        "The user wants minimal interfaces",
        ["user", "profile"],
    )
    assert "type: user" in (vault.root / profile["path"]).read_text()  # other fields are kept
    assert json.loads(by_name["review style"]["tags_json"]) == ["feedback"]
    assert json.loads(by_name["Gateway"]["tags_json"]) == ["project"]
    assert json.loads(by_name["Runbook"]["tags_json"]) == ["reference"]
    assert by_name["Old"]["status"] == "archived"


def test_plain_obsidian_notes_and_every_bad_input(vault, store, tmp_path):
    vault.memory("keep.md", "mem_keep", body="mine")
    before = snapshot(vault.root)
    notes_dir = tmp_path / "Vault"
    put(
        notes_dir,
        "Projects/Marchdb/Design.md",
        "Some intro without heading. More text.\n\n```c\n#include <x.h>\n```\n#idea #2026\n",
    )
    put(
        notes_dir,
        "Reading list.md",
        """
        ---
        title: Books to read
        tags: [books, "Reading List"]
        aliases: [books]
        created: 2025-05-01
        source: a friend
        status: draft
        ---
        - **Dune**, by [[Frank Herbert|Herbert]]. Recommended twice.
        """,
    )
    put(notes_dir, "already.md", "---\nid: mem_x\nname: x\ndescription: y\n---\nbody\n")
    put(notes_dir, "Daily/2026-02-30.md", "An impossible day is an ordinary note.\n")
    put(notes_dir, "dated.md", '---\ndate: "Jan 5, 2024"\nupdated_at: someday\n---\nA note with dates in words.\n')
    put(notes_dir, "tagged.md", '---\ntags: "#books #scifi"\ntag: ["🚀launch", "ok tag"]\n---\nTags Obsidian reads.\n')
    put(notes_dir, "Daily/2026-02-03.md", "### 25:99 - a bad time\n\nstill a log\n")
    put(notes_dir, "empty.md", "\n\n")
    put(notes_dir, "broken.md", "---\ntitle: [unclosed\n---\nbody\n")
    put(notes_dir, "half.md", "---\ntitle: cut\nbody without end")
    put(notes_dir, "latin1.md", "caf\xe9 au lait".encode("latin-1"))
    put(notes_dir, ".obsidian/workspace.md", "# hidden\n")
    big = put(notes_dir, "big.md", "x")
    with open(big, "wb") as fh:
        fh.truncate(notes.MAX_FILE_BYTES + 1)
    os.symlink(vault.root / "keep.md", notes_dir / "link.md")
    out = store.import_("obsidian", notes_dir, apply=True, embed=False)
    rows = {r["origin"]: r for r in out["items"]}
    assert {o: r["action"] for o, r in rows.items()} == {
        "link.md": "problem",
        "Reading list.md": "created",
        "already.md": "skip",
        "big.md": "problem",
        "broken.md": "problem",
        "empty.md": "skip",
        "half.md": "problem",
        "latin1.md": "problem",
        "Projects/Marchdb/Design.md": "created",
        "Daily/2026-02-30.md": "created",
        "Daily/2026-02-03.md": "created",
        "dated.md": "created",
        "tagged.md": "created",
    }
    assert "not valid YAML" in rows["broken.md"]["detail"] and "closing" in rows["half.md"]["detail"]
    assert "UTF-8" in rows["latin1.md"]["detail"] and "limited" in rows["big.md"]["detail"]
    assert "it is a marchdb memory" in rows["already.md"]["detail"] and "symlink" in rows["link.md"]["detail"]
    mems = memories(store)
    design = mems[f"obsidian:{notes_dir}/Projects/Marchdb/Design.md"]
    assert (design["name"], design["description"]) == ("Design", "Some intro without heading.")
    assert json.loads(design["tags_json"]) == ["projects/marchdb", "idea"]  # not #include (code), not #2026 (a number)
    assert mems[f"obsidian:{notes_dir}/Daily/2026-02-30.md"]["name"] == "2026 02 30"
    bad_time = mems[f"obsidian:{notes_dir}/Daily/2026-02-03.md"]
    assert (bad_time["id"], bad_time["path"]) == ("log_2026-02-03", "2026/02/week1/2026-02-03-daily-log.md")
    books = mems[f"obsidian:{notes_dir}/Reading list.md"]
    assert (books["name"], books["description"]) == ("Books to read", "Dune, by Herbert.")
    assert json.loads(books["tags_json"]) == ["books", "reading-list"]
    assert books["created_at"] == "2025-05-01T00:00:00.000Z" and books["path"].startswith("2025/05/week1/")
    text = (vault.root / books["path"]).read_text()
    assert "original_source: a friend" in text and "original_status: draft" in text and "aliases:" in text
    # Obsidian's "#a #b" is two tags; a tag marchdb cannot take is left out and said, not dropped silently.
    tagged = mems[f"obsidian:{notes_dir}/tagged.md"]
    assert json.loads(tagged["tags_json"]) == ["books", "scifi", "ok-tag"]
    assert rows["tagged.md"]["warnings"] == [
        "tags left out, not valid tags: '🚀launch' (letters, digits and '/', '-', '_', '.', '+', '#')"
    ]
    # Dates marchdb cannot read are kept as written, never dropped.
    dated = (vault.root / mems[f"obsidian:{notes_dir}/dated.md"]["path"]).read_text()
    assert "date: Jan 5, 2024" in dated and "original_updated_at: someday" in dated
    assert {k: v for k, v in snapshot(vault.root).items() if k in before} == before
    with pytest.raises(InvalidInput, match="inside the memory root"):
        store.import_("obsidian", vault.root)
    with pytest.raises(InvalidInput, match="unknown import kind"):
        store.import_("notion", notes_dir)
    with pytest.raises(InvalidInput, match="does not exist"):
        store.import_("obsidian", tmp_path / "nope")
    # What is obviously no folder of notes (a typo, a slip of the shell) is never walked.
    for source, why in (("/", "top-level folder"), ("/proc", "system folder"), (store.cfg.home, "marchdb's home")):
        with pytest.raises(InvalidInput, match=f"not a folder of notes to import: .*{why}"):
            store.import_("obsidian", source)


def test_first_sentence_skips_headings_markup_and_tables():
    assert first_sentence("# Title\n\n| a | b |\n\n> Quoted **bold** line. Next one.") == "Quoted bold line."
    assert first_sentence("## H\n\n1. [link text](http://x) first item\n2. second") == "link text first item second"
    assert first_sentence("第一句话。第二句话。") == "第一句话。"
    assert first_sentence("") == ""


def test_cli_import_reports_and_exit_codes(tmp_path, vault, workspace):
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    dry = runner.invoke(app, [*base, "import", "workspace", str(workspace)], env=env)
    assert dry.exit_code == 0, dry.output
    assert "dry run: 5 would be created, 3 skipped, 0 problems" in dry.stdout and "skip     AGENTS.md" in dry.stdout
    done = runner.invoke(
        app, [*base, "import", "workspace", str(workspace), "--apply", "--no-embed", "--json"], env=env
    )
    data = json.loads(done.stdout)
    assert data["applied"] and data["created"] == 5
    assert {"kind", "path", "applied", "created", "skipped", "problems", "warnings", "items"} <= set(data)
    log = (tmp_path / "home" / "logs" / "lifecycle.log").read_text().splitlines()
    assert json.loads(log[-1])["op"] == "import" and len(json.loads(log[-1])["created"]) == 5
    both = runner.invoke(app, [*base, "import", "workspace", str(workspace), "--apply", "--dry-run"], env=env)
    assert both.exit_code == 2 and "contradict" in both.stderr
    bad = runner.invoke(app, [*base, "import", "evernote", str(workspace)], env=env)
    assert bad.exit_code == 2 and "unknown import kind" in bad.stderr


def test_a_vault_holding_the_memory_root_is_imported_without_it(tmp_path, cfg):
    from marchdb.config import load_config
    from marchdb.store import Store

    obsidian = tmp_path / "Obsidian"
    put(obsidian, "Inbox/idea.md", "# An idea\n\nA cache in front of the ledger.\n")
    root = obsidian / "March Memories"
    put(root, "2026/11/week1/m.md", "---\nid: mem_m\nname: m\ndescription: d\ntags: [x]\n---\nbody\n")
    with Store(load_config(home=tmp_path / "home2", root=root, env={})) as store:
        out = store.import_("obsidian", obsidian, apply=True, embed=False)
        assert [(r["action"], r["origin"]) for r in out["items"]] == [
            ("skip", "March Memories"),
            ("created", "Inbox/idea.md"),
        ]
        with pytest.raises(InvalidInput, match="inside the memory root"):
            store.import_("obsidian", root / "2026")


def test_a_days_log_the_vault_has_already_is_imported_beside_it_and_said(vault, store, workspace):
    # It got an id of its own without a word: two daily logs of one day, unexplained.
    vault.memory("mine.md", "log_2026-11-02", name="Daily log 2026-11-02", tags=["daily-log"])
    out = store.import_("workspace", workspace, apply=True, embed=False)
    row = next(r for r in out["items"] if r["origin"] == "memory/2026-11-02.md")
    assert row["action"] == "created" and row["id"] != "log_2026-11-02"
    assert "log_2026-11-02 exists already, so this one gets an id of its own" in " ".join(row["warnings"])


def test_a_copied_daily_log_keeps_its_days_time_and_maintain_sees_it(vault, store, workspace):
    # A copied or cloned workspace gives every file today's time: the log's day
    # (and its last entry) say when it was written.
    now = time.time()
    os.utime(workspace / "memory" / "2026-11-02.md", (now, now))
    store.import_("workspace", workspace, apply=True, embed=False)
    log = memories(store)[f"workspace:{workspace}/memory/2026-11-02.md"]
    assert log["updated_at"].startswith("2026-11-02T") and log["created_at"].startswith("2026-11-02T")
    assert log["updated_at"] > log["created_at"]  # the 15:40 entry
    proposals = store.maintain(now=dt.datetime(2027, 3, 1, tzinfo=dt.UTC))
    assert ["log_2026-11-02"] in [p["ids"] for p in proposals["proposals"] if p["action"] == "archive"]


def test_a_note_file_is_one_source_whatever_kind_imports_it(vault, store, workspace):
    first = store.import_("workspace", workspace, apply=True, embed=False)
    again = store.import_("obsidian", workspace, apply=True, embed=False)
    # Only what workspace skipped on purpose (AGENTS.md, HEARTBEAT.md, INDEX.md) or took for the
    # working page (NOW.md) is new to obsidian, which knows no such files.
    assert again["created"] == 4 and first["created"] + again["created"] == len(memories(store))
    assert {r["origin"] for r in again["items"] if r["action"] == "created"} == {
        "AGENTS.md",
        "HEARTBEAT.md",
        "memory/INDEX.md",
        "NOW.md",
    }
    assert store.import_("typed", workspace, apply=True, embed=False)["created"] == 0


def test_notes_marchdb_would_refuse_are_problems_and_a_second_import_writes_nothing(vault, store, tmp_path):
    # Each of these was written into the vault, refused or flagged by sync, and
    # written again by every later import (its source never found).
    src = tmp_path / "notes"
    put(src, "alias.md", "---\na: &x [1, 2]\nb: *x\n---\n# Alias note\nSome text.\n")
    put(src, "bigfm.md", f'---\nbig: "{"y" * 70_000}"\n---\n# Big FM\nx\n')
    put(src, "deep.md", "---\nd: " + "[" * 12 + "]" * 12 + "\n---\n# Deep\nx\n")
    put(
        src,
        "prio.md",
        "---\npriority: urgent\nupdated: 9999-12-31T23:59:59-05:00\ncreated: 0001-01-01T00:00:00Z\n---\n# P\nx\n",
    )
    put(src, "two\nlines/n.md", "# NL\nA note in a folder whose name holds a newline.\n")
    (src / "caf\udce9.md").write_bytes(b"# Cafe\nA note whose name is not UTF-8.\n")
    put(src, "memory/9999-12-31.md", "### 23:59 - x\nhello\n")
    os.mkfifo(src / "pipe.md")
    put(src, "rtl.md", "# Invoice \u202egnp.exe \x1b[2J\n\nSee \x1b[31mred\x1b[0m text.\n")
    first = store.import_("obsidian", src, apply=True, embed=False)
    actions = {r["origin"]: (r["action"], r["detail"] or "") for r in first["items"]}
    assert actions["alias.md"][0] == "problem" and "alias" in actions["alias.md"][1]
    assert actions["bigfm.md"][0] == "problem" and "65,536" in actions["bigfm.md"][1]
    assert actions["deep.md"][0] == "problem" and "nested" in actions["deep.md"][1]
    assert actions["pipe.md"] == ("problem", "not a regular file (a FIFO, a socket, a device?); only files are read")
    assert first["created"] == 5  # prio, the newline folder, the undecodable name, the far-future day file, rtl
    # Escape sequences and direction controls, which save refuses, are no part of a name or description.
    rtl = db.rows(store.con, "SELECT name, description FROM memory_index WHERE name LIKE 'Invoice%'")
    assert rtl == [{"name": "Invoice gnp.exe [2J", "description": "See [31mred[0m text."}]
    problems = db.rows(store.con, "SELECT * FROM diag_problems WHERE kind != 'missing_vector'")
    assert problems == []
    prio = next(p for p in vault.root.rglob("*.md") if "\npriority" not in p.read_text() and "urgent" in p.read_text())
    assert "original_priority: urgent" in prio.read_text()  # another tool's word, kept under another name
    again = store.import_("obsidian", src, apply=True, embed=False)
    assert again["created"] == 0 and again["skipped"] == 5


def test_source_keys_the_index_keeps_as_written(vault, store, tmp_path):
    # Two spaces (the index keeps one), a path past 500 characters (the index
    # keeps 500), a '%' next to what an escape would give: each was imported
    # again on every run, or taken for another file.
    src = tmp_path / "notes"
    put(src, "a  b.md", "# Two spaces\nA note.\n")
    deep = "d" * 200 + "/" + "e" * 200 + "/" + "f" * 200
    put(src, f"{deep}/long.md", "# Long path\nA note far down.\n")
    put(src, "x%0Ay.md", "# Percent\nA note with a percent sign.\n")
    put(src, "x\ny.md", "# Newline\nA note with a newline in its name.\n")
    put(src, "tags.md", "# Many tags\n" + " ".join(f"#topic{i}" for i in range(60)) + "\n")
    first = store.import_("obsidian", src, apply=True, embed=False)
    assert first["created"] == 5, first["items"]
    many = next(r for r in first["items"] if r["origin"] == "tags.md")
    assert "the first 50 are kept" in many["warnings"][0]  # imported, not refused (a note of hashtags is common)
    assert db.rows(store.con, "SELECT * FROM diag_problems WHERE kind != 'missing_vector'") == []
    again = store.import_("obsidian", src, apply=True, embed=False)
    assert again["created"] == 0 and again["skipped"] == 5


def test_the_path_named_may_be_a_link_but_links_inside_are_not_followed(vault, store, tmp_path):
    src = tmp_path / "real"
    put(src, "a.md", "# A\nA note.\n")
    put(tmp_path / "elsewhere", "b.md", "# B\nAnother note.\n")
    os.symlink(tmp_path / "elsewhere" / "b.md", src / "b.md")
    os.symlink(src, tmp_path / "link")
    out = store.import_("obsidian", tmp_path / "link")
    assert {(r["origin"], r["action"]) for r in out["items"]} == {("a.md", "create"), ("b.md", "problem")}
    os.symlink(vault.root, tmp_path / "into-root")
    with pytest.raises(InvalidInput, match="inside the memory root"):
        store.import_("obsidian", tmp_path / "into-root")


def test_a_note_that_is_only_a_heading_is_skipped_and_says_so(vault, store, tmp_path):
    # It was imported as a memory whose description was its name: nothing to remember,
    # and a hint line that matches anything about its title (empty chats are skipped too).
    src = tmp_path / "notes"
    put(src, "empty.md", "# Empty\n")
    put(src, "outline.md", "---\ntags: [plans]\n---\n# Plans\n\n## Later\n\n")
    put(src, "described.md", "---\ndescription: The plan is in the title\n---\n# Ship it\n")
    put(src, "memory/2026-11-03.md", "### 09:10 - Finished the code review\n")
    out = store.import_("workspace", src, apply=True, embed=False)
    rows = {r["origin"]: r for r in out["items"]}
    assert {o: r["action"] for o, r in rows.items()} == {
        "empty.md": "skip",
        "outline.md": "skip",
        "described.md": "created",
        "memory/2026-11-03.md": "created",  # an entry's title is what was logged
    }
    assert rows["empty.md"]["detail"] == "the note holds only a heading (Empty), no text: nothing to remember"
    assert rows["outline.md"]["detail"] == "the note holds only headings (Plans; Later), no text: nothing to remember"
    assert (out["created"], out["skipped"], out["problems"]) == (2, 2, 0)


def test_a_note_changed_since_its_import_says_so_and_is_never_rewritten(vault, store, tmp_path):
    # It was skipped as "imported already", silently: the change never reached the vault
    # and nobody was told. Chats already say they have grown since.
    src = tmp_path / "notes"
    kafka = put(src, "kafka.md", "# Kafka\n\nPartitions are the unit of order.\n")
    touched = put(src, "touched.md", "# Touched\n\nA note a checkout gives today's time.\n")
    dated = put(src, "dated.md", "---\nupdated: 2024-01-05\n---\n# Dated\n\nIts own time says 2024.\n")
    old = time.time() - 86400 * 10
    for path in (kafka, touched, dated):
        os.utime(path, (old, old))
    first = store.import_("obsidian", src, apply=True, embed=False)
    assert first["created"] == 3
    mem_file = {r["origin"]: Path(r["path"]) for r in first["items"]}
    before = {origin: path.read_bytes() for origin, path in mem_file.items()}
    put(src, "kafka.md", "# Kafka\n\nPartitions are the unit of order. Keys pick the partition.\n")
    put(src, "dated.md", "---\nupdated: 2024-01-05\n---\n# Dated\n\nIts own time says 2024, the file says today.\n")
    os.utime(touched, None)  # a newer time, the same text: no change
    for apply in (False, True):
        again = store.import_("obsidian", src, apply=apply, embed=False)
        rows = {r["origin"]: r for r in again["items"]}
        assert {o: r["action"] for o, r in rows.items()} == {
            "kafka.md": "skip",
            "touched.md": "skip",
            "dated.md": "skip",
        }
        assert rows["touched.md"]["detail"] == "imported already"
        for origin in ("kafka.md", "dated.md"):
            detail, mem_id = rows[origin]["detail"], rows[origin]["id"]
            assert detail.startswith("imported already, but the note has changed since (last changed "), detail
            assert f"marchdb save --id {mem_id}" in detail and f"move {mem_id} out of the vault" in detail
        assert again["created"] == 0
    assert {origin: path.read_bytes() for origin, path in mem_file.items()} == before  # never rewritten


def test_a_note_imported_as_another_kind_is_not_taken_for_a_changed_one(vault, store, workspace):
    # workspace and obsidian give a note different folder tags: a touched file imported
    # as the other kind is the same note, not one changed since.
    store.import_("workspace", workspace, apply=True, embed=False)
    for path in workspace.rglob("*.md"):
        os.utime(path, (time.time() + 60, time.time() + 60))
    again = store.import_("obsidian", workspace, embed=False)
    decision = next(r for r in again["items"] if r["origin"] == "memory/decisions/db-choice.md")
    assert decision["detail"] == "imported already"


def test_an_import_with_problems_exits_8_once_the_rest_is_imported(tmp_path, vault):
    # --apply ended with exit 0 when items were problems: a script saw success while a
    # note stayed out of the vault. A dry run only reports, so it exits 0.
    src = tmp_path / "notes"
    put(src, "good.md", "# Good\n\nA note that imports.\n")
    put(src, "broken.md", "---\ntitle: [unclosed\n---\nbody\n")
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    dry = runner.invoke(app, [*base, "import", "obsidian", str(src)], env=env)
    assert dry.exit_code == 0, dry.output
    assert "dry run: 1 would be created, 0 skipped, 1 problems" in dry.stdout
    done = runner.invoke(app, [*base, "import", "obsidian", str(src), "--apply", "--no-embed"], env=env)
    assert done.exit_code == 8, done.output
    assert "problem  broken.md: the frontmatter is not valid YAML" in done.stdout
    assert "created 1, skipped 0, problems 1 (the problem lines above say why; the rest was imported)" in done.stdout
    assert len(list(vault.root.rglob("*.md"))) == 1
    again = runner.invoke(app, [*base, "import", "obsidian", str(src), "--apply", "--no-embed", "--json"], env=env)
    assert again.exit_code == 8 and json.loads(again.stdout)["problems"] == 1
    put(src, "broken.md", "---\ntitle: fixed\n---\nbody\n")
    fixed = runner.invoke(app, [*base, "import", "obsidian", str(src), "--apply", "--no-embed"], env=env)
    assert fixed.exit_code == 0, fixed.output
    assert "created 1, skipped 1, problems 0" in fixed.stdout


def test_an_archived_memory_still_says_its_note_changed_since(vault, store, tmp_path):
    # Archiving wrote today's updated_at, so a note edited before the archive looked
    # older than its memory: "imported already", the edit never mentioned again.
    note = put(tmp_path / "notes", "kafka.md", "# Kafka\n\nPartitions are the unit of order.\n")
    os.utime(note, (time.time() - 86400 * 10,) * 2)
    (row,) = store.import_("obsidian", note, apply=True, embed=False)["items"]
    put(tmp_path / "notes", "kafka.md", "# Kafka\n\nPartitions are the unit of order, keys pick one.\n")
    os.utime(note, (time.time() - 86400 * 5,) * 2)  # edited five days ago
    assert store.save(id=row["id"], status="archived", embed=False)["status"] == "updated"  # archived today
    (again,) = store.import_("obsidian", note, embed=False)["items"]
    assert again["action"] == "skip" and "the note has changed since" in again["detail"], again


def test_another_tools_supersedes_is_kept_under_another_name(vault, store, tmp_path):
    # An architecture-decision note's `supersedes: "[[adr-0003]]"` made the note a problem; an
    # id-shaped one would have meant marchdb's field, though the ids are the other tool's.
    src = tmp_path / "adr"
    put(src, "adr-4.md", '---\nsupersedes: "[[adr-0003]]"\n---\n# Use Postgres\nWe move to Postgres.\n')
    put(src, "adr-5.md", "---\nsupersedes: adr-0004\nconflicts_with: adr-0002\n---\n# Use Kafka\nWe move to Kafka.\n")
    report = store.import_("obsidian", src, apply=True, embed=False)
    assert report["created"] == 2, report["items"]
    texts = [p.read_text() for p in vault.root.rglob("*.md")]
    assert any('original_supersedes: "[[adr-0003]]"' in t or "original_supersedes: '[[adr-0003]]'" in t for t in texts)
    assert any("original_supersedes: adr-0004" in t for t in texts)
    assert all("\nsupersedes:" not in t and "\nconflicts_with:" not in t for t in texts)
    assert any("original_conflicts_with: adr-0002" in t for t in texts)
    assert store.con.execute("SELECT count(*) FROM supersedes").fetchone()[0] == 0
    assert store.con.execute("SELECT count(*) FROM conflicts_with").fetchone()[0] == 0


def test_a_workspaces_now_md_becomes_the_working_page_never_over_the_users(vault, store, tmp_path):
    ws = tmp_path / "ws"
    page = put(
        ws, "NOW.md", "---\nupdated: 2026-01-01\n---\n# Now\n\nShipping the billing export.\nStuck on CSV quoting.\n"
    )
    month_ago = time.time() - 30 * 86400
    os.utime(page, (month_ago, month_ago))
    # Held text is the user's now: never overwritten, and the report says how to take this one.
    store.now("Reviewing PR 42.")
    (row,) = store.import_("workspace", ws, apply=True, embed=False)["items"]
    assert row["action"] == "skip" and "`marchdb now - < NOW.md` takes this one" in row["detail"]
    assert store.now()["text"] == "Reviewing PR 42."
    store.now(clear=True)
    runner = CliRunner()
    base = ["--home", str(store.cfg.home), "--root", str(vault.root)]
    dry = runner.invoke(app, [*base, "import", "workspace", str(ws)], env={"MARCH_EMBED_MODEL": "x"})
    assert dry.exit_code == 0 and "now      NOW.md: becomes the working page (marchdb now)" in dry.stdout
    assert store.now()["text"] == ""
    done = runner.invoke(app, [*base, "import", "workspace", str(ws), "--apply"], env={"MARCH_EMBED_MODEL": "x"})
    assert done.exit_code == 0 and "now      NOW.md: became the working page" in done.stdout
    taken = store.now()
    assert taken["text"] == "Shipping the billing export.\nStuck on CSV quoting."  # no frontmatter, no title
    assert taken["stale"] and taken["age"] == "30 days ago"  # a month-old page is never shown as current
    assert store.con.execute("SELECT count(*) FROM memory_index").fetchone()[0] == 0
    # Too long for the page: a problem line, nothing written.
    store.now(clear=True)
    put(ws, "NOW.md", "word " * 1000)
    (row,) = store.import_("workspace", ws, apply=True, embed=False)["items"]
    assert row["action"] == "problem" and "holds at most 2,000" in row["detail"] and store.now()["text"] == ""
    # Another kind of import reads NOW.md as a note like any other.
    put(ws, "NOW.md", "# Now\n\nShipping the export.\n")
    (row,) = store.import_("obsidian", ws)["items"]
    assert row["action"] == "create"


def test_an_imported_old_action_keeps_its_age(workspace, vault, store):
    # import workspace wrote a 30-day-old actions/done/ note as a file of today, and maintain
    # counts a finished action's age from its file too: it was not proposed for two weeks.
    import os
    import time

    done = workspace / "memory/actions/done/rotate-keys.md"
    month_ago = time.time() - 30 * 86400
    os.utime(done, (month_ago, month_ago))
    store.import_("workspace", str(workspace), apply=True, embed=False)
    store.sync(embed=False)
    written = next(p for p in vault.root.rglob("*.md") if "Rotate the API keys" in p.read_text(encoding="utf-8"))
    assert abs(written.stat().st_mtime - month_ago) < 2
    archived = [p for p in store.maintain()["proposals"] if p["action"] == "archive"]
    assert any("a finished action" in p["reason"] for p in archived), archived


def test_imported_text_with_lone_carriage_returns_stays_editable(vault, store, tmp_path):
    # Terminal output pasted into a chat (a progress bar's CRs) or an old Mac
    # note went into the memory as it was: the file could then not be edited
    # in place, so archiving it (maintain) or changing its status was refused.
    from test_transcripts import SESSION, cc_lines, write_jsonl

    lines = cc_lines()
    asked = next(x for x in lines if x.get("type") == "user" and str(x["message"]["content"]).startswith("make a"))
    asked["message"]["content"] += "\rdownloading 10%\rdownloading 100%\rerror: the linker failed"
    write_jsonl(tmp_path / "claude" / "-x" / f"{SESSION}.jsonl", lines)
    put(tmp_path / "notes", "mac.md", b"# Old Mac note\r\rThe deploy pipeline drains the nodes first.\r")
    for kind, source in (("claude-code", tmp_path / "claude"), ("obsidian", tmp_path / "notes")):
        (row,) = [r for r in store.import_(kind, source, apply=True, embed=False)["items"] if r["action"] == "created"]
        assert b"\r" not in Path(row["path"]).read_bytes(), kind
        assert store.save(id=row["id"], status="archived", embed=False)["status"] == "updated", kind
    assert memories(store)[f"obsidian:{tmp_path / 'notes' / 'mac.md'}"]["name"] == "Old Mac note"


def test_a_memory_moved_out_of_the_vault_is_imported_again_by_the_next_apply(vault, store, tmp_path):
    # "move the memory out of the vault and import again" (a session grown
    # since): --apply skipped it as imported already, by an index that had
    # not seen the file go, until some other command scanned the vault.
    import shutil

    from hostchats import DATA

    shutil.copytree(DATA / "codex", tmp_path / "codex")
    (row,) = store.import_("codex", tmp_path / "codex", apply=True, embed=False)["items"]
    Path(row["path"]).rename(tmp_path / "kept-aside.md")
    again = store.import_("codex", tmp_path / "codex", apply=True, embed=False)
    assert again["created"] == 1, again["items"]
    assert Path(again["items"][0]["path"]).is_file()


def _waits_on_lock(pid: int, lock: Path) -> bool:
    """Whether process ``pid`` is blocked on a lock of the file ``lock`` (``/proc/locks`` lists a waiter as ``->``)."""
    inode = f":{os.stat(lock).st_ino} "
    text = Path("/proc/locks").read_text()
    return any(line.split()[1] == "->" and f" {pid} " in line and inode in line for line in text.splitlines())


def test_imports_from_two_homes_into_one_vault_take_the_vaults_lock(vault, store, tmp_path):
    # Two homes (two agents, two indexes) on one vault imported the same
    # sessions at once and each wrote its own copy: 266 twins of 300 sessions.
    # An import writes under the vault's lock, as save and log do.
    import shutil
    import subprocess
    import sys

    from hostchats import DATA

    from marchdb.vault.files import VAULT_LOCK_NAME, vault_lock

    shutil.copytree(DATA / "codex", tmp_path / "codex")
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    argv = [marchdb, "--home", str(tmp_path / "home2"), "--root", str(vault.root), "import", "codex"]
    env = {**os.environ, "MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"), "MARCH_DAEMON": "0"}
    with vault_lock(vault.root):
        other = subprocess.Popen([*argv, str(tmp_path / "codex"), "--apply", "--no-embed"], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        lock = vault.root / VAULT_LOCK_NAME
        deadline = time.monotonic() + 120
        while other.poll() is None and not _waits_on_lock(other.pid, lock) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert other.poll() is None and not list(vault.root.rglob("*.md")), other.communicate()
    out, err = other.communicate(timeout=120)
    assert other.returncode == 0 and "created 1" in out, err
    assert store.import_("codex", tmp_path / "codex", apply=True, embed=False)["created"] == 0


def test_a_working_page_that_is_a_link_is_the_now_items_problem_and_the_rest_imports(vault, store, workspace, cfg):
    # marchdb's own now.md made a link (by hand, by a dotfiles tool) stopped
    # the whole workspace import at NOW.md, dry run and --apply alike.
    page = cfg.home / "memory" / "now.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    target = cfg.home / "elsewhere.md"
    target.write_text("")
    page.symlink_to(target)
    for apply in (False, True):
        done = store.import_("workspace", workspace, apply=apply, embed=False)
        rows = {r["origin"]: r for r in done["items"]}
        assert rows["NOW.md"]["action"] == "problem" and "link" in rows["NOW.md"]["detail"], rows["NOW.md"]
        assert done["created"] == 5, done["items"]  # the notes and the day's log
    assert target.read_text() == "" and page.is_symlink()


def test_an_imported_memory_broken_by_hand_is_not_imported_twice(vault, store, tmp_path):
    # A hand edit that breaks the YAML of an imported memory hid its source:
    # the next import (each session's start, with importSessions) wrote a
    # second copy, and fixing the first left two memories of one session.
    import shutil

    from hostchats import DATA

    shutil.copytree(DATA / "codex", tmp_path / "codex")
    (row,) = store.import_("codex", tmp_path / "codex", apply=True, embed=False)["items"]
    memory = Path(row["path"])
    memory.write_text(memory.read_text().replace("name:", "name: [an edit left open", 1))
    before = sorted(vault.root.rglob("*.md"))
    again = store.import_("codex", tmp_path / "codex", apply=True, embed=False)
    (item,) = again["items"]
    assert item["action"] == "problem" and str(memory.relative_to(vault.root)) in item["detail"], item
    assert "cannot read" in item["detail"] and "import again" in item["detail"], item
    assert sorted(vault.root.rglob("*.md")) == before


def test_a_days_log_broken_by_hand_keeps_its_id_to_itself(vault, store, tmp_path):
    # The day's log, broken by a hand edit, still declares log_2026-11-02: the
    # imported log took that id too, and both were a conflict (out of recall)
    # once the edit was fixed. It gets an id of its own, as beside a readable one.
    put(tmp_path / "ws", "memory/2026-11-02.md", "### 09:10 - Review\n\nReviewed PR 42.\n")
    logged = store.log("Standup", "notes", embed=False, now=dt.datetime(2026, 11, 2, 10, 0, tzinfo=dt.UTC))
    broken = Path(logged["path"])
    broken.write_text(broken.read_text().replace("name:", "name: [an edit left open", 1))
    (row,) = store.import_("workspace", tmp_path / "ws", apply=True, embed=False)["items"]
    assert row["action"] == "created" and row["id"] != "log_2026-11-02", row
    assert any("id of its own" in w for w in row["warnings"]), row
