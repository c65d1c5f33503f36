"""Profiles and the injected context block (seed 000)."""

from __future__ import annotations

import pytest

from marchdb.errors import InvalidInput, MarchError
from marchdb.hints import short as shorten
from marchdb.profiles import AGENT_PROFILE, USER_PROFILE, format_context, format_hint_lines, read_profiles


def test_read_profiles_creates_missing_files_and_reads_edits(cfg):
    profiles = read_profiles(cfg)
    assert profiles == {"agent_profile": AGENT_PROFILE.strip(), "user_profile": USER_PROFILE.strip()}
    (cfg.profiles_dir / "user.md").write_text("\ufeffPrefers 简洁 answers.\n\n", encoding="utf-8")
    (cfg.profiles_dir / "agent.md").unlink()
    profiles = read_profiles(cfg)
    assert profiles["user_profile"] == "Prefers 简洁 answers."
    assert profiles["agent_profile"] == AGENT_PROFILE.strip()  # recreated, the user's file untouched
    assert (cfg.profiles_dir / "user.md").read_text(encoding="utf-8").startswith("\ufeffPrefers")


def test_read_profiles_refuses_non_utf8(cfg):
    read_profiles(cfg)
    (cfg.profiles_dir / "agent.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(MarchError, match="UTF-8"):
        read_profiles(cfg)


def test_hint_lines_format():
    hints = [
        {
            "id": "mem_01hx_context_cache",
            "score": 0.6249,
            "name": "Context cache ordering",
            "description": "高频变化层不能放在大块稳定上下文前面",
        },
        {"id": "mem_long", "score": 0.5, "name": "Long\none", "description": "word " * 40},
    ]
    lines = format_hint_lines(hints).split("\n")
    assert (
        lines[0]
        == "- mem_01hx_context_cache | score=0.62 | Context cache ordering | 高频变化层不能放在大块稳定上下文前面"
    )
    assert lines[1].startswith("- mem_long | score=0.50 | Long one | word word")
    desc = lines[1].split(" | ")[3]
    assert desc.endswith("…") and len(desc) <= 80
    assert format_hint_lines([]) == ""
    with pytest.raises(InvalidInput, match="needs id"):
        format_hint_lines([{"id": "x"}])
    with pytest.raises(InvalidInput, match="not a number"):
        format_hint_lines([{"id": "x", "score": "high", "name": "n", "description": "d"}])


def test_shorten_keeps_short_text():
    assert shorten("  a   b ") == "a b"
    assert len(shorten("x" * 200)) == 80


def test_format_context_blocks_in_order():
    profiles = {"agent_profile": "I am March.", "user_profile": "The user likes brevity."}
    assert format_context(profiles, None) == "[agent_profile]\nI am March.\n\n[user_profile]\nThe user likes brevity.\n"
    hints = [{"id": "mem_a", "score": 0.57, "name": "A", "description": "about a"}]
    text = format_context(profiles, format_hint_lines(hints))
    assert text == (
        "[agent_profile]\nI am March.\n\n[user_profile]\nThe user likes brevity.\n\n"
        "[recall]\n- mem_a | score=0.57 | A | about a\n"
    )
    assert format_context(profiles, hints) == text
    assert "[recall]" not in format_context(profiles, "")
    with pytest.raises(InvalidInput, match="user_profile"):
        format_context({"agent_profile": "x"}, None)


def test_hint_objects_are_accepted():
    from dataclasses import dataclass

    @dataclass
    class Hint:
        id: str
        score: float
        name: str
        description: str

    assert format_hint_lines([Hint("mem_a", 0.666, "A", "about a")]) == "- mem_a | score=0.67 | A | about a"
    assert format_hint_lines([{"id": "mem_b", "score": 0.5, "name": "B"}]) == "- mem_b | score=0.50 | B"
