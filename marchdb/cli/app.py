"""The ``marchdb`` command line. It wraps the library and formats its data.

Every command takes ``--json`` and then prints exactly one JSON object on
stdout. Errors print one line on stderr and exit non-zero.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Any, Literal, Optional

import typer

from marchdb import ops
from marchdb.cli import render
from marchdb.errors import (
    EXIT_PIPE,
    IndexUnavailable,
    InvalidInput,
    MarchError,
    Unanswered,
    remote_error,
    unanswered_message,
)
from marchdb.text import error_line

# Plain help, as click prints it: typer's rich help imports rich and a
# Markdown parser, more than half of what `marchdb --help` took.
app = typer.Typer(
    help="marchdb: a local memory engine for AI agents (Markdown memories, one SQLite index).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
model_app = typer.Typer(
    help="Build, inspect and self-test the embedding model.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(model_app, name="model")

JsonOpt = typer.Option(False, "--json", help="Print one JSON object on stdout.")


def command(group: typer.Typer, *args, **kwargs):
    """``group.command`` that turns every error into one stderr line and an
    exit code: a MarchError its own, an SQLite error escaping the library (a
    full disk, a read-only index) 7, anything else 1 ("a bug"; the traceback
    with ``MARCHDB_DEBUG=1``)."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            try:
                result = fn(*a, **kw)
                sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
                return result
            except MarchError as exc:
                say(f"error: {error_line(exc)}", err=True)
                raise typer.Exit(exc.exit_code) from None
            except (typer.Exit, typer.Abort):
                raise
            except BrokenPipeError:
                # The reader went away (`| head`): end quietly with the status
                # of a command killed by SIGPIPE, never "a bug" (1).
                render.quiet_stdout()
                raise typer.Exit(EXIT_PIPE) from None
            except Exception as exc:
                apsw = sys.modules.get("apsw")  # loaded by then if SQLite raised it
                if apsw is not None and isinstance(exc, apsw.Error):
                    from marchdb.index.db import index_error

                    say(f"error: {error_line(index_error(exc, _index_path(a, kw)))}", err=True)
                    raise typer.Exit(IndexUnavailable.exit_code) from None
                if os.environ.get("MARCHDB_DEBUG"):
                    raise
                say(
                    f"error: unexpected {type(exc).__name__}: {error_line(exc)}; this is a bug, please report it "
                    "(MARCHDB_DEBUG=1 prints where it happened)",
                    err=True,
                )
                raise typer.Exit(MarchError.exit_code) from None

        return group.command(*args, **kwargs)(wrapper)

    return decorate


#: The Python type typer reads for each kind of ``ops.Param``.
_CLI_TYPES: dict[str, Any] = {
    "str": Optional[str],
    "int": int,
    "float": float,
    "bool": bool,
    "strs": Optional[list[str]],
}


_METAVARS = {"str": "TEXT", "strs": "TEXT", "int": "INTEGER", "float": "NUMBER"}


def typer_parameter(p: ops.Param, flag: str | None = None) -> inspect.Parameter:
    """The typer argument or option of an operation's parameter (``flag``:
    another spelling than the table's, for a command that offers it apart)."""
    spelt = p.flag if flag is None else flag
    if spelt is None:
        raise ValueError(f"{p.name} is not a CLI parameter")
    metavar: str | None
    if spelt == "":
        metavar = p.metavar or p.name.upper()
        info = typer.Argument(... if p.required else p.cli_default, help=p.help, metavar=metavar)
        annotation: Any = str if p.required else Optional[str]
    else:
        names = [spelt, *([p.short] if p.short else [])]
        metavar = None if p.kind == "bool" else p.metavar or ("|".join(p.choices) if p.choices else _METAVARS[p.kind])
        info = typer.Option(p.cli_default, *names, help=p.help, min=p.low, max=p.high, metavar=metavar)
        # A choice as typer declares one (a Literal): click, which typer no longer
        # uses, cost every command its import.
        annotation = Optional[Literal[tuple(p.choices)]] if p.choices else _CLI_TYPES[p.kind]
    return inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=annotation)


