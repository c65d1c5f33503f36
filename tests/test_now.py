"""The working page (seed 003's NOW.md): set, read, cleared, bounded, injected beside the profiles with its age."""

from __future__ import annotations

import json
import os
import re
import time

import pytest
from test_hooks import context_of, event, handle
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.config import load_config
from marchdb.errors import ConfigError, FileError, InvalidInput
from marchdb.lifecycle import now
from marchdb.ops import MAX_NOW_CHARS
from marchdb.store import Store

PAGE = "Migrating the gateway to the new cluster.\nBlocked on DNS: waiting for ops."


def age(store, hours: float) -> None:
    """Make the page look written ``hours`` ago."""
    path = now.page_path(store.cfg.home)
    then = time.time() - hours * 3600
    os.utime(path, (then, then))


def test_the_page_is_set_read_and_cleared_through_the_api(store, vault):
    assert store.now() == {**store.now(), "status": "read", "text": "", "block": "", "stale": False}
    done = store.now("  " + PAGE.replace("\n", "\r\n") + "\n\n")
    assert done["status"] == "set" and done["text"] == PAGE and done["age"] == "just now" and not done["stale"]
    path = now.page_path(store.cfg.home)
    assert path == store.cfg.home / "memory" / "now.md" and path.read_text() == PAGE + "\n"
    assert done["block"].startswith("[now]\nupdated just now (") and done["block"].endswith(PAGE)
    assert store.now()["text"] == PAGE  # read
    # Never a memory: not in the vault, the index, search or recall.
    store.sync(embed=False)
    assert not list(vault.root.rglob("*.md"))
    assert store.con.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    assert store.search("gateway")["results"] == [] and store.recall("gateway cluster DNS").hints == []
    cleared = store.now(clear=True)
    assert cleared["status"] == "cleared" and cleared["text"] == "" and cleared["block"] == ""
    assert path.read_bytes() == b""  # emptied, not deleted


