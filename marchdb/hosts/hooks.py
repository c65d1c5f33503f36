"""Passive recall inside agent hosts: what a hook answers (seed 000's 被动召回).

Seed 000 injects hints without the model asking: the profiles once per
session, a ``[recall]`` block at the start of every agent run (the user's
message), and at the end of a run the assistant's output is *recorded* —
never injected. A host tells marchdb about those moments through hooks:

* **Claude Code** (``marchdb hook claude-code``; events as its hooks
  reference specifies, stdin JSON → stdout JSON):
  ``SessionStart`` → ``[agent_profile]`` and ``[user_profile]``;
  ``UserPromptSubmit`` → ``[recall]`` for the prompt, as a new agent run;
  ``Stop`` → the reply is recalled in record-only mode, nothing printed
  (Claude reads nothing from a Stop hook; a ``"decision": "block"`` answer
  would make it go on, and marchdb never sends one). The run id is
  ``cc:<session id>:<turn>`` in the conversation ``cc:<session id>``: every
  prompt is a new run, so the 10-run suppression works across the session's
  prompts (and not across sessions, whose contexts never held those hints),
  and Stop belongs to the prompt's run.
* **Any other host** (``marchdb hook generic``): the message on stdin, the
  context block on stdout (see ``generic``).

Whatever goes wrong — malformed input, a missing vault, a model error — a
hook answers nothing and the cause goes to ``$MARCH_HOME/logs/hooks.log``
(and ``marchdb doctor``): a hook never breaks or stalls the user's prompt.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from marchdb import logfile, profiles
from marchdb.engine import client
from marchdb.errors import Expired, MarchError
from marchdb.files import open_regular
from marchdb.text import mend_surrogates

#: Claude Code keeps at most 10,000 characters of injected context whole.
MAX_CONTEXT_CHARS = 9000
#: Bytes read from the end of a transcript to find the last reply (Stop of
#: Claude Code versions that do not send ``last_assistant_message``).
TRANSCRIPT_TAIL_BYTES = 512 * 1024
#: Longest session id kept as written: ``cc:<session>:<turn>`` must fit a run
#: id (``recall.MAX_RUN_ID_CHARS``, 200); a longer one is cut and hashed.
MAX_SESSION_ID = 160
HOSTS = client.HOOK_HOSTS
RUN_PREFIX = "cc"


@dataclass
class Answer:
    """What a hook prints, and what to note in the hook log (if anything)."""

    stdout: str = ""
    note: str | None = None

    def to_dict(self) -> dict:
        """``{"stdout", "note"}``."""
        return {"stdout": self.stdout, "note": self.note}


def handle(store, host: str, event: str) -> dict:
    """Answer one hook event from ``host`` (the raw text the host sent).
    Never raises for bad input: the answer is then empty and explained in
    the hook log."""
    try:
        if host == "claude-code":
            answer = claude_code(store, event)
        elif host == "generic":
            answer = generic(store, event)
        else:
            answer = Answer(note=f"unknown host {host!r}; known: {', '.join(HOSTS)}")
    except Expired:
        raise  # the engine's client has stopped waiting: it answers this event itself
    except MarchError as exc:
        answer = Answer(note=f"{type(exc).__name__}: {exc}")
    if answer.note:
        logfile.log(store.cfg.home, "hooks", f"{host}: {answer.note}")
    return answer.to_dict()


# ---------------------------------------------------------------- Claude Code


def claude_code(store, event: str) -> Answer:
    """Claude Code's hook events (see the module docstring)."""
    if not event.strip():
        return Answer(note="the event is empty (nothing came on stdin); nothing injected")
    try:
        data = json.loads(event.removeprefix("\ufeff"))  # a BOM some writers put first
    except ValueError as exc:
        return Answer(note=f"the event is not JSON ({exc}); nothing injected")
    except RecursionError:
        return Answer(note="the event is not JSON a host sends (nested too deeply); nothing injected")
    if not isinstance(data, dict):
        return Answer(note="the event is not a JSON object; nothing injected")
    name = data.get("hook_event_name")
    session = _session_id(data.get("session_id"))
    if name == "SessionStart":
        unread: list[str] = []  # one profile that cannot be read must not keep the other out
        blocks = profiles.read_profiles(store.cfg, unread)
        share = MAX_CONTEXT_CHARS // len(blocks) - 40  # each profile gets its half, with its block header
        blocks = {key: _cut(text, share) for key, text in blocks.items()}
        return Answer(_additional_context("SessionStart", profiles.format_context(blocks)), "; ".join(unread) or None)
    if name == "UserPromptSubmit":
        prompt = _as_text(data.get("prompt"))
        if not isinstance(prompt, str) or not prompt.strip():
            return Answer(note="UserPromptSubmit without a prompt; nothing injected")
        store.cfg.require_root()  # a missing vault must not hint from a stale index
        run_id = next_run_id(store.con, session)
        project = _taggable(store, project_for(data.get("cwd"), store.cfg.projects))
        result = store.recall(
            prompt, run_id=run_id, trigger="user", project=project, conversation=_conversation(session)
        )
        if not result.hints:
            return Answer(note=result.warning)
        return Answer(_additional_context("UserPromptSubmit", "[recall]\n" + result.text()), result.warning)
    if name == "Stop":
        reply = _as_text(data.get("last_assistant_message"))
        if not isinstance(reply, str) or not reply.strip():
            reply = last_reply(data.get("transcript_path"))
        if not reply:
            return Answer(note="Stop without the reply's text; nothing recorded")
        store.cfg.require_root()
        run_id = current_run_id(store.con, session) or next_run_id(store.con, session)
        project = _taggable(store, project_for(data.get("cwd"), store.cfg.projects))
        store.recall(
            reply,
            run_id=run_id,
            trigger="assistant",
            record_only=True,
            project=project,
            conversation=_conversation(session),
        )
        return Answer()  # record only: nothing for Claude to read, and never a "block" decision
    return Answer()  # other events: nothing to add


