"""The index's vectors held in memory by long-lived processes, for fast KNN.

Why: sqlite-vec's vec0 computes cosines one vector at a time (about 0.6 µs
per 384-d vector on this machine, so ~16 ms for the 26,000 vectors of a
10,000-memory vault) and reads one vector by rowid in ~25 µs; numpy does the
same scan as one matrix-vector product in ~3 ms and a lookup in ~1 µs. A
process that recalls more than once (the MCP server, the watcher, an agent
loop on the Python API) loads the vectors once and keeps them in step with the
index; a one-shot CLI call keeps the pure-SQL path of ``sql/recall.sql``,
which needs no loading. Both paths feed the same statement and rank alike.

Two tiers, by size (``EXACT_BYTES``):

* exact — every vector as float32, both kinds in one matrix; a query's
  cosines with all of them are one matrix-vector product (two products, one
  per kind, cost twice the one on a busy machine: each wakes BLAS's threads).
* coarse — past that budget, sign bits of the centred vectors (48 bytes per
  384-d vector; Hamming distance pre-selects ``K_COARSE`` candidates, as the
  SQL path does with its vec0 ``bit`` tables) and an int8 copy scaled per
  vector (cosine error ~1e-3) to re-rank them exactly enough and to score
  other candidates: 432 bytes per vector instead of 1,536.

Staying in step: every transaction that adds or deletes vectors bumps
``meta.vector_gen`` (see ``vectors.bump_generation``). When it changed, the
new vids are read (``vectors.vid`` is AUTOINCREMENT, so a vid is never
reused for another text) and deleted ones dropped; a model change, or an
index rebuilt in place (a new ``meta.index_id``), reloads all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import apsw
import numpy as np

from marchdb.index.db import get_meta, has_vector_tables, scalar
from marchdb.index.vectors import K_COARSE

#: Float32 copies up to this many bytes (~43,000 memories of e5-small);
#: beyond, the coarse tier's bits + int8 copies.
EXACT_BYTES = 160 * 2**20
#: Rows converted per step while loading (bounds the temporary float32 copy).
LOAD_BATCH = 8192
KINDS = ("meta", "chunk")
TABLES = {"meta": "vec_meta", "chunk": "vec_chunk"}


@dataclass
class _Vectors:
    """The vectors of one kind: sorted vids and their rows."""

    vids: np.ndarray  # int64, ascending
    f32: np.ndarray | None = None  # exact tier: (n, dim) float32
    # coarse tier: sign bits of v - centre, (words, n) uint64: one word of
    # every vector after the other, so Hamming distance is a few fast passes.
    bits: np.ndarray | None = None
    q8: np.ndarray | None = None  # coarse tier: (n, dim) int8, v ~= q8 * scale
    scale: np.ndarray | None = None  # coarse tier: (n,) float32
    _rows: dict[int, int] | None = None

    def row_of(self, vid: int) -> int | None:
        """The row of ``vid`` (None when not loaded). A dict built on first
        use: recall's statement asks for ~450 cosines, and a numpy
        ``searchsorted`` per call cost several milliseconds of each recall."""
        if self._rows is None:
            self._rows = dict(zip(self.vids.tolist(), range(len(self.vids))))
        return self._rows.get(vid)


class Query:
    """Cosines between one query vector and the index's vectors."""

    def __init__(self, index: VectorIndex, qvec: np.ndarray):
        self.index = index
        self.q = np.ascontiguousarray(qvec, dtype=np.float32)
        self._exact: np.ndarray | None = None  # exact tier: the cosine of every row of index.f32, once
        self._known: dict[str, dict[int, float]] = {k: {} for k in KINDS}  # coarse tier, computed rows

    def knn(self, kind: str, k: int) -> list[int]:
        """The vids of the ``k`` nearest vectors of ``kind``, nearest first."""
        vecs = self.index.kinds[kind]
        n = len(vecs.vids)
        if n == 0 or k <= 0:
            return []
        if vecs.f32 is not None:
            rows, cos = None, self._all(kind)
        else:
            # Hamming pre-selection on sign bits, then cosine from the int8 copy.
            assert vecs.bits is not None  # the coarse tier
            qbits = self.index.bits_of(self.q[None, :])[:, 0]
            dist = np.bitwise_count(vecs.bits[0] ^ qbits[0]).astype(np.uint16)
            for word in range(1, len(qbits)):
                dist += np.bitwise_count(vecs.bits[word] ^ qbits[word])
            take = min(self.index.k_coarse, n)
            rows = np.argpartition(dist, take - 1)[:take] if take < n else np.arange(n)
            cos = self._rows_cos(vecs, rows)
            self._known[kind].update(zip(vecs.vids[rows].tolist(), cos.tolist()))
        m = len(cos)
        take = min(k, m)
        top = np.argpartition(cos, m - take)[m - take :] if take < m else np.arange(m)
        top = top[np.argsort(-cos[top], kind="stable")]
        return (vecs.vids[top] if rows is None else vecs.vids[rows[top]]).tolist()

    def cosine(self, kind: str, vid: int) -> float | None:
        """Cosine of the query with vector ``vid`` (None if not loaded)."""
        vecs = self.index.kinds[kind]
        row = vecs.row_of(vid)
        if row is None:
            return None
        if vecs.f32 is not None:
            return float(self._all(kind)[row])
        known = self._known[kind]
        if vid not in known:
            known[vid] = float(self._rows_cos(vecs, np.array([row]))[0])
        return known[vid]

    def _all(self, kind: str) -> np.ndarray:
        """The cosines of every vector of ``kind`` (exact tier): a view into
        the one product of the query with every vector."""
        if self._exact is None:
            assert self.index.f32 is not None  # the exact tier
            self._exact = self.index.f32 @ self.q
        start, stop = self.index.spans[kind]
        return self._exact[start:stop]

    def _rows_cos(self, vecs: _Vectors, rows: np.ndarray) -> np.ndarray:
        assert vecs.q8 is not None and vecs.scale is not None  # the coarse tier
        return (vecs.q8[rows].astype(np.float32) @ self.q) * vecs.scale[rows]


