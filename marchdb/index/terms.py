"""A message's words as BM25 weighs them: the IDFs, the ceiling a message
could score, the rarest terms within a postings budget, and the words put
into the other language (``bridge``).

Shares of this ceiling are what ``sql/recall.sql`` reads as the BM25 signal
("the share of the message's information matched"), so that a keyword-only
match can pass the threshold and a common word alone cannot.
"""

from __future__ import annotations

import json
import math
from typing import Any

import apsw

from marchdb import bridge, fts
from marchdb.index.db import get_meta, named_statements, scalar


def _idf(total: int, n: int) -> float:
    # FTS5's own IDF of a term held by n of total documents
    return math.log((total - n + 0.5) / (n + 0.5))


def _rarest_within(terms: list[str], df: dict[str, int], budget: int, at_least_one: bool) -> list[str]:
    # the rarest of ``terms`` whose matches add up to at most ``budget``, in
    # their own order; with ``at_least_one`` the rarest one whatever it holds
    kept: set[str] = set()
    postings = 0
    for term in sorted(terms, key=lambda t: df[t]):
        if postings + df[term] > budget and (kept or not at_least_one):
            break
        kept.add(term)
        postings += df[term]
    return [t for t in terms if t in kept]


def bm25_terms(con: apsw.Connection, terms: list[str]) -> tuple[float, list[str]]:
    """The query's BM25 ceiling and the terms worth matching.

    ``terms`` are a query's terms (``fts.query_terms``); their statistics
    are read under their stems (``fts.stems``: "releases" counts as
    "releas", as the index stores it), and the terms returned are the
    query's own words, one per stem (FTS5 stems a MATCH itself).

    The ceiling is the score a memory would get if it matched every query
    term perfectly: sum of IDF * (k1 + 1), with FTS5's own IDF formula. A term
    no memory holds gets the largest IDF — so nonsense words keep the ratio
    low. Terms held by half the memories or more get FTS5's floor IDF
    (1e-6): they cannot change a score, so they are left out of the MATCH,
    which keeps "the", "why", "的" from dragging every memory into it. In a
    vault of fewer than SMALL_VAULT memories only distinctive terms (held by
    at most one memory in eight) are matched. In very large vaults the commonest
    remaining terms may be left out too (``POSTINGS_BUDGET``).
    """
    if not terms:
        return 1.0, []
    pairs = fts.stems(con, terms)
    if not pairs:
        return 1.0, []
    total = memory_count(con)
    df = document_frequencies(con, [stem for _, stem in pairs])
    ceiling = 0.0
    informative = []
    for term, stem in pairs:
        n = df.get(stem, 0)
        idf = _idf(total, n) if total else 0.0
        # Below SMALL_VAULT memories IDF cannot tell "the" from "carprofen";
        # only a word held by very few memories (one in eight, at least one)
        # says something about them (tools/bench_small.py: chit-chat such as
        # "ok thanks" got hints from 38% of 12-memory chat vaults otherwise).
        if total < SMALL_VAULT:
            if 0 < n <= max(1, total // 8):
                informative.append((term, stem))
        elif n > 0 and idf > 1e-6:
            informative.append((term, stem))
        ceiling += max(idf, 1e-6) * (BM25_K1 + 1.0)
    if total >= LARGE_VAULT and sum(df[s] for _, s in informative) > POSTINGS_BUDGET:
        kept = set(_rarest_within([s for _, s in informative], df, POSTINGS_BUDGET, at_least_one=True))
        informative = [p for p in informative if p[1] in kept]
    return max(ceiling, 1e-6), [term for term, _ in informative]


def bridge_terms(con: apsw.Connection, text: str, words: bridge.Dictionary) -> tuple[float, list[str]]:
    """The BM25 ceiling and the terms worth matching of ``text`` put into the
    other language (``words.translate``), as ``bm25_terms`` gives them for
    its own words.

    The ceiling is what a memory holding every content word of the message
    would score. A word has several translations, of which a memory holds
    one at best: each word counts once, at its best-informed translation
    the vault holds (sum of IDF * (k1 + 1) over its FTS terms). A word with
    no translation the vault holds (a name, a word the dictionary lacks)
    counts as a word no memory holds does among the message's own words, at
    the largest IDF: a message of which two words in three translate cannot
    be matched whole by those two ("How long has Melanie been creating
    art?" is not answered by a paragraph on creating art; counted at the
    mean of the others instead, it was: tools/bench_recall.py crosslingual,
    README). The terms are every translation's informative terms
    (``bm25_terms``).
    """
    pairs = words.translate(text)
    terms: list[str] = []
    per_source: list[list[list[str]]] = []
    for _, translations in pairs:
        options = [fts.query_terms(translation) for translation in translations]
        per_source.append(options)
        terms.extend(t for option in options for t in option if t not in terms)
    terms = terms[: fts.MAX_QUERY_TERMS]
    _, informative = bm25_terms(con, terms)
    if not informative:
        return 1.0, []
    stem_of = fts.stem_map(con, terms)
    total = memory_count(con)
    df = document_frequencies(con, list(stem_of.values()))
    # FTS5 scores every memory a MATCH finds: the rarest translations up to
    # BRIDGE_POSTINGS matches; the commoner ones, weak evidence across
    # languages, still count in the ceiling.
    held_by = {t: df.get(stem_of.get(t, ""), 0) for t in informative}
    informative = _rarest_within(informative, held_by, BRIDGE_POSTINGS, at_least_one=False)
    values = []
    for options in per_source:
        held = [[df.get(stem_of.get(t, ""), 0) for t in option] for option in options]
        best = max(
            (sum(_idf(total, n) for n in ns if n) for ns in held if any(ns)),
            default=None,
        )
        values.append(best)
    # a word no memory can be shown to hold weighs what such a word weighs
    # in bm25_terms: FTS5's IDF of a word held by none
    unheld = _idf(total, 0)
    ceiling = sum(unheld if v is None else max(v, 1e-6) for v in values)
    return max(ceiling * (BM25_K1 + 1.0), 1e-6), informative


def chunk_ceiling(con: apsw.Connection, terms: list[str]) -> float:
    """What a body chunk matching every one of the query's ``terms``
    perfectly would score in ``fts_chunk``: ``bm25_terms``' ceiling on chunk
    statistics (the IDF of a term among the active memories' chunks)."""
    stems = [stem for _, stem in fts.stems(con, terms)] if terms else []
    total = chunk_count(con)
    if not stems or not total:
        return 1.0
    df = document_frequencies(con, stems, "chunk_idf")
    return max(sum(max(_idf(total, df[s]), 1e-6) for s in stems) * (BM25_K1 + 1.0), 1e-6)


_DF_CACHE_TERMS = 100_000


def document_frequencies(con: apsw.Connection, terms: list[str], statement: str = "idf") -> dict[str, int]:
    """How many memories hold each term (absent: none), cached per process;
    with ``statement="chunk_idf"``, how many body chunks."""
    gen = (get_meta(con, "index_id"), get_meta(con, "fts_gen"))
    key = (con.filename, statement)
    cached_gen, cache = _DF_CACHE.get(key, (None, {}))
    if cached_gen != gen or len(cache) > _DF_CACHE_TERMS:
        cache = {}
        _DF_CACHE[key] = (gen, cache)
    missing = [t for t in terms if t not in cache]
    if missing:
        found: dict[Any, Any] = {
            term: doc
            for term, doc in con.execute(
                named_statements("recall.sql")[statement], {"terms": json.dumps(missing, ensure_ascii=False)}
            )
        }
        cache.update({t: found.get(t, 0) for t in missing})
    return {t: cache[t] for t in terms}


#: FTS5's BM25 k1 (its default): a term's score tends to IDF * (k1 + 1).
BM25_K1 = 1.2


#: Below this many memories word statistics mean nothing: only distinctive
#: terms are matched (bm25_terms), and BM25 does not enter the score
#: (sql/recall.sql, :few_memories).
SMALL_VAULT = 50


#: FTS5 scores every memory a MATCH finds (~0.85 µs each here): 69,000 matches
#: of three common Chinese bigrams cost ~60 ms at 100,000 memories. From
#: LARGE_VAULT memories on, MATCH keeps the query's rarest terms up to
#: POSTINGS_BUDGET matches in all (always at least the rarest term); the terms
#: left out are the commonest, with the least weight, and still count in the
#: BM25 ceiling. Below LARGE_VAULT (every benchmark set) nothing changes.
LARGE_VAULT = 20_000


POSTINGS_BUDGET = 20_000


#: The most memories the translated words of a message may match (bridge_terms):
#: FTS5 scores every memory a MATCH finds, and two common Chinese words can
#: stand in most memories of a vault: unbounded, scoring them would be a
#: large share of a recall.
BRIDGE_POSTINGS = 1_000


def chunk_count(con: apsw.Connection) -> int:
    """Body chunks of the active memories: the N of ``fts_chunk``'s IDF."""
    return int(get_meta(con, "fts_chunks", "0") or 0) or scalar(
        con, "SELECT count(*) FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.status = 'active'"
    )


def memory_count(con: apsw.Connection) -> int:
    """Active memories in the index: the N of BM25's IDF (only they are in
    the ``fts`` table, so only they shape its statistics)."""
    return int(get_meta(con, "fts_docs", "0") or 0) or scalar(
        con, "SELECT count(*) FROM memory_index WHERE status = 'active'"
    )


#: Document frequencies by index file, valid while meta.fts_gen is unchanged:
#: fts5vocab counts a term's documents by walking its whole posting list
#: (~0.25 ms per common term at 10,000 memories, ~2 ms at 100,000).
_DF_CACHE: dict[tuple[str, str], tuple[tuple, dict[str, int]]] = {}
