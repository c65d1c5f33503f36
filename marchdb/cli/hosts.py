"""The host commands of the ``marchdb`` CLI: ``serve``, ``hook``, ``install``,
``uninstall``, ``mcp`` and ``watch`` — what runs beside an agent host.

They register on ``cli.app`` (``cli`` imports this module) and, like every
command, only format what the library returns.
"""

from __future__ import annotations

import inspect
import os
from typing import Optional

import typer

from marchdb import ops
from marchdb.cli.app import JsonOpt, _emit, _store, app, command, say, with_parameters
from marchdb.errors import InvalidInput, Retry
from marchdb.hosts import HOSTS


@command(app)
def serve(
    ctx: typer.Context,
    stop: bool = typer.Option(False, "--stop", help="Stop the engine serving this home."),
    status: bool = typer.Option(False, "--status", help="Say whether an engine serves this home, and how it does."),
    idle: Optional[float] = typer.Option(None, "--idle", help="Minutes without a request before it exits."),
    as_json: bool = JsonOpt,
):
    """Run the warm engine (model, vectors, watcher) for this home on its Unix socket, in the foreground."""
    from marchdb.config import IDLE_RULE, idle_minutes_ok, load_config
    from marchdb.engine import client, daemon

    obj = ctx.find_root().obj or {}
    cfg = load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
    if stop or status:
        info: dict = {
            "home": str(cfg.home),
            "socket": str(client.socket_path(cfg.home)),
            "pid": client.engine_pid(cfg.home),
        }
        if stop:
            info["stopped"] = daemon.stop(cfg.home)
            if client.engine_alive(cfg.home):  # still busy with a request (a hook reading a slow file?)
                pid = client.engine_pid(cfg.home)
                end = f"end it with `kill {pid}`" if pid else "end the `marchdb serve` process"
                raise Retry(
                    f"the engine did not stop within {daemon.STOP_WAIT_SECONDS:.0f} s: a request is still running; "
                    f"try again, or {end}"
                )
        elif info["pid"] is not None:
            try:
                info.update(client.request(cfg.home, "ping", {}, timeout=5.0)[0])
            except client.Unavailable as exc:
                # It binds its socket only once warm: until then, "not running" means warming up.
                info["state"] = "warming up" if exc.reason == "not running" else f"not answering ({exc})"
        if as_json:
            _emit(info)
        elif stop:
            say("stopped" if info["stopped"] else "no engine was running")
        elif info["pid"] is None:
            say(f"no engine serves {cfg.home}")
        else:
            if "state" in info:
                say(f"engine pid {info['pid']} for {cfg.home}: {info['state']}")
            else:
                say(
                    f"engine pid {info['pid']} on {info['socket']}: {info.get('requests', '?')} requests, "
                    f"model {info.get('model', '?')}"
                )
        return
    if idle is not None and not idle_minutes_ok(idle):
        raise InvalidInput(f"--idle must be {IDLE_RULE}, got {idle:g}")
    from marchdb.hosts import relay

    engine = daemon.Engine(cfg, idle_seconds=None if idle is None else idle * 60, handlers=relay.HANDLERS)
    raise typer.Exit(engine.run())


def _hook(ctx: typer.Context, host: str, args: dict, _as_json: bool):
    from marchdb.hosts.hook import run_hook

    obj = ctx.find_root().obj or {}
    flags = {k: obj[k] for k in ("home", "root", "model") if obj.get(k)}
    # "--name=value": a value that starts with '-' stays a value
    options = []
    for p in ops.HOOK.params:
        value = args.get(p.name) if p.hook else None
        if value is True:
            options.append(str(p.flag))
        elif isinstance(value, str) and value != p.default:
            options.append(f"{p.flag}={value}")
    raise typer.Exit(run_hook(flags, [host, *(options if host == "generic" else [])]))


hook = command(app, "hook")(
    with_parameters(
        _hook,
        [
            inspect.Parameter(
                "host",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=typer.Argument(..., help=" | ".join(HOSTS)),
                annotation=str,
            )
        ],
        [p for p in ops.HOOK.params if p.hook],
        "Answer one hook event on stdin (a host's hook JSON; generic: the message, with these options); "
        "always exits 0.",
        json_option=False,
    )
)


@command(app, "call")
def call_(
    ctx: typer.Context,
    operation: str = typer.Argument(..., help=f"One of: {', '.join(n for n, o in ops.OPERATIONS.items() if o.mcp)}."),
    arguments: Optional[str] = typer.Argument(
        None, help="The arguments as a JSON object; '-' reads them from stdin; omitted: none."
    ),
    as_json: bool = typer.Option(True, "--json", help="Print JSON (always: the answer is JSON).", hidden=True),
):
    """Run one operation with JSON arguments and print its JSON answer: what an agent's tool call does (scripts, Hermes)."""
    import json

    from marchdb.cli.app import _call, _read_stdin_arguments

    op = ops.get(operation)
    if not op.mcp:
        raise InvalidInput(
            f"{operation} is not an agent operation; it takes: {', '.join(t['name'] for t in ops.tools())}"
        )
    raw = _read_stdin_arguments() if arguments == "-" else arguments or "{}"
    try:
        args = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(
            f'the arguments are not JSON ({exc}); give an object such as \'{{"query": "cache"}}\''
        ) from None
    _emit(_call(ctx, op.name, args))


