"""The operations table: every front-end reads its arguments off it, and ``call`` checks them once."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.main import get_command

from marchdb import ops
from marchdb.cli.entry import _quick_args
from marchdb.cli.main import app
from marchdb.errors import InvalidInput
from marchdb.mcp.server import build_server


def _mcp_tools() -> dict:
    server = build_server(lambda op, args: {}, index_path=None)  # type: ignore[arg-type]
    return {t.name: t for t in asyncio.run(server.list_tools())}


def test_the_mcp_schemas_are_the_tables():
    tools = _mcp_tools()
    assert set(tools) == {op.name for op in ops.OPERATIONS.values() if op.mcp}
    for name, tool in tools.items():
        op = ops.get(name)
        assert tool.description == op.description
        schema = tool.input_schema
        offered = [p for p in op.params if p.mcp]
        assert set(schema["properties"]) == {p.name for p in offered}, name
        assert set(schema.get("required", [])) == {p.name for p in offered if p.required}, name
        for p in offered:
            prop = json.dumps(schema["properties"][p.name])
            assert p.help in schema["properties"][p.name]["description"], (name, p.name)
            for choice in p.choices or ():
                assert json.dumps(choice) in prop, (name, p.name, choice)
            if p.high is not None:
                assert f'"maximum": {p.high:g}' in prop, (name, p.name)


def _cli_options(command_name: str) -> dict[str, object]:
    group = get_command(app)
    command = group.commands[command_name]  # type: ignore[attr-defined]
    return {param.name: param for param in command.params}


@pytest.mark.parametrize("op", [op for op in ops.OPERATIONS.values() if op.command], ids=lambda op: op.name)
def test_every_cli_command_offers_what_its_operation_declares(op):
    options = _cli_options(op.command)
    for p in op.params:
        if p.flag is None:
            assert p.name not in options, (op.name, p.name)
            continue
        click_param = options[p.name]
        assert click_param.help == p.help  # type: ignore[attr-defined]
        if p.flag:
            assert p.flag in click_param.opts, (op.name, p.name)  # type: ignore[attr-defined]
            if p.short:
                assert p.short in click_param.opts  # type: ignore[attr-defined]
        else:
            assert click_param.param_type_name == "argument"  # type: ignore[attr-defined]
    assert "as_json" in options


def test_the_quick_path_reads_every_option_of_recall_and_context():
    for op in (ops.RECALL, ops.CONTEXT):
        words = [op.command, "some text"]
        expected = {"text": "some text"}
        for p in op.params:
            if not p.flag:
                continue
            if p.kind == "bool":
                words.append(p.flag)
                expected[p.name] = True
            else:
                value = p.choices[-1] if p.choices else f"v-{p.name}"
                words += [p.flag, value]
                expected[p.name] = value
        parsed = _quick_args(words)
        assert parsed is not None, words
        assert parsed[0] == op.name and parsed[1] == expected


def test_hook_generic_takes_the_options_the_table_marks():
    options = _cli_options("hook")
    marked = {p.name for p in ops.HOOK.params if p.hook}
    assert marked == {"run_id", "trigger", "record_only", "profiles", "project", "conversation"}
    assert marked <= set(options)


class _Recorder:
    """A stand-in store that records the keywords a method gets."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def method(**kwargs):
            self.calls.append((name, kwargs))
            return {"ok": True}

        return method

    def take_notices(self):
        return []


def test_call_fills_defaults_and_refuses_what_is_not_declared():
    store = _Recorder()
    assert ops.call(store, "memory_search", {"query": "cache"}) == {"ok": True}
    assert store.calls == [("search", {"query": "cache", "limit": 10, "include_archived": False})]
    refusals = {
        "unknown argument": ("memory_search", {"query": "x", "limt": 5}),
        "not an object": ("memory_search", ["x"]),
        "missing": ("memory_search", {}),
        "too many": ("memory_search", {"query": "x", "limit": 101}),
        "a bool for a number": ("memory_search", {"query": "x", "limit": True}),
        "text for a bool": ("memory_recall", {"text": "x", "record_only": "yes"}),
        "a choice": ("memory_recall", {"text": "x", "trigger": "system"}),
        "a list of numbers": ("memory_save", {"tags": [1, 2]}),
        "an operation": ("memory_delete", {}),
    }
    for why, (name, args) in refusals.items():
        with pytest.raises(InvalidInput) as caught:
            ops.call(store, name, args)
        assert "\n" not in str(caught.value), why
    assert len(store.calls) == 1  # nothing refused reached the store
    with pytest.raises(InvalidInput, match="takes no argument 'limt'; it takes query, limit, include_archived"):
        ops.call(store, "memory_search", {"query": "x", "limt": 5})
    ops.call(store, "memory_save", {"tags": "one", "supersedes": "mem_a"})  # one text is a list of one
    assert store.calls[-1][1]["tags"] == ["one"] and store.calls[-1][1]["supersedes"] == ["mem_a"]


