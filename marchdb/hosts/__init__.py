"""Agent hosts: the hooks they run on every prompt, and the installers that wire them.

Each host has an adapter module that only translates: its hook JSON into one
``memory_hook`` event (``ops.HOOK``; the library answers it, ``hooks``) and
the answer back into the JSON the host reads. ``hook`` runs them; only the
standard library is imported until the warm engine cannot answer.
"""

from __future__ import annotations

import sys

#: Hosts ``marchdb hook HOST`` answers, and the module of each.
HOSTS = {
    "claude-code": "claude_code",
    "codex": "codex",
    "gemini": "gemini",
    "cursor": "cursor",
    "cline": "cline",
    "hermes": "hermes",
    "generic": "generic",
}


class BadEvent(Exception):
    """An event the adapter cannot read: nothing is injected, and the
    message (what was wrong) goes to the hook log."""


def adapter(host: str):
    """The adapter module of ``host`` (``KeyError`` for an unknown one)."""
    # __import__, not importlib.import_module: importing importlib costs a hook its warnings module.
    return __import__(f"marchdb.hosts.{HOSTS[host]}", fromlist=["parse"])


_site_done = False


def full_environment() -> None:
    """Give a process started without ``site`` (a hook command's Python,
    ``cli/launch.py``) its site-packages, their ``.pth`` files included,
    before a module outside the standard library is imported; nothing when
    ``site`` ran at start-up or has been run since."""
    global _site_done
    if sys.flags.no_site and not _site_done:
        import site

        site.main()
    _site_done = True