def with_parameters(fn, first: list[inspect.Parameter], params: list[ops.Param], doc: str, json_option: bool = True):
    """A command function for typer whose parameters are ``first`` (``ctx``...),
    then ``params`` (read off ``ops``), then ``--json``; it calls ``fn(ctx,
    *first values, args, as_json)``, ``args`` holding the ``params`` by their
    library names."""
    signature = [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        *first,
        *(typer_parameter(p) for p in params),
    ]
    if json_option:
        signature.append(
            inspect.Parameter("as_json", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=JsonOpt, annotation=bool)
        )
    names = {p.name for p in params}

    def run(ctx: typer.Context, **values: Any):
        as_json = values.pop("as_json", False)
        # A repeatable option not given comes as an empty list: not given.
        args = {k: (None if isinstance(v, (list, tuple)) and not v else v) for k, v in values.items() if k in names}
        return fn(ctx, *(values[q.name] for q in first), args, as_json)

    run.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    run.__annotations__ = {q.name: q.annotation for q in signature}
    run.__name__, run.__doc__ = fn.__name__, doc
    return run


def op_command(group: typer.Typer, op_name: str):
    """``command`` for one of ``ops``' operations: its arguments and options
    are read off the operation's parameters (name, help, default, bounds),
    plus ``--json``. The decorated function gets ``(ctx, args, as_json)``:
    ``args`` holds every parameter the CLI offers, by its library name, ready
    for ``_call`` once the command has done what only a terminal needs
    (reading stdin for ``-``)."""
    op = ops.get(op_name)

    def decorate(fn):
        run = with_parameters(fn, [], [p for p in op.params if p.flag is not None], op.summary)
        return command(group, op.command)(run)

    return decorate


def _index_path(args: tuple, kwargs: dict) -> str | None:
    """The index path of the store of the command called with ``args`` and
    ``kwargs`` (its typer context among them), if it has one."""
    # typer hands its click's Context, of which typer.Context is a subclass, not a base
    ctx = next((v for v in (*args, *kwargs.values()) if callable(getattr(v, "find_root", None))), None)
    store = ((ctx.find_root().obj or {}) if ctx is not None else {}).get("store")
    return str(store.cfg.index_path) if store is not None else None


