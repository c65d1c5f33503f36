"""The engine in SQL: ``march_*`` functions on an index connection.

Everything recall computes can be asked for in SQL (README, "SQL functions"):

* ``march_embed(text [, 'query' | 'passage'])`` — the float32 blob the index
  stores, so ``vec_distance_cosine(embedding, march_embed('...'))`` works;
* ``march_recall(text [, trigger [, run_id]])`` — a table-valued function with
  the columns of ``recall --explain``; ``march_recall_json`` is the same rows
  as a JSON array, for hosts without virtual tables (Datasette);
* ``march_similar(id [, k])`` / ``march_similar_json`` — the active memories
  nearest to a memory by their stored metadata vectors;
* ``march_fts(text)`` / ``march_match(text)`` — the text as FTS5 indexes it and
  the MATCH expression recall would use, to redo the BM25 side by hand.

``Engine`` computes; ``register`` puts the functions on an apsw connection
(the Store does it on every connection it opens); the Datasette plugin
(``browse_plugin``) registers the scalar ones on its own connections and calls
the same ``Engine`` methods on a read-only apsw connection.

Failures are ``MarchError``s raised inside the function: SQLite reports them
as the statement's error, with our message (no model, unknown id, ...).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import apsw

from marchdb import bridge, fts, ops
from marchdb.config import Config
from marchdb.embedding import Embedder
from marchdb.errors import InvalidInput, ModelError, NotFound
from marchdb.index import calibrate, db, sentinel, terms, vectors
from marchdb.index import recall as recall_mod
from marchdb.vault.notes import MAX_FILE_BYTES
from marchdb.vault.tags import project_tag

if TYPE_CHECKING:
    import numpy as np  # imported where used: a command that never embeds skips its ~130 ms import

#: Columns of ``march_recall`` (and keys of ``march_recall_json``'s objects),
#: in the order ``recall --explain`` shows candidates. ``hint`` is 1 for a
#: candidate that would be hinted, ``reason`` says why the others were cut.
RECALL_COLUMNS = (
    "rank",
    "id",
    "name",
    "score",
    "hint",
    "reason",
    "mode",
    *recall_mod.SIGNALS,  # every signal a Hint carries, as recall reports them
    "rank_score",
    "temperature",
    "temp_adj",
    "recency",
    "use",
    "priority",
    "project_bonus",
    "status",
    "superseded_by",
    "description",
    "path",
)
#: RECALL_COLUMNS taken from a candidate's signals as they are.
_SIGNAL_COLUMNS = RECALL_COLUMNS[RECALL_COLUMNS.index("meta_cos") : RECALL_COLUMNS.index("status")]
SIMILAR_COLUMNS = ("rank", "id", "name", "cos", "dense", "description", "path")
#: ``march_similar``'s k: default and bound (sqlite-vec KNN needs a cap).
SIMILAR_K = 10
SIMILAR_MAX_K = 100
#: Text longer than this is read on its start only, as recall does.
MAX_TEXT_CHARS = recall_mod.MAX_RECALL_CHARS
#: march_fts takes what a memory file may hold (a body is indexed whole).
MAX_FTS_CHARS = MAX_FILE_BYTES


def _text_arg(text: object, name: str) -> str | None:
    """A text argument: None for SQL NULL or blank text (the function then
    answers NULL / no rows, as SQL functions do), an error for a non-text."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidInput(f"{name}: the text must be a string, not {type(text).__name__}")
    return text[:MAX_TEXT_CHARS] if text.strip() else None


def is_read_only(con: apsw.Connection) -> bool:
    """Whether ``con`` refuses writes (opened read-only, or ``query_only`` on,
    as ``marchdb sql`` without ``--write`` sets it)."""
    return con.readonly("main") or bool(con.pragma("query_only"))


