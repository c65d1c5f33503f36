"""memory_search: the real rg binary over real files in a temp vault."""

from __future__ import annotations

import os

import pytest

from marchdb import search as search_mod
from marchdb.errors import InvalidInput, MarchError
from marchdb.ops import SEARCH
from marchdb.search import MAX_LINE_CHARS, MAX_MATCHES_PER_FILE, parse_terms, search


def paths(result):
    return [r["path"] for r in result["results"]]


def test_rg_binary_is_found():
    rg = search_mod.find_rg()
    assert os.access(rg, os.X_OK)


def test_finds_english_and_chinese_with_ids_lines_and_context(vault):
    vault.memory(
        "2026/05/week2/2026-05-14-cache.md",
        "mem_cache",
        name="Context cache ordering",
        body="line one\nline two\nThe prefix cache breaks when volatile layers come first.\nline four\nline five",
    )
    vault.memory("2026/05/week2/2026-05-14-zh.md", "mem_zh", name="写作风格", body="回答要简洁。\n不要堆砌关键词。")
    res = search(vault.root, "prefix")
    assert paths(res) == ["2026/05/week2/2026-05-14-cache.md"]
    hit = res["results"][0]
    assert hit["id"] == "mem_cache" and hit["score"] == 1
    (m,) = hit["matches"]
    # frontmatter is 10 lines + blank line; body line 3 is file line 13
    assert m["line"] == 13 and "prefix cache" in m["text"]
    assert m["before"] == ["line one", "line two"] and m["after"] == ["line four", "line five"]

    res = search(vault.root, "关键词")
    assert paths(res) == ["2026/05/week2/2026-05-14-zh.md"]
    assert res["results"][0]["id"] == "mem_zh"
    assert res["results"][0]["matches"][0]["text"] == "不要堆砌关键词。"


def test_case_insensitive_and_frontmatter_is_searched(vault):
    vault.memory("a.md", "mem_a", name="Prefix Cache", body="nothing here")
    res = search(vault.root, "PREFIX cache")
    assert paths(res) == ["a.md"]
    assert res["results"][0]["score"] == 2


def test_multi_word_ranks_by_distinct_terms_then_count(vault):
    vault.memory("one.md", "mem_one", body="cache cache cache cache cache")
    vault.memory("two.md", "mem_two", body="prefix cache here")
    vault.memory("three.md", "mem_three", body="prefix cache ordering")
    vault.memory("two_b.md", "mem_two_b", body="prefix cache cache cache")
    res = search(vault.root, "prefix cache ordering")
    assert paths(res) == ["three.md", "two_b.md", "two.md", "one.md"]
    assert [r["score"] for r in res["results"]] == [3, 2, 2, 1]
    assert res["results"][0]["matched_terms"] == ["prefix", "cache", "ordering"]
    assert res["truncated"] is False
    limited = search(vault.root, "prefix cache ordering", limit=2)
    assert paths(limited) == ["three.md", "two_b.md"] and limited["truncated"] is True


def test_quoted_phrase_is_one_term(vault):
    vault.memory("adj.md", "mem_adj", body="the prefix cache matters")
    vault.memory("apart.md", "mem_apart", body="prefix here\ncache there")
    assert parse_terms('"prefix cache"  x') == ["prefix cache", "x"]
    res = search(vault.root, '"prefix cache"')
    assert paths(res) == ["adj.md"]


@pytest.mark.parametrize("query", ["a.b(c", "[x]", "*", "\\", "foo|bar", "-v", "--files", "$(echo)", "^start"])
def test_regex_metacharacters_are_literal(vault, query):
    vault.memory("meta.md", "mem_meta", body=f"holds {query} literally")
    vault.memory("plain.md", "mem_plain", body="abbc x foo bar v files echo start")
    res = search(vault.root, query)
    assert paths(res) == ["meta.md"], query


def test_files_outside_root_hidden_dirs_and_symlinks_are_ignored(tmp_path, vault):
    vault.memory("inside.md", "mem_in", body="needle inside")
    vault.memory(".obsidian/hidden.md", "mem_hidden", body="needle hidden")
    vault.memory(".dotfile.md", "mem_dot", body="needle dot")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("---\nid: mem_out\n---\nneedle outside\n", encoding="utf-8")
    (vault.root / "linkdir").symlink_to(outside, target_is_directory=True)
    (vault.root / "link.md").symlink_to(outside / "secret.md")
    (tmp_path / "sibling.md").write_text("needle sibling\n", encoding="utf-8")
    res = search(vault.root, "needle")
    assert paths(res) == ["inside.md"]


def test_gitignore_does_not_hide_memories(vault):
    vault.write(".gitignore", "*.md\n")
    vault.memory("kept.md", "mem_kept", body="findme")
    assert paths(search(vault.root, "findme")) == ["kept.md"]


def test_only_markdown_files_any_case_extension(vault):
    vault.write("notes.txt", "findme\n")
    vault.write("UPPER.MD", "findme\n")
    vault.memory("m.md", "mem_m", body="findme")
    assert sorted(paths(search(vault.root, "findme"))) == ["UPPER.MD", "m.md"]


def test_deprecated_left_out_plain_notes_kept_without_id(vault):
    vault.memory("old.md", "mem_old", body="findme", status="deprecated")
    vault.memory("new.md", "mem_new", body="findme")
    vault.write("plain.md", "# A note\n\nfindme\n")
    res = search(vault.root, "findme")
    assert sorted((r["path"], r["id"]) for r in res["results"]) == [("new.md", "mem_new"), ("plain.md", None)]


