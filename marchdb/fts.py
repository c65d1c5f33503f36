"""Text prepared for FTS5, so BM25 can find Chinese (and other CJK) words.

FTS5's ``unicode61`` tokenizer treats a run of Han characters as one token,
so "记忆系统" could only be found by that exact run. We rewrite CJK runs as
overlapping bigrams ("记忆 忆系 系统") before text reaches FTS5 and do the
same to queries; Latin text passes through unchanged. The index stays
queryable from the stock sqlite3 shell: no custom tokenizer is involved.

English words are stemmed by FTS5's built-in ``porter`` tokenizer (wrapping
``unicode61``: ``TOKENIZE``), so "release" meets "releases" and "released".
FTS5 stems a MATCH query itself; the term statistics recall reads
(``fts_vocab``) hold the stems, so ``stems`` asks the same tokenizer for them.
"""

from __future__ import annotations

import operator
import re
import unicodedata

import apsw

# Han (incl. extension A and compatibility), kana, Hangul syllables.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
#: One CJK character (kana, Han, Hangul), as ``cjk_share`` counts them.
CJK_CHAR = re.compile(f"[{_CJK}]")
# A Latin word stops where a CJK run starts ("GPT4的价格" is "gpt4" + bigrams),
# as it does in index_text, which sets CJK runs apart with spaces.
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)?", re.UNICODE)

#: Queries longer than this many terms are cut (assistant outputs can be long).
MAX_QUERY_TERMS = 64
#: English function words: never a query term. Word statistics usually give
#: them no weight (half the memories hold them), but not where English is
#: the minority: in a vault of Chinese notes "the" is rare, and "the the the"
#: matched "Nate the Great" (tools/bench_small.py, mixed vaults of 1,000).
STOPWORDS = frozenset(
    """a an and are as at be but by can could did do does for from had has have how i if in into is it its
    me my no not of on or our so than that the their them then there these they this those to us was we
    were what when where which who whom why will with would you your yours""".split()
)
#: Words that frame a question or a recollection rather than say what it is
#: about ("what did I *say* my sister's dog is *called*?", "remind me what I
#: *decided*", "how *often*"), and the pieces FTS5 makes of contractions
#: ("what's", "I'd", "I'll": s, d, ll). A chat vault holds them everywhere,
#: so they match every session a little and, counted in the message's
#: ceiling, make the words it is about a smaller share of it. Never a query
#: term; the index keeps them (a memory may be about a decision).
QUESTION_WORDS = frozenset(
    """s d m t ll ve re say said says saying tell told telling mention mentioned mentioning remind reminded
    remember remembered recall recalled ask asked talk talked discuss discussed know knew think thought
    decide decided settle settled going gonna want wanted kind sort much many often ago recently lately
    earlier ever last again also just actually still anything something thing things stuff get got
    getting called""".split()
)
#: The FTS5 tokenizer of the ``fts`` table (sql/001_schema.sql says the same;
#: a test holds them equal): porter stemming over unicode61, diacritics folded.
TOKENIZE = "porter unicode61 remove_diacritics 2"


_LATIN_WORD = re.compile(rf"[^\W\d_{_CJK}]+", re.UNICODE)


def cjk_chars(text: str) -> list[str]:
    """The CJK characters of ``text`` (each one a word or most of one)."""
    return CJK_CHAR.findall(text)


def cjk_share(text: str) -> float:
    """How much of a text is CJK: its CJK characters against those plus its
    other words (a Latin word counts once, like one character: a Chinese
    paragraph naming "Umbraculum" stays Chinese). 0 for English, 1 for
    Chinese. Embedding models score a message against a text in another
    script lower than against one in its own (``calibrate``)."""
    if text.isascii():
        return 0.0
    cjk = sum(map(len, _CJK_RUN.findall(text)))
    if not cjk:
        return 0.0
    return round(cjk / (cjk + len(_LATIN_WORD.findall(text))), 3)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


# NFKC maps the fullwidth forms (，：（） in Chinese text) to ASCII one to one;
# doing that first lets most text skip the (slow) full normalisation.
_FULLWIDTH = re.compile("[\uff01-\uff5e\u3000]")


def _halfwidth(m: re.Match) -> str:
    c = ord(m.group())
    return " " if c == 0x3000 else chr(c - 0xFEE0)