class Engine:
    """What the ``march_*`` functions compute, for one index and one model.

    ``embedder`` returns the loaded model or None (then ``model_error`` says
    why); it is called only when a function needs a vector, so registering
    the functions never loads a model; ``words`` likewise returns the
    dictionary recall matches words across languages with (``bridge``), or
    None. Calls are serialised: the model and a
    shared connection are not safe to use from two threads at once (Datasette
    runs queries on a pool of threads).
    """

    def __init__(
        self,
        cfg: Config,
        embedder: Callable[[], Embedder | None],
        model_error: Callable[[], str | None] = lambda: None,
        words: Callable[[], bridge.Dictionary | None] = lambda: None,
    ):
        self.cfg = cfg
        self._embedder = embedder
        self._model_error = model_error
        self._words = words
        self._lock = threading.RLock()
        self._writer: apsw.Connection | None = None
        self._calibrations: dict[str, dict] = {}  # measured here when the index holds none

    def close(self) -> None:
        """Close the connection used to log recalls with a run id, if one was opened."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # ------------------------------------------------------------ functions

    def embed(self, text: object, kind: object = "query") -> bytes | None:
        """``march_embed``: the float32 vector blob of ``text``, as the index
        stores it (``'passage'``) or as recall embeds a message (``'query'``).
        The text is named beside the store's index (whatever connection asks:
        your own may be in memory) while the model embeds it, as a recall's
        message is: a text llama.cpp crashed on is refused after. A NULL kind
        is the default, as a null argument is for every operation."""
        if kind is None:
            kind = "query"
        if kind not in ("query", "passage"):
            raise InvalidInput(f"march_embed: kind must be 'query' or 'passage', not {kind!r}")
        value = _text_arg(text, "march_embed")
        if value is None:
            return None
        which: Literal["query", "passage"] = "query" if kind == "query" else "passage"
        with self._lock:
            emb = self._need_model("march_embed")
            vec, refused = sentinel.embed_alone(
                str(self.cfg.index_path), emb, which, value, lambda: emb.embed([value], which)[0]
            )
        if refused is not None:
            raise ModelError("march_embed: " + sentinel.refusal("this text", refused, "no vector for it"))
        import numpy as np

        return np.ascontiguousarray(vec, dtype=np.float32).tobytes()

    @staticmethod
    def fts_text(text: object) -> str | None:
        """``march_fts``: ``text`` as the FTS5 tables index it (CJK runs as bigrams)."""
        if text is None:
            return None
        if not isinstance(text, str):
            raise InvalidInput("march_fts: the text must be a string")
        return fts.index_text(text[:MAX_FTS_CHARS])

    def match(self, con: apsw.Connection, text: object) -> str | None:
        """``march_match``: the FTS5 MATCH expression recall uses for ``text``
        on this index (only informative terms; ``'""'`` matches nothing)."""
        value = _text_arg(text, "march_match")
        if value is None:
            return None
        with self._lock:
            _ceiling, informative = terms.bm25_terms(con, recall_mod.keyword_terms(value))
        return fts.match_expression(informative)

    def recall(
        self,
        con: apsw.Connection,
        text: object,
        trigger: object = "user",
        run_id: object = None,
        project: object = None,
        conversation: object = None,
    ) -> list[dict[str, Any]]:
        """``march_recall``: every scored candidate for ``text`` with its
        signals, as ``recall --explain`` shows them, best first.

        Without ``run_id`` nothing is recorded and nothing is suppressed (a
        pure query). With one the hint rules apply as in ``marchdb recall
        --run``: memories hinted in recent runs are cut, and the hints are
        logged — so a read-only connection refuses it. ``conversation``: as
        ``marchdb recall --conversation`` (the run's 10-run window).
        """
        # The arguments memory_recall declares are checked by its own table, so
        # SQL refuses what the CLI, the API and the MCP server refuse, in the same words.
        declared = {p.name: p for p in ops.get("memory_recall").params}
        given = {"trigger": trigger, "run_id": run_id, "conversation": conversation, "project": project}
        checked = {name: declared[name].check(value, "march_recall") for name, value in given.items()}
        value = _text_arg(text, "march_recall")
        if value is None:
            return []
        project_name = checked["project"]
        tag = project_tag(self.cfg.project_tag_prefix, project_name if isinstance(project_name, str) else None)
        if run_id is not None and is_read_only(con):
            raise InvalidInput(
                "march_recall with a run id records its hints in the recall log, and this connection is "
                "read-only; use `marchdb sql --write`, or `marchdb recall --run RUN`"
            )
        with self._lock:
            mode, qvec, calib = self._query_vector(con, value)
            words = self._words() if qvec is not None else None
            scored = recall_mod.score(
                con, value, qvec, calib, w_dense=self.cfg.dense_weight, project_tag=tag, words=words
            )
            threshold = self.cfg.min_score
            if run_id is None:
                recall_mod.apply_rules(con, scored, str(trigger), None, threshold)
            else:
                self._apply_logged(con, scored, str(trigger), str(run_id), threshold, conversation)
        rows = []
        for rank, cand in enumerate(scored, 1):
            sig = cand.signals
            row = {
                "rank": rank,
                "id": cand.id,
                "name": cand.name,
                "score": cand.score,
                "hint": int(cand.reason is None),
                "reason": cand.reason,
                "mode": mode,
            }
            for key in _SIGNAL_COLUMNS:
                row[key] = sig.get(key)
            row["rank_score"] = cand.rank_score  # never NULL, so ORDER BY rank_score works
            row.update(
                status=sig.get("status"),
                superseded_by=sig.get("superseded_by"),
                description=cand.description,
                path=cand.path,
            )
            rows.append(row)
        return rows

    def similar(self, con: apsw.Connection, mem_id: object, k: object = SIMILAR_K) -> list[dict[str, Any]]:
        """``march_similar``: the active memories whose metadata vectors (name,
        description, tags) are nearest to ``mem_id``'s, nearest first, with the
        raw cosine and the model's calibrated ``dense`` value (recall's curve)."""
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= SIMILAR_MAX_K:
            raise InvalidInput(f"march_similar: k must be a whole number from 1 to {SIMILAR_MAX_K}, not {k!r}")
        if mem_id is None or (isinstance(mem_id, str) and not mem_id.strip()):
            return []
        if not isinstance(mem_id, str):
            raise InvalidInput("march_similar: give a memory id (text), e.g. mem_01hx_context_cache")
        mem_id = mem_id.strip()
        with self._lock:
            row = con.execute(
                "SELECT v.vid FROM memory_index m LEFT JOIN vectors v ON v.kind = 'meta' AND v.hash = m.meta_hash "
                "WHERE m.id = ?",
                (mem_id,),
            ).fetchone()
            if row is None:
                raise NotFound(f"march_similar: no memory has id {mem_id} in the index", mem_id)
            if row[0] is None or not db.has_vector_tables(con):
                raise ModelError(
                    f"march_similar: memory {mem_id} has no vector yet; run `marchdb sync` with an embedding model"
                )
            vector = con.execute("SELECT embedding FROM vec_meta WHERE rowid = ?", (row[0],)).fetchone()
            if vector is None:
                raise ModelError(f"march_similar: the vector of {mem_id} is missing; run `marchdb sync`")
            blob = vector[0]
            # Several memories may share a metadata vector, and the memory
            # itself comes back first: ask for a few more than k.
            found = con.execute(  # the LIMIT written in: see recall.inline_limits
                "WITH knn AS MATERIALIZED (SELECT rowid AS vid, distance FROM vec_meta "
                "  WHERE embedding MATCH :vec AND k = :k) "
                "SELECT m.id, m.name, 1.0 - knn.distance AS cos, m.description, m.path, m.cjk "
                "FROM knn JOIN vectors v ON v.vid = knn.vid JOIN memory_index m ON m.meta_hash = v.hash "
                f"WHERE m.id != :id AND m.status = 'active' ORDER BY knn.distance, m.id LIMIT {int(k)}",
                {"vec": blob, "k": min(int(k) + 8, 4096), "id": mem_id},
            ).fetchall()
            calib = calibrate.load(con, db.get_meta(con, "model_fingerprint"))
            own = con.execute("SELECT cjk FROM memory_index WHERE id = ?", (mem_id,)).fetchone()
            own_cjk = float(own[0]) if own is not None else 0.0
            curve = calibrate.curves(calib, recall_mod.text_count(con)) if calib is not None else None
        import numpy as np

        background = 0.0
        if calib is not None and calib.get("probe_center"):
            # As recall reads a message: the cosine relative to the memory's
            # own background (its cosine to the probe centre).
            center = np.asarray(calib["probe_center"], dtype=np.float32)
            background = float(np.dot(np.frombuffer(blob, dtype=np.float32), center))
        rows = []
        for rank, (other, name, cos, description, path, cjk) in enumerate(found, 1):
            dense = None
            if calib is not None and curve is not None:
                # a cross-script pair gets the measured offset back, as in recall
                across = (own_cjk >= 0.5) != (float(cjk or 0.0) >= 0.5)
                rel = cos + calib.get("script_offset", 0.0) * calib.get("script_weight", 1.0) * across - background
                dense = 1.0 / (1.0 + np.exp(-(rel - curve["dense_mid"]) / curve["dense_scale"]))
            rows.append(
                {
                    "rank": rank,
                    "id": other,
                    "name": name,
                    "cos": cos,
                    "dense": None if dense is None else float(dense),
                    "description": description,
                    "path": path,
                }
            )
        return rows

    # ------------------------------------------------------------ helpers

    def _need_model(self, fn: str) -> Embedder:
        emb = self._embedder()
        if emb is None:
            why = self._model_error()
            # The loader's message already says what to set; said once.
            raise ModelError(
                f"{fn}: no embedding model could be loaded: {why}"
                if why
                else f"{fn}: no embedding model is configured; set embeddingModel / MARCH_EMBED_MODEL / --model, "
                "or run `marchdb model build`"
            )
        return emb

    def _query_vector(self, con: apsw.Connection, text: str) -> tuple[str, np.ndarray | None, dict]:
        """('hybrid', vector, calibration) when the model's vectors are in the
        index, else ('bm25', None, ...) — the degraded mode recall announces;
        here every row's ``mode`` says it."""
        emb = self._embedder()
        if emb is None or not vectors.usable(con, emb.fingerprint):
            return "bm25", None, calibrate.bm25_only()
        # Read, never stored here: a function inside a read statement must not
        # write (sync stores the calibration when it embeds).
        calib = calibrate.load(con, emb.fingerprint) or self._calibrations.get(emb.fingerprint)
        if calib is None:
            calib = self._calibrations[emb.fingerprint] = calibrate.measure(emb)
        # A message llama.cpp crashed on: keywords. Named beside the store's index, whatever asks.
        qvec, _ = recall_mod.query_vector(con, emb, text, str(self.cfg.index_path))
        return ("hybrid", qvec, calib) if qvec is not None else ("bm25", None, calibrate.bm25_only())

    def _apply_logged(
        self, con: apsw.Connection, scored, trigger: str, run_id: str, threshold: float, conversation=None
    ) -> None:
        """Apply the hint rules with a run id and log the hints.

        The statement calling us holds a read snapshot of ``con``. If its
        connection is already in a write transaction (``BEGIN`` in ``marchdb
        sql --write``), the log rows join that transaction; otherwise they are
        written by a connection of our own in a transaction of its own, which
        also reads the latest log, so two processes recalling for one run
        still de-duplicate.
        """
        if con.txn_state("main") == apsw.SQLITE_TXN_WRITE:
            recall_mod.apply_rules(con, scored, trigger, run_id, threshold, conversation=conversation)
            return
        if self._writer is None:
            self._writer = db.connect(con.filename)
        with db.transaction(self._writer):
            recall_mod.apply_rules(self._writer, scored, trigger, run_id, threshold, conversation=conversation)


