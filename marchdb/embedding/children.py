"""What runs in the child processes that prove a model and embed texts apart.

llama.cpp may die of a signal on some CPUs or on some inputs, so the model's
first check (``nativecheck``) and the texts suspected of crashing it
(``isolate``) run in a process of their own, started as ``python -I -c``
with one of these functions: a crash costs that child, never the caller.
Kept apart from the modules that start them, which never load the model
themselves.
"""

from __future__ import annotations

import base64
import json
import sys

from marchdb.embedding import nativecheck
from marchdb.errors import ModelError


def check_main(argv: list[str]) -> None:
    """The model's check (``nativecheck``): load the model, embed the probes, print one JSON line."""
    import numpy as np

    from marchdb.embedding.llama import LlamaEmbedder

    path, mode = argv[0], argv[1]
    extra = None if mode == "auto" else mode == "on"
    try:
        emb = LlamaEmbedder(path, threads=1, extra_buffers=extra)
    except ModelError as exc:
        print(json.dumps({"ok": False, "why": str(exc)}))
        sys.exit(nativecheck.EXIT_MODEL_ERROR)
    reply: dict = {"extra_buffers": emb.extra_buffers.use_extra_buffers, "reason": emb.extra_buffers.reason}
    print(json.dumps({"stage": "loaded", **reply}), flush=True)  # a crash after this line is embedding's
    passages = emb.embed(list(nativecheck.PROBE_PASSAGES) + [nativecheck.PROBE_LONG], "passage")
    query = emb.embed([nativecheck.PROBE_QUERY], "query")[0]
    finite = bool(np.isfinite(passages).all() and np.isfinite(query).all())
    norms = np.linalg.norm(passages, axis=1)
    unit = finite and bool(np.all(np.abs(norms - 1) < 1e-3))
    related, unrelated = float(passages[0] @ query), float(passages[1] @ query)
    if not unit:
        reply.update(ok=False, why="llama.cpp gave vectors that are not finite unit vectors")
    elif related - unrelated < nativecheck.PROBE_MARGIN:
        reply.update(
            ok=False,
            why=f"llama.cpp gave vectors that do not tell related from unrelated text ({related:.3f} vs {unrelated:.3f})",
        )
    else:
        reply.update(ok=True)
    emb.close()
    print(json.dumps(reply), flush=True)


def isolate_main() -> None:
    """Texts embedded apart (``isolate``): read the request on stdin, load the model, embed each text
    alone, print one JSON line per vector as soon as it is made."""
    import numpy as np

    from marchdb.embedding.llama import LlamaEmbedder

    request = json.loads(sys.stdin.buffer.read())
    emb = LlamaEmbedder(
        request["path"], threads=1, prefixes={"passage": request["prefix"]}, extra_buffers=bool(request["extra"])
    )
    print(json.dumps({"stage": "loaded"}), flush=True)  # a crash after this line is a text's
    for text in request["texts"]:
        vec = emb.embed_passages([text])[0]
        blob = np.ascontiguousarray(vec, dtype=np.float32).tobytes()
        print(json.dumps({"v": base64.b64encode(blob).decode("ascii")}), flush=True)
    emb.close()
