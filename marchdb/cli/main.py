"""``marchdb``'s typer app with every command registered, and its entry point."""

from __future__ import annotations

import signal
import sys

import typer

# Each module registers its commands on ``app``.
from marchdb.cli import core, hosts, index, lifecycle, switches  # noqa: F401
from marchdb.cli.app import app, say
from marchdb.errors import EXIT_INTERRUPTED, EXIT_TERMINATED
from marchdb.text import error_line

__all__ = ["app", "main"]


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that the command ends as on Ctrl-C."""


def _terminated(signum, frame) -> None:
    # Once is enough: `timeout` signals the command's whole process group, and the
    # command's own parent (cli.guard) passes its copy on, so a second one may follow.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Terminated


def main() -> None:
    """Console entry point. A usage error is one line on stderr too, like
    every other error (click draws the usage and a box around its message).

    SIGTERM (``timeout``, an agent's time limit) ends a command as Ctrl-C
    does, its ``finally`` blocks run: killed outright, a sync left the file
    naming the batch the model was embedding, which the next run took for a
    crash of llama.cpp (its texts embedded apart, the crash counted against
    the model). Commands that serve (``serve``, ``mcp``, ``browse``) set
    their own handler."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        code = app(standalone_mode=False)
    except _Terminated:
        say("terminated", err=True)
        sys.exit(EXIT_TERMINATED)
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
        say(f"error: {error_line(exc.format_message()).rstrip('.')}{where}", err=True)
        sys.exit(exit_code)
    except typer.Abort as exc:  # Ctrl-C, or stdin closed at a prompt (typer's click raises typer's own)
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            say("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)  # a shell's status for a command SIGINT ended
        say("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        say("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
