"""The lifecycle commands of the ``marchdb`` CLI: ``log``, ``now``, ``reflect``, ``import``, ``maintain``.

They register on ``cli.app`` (``cli`` imports this module) and, like every
command, only format what the library returns.
"""

from __future__ import annotations

from typing import Optional

import typer

from marchdb import ops
from marchdb.cli.app import (
    JsonOpt,
    _call,
    _emit,
    _notices,
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
from marchdb.errors import FileError, InvalidInput
from marchdb.lifecycle.now import NOW_HEADER
from marchdb.text import one_line


@op_command(app, "memory_log")
def log_(ctx: typer.Context, args: dict, as_json: bool):
    text = args["text"]
    if text == "-" or (text is None and stdin_has_input()):
        piped = _read_stdin_body("text")  # bounded: never more than a body may hold
        args["text"] = piped if piped.strip() else None
    result = _call(ctx, "memory_log", args)
    if as_json:
        _emit(result)
        return
    _say_notices(result)
    say(f"{result['status']}: {result['id']} {result['path']}")
    say(result["entry"])
    for warning in result.get("warnings", []):
        say(f"warning: {one_line(warning)}", err=True)


@op_command(app, "memory_now")
def now_(ctx: typer.Context, args: dict, as_json: bool):
    if args["text"] == "-":  # only when asked: `marchdb now` prints the page at once, whatever stdin is
        args["text"] = _read_stdin_body("page")
    # The page is a file of the home: answered here, never through the warm engine (no index, no model).
    data = ops.call(_store(ctx), "memory_now", args)
    if as_json:
        _emit(data)
        return
    _say_notices(data)
    for warning in data.get("warnings", []):
        say(f"warning: {one_line(warning)}", err=True)
    if data["status"] == "cleared":
        say(f"cleared the working page ({data['path']})")
    elif data["status"] == "set":
        say(f"set the working page ({len(data['text']):,} characters, {data['path']})")
    elif data["block"]:
        say(data["block"].removeprefix(f"{NOW_HEADER}\n"))
    else:
        say('no working page (marchdb now "what I am doing now" sets one)', err=True)


@op_command(app, "memory_reflect")
def reflect(ctx: typer.Context, args: dict, as_json: bool):
    # Reads the logs and the index, needs no model: answered here (a cron job starts no engine).
    data = ops.call(_store(ctx), "memory_reflect", args)
    if as_json:
        _emit(data)
        return
    _say_notices(data)
    say(data["text"], nl=False)


def _apply_or_dry_run(apply: bool, dry_run: bool) -> None:
    """``import`` and ``maintain``: both flags at once is a contradiction, said the same way."""
    if apply and dry_run:
        raise InvalidInput("--apply and --dry-run contradict each other; pass one")


def _some_failed(failed: bool) -> None:
    """``import --apply`` / ``maintain --apply``: items that could not be done are
    an error for scripts too — exit 8, once the rest is done and everything is said."""
    if failed:
        raise typer.Exit(FileError.exit_code)


@command(app, "import")
def import_(
    ctx: typer.Context,
    kind: Optional[str] = typer.Argument(
        None,
        # Written out, not read from lifecycle.sources: importing it costs every command its YAML
        # parser at start (tests/test_keep_importing.py holds this list to the importers).
        help="workspace | typed | obsidian | chatgpt, an agent host's sessions (claude-code | codex | gemini | "
        "qwen | pi | opencode | kilo | openclaw | hermes | cline), or ALL (every host's, each from its own folder)",
    ),
    path: Optional[str] = typer.Argument(
        None,
        help="The folder or file to import from (only read); for an agent host, by default its own folder "
        "(claude-code: $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects; docs/lifecycle.md lists each).",
    ),
    apply: bool = typer.Option(False, "--apply", help="Create the memories (default: a dry run that only reports)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only report what would be created (the default)."),
    no_embed: bool = typer.Option(False, "--no-embed", help="Leave the new memories' vectors to the next sync."),
    since: Optional[str] = typer.Option(
        None, "--since", help="Only chats active since then: an age (7d, 12h, 2w) or a date (2026-11-01)."
    ),
    history: bool = typer.Option(False, "--history", help="List what was imported: memories by kind, and the runs."),
    as_json: bool = JsonOpt,
):
    """Import notes or chat transcripts as memories: idempotent, never overwrites; a dry run unless --apply
    (which exits 8 when some items were problems, once the rest is imported)."""
    if history:
        if kind is not None or apply or since:
            raise InvalidInput("--history lists what was imported; give it alone (`marchdb import --history`)")
        _history(_store(ctx), as_json)
        return
    if kind is None:
        raise InvalidInput("give the KIND to import (`marchdb import codex`, `marchdb import ALL --since 7d`)")
    _apply_or_dry_run(apply, dry_run)
    store = _store(ctx)
    progress = _Progress(not as_json)
    try:
        data = store.import_(kind, path, apply=apply, embed=not no_embed, progress=progress, since=since)
    finally:
        progress.close()
    notes = _notices(store, as_json)
    failed = data["applied"] and data["problems"] > 0  # a dry run changes nothing and only reports
    if as_json:
        data["notices"] = notes
        _emit(data)
        _some_failed(failed)
        return
    shown = {"create": 20, "created": 20, "now": 1, "skip": 100, "problem": 100}
    for action in ("created", "create", "now", "skip", "problem"):
        rows = [r for r in data["items"] if r["action"] == action]
        for row in rows[: shown[action]]:
            where = f" -> {row['id']} {row['path']}" if row.get("id") and row.get("path") else ""
            detail = f": {row['detail']}" if row.get("detail") else ""
            say(one_line(f"{action:8} {row['origin']}{where}{detail}"))
            for warning in row.get("warnings") or []:
                say(one_line(f"         warning: {warning}"))
        if len(rows) > shown[action]:
            say(f"         ... and {len(rows) - shown[action]} more (--json lists all)")
    older = f", {data['older']} older than --since {since}" if data.get("older") else ""
    if data["applied"]:
        why = " (the problem lines above say why; the rest was imported)" if failed else ""
        say(f"created {data['created']}, skipped {data['skipped']}{older}, problems {data['problems']}{why}")
    else:
        say(
            f"dry run: {data['created']} would be created, {data['skipped']} skipped{older}, "
            f"{data['problems']} problems; nothing was written (run again with --apply)"
        )
    for warning in data.get("embed_warnings", []):
        say(f"warning: {one_line(warning)}", err=True)
    _some_failed(failed)


def _history(store, as_json: bool) -> None:
    data = store.import_history()
    notes = _notices(store, as_json)
    if as_json:
        data["notices"] = notes
        _emit(data)
        return
    if not data["kinds"] and not data["runs"]:
        say("nothing imported yet (`marchdb import KIND` plans an import; docs/lifecycle.md)")
        return
    for row in data["kinds"]:
        say(f"{row['kind']:12} {row['memories']:6,} memories, from {row['first'][:10]} to {row['last'][:10]}")
    if data["runs"]:
        say("")
        say("latest imports:")
    for run in data["runs"]:
        since = f", since {run['since']}" if run.get("since") else ""
        where = f" from {run['path']}" if run.get("path") else ""
        say(one_line(f"{str(run['at'])[:19]}  {run['kind']}: created {run['created']}{where} (by {run['by']}{since})"))


@command(app, "maintain")
def maintain_(
    ctx: typer.Context,
    apply: bool = typer.Option(False, "--apply", help="Archive what is proposed for the archive (default: a dry run)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only propose, change nothing (the default)."),
    log_days: int = typer.Option(30, "--log-days", help="Propose unused daily logs older than this many days."),
    deprecated_days: int = typer.Option(
        90, "--deprecated-days", help="Propose memories deprecated for this many days."
    ),
    action_days: int = typer.Option(
        14, "--action-days", help="Propose finished actions (actions/done/, tag action/done) done this many days ago."
    ),
    reflection_days: int = typer.Option(
        30, "--reflection-days", help="Propose reflections this old and unused for as long."
    ),
    as_json: bool = JsonOpt,
):
    """Propose what to archive, merge, describe or decide, with the reason for each; --apply archives (never
    deletes). A dry run by default: safe to run from cron or a systemd timer (docs/lifecycle.md)."""
    _apply_or_dry_run(apply, dry_run)
    store = _store(ctx)
    data = store.maintain(
        apply=apply,
        log_days=log_days,
        deprecated_days=deprecated_days,
        action_days=action_days,
        reflection_days=reflection_days,
    )
    notes = _notices(store, as_json)
    # an archive that failed: a file that cannot be edited in place, a folder now a link
    failed = sum(1 for p in data["proposals"] if p["error"]) if data["applied"] else 0
    if as_json:
        data["notices"] = notes
        _emit(data)
        _some_failed(bool(failed))
        return
    for prop in data["proposals"]:
        done = (
            f" [archived; undo: {prop['undo']}]"
            if prop["applied"]
            else (f" [{prop['error']}]" if prop["error"] else "")
        )
        say(f"{prop['action']:8} {', '.join(prop['ids'])}{done}: {prop['reason']}")
    for note in data["notes"]:
        say(f"note: {one_line(note)}")
    counts = ", ".join(f"{n} {action}" for action, n in data["counts"].items()) or "nothing to propose"
    if data["applied"]:
        archived = sum(1 for p in data["proposals"] if p["applied"])
        say(
            f"{counts}; archived {archived}{f', {failed} failed (the lines above say why)' if failed else ''} "
            "(each line above says how to undo it; lifecycle.log keeps them)"
        )
        _some_failed(bool(failed))
    else:
        say(f"dry run: {counts}; nothing was changed (`marchdb maintain --apply` archives the archive proposals)")
