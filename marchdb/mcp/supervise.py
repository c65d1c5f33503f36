"""``marchdb mcp`` in a child of its own: a crash of llama.cpp costs one answer, never the session.

An MCP server that holds its own Store (no warm engine answers for it)
embeds in its own process, and a crash of llama.cpp there (native code,
which Python cannot catch) would end the server, and with it every memory
tool of the client's session. So on Linux the process the client started
forks before anything is loaded and relays the JSON-RPC lines between the
client and the server, which runs in the child, noting the client's
``initialize`` and the requests not yet answered. When the child dies of a
native crash, the relay starts another, gives it the client's
``initialize`` again (its answer is not passed on: the client had it), and:

* if the model was embedding (the sentinel's in-flight records name what;
  the next process puts that text aside), a request that writes no memory
  is asked again, so a recall is answered by keywords; a call that writes
  (``memory_save``, ``memory_log``, ...) may have written its file already,
  so it is answered with an error saying that what it wrote is kept and
  its vectors are left to ``marchdb sync``, unless the crash was on a text
  embedded alone (a save's near-duplicate probe, before anything is written);
* after a crash anywhere else, the requests in flight are answered with an
  error naming the signal and not asked again (they could crash the next
  child as well).

More than ``MAX_CRASHES`` crashes within ``CRASH_WINDOW_SECONDS`` end the
relay by the same signal: a server that cannot stay up is not hidden. Any
other end of the child (stdin closed, SIGTERM, ``kill -9``) ends the relay
with the same status. The relay costs one pipe hop per message.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import sys
import time
from pathlib import Path

from marchdb.forked import CRASH_SIGNALS, die_of, die_with, say

#: Crashes the relay restarts the server after, within the window below.
MAX_CRASHES = 3
CRASH_WINDOW_SECONDS = 600.0
#: Lines up to this size are read for their id; longer ones are passed on as
#: they come (the server refuses them: ``wire.MAX_LINE_BYTES``, 8 MiB).
TRACKED_LINE_BYTES = 8 * 1024 * 1024 + 1
#: Signals the caller sends the relay that are the server's to act on.
_PASSED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_CHUNK = 1 << 16
#: Bytes waiting for the child beyond which the client's stdin is not read until the child takes them.
_MAX_WAITING = 16 * 1024 * 1024
#: JSON-RPC's code for an error of the server itself.
_INTERNAL_ERROR = -32603


def supervise(index_path: Path) -> None:
    """Return in a child that serves (its stdin and stdout are pipes to this
    process), or, in the process the client started, relay until the
    server's last end and leave as it did. Returns at once, unforked, where
    a child cannot be tied to its parent's life (not Linux) or no process
    can be had."""
    if not sys.platform.startswith("linux"):
        return
    relay = _Relay(index_path)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        if relay.spawn():
            return
    except OSError:
        return  # no process to spare: the server runs here, as it did before the relay
    for signum in _PASSED_ON:
        signal.signal(signum, relay.pass_on)
    if relay.run():
        return  # in a new child, after a crash of the last one
    raise AssertionError("the relay leaves by os._exit or a signal")  # pragma: no cover


class _Lines:
    """Whole lines out of chunks; a line over ``TRACKED_LINE_BYTES`` comes in
    pieces marked untracked, as it arrives, so that none is held whole."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.spilling = False

    def feed(self, chunk: bytes) -> list[tuple[bytes, bool]]:
        out: list[tuple[bytes, bool]] = []
        start = len(self.buf)
        self.buf += chunk
        while (nl := self.buf.find(b"\n", start)) >= 0:
            out.append((bytes(self.buf[: nl + 1]), not self.spilling))
            del self.buf[: nl + 1]
            self.spilling = False
            start = 0
        if len(self.buf) > TRACKED_LINE_BYTES:
            out.append((bytes(self.buf), False))
            self.buf.clear()
            self.spilling = True
        return out


def _message(line: bytes, tracked: bool) -> dict | None:
    if not tracked:
        return None
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


#: How the server's answers begin (the SDK writes ``jsonrpc`` and ``id`` first): their id is read
#: off the head of the line, not by parsing an answer of megabytes (a memory opened whole).
_ANSWER_HEAD = re.compile(rb'\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*,\s*"(\w+)"')
#: Lines whose head is not that are parsed whole up to this size.
_PARSED_WHOLE_BYTES = 1 << 20


def _answered(line: bytes, tracked: bool) -> str | None:
    """The id (``_key``) a line of the server answers; None for its own requests and notifications."""
    head = _ANSWER_HEAD.match(line, 0, 512)
    if head is not None:
        return _key(json.loads(head.group(1))) if head.group(2) in (b"result", b"error") else None
    msg = _message(line, tracked and len(line) <= _PARSED_WHOLE_BYTES)
    return _key(msg["id"]) if msg is not None and "method" not in msg and "id" in msg else None


