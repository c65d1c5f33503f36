"""``marchdb hook HOST``: one hook event on stdin, the answer on stdout.

The warm engine does the work; when none is running the hook starts one in
the background and answers this prompt itself with keyword (BM25) recall.
A hook always exits 0 and prints nothing it was not sure of: what went wrong
goes to ``$MARCH_HOME/logs/hooks.log``. Only the standard library and the
engine's client until the engine cannot answer.
"""

from __future__ import annotations

import sys

from marchdb import logfile, private
from marchdb.engine import client

#: Seconds a hook waits for the warm engine before answering on its own
#: (Claude Code's hook timeout is set to 10 s by ``marchdb install``).
HOOK_WAIT_SECONDS = 3.0


#: How long a hook waits for its event to end on stdin.
EVENT_WAIT_SECONDS = 5.0


def run_hook(flags: dict, args: list[str]) -> int:
    """``marchdb hook HOST [options]``: one hook event on stdin, the answer
    on stdout. Always returns 0 (a failing hook must not block the prompt)."""
    home = private.home_dir(flags.get("home"))
    host = args[0]
    later: list = []  # what runs once the answer is out (starting an engine)
    try:
        event = _event(home, host, args[1:])
        if event is None:
            return 0
        sys.stdout.buffer.write(_answer(flags, host, event, later).encode("utf-8", "replace"))
        sys.stdout.buffer.flush()
    except BaseException as exc:  # noqa: BLE001 - whatever happens, the prompt goes on
        logfile.log(home, "hooks", f"{host}: the hook failed: {type(exc).__name__}: {exc}")
    for job in later:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the answer is out; the prompt goes on
            logfile.log(home, "hooks", f"{host}: {type(exc).__name__}: {exc}")
    return 0


def _read_event(limit: int) -> bytes | None:
    """Stdin up to its end or ``limit`` bytes; None when it stays open past
    ``EVENT_WAIT_SECONDS`` (a pipe a host or script never closes: the hook
    must not stall the prompt). A terminal is read as typed."""
    import os
    import select
    import time

    stream = sys.stdin
    if stream is None:
        return b""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # an embedding program's stdin
        return stream.buffer.read(limit) if hasattr(stream, "buffer") else stream.read(limit).encode()
    if stream.isatty():
        return stream.buffer.read(limit)
    deadline = time.monotonic() + EVENT_WAIT_SECONDS
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, min(limit - size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _event(home_log, host: str, options: list[str]) -> str | None:
    import json

    from marchdb.engine.client import HOOK_HOSTS as HOSTS
    from marchdb.engine.client import MAX_EVENT_BYTES

    raw = _read_event(MAX_EVENT_BYTES + 1)
    if raw is None:
        logfile.log(
            home_log,
            "hooks",
            f"{host}: the event did not end within {EVENT_WAIT_SECONDS:.0f} s (stdin left open); nothing injected",
        )
        return None
    if len(raw) > MAX_EVENT_BYTES:
        logfile.log(home_log, "hooks", f"{host}: the event is over {MAX_EVENT_BYTES:,} bytes; nothing injected")
        return None
    text = raw.decode("utf-8", "replace")
    if host not in HOSTS:
        logfile.log(home_log, "hooks", f"unknown host {host!r}; known: {', '.join(HOSTS)}")
        return None
    if host != "generic":
        return text
    import argparse

    # No abbreviations: an ambiguous one (--pro) makes argparse exit whatever exit_on_error says.
    parser = argparse.ArgumentParser(
        prog="marchdb hook generic", add_help=False, exit_on_error=False, allow_abbrev=False
    )
    parser.add_argument("--run")
    parser.add_argument("--trigger", choices=("user", "assistant"), default="user")
    parser.add_argument("--record-only", action="store_true")
    parser.add_argument("--profiles", action="store_true")
    parser.add_argument("--project")
    parser.add_argument("--conversation")
    try:
        opts, unknown = parser.parse_known_args(options)
    except argparse.ArgumentError as exc:
        logfile.log(home_log, "hooks", f"generic: {exc}; nothing injected")
        return None
    if unknown:
        # argparse would print usage to stderr (which hosts may drop) and exit 2:
        # the hook log is where its user looks.
        logfile.log(
            home_log,
            "hooks",
            f"generic: unknown option {' '.join(unknown)!r}; it takes --run, --trigger user|assistant, "
            "--record-only, --profiles, --project, --conversation; nothing injected",
        )
        return None
    return json.dumps(
        {
            "text": text,
            "run_id": opts.run,
            "trigger": opts.trigger,
            "record_only": opts.record_only,
            "profiles": opts.profiles,
            "project": opts.project,
            "conversation": opts.conversation,
        },
        ensure_ascii=False,
    )


def _start_engine(home, host: str, start_args: list[str]) -> None:
    why_not = client.start(home, start_args)
    if why_not:
        logfile.log(home, "hooks", f"{host}: cannot start the warm engine: {why_not}")


def _answer(flags: dict, host: str, event: str, later: list) -> str:
    """The hook's stdout: the warm engine's answer, else keyword recall done
    here; an engine to start is appended to ``later`` (run once the answer
    is out)."""
    from marchdb.config import load_config

    cfg = load_config(home=flags.get("home"), root=flags.get("root"), model=flags.get("model"))
    start_args = [f"--{k}={v}" for k, v in flags.items() if k in ("root", "model")]
    try:
        data, _ms = client.request(
            cfg.home, "hook", {"host": host, "event": event}, client.identity(cfg), timeout=HOOK_WAIT_SECONDS
        )
        return str(data.get("stdout") or "")
    except client.Unavailable as exc:
        reason = exc
    why = str(reason)
    if reason.reason in ("not running", "cannot connect"):
        if client.engine_alive(cfg.home):
            why = "it is warming up"  # it binds its socket once the model is loaded
        elif not cfg.daemon_autostart:
            why = "none runs, and daemonAutoStart is off"
        else:
            # Started once this answer is out: a starting engine loads the
            # model and the vectors on the cores this answer needs (a cold
            # hook at 10,000 memories took ~870 ms beside it, ~650 ms alone).
            later.append(lambda: _start_engine(cfg.home, host, start_args))
            why = "none ran; one starts once this hook has answered"
    logfile.log(cfg.home, "hooks", f"{host}: answered without the warm engine ({why}): keyword recall only")
    # Answer this event ourselves, without loading the model (seconds): BM25.
    from marchdb.hosts.hooks import handle
    from marchdb.store import Store

    store = Store(cfg, keep_vectors=False, use_model=False)
    store.first_scan_inline = False
    try:
        return str(handle(store, host, event)["stdout"])
    finally:
        for note in store.take_notices():
            logfile.log(cfg.home, "hooks", f"{host}: {note}")
        store.close()
