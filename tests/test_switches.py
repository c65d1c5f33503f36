"""Recall off when the user says so: per message, per session, per project, everywhere.

Each switch is tried with each host's own event, both ways a hook is
answered: by the library in the hook's process (``answer_here``, the long
way) and by the warm engine from the raw event (``hosts.relay``, the fast
path every installed hook takes). Then the hook process itself (a pause
starts no engine), the CLI commands, and the MCP tools' answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marchdb import switches
from marchdb.config import load_config
from marchdb.engine import client, daemon
from marchdb.hosts import adapter, hook, relay
from marchdb.hosts.hook import answer_here
from marchdb.store import Store

MARCHDB = str(Path(sys.executable).with_name("marchdb"))
PROMPT = "Dog's medication carprofen tablet"
HOSTS = ("claude-code", "codex", "gemini", "qwen", "cline", "hermes", "cursor", "generic")


def prompt_event(host: str, session: str, text: str, cwd: str) -> tuple[str, list[str]]:
    """``(raw event, options)`` of a user's message as ``host`` sends it."""
    if host in ("claude-code", "codex", "qwen", "hermes"):
        return json.dumps(
            {"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": text, "cwd": cwd}
        ), []
    if host == "gemini":
        return json.dumps({"session_id": session, "hook_event_name": "BeforeAgent", "prompt": text, "cwd": cwd}), []
    if host == "cline":
        return json.dumps({"taskId": session, "workspaceRoots": [cwd], "userPromptSubmit": {"prompt": text}}), []
    if host == "cursor":
        event = {
            "hook_event_name": "beforeSubmitPrompt",
            "conversation_id": session,
            "workspace_roots": [cwd],
            "prompt": text,
        }
        return json.dumps(event), []
    return text, ["--conversation", session]  # generic: the message on stdin


@pytest.fixture
def world(tmp_path, mixed_vault, monkeypatch):
    """A keyword-only store of the mixed vault, an engine serving it in this
    process (as ``marchdb serve`` makes it), and a project folder."""
    monkeypatch.delenv("MARCH_DAEMON")
    monkeypatch.setenv("MARCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MARCH_MEMORY_ROOT", str(mixed_vault.root))
    project = tmp_path / "work" / "acme"
    (project / "src").mkdir(parents=True)
    cfg = load_config(home=tmp_path / "home", root=mixed_vault.root, env={})
    eng = daemon.Engine(cfg, handlers=relay.HANDLERS)
    eng.store = Store(eng.cfg, use_model=False)
    eng.store.sync(embed=False)
    yield {"engine": eng, "home": tmp_path / "home", "project": project, "root": mixed_vault.root, "n": [0]}
    eng.store.close()


def ask(world, host: str, text: str = PROMPT, cwd: str | None = None, session: str | None = None) -> dict:
    """The answer to a user's message both ways: ``{"long", "relayed"}``, each
    what the hook prints, each in a session of its own unless ``session``."""
    world["n"][0] += 1
    cwd = cwd or str(world["project"] / "src")
    out = {}
    for way in ("long", "relayed"):
        sid = f"{way}-{session or world['n'][0]}"
        raw, options = prompt_event(host, sid, text, cwd)
        if way == "relayed":
            args = {**hook.relay_args(host, options, raw.encode(), {}), "cwd": cwd}  # run in the project
            line = {"v": client.PROTOCOL, "op": hook.HOOK_EVENT, "args": args, "identity": None, "deadline": None}
            answer = world["engine"].answer(json.dumps(line).encode())
            assert answer["ok"], answer
            out[way] = answer["data"]["stdout"]
        else:
            # the long way's store: the hook's own settings, from its environment
            store = Store(load_config(home=world["home"], root=world["root"]), use_model=False)
            try:
                module, event = hook.parse_event(world["home"], host, options, raw, cwd)
                out[way] = answer_here(store, module, event)["stdout"]
            finally:
                store.close()
    return out


