"""The ``marchdb`` command line. It wraps the library and formats its data.

Every command takes ``--json`` and then prints exactly one JSON object on
stdout. Errors print one line on stderr and exit non-zero.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Optional

import click
import typer

from . import render, tools
from .entry import quiet_stdout
from .errors import (
    EXIT_DUPLICATE,
    EXIT_PIPE,
    Conflict,
    IndexUnavailable,
    InvalidInput,
    MarchError,
    NotFound,
    Unanswered,
    one_line,
    remote_error,
    unanswered_message,
)

app = typer.Typer(
    help="marchdb: a local memory engine for AI agents (Markdown memories, one SQLite index).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
model_app = typer.Typer(help="Build, inspect and self-test the embedding model.", no_args_is_help=True)
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
                say(f"error: {one_line(exc)}", err=True)
                raise typer.Exit(exc.exit_code) from None
            except (typer.Exit, typer.Abort, click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
                raise
            except BrokenPipeError:
                # The reader went away (`| head`): end quietly with the status
                # of a command killed by SIGPIPE, never "a bug" (1).
                quiet_stdout()
                raise typer.Exit(EXIT_PIPE) from None
            except Exception as exc:
                apsw = sys.modules.get("apsw")  # loaded by then if SQLite raised it
                if apsw is not None and isinstance(exc, apsw.Error):
                    from .db import index_error

                    say(f"error: {one_line(index_error(exc, _index_path()))}", err=True)
                    raise typer.Exit(IndexUnavailable.exit_code) from None
                if os.environ.get("MARCHDB_DEBUG"):
                    raise
                say(
                    f"error: unexpected {type(exc).__name__}: {one_line(exc)}; this is a bug, please report it "
                    "(MARCHDB_DEBUG=1 prints where it happened)",
                    err=True,
                )
                raise typer.Exit(MarchError.exit_code) from None

        return group.command(*args, **kwargs)(wrapper)

    return decorate


def _index_path() -> str | None:
    """The index path of the running command's store, if it has one."""
    ctx = click.get_current_context(silent=True)
    store = ((ctx.find_root().obj or {}) if ctx is not None else {}).get("store")
    return str(store.cfg.index_path) if store is not None else None


