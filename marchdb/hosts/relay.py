"""A hook's fast path: the host's event goes to the warm engine as it came.

This module is the engine's side (``marchdb serve`` hands it
``HOOK_EVENT`` requests); the hook's side is ``hosts.hook``. A hook process
that parsed its event and resolved its settings itself would
import the ``json`` package, ``pathlib`` and the configuration on every
prompt and tool call: more than the rest of its work together. So while a
warm engine runs, the hook sends the raw event with what only it knows (the
host, its options, the ``--root`` / ``--model`` it was given, its
environment) and prints what comes back. The engine does what the hook would
have done, with the same code: the host's adapter reads the event,
``config.load_config`` resolves the hook's settings from the hook's
environment, ``memory_hook`` answers with them, the adapter renders.

Settings the engine does not serve (another root or model) are refused as
any client's are; so is anything this relay cannot vouch for reproducing:
the hook then answers the long way (``hosts.hook``), which ends the same.
"""

from __future__ import annotations

import os

from marchdb.config import load_config
from marchdb.engine import client
from marchdb.errors import MarchError
from marchdb.hosts import HOSTS
from marchdb.hosts.hook import HOOK_EVENT, parse_event, rendered


class BadRequest(MarchError):
    """A relayed event's arguments are not the protocol's."""

    exit_code = 2
    kind = "protocol"


class HooksOwn(MarchError):
    """Settings the hook process must resolve itself: it goes the long way
    (the kind every client is told when its settings are not the engine's)."""

    kind = "other_config"


def answer(args: object, home, ask) -> dict:
    """In the engine (``marchdb serve`` hands it ``HOOK_EVENT`` requests):
    what the hook prints for the relayed event. ``ask(op, args, identity)``
    runs an operation as a client's request is run, here ``memory_hook``
    with the hook's identity: another root or model is refused as ever."""
    parsed, cfg = read(args, home)
    if parsed is None:
        return {"stdout": ""}
    module, event = parsed
    data = ask("memory_hook", event, client.identity(cfg))
    return {"stdout": rendered(home, str(args["host"]), module, event, data)}  # type: ignore[index]


def read(args: object, home) -> tuple[tuple[object, dict] | None, object]:
    """``(parsed, config)`` of a ``HOOK_EVENT`` request's arguments: the
    host's adapter and the ``memory_hook`` event it read, as the hook reads
    it (None: nothing to answer, said in the hook log), and the hook's
    configuration. ``BadRequest`` for arguments of another shape,
    ``HooksOwn`` for settings the hook process must resolve itself."""
    if not isinstance(args, dict):
        raise BadRequest("a hook event's arguments must be an object")
    host, options, raw = args.get("host"), args.get("options"), args.get("event")
    flags, env = args.get("flags"), args.get("env")
    if (
        not isinstance(host, str)  # first: a list or an object is no key of HOSTS (TypeError)
        or host not in HOSTS
        or not isinstance(options, list)
        or not all(isinstance(o, str) for o in options)
        or not isinstance(raw, str)
        or not isinstance(flags, dict)
        or not _strings(flags)
        or not _strings(env)
        or not set(flags) <= {"root", "model"}
    ):
        raise BadRequest("a hook event's arguments are not the protocol's")
    assert isinstance(host, str) and isinstance(flags, dict) and isinstance(env, dict)  # for the type checker
    if flags.get("root") and not os.path.isabs(flags["root"]):
        raise HooksOwn("a relative --root is the hook's to resolve")
    cfg = load_config(home=home, root=flags.get("root"), model=flags.get("model"), env=env)
    if not cfg.use_engine:
        raise HooksOwn("MARCH_DAEMON=0: the hook answers in its own process")
    cwd = args.get("cwd")
    return parse_event(home, host, options, raw, cwd if isinstance(cwd, str) else None), cfg


def _strings(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


#: What ``marchdb serve`` adds to its engine's requests (``engine.daemon.Engine(handlers=...)``).
HANDLERS = {HOOK_EVENT: answer}