def test_bad_pages_are_refused_and_odd_files_are_never_written_through(store, tmp_path):
    for bad, words in (
        ("", "give the page's text"),
        ("x" * (MAX_NOW_CHARS + 1), "at most 2,000"),
        ("ok\x1b[31m red", "control character U+001B"),
        ("\ud800", "not valid Unicode"),
    ):
        with pytest.raises(InvalidInput, match=re.escape(words)):
            store.now(bad)
    with pytest.raises(InvalidInput, match="not both"):
        store.now("text", clear=True)
    with pytest.raises(InvalidInput, match="memory_now: text is 2,001 characters"):
        store.now(text="y" * (MAX_NOW_CHARS + 1))  # the table's bound, as the MCP schema says
    path = now.page_path(store.cfg.home)
    target = tmp_path / "elsewhere.md"
    target.write_text("someone else's\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    with pytest.raises(FileError, match="never writes through"):
        store.now("text")
    with pytest.raises(FileError, match="symbolic link"):
        store.now()
    assert target.read_text() == "someone else's\n"


def test_an_old_page_is_said_to_be_stale_and_the_age_is_configurable(tmp_path, vault):
    cfg = load_config(home=tmp_path / "home", root=vault.root, env={})
    assert cfg.now_stale_hours == 24
    with Store(cfg) as store:
        store.now(PAGE)
        age(store, 3.5)
        fresh = store.now()
        assert (fresh["age"], fresh["stale"]) == ("3 h ago", False)
        assert fresh["block"].split("\n")[1].startswith("updated 3 h ago (")
        age(store, 30)
        stale = store.now()
        assert stale["stale"] and stale["age"] == "30 h ago"
        assert stale["block"].split("\n")[1].startswith("STALE: updated 30 h ago")
        assert "older than 24 h" in stale["block"] and stale["block"].endswith(PAGE)
        assert "STALE: updated 30 h ago" in store.context()["text"]
        # A hand edit is an update: the page is current again.
        now.page_path(cfg.home).write_text(PAGE + "\nDNS fixed.\n")
        assert not store.now()["stale"]
    (tmp_path / "home" / "config.json").write_text(json.dumps({"nowStaleHours": 48}))
    assert load_config(home=tmp_path / "home", root=vault.root, env={}).now_stale_hours == 48
    env = {"MARCH_NOW_STALE_HOURS": "2.5"}
    assert load_config(home=tmp_path / "home", root=vault.root, env=env).now_stale_hours == 2.5
    for bad in ("0", "-1", "nine", "9000"):
        with pytest.raises(ConfigError, match="MARCH_NOW_STALE_HOURS"):
            load_config(home=tmp_path / "home", root=vault.root, env={"MARCH_NOW_STALE_HOURS": bad})
    (tmp_path / "home" / "config.json").write_text(json.dumps({"nowStaleHours": True}))
    with pytest.raises(ConfigError, match="nowStaleHours"):
        load_config(home=tmp_path / "home", root=vault.root, env={})


def test_the_page_is_injected_beside_the_profiles_wherever_they_are(cfg, mixed_vault):
    store = Store(cfg, use_model=False)
    store.sync(embed=False)
    try:
        assert "[now]" not in store.context()["text"]  # no page, no block
        store.now(PAGE)
        context = store.context("Dog's medication carprofen tablet")
        text = context["text"]
        assert text.index("[user_profile]") < text.index("[now]\nupdated just now") < text.index("[recall]")
        assert context["now"]["text"] == PAGE and PAGE in text
        start = context_of(handle(store, "claude-code", event("SessionStart", source="startup")), "SessionStart")
        assert "[now]\nupdated just now" in start and PAGE in start
        generic = handle(store, "generic", {"text": "Dog's medication carprofen tablet", "profiles": True})
        assert "[now]\nupdated just now" in generic["stdout"] and "- mem_dog | score=" in generic["stdout"]
        plain = handle(store, "generic", {"text": "Dog's medication carprofen tablet", "run_id": "r2"})
        assert "[now]" not in plain["stdout"]  # only where the profiles are
        prompt = handle(store, "claude-code", event("UserPromptSubmit", prompt="what is the weather"))
        assert "[now]" not in prompt["stdout"]
        # A page that cannot be read leaves the rest of the session start alone, and says why.
        path = now.page_path(cfg.home)
        path.write_bytes(b"\xff\xfe not utf-8")
        answer = handle(store, "claude-code", event("SessionStart", source="startup"))
        assert "[agent_profile]" in context_of(answer, "SessionStart") and "not UTF-8" in answer["note"]
        # A long page edited by hand is cut to the bound, saying so.
        path.write_text("z" * (MAX_NOW_CHARS * 3))
        start = context_of(handle(store, "claude-code", event("SessionStart")), "SessionStart")
        assert "z" * MAX_NOW_CHARS in start and "z" * (MAX_NOW_CHARS + 1) not in start and "(cut: the page" in start
    finally:
        store.close()


def test_the_cli_sets_reads_and_clears_the_page(tmp_path, vault):
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]

    def cli(*args, input=None):
        return runner.invoke(app, [*base, *args], input=input, env={"MARCH_EMBED_MODEL": str(tmp_path / "x.gguf")})

    empty = cli("now")
    assert empty.exit_code == 0 and empty.stdout == "" and "no working page" in empty.stderr
    done = cli("now", PAGE)
    assert done.exit_code == 0 and done.stdout.startswith("set the working page (")
    shown = cli("now")
    assert shown.stdout.startswith("updated just now (") and shown.stdout.endswith(PAGE + "\n")
    data = json.loads(cli("now", "--json").stdout)
    assert (data["status"], data["text"], data["stale"]) == ("read", PAGE, False)
    piped = json.loads(cli("now", "-", "--json", input="From stdin.\n").stdout)
    assert piped["status"] == "set" and piped["text"] == "From stdin."
    assert "[now]\nupdated just now" in cli("context").stdout
    too_long = cli("now", "x" * (MAX_NOW_CHARS + 1))
    assert too_long.exit_code == 2 and "at most 2,000" in too_long.stderr
    assert json.loads(cli("now", "--clear", "--json").stdout)["status"] == "cleared"
    assert cli("now").stdout == ""


def test_a_page_dated_in_the_future_is_not_current(store):
    # A page whose file time is ahead (a clock set back since, a copy from
    # another machine, `touch -d`) was "updated just now" forever.
    store.now(PAGE)
    age(store, -72)  # three days ahead
    page = store.now()
    assert page["stale"] and page["age"] != "just now"
    line = page["block"].split("\n")[1]
    assert line.startswith("STALE: ") and "in the future" in line, line
    age(store, -0.005)  # seconds ahead: two clocks a little apart, still current
    assert not store.now()["stale"]