class VectorIndex:
    """Every vector of the index in memory, refreshed from ``meta.vector_gen``."""

    def __init__(self, exact_bytes: int = EXACT_BYTES, k_coarse: int = K_COARSE):
        self.exact_bytes = exact_bytes
        self.k_coarse = k_coarse
        self.kinds: dict[str, _Vectors] = {}
        self.state: tuple | None = None  # (index_id, model fingerprint, vector_gen)
        self.coarse = False
        self.center: np.ndarray | None = None
        self.dim = 0
        # Exact tier: every kind's float32 rows in one matrix, kind after kind
        # (each kind's ``f32`` is a view of its rows), and their row spans.
        self.f32: np.ndarray | None = None
        self.spans: dict[str, tuple[int, int]] = {}
        # Full loads and incremental refreshes, counted for the tests alone (nothing in marchdb or tools/
        # reads them): the only sign of which upkeep ran that needs no wrapping of the methods below.
        self.loads = 0
        self.refreshes = 0

    # ---------------------------------------------------------------- upkeep

    def sync(self, con: apsw.Connection) -> bool:
        """Bring the copy in step with the index; False when the index has no
        vector tables (nothing to search)."""
        index_id = get_meta(con, "index_id")
        fingerprint = get_meta(con, "model_fingerprint")
        gen = get_meta(con, "vector_gen")
        state = (index_id, fingerprint, gen)
        if state == self.state:
            return bool(self.kinds)
        if not has_vector_tables(con):
            self.kinds, self.state = {}, state
            return False
        if self.state is None or self.state[:2] != state[:2] or not self.kinds:
            self._load(con)
        else:
            self._refresh(con)
        self.state = state
        return True

    def bits_of(self, rows: np.ndarray) -> np.ndarray:
        """Sign bits of ``rows - centre``, packed into uint64 words, as a
        (words, len(rows)) array."""
        packed = np.packbits(rows - self.center > 0, axis=1)
        pad = (-packed.shape[1]) % 8
        if pad:
            packed = np.pad(packed, ((0, 0), (0, pad)))
        return np.ascontiguousarray(np.ascontiguousarray(packed).view(np.uint64).T)

    def _load(self, con: apsw.Connection) -> None:
        self.dim = int(get_meta(con, "dim") or 0)
        center = get_meta(con, "vector_center")
        self.center = (
            np.frombuffer(bytes.fromhex(center), dtype=np.float32) if center else np.zeros(self.dim, np.float32)
        )
        total = scalar(con, "SELECT count(*) FROM vectors")
        self.coarse = total * self.dim * 4 > self.exact_bytes
        # No ORDER BY: it would sort every blob in a temp table; _read sorts the vids.
        self.kinds = {kind: self._read(con, f"SELECT rowid, embedding FROM {TABLES[kind]}", ()) for kind in KINDS}
        self._join()
        self.loads += 1

    def _refresh(self, con: apsw.Connection) -> None:
        total = scalar(con, "SELECT count(*) FROM vectors")
        if (total * self.dim * 4 > self.exact_bytes) != self.coarse:
            self._load(con)  # crossed the tier boundary
            return
        for kind in KINDS:
            have = self.kinds[kind]
            live = np.fromiter(
                (r[0] for r in con.execute("SELECT vid FROM vectors WHERE kind = ? ORDER BY vid", (kind,))),
                dtype=np.int64,
            )
            keep = np.isin(have.vids, live, assume_unique=True)
            new = live[~np.isin(live, have.vids, assume_unique=True)]
            if keep.all() and not len(new):
                continue
            kept = _take(have, np.flatnonzero(keep))
            if len(new):
                added = self._read(
                    con,
                    f"SELECT rowid, embedding FROM {TABLES[kind]} WHERE rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps(new.tolist()),),
                )
                kept = _merge(kept, added)
            self.kinds[kind] = kept
        self._join()
        self.refreshes += 1

    def _join(self) -> None:
        """Put the kinds' float32 rows into one matrix (exact tier), each
        kind's ``f32`` a view of it; the coarse tier has none."""
        if self.coarse or not self.kinds:
            self.f32, self.spans = None, {}
            return
        parts = [self.kinds[kind].f32 for kind in KINDS]
        if self.f32 is not None and all(p is not None and p.base is self.f32 for p in parts):
            return  # nothing changed since the last join
        assert all(p is not None for p in parts)  # the exact tier
        self.f32 = np.concatenate([p for p in parts if p is not None])
        start = 0
        for kind in KINDS:
            stop = start + len(self.kinds[kind].vids)
            self.kinds[kind].f32 = self.f32[start:stop]
            self.spans[kind] = (start, stop)
            start = stop

    def _read(self, con: apsw.Connection, sql: str, params: tuple) -> _Vectors:
        vids: list[int] = []
        parts: list[_Vectors] = []
        blobs: list[bytes] = []
        for vid, blob in con.execute(sql, params):
            vids.append(vid)
            blobs.append(blob)
            if len(blobs) == LOAD_BATCH:
                parts.append(self._convert(vids, blobs))
                vids, blobs = [], []
        if blobs or not parts:
            parts.append(self._convert(vids, blobs))
        out = parts[0]
        for part in parts[1:]:
            out = _concat(out, part)
        order = np.argsort(out.vids, kind="stable")
        if not np.array_equal(order, np.arange(len(order))):
            out = _take(out, order)
        return out

    def _convert(self, vids: list[int], blobs: list[bytes]) -> _Vectors:
        ids = np.array(vids, dtype=np.int64)
        mat = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), self.dim)
        if not self.coarse:
            return _Vectors(ids, f32=mat.copy())
        peak = np.abs(mat).max(axis=1)
        scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        q8 = np.rint(mat / scale[:, None]).astype(np.int8)
        return _Vectors(ids, bits=self.bits_of(mat), q8=q8, scale=scale)

    def query(self, qvec: np.ndarray) -> Query:
        """Cosines of ``qvec`` against the loaded vectors."""
        return Query(self, qvec)

    def nbytes(self) -> int:
        """Memory held by the copies."""
        views = 0 if self.f32 is None else self.f32.nbytes  # the kinds' f32 are views of it
        return views + sum(
            a.nbytes for v in self.kinds.values() for a in (v.vids, v.bits, v.q8, v.scale) if a is not None
        )


def _concat(a: _Vectors, b: _Vectors) -> _Vectors:
    def cat(x, y, axis=0):
        return None if x is None else np.concatenate([x, y], axis=axis)

    return _Vectors(
        np.concatenate([a.vids, b.vids]),
        cat(a.f32, b.f32),
        cat(a.bits, b.bits, 1),
        cat(a.q8, b.q8),
        cat(a.scale, b.scale),
    )


def _take(v: _Vectors, rows: np.ndarray) -> _Vectors:
    def take(x, axis=0):
        return None if x is None else np.take(x, rows, axis=axis)

    return _Vectors(v.vids[rows], take(v.f32), take(v.bits, 1), take(v.q8), take(v.scale))


def _merge(a: _Vectors, b: _Vectors) -> _Vectors:
    both = _concat(a, b)
    return _take(both, np.argsort(both.vids, kind="stable"))
