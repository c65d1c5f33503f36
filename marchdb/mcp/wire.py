"""The MCP server's stdio wire: every request gets an answer, stray output stays off it.

The SDK's stdio transport reads one JSON-RPC message per line and drops any
line its parser refuses, without a word to the client: a request whose text
holds a lone UTF-16 surrogate (``"\\ud800"``, what a host sends after cutting
a message inside an emoji) or malformed JSON waited forever for its answer.
Here each line is checked first; a line the SDK would drop is answered with
a JSON-RPC error (parse error -32700, invalid request -32600, invalid params
-32602 with the reason) on the same wire, and the good lines go on to the
SDK unchanged. The SDK's own "Invalid request parameters", which says
neither which field nor that the handshake was skipped, goes out saying both.

While serving, file descriptor 0 reads the null device and 1 writes to
stderr (as the SDK does by itself), so a library printing to stdout (the
model's C code) can never corrupt the wire.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

from marchdb.text import bounded

#: Longest message line read (the engine's socket has the same bound): a
#: memory body is 64 KB, a recall text is read to 4,000 characters.
MAX_LINE_BYTES = 8 * 1024 * 1024

#: JSON-RPC error codes (JSON-RPC 2.0, section 5.1).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
#: Longer than any MCP method: the SDK's "Method not found" quoted it whole.
MAX_METHOD_CHARS = 200
#: Once stdin closes, how long the requests read before wait without any of
#: them being answered (the engine a call starts is waited for 60 s).
DRAIN_QUIET_SECONDS = 60.0


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _params_errors(method: str, version: str | None, params: object) -> str:
    """What is wrong with ``params`` of ``method``, in one line: the fields
    and what each should be (never the values sent)."""
    from mcp_types import methods
    from pydantic import ValidationError

    try:
        methods.validate_client_request(method, version or "", params if isinstance(params, dict) else None)
    except ValidationError as exc:
        parts = [
            f"{'.'.join(str(p) for p in err.get('loc', ())) or 'params'}: {err.get('msg', 'invalid')}"
            for err in exc.errors()
        ]
        return "; ".join(dict.fromkeys(parts))
    except (KeyError, ValueError):
        pass  # no schema to name the field: the method's own check refused them
    return "the request's params do not fit the method; see the MCP specification of it"


def _error(mid: object, code: int, message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": code, "message": message}}) + "\n"


def check_line(raw: bytes) -> tuple[str | None, str | None]:
    """``(line for the SDK, None)`` for a message its parser takes, else
    ``(None, error response or None)``: None when nothing may be answered (a
    blank line, a broken notification or response, which have no id)."""
    line, answer, _message = _check(raw)
    return line, answer


def _refused(answer: str | None) -> tuple[None, str | None, None]:
    """``_check``'s result for a line that does not go on to the SDK: its
    error response, or None when nothing may be answered."""
    return None, answer, None


def _check(raw: bytes) -> tuple[str | None, str | None, dict | None]:
    """``check_line``, and the message parsed when it goes on to the SDK."""
    import mcp_types as types

    try:
        text, bad_byte = raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, bad_byte = raw.decode("utf-8", "replace"), exc.start
    if not text.strip():
        return _refused(None)
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return _refused(
            _error(None, PARSE_ERROR, "Parse error: the line is not JSON; send one JSON-RPC object per line")
        )
    if not isinstance(message, dict):
        kinds = {list: "a batch", str: "a string", bool: "true or false", type(None): "null"}
        what = kinds.get(type(message), "a number")
        return _refused(
            _error(None, INVALID_REQUEST, f"Invalid Request: send one JSON-RPC object per line, not {what}")
        )
    mid = message.get("id")
    if isinstance(mid, bool) or not isinstance(mid, (str, int)):
        if "id" in message and "method" in message:
            # A request whose id cannot be used (null, true, 1.5, an object):
            # JSON-RPC 2.0 answers it with an error whose id is null. (The
            # SDK would take it for a notification and never answer.)
            return _refused(_error(None, INVALID_REQUEST, "Invalid Request: the id must be a string or an integer"))
        if "method" not in message and not {"result", "error"} & message.keys():
            # Neither a request, a notification nor a response ({"hello": 1}):
            # an Invalid Request, answered with a null id as JSON-RPC 2.0 says.
            return _refused(_error(None, INVALID_REQUEST, "Invalid Request: a JSON-RPC message needs a method"))
        if bad_byte is not None or "method" not in message:
            return _refused(None)  # a response, or a broken notification: JSON-RPC never answers those
    method = message.get("method")
    if isinstance(method, str) and len(method) > MAX_METHOD_CHARS:
        if isinstance(mid, bool) or not isinstance(mid, (str, int)):
            return _refused(None)  # a notification: never answered
        return _refused(_error(mid, METHOD_NOT_FOUND, f"Method not found: {method[:60]}… ({len(method):,} characters)"))
    if bad_byte is None:
        try:
            types.jsonrpc_message_adapter.validate_json(text, by_name=False)
            return text, None, message
        except Exception:  # noqa: BLE001 - the SDK's parser refuses it: find out why, below
            pass
    if isinstance(mid, bool) or not isinstance(mid, (str, int)):
        return _refused(None)  # a notification the SDK cannot read: nothing may be answered
    if bad_byte is not None:
        return _refused(_error(mid, PARSE_ERROR, f"Parse error: the message is not valid UTF-8 (byte {bad_byte})"))
    if _has_lone_surrogate(message):
        return _refused(
            _error(
                mid,
                INVALID_PARAMS,
                "Invalid params: a string holds a lone UTF-16 surrogate such as \\ud800 (text cut inside an emoji?); "
                "send the text again as valid Unicode",
            )
        )
    return _refused(
        _error(mid, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 request (jsonrpc, id, method, params)")
    )


class LockedWriter:
    """The wire's stdout: whole lines, one writer at a time (the SDK's
    answers and this module's error answers must never interleave). It
    keeps the ids of the requests passed on to the SDK and not answered yet
    (``waiting``), so the end of input can wait for their answers."""

    def __init__(self, fd: int):
        self._file = anyio.wrap_file(os.fdopen(fd, "w", encoding="utf-8", closefd=False))
        self._lock = anyio.Lock()
        #: id -> (method, params) of each request passed on and not answered yet.
        self.waiting: dict[str | int, tuple[str, object]] = {}
        self._answered = anyio.Event()
        self._version: str | None = None  # the protocol version the handshake agreed on

    async def write(self, text: str) -> None:
        """Write ``text`` (a whole line) and flush it."""
        request = None
        if self.waiting:
            try:
                message = json.loads(text)
            except ValueError:
                message = None
            if isinstance(message, dict) and ({"result", "error"} & message.keys()):
                mid = message.get("id")
                request = self.waiting.get(mid) if isinstance(mid, (str, int)) else None
                if request is not None:
                    text = self._told(message, *request) or text
        async with self._lock:
            await self._file.write(text)
            await self._file.flush()
        if request is not None:
            self.settled(message["id"])

    def _told(self, answer: dict, method: str, params: object) -> str | None:
        """The answer to ``method`` as it goes out: the handshake's version
        noted; the SDK's bare "Invalid request parameters" said in full
        (None: ``answer`` goes out as it is)."""
        result, error = answer.get("result"), answer.get("error")
        if method == "initialize" and isinstance(result, dict):
            version = result.get("protocolVersion")
            self._version = version if isinstance(version, str) else None
        if not isinstance(error, dict) or error.get("message") != "Invalid request parameters" or error.get("data"):
            return None
        if self._version is None and method not in ("initialize", "ping"):
            said = (
                f"Invalid Request: {bounded(method, 60)} before the session was initialized; "
                "send initialize, then notifications/initialized, first"
            )
        else:
            said = f"Invalid params for {bounded(method, 60)}: {_params_errors(method, self._version, params)}"
        return _error(answer.get("id"), INVALID_PARAMS, bounded(said))

    def settled(self, mid: object) -> None:
        """The request ``mid`` was answered (or cancelled by the client)."""
        if isinstance(mid, (str, int)) and mid in self.waiting:
            del self.waiting[mid]
            self._answered.set()

    async def drain(self, quiet_seconds: float) -> int:
        """Wait until every request passed on is answered, or none was for
        ``quiet_seconds``; returns how many are left unanswered."""
        while self.waiting:
            self._answered = anyio.Event()
            with anyio.move_on_after(quiet_seconds) as scope:
                await self._answered.wait()
            if scope.cancelled_caught:
                break
        return len(self.waiting)

    async def flush(self) -> None:
        """Flush (``write`` already does)."""
        async with self._lock:
            await self._file.flush()


class CheckedLines:
    """The wire's stdin for the SDK: the lines it can parse; the others are
    answered here (``check_line``) and never reach it."""

    def __init__(self, fd: int, out: LockedWriter):
        self._file = os.fdopen(fd, "rb", closefd=False)
        self._out = out

    async def _readline(self, limit: int) -> bytes:
        return await anyio.to_thread.run_sync(self._file.readline, limit)

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        while True:
            raw = await self._readline(MAX_LINE_BYTES + 1)
            if not raw:
                # The end of input ends the SDK's loop, which cancels the calls
                # in flight: a piped `memory_log` was done without its answer,
                # or not done. Requests read before the end are answered first.
                left = await self._out.drain(DRAIN_QUIET_SECONDS)
                if left:
                    print(
                        f"marchdb: stdin closed; {left} request(s) still running after "
                        f"{DRAIN_QUIET_SECONDS:g} s without an answer are left unanswered",
                        file=sys.stderr,
                    )
                return
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                # Read whole, one such line held ~9x its size in memory (a 400 MB line: 3.5 GB).
                while (more := await self._readline(1 << 20)) and not more.endswith(b"\n"):
                    pass
                await self._out.write(
                    _error(None, INVALID_REQUEST, f"Invalid Request: a message is limited to {MAX_LINE_BYTES:,} bytes")
                )
                continue
            line, answer, message = _check(raw)
            if message is not None:
                mid = message.get("id")
                if "method" in message and isinstance(mid, (str, int)) and not isinstance(mid, bool):
                    self._out.waiting[mid] = (str(message["method"]), message.get("params"))
                elif message.get("method") == "notifications/cancelled":
                    params = message.get("params")
                    self._out.settled(params.get("requestId") if isinstance(params, dict) else None)
            if answer is not None:
                await self._out.write(answer)
            elif line is None and raw.strip():
                print("marchdb: dropped a JSON-RPC notification or response it cannot read", file=sys.stderr)
            if line is not None:
                yield line


def claim_stdio() -> tuple[int, int]:
    """Take the wire away from fds 0 and 1: returns private duplicates of
    them, and points 0 at the null device and 1 at stderr."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


async def serve(server) -> None:
    """Run an ``MCPServer`` on the process's stdio through the checked wire,
    until the client closes stdin."""
    from mcp.server.stdio import stdio_server

    wire_in, wire_out = claim_stdio()
    out = LockedWriter(wire_out)
    lines = CheckedLines(wire_in, out)
    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs, on our streams
    async with stdio_server(stdin=lines, stdout=out) as (read_stream, write_stream):  # type: ignore[arg-type]
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
