"""What hooks put into a session's messages, found and cut out (every session importer).

A host keeps hook output in its own wrapper (``<hook_context>`` in Gemini
CLI, ``<qwen:user-prompt-submit-context>`` in Qwen Code,
``<user-prompt-submit-hook>`` and ``<system-reminder>`` in Claude Code) or
bare in the message: marchdb's own ``[recall]`` block and its hint lines,
and its profiles (``[agent_profile]``). None of it is what the person typed,
and a hint imported as a memory would be recalled as if it were one.
"""

from __future__ import annotations

import re

_WRAPPERS = r"<(hook_context|qwen:user-prompt-submit-context|user-prompt-submit-hook|system-reminder)>.*?"
#: Hook context a host keeps inside the user's message, in the host's own
#: wrapper (one left open runs to the message's end).
_WRAPPED = re.compile(_WRAPPERS + r"(?:</\1>|\Z)", re.S)
#: The same, closed only: Claude Code keeps its hook output apart (attachment
#: lines), so a wrapper's name in a message is more likely typed by the person
#: ("why does <system-reminder> show up?") than a hook's block cut short.
_WRAPPED_CLOSED = re.compile(_WRAPPERS + r"</\1>", re.S)
#: marchdb's own blocks: ``[recall]`` and its hint lines (``- mem_x | score=0.71 | ...``, a
#: contradiction's ``  ! ...`` line), where a host kept them without a wrapper.
_RECALL_BLOCK = re.compile(r"^\[recall\]\n(?:(?:- |  )[^\n]*(?:\n|\Z))*", re.M)


def without_injected(text: str, open_wrapper: bool = True) -> str:
    """``text`` without what hooks injected into it (marchdb's ``[recall]``
    block and profiles, in a host's wrapper or bare); ``open_wrapper`` False:
    a wrapper is cut only with its closing tag."""
    text = (_WRAPPED if open_wrapper else _WRAPPED_CLOSED).sub("", text)
    text = _RECALL_BLOCK.sub("", text)
    return text.strip()


def injected_only(text: str, open_wrapper: bool = True) -> bool:
    """Whether ``text`` is nothing but injected context: a message a hook
    added (marchdb's profiles open with ``[agent_profile]``)."""
    stripped = without_injected(text, open_wrapper)
    return not stripped or stripped.startswith("[agent_profile]\n")