def _by_index(fn: Callable, columns: tuple[str, ...]) -> Callable:
    """Mark ``fn`` for ``apsw.ext.make_virtual_module`` (rows as tuples)."""
    from apsw import ext

    fn.columns = columns  # type: ignore[attr-defined]
    fn.column_access = ext.VTColumnAccess.By_Index  # type: ignore[attr-defined]
    return fn


#: The default of a table function's first argument: not given at all (an
#: explicit NULL is None, and gives no rows, as SQL functions answer NULL).
_MISSING: Any = object()
_NO_ARGUMENT = (
    "{name} was called without {what} (SQLite ran it before the table it joins?): give one, and "
    "in a join write the table first with CROSS JOIN, e.g. SELECT m.id, s.id FROM memory_index m CROSS JOIN "
    "{name}(m.id) s"
)


def _json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, ensure_ascii=False)


def hint_for(message: str) -> str:
    """What to add to an SQL error that calls a table-valued ``march_*``
    function as a scalar one (``SELECT march_recall('...')``): ``""`` for any other error."""
    for name in ("march_recall", "march_similar"):
        if message.endswith(f"no such function: {name}"):
            return f"; {name} is a table: SELECT * FROM {name}(...) (or {name}_json(...) for one JSON value)"
    return ""


#: What each variadic function takes, said when it is given an argument too
#: many (here and in the Datasette plugin: an extra argument is an error, never dropped).
TAKES = {
    "march_embed": "a text and optionally 'query' or 'passage'",
    "march_recall_json": "a text, optionally a trigger, a run id, a project and a conversation",
    "march_similar_json": "a memory id and optionally k",
}


