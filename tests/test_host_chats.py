"""Importing the sessions of Codex CLI, Gemini CLI, Qwen Code, pi, opencode, Kilo, OpenClaw, Hermes Agent and the Cline CLI.

The files under ``tests/data/chats/HOST/`` were written by the real host
programs, run headless by ``tests/hostchats.py`` against the fake model
server (``python tests/hostchats.py HOST`` makes them again; ``MADE.txt``
names the version): one session of two prompts, the first answered with a
line of text and a tool call, with marchdb-shaped context injected by a
stand-in hook. Each test imports that folder as the host left it.
``test_real_host_sessions_import`` runs the programs themselves when they
are installed (``.ci/run`` installs them into ``.hosts/``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import apsw
import pytest
from hostchats import DATA, INJECTED_HINT, PROMPTS, TOOL_CALL, TOOL_TEXT, make, program

from marchdb.index import db
from marchdb.lifecycle import importing, injected

HOSTS = ("claude-code", "codex", "gemini", "qwen", "pi", "opencode", "kilo", "openclaw", "hermes")


def fixture(host: str, tmp_path: Path) -> Path:
    """A copy of the committed sessions of ``host`` (an import only reads, but the copy proves it)."""
    dest = tmp_path / "sessions" / host
    shutil.copytree(DATA / host, dest)
    return dest


def imported(store, kind: str, source: Path | None) -> list[dict]:
    done = store.import_(kind, source, apply=True, embed=False)
    assert done["problems"] == 0, done["items"]
    return [r for r in done["items"] if r["action"] == "created"]


def memory_of(store, row: dict) -> tuple[dict, str]:
    found = db.rows(
        store.con,
        "SELECT m.*, a.source FROM memory_index m JOIN memory_attrs a ON a.rid = m.rid WHERE m.id = ?",
        (row["id"],),
    )[0]
    return found, Path(row["path"]).read_text(encoding="utf-8")


@pytest.mark.parametrize("host", HOSTS)
def test_a_real_session_becomes_one_memory_and_nothing_twice(host, vault, store, tmp_path):
    source = fixture(host, tmp_path)
    plan = store.import_(host, source)
    assert plan["created"] == 1 and plan["problems"] == 0, plan["items"]
    assert not any(Path(vault.root).rglob("*.md")), "a dry run writes nothing"
    (row,) = imported(store, host, source)
    mem, text = memory_of(store, row)
    body = text.split("\n---\n", 1)[1]
    tags = json.loads(mem["tags_json"])
    assert tags[0] == host and mem["source"].startswith(f"{host}:")
    if host != "openclaw":  # OpenClaw works in a workspace of its own, not the user's folder
        assert "project/shopcart" in tags
    # What the person asked, in their words; the answer's text; the tool call as one line.
    assert PROMPTS[0] in body and PROMPTS[1] in body
    # What the person settled first ("let's use integer cents"), then what they asked.
    assert mem["description"].startswith("OK, let's use integer cents") and PROMPTS[0][:60] in mem["description"]
    assert "FAKE-REPLY" in body
    if host in ("claude-code", "codex", "gemini"):  # the fake model says it beside its call in these dialects only
        assert TOOL_TEXT in body
    # Left out: marchdb's own hints and profiles, the tool's result, the host's own context.
    assert INJECTED_HINT not in text and "[recall]" not in text and "agent_profile" not in text
    assert "Process exited" not in body and "Output: checking" not in body and "untrusted" not in body
    assert "environment_context" not in body and "session_context" not in body and "setting up the context" not in body
    # Idempotent: a second import creates nothing, and says why.
    again = store.import_(host, source, apply=True, embed=False)
    assert again["created"] == 0 and {r["detail"] for r in again["items"] if r["action"] == "skip"} >= {
        "imported already"
    }


def test_the_tool_call_is_one_line_and_its_result_is_left_out(vault, store, tmp_path):
    (row,) = imported(store, "codex", fixture("codex", tmp_path))
    _mem, text = memory_of(store, row)
    assert f"*[exec_command] {TOOL_CALL}*" in text
    assert text.count("checking") == 1  # the call, not its output


@pytest.mark.parametrize("host", HOSTS)
def test_the_path_is_optional_when_the_hosts_folder_is_known(host, vault, store, tmp_path, monkeypatch):
    home = tmp_path / "userhome"
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
    ):
        monkeypatch.delenv(key, raising=False)
    folder = importing.host_folder(host)
    with pytest.raises(Exception, match="sessions are not at"):
        store.import_(host, None)
    shutil.copytree(DATA / host, folder)
    plan = store.import_(host, None)
    assert plan["created"] == 1 and plan["path"] == str(folder)


def test_injected_context_is_cut_out_wherever_a_host_kept_it():
    hint = "[recall]\n- mem_a | score=0.71 | A | a\n- mem_b | score=0.52 | B | b"
    assert injected.without_injected(f"ask this\n\n{hint}") == "ask this"
    assert injected.without_injected(f"<hook_context>{hint}</hook_context>\n\nask this") == "ask this"
    assert (
        injected.without_injected(f"ask\n<qwen:user-prompt-submit-context>\n{hint}\n</qwen:user-prompt-submit-context>")
        == "ask"
    )
    assert injected.injected_only("[agent_profile]\nx\n\n[user_profile]\ny")
    assert not injected.injected_only("[recall] is a word I use\nsee above")
    assert injected.without_injected("a [recall]\nnot at a line start") == "a [recall]\nnot at a line start"


def test_claude_code_leaves_out_marchdbs_blocks_kept_bare_in_a_message_as_every_host_does(vault, store, tmp_path):
    # Claude Code keeps hook output as attachment lines; marchdb's blocks in a
    # user message's own text (a hook of an older build, a resumed session's
    # context) are cut out by the rule the other hosts' readers follow.
    from hostchats import PROFILE, RECALL

    source = fixture("claude-code", tmp_path)
    (session,) = source.rglob("*.jsonl")
    records = [json.loads(line) for line in session.read_text().splitlines()]
    asked = next(r for r in records if r["type"] == "user" and str(r["message"]["content"]).startswith("Should"))
    asked["message"]["content"] = f"{RECALL}\n\n{asked['message']['content']}"
    profile = dict(asked, uuid="c0ffee00-0000-4000-8000-000000000001", message={"role": "user", "content": PROFILE})
    records.insert(records.index(asked), profile)
    # A wrapper's name typed by the person, never closed, is their text (a hook's block is closed).
    typed = "Why does <system-reminder> show up in my prompt after each tool call?"
    question = dict(asked, uuid="c0ffee00-0000-4000-8000-000000000002", message={"role": "user", "content": typed})
    records.insert(records.index(asked) + 1, question)
    session.write_text("".join(json.dumps(r) + "\n" for r in records))
    (row,) = imported(store, "claude-code", source)
    mem, text = memory_of(store, row)
    assert typed in text
    for held in (text, mem["name"], mem["description"]):
        assert INJECTED_HINT not in held and "[recall]" not in held and "[agent_profile]" not in held, held
    assert mem["name"].startswith("Should the cart service keep prices in cents")


@pytest.mark.parametrize("host", ["claude-code", "codex", "pi", "qwen", "gemini"])
def test_a_huge_file_a_fifo_and_a_link_are_refused_never_waited_on(host, vault, store, tmp_path, monkeypatch):
    source = fixture(host, tmp_path)
    (session,) = [p for p in source.rglob("*.jsonl")]
    folder = session.parent
    big = folder / (
        "rollout-big.jsonl" if host == "codex" else "session-big.jsonl" if host == "gemini" else "big.jsonl"
    )
    with open(big, "wb") as fh:
        fh.truncate(2 * 1024**3)  # a 2 GB session, sparse: nothing on disk
    fifo = folder / (
        "rollout-fifo.jsonl" if host == "codex" else "session-fifo.jsonl" if host == "gemini" else "fifo.jsonl"
    )
    os.mkfifo(fifo)
    link = folder / (
        "rollout-link.jsonl" if host == "codex" else "session-link.jsonl" if host == "gemini" else "link.jsonl"
    )
    link.symlink_to(session)
    out = store.import_(host, source)
    rows = {Path(r["origin"]).name: r for r in out["items"]}
    assert rows[big.name]["action"] == "problem" and "read up to" in rows[big.name]["detail"]
    assert rows[fifo.name]["action"] == "problem" and "not a regular file" in rows[fifo.name]["detail"]
    assert "2,147,483,648 bytes" in rows[big.name]["detail"]
    assert rows[link.name]["action"] == "problem" and "symlink" in rows[link.name]["detail"]
    assert rows[session.name]["action"] == "create"


@pytest.mark.parametrize("host", ["opencode", "kilo", "hermes", "openclaw"])
def test_a_store_that_is_a_link_a_fifo_or_no_sqlite_is_a_problem(host, vault, store, tmp_path):
    name = {"opencode": "opencode.db", "kilo": "kilo.db", "hermes": "state.db", "openclaw": "openclaw-agent.sqlite"}[
        host
    ]
    for make_it, why in (
        (lambda p: p.symlink_to(next((DATA / host).rglob(name))), "symlink"),
        (os.mkfifo, "not a regular file"),
        (lambda p: p.write_bytes(b"not a database at all" * 100), "SQLite"),
    ):
        folder = tmp_path / f"{host}-{why.split()[0]}"
        folder.mkdir()
        make_it(folder / name)
        out = store.import_(host, folder)
        assert out["problems"] == 1 and why in out["items"][0]["detail"], out["items"]


@pytest.mark.parametrize("host", ["opencode", "kilo", "hermes", "openclaw"])
def test_reading_a_store_in_wal_mode_leaves_no_file_beside_it(host, vault, store, tmp_path):
    # The hosts keep their stores in WAL mode (the committed copies were
    # checkpointed into one file): SQLite opened one read-only and created
    # its -wal and -shm beside it, files in the host's folder that stayed there.
    source = fixture(host, tmp_path)
    db_file = next(p for p in source.rglob("*") if p.suffix in (".db", ".sqlite"))
    con = apsw.Connection(str(db_file))
    con.execute("PRAGMA journal_mode=WAL")
    con.close()  # the last connection folds the log in and removes -wal and -shm
    before = sorted(p.name for p in db_file.parent.iterdir())
    assert store.import_(host, source)["created"] == 1
    (row,) = imported(store, host, source)
    assert sorted(p.name for p in db_file.parent.iterdir()) == before

    # A log left without its -shm (a copy, a backup): a problem that says what to do, nothing created.
    writer = apsw.Connection(str(db_file))
    writer.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    writer.execute("CREATE TABLE marchdb_probe(x); INSERT INTO marchdb_probe VALUES (1)")
    copy = tmp_path / "copy" / db_file.relative_to(source)
    copy.parent.mkdir(parents=True)
    for suffix in ("", "-wal"):
        shutil.copyfile(f"{db_file}{suffix}", f"{copy}{suffix}")
    writer.close()
    out = store.import_(host, tmp_path / "copy")
    assert out["problems"] == 1 and "-shm" in out["items"][0]["detail"], out["items"]
    assert sorted(p.name for p in copy.parent.iterdir()) == sorted([copy.name, f"{copy.name}-wal"])


def test_a_store_the_host_holds_locked_says_to_import_again_and_a_socket_is_no_file(
    vault, store, tmp_path, monkeypatch
):
    # A store opencode is writing was reported as "another version of opencode?
    # a damaged file?", which sends a user looking for damage that is not there.
    import socket

    from marchdb.lifecycle import agentdbs

    monkeypatch.setattr(agentdbs, "BUSY_MS", 50)
    source = fixture("opencode", tmp_path)
    holder = apsw.Connection(str(source / "opencode.db"))
    holder.execute("BEGIN EXCLUSIVE")
    try:
        (row,) = store.import_("opencode", source)["items"]
    finally:
        holder.close()
    assert row["action"] == "problem" and "damaged" not in row["detail"], row
    assert "import again" in row["detail"] and "opencode" in row["detail"], row

    sessions = fixture("pi", tmp_path)
    folder = next(sessions.rglob("*.jsonl")).parent
    monkeypatch.chdir(folder)  # a socket's path is bounded (108 bytes): bound by its name here
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock.jsonl")
        rows = {Path(r["origin"]).name: r for r in store.import_("pi", sessions)["items"]}
    assert "not a regular file" in rows["sock.jsonl"]["detail"], rows["sock.jsonl"]


@pytest.mark.parametrize(
    ("host", "table", "column"),
    [
        ("opencode", "session", "title"),
        ("hermes", "sessions", "title"),
        ("openclaw", "transcript_events", "session_id"),
    ],
)
def test_a_session_whose_title_is_not_utf8_is_a_problem_and_the_rest_imports(
    host, table, column, vault, store, tmp_path
):
    # The list of a store's sessions was decoded in one go: one title (or id)
    # that is not UTF-8 ended the whole import with a UnicodeDecodeError
    # (import ALL and the background import of a session's start too).
    source = fixture(host, tmp_path)
    db_file = next(p for p in source.rglob("*") if p.suffix in (".db", ".sqlite"))
    con = apsw.Connection(str(db_file))
    key = "rowid" if table == "transcript_events" else "id"
    with con:
        con.execute(f"CREATE TEMP TABLE copied AS SELECT * FROM {table}")
        if key == "id":
            con.execute("UPDATE copied SET id = id || '-copy'")
        con.execute(f"UPDATE copied SET {column} = CAST(x'fffe41' AS TEXT)")
        con.execute(f"INSERT INTO {table} SELECT * FROM copied")
    con.close()
    out = store.import_(host, source)
    assert out["created"] == 1, out["items"]
    (bad,) = [r for r in out["items"] if r["action"] == "problem"]
    assert "not UTF-8" in bad["detail"], bad


def test_a_half_written_last_line_is_said_and_the_rest_imported(vault, store, tmp_path):
    source = fixture("pi", tmp_path)
    (session,) = source.rglob("*.jsonl")
    with open(session, "a", encoding="utf-8") as fh:
        fh.write('{"type":"message","id":"zz","parentId":')
    (row,) = [r for r in store.import_("pi", source)["items"] if r["action"] == "create"]
    assert any("not JSON" in w and "cut short" in w for w in row["warnings"])


@pytest.mark.parametrize("host", HOSTS)
def test_real_host_sessions_import(host, vault, store, tmp_path):
    """The real program writes a session now, and it imports as the committed copy does."""
    if program(host) is None:
        pytest.skip(f"{host} is not installed in .hosts/ (.ci/run installs it)")
    folder = make(host, tmp_path / "run")
    (row,) = imported(store, host, folder)
    _mem, text = memory_of(store, row)
    assert PROMPTS[1] in text and INJECTED_HINT not in text


def secret_prompt() -> tuple[str, list[str]]:
    """A prompt holding fabricated secrets of several kinds (``test_redact.fabricated``:
    made at run time, none in the repository), and the secrets."""
    from test_redact import fabricated

    wanted = ("github token", "openai key", "aws access key", "slack token", "stripe key", "jwt", "password")
    picked = {}
    for kind, secret, sentence in fabricated():
        if (
            kind in wanted
            and kind not in picked
            and '"' not in sentence
            and "\\" not in sentence
            and "\n" not in sentence
        ):
            picked[kind] = (secret, sentence)
    assert len(picked) == len(wanted)
    text = "Deploy notes, keep them: " + "; ".join(s for _secret, s in picked.values()) + ". We settled on cents."
    return text, [secret for secret, _s in picked.values()]


def with_secrets(host: str, source: Path, text: str) -> None:
    """The committed session with its second prompt replaced by ``text`` (in place)."""
    if host in ("opencode", "kilo", "hermes", "openclaw"):
        import apsw  # its SQLite is new enough for OpenClaw's schema (octet_length)

        (file,) = [p for p in source.rglob("*") if p.suffix in (".db", ".sqlite")]
        con = apsw.Connection(str(file))
        tables = [
            r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%'")
        ]
        for table in tables:
            for col in [r[1] for r in con.execute(f"PRAGMA table_info({table})") if r[2].upper() == "TEXT"]:
                con.execute(f"UPDATE {table} SET {col} = replace({col}, ?, ?)", (PROMPTS[1], text))
        con.close()
        return
    for file in [*source.rglob("*.jsonl"), *source.rglob("*.messages.json")]:
        file.write_text(file.read_text(encoding="utf-8").replace(PROMPTS[1], text), encoding="utf-8")


def everything_written(vault_root: Path, home: Path) -> bytes:
    """Every byte of the vault, marchdb's home (the index and its WAL, the logs) and what the CLI printed."""
    blobs = []
    for folder in (vault_root, home):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                blobs.append(path.read_bytes())
    return b"\n".join(blobs)


