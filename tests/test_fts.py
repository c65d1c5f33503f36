"""CJK segmentation for FTS5: what is stored and what a query looks for must agree."""

from __future__ import annotations

import apsw

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


def test_every_query_term_is_a_stored_term():
    con = apsw.Connection(":memory:")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'unicode61 remove_diacritics 2')")
    con.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
    text = "用Python写脚本，GPT4的价格（很贵）！Don’t panic: café au lait."
    con.execute("INSERT INTO t(x) VALUES (?)", (fts.index_text(text),))
    stored = {r[0] for r in con.execute("SELECT term FROM v")}
    assert set(fts.query_terms(text)) <= stored
