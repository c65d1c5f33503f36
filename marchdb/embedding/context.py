"""One llama.cpp context of a model, and the background lane that bulk embedding runs in.

A recall must never wait behind a backlog being embedded (a large note, an
import, a first sync): with one context, a query waited for the whole batch
in flight (512 tokens take 0.3–2 s on two busy cores), and a hook gave up on
the engine. So a ``LlamaEmbedder`` keeps two contexts of the same model (the
weights are shared; a context costs ~30 MB and ~45 ms to make):

* the **foreground** context embeds queries and what a caller waits for;
* the **background** context embeds backlogs, on one thread of its own whose
  CPU priority is lowered (``BACKGROUND_NICE``): when a query, a hook's
  process or anything else of the user's wants a core, the scheduler gives it
  that core first. llama.cpp's worker threads are made by the thread that
  first calls it and inherit its priority, so the lane's threads are all
  lowered and the foreground's are not.

Both run at the same time. ``Context`` serialises the calls into its own
llama.cpp context; nothing else is shared but the (read-only) model.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from marchdb.embedding import backend
from marchdb.errors import ModelError

#: Added to the background lane's nice value (Linux: per thread). At 10 a
#: thread of default priority gets about nine tenths of a shared core.
BACKGROUND_NICE = 10
#: A context whose largest batch held at most this many tokens (queries)
#: has no large output buffer to give back (``Context.grown``).
SMALL_INPUT_TOKENS = 96

T = TypeVar("T")


class Context:
    """One llama.cpp context with the batch arrays that feed it; one call at a time (``lock``)."""

    def __init__(self, lc: Any, model: Any, cparams: Any, path: object):
        self.lc = lc
        self.path = path
        self.cparams = cparams
        self.lock = threading.Lock()
        self.ctx = lc.llama_init_from_model(model, cparams)
        if not self.ctx:
            raise ModelError(
                f"llama.cpp could not create a context for {path}{backend.why()} (out of memory?); "
                "try fewer threads or a smaller batch_tokens"
            )
        self.memory = lc.llama_get_memory(self.ctx)
        #: Largest batch since the context was made: the size of its output buffer.
        self.peak_tokens = 0
        self.active_threads: int | None = None
        self._alloc_batch(int(cparams.n_batch))

    def _alloc_batch(self, cap: int) -> None:
        lc = self.lc
        # A llama_batch whose arrays are numpy buffers we own (never passed to
        # llama_batch_free): filling it is a handful of vectorised copies.
        self.b_token = np.zeros(cap, dtype=np.int32)
        self.b_pos = np.zeros(cap, dtype=np.int32)
        self.b_nseq = np.ones(cap, dtype=np.int32)
        self.b_seq = np.zeros(cap, dtype=np.int32)
        self.b_logits = np.ones(cap, dtype=np.int8)  # embeddings need every token as output
        seq_ptr_t = ctypes.POINTER(ctypes.c_int32)
        base = self.b_seq.ctypes.data
        self.b_seq_ptrs = (seq_ptr_t * cap)(*[ctypes.cast(base + 4 * i, seq_ptr_t) for i in range(cap)])
        b = lc.llama_batch()
        b.n_tokens = 0
        b.token = self.b_token.ctypes.data_as(ctypes.POINTER(lc.llama_token))
        b.embd = ctypes.POINTER(ctypes.c_float)()
        b.pos = self.b_pos.ctypes.data_as(ctypes.POINTER(lc.llama_pos))
        b.n_seq_id = self.b_nseq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        b.seq_id = ctypes.cast(self.b_seq_ptrs, ctypes.POINTER(seq_ptr_t))
        b.logits = self.b_logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.batch = b

    def use_threads(self, threads: int) -> None:
        """Run on ``threads`` threads from the next call (the caller holds ``lock``)."""
        # Only as many threads as there are idle cores at that moment (plus
        # our own): llama.cpp's threads wait for each other at every step, and
        # one whose core is busy stalls them all: two threads beat one only
        # while the other core is idle, and lose to it when it is busy.
        if threads != self.active_threads:
            self.lc.llama_set_n_threads(self.ctx, threads, threads)
            self.active_threads = threads

    def decode(self, token_lists: list[list[int]], dim: int) -> list[np.ndarray]:
        """The pooled vector of each token list, decoded as one batch (one
        sequence each; the caller holds ``lock``). The vectors are copies."""
        lc = self.lc
        pos = 0
        for sid, toks in enumerate(token_lists):
            n = len(toks)
            self.b_token[pos : pos + n] = toks
            self.b_pos[pos : pos + n] = np.arange(n, dtype=np.int32)
            self.b_seq[pos : pos + n] = sid
            pos += n
        self.batch.n_tokens = pos
        self.peak_tokens = max(self.peak_tokens, pos)
        if self.memory:
            lc.llama_memory_clear(self.memory, True)
        backend.recent_errors.clear()
        rc = lc.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise ModelError(
                f"llama.cpp failed to embed a batch (code {rc}{backend.why()}) with {self.path}; "
                "try a smaller batch_tokens, or check the model with 'marchdb model check'"
            )
        out = []
        for sid in range(len(token_lists)):
            ptr = lc.llama_get_embeddings_seq(self.ctx, sid)
            if not ptr:
                raise ModelError(f"{self.path} returned no pooled embedding; it is probably not an embedding model")
            out.append(np.ctypeslib.as_array(ptr, shape=(dim,)).astype(np.float64))
        return out

    @property
    def grown(self) -> bool:
        """Whether the context holds an output buffer larger than a query's.

        llama.cpp sizes it for the largest batch the context decoded — logits
        for every token, even for an embedding model: 250,037 vocabulary
        floats a token, 512 MB for a full batch of e5 — and never shrinks it."""
        return self.peak_tokens > SMALL_INPUT_TOKENS

    def free(self) -> None:
        """Free the llama.cpp context (idempotent; the caller holds ``lock`` or owns the context alone)."""
        if self.ctx:
            self.lc.llama_free(self.ctx)
            self.ctx = None
            self.memory = None


class Lane:
    """A thread of its own, at a lowered CPU priority, that runs calls one at a time."""

    def __init__(self, name: str = "marchdb-embed-background"):
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()
        #: Whether the lane's priority could be lowered (None until its thread started).
        self.lowered: bool | None = None

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the lane's thread; the caller waits for its result (or exception)."""
        with self._guard:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name, initializer=self._lower)
            pool = self._pool
        return pool.submit(fn).result()

    def _lower(self) -> None:
        self.lowered = lower_thread_priority(BACKGROUND_NICE)

    def close(self) -> None:
        """Stop the lane's thread after the call it runs, if any."""
        with self._guard:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def lower_thread_priority(by: int) -> bool:
    """Raise the calling thread's nice value by ``by`` (never lowering it:
    that needs privileges). Threads it starts inherit it. Returns whether it
    could (a system without per-thread priorities leaves it as it was: the
    work still runs, only without giving way)."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + by))
        return True
    return False
