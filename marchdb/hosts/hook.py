"""``marchdb hook HOST``: one hook event on stdin, the answer on stdout.

While a warm engine runs, the event goes to it as it came and its answer is
printed (``hosts.relay``: the hook process imports almost nothing). Else the
host's adapter (``hosts``) turns the event into a ``memory_hook`` request
here; when no engine is running the hook starts one in the background and
answers this event itself with keyword (BM25) recall. A hook always exits 0
and prints nothing it was not sure of: what went wrong goes to
``$MARCH_HOME/logs/hooks.log``.
"""

from __future__ import annotations

import os
import sys

from marchdb import private, switches
from marchdb.engine import client
from marchdb.hosts import HOSTS, BadEvent, adapter

#: Seconds a hook waits for the warm engine's answer before answering on its
#: own (hosts are given a 10 s hook timeout by ``marchdb install``).
HOOK_WAIT_SECONDS = 3.0
#: Seconds without an answer after which a hook pings the engine: a warm
#: answer takes tens of milliseconds, a busy engine answers the ping and is
#: waited for, and a frozen one must cost the prompt that finds it little
#: (``client.request``); the next prompts do not ask it at all.
HOOK_PATIENCE = 0.25
#: Seconds a hook gives that ping (an engine marked stuck by mistake, too busy
#: to answer in time, is found alive again by the recheck after the answer).
HOOK_PING = 0.25
#: How long a hook waits for its event to end on stdin.
EVENT_WAIT_SECONDS = 5.0
#: Largest hook event read from stdin (a prompt can be a long paste; recall
#: reads the first ``recall.MAX_RECALL_CHARS`` characters of it anyway).
MAX_EVENT_BYTES = 4 * 1024 * 1024


#: The engine protocol's op for a raw hook event (answered by ``hosts.relay``).
HOOK_EVENT = "hook_event"


def relay_args(host: str, options: list[str], raw: bytes, flags: dict) -> dict:
    """The ``HOOK_EVENT`` request of a hook process: its raw event and what
    the engine needs to resolve the hook's settings as the hook would have."""
    given = {}
    for key in ("root", "model"):
        value = flags.get(key)
        if not value:
            continue
        value = os.path.expanduser(value)
        # A path is made absolute here, where its folder is known; a model recipe's name stays a name.
        if key == "root" or os.sep in value or value.endswith(".gguf"):
            value = os.path.abspath(value)
        given[key] = value
    env = dict(os.environ)
    if env.get("MARCH_MEMORY_ROOT"):
        env["MARCH_MEMORY_ROOT"] = os.path.abspath(os.path.expanduser(env["MARCH_MEMORY_ROOT"]))
    model = env.get("MARCH_EMBED_MODEL", "")
    if os.sep in model or model.endswith(".gguf"):
        env["MARCH_EMBED_MODEL"] = os.path.abspath(os.path.expanduser(model))
    return {
        "host": host,
        "options": list(options),
        "event": raw.decode("utf-8", "replace"),
        "flags": given,
        "env": env,
        "cwd": _cwd(),
    }


def _cwd() -> str | None:
    """This process's working folder (an event that names none is about it), or None."""
    try:
        return os.getcwd()
    except OSError:  # deleted under the host
        return None


def note_of(data: dict) -> str | None:
    """What the hook log should say of a ``memory_hook`` answer: its note and notices."""
    return "; ".join(n for n in [data.get("note"), *data.get("notices", [])] if n) or None


def run_hook(flags: dict, args: list[str]) -> int:
    """``marchdb hook HOST [options]``: one hook event on stdin, the answer
    on stdout. Always returns 0 (a failing hook must not block the prompt)."""
    home = private.home_path(flags.get("home"))
    host = args[0]
    later: list = []  # what runs once the answer is out (starting an engine)
    try:
        raw = _raw_event(home, host)
        if raw is None or switches.quick_off(home):
            return 0  # paused: nothing to answer, no engine to ask or start (status says so)
        out, tried = _relayed(home, host, args[1:], raw, flags)
        if out is None:
            event = parse_event(home, host, args[1:], raw.decode("utf-8", "replace"), _cwd())
            if event is None:
                return 0
            out = _answer(flags, host, event, later, tried)
        sys.stdout.buffer.write(out.encode("utf-8", "replace"))
        sys.stdout.buffer.flush()
    except BaseException as exc:  # noqa: BLE001 - whatever happens, the prompt goes on
        _log(home, f"{host}: the hook failed: {type(exc).__name__}: {exc}")
    for job in later:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the answer is out; the prompt goes on
            _log(home, f"{host}: {type(exc).__name__}: {exc}")
    return 0


