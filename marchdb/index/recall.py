"""Passive recall (seed 000, "被动召回"): score memories for a message and
apply the hint rules.

Scoring lives in ``sql/recall.sql``; this module supplies its parameters
(query vector, FTS expression, the query's BM25 ceiling, the model's
calibration) and then applies the rules:

* user trigger — at most 3 hints at or above the threshold; a memory hinted
  in any of the last 10 agent runs of the same conversation is suppressed
  (rolling window; a run's conversation is given with its first recall, a
  Claude Code session for the hook; runs without one share one window);
* assistant trigger — at most 2 hints injected; up to 3 candidates shown for
  display whatever their score (no description); nothing repeats within a run;
* within a run, a memory hinted for the user message is not hinted again.

The log of hints lives in the index (``recall_log``, ``runs``), so separate
processes share it. Without a run id a recall is a dry run: no suppression,
nothing logged.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import re
import time
import weakref
from typing import TYPE_CHECKING, Any

import apsw

from marchdb import bridge, fts
from marchdb.config import DEFAULT_MIN_SCORE
from marchdb.errors import Expired
from marchdb.index import calibrate, sentinel, smalltalk, temperature
from marchdb.index.apart import keep_apart
from marchdb.index.asking import asks_back
from marchdb.index.db import get_meta, named_statements, scalar, transaction
from marchdb.index.focus import focus
from marchdb.index.results import Hint, RecallResult
from marchdb.index.runs import SUPPRESSION_RUNS, register, seen_in_run, suppressed_ids
from marchdb.index.terms import (
    BM25_K1,
    SMALL_VAULT,
    bm25_terms,
    bridge_terms,
    chunk_ceiling,
    chunk_count,
    memory_count,
)
from marchdb.index.vectors import K_COARSE, has_bits
from marchdb.index.vectors import usable as vectors_usable

if TYPE_CHECKING:
    import numpy as np  # imported where used: a hook answering without the model skips its ~130 ms import

    from marchdb.index.vecindex import VectorIndex

USER_MAX_HINTS = 3
ASSISTANT_MAX_HINTS = 2
ASSISTANT_MAX_DISPLAY = 3
#: Dense weight of the fusion (BM25 gets the rest). Seed 000 says 0.7;
#: tools/fusion_lab.py chose 0.5 on the training halves of the benchmark sets
#: (0.7 ranks worse on locomo, where words matter most). ``recallDenseWeight``
#: in config.json sets it.
W_DENSE = 0.5
#: The BM25 share is taken of at least BM25_FLOOR * (k1 + 1) * ln N: the
#: information it takes to single out one memory of N (1.0: exactly that).
#: 0.5 is a word held by sqrt(N) memories: a message of common words alone
#: ("can you help me with this" in a 10,000-memory vault mixing languages,
#: where English chat words are rare: its whole ceiling was 4.5, a chat log
#: holding it all got a hint) is no longer a strong match. Every shared set's
#: figures stay the same to three decimals from 0 to 0.75
#: (tools/fusion_lab.py); 1.0 hints fewer locomo questions.
BM25_FLOOR = 0.5
#: Bodies longer than BM25_LREF characters get their BM25 share multiplied
#: by (BM25_LREF / length) ** BM25_LPEN: a long chat log holds the words of
#: almost any question somewhere. A session of a few thousand characters is
#: an ordinary memory, and the best chunk (CBM25_W) already tells a long one
#: that answers from one that holds the words by chance, so the discount is
#: mild (tools/fusion_lab.py chose both, leaving one set out).
BM25_LREF = 5000.0
BM25_LPEN = 0.25
#: The BM25 share counts at least CBM25_W times the best body chunk's own
#: share of the message (BM25 over each chunk, ``fts_chunk``, of the
#: message's ceiling on chunk statistics). A long memory that answers a
#: question holds its words together; one that holds them by chance, spread
#: over 11,000 characters, does not (tools/fusion_lab.py, leave one set out).
CBM25_W = 1.0
#: In a chat, what the user said weighs more than what the assistant
#: answered (``chunks.body_chunks``: chunks know their role): a question about
#: a chat asks for a detail the user gave once ("what did I say my sister's
#: dog is called?"), among thousands of words of answers that hold the
#: question's subject and words by the dozen. An assistant chunk's cosine
#: counts ASSISTANT_PENALTY less, and its words ASSISTANT_WORDS of theirs.
ASSISTANT_PENALTY = 0.0
ASSISTANT_WORDS = 1.0
#: The order reads the BM25 share through 1 - exp(-share / RANK_TAU) (0:
#: calibrate.BM25_TAU, as the score does): less saturated, a memory that
#: holds more of a question's words stays ahead of one that holds a little
#: less with a slightly closer cosine. The score the threshold reads keeps
#: BM25_TAU.
RANK_TAU = 0.0
#: The body's dense signal: the best chunk's cosine weighs BODY_TOP1 among
#: the best three (the other two share the rest 0.25 : 0.10, as first
#: designed at 0.65 / 0.25 / 0.10). A chat answers a question in one turn, and
#: the turns beside it say other things: weighed at 0.65, the one chunk that
#: answers was pulled down by its neighbours. Chosen leaving one set out
#: (tools/fusion_lab.py --loso-keys top1,lift: every fold chose 0.8); at 0.9
#: and 1.0 a chit-chat message or a question no chat answers gets a hint
#: (one chunk alone is close to a short message by chance more often).
BODY_TOP1 = 0.8
#: A message asking the user's own past back ("what did I say my sister's
#: dog is called?", ``asking.asks_back``) has the score of every candidate
#: that is a chat with an assistant lifted by this much, the order
#: unchanged: the user says such a chat exists, and a paraphrase of one
#: detail among thousands of chat chunks scores little above chance. Not a
#: conversation between people (lifted, chat questions hinted locomo's
#: sessions: 98.1% -> 96.3% quiet), not below SMALL_VAULT (no look-alikes
#: to rise above there). Chosen leaving one set out (tools/fusion_lab.py
#: --loso-keys lift: every fold chose 0.075); 0.1 hinted questions of this
#: kind that no chat answers (96% quiet).
ASKS_BACK_LIFT = 0.075
#: Candidates gathered from each signal before fusion (sqlite-vec: cap k).
K_DENSE = 40
K_CHUNK = 80
K_BM25 = 40
#: Candidates gathered by the message's words put into the other language
#: (bridge): they find what the dense signal missed (crosslingual nDCG@10
#: 0.922 without them, 0.947 with 40), but each costs a cosine.
K_XBM25 = 10
SCORED_LIMIT = 60
#: A message is recalled on its first this many characters. The hint is
#: about what the message is about, which its start says; without a cap an
#: 850 KB paste took 3 minutes to embed (every window of it), holding up
#: the agent. ~2 model windows of English, ~4 of Chinese.
MAX_RECALL_CHARS = 4000
#: From this many vectors, KNN runs on sign bits and re-ranks exactly
#: (tools/bench_latency.py: exact float KNN took ~180 ms at 260k vectors).
COARSE_FROM = 60_000
#: Longest agent run id (and conversation id) accepted: it is stored with every hint of the run.
MAX_RUN_ID_CHARS = 200
#: Agreement: when the dense signal says "unrelated" (calibrated dense below
#: AGREE), a word match cannot carry the candidate alone: its fused score is
#: scaled by dense / AGREE. A rare word of a minority language ("哈哈" in an
#: English vault) or English function words in a Chinese one otherwise
#: looked like strong matches (tools/bench_small.py, mixed vaults); so did
#: "how are you today" against a chat log that says "today" (0.25 let it
#: through). Chosen by tools/fusion_lab.py on the train halves (0.25-0.35).
AGREE = 0.3
#: Ranking bonus of a memory tagged with the current project (seed 000: the
#: project is a ranking signal, never a filter). It reorders candidates but
#: never lifts one over the threshold: hints are cut on the score without it.
#: A design choice, not a tuned one: no benchmark set has projects. 0.05 lets
#: a project memory pass an unrelated one scoring up to 0.05 higher.
PROJECT_BONUS = 0.05


_STATEMENTS: dict[str, str] | None = None


def _swap(sql: str, block: str, fragment: str) -> str:
    """``sql`` with its ``-- block:begin`` … ``-- block:end`` part replaced."""
    head, rest = sql.split(f"-- {block}:begin", 1)
    _, tail = rest.split(f"-- {block}:end", 1)
    return head + fragment + "\n" + tail


def statements() -> dict[str, str]:
    """The named statements of ``sql/recall.sql``, plus the hybrid
    statement's variants: ``hybrid_coarse`` (sign-bit KNN for large indexes)
    and ``hybrid_memory`` (KNN and cosines from in-memory vectors)."""
    global _STATEMENTS
    if _STATEMENTS is None:
        found = dict(named_statements("recall.sql"))
        exact = found["hybrid"]
        found["hybrid_coarse"] = _swap(exact, "knn", found["knn_coarse"])
        found["hybrid_memory"] = _swap(_swap(exact, "knn", found["knn_memory"]), "cos", found["cos_memory"])
        _STATEMENTS = found
    return _STATEMENTS


def vector_count(con: apsw.Connection) -> int:
    """How many vectors the index holds (decides exact or coarse KNN)."""
    return scalar(con, "SELECT count(*) FROM vectors")


def text_count(con: apsw.Connection) -> int:
    """Texts a message is compared with: the active memories' metadata
    texts and body chunks (how many chances a look-alike has, see
    ``calibrate.curves``)."""
    return int(get_meta(con, "recall_texts", "0") or 0) or scalar(
        con,
        "SELECT (SELECT count(*) FROM memory_index WHERE status = 'active') + (SELECT count(*) FROM chunks c "
        "JOIN memory_index m ON m.rid = c.mem_rid WHERE m.status = 'active')",
    )


_LIMIT_PARAM = re.compile(r"\bLIMIT :(\w+)")


def inline_limits(sql: str, params: dict) -> str:
    """``sql`` with each ``LIMIT :name`` written as the number ``params[name]``.

    Why: SQLite (3.54, as apsw bundles it) re-prepares a statement whose
    LIMIT is a bound parameter every time that parameter is bound, i.e. at
    every run: perf showed ``sqlite3Reprepare`` under ``sqlite3_step`` for a
    fifth of the hybrid statement's time, and the statement runs about a
    quarter faster with the LIMITs written in. The values are our
    own integers (anything else is a ``TypeError``, never text in the SQL);
    each distinct one is its own cached statement."""
    return _write_limits(
        sql, tuple((name, operator.index(params[name])) for name in _limit_names(sql) if name in params)
    )


@functools.lru_cache(maxsize=64)
def _limit_names(sql: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_LIMIT_PARAM.findall(sql)))


@functools.lru_cache(maxsize=256)  # a few statements times a few limits
def _write_limits(sql: str, limits: tuple[tuple[str, int], ...]) -> str:
    values = dict(limits)
    return _LIMIT_PARAM.sub(lambda m: f"LIMIT {values[m.group(1)]}" if m.group(1) in values else m.group(0), sql)


def _run(con: apsw.Connection, sql: str, params: dict) -> tuple[list, list[str]]:
    cur = con.execute(inline_limits(sql, params), params)
    try:
        names = [d[0] for d in cur.getdescription()]
    except apsw.ExecutionCompleteError:
        return [], []
    return cur.fetchall(), names


class _CosineSlot:
    """What ``query_cosine(kind, vid)`` answers from on one connection: the
    query of the recall running on it."""

    query: Any = None

    def cosine(self, kind: str, vid: int) -> float | None:
        if self.query is None:
            raise apsw.SQLError("query_cosine() is recall's own function; it is only valid inside a recall")
        return self.query.cosine(kind, vid)


# One slot per connection, its function registered once: registering a
# function again expires every prepared statement of the connection, so each
# recall re-prepared its statement (~0.5 ms of a warm recall, measured).
_SLOTS: weakref.WeakKeyDictionary[apsw.Connection, _CosineSlot] = weakref.WeakKeyDictionary()


def _cosine_slot(con: apsw.Connection) -> _CosineSlot:
    slot = _SLOTS.get(con)
    if slot is None:
        slot = _SLOTS[con] = _CosineSlot()
        con.create_scalar_function("query_cosine", slot.cosine, 2)  # type: ignore[arg-type]
    return slot


#: The signals a Hint carries (the BM25-only statement has no dense ones, nor xbm25_raw).
SIGNALS = (
    "meta_cos",
    "body_cos",
    "dense_cos",
    "dense",
    "dense_alone",
    "bm25_raw",
    "cbm25_raw",
    "xbm25_raw",
    "bm25_ratio",
    "bm25",
)


def keyword_terms(text: str) -> list[str]:
    """The words of ``text`` that keywords match (``fts.query_terms``): those
    of what is embedded first (a long message's question), then the rest;
    none for a message of numbers or small talk alone."""
    focused = focus(text)
    terms = fts.query_terms(text if focused == text else focused + "\n" + text)
    if all(term.isdigit() for term in terms):
        # Numbers alone ("what's 2+2", "1, 2, 3") say nothing a memory is
        # about; a numbered note would otherwise hold all of the message.
        return []
    if smalltalk.small_talk(text, terms):
        return []  # "yes please", "谢谢": no subject for keywords to match
    return terms


def score(
    con: apsw.Connection,
    text: str,
    qvec: np.ndarray | None,
    calibration: dict,
    limit: int = SCORED_LIMIT,
    w_dense: float | None = None,
    vindex: VectorIndex | None = None,
    project_tag: str | None = None,
    words: bridge.Dictionary | None = None,
) -> list[Hint]:
    """Score candidate memories for ``text``; best first (``project_tag``:
    memories holding that tag get ``PROJECT_BONUS`` in the order, not in
    their score), with every signal. ``words``: the dictionary that puts
    the text's words into the other language, for memories in that one
    (``bridge``); without it they share none.

    With ``vindex`` (a process's in-memory copy of the vectors, see
    ``vecindex``) the nearest neighbours and cosines come from it; otherwise
    from the vec0 tables, in SQL.
    """
    terms = keyword_terms(text)
    ceiling, informative = bm25_terms(con, terms)
    w_dense = W_DENSE if w_dense is None else w_dense
    total = memory_count(con)
    # not below SMALL_VAULT (see bm25_max)
    floor = BM25_FLOOR * (BM25_K1 + 1.0) * math.log(total) if total >= SMALL_VAULT else 0.0
    chunk_floor = BM25_FLOOR * (BM25_K1 + 1.0) * math.log(max(chunk_count(con), 1)) if total >= SMALL_VAULT else 0.0
    params = {
        "few_memories": int(total < SMALL_VAULT),
        "match": fts.match_expression(informative),
        # A query of common words holds little information however much of
        # it a memory matches: the share is taken of at least what it takes
        # to single out one memory among all (ln N nats). Not below
        # SMALL_VAULT, where IDF means nothing (a word of one memory in three
        # has a ceiling near 0) and BM25 alone scores only without a model.
        "bm25_max": max(ceiling, floor),
        "bm25_tau": calibrate.BM25_TAU,
        "rank_tau": RANK_TAU or calibrate.BM25_TAU,
        "bm25_lref": BM25_LREF,
        "bm25_lpen": BM25_LPEN,
        # the best chunk's share, of the ceiling on chunk statistics
        "cbm25_max": max(chunk_ceiling(con, terms), chunk_floor),
        "cbm25_w": CBM25_W,
        "assistant_words": ASSISTANT_WORDS,
        "k_bm25": K_BM25,
        "limit": limit,
        "project_tag": project_tag,
        "project_bonus": PROJECT_BONUS,
    }
    if qvec is not None:
        import numpy as np

        center = calibration.get("probe_center")
        xceiling, xinformative = bridge_terms(con, text, words) if words is not None else (1.0, [])
        params.update(
            xmatch=fts.match_expression(xinformative),
            k_xbm25=K_XBM25,
            xbm25_max=max(xceiling, floor),
            qvec=np.ascontiguousarray(qvec, dtype=np.float32).tobytes(),
            k_dense=K_DENSE,
            k_chunk=K_CHUNK,
            # The query's background: its mean cosine to the probe passages.
            dense_bg=float(np.dot(qvec, np.asarray(center, dtype=np.float32))) if center else 0.0,
            q_cjk=fts.cjk_share(text),
            script_offset=calibration.get("script_offset", 0.0) * calibration.get("script_weight", 1.0),
            w_dense=w_dense,
            agree=AGREE,
            assistant_penalty=ASSISTANT_PENALTY,
            body_w1=BODY_TOP1,
            body_w2=(1.0 - BODY_TOP1) * 0.25 / 0.35,
            body_w3=(1.0 - BODY_TOP1) * 0.10 / 0.35,
            asks_back=ASKS_BACK_LIFT if total >= SMALL_VAULT and asks_back(text) else 0.0,
            **calibrate.curves(calibration, text_count(con)),
        )
        if vindex is not None and vindex.sync(con):
            query = vindex.query(qvec)
            params.update(
                knn_meta=json.dumps(query.knn("meta", K_DENSE)), knn_chunk=json.dumps(query.knn("chunk", K_CHUNK))
            )
            _cosine_slot(con).query = query
            sql = statements()["hybrid_memory"]
        else:
            coarse = vector_count(con) >= COARSE_FROM and has_bits(con)
            if coarse:
                params.update(center=bytes.fromhex(get_meta(con, "vector_center") or ""), k_coarse=K_COARSE)
            sql = statements()["hybrid_coarse" if coarse else "hybrid"]
    else:
        sql = statements()["bm25"]
    slot = _SLOTS.get(con)
    try:
        rows, names = _run(con, sql, params)
    finally:
        if slot is not None:
            slot.query = None  # only valid while this recall runs
    out = []
    for row in rows:
        r = dict(zip(names, row))
        signals = {k: r[k] for k in SIGNALS if r.get(k) is not None}
        if r["project_bonus"]:
            signals["project_bonus"] = r["project_bonus"]
        if r["rank_score"] != r["score"]:  # ranked apart from its score (another script, RANK_TAU: sql/recall.sql)
            signals["rank_score"] = r["rank_score"]
        if r.get("passage_seq") is not None:
            signals["passage_seq"] = r["passage_seq"]
        hint = Hint(r["id"], float(r["score"]), r["name"], r["description"], r["path"], signals)
        hint.signals["status"] = r["status"]
        out.append(hint)
    return temperature.rerank(con, out)  # recency, use, priority: reorders, never changes a score


# ---------------------------------------------------------------- hint rules


def apply_rules(
    con: apsw.Connection,
    scored: list[Hint],
    trigger: str,
    run_id: str | None,
    threshold: float,
    record_only: bool = False,
    conversation: str | None = None,
) -> tuple[list[Hint], list[Hint], list[Hint]]:
    """Split scored candidates into (hints, display, all-with-reasons) and log
    what is injected or shown. Runs inside the caller's transaction.

    ``record_only`` (seed 000: the result at the end of an agent run is only
    recorded): what would be hinted is logged as ``record`` and returned as
    the hints (the caller keeps them apart), but is not injected — so it
    suppresses nothing later. ``conversation``: what the run belongs to (a
    chat, a host's session); the 10-run window counts that conversation's
    runs only, and runs without one share a window."""
    if trigger not in ("user", "assistant"):
        raise ValueError(f"trigger must be 'user' or 'assistant', not {trigger!r}")
    if run_id is not None:
        # the conversation the run was first registered with, which may not be the one given now
        known = register(con, run_id, conversation)
        if trigger == "user":
            blocked = suppressed_ids(con, run_id, known)
            blocked_reason = f"hinted in the last {SUPPRESSION_RUNS} runs" + (
                " of this conversation" if known is not None else ""
            )
        else:
            blocked = seen_in_run(con, run_id, ("user", "assistant"))
            blocked_reason = "already hinted in this run"
        displayed = seen_in_run(con, run_id, ("user", "assistant", "display"))
    else:
        blocked, blocked_reason, displayed = set(), "", set()
    cap = USER_MAX_HINTS if trigger == "user" else ASSISTANT_MAX_HINTS
    hints: list[Hint] = []
    display: list[Hint] = []
    for cand in scored:
        status = cand.signals.get("status")
        superseded_by = cand.signals.get("superseded_by")
        if status != "active":
            cand.reason = f"status is {status}"
        elif superseded_by:
            cand.reason = f"superseded by {superseded_by}"
        elif not cand.description:
            cand.reason = "no description"
        elif cand.id in blocked:
            cand.reason = blocked_reason
        elif cand.score < threshold:
            cand.reason = f"score below threshold {threshold:.2f}"
        elif len(hints) >= cap:
            cand.reason = f"beyond the {cap} hints per {trigger} message"
        else:
            hints.append(cand)
        if (
            trigger == "assistant"
            and status == "active"
            and not superseded_by
            and cand.id not in displayed
            and cand.id not in blocked
            and len(display) < ASSISTANT_MAX_DISPLAY
        ):
            display.append(cand)
    if record_only:
        display = []
        for hint in hints:
            hint.reason = "recorded, not injected (end of the run)"
    if run_id is not None:
        rows = [(run_id, "record" if record_only else trigger, h.id, h.score) for h in hints]
        rows += [(run_id, "display", h.id, h.score) for h in display if h not in hints]
        con.executemany("INSERT INTO recall_log(run_id, trigger, mem_id, score) VALUES (?, ?, ?, ?)", rows)
    return hints, display, scored


#: Most memories a save names as ``related`` (``related``).
RELATED_MAX = 5
#: How far below the hint threshold a memory still counts as related to one
#: being saved. tools/bench_related.py (12 new facts beside 15 agent memories
#: and 20 notes; --chats: and 269 chats): the old memory a new one contradicts
#: or adds to scored 0.44-0.78 (0.31-0.70 with the chats; 0.49 for "Friday
#: releases allowed" beside "Release freeze on Fridays"), any other at most
#: 0.38 (0.26). From 0.35 a save lists 8 of 8 with 2 others (7 of 8, none);
#: at the hint threshold it would miss 2 (4). A miss costs a silent
#: contradiction, a false one a line the writer reads.
RELATED_BELOW = 0.15


def query_vector(
    con: apsw.Connection, embedder, text: str, index_path: str | None = None
) -> tuple[np.ndarray | None, str | None]:
    """The query vector of ``text`` (its part ``focus`` keeps), embedded
    alone with its name on disk beside ``index_path`` (the store's index;
    default ``con``'s file: ``sentinel.embed_alone``); or None and the line
    that says why when llama.cpp crashed on this message before."""
    query = focus(text)
    vec, refused = sentinel.embed_alone(
        index_path or con.filename, embedder, "query", query, lambda: embedder.embed_queries([query])[0]
    )
    if refused is not None:
        return None, sentinel.refusal("this message", refused)
    return vec, None


def related(
    con: apsw.Connection,
    text: str,
    embedder=None,
    *,
    threshold: float = DEFAULT_MIN_SCORE - RELATED_BELOW,
    exclude: frozenset[str] | set[str] = frozenset(),
    w_dense: float | None = None,
    vindex: VectorIndex | None = None,
    words: bridge.Dictionary | None = None,
) -> list[Hint]:
    """The active memories on the subject of ``text`` (a memory just saved,
    its name and description): those recall scores for it from
    ``threshold`` (a little below the hint threshold), with a description,
    not superseded, at most
    ``RELATED_MAX``, best first, none of ``exclude``. Scored as a recall is,
    but nothing is logged: this is the writer's look, not a hint."""
    text = text[:MAX_RECALL_CHARS]
    qvec, calib = None, calibrate.bm25_only()
    if embedder is not None and vectors_usable(con, embedder.fingerprint):
        qvec, _ = query_vector(con, embedder, text)
        calib = calibrate.ensure(con, embedder) if qvec is not None else calib
    found = []
    for cand in score(con, text, qvec, calib, w_dense=w_dense, vindex=vindex, words=words):
        if (
            cand.id in exclude
            or cand.signals.get("status") != "active"
            or cand.signals.get("superseded_by")
            or not cand.description
            or cand.score < threshold
        ):
            continue
        found.append(cand)
        if len(found) >= RELATED_MAX:
            break
    return found


def mark_contradictions(con: apsw.Connection, hints: list[Hint]) -> None:
    """Name, in each hint's ``signals["contradicts"]``, the memories it is in
    an undecided contradiction with (``conflicts_with``; the view
    ``diag_contradictions``), so the answer says so wherever it is shown
    (``hints.contradiction_lines``)."""
    if not hints:
        return
    disputed: dict[str, list[str]] = {}
    for mem_id, other in con.execute(
        "SELECT id, other_id FROM diag_contradictions WHERE id IN (SELECT value FROM json_each(?)) ORDER BY other_id",
        (json.dumps([h.id for h in hints]),),
    ):
        disputed.setdefault(mem_id, []).append(other)
    for hint in hints:
        if hint.id in disputed:
            hint.signals["contradicts"] = disputed[hint.id]


#: Candidates whose passage ``--explain`` looks up (it shows 25).
EXPLAIN_PASSAGES = 25
#: Characters of the best-matching passage ``--explain`` shows.
PASSAGE_CHARS = 160


def attach_passages(con: apsw.Connection, cands: list[Hint]) -> None:
    """Put, in each candidate's ``signals["passage"]``, the body chunk whose
    cosine decided its body signal (``passage_seq``): its role in a chat and
    its first ``PASSAGE_CHARS`` characters on one line, so ``--explain``
    shows where a long memory matched (a turn of a chat, the hint naming the
    whole chat)."""
    for cand in cands:
        seq = cand.signals.get("passage_seq")
        if seq is None:
            continue
        row = con.execute(
            "SELECT c.role, c.text FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.id = ? AND c.seq = ?",
            (cand.id, seq),
        ).fetchone()
        if row is not None:
            text = " ".join(row[1].split())
            cand.signals["passage"] = {
                "seq": seq,
                "role": row[0],
                "text": text[:PASSAGE_CHARS] + ("…" if len(text) > PASSAGE_CHARS else ""),
            }


def recall(
    con: apsw.Connection,
    text: str,
    embedder=None,
    trigger: str = "user",
    run_id: str | None = None,
    threshold: float = DEFAULT_MIN_SCORE,
    explain: bool = False,
    w_dense: float | None = None,
    vindex: VectorIndex | None = None,
    record_only: bool = False,
    project_tag: str | None = None,
    conversation: str | None = None,
    deadline: float | None = None,
    words: bridge.Dictionary | None = None,
    apart: tuple[str, bool, str] | None = None,
) -> RecallResult:
    """Score ``text`` (its first ``MAX_RECALL_CHARS`` characters) and apply
    the hint rules. ``embedder`` None → BM25 only; ``vindex``: in-memory
    vectors to search instead of the vec0 tables; ``record_only``: log what
    passes as recorded, inject nothing (``RecallResult.recorded``);
    ``project_tag``: the current project's tag, a ranking bonus (``score``);
    ``conversation``: see ``apply_rules``; ``words``: see ``score``; ``deadline`` (a ``time.time()``):
    past it, a recall with a run id records nothing and raises ``Expired`` —
    its caller stopped waiting and answered on its own, so these hints were
    never shown and must not suppress anything. ``apart``: ``(tag, untagged,
    prefix)`` of a project kept apart (``apart.keep_apart``: the others are
    left out before the hint rules, and shown by ``explain``)."""
    text = text[:MAX_RECALL_CHARS]
    mode, warning, qvec, calib = "bm25", None, None, calibrate.bm25_only()
    if embedder is not None:
        if vectors_usable(con, embedder.fingerprint):
            calib = calibrate.ensure(con, embedder)
            qvec, warning = query_vector(con, embedder, text)
            if qvec is not None:
                mode = "hybrid"
            else:
                calib = calibrate.bm25_only()
        else:
            warning = "the index has no vectors for this model yet; run `marchdb sync` (BM25 only for now)"
    scored = score(con, text, qvec, calib, w_dense=w_dense, vindex=vindex, project_tag=project_tag, words=words)
    left_out: list[Hint] = []
    if apart is not None:
        scored, left_out = keep_apart(con, scored, *apart)
    with transaction(con):
        hints, display, everything = apply_rules(con, scored, trigger, run_id, threshold, record_only, conversation)
        if deadline is not None and run_id is not None and time.time() > deadline:
            raise Expired("the caller stopped waiting for this recall; nothing was recorded")  # rolls back
    mark_contradictions(con, hints)
    if explain:
        attach_passages(con, everything[:EXPLAIN_PASSAGES])
    return RecallResult(
        trigger=trigger,
        run_id=run_id,
        threshold=threshold,
        hints=[] if record_only else hints,
        recorded=hints if record_only else [],
        display=display if trigger == "assistant" else [],
        candidates=everything + left_out if explain else [],
        mode=mode,
        warning=warning,
        explained=explain,
    )
