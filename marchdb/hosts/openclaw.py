"""OpenClaw (npm ``openclaw``): a native plugin, ``~/.openclaw/extensions/marchdb/``.

The folder holds ``openclaw.plugin.json`` (the manifest), ``package.json``
(``openclaw.extensions`` names the entry) and ``index.js``
(``openclaw_plugin.js`` with the shared client, ``hosts.plugins``). OpenClaw
loads a plugin from its extensions folder (``$OPENCLAW_STATE_DIR``) only once
its configuration allows it: ``install`` adds ``marchdb`` to
``plugins.allow`` and sets ``plugins.entries.marchdb`` (enabled, with the
conversation access and prompt injection its prompt hook needs) through
``openclaw config patch``, OpenClaw's own writer of its JSON5 file; without
``openclaw`` on PATH it says what to run. The plugin answers
``before_prompt_build`` with the prompt's ``[recall]`` block
(``prependContext``: it lands in the user message) and the profiles
(``appendSystemContext``), records the run's last reply (``agent_end``) and
starts the window afresh after a compaction. OpenClaw's tool hooks cannot
wait for an answer, so there is no steer after a tool. Only the standard library.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from marchdb.hosts import plugins

HOST = "openclaw"
TITLE = "OpenClaw"
DOCS = "openclaw.md"
#: OpenClaw needs Node 24 (npm quietly installs a placeholder under Node 20).
PROGRAM = {
    "npm": "openclaw",
    "version": "2026.9.6",
    "bin": "openclaw/node_modules/.bin/openclaw",
    "prefix": "openclaw",
    "node": "24",
}
EVENTS = {"before_prompt_build": "prompt", "agent_end": "stop", "after_compaction": "compact"}
PLUGIN_ID = "marchdb"
#: What ``install`` sets in OpenClaw's configuration (``plugins.entries.marchdb``).
ENTRY = {"enabled": True, "hooks": {"allowConversationAccess": True, "allowPromptInjection": True}}


def state_dir() -> Path:
    """OpenClaw's state folder: ``$OPENCLAW_STATE_DIR``, else ``~/.openclaw``."""
    return Path(os.environ.get("OPENCLAW_STATE_DIR") or "~/.openclaw").expanduser().absolute()


def files(argv: list[str], env: dict[str, str]) -> dict[str, bytes]:
    """The plugin folder's files (each says it is marchdb's)."""
    from marchdb.hosts.hookfiles import MARK

    manifest = {
        "id": PLUGIN_ID,
        "name": "marchdb",
        "description": f"marchdb memory: recall hints for each prompt ({MARK})",
        "activation": {"onStartup": True},
        "configSchema": {"type": "object", "additionalProperties": False},
    }
    package = {
        "name": "marchdb-openclaw",
        "version": "1.0.0",
        "description": f"marchdb memory for OpenClaw ({MARK})",
        "type": "module",
        "openclaw": {"extensions": ["./index.js"]},
    }
    return {
        "openclaw.plugin.json": (json.dumps(manifest, indent=2) + "\n").encode(),
        "package.json": (json.dumps(package, indent=2) + "\n").encode(),
        "index.js": plugins.source(HOST, TITLE, "openclaw_plugin.js", argv, env).encode(),
    }


def installer():
    """``$OPENCLAW_STATE_DIR/extensions/marchdb/`` (no project scope), and the settings that let it load."""
    from marchdb.hosts.hookfiles import Plugin

    return Plugin(
        HOST,
        ("before_prompt_build", "agent_end", "after_compaction"),
        lambda: state_dir() / "extensions" / PLUGIN_ID,
        None,
        files,
        own_folder=True,
        configure=lambda folder, project: _configure(True),
        unconfigure=lambda folder, project: _configure(False),
        user_base=lambda: state_dir() if os.environ.get("OPENCLAW_STATE_DIR") else Path.home(),
        project_scope=False,
    )


def _configure(on: bool) -> tuple[str, ...]:
    """Allow and enable the plugin in OpenClaw's configuration (``on``), or
    take that back, with OpenClaw's own ``config`` command."""
    import shutil
    import subprocess

    program = shutil.which("openclaw")
    allow_cmd = "openclaw config get plugins.allow --json"
    if program is None:
        if on:
            return (
                "openclaw is not on PATH here: where it is, add marchdb to plugins.allow and run "
                f"`openclaw config set plugins.entries.marchdb '{json.dumps(ENTRY)}' --strict-json` "
                "(OpenClaw loads no plugin its configuration does not allow)",
            )
        return ("openclaw is not on PATH here: remove plugins.entries.marchdb and marchdb from plugins.allow",)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([program, *args], input=stdin, capture_output=True, text=True, timeout=120)

    try:
        got = run("config", "get", "plugins.allow", "--json")
        try:
            allow = json.loads(got.stdout) if got.returncode == 0 and got.stdout.strip() else []
        except ValueError:
            allow = []
        allow = [a for a in allow if isinstance(a, str)] if isinstance(allow, list) else []
        if on:
            patch = {
                "plugins": {
                    "allow": [*allow, PLUGIN_ID] if PLUGIN_ID not in allow else allow,
                    "entries": {PLUGIN_ID: ENTRY},
                }
            }
        else:
            patch = {"plugins": {"allow": [a for a in allow if a != PLUGIN_ID], "entries": {PLUGIN_ID: None}}}
        done = run("config", "patch", "--stdin", stdin=json.dumps(patch))
    except (OSError, subprocess.SubprocessError) as exc:
        return (f"could not run `{allow_cmd}` ({exc}); allow and enable the marchdb plugin yourself",)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip()[:300]
        return (f"`openclaw config patch` failed ({why}); allow and enable the marchdb plugin yourself",)
    if on:
        return ("allowed and enabled the marchdb plugin in OpenClaw's configuration (plugins.allow, plugins.entries)",)
    return ("removed the marchdb plugin from OpenClaw's configuration (plugins.allow, plugins.entries)",)


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event the plugin sent."""
    return plugins.parse(raw, HOST)


def render(args: dict, data: dict) -> str:
    """The plain context text."""
    return plugins.render(args, data)


sample_prompt = plugins.sample_prompt