def in_background(job) -> None:
    """Run ``job`` in a child process the host does not wait for: the hook's
    own process exits at once, and the child, with no pipe of the host's
    open, runs ``job`` and exits."""
    try:
        pid = os.fork()
    except OSError:
        return
    if pid:
        return
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        job()
    finally:
        os._exit(0)


def _log(home, message: str) -> None:
    from pathlib import Path

    from marchdb import logfile

    logfile.log(Path(home), "hooks", message)


#: ``Unavailable`` reasons of a relayed event after which the long way asks
#: the engine again (in the form every client uses), rather than answering here at once.
_ASK_AGAIN = frozenset({"not running", "cannot connect", "replaced", "other_config", "protocol", "too large"})


def _relayed(home: str, host: str, options: list[str], raw: bytes, flags: dict) -> tuple[str | None, object]:
    """The warm engine's answer to the raw event (``hosts.relay``), and None
    with why when it gave none: the long way answers then."""
    if private.engine_off(os.environ):
        return None, None
    try:
        data, _ms = client.request(
            home,
            HOOK_EVENT,
            relay_args(host, options, raw, flags),
            timeout=HOOK_WAIT_SECONDS,
            patience=HOOK_PATIENCE,
            recheck=False,
            ping_seconds=HOOK_PING,
        )
    except client.Unavailable as exc:
        return None, exc
    except client.RemoteError as exc:  # the engine refused the request itself (said as the long way says it)
        _log(home, f"{host}: {exc.kind}: {exc}")
        return "", None
    return str(data.get("stdout", "")), None


