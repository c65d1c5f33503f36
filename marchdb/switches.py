"""Whether passive recall is on here, now: the user's switches.

From the broadest to the narrowest, the first that speaks decides:

1. ``marchdb pause`` (``$MARCH_HOME/paused``; ``--for 2h`` ends it by
   itself) turns recall off everywhere until ``marchdb resume``;
2. ``#norecall`` in a message turns it off for that message's turn: its
   steer after tools and the reply's record too;
3. a session: ``marchdb off --session`` / ``marchdb on --session``
   (``$MARCH_HOME/switches.json``), else ``MARCH_RECALL=off`` / ``on`` in
   the environment the host runs its hooks (or the MCP server) with;
4. a project: ``"recall": false`` / ``true`` in its entry of config.json's
   ``projects``, else a file ``.marchdb-norecall`` in the working folder or
   one above it (a repository can only turn recall off: a cloned stranger's
   repository must not turn on what the user turned off);
5. otherwise on.

Off means marchdb injects and records nothing there: no profiles, no
``[now]``, no hints, no steer, no record of the reply; ``memory_recall`` and
``memory_context`` answer no hint and say why. Every host's hook reaches the
same ``recall_off`` (through ``Store.hook``, in the engine or in the hook's
own process), as do the MCP tools and the Python API (``Store.recall``,
``Store.context``). A hook process checks the pause itself before anything
else (``quick_off``: one ``open``), and a hook that would start an engine
checks every switch first (``hosts.hook``): recall that is off starts nothing.

Only ``os`` at import: the hook's fast path imports this module.
"""

from __future__ import annotations

import os
import time

#: The word that turns recall off for one message.
NO_RECALL = "#norecall"
#: The environment variable a host passes to its hooks: ``off`` or ``on``.
ENV = "MARCH_RECALL"
#: In the home: the pause (``since EPOCH until EPOCH|-``).
PAUSE_FILE = "paused"
#: In the home: sessions switched off or on, and turns a message turned off.
STATE_FILE = "switches.json"
#: A file in a project folder (or above it) that turns recall off there.
PROJECT_FILE = ".marchdb-norecall"
#: Sessions (and turns) remembered at most; the oldest go first.
MAX_SESSIONS = 1000
#: Folders walked up from a working directory looking for ``PROJECT_FILE``.
MAX_DEPTH = 40

_OFF = ("0", "off", "no", "false")
_ON = ("1", "on", "yes", "true")


def env_switch(env) -> str | None:
    """``"off"`` or ``"on"`` from ``MARCH_RECALL`` in ``env``, None when it
    is unset; a value that is neither raises ``ValueError`` (the
    configuration names it)."""
    raw = env.get(ENV)
    if raw is None or not raw.strip():
        return None
    value = raw.strip().lower()
    if value in _OFF:
        return "off"
    if value in _ON:
        return "on"
    raise ValueError(f"{ENV}={raw!r} is neither off nor on")


# ---------------------------------------------------------------- the pause


def paused(home, now: float | None = None) -> dict | None:
    """``{"since", "until"}`` (epoch seconds, ``until`` None for no end)
    while recall is paused, else None (a pause whose end has passed is over)."""
    try:
        with open(os.path.join(home, PAUSE_FILE), "rb") as f:
            words = f.read(200).decode("ascii", "replace").split()
    except OSError:
        return None
    fields = dict(zip(words[::2], words[1::2]))
    since = _number(fields.get("since")) or 0.0
    until = _number(fields.get("until"))
    if until is not None and (time.time() if now is None else now) >= until:
        return None
    return {"since": since, "until": until}


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def pause(home, seconds: float | None = None) -> dict:
    """Pause recall in ``home`` (for ``seconds``, or until ``resume``)."""
    now = time.time()
    until = None if seconds is None else now + seconds
    _write(os.path.join(home, PAUSE_FILE), f"since {now:.0f} until {'-' if until is None else f'{until:.0f}'}\n")
    return {"since": round(now), "until": None if until is None else round(until)}


def resume(home) -> bool:
    """End the pause; False when recall was not paused."""
    was = paused(home) is not None
    try:
        os.unlink(os.path.join(home, PAUSE_FILE))
    except FileNotFoundError:
        pass
    return was


def quick_off(home) -> bool:
    """Whether recall is off whatever the event says (the pause): what a hook
    process tells with one ``open`` before reading its event or asking an engine."""
    return paused(home) is not None


# ---------------------------------------------------------------- messages


def says_no_recall(text: object) -> bool:
    """Whether a message holds ``#norecall`` (any case, as a word of its own)."""
    if not isinstance(text, str) or "#" not in text:
        return False
    low = text.lower()
    at = low.find(NO_RECALL)
    while at >= 0:
        end = at + len(NO_RECALL)
        if (at == 0 or not (low[at - 1].isalnum() or low[at - 1] in "#_")) and (
            end == len(low) or not (low[end].isalnum() or low[end] == "_")
        ):
            return True
        at = low.find(NO_RECALL, end)
    return False


# ---------------------------------------------------------------- sessions


class _State:
    """``switches.json`` as read last, kept while the file is unchanged (the
    engine reads it for every event)."""

    key: tuple | None = None
    data: dict = {}