def hinted(answer: dict) -> bool:
    both = ["mem_dog" in v for v in answer.values()]
    assert both[0] == both[1], answer  # the fast path answers as the long way does
    return both[0]


def said_in_log(world, words: str) -> bool:
    return any(words in line for line in (world["home"] / "logs" / "hooks.log").read_text().splitlines())


@pytest.mark.parametrize("host", HOSTS)
def test_pause_and_resume(world, host):
    assert hinted(ask(world, host))
    switches.pause(world["home"])
    assert not hinted(ask(world, host))
    assert switches.resume(world["home"])
    assert hinted(ask(world, host))
    switches.pause(world["home"], seconds=-1)  # a pause whose end has passed is over
    assert hinted(ask(world, host))


@pytest.mark.parametrize("host", HOSTS)
def test_norecall_in_the_message(world, host):
    assert not hinted(ask(world, host, f"{PROMPT} #norecall"))
    assert not hinted(ask(world, host, f"#NoRecall {PROMPT}"))
    assert hinted(ask(world, host, f"{PROMPT} #norecallers"))  # another word
    assert said_in_log(world, "#norecall in the message")


@pytest.mark.parametrize("host", HOSTS)
def test_a_session_switched_off_and_on(world, host):
    # ``marchdb off --session ID`` names the session as the host gives it
    for key in ("long-s", "relayed-s"):
        switches.set_session(world["home"], key, "off")
    assert not hinted(ask(world, host, session="s"))
    assert hinted(ask(world, host))  # another session
    for key in ("long-s", "relayed-s"):
        switches.set_session(world["home"], key, "on")
    assert hinted(ask(world, host, session="s"))
    assert said_in_log(world, "recall is off for the session")


@pytest.mark.parametrize("host", HOSTS)
def test_the_environment_the_host_passes(world, host, monkeypatch):
    monkeypatch.setenv("MARCH_RECALL", "off")
    assert not hinted(ask(world, host))
    # a session switched on wins over the environment
    for key in ("long-on", "relayed-on"):
        switches.set_session(world["home"], key, "on")
    assert hinted(ask(world, host, session="on"))
    monkeypatch.setenv("MARCH_RECALL", "on")
    (world["project"] / switches.PROJECT_FILE).write_text("")
    assert hinted(ask(world, host))  # on for the session, whatever the project says
    assert said_in_log(world, "MARCH_RECALL=off in the environment")


@pytest.mark.parametrize("host", HOSTS)
def test_a_project_folder_that_holds_the_file(world, host):
    assert hinted(ask(world, host))
    (world["project"] / switches.PROJECT_FILE).write_text("")
    assert not hinted(ask(world, host))  # found from a folder below it
    assert hinted(ask(world, host, cwd=str(world["project"].parent)))  # not above it
    assert said_in_log(world, ".marchdb-norecall")


@pytest.mark.parametrize("host", HOSTS)
def test_the_projects_setting(world, host):
    config = world["home"] / "config.json"
    project = str(world["project"])
    config.write_text(json.dumps({"projects": {project: {"name": "acme", "recall": False}}}))
    assert not hinted(ask(world, host))
    assert said_in_log(world, "recall is off for the project acme")
    # on in the setting wins over a file in the repository: a repository only turns recall off
    config.write_text(json.dumps({"projects": {project: {"name": "acme", "recall": True}}}))
    (world["project"] / switches.PROJECT_FILE).write_text("")
    assert hinted(ask(world, host))