def no_extra(name: str, extra: tuple) -> None:
    """Refuse arguments past what ``name`` takes (``TAKES``)."""
    if extra:
        raise InvalidInput(f"{name} takes {TAKES[name]}")


def register(con: apsw.Connection, engine: Engine, tables: bool = True) -> None:
    """Register every ``march_*`` function of ``engine`` on ``con``.

    The table-valued ones (``march_recall``, ``march_similar``) are eponymous
    virtual tables: ``SELECT * FROM march_recall('...')``; ``tables=False``
    leaves them out (a hook answering without the engine runs no SQL of the
    user's, and they cost it ``apsw.ext``'s import). Nothing is loaded until
    a function is called.
    """

    def march_embed(text=None, kind="query", *extra):
        no_extra("march_embed", extra)
        return engine.embed(text, kind)

    def march_recall_json(text=None, trigger="user", run_id=None, project=None, conversation=None, *extra):
        no_extra("march_recall_json", extra)
        return _json(engine.recall(con, text, trigger, run_id, project, conversation))

    def march_similar_json(mem_id=None, k=SIMILAR_K, *extra):
        no_extra("march_similar_json", extra)
        return _json(engine.similar(con, mem_id, k))

    # Deterministic for one connection's model: SQLite may then compute
    # march_embed('constant') once per statement instead of once per row.
    con.create_scalar_function("march_embed", march_embed, -1, deterministic=True)

    def march_match(text):
        return engine.match(con, text)

    # (casts: apsw's stubs want a callable taking *args; these take one argument.)
    con.create_scalar_function("march_fts", cast(Any, engine.fts_text), 1, deterministic=True)
    con.create_scalar_function("march_match", cast(Any, march_match), 1)
    con.create_scalar_function("march_recall_json", march_recall_json, -1)
    con.create_scalar_function("march_similar_json", march_similar_json, -1)

    # SQLite may plan a join with the function first and call it with no
    # argument (`FROM memory_index m, march_similar(m.id)`): that gave no
    # rows, silently. A first argument not given at all is an error saying
    # how to write the join so that it is there.
    def march_recall(text=_MISSING, trigger="user", run_id=None, project=None, conversation=None):
        if text is _MISSING:
            raise InvalidInput(_NO_ARGUMENT.format(name="march_recall", what="a message text"))
        for row in engine.recall(con, text, trigger, run_id, project, conversation):
            yield tuple(row[c] for c in RECALL_COLUMNS)

    def march_similar(memory=_MISSING, k=SIMILAR_K):
        if memory is _MISSING:
            raise InvalidInput(_NO_ARGUMENT.format(name="march_similar", what="a memory id"))
        for row in engine.similar(con, memory, k):
            yield tuple(row[c] for c in SIMILAR_COLUMNS)

    if not tables:
        return
    from apsw import ext

    ext.make_virtual_module(con, "march_recall", cast(Any, _by_index(march_recall, RECALL_COLUMNS)))
    ext.make_virtual_module(con, "march_similar", cast(Any, _by_index(march_similar, SIMILAR_COLUMNS)))
