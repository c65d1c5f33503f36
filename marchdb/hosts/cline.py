"""Cline: hook files for its VS Code extension, a plugin for its CLI.

Files ``TaskStart``, ``UserPromptSubmit``, ``PostToolUse``, ``TaskComplete``
in ``~/Documents/Cline/Hooks`` (or a project's ``.clinerules/hooks``): the
VS Code extension reads that folder (an earlier marchdb also wrote
``~/.cline/hooks``, which the CLI reads too, and every event ran twice there:
install and uninstall empty it of marchdb's files). ``hookName`` is spelt by
the extension as the event (``UserPromptSubmit``):

* ``taskStart`` → the profiles; ``userPromptSubmit`` → ``[recall]`` for the
  prompt, as a new run of the task;
* ``postToolUse`` → ``[recall]`` for what the tool was asked to do (Cline
  sends no assistant text), at most 2 hints the run has not had;
* ``taskComplete`` → the result is recorded.

The answer is ``{"contextModification": ...}``.

The CLI (3.x, npm ``cline``) runs those files too, in its own words
(``agent_start``, ``tool_result``) and drops what they answer: it gets a
plugin instead, ``marchdb.js`` in ``$CLINE_DIR/plugins`` (``~/.cline``) or a
project's ``.cline/plugins`` (``cline_plugin.js`` with the shared client,
``hosts.plugins``): the profiles as a rule of its system prompt, each
prompt's ``[recall]`` block after the prompt in its own message, the steer
after a tool in the message that carries the tool's result, the run's end
recorded. Its events are Claude Code's hook JSON, read by ``hosts.plugins``
under the host name ``cline-cli``; the CLI's hook files are left unanswered,
so one prompt is one run. Only the standard library.
"""

from __future__ import annotations

import json

from marchdb.hosts import claude_code

HOST = "cline"
TITLE = "Cline"
DOCS = "cline.md"
PROGRAM = {"npm": "cline", "version": "3.0.65", "bin": "node_modules/.bin/cline"}
#: What the CLI's plugin events are known by (runs, the hook log).
CLI_HOST = "cline-cli"
#: The CLI's plugin file.
PLUGIN_FILE = "marchdb.js"
EVENTS = {
    "TaskStart": "session_start",
    "UserPromptSubmit": "prompt",
    "PostToolUse": "tool",
    "TaskComplete": "stop",
}
#: ``hookName`` as the VS Code extension spells it; the CLI spells it otherwise.
EXTENSION_NAMES = frozenset({*EVENTS, "TaskResume", "TaskCancel", "PreToolUse", "PreCompact"})


def cline_dir():
    """The CLI's folder: ``$CLINE_DIR``, else ``~/.cline``."""
    import os
    from pathlib import Path

    return Path(os.environ.get("CLINE_DIR") or "~/.cline").expanduser().absolute()


def installer():
    """Hook files in ``~/Documents/Cline/Hooks`` (or the project's
    ``.clinerules/hooks``) for the extension, and the CLI's plugin in
    ``$CLINE_DIR/plugins`` (or the project's ``.cline/plugins``)."""
    import os
    from pathlib import Path

    from marchdb.hosts import plugins
    from marchdb.hosts.hookfiles import FileHooks, Plugin, Together

    hooks = FileHooks(
        HOST,
        tuple(EVENTS),
        lambda: [Path("~/Documents").expanduser() / "Cline" / "Hooks"],
        lambda project: project / ".clinerules" / "hooks",
        legacy_dirs=lambda: [cline_dir() / "hooks"],
        legacy_note=(
            "removed marchdb's hooks from ~/.cline/hooks, where an earlier marchdb also wrote them: the Cline CLI "
            "reads both folders, and ran every event twice"
        ),
    )

    def files(argv: list[str], env: dict[str, str]) -> dict[str, bytes]:
        return {PLUGIN_FILE: plugins.source(HOST, "the Cline CLI", "cline_plugin.js", argv, env).encode()}

    plugin = Plugin(
        HOST,
        ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"),
        lambda: cline_dir() / "plugins",
        lambda project: project / ".cline" / "plugins",
        files,
        user_base=lambda: cline_dir() if os.environ.get("CLINE_DIR") else Path.home(),
    )
    return Together((hooks, plugin))


def sample_prompt(session: str, text: str) -> str:
    """The event Cline's VS Code extension sends for a prompt."""
    return json.dumps(
        {
            "hookName": "UserPromptSubmit",
            "taskId": session,
            "workspaceRoots": ["/tmp"],
            "userPromptSubmit": {"prompt": text},
        }
    )


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one Cline hook event."""
    data = claude_code.read_json(raw)
    if "hook_event_name" in data:
        from marchdb.hosts import plugins

        return plugins.parse(raw, CLI_HOST)  # the CLI's plugin
    if isinstance(data.get("hookName"), str) and data["hookName"] not in EXTENSION_NAMES:
        return None  # the CLI's hook files: it drops their answers, and its plugin answers it
    args: dict = {"host": HOST, "session": claude_code.text_of(data.get("taskId"))}
    roots = data.get("workspaceRoots")
    if isinstance(roots, list) and roots and isinstance(roots[0], str):
        args["cwd"] = roots[0]
    if isinstance(data.get("taskStart"), dict) or isinstance(data.get("taskResume"), dict):
        return {**args, "event": "session_start", "source": "resume" if "taskResume" in data else "startup"}
    prompt = data.get("userPromptSubmit")
    if isinstance(prompt, dict):
        return {**args, "event": "prompt", "text": claude_code.text_of(prompt.get("prompt"))}
    tool = data.get("postToolUse")
    if isinstance(tool, dict):
        asked = claude_code.tool_asked(tool.get("parameters"))
        return {**args, "event": "tool", "text": asked}
    done = data.get("taskComplete")
    if isinstance(done, dict):
        meta, turn = done.get("taskMetadata"), data.get("turn")
        text = (meta.get("result") if isinstance(meta, dict) else None) or (
            turn.get("outputText") if isinstance(turn, dict) else None
        )
        return {**args, "event": "stop", "text": claude_code.text_of(text)} if text else None
    return None


def render(args: dict, data: dict) -> str:
    """``{"contextModification": ...}``, or nothing; the CLI's plugin takes the plain text."""
    if args.get("host") == CLI_HOST:
        from marchdb.hosts import plugins

        return plugins.render(args, data)
    context = str(data.get("context") or "").strip()
    if not context or args["event"] == "stop":
        return ""
    return json.dumps({"contextModification": context}, ensure_ascii=False)
