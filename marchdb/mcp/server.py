"""``marchdb mcp``: the memory tools over MCP (stdio), for any MCP client.

A thin front over the warm engine (``marchdb serve``) of its home, started
when none runs: the model, the vectors and the watcher live there once, for
this session, the hooks and the CLI alike, instead of a second copy in every
MCP session. When the engine cannot be used (``daemonAutoStart`` off and none
running, or it serves another root) the server holds its own Store: the
model stays loaded between calls and a watcher thread plus the throttled
dirty check keep the index fresh. Tool results are ``ops.call``'s data, and each tool's schema is its
operation's parameters (``ops``).
Lines the SDK cannot parse are answered with a JSON-RPC error (``mcp_wire``).

The process ends promptly when the client closes stdin (once the requests
read before are answered: ``mcp_wire``; the SDK's client sends SIGTERM after
two seconds), on SIGINT and on SIGTERM: it waits for a tool call in
progress, then leaves with ``os._exit`` — freeing the model and
joining the watcher's threads at interpreter exit took one to three
seconds, and the index and the files are crash-safe by design.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from marchdb import ops
from marchdb.errors import MarchError, Unanswered, remote_error, unanswered_message
from marchdb.params import shown
from marchdb.text import bounded, one_line

#: The SDK runs each call of a (sync) tool on a worker thread, so calls may
#: overlap; a store has one connection (its transactions and the per-query
#: SQL function of recall must not interleave): one at a time. Shutdown waits
#: for it too.
ONE_AT_A_TIME = threading.Lock()
#: Seconds a shutdown waits for a tool call in progress (a save) to finish.
SHUTDOWN_WAIT_SECONDS = 10.0


def argument_errors(exc) -> str:
    """A pydantic ``ValidationError`` of tool arguments as one line:
    ``limit: Input should be less than or equal to 100 (got 101); ...``."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        given = "" if err.get("type") == "missing" else f" (got {str(err.get('input'))[:40]!r})"
        parts.append(f"{where}: {err.get('msg', 'invalid')}{given}")
    return one_line("; ".join(parts))


def build_server(run: Callable[[str, dict], dict], index_path: Path):
    """An MCPServer exposing marchdb's tools; ``run(op, args)`` answers them
    (``ops.call`` on a Store, or the warm engine)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS
    from pydantic import ValidationError

    from marchdb import __version__

    class _Server(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            # The SDK checks arguments against the schema first; its pydantic
            # report spans lines and ends in a URL. One line, as every other
            # marchdb error: which argument, what is wrong, what was given.
            if name not in tool_names:
                # The SDK's answer quoted the whole name.
                raise ToolError(f"Unknown tool: {bounded(str(name), 200)}; the tools are {', '.join(tool_names)}")
            # The SDK drops an argument outside the schema: a misspelt run_id
            # would run the recall without it. Refused, as ops.call refuses it.
            taken = tool_params[name]
            unknown = [k for k in (arguments if isinstance(arguments, dict) else {}) if k not in taken]
            if unknown:
                raise ToolError(f"{name} takes no argument {shown(unknown[0])}; it takes {', '.join(taken)}")
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                # Only the SDK's check of the arguments; a crash stays the SDK's (told as one).
                if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                    raise
                # Keeping the cause: the SDK then logs the fields, not the caller's values.
                raise ToolError(f"{name}: {argument_errors(exc.__cause__)}") from exc.__cause__

        async def get_prompt(self, name, arguments=None, context=None):
            # The arguments are checked as a tool's are, first: the SDK's own
            # check answered a date too long or an argument it does not take
            # with code 0 "Error rendering prompt" and a traceback on stderr.
            op = prompt_ops.get(name)
            if op is None:
                raise MCPError(
                    INVALID_PARAMS,
                    f"Unknown prompt: {bounded(str(name), 200)}; the prompts are {', '.join(prompt_ops)}",
                )
            try:
                op.checked(dict(arguments or {}))
            except MarchError as exc:
                raise MCPError(INVALID_PARAMS, bounded(str(exc))) from None
            return await super().get_prompt(name, arguments, context)

    tool_names = [op.name for op in ops.OPERATIONS.values() if op.mcp]
    tool_params = {op.name: [p.name for p in op.params if p.mcp] for op in ops.OPERATIONS.values() if op.mcp}
    prompt_ops = {op.name: op for op in ops.OPERATIONS.values() if op.prompt}
    server = _Server(name="marchdb", version=__version__, instructions=ops.INSTRUCTIONS)

    def call(op: str, /, **args: Any) -> dict:
        try:
            with ONE_AT_A_TIME:
                return run(op, args)
        except MarchError as exc:
            # A tool error the model can read and act on, not a crash (bounded:
            # it may quote what it was given).
            raise ToolError(bounded(str(exc))) from None
        except Exception as exc:
            apsw = sys.modules.get("apsw")
            if apsw is not None and isinstance(exc, apsw.Error):  # a full disk, a read-only index
                from marchdb.index.db import index_error

                raise ToolError(str(index_error(exc, index_path))) from None
            raise

    for op in ops.OPERATIONS.values():
        if op.mcp:
            server.add_tool(_tool_function(op, call), name=op.name, description=op.description)
        if op.prompt:
            server.add_prompt(_prompt(op, call))
    return server


def _prompt(op, call: Callable[..., dict]):
    """The MCP prompt of ``op`` (``memory_reflect``): its arguments are the
    operation's (text, as MCP prompt arguments are), and its message is the
    answer's ``text``. A refusal (a bad day) is an error the client shows."""
    import inspect

    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.prompts.base import Prompt
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    def render(**args: Any) -> str:
        try:
            return str(call(op.name, **{k: v for k, v in args.items() if v is not None})["text"])
        except ToolError as exc:  # raised by ``call``: the message names what is wrong
            raise MCPError(INVALID_PARAMS, str(exc)) from None

    params = [
        inspect.Parameter(
            p.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[str | None, Field(description=p.help, max_length=p.max_chars)],
        )
        for p in op.params
        if p.mcp and p.kind == "str" and not p.required
    ]
    render.__name__ = op.name
    render.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    # The SDK checks a prompt's arguments with pydantic's validate_call, which reads the annotations.
    render.__annotations__ = {**{q.name: q.annotation for q in params}, "return": str}
    return Prompt.from_function(render, name=op.name, description=op.description)