def _bigram_run(m: re.Match) -> str:
    run = m.group()
    if len(run) == 1:
        return f" {run} "
    return " " + " ".join(map(operator.add, run[:-1], run[1:])) + " "


def index_text(text: str) -> str:
    """Text as stored in the FTS5 table: CJK runs become space-separated bigrams."""
    if text.isascii():
        return text  # NFKC-stable, no CJK
    text = _FULLWIDTH.sub(_halfwidth, text)
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return _CJK_RUN.sub(_bigram_run, text)


_ASCII_SPACE = frozenset(" \t\n\r\x0b\x0c")


def index_text_of_parts(text: str, parts: list[str], indexed: list[str]) -> str:
    """``index_text(text)``, from ``indexed``, the ``index_text`` of each of
    ``parts``, when ``text`` is those parts in order apart only by ASCII
    whitespace (a body and its chunks): no CJK run, and no Unicode
    normalisation, reaches across such a gap, so the text's form is the
    parts' forms with the gaps between them. Otherwise computed."""
    if text.isascii():
        return text
    pieces = []
    pos = 0
    for part, done in zip(parts, indexed, strict=True):
        at = text.find(part, pos) if part else -1
        gap = text[pos:at]
        if at < 0 or (pos and not gap) or not _ASCII_SPACE.issuperset(gap):
            return index_text(text)
        pieces += [gap, done]
        pos = at + len(part)
    tail = text[pos:]
    if not parts or not _ASCII_SPACE.issuperset(tail):
        return index_text(text)
    pieces.append(tail)
    return "".join(pieces)


def _fold(text: str) -> str:
    # unicode61 with remove_diacritics folds "café" to "cafe"; do the same so
    # that term statistics (fts_vocab) are looked up under the stored form.
    decomposed = unicodedata.normalize("NFKD", text)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query, lowercased, CJK as bigrams, in order;
    English function words (``STOPWORDS``) and the words that frame a
    question (``QUESTION_WORDS``) left out."""
    text = _fold(unicodedata.normalize("NFKC", text).lower())
    terms: list[str] = []
    seen: set[str] = set()
    for match in _TOKEN.finditer(text):
        token = match.group()
        parts = _bigrams(token) if _CJK_RUN.fullmatch(token) else [token.replace("’", "'")]
        for part in parts:
            # unicode61 splits on the apostrophe too; keep FTS5's view of it.
            for piece in part.split("'"):
                if piece and piece not in seen and piece not in STOPWORDS and piece not in QUESTION_WORDS:
                    seen.add(piece)
                    terms.append(piece)
    return terms[:MAX_QUERY_TERMS]


def match_expression(terms: list[str]) -> str:
    """An FTS5 MATCH expression for ``terms`` (see ``query_terms``): every term
    quoted and OR-ed; ``'""'`` (matches nothing) when there are none.

    OR rather than AND: a memory should rank when it shares the rare words of
    a question, not only when it holds all of them (AND-ed BM25 returned
    nothing for most conversational questions in our benchmarks).
    """
    if not terms:
        return '""'
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _stem_pairs(con: apsw.Connection, terms: list[str]):
    # FTS5's own tokenizer (TOKENIZE), one for all the terms
    name, *args = TOKENIZE.split()
    tokenizer = con.fts5_tokenizer(name, args)
    for term in terms:
        for token in tokenizer(term.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False):
            stem = token if isinstance(token, str) else str(token[0])
            if stem:
                yield term, stem


def stems(con: apsw.Connection, terms: list[str]) -> list[tuple[str, str]]:
    """``(term, stem)`` for each query term (see ``query_terms``), one per
    stem in first-seen order: the stem is what the ``fts`` table stores for
    the term (FTS5's own tokenizer, ``TOKENIZE``), the term is what a MATCH
    expression should say (FTS5 stems it again; a stem is not always its
    own stem: porter turns "releas" into "relea"). Terms the tokenizer
    drops are left out."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for term, stem in _stem_pairs(con, terms):
        if stem not in seen:
            seen.add(stem)
            out.append((term, stem))
    return out


def stem_map(con: apsw.Connection, terms: list[str]) -> dict[str, str]:
    """Each of ``terms``' first stem as the ``fts`` table stores it (see
    ``stems``), by term. Terms the tokenizer drops are left out."""
    out: dict[str, str] = {}
    for term, stem in _stem_pairs(con, terms):
        out.setdefault(term, stem)
    return out
