"""The CLI through typer's CliRunner: --json everywhere, errors on stderr."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.config import load_config
from marchdb.errors import InvalidInput, ModelError
from marchdb.store import Store


@pytest.fixture
def cli(tmp_path, vault):
    runner = CliRunner()

    def invoke(*args, model: str | None = None, input: str | None = None):
        base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
        if model:
            base += ["--model", model]
        return runner.invoke(app, [*base, *args], input=input, env={"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")})

    return invoke


def js(result) -> dict:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_sync_status_doctor_json(cli, vault):
    vault.memory("a.md", "mem_a")
    vault.write("bad.md", "---\nid: [x\n---\n")
    vault.memory("d1.md", "mem_dup")
    vault.memory("d2.md", "mem_dup")
    report = js(cli("sync", "--no-embed", "--json"))
    for key in ("scanned", "added", "updated", "moved", "removed", "unchanged", "conflicts", "problems", "seconds"):
        assert key in report
    assert (report["scanned"], report["added"], report["conflicts"]) == (4, 1, 1)
    status = js(cli("status", "--json"))
    assert status["memories"] == 1 and status["conflicts"] == 1
    assert {"index_path", "memory_root", "home"} <= set(status)
    doctor = js(cli("doctor", "--json"))
    kinds = {p["kind"] for p in doctor["problems"]}
    assert {"parse_error", "duplicate_id"} <= kinds
    assert all(p["advice"] for p in doctor["problems"])
    text = cli("doctor")
    assert "duplicate_id" in text.stdout and "give all but one" in text.stdout
    # A memory root that went away is a problem, not a side note.
    vault.root.rename(vault.root.with_name("moved"))
    text = cli("doctor")
    assert "missing_root" in text.stdout and "no problems" not in text.stdout
    # So is a root marchdb refuses: it printed the refusal as a note, then "no problems".
    refused = CliRunner().invoke(app, ["--home", str(vault.root.parent / "home"), "--root", "/usr", "doctor"])
    assert "refused_root (1)" in refused.stdout and "no problems" not in refused.stdout, refused.output


def test_a_missing_model_is_said_once(cli, vault):
    vault.memory("a.md", "mem_a", name="Context cache ordering", description="prefix cache", tags=["cache"])
    for args in (("sync",), ("recall", "Context cache ordering"), ("context", "cache ordering")):
        said = cli(*args).stderr
        assert said.count("none.gguf does not exist") == 1, (args, said)


def test_open_ok_not_found_conflict(cli, vault):
    vault.memory("a.md", "mem_a", body="hello body")
    vault.memory("d1.md", "mem_dup")
    vault.memory("d2.md", "mem_dup")
    cli("sync", "--no-embed")
    ok = js(cli("open", "mem_a", "--json"))
    assert ok["status"] == "ok" and "hello body" in ok["markdown"]
    assert "hello body" in cli("open", "mem_a").stdout
    missing = cli("open", "mem_nope", "--json")
    assert missing.exit_code == 5 and json.loads(missing.stdout)["status"] == "not_found"
    conflict = cli("open", "mem_dup", "--json")
    data = json.loads(conflict.stdout)
    assert conflict.exit_code == 6 and data["status"] == "conflict" and len(data["paths"]) == 2


def test_sql_json_and_table(cli, vault):
    vault.memory("a.md", "mem_a")
    cli("sync", "--no-embed")
    data = js(cli("sql", "SELECT id, status FROM memory_index", "--json"))
    assert data == {"columns": ["id", "status"], "rows": [{"id": "mem_a", "status": "active"}], "truncated": False}
    empty = js(cli("sql", "SELECT id FROM memory_index WHERE 0", "--json"))
    assert empty == {"columns": ["id"], "rows": [], "truncated": False}
    assert "vec_version" in js(cli("sql", "SELECT vec_version() AS vec_version", "--json"))["columns"]
    bad = cli("sql", "SELEC nonsense")
    assert bad.exit_code != 0 and "SQL error" in bad.stderr
    for sneaky in (
        "DELETE FROM memory_index",
        "PRAGMA query_only=0; DELETE FROM memory_index",
        "ATTACH ':memory:' AS x",
        "DROP VIEW diag_summary",
    ):
        refused = cli("sql", sneaky)
        assert refused.exit_code == 2 and "read-only" in refused.stderr, sneaky
    assert js(cli("sql", "PRAGMA user_version", "--json"))["rows"]  # asking is fine
    assert len(js(cli("sql", "SELECT id FROM memory_index", "--json"))["rows"]) == len(data["rows"])
    assert cli("sql", "DELETE FROM recall_log", "--write").exit_code == 0


def test_rebuild(cli, vault):
    vault.memory("a.md", "mem_a")
    cli("sync", "--no-embed")
    data = js(cli("rebuild", "--no-embed", "--json"))
    assert data["added"] == 1


def test_save_search_open_round_trip(cli, vault):
    created = js(
        cli(
            "save",
            "--name",
            "Deploy day",
            "--description",
            "We deploy on Tuesdays",
            "--tag",
            "Process",
            "--body",
            "Never on Fridays.",
            "--json",
        )
    )
    assert created["status"] == "created" and created["id"].startswith("mem_")
    found = js(cli("search", "Fridays", "--json"))
    assert found["results"][0]["id"] == created["id"]
    updated = js(cli("save", "--id", created["id"], "--json", input="New body from stdin\n"))
    assert updated["status"] == "updated"
    assert "New body from stdin" in js(cli("open", created["id"], "--json"))["markdown"]
    bad = cli("save", "--name", " ", "--description", "d", "--tag", "x", "--body", "b")
    assert bad.exit_code == 2 and bad.stderr.startswith("error:") and len(bad.stderr.strip().splitlines()) == 1
    # A memory that replaces it: the old one says so when opened.
    newer = js(
        cli(
            "save",
            "--name",
            "Deploy day now",
            "--description",
            "We deploy on Thursdays",
            "--tag",
            "process",
            "--body",
            "Thursdays.",
            "--supersedes",
            created["id"],
            "--json",
        )
    )
    assert js(cli("open", created["id"], "--json"))["superseded_by"] == [newer["id"]]
    assert f"note: superseded by {newer['id']}" in cli("open", created["id"]).stderr
    gone = cli("save", "--id", newer["id"], "--supersedes", "mem_nope")
    assert gone.exit_code == 5 and "no memory has id mem_nope" in gone.stderr
    assert js(cli("save", "--id", newer["id"], "--supersedes", "", "--json"))["status"] == "updated"
    assert js(cli("open", created["id"], "--json"))["superseded_by"] == []


def test_an_argument_given_as_null_takes_its_default(cli, vault, store):
    # JSON's null for an optional argument: "trigger": null was "unexpected
    # ValueError ... this is a bug" (and, through the engine, "the request is
    # not JSON"); "limit": null was refused by the store; "force": null passed
    # None where true or false is meant.
    vault.memory("a.md", "mem_a", name="Context cache ordering", description="prefix cache layers")
    data = js(cli("call", "memory_recall", '{"text": "Context cache ordering", "trigger": null, "record_only": null}'))
    assert data["trigger"] == "user" and [h["id"] for h in data["hints"]] == ["mem_a"]
    found = js(cli("call", "memory_search", '{"query": "cache", "limit": null, "include_archived": null}'))
    assert [r["id"] for r in found["results"]] == ["mem_a"]
    assert store.recall("Context cache ordering", trigger=None).trigger == "user"  # the Python API alike


def test_call_reads_the_arguments_of_any_valid_save_from_stdin(cli, vault):
    # `marchdb call memory_save -` read stdin up to a body's 64 KB: the JSON of
    # a body within the bound (escaped: a CJK character is 6 bytes as \uXXXX)
    # was refused, "a memory arguments is limited to 65,536 bytes".
    import json

    from marchdb.vault.changes import MAX_BODY_BYTES

    body = ("规则说明。" * 5000)[: MAX_BODY_BYTES // 3]
    args = {"name": "Long Chinese note", "description": "a long body", "body": body, "tags": ["t"]}
    assert len(body.encode()) <= MAX_BODY_BYTES < len(json.dumps(args))
    assert js(cli("call", "memory_save", "-", input=json.dumps(args)))["status"] == "created"
    too_big = cli("call", "memory_save", "-", input=" " * (8 * 1024 * 1024 + 1))
    assert too_big.exit_code == 2 and too_big.stderr.startswith(
        "error: the arguments on stdin are over 8,388,608 bytes"
    )


def test_recall_json_shape_bm25_fallback(cli, vault):
    vault.memory("a.md", "mem_a", name="Context cache ordering", description="prefix cache", tags=["cache"])
    for i in range(5):
        vault.memory(f"o{i}.md", f"mem_o{i}", name=f"Gardening {i}", description="tomatoes")
    cli("sync")
    data = js(cli("recall", "Context cache ordering", "--trigger", "assistant", "--explain", "--json"))
    assert data["mode"] == "bm25" and data["warning"]
    assert [h["id"] for h in data["hints"]] == ["mem_a"]
    assert {"id", "score", "name", "description", "signals"} <= set(data["hints"][0])
    assert "display" in data and "candidates" in data
    assert all("reason" in c for c in data["candidates"])


def test_record_only_from_the_cli_records_without_injecting_or_suppressing(cli, vault):
    vault.memory("a.md", "mem_a", name="Context cache ordering", description="prefix cache", tags=["cache"])
    for i in range(5):
        vault.memory(f"o{i}.md", f"mem_o{i}", name=f"Gardening {i}", description="tomatoes")
    cli("sync")
    for run in ("r1", "r2"):  # recorded in r1: not suppressed in r2
        out = cli("recall", "Context cache ordering", "--run", run, "--record-only").stdout
        assert out.startswith("recorded for this run, not injected:\n- mem_a | score=") and "[recall]" not in out
    data = js(cli("recall", "Context cache ordering", "--run", "r3", "--json"))
    assert [h["id"] for h in data["hints"]] == ["mem_a"]


def test_context_has_profile_blocks(cli, vault):
    data = js(cli("context", "anything", "--json"))
    assert data["text"].startswith("[agent_profile]") and "[user_profile]" in data["text"]


def test_config_errors_are_one_line(cli, tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.json").write_text("{not json")
    result = cli("status")
    assert result.exit_code == 3 and "config.json is not valid JSON" in result.stderr
    # A template left unfilled: it meant the default vault without a word.
    (tmp_path / "home" / "config.json").write_text('{"memoryRoot": ""}')
    unfilled = CliRunner().invoke(app, ["--home", str(tmp_path / "home"), "status"], env={"MARCH_MEMORY_ROOT": ""})
    assert unfilled.exit_code == 3 and "memoryRoot in config.json must be a path string" in unfilled.stderr
    (tmp_path / "home" / "config.json").unlink()
    (tmp_path / "home").rmdir()
    (tmp_path / "home").write_text("a file where the home goes")
    result = cli("status")
    assert result.exit_code == 3 and "is a file, not a folder" in result.stderr


def test_a_misspelt_setting_is_an_error_and_an_unknown_key_a_notice(cli, tmp_path):
    # "memoryroot" was ignored without a word: memories went to the default vault.
    (tmp_path / "home").mkdir()
    config = tmp_path / "home" / "config.json"
    config.write_text(json.dumps({"memoryroot": str(tmp_path / "elsewhere")}))
    result = cli("status")
    assert result.exit_code == 3 and "did you mean 'memoryRoot'?" in result.stderr
    config.write_text(json.dumps({"recalMinScore": 0.6}))
    assert "did you mean 'recallMinScore'?" in cli("status").stderr
    config.write_text(json.dumps({"colour": "blue", "_comment": "mine", "$schema": "x"}))
    result = cli("status")
    assert result.exit_code == 0 and "'colour' is not a marchdb setting, ignored" in result.stderr
    assert "_comment" not in result.stderr and "$schema" not in result.stderr


def test_model_commands_with_default_model(cli, vault, default_model_path):
    info = js(cli("model", "info", "--json", model=str(default_model_path)))
    # The JSON shapes are the library's (LlamaEmbedder.info, selftest.check_report, build.build_report): pinned.
    assert list(info) == ["path", "bytes", "dim", "pooling", "fingerprint", "n_ctx", "prefixes", "extra_buffers"]
    assert info["dim"] == 384 and info["pooling"] == "mean" and info["fingerprint"]
    assert info["path"] == str(default_model_path) and info["bytes"] == default_model_path.stat().st_size
    assert info["prefixes"] == {"query": "query: ", "passage": "passage: "}
    check = js(cli("model", "check", "--json", model=str(default_model_path)))
    assert list(check) == ["ok", "fingerprint", "checks", "native_check", "forgiven"]
    assert check["forgiven"] == 0  # no text the model crashed on to give back
    assert check["fingerprint"] == info["fingerprint"] and check["native_check"].startswith("usable on this CPU")
    assert all(list(row) == ["name", "related", "unrelated", "ok", "detail"] for row in check["checks"])
    assert check["ok"] is True
    text = cli("model", "check", model=str(default_model_path))  # every row printed, reference included
    assert text.exit_code == 0 and "model check passed" in text.stdout
    # one row per check, and first the check of llama.cpp on this CPU (in a separate process)
    assert len([line for line in text.stdout.splitlines() if line.startswith("ok ")]) == len(check["checks"]) + 1


def test_model_build_says_what_it_built(tmp_path, default_model_path):
    # Already built (the session's model): the file is checked and returned, not rebuilt.
    env = {"MARCH_MODELS_DIR": str(default_model_path.parent)}
    before = default_model_path.stat().st_mtime_ns
    built = js(CliRunner().invoke(app, ["--home", str(tmp_path / "home"), "model", "build", "e5", "--json"], env=env))
    assert list(built) == ["recipe", "path", "bytes", "seconds"]
    assert built["recipe"] == "e5" and built["path"] == str(default_model_path)
    assert built["bytes"] == default_model_path.stat().st_size and built["seconds"] >= 0
    assert default_model_path.stat().st_mtime_ns == before
    text = CliRunner().invoke(app, ["--home", str(tmp_path / "home"), "model", "build", "e5"], env=env)
    assert text.exit_code == 0 and text.stdout.startswith(f"e5: {default_model_path} (") and "MB) in " in text.stdout


def test_recall_with_default_model(cli, mixed_vault, default_model_path):
    cli("sync", model=str(default_model_path))
    data = js(cli("recall", "狗在吃什么药？", "--json", "--explain", model=str(default_model_path)))
    assert data["mode"] == "hybrid"
    # Cross-lingual: ranked first, though e5-small's cross-lingual cosine is
    # too weak here to pass the threshold on meaning alone.
    assert data["candidates"][0]["id"] == "mem_dog"
    text = cli("recall", "why does the prompt cache keep missing?", model=str(default_model_path)).stdout
    assert text.startswith("[recall]\n- mem_cache | score=")


def _live_models() -> set[int]:
    import gc

    from marchdb.embedding.llama import LlamaEmbedder

    return {id(o) for o in gc.get_objects() if isinstance(o, LlamaEmbedder) and getattr(o, "_model", None)}


def test_a_command_frees_its_model_when_it_ends(cli, mixed_vault, default_model_path):
    # A program running commands in its own process (CliRunner, a script)
    # kept every command's llama.cpp buffers (about 1 GB) until a full
    # garbage collection: the test workers grew past 14 GB.
    before = _live_models()
    assert cli("recall", "why does the prompt cache keep missing?", model=str(default_model_path)).exit_code == 0
    assert _live_models() - before == set()


def test_a_store_frees_the_model_it_loaded_and_loads_it_again_when_used(mixed_vault, default_model_path):
    store = Store(root=mixed_vault.root, home=mixed_vault.root.parent / "home", model=str(default_model_path))
    with store:
        assert store.recall("why does the prompt cache keep missing?").mode == "hybrid"
        model = store.loaded_embedder()
    assert model is not None and store.loaded_embedder() is None
    with pytest.raises(ModelError, match="closed"):
        model.embed(["a text"], "query")
    with store:  # used again after close: the model comes back
        assert store.recall("why does the prompt cache keep missing?").mode == "hybrid"


def test_missing_configured_root_is_an_error_and_never_empties_the_index(cli, mixed_vault, tmp_path):
    assert "5 added" in cli("sync", "--no-embed").stdout
    away = mixed_vault.root.with_name("vault.away")
    mixed_vault.root.rename(away)  # an unmounted drive, a moved folder
    result = cli("sync", "--no-embed")
    assert result.exit_code == 3 and "does not exist" in result.stderr and "--root" in result.stderr
    assert not mixed_vault.root.exists()  # not created behind the user's back
    assert js(cli("status", "--json"))["memories"] == 5
    # (recall answers from the index as it was, with a notice that the root is missing: test_hostile.py)
    for args in (("search", "cache"), ("save", "--name", "x", "--description", "y", "--tag", "t", "--body", "z")):
        assert cli(*args).exit_code == 3, args
    assert not mixed_vault.root.exists()
    away.rename(mixed_vault.root)
    assert "0 removed" in cli("sync", "--no-embed").stdout


def test_demo_runs_end_to_end_in_a_throwaway_vault(tmp_path, default_model_path, monkeypatch):
    # The README's first command: saves, embeds and recalls in a temporary vault.
    monkeypatch.setenv("MARCH_HOME", str(tmp_path / "real-home"))
    monkeypatch.setenv("MARCH_MODELS_DIR", str(default_model_path.parent))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    result = CliRunner().invoke(app, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["saved"]) >= 3 and data["sync"]["embedded"] > 0
    assert any(r["hints"] for r in data["recall"])
    assert not (tmp_path / "real-home" / "March Memories").exists()  # the user's vault: untouched


def test_the_python_api_example_runs_as_written_and_twice(tmp_path, default_model_path, monkeypatch, capsys):
    # Pasted as it was, it needed a folder that did not exist, crashed without Claude Code's
    # sessions, and died on hints[0] the second time (the memory was suppressed by then).
    block = API_PAGE.read_text(encoding="utf-8").split("## An example", 1)[1].split("```python\n", 1)[1]
    code = block.split("```", 1)[0]
    monkeypatch.setenv("MARCH_MODELS_DIR", str(default_model_path.parent))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # no ~/.claude/projects here
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    for _ in range(2):
        exec(compile(code, "docs/python-api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "Deploy day" in out and "does not exist" in out


def test_the_readme_python_example_runs_on_the_vault_the_environment_names(tmp_path, mixed_vault, monkeypatch):
    block = README.read_text(encoding="utf-8").split("## Python API", 1)[1].split("```python\n", 1)[1]
    monkeypatch.setenv("MARCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MARCH_MEMORY_ROOT", str(mixed_vault.root))
    monkeypatch.setenv("MARCH_EMBED_MODEL", str(tmp_path / "none.gguf"))  # keyword recall: no model needed here
    scope: dict = {}
    exec(compile(block.split("```", 1)[0], "README.md", "exec"), scope)
    assert isinstance(scope["hints"], list)


def test_status_after_a_schema_rebuild_shows_the_files(cli, mixed_vault):
    cli("sync", "--no-embed")
    cli("sql", "UPDATE meta SET value = 'stale' WHERE key = 'schema_hash'", "--write")
    result = cli("status", "--json")
    assert result.exit_code == 0 and js(result)["memories"] == 5  # not 0 until the next sync


README = Path(__file__).resolve().parent.parent / "README.md"
API_PAGE = README.parent / "docs" / "python-api.md"
CLI_PAGE = README.parent / "docs" / "cli.md"


def _command_names(group, prefix: str = "") -> list[str]:
    import click

    names = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            names += _command_names(cmd, f"{prefix}{name} ")
        else:
            names.append(prefix + name)
    return names


def test_usage_errors_are_one_line_too(tmp_path):
    # A bad option or argument drew click's usage and a box over several lines.
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(tmp_path)}
    for args, said in (
        (["search", "deploy", "--contxt", "2"], "error: No such option: --contxt"),
        (["search", "a", "b"], "error: Got unexpected extra argument(s) (b); see `marchdb search --help`"),
        (["serve", "--idle", "abc"], "error: Invalid value for '--idle'"),
        (["nosuch"], "error: No such command 'nosuch'; see `marchdb --help`"),
    ):
        done = subprocess.run([marchdb, *args], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith(said), (args, done.stderr)
        assert done.stderr.count("\n") == 1 and not done.stdout, (args, done.stderr)


def test_every_command_is_in_the_readme():
    import typer.main

    text = README.read_text(encoding="utf-8")
    names = _command_names(typer.main.get_command(app))
    assert len(names) > 10
    missing = [n for n in names if f"marchdb {n}" not in text]
    assert not missing, f"commands not documented in the README: {missing}"


def test_the_exit_code_table_is_the_real_one():
    from marchdb.errors import EXIT_CODES

    section = CLI_PAGE.read_text(encoding="utf-8").split("## Exit codes", 1)[1].split("\n#", 1)[0]
    table = [(int(code), meaning) for code, meaning in re.findall(r"^\| (\d+) \| (.+?) \|$", section, re.M)]
    assert table == EXIT_CODES


def test_the_quick_path_takes_only_the_plain_forms():
    from marchdb.cli.entry import _quick_args

    assert _quick_args(["recall", "hi there", "--run", "r1", "--json"]) == (
        "memory_recall",
        {"text": "hi there", "run_id": "r1"},
        True,
    )
    assert _quick_args(["recall", "--trigger=assistant", "x", "--explain"])[1]["trigger"] == "assistant"
    assert _quick_args(["context", "--run", "r2"])[1] == {"run_id": "r2"}
    assert _quick_args(["recall", "x", "--run", "r3", "--conversation", "chat-1"])[1]["conversation"] == "chat-1"
    assert _quick_args(["context", "x", "--conversation=chat-2"])[1]["conversation"] == "chat-2"
    for other in (
        ["recall"],  # the CLI says what is missing
        ["recall", "a", "b"],
        ["recall", "--help"],
        ["recall", "x", "--run"],
        ["recall", "x", "--json=yes"],
        ["recall", "--", "x"],
        ["recall", "x", "--run", "a", "--run", "b"],
        ["context", "x", "--trigger", "user"],
    ):
        assert _quick_args(other) is None, other


def test_recall_and_context_take_a_project(cli, vault):
    for i in range(60):
        vault.memory(f"g{i}.md", f"mem_g{i}", name=f"Garden {i}", description="tomatoes", tags=["garden"])
    vault.memory("z.md", "mem_z", name="Zebra stripes", description="zebra stripes", tags=["project/zoo"])
    cli("sync", "--no-embed")
    data = js(cli("recall", "zebra stripes", "--project", "zoo", "--explain", "--json"))
    assert data["hints"][0]["id"] == "mem_z" and data["hints"][0]["signals"]["project_bonus"] > 0
    assert "project tag" in cli("recall", "zebra stripes", "--project", "zoo", "--explain").stdout
    hint = js(cli("context", "zebra stripes", "--project", "zoo", "--json"))["hints"][0]
    assert hint["id"] == "mem_z" and hint["signals"]["project_bonus"] > 0  # the project reached recall


def test_recall_context_and_the_generic_hook_take_a_conversation(cli, vault, tmp_path):
    for i in range(60):
        vault.memory(f"g{i}.md", f"mem_g{i}", name=f"Garden {i}", description="tomatoes", tags=["garden"])
    vault.memory("z.md", "mem_z", name="Zebra stripes", description="zebra stripes", tags=["zoo"])
    cli("sync", "--no-embed")
    hinted = lambda out: "mem_z" in out.stdout  # noqa: E731
    assert hinted(cli("recall", "zebra stripes", "--run", "a1", "--conversation", "chat-a"))
    assert not hinted(cli("recall", "zebra stripes", "--run", "a2", "--conversation", "chat-a"))  # held back
    assert hinted(cli("context", "zebra stripes", "--run", "b1", "--conversation", "chat-b"))  # another chat
    hook = cli("hook", "generic", "--run", "c1", "--conversation", "-chat-c", input="zebra stripes")
    assert hook.exit_code == 0 and hinted(hook)  # a value starting with '-' is still a value
    assert not hinted(cli("hook", "generic", "--run", "c2", "--conversation", "-chat-c", input="zebra stripes"))
    with Store(load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})) as s:
        runs = s.con.execute("SELECT run_id, conversation FROM runs ORDER BY seq").fetchall()
    assert runs == [("a1", "chat-a"), ("a2", "chat-a"), ("b1", "chat-b"), ("c1", "-chat-c"), ("c2", "-chat-c")]


def test_a_reader_that_goes_away_is_not_reported_as_a_bug(tmp_path, mixed_vault):
    # `marchdb open ID | head`: the pipe closes before marchdb has written.
    import os
    import subprocess
    import sys

    marchdb = str(Path(sys.executable).with_name("marchdb"))
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(mixed_vault.root)}
    env.update(MARCH_DAEMON="0", MARCH_EMBED_MODEL=str(tmp_path / "none.gguf"))
    for args in (["open", "mem_dog"], ["recall", "carprofen"]):
        read, write = os.pipe()
        os.close(read)
        done = subprocess.run([marchdb, *args], stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
        os.close(write)
        assert "bug" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_an_error_is_one_line_whatever_the_input_holds(cli, vault):
    result = cli("open", "a\nb\x1b[31m")
    said = [line for line in result.stderr.splitlines() if not line.startswith("note: ")]
    assert result.exit_code != 0 and len(said) == 1, result.stderr
    assert "\\n" in result.stderr and "\x1b" not in result.stderr


@pytest.mark.parametrize("command", ["recall", "context", "open", "search", "sql"])
def test_an_argument_that_is_not_utf8_is_refused_with_exit_2(cli, vault, command):
    # A shell passes caf\xe9 as a lone surrogate: it ended in "unexpected UnicodeEncodeError ... a bug".
    result = cli(command, "caf\udce9 deploy")
    assert result.exit_code == 2 and "is not valid Unicode" in result.stderr, result.stderr


def test_escape_sequences_never_reach_the_terminal(cli, vault):
    # A name written by hand (or imported) with an escape sequence cleared the screen and retitled the window.
    refused = cli("save", "--name", "Bell \x1b[2J name", "--description", "d", "--tag", "t", "--body", "b")
    assert refused.exit_code == 2 and "control character" in refused.stderr
    # ... and a direction override makes "\u202egnp.exe" read as "exe.png".
    refused = cli("save", "--name", "invoice \u202egnp.exe", "--description", "d", "--tag", "t", "--body", "b")
    assert refused.exit_code == 2 and "text-direction control" in refused.stderr
    # (YAML refuses a raw ESC; a double-quoted "\\e" is one.)
    vault.write(
        "esc.md", '---\nid: mem_esc\nname: "Deploy \\e]0;PWNED\\a day"\ndescription: tuesdays\ntags: [t]\n---\nBody.\n'
    )
    assert cli("sync", "--no-embed").exit_code == 0
    # A hint line drops them, for hosts and scripts too (the JSON data keeps the name, escaped).
    assert (
        json.loads(cli("recall", "Deploy day tuesdays", "--json").stdout)["text"].startswith("- mem_esc | score=")
        and "| Deploy ]0;PWNED day | tuesdays" in cli("recall", "Deploy day tuesdays").stdout
    )
    for args in (("search", "tuesdays"), ("sql", "SELECT name FROM memory_index"), ("open", "mem_esc")):
        out = cli(*args).stdout
        assert "\x1b" not in out and "\x07" not in out, (args, out)
    assert "Deploy \\x1b]0;PWNED\\x07 day" in cli("sql", "SELECT name FROM memory_index").stdout  # shown escaped


def test_file_names_print_safely_and_json_stays_valid(cli, vault, tmp_path):
    # doctor printed a name's escape sequence raw (recolouring the terminal, retitling the
    # window) and split a name with a newline over two lines.
    for name in ("evil\x1b]0;pwned\x07.md", "new\nline.md"):
        vault.write(name, "---\nid: [broken\n---\n")
    cli("sync", "--no-embed")
    out = cli("doctor").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "  evil\\x1b]0;pwned\\x07.md: frontmatter" in out and "  new\\nline.md: frontmatter" in out
    # Text that is not a command prints as it is, and --json stays JSON: "\xa0" (a no-break
    # space) in a profile once came out as the four characters \xa0, an invalid JSON escape.
    cli("context", "x")
    (tmp_path / "home/memory/profiles/agent.md").write_text("Answer\u00a0briefly 👩\u200d💻, \u202eevil, del\x7f.\n")
    text = cli("context", "x").stdout
    # (a control character is dropped on its way to a model: the profile is injected text)
    assert "Answer\u00a0briefly 👩\u200d💻" in text and "\\u202eevil, del." in text
    data = json.loads(cli("context", "x", "--json").stdout)
    assert data["agent_profile"].startswith("Answer\u00a0briefly 👩\u200d💻, \u202eevil, del.")
    assert "\u202e" not in cli("context", "x", "--json").stdout  # escaped in the JSON text


def test_sql_takes_one_statement_and_its_json_keeps_every_column(cli, vault):
    # "SELECT 1 AS a; SELECT 2 AS b, 3 AS c" mixed the rows under the first columns; 1e999 printed Infinity.
    several = cli("sql", "--json", "SELECT 1 AS a; SELECT 2 AS b, 3 AS c")
    assert several.exit_code == 2 and "one SQL statement per call" in several.stderr
    assert cli("sql", "SELECT 1 AS one; -- a comment after it").exit_code == 0
    # With --write the first statement ran and was kept before the second was refused.
    written = cli("sql", "--write", "CREATE TABLE mine(a); SELECT 1")
    assert written.exit_code == 2 and "nothing was changed" in written.stderr
    left = json.loads(cli("sql", "--json", "SELECT count(*) AS n FROM sqlite_master WHERE name = 'mine'").stdout)
    assert left["rows"] == [{"n": 0}]
    assert cli("sql", "--write", "CREATE TABLE mine(a); -- one statement").exit_code == 0
    data = json.loads(cli("sql", "--json", "SELECT 1 AS a, 2 AS a, 1e999 AS big").stdout)
    assert data["rows"] == [{"a": 1, "a:2": 2, "big": "inf"}]


def test_output_closed_early_ends_quietly_with_the_sigpipe_status(tmp_path):
    # `marchdb sql ... | head -1` ended with exit 1, which the README calls a bug.
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(tmp_path), "MARCH_DAEMON": "0"}
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    # ~350 KB of output, several times a pipe's 64 KiB: it cannot all be written before the close
    # (300,000 rows cost a second more, formatted before the first line is printed).
    rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 50000) SELECT x FROM c"
    proc = subprocess.Popen(
        [marchdb, "sql", "--max-rows", "0", rows], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout.readline().strip() == b"x"
    proc.stdout.close()  # as `head -1` does
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_save_says_what_is_related_and_takes_conflicts_with(cli, vault):
    vault.memory(
        "freeze.md",
        "mem_freeze",
        name="Release freeze on Fridays",
        description="No production releases on Fridays, the weekend has no on-call",
        tags=["release"],
    )
    for i in range(50):  # enough memories for word statistics to count
        vault.memory(f"g{i}.md", f"mem_g{i}", name=f"Garden note {i}", description=f"tomatoes and basil, bed {i}")
    new = [
        "save",
        "--name",
        "Friday releases allowed",
        "-d",
        "Production releases on Fridays are allowed again, on-call covers the weekend",
        "-t",
        "release",
        "--body",
        "Since the on-call rota covers weekends.",
    ]
    text = cli(*new)
    assert text.exit_code == 0 and "related (1): memories on the same subject" in text.stdout
    assert "mem_freeze | Release freeze on Fridays | No production releases" in text.stdout
    created = text.stdout.split()[1]
    assert f"marchdb save --id {created} --conflicts-with OLD_ID" in text.stdout
    updated = js(cli("save", "--id", created, "--conflicts-with", "mem_freeze", "--json"))
    assert updated["status"] == "updated" and updated["related"] == []
    doctor = js(cli("doctor", "--json"))
    assert {p["path"] for p in doctor["problems"] if p["kind"] == "contradiction"} == {
        "freeze.md",
        str(Path(updated["path"]).relative_to(vault.root)),
    }
    assert "contradiction (2): decide which holds" in cli("doctor").stdout
    recalled = js(cli("recall", "can we release to production on friday", "--json"))
    assert len(recalled["hints"]) == 2 and "contradict each other" in recalled["text"]
    assert "contradict each other" in cli("recall", "can we release to production on friday").stdout
    assert js(cli("save", "--id", created, "--conflicts-with", "", "--json"))["status"] == "updated"
    assert "contradiction" not in {p["kind"] for p in js(cli("doctor", "--json"))["problems"]}


COUNT = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c{limit}) SELECT {what} FROM c"
ENDLESS = COUNT.format(limit="", what="count(*)")


def test_sql_prints_a_bounded_number_of_rows_and_says_more_exist(cli):
    # 30 M rows ended in "unexpected MemoryError ... this is a bug".
    rows = COUNT.format(limit=" LIMIT 10005", what="x")
    out = cli("sql", rows)
    assert out.exit_code == 0 and out.stdout.split() == ["x", "-----", *[str(i) for i in range(1, 10_001)]]
    assert "the first 10,000 rows; more exist" in out.stderr and "--max-rows" in out.stderr
    data = js(cli("sql", "--json", rows))
    assert len(data["rows"]) == 10_000 and data["truncated"] is True
    assert js(cli("sql", "--json", "--max-rows", "3", rows))["rows"] == [{"x": 1}, {"x": 2}, {"x": 3}]
    every = js(cli("sql", "--json", "--max-rows", "0", rows))
    assert len(every["rows"]) == 10_005 and every["truncated"] is False
    exact = cli("sql", "--max-rows", "5", COUNT.format(limit=" LIMIT 5", what="x"))
    assert exact.exit_code == 0 and exact.stderr == ""  # five of five: nothing more to say


def test_sql_stops_a_statement_at_its_time_bound(cli, store):
    # An endless recursive CTE ran until killed.
    out = cli("sql", "--timeout", "0.5", ENDLESS)
    assert out.exit_code == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "ran for more than 0.5 s and was stopped" in out.stderr and "--timeout" in out.stderr
    with pytest.raises(InvalidInput, match="ran for more than 0.2 s"):
        store.query(ENDLESS, timeout=0.2)
    assert store.query("SELECT 1")[1] == [(1,)]  # the connection is fine after it
    assert cli("sql", "--timeout", "0", "SELECT 2 AS two").stdout.split() == ["two", "---", "2"]
    for bad in ("-1", "nan"):
        assert cli("sql", "--timeout", bad, "SELECT 1").exit_code == 2, bad


def test_sql_says_a_checkpoint_writes(cli):
    # PRAGMA wal_checkpoint on the read-only connection said "disk I/O error".
    cli("sync", "--no-embed")
    refused = cli("sql", "PRAGMA wal_checkpoint")
    assert refused.exit_code == 2 and "read-only" in refused.stderr and "--write" in refused.stderr
    assert "disk I/O" not in refused.stderr
    done = js(cli("sql", "--write", "--json", "PRAGMA wal_checkpoint"))
    assert done["columns"] == ["busy", "log", "checkpointed"]


def _cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and of the processes it started (the command runs in a child of its own)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # ended meanwhile
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(_cpu_seconds(int(child)) for child in children)


def _interrupt_when_busy(proc) -> None:
    """SIGINT once ``proc`` has spent 1.5 s of CPU: in its statement by then
    (starting takes well under that), however loaded the machine is."""
    import time

    while proc.poll() is None and _cpu_seconds(proc.pid) < 1.5:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU time from /proc")
@pytest.mark.parametrize("shell", [False, True])
def test_ctrl_c_stops_a_runaway_statement(tmp_path, shell):
    # Ctrl-C did nothing until the statement ended (never, for an endless CTE).
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(tmp_path), "MARCH_DAEMON": "0"}
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    args = [marchdb, "sql", "--timeout", "0"] + ([] if shell else [ENDLESS])
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        # A terminal's foreground command: a run started in the background of a
        # script inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        if shell:
            proc.stdin.write(ENDLESS + ";\n")
            proc.stdin.flush()
        _interrupt_when_busy(proc)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err, err


def test_the_shell_bounds_each_statement_and_goes_on(cli):
    out = cli("sql", "--timeout", "0.5", input=f"{ENDLESS};\nSELECT 40 + 2;\n")
    assert "ran for more than 0.5 s and was stopped" in out.stderr
    assert "42" in out.stdout


def test_an_answer_too_large_for_memory_is_a_clear_error(tmp_path):
    # 30 M rows with no bound ended in "unexpected MemoryError ... this is a bug".
    import resource

    def a_quarter_of_a_gigabyte():  # six times what the command takes to start
        resource.setrlimit(resource.RLIMIT_AS, (250_000_000, 250_000_000))

    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(tmp_path), "MARCH_DAEMON": "0"}
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    rows = COUNT.format(limit=" LIMIT 30000000", what="x")
    out = subprocess.run(
        [marchdb, "sql", "--max-rows", "0", rows],
        preexec_fn=a_quarter_of_a_gigabyte,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr == "error: the answer does not fit in memory; add a LIMIT, or read fewer rows (--max-rows)\n"


def test_an_error_quotes_at_most_a_few_hundred_characters_of_what_it_was_given(cli, tmp_path):
    # SQLite's "near ...", click's "is not a valid integer" and a path named in an error
    # echoed the whole input: 100,000 characters of one error line (10 MB through the shell).
    from marchdb.text import MAX_ERROR_CHARS

    huge = "x" * 100_000
    root = tmp_path / "vault"
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(root), "MARCH_DAEMON": "0"}
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    for args in (("sql", f"select {huge}"), ("search", "--limit", huge, "q"), ("import", "obsidian", f"/tmp/{huge}")):
        out = subprocess.run([marchdb, *args], capture_output=True, text=True, env=env, timeout=60)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args[0], out.stderr[:300])
        assert len(lines[0]) <= MAX_ERROR_CHARS + 100 and "characters left out" in lines[0], lines[0]
    shell = cli("sql", input=f"select {'y' * 1_000_000};\nSELECT 40 + 2;\n")
    assert len(shell.stderr) < 2 * MAX_ERROR_CHARS and "characters left out" in shell.stderr
    assert "42" in shell.stdout


def test_bounded_keeps_the_start_and_the_end():
    from marchdb.text import bounded

    assert bounded("short") == "short"
    cut = bounded("error: " + "x" * 5000 + "; do this next", 100)
    assert len(cut) <= 100 and cut.startswith("error: xxx") and cut.endswith("; do this next")


def test_model_build_takes_the_recipe_the_global_model_names(tmp_path):
    # `marchdb --model minilm model build` built e5: the recipe was a positional defaulting to e5.
    home = ["--home", str(tmp_path / "home")]
    env = {"MARCH_MODELS_DIR": str(tmp_path / "models")}
    built = js(CliRunner().invoke(app, [*home, "--model", "minilm", "model", "build", "--json"], env=env))
    assert built["recipe"] == "minilm" and built["path"].endswith(".gguf") and "MiniLM" in built["path"]
    same = js(CliRunner().invoke(app, [*home, "--model", "minilm", "model", "build", "minilm", "--json"], env=env))
    assert same["path"] == built["path"]
    disagree = CliRunner().invoke(app, [*home, "--model", "minilm", "model", "build", "e5"], env=env)
    assert disagree.exit_code == 2 and "--model minilm" in disagree.stderr and "e5" in disagree.stderr
    a_file = CliRunner().invoke(app, [*home, "--model", str(tmp_path / "my.gguf"), "model", "build"], env=env)
    assert a_file.exit_code == 2 and "names a file" in a_file.stderr and "e5" in a_file.stderr
    assert not (tmp_path / "models" / "multilingual-e5-small-q4_0.gguf").exists()  # nothing else was built


def test_several_ids_may_be_given_comma_separated(cli, vault):
    # `--conflicts-with a,b` said "no memory has id a,b" though both exist.
    vault.memory("a.md", "mem_a", name="Deploy on Tuesdays", description="we deploy on Tuesdays")
    vault.memory("b.md", "mem_b", name="Deploy on Fridays", description="we deploy on Fridays")
    args = ["save", "--name", "Deploy on Mondays", "--description", "we deploy on Mondays", "--tag", "t"]
    saved = js(cli(*args, "--body", "Mondays.", "--conflicts-with", "mem_a, mem_b", "--json"))
    assert saved["status"] == "created"
    markdown = js(cli("open", saved["id"], "--json"))["markdown"]
    assert "conflicts_with:\n  - mem_a\n  - mem_b\n" in markdown, markdown
    newer = js(cli(*args[:2], "Deploy day", *args[3:], "--body", "b", "--supersedes", "mem_a,mem_b", "--json"))
    assert js(cli("open", "mem_b", "--json"))["superseded_by"] == [newer["id"]]