def test_a_turn_begun_with_norecall_has_no_steer_and_no_record(world, tmp_path):
    eng = world["engine"]
    store = eng.store
    module = adapter("claude-code")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(
        json.dumps({"type": "user", "message": {"content": f"{PROMPT} #norecall"}})
        + "\n"
        + json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": PROMPT}]}})
        + "\n"
    )

    def event(name: str, **fields) -> dict:
        raw = {"session_id": "turn", "hook_event_name": name, "cwd": "/tmp", "transcript_path": str(transcript)}
        return answer_here(store, module, module.parse(json.dumps({**raw, **fields}), []))

    assert event("UserPromptSubmit", prompt=f"{PROMPT} #norecall")["stdout"] == ""
    assert event("PostToolUse")["stdout"] == ""  # the steer after a tool
    before = store.con.execute("SELECT count(*) FROM recall_log").fetchone()[0]
    event("Stop", last_assistant_message=PROMPT)
    assert store.con.execute("SELECT count(*) FROM recall_log").fetchone()[0] == before  # nothing recorded
    assert "mem_dog" in event("UserPromptSubmit", prompt=PROMPT)["stdout"]  # the next turn recalls again


# ---------------------------------------------------------------- the hook process, the CLI


def run_hook(env: dict, host: str, raw: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MARCHDB, "hook", host], input=raw, capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def test_a_paused_or_switched_off_hook_starts_no_engine(tmp_path, mixed_vault):
    home = tmp_path / "home"
    env = {**os.environ, "MARCH_HOME": str(home), "MARCH_MEMORY_ROOT": str(mixed_vault.root)}
    env.pop("MARCH_DAEMON", None)  # an engine would be started for a prompt
    raw, _ = prompt_event("claude-code", "p", PROMPT, str(tmp_path))
    switches.pause(home)
    done = run_hook(env, "claude-code", raw, tmp_path)
    assert done.returncode == 0 and done.stdout == ""
    switches.resume(home)
    done = run_hook({**env, "MARCH_RECALL": "off"}, "claude-code", raw, tmp_path)
    assert done.returncode == 0 and done.stdout == ""
    assert not client.engine_alive(home)
    assert any("MARCH_RECALL=off" in line for line in (home / "logs" / "hooks.log").read_text().splitlines())


def test_the_cli_switches_and_status(tmp_path, mixed_vault):
    env = {
        **os.environ,
        "MARCH_HOME": str(tmp_path / "home"),
        "MARCH_MEMORY_ROOT": str(mixed_vault.root),
        "MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"),
    }

    def marchdb(*args: str, stdin: str = "", cwd: Path = tmp_path) -> subprocess.CompletedProcess:
        return subprocess.run([MARCHDB, *args], input=stdin, capture_output=True, text=True, env=env, cwd=cwd)

    assert "no host session has asked" in marchdb("off", "--session").stderr
    assert marchdb("off").returncode == 2  # say what: --session, or pause
    raw, _ = prompt_event("claude-code", "sess-1", PROMPT, str(tmp_path))
    assert "mem_dog" in marchdb("hook", "claude-code", stdin=raw).stdout
    off = json.loads(marchdb("off", "--session", "--json").stdout)  # the latest session
    assert off["session"] == "cc:sess-1" and off["recall"] == "off"
    raw2, _ = prompt_event("claude-code", "sess-1", "carprofen tablet for the dog", str(tmp_path))
    assert marchdb("hook", "claude-code", stdin=raw2).stdout == ""
    assert marchdb("on", "--session", "sess-1").returncode == 0  # by the host's own id: the same session
    status = json.loads(marchdb("status", "--json").stdout)
    assert status["recall"] == "on" and status["recall_sessions"] == {"sess-1": "on"}
    assert "paused" in marchdb("pause", "--for", "90m").stdout
    status = json.loads(marchdb("status", "--json").stdout)
    assert status["recall"].startswith("paused since") and "until" in status["recall"]
    assert "no hint" in marchdb("recall", PROMPT).stdout and "paused" in marchdb("recall", PROMPT).stderr
    assert "on again" in marchdb("resume").stdout
    assert "--for" in marchdb("pause", "--for", "soon").stderr
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / switches.PROJECT_FILE).write_text("")
    here = json.loads(marchdb("status", "--json", cwd=tmp_path / "repo").stdout)["recall_here"]
    assert "off in this folder" in here
    bad = subprocess.run([MARCHDB, "status"], capture_output=True, text=True, env={**env, "MARCH_RECALL": "maybe"})
    assert bad.returncode == 3 and "MARCH_RECALL='maybe'" in bad.stderr