def _session_id(raw: object) -> str:
    text = raw if isinstance(raw, str) and raw.strip() else "unknown"
    text = "".join(c if c.isprintable() else "_" for c in text.strip())
    if len(text) > MAX_SESSION_ID:
        # Cut, two sessions that differ further on would share their runs; a
        # hash of the whole keeps them apart within the run id's bound.
        text = text[: MAX_SESSION_ID - 17] + "#" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
    return text


_CUT_NOTE = "\n(cut: marchdb keeps injected context under 9,000 characters)"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(_CUT_NOTE)].rstrip() + _CUT_NOTE


def _additional_context(event_name: str, text: str) -> str:
    text = _cut(text.strip(), MAX_CONTEXT_CHARS)
    if not text:
        return ""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": text}}, ensure_ascii=False
    )


def _conversation(session: str) -> str:
    return f"{RUN_PREFIX}:{session}"


def _turn(run_id: str, prefix: str) -> int:
    """The turn of a run id ``<prefix><turn>`` (0 for any other id)."""
    turn = run_id[len(prefix) :] if run_id.startswith(prefix) else ""
    return int(turn) if turn.isascii() and turn.isdigit() else 0


def next_run_id(con, session: str) -> str:
    """A new agent run for ``session``: ``cc:<session>:<turn>``, one turn
    after the highest the session has used (runs are registered by recall;
    other run ids in the conversation are passed over). Old runs are pruned
    (sql/003_lifecycle.sql): a session whose runs are all gone starts after
    the last turn the recall log still names, so no logged hint of an
    earlier run is taken for one of the new run."""
    prefix = f"{_conversation(session)}:"
    ids = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE conversation = ?", (_conversation(session),))]
    if not ids:
        high = prefix[:-1] + ";"  # ';' sorts right after ':': the session's run ids lie between
        ids = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT run_id FROM recall_log WHERE run_id >= ? AND run_id < ?", (prefix, high)
            )
        ]
    return f"{prefix}{max((_turn(i, prefix) for i in ids), default=0) + 1}"


def current_run_id(con, session: str) -> str | None:
    """The session's latest run (the prompt a Stop event belongs to)."""
    row = con.execute(
        "SELECT run_id FROM runs WHERE conversation = ? ORDER BY seq DESC LIMIT 1", (_conversation(session),)
    ).fetchone()
    return None if row is None else str(row[0])


#: Folders walked up from a working directory looking for its git root.
MAX_PROJECT_DEPTH = 40


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


def _as_text(value: object) -> str | None:
    # A lone surrogate (half an emoji cut by a host) would refuse the whole
    # message; as U+FFFD the rest of it is still recalled.
    return mend_surrogates(value) if isinstance(value, str) else None


def _taggable(store, project: str | None) -> str | None:
    # A repository's folder name that cannot be a tag ("app (old)") ranks
    # nothing; said on every prompt it would only fill the hook log.
    from marchdb.index.recall import project_tag

    return project if project_tag(store.cfg.project_tag_prefix, project) else None


def last_reply(transcript_path: object) -> str:
    """The text of the last assistant message in a Claude Code transcript
    (JSONL), read from its end; "" when there is none or it cannot be read."""
    if not isinstance(transcript_path, str) or not transcript_path:
        return ""
    try:
        path = Path(transcript_path).expanduser()  # "~nosuchuser/x": RuntimeError
        # A regular file only: a FIFO named as the transcript would block
        # the engine's one request thread, and every prompt after it.
        with open_regular(path) as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - TRANSCRIPT_TAIL_BYTES))
            tail = fh.read().decode("utf-8", "replace").splitlines()
    except (OSError, ValueError, RuntimeError):  # unreadable; a NUL in the path; an unknown ~user
        return ""
    for line in reversed(tail):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the first, cut line of the tail; a line being written; not a transcript's
        if not isinstance(entry, dict) or entry.get("type") != "assistant":
            continue
        content = (entry.get("message") or {}).get("content")
        if isinstance(content, str) and content.strip():
            return content
        if isinstance(content, list):
            texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
            text = "\n".join(t for t in texts if isinstance(t, str) and t.strip())
            if text:
                return text
    return ""


# ---------------------------------------------------------------- any host


def generic(store, event: str) -> Answer:
    """The contract for other hosts and scripts: ``event`` is a JSON object
    ``{"text", "run_id"?, "trigger"?, "record_only"?, "profiles"?, "project"?, "conversation"?}`` (what
    ``marchdb hook generic`` builds from stdin and its options); the answer
    is the plain context block — ``[recall]`` lines, with the profile blocks
    first when ``profiles`` is true — or nothing."""
    data = json.loads(event)
    text = _as_text(data.get("text")) or ""
    unread: list[str] = []  # as at SessionStart: one unreadable profile keeps nothing else out
    blocks = profiles.read_profiles(store.cfg, unread) if data.get("profiles") else None
    hints_text = ""
    if text.strip():
        store.cfg.require_root()
        result = store.recall(
            text,
            run_id=data.get("run_id"),
            trigger=data.get("trigger") or "user",
            record_only=bool(data.get("record_only")),
            project=data.get("project") if isinstance(data.get("project"), str) else None,
            conversation=data.get("conversation") if isinstance(data.get("conversation"), str) else None,
        )
        hints_text = result.text()
    note = "; ".join(unread) or None
    if blocks is not None:
        return Answer(profiles.format_context(blocks, hints_text), note)
    return Answer(f"[recall]\n{hints_text}\n" if hints_text else "", note)