def read_state(home) -> dict:
    """``{"sessions": {key: {"recall": "off"|"on", "at"}}, "turns": {key: at}}``."""
    import json

    path = os.path.join(home, STATE_FILE)
    try:
        st = os.stat(path)
    except OSError:
        return {"sessions": {}, "turns": {}}
    key = (path, st.st_mtime_ns, st.st_size, st.st_ino)
    if _State.key != key:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.loads(f.read(4 * 1024 * 1024))
        except (OSError, ValueError):
            data = {}
        data = data if isinstance(data, dict) else {}
        _State.data = {
            "sessions": data["sessions"] if isinstance(data.get("sessions"), dict) else {},
            "turns": data["turns"] if isinstance(data.get("turns"), dict) else {},
        }
        _State.key = key
    return _State.data


def _update(home, change) -> dict:
    """Read, ``change(state)`` and write ``switches.json`` under a lock (two
    hooks at once lose neither's change); returns the new state."""
    import fcntl
    import json

    os.makedirs(home, mode=0o700, exist_ok=True)
    lock = os.open(
        os.path.join(home, STATE_FILE + ".lock"),
        os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
        0o600,
    )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _State.key = None
        state = {k: dict(v) for k, v in read_state(home).items()}
        change(state)
        for part in ("sessions", "turns"):
            if len(state[part]) > MAX_SESSIONS:  # insertion order: the oldest first
                state[part] = dict(list(state[part].items())[-MAX_SESSIONS:])
        _write(os.path.join(home, STATE_FILE), json.dumps(state, ensure_ascii=False, indent=1) + "\n")
        _State.key = None
        return state
    finally:
        os.close(lock)


def _write(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (never through a link)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def set_session(home, key: str, recall: str | None) -> None:
    """Turn recall ``"off"`` or ``"on"`` for the session ``key`` (a host's
    session id, or its conversation ``cc:ID``); None forgets the switch. An
    earlier switch of the same session under its other name goes."""
    bare = key.split(":", 1)[-1]

    def change(state: dict) -> None:
        for old in [k for k in state["sessions"] if k == key or k.split(":", 1)[-1] == bare or k == bare]:
            del state["sessions"][old]
        if recall is not None:
            state["sessions"][key] = {"recall": recall, "at": _stamp()}

    _update(home, change)


def session_switch(home, keys) -> tuple[str, str] | None:
    """``(state, key)`` of the first of ``keys`` switched off or on, or None."""
    sessions = read_state(home)["sessions"]
    for key in keys:
        entry = sessions.get(key) if key else None
        if isinstance(entry, dict) and entry.get("recall") in ("off", "on"):
            return entry["recall"], key
    return None


def note_turn(home, key: str, off: bool) -> None:
    """A prompt of the session ``key`` began a turn: ``off`` when it said
    ``#norecall`` (its tool steers and its end then stay quiet). Written
    only when that changes."""
    if bool(read_state(home)["turns"].get(key)) == off:
        return

    def change(state: dict) -> None:
        state["turns"].pop(key, None)
        if off:
            state["turns"][key] = _stamp()

    _update(home, change)


def turn_off(home, key: str) -> bool:
    """Whether the session's current turn began with ``#norecall``."""
    return bool(read_state(home)["turns"].get(key))


# ---------------------------------------------------------------- projects


def project_file(cwd: object) -> str | None:
    """The ``.marchdb-norecall`` in ``cwd`` or the nearest folder above it
    (at most ``MAX_DEPTH`` levels), or None."""
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\x00" in cwd:
        return None
    folder = os.path.normpath(cwd)
    for _ in range(MAX_DEPTH):
        candidate = os.path.join(folder, PROJECT_FILE)
        try:
            if os.path.lexists(candidate):
                return candidate
        except (OSError, ValueError):
            return None
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None


def project_rules(cfg, project: str | None) -> dict | None:
    """The ``projects`` entry's rules for ``project`` (by its tag, so "ACME"
    and "acme" are one), or None."""
    if not project or not cfg.project_rules:
        return None
    from marchdb.vault.tags import project_tag

    tag = project_tag(cfg.project_tag_prefix, project)
    for name, rules in cfg.project_rules.items():
        if tag is not None and project_tag(cfg.project_tag_prefix, name) == tag:
            return rules
    return None


# ---------------------------------------------------------------- the decision


def recall_off(
    cfg,
    *,
    text: object = None,
    sessions: tuple[str, ...] | list[str] = (),
    turn: str | None = None,
    project: str | None = None,
    cwd: object = None,
) -> str | None:
    """Why passive recall is off (a line for the hook log and the answer's
    warning), or None when it is on. ``text``: the message; ``sessions``:
    the keys the session is known by; ``turn``: the session whose current
    turn is asked about (a tool's steer, a run's end); ``project``, ``cwd``:
    where the agent works."""
    home = cfg.home
    pause_ = paused(home)
    if pause_ is not None:
        until = "" if pause_["until"] is None else f" until {time.strftime('%H:%M', time.localtime(pause_['until']))}"
        return f"recall is paused{until} (marchdb resume turns it on)"
    if says_no_recall(text):
        return f"{NO_RECALL} in the message: no recall for this turn"
    if turn and turn_off(home, turn):
        return f"this turn began with {NO_RECALL}"
    switched = session_switch(home, [k for k in sessions if k])
    if switched is not None:
        state, key = switched
        if state == "off":
            return f"recall is off for the session {key} (marchdb on --session {key} turns it on)"
        return None
    if cfg.recall_env == "off":
        return f"{ENV}=off in the environment"
    if cfg.recall_env == "on":
        return None
    rules = project_rules(cfg, project)
    if rules is not None and rules.get("recall") is not None:
        return None if rules["recall"] else f"recall is off for the project {project} (projects in config.json)"
    found = project_file(cwd)
    if found is not None:
        return f"recall is off in this folder ({found}; delete it to turn recall on)"
    return None
