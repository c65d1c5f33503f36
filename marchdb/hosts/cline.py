"""Cline's hooks: one executable file per event, JSON on stdin, JSON on stdout.

Files ``TaskStart``, ``UserPromptSubmit``, ``PostToolUse``, ``TaskComplete``
in ``~/Documents/Cline/Hooks`` (or a project's ``.clinerules/hooks``): the
VS Code extension reads that folder, and the CLI reads it and
``~/.cline/hooks`` both, so marchdb writes them once (an earlier marchdb wrote
both, and every event ran twice in the CLI: install and uninstall empty
``~/.cline/hooks`` of marchdb's files). The event object tells the event;
``hookName`` is spelt by the extension as the event (``UserPromptSubmit``)
and by the CLI in its own words (``agent_start``, ``tool_result``):

* ``taskStart`` → the profiles; ``userPromptSubmit`` → ``[recall]`` for the
  prompt, as a new run of the task;
* ``postToolUse`` → ``[recall]`` for what the tool was asked to do (Cline
  sends no assistant text), at most 2 hints the run has not had;
* ``taskComplete`` → the result is recorded.

The answer is ``{"contextModification": ...}``. The CLI (3.x) drops what its
hooks answer: there a prompt's and a tool's hints are only recorded (never
shown, they suppress nothing later) and a task's start answers nothing. The
VS Code extension delivers the context of tool hooks in every release, that
of ``TaskStart`` and ``UserPromptSubmit`` only in some. Only the standard library.
"""

from __future__ import annotations

import json

from marchdb.hosts import claude_code

HOST = "cline"
TITLE = "Cline"
DOCS = "cline.md"
PROGRAM = None
NOT_RUN = "Cline's hooks need its VS Code extension (the CLI drops their answers): their documented JSON is tested"
EVENTS = {
    "TaskStart": "session_start",
    "UserPromptSubmit": "prompt",
    "PostToolUse": "tool",
    "TaskComplete": "stop",
}
#: ``hookName`` as the VS Code extension spells it; the CLI spells it otherwise.
EXTENSION_NAMES = frozenset({*EVENTS, "TaskResume", "TaskCancel", "PreToolUse", "PreCompact"})


def installer():
    """``~/Documents/Cline/Hooks`` (both engines read it), or the project's ``.clinerules/hooks``."""
    import os
    from pathlib import Path

    from marchdb.hosts.hookfiles import FileHooks

    return FileHooks(
        HOST,
        tuple(EVENTS),
        lambda: [Path("~/Documents").expanduser() / "Cline" / "Hooks"],
        lambda project: project / ".clinerules" / "hooks",
        legacy_dirs=lambda: [Path(os.environ.get("CLINE_DIR") or "~/.cline").expanduser() / "hooks"],
        legacy_note=(
            "removed marchdb's hooks from ~/.cline/hooks, where an earlier marchdb also wrote them: the Cline CLI "
            "reads both folders, and ran every event twice"
        ),
    )


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
    args: dict = {"host": HOST, "session": claude_code.text_of(data.get("taskId"))}
    # The CLI drops what a hook answers: what it would show is only recorded there.
    cli = isinstance(data.get("hookName"), str) and data["hookName"] not in EXTENSION_NAMES
    if cli:
        args["record_only"] = True
    roots = data.get("workspaceRoots")
    if isinstance(roots, list) and roots and isinstance(roots[0], str):
        args["cwd"] = roots[0]
    if isinstance(data.get("taskStart"), dict) or isinstance(data.get("taskResume"), dict):
        if cli:
            return None  # the profiles it would drop
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
        args.pop("record_only", None)  # a run's end is recorded anyway
        return {**args, "event": "stop", "text": claude_code.text_of(text)} if text else None
    return None


def render(args: dict, data: dict) -> str:
    """``{"contextModification": ...}``, or nothing."""
    context = str(data.get("context") or "").strip()
    if not context or args["event"] == "stop":
        return ""
    return json.dumps({"contextModification": context}, ensure_ascii=False)