def _key(request_id: object) -> str:
    return json.dumps(request_id, sort_keys=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Relay:
    def __init__(self, index_path: Path) -> None:
        self.index_path = index_path
        self.pid = 0
        self.to_child: int | None = None
        self.from_child = -1
        self.selector = selectors.DefaultSelector()
        self.client_open = True
        #: Bytes for the child not yet taken by it (its stdin is not blocking: a
        #: child busy writing its answers must not stop this process reading them).
        self.out = bytearray()
        #: The client's ``initialize`` request and ``initialized`` notification, given to each new child.
        self.init: tuple[str, bytes] | None = None
        self.initialized: bytes | None = None
        #: Requests the client sent that the server has not answered: id -> (line, message).
        self.pending: dict[str, tuple[bytes, dict]] = {}
        #: The id of an ``initialize`` given again, whose answer the client must not see twice.
        self.swallow: str | None = None
        #: Lines for a new child, held until it has answered that ``initialize`` (line, a request?).
        self.held: list[tuple[bytes, bool]] = []
        self.crashes: list[float] = []
        #: A signal the caller sent to stop the server (passed on to it).
        self.stop_signal = 0

    # ------------------------------------------------------------ the child

    def spawn(self) -> bool:
        """Start a server child; True in it."""
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        parent = os.getpid()
        # Blocked across the fork: the child must not pass a signal on with this process's handler.
        before = signal.pthread_sigmask(signal.SIG_BLOCK, _PASSED_ON)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            for fd in (to_r, to_w, from_r, from_w):
                os.close(fd)
            raise
        if pid == 0:
            self.selector.close()
            os.dup2(to_r, 0)
            os.dup2(from_w, 1)
            for fd in (to_r, to_w, from_r, from_w):
                os.close(fd)
            die_with(parent)
            for signum in _PASSED_ON:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            return True
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        os.close(to_r)
        os.close(from_w)
        os.set_blocking(to_w, False)
        self.pid, self.to_child, self.from_child = pid, to_w, from_r
        self.out.clear()
        self.selector.register(from_r, selectors.EVENT_READ, "server")
        return False

    def pass_on(self, signum: int, _frame: object) -> None:
        self.stop_signal = signum  # a child that crashes meanwhile is not replaced
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    # ------------------------------------------------------------ the relay

    def run(self) -> bool:
        """Relay until the child ends; True in a new child started after a crash."""
        client, server = _Lines(), _Lines()
        self.selector.register(0, selectors.EVENT_READ, "client")
        while True:
            for key, _ in self.selector.select():
                if key.data == "to server":
                    self._flush()
                elif key.data == "client":
                    chunk = self._read(0)
                    if not chunk:
                        self.selector.unregister(0)
                        self.client_open = False
                    for line, tracked in client.feed(chunk):
                        self._from_client(line, tracked)
                    self._close_when_done()
                else:
                    chunk = self._read(self.from_child)
                    for line, tracked in server.feed(chunk):
                        self._from_server(line, tracked)
                    if not chunk:
                        server = _Lines()
                        if self._child_ended():
                            return True
                break  # the registrations may have changed: select again

    @staticmethod
    def _read(fd: int) -> bytes:
        try:
            return os.read(fd, _CHUNK)
        except OSError:  # a stdin that is no pipe after all, a reset: its end
            return b""

    def _from_client(self, line: bytes, tracked: bool) -> None:
        msg = _message(line, tracked)
        method = msg.get("method") if msg is not None else None
        if msg is not None and isinstance(method, str):
            if "id" in msg:
                key = _key(msg["id"])
                self.pending[key] = (line, msg)
                if method == "initialize":
                    self.init = (key, line)
            elif method == "notifications/initialized":
                self.initialized = line
            elif method == "notifications/cancelled" and isinstance(msg.get("params"), dict):
                self.pending.pop(_key(msg["params"].get("requestId")), None)
        self._to_server(line, msg is not None and isinstance(method, str) and "id" in msg)

    def _to_server(self, line: bytes, request: bool = False) -> None:
        if self.swallow is not None:
            self.held.append((line, request))
            return
        self.out += line
        self._flush()

    def _flush(self) -> None:
        """Give the child what it takes now; the rest when it can take more."""
        if self.to_child is None:
            self.out.clear()
            return
        try:
            while self.out:
                del self.out[: os.write(self.to_child, self.out)]
        except BlockingIOError:
            pass
        except OSError:  # the child is gone: its end is read next, and requests are asked again from ``pending``
            self.out.clear()
        registered = self.to_child in self.selector.get_map()
        if self.out and not registered:
            self.selector.register(self.to_child, selectors.EVENT_WRITE, "to server")
        elif not self.out and registered:
            self.selector.unregister(self.to_child)
        if self.client_open:  # the client waits while the child has much to take still
            reading = 0 in self.selector.get_map()
            if reading and len(self.out) > _MAX_WAITING:
                self.selector.unregister(0)
            elif not reading and len(self.out) <= _MAX_WAITING:
                self.selector.register(0, selectors.EVENT_READ, "client")
        self._close_when_done()

    def _from_server(self, line: bytes, tracked: bool) -> None:
        key = _answered(line, tracked)
        if key is not None:
            if key == self.swallow:  # the answer to an initialize given again: the client had its own
                self.swallow = None
                held, self.held = self.held, []
                for line_held, request in held:
                    self._to_server(line_held, request)
                return
            self.pending.pop(key, None)
        self._to_client(line)

    def _to_client(self, data: bytes) -> None:
        try:
            _write_all(1, data)
        except OSError:
            # `marchdb mcp | head -1`, a client that stopped reading: no answer can reach it.
            say("the client closed the server's stdout (it reads no answers); stopping")
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            os._exit(1)

    def _close_when_done(self) -> None:
        """Once the client closed its end and the child has all it sent, the child sees the end too."""
        if self.client_open or self.swallow is not None or self.held or self.out or self.to_child is None:
            return
        os.close(self.to_child)
        self.to_child = None

    # ------------------------------------------------------------ a child's end

    def _child_ended(self) -> bool:
        """After the child closed its stdout: leave as it did, or start the
        next one after a crash (True in that new child)."""
        self.selector.unregister(self.from_child)
        os.close(self.from_child)
        if self.to_child is not None:
            if self.to_child in self.selector.get_map():
                self.selector.unregister(self.to_child)
            os.close(self.to_child)
            self.to_child = None
        self.out.clear()
        _, status = os.waitpid(self.pid, 0)
        if os.WIFEXITED(status):
            sys.stderr.flush()
            os._exit(os.WEXITSTATUS(status))
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else signal.SIGKILL
        if signum not in CRASH_SIGNALS or self.stop_signal or (not self.client_open and not self.pending):
            die_of(signum)
        now = time.monotonic()
        self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_SECONDS] + [now]
        name = signal.Signals(signum).name
        if len(self.crashes) > MAX_CRASHES:
            say(
                f"the MCP server crashed ({name}) {len(self.crashes)} times in {CRASH_WINDOW_SECONDS / 60:.0f} "
                "minutes; stopping (`marchdb doctor` says whether the model works on this machine)"
            )
            die_of(signum)
        again = self._after_crash(signum)
        if self.spawn():
            return True
        # What was held for the child that died: its requests are in ``again`` (or answered), and
        # the introduction is made anew; the client's notifications still go.
        notes = [(line, False) for line, request in self.held if not request and line is not self.initialized]
        asked = [(line, True) for _, line in again]
        self.swallow, self.held = None, []
        if self.init is not None and self.init[0] not in dict(again):
            self.held = [*([(self.initialized, False)] if self.initialized else []), *asked, *notes]
            self.out += self.init[1]
            self.swallow = self.init[0]
            self._flush()
        else:
            for line, request in [*asked, *notes]:
                self._to_server(line, request)
        return False

    def _after_crash(self, signum: int) -> list[tuple[str, bytes]]:
        """Answer the requests in flight that must not be asked again, say
        what happened, and return those that are (id, line), in order."""
        from marchdb.index import sentinel

        records = sentinel.in_flight_of(str(self.index_path), self.pid)
        alone = bool(records) and all(r.get("alone") for r in records)
        name = signal.Signals(signum).name
        again: list[tuple[str, bytes]] = []
        kept = False
        for key, (line, msg) in list(self.pending.items()):
            if records and (alone or not _writes(msg)):
                again.append((key, line))
                continue
            del self.pending[key]
            if records:
                kept = True
                text = (
                    f"llama.cpp crashed ({name}) while the server embedded, and this call may have written already, "
                    "so it was not run again: what it wrote is kept, its vectors are left to `marchdb sync` (which "
                    "embeds them apart); look with memory_search before calling it again"
                )
            else:
                text = (
                    f"the MCP server crashed ({name}) during this call, outside the model; it was restarted and "
                    "the call was not run again"
                )
            self._answer(msg, text)
        if not records:
            say(f"the MCP server crashed ({name}) outside the model: restarting it")
        elif kept:
            say(
                f"llama.cpp crashed ({name}) while the server embedded; a call that may have written already was "
                "not run again (what it wrote is kept): restarting the MCP server"
            )
        else:
            say(
                f"llama.cpp crashed ({name}) on a text a call gave the model, which is not given that text again "
                "on this machine: restarting the MCP server and asking it again"
            )
        return again

    def _answer(self, msg: dict, text: str) -> None:
        if msg.get("method") == "tools/call":
            answer: dict = {"result": {"content": [{"type": "text", "text": text}], "isError": True}}
        else:
            answer = {"error": {"code": _INTERNAL_ERROR, "message": text}}
        line = json.dumps({"jsonrpc": "2.0", "id": msg["id"], **answer}, ensure_ascii=False) + "\n"
        self._to_client(line.encode("utf-8"))


def _writes(msg: dict) -> bool:
    """Whether a request may have written a memory before a crash (a tool that writes)."""
    from marchdb.ops import WRITE_OPERATIONS

    params = msg.get("params")
    return msg.get("method") == "tools/call" and isinstance(params, dict) and params.get("name") in WRITE_OPERATIONS
