"""``marchdb hook generic``: the contract for any other host or script.

The message comes on stdin as plain text; the options (``--run``,
``--trigger``, ``--record-only``, ``--profiles``, ``--project``,
``--conversation``: the ``memory_hook`` parameters marked ``hook`` in
``ops``) say which run it belongs to. The answer is the plain context block
on stdout — ``[recall]`` lines, with the profile blocks first when
``--profiles`` is given — or nothing. Only the standard library.
"""

from __future__ import annotations

import argparse

from marchdb import ops
from marchdb.hosts import BadEvent
from marchdb.text import mend_surrogates

HOST = "generic"
TITLE = "Any other host or script"
DOCS = "generic.md"
PROGRAM = None
NOT_RUN = "no program of its own: a script pipes its message into `marchdb hook generic` (tested end to end)"
EVENTS: dict[str, str] = {}
#: Nothing to install: a script calls the command itself.
installer = None


def sample_prompt(session: str, text: str) -> str:
    """What a script pipes in for a message."""
    return text


def _options() -> list[ops.Param]:
    return [p for p in ops.HOOK.params if p.hook and p.flag]


def parse(raw: str, options: list[str]) -> dict:
    """The ``memory_hook`` event of a message on stdin and the options given."""
    # No abbreviations: an ambiguous one (--pro) makes argparse exit whatever exit_on_error says.
    parser = argparse.ArgumentParser(
        prog="marchdb hook generic", add_help=False, exit_on_error=False, allow_abbrev=False
    )
    for p in _options():
        if p.kind == "bool":
            parser.add_argument(str(p.flag), dest=p.name, action="store_true")
        else:
            parser.add_argument(str(p.flag), dest=p.name, choices=p.choices, default=p.default)
    try:
        given, unknown = parser.parse_known_args(options)
    except argparse.ArgumentError as exc:
        raise BadEvent(f"{exc}; nothing injected") from None
    if unknown:
        # argparse would print usage to stderr (which hosts may drop) and exit 2:
        # the hook log is where its user looks.
        takes = ", ".join(f"{p.flag}{'' if p.kind == 'bool' else ' X'}" for p in _options())
        raise BadEvent(f"unknown option {' '.join(unknown)!r}; it takes {takes}; nothing injected")
    return {"event": "message", "host": "generic", "text": mend_surrogates(raw), **vars(given)}


def render(args: dict, data: dict) -> str:
    """The plain context block, or nothing."""
    return str(data.get("context") or "")
