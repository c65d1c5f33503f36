"""The ``marchdb`` command. Hooks take a fast path; everything else is the CLI.

A host runs a hook on every prompt, so ``marchdb [--home H] hook HOST`` must
start fast: it is answered here with the standard library and ``client``
(importing the CLI framework alone costs more than the whole warm answer).
The warm engine does the work; when none is running the hook starts one in
the background and answers this prompt itself with keyword (BM25) recall.
A hook always exits 0 and prints nothing it was not sure of: what went wrong
goes to ``$MARCH_HOME/logs/hooks.log``.
"""

from __future__ import annotations

import sys

from marchdb.engine import client

#: Seconds a hook waits for the warm engine before answering on its own
#: (Claude Code's hook timeout is set to 10 s by ``marchdb install``).
HOOK_WAIT_SECONDS = 3.0
#: How long a hook waits for its event to end on stdin.
EVENT_WAIT_SECONDS = 5.0


def main() -> None:
    """Console entry point."""
    argv = sys.argv[1:]
    flags, rest = _global_options(argv)
    if rest[:1] == ["hook"] and rest[1:2] != ["--help"] and len(rest) > 1:
        sys.exit(run_hook(flags, rest[1:]))
    if rest[:1] in (["recall"], ["context"]) and not flags.keys() - {"home"}:
        try:
            code = quick(flags, rest)
        except BrokenPipeError:  # the reader went away (`| head`): end quietly, as the CLI does
            from marchdb.cli.render import quiet_stdout
            from marchdb.errors import EXIT_PIPE

            quiet_stdout()

            sys.exit(EXIT_PIPE)
        if code is not None:
            sys.exit(code)
    from marchdb.cli.main import main as cli_main

    cli_main()


#: ``recall`` / ``context`` options the quick path understands: name -> takes a value.
_QUICK_OPTIONS = {
    "recall": {
        "--run": True,
        "--trigger": True,
        "--explain": False,
        "--project": True,
        "--conversation": True,
        "--json": False,
    },
    "context": {"--run": True, "--project": True, "--conversation": True, "--json": False},
}


def _quick_args(rest: list[str]) -> tuple[str, dict, bool, bool] | None:
    """``recall TEXT [--run R] [--trigger T] [--explain] [--project P] [--conversation C] [--json]``
    or ``context [TEXT] [--run R] [--project P] [--conversation C] [--json]`` parsed, or None for anything else
    (help, other options, two texts, ``--``): the full CLI answers that."""
    command, words = rest[0], rest[1:]
    known = _QUICK_OPTIONS[command]
    values: dict[str, str | bool] = {}
    texts: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            name, eq, value = word.partition("=")
            if name not in known or name in values or (eq and not known[name]):
                return None
            if known[name] and not eq:
                if i + 1 >= len(words):
                    return None
                i += 1
                value = words[i]
            values[name] = value if known[name] else True
        else:
            texts.append(word)
        i += 1
    if len(texts) > 1 or (command == "recall" and not texts):
        return None
    args: dict = {"text": texts[0] if texts else None, "run_id": values.get("--run")}
    if "--project" in values:
        args["project"] = values["--project"]
    if "--conversation" in values:
        args["conversation"] = values["--conversation"]
    if command == "recall":
        args.update(trigger=values.get("--trigger", "user"), explain=bool(values.get("--explain")))
    op = "memory_recall" if command == "recall" else "memory_context"
    return op, args, bool(values.get("--json")), bool(values.get("--explain"))


def quick(flags: dict, rest: list[str]) -> int | None:
    """``marchdb recall`` / ``context`` answered by a warm engine that is
    already running, without loading the CLI framework (it costs more than
    the answer). None when the full CLI must answer: another form of the
    command, no engine listening, or one serving other settings."""
    parsed = _quick_args(rest)
    if parsed is None:
        return None
    op, args, as_json, explain = parsed
    from marchdb.cli import render
    from marchdb.config import load_config
    from marchdb.errors import MarchError, one_line

    try:
        cfg = load_config(home=flags.get("home"))
        data, _ms = client.request(cfg.home, op, args, client.identity(cfg))
    except (client.Unavailable, MarchError):
        return None  # the full CLI starts the engine, answers in-process or reports the error
    except client.RemoteError as exc:
        sys.stderr.write(f"error: {one_line(exc)}\n")
        return exc.exit_code
    if as_json:
        out, err = render.as_json(data), ""
    else:
        out, err = render.recall(data, explain) if op == "memory_recall" else render.context(data)
    sys.stderr.write(render.terminal(err))
    sys.stdout.write(render.terminal(out))
    return 0


def _global_options(argv: list[str]) -> tuple[dict, list[str]]:
    """``--home``, ``--root`` and ``--model`` given before the command."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("--home", "--root", "--model"):
            if not eq:
                if i + 1 >= len(argv):
                    break
                value = argv[i + 1]
                i += 1
            flags[name[2:]] = value
            i += 1
            continue
        break
    return flags, argv[i:]


def run_hook(flags: dict, args: list[str]) -> int:
    """``marchdb hook HOST [options]``: one hook event on stdin, the answer
    on stdout. Always returns 0 (a failing hook must not block the prompt)."""
    home = client.home_dir(flags.get("home"))
    host = args[0]
    later: list = []  # what runs once the answer is out (starting an engine)
    try:
        event = _event(home, host, args[1:])
        if event is None:
            return 0
        sys.stdout.buffer.write(_answer(flags, host, event, later).encode("utf-8", "replace"))
        sys.stdout.buffer.flush()
    except BaseException as exc:  # noqa: BLE001 - whatever happens, the prompt goes on
        client.log(home, "hooks", f"{host}: the hook failed: {type(exc).__name__}: {exc}")
    for job in later:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the answer is out; the prompt goes on
            client.log(home, "hooks", f"{host}: {type(exc).__name__}: {exc}")
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
        client.log(
            home_log,
            "hooks",
            f"{host}: the event did not end within {EVENT_WAIT_SECONDS:.0f} s (stdin left open); nothing injected",
        )
        return None
    if len(raw) > MAX_EVENT_BYTES:
        client.log(home_log, "hooks", f"{host}: the event is over {MAX_EVENT_BYTES:,} bytes; nothing injected")
        return None
    text = raw.decode("utf-8", "replace")
    if host not in HOSTS:
        client.log(home_log, "hooks", f"unknown host {host!r}; known: {', '.join(HOSTS)}")
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
        client.log(home_log, "hooks", f"generic: {exc}; nothing injected")
        return None
    if unknown:
        # argparse would print usage to stderr (which hosts may drop) and exit 2:
        # the hook log is where its user looks.
        client.log(
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
        client.log(home, "hooks", f"{host}: cannot start the warm engine: {why_not}")


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
    client.log(cfg.home, "hooks", f"{host}: answered without the warm engine ({why}): keyword recall only")
    # Answer this event ourselves, without loading the model (seconds): BM25.
    from marchdb.hosts.hooks import handle
    from marchdb.store import Store

    store = Store(cfg, keep_vectors=False, use_model=False)
    store.first_scan_inline = False
    try:
        return str(handle(store, host, event)["stdout"])
    finally:
        for note in store.take_notices():
            client.log(cfg.home, "hooks", f"{host}: {note}")
        store.close()
