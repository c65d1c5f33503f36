"""llama.cpp itself: imported once, its log routed to ours, its threads waiting politely.

Imported only when a model is loaded (``LlamaEmbedder``), so commands that
need no model start without it.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import sys
import threading

from marchdb.errors import ModelError

#: libgomp's spin before a waiting thread sleeps (~100,000 spins a ms, so
#: ~0.2 ms). See ``_load_llama_cpp``.
GOMP_SPIN = "20000"


_backend_lock = threading.Lock()


_backend_ready = False


_log_callback = None


recent_errors: collections.deque[str] = collections.deque(maxlen=4)


_llama_log = logging.getLogger("marchdb.llama")


_GGML_LOG_ERROR = 4  # enum ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT


def spare_cores() -> int:
    """Cores with nothing runnable on them at this instant, besides the
    caller's own: ``/proc/loadavg``'s count of runnable threads (Linux). 0
    where it cannot be read, so embedding stays on one thread."""
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, (os.cpu_count() or 1) - max(running, 1))


def load_llama_cpp():
    """Import llama_cpp once, quiet its logging, and initialise the backend."""
    global _backend_ready
    if "llama_cpp" not in sys.modules and not ("OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ):
        # llama.cpp's CPU backend synchronises its threads with OpenMP
        # barriers, and libgomp spins at them by default. When other
        # processes keep the cores busy, a spinning thread waits for one
        # that is not even scheduled, and embedding slows several times over.
        # libgomp reads this once, when llama_cpp's libraries load, i.e. just
        # below. A user's own setting wins.
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        # ...but a short spin first: a query's decode is hundreds of tiny
        # steps, and waking a sleeping thread at each costs more than the
        # step. Spinning only hurts where the other thread's core is busy,
        # and then embedding runs on one thread (``_use_threads``), so nobody waits.
        os.environ["GOMP_SPINCOUNT"] = GOMP_SPIN
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelError(
            "llama-cpp-python is not installed, so no embedding model can run; "
            "install it with: pip install llama-cpp-python (marchdb falls back to BM25 meanwhile)"
        ) from exc
    global _log_callback
    with _backend_lock:
        if not _backend_ready:
            # llama-cpp-python's own log hook prints everything while its
            # logger is unset, and maps ggml's log levels with an outdated
            # table (warnings come out as errors), so every start would print
            # llama.cpp chatter such as "missing newline token". Route the
            # log to our logger at debug level instead; llama.cpp's errors are
            # also kept so that the ModelError raised for them can say why.
            @llama_cpp.llama_log_callback
            def _cb(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
                msg = text.decode("utf-8", "replace").rstrip()
                if msg:
                    _llama_log.debug("%s", msg)
                    if level == _GGML_LOG_ERROR:
                        recent_errors.append(msg)

            _log_callback = _cb  # must outlive every llama.cpp call
            llama_cpp.llama_log_set(_cb, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True
    return llama_cpp


def system_info(lc) -> str:
    """The features this llama.cpp build was compiled with (``llama_print_system_info``)."""
    raw = lc.llama_print_system_info()
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")


def why() -> str:
    """llama.cpp's last error lines, formatted for a ModelError message."""
    return f" ({'; '.join(recent_errors)})" if recent_errors else ""