@command(app)
def tools(
    as_json: bool = typer.Option(True, "--json", help="Print JSON (always: the answer is JSON).", hidden=True),
):
    """Print the agent operations as JSON tool schemas (name, description, parameters)."""
    _emit({"tools": ops.tools()})


def _host_help() -> str:
    from marchdb.hosts import install

    return " | ".join(install.installable())


_HOST_HELP = _host_help()


@command(app, "install")
def install_(
    ctx: typer.Context,
    host: str = typer.Argument(..., help=_HOST_HELP),
    project: Optional[str] = typer.Option(
        None, "--project", help="Only this project (its folder); the default is every project of this user."
    ),
    user: bool = typer.Option(False, "--user", help="For every project of this user (the default)."),
    as_json: bool = JsonOpt,
):
    """Add marchdb's hooks to a host's settings (kept: everything else; written: a backup first)."""
    from marchdb.config import load_config
    from marchdb.hosts import install

    if user and project:
        raise InvalidInput("choose --user or --project DIR, not both")
    install.target(host)
    obj = ctx.find_root().obj or {}
    cfg = load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
    # What only this shell says (a flag, an environment variable) goes into
    # the command; config.json is read by the hook itself.
    root = cfg.memory_root if cfg.root_source in ("--root", "MARCH_MEMORY_ROOT") else None
    model = obj.get("model") or os.environ.get("MARCH_EMBED_MODEL") or None
    argv = install.marchdb_argv(cfg.home, root, model, launcher=True)
    results = install.install(host, install.project_folder(project), argv, install.carried_env())
    from marchdb.lifecycle import keep

    if results and (note := keep.install_note(cfg, host)):
        results[-1].notes = (*results[-1].notes, note)
    _report_install(results, as_json, "added")


@command(app)
def uninstall(
    host: str = typer.Argument(..., help=_HOST_HELP),
    project: Optional[str] = typer.Option(None, "--project", help="The project whose settings hold them."),
    user: bool = typer.Option(False, "--user", help="From this user's settings (the default)."),
    as_json: bool = JsonOpt,
):
    """Remove exactly the hooks `marchdb install` added; everything else stays."""
    from marchdb.hosts import install

    if user and project:
        raise InvalidInput("choose --user or --project DIR, not both")
    install.target(host)
    _report_install(install.uninstall(host, install.project_folder(project)), as_json, "removed")


def _report_install(results: list, as_json: bool, verb: str) -> None:
    if as_json:
        _emit({"results": [r.to_dict() for r in results]})
        return
    for result in results:
        if not result.changed:
            say(f"nothing to change in {result.settings}")
        else:
            say(f"{verb} marchdb's hooks ({', '.join(result.events)}) in {result.settings}")
            for command in result.replaced:
                say(f"in place of an earlier marchdb hook: {command}")
            if result.backup:
                say(f"the previous file is kept as {result.backup}")
        for note in result.notes:
            say(f"note: {note}")


@command(app)
def mcp(ctx: typer.Context, no_watch: bool = typer.Option(False, "--no-watch", help="Dirty checks only.")):
    """Run the MCP server on stdio (memory_search, memory_open, memory_save, memory_log, memory_recall, memory_context)."""
    from marchdb.config import load_config
    from marchdb.mcp.server import main
    from marchdb.mcp.supervise import supervise

    obj = ctx.find_root().obj or {}
    cfg = load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
    supervise(cfg.index_path)  # the server runs in a child, which a crash of llama.cpp does not take the session with
    main(cfg, lambda: _store(ctx), watch=not no_watch, use_engine=not (obj.get("root") or obj.get("model")))


@command(app)
def watch(ctx: typer.Context, as_json: bool = JsonOpt):
    """Watch the memory root and keep the index (and vectors) up to date until Ctrl-C."""
    import time

    from marchdb.clock import utc_now_iso
    from marchdb.engine.watch import start_watcher

    store = _store(ctx)

    def log(message: str) -> None:
        if as_json:
            _emit({"event": message, "at": utc_now_iso()})
        else:
            say(f"{time.strftime('%H:%M:%S')} {message}", err=True)

    watcher = start_watcher(store, log=log)
    log(f"watching {store.root} ({watcher.mode}); Ctrl-C to stop")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()
