"""The MCP server survives a crash of llama.cpp in its own process: the session goes on.

The crash is real (``test_sentinel``'s preloaded library: llama.cpp raises
SIGSEGV on a batch holding the token of "Zyzzyva"). The server answers from
its own process here (``MARCH_DAEMON=0``), as it does when no engine can
answer for it. The client is a plain line reader, so that what the client
sees is exactly what the server wrote.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_sentinel import (  # noqa: F401 - fixtures
    MARCHDB,
    crash_on_token_library,
    culprit_token,
)
from test_sentinel_queries import CRASHING, query_env  # noqa: F401 - fixture


class Client:
    """A client of ``marchdb mcp`` over stdio, one JSON-RPC line at a time."""

    def __init__(self, env: dict) -> None:
        self.proc = subprocess.Popen(
            [MARCHDB, "mcp", "--no-watch"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.buf = b""
        self.next_id = 0
        self.seen: list[dict] = []

    def send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method: str, params: dict | None = None) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return self.next_id

    def answer(self, request_id: int, timeout: float = 240) -> dict:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            for msg in self.seen:
                if msg.get("id") == request_id:
                    return msg
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.seen.append(json.loads(line))
            if any(m.get("id") == request_id for m in self.seen):
                continue
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {request_id}; seen {self.seen}"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                assert chunk, f"the server closed its stdout; exit {self.proc.wait()}: {self.stderr()}"
                self.buf += chunk

    def start(self) -> None:
        init = self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
        )
        assert "result" in self.answer(init)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, **args) -> dict:
        return self.answer(self.request("tools/call", {"name": tool, "arguments": args}))["result"]

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode() if self.proc.poll() is not None else ""

    def server_pid(self) -> int:
        """The server's process: the relay's only child."""
        deadline = time.monotonic() + 60
        while not (children := Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()):
            assert time.monotonic() < deadline, "the relay started no server"
            time.sleep(0.05)  # between two servers
        assert len(children) == 1, children
        return int(children[0])


def data(result: dict) -> dict:
    assert not result.get("isError"), result
    return json.loads(result["content"][0]["text"])


@pytest.fixture
def client(query_env):  # noqa: F811
    c = Client(query_env)
    yield c
    if c.proc.poll() is None:
        c.proc.kill()
        c.proc.wait()


def test_a_recall_that_crashes_the_server_is_answered_by_keywords_and_the_session_goes_on(client):
    client.start()
    first = client.server_pid()
    hinted = data(client.call("memory_recall", text=CRASHING))
    assert hinted["mode"] == "bm25" and hinted["hints"][0]["id"] == "mem_dog", hinted
    assert "llama.cpp crashed on this message before" in hinted["warning"]
    assert client.server_pid() != first  # the one that crashed was replaced
    # The same session answers on, with the model, and was initialised once in the client's eyes.
    other = data(client.call("memory_recall", text="Biscuit carprofen tablet breakfast", run_id="r2"))
    assert other["mode"] == "hybrid"
    assert [m for m in client.seen if m.get("id") == 1 and "result" in m] == [client.seen[0]]
    assert client.close() == 0
    said = client.stderr()
    assert said.count("llama.cpp crashed (SIGSEGV) on a text a call gave the model") == 1, said


def test_a_save_whose_own_vectors_crash_is_kept_said_and_not_done_twice(client, query_env):  # noqa: F811
    client.start()
    result = client.call(
        "memory_save",
        name="Weevil diet",
        description="what the weevil eats",
        tags=["insects"],
        body="Zyzzyva eat palms.",
    )
    assert result["isError"], result
    said = result["content"][0]["text"]
    assert "what it wrote is kept" in said and "marchdb sync" in said and "memory_search" in said, said
    root = Path(query_env["MARCH_MEMORY_ROOT"])
    saved = [p for p in root.rglob("*.md") if "Zyzzyva eat palms." in p.read_text(encoding="utf-8")]
    assert len(saved) == 1, saved
    found = data(client.call("memory_search", query="weevil"))  # the session goes on
    assert found["results"], found
    assert client.close() == 0


def test_a_crash_outside_the_model_answers_the_call_and_too_many_end_the_server(client):
    client.start()
    for n in range(3):
        crashed = client.server_pid()
        os.kill(crashed, signal.SIGSEGV)
        deadline = time.monotonic() + 60
        while client.server_pid() == crashed and time.monotonic() < deadline:
            time.sleep(0.05)  # asked while it dies, a request would be answered with an error (the next test)
        listed = client.answer(client.request("tools/list"), timeout=120)  # a new server, initialised again
        assert any(t["name"] == "memory_recall" for t in listed["result"]["tools"]), (n, listed)
    os.kill(client.server_pid(), signal.SIGSEGV)  # the fourth within minutes: not hidden any more
    assert client.proc.wait(timeout=60) == -signal.SIGSEGV
    said = client.stderr()
    assert said.count("the MCP server crashed (SIGSEGV) outside the model: restarting it") == 3, said
    assert "crashed (SIGSEGV) 4 times" in said


def test_a_request_in_flight_when_the_server_crashes_elsewhere_gets_an_error_not_a_second_run(client):
    client.start()
    server = client.server_pid()
    os.kill(server, signal.SIGSTOP)  # the call is read by the relay and waits in the server's pipe
    asked = client.request("tools/call", {"name": "memory_search", "arguments": {"query": "weevil"}})
    time.sleep(0.5)
    os.kill(server, signal.SIGSEGV)
    os.kill(server, signal.SIGCONT)
    result = client.answer(asked)["result"]
    assert result["isError"] and "outside the model" in result["content"][0]["text"], result
    assert data(client.call("memory_search", query="Biscuit"))["results"]
    assert client.close() == 0


@pytest.fixture
def plain_client(tmp_path):
    root = tmp_path / "vault"
    root.mkdir()
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(root), "MARCH_DAEMON": "0"}
    c = Client(env)
    yield c
    if c.proc.poll() is None:
        c.proc.kill()
        c.proc.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_the_server_ends_with_the_process_the_host_started(plain_client, signum):
    # The host stops what it started: the server in the child must not be left running.
    plain_client.start()
    server = plain_client.server_pid()
    os.kill(plain_client.proc.pid, signum)
    code = plain_client.proc.wait(timeout=30)
    assert code in (-signum, 128 + signum), code
    deadline = time.monotonic() + 10
    while Path(f"/proc/{server}").exists() and "Z" not in _state(server):
        assert time.monotonic() < deadline, "the server outlived the process the host started"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_a_crash_right_after_a_crash_leaves_one_answer_per_request(plain_client):
    # Two crashes in a row, the second as soon as the new server is there (before or after it has
    # answered the introduction given again, as the timing falls): the next one is introduced
    # once more, and every request is answered exactly once.
    c = plain_client
    c.start()
    asked = [c.request("tools/list") for _ in range(3)]
    first = c.server_pid()
    os.kill(first, signal.SIGSEGV)
    deadline = time.monotonic() + 60
    while (second := c.server_pid()) == first:
        assert time.monotonic() < deadline
    os.kill(second, signal.SIGSEGV)
    c.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 999}})
    while c.server_pid() == second:
        assert time.monotonic() < deadline
    last = c.request("tools/list")
    assert "result" in c.answer(last, timeout=120)
    for n in asked:
        c.answer(n, timeout=60)  # answered, by the server or with the relay's error
    time.sleep(0.5)
    c.close()
    ids = [m["id"] for m in c.seen if "id" in m]
    assert sorted(ids) == sorted(set(ids)), ids  # nothing answered twice, the introduction included
