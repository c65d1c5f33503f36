"""The warm engine (`marchdb serve`) and its clients, as real processes with the default model.

Each test gets its own home; the engine a test starts is stopped after it.
"""

from __future__ import annotations

import calendar
import contextlib
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest
from conftest import wait_idle

from marchdb import logfile, private
from marchdb.config import load_config
from marchdb.engine import client, daemon
from marchdb.index import db

MARCHDB = str(Path(sys.executable).with_name("marchdb"))
PROMPT = "why does every request miss the prompt cache?"


@pytest.fixture
def home(tmp_path, mixed_vault, default_model_path, monkeypatch):
    """A home whose processes use the engine; the environment every process here gets."""
    path = tmp_path / "home"
    monkeypatch.delenv("MARCH_DAEMON")  # engines allowed in this module
    monkeypatch.setenv("MARCH_HOME", str(path))
    monkeypatch.setenv("MARCH_MEMORY_ROOT", str(mixed_vault.root))
    monkeypatch.setenv("MARCH_EMBED_MODEL", str(default_model_path))
    monkeypatch.setenv("MARCH_MODELS_DIR", str(default_model_path.parent))  # its CPU check made once a run
    yield path
    daemon.stop(path)
    # A hook answered cold may have started an engine that is only now taking
    # its lock (it exists: the hook returned after starting it): none may
    # outlive the test.
    for pid in engine_processes(path):
        os.kill(pid, signal.SIGKILL)


