"""Temperature: recency, use and priority reorder recall candidates, never change a score."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.clock import format_time
from marchdb.index import temperature
from marchdb.index.results import Hint

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def days_ago(n: float) -> str:
    return format_time(NOW - dt.timedelta(days=n))


def test_the_arithmetic():
    assert temperature.recency(days_ago(0), None, NOW) == 1.0
    assert temperature.recency(None, days_ago(30), NOW) == pytest.approx(0.5)
    assert temperature.recency(days_ago(60), days_ago(400), NOW) == pytest.approx(0.25)  # the newer time counts
    assert temperature.recency(None, None, NOW) == 0.0 and temperature.recency("not a time", None, NOW) == 0.0
    assert temperature.recency(format_time(NOW + dt.timedelta(days=3)), None, NOW) == 1.0
    assert temperature.use(0, 0) == 0.0
    assert temperature.use(1, 1) == pytest.approx(1 / 3)
    assert temperature.use(10, 10) == pytest.approx(2 * 11 / 12 - 1)
    assert temperature.use(6, 0) == pytest.approx(-0.75)
    assert temperature.use(2, 9) == temperature.use(2, 2)  # opens beyond the hints count as the hints
    hottest = temperature.adjustment(1.0, 1.0, 1.0)
    coldest = temperature.adjustment(0.0, -1.0, -1.0)
    assert hottest == (pytest.approx(1.0), pytest.approx(temperature.MAX_ADJUST))
    assert coldest == (pytest.approx(-0.5), pytest.approx(-temperature.MAX_ADJUST / 2))


def write(vault, rel, mem_id, name, description, body, updated=None, priority=None):
    lines = ["---", f"id: {mem_id}", f"name: {name}", f"description: {description}", "tags:", "  - team"]
    lines += ["status: active", f"created_at: {days_ago(400)}"]
    if updated:
        lines.append(f"updated_at: {updated}")
    if priority:
        lines.append(f"priority: {priority}")
    vault.write(rel, "\n".join(lines + ["---", "", body, ""]))


def test_rerank_orders_by_temperature_and_leaves_scores_alone(vault, store):
    write(vault, "old.md", "mem_old", "Deploy day", "We deploy on Tuesdays", "Deploys go out on Tuesday mornings.")
    write(
        vault,
        "new.md",
        "mem_new",
        "Deploy day",
        "We deploy on Thursdays",
        "Deploys go out on Thursday mornings.",
        updated=days_ago(2),
    )
    write(
        vault,
        "low.md",
        "mem_low",
        "Deploy day",
        "We deploy on Mondays",
        "Deploys go out on Monday mornings.",
        priority="low",
    )
    store.sync(embed=False)
    hints = [Hint(i, 0.6, "Deploy day", "d", f"{i}.md", {"dense_cos": 0.8}) for i in ("mem_old", "mem_low", "mem_new")]
    ranked = temperature.rerank(store.con, hints, now=NOW)
    assert [h.id for h in ranked] == ["mem_new", "mem_old", "mem_low"]
    assert all(h.score == 0.6 for h in ranked)
    new, old, low = ranked
    assert new.signals["recency"] == pytest.approx(0.5 ** (2 / 30))
    assert old.signals["temp_adj"] == pytest.approx(temperature.MAX_ADJUST * 0.5 * 0.5 ** (400 / 30))
    assert low.signals["priority"] == -1.0 and low.signals["temp_adj"] < 0
    # A clearly better match stays first: the adjustment is a few hundredths at most.
    hints[0].score = 0.6 + temperature.MAX_ADJUST * 0.6
    assert [h.id for h in temperature.rerank(store.con, hints, now=NOW)][0] == "mem_old"
    # Calling it again recomputes (another now), never accumulates.
    again = temperature.rerank(store.con, hints, now=NOW + dt.timedelta(days=3650))
    assert all(abs(h.signals["temp_adj"]) < 0.011 for h in again)


def test_opens_after_hints_warm_a_memory_and_ignored_hints_cool_it(vault, store):
    write(vault, "a.md", "mem_a", "Parking at the office", "Park on level 2", "Level 2 has free spots.")
    write(vault, "b.md", "mem_b", "Parking downtown", "Park at the station garage", "The station garage is cheap.")
    store.sync(embed=False)
    with store.con:
        for run in range(6):
            for mem in ("mem_a", "mem_b"):
                store.con.execute(
                    "INSERT INTO recall_log(run_id, trigger, mem_id, score) VALUES (?, 'user', ?, 0.7)",
                    (f"r{run}", mem),
                )
    for _ in range(5):
        store.open("mem_a")  # right after its hints
    hints = [Hint(i, 0.6, i, "d", f"{i}.md", {}) for i in ("mem_b", "mem_a")]
    ranked = temperature.rerank(store.con, hints)
    assert [h.id for h in ranked] == ["mem_a", "mem_b"]
    assert ranked[0].signals["use"] == pytest.approx(2 * 6 / 8 - 1)
    assert ranked[1].signals["use"] == pytest.approx(2 * 1 / 8 - 1)
    # Opens without a hint before them (found by search) are no evidence either way.
    write(vault, "c.md", "mem_c", "Parking rules", "No parking on Sundays", "Sundays are free.")
    store.sync(embed=False)
    store.open("mem_c")
    (c,) = temperature.rerank(store.con, [Hint("mem_c", 0.6, "c", "d", "c.md", {})])
    assert c.signals["use"] == 0.0


def test_the_logs_are_read_from_the_candidates_never_scanned_whole(store):
    # The recall log keeps up to 100,000 rows; a plain JOIN made the planner scan all of
    # them on every recall (1.6 ms at 2,400 rows, growing with the log), not the ~60
    # candidates' entries through the (mem_id, at) indexes.
    plan = [
        row[3]
        for row in store.con.execute("EXPLAIN QUERY PLAN " + temperature._statement(), {"ids": "[]", "since": ""})
    ]
    assert not [
        step for step in plan if step.startswith("SCAN") and not step.startswith(("SCAN ids", "SCAN json_each"))
    ], plan
    assert any("recall_log_mem_at (mem_id=?" in step for step in plan) and any(
        "open_log_mem_at (mem_id=?" in step for step in plan
    )


def test_temperature_never_pushes_a_memory_over_the_threshold(vault, store):
    # A fresh memory with priority high is warm (+0.021); the other is a little more
    # relevant to the message and cold. The threshold is put between the warm one's
    # score and its score plus the adjustment: temperature must move it up the order,
    # yet the hint rules must go on reading its score, so it stays below the threshold.
    write(
        vault,
        "a.md",
        "mem_hot",
        "Zebra crossing rules",
        "Cars stop for people on zebra crossings",
        "z",
        updated=days_ago(0),
        priority="high",
    )
    write(vault, "b.md", "mem_cold", "Zebra facts", "Zebras have stripes", "zebra stripes", priority="low")
    store.sync(embed=False)
    first = {c.id: c for c in store.recall("crossing stripes", explain=True, threshold=0.0).candidates}
    hot, cold = first["mem_hot"], first["mem_cold"]
    adj = hot.signals["temp_adj"]
    # What makes the test mean something: the warm memory scores lower, and only its
    # adjustment puts it first.
    assert adj > 0 and hot.score < cold.score < hot.score + adj, (hot.score, adj, cold.score)
    threshold = (hot.score + cold.score) / 2  # strictly between hot's score and score + adj
    result = store.recall("crossing stripes", explain=True, threshold=threshold)
    assert [c.id for c in result.candidates] == ["mem_hot", "mem_cold"]  # it still ranks higher...
    assert [h.id for h in result.hints] == ["mem_cold"]  # ...but is no hint
    reasons = {c.id: c.reason for c in result.candidates}
    assert reasons["mem_hot"] == f"score below threshold {threshold:.2f}"
    assert result.candidates[0].score == hot.score  # the score itself never moved


def test_explain_shows_the_adjustment(tmp_path, vault):
    write(
        vault,
        "a.md",
        "mem_a",
        "Zebra crossing rules",
        "Cars stop for people on zebra crossings",
        "zebra",
        priority="high",
    )
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    out = runner.invoke(app, [*base, "recall", "zebra crossing", "--explain"], env=env)
    assert out.exit_code == 0, out.output
    assert " temp " in out.stdout and "+0.0" in out.stdout
    data = json.loads(runner.invoke(app, [*base, "recall", "zebra crossing", "--explain", "--json"], env=env).stdout)
    signals = data["candidates"][0]["signals"]
    assert {"recency", "use", "priority", "temperature", "temp_adj"} <= set(signals) and signals["priority"] == 1.0


def test_newer_memory_on_the_same_subject_ranks_first_with_the_real_model(vault, model_store):
    write(
        vault,
        "old.md",
        "mem_old",
        "Deploy day",
        "The team deploys to production on Tuesdays",
        "Production deploys happen on Tuesday mornings after the standup.",
    )
    write(
        vault,
        "new.md",
        "mem_new",
        "Deploy day",
        "The team deploys to production on Thursdays",
        "Production deploys happen on Thursday mornings after the standup.",
        updated=days_ago(1),
    )
    model_store.sync()
    result = model_store.recall("which day do we deploy to production?", explain=True)
    order = [c.id for c in result.candidates]
    assert order.index("mem_new") < order.index("mem_old")
