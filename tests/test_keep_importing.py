"""Keep importing: ``--since``, ``import ALL``, ``import --history``, and the background
import a host's session start begins when ``importSessions`` is on.

The sessions are the real hosts' (``tests/data/chats/``, see ``test_host_chats.py``),
moved in time (every timestamp shifted, the file's time too) so that "a week ago"
and "still going on" mean the same whatever day the tests run.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostchats import DATA, PROMPTS
from typer.testing import CliRunner

from marchdb import logfile
from marchdb.cli.main import app
from marchdb.lifecycle import history, keep

MARCHDB = str(Path(sys.executable).with_name("marchdb"))
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def shifted(host: str, dest: Path, ago: dt.timedelta, session: str | None = None) -> Path:
    """The committed ``host`` sessions copied to ``dest``, their last message ``ago``
    (``session``: a new session id, for a second session of the same folder)."""
    shutil.copytree(DATA / host, dest, dirs_exist_ok=True)
    files = [p for p in dest.rglob("*.jsonl")]
    stamps = [dt.datetime.fromisoformat(m.replace("Z", "+00:00")) for f in files for m in _ISO.findall(f.read_text())]
    delta = dt.datetime.now(dt.UTC) - ago - max(stamps)

    def moved(match: re.Match) -> str:
        when = dt.datetime.fromisoformat(match.group().replace("Z", "+00:00")) + delta
        return when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    for f in files:
        text = _ISO.sub(moved, f.read_text())
        if session is not None:
            old = json.loads(text.splitlines()[0]).get("payload", {}).get("id") or f.stem
            text = text.replace(old, session)
            f.unlink()
            f = f.with_name(f"rollout-{session}.jsonl")
        f.write_text(text)
        when = time.time() - ago.total_seconds()
        os.utime(f, (when, when))
    return dest


def cli(tmp_path: Path, *args: str, env: dict | None = None):
    base = ["--home", str(tmp_path / "home"), "--root", str(tmp_path / "vault")]
    (tmp_path / "vault").mkdir(exist_ok=True)
    return CliRunner().invoke(
        app, [*base, *args], env={"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"), **(env or {})}
    )


def test_since_leaves_older_chats_out_counting_them(tmp_path):
    source = shifted("pi", tmp_path / "pi", dt.timedelta(days=10))
    week = cli(tmp_path, "import", "pi", str(source), "--since", "7d", "--json")
    assert week.exit_code == 0, week.output
    data = json.loads(week.stdout)
    assert (data["created"], data["older"], data["items"]) == (0, 1, [])
    text = cli(tmp_path, "import", "pi", str(source), "--since", "7d")
    assert "0 would be created, 0 skipped, 1 older than --since 7d" in text.stdout
    month = json.loads(cli(tmp_path, "import", "pi", str(source), "--since", "30d", "--json").stdout)
    assert (month["created"], month["older"]) == (1, 0)
    bad = cli(tmp_path, "import", "pi", str(source), "--since", "last tuesday")
    assert bad.exit_code == 2 and "no time" in bad.stderr


def test_since_passes_over_old_claude_code_sessions_unread(tmp_path):
    # Claude Code's sessions were each read whole and only then counted as
    # older: the background import at each session's start read every session
    # Claude Code kept (gigabytes for a heavy user), as the other hosts' do not.
    source = shifted("claude-code", tmp_path / "claude", dt.timedelta(days=10))
    garbage = next(source.rglob("*.jsonl")).with_name("old-garbage.jsonl")
    garbage.write_text("not json at all\n")
    when = time.time() - 10 * 86400
    os.utime(garbage, (when, when))
    week = json.loads(cli(tmp_path, "import", "claude-code", str(source), "--since", "7d", "--json").stdout)
    assert (week["created"], week["older"], week["items"]) == (0, 2, []), week["items"]
    month = json.loads(cli(tmp_path, "import", "claude-code", str(source), "--since", "30d", "--json").stdout)
    assert (month["created"], month["problems"]) == (1, 1)


def test_parse_since_takes_ages_and_dates():
    now = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
    assert history.parse_since("7d", now) == now - dt.timedelta(days=7)
    assert history.parse_since("12h", now) == now - dt.timedelta(hours=12)
    assert history.parse_since("2w", now) == now - dt.timedelta(weeks=2)
    assert history.parse_since("2026-11-01", now).date() == dt.date(2026, 11, 1)


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for key in (
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "PI_CODING_AGENT_DIR",
        "XDG_DATA_HOME",
        "HERMES_HOME",
        "GEMINI_CLI_HOME",
        "QWEN_HOME",
        "QWEN_RUNTIME_DIR",
        "OPENCLAW_STATE_DIR",
        "CLINE_DIR",
    ):
        monkeypatch.delenv(key, raising=False)
    return home


def test_import_all_reads_each_hosts_own_folder_and_history_lists_it(tmp_path, user_home):
    shifted("codex", user_home / ".codex" / "sessions", dt.timedelta(hours=2))
    shifted("pi", user_home / ".pi" / "agent" / "sessions", dt.timedelta(days=3))
    shifted("gemini", user_home / ".gemini" / "tmp", dt.timedelta(days=10))
    done = cli(tmp_path, "import", "ALL", "--since", "7d", "--apply", "--no-embed", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    created = sorted(r["origin"].split(":")[0] for r in data["items"] if r["action"] == "created")
    assert created == ["codex", "pi"] and data["older"] == 1
    missing = {r["origin"] for r in data["items"] if r["action"] == "skip" and "no sessions at" in r["detail"]}
    assert missing == {"claude-code", "qwen", "opencode", "kilo", "openclaw", "hermes", "cline"}
    again = json.loads(cli(tmp_path, "import", "ALL", "--apply", "--no-embed", "--json").stdout)
    assert again["created"] == 1  # gemini's, without --since; codex's and pi's are there already
    assert cli(tmp_path, "import", "ALL", str(user_home)).exit_code == 2
    listed = json.loads(cli(tmp_path, "import", "--history", "--json").stdout)
    assert {k["kind"]: k["memories"] for k in listed["kinds"]} == {"codex": 1, "gemini": 1, "pi": 1}
    assert [(r["kind"], r["created"], r["by"], r["since"]) for r in listed["runs"]] == [
        ("ALL", 1, "command", None),
        ("ALL", 2, "command", "7d"),
    ]
    text = cli(tmp_path, "import", "--history").stdout
    assert "codex" in text and "latest imports:" in text and "ALL: created 2" in text
    assert cli(tmp_path, "import", "--history", "pi").exit_code == 2


def test_import_all_goes_on_past_a_host_folder_it_refuses(tmp_path, user_home, monkeypatch):
    # A host folder set to one that is no place to import from (Qwen Code's
    # QWEN_HOME set to the home folder) stopped `import ALL` for every host,
    # with a message about notes.
    shifted("codex", user_home / ".codex" / "sessions", dt.timedelta(hours=2))
    monkeypatch.setenv("QWEN_HOME", str(user_home))
    done = cli(tmp_path, "import", "ALL", "--apply", "--no-embed", "--json")
    data = json.loads(done.stdout)
    rows = {r["origin"].split(":")[0]: r for r in data["items"]}
    assert rows["codex"]["action"] == "created", data["items"]
    assert rows["qwen"]["action"] == "problem" and "home folder" in rows["qwen"]["detail"], rows["qwen"]
    assert done.exit_code == 8  # something stayed out, as for any problem


def test_import_history_with_nothing_imported_says_so(tmp_path):
    out = cli(tmp_path, "import", "--history")
    assert out.exit_code == 0 and "nothing imported yet" in out.stdout


def test_import_history_reads_past_a_corrupt_lifecycle_log(tmp_path):
    # A log line nested past what json can decode (a disk error, a tool that
    # wrote into the file) ended --history with a RecursionError.
    logs = logfile.logs_dir(tmp_path / "home")
    logs.mkdir(parents=True)
    good = {"op": "import", "at": "2026-11-02T10:00:00.000Z", "kind": "codex", "path": "/x", "created": ["a", "b"]}
    (logs / logfile.LIFECYCLE).write_bytes(
        b"[" * 100_000
        + b"]" * 100_000
        + b"\n\xff\xfe not text\n"
        + b'{"op": "import", "at": {"x": 1}, "kind": 5, "path": ["a"], "created": "abc", "by": 7}\n'
        + json.dumps(good).encode()
        + b"\n"
    )
    listed = cli(tmp_path, "import", "--history", "--json")
    assert listed.exit_code == 0, listed.output
    runs = json.loads(listed.stdout)["runs"]
    assert runs[0] == {"at": good["at"], "kind": "codex", "path": "/x", "created": 2, "by": "command", "since": None}
    text = cli(tmp_path, "import", "--history")
    assert text.exit_code == 0 and "codex: created 2 from /x" in text.stdout, text.output


def test_the_background_import_is_off_unless_asked_and_runs_once_a_while(tmp_path, cfg, user_home):
    assert keep.start(cfg, "codex") is None and not (cfg.home / "imports").exists()
    cfg.import_sessions = True
    assert keep.start(cfg, "generic") is None  # a host whose sessions no import reads
    # A host's folder that is not there: the background import logs it and ends.
    try:
        assert "in the background" in (keep.start(cfg, "hermes", now=1_000_000.0) or "")
        assert keep.start(cfg, "hermes", now=1_000_000.0 + keep.EVERY_SECONDS - 1) is None
        assert keep.start(cfg, "hermes", now=1_000_000.0 + keep.EVERY_SECONDS + 1) is not None
    finally:
        for proc in keep._started:
            proc.wait(timeout=60)


def test_a_stamp_from_the_future_does_not_stop_the_background_import(tmp_path, cfg, user_home):
    # A clock set ahead once (a VM's, a dead battery's) left the last start's
    # stamp in the future: every later session start skipped the import until
    # the clock caught up, days or years on.
    cfg.import_sessions = True
    try:
        assert keep.start(cfg, "hermes", now=2_000_000_000.0) is not None  # in 2033
        assert keep.start(cfg, "hermes", now=1_800_000_000.0) is not None  # the clock put right
        assert keep.start(cfg, "hermes", now=1_800_000_000.0 + 60) is None  # and then once a while again
    finally:
        for proc in keep._started:
            proc.wait(timeout=60)


def wait_for(check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    return None


def test_a_session_start_imports_the_finished_sessions_in_the_background(tmp_path, vault, user_home):
    codex_home = user_home / ".codex"
    shifted("codex", codex_home / "sessions", dt.timedelta(hours=2))
    shifted("codex", codex_home / "sessions" / "open", dt.timedelta(minutes=5), session="still-open-session")
    march = tmp_path / "march"
    env = {
        **os.environ,
        "MARCH_HOME": str(march),
        "MARCH_MEMORY_ROOT": str(vault.root),
        "MARCH_DAEMON": "0",
        "MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"),
        "MARCH_IMPORT_SESSIONS": "1",
    }
    event = {"session_id": "new-one", "hook_event_name": "SessionStart", "source": "startup", "cwd": str(tmp_path)}
    started = time.monotonic()
    done = subprocess.run([MARCHDB, "hook", "codex"], input=json.dumps(event), capture_output=True, text=True, env=env)
    answered = time.monotonic() - started
    assert done.returncode == 0 and "agent_profile" in done.stdout
    said = wait_for(lambda: [line for line in logfile.read_log(march, keep.LOG) if "codex:" in line])
    assert said and "created 1" in said[0] and "(1 still going on)" in said[0], said
    (memory,) = [p for p in vault.root.rglob("*.md")]
    text = memory.read_text()
    assert PROMPTS[0] in text and "by: " not in text
    runs = [json.loads(line) for line in (march / "logs" / "lifecycle.log").read_text().splitlines()]
    assert [(r["kind"], r["by"], r["since"]) for r in runs] == [("codex", "session-start", keep.SINCE)]
    assert any("in the background" in line for line in logfile.read_log(march, "hooks"))
    # The hook answered on its own time: it never waited for the import (said, not timed as a test).
    print(f"hook answered in {answered:.2f} s")


def test_install_reminds_of_the_setting_for_a_host_whose_sessions_an_import_reads(tmp_path, user_home):
    out = cli(tmp_path, "install", "gemini", "--json")
    assert out.exit_code == 0, out.output
    (result,) = json.loads(out.stdout)["results"]
    assert any("marchdb import gemini" in n and "importSessions" in n for n in result["notes"])
    on = cli(tmp_path, "install", "codex", "--json", env={"MARCH_IMPORT_SESSIONS": "1"})
    assert any("importSessions is on" in n for n in json.loads(on.stdout)["results"][0]["notes"])
    cursor = cli(tmp_path, "install", "cursor", "--json")
    assert not any("importSessions" in n for n in json.loads(cursor.stdout)["results"][0]["notes"])


def test_the_engine_honours_the_setting_of_the_hook_it_answers(tmp_path, vault, user_home, monkeypatch):
    """The warm engine answers a relayed SessionStart with the hook's settings: its
    environment's MARCH_IMPORT_SESSIONS, though the engine started without it."""
    from marchdb.config import load_config
    from marchdb.engine import client, daemon
    from marchdb.hosts import hook, relay
    from marchdb.store import Store

    shifted("codex", user_home / ".codex" / "sessions", dt.timedelta(hours=2))
    home = tmp_path / "march"
    for key, value in (("MARCH_HOME", str(home)), ("MARCH_MEMORY_ROOT", str(vault.root))):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MARCH_DAEMON", raising=False)
    engine = daemon.Engine(load_config(home=home, root=vault.root, env={}), handlers=relay.HANDLERS)
    assert engine.cfg.import_sessions is False
    engine.store = Store(engine.cfg, use_model=False)
    try:
        event = {"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup", "cwd": str(tmp_path)}
        monkeypatch.setenv("MARCH_IMPORT_SESSIONS", "1")
        args = hook.relay_args("codex", [], json.dumps(event).encode(), {})
        line = {"v": client.PROTOCOL, "op": hook.HOOK_EVENT, "args": args, "identity": None, "deadline": None}
        answer = engine.answer(json.dumps(line).encode())
        assert answer["ok"] and "agent_profile" in answer["data"]["stdout"], answer
        said = wait_for(lambda: [line for line in logfile.read_log(home, keep.LOG) if "codex:" in line])
        assert said and "created 1" in said[0], said
    finally:
        for proc in keep._started:
            proc.wait(timeout=60)
        engine.store.close()


def test_import_help_names_every_host_an_import_reads():
    from typer.testing import CliRunner

    from marchdb.cli.main import app
    from marchdb.lifecycle.sources import HOST_KINDS

    out = CliRunner().invoke(app, ["import", "--help"], terminal_width=400).stdout
    assert all(f" {kind} " in out.replace("(", " ").replace(")", " ") for kind in HOST_KINDS), out