_PYDANTIC = {"minimum": "ge", "maximum": "le", "maxLength": "max_length"}


def _tool_function(op, call: Callable[..., dict]) -> Callable[..., dict]:
    """A function whose signature is ``op``'s parameters (those agents see),
    each annotated with its type and bounds: the SDK derives the tool's JSON
    schema from it, so the schema is the table's."""
    import inspect
    from typing import Literal

    params = []
    for p in op.params:
        if not p.mcp:
            continue
        kind: Any = {"str": str, "int": int, "float": float, "bool": bool, "strs": list[str] | str}[p.kind]
        if p.choices is not None:
            kind = Literal[p.choices]
        # pydantic's names for the table's bounds: it checks them, and writes them into the schema
        field: dict[str, Any] = {"description": p.help}
        field.update({_PYDANTIC[k]: v for k, v in p.bounds().items()})
        if not p.required and p.default is None:
            kind = kind | None
        annotation: Any = Annotated[kind, Field(**field)]
        default = inspect.Parameter.empty if p.required else p.default
        params.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))

    takes_cwd = any(p.name == "cwd" for p in op.params)

    def tool(**args: Any) -> dict:
        if takes_cwd:
            # The folder the host started the server in names the project and
            # its switches (recall off there), as a hook's event names it.
            args["cwd"] = _cwd()
        return call(op.name, **args)

    tool.__name__ = op.name
    tool.__signature__ = inspect.Signature(params, return_annotation=dict)  # type: ignore[attr-defined]
    return tool


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # deleted under the server
        return None


class _Local:
    """The server's own Store, used when the warm engine cannot serve it."""

    def __init__(self, make_store: Callable[[], Any], watch: bool):
        self.make_store, self.watch = make_store, watch
        self.store: Any = None
        self.watcher: Any = None

    def __call__(self, op: str, args: dict) -> dict:
        if self.store is None:
            self.store = self.make_store()
            # A session recalls many times: search the vectors in memory (vecindex).
            self.store.keep_vectors = True
        if self.watch and self.watcher is None:
            from marchdb.engine.watch import start_watcher
            from marchdb.errors import ConfigError

            self.store.embedder()  # loaded once, shared with the watcher's thread
            try:
                # No sync before serving: the watcher thread does the start-up
                # scan, so a large first embedding run never delays the client.
                self.watcher = start_watcher(self.store, log=lambda msg: print(f"marchdb: {msg}", file=sys.stderr))
            except ConfigError:
                pass  # a root that is missing or not a vault: the call below says so (tried again next call)
            else:
                self.store.scan_in_background = self.watcher.want_scan  # started once the call is done
        try:
            return ops.call(self.store, op, args)
        finally:
            if self.watcher is not None:
                self.watcher.start_wanted_scan()


