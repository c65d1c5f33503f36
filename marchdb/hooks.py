"""Passive recall inside agent hosts: the rules of the answer to a host's event (seed 000's 被动召回).

Seed 000 injects hints without the model asking: the profiles once per
session, a ``[recall]`` block at the start of every agent run (the user's
message), a hidden steer after an intermediate assistant turn with tool
calls (at most 2 hints, none already hinted in the run), and at the end of a
run the assistant's output is *recorded*, never injected. The host adapters
(``hosts``) translate each host's JSON into one of these events
(``ops.HOOK``) and the answer back into the host's JSON. ``Store.hook``
conducts the answer, once for every host: this module says what to do for
an event (``plan``: which recall, which trigger, record-only or injected,
the project, what goes first) and makes the text injected (``context``,
``answer``: the profiles, the ``[recall]`` block, the cut); the runs are
numbered in the index (``index.runs``), and recall is ``Store.recall``'s.

Runs: every prompt of a host's session is a new run ``<prefix>:<session>:<turn>``
(``session_key``: ``cc:`` for Claude Code, the host's name for others), one
turn after the highest the session has used, in the conversation
``<prefix>:<session>``: the 10-run window counts the session's prompts (not
other sessions', whose contexts never held those hints). A tool event and
the run's end belong to the latest run. After ``/clear`` or a compaction the
model's context no longer holds the hints the window remembers: the
session's window starts afresh (a new conversation ``<prefix>:<session>~N``),
so a memory hinted before can be hinted again.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from marchdb import hints, profiles, switches
from marchdb.errors import FileError
from marchdb.lifecycle import now
from marchdb.vault.tags import project_tag

#: Claude Code keeps at most 10,000 characters of injected context whole;
#: every host gets at most this many.
MAX_CONTEXT_CHARS = 9000
#: Longest session id kept as written: ``cc:<session>:<turn>`` must fit a run
#: id (``recall.MAX_RUN_ID_CHARS``, 200); a longer one is cut and hashed.
MAX_SESSION_ID = 160
#: The run-id prefix of a host's sessions (its name, unless listed).
RUN_PREFIXES = {"claude-code": "cc"}
#: Folders walked up from a working directory looking for its git root.
MAX_PROJECT_DEPTH = 40


@dataclass(frozen=True)
class Plan:
    """What the answer to one host event does, by the rules alone
    (``plan``); ``Store.hook`` carries it out."""

    #: Why nothing is done (an event without the text it is about), or None.
    skip: str | None = None
    #: Start the session's 10-run window afresh (``index.runs.new_window``).
    afresh: bool = False
    #: Recall for the event's text.
    recall: bool = False
    #: Which run the recall belongs to: ``given`` (the caller names it, or
    #: none), ``next`` (a prompt starts one), ``current`` (a tool event or a
    #: run's end belongs to the latest, or a new one when there is none).
    run: str = "given"
    trigger: str = "user"
    #: Logged, never injected: the hints suppress nothing later.
    record_only: bool = False
    #: The hints found go into the answer.
    inject: bool = False
    #: The context is a ``[recall]`` block, even an empty one, and the hints
    #: go first unless the profiles are asked for too (the generic contract).
    block: bool = False
    #: The profiles and the working page go first.
    profiles: bool = False
    #: The host's finished sessions are imported in the background (``importSessions``).
    start_imports: bool = False


#: Why an event that needs its text answers nothing without it.
WITHOUT_TEXT = {
    "prompt": "a prompt without its text; nothing injected",
    "tool": "a tool event without the assistant's text; nothing injected",
    "stop": "a run's end without the reply's text; nothing recorded",
}


def plan(
    event: str,
    *,
    text: str | None = None,
    source: str | None = None,
    trigger: str = "user",
    record_only: bool = False,
    profiles: bool = False,
) -> Plan:
    """What to do for one host event (``ops.HOOK`` says what each argument
    is). A session's start injects the profiles (and after ``/clear`` or a
    compaction starts a new window, as a compaction does); a prompt recalls
    in a new run; a tool event recalls for the assistant in the latest run; a
    run's end and what a host cannot take (``record_only``) are recorded,
    never injected; the generic ``message`` recalls in the run its caller
    names."""
    said = bool(text and text.strip())
    if event in ("session_start", "compact"):
        return Plan(
            afresh=source in ("clear", "compact") or event == "compact",
            profiles=event == "session_start",
            start_imports=event == "session_start",
        )
    if event == "message":
        return Plan(recall=said, trigger=trigger, record_only=record_only, inject=True, block=True, profiles=profiles)
    if not said:
        return Plan(skip=WITHOUT_TEXT[event])
    return Plan(
        recall=True,
        run="next" if event == "prompt" else "current",
        trigger="user" if event == "prompt" else "assistant",
        record_only=event == "stop" or record_only,
        # The run's end is recorded, never injected; so is what a host cannot
        # take (VS Code's prompts): never shown, it suppresses nothing.
        inject=event != "stop" and not record_only,
    )


def context(plan: Plan, hinted: list[dict], cfg, notes: list[str]) -> str:
    """The text to inject for ``plan`` and the hints it found: the
    ``[recall]`` block, after the profiles and the working page when the plan
    puts them first (``profile_blocks``; what cannot be read is said in
    ``notes``)."""
    block = hints.recall_block(hinted) if plan.block or plan.inject else ""
    return profile_blocks(cfg, notes, block) if plan.profiles else block


def switched_off(
    cfg,
    *,
    event: str,
    host: str = "generic",
    session: str | None = None,
    text: str | None = None,
    cwd: str | None = None,
    project: str | None = None,
    conversation: str | None = None,
    **_ignored,
) -> str | None:
    """Why the user's switches turn recall off for this event (``switches``),
    or None. A prompt also notes whether its turn said ``#norecall``, so the
    turn's steers and its end stay quiet too. The arguments are
    ``memory_hook``'s (``project``: the one to use, named or from ``cwd``)."""
    if event == "message":  # the generic contract: its caller names the conversation
        keys: tuple[str, ...] = (conversation or "", (conversation or "").split("~", 1)[0])
    else:
        keys = (session_key(host, session), session_id(session))
    if event == "prompt":
        switches.note_turn(cfg.home, keys[0], switches.says_no_recall(text))
    return switches.recall_off(
        cfg,
        text=text if event in ("prompt", "message") else None,
        sessions=keys,
        turn=keys[0] if event in ("tool", "stop") else None,
        project=project,
        cwd=cwd,
    )


