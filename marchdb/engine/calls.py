"""A command's use of the warm engine: start it when none runs, wait for it, ask it.

The CLI and the MCP server answer through ``call``; a hook, which must not
wait seconds for an engine, uses ``client`` directly (``hosts.hook``).
"""

from __future__ import annotations

import os

from marchdb.engine.client import (
    LOG_DIR,
    Unavailable,
    engine_alive,
    identity,
    request,
    start,
    wait_ready,
)


def call(
    cfg,
    op: str,
    args: dict,
    autostart: bool,
    wait: float = 20.0,
    start_args: list[str] | None = None,
    starting=None,
) -> dict:
    """Run ``op`` on the engine of ``cfg.home``: start it when ``autostart``
    and none runs, wait up to ``wait`` seconds for it to be warm (``starting``,
    when given, is called once before that wait: a first start builds the
    model, which takes seconds). Raises ``Unavailable`` when it cannot answer
    (run the operation in-process) and ``RemoteError`` when it refused the
    request. An engine replaced for being stuck is started afresh, and this
    request is answered in-process meanwhile."""
    home = cfg.home
    ident = identity(cfg)
    try:
        return request(home, op, args, ident)[0]
    except Unavailable as exc:
        if exc.reason == "replaced" and autostart:
            start(home, start_args)
        if exc.reason not in ("not running", "cannot connect"):
            raise
    if not engine_alive(home):
        if not autostart:
            raise Unavailable("not running", "and daemonAutoStart is off")
        why_not = start(home, start_args)
        if why_not:
            raise Unavailable("cannot start", why_not)
    if starting is not None:
        starting()
    if not wait_ready(home, wait):
        why = (
            f"the engine did not answer within {wait:.0f}s"
            if engine_alive(home)
            else "the engine stopped while starting, or refused to"
        )
        raise Unavailable("not ready", f"{why} (see {os.path.join(home, LOG_DIR)}/daemon.log)")
    return request(home, op, args, ident)[0]


def in_words(exc: Unavailable) -> str:
    """Why the warm engine did not answer, for a person who has never heard of it."""
    plain = {
        "not ready": "the warm engine (`marchdb serve`, which keeps the model loaded) is still starting",
        "stuck": "the warm engine is suspended or stuck",
        "replaced": "the warm engine was stuck and has been restarted",
        "timeout": "the warm engine took too long",
        "cannot start": "the warm engine could not start",
        "untrusted": "the warm engine's folder cannot be trusted",
        "other_config": "the warm engine runs with other settings",
    }.get(exc.reason)
    if not plain:
        return f"the warm engine could not answer ({exc})"
    return f"{plain} ({exc.detail})" if exc.detail else plain
