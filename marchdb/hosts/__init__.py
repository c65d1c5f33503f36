"""Agent hosts: the hooks and plugins they run on every prompt, and the installers that wire them.

A host is one module, named in ``HOSTS`` (one line each), that declares all
of it:

* ``TITLE`` and ``DOCS`` — its name for people, and its page under ``docs/hosts/``;
* ``EVENTS`` — the host's events marchdb answers, each mapped to a
  ``memory_hook`` event (``ops.HOOK``; the library answers it, ``hooks``);
* ``parse(raw, options)`` / ``render(args, data)`` — the adapter: the host's
  JSON into one ``memory_hook`` event, and the answer back into what the
  host reads;
* ``installer()`` — where ``marchdb install`` writes and how
  (``hosts.jsonhooks``, ``hosts.hookfiles``, ``hosts.plugins``), or None;
* ``PROGRAM`` — the real program the tests drive (``hosts.programs``), or
  None with ``NOT_RUN`` saying why;
* ``sample_prompt(session, text)`` — the event it sends for a prompt (the
  benchmark and the relay tests send it);
* optionally ``doctor(rows, cwd)`` — problems only the host can tell
  (``marchdb doctor``).

``marchdb hook HOST``, ``install``, ``uninstall``, their help, ``doctor``,
the docs test, the benchmark and the real-host tests read this registry.
``hook`` runs the adapters; only the standard library is imported until the
warm engine cannot answer.
"""

from __future__ import annotations

import sys

#: Every host marchdb answers, and the module that declares it.
HOSTS = {
    "claude-code": "claude_code",
    "codex": "codex",
    "gemini": "gemini",
    "qwen": "qwen",
    "cursor": "cursor",
    "vscode": "vscode",
    "cline": "cline",
    "opencode": "opencode",
    "kilo": "kilo",
    "pi": "pi",
    "openclaw": "openclaw",
    "hermes": "hermes",
    "generic": "generic",
}


class BadEvent(Exception):
    """An event the adapter cannot read: nothing is injected, and the
    message (what was wrong) goes to the hook log."""


def adapter(host: str):
    """The module of ``host`` (``KeyError`` for an unknown one)."""
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
