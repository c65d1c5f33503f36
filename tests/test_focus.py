"""What of a long message recall embeds (marchdb/index/focus.py)."""

from __future__ import annotations

from pathlib import Path

from marchdb.index.focus import BUDGET, focus, size


def test_a_short_message_is_embedded_whole():
    assert focus("  can we ship this on friday?  ") == "can we ship this on friday?"


def test_a_pasted_file_leaves_its_question_start_and_end():
    paste = Path(__file__).read_text(encoding="utf-8") * 3
    message = f"I get this when I sync:\n\n{paste}\n\nWhy does the sync fail with this error?"
    kept = focus(message)
    assert size(kept) <= BUDGET
    assert kept.startswith("I get this when I sync:")
    assert kept.endswith("Why does the sync fail with this error?")


def test_a_question_at_the_end_of_one_long_line_is_kept_and_cjk_counts_more():
    message = "我的同步报错了：" + "错误" * 1000 + "这是为什么？"
    kept = focus(message)
    assert size(kept) <= BUDGET and kept.endswith("这是为什么？") and kept.startswith("我的同步报错了")
    assert size("错误") == 6 and size("ab") == 2


def test_text_without_sentences_is_cut_to_the_budget():
    kept = focus("x" * 10_000)
    assert 0 < size(kept) <= BUDGET
