"""A hook's fast path: the raw event relayed to the warm engine (hosts.relay).

The engine must answer a relayed event exactly as the hook would have
answered it the long way, with the hook's own settings, and refuse what it
cannot vouch for reproducing (the hook then goes the long way). Then the
real thing: the installed command, a real engine, a stranger's project as
the folder it runs in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marchdb import logfile
from marchdb.config import load_config
from marchdb.engine import client, daemon
from marchdb.hosts import HOSTS, adapter, hook, install, relay
from marchdb.hosts.hook import answer_here
from marchdb.store import Store

PROMPT = "Dog's medication carprofen tablet"

#: A prompt as each host sends it (its module's ``sample_prompt``, the shapes tools/bench_hosts.py times).
EVENTS = {h: (lambda s, h=h: json.loads(adapter(h).sample_prompt(s, PROMPT))) for h in HOSTS if h != "generic"}


@pytest.fixture
def engine(tmp_path, mixed_vault, monkeypatch):
    """An engine object serving a keyword-only store, in this process, and
    the environment of a hook of its home (which may use it)."""
    monkeypatch.delenv("MARCH_DAEMON")
    monkeypatch.setenv("MARCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MARCH_MEMORY_ROOT", str(mixed_vault.root))
    cfg = load_config(home=tmp_path / "home", root=mixed_vault.root, env={})
    eng = daemon.Engine(cfg, handlers=relay.HANDLERS)  # as `marchdb serve` makes it
    eng.store = Store(eng.cfg, use_model=False)
    eng.store.sync(embed=False)
    yield eng
    eng.store.close()


def relayed(eng, host: str, raw: str, options=(), flags=None) -> dict:
    """The engine's answer line to a relayed event, as the hook process builds it."""
    args = hook.relay_args(host, list(options), raw.encode(), flags or {})
    line = {"v": client.PROTOCOL, "op": hook.HOOK_EVENT, "args": args, "identity": None, "deadline": None}
    return eng.answer(json.dumps(line).encode())


@pytest.mark.parametrize("host", sorted(EVENTS))
def test_a_relayed_event_is_answered_as_the_hook_answers_it_itself(engine, host):
    answer = relayed(engine, host, json.dumps(EVENTS[host]("relayed")))
    assert answer["ok"], answer
    module = adapter(host)
    event = module.parse(json.dumps(EVENTS[host]("long-way")), [])
    assert event is not None
    long_way = answer_here(engine.store, module, event)
    assert answer["data"]["stdout"] == long_way["stdout"]
    assert "mem_dog" in answer["data"]["stdout"]


def test_the_generic_hosts_options_travel_with_the_event(engine):
    answer = relayed(engine, "generic", PROMPT, ["--run", "script-1"])
    assert answer["ok"] and "mem_dog" in answer["data"]["stdout"]
    again = relayed(engine, "generic", PROMPT, ["--run", "script-1"])
    assert again["ok"] and again["data"]["stdout"] == ""  # the run's seen set: hinted once
    bad = relayed(engine, "generic", PROMPT, ["--no-such-option"])
    assert bad["ok"] and bad["data"]["stdout"] == ""
    said = logfile.read_log(engine.home, "hooks")
    assert any("unknown option '--no-such-option'" in line for line in said), said


def test_the_hooks_own_settings_answer_not_the_engines(engine, monkeypatch):
    # A threshold the hook's shell sets (the engine was started without it) is the one used.
    assert "mem_dog" in relayed(engine, "claude-code", json.dumps(EVENTS["claude-code"]("a")))["data"]["stdout"]
    monkeypatch.setenv("MARCH_MEMORY_RECALL_MIN_SCORE", "0.999")
    answer = relayed(engine, "claude-code", json.dumps(EVENTS["claude-code"]("b")))
    assert answer["ok"] and "mem_dog" not in answer["data"]["stdout"]


def test_what_the_engine_cannot_answer_as_the_hook_would_is_refused(engine, monkeypatch, tmp_path):
    raw = json.dumps(EVENTS["claude-code"]("refused"))
    monkeypatch.setenv("MARCH_MEMORY_ROOT", str(tmp_path / "another-vault"))
    assert relayed(engine, "claude-code", raw)["error"]["kind"] == "other_config"
    monkeypatch.undo()
    monkeypatch.setenv("MARCH_DAEMON", "0")  # said in the hook's environment: no engine answers it
    assert relayed(engine, "claude-code", raw)["error"]["kind"] == "other_config"
    monkeypatch.delenv("MARCH_DAEMON")
    for args in (
        [],
        {"host": "nope"},
        {"host": "codex", "options": [1], "event": "", "flags": {}, "env": {}},
        {"host": ["codex"]},  # was "the engine failed: TypeError: unhashable type" (exit 1, a bug)
        {"host": {"a": 1}},
    ):
        line = {"v": client.PROTOCOL, "op": hook.HOOK_EVENT, "args": args, "identity": None}
        assert engine.answer(json.dumps(line).encode())["error"]["kind"] == "protocol"