# ---------------------------------------------------------------- memory_recall, memory_context


def test_memory_recall_and_context_honour_every_switch(world, monkeypatch):
    from marchdb import ops

    store = world["engine"].store
    src = str(world["project"] / "src")

    def recall(**args) -> dict:
        return ops.call(store, "memory_recall", {"text": PROMPT, **args})

    def context(**args) -> dict:
        return ops.call(store, "memory_context", {"text": PROMPT, **args})

    assert recall(cwd=src)["hints"] and "[user_profile]" in context(cwd=src)["text"]
    (world["project"] / switches.PROJECT_FILE).write_text("")  # the folder the MCP server was started in
    assert recall(cwd=src)["hints"] == [] and recall(cwd=src)["mode"] == "off"
    assert context(cwd=src)["text"] == "" and ".marchdb-norecall" in context(cwd=src)["off"]
    assert recall()["hints"]  # elsewhere
    assert recall(text=f"{PROMPT} #norecall")["hints"] == []
    switches.set_session(world["home"], "chat-9", "off")
    assert recall(conversation="chat-9")["hints"] == [] and context(conversation="chat-9~2")["off"]
    store.cfg.recall_env = "off"  # MARCH_RECALL=off in the MCP server's environment (it travels to the engine)
    assert "MARCH_RECALL" in recall()["warning"]
    store.cfg.recall_env = None
    switches.pause(world["home"])
    assert recall()["hints"] == [] and "paused" in context()["warning"]


# ---------------------------------------------------------------- projects kept apart


@pytest.fixture
def clients(tmp_path, vault):
    """Two clients' memories, one of no project, and enough others for keyword recall."""
    common = "the deploy pipeline for invoices runs nightly and retries twice on failure"
    vault.memory("a.md", "mem_acme", name="Acme invoices", description=f"Acme, {common}", tags=["project/acme"])
    vault.memory(
        "b.md", "mem_acme_sub", name="Acme billing", description=f"Billing, {common}", tags=["project/acme/billing"]
    )
    vault.memory("c.md", "mem_globex", name="Globex invoices", description=f"Globex, {common}", tags=["project/globex"])
    vault.memory("d.md", "mem_mine", name="My invoices habit", description=f"Mine, {common}", tags=["habits"])
    for i in range(60):
        vault.memory(f"f{i}.md", f"mem_f{i}", name=f"Garden note {i}", description=f"tomatoes and beans {i}")
    return tmp_path / "work" / "acme"


def _recall_ids(tmp_path, vault, projects: dict, **args) -> tuple[set[str], object]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps({"projects": projects}))
    with Store(
        load_config(home=home, root=vault.root, model=str(tmp_path / "none.gguf"), env={}), use_model=False
    ) as s:
        s.sync(embed=False)
        result = s.recall("deploy pipeline for invoices nightly retries", threshold=0.0, explain=True, **args)
    return {h.id for h in result.hints} | {
        h.id for h in result.candidates if not (h.reason or "").startswith("kept")
    }, result


def test_a_project_kept_apart_recalls_only_its_own(tmp_path, vault, clients):
    acme = str(clients)
    everyone = {"mem_acme", "mem_acme_sub", "mem_globex", "mem_mine"}
    ids, _ = _recall_ids(tmp_path, vault, {acme: "acme"}, project="acme")
    assert everyone <= ids  # by default the project only ranks
    ids, result = _recall_ids(tmp_path, vault, {acme: {"name": "acme", "apart": True}}, project="acme")
    assert {"mem_acme", "mem_acme_sub", "mem_mine"} <= ids and "mem_globex" not in ids  # untagged ones too
    cut = {c.id: c.reason for c in result.candidates}
    assert cut["mem_globex"] == "kept apart: this project recalls only memories tagged project/acme or no project"
    assert result.settings["project"] == {
        "name": "acme",
        "tag": "project/acme",
        "apart": True,
        "untagged": True,
        "from": "projects in config.json",
    }
    ids, _ = _recall_ids(
        tmp_path, vault, {acme: {"name": "acme", "apart": True, "untagged": False}}, cwd=str(clients / "src")
    )
    assert {"mem_acme", "mem_acme_sub"} <= ids and not ids & {"mem_globex", "mem_mine"}  # found from the folder
    ids, _ = _recall_ids(tmp_path, vault, {acme: {"name": "acme", "apart": True}}, project="globex")
    assert everyone <= ids  # elsewhere nothing is kept apart


