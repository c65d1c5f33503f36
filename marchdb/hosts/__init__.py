"""Agent hosts: the hooks they run on every prompt, and the installers that wire them.

Each host has an adapter module that only translates: its hook JSON into one
``memory_hook`` event (``ops.HOOK``; the library answers it, ``hooks``) and
the answer back into the JSON the host reads. ``hook`` runs them; only the
standard library is imported until the warm engine cannot answer.
"""

from __future__ import annotations

import importlib

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
    return importlib.import_module(f"marchdb.hosts.{HOSTS[host]}")
