"""Reflection: the day's log and seed 003's routing, handed to the host's model (an MCP prompt, the CLI)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest
from typer.testing import CliRunner

from marchdb import ops
from marchdb.cli.main import app
from marchdb.errors import InvalidInput
from marchdb.lifecycle.reflect import MAX_DAYS, MAX_LOG_CHARS
from marchdb.mcp.server import build_server

TODAY = dt.date(2026, 11, 4)


def day(n: int) -> dt.datetime:
    """Noon (local) of TODAY minus ``n`` days."""
    d = TODAY - dt.timedelta(days=n)
    return dt.datetime(d.year, d.month, d.day, 12, 0).astimezone()


def test_the_days_log_comes_with_the_routing(vault, store):
    store.log("Decided to use Postgres for the ledger", "MySQL lacked JSONB; Wu agreed.", embed=False, now=day(0))
    store.log("Wu wants a summary before meetings", embed=False, now=day(0))
    store.log("Yesterday's deploy", "Raised the gateway timeout.", embed=False, now=day(1))
    data = store.reflect(today=TODAY)
    assert (data["since"], data["until"], data["missing"], data["left_out"]) == ("2026-11-04", "2026-11-04", [], [])
    assert [(log["id"], log["entries"]) for log in data["logs"]] == [("log_2026-11-04", 2)]
    text = data["text"]
    assert text.startswith("Reflect on the daily log of 2026-11-04")
    # Seed 003's routing, in its order, and marchdb's ways to write each.
    order = [text.index(w) for w in ("1. Decision", "2. Lesson", "3. Person", "4. Project", "5. Preference", "6. Log")]
    assert order == sorted(order) and "7. Nothing worth keeping: write nothing." in text
    for words in ("memory_save", "supersedes=[the old id]", "conflicts_with=[the old id]", "memory_now", "related"):
        assert words in text
    assert "=== Daily log 2026-11-04 (log_2026-11-04, 2 entries) ===" in text and "MySQL lacked JSONB" in text
    assert "Raised the gateway timeout" not in text  # another day
    # Yesterday by name; a range with a day that has no log; an archived log is still read.
    assert "Raised the gateway timeout" in store.reflect(date="yesterday", today=TODAY)["text"]
    store.save(id="log_2026-11-03", status="archived", embed=False)
    ranged = store.reflect(since="2026-11-01", until="today", today=TODAY)
    assert [log["day"] for log in ranged["logs"]] == ["2026-11-03", "2026-11-04"]
    assert (
        ranged["missing"] == ["2026-11-01", "2026-11-02"] and "(No log for 2026-11-01, 2026-11-02.)" in ranged["text"]
    )
    assert ranged["text"].startswith("Reflect on the daily logs of 2026-11-01 to 2026-11-04")
    none = store.reflect(date="2026-10-01", today=TODAY)
    assert none["logs"] == [] and "There is no daily log for 2026-10-01: nothing to reflect on" in none["text"]
    assert "1. Decision" not in none["text"]


def test_a_day_imported_beside_its_log_is_read_too_and_long_ranges_keep_the_latest_days(vault, store):
    vault.write(
        "imported.md",
        "---\nid: mem_imported_log\nname: Daily log 2026-11-04\ndescription: d\ntags: [daily-log]\n---\n"
        "### 08:00 - From the old workspace\n",
    )
    store.log("Today's own", embed=False, now=day(0))
    ids = [log["id"] for log in store.reflect(today=TODAY)["logs"]]
    assert sorted(ids) == ["log_2026-11-04", "mem_imported_log"]
    big = "word " * (MAX_LOG_CHARS // 12)  # two days fit, not three
    for n in range(1, 4):
        store.log(f"Long day {n}", big, embed=False, now=day(n))
    data = store.reflect(since="2026-11-01", until="2026-11-03", today=TODAY)
    assert data["left_out"] == ["log_2026-11-01"] and [log["day"] for log in data["logs"]] == [
        "2026-11-02",
        "2026-11-03",
    ]
    assert "(Left out, over 60,000 characters: log_2026-11-01;" in data["text"]


def test_bad_days_and_ranges_are_refused(store):
    for args, words in (
        ({"date": "2026-13-01"}, "is not a day"),
        ({"date": "today", "since": "yesterday"}, "not both"),
        ({"until": "today"}, "until needs since"),
        ({"since": "2026-11-04", "until": "2026-11-01"}, "is before since"),
        ({"since": "2026-01-01", "until": "2026-11-01"}, f"at most {MAX_DAYS}"),
    ):
        with pytest.raises(InvalidInput, match=words):
            store.reflect(**args, today=TODAY)


def test_reflect_from_the_cli(tmp_path, vault, store):
    store.log("Decided to use Postgres for the ledger", embed=False)
    runner = CliRunner()
    base = ["--home", str(store.cfg.home), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    text = runner.invoke(app, [*base, "reflect"], env=env)
    assert (
        text.exit_code == 0 and text.stdout.startswith("Reflect on the daily log of ") and "1. Decision" in text.stdout
    )
    data = json.loads(runner.invoke(app, [*base, "reflect", "--since", "yesterday", "--json"], env=env).stdout)
    assert {"text", "since", "until", "logs", "missing", "left_out"} <= set(data) and len(data["logs"]) == 1
    bad = runner.invoke(app, [*base, "reflect", "--date", "soon"], env=env)
    assert bad.exit_code == 2 and "is not a day" in bad.stderr


def test_the_mcp_server_offers_it_as_a_prompt_not_a_tool(store):
    from mcp.shared.exceptions import MCPError

    store.log("Decided to use Postgres for the ledger", embed=False)
    server = build_server(lambda op, args: ops.call(store, op, args), store.cfg.index_path)
    prompts = {p.name: p for p in asyncio.run(server.list_prompts())}
    assert set(prompts) == {"memory_reflect"} and prompts["memory_reflect"].description == ops.REFLECT.description
    assert {a.name: a.required for a in prompts["memory_reflect"].arguments} == {
        "date": False,
        "since": False,
        "until": False,
    }
    assert "memory_reflect" not in {t.name for t in asyncio.run(server.list_tools())}
    got = asyncio.run(server.get_prompt("memory_reflect", {}))
    (message,) = got.messages
    assert message.role == "user" and message.content.text == store.reflect()["text"]
    assert "Decided to use Postgres" in message.content.text
    with pytest.raises(MCPError, match="is not a day"):
        asyncio.run(server.get_prompt("memory_reflect", {"date": "soon"}))


def test_one_day_past_the_bound_keeps_its_latest_entries(vault, store):
    # One daily log of 3.9 MB came back whole (the bound is 60,000 characters).
    entries = [
        f"### {h:02d}:{m:02d} - Entry {h * 60 + m}\n\n" + f"note {h}:{m} " * 250 for h in range(24) for m in range(60)
    ]
    body = "\n\n".join(entries)
    assert len(body) > 3_900_000 // 2
    vault.write(
        "2026/11/week1/2026-11-04-daily-log.md",
        "---\nid: log_2026-11-04\nname: Daily log 2026-11-04\ndescription: d\ntags: [daily-log]\n---\n\n" + body,
    )
    store.sync(embed=False)
    data = store.reflect(today=TODAY)
    logs_part = data["text"].split("=== Daily log 2026-11-04", 1)[1]
    assert len(logs_part) <= MAX_LOG_CHARS + 500
    assert "Entry 1439" in logs_part and "Entry 0\n" not in logs_part  # the latest entries are kept
    assert "(cut: the first " in data["text"]
    assert data["logs"][0]["id"] == "log_2026-11-04"


def test_what_the_model_reads_names_no_internal_document(vault, store):
    store.log("Decided to use Postgres", embed=False, now=day(0))
    text = store.reflect(today=TODAY)["text"]
    assert "seed" not in text.lower()
    for op in ops.OPERATIONS.values():
        words = " ".join([op.summary, op.description, *(p.help for p in op.params)])
        assert "seed" not in words.lower(), op.name


def test_the_mcp_prompt_refuses_bad_arguments_as_invalid_params(store):
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    server = build_server(lambda op, args: ops.call(store, op, args), store.cfg.index_path)
    for args, words in (({"date": "x" * 45}, "at most 40"), ({"bogus": "1"}, "takes no argument 'bogus'")):
        with pytest.raises(MCPError, match=words) as caught:
            asyncio.run(server.get_prompt("memory_reflect", args))
        assert caught.value.error.code == INVALID_PARAMS


def test_the_mcp_prompt_answers_bad_arguments_without_a_traceback(tmp_path, vault):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {
        **os.environ,
        "MARCH_HOME": str(tmp_path / "home"),
        "MARCH_MEMORY_ROOT": str(vault.root),
        "MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"),
    }
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "prompts/get",
         "params": {"name": "memory_reflect", "arguments": {"date": "x" * 45}}},
        {"jsonrpc": "2.0", "id": 3, "method": "prompts/get",
         "params": {"name": "memory_reflect", "arguments": {"bogus": "1"}}},
    ]  # fmt: skip
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("marchdb")), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    answers = {}
    for message in messages:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        if "id" in message:
            answer = json.loads(proc.stdout.readline())
            answers[answer["id"]] = answer
    proc.stdin.close()
    proc.wait(60)
    assert proc.stderr is not None
    err = proc.stderr.read()
    for n in (2, 3):
        assert answers[n]["error"]["code"] == -32602, answers[n]
    assert "at most 40" in answers[2]["error"]["message"]
    assert "bogus" in answers[3]["error"]["message"]
    assert "Traceback" not in err and "Error rendering prompt" not in err, err
