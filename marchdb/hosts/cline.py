"""Cline's hooks: one executable file per event, JSON on stdin, JSON on stdout.

Files ``TaskStart``, ``UserPromptSubmit``, ``PostToolUse``, ``TaskComplete``
in ``~/Documents/Cline/Hooks`` and ``~/.cline/hooks`` (or a project's
``.clinerules/hooks``). The event object tells the event (``hookName`` is
spelt differently by the VS Code extension and the CLI):

* ``taskStart`` → the profiles; ``userPromptSubmit`` → ``[recall]`` for the
  prompt, as a new run of the task;
* ``postToolUse`` → ``[recall]`` for what the tool was asked to do (Cline
  sends no assistant text), at most 2 hints the run has not had;
* ``taskComplete`` → the result is recorded.

The answer is ``{"contextModification": ...}``. Cline delivers the context of
tool hooks to the model in every release; that of ``TaskStart`` and
``UserPromptSubmit`` only in some (not in the CLI 3.x nor VS Code 4.0–4.1):
there, hints reach the model with its first tool call. Only the standard library.
"""

from __future__ import annotations

import json

from marchdb.hosts import claude_code

HOST = "cline"
#: Characters of a tool's parameters recalled on.
TOOL_TEXT_CHARS = 2000


def parse(raw: str, options: list[str]) -> dict | None:
    """The ``memory_hook`` event of one Cline hook event."""
    data = claude_code.read_json(raw)
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
        asked = f"{tool.get('toolName', '')} {json.dumps(tool.get('parameters') or {}, ensure_ascii=False)}"
        return {**args, "event": "tool", "text": asked[:TOOL_TEXT_CHARS]}
    done = data.get("taskComplete")
    if isinstance(done, dict):
        meta, turn = done.get("taskMetadata"), data.get("turn")
        text = (meta.get("result") if isinstance(meta, dict) else None) or (
            turn.get("outputText") if isinstance(turn, dict) else None
        )
        return {**args, "event": "stop", "text": claude_code.text_of(text)} if text else None
    return None


def render(args: dict, data: dict) -> str:
    """``{"contextModification": ...}``, or nothing."""
    context = str(data.get("context") or "").strip()
    if not context or args["event"] == "stop":
        return ""
    return json.dumps({"contextModification": context}, ensure_ascii=False)