def test_explain_says_a_project_is_kept_apart(tmp_path, vault, clients):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"projects": {str(clients): {"name": "acme", "apart": True}}}))
    env = {
        **os.environ,
        "MARCH_HOME": str(home),
        "MARCH_MEMORY_ROOT": str(vault.root),
        "MARCH_EMBED_MODEL": "none.gguf",
    }
    done = subprocess.run(
        [MARCHDB, "recall", "deploy pipeline for invoices nightly", "--project", "acme", "--explain"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "project acme: kept apart" in done.stdout and "kept apart: this project recalls only" in done.stdout


def test_projects_entries_are_checked(tmp_path):
    from marchdb.errors import ConfigError

    home = tmp_path / "home"
    home.mkdir()
    for bad, words in (
        ({"~/a": {"name": "a", "apart": "yes"}}, "apart in config.json must be true or false"),
        ({"~/a": {"name": "a", "keep": True}}, "'keep'"),
        ({"~/a": {"recall": False}}, "must name a project"),
    ):
        (home / "config.json").write_text(json.dumps({"projects": bad}))
        with pytest.raises(ConfigError, match=words):
            load_config(home=home, env={})


@pytest.mark.model
def test_the_installed_hook_and_a_real_engine_honour_the_switches(
    tmp_path, mixed_vault, default_model_path, monkeypatch
):
    """The fast path for real: the command ``install`` writes, a running engine."""
    from marchdb.hosts import install

    home = tmp_path / "home"
    monkeypatch.delenv("MARCH_DAEMON")
    env = {
        **os.environ,
        "MARCH_HOME": str(home),
        "MARCH_MEMORY_ROOT": str(mixed_vault.root),
        "MARCH_EMBED_MODEL": str(default_model_path),
        "MARCH_MODELS_DIR": str(default_model_path.parent),
    }
    project = tmp_path / "repo"
    project.mkdir()
    command = install.hook_command()

    def prompt(text: str, session: str, **more: str) -> str:
        raw, _ = prompt_event("claude-code", session, text, str(project))
        done = subprocess.run(
            ["sh", "-c", command], input=raw, capture_output=True, text=True, env={**env, **more}, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    for name in ("MARCH_HOME", "MARCH_MEMORY_ROOT", "MARCH_EMBED_MODEL", "MARCH_MODELS_DIR"):
        monkeypatch.setenv(name, env[name])
    assert client.start(home) is None and client.wait_ready(home, 120)
    try:
        requests = client.request(home, "ping", {})[0]["requests"]
        assert "mem_dog" in prompt(PROMPT, "a")
        assert prompt(f"{PROMPT} #norecall", "b") == ""
        assert prompt(PROMPT, "c", MARCH_RECALL="off") == ""  # the hook's environment travels with the event
        (project / switches.PROJECT_FILE).write_text("")
        assert prompt(PROMPT, "d") == ""
        assert client.request(home, "ping", {})[0]["requests"] > requests  # answered by the engine
        switches.pause(home)
        before = client.request(home, "ping", {})[0]["requests"]
        assert prompt(PROMPT, "e") == ""
        assert client.request(home, "ping", {})[0]["requests"] == before  # the paused hook asked nothing
    finally:
        daemon.stop(home)