def _read_event(limit: int) -> bytes | None:
    """Stdin up to its end or ``limit`` bytes; None when it stays open past
    ``EVENT_WAIT_SECONDS`` (a pipe a host or script never closes: the hook
    must not stall the prompt). A terminal is read as typed."""
    import os
    import select
    import time

    stream = sys.stdin
    if stream is None:
        return b""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # an embedding program's stdin
        return stream.buffer.read(limit) if hasattr(stream, "buffer") else stream.read(limit).encode()
    if stream.isatty():
        return stream.buffer.read(limit)
    deadline = time.monotonic() + EVENT_WAIT_SECONDS
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, min(limit - size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _raw_event(home: str, host: str) -> bytes | None:
    """The event on stdin; None (said in the hook log) when there is nothing to answer."""
    raw = _read_event(MAX_EVENT_BYTES + 1)
    if raw is None:
        _log(
            home, f"{host}: the event did not end within {EVENT_WAIT_SECONDS:.0f} s (stdin left open); nothing injected"
        )
        return None
    if len(raw) > MAX_EVENT_BYTES:
        _log(home, f"{host}: the event is over {MAX_EVENT_BYTES:,} bytes; nothing injected")
        return None
    if host not in HOSTS:
        _log(home, f"unknown host {host!r}; known: {', '.join(HOSTS)}")
        return None
    return raw


def parse_event(home, host: str, options: list[str], text: str, cwd: object = None) -> tuple[object, dict] | None:
    """The host's adapter and the ``memory_hook`` event it read from
    ``text``; None (said in the hook log) when there is nothing to answer.
    An event that names no working folder is about ``cwd``, the hook
    process's (its project and the project's switches). The engine reads a
    relayed event with it too (``hosts.relay``)."""
    module = adapter(host)
    try:
        event = module.parse(text, options)
    except BadEvent as exc:
        _log(home, f"{host}: {exc}")
        return None
    if event is None:
        return None
    if not event.get("cwd") and isinstance(cwd, str) and cwd:
        event["cwd"] = cwd
    return module, event


def answer_here(store, module, event: dict) -> dict:
    """``event`` answered by ``store`` in this process, as the engine would:
    ``{"stdout", "note"}`` (a refusal of the library is the note, and nothing
    is printed)."""
    from marchdb import ops
    from marchdb.errors import Expired, MarchError

    try:
        data = ops.call(store, "memory_hook", event)
    except Expired:
        raise
    except MarchError as exc:
        return {"stdout": "", "note": f"{type(exc).__name__}: {exc}"}
    return {"stdout": module.render(event, data), "note": note_of(data)}


def _start_engine(home, host: str, start_args: list[str]) -> bool:
    """Start the warm engine in the background; False (said in the hook log) when it cannot be."""
    why_not = client.start(home, start_args)
    if why_not:
        _log(home, f"{host}: cannot start the warm engine: {why_not}")
    return why_not is None


def _answer(flags: dict, host: str, parsed: tuple, later: list, tried: object = None) -> str:
    """The hook's stdout: the warm engine's answer, else keyword recall done
    here; an engine to start is appended to ``later`` (run once the answer
    is out), unless a prompt waits for it (``hookWaitSeconds``). ``tried``:
    why the relayed event got no answer (``_relayed``), if it was sent."""
    from marchdb.hosts import full_environment

    full_environment()  # the configuration and the index need site-packages, which a hook's Python starts without
    from marchdb.config import load_config

    module, event = parsed
    cfg = load_config(home=flags.get("home"), root=flags.get("root"), model=flags.get("model"))
    from marchdb.hooks import project_here, switched_off

    off = switched_off(cfg, **{**event, "project": project_here(cfg, event.get("project"), event.get("cwd"))})
    if off:  # no engine to ask or start for an answer that is nothing
        _log(cfg.home, f"{host}: {off}; nothing injected")
        return ""
    start_args = [f"--{k}={v}" for k, v in flags.items() if k in ("root", "model")]
    why = "MARCH_DAEMON=0"
    if cfg.use_engine:
        try:
            if isinstance(tried, client.Unavailable) and tried.reason not in _ASK_AGAIN:
                raise tried  # timed out, stuck, untrusted: asking again would cost the prompt as much
            return _from_engine(cfg, host, module, event)
        except client.Unavailable as exc:
            reason = exc
        why = str(reason)
        if reason.reason == "stuck":
            # Asked again once this answer is out, in a process the host does not wait
            # for: a frozen engine costs the next prompts nothing, a thawed one is used again.
            # One stuck too long is stopped there, and a new one started.
            later.append(lambda: in_background(lambda: _recheck(cfg, host, start_args)))
        # A prompt is worth the wait for an engine that is starting (one that
        # SessionStart started a moment ago, or this hook now): its answer is
        # semantic. Other events answer now, from the keyword index.
        waits = event["event"] in ("prompt", "tool") and cfg.hook_wait_seconds > 0
        if reason.reason in ("not running", "cannot connect", "replaced"):
            alive = client.engine_alive(cfg.home)
            if not alive and cfg.daemon_autostart:
                if waits:
                    alive = _start_engine(cfg.home, host, start_args)
                else:
                    later.append(lambda: _start_engine(cfg.home, host, start_args))
            if waits and alive and client.wait_ready(cfg.home, cfg.hook_wait_seconds):
                try:
                    return _from_engine(cfg, host, module, event)
                except client.Unavailable as exc:
                    why = str(exc)
            elif client.engine_alive(cfg.home):
                why = "it is warming up"  # it binds its socket once the model is loaded
            elif not cfg.daemon_autostart:
                why = "none runs, and daemonAutoStart is off"
            else:
                why = "none ran; one is starting"
    _log(cfg.home, f"{host}: answered without the warm engine ({why}): keyword recall only")
    # Answer this event ourselves, without loading the model (seconds): BM25.
    from marchdb.store import Store

    store = Store(cfg, keep_vectors=False, use_model=False)
    store.first_scan_inline = False
    store.sql_tables = False
    try:
        answer = answer_here(store, module, event)
    finally:
        store.close()
    if answer["note"]:
        _log(cfg.home, f"{host}: {answer['note']}")
    return str(answer["stdout"])


def _recheck(cfg, host: str, start_args: list[str]) -> None:
    """Ask an engine marked stuck again (``client.recheck_stuck``); once one
    stuck too long is stopped and gone, start a new one."""
    if client.recheck_stuck(cfg.home) and cfg.daemon_autostart and client.wait_gone(cfg.home, 30.0):
        _start_engine(cfg.home, host, start_args)


def _from_engine(cfg, host: str, module, event: dict) -> str:
    """The engine's answer to ``event``, rendered for the host (its note
    logged); "" when the engine refused it (said in the hook log);
    ``client.Unavailable`` when it cannot answer."""
    try:
        data, _ms = client.request(
            cfg.home,
            "memory_hook",
            event,
            client.identity(cfg),
            timeout=HOOK_WAIT_SECONDS,
            patience=HOOK_PATIENCE,
            recheck=False,
            ping_seconds=HOOK_PING,
        )
    except client.RemoteError as exc:
        _log(cfg.home, f"{host}: {exc.kind}: {exc}")
        return ""
    return rendered(cfg.home, host, module, event, data)


def rendered(home, host: str, module, event: dict, data: dict) -> str:
    """What the hook prints for ``data`` (``memory_hook``'s answer to
    ``event``), its note said in the hook log; the engine renders a relayed
    event with it too."""
    note = note_of(data)
    if note:
        _log(home, f"{host}: {note}")
    return str(module.render(event, data))