def serve(cfg, make_store: Callable[[], Any], watch: bool = True, use_engine: bool = True) -> None:
    """Run the MCP server on stdio until the client disconnects: through the
    warm engine of ``cfg.home`` when ``use_engine`` (falling back to a Store
    of its own, made by ``make_store``, whenever the engine cannot answer).
    The watcher's thread, if any, is left running: the process is about to
    exit (``main``)."""
    import anyio

    from marchdb.engine import client
    from marchdb.mcp import wire as mcp_wire

    local = _Local(make_store, watch)
    if use_engine and cfg.use_engine and (cfg.daemon_autostart or client.engine_alive(cfg.home)):
        run: Callable[[str, dict], dict] = through_engine(cfg, local)
    else:
        run = local
    anyio.run(mcp_wire.serve, build_server(run, cfg.index_path))


def through_engine(cfg, local: _Local) -> Callable[[str, dict], dict]:
    """The MCP server's way to run a tool: on the warm engine of ``cfg.home``,
    else (from the first time it cannot answer) on ``local``, a Store of this
    process. An engine stopping (idle, an upgrade) is asked once more, once
    it is gone: the call starts the next one. A write the engine may have
    taken is never done again here (``Unanswered``)."""
    from marchdb.engine import calls, client

    def run(op: str, args: dict) -> dict:
        for attempt in (1, 2):
            if local.store is not None:
                break
            try:
                return calls.call(cfg, op, args, autostart=cfg.daemon_autostart, wait=60.0)
            except client.RemoteError as exc:
                raise remote_error(exc.kind, str(exc), exc.exit_code, exc.fields) from None
            except client.Unavailable as exc:
                if not exc.may_redo(op):
                    raise Unanswered(unanswered_message(op, exc)) from None
                if exc.reason == "stopping" and attempt == 1:
                    client.wait_gone(cfg.home, 15.0)  # then the call below starts the next one
                    continue
                print(f"marchdb: the warm engine cannot answer ({exc}); serving from this process", file=sys.stderr)
                break
        return local(op, args)

    return run


def _leave(code: int) -> None:
    """End the process now, once a tool call in progress has finished."""
    finished = ONE_AT_A_TIME.acquire(timeout=SHUTDOWN_WAIT_SECONDS)
    # What the watcher's thread (or a call past the wait) is embedding stays
    # on disk with os._exit, and the next process would take this end for a
    # crash of the model on those texts. (Not imported: a process that never
    # loaded it embedded nothing.)
    sentinel = sys.modules.get("marchdb.index.sentinel")
    if sentinel is not None:
        sentinel.forget_in_flight()
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    finally:
        os._exit(code if finished else 1)


def main(cfg, make_store: Callable[[], Any], watch: bool = True, use_engine: bool = True) -> None:
    """``marchdb mcp``: serve until stdin closes, SIGINT or SIGTERM, then exit
    at once (see the module's doc). Never returns."""

    leaving: list[int] = []

    def on_signal(signum, _frame):
        # Ctrl-C reaches the server twice when it runs under the relay (the terminal's and the
        # relay's): the second must not wait for the first's lock again.
        if not leaving:
            leaving.append(signum)
            _leave(128 + signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        # A local watcher's thread and the model die with the process: a
        # watcher mid-scan is like a killed sync (the next scan repairs it),
        # and nothing it does touches the Markdown files.
        serve(cfg, make_store, watch=watch, use_engine=use_engine)
    except Exception as exc:  # noqa: BLE001 - one line, then leave like any other end
        if _only_broken_pipes(exc):
            # `marchdb mcp | head -1`, a client that stopped reading: no answer can reach it.
            print("marchdb: the client closed the server's stdout (it reads no answers); stopping", file=sys.stderr)
        else:
            print(f"marchdb: the MCP server stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
        _leave(1)
    _leave(0)


def _only_broken_pipes(exc: BaseException) -> bool:
    """Whether ``exc`` (an exception group's leaves, the SDK's task groups
    nest them) is nothing but writes to a wire whose reader is gone."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_broken_pipes(e) for e in exc.exceptions)
    return isinstance(exc, (BrokenPipeError, ConnectionResetError))