def _store(ctx: typer.Context):
    from marchdb.store import Store

    obj = ctx.find_root().obj or {}
    if "store" not in obj:
        store = Store(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
        store.say = lambda line: say(line, err=True)
        obj["store"] = store
        ctx.find_root().obj = obj
        # Freed when the command ends, not when Python exits: a program
        # that runs commands in its own process (tests, scripts through
        # CliRunner) would otherwise keep each command's model loaded.
        ctx.find_root().call_on_close(store.close)
    return obj["store"]


def _call(ctx: typer.Context, op: str, args: dict) -> dict:
    """Run an agent operation (``ops.call``) on the warm engine when one
    serves this home — starting it when none runs and ``daemonAutoStart`` is
    on — else in this process. ``--root`` / ``--model`` overrides are one-off:
    they use a running engine only when it serves the same settings."""
    obj = ctx.find_root().obj or {}
    if "store" not in obj:
        from marchdb.config import load_config
        from marchdb.engine import calls, client

        cfg = load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
        overridden = bool(obj.get("root") or obj.get("model"))
        if cfg.use_engine:

            def starting() -> None:
                # On stderr whatever it is (a pipe, a file): a first start takes
                # seconds, and silence looks like a hang.
                say(
                    "marchdb: starting the warm engine, which keeps the model loaded for the next commands "
                    "(a first start in a new home builds the model and checks it on this CPU: up to 30 s)...",
                    err=True,
                )

            try:
                return calls.call(cfg, op, args, autostart=cfg.daemon_autostart and not overridden, starting=starting)
            except client.RemoteError as exc:
                raise remote_error(exc.kind, str(exc), exc.exit_code, exc.fields) from None
            except client.Unavailable as exc:
                if not exc.may_redo(op):
                    raise Unanswered(unanswered_message(op, exc)) from None
                if exc.reason != "not running" and not (exc.reason == "other_config" and overridden):
                    # A one-off --root or --model is expected to be answered here; a
                    # setting of the environment that differs from the engine's is told.
                    say(f"note: {calls.in_words(exc)}; answered by this command itself", err=True)
    return ops.call(_store(ctx), op, args)


def _print(text: str | tuple[str, str]) -> None:
    """Print ``render``'s text: stdout, or ``(stdout, stderr)``."""
    out, err = (text, "") if isinstance(text, str) else text
    if err:
        say(err, err=True, nl=False)
    say(out, nl=False)


def say(message: object = "", err: bool = False, nl: bool = True) -> None:
    """Print text for a person: what a terminal would act on (an escape
    sequence in a file name or a memory's text) is shown escaped."""
    typer.echo(render.terminal(str(message)), err=err, nl=nl)


def _emit(data: dict) -> None:
    typer.echo(render.as_json(data), nl=False)


def _notices(store, as_json: bool, warned: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The store's notices, said on stderr in text mode; ``warned``: the
    warnings this command prints itself — a notice of the same cause ("...:
    CAUSE") would say it a second time."""
    notes = store.take_notices()
    notes = [n for n in notes if not any(n.split(": ", 1)[-1] in w for w in warned)]
    if not as_json:
        for note in notes:
            say(f"note: {error_line(note)}", err=True)
    return notes


def _say_notices(data: dict) -> None:
    """Text mode: the ``notices`` of a ``tools.call`` answer, on stderr."""
    for note in data.get("notices", []):
        say(f"note: {error_line(note)}", err=True)


class _Progress:
    """A progress line with rate and ETA, drawn only on a terminal."""

    def __init__(self, enabled: bool, label: str = "embedding"):
        self.enabled = enabled and sys.stderr.isatty()
        self.label = label
        self.bar: Any = None  # a rich Progress once drawing starts
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total == 0:
            return
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn(f"[bold]{self.label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                transient=True,
                console=None,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total, rate="")
        elapsed = self.bar.tasks[0].elapsed or 0.0
        rate = f"{done / elapsed:.1f} texts/s" if elapsed > 0 and done else ""
        self.bar.update(self.task, completed=done, rate=rate)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


@app.callback()
def _root(
    ctx: typer.Context,
    home: Optional[str] = typer.Option(None, "--home", help="marchdb home (default $MARCH_HOME or ~/.march)."),
    root: Optional[str] = typer.Option(None, "--root", help="Memory root folder (wins over env and config)."),
    model: Optional[str] = typer.Option(None, "--model", help="GGUF embedding model path or recipe name."),
):
    ctx.obj = {"home": home, "root": root, "model": model}


#: Seconds a stdin nobody asked for ('-') may stay silent before it counts as empty.
STDIN_WAIT_SECONDS = 10.0


def stdin_has_input(wait: float = STDIN_WAIT_SECONDS) -> bool:
    """Whether stdin is piped (not a terminal, not closed) and brings text (or
    its end) within ``wait`` seconds. An agent's shell may hand a command a
    pipe that never closes: `marchdb log "title"` waited on it forever.
    Silent that long, it is taken for "no text" and said on stderr (a
    producer slower than that: pass '-', which waits as long as it takes)."""
    if sys.stdin is None or sys.stdin.isatty():
        return False
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor: read it
        return True
    import select

    try:
        ready, _, _ = select.select([fd], [], [], wait)
    except (OSError, ValueError):
        return True
    if not ready:
        say(f"note: nothing came on stdin within {wait:.0f} s; going on without it (pass '-' to wait for it)", err=True)
    return bool(ready)


def _read_stdin_body(what: str = "body") -> str:
    """The body (or ``what``) piped on stdin, read up to one byte past the save limit: the
    library refuses anything larger, and ``--body - < /dev/zero`` must not
    fill the memory before it gets the chance."""
    from marchdb.vault.changes import MAX_BODY_BYTES

    return _read_stdin(
        MAX_BODY_BYTES,
        f"the {what} on stdin is over {MAX_BODY_BYTES:,} bytes; a memory {what} is limited to "
        f"{MAX_BODY_BYTES:,} bytes; split it into several memories",
        f"the {what} on stdin",
    )


#: The arguments of ``marchdb call -``: a message line of the MCP server and
#: the engine, which any valid save fits (a 64 KB body written as JSON
#: escapes, six bytes a character, is under 400 KB).
MAX_CALL_ARGUMENTS_BYTES = 8 * 1024 * 1024


def _read_stdin_arguments() -> str:
    """The JSON arguments of ``marchdb call`` piped on stdin, bounded."""
    return _read_stdin(
        MAX_CALL_ARGUMENTS_BYTES,
        f"the arguments on stdin are over {MAX_CALL_ARGUMENTS_BYTES:,} bytes, more than any operation takes",
        "the arguments on stdin",
    )


def _read_stdin(limit: int, too_big: str, what: str) -> str:
    """stdin read up to one byte past ``limit`` (refused with ``too_big``) and decoded."""
    from marchdb.cli.guard import stdin_taken

    stdin_taken()
    if sys.stdin is None:
        raise InvalidInput("stdin is closed: pass the text as an argument instead of '-'")
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text-only stdin (an embedding program's)
        return sys.stdin.read(limit + 1)
    raw = stream.read(limit + 1)
    if len(raw) > limit:  # read no further: its real size is not known, only that it is too big
        raise InvalidInput(too_big)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{what} is not UTF-8 text (byte {exc.start}); pipe text") from None