def answer(context: str, hinted: list[dict], run: str | None, notes: list[str]) -> dict:
    """``memory_hook``'s answer: ``{"context", "hints", "run_id", "note"}``
    — ``context`` the text to inject ("" for none), cut to
    ``MAX_CONTEXT_CHARS``; ``note`` what the hook log should say (why nothing
    was injected, a profile that cannot be read)."""
    return {
        "context": cut(context.strip(), MAX_CONTEXT_CHARS) + ("\n" if context.strip() else ""),
        "hints": hinted,
        "run_id": run,
        "note": "; ".join(n for n in notes if n) or None,
    }


def profile_blocks(cfg, notes: list[str], recall_block: str = "") -> str:
    """The ``[agent_profile]`` and ``[user_profile]`` blocks, the working
    page's ``[now]`` block with its age (``now``; bounded, so it fits), then
    ``recall_block``; each profile cut to its share of the rest of the context
    bound so that a long one keeps its start and never pushes the other out;
    a profile or page that cannot be read is left out and said in ``notes``."""
    blocks = profiles.read_profiles(cfg, notes)
    try:
        page = now.block(now.read_page(cfg.home, cfg.now_stale_hours))
    except FileError as exc:
        notes.append(str(exc))
        page = ""
    share = (MAX_CONTEXT_CHARS - len(recall_block) - len(page)) // len(blocks) - 40  # each with its block header
    blocks = {key: cut(text, share) for key, text in blocks.items()}
    return profiles.format_context(blocks, recall_block.removeprefix(hints.RECALL_HEADER), now=page)


def session_id(raw: object) -> str:
    """A host's session id as runs are named after it: printable, at most
    ``MAX_SESSION_ID`` characters (a longer one cut and hashed, so two that
    differ further on stay apart)."""
    text = raw if isinstance(raw, str) and raw.strip() else "unknown"
    text = "".join(c if c.isprintable() else "_" for c in text.strip())
    if len(text) > MAX_SESSION_ID:
        text = text[: MAX_SESSION_ID - 17] + "#" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
    return text


_CUT_NOTE = "\n(cut: marchdb keeps injected context under 9,000 characters)"


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so at the end."""
    return text if len(text) <= limit else text[: max(0, limit - len(_CUT_NOTE))].rstrip() + _CUT_NOTE


def session_key(host: str, session: object) -> str:
    """What a host's session is known by in the index and the switches:
    ``<prefix>:<session>`` (``cc:`` for Claude Code, the host's name for
    others; the session as ``session_id`` writes it). Its runs are
    ``<key>:<turn>`` (``index.runs``)."""
    return f"{RUN_PREFIXES.get(host, host)}:{session_id(session)}"


def project_for(cwd: object, projects: dict[str, str]) -> str | None:
    """The project a host's working directory names (seed 000: a ranking
    signal, never a filter): the ``projects`` map of config.json (the
    longest folder that holds ``cwd``), else the name of the git repository
    around it (the folder holding ``.git``), else None — an arbitrary folder
    name would rank memories on a guess."""
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\x00" in cwd:
        return None
    folder = Path(os.path.normpath(cwd))
    mapped = [(len(k), v) for k, v in projects.items() if folder == Path(k) or Path(k) in folder.parents]
    if mapped:
        return max(mapped)[1]
    for candidate in [folder, *folder.parents][:MAX_PROJECT_DEPTH]:
        if candidate == candidate.parent:
            break  # the file system's root is nobody's project
        try:
            if os.path.lexists(candidate / ".git"):
                return candidate.name
        except OSError:
            return None
    return None


def project_here(cfg, project: str | None, cwd: object) -> str | None:
    """The project an event is about: the one it names, else the one its
    working folder names (``project_for``) when that can be a tag. A
    repository's folder name that cannot be a tag ("app (old)") ranks
    nothing; said on every prompt it would only fill the hook log."""
    if project:
        return project
    found = project_for(cwd, cfg.projects) if cwd else None
    return found if project_tag(cfg.project_tag_prefix, found) else None