def _store(ctx: typer.Context):
    from .store import Store

    obj = ctx.find_root().obj or {}
    if "store" not in obj:
        obj["store"] = Store(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
        ctx.find_root().obj = obj
    return obj["store"]


def _call(ctx: typer.Context, op: str, args: dict) -> dict:
    """Run an agent operation (``tools.call``) on the warm engine when one
    serves this home — starting it when none runs and ``daemonAutoStart`` is
    on — else in this process. ``--root`` / ``--model`` overrides are one-off:
    they use a running engine only when it serves the same settings."""
    obj = ctx.find_root().obj or {}
    if "store" not in obj:
        from . import client
        from .config import load_config

        cfg = load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
        overridden = bool(obj.get("root") or obj.get("model"))
        try:
            return client.call(cfg, op, args, autostart=cfg.daemon_autostart and not overridden)
        except client.RemoteError as exc:
            raise remote_error(exc.kind, str(exc), exc.exit_code, exc.fields) from None
        except client.Unavailable as exc:
            if not exc.may_redo(op):
                raise Unanswered(unanswered_message(op, exc)) from None
            if exc.reason not in ("not running", "other_config"):
                say(f"note: answered without the warm engine ({exc})", err=True)
    return tools.call(_store(ctx), op, args)


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
            say(f"note: {one_line(note)}", err=True)
    return notes


def _say_notices(data: dict) -> None:
    """Text mode: the ``notices`` of a ``tools.call`` answer, on stderr."""
    for note in data.get("notices", []):
        say(f"note: {one_line(note)}", err=True)


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


# ---------------------------------------------------------------- core


@command(app)
def sync(
    ctx: typer.Context,
    as_json: bool = JsonOpt,
    no_embed: bool = typer.Option(False, "--no-embed", help="Only the files and BM25 side."),
):
    """Scan the memory root and bring the index up to date."""
    store = _store(ctx)
    progress = _Progress(not as_json)
    try:
        report = store.sync(embed=not no_embed, progress=progress)
    finally:
        progress.close()
    data = report.to_dict()
    notes = _notices(store, as_json, report.warnings)
    if as_json:
        data["notices"] = notes
        _emit(data)
        return
    say(
        f"scanned {report.scanned} files: {report.added} added, {report.updated} updated, "
        f"{report.moved} moved, {report.removed} removed, {report.unchanged} unchanged; "
        f"{report.conflicts} conflicts, {report.problems} problems; "
        f"{report.embedded} texts embedded in {report.seconds:.2f}s"
    )
    for warning in report.warnings:
        say(f"warning: {one_line(warning)}", err=True)
    if report.problems or report.conflicts:
        say("run `marchdb doctor` to see the problems and how to fix them")


@command(app)
def status(ctx: typer.Context, as_json: bool = JsonOpt):
    """Index summary: files, memories, conflicts, problems, model, paths."""
    store = _store(ctx)
    data = store.status()
    notes = _notices(store, as_json)
    if as_json:
        data["notices"] = notes
        _emit(data)
        return
    width = max(len(k) for k in data)
    for key, value in data.items():
        say(f"{key.ljust(width)}  {'' if value is None else value}")


@command(app)
def doctor(ctx: typer.Context, as_json: bool = JsonOpt):
    """List every problem with the vault or index, and what to do about each."""
    store = _store(ctx)
    data = store.doctor()
    notes = _notices(store, as_json)
    if as_json:
        data["notices"] = notes
        _emit(data)
        return
    if data["vector_error"]:
        say(f"vectors: {data['vector_error']}")
    say("logs: " + "; ".join(_log_size(row) for row in data.get("logs", [])))
    if data["hook_log"]:
        say("recent hook events (logs/hooks.log):")
        for line in data["hook_log"]:
            say(f"  {line}")
    problems = data["problems"]
    if not problems:
        say("no problems")
        return
    by_kind: dict[str, list[dict]] = {}
    for row in problems:
        by_kind.setdefault(row["kind"], []).append(row)
    for kind, items in by_kind.items():
        say(f"{kind} ({len(items)}): {items[0]['advice']}")
        for row in items[:50]:
            say(f"  {one_line(row['path'])}: {one_line(row['detail'])}")  # a name with a newline stays one row
        if len(items) > 50:
            say(f"  ... and {len(items) - 50} more (`marchdb doctor --json` lists all)")


def _log_size(row: dict) -> str:
    if "rows" in row:
        since = f", since {row['oldest'][:10]}" if row.get("oldest") else ""
        rows = "1 row" if row["rows"] == 1 else f"{row['rows']:,} rows"
        return f"{row['log']} {rows} (keeps the last {row['keep_rows']:,}{since})"
    size = f"{row['bytes']:,} bytes" if row["bytes"] < 10_240 else f"{row['bytes'] / 1024:,.0f} KB"
    bound = f"{row['keep_bytes'] / 1024:,.0f} KB"
    if not row.get("rotated", True):  # the engine's output: truncated at a start, never rotated
        return f"{row['file']} {size} (begun afresh when an engine starts past {bound})"
    return f"{row['file']} {size} (rotated at {bound})"


@command(app, "open")
def open_(ctx: typer.Context, mem_id: str = typer.Argument(..., metavar="ID"), as_json: bool = JsonOpt):
    """Print a memory's Markdown by id (exit 5: no such id, 6: several files hold it)."""
    data = _call(ctx, "memory_open", {"id": mem_id})
    if as_json:
        _emit(data)
    else:
        _say_notices(data)
        if data["status"] == "ok":
            say(data["markdown"], nl=False)
            if data.get("superseded_by"):
                say(f"note: superseded by {', '.join(data['superseded_by'])}", err=True)
        elif data["status"] == "conflict":
            say(f"conflict: {one_line(data['message'])}:", err=True)
            for path in data["paths"]:
                say(f"  {one_line(path)}", err=True)
        else:
            say(f"not found: {one_line(data['message'])}", err=True)
    if data["status"] != "ok":
        raise typer.Exit(Conflict.exit_code if data["status"] == "conflict" else NotFound.exit_code)


@command(app)
def rebuild(
    ctx: typer.Context,
    as_json: bool = JsonOpt,
    no_embed: bool = typer.Option(False, "--no-embed", help="Only the files and BM25 side."),
):
    """Delete the index and build it again from the Markdown files."""
    store = _store(ctx)

    def starting() -> None:
        if not as_json:
            say(f"rebuilding {store.cfg.index_path} from {store.root}", err=True)

    progress = _Progress(not as_json)
    try:
        report = store.rebuild(embed=not no_embed, progress=progress, starting=starting)
    finally:
        progress.close()
    notes = _notices(store, as_json, report.warnings)
    if as_json:
        _emit({**report.to_dict(), "notices": notes})
    else:
        say(
            f"rebuilt: {report.added} memories from {report.scanned} files, "
            f"{report.embedded} texts embedded in {report.seconds:.2f}s"
        )
        for warning in report.warnings:
            say(f"warning: {one_line(warning)}", err=True)


# ---------------------------------------------------------------- recall


@command(app)
def recall(
    ctx: typer.Context,
    text: str = typer.Argument(..., help="The user message or assistant output."),
    run: Optional[str] = typer.Option(
        None, "--run", help="Agent run id: applies and records the de-duplication rules."
    ),
    trigger: str = typer.Option("user", "--trigger", help="user | assistant"),
    explain: bool = typer.Option(False, "--explain", help="Show every candidate, its signals and why it was cut."),
    project: Optional[str] = typer.Option(None, "--project", help=tools.ARGS["project"]),
    conversation: Optional[str] = typer.Option(None, "--conversation", help=tools.ARGS["conversation"]),
    record_only: bool = typer.Option(False, "--record-only", help=tools.ARGS["record_only"]),
    as_json: bool = JsonOpt,
):
    """Passive recall hints for a message (id, score, name, short description)."""
    args = {"text": text, "run_id": run, "trigger": trigger, "explain": explain, "project": project}
    if record_only:
        args["record_only"] = True
    data = _call(ctx, "memory_recall", args | {"conversation": conversation})
    _print(render.as_json(data) if as_json else render.recall(data, explain))


# ---------------------------------------------------------------- agent tools


@command(app)
def search(
    ctx: typer.Context,
    query: str = typer.Argument(..., help="Words or a literal phrase."),
    limit: int = typer.Option(10, "--limit", "-n", help="Most files to show."),
    archived: bool = typer.Option(False, "--archived", help="Search archived memories too."),
    as_json: bool = JsonOpt,
):
    """memory_search: ripgrep full-text search of the memory files (not semantic)."""
    result = _call(ctx, "memory_search", {"query": query, "limit": limit, "include_archived": archived})
    if as_json:
        _emit(result)
        return
    _say_notices(result)
    for warning in result.get("warnings", []):  # files rg could not read or names it left out
        say(f"warning: {one_line(warning)}", err=True)
    if not result["results"]:
        say("no match")
    for hit in result["results"]:
        say(one_line(f"{hit['path']}  [{hit['id'] or 'no id'}]"))
        # Like rg/grep: overlapping context is printed once, gaps as "--".
        lines: dict[int, tuple[str, str]] = {}
        for m in hit["matches"]:
            for i, line in enumerate(m.get("before", [])):
                lines.setdefault(m["line"] - len(m["before"]) + i, ("-", line))
            lines[m["line"]] = (":", m["text"])
            for i, line in enumerate(m.get("after", [])):
                lines.setdefault(m["line"] + 1 + i, ("-", line))
        previous = None
        for number in sorted(lines):
            if previous is not None and number > previous + 1:
                say("     --")
            mark, line = lines[number]
            say(f"  {number:>5}{mark} {line}")
            previous = number
    if result.get("truncated"):
        say("(more files match; raise --limit)")


@command(app)
def save(
    ctx: typer.Context,
    mem_id: Optional[str] = typer.Option(None, "--id", help="Update this memory (or create it with this id)."),
    name: Optional[str] = typer.Option(None, "--name"),
    description: Optional[str] = typer.Option(None, "--description", "-d"),
    tag: Optional[list[str]] = typer.Option(None, "--tag", "-t", help="Repeatable; replaces all tags on update."),
    body: Optional[str] = typer.Option(
        None, "--body", help="Memory text; '-' or omitted with piped stdin reads stdin."
    ),
    status: Optional[str] = typer.Option(None, "--status", help="active | deprecated | archived"),
    priority: Optional[str] = typer.Option(None, "--priority", help="high | normal | low: a small ranking nudge."),
    supersedes: Optional[list[str]] = typer.Option(
        None,
        "--supersedes",
        help="Repeatable: the id of an older memory this one replaces (recall stops hinting it); '' removes.",
    ),
    force: bool = typer.Option(False, "--force", help="Create even if a near-duplicate exists."),
    as_json: bool = JsonOpt,
):
    """memory_save: create or update a memory (new ones need name, description, body, a tag)."""
    if body == "-" or (body is None and stdin_has_input()):
        piped = _read_stdin_body()
        body = piped if (body == "-" or piped.strip()) else None
    args = {
        "id": mem_id,
        "name": name,
        "description": description,
        "body": body,
        "tags": tag or None,
        "status": status,
        "priority": priority,
        "supersedes": [x for x in supersedes if x.strip()] if supersedes else None,
        "force": force,
    }
    result = _call(ctx, "memory_save", args)
    if as_json:
        _emit(result)
    else:
        _say_notices(result)
        say(f"{result['status']}: {result['id']} {result['path']}")
        if result.get("message") and result["status"] != "created":  # "created memory X at P" says it again
            say(result["message"])
        for warning in result.get("warnings", []):
            say(f"warning: {one_line(warning)}", err=True)
    if result["status"] == "duplicate":
        raise typer.Exit(EXIT_DUPLICATE)


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
    from .save import MAX_BODY_BYTES

    if sys.stdin is None:
        raise InvalidInput("stdin is closed: pass the text as an argument instead of '-'")
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text-only stdin (an embedding program's)
        return sys.stdin.read(MAX_BODY_BYTES + 1)
    raw = stream.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:  # read no further: its real size is not known, only that it is too big
        raise InvalidInput(
            f"the {what} on stdin is over {MAX_BODY_BYTES:,} bytes; a memory {what} is limited to "
            f"{MAX_BODY_BYTES:,} bytes; split it into several memories"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"the {what} on stdin is not UTF-8 text (byte {exc.start}); pipe text") from None


@command(app)
def context(
    ctx: typer.Context,
    text: Optional[str] = typer.Argument(None, help="The user message to recall for."),
    run: Optional[str] = typer.Option(None, "--run", help="Agent run id."),
    project: Optional[str] = typer.Option(None, "--project", help=tools.ARGS["project"]),
    conversation: Optional[str] = typer.Option(None, "--conversation", help=tools.ARGS["conversation"]),
    as_json: bool = JsonOpt,
):
    """The profiles plus recall hints, ready to put into a prompt."""
    data = _call(ctx, "memory_context", {"text": text, "run_id": run, "project": project, "conversation": conversation})
    _print(render.as_json(data) if as_json else render.context(data))


@command(app)
def demo(
    keep: bool = typer.Option(False, "--keep", help="Keep the throwaway vault to look at."),
    as_json: bool = JsonOpt,
):
    """Save a few memories into a throwaway vault, index them and show recall."""
    from .demo import run_demo

    progress = _Progress(not as_json)
    try:
        data = run_demo(keep=keep, progress=progress, say=(lambda m: None) if as_json else say)
    finally:
        progress.close()
    if as_json:
        _emit(data)


# The lifecycle commands (log, import, maintain) live in their own module and
# register themselves on ``app``.
from . import cli_hosts, cli_index, cli_lifecycle  # noqa: E402, F401


def main() -> None:
    """Console entry point. A usage error is one line on stderr too, like
    every other error (click draws the usage and a box around its message)."""
    try:
        code = app(standalone_mode=False)
    except Exception as exc:
        # Click's exceptions, whichever click typer brings (it vendors its own):
        # a bad option or argument (UsageError, BadParameter, ...) has both.
        exit_code = getattr(exc, "exit_code", None)
        if not (hasattr(exc, "format_message") and isinstance(exit_code, int)):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.exit(exit_code)  # the help is printed already
        ctx = getattr(exc, "ctx", None)
        where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        say(f"error: {one_line(exc.format_message()).rstrip('.')}{where}", err=True)
        sys.exit(exit_code)
    except (click.exceptions.Abort, typer.Abort):  # Ctrl-C at a prompt, or stdin closed on one
        say("aborted", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
