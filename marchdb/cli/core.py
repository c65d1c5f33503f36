"""The core commands of the ``marchdb`` CLI: ``sync``, ``status``, ``doctor``,
``open``, ``rebuild``, ``recall``, ``search``, ``save``, ``remember``, ``context``, ``demo``.

They register on ``cli.app.app`` (``cli.main`` imports this module) and, like
every command, only format what the library returns.
"""

from __future__ import annotations

import os

import typer

from marchdb.cli import render
from marchdb.cli.app import (
    JsonOpt,
    _call,
    _emit,
    _notices,
    _print,
    _Progress,
    _read_stdin_body,
    _say_notices,
    _store,
    app,
    command,
    op_command,
    say,
    stdin_has_input,
)
from marchdb.errors import EXIT_DUPLICATE, Conflict, NotFound
from marchdb.text import error_line, one_line

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
    # "0 added" right after a note was written by hand reads as "not seen": say
    # that the engine's watcher had indexed it already.
    changed = report.added + report.updated + report.moved + report.removed
    data["engine_watching"] = _engine_watches(store)
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
    if not changed and data["engine_watching"]:
        say("nothing was left to do: the warm engine's watcher indexes files as they change")
    for warning in report.warnings:
        say(f"warning: {one_line(warning)}", err=True)
    if report.problems or report.conflicts:
        say("run `marchdb doctor` to see the problems and how to fix them")


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


def _engine_watches(store) -> bool:
    """Whether a warm engine serves this home (and so watches its vault)."""
    from marchdb.engine import client

    return store.cfg.use_engine and client.engine_alive(store.cfg.home)


@command(app)
def status(ctx: typer.Context, as_json: bool = JsonOpt):
    """Index summary: files, memories, conflicts, problems, model, paths."""
    store = _store(ctx)
    data = store.status()
    data.update(store.recall_switches(_cwd()))
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
    data["hosts"], host_problems = _hosts_seen()
    data["problems"] = host_problems + data["problems"]
    notes = _notices(store, as_json)
    if as_json:
        data["notices"] = notes
        _emit(data)
        return
    if data["vector_error"]:
        say(f"vectors: {data['vector_error']}")
    say("logs: " + "; ".join(_log_size(row) for row in data.get("logs", [])))
    for row in data["hosts"]:
        say(
            f"{row['host']}: marchdb's hooks in {one_line(row['where'])} ({', '.join(row['events']) or row.get('error')})"
        )
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


def _hosts_seen() -> tuple[list[dict], list[dict]]:
    """Where marchdb's hooks are installed (the user's settings and this
    folder's), and the problems with them: what each host module tells of
    its own (Codex skips hooks it has not been told to trust, without a
    word), and hooks that run the older, slower command."""
    from pathlib import Path

    from marchdb.hosts import HOSTS, adapter, install

    cwd = Path.cwd()
    rows = install.installed(cwd)
    problems = []
    for host in HOSTS:
        check = getattr(adapter(host), "doctor", None)
        if check is not None:
            problems += check(rows, str(cwd))
    for row in rows:
        older = [c for c in row.get("commands", []) if install.LAUNCHER not in c]
        if older:
            problems.append(
                {
                    "path": row["where"],
                    "kind": "hook_command_older",
                    "detail": f"{row['host']}'s hooks run {older[0]!r}, which starts in about twice the time",
                    "advice": f"run `marchdb install {row['host']}` again: it replaces them",
                }
            )
    return rows, problems


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


@op_command(app, "memory_open")
def open_(ctx: typer.Context, args: dict, as_json: bool):
    data = _call(ctx, "memory_open", args)
    if as_json:
        _emit(data)
    else:
        _say_notices(data)
        if data["status"] == "ok":
            say(data["markdown"], nl=False)
            if data.get("superseded_by"):
                say(f"note: superseded by {', '.join(data['superseded_by'])}", err=True)
        elif data["status"] == "conflict":
            say(f"conflict: {error_line(data['message'])}:", err=True)
            for path in data["paths"]:
                say(f"  {one_line(path)}", err=True)
        else:
            say(f"not found: {error_line(data['message'])}", err=True)
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


@op_command(app, "memory_recall")
def recall(ctx: typer.Context, args: dict, as_json: bool):
    data = _call(ctx, "memory_recall", args)
    _print(render.as_json(data) if as_json else render.recall(data, args["explain"]))


# ---------------------------------------------------------------- agent tools


@op_command(app, "memory_search")
def search(ctx: typer.Context, args: dict, as_json: bool):
    result = _call(ctx, "memory_search", args)
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


@op_command(app, "memory_save")
def save(ctx: typer.Context, args: dict, as_json: bool):
    body = args["body"]
    if body == "-" or (body is None and stdin_has_input()):
        piped = _read_stdin_body()
        args["body"] = piped if (body == "-" or piped.strip()) else None
    for key in ("supersedes", "conflicts_with"):  # --supersedes '' removes the field
        if args[key] is not None:
            # `--conflicts-with a,b` as `--conflicts-with a --conflicts-with b`
            # (ids that save makes never hold a comma).
            args[key] = [x.strip() for value in args[key] for x in value.split(",") if x.strip()]
    _saved(_call(ctx, "memory_save", args), as_json)


@op_command(app, "memory_remember")
def remember(ctx: typer.Context, args: dict, as_json: bool):
    if args["text"] == "-":  # `echo text | marchdb remember -`, as `--body -` and `log -`
        args["text"] = _read_stdin_body("sentence")
    result = _call(ctx, "memory_remember", args)
    if not as_json and result["status"] == "created":
        say(one_line(f"name: {result['name']}"))
    _saved(result, as_json)


def _saved(result: dict, as_json: bool) -> None:
    """What ``save`` and ``remember`` print; exit 9 for a near-duplicate (nothing written)."""
    if as_json:
        _emit(result)
    else:
        _say_notices(result)
        say(f"{result['status']}: {result['id']} {result['path']}")
        if result.get("message") and result["status"] != "created":  # "created memory X at P" says it again
            say(result["message"])
        for warning in result.get("warnings", []):
            say(f"warning: {one_line(warning)}", err=True)
        _say_related(result)
    if result["status"] == "duplicate":
        raise typer.Exit(EXIT_DUPLICATE)


def _say_related(result: dict) -> None:
    """Text mode: the memories on the same subject as one just created, and what to do with them."""
    related = result.get("related") or []
    if not related:
        return
    say(f"related ({len(related)}): memories on the same subject; reconcile before moving on:")
    for item in related:
        say(one_line(f"  {item['id']} | {item['name']} | {item['description']} ({item['why']})"))
    new = result["id"]
    say(
        f"  replaces one (a fact changed)? marchdb save --id {new} --supersedes OLD_ID; contradicts one? "
        f"marchdb save --id {new} --conflicts-with OLD_ID; adds to one? update it and deprecate {new}; "
        "else keep both"
    )


@op_command(app, "memory_context")
def context(ctx: typer.Context, args: dict, as_json: bool):
    data = _call(ctx, "memory_context", args)
    _print(render.as_json(data) if as_json else render.context(data))


@command(app)
def demo(
    keep: bool = typer.Option(False, "--keep", help="Keep the throwaway vault to look at."),
    as_json: bool = JsonOpt,
):
    """Save a few memories into a throwaway vault, index them and show recall."""
    from marchdb.cli.demo import run_demo

    progress = _Progress(not as_json)
    try:
        data = run_demo(keep=keep, progress=progress, say=(lambda m: None) if as_json else say)
    finally:
        progress.close()
    if as_json:
        _emit(data)
