"""The ``marchdb`` command. Hooks and warm recalls take a fast path; everything else is the CLI.

A host runs a hook on every prompt, so ``marchdb [--home H] hook HOST`` must
start fast: it is answered by ``hosts.hook`` with the standard library and
the engine's client (importing the CLI framework alone costs more than the
whole warm answer). ``marchdb recall`` and ``context`` are answered the same
way when a warm engine already runs.
"""

from __future__ import annotations

import sys

from marchdb.engine import client


def main() -> None:
    """Console entry point."""
    argv = sys.argv[1:]
    flags, rest = _global_options(argv)
    if rest[:1] == ["hook"] and len(rest) > 1 and not {"--help", "-h"} & set(rest):
        from marchdb.hosts.hook import run_hook

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
    from marchdb.cli.guard import guard

    guard(flags, rest)  # a crash of llama.cpp costs a line and a second run, not the command
    from marchdb.hosts import full_environment

    full_environment()  # a hook command's Python starts without site-packages
    from marchdb.cli.main import main as cli_main

    cli_main()


def _quick_args(rest: list[str]) -> tuple[str, dict, bool] | None:
    """``recall`` / ``context`` with the operation's own options (``ops``:
    ``--run R``, ``--trigger T``, ``--explain``...) and ``--json``, parsed into
    ``(operation, args, as_json)``; None for anything else (help, a short or
    unknown option, two texts, ``--``, a value that is not of its kind): the
    full CLI answers that."""
    from marchdb import ops

    command, words = rest[0], rest[1:]
    op = ops.get("memory_recall" if command == "recall" else "memory_context")
    known = {p.flag: p for p in op.params if p.flag}
    positional = [p for p in op.params if p.flag == ""]
    args: dict = {}
    as_json = False
    texts: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            flag, eq, value = word.partition("=")
            if flag == "--json" and not eq and not as_json:
                as_json = True
                i += 1
                continue
            param = known.get(flag)
            if param is None or param.name in args or param.kind not in ("str", "bool"):
                return None
            if param.kind == "bool":
                if eq:
                    return None
                args[param.name] = True
            else:
                if not eq:
                    if i + 1 >= len(words):
                        return None
                    i += 1
                    value = words[i]
                if param.choices is not None and value not in param.choices:
                    return None  # the CLI says what is wrong
                args[param.name] = value
        else:
            texts.append(word)
        i += 1
    if len(texts) > len(positional) or any(p.required for p in positional[len(texts) :]):
        return None
    args.update((p.name, t) for p, t in zip(positional, texts))
    return op.name, args, as_json


def quick(flags: dict, rest: list[str]) -> int | None:
    """``marchdb recall`` / ``context`` answered by a warm engine that is
    already running, without loading the CLI framework (it costs more than
    the answer). None when the full CLI must answer: another form of the
    command, no engine listening, or one serving other settings."""
    parsed = _quick_args(rest)
    if parsed is None:
        return None
    op, args, as_json = parsed
    from marchdb.cli import render
    from marchdb.config import load_config
    from marchdb.errors import MarchError
    from marchdb.text import error_line

    try:
        cfg = load_config(home=flags.get("home"))
        if not cfg.use_engine:
            return None  # MARCH_DAEMON=0: the CLI answers in its own process
        data, _ms = client.request(cfg.home, op, args, client.identity(cfg))
    except (client.Unavailable, MarchError):
        return None  # the full CLI starts the engine, answers in-process or reports the error
    except client.RemoteError as exc:
        sys.stderr.write(f"error: {error_line(exc)}\n")
        return exc.exit_code
    if as_json:
        out, err = render.as_json(data), ""
    else:
        out, err = render.recall(data, bool(args.get("explain"))) if op == "memory_recall" else render.context(data)
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