def marchdb(*args: str, stdin: str = "", timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([MARCHDB, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def wait_for_log(home: Path, name: str, text: str, timeout: float = 120) -> str:
    """The first line of log ``name`` holding ``text``, once it is written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in logfile.read_log(home, name, 200) if text in line]
        if lines:
            return lines[0]
        time.sleep(0.2)
    raise AssertionError(f"no line with {text!r} in {name}.log after {timeout:g} s")


def hook(event: dict | str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``marchdb hook claude-code`` with ``event`` on stdin (``env``: the process's, default this one's)."""
    raw = event if isinstance(event, str) else json.dumps(event)
    return marchdb("hook", "claude-code", stdin=raw, timeout=60, env=env)


def prompt_event(session: str, prompt: str = PROMPT) -> dict:
    return {"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": prompt, "cwd": "/tmp"}


def engine_processes(home: Path) -> list[int]:
    """Live `marchdb ... serve` processes of this home."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if b"serve" in cmd and str(home).encode() in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


def test_the_cli_starts_one_private_engine_and_answers_through_it(home):
    first = marchdb("recall", PROMPT, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["hints"][0]["id"] == "mem_cache"
    # It started the engine; on a loaded machine it may have answered this first
    # recall itself, after waiting, rather than through an engine still warming.
    assert client.wait_ready(home, 120)
    sock = client.socket_path(home)
    st = os.lstat(sock)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
    status = json.loads(marchdb("serve", "--status", "--json").stdout)
    assert status["pid"] == client.engine_pid(home) and status["model"] == "loaded"
    second = marchdb("recall", PROMPT, "--json")
    assert json.loads(second.stdout) == json.loads(first.stdout)
    after = json.loads(marchdb("serve", "--status", "--json").stdout)["requests"]
    assert after == status["requests"] + 1  # the second recall went through it (status is not counted)
    assert engine_processes(home) == [status["pid"]]
    assert marchdb("serve", "--stop").stdout.strip() == "stopped"
    assert not sock.exists() and client.engine_pid(home) is None


def test_clients_racing_to_start_it_end_with_one_engine(home):
    procs = [
        subprocess.Popen(
            [MARCHDB, "recall", PROMPT, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(json.loads(out)["hints"][0]["id"] == "mem_cache" for out, _ in outs)
    time.sleep(1.0)  # engines that lost the race exit at once
    assert len(engine_processes(home)) == 1


def test_a_hook_answers_cold_then_warm(home):
    # With hookWaitSeconds 0 a prompt never waits: keyword recall while the engine starts.
    (home).mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text('{"hookWaitSeconds": 0}', encoding="utf-8")
    cold = hook(prompt_event("s1"))
    assert cold.returncode == 0 and cold.stderr == ""
    context = json.loads(cold.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("[recall]\n- mem_cache | score=")
    assert any(
        "without the warm engine (none ran; one is starting)" in line for line in logfile.read_log(home, "hooks")
    )
    assert client.wait_ready(home, 60)
    warm = hook(prompt_event("s2", "how does the user want code reviews done?"))
    assert warm.returncode == 0
    assert "mem_review" in json.loads(warm.stdout)["hookSpecificOutput"]["additionalContext"]
    stop = hook({"session_id": "s2", "hook_event_name": "Stop", "last_assistant_message": "Short review comments."})
    assert stop.returncode == 0 and stop.stdout == ""
    start = hook({"session_id": "s3", "hook_event_name": "SessionStart", "source": "startup"})
    assert "[user_profile]" in json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]


def test_the_first_prompt_with_no_engine_starts_one_and_is_answered_by_it(home):
    # `claude -p` in a script, or the first prompt after the engine's idle exit:
    # the prompt waits (hookWaitSeconds) for the engine it starts, and its
    # answer is semantic rather than keyword recall.
    # The index is built already, as a user's is: the engine only loads the
    # model and the vectors before it answers (the longest wait, so that a
    # loaded machine still makes it).
    assert marchdb("sync", env={**os.environ, "MARCH_DAEMON": "0"}).returncode == 0
    home.joinpath("config.json").write_text('{"hookWaitSeconds": 8}', encoding="utf-8")
    asked = time.time()
    first = hook(prompt_event("s1", "how does the user want code reviews done?"))
    assert first.returncode == 0, first.stderr
    assert "mem_review" in json.loads(first.stdout)["hookSpecificOutput"]["additionalContext"]
    fell_back = any("keyword recall only" in line for line in logfile.read_log(home, "hooks"))
    if fell_back:
        # Legitimate only when the engine was not warm within the wait: on a loaded
        # machine its start can pass 8 s. Then the next prompt is its.
        warm = wait_for_log(home, "daemon", "warm in ")
        stamp = calendar.timegm(time.strptime(warm.split("Z", 1)[0], "%Y-%m-%dT%H:%M:%S"))
        assert stamp - asked >= 7, f"the engine was warm {stamp - asked:.0f} s after the prompt, which did not wait"
        fallbacks = [line for line in logfile.read_log(home, "hooks", 200) if "keyword recall only" in line]
        second = hook(prompt_event("s2", "how does the user want code reviews done?"))
        assert "mem_review" in json.loads(second.stdout)["hookSpecificOutput"]["additionalContext"]
        assert [line for line in logfile.read_log(home, "hooks", 200) if "keyword recall only" in line] == fallbacks
        assert json.loads(marchdb("serve", "--status", "--json").stdout)["requests"] == 1
        return
    assert json.loads(marchdb("serve", "--status", "--json").stdout)["requests"] == 1


@pytest.mark.parametrize(
    "raw", ["", "garbage", '{"hook_event_name": "UserPromptSubmit", "prompt": "ca', '{"hook_event_name": "Nope"}']
)
def test_garbage_events_exit_0_with_nothing(home, raw):
    out = hook(raw)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_oversized_and_huge_events(home):
    huge = "x" * (5 * 1024 * 1024)
    out = marchdb("hook", "claude-code", stdin=huge)
    assert (out.returncode, out.stdout) == (0, "")
    assert any("over" in line and "bytes" in line for line in logfile.read_log(home, "hooks"))
    # ~1 MB, read from its start; the padding holds no words (words about nothing else lower the score)
    big_prompt = prompt_event("s1", PROMPT + " " + "... " * 260_000)
    out = hook(big_prompt)
    assert out.returncode == 0 and "mem_cache" in out.stdout


def test_an_engine_killed_mid_request_loses_no_answer_and_no_data(home):
    assert marchdb("recall", PROMPT).returncode == 0  # starts the engine
    first_pid = client.engine_pid(home)
    results: list[subprocess.CompletedProcess] = []

    def ask():
        for i in range(12):
            results.append(hook(prompt_event(f"k{i}", PROMPT + f" ({i})")))

    worker = threading.Thread(target=ask)
    worker.start()
    while len(results) < 3 and worker.is_alive():
        time.sleep(0.01)
    os.kill(first_pid, signal.SIGKILL)  # while hooks keep coming
    worker.join(300)
    deadline = time.monotonic() + 10
    while first_pid in engine_processes(home) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(results) == 12
    for out in results:
        assert out.returncode == 0 and out.stderr == ""
        assert out.stdout == "" or json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert client.wait_ready(home, 60)  # a hook started a new engine; the stale socket was replaced
    assert client.engine_pid(home) not in (None, first_pid)
    assert json.loads(marchdb("recall", PROMPT, "--json").stdout)["hints"][0]["id"] == "mem_cache"
    con = apsw.Connection(str(home / "index.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_a_socket_path_that_is_not_a_socket_is_never_removed(home):
    home.mkdir()
    squatter = client.socket_path(home)
    squatter.write_text("someone else's file\n")
    out = hook(prompt_event("s1"))
    assert out.returncode == 0 and "mem_cache" in out.stdout  # answered in-process
    said = "\n".join(logfile.read_log(home, "hooks"))
    assert "is taken by a file that is not a socket" in said and "stale socket" not in said
    refused = marchdb("serve")
    assert refused.returncode == 3 and "is not a socket" in refused.stderr
    cli = marchdb("recall", PROMPT, "--json")
    assert cli.returncode == 0 and json.loads(cli.stdout)["hints"][0]["id"] == "mem_cache"
    assert squatter.read_text() == "someone else's file\n"


def test_a_missing_vault_gives_no_hint_from_the_stale_index(home, mixed_vault):
    assert marchdb("recall", PROMPT).returncode == 0
    away = mixed_vault.root.with_name("vault-unmounted")
    mixed_vault.root.rename(away)
    try:
        out = hook(prompt_event("s1"))
        assert (out.returncode, out.stdout) == (0, "")
        assert any("does not exist" in line for line in logfile.read_log(home, "hooks"))
    finally:
        away.rename(mixed_vault.root)


def test_two_hosts_share_one_engine(home):
    assert marchdb("recall", PROMPT).returncode == 0
    outs: list[subprocess.CompletedProcess] = []
    # Two hosts on one session at once: one engine, one log, so one of the two runs hints it.
    threads = [threading.Thread(target=lambda: outs.append(hook(prompt_event("shared")))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(o.returncode for o in outs) == [0, 0]
    assert sum("mem_cache" in o.stdout for o in outs) == 1
    assert len(engine_processes(home)) == 1


#: An engine idle for 3 s: below what serve --idle takes (a minute), through the library.
SHORT_IDLE_ENGINE = (
    "import sys; from marchdb.config import load_config; from marchdb.engine import daemon; "
    "sys.exit(daemon.Engine(load_config(), idle_seconds=3).run())"
)


def test_an_idle_engine_exits_by_itself(home):
    proc = subprocess.Popen([sys.executable, "-c", SHORT_IDLE_ENGINE], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert client.wait_ready(home, 60)
    assert proc.wait(timeout=60) == 0
    assert not client.socket_path(home).exists()


def test_serve_stop_says_when_the_engine_outlived_its_wait(home, monkeypatch):
    # An engine that cannot stop now (here: frozen; in life, a request still
    # running) is not reported as stopped: exit 10 (try again) and a way out.
    from typer.testing import CliRunner

    from marchdb.cli.main import app

    proc = subprocess.Popen([MARCHDB, "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert client.wait_ready(home, 60)
        os.kill(proc.pid, signal.SIGSTOP)
        monkeypatch.setattr(daemon, "STOP_WAIT_SECONDS", 1.0)
        out = CliRunner().invoke(app, ["serve", "--stop"])
        assert out.exit_code == 10, out.output
        assert "did not stop within 1 s" in out.output and f"kill {proc.pid}" in out.output
    finally:
        os.kill(proc.pid, signal.SIGCONT)  # the SIGTERM that stop sent then ends it
    assert proc.wait(timeout=30) == 0, (home / "logs" / "daemon.log").read_text()
    assert not client.engine_alive(home)


def test_the_engine_stops_when_config_json_changes(home):
    assert marchdb("recall", PROMPT).returncode == 0
    pid = client.engine_pid(home)
    # ... even while requests keep coming (the check ran only when idle for half a second).
    busy = threading.Event()

    def keep_asking():
        while not busy.is_set():
            with contextlib.suppress(client.Unavailable, client.RemoteError):
                client.request(home, "ping", {}, timeout=5)
            time.sleep(0.05)

    pinger = threading.Thread(target=keep_asking)
    pinger.start()
    try:
        time.sleep(0.5)
        (home / "config.json").write_text('{"recallMinScore": 0.5}\n')
        deadline = time.monotonic() + 20
        while client.engine_pid(home) == pid and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.engine_pid(home) != pid
    finally:
        busy.set()
        pinger.join()


def test_serve_says_what_it_does_and_checks_its_idle_time(home):
    first = subprocess.Popen([MARCHDB, "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert client.wait_ready(home, 60)
        second = marchdb("serve")
        assert second.returncode == 0 and f"an engine already serves {home} (pid {first.pid})" in second.stderr
        for bad in ("0", "-1", "nan", "inf", "20000", "0.5"):
            refused = marchdb("serve", "--idle", bad)
            assert refused.returncode == 2 and "--idle must be a number of minutes, at least 1" in refused.stderr, bad
    finally:
        daemon.stop(home)
    out = first.stderr.read()
    assert "warming up" in out and "ready on" in out and "log:" in out


def test_the_generic_contract_for_other_hosts(home):
    out = marchdb("hook", "generic", "--run", "job-1", stdin=PROMPT)
    assert out.returncode == 0 and out.stdout.startswith("[recall]\n- mem_cache | score=")
    again = marchdb("hook", "generic", "--run", "job-2", stdin=PROMPT)
    assert (again.returncode, again.stdout) == (0, "")  # hinted one run ago: suppressed
    profiles = marchdb("hook", "generic", "--profiles", stdin="")
    assert profiles.stdout.startswith("[agent_profile]")


def test_a_running_engine_answers_recall_without_the_cli_framework(home):
    assert marchdb("recall", PROMPT).returncode == 0  # starts the engine
    for extra in ([], ["--json"], ["--explain"], ["--trigger", "assistant", "--json"]):
        quick = marchdb("recall", PROMPT, *extra)
        full = marchdb("recall", *extra, "--", PROMPT)  # '--': a form only the full CLI reads
        assert quick.returncode == full.returncode == 0
        assert quick.stdout == full.stdout and quick.stdout, extra
    assert marchdb("context", PROMPT).stdout == marchdb("context", "--", PROMPT).stdout
    missing = marchdb("recall", PROMPT, "--trigger", "nobody")
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")  # the engine's refusal, one line


def test_an_engine_notices_when_marchdb_code_changes_under_it(tmp_path, mixed_vault):
    # An upgrade replaces marchdb's files: the engine stops at its next tick, so the
    # next client starts one running the new code (an old one would answer new options the old way).
    assert any(f.name == "sql" and (f / "recall.sql").exists() for f in daemon.code_folders())
    code = tmp_path / "code"
    code.mkdir()
    (code / "recall.py").write_text("OLD = 1\n")
    engine = daemon.Engine(load_config(home=tmp_path / "home", root=mixed_vault.root, env={}))
    assert not engine.code_changed()  # its own code, as it started
    engine.code_dirs = [code]
    engine._code = daemon.code_fingerprint([code])
    (code / "notes.txt").write_text("not code\n")
    assert not engine.code_changed()
    (code / "recall.py").write_text("NEW = 22\n")
    assert engine.code_changed()


@pytest.fixture
def bm25_engine(tmp_path, mixed_vault):
    """An engine object serving a keyword-only store, in this process (no socket)."""
    from marchdb.store import Store

    engine = daemon.Engine(load_config(home=tmp_path / "home", root=mixed_vault.root, env={}))
    engine.store = Store(engine.cfg, use_model=False)
    engine.store.sync(embed=False)
    yield engine
    engine.store.close()


def ask(engine, op: str, args: dict, deadline: float | None) -> dict:
    line = {"v": client.PROTOCOL, "op": op, "args": args, "identity": engine.identity, "deadline": deadline}
    return engine.answer(json.dumps(line).encode())


def test_the_engine_drops_what_its_client_stopped_waiting_for(bm25_engine):
    args = {"text": "Dog's medication carprofen tablet", "run_id": "r1"}
    late = ask(bm25_engine, "memory_recall", args, time.time() - 0.1)
    assert not late["ok"] and late["error"]["kind"] == "expired"
    hook = {"host": "claude-code", "event": json.dumps(prompt_event("late", "Dog's medication carprofen"))}
    late = ask(bm25_engine, "hook", hook, time.time() - 0.1)
    assert not late["ok"] and late["error"]["kind"] == "expired"  # the hook then answers on its own
    late = ask(
        bm25_engine, "memory_save", {"name": "n", "description": "d", "body": "b", "tags": ["t"]}, time.time() - 1
    )
    assert not late["ok"] and late["error"]["kind"] == "expired"
    assert bm25_engine.store.con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert not list(bm25_engine.cfg.memory_root.glob("20*/**/n*.md"))
    on_time = ask(bm25_engine, "memory_recall", args, time.time() + 30)
    assert on_time["ok"] and [h["id"] for h in on_time["data"]["hints"]] == ["mem_dog"]


def test_json_nested_past_any_request_is_a_protocol_error_not_a_failure(bm25_engine):
    answer = bm25_engine.answer(b'{"a":' + b"[" * 100_000)
    assert answer == {"ok": False, "error": {"kind": "protocol", "message": "the request is not JSON", "exit_code": 2}}


def test_a_value_error_inside_an_operation_is_the_engines_failure_not_bad_json(tmp_path, mixed_vault):
    # Any ValueError raised while a request ran was answered "the request is
    # not JSON" (a protocol error): the client blamed itself and the engine's
    # log said nothing of the bug.
    def broken(args, home, call):
        raise ValueError("a bug deep down")

    engine = daemon.Engine(load_config(home=tmp_path / "home", root=mixed_vault.root, env={}), handlers={"x": broken})
    answer = engine.answer(json.dumps({"v": client.PROTOCOL, "op": "x", "args": {}}).encode())
    assert answer["error"]["kind"] == "error" and answer["error"]["exit_code"] == 1, answer
    assert answer["error"]["message"] == "the engine failed: ValueError: a bug deep down"


@pytest.mark.parametrize(
    "request_fields",
    [
        {"op": "memory_recall", "args": ["why", "cache"]},
        {"op": "memory_recall", "args": "why does the cache miss"},
        {"op": "memory_recall", "args": 7},
        {"op": ["memory_recall"], "args": {}},
        {"op": "memory_recall", "args": {}, "identity": ["root"]},
    ],
)
def test_a_request_of_the_wrong_shape_is_a_protocol_error_not_a_bug(bm25_engine, request_fields):
    # "args": [...] was "the engine failed: AttributeError ..." (exit 1, "a bug").
    line = {"v": client.PROTOCOL, "identity": bm25_engine.identity, **request_fields}
    answer = bm25_engine.answer(json.dumps(line).encode())
    assert not answer["ok"] and answer["error"]["kind"] == "protocol" and answer["error"]["exit_code"] == 2, answer
    assert "failed" not in answer["error"]["message"]


def test_the_engine_stops_when_its_index_is_corrupt(bm25_engine):
    index = bm25_engine.cfg.index_path
    bm25_engine.store.con.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    size = index.stat().st_size
    with open(index, "r+b") as fh:  # every page but the first: garbage
        fh.seek(4096)
        fh.write(os.urandom(size - 4096))
    bm25_engine.store.con.execute("PRAGMA shrink_memory")  # drop cached pages: the next read meets the garbage
    answer = ask(bm25_engine, "memory_recall", {"text": "Dog's medication carprofen tablet"}, None)
    assert not answer["ok"] and answer["error"]["kind"] == "index_unavailable", answer
    message = answer["error"]["message"]  # what the client shows: the file, and what to do
    assert str(index) in message and "damaged; run `marchdb rebuild`" in message, message
    assert bm25_engine.stopping.is_set()  # the next client starts an engine that opens it afresh


def test_a_conflict_through_the_engine_is_a_conflict_with_its_paths(bm25_engine, mixed_vault):
    # The client rebuilt every refusal as a bare MarchError: the exit code survived, but
    # `except Conflict` missed it and the paths of the files to fix were lost on the way.
    import socket

    from marchdb.errors import Conflict, remote_error

    mixed_vault.memory("elsewhere/dog-copy.md", "mem_dog")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bm25_engine.home.mkdir(parents=True, exist_ok=True)
    listener.bind(str(client.socket_path(bm25_engine.home)))
    listener.listen(1)

    def serve_one():  # what the engine's loop does with a connection: answer its line
        conn, _ = listener.accept()
        with conn:
            conn.sendall(json.dumps(bm25_engine.answer(client._read_line(conn))).encode() + b"\n")

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    with pytest.raises(client.RemoteError) as caught:
        client.request(bm25_engine.home, "memory_save", {"id": "mem_dog", "body": "b"}, bm25_engine.identity)
    thread.join(10)
    listener.close()
    exc = caught.value
    rebuilt = remote_error(exc.kind, str(exc), exc.exit_code, exc.fields)  # as the CLI and MCP server do
    assert isinstance(rebuilt, Conflict) and rebuilt.exit_code == Conflict.exit_code == 6
    assert rebuilt.mem_id == "mem_dog"
    assert rebuilt.paths == [
        str(mixed_vault.root / "2026/05/week2/mem_dog.md"),
        str(mixed_vault.root / "elsewhere/dog-copy.md"),
    ]
    assert str(rebuilt).startswith("2 files hold id mem_dog")


@pytest.mark.parametrize(
    "answer",
    [
        b"[1, 2]",
        b'{"ok": false, "error": "boom"}',
        b'{"ok": false, "error": {"kind": "invalid_input", "message": "m", "exit_code": "five"}}',
        b'{"ok": false, "error": {"kind": "invalid_input", "message": "m", "exit_code": null}}',
        b'{"ok": false, "error": {"kind": "invalid_input", "message": "m", "exit_code": 1e400}}',
        b'{"ok": true, "data": [1], "ms": 1}',
        b'{"ok": true, "data": {}, "ms": "x"}',
    ],
)
def test_an_answer_of_another_shape_is_no_answer(tmp_path, answer):
    # An engine of another version, or a process that is not ours: the client must say
    # "unavailable" (the caller answers itself), never fail with a TypeError or ValueError.
    import socket

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(client.socket_path(home)))
    listener.listen(1)

    def serve_one():
        conn, _ = listener.accept()
        with conn:
            client._read_line(conn)
            conn.sendall(answer + b"\n")

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    with pytest.raises(client.Unavailable, match="bad answer"):
        client.request(home, "memory_recall", {"text": "x"}, None)
    thread.join(10)
    listener.close()


def test_a_conflict_from_an_engine_with_odd_fields_is_still_an_error_with_its_code():
    from marchdb.errors import Conflict, MarchError, NotFound, remote_error

    assert isinstance(remote_error("not_found", "no memory has id x", 5, {"id": "x"}), NotFound)
    odd = remote_error("conflict", "2 files hold id x", 6, {"id": "x", "paths": "abc"})
    assert type(odd) is MarchError and odd.exit_code == 6 and odd.kind == "conflict"  # not ['a', 'b', 'c']
    assert type(remote_error("conflict", "m", 6, {})) is MarchError  # a field left out: the plain error
    assert isinstance(remote_error("conflict", "m", 6, {"id": "x", "paths": ["a"]}), Conflict)


def test_a_write_the_engine_took_is_never_done_twice(tmp_path):
    import socket

    home = tmp_path / "home"
    home.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(client.socket_path(home)))
    listener.listen(1)
    got: list[bytes] = []
    gave_up = threading.Event()

    def silent_engine():  # reads the request and never answers (holds on until the client gave up)
        conn, _ = listener.accept()
        got.append(conn.recv(65536))
        gave_up.wait(10)
        conn.close()

    thread = threading.Thread(target=silent_engine)
    thread.start()
    sent = time.time()
    with pytest.raises(client.Unavailable) as caught:
        client.request(home, "memory_save", {"name": "n"}, timeout=0.6)
    gave_up.set()
    thread.join()
    listener.close()
    assert caught.value.reason == "timeout"
    assert not caught.value.may_redo("memory_save") and not caught.value.may_redo("memory_log")
    assert caught.value.may_redo("memory_recall")  # a read (its run is dropped by the deadline) may
    assert client.Unavailable("not running").may_redo("memory_save")
    deadline = json.loads(got[0])["deadline"]
    assert sent < deadline < sent + 0.6  # the engine records nothing after this
    # An engine that refuses because the client stopped waiting did nothing: the client answers itself.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.socket_path(home).unlink()
    listener.bind(str(client.socket_path(home)))
    listener.listen(1)

    def refusing_engine():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b'{"ok": false, "error": {"kind": "expired", "message": "late", "exit_code": 10}}\n')
        conn.close()

    thread = threading.Thread(target=refusing_engine)
    thread.start()
    with pytest.raises(client.Unavailable) as caught:
        client.request(home, "memory_save", {"name": "n"}, timeout=5)
    thread.join()
    listener.close()
    assert caught.value.reason == "expired" and caught.value.may_redo("memory_save")


def test_a_stopping_engine_answers_the_connections_still_queued(tmp_path, mixed_vault):
    # Closed unanswered, a queued save looked lost mid-way (exit 12) though it never ran.
    import socket

    engine = daemon.Engine(load_config(home=tmp_path / "home", root=mixed_vault.root, env={}))
    engine.home.mkdir(parents=True)
    engine._bind()
    queued = []
    for _ in range(2):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(client.socket_path(engine.home)))
        sock.sendall(b'{"v": 1, "op": "memory_save", "args": {}}\n')
        queued.append(sock)
    engine._shutdown()
    for sock in queued:
        answer = json.loads(client._read_line(sock))
        assert answer["error"]["kind"] == "stopping"  # the client runs it in-process
        sock.close()
    assert not client.socket_path(engine.home).exists()


def test_requests_waiting_for_the_worker_when_the_engine_stops_are_answered_stopping(bm25_engine):
    # Idle and outdated stops alike: a request accepted but not yet run must
    # not run on a closing store, nor be left unanswered (the client then
    # runs it in-process).
    gate = threading.Event()
    bm25_engine._worker.submit(gate.wait, 10)  # the worker is busy with an earlier request
    answers: list[dict] = []
    args = {"text": "Dog's medication carprofen tablet", "run_id": "queued"}
    asking = threading.Thread(target=lambda: answers.append(ask(bm25_engine, "memory_recall", args, None)))
    asking.start()
    waited = time.monotonic()
    while bm25_engine._worker._work_queue.qsize() == 0 and time.monotonic() - waited < 10:
        time.sleep(0.01)
    bm25_engine.stopping.set()  # what _shutdown does first
    gate.set()
    asking.join(10)
    assert answers and answers[0]["error"]["kind"] == "stopping", answers
    assert bm25_engine.store.con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # it never ran


def test_the_dirty_check_a_request_asks_for_starts_once_its_answer_is_sent(bm25_engine, mixed_vault):
    # Run beside the recall, the stat walk took the core and the GIL it needed.
    import socket

    engine = bm25_engine
    engine._start_watcher()
    watcher = engine.watcher
    try:
        assert wait_idle(watcher)  # its start-up scan is done
        watcher._observer.stop()  # the watcher hears nothing now: only the dirty check finds changes
        watcher._observer.join(5)
        mixed_vault.memory("late.md", "mem_late", name="Late arrival", description="Heard by no watcher")
        with engine.store.con:
            db.set_meta(engine.store.con, "last_scan_epoch", "0")
        engine.store.scanned_at = None  # the watcher's start-up scan, as this process knows it
        ours, theirs = socket.socketpair()
        answered_first: list[bool] = []
        asked = watcher.request_scan

        def request_scan(**kwargs):
            # What the client can read at that moment: the whole answer, already sent.
            answered_first.append(theirs.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT).endswith(b"\n"))
            asked(**kwargs)

        watcher.request_scan = request_scan
        line = {"v": client.PROTOCOL, "op": "memory_recall", "args": {"text": "Late arrival"}, "identity": None}
        theirs.sendall(json.dumps(line).encode() + b"\n")
        engine._serve_one(ours)
        answer = json.loads(client._read_line(theirs))
        theirs.close()
        assert answer["ok"] and "mem_late" not in [h["id"] for h in answer["data"]["hints"]]  # not waited for
        assert answered_first == [True]
        deadline = time.monotonic() + 10
        while "mem_late" not in {r[0] for r in engine.store.con.execute("SELECT id FROM memory_index")}:
            assert time.monotonic() < deadline, "the dirty check never ran"
            time.sleep(0.05)
        assert watcher.store.loaded_embedder() is None  # a keyword-only engine's watcher loads no model either
    finally:
        watcher.stop()


def test_a_client_that_sends_a_byte_now_and_then_is_not_waited_for(bm25_engine, monkeypatch):
    # The read timeout applied to each piece: a byte every few seconds held a thread for good.
    import socket

    monkeypatch.setattr(daemon, "READ_TIMEOUT", 0.5)
    ours, theirs = socket.socketpair()
    served = threading.Thread(target=bm25_engine._serve_one, args=(ours,))
    served.start()
    started = time.monotonic()
    for byte in b'{"v": 1, "op": "ping"':
        if not served.is_alive():
            break
        with contextlib.suppress(OSError):
            theirs.send(bytes([byte]))
        time.sleep(0.1)
    served.join(5)
    theirs.close()
    assert not served.is_alive() and time.monotonic() - started < 3
    assert any("the request did not arrive whole" in line for line in logfile.read_log(bm25_engine.home, "daemon"))


def test_a_request_past_the_bound_is_answered_not_dropped(bm25_engine):
    # The engine closed the connection without a word: a client waited for its own timeout.
    import socket

    ours, theirs = socket.socketpair()
    served = threading.Thread(target=bm25_engine._serve_one, args=(ours,))
    served.start()
    theirs.sendall(
        b'{"v": 1, "op": "memory_recall", "args": {"text": "' + b"x" * 2 * client.MAX_MESSAGE_BYTES + b'"}}\n'
    )
    answer = json.loads(client._read_line(theirs, "the answer", 10))
    served.join(5)
    theirs.close()
    assert answer["ok"] is False and answer["error"]["kind"] == "protocol" and answer["error"]["exit_code"] == 2
    assert f"over {client.MAX_MESSAGE_BYTES:,} bytes" in answer["error"]["message"]


def test_engine_files_another_user_could_plant_are_never_trusted(tmp_path, mixed_vault, monkeypatch):
    # A home others can write to may hold their socket (a fake engine reading every prompt and
    # injecting its own context) and their lock (naming a pid for `serve --stop` to kill).
    monkeypatch.delenv("MARCH_DAEMON")
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o1777)
    env = {**os.environ, "MARCH_HOME": str(home), "MARCH_MEMORY_ROOT": str(mixed_vault.root)}
    assert private.untrusted_home(home) and "can be written by other users" in private.untrusted_home(home)
    with pytest.raises(client.Unavailable, match="untrusted"):
        client.request(home, "ping", {})
    served = subprocess.run([MARCHDB, "serve"], capture_output=True, text=True, env=env, timeout=60)
    assert served.returncode == 3 and "does not start" in served.stderr
    answered = hook(prompt_event("s", "Dog's medication carprofen tablet"), env)
    assert answered.returncode == 0 and "mem_dog" in answered.stdout  # answered in-process, no engine
    assert not engine_processes(home) and not client.socket_path(home).exists()
    assert any("untrusted" in line for line in logfile.read_log(home, "hooks"))
    # A pid in a lock file is only ever signalled when it is a marchdb engine of this user.
    victim = subprocess.Popen(["sleep", "60"])
    try:
        assert not client._is_engine_process(victim.pid, home)
    finally:
        victim.kill()
        victim.wait()


def test_a_home_an_acl_lets_another_user_write_is_not_trusted(tmp_path):
    # The mode said 0770 with a private group: trusted, though an ACL let user 65534 write.
    import struct

    home = tmp_path / "home"
    home.mkdir(mode=0o700)

    def set_acl(named_user_perm: int) -> None:
        # Linux's xattr form: version 2, then (tag, perm, id): owner, user 65534, group, mask, other.
        entries = [(0x01, 7, 0xFFFFFFFF), (0x02, named_user_perm, 65534), (0x04, 0, 0xFFFFFFFF)]
        entries += [(0x10, 7, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]
        acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
        os.setxattr(home, "system.posix_acl_access", acl)

    try:
        set_acl(7)
    except OSError as exc:
        pytest.skip(f"this file system takes no ACL ({exc.strerror})")
    assert private.untrusted_home(home) == f"{home} can be written by user 65534 (an access control list); " + (
        "remove it with setfacl -b"
    )
    set_acl(5)  # read and enter, no write
    if not private._own_group(os.stat(home).st_gid):
        pytest.skip("the mask shows as group write, and this user's group is not private")
    assert private.untrusted_home(home) is None  # reading is no threat


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
def test_a_lock_or_output_file_that_is_not_a_file_never_hangs_nor_writes_through(
    tmp_path, mixed_vault, monkeypatch, kind
):
    monkeypatch.delenv("MARCH_DAEMON")
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    home.chmod(0o700)
    # A prompt waits this long for the engine it starts (which refuses the lock):
    # the bound is what a hook costs here, not what is tested.
    (home / "config.json").write_text('{"hookWaitSeconds": 0.5}', encoding="utf-8")
    victim = tmp_path / "victim.txt"
    victim.write_text("my notes")
    env = {**os.environ, "MARCH_HOME": str(home), "MARCH_MEMORY_ROOT": str(mixed_vault.root)}
    for name in (client.LOCK_NAME, "logs/daemon.out"):
        path = home / name
        if path.is_file():
            path.unlink()  # what an engine that refused to start wrote
        if kind == "symlink":
            path.symlink_to(victim)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
        started = time.monotonic()
        answered = hook(prompt_event(f"s-{name}", "Dog's medication carprofen tablet"), env)  # a session each
        assert answered.returncode == 0 and "mem_dog" in answered.stdout, answered
        assert time.monotonic() - started < 10
        if name == client.LOCK_NAME:
            served = subprocess.run([MARCHDB, "serve"], capture_output=True, text=True, env=env, timeout=60)
            assert served.returncode == 3 and "not a file the engine made" in served.stderr, served.stderr
        # the engine the hook started refuses the lock too, and is gone before the victim is looked at
        deadline = time.monotonic() + 60
        while engine_processes(home):
            assert time.monotonic() < deadline, engine_processes(home)
            time.sleep(0.05)
        assert victim.read_text() == "my notes"
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()


def test_a_home_marchdb_creates_is_private_whatever_the_umask(tmp_path):
    # With a umask of 002 the home came out group-writable: its own engine then refused it.
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "a" / "home"), "MARCH_MEMORY_ROOT": str(tmp_path)}
    done = subprocess.run(
        [MARCHDB, "hook", "claude-code"],
        input='{"hook_event_name": "SessionStart", "session_id": "s"}',
        capture_output=True,
        text=True,
        env=env,
        umask=0o002,
    )
    assert done.returncode == 0
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "home").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o775  # above the home: as the umask says
    assert private.untrusted_home(tmp_path / "a" / "home") is None


def plain_home(tmp_path: Path, mixed_vault, monkeypatch) -> tuple[Path, dict]:
    """A home (no engine, no model) and the environment of processes using it."""
    monkeypatch.delenv("MARCH_DAEMON")
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    return home, {**os.environ, "MARCH_HOME": str(home), "MARCH_MEMORY_ROOT": str(mixed_vault.root)}


def test_a_hook_while_the_engine_warms_up_answers_itself_and_starts_no_second_one(tmp_path, mixed_vault, monkeypatch):
    home, env = plain_home(tmp_path, mixed_vault, monkeypatch)
    # A prompt waits for an engine that is starting: here for 0.5 s (the default is seconds).
    (home / "config.json").write_text('{"hookWaitSeconds": 0.5}', encoding="utf-8")
    # An engine holds its lock from its start and binds its socket once warm:
    # this process plays one that is still loading its model.
    fd = os.open(home / client.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        answered = hook(prompt_event("warming", "Dog's medication carprofen tablet"), env)
        assert answered.returncode == 0 and "mem_dog" in answered.stdout, answered
        said = logfile.read_log(home, "hooks")
        assert any("without the warm engine (it is warming up): keyword recall only" in line for line in said), said
        assert engine_processes(home) == []
    finally:
        os.close(fd)


def test_a_client_that_cannot_start_the_engine_says_why_and_answers_itself(tmp_path, mixed_vault, monkeypatch):
    home, env = plain_home(tmp_path, mixed_vault, monkeypatch)
    (home / "logs" / "daemon.out").mkdir()  # where the engine's output goes: not a file
    found = subprocess.run([MARCHDB, "search", "carprofen"], capture_output=True, text=True, env=env, timeout=60)
    assert found.returncode == 0 and "mem_dog" in found.stdout, found.stderr
    assert "note: the warm engine could not start (cannot write" in found.stderr
    assert "daemon.out" in found.stderr and engine_processes(home) == []


def test_the_engine_output_file_is_appended_to_then_begun_afresh_past_its_bound(tmp_path):
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    out = home / "logs" / "daemon.out"

    def start_and_wait(before: bytes) -> bytes:
        # An option no engine knows: the process started says so on its
        # output and exits at once (no model, nothing to stop).
        out.write_bytes(before)
        assert client.start(home, ["--no-such-option"]) is None
        deadline = time.monotonic() + 30
        while b"no-such-option" not in out.read_bytes():
            assert time.monotonic() < deadline, out.read_bytes()[-300:]
            time.sleep(0.01)
        return out.read_bytes()

    assert start_and_wait(b"the last start\n").startswith(b"the last start\n")
    big = b"x" * (logfile.DAEMON_OUT_BYTES + 1)
    after = start_and_wait(big)
    assert not after.startswith(b"x") and len(after) < 10_000


def test_a_frozen_engine_costs_one_prompt_a_moment_and_the_next_ones_nothing(home):
    # A suspended laptop, Ctrl-Z on `marchdb serve` (SIGSTOP here): every hook
    # waited its full 3 s, then the first one HOOK_PATIENCE and a ping. A
    # stopped process is found as such now: the first prompt sends nothing and
    # waits for no ping, it marks it stuck, and the next ones are refused by
    # the mark; all answer from the keyword index.
    assert marchdb("recall", PROMPT, "--json").returncode == 0  # starts the engine
    pid = client.engine_pid(home)
    assert not client.stopped(home)
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10
        while not client.stopped(home):  # the signal is delivered asynchronously
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for session in ("f1", "f2", "f3"):
            out = hook(prompt_event(session))
            assert out.returncode == 0 and "mem_cache" in out.stdout
        assert (home / client.STUCK_NAME).exists()
        log = logfile.read_log(home, "hooks")
        assert sum("the warm engine is stopped" in line for line in log) == 1
        assert sum("was found stuck" in line for line in log) == 2
        assert not any("ping" in line for line in log), log  # none waited on one
        # The CLI too: one line saying so, and the answer computed in the command itself.
        cli = marchdb("recall", PROMPT, "--json")
        assert cli.returncode == 0 and json.loads(cli.stdout)["hints"][0]["id"] == "mem_cache"
        assert "the warm engine is suspended or stuck" in cli.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
    # Thawed: the next hook still answers at once, and asks the engine again once its
    # answer is out (in a process of its own); a ping answered clears the mark.
    again = hook(prompt_event("f4", "how does the user want code reviews done?"))
    assert "mem_review" in again.stdout
    deadline = time.monotonic() + 10
    while (home / client.STUCK_NAME).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (home / client.STUCK_NAME).exists() and client.engine_pid(home) == pid
    used = hook(prompt_event("f5", PROMPT))
    assert "mem_cache" in used.stdout and "answered without the warm engine" not in logfile.read_log(home, "hooks")[-1]


#: An engine that is running but answers nothing (a deadlock, a stuck disk): it
#: holds the lock and the socket as an engine does, and writes the op of each
#: request it is sent to the file named by its second argument, never answering.
HUNG_ENGINE = """
import fcntl, json, os, socket, sys
home, seen = sys.argv[1], sys.argv[2]
fd = os.open(os.path.join(home, "daemon.lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, str(os.getpid()).encode())
server = socket.socket(socket.AF_UNIX)
server.bind(os.path.join(home, "marchdb.sock"))
server.listen(16)
print("ready", flush=True)
held = []
while True:
    conn, _ = server.accept()
    held.append(conn)
    line = b""
    while b"\\n" not in line:
        chunk = conn.recv(65536)
        if not chunk:
            break
        line += chunk
    with open(seen, "a") as f:
        f.write(json.loads(line)["op"] + "\\n")
"""


@contextlib.contextmanager
def hung_engine(home: Path, seen: Path):
    """A fake engine serving ``home`` that reads each request, writes its op
    to ``seen`` and never answers; killed on leaving."""
    fake = subprocess.Popen(
        [sys.executable, "-c", HUNG_ENGINE, str(home), str(seen), "marchdb", "serve"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake.stdout.readline() == "ready\n"
        yield fake
    finally:
        fake.kill()
        fake.wait()


def test_a_hung_engine_is_pinged_once_and_the_next_prompts_do_not_connect(tmp_path, mixed_vault, monkeypatch):
    # Not a stopped process: only a ping tells a hung engine from a busy one.
    # The first prompt sends its event and, past HOOK_PATIENCE, a ping; the
    # next ones send nothing, refused by the mark (their own processes ask it
    # again in the background, with a ping, once their answer is out).
    home, env = plain_home(tmp_path, mixed_vault, monkeypatch)
    seen = tmp_path / "requests"
    with hung_engine(home, seen) as fake:
        assert client.engine_pid(home) == fake.pid and not client.stopped(home)
        out = hook(prompt_event("h1", "Dog's medication carprofen tablet"), env)
        assert out.returncode == 0 and "mem_dog" in out.stdout
        assert seen.read_text().splitlines()[:2] == ["hook_event", "ping"]
        assert (home / client.STUCK_NAME).exists()
        for session in ("h2", "h3"):
            out = hook(prompt_event(session, "Dog's medication carprofen tablet"), env)
            assert out.returncode == 0 and "mem_dog" in out.stdout
        log = logfile.read_log(home, "hooks")
        assert sum("answered neither the request nor a ping" in line for line in log) == 1
        assert sum("was found stuck" in line for line in log) == 2
        assert seen.read_text().count("hook_event") == 1  # the later prompts did not connect


def test_a_write_an_engine_took_and_froze_on_is_not_done_again_here(tmp_path, mixed_vault, monkeypatch):
    # An engine frozen mid-request (SIGSTOP after it read a `log`, a stuck disk)
    # answers neither the request nor the ping: the command wrote the log
    # itself, and the engine, once it went on, wrote it a second time.
    home, env = plain_home(tmp_path, mixed_vault, monkeypatch)
    seen = tmp_path / "requests"
    with hung_engine(home, seen):
        done = marchdb("log", "Frozen deploy", "the engine froze on it", env=env)
        assert seen.read_text().splitlines()[:2] == ["memory_log", "ping"]
        assert done.returncode == 12, (done.returncode, done.stdout, done.stderr)
        assert "it may have been done: look" in done.stderr and "Traceback" not in done.stderr
        assert not any("Frozen deploy" in p.read_text() for p in mixed_vault.root.rglob("*.md"))


def test_an_engine_that_stays_stuck_is_replaced(home):
    assert marchdb("recall", PROMPT, "--json").returncode == 0
    pid = client.engine_pid(home)
    os.kill(pid, signal.SIGSTOP)
    # Stuck for longer than STUCK_REPLACE: the next client kills it, answers
    # this prompt itself, and a fresh engine is started.
    (home / client.STUCK_NAME).write_text(f"{pid} {time.time() - client.STUCK_REPLACE - 1}\n")
    out = hook(prompt_event("r1"))
    assert out.returncode == 0 and "mem_cache" in out.stdout
    deadline = time.monotonic() + 30
    while pid in engine_processes(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid not in engine_processes(home)
    # A process leaves /proc's command lines before its sockets and locks are closed: the
    # killed engine's socket may still take a connection for a moment, so wait for the new one.
    deadline = time.monotonic() + 60
    while client.engine_pid(home) in (None, pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.engine_pid(home) not in (None, pid) and client.wait_ready(home, 60)


def test_settings_given_by_environment_reach_the_engine(home):
    # MARCH_MEMORY_RECALL_MIN_SCORE reported 0.5 while an engine ran: the engine answered with its own.
    assert marchdb("recall", PROMPT, "--json").returncode == 0  # an engine serves this home now
    # On a loaded machine the first recall may answer by itself while the engine starts.
    assert client.wait_ready(home, 120)
    before = json.loads(marchdb("serve", "--status", "--json").stdout)["requests"]
    env = {**os.environ, "MARCH_MEMORY_RECALL_MIN_SCORE": "0.97"}
    out = subprocess.run([MARCHDB, "recall", PROMPT, "--json", "--explain"], capture_output=True, text=True, env=env)
    data = json.loads(out.stdout)
    assert data["threshold"] == 0.97 and data["hints"] == []
    assert data["settings"]["threshold_from"] == "MARCH_MEMORY_RECALL_MIN_SCORE"
    status = json.loads(marchdb("serve", "--status", "--json").stdout)
    assert status["requests"] == before + 1  # answered by the engine, with the client's threshold
    text = subprocess.run([MARCHDB, "recall", PROMPT, "--explain"], capture_output=True, text=True, env=env).stdout
    assert "settings: threshold 0.97 (MARCH_MEMORY_RECALL_MIN_SCORE)" in text


def test_every_setting_a_client_resolves_reaches_the_answer_or_names_the_refusal(home):
    # MARCH_NOW_STALE_HOURS was ignored whenever the engine answered; a differing
    # MARCH_THREADS (how the engine embeds, nothing it answers from) made it refuse the
    # client without a word; a differing model was refused under "another root and model".
    assert marchdb("recall", PROMPT, "--json").returncode == 0  # an engine serves this home now
    assert client.wait_ready(home, 120)
    assert marchdb("now", "Migrating the billing tables").returncode == 0
    page = home / "memory" / "now.md"
    hour_ago = time.time() - 3600
    os.utime(page, (hour_ago, hour_ago))
    before = json.loads(marchdb("serve", "--status", "--json").stdout)["requests"]
    stale = subprocess.run(
        [MARCHDB, "context", PROMPT, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "MARCH_NOW_STALE_HOURS": "0.5"},
    )
    assert json.loads(stale.stdout)["now"]["stale"] is True
    threads = subprocess.run(
        [MARCHDB, "recall", PROMPT, "--json"], capture_output=True, text=True, env={**os.environ, "MARCH_THREADS": "1"}
    )
    assert threads.returncode == 0 and "note:" not in threads.stderr
    assert json.loads(marchdb("serve", "--status", "--json").stdout)["requests"] == before + 2  # both answered by it
    # A model of the environment that is not the engine's: answered here, and the note says which differs.
    other = subprocess.run(
        [MARCHDB, "recall", "cache", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MARCH_EMBED_MODEL": str(home / "none.gguf")},
    )
    assert other.returncode == 0
    assert "runs with other settings" in other.stderr and "embedding model differs" in other.stderr
    assert json.loads(marchdb("serve", "--status", "--json").stdout)["requests"] == before + 2


def test_march_daemon_0_means_no_engine_is_used(home):
    assert marchdb("recall", PROMPT, "--json").returncode == 0
    requests = json.loads(marchdb("serve", "--status", "--json").stdout)["requests"]
    env = {**os.environ, "MARCH_DAEMON": "0"}
    for command in (["recall", PROMPT, "--json"], ["search", "cache", "--json"], ["context", PROMPT]):
        assert subprocess.run([MARCHDB, *command], capture_output=True, text=True, env=env).returncode == 0
    assert hook(prompt_event("d1"), env=env).returncode == 0
    assert json.loads(marchdb("serve", "--status", "--json").stdout)["requests"] == requests


def test_an_engine_stops_when_its_home_is_deleted_and_never_makes_it_again(home):
    # It still ran 40 s later, and something made the home folder again.
    assert marchdb("recall", PROMPT, "--json").returncode == 0
    pid = client.engine_pid(home)
    import shutil

    shutil.rmtree(home)
    deadline = time.monotonic() + 30
    while pid in engine_processes(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid not in engine_processes(home)
    time.sleep(daemon.TICK * 4)  # whatever it had running has ended
    assert not home.exists()


def test_an_engine_stops_when_its_index_is_deleted(home):
    assert marchdb("recall", PROMPT, "--json").returncode == 0
    pid = client.engine_pid(home)
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (home / f"index.sqlite{suffix}").unlink()
    deadline = time.monotonic() + 30
    while pid in engine_processes(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid not in engine_processes(home)
    assert any("its index" in line and "is gone" in line for line in logfile.read_log(home, "daemon"))
    assert not (home / "index.sqlite").exists()


def test_an_idle_engine_folds_its_wal_into_the_index_file(home, tmp_path):
    # A plain copy of index.sqlite held 0 memories while the engine ran: all of it sat in the WAL.
    import shutil

    saved = marchdb("save", "--json", "--name", "Kept in the file", "-d", "d", "-t", "t", "--body", "in the file")
    assert saved.returncode == 0, saved.stderr
    mem_id = json.loads(saved.stdout)["id"]
    assert client.engine_pid(home) is not None  # the engine saved it
    wal = Path(f"{home / 'index.sqlite'}-wal")
    deadline = time.monotonic() + daemon.IDLE_CHECKPOINT_SECONDS + 60
    while wal.exists() and wal.stat().st_size > 0:
        assert time.monotonic() < deadline, f"the -wal file still holds {wal.stat().st_size} bytes"
        time.sleep(0.2)
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(home / "index.sqlite", copy)
    con = apsw.Connection(str(copy))
    try:
        assert con.execute("SELECT count(*) FROM memory_index WHERE id = ?", (mem_id,)).fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM vectors").fetchone()[0] > 0
    finally:
        con.close()


def test_an_idle_checkpoint_a_reader_held_off_is_tried_again(home):
    # A reader holding a snapshot at the engine's quiet moment: the checkpoint could not
    # run, and the file lacked the last writes until the next request (27 s later).
    saved = marchdb("save", "--json", "--name", "Held off", "-d", "d", "-t", "t", "--body", "held off")
    assert saved.returncode == 0, saved.stderr
    reader = apsw.Connection(str(home / "index.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM memory_index").fetchall()  # a snapshot, held
    time.sleep(daemon.IDLE_CHECKPOINT_SECONDS + 3)
    reader.execute("COMMIT")
    reader.close()
    wal = Path(f"{home / 'index.sqlite'}-wal")
    deadline = time.monotonic() + 30  # no request in between: the engine tries again by itself
    while wal.exists() and wal.stat().st_size > 0:
        assert time.monotonic() < deadline, f"the -wal file still holds {wal.stat().st_size} bytes"
        time.sleep(0.2)


def test_sync_says_the_watcher_indexed_a_note_already(home, mixed_vault):
    # "0 added" right after writing a note by hand read as if marchdb had not seen it.
    assert marchdb("recall", PROMPT, "--json").returncode == 0
    assert client.wait_ready(home, 120)
    mixed_vault.memory("2026/05/week2/hand.md", "mem_hand", name="Written by hand")
    deadline = time.monotonic() + 60
    while "mem_hand" not in marchdb("sql", "SELECT id FROM memory_index", "--json").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    done = marchdb("sync")
    assert done.returncode == 0 and "0 added" in done.stdout
    assert "the warm engine's watcher indexes files as they change" in done.stdout


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, (str(os.getpid()) if sys.argv[2] == "self" else sys.argv[2]).encode() + b"\\n")
print("held", flush=True)
time.sleep(60)
"""


def test_serve_stop_signals_only_the_process_holding_this_homes_lock(tmp_path):
    # The pid came from the lock file, and any process of this user whose command line held
    # "marchdb" and "serve" was taken for the engine: another home's engine, or a decoy.
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    other = tmp_path / "other"
    decoy = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "marchdb", "--home", str(other), "serve"]
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(home / client.LOCK_NAME), str(decoy.pid)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert client.engine_alive(home)
        assert client.engine_pid(home) is None  # the decoy holds no lock of this home
        assert daemon.stop(home, timeout=1.0) is True  # asked (no socket answers), signalled nobody
        assert decoy.poll() is None and holder.poll() is None
    finally:
        for proc in (decoy, holder):
            proc.kill()
            proc.wait()
    # The process that holds the lock, and is a marchdb serve, is the engine.
    engine = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(home / client.LOCK_NAME), "self", "marchdb", "serve"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert engine.stdout.readline().strip() == "held"
        assert client.engine_pid(home) == engine.pid
    finally:
        engine.kill()
        engine.wait()


def pending_vectors(home: Path) -> int:
    """Texts of the index that have no vector yet, read as any reader would."""
    con = apsw.Connection(
        f"file:{home / 'index.sqlite'}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        con.set_busy_timeout(5000)
        return con.execute("SELECT coalesce(sum(meta_missing + chunks_missing), 0) FROM diag_vectors").fetchone()[0]
    finally:
        con.close()


def test_the_engine_answers_and_saves_while_it_embeds_a_backlog(home, mixed_vault):
    # An import of many notes lands in the vault of a running engine: while
    # its watcher embeds them, a save is answered with its own vectors
    # (it waited for the whole backlog: no answer in 30 s, then exit 12), and
    # a prompt's hook is answered by the engine, not by keyword recall.
    # (That the backlog takes texts indexed meanwhile: test_vectors.)
    assert marchdb("recall", PROMPT).returncode == 0
    assert client.wait_ready(home, 120)
    paragraph = "The deployment pipeline runs the canary stage before the blue green switch. " * 9
    for i in range(60):
        body = "\n\n".join(f"Part {j} of note {i}. {paragraph}" for j in range(4))
        mixed_vault.memory(f"2026/06/week1/import-{i}.md", f"imp_{i}", name=f"Imported {i}", body=body)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and pending_vectors(home) < 200:
        time.sleep(0.2)  # indexed by the watcher, the vectors to come
    assert pending_vectors(home) >= 200
    saved = marchdb(
        "save", "--name", "Release checklist", "--description", "the steps before a release is tagged",
        "--body", "Run the tests, bump the version, tag.", "--tag", "release", "--json", timeout=60,
    )  # fmt: skip
    assert saved.returncode == 0, saved.stderr
    mem_id = json.loads(saved.stdout)["id"]
    answered = hook(prompt_event("busy", "what are the steps before a release is tagged?"))
    assert pending_vectors(home) > 0  # all of it came before the backlog was done
    assert answered.returncode == 0
    assert not any("without the warm engine" in line for line in logfile.read_log(home, "hooks"))
    assert mem_id in json.loads(answered.stdout)["hookSpecificOutput"]["additionalContext"]
    con = apsw.Connection(
        f"file:{home / 'index.sqlite'}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        con.set_busy_timeout(5000)
        # Its name and description have their vector already; its body follows the backlog.
        assert con.execute(
            "SELECT count(*) FROM memory_index m JOIN vectors v ON v.kind = 'meta' AND v.hash = m.meta_hash "
            "WHERE m.id = ?",
            (mem_id,),
        ).fetchone() == (1,)
    finally:
        con.close()


def test_the_engine_a_hook_starts_runs_no_code_from_the_hosts_pythonpath(home, tmp_path):
    # A cloned project holds a sitecustomize.py, and the host runs with
    # PYTHONPATH=. there: the engine a hook started imported it (the hook
    # itself starts isolated, `python -I`); so must the engine.
    from marchdb.hosts import install

    project = tmp_path / "cloned-project"
    project.mkdir()
    planted = tmp_path / "planted-ran"
    (project / "sitecustomize.py").write_text(
        f"import sys\nopen({str(planted)!r}, 'a').write(' '.join(sys.argv) + '\\n')\n", encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": ".", "PYTHONSTARTUP": str(project / "sitecustomize.py")}
    event = json.dumps(prompt_event("s1"))
    out = subprocess.run(
        ["sh", "-c", install.hook_command("claude-code")],
        input=event,
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert client.wait_ready(home, 120)
    assert marchdb("recall", PROMPT, env={**env, "MARCH_DAEMON": "1"}).returncode == 0
    # The engine was started by the hook, with the host's environment and folder.
    assert len(engine_processes(home)) == 1
    ran = planted.read_text() if planted.exists() else ""
    assert "serve" not in ran, ran


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_the_engine_gives_back_what_a_long_prompt_took_once_idle(home):
    # One 3.9 MB prompt raised the engine from ~300 to ~800 MB, for good:
    # llama.cpp keeps an output buffer sized for the longest input it saw.
    assert marchdb("recall", PROMPT).returncode == 0
    assert client.wait_ready(home, 120)
    for i in range(3):
        assert hook(prompt_event(f"s{i}", f"{PROMPT} {i}")).returncode == 0
    pid = client.engine_pid(home)
    assert pid is not None
    before = _rss_mb(pid)
    words = "deploy the gateway service with care and keep the logs "
    assert hook(prompt_event("long", words * (3_900_000 // len(words)))).returncode == 0
    # Embedded by its focus (about 100 tokens), a long prompt no longer needs llama.cpp's
    # buffer for a window of 512 tokens (test_llama holds that such a buffer is given back);
    # what it takes is given back at the next quiet moment.
    assert _rss_mb(pid) < before + 200
    deadline = time.monotonic() + daemon.IDLE_CHECKPOINT_SECONDS + 30
    while time.monotonic() < deadline and _rss_mb(pid) > before + 100:
        time.sleep(0.5)
    assert _rss_mb(pid) < before + 100
    answered = hook(prompt_event("after", PROMPT))
    assert "mem_cache" in json.loads(answered.stdout)["hookSpecificOutput"]["additionalContext"]
