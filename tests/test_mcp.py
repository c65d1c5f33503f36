"""The MCP server driven as a real client would: spawn `marchdb mcp` over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path



def _server_params(home: Path, root: Path, model: Path):
    from mcp.client.stdio import StdioServerParameters

    exe = Path(sys.executable).with_name("marchdb")
    command, args = (str(exe), ["mcp"]) if exe.exists() else (sys.executable, ["-m", "marchdb", "mcp"])
    env = {
        "MARCH_HOME": str(home),
        "MARCH_MEMORY_ROOT": str(root),
        "MARCH_EMBED_MODEL": str(model),
        "PATH": os.environ.get("PATH", ""),
    }
    return StdioServerParameters(command=command, args=args, env=env)


async def _session_calls(params, calls):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            results = {"tools": {t.name: t for t in tools.tools}}
            for key, name, args in calls:
                result = await session.call_tool(name, args)
                text = "".join(getattr(c, "text", "") for c in result.content)
                results[key] = (result.is_error, json.loads(text) if not result.is_error else text)
            return results


def call(params, calls):
    return asyncio.run(asyncio.wait_for(_session_calls(params, calls), timeout=240))


def test_mcp_tools_end_to_end(tmp_path, mixed_vault, default_model_path):
    params = _server_params(tmp_path / "home", mixed_vault.root, default_model_path)
    out = call(
        params,
        [
            ("save", "memory_save", {"name": "Deploy day", "description": "We deploy on Tuesdays, never on Fridays",
                                     "body": "Friday deploys broke the weekend twice.", "tags": ["process"]}),
            ("search", "memory_search", {"query": "Fridays"}),
            ("regex", "memory_search", {"query": "a.b(c [x"}),
            ("open", "memory_open", {"id": "mem_cache"}),
            ("missing", "memory_open", {"id": "mem_nope"}),
            ("recall", "memory_recall", {"text": "why does every request miss the prompt cache?", "run_id": "r1"}),
            ("again", "memory_recall", {"text": "why does every request miss the prompt cache?", "run_id": "r1",
                                        "trigger": "assistant"}),
            ("bad", "memory_save", {"name": " ", "description": "d", "body": "b", "tags": ["x"]}),
            ("context", "memory_context", {"text": "can we deploy on friday?"}),
        ],
    )
    tools = out["tools"]
    assert {"memory_search", "memory_open", "memory_save", "memory_recall"} <= set(tools)
    assert "ripgrep" in tools["memory_search"].description and "not" in tools["memory_search"].description
    assert tools["memory_save"].input_schema["properties"]["tags"]
    err, saved = out["save"]
    assert not err and saved["status"] == "created"
    err, found = out["search"]
    assert not err and found["results"][0]["id"] == saved["id"]
    assert out["regex"][0] is False and out["regex"][1]["results"] == []
    assert out["open"][1]["status"] == "ok" and "prefix cache" in out["open"][1]["markdown"]
    assert out["missing"][1]["status"] == "not_found"
    err, recalled = out["recall"]
    assert not err and recalled["hints"][0]["id"] == "mem_cache"
    assert recalled["text"].startswith("- mem_cache | score=")
    assert all(h["id"] != "mem_cache" for h in out["again"][1]["hints"])  # not twice in one run
    assert out["bad"][0] is True and "name" in out["bad"][1]
    err, ctx = out["context"]
    assert not err and "[agent_profile]" in ctx["text"] and saved["id"] in ctx["text"]