def test_every_operation_runs_a_store_method_of_its_parameters():
    import inspect

    from marchdb.store import Store

    for op in ops.OPERATIONS.values():
        method = getattr(Store, op.method, None)
        assert method is not None, op.name
        keywords = inspect.signature(method).parameters
        missing = [p.name for p in op.params if p.name not in keywords]
        assert not missing, (op.name, missing)


def said_by_the_fronts(store, root, api, call: tuple[str, dict], cli: list[str]) -> set[str]:
    """What the API (``api()``), ``ops.call`` (``call``: the operation and its
    arguments) and the CLI (``cli``: the command's words) each say refusing an
    argument, the operation named as ``memory_recall`` throughout."""
    from typer.testing import CliRunner

    from marchdb import InvalidInput
    from marchdb.cli.main import app

    said = set()
    with pytest.raises(InvalidInput) as by_api:
        api()
    said.add(str(by_api.value))
    with pytest.raises(InvalidInput) as by_call:
        ops.call(store, *call)
    said.add(str(by_call.value).replace(call[0], "memory_recall"))
    base = ["--home", str(store.cfg.home), "--root", str(root)]
    by_cli = CliRunner().invoke(app, [*base, *cli], env={"MARCH_EMBED_MODEL": "none.gguf"})
    assert by_cli.exit_code == 2
    said.add(by_cli.stderr.strip().removeprefix("error: "))
    return said


def test_every_front_refuses_a_blank_run_id_with_the_same_words(tmp_path, mixed_vault, store):
    # march_recall checked its arguments by hand and said it otherwise; Store.open, search and
    # context checked again what the operations table had checked.
    from marchdb import InvalidInput

    store.sync(embed=False)
    said = said_by_the_fronts(
        store,
        mixed_vault.root,
        lambda: store.recall("cache", run_id="  "),
        ("memory_recall", {"text": "cache", "run_id": ""}),
        ["recall", "cache", "--run", " "],
    )
    with pytest.raises(InvalidInput) as sql:
        store.query("SELECT id FROM march_recall('cache', 'user', '')", write=True)
    said.add(str(sql.value).replace("march_recall", "memory_recall"))
    assert said == {"memory_recall: run_id must not be empty: Id of the current agent run (for de-duplication)."}


def test_a_name_of_several_lines_is_refused_by_every_front_with_the_same_words(mixed_vault, store):
    # A project, run or conversation holding a line break matched no tag and split the line it was logged on.
    from marchdb import InvalidInput

    store.sync(embed=False)
    said = said_by_the_fronts(
        store,
        mixed_vault.root,
        lambda: store.recall("cache", project="march\nother"),
        ("memory_context", {"text": "cache", "project": "march\r"}),
        ["recall", "cache", "--project", "a\tb"],
    )
    assert said == {"memory_recall: project must be one line of text, without line breaks or control characters"}
    for name in ("run_id", "conversation"):
        with pytest.raises(InvalidInput, match=f"{name} must be one line"):
            ops.get("memory_recall").checked({"text": "cache", name: "r1\nr2"})
    assert ops.get("memory_recall").checked({"text": "cache", "project": "march-cli é 项目"})["project"]


def test_a_blank_or_long_id_is_refused_by_the_table():
    from marchdb.vault import notes

    assert ops.MAX_ID_CHARS == notes.MAX_ID_LEN
    open_op = ops.get("memory_open")
    with pytest.raises(InvalidInput, match="memory_open: id must not be empty"):
        open_op.checked({"id": "  "})
    with pytest.raises(InvalidInput, match="at most 128 are taken"):
        open_op.checked({"id": "m" * 129})
