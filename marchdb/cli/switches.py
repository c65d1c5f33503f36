"""The switches of the ``marchdb`` CLI: ``pause``, ``resume``, ``off``, ``on``.

They register on ``cli.app`` (``cli`` imports this module) and only format
what the library returns (``switches``, ``Store.switch_session``).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Optional

import typer

from marchdb import switches
from marchdb.cli.app import JsonOpt, _emit, _store, app, command, say
from marchdb.errors import InvalidInput

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d)?\s*$", re.I)
_UNIT_SECONDS = {"m": 60, "min": 60, "h": 3600, "d": 86400}


def seconds_of(text: str) -> float:
    """``30m``, ``2h``, ``1d`` (a bare number is minutes) in seconds."""
    m = _DURATION.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise InvalidInput(f"--for {text!r} is no duration; give one like 30m, 2h or 1d")
    seconds = float(m.group(1)) * _UNIT_SECONDS[(m.group(2) or "m").lower()]
    if seconds > 366 * 86400:
        raise InvalidInput("--for is at most a year; leave it out to pause until marchdb resume")
    return seconds


def _home(ctx: typer.Context):
    from marchdb.config import load_config

    obj = ctx.find_root().obj or {}
    return load_config(home=obj.get("home"), root=obj.get("root"), model=obj.get("model")).home


@command(app)
def pause(
    ctx: typer.Context,
    for_: Optional[str] = typer.Option(None, "--for", help="How long: 30m, 2h, 1d (default: until marchdb resume)."),
    as_json: bool = JsonOpt,
):
    """Pause passive recall everywhere: no hook injects or records anything, and
    memory_recall / memory_context answer no hint, until marchdb resume."""
    data = switches.pause(_home(ctx), seconds_of(for_) if for_ is not None else None)
    if as_json:
        _emit({"recall": "paused", **data})
        return
    until = f" until {dt.datetime.fromtimestamp(data['until']):%Y-%m-%d %H:%M}" if data["until"] else ""
    say(f"recall paused{until}; `marchdb resume` turns it on again")


@command(app)
def resume(ctx: typer.Context, as_json: bool = JsonOpt):
    """End a pause of passive recall."""
    was = switches.resume(_home(ctx))
    if as_json:
        _emit({"recall": "on", "was_paused": was})
        return
    say("recall is on again" if was else "recall was not paused")


def _switch(ctx: typer.Context, recall: str, session: bool, session_id: Optional[str], as_json: bool) -> None:
    if not session:
        raise InvalidInput(
            f"say what to turn {recall}: --session (the session whose hook ran last, or --session ID); "
            f"everywhere at once is marchdb {'pause' if recall == 'off' else 'resume'}"
        )
    data = _store(ctx).switch_session(recall, session_id)
    if as_json:
        _emit(data)
        return
    seen = f" (last asked for recall at {data['last_seen']})" if data["last_seen"] else ""
    other = "on" if recall == "off" else "off"
    say(f"recall is {recall} for the session {data['session']}{seen}; `marchdb {other} --session {data['session']}`")


@command(app)
def off(
    ctx: typer.Context,
    session_id: Optional[str] = typer.Argument(None, metavar="[ID]", help="The session (default: the latest)."),
    session: bool = typer.Option(False, "--session", help="Turn recall off for one session of a host."),
    as_json: bool = JsonOpt,
):
    """Turn passive recall off for a session: `marchdb off --session [ID]`."""
    _switch(ctx, "off", session, session_id, as_json)


@command(app)
def on(
    ctx: typer.Context,
    session_id: Optional[str] = typer.Argument(None, metavar="[ID]", help="The session (default: the latest)."),
    session: bool = typer.Option(False, "--session", help="Turn recall on for one session of a host."),
    as_json: bool = JsonOpt,
):
    """Turn passive recall on for a session (`marchdb on --session [ID]`), whatever its project or MARCH_RECALL say."""
    _switch(ctx, "on", session, session_id, as_json)
