"""The MCP server driven as a real client would: spawn `marchdb mcp` over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import model_command_env, wait_idle
from typer.testing import CliRunner

from marchdb.cli.main import app


@pytest.fixture
def server(tmp_path, mixed_vault, default_model_path):
    """Parameters to spawn `marchdb mcp` on the mixed vault with the default model."""
    from mcp.client.stdio import StdioServerParameters

    from marchdb.config import load_config
    from marchdb.store import Store

    # Indexed and embedded first: the server's watcher embeds in the
    # background, and a recall before it finishes runs on BM25 alone.
    with Store(load_config(home=tmp_path / "home", root=mixed_vault.root, model=str(default_model_path), env={})) as s:
        s.sync()
    exe = Path(sys.executable).with_name("marchdb")
    command, args = (str(exe), ["mcp"]) if exe.exists() else (sys.executable, ["-m", "marchdb", "mcp"])
    env = {
        "MARCH_HOME": str(tmp_path / "home"),
        "MARCH_MEMORY_ROOT": str(mixed_vault.root),
        "MARCH_EMBED_MODEL": str(default_model_path),
        "MARCH_MODELS_DIR": str(default_model_path.parent),
        "PATH": os.environ.get("PATH", ""),
        "MARCH_DAEMON": "0",  # the server's own engine (test_daemon.py covers the shared one)
    }
    return StdioServerParameters(command=command, args=args, env=env)


async def _session_calls(params, calls):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            prompts = await session.list_prompts()
            results = {"tools": {t.name: t for t in tools.tools}, "server": init.server_info}
            results["prompts"] = {p.name: p for p in prompts.prompts}
            for key, name, args in calls:
                result = await session.call_tool(name, args)
                text = "".join(getattr(c, "text", "") for c in result.content)
                results[key] = (result.is_error, json.loads(text) if not result.is_error else text)
            return results


def call(params, calls):
    """Run ``calls`` ((key, tool, args)...) in one session; {key: (is_error, data)}."""
    return asyncio.run(asyncio.wait_for(_session_calls(params, calls), timeout=240))


def test_tools_are_listed_with_their_descriptions(server):
    from marchdb import __version__

    answer = call(server, [])
    assert (answer["server"].name, answer["server"].version) == ("marchdb", __version__)
    tools = answer["tools"]
    assert set(tools) == {
        "memory_search",
        "memory_open",
        "memory_save",
        "memory_log",
        "memory_now",
        "memory_recall",
        "memory_context",
    }
    assert set(answer["prompts"]) == {"memory_reflect"}  # a prompt for the host's model, not a tool
    assert "conflicts_with" in tools["memory_save"].input_schema["properties"]
    assert tools["memory_now"].input_schema["properties"]["text"]["anyOf"][0]["maxLength"] == 2000
    assert (
        "daily log" in tools["memory_log"].description
        and "include_archived" in tools["memory_search"].input_schema["properties"]
    )
    assert "ripgrep" in tools["memory_search"].description and "NOT semantic" in tools["memory_search"].description
    assert tools["memory_save"].input_schema["properties"]["tags"]
    for name in ("memory_recall", "memory_context"):  # the current project, optional
        schema = tools[name].input_schema
        assert "project" in schema["properties"] and "project" not in schema.get("required", [])


def test_save_then_search_finds_it(server):
    out = call(
        server,
        [
            (
                "save",
                "memory_save",
                {
                    "name": "Deploy day",
                    "description": "We deploy on Tuesdays, never on Fridays",
                    "body": "Friday deploys broke the weekend twice.",
                    "tags": ["process"],
                },
            ),
            ("search", "memory_search", {"query": "Fridays"}),
            ("regex", "memory_search", {"query": "a.b(c [x"}),
        ],
    )
    err, saved = out["save"]
    assert not err and saved["status"] == "created"
    err, found = out["search"]
    assert not err and found["results"][0]["id"] == saved["id"]
    assert out["regex"] == (False, out["regex"][1]) and out["regex"][1]["results"] == []


def test_open_answers_found_and_not_found_as_data(server):
    out = call(server, [("open", "memory_open", {"id": "mem_cache"}), ("missing", "memory_open", {"id": "mem_nope"})])
    assert out["open"][1]["status"] == "ok" and "prefix cache" in out["open"][1]["markdown"]
    assert out["missing"] == (False, out["missing"][1]) and out["missing"][1]["status"] == "not_found"


def test_recall_hints_once_per_run(server):
    text = "why does every request miss the prompt cache?"
    out = call(
        server,
        [
            ("recall", "memory_recall", {"text": text, "run_id": "r1"}),
            ("again", "memory_recall", {"text": text, "run_id": "r1", "trigger": "assistant"}),
        ],
    )
    err, recalled = out["recall"]
    assert not err and recalled["hints"][0]["id"] == "mem_cache"
    assert recalled["text"].startswith("- mem_cache | score=")
    assert all(h["id"] != "mem_cache" for h in out["again"][1]["hints"])  # not twice in one run


def test_bad_input_is_a_tool_error_the_model_can_read(server):
    out = call(
        server,
        [
            ("bad", "memory_save", {"name": " ", "description": "d", "body": "b", "tags": ["x"]}),
            ("limit", "memory_search", {"query": "x", "limit": 101}),
            ("missing", "memory_search", {}),
        ],
    )
    assert out["bad"][0] is True and "name" in out["bad"][1]
    # The SDK's own argument checks answer in one line too (they spanned lines and ended in a URL).
    assert out["limit"] == (True, "memory_search: limit: Input should be less than or equal to 100 (got '101')")
    assert out["missing"][0] is True and out["missing"][1].startswith("memory_search: query: Field required")
    assert "\n" not in out["missing"][1] and "pydantic" not in out["missing"][1]


def test_context_has_profiles_and_hints(server):
    out = call(server, [("context", "memory_context", {"text": "why does every request miss the prompt cache?"})])
    err, ctx = out["context"]
    assert not err and "[agent_profile]" in ctx["text"] and "mem_cache" in ctx["text"]


def test_cli_json_and_mcp_answer_with_the_same_fields(server, tmp_path, mixed_vault, default_model_path):
    """One data shape per operation, whichever front-end renders it."""
    base = ["--home", str(tmp_path / "cli-home"), "--root", str(mixed_vault.root), "--model", str(default_model_path)]
    runner = CliRunner()

    def cli(*args):
        result = runner.invoke(app, [*base, *args, "--json"])
        assert result.exit_code in (0, 5), result.output
        return json.loads(result.stdout)

    via_cli = {
        "recall": cli("recall", "why does the prompt cache miss?", "--run", "r9"),
        "assistant": cli("recall", "prompt cache", "--run", "r9", "--trigger", "assistant"),
        "recorded": cli(  # another conversation: r9's hints are not suppressed there
            "recall", "why does the prompt cache miss?", "--run", "r10", "--conversation", "c2", "--record-only"
        ),
        "open": cli("open", "mem_cache"),
        "missing": cli("open", "mem_nope"),
        "search": cli("search", "cache"),
        "context": cli("context", "why does the prompt cache miss?"),
        "log": cli("log", "CLI capture", "from the CLI"),
        # Saves last, of memories no recall above asks about; topics of their own, so that no
        # save is taken for a near-duplicate of the other front-end's.
        "created": cli(
            "save", "--name", "Green tea", "-d", "Brew it at 80 degrees", "-t", "tea", "--body", "Not boiling"
        ),
        "updated": cli("save", "--id", "mem_dog", "-t", "pets", "-t", "health", "-t", "vet"),
    }
    out = call(
        server,
        [
            ("recall", "memory_recall", {"text": "why does the prompt cache miss?", "run_id": "r9"}),
            ("assistant", "memory_recall", {"text": "prompt cache", "run_id": "r9", "trigger": "assistant"}),
            (
                "recorded",
                "memory_recall",
                {"text": "why does the prompt cache miss?", "run_id": "r10", "conversation": "c2", "record_only": True},
            ),
            ("open", "memory_open", {"id": "mem_cache"}),
            ("missing", "memory_open", {"id": "mem_nope"}),
            ("search", "memory_search", {"query": "cache"}),
            ("context", "memory_context", {"text": "why does the prompt cache miss?"}),
            ("log", "memory_log", {"title": "MCP capture", "text": "from the MCP server"}),
            (
                "created",
                "memory_save",
                {
                    "name": "Bicycle tyre pressure",
                    "description": "Road bike tyres take 6 bar, the gravel bike 3",
                    "tags": ["cycling"],
                    "body": "Check the pressure every week; tyres lose air slowly.",
                },
            ),
            ("updated", "memory_save", {"id": "mem_hike", "tags": ["户外", "hiking"]}),
        ],
    )
    for key, data in via_cli.items():
        err, mcp_data = out[key]
        assert not err, mcp_data
        # notices are per process (the CLI's home is new: it reports the index it created)
        assert set(data) - {"notices"} == set(mcp_data) - {"notices"}, key
    assert via_cli["recall"]["hints"][0].keys() == out["recall"][1]["hints"][0].keys()
    assert out["recorded"][1]["hints"] == [] and out["recorded"][1]["recorded"][0]["id"] == "mem_cache"
    for key in ("created", "updated"):
        assert via_cli[key]["status"] == out[key][1]["status"] == key, (via_cli[key], out[key])


def test_the_server_is_a_thin_front_over_the_warm_engine(server, tmp_path):
    from marchdb.engine import client, daemon

    server.env.pop("MARCH_DAEMON")  # the default: share the home's engine
    home = Path(server.env["MARCH_HOME"])
    try:
        out = call(
            server,
            [
                ("recall", "memory_recall", {"text": "why does every request miss the prompt cache?"}),
                ("missing", "memory_open", {"id": "mem_nope"}),
                ("bad", "memory_save", {"name": " ", "description": "d", "body": "b", "tags": ["x"]}),
            ],
        )
        assert out["recall"][1]["hints"][0]["id"] == "mem_cache"
        assert out["missing"][1]["status"] == "not_found"
        assert out["bad"][0] is True and "name" in out["bad"][1]  # the engine's refusal, as a tool error
        pid = client.engine_pid(home)
        assert pid is not None
        assert client.request(home, "ping", {})[0]["requests"] == 3  # the three calls went to the engine
    finally:
        daemon.stop(home)


def test_memory_log_appends_to_the_day_through_the_server(server, mixed_vault):
    out = call(
        server,
        [
            ("one", "memory_log", {"title": "Gateway timeout raised"}),
            ("two", "memory_log", {"title": "Second", "text": "more"}),
        ],
    )
    assert not out["one"][0] and out["one"][1]["status"] == "created"
    assert out["two"][1]["status"] == "appended" and out["two"][1]["id"] == out["one"][1]["id"]
    text = Path(out["two"][1]["path"]).read_text()
    assert "- Gateway timeout raised" in text and "- Second\n\nmore" in text


def test_the_working_page_and_the_reflection_prompt_through_the_server(server, mixed_vault):
    out = call(
        server,
        [
            ("log", "memory_log", {"title": "Decided to use Postgres for the ledger"}),
            ("set", "memory_now", {"text": "Migrating the gateway; blocked on DNS."}),
            ("read", "memory_now", {}),
            ("context", "memory_context", {}),
            ("bad", "memory_now", {"text": "x", "clear": True}),
        ],
    )
    assert out["set"][1]["status"] == "set" and out["read"][1]["text"] == "Migrating the gateway; blocked on DNS."
    assert "[now]\nupdated just now" in out["context"][1]["text"] and out["context"][1]["now"]["stale"] is False
    assert out["bad"][0] is True and "not both" in out["bad"][1]

    async def prompt():
        from mcp.client.session import ClientSession
        from mcp.client.stdio import stdio_client

        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.get_prompt("memory_reflect", {})

    got = asyncio.run(asyncio.wait_for(prompt(), timeout=240))
    text = got.messages[0].content.text
    assert text.startswith("Reflect on the daily log of ") and "Decided to use Postgres for the ledger" in text


def _engine_that_answers(home: Path, answers: list[bytes]):
    """A stand-in engine on the home's socket: one connection per answer, in
    turn; returns the thread and the requests it read."""
    import socket
    import threading

    from marchdb.engine import client

    path = client.socket_path(home)
    home.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    got: list[dict] = []

    def serve():
        with listener:
            for answer in answers:
                conn, _ = listener.accept()
                with conn:
                    got.append(json.loads(conn.makefile("rb").readline()))
                    conn.sendall(answer + b"\n")
        path.unlink()

    thread = threading.Thread(target=serve)
    thread.start()
    return thread, got


STOPPING = b'{"ok": false, "error": {"kind": "stopping", "message": "the engine is stopping", "exit_code": 1}}'


@pytest.mark.parametrize("second", ["answers", "stops too"])
def test_an_engine_that_is_stopping_is_asked_once_more(tmp_path, mixed_vault, second, capsys):
    # An engine going idle between two tool calls answers "stopping": the
    # server asks the next engine, and serves from its own store only if that
    # one cannot answer either.
    from marchdb.config import load_config
    from marchdb.mcp.server import _Local, through_engine
    from marchdb.store import Store

    cfg = load_config(home=tmp_path / "home", root=mixed_vault.root, env={})
    fine = json.dumps({"ok": True, "data": {"hints": [], "by": "the next engine"}, "ms": 1}).encode()
    thread, got = _engine_that_answers(cfg.home, [STOPPING, fine if second == "answers" else STOPPING])
    local = _Local(lambda: Store(cfg, use_model=False), watch=False)
    try:
        out = through_engine(cfg, local)("memory_recall", {"text": "Dog's medication carprofen tablet"})
        thread.join(10)
        assert [r["op"] for r in got] == ["memory_recall", "memory_recall"]
        if second == "answers":
            assert out == {"hints": [], "by": "the next engine"} and local.store is None
        else:
            assert [h["id"] for h in out["hints"]] == ["mem_dog"] and local.store is not None
            assert "serving from this process" in capsys.readouterr().err
    finally:
        if local.store is not None:
            local.store.close()


def test_a_crash_inside_a_tool_stays_the_sdks_error_and_shows_no_internals(tmp_path):
    """Only the SDK's check of the arguments is rewritten into one line; a
    tool that crashes (even with a pydantic error of its own) is reported by
    the SDK as an error executing the tool, its message kept out of the answer."""
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from pydantic import TypeAdapter, ValidationError

    from marchdb.mcp.server import build_server

    def crash(op, args):
        if args["query"] == "pydantic":
            TypeAdapter(int).validate_python("not a number")
        raise RuntimeError("secret internals")

    server = build_server(crash, tmp_path / "index.sqlite")

    async def ask(args):
        with pytest.raises(ToolError) as caught:
            await server.call_tool("memory_search", args)
        return caught

    for query, cause in (("boom", RuntimeError), ("pydantic", ValidationError)):
        caught = asyncio.run(ask({"query": query}))
        assert caught.type is UnexpectedToolError and isinstance(caught.value.__cause__, cause)
        assert str(caught.value) == "Error executing tool memory_search"
    argument = asyncio.run(ask({"query": "x", "limit": 500}))
    assert argument.type is ToolError and str(argument.value).startswith("memory_search: limit: ")


def test_the_servers_own_dirty_check_starts_once_the_call_is_done(tmp_path, mixed_vault):
    # As in the engine: run beside the recall, the stat walk took the core and the GIL it needed.
    from marchdb.config import load_config
    from marchdb.index import db
    from marchdb.mcp.server import _Local
    from marchdb.store import Store

    cfg = load_config(home=tmp_path / "home", root=mixed_vault.root, env={})
    local = _Local(lambda: Store(cfg, use_model=False), watch=True)
    try:
        local("memory_recall", {"text": "warm up"})  # starts the watcher
        watcher = local.watcher
        assert wait_idle(watcher)
        watcher._observer.stop()  # it hears nothing now: only the dirty check finds changes
        watcher._observer.join(5)
        mixed_vault.memory("late.md", "mem_late", name="Late arrival", description="Heard by no watcher")
        with local.store.con:
            db.set_meta(local.store.con, "last_scan_epoch", "0")
        local.store.scanned_at = None  # the watcher's start-up scan, as this process knows it
        logged_first: list[bool] = []
        asked = watcher.request_scan

        def request_scan(**kwargs):
            # The call's recall is done and logged by the time the scan is asked for.
            logged_first.append(local.store.con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1)
            asked(**kwargs)

        watcher.request_scan = request_scan
        out = local("memory_recall", {"text": "Dog's medication carprofen tablet", "run_id": "r1"})
        assert [h["id"] for h in out["hints"]] == ["mem_dog"] and logged_first == [True]
        assert wait_idle(watcher)
        assert "mem_late" in {r[0] for r in local.store.con.execute("SELECT id FROM memory_index")}
    finally:
        if local.watcher is not None:
            local.watcher.stop()
        if local.store is not None:
            local.store.close()


def test_an_unknown_tool_or_method_is_not_echoed_whole(tmp_path):
    # The SDK answered "Unknown tool: <the whole name>" and "Method not found" with the method as data.
    from mcp.server.mcpserver.exceptions import ToolError

    from marchdb.mcp import wire
    from marchdb.mcp.server import build_server
    from marchdb.text import MAX_ERROR_CHARS

    server = build_server(lambda op, args: {}, tmp_path / "index.sqlite")
    with pytest.raises(ToolError) as caught:
        asyncio.run(server.call_tool("x" * 100_000, {}))
    assert len(str(caught.value)) <= MAX_ERROR_CHARS and "Unknown tool" in str(caught.value)
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "m" * 100_000}).encode()
    passed, answer = wire.check_line(line)
    assert passed is None and len(answer) < 2 * MAX_ERROR_CHARS and '"id": 1' in answer, answer[:300]


def test_a_server_ending_while_its_watcher_embeds_leaves_no_suspects(tmp_path, mixed_vault, default_model_path):
    # The server leaves with os._exit: the batch its watcher was embedding kept
    # its in-flight file, and the next process took the end for a crash of the
    # model on those texts (each embedded again alone, in a process of its own).
    import subprocess
    import time

    for i in range(60):
        body = " ".join(f"word{(i * 7 + j) % 997} topic{j % 13}" for j in range(200))
        mixed_vault.memory(f"bulk/n{i}.md", f"mem_bulk{i}", name=f"Bulk {i}", description=f"bulk note {i}", body=body)
    env = model_command_env(tmp_path / "home", mixed_vault.root, default_model_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "marchdb", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    for message in (
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_open", "arguments": {"id": "x"}},
        },
    ):
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
    proc.stdout.readline()
    proc.stdout.readline()  # the call is answered: the watcher runs, and embeds the backlog
    index = tmp_path / "home" / "index.sqlite"
    deadline = time.monotonic() + 120
    while not list(index.parent.glob("index.sqlite.embedding.*")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.005)
    proc.stdin.close()
    assert proc.wait(30) == 0
    proc.stdout.close()
    if proc.stderr is not None:
        proc.stderr.close()
    assert list(index.parent.glob("index.sqlite.embedding.*")) == []
