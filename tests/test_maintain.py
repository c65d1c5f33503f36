"""``maintain``: proposals with reasons, never for decisions or profiles; --apply archives
through the save path, reversibly; archived memories leave recall and default search."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from test_save import snapshot
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.clock import format_time
from marchdb.vault import notes

NOW = dt.datetime.now(dt.UTC)


def ago(days: float) -> str:
    return format_time(NOW - dt.timedelta(days=days))


def mem(
    vault, rel, mem_id, *, tags=("test",), status="active", created=60, updated=None, description="what it is", extra=""
):
    lines = ["---", f"id: {mem_id}", f"name: {mem_id} name"]
    if description:
        lines.append(f"description: {description}")
    lines += ["tags:"] + [f"  - {t}" for t in tags] + [f"status: {status}", f"created_at: {ago(created)}"]
    if updated is not None:
        lines.append(f"updated_at: {ago(updated)}")
    path = vault.write(rel, "\n".join(lines) + "\n" + extra + "---\n\n### 09:00 - something\n\nbody words\n")
    mtime = (NOW - dt.timedelta(days=max(created, updated or 0))).timestamp()
    import os

    os.utime(path, (mtime, mtime))  # as if the file had not been touched since
    return path


def by_id(report: dict) -> dict[str, dict]:
    return {p["ids"][0]: p for p in report["proposals"] if p["action"] != "merge"}


def test_proposals_and_their_reasons(vault, store):
    mem(vault, "logs/old.md", "log_old", tags=["daily-log"], created=45)
    mem(vault, "logs/recent.md", "log_recent", tags=["daily-log"], created=3)
    mem(vault, "logs/used.md", "log_used", tags=["daily-log"], created=45)
    mem(vault, "logs/shown.md", "log_shown", tags=["daily-log"], created=45)
    mem(vault, "logs/opened.md", "log_opened", tags=["daily-log"], created=45)
    mem(vault, "dep/long.md", "mem_dep_long", status="deprecated", created=400, updated=120)
    mem(vault, "dep/recent.md", "mem_dep_recent", status="deprecated", created=400, updated=10)
    mem(vault, "nodesc.md", "mem_nodesc", description=None)
    # Never proposed: decisions and profiles, by tag or folder, and priority high.
    mem(vault, "a.md", "mem_decision", tags=["decision"], status="deprecated", created=400, updated=200)
    mem(vault, "decisions/b.md", "mem_in_decisions", tags=["daily-log"], created=100)
    mem(vault, "c.md", "mem_profile", tags=["profile"], description=None)
    mem(vault, "d.md", "mem_high", tags=["daily-log"], created=100, extra="priority: high\n")
    store.sync(embed=False)
    with store.con:
        store.con.execute(
            "INSERT INTO recall_log(run_id, trigger, mem_id, score) VALUES ('r', 'user', 'log_used', 0.6)"
        )
        # Shown for display or recorded at a run's end, below the threshold: no agent saw
        # it (every PostToolUse logged such rows, and weak memories escaped the archive).
        store.con.execute(
            "INSERT INTO recall_log(run_id, trigger, mem_id, score) VALUES ('r', 'display', 'log_shown', 0.4)"
        )
        store.con.execute(
            "INSERT INTO recall_log(run_id, trigger, mem_id, score) VALUES ('r', 'record', 'log_shown', 0.6)"
        )
    store.open("log_opened")
    report = store.maintain()
    assert report["applied"] is False and report["counts"] == {"archive": 3, "describe": 1}
    props = by_id(report)
    assert set(props) == {"log_old", "log_shown", "mem_dep_long", "mem_nodesc"}
    assert props["log_old"]["reason"].startswith(
        "daily log last written 45 days ago (more than 30), never hinted nor opened"
    )
    assert props["mem_dep_long"]["reason"] == "deprecated, unchanged for 120 days (more than 90)"
    assert "no description" in props["mem_nodesc"]["reason"] and props["mem_nodesc"]["action"] == "describe"
    assert "near-duplicates were not looked for" in report["notes"][0]  # no model, no vectors
    assert set(by_id(store.maintain(log_days=2))) >= {"log_recent"}
    assert "mem_dep_recent" in by_id(store.maintain(deprecated_days=5))


def test_a_daily_logs_age_comes_from_its_frontmatter_a_deprecations_from_its_last_change(vault, store):
    """An import, a copy or a git checkout gives old daily logs today's file
    time; a note deprecated by hand in an editor keeps its grace period."""
    import os

    for path in (
        mem(vault, "logs/imported.md", "log_imported", tags=["daily-log"], created=200),
        mem(vault, "dep/edited.md", "mem_dep_edited", status="deprecated", created=400, updated=150),
    ):
        os.utime(path, None)  # touched now
    vault.write("logs/no_times.md", "---\nid: log_no_times\nname: n\ndescription: d\ntags: [daily-log]\n---\n\nx\n")
    store.sync(embed=False)
    props = by_id(store.maintain())
    assert props["log_imported"]["reason"].startswith("daily log last written 200 days ago")
    assert "mem_dep_edited" not in props  # its file changed today
    assert "log_no_times" not in props  # no time in the file: its last change counts (today)


def test_apply_archives_reversibly_and_archived_memories_leave_recall_and_search(vault, store):
    path = mem(vault, "2026/10/week1/log.md", "log_old", tags=["daily-log"], created=45, extra="# kept comment\n")
    mem(vault, "nodesc.md", "mem_nodesc", description=None)
    store.sync(embed=False)
    before = path.read_text()
    others = {k: v for k, v in snapshot(vault.root).items() if "log.md" not in k}
    report = store.maintain(apply=True)
    (archive,) = [p for p in report["proposals"] if p["action"] == "archive"]
    assert archive["applied"] and archive["error"] is None
    describe = next(p for p in report["proposals"] if p["action"] == "describe")
    assert not describe["applied"]  # needs a person
    after = path.read_text()
    # Only the status line changed: archiving is no update (no updated_at was added).
    assert after.replace("status: archived", "status: active") == before
    assert "# kept comment" in after and notes.parse_note(after.encode()).status == "archived"
    assert {k: v for k, v in snapshot(vault.root).items() if "log.md" not in k} == others
    assert store.status()["archived"] == 1
    # Out of recall and default search; open and an explicit search still find it.
    result = store.recall("something body words", explain=True)
    assert all(h.id != "log_old" for h in result.hints)
    assert store.open("log_old")["status"] == "ok"
    assert [r["id"] for r in store.search("something")["results"]] == ["mem_nodesc"]
    assert {r["id"] for r in store.search("something", include_archived=True)["results"]} == {"mem_nodesc", "log_old"}
    # Nothing proposed twice; undo through save.
    assert "log_old" not in by_id(store.maintain())
    store.save(id="log_old", status="active", embed=False)
    assert notes.parse_note(path.read_bytes()).status == "active"


def test_cli_maintain_dry_run_apply_and_search_flag(tmp_path, vault):
    mem(vault, "log.md", "log_old", tags=["daily-log"], created=45)
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    dry = runner.invoke(app, [*base, "maintain"], env=env)
    assert dry.exit_code == 0, dry.output
    assert "archive  log_old: daily log last written 45 days ago" in dry.stdout and "dry run: 1 archive" in dry.stdout
    assert "status: active" in (vault.root / "log.md").read_text()
    done = json.loads(runner.invoke(app, [*base, "maintain", "--apply", "--json"], env=env).stdout)
    assert done["applied"] and done["proposals"][0]["applied"]
    assert done["proposals"][0]["undo"] == "marchdb save --id log_old --status active"
    log = (tmp_path / "home" / "logs" / "lifecycle.log").read_text().splitlines()
    record = json.loads(log[-1])
    assert record["op"] == "maintain" and record["archived"] == ["log_old"]
    assert record["was"]["log_old"]["status"] == "active"  # what undo puts back
    found = json.loads(runner.invoke(app, [*base, "search", "something", "--archived", "--json"], env=env).stdout)
    assert [r["id"] for r in found["results"]] == ["log_old"]
    assert json.loads(runner.invoke(app, [*base, "search", "something", "--json"], env=env).stdout)["results"] == []


def test_an_archive_that_fails_is_counted_and_exits_8(tmp_path, vault):
    # A frontmatter written as one {...} mapping cannot be edited in place: the archive
    # fails and says so, and the command no longer ends with exit 0 as if all went well.
    before = f"---\n{{id: log_flow, name: n, description: d, tags: [daily-log], created_at: '{ago(45)}'}}\n---\nb\n"
    path = vault.write("flow.md", before)
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    done = CliRunner().invoke(app, [*base, "maintain", "--apply"], env=env)
    assert done.exit_code == 8, done.output
    assert "[not archived: " in done.stdout and "archived 0, 1 failed (the lines above say why)" in done.stdout
    assert path.read_text() == before
    as_json = CliRunner().invoke(app, [*base, "maintain", "--apply", "--json"], env=env)
    assert as_json.exit_code == 8 and json.loads(as_json.stdout)["proposals"][0]["error"]


def test_near_duplicates_are_proposed_for_a_merge_with_the_real_model(vault, model_store):
    vault.memory(
        "a.md", "mem_a", name="Deploy day", description="We deploy to production on Tuesdays", tags=["process"]
    )
    vault.memory(
        "b.md", "mem_b", name="Deploy days", description="We deploy to production on Tuesdays.", tags=["process"]
    )
    vault.memory(
        "c.md", "mem_c", name="Dog's medication", description="Biscuit takes half a carprofen tablet", tags=["pets"]
    )
    vault.memory(
        "d.md", "mem_d", name="Deploy day", description="We deploy to production on Tuesdays", tags=["decision"]
    )
    # Alike, but of two projects: not one memory, even with an untagged one alike to both between them.
    for rel, mem_id, tags in (
        ("e.md", "mem_e", ["project/billing"]),
        ("f.md", "mem_f", ["Project/Search"]),
        ("g.md", "mem_g", ["ops"]),
    ):
        vault.memory(rel, mem_id, name="Deploy window", description="Deploys go out Tuesday mornings", tags=tags)
    model_store.sync()
    report = model_store.maintain()
    merges = [p for p in report["proposals"] if p["action"] == "merge"]
    found = sorted(sorted(p["ids"]) for p in merges)
    assert found in ([["mem_a", "mem_b"], ["mem_e", "mem_g"]], [["mem_a", "mem_b"], ["mem_f", "mem_g"]]), found
    deploy = next(p for p in merges if "mem_a" in p["ids"])
    assert "cosine up to" in deploy["reason"] and "'Deploy day'" in deploy["reason"]
    assert report["notes"] == []


def test_bad_day_counts_are_refused(store):

    from marchdb.errors import InvalidInput

    for bad in (-1, "30", True, 2.5):
        with pytest.raises(InvalidInput, match="whole number of days"):
            store.maintain(log_days=bad)
    with pytest.raises(InvalidInput, match="deprecated-days"):
        store.maintain(deprecated_days=-5)


def test_cli_defaults_are_the_library_defaults():
    import inspect

    from marchdb.cli import lifecycle as cli_lifecycle
    from marchdb.lifecycle import maintain

    params = inspect.signature(cli_lifecycle.maintain_).parameters
    assert params["log_days"].default.default == maintain.LOG_DAYS
    assert params["deprecated_days"].default.default == maintain.DEPRECATED_DAYS


def test_an_imported_chat_that_holds_nothing_is_proposed(vault, store):
    # Imports made before the importer skipped them kept sessions such as
    # "hey" / "How can I help you today?": a memory that looks like every vague message.
    def chat(rel, mem_id, turns, source):
        body = "ChatGPT conversation “hey”, 2026-03-01 10:00 UTC, id `c1`.\n\n" + "\n\n".join(
            f"**{role}** · 10:0{n}\n\n{text}" for n, (role, text) in enumerate(turns)
        )
        vault.write(
            rel,
            f"---\nid: {mem_id}\nname: hey\ndescription: hey\ntags: [chatgpt]\nsource: {source}\n---\n\n{body}\n",
        )

    chat(
        "c/hollow.md", "mem_hollow", [("User", "hey"), ("Assistant", "Hello! How can I help you today?")], "chatgpt:c1"
    )
    chat(
        "c/real.md",
        "mem_real",
        [("User", "why does the deploy time out after 30 s?"), ("Assistant", "…")],
        "chatgpt:c2",
    )
    chat("c/mine.md", "mem_mine", [("User", "hey"), ("Assistant", "Hi!")], "workspace:/x/notes.md")
    store.sync(embed=False)
    props = by_id(store.maintain())
    assert set(props) == {"mem_hollow"} and props["mem_hollow"]["action"] == "archive"
    assert props["mem_hollow"]["reason"].startswith("an imported chat that is too short to keep: 3 characters typed")


def test_the_undo_of_an_archived_deprecated_memory_puts_it_back_deprecated(vault, store):
    # The hint said "--status active": following it brought a retired memory back into recall.
    mem(vault, "dep.md", "mem_dep", status="deprecated", created=400, updated=120)
    store.sync(embed=False)
    report = store.maintain(apply=True)
    (done,) = [p for p in report["proposals"] if p["applied"]]
    assert done["undo"] == "marchdb save --id mem_dep --status deprecated"
    assert done["was"]["status"] == "deprecated" and done["was"]["updated_at"].startswith("20")
    store.save(id="mem_dep", status=done["undo"].rsplit(" ", 1)[1], embed=False)
    assert notes.parse_note((vault.root / "dep.md").read_bytes()).status == "deprecated"


def test_archiving_and_its_undo_leave_updated_at_alone(vault, store):
    # Both wrote today's updated_at: the memory came back "fresh" (recency, +temperature)
    # and maintain called a 45-day-old unused log "last written 0 days ago" for 30 days.
    from marchdb.index import temperature

    log = mem(vault, "log.md", "log_old", tags=["daily-log"], created=60, updated=45)
    dep = mem(vault, "dep.md", "mem_dep", status="deprecated", created=400, updated=120)
    store.sync(embed=False)
    stamps = {p: notes.parse_note(p.read_bytes()).updated_at for p in (log, dep)}
    report = store.maintain(apply=True)
    assert sorted(p["ids"][0] for p in report["proposals"] if p["applied"]) == ["log_old", "mem_dep"]
    for path, stamp in stamps.items():
        assert notes.parse_note(path.read_bytes()).status == "archived"
        assert notes.parse_note(path.read_bytes()).updated_at == stamp
    undo = {p["ids"][0]: p["undo"].rsplit(" ", 1)[1] for p in report["proposals"] if p["applied"]}
    for mem_id, status in undo.items():
        assert store.save(id=mem_id, status=status, embed=False)["status"] == "updated"
    for path, stamp in stamps.items():
        assert notes.parse_note(path.read_bytes()).updated_at == stamp
    row = store.con.execute("SELECT created_at, updated_at FROM memory_index WHERE id = 'log_old'").fetchone()
    assert temperature.recency(row[1], row[0], NOW) == pytest.approx(0.5 ** (45 / 30), rel=1e-3)
    # Put back as it was, the unused log is what it was: proposed again, at its real age.
    again = by_id(store.maintain())
    assert again["log_old"]["reason"].startswith("daily log last written 45 days ago")
    # Any other change is an update, as before: a status other than archived, a new description.
    store.save(id="log_old", status="deprecated", embed=False)
    assert notes.parse_note(log.read_bytes()).updated_at > stamps[log]
    store.save(id="mem_dep", description="retired in May", embed=False)
    assert notes.parse_note(dep.read_bytes()).updated_at > stamps[dep]


def test_maintain_takes_dry_run_as_import_does_and_refuses_it_with_apply(tmp_path, vault):
    # `import --dry-run` was accepted and `maintain --dry-run` was an unknown option.
    path = mem(vault, "log.md", "log_old", tags=["daily-log"], created=45)
    before = path.read_bytes()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    dry = CliRunner().invoke(app, [*base, "maintain", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert "archive  log_old" in dry.stdout and "dry run: 1 archive; nothing was changed" in dry.stdout
    both = CliRunner().invoke(app, [*base, "maintain", "--dry-run", "--apply"], env=env)
    assert both.exit_code == 2 and "--apply and --dry-run contradict each other; pass one" in both.stderr
    assert path.read_bytes() == before


def test_apply_never_writes_through_a_folder_linked_since_the_scan(tmp_path, vault, store):
    # Proposals come from the index; between them and the write a folder on the path may
    # have become a link to a folder outside the memory root: nothing is written there.
    import os
    import shutil

    from marchdb.clock import utc_now_iso
    from marchdb.lifecycle import maintain

    mem(vault, "2026/10/week1/log.md", "log_old", tags=["daily-log"], created=45)
    store.sync(embed=False)
    proposals, _notes = maintain.propose(store.con)
    assert [p.ids for p in proposals if p.action == "archive"] == [["log_old"]]
    outside = tmp_path / "outside"
    shutil.copytree(vault.root / "2026/10/week1", outside)
    shutil.rmtree(vault.root / "2026/10/week1")
    os.symlink(outside, vault.root / "2026/10/week1")
    before = (outside / "log.md").read_bytes()
    written = maintain.apply(store.con, vault.root, store.cfg.index_path, proposals, utc_now_iso())
    assert written == []
    (archive,) = [p for p in proposals if p.action == "archive"]
    assert not archive.applied and "not archived" in archive.error
    assert (outside / "log.md").read_bytes() == before


def test_a_long_superseded_memory_is_proposed_for_the_archive(vault, store):
    mem(vault, "old.md", "mem_old", created=400, updated=200)
    mem(vault, "recent.md", "mem_recent", created=30)
    mem(vault, "new.md", "mem_new", created=100, extra="supersedes: [mem_old, mem_recent]\n")
    mem(vault, "dec.md", "mem_dec", tags=("decision",), created=400, updated=200)
    mem(vault, "new2.md", "mem_new2", created=100, extra="supersedes: mem_dec\n")
    mem(vault, "old3.md", "mem_old3", created=400, updated=200)
    mem(vault, "new3.md", "mem_new3", created=10, extra="supersedes: mem_old3\n")
    store.sync(embed=False)
    found = by_id(store.maintain(now=NOW))
    assert found["mem_old"]["action"] == "archive" and "superseded by mem_new" in found["mem_old"]["reason"]
    assert "unchanged for 100 days" in found["mem_old"]["reason"]  # since its successor was written
    assert "mem_recent" not in found and "mem_dec" not in found  # too recent; a decision is never proposed
    assert "mem_old3" not in found  # old, but superseded only ten days ago


def test_two_memories_that_contradict_each_other_are_for_a_person_to_decide(vault, store):
    mem(vault, "a.md", "mem_a", created=5)
    mem(vault, "b.md", "mem_b", tags=("decision",), created=5, extra="conflicts_with: [mem_a, mem_gone]\n")
    mem(vault, "c.md", "mem_c", created=5, extra="conflicts_with: mem_d\n")
    mem(vault, "d.md", "mem_d", status="deprecated", created=5, updated=5)  # retired: nothing to decide
    store.sync(embed=False)
    report = store.maintain(now=NOW, apply=True)
    (decide,) = [p for p in report["proposals"] if p["action"] == "decide"]
    assert decide["ids"] == ["mem_a", "mem_b"] and decide["paths"] == ["a.md", "b.md"]  # a decision too: listed
    assert "contradict each other" in decide["reason"] and "--supersedes" in decide["reason"]
    assert not decide["applied"] and report["counts"]["decide"] == 1  # never applied
    problems = [p for p in store.doctor()["problems"] if p["kind"] == "contradiction"]
    assert sorted(p["path"] for p in problems) == ["a.md", "b.md"] and all(p["advice"] for p in problems)
    assert "contradicts mem_b (b.md, conflicts_with)" in next(p["detail"] for p in problems if p["path"] == "a.md")
    text = CliRunner().invoke(
        app, ["--home", str(store.cfg.home), "--root", str(vault.root), "maintain"], env={"MARCH_EMBED_MODEL": "x"}
    )
    assert text.exit_code == 0 and "decide   mem_a, mem_b: " in text.stdout and "1 decide" in text.stdout


def test_finished_actions_after_two_weeks_and_unused_reflections_after_a_month(vault, store):
    # Seed 003: done actions are archived after ~14 days, reflections after ~30 days unreferenced.
    mem(vault, "a1.md", "mem_done_tag", tags=("action", "action/done"), created=40, updated=20)
    mem(vault, "actions/done/a2.md", "mem_done_folder", tags=("action",), created=40, updated=20)
    mem(vault, "a3.md", "mem_done_recent", tags=("action/done",), created=40, updated=5)
    mem(vault, "actions/open/a4.md", "mem_open_action", tags=("action",), created=40, updated=20)
    mem(vault, "a5.md", "mem_done_decision", tags=("action/done", "decision"), created=40, updated=20)
    mem(vault, "r1.md", "mem_reflection", tags=("reflection",), created=45)
    mem(vault, "reflections/r2.md", "mem_reflection_folder", created=45)
    mem(vault, "r3.md", "mem_reflection_used", tags=("reflection",), created=45)
    mem(vault, "r4.md", "mem_reflection_new", tags=("reflections",), created=10)
    mem(vault, "a6.md", "mem_done_used", tags=("action/done",), created=40, updated=20)
    store.sync(embed=False)
    with store.con:  # referenced lately: a hint a week ago, an open three days ago
        store.con.execute(
            "INSERT INTO recall_log(run_id, trigger, mem_id, score, at) VALUES ('r', 'user', 'mem_reflection_used', 0.6, ?)",
            (ago(7),),
        )
        store.con.execute("INSERT INTO open_log(mem_id, at) VALUES ('mem_done_used', ?)", (ago(3),))
    props = by_id(store.maintain(now=NOW))
    archived = {k for k, p in props.items() if p["action"] == "archive"}
    assert archived == {"mem_done_tag", "mem_done_folder", "mem_reflection", "mem_reflection_folder"}
    assert props["mem_done_tag"]["reason"] == (
        "a finished action, done 20 days ago (more than 14, and not hinted nor opened in as long)"
    )
    assert props["mem_reflection"]["reason"] == (
        "a reflection written 45 days ago (more than 30, and not hinted nor opened in as long)"
    )
    looser = by_id(store.maintain(now=NOW, action_days=2, reflection_days=5))
    assert {"mem_done_recent", "mem_reflection_new"} <= set(looser) and "mem_done_decision" not in looser
    result = CliRunner().invoke(
        app,
        ["--home", str(store.cfg.home), "--root", str(vault.root), "maintain", "--action-days", "30", "--json"],
        env={"MARCH_EMBED_MODEL": "x"},
    )
    ids = {p["ids"][0] for p in json.loads(result.stdout)["proposals"]}
    assert "mem_done_tag" not in ids and "mem_reflection" in ids  # 20 days is not more than 30
    bad = CliRunner().invoke(
        app, ["--home", str(store.cfg.home), "--root", str(vault.root), "maintain", "--reflection-days", "-1"]
    )
    assert bad.exit_code == 2 and "reflection-days must be a whole number of days" in bad.stderr