def test_a_relayed_root_or_model_is_made_absolute_where_the_hook_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARCH_MEMORY_ROOT", "vault")
    args = hook.relay_args("claude-code", [], b"{}", {"root": "v2", "model": "m.gguf"})
    assert args["flags"] == {"root": str(tmp_path / "v2"), "model": str(tmp_path / "m.gguf")}
    assert args["env"]["MARCH_MEMORY_ROOT"] == str(tmp_path / "vault")
    assert hook.relay_args("claude-code", [], b"{}", {"model": "minilm"})["flags"] == {"model": "minilm"}


# ---------------------------------------------------------------- the real thing

#: What the fast path must never import: each is milliseconds of every prompt's start.
HEAVY = ("json", "re", "enum", "pathlib", "contextlib", "typing", "functools", "collections", "apsw", "numpy")


@pytest.mark.model
def test_the_installed_command_answers_through_the_engine_importing_almost_nothing(
    tmp_path, mixed_vault, default_model_path, monkeypatch
):
    home = tmp_path / "home"
    monkeypatch.delenv("MARCH_DAEMON")
    env = {
        **os.environ,
        "MARCH_HOME": str(home),
        "MARCH_MEMORY_ROOT": str(mixed_vault.root),
        "MARCH_EMBED_MODEL": str(default_model_path),
        "MARCH_MODELS_DIR": str(default_model_path.parent),
    }
    # A stranger's repository as the folder the host runs the hook in: its
    # modules must never be imported, neither by the hook nor by the engine it starts.
    project = tmp_path / "cloned-repo"
    (project / "marchdb").mkdir(parents=True)
    planted = tmp_path / "planted-code-ran"
    for name in ("json.py", "os.py", "apsw.py", "marchdb/__init__.py", "marchdb/__main__.py"):
        (project / name).write_text(f"open({str(planted)!r}, 'a').write({name!r})\n")
    command = install.hook_command()

    def prompt(argv: list[str], session: str, timeout: float = 60) -> subprocess.CompletedProcess:
        # As the host runs it: a prompt's event on stdin, in the project's folder.
        event = json.dumps(EVENTS["claude-code"](session))
        return subprocess.run(argv, input=event, capture_output=True, text=True, env=env, cwd=project, timeout=timeout)

    cold = prompt(["sh", "-c", command], "cold", timeout=120)
    assert cold.returncode == 0, cold.stderr
    try:
        assert client.wait_ready(home, 120)
        warm = prompt(["sh", "-c", command], "warm")
        assert warm.returncode == 0 and "mem_dog" in warm.stdout, (warm.stdout, warm.stderr)
        requests = client.request(home, "ping", {})[0]["requests"]
        # The same path in a process that then says what it imported.
        launcher = Path(install.LAUNCHER_FILE)
        code = (
            f"import sys; sys.path.append({str(launcher.parents[2])!r});"
            "from marchdb.hosts.hook import run_hook; run_hook({}, ['claude-code']);"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
        )
        probe = prompt([sys.executable, "-I", "-S", "-c", code], "probe")
        assert "mem_dog" in probe.stdout and probe.stderr.strip() == "[]", probe.stderr
        assert client.request(home, "ping", {})[0]["requests"] == requests + 1  # the probe went through the engine
    finally:
        daemon.stop(home)
    assert not planted.exists(), planted.read_text()


@pytest.mark.model
def test_an_event_too_large_to_relay_is_asked_again_in_its_parsed_form(
    tmp_path, mixed_vault, default_model_path, monkeypatch
):
    # Claude Code sends fields besides the prompt; escaped, these can pass the engine's
    # bound on a request while the prompt itself is short: the long way's request carries the prompt alone.
    home = tmp_path / "home"
    monkeypatch.delenv("MARCH_DAEMON")
    monkeypatch.setenv("MARCH_HOME", str(home))
    monkeypatch.setenv("MARCH_MEMORY_ROOT", str(mixed_vault.root))
    monkeypatch.setenv("MARCH_EMBED_MODEL", str(default_model_path))
    monkeypatch.setenv("MARCH_MODELS_DIR", str(default_model_path.parent))
    # Backslashes: 2 bytes each on stdin, 4 once the raw event is a string of the relayed request.
    base = json.dumps({**EVENTS["claude-code"]("big"), "padding": ""})
    room = (hook.MAX_EVENT_BYTES - len(base)) // 2
    raw = json.dumps({**EVENTS["claude-code"]("big"), "padding": "\\" * room})
    relayed = json.dumps(hook.relay_args("claude-code", [], raw.encode(), {}), ensure_ascii=False)
    assert len(raw) <= hook.MAX_EVENT_BYTES and len(relayed) > client.MAX_MESSAGE_BYTES
    command = install.hook_command()
    assert client.start(home) is None and client.wait_ready(home, 120)
    try:
        done = subprocess.run(["sh", "-c", command], input=raw, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "mem_dog" in done.stdout, done.stderr
        said = logfile.read_log(home, "hooks")
        assert not any("without the warm engine" in line for line in said), said
    finally:
        daemon.stop(home)