def test_mem_ids_callback_only_for_files_without_readable_id(vault):
    vault.memory("good.md", "mem_good", body="findme")
    vault.write("broken.md", "---\nid: [unclosed\n---\nfindme\n")
    asked = []

    def lookup(rels):
        asked.extend(rels)
        return {"broken.md": "mem_from_index", "good.md": "mem_wrong"}

    res = search(vault.root, "findme", mem_ids=lookup)
    assert asked == ["broken.md"]
    assert {r["path"]: r["id"] for r in res["results"]} == {"good.md": "mem_good", "broken.md": "mem_from_index"}


def test_no_match_and_bad_queries(vault):
    vault.memory("a.md", "mem_a")
    res = search(vault.root, "zzzz-not-there")
    assert res["results"] == [] and res["truncated"] is False and res["warnings"] == []
    for bad in ["", "   ", "\n\t", '""']:
        with pytest.raises(InvalidInput, match="empty"):
            search(vault.root, bad)
    with pytest.raises(InvalidInput, match="at most"):
        search(vault.root, " ".join(f"w{i}" for i in range(40)))
    with pytest.raises(InvalidInput, match="limit"):
        search(vault.root, "x", limit=0)
    with pytest.raises(InvalidInput, match="text"):
        search(vault.root, None)


def test_missing_root_is_an_error(tmp_path):
    with pytest.raises(MarchError, match="not a folder"):
        search(tmp_path / "nope", "x")


def test_huge_file_is_capped(vault):
    long_line = "x" * 5000 + " needle " + "y" * 5000
    body = "\n".join([long_line] + [f"needle {i}" for i in range(200)])
    vault.memory("big.md", "mem_big", body=body)
    res = search(vault.root, "needle")
    (hit,) = res["results"]
    assert len(hit["matches"]) == MAX_MATCHES_PER_FILE
    first = hit["matches"][0]["text"]
    assert "needle" in first and len(first) <= MAX_LINE_CHARS + 2


def test_files_too_large_for_the_index_are_not_searched(vault):
    from marchdb.vault.notes import MAX_FILE_BYTES

    vault.write("huge.md", "needle\n" + "z" * (MAX_FILE_BYTES + 10))
    vault.memory("small.md", "mem_small", body="needle")
    assert paths(search(vault.root, "needle")) == ["small.md"]


def test_partial_rg_error_keeps_results(vault):
    """rg exit 2 after a per-file error still yields output and warnings."""
    vault.memory("a.md", "mem_a", body="needle")
    run = search_mod.run_rg(
        vault.root, [*search_mod._base_args(), "--json", "--regexp=needle", "--", ".", "missing.md"], json_mode=True
    )
    assert b'"type":"match"' in run.stdout
    assert any("missing.md" in e for e in run.errors)


def test_fatal_rg_error_raises(vault):
    with pytest.raises(MarchError, match="ripgrep failed"):
        search_mod.run_rg(vault.root, ["--definitely-not-a-flag"], json_mode=True)


def test_tool_description_says_ripgrep_not_semantic():
    text = SEARCH.description.lower()
    assert "ripgrep" in text and "not semantic" in text and "memory_open" in text


def test_files_sharing_an_id_are_left_out_until_fixed(vault, store):
    vault.memory("a.md", "mem_twin", body="the kumquat harvest")
    second = vault.memory("b.md", "mem_twin", body="the kumquat harvest again")
    vault.memory("c.md", "mem_other", body="kumquat jam")
    store.sync(embed=False)
    assert [r["id"] for r in store.search("kumquat")["results"]] == ["mem_other"]
    second.unlink()
    store.sync(embed=False)
    assert {r["id"] for r in store.search("kumquat")["results"]} == {"mem_twin", "mem_other"}


def test_a_copy_made_a_moment_ago_is_left_out_as_recall_leaves_it_out(vault, store):
    # A file copied (same id) a moment after a scan: the index did not know of
    # the conflict yet, and search showed the memory twice where recall left it out.
    import shutil

    first = vault.memory("a.md", "mem_twin", body="the kumquat harvest")
    vault.memory("c.md", "mem_other", body="kumquat jam")
    store.sync(embed=False)
    shutil.copyfile(first, vault.root / "copy of a.md")
    found = store.search("kumquat")
    assert [r["id"] for r in found["results"]] == ["mem_other"]
    assert any("mem_twin" in w and "several files" in w for w in found["warnings"]), found["warnings"]


def test_search_runs_the_throttled_dirty_check(vault, store):
    # Seconds after the copy the index still did not know: search ran no dirty check at all.
    import shutil
    import time

    from marchdb.index import db

    first = vault.memory("a.md", "mem_twin", body="the kumquat harvest")
    store.sync(embed=False)
    shutil.copyfile(first, vault.root / "b.md")
    # The last scan is older than the dirty check's 5 s.
    with store.con:
        db.set_meta(store.con, "last_scan_epoch", f"{time.time() - 30:.3f}")
    store.scanned_at = time.time() - 30
    assert store.search("kumquat")["results"] == []
    assert db.file_holders(store.con, "mem_twin") == ["a.md", "b.md"]  # the index knows now


def test_a_path_too_deep_for_ripgrep_does_not_fail_a_search(vault):
    # rg could not open a file 4,500 characters deep: a query matching nothing else failed whole.
    vault.memory("a.md", "mem_a", body="hello there")
    here = os.getcwd()
    os.chdir(vault.root)
    try:
        for _ in range(300):
            os.mkdir("d" * 15)
            os.chdir("d" * 15)
    finally:
        os.chdir(here)
    assert search(vault.root, "nothingmatches")["results"] == []
    assert [r["id"] for r in search(vault.root, "hello")["results"]] == ["mem_a"]
