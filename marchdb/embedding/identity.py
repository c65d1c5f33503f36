"""A model's identity: its fingerprint (what its vectors are keyed by) and its input conventions.

Both are read off the file without loading the model: a sync with nothing
to embed, or an engine deciding whether it serves a client's model, must
not pay seconds for it.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# Query/passage prefixes by model family, matched against the GGUF's
# general.name (lower-cased, runs of spaces/underscores turned into "-").
# Models not listed get no prefix. Only families whose model cards ask for
# a prefix belong here.
INPUT_CONVENTIONS: tuple[tuple[str, str, str], ...] = (
    # (regex on the normalised name, query prefix, passage prefix)
    (r"(^|[^a-z0-9])e5-(small|base|large)", "query: ", "passage: "),  # intfloat (multilingual-)e5
    (r"nomic-embed-text", "search_query: ", "search_document: "),
    (r"bge-(small|base|large)-zh", "为这个句子生成表示以用于检索相关文章：", ""),
    (
        r"bge-(small|base|large)-en|mxbai-embed-large|snowflake-arctic-embed",
        "Represent this sentence for searching relevant passages: ",
        "",
    ),
)


def normalise_name(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def convention_for(name: str) -> tuple[str, str] | None:
    norm = normalise_name(name)
    if "mistral" in norm or "instruct" in norm:
        return None  # instruction-tuned e5 variants use a different template
    for pattern, q, p in INPUT_CONVENTIONS:
        if re.search(pattern, norm):
            return q, p
    return None


def file_fingerprint(path: Path, name: str = "") -> str:
    """Cheap, content-based identity of a model file.

    Hashes the size, the first and last MiB and 16 evenly spaced 64 KiB
    samples (about 3 MiB read, whatever the file size), plus ``name``. A
    rebuilt, replaced or edited model changes it; a copy or a move does not.
    """
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(f"{name}\0{size}\0".encode())
    mib = 1 << 20
    with open(path, "rb") as fh:
        h.update(fh.read(mib))
        for i in range(1, 17):
            fh.seek(max(0, size * i // 17 - (1 << 15)))
            h.update(fh.read(1 << 16))
        fh.seek(max(0, size - mib))
        h.update(fh.read(mib))
    return f"{normalise_name(name) or 'model'}-{size}-{h.hexdigest()[:20]}"


def fingerprint_of(path: Path) -> str | None:
    """The fingerprint ``LlamaEmbedder`` gives the model at ``path``, read
    off its header (``general.name``) without loading it; None when the header
    does not say (the model must be loaded to know)."""
    from marchdb.embedding.gguf_meta import read_header
    from marchdb.errors import ModelError

    try:
        name = read_header(path).get("general.name")
    except (ModelError, OSError):
        return None
    return file_fingerprint(path, str(name)) if isinstance(name, str) and name else None