@pytest.mark.parametrize("host", (*HOSTS, "cline"))
def test_secrets_in_a_session_reach_neither_the_vault_nor_the_index_nor_the_logs(host, tmp_path):
    from typer.testing import CliRunner

    from marchdb.cli.main import app

    source = fixture(host, tmp_path)
    text, secrets = secret_prompt()
    with_secrets(host, source, text)
    assert all(s.encode() in everything_written(source, source) for s in secrets)  # the session holds them
    vault_root, home = tmp_path / "vault", tmp_path / "home"
    vault_root.mkdir()
    base = ["--home", str(home), "--root", str(vault_root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    runner = CliRunner()
    dry = runner.invoke(app, [*base, "import", host, str(source)], env=env)
    done = runner.invoke(app, [*base, "import", host, str(source), "--apply", "--no-embed"], env=env)
    assert done.exit_code == 0, done.output
    sessions = 2 if host == "cline" else 1  # the Cline CLI's fixture: a session per prompt
    assert f"created {sessions}" in done.stdout and "secrets kept out of the memory" in done.stdout
    search = runner.invoke(app, [*base, "search", "cents"], env=env)
    written = everything_written(vault_root, home) + (dry.output + done.output + search.output).encode()
    for secret in secrets:
        assert secret.encode() not in written, secret[:12]
    assert b"[redacted: github token]" in written and b"We settled on cents." in written


# ---------------------------------------------------------------- the Cline CLI
# A session resumes only in its interactive mode (a terminal): the fixture is two sessions, one per prompt.


def test_cline_cli_sessions_become_one_memory_each_and_nothing_twice(vault, store, tmp_path):
    source = fixture("cline", tmp_path)
    plan = store.import_("cline", source)
    assert plan["created"] == 2 and plan["problems"] == 0, plan["items"]
    rows = imported(store, "cline", source)
    (asked,) = [r for r in rows if PROMPTS[0][:40] in memory_of(store, r)[1]]
    mem, text = memory_of(store, asked)
    body = text.split("\n---\n", 1)[1]
    assert json.loads(mem["tags_json"]) == ["cline", "project/shopcart"] and mem["source"].startswith("cline:")
    # What was typed, without the CLI's <user_input> wrapper; the answer beside the tool call and
    # the call as one line; the tool's result left out.
    assert PROMPTS[0] in body and "<user_input" not in body
    assert TOOL_TEXT in body and f"*[run_commands] {TOOL_CALL}*" in body and body.count("checking") == 1
    assert "FAKE-REPLY" in body and INJECTED_HINT not in text
    (settled,) = [r for r in rows if r is not asked]
    assert memory_of(store, settled)[0]["description"].startswith("OK, let's use integer cents")
    again = store.import_("cline", source, apply=True, embed=False)
    assert again["created"] == 0 and {r["detail"] for r in again["items"]} == {"imported already"}


def test_cline_cli_sessions_are_found_where_the_cli_keeps_them(vault, store, tmp_path, monkeypatch):
    home = tmp_path / "userhome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLINE_DIR", raising=False)
    folder = importing.host_folder("cline")
    assert folder == home / ".cline" / "data" / "sessions"
    with pytest.raises(Exception, match="sessions are not at"):
        store.import_("cline", None)
    shutil.copytree(DATA / "cline", folder)
    assert store.import_("cline", None)["created"] == 2
    monkeypatch.setenv("CLINE_DIR", str(tmp_path / "elsewhere"))
    assert importing.host_folder("cline") == tmp_path / "elsewhere" / "data" / "sessions"


def test_a_cline_session_that_is_a_link_or_too_big_is_a_problem_and_the_rest_imports(vault, store, tmp_path):
    source = fixture("cline", tmp_path)
    first, second = sorted(source.rglob("*.messages.json"))
    outside = tmp_path / "outside.json"
    outside.write_bytes(first.read_bytes())
    first.unlink()
    first.symlink_to(outside)
    second.write_text('{"messages": [' + "[" * 100_000 + "]}", encoding="utf-8")  # nested past any parser's depth
    done = store.import_("cline", source, apply=True, embed=False)
    assert done["created"] == 0 and done["problems"] == 2, done["items"]
    assert outside.read_bytes() == (DATA / "cline" / first.relative_to(source)).read_bytes()


def test_real_cline_cli_sessions_import(vault, store, tmp_path):
    if program("cline") is None:
        pytest.skip("cline is not installed in .hosts/ (.ci/run installs it)")
    folder = make("cline", tmp_path / "run")
    rows = imported(store, "cline", folder)
    texts = [memory_of(store, r)[1] for r in rows]
    assert len(rows) == 2 and any(PROMPTS[1] in t for t in texts) and not any(INJECTED_HINT in t for t in texts)
