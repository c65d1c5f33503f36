"""The ``marchdb.*`` keys our GGUF files carry, and a cheap reader for them.

``build`` writes these keys; ``llama.LlamaEmbedder`` and ``selftest`` read
them back (through llama.cpp's metadata API), and ``build`` reads them with
``read_header`` to tell whether a built file is complete and current. One
spelling each, here.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from marchdb.errors import ModelError

RECIPE = "marchdb.recipe"
SOURCE_SHA = "marchdb.source_sha256"
BUILDER = "marchdb.builder_version"
QUERY_PREFIX = "marchdb.query_prefix"
PASSAGE_PREFIX = "marchdb.passage_prefix"
MULTILINGUAL = "marchdb.multilingual"
WINDOW = "marchdb.window_tokens"
FILE_SIZE = "marchdb.file_size"

# GGUF value types with a fixed-size encoding (gguf's GGUFValueType).
_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _BOOL = 8, 7


def read_header(path: Path) -> dict[str, Any]:
    """The scalar and string keys at the start of a GGUF file's key/value section.

    Parsing stops at the first array (the token list), which ``build`` writes
    after its own keys, so this costs microseconds even for a 250k-token
    vocabulary. Raises ``ModelError`` if the file is not a GGUF.
    """
    out: dict[str, Any] = {}
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc}") from exc
    if len(head) < 24 or head[:4] != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file; rebuild it with: marchdb model build")
    n_kv = struct.unpack_from("<Q", head, 16)[0]
    off = 24
    try:
        for _ in range(n_kv):
            (klen,) = struct.unpack_from("<Q", head, off)
            key = head[off + 8 : off + 8 + klen].decode("utf-8")
            off += 8 + klen
            (vtype,) = struct.unpack_from("<I", head, off)
            off += 4
            if vtype == _STRING:
                (slen,) = struct.unpack_from("<Q", head, off)
                val: Any = head[off + 8 : off + 8 + slen].decode("utf-8")
                off += 8 + slen
            elif vtype in _SCALAR_FMT:
                fmt = _SCALAR_FMT[vtype]
                (val,) = struct.unpack_from(fmt, head, off)
                off += struct.calcsize(fmt)
                if vtype == _BOOL:
                    val = bool(val)
            else:
                break  # arrays: the token list starts; our keys come before it
            out[key] = val
    except (struct.error, UnicodeDecodeError):
        pass  # header longer than what we read; what we have is enough
    return out


def patch_u64(path: Path, key: str, value: int) -> None:
    """Overwrite the value of the uint64 ``key`` in a written GGUF file's header."""
    needle = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", 10)
    with open(path, "rb+") as fh:
        head = fh.read(1 << 16)
        pos = head.find(needle)
        if pos < 0:
            raise ModelError(f"internal error: {key} not found in the header of {path}; report this bug")
        fh.seek(pos + len(needle))
        fh.write(struct.pack("<Q", value))
