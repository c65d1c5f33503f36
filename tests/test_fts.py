"""CJK segmentation for FTS5: what is stored and what a query looks for must agree."""

from __future__ import annotations

from marchdb import fts


def test_cjk_runs_become_bigrams_and_latin_passes_through():
    assert fts.query_terms("记忆系统") == ["记忆", "忆系", "系统"]
    assert fts.query_terms("Café déjà vu") == ["cafe", "deja", "vu"]
    assert fts.index_text("记忆系统 and cache") == " 记忆 忆系 系统  and cache"


def test_latin_word_next_to_chinese_is_its_own_term():
    assert fts.query_terms("GPT4的价格") == ["gpt4", "的价", "价格"]
    assert fts.query_terms("用Python写脚本") == ["用", "python", "写脚", "脚本"]


def test_match_expression_quotes_and_ors_terms():
    assert fts.match_expression(['say "hi"', "cache"]) == '"say ""hi""" OR "cache"'
    assert fts.match_expression([]) == '""'


def test_every_query_term_is_a_stored_term(store):
    """The index's own fts table: every query term's stem is a stored term,
    and a MATCH on the query's word finds its inflections."""
    con = store.con
    text = "用Python写脚本，GPT4的价格（很贵）！Don’t panic: café au lait. SQLite的releases 数据库s"
    con.execute("INSERT INTO fts(rowid, meta, body) VALUES (1, ?, '')", (fts.index_text(text),))
    stored = {r[0] for r in con.execute("SELECT term FROM fts_vocab")}
    pairs = fts.stems(con, fts.query_terms(text))
    assert {stem for _, stem in pairs} <= stored
    assert ("releases", "releas") in pairs and "sqlite" in stored and "数据" in stored


def test_inflections_meet_through_the_stemmer(store):
    con = store.con
    con.execute("INSERT INTO fts(rowid, meta, body) VALUES (1, 'Friday releases', 'We released it; running late')")
    stored = {r[0] for r in con.execute("SELECT term FROM fts_vocab")}
    for query in ("release", "Releasing", "releases", "released", "runs", "fridays"):
        pairs = fts.stems(con, fts.query_terms(query))
        assert [stem for _, stem in pairs][0] in stored, query
        hits = con.execute("SELECT rowid FROM fts WHERE fts MATCH ?", (fts.match_expression([pairs[0][0]]),))
        assert [r[0] for r in hits] == [1], query


def test_schema_uses_the_tokenizer_fts_stems_with():
    from marchdb.index.db import schema_sql

    assert f"tokenize = '{fts.TOKENIZE}'" in schema_sql()


def test_cjk_share_counts_a_latin_word_like_one_character():
    assert fts.cjk_share("ok thanks") == 0.0 and fts.cjk_share("好的谢谢") == 1.0
    assert fts.cjk_share("宗座华盖（Umbraculum），意大利文称为 Ombrellino") > 0.7  # Chinese, naming things
    assert fts.cjk_share("We met at 北京 last year") < 0.5  # English, naming a place
    assert fts.cjk_share("42 !!!") == 0.0


def test_english_function_words_are_not_terms():
    """In a vault of Chinese notes "the" is rare: "the the the" matched
    "Nate the Great" before."""
    assert fts.query_terms("the the the") == [] and fts.query_terms("is it on?") == []
    assert fts.query_terms("Can you help me with this release?") == ["help", "release"]


def test_the_words_that_frame_a_question_are_not_terms():
    assert fts.query_terms("What did I say my sister's dog is called?") == ["sister", "dog"]
    assert fts.query_terms("Remind me which gym I decided to switch to") == ["gym", "switch"]
    assert fts.query_terms("How often did I mention watering the fern?") == ["watering", "fern"]
    # what a message is about stays, a decision included
    assert fts.query_terms("the decision log for the gym") == ["decision", "log", "gym"]


def test_a_body_s_form_is_built_from_its_chunks_forms_when_they_tile_it():
    parts = ["a 中文", "b"]
    assert fts.index_text_of_parts("\na 中文\n \nb\n", parts, ["P", "Q"]) == "\nP\n \nQ\n"
    # apart by a non-ASCII space (which NFKC changes), or touching, or missing: the body's own form
    for text in ("a 中文\u3000b", "a 中文b", "a 中文\n\nc", "a 中文\n\nb\u3000"):
        assert fts.index_text_of_parts(text, parts, ["P", "Q"]) == fts.index_text(text)


def test_a_body_s_form_from_its_chunks_is_its_own_form():
    import random

    from marchdb.vault.chunks import body_chunks

    # CJK runs, fullwidth forms, what NFKC composes (kana and their voicing
    # marks, Hangul jamo, combining accents) and every kind of gap between paragraphs
    atoms = [
        *"中文记忆系统カ",
        "ｶﾞ",
        "\u1100\u1161",
        "e\u0301",
        "\u0301",
        "ﬁ",
        "Ａ",
        "，",
        "\u3000",
        "\xa0",
        "x",
        "word",
    ]
    gaps = ["\n\n", "\n \n", "\n\n\n", "\n\u3000\n", " ", "", "\n\t\n", "\r\n\r\n"]
    rng = random.Random(7)
    derived = 0
    for _ in range(3000):
        body = "".join(rng.choice(atoms + gaps) for _ in range(rng.randint(0, 40)))
        chunks = [text for text, _role in body_chunks(body, max_chars=rng.choice([8, 30, 800]))]
        indexed = [fts.index_text(c) for c in chunks]
        assert fts.index_text_of_parts(body, chunks, indexed) == fts.index_text(body), repr(body)
        marked = fts.index_text_of_parts(body, chunks, ["\x00" + c for c in indexed])
        derived += "\x00" in marked
    assert derived > 300  # the chunks' forms were used, not only recomputed
