"""Passive recall: calibrated scores, BM25 ceiling, and seed 000's hint rules."""

from __future__ import annotations

import math

import pytest

from marchdb.config import load_config
from marchdb.errors import InvalidInput
from marchdb.index import calibrate
from marchdb.index import recall as recall_mod
from marchdb.index import terms as terms_mod
from marchdb.index.results import Hint
from marchdb.store import Store


@pytest.fixture
def bm25_store(tmp_path, vault):
    """A store whose model cannot load: recall runs on BM25 alone (announced)."""
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "missing.gguf"), env={})
    s = Store(cfg)
    yield s
    s.close()


def topic_vault(vault, n=6, others=terms_mod.SMALL_VAULT):
    """``n`` memories on one topic among ``others`` unrelated ones (enough for
    word statistics to count: small vaults only match distinctive words)."""
    for i in range(n):
        vault.memory(
            f"t{i}.md",
            f"mem_t{i}",
            name=f"Zebra migration note {i}",
            description=f"zebra migration across the serengeti, part {i}",
            tags=["zebra"],
            body=f"Zebras migrate. Note {i}.",
        )
    for i in range(others):
        vault.memory(
            f"g{i}.md",
            f"mem_g{i}",
            name=f"Garden note {i}",
            description=f"tomatoes and basil, bed {i}",
            tags=["garden"],
            body=f"Water the tomatoes in bed {i}.",
        )


def test_bm25_ceiling_is_fts5s_own_bound(vault, store):
    vault.memory("a.md", "mem_a", name="apple", body="apple")
    vault.memory("b.md", "mem_b", name="banana", body="banana")
    vault.memory("c.md", "mem_c", name="cherry", body="cherry")
    store.sync(embed=False)
    idf_apple = math.log((3 - 1 + 0.5) / (1 + 0.5))
    idf_absent = math.log((3 + 0.5) / 0.5)
    ceiling = terms_mod.bm25_terms(store.con, ["apple", "zzz"])[0]
    assert ceiling == pytest.approx((idf_apple + idf_absent) * 2.2)


def test_keyword_match_reaches_threshold_and_nonsense_does_not(vault, bm25_store):
    vault.memory(
        "a.md",
        "mem_ctx",
        name="Context cache ordering",
        description="prefix cache invalidation",
        tags=["cache"],
        body="Volatile layers go after stable ones.",
    )
    for i in range(8):
        vault.memory(
            f"o{i}.md",
            f"mem_o{i}",
            name=f"Other topic {i}",
            description=f"gardening note {i}",
            tags=["garden"],
            body=f"Tomatoes need sun. {i}",
        )
    bm25_store.sync()
    exact = bm25_store.recall("Context cache ordering")
    assert exact.mode == "bm25" and exact.warning  # degraded mode is announced
    assert [h.id for h in exact.hints] == ["mem_ctx"]
    assert exact.hints[0].score >= 0.5
    assert bm25_store.recall("xyzzy plugh frobnicate").hints == []
    # A common word alone is not a match.
    assert bm25_store.recall("the note about other things and stuff").hints == []


def test_user_trigger_caps_and_rolling_suppression(vault, bm25_store):
    topic_vault(vault)
    bm25_store.sync()
    query = "zebra migration serengeti"
    first = bm25_store.recall(query, run_id="run-1")
    assert len(first.hints) == 3
    first_ids = {h.id for h in first.hints}
    second = bm25_store.recall(query, run_id="run-2")
    assert len(second.hints) == 3 and not first_ids & {h.id for h in second.hints}
    # Everything was hinted in the last runs now: nothing left.
    assert bm25_store.recall(query, run_id="run-3").hints == []
    # After 10 more runs the first ones may come back.
    for i in range(4, 14):
        bm25_store.recall("unrelated words entirely", run_id=f"run-{i}")
    again = bm25_store.recall(query, run_id="run-14")
    assert {h.id for h in again.hints} == first_ids
    # A dry run (no run id) is neither suppressed nor logged.
    assert len(bm25_store.recall(query).hints) == 3


def test_suppression_counts_the_runs_of_one_conversation(vault, bm25_store):
    # A hint shown in one conversation is not in another's context: the window is per conversation.
    topic_vault(vault, n=12)
    bm25_store.sync()
    query = "zebra migration serengeti"

    def run(run_id: str, conversation: str | None, text: str = query) -> tuple[set[str], set[str]]:
        """(hinted, held back by the window) for one run."""
        result = bm25_store.recall(text, run_id=run_id, conversation=conversation, explain=True)
        held = {c.id for c in result.candidates if c.reason and c.reason.startswith("hinted in the last 10 runs")}
        return {h.id for h in result.hints}, held

    first, _ = run("a1", "chat-a")
    assert len(first) == 3
    assert run("b1", "chat-b")[1] == set()  # (its hints may differ: temperature saw the first ones)
    second, held = run("a2", "chat-a")
    assert held == first and len(second) == 3
    # Runs of other conversations, and runs without one, do not age chat-a's window.
    for i in range(2, 12):
        run(f"b{i}", "chat-b", "unrelated words entirely")
        run(f"loose{i}", None, "unrelated words entirely")
    third, held = run("a3", "chat-a")
    assert held == first | second and len(third) == 3
    # Its own runs do: a run is held back by the 10 runs before it (a12: a2..a11), not by older ones.
    for i in range(4, 12):
        run(f"a{i}", "chat-a", "unrelated words entirely")
    twelfth, held = run("a12", "chat-a")
    assert held == second | third
    assert run("a13", "chat-a")[1] == third | twelfth
    explained = bm25_store.recall(query, run_id="a14", conversation="chat-a", explain=True)
    assert any(c.reason == "hinted in the last 10 runs of this conversation" for c in explained.candidates)
    # A run keeps the conversation it started with; runs without one share one window.
    assert bm25_store.con.execute("SELECT conversation FROM runs WHERE run_id = 'a1'").fetchone() == ("chat-a",)
    loose, _ = run("loose-x", None)
    assert len(loose) == 3
    assert run("loose-y", None)[1] == loose


def test_assistant_trigger_caps_display_and_run_dedup(vault, bm25_store):
    topic_vault(vault)
    bm25_store.sync()
    query = "zebra migration serengeti"
    user = bm25_store.recall(query, run_id="r", trigger="user")
    assert len(user.hints) == 3
    out = bm25_store.recall(query, run_id="r", trigger="assistant")
    assert len(out.hints) == 2
    assert not {h.id for h in user.hints} & {h.id for h in out.hints}  # not hinted twice in a run
    assert 0 < len(out.display) <= 3
    again = bm25_store.recall(query, run_id="r", trigger="assistant")
    shown = {h.id for h in out.hints} | {h.id for h in out.display}
    assert not shown & {h.id for h in again.display}  # display de-duplicated within the run
    assert len({h.id for h in user.hints + out.hints + again.hints}) == len(user.hints + out.hints + again.hints)


def test_log_is_shared_between_processes(vault, bm25_store, tmp_path):
    topic_vault(vault)
    bm25_store.sync()
    bm25_store.recall("zebra migration", run_id="shared")
    other = Store(bm25_store.cfg)  # another connection, as another process would have
    try:
        assert len(other.recall("zebra migration", run_id="shared", trigger="assistant").hints) == 2
        assert other.recall("zebra migration", run_id="next").hints != []
        ids_next = {h.id for h in other.recall("zebra migration", run_id="next2").hints}
        assert ids_next == set()  # all six hinted across the last runs
    finally:
        other.close()


def test_explain_gives_reasons_and_status_filter(vault, bm25_store):
    vault.memory("a.md", "mem_dep", name="Zebra facts", description="zebra", status="deprecated")
    vault.memory("b.md", "mem_nodesc", name="Zebra more", description=None)
    vault.memory("c.md", "mem_ok", name="Zebra stripes", description="zebra stripes explained")
    topic_vault(vault, n=0)  # unrelated memories: "zebra" is a distinctive word
    bm25_store.sync()
    result = bm25_store.recall("zebra", explain=True)
    reasons = {c.id: c.reason for c in result.candidates}
    assert "mem_dep" not in reasons  # inactive memories are not searched at all
    assert reasons["mem_nodesc"] == "no description"
    assert [h.id for h in result.hints] == ["mem_ok"] and reasons["mem_ok"] is None


def test_hint_line_format():
    hint = Hint("mem_1", 0.6234, "Context cache", "x" * 200, "p.md")
    line = hint.line()
    assert line.startswith("- mem_1 | score=0.62 | Context cache | ")
    assert line.endswith("…") and len(line) < 140


def test_coarse_knn_agrees_with_exact(mixed_vault, model_store, monkeypatch):
    """The sign-bit KNN used on large indexes finds what the exact one finds."""
    model_store.keep_vectors = False  # the SQL path (test_vecindex covers the in-memory one)
    model_store.sync()
    queries = [
        "why does every request miss the prompt cache?",
        "数据库密码多久换一次？",
        "how should review comments look",
    ]
    exact = [[h.id for h in model_store.recall(q, explain=True).candidates[:3]] for q in queries]
    monkeypatch.setattr(recall_mod, "COARSE_FROM", 0)
    coarse = [[h.id for h in model_store.recall(q, explain=True).candidates[:3]] for q in queries]
    assert coarse == exact
    bits = model_store.con.execute("SELECT count(*) FROM vec_meta_bits").fetchone()[0]
    assert bits == model_store.con.execute("SELECT count(*) FROM vec_meta").fetchone()[0] == 5


def test_large_vault_matches_the_rarest_terms_within_the_budget(vault, store, monkeypatch):
    for i in range(60):
        words = ["common"] + (["middling"] if i % 3 == 0 else []) + (["rare"] if i == 7 else [])
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"note {i}", body=" ".join(words))
    store.sync(embed=False)
    con = store.con
    ceiling, terms = terms_mod.bm25_terms(con, ["common", "middling", "rare"])
    assert terms == ["middling", "rare"]  # "common" is in every memory: no weight
    monkeypatch.setattr(terms_mod, "LARGE_VAULT", 50)
    monkeypatch.setattr(terms_mod, "POSTINGS_BUDGET", 5)
    assert terms_mod.bm25_terms(con, ["common", "middling", "rare"]) == (ceiling, ["rare"])
    monkeypatch.setattr(terms_mod, "POSTINGS_BUDGET", 0)
    assert terms_mod.bm25_terms(con, ["middling"])[1] == ["middling"]  # never no term at all


def test_small_vault_matches_only_distinctive_terms(vault, store):
    for i in range(16):
        body = "the usual words" + (" carprofen" if i == 3 else "") + (" deploy" if i < 4 else "")
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"note {i}", body=body)
    store.sync(embed=False)
    # 16 memories: a term held by at most 2 counts; "deploy" (4) and "the" (16) do not.
    assert terms_mod.bm25_terms(store.con, ["the", "deploy", "carprofen", "absent"])[1] == ["carprofen"]


def test_record_only_injects_nothing_and_suppresses_nothing(vault, bm25_store):
    """Seed 000: the result at the end of an agent run is only recorded."""
    topic_vault(vault)
    bm25_store.sync()
    query = "zebra migration serengeti"
    end = bm25_store.recall(query, run_id="r1", trigger="assistant", record_only=True)
    assert end.hints == [] and end.display == [] and len(end.recorded) == 2
    data = end.to_dict()
    assert data["hints"] == [] and data["text"] == "" and len(data["recorded"]) == 2
    logged = bm25_store.con.execute("SELECT DISTINCT trigger FROM recall_log WHERE run_id = 'r1'").fetchall()
    assert logged == [("record",)]
    # What was only recorded is hinted at the next user message, in this run and the next.
    assert {h.id for h in end.recorded} <= {h.id for h in bm25_store.recall(query, run_id="r2").hints}
    user_end = bm25_store.recall(query, run_id="r3", record_only=True)
    assert user_end.hints == [] and len(user_end.recorded) == 3
    assert {h.id for h in bm25_store.recall(query, run_id="r4").hints} == {h.id for h in user_end.recorded}


def test_suppression_follows_only_what_was_injected(vault, bm25_store):
    topic_vault(vault)
    bm25_store.sync()
    query = "zebra migration serengeti"
    shown = bm25_store.recall(query, run_id="r1", trigger="assistant")
    injected = {h.id for h in shown.hints}
    display_only = {h.id for h in shown.display} - injected
    assert len(injected) == 2 and display_only
    later = {h.id for h in bm25_store.recall(query, run_id="r2").hints}
    assert not later & injected  # injected: suppressed for the next runs
    assert display_only & later  # displayed only: still free to be hinted


def test_project_tag_is_a_ranking_bonus_never_a_filter(vault, bm25_store):
    """Seed 000: the current project ranks its memories higher; it never
    filters, and never lifts a memory over the threshold by itself."""
    topic_vault(vault, n=0)
    for i, tags in enumerate((["zebra"], ["zebra", "project/march-cli"], ["zebra", "Project/March-CLI/recall"])):
        vault.memory(f"z{i}.md", f"mem_z{i}", name=f"Zebra stripes {i}", description="zebra stripes", tags=tags)
    vault.memory("p.md", "mem_p", name="Unrelated", description="tomatoes", tags=["project/march-cli"])
    bm25_store.sync()
    plain = bm25_store.recall("zebra stripes", explain=True)
    assert all("project_bonus" not in c.signals for c in plain.candidates)
    ranked = bm25_store.recall("zebra stripes", explain=True, project="March CLI")
    assert [h.id for h in ranked.hints][:2] in (["mem_z1", "mem_z2"], ["mem_z2", "mem_z1"])
    assert "mem_z0" in {h.id for h in ranked.hints}  # not a filter
    bonus = {c.id: c.signals.get("project_bonus") for c in ranked.candidates}
    assert bonus["mem_z1"] == bonus["mem_z2"] == recall_mod.PROJECT_BONUS and bonus["mem_z0"] is None
    assert sorted(h.score for h in ranked.hints) == sorted(h.score for h in plain.hints)  # scores unchanged
    # A project memory no query word reaches stays out, bonus or not.
    assert "mem_p" not in {h.id for h in bm25_store.recall("zebra", project="march-cli").hints}
    # A name that cannot be a tag ranks nothing, and says so (it was accepted without a word).
    odd = bm25_store.recall("zebra stripes", explain=True, project="a:b")
    assert "project 'a:b' cannot be a tag" in odd.warning
    assert all("project_bonus" not in c.signals for c in odd.candidates)


def test_project_bonus_never_lifts_a_memory_over_the_threshold(vault, bm25_store):
    # The threshold goes between the project memory's score and its score plus the
    # bonus (threshold 1.0 held even under a recall that let the bonus lift scores).
    topic_vault(vault, n=0)
    vault.memory("z.md", "mem_z", name="Zebra", description="zebra herd", tags=["project/x"])
    vault.memory("y.md", "mem_y", name="Zebra", description="zebra zebra", tags=["animals"])
    bm25_store.sync()
    first = {c.id: c for c in bm25_store.recall("zebra", explain=True, threshold=0.0, project="x").candidates}
    z, y = first["mem_z"], first["mem_y"]
    bonus = z.signals["project_bonus"]
    assert bonus > 0 and z.score < y.score < z.score + bonus, (z.score, bonus, y.score)  # the bonus decides the order
    threshold = (z.score + y.score) / 2
    below = bm25_store.recall("zebra", explain=True, threshold=threshold, project="x")
    assert [c.id for c in below.candidates][:2] == ["mem_z", "mem_y"]  # it ranks first...
    assert [h.id for h in below.hints] == ["mem_y"]  # ...and is no hint
    assert next(c for c in below.candidates if c.id == "mem_z").reason.startswith("score below")
    # The same goes for every front-end: ops.call, the CLI and the MCP tool take "project".
    from marchdb import ops

    data = ops.call(bm25_store, "memory_recall", {"text": "zebra", "project": "x", "explain": True})
    assert any(c["signals"].get("project_bonus") for c in data["candidates"])
    context = ops.call(bm25_store, "memory_context", {"text": "zebra", "project": "x"})
    assert context["hints"] and context["hints"][0]["signals"].get("project_bonus")


def test_a_memory_in_the_other_script_ranks_by_its_meaning(mixed_vault, model_store):
    # Chinese notes that share words with a Chinese question (medicine after
    # breakfast), and the English memory that answers it (the dog's): no word
    # can match across scripts, so the English one is ranked by the normal
    # dense curve, not the stricter one for memories no word supports (which
    # put the ten Chinese notes first: 0.421 against 0.369).
    for i in range(terms_mod.SMALL_VAULT):
        mixed_vault.memory(
            f"zh/{i}.md",
            f"mem_zh{i}",
            name=f"感冒药 {i}" if i < 10 else f"城市公园 {i}",
            description=f"早饭后吃感冒药，一次两片，第{i}天" if i < 10 else f"周末去第{i}个公园散步，看湖和樱花",
            tags=["生活"],
            body="早饭后吃药，多喝水。" if i < 10 else "公园里人不多。",
        )
    model_store.sync()
    question = "我的狗早饭时要吃什么药？"
    # Without the dictionary (bridge) no word is shared across scripts.
    emb = model_store.embedder()
    calib = calibrate.ensure(model_store.con, emb)
    alone = recall_mod.score(model_store.con, question, emb.embed_queries([question])[0], calib, words=None)
    first = alone[0]
    assert first.id == "mem_dog", [(c.id, round(c.score, 3), c.signals.get("rank_score")) for c in alone[:5]]
    assert "bm25" not in first.signals and first.signals["rank_score"] > first.score  # ranked apart from its score
    # With it, "早饭" is "breakfast", which the dog's memory holds: a word
    # shared through the dictionary, and a score that clears the threshold.
    res = model_store.recall(question, explain=True)
    first = res.candidates[0]
    assert first.id == "mem_dog" and first.signals.get("xbm25_raw") and "bm25_raw" not in first.signals
    assert [h.id for h in res.hints][:1] == ["mem_dog"]
    # One word of three shared through the dictionary is no match: the
    # words it cannot translate count in what a memory should hold
    # (recall.bridge_terms). "art" alone lifted this paragraph to 0.54.
    mixed_vault.memory(
        "zh/art.md",
        "mem_art",
        name="观念艺术",
        description="观念艺术是二十世纪六十年代兴起的艺术流派，强调作品背后的观念而非形式",
        tags=["艺术"],
        body="观念艺术家认为艺术的本质在于观念。代表人物有约瑟夫·科苏斯。",
    )
    model_store.sync()
    res = model_store.recall("How long has Melanie been creating art?", explain=True)
    art = next(c for c in res.candidates if c.id == "mem_art")
    assert art.signals.get("xbm25_raw") and not res.hints, [(c.id, round(c.score, 3)) for c in res.candidates[:3]]


def test_words_the_dictionary_cannot_translate_still_count_in_the_ceiling(vault, bm25_store, dictionary):
    """recall.bridge_terms: each word of the message counts once, at its best
    translation the vault holds; a word with none (a name) as a word no
    memory holds, so the translated words cannot stand for the whole message."""
    n = 60
    for i in range(n):
        description = "一幅艺术作品" if i < 2 else "创造新的方法" if i < 12 else f"园丁笔记第{i}篇"
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"笔记 {i}", description=description, tags=["生活"])
    bm25_store.sync()
    con, words = bm25_store.con, bm25_store.words()
    ceiling, terms = terms_mod.bridge_terms(con, "How long has Melanie been creating art?", words)
    assert "艺术" in terms and "创造" in terms
    idf = {
        t: math.log((n - df + 0.5) / (df + 0.5))
        for t, df in terms_mod.document_frequencies(con, ["艺术", "创造"]).items()
    }
    unheld = math.log((n + 0.5) / 0.5)  # "melanie": as a word no memory holds
    assert ceiling == pytest.approx((idf["艺术"] + idf["创造"] + unheld) * (terms_mod.BM25_K1 + 1))
    # nothing the vault holds: nothing to match
    assert terms_mod.bridge_terms(con, "Melanie Zxqv", words) == (1.0, [])
    assert terms_mod.bridge_terms(con, "艺术", words) == (1.0, [])  # the message's own language


def test_in_a_small_vault_a_word_met_through_the_dictionary_must_be_a_real_part_of_the_message(
    mixed_vault, model_store
):
    # Below SMALL_VAULT memories a shared distinctive word lets the dense
    # curve decide. Through the dictionary, one of a word's many
    # translations is often met by chance, so there it takes a word share
    # of at least AGREE on the BM25 curve (tools/bench_small.py: English
    # questions hinted Chinese paragraphs in vaults of 5 and 12 otherwise).
    model_store.sync()
    hike = "mem_hike"
    res = model_store.recall("Where should we go hiking this weekend?", explain=True)
    first = res.candidates[0]
    assert first.id == hike and first.signals["bm25"] >= recall_mod.AGREE
    assert first.score == pytest.approx(first.signals["dense"]) and res.hints[0].id == hike
    res = model_store.recall(
        "Which newspaper had the weekend crossword with the tricky clue about stocks?", explain=True
    )
    cand = next(c for c in res.candidates if c.id == hike)
    assert cand.signals.get("xbm25_raw") and cand.signals["bm25"] < recall_mod.AGREE, cand.signals
    assert cand.score == pytest.approx(cand.signals["dense_alone"]) and not res.hints


def test_a_message_of_common_words_is_no_strong_match(vault, bm25_store):
    """BM25's share is taken of at least a word held by sqrt(N) memories
    (recall.BM25_FLOOR): a message whose only word sits in a third of the
    vault matches one memory fully and still says little about it."""
    n = 64
    for i in range(n):
        common = i % 8 < 3  # 24 of 64 hold "weekly": informative (under half), yet common
        vault.memory(
            f"m{i}.md",
            f"mem_{i}",
            name=f"Note {i}" + (" weekly" if common else ""),
            description=f"something about item {i}" + (", weekly" if common else ""),
            tags=["misc"],
            body=("Weekly. " if common else "") + f"Item {i}.",
        )
    vault.memory("z.md", "mem_zebra", name="Zebra", description="zebra crossing paint", tags=["misc"], body="Zebra.")
    bm25_store.sync()
    assert bm25_store.recall("weekly").hints == []
    ceiling, terms = terms_mod.bm25_terms(bm25_store.con, ["weekly"])
    assert terms == ["weekly"]  # matched, and its whole ceiling is below the floor
    assert ceiling < recall_mod.BM25_FLOOR * (terms_mod.BM25_K1 + 1) * math.log(n + 1)
    assert [h.id for h in bm25_store.recall("zebra").hints] == ["mem_zebra"]  # one rare word still is


def test_numbers_alone_are_no_keyword_match(vault, bm25_store):
    # "what's 2+2" hinted "Garden note 2" once the "s" of "what's" stopped being a term:
    # the one rare number held all of the message.
    for i in range(60):
        vault.memory(f"f{i}.md", f"mem_f{i}", name=f"Garden note {i}", description=f"tomatoes and beans {i}")
    bm25_store.sync()
    assert bm25_store.recall("what's 2+2").hints == []
    assert bm25_store.recall("1, 2, 3?").hints == []
    assert [h.id for h in bm25_store.recall("garden note 2 tomatoes beans").hints][:1] == ["mem_f2"]


def test_small_talk_is_no_keyword_match(vault, bm25_store):
    # "how are you today" and "yes please" were hinted in a vault of notes and
    # chats: the one common word a chat holds ("How can I help you today?")
    # was all of the message.
    for i in range(60):
        vault.memory(f"f{i}.md", f"mem_f{i}", name=f"Garden note {i}", description=f"tomatoes and beans {i}")
    vault.memory("c.md", "mem_chat", name="Chat", description="how can I help you today", body="Yes please, thanks.")
    vault.memory("z.md", "mem_film", name="没问题先生", description="一部电影：没问题先生", body="没问题。")
    vault.memory("t.md", "mem_thx", name="Chat 2", description="thx", body="谢谢啦")
    vault.memory("m.md", "mem_meeting", name="开会", description="明天开会：预算", body="会议室三楼")
    bm25_store.sync()
    for message in (
        "how are you today",
        "yes please",
        "ok thanks!",
        "good morning",
        "没问题",
        "谢谢你的帮助",
        "早上好",
        "thx",
        "谢谢啦",
    ):
        assert bm25_store.recall(message).hints == [], message
    assert [h.id for h in bm25_store.recall("明天开会吗").hints][:1] == ["mem_meeting"]
    # one word that names a subject and the message is read as before
    assert [h.id for h in bm25_store.recall("yes please, the film 没问题先生").hints][:1] == ["mem_film"]
    assert [h.id for h in bm25_store.recall("how is the chat today?").hints][:1] == ["mem_chat"]


@pytest.mark.parametrize(
    ("message", "talk"),
    [
        ("how are you today", True),
        ("yes please", True),
        ("hmm, sure", True),
        ("thanks, that's all for now", True),
        ("你好", True),
        ("再说一遍好吗", True),
        ("我们今天做什么", True),
        ("謝謝你的幫助", True),
        ("我們今天做什麼", True),
        ("狗在吃什麼藥？", False),
        ("how is the deploy today?", False),
        ("tell me a joke", False),
        ("狗在吃什么药？", False),
        ("今天部署吗", False),
        ("what's 2+2", False),  # numbers are their own rule
        # a meeting (开会) is a subject, though 开 opens and 会 is "can"
        ("明天开会吗", False),
        ("今天开会说了什么", False),
        ("開會說了什麼", False),
        # sentence-final particles, as 吧 and 呀 are, and the acknowledgements of chat shorthand
        ("谢谢啦", True),
        ("辛苦啦", True),
        ("好嘞", True),
        ("好哒", True),
        ("拜拜咯", True),
        ("早", True),
        ("thx", True),
        ("ok thx", True),
        ("ty!", True),
        ("np", True),
        ("no worries", True),
        ("kk, cheers", True),
        ("thank u", True),
        ("pls", True),
        ("搞定了", True),
        ("那就这样吧", True),
        ("没毛病", True),
        ("谢", True),
        ("谢老师的电话", False),
        # a word of talk that names a subject once it is someone's
        ("What about my back?", False),
        ("how is our way of doing it", False),
        ("be back soon", True),
        ("thanks for your time", True),
        ("这样的报错怎么修", False),
        ("", False),
    ],
)
def test_small_talk_names_no_subject(message, talk):
    from marchdb import fts
    from marchdb.index.smalltalk import small_talk

    assert small_talk(message, fts.query_terms(message)) is talk


def test_a_superseded_memory_ranks_below_its_successor_and_is_no_hint(vault, bm25_store):
    topic_vault(vault, n=0)
    vault.write(
        "old.md",
        "---\nid: mem_old\nname: Deploy day tuesday zebra\ndescription: we deploy on tuesdays zebra\n"
        "tags: [team]\ncreated_at: 2025-01-01T00:00:00.000Z\n---\nDeploy zebra deploy.\n",
    )
    new = vault.write(
        "new.md",
        "---\nid: mem_new\nname: Deploy day\ndescription: we deploy on thursdays\ntags: [team]\n"
        "supersedes: [mem_old]\ncreated_at: 2026-11-01T00:00:00.000Z\n---\nThursdays.\n",
    )
    bm25_store.sync()
    plain = bm25_store.recall("deploy day zebra tuesdays", explain=True, threshold=0.0)
    order = [c.id for c in plain.candidates]
    assert order.index("mem_old") == order.index("mem_new") + 1  # right below, though it matches more words
    old = next(c for c in plain.candidates if c.id == "mem_old")
    assert old.reason == "superseded by mem_new" and old.signals["superseded_by"] == "mem_new"
    assert "mem_old" not in {h.id for h in plain.hints} and "mem_new" in {h.id for h in plain.hints}
    assert old.score > next(c for c in plain.candidates if c.id == "mem_new").score  # its score is left alone
    assert bm25_store.open("mem_old", log=False)["superseded_by"] == ["mem_new"]
    # Retired, the successor replaces nothing: the old memory is back.
    new.write_text(new.read_text().replace("tags: [team]", "tags: [team]\nstatus: deprecated"))
    bm25_store.sync()
    assert "mem_old" in {h.id for h in bm25_store.recall("deploy day zebra tuesdays", threshold=0.0).hints}
    assert bm25_store.open("mem_old", log=False)["superseded_by"] == []
    # Two memories naming each other replace neither.
    new.write_text(new.read_text().replace("status: deprecated\n", ""))
    old_path = vault.root / "old.md"
    old_path.write_text(old_path.read_text().replace("tags: [team]", "tags: [team]\nsupersedes: mem_new"))
    bm25_store.sync()
    both = bm25_store.recall("deploy day zebra tuesdays", explain=True, threshold=0.0)
    assert all("superseded_by" not in c.signals for c in both.candidates if c.id in ("mem_old", "mem_new"))


def _versions(vault, specs):
    """Memories on one subject: (id, supersedes, extra frontmatter lines)."""
    for ident, supersedes, extra in specs:
        lines = [
            "---",
            f"id: {ident}",
            f"name: Zebra feeding {ident}",
            "description: zebra feeding times" if "no-description" not in extra else "",
            "tags: [zebra]",
        ]
        lines += [f"supersedes: {supersedes}"] if supersedes else []
        lines += [line for line in extra if line != "no-description"]
        vault.write(f"{ident}.md", "\n".join(l for l in lines if l) + "\n---\nZebra feeding.\n")


def test_supersedes_chains_rings_and_replacements_that_are_no_hint(vault, bm25_store):
    topic_vault(vault, n=0)
    _versions(
        vault,
        [
            ("v1", None, []),
            ("v2", "v1", ["status: deprecated"]),  # retired, itself replaced by v3: v1 stays replaced
            ("v3", "v2", []),
            ("r1", "r3", []),  # a ring of three replaces none
            ("r2", "r1", []),
            ("r3", "r2", []),
            ("n1", None, []),
            ("n2", "n1", ["no-description"]),  # never a hint: hides nothing
        ],
    )
    bm25_store.sync()
    by = {c.id: c.signals.get("superseded_by") for c in bm25_store.recall("zebra feeding", explain=True).candidates}
    assert by["v1"] == "v3" and by["v3"] is None
    assert by["r1"] is by["r2"] is by["r3"] is None
    assert by["n1"] is None
    assert dict(bm25_store.con.execute("SELECT id, by_id FROM superseded").fetchall()) == {"v1": "v3", "v2": "v3"}
    # save refuses to close a ring, and does not take the memory it replaces for a duplicate
    with pytest.raises(InvalidInput, match="already supersedes v1"):
        bm25_store.save(id="v1", supersedes=["v3"], embed=False)
    same = bm25_store.save(
        name="Zebra feeding n1", description="d", body="b", tags=["zebra"], supersedes=["n1"], embed=False
    )
    assert same["status"] == "created"
    assert bm25_store.save(name="Zebra feeding n1", description="d", body="b", tags=["z"], embed=False)["status"] == (
        "duplicate"
    )


def test_limits_are_written_into_the_statement_as_numbers():
    # A bound LIMIT re-prepares the whole statement at every recall (see inline_limits).
    params = {"limit": 60, "k_bm25": 40, "k_xbm25": 10, "k_dense": 40, "k_chunk": 80, "k_coarse": 400}
    for name, sql in recall_mod.statements().items():
        written = recall_mod.inline_limits(sql, params)
        assert "LIMIT :" not in written, name
    assert recall_mod.inline_limits("SELECT 1 LIMIT :limit", {"limit": 7}) == "SELECT 1 LIMIT 7"
    # a name without a value stays a parameter (SQLite asks for its binding as before)
    assert recall_mod.inline_limits("SELECT 1 LIMIT :other", {"limit": 7}) == "SELECT 1 LIMIT :other"
    for bad in ("7; DROP TABLE memory_index", 7.5):
        with pytest.raises(TypeError):
            recall_mod.inline_limits("SELECT 1 LIMIT :limit", {"limit": bad})


def _traced(con, action) -> list[str]:
    seen: list[str] = []
    con.exec_trace = lambda _cur, sql, _bindings: seen.append(sql) or True
    try:
        action()
    finally:
        con.exec_trace = None
    assert seen
    assert not [sql for sql in seen if "LIMIT :" in sql or "LIMIT ?" in sql]
    return seen


def test_recall_runs_no_statement_with_a_bound_limit(vault, bm25_store):
    vault.memory("a.md", "mem_a", name="Friday releases", description="we ship releases on friday", body="Notes.")
    bm25_store.sync()
    seen = _traced(bm25_store.con, lambda: bm25_store.recall("can we ship the release on friday?", run_id="r1"))
    assert any("fts MATCH" in sql for sql in seen)


@pytest.mark.parametrize("path", ["vec0", "memory", "coarse"])
def test_hybrid_recall_runs_no_statement_with_a_bound_limit(vault, store, monkeypatch, path):
    from conftest import TinyEmbedder

    from marchdb.index import vectors
    from marchdb.index.vecindex import VectorIndex

    for i in range(3):
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"Friday release {i}", description="we ship on friday", body="B.")
    store.sync(embed=False)
    emb = TinyEmbedder("tiny-8", dim=8)  # a multiple of 8: the sign-bit tables exist
    vectors.embed_pending(store.con, emb, store.cfg.index_path)
    if path == "coarse":
        monkeypatch.setattr(recall_mod, "COARSE_FROM", 1)
    vindex = VectorIndex() if path == "memory" else None
    seen = _traced(
        store.con, lambda: recall_mod.recall(store.con, "ship on friday?", embedder=emb, run_id="r1", vindex=vindex)
    )
    marker = {"vec0": "k = :k_dense", "memory": "query_cosine(", "coarse": "vec_quantize_binary("}[path]
    assert any(marker in sql for sql in seen)
    _traced(store.con, lambda: store.con.execute("SELECT * FROM march_similar('mem_0')").fetchall())


def test_two_memories_that_contradict_each_other_are_never_hinted_side_by_side_unsaid(vault, bm25_store):
    topic_vault(vault, n=0)
    vault.write(
        "freeze.md",
        "---\nid: mem_freeze\nname: Zebra release freeze\ndescription: no zebra releases on fridays (quokka rule)\n"
        "tags: [release]\n---\nNo zebra releases on Fridays.\n",
    )
    allowed = vault.write(
        "allowed.md",
        "---\nid: mem_allowed\nname: Zebra releases allowed\ndescription: zebra releases on fridays are fine\n"
        "tags: [release]\nconflicts_with: mem_freeze\n---\nZebra releases on Fridays are fine.\n",
    )
    bm25_store.sync()
    question = "can we do zebra releases on fridays"
    both = bm25_store.recall(question)
    assert {h.id for h in both.hints} == {"mem_freeze", "mem_allowed"}
    assert all(h.signals["contradicts"] for h in both.hints)
    note = [line for line in both.text().splitlines() if line.startswith("!")]
    assert len(note) == 1 and "contradict each other" in note[0] and "not yet decided" in note[0]
    data = both.to_dict()
    assert data["text"] == both.text() and {h["id"]: h["signals"]["contradicts"] for h in data["hints"]} == {
        "mem_freeze": ["mem_allowed"],
        "mem_allowed": ["mem_freeze"],
    }
    # The context block, and the hook's [recall] block, say it too.
    assert "contradict each other" in bm25_store.context(question)["text"]
    hooked = bm25_store.hook(event="message", text=question, run_id="r1")
    assert "contradict each other" in hooked["context"]
    # One of them alone still says it is disputed.
    alone = bm25_store.recall("the quokka rule")
    assert [h.id for h in alone.hints] == ["mem_freeze"]
    assert "! mem_freeze is disputed by mem_allowed" in alone.text()
    # Decided (one supersedes the other): no mark any more.
    allowed.write_text(allowed.read_text().replace("conflicts_with:", "supersedes:"))
    bm25_store.sync()
    settled = bm25_store.recall(question)
    assert [h.id for h in settled.hints] == ["mem_allowed"] and "!" not in settled.text()
    assert "contradicts" not in settled.hints[0].signals


def test_a_long_memory_holding_the_words_together_outranks_one_holding_them_apart(vault, bm25_store):
    # Two chat logs of ~12,000 characters with the same words as often: one
    # says them in one exchange, the other far apart. The document-level BM25
    # cannot tell them apart; the best chunk's share can (fts_chunk).
    filler = [f"We talked about the weather on day {i} and what to cook for dinner." for i in range(170)]
    together = filler[:85] + ["The zebra migration crosses the Serengeti river in July."] + filler[85:]
    apart = (
        (filler[:5] + ["The zebra was asleep."] + filler[5:80] + ["A migration of birds."] + filler[80:160])
        + ["The Serengeti is far. July is hot, a river is cold, it crosses my mind."]
        + filler[160:]
    )
    vault.memory("t.md", "mem_together", name="Chat log one", description="a long chat", body="\n\n".join(together))
    vault.memory("a.md", "mem_apart", name="Chat log two", description="a long chat", body="\n\n".join(apart))
    topic_vault(vault, n=0)
    bm25_store.sync()
    found = {
        h.id: h
        for h in bm25_store.recall("zebra migration crosses the Serengeti river in July", explain=True).candidates
    }
    one, two = found["mem_together"], found["mem_apart"]
    assert one.signals["cbm25_raw"] > two.signals["cbm25_raw"]
    assert one.score > two.score + 0.1
    assert one.signals["bm25_raw"] == pytest.approx(two.signals["bm25_raw"], rel=0.1)


def test_a_memory_of_a_few_thousand_characters_keeps_its_whole_word_share(vault, bm25_store, monkeypatch):
    # A chat session of ~4,500 characters is an ordinary memory, not a log
    # that holds every word somewhere: its document share is not discounted
    # (BM25_LREF). One of ~20,000 characters is, by (LREF / length) ** LPEN.
    monkeypatch.setattr(recall_mod, "CBM25_W", 0.0)  # the document share alone
    words = "The okapi grazes by the Ituri river at dawn."
    filler = [f"We talked about the weather on day {i} and what to cook." for i in range(400)]
    bodies = {"short": words, "mid": "\n\n".join([words, *filler[:75]]), "long": "\n\n".join([words, *filler])}
    for key, body in bodies.items():
        vault.memory(f"{key}.md", f"mem_{key}", name=f"Chat {key}", description="a chat", body=body)
    topic_vault(vault, n=0)
    bm25_store.sync()
    found = {h.id: h.signals for h in bm25_store.recall("okapi Ituri river", explain=True).candidates}
    share = {k: found[f"mem_{k}"]["bm25_ratio"] / found[f"mem_{k}"]["bm25_raw"] for k in bodies}
    assert 4000 < len(bodies["mid"]) < 5000 and len(bodies["long"]) > 20_000
    assert share["mid"] == pytest.approx(share["short"], rel=1e-6)
    expected = (recall_mod.BM25_LREF / len(bodies["long"])) ** recall_mod.BM25_LPEN
    assert share["long"] == pytest.approx(share["short"] * expected, rel=0.02)


@pytest.mark.parametrize("path", ["bm25", "vec0", "memory"])
def test_the_best_chunk_is_scored_among_every_chunk_that_matches(vault, store, path):
    """cbm25 is scored for the candidates' chunks only (sql/recall.sql): each
    candidate's best chunk must be the one a scan of every match finds."""
    from conftest import TinyEmbedder

    from marchdb import fts
    from marchdb.index import vectors
    from marchdb.index.vecindex import VectorIndex

    filler = [f"Paragraph {i} on the weather and on what to cook for dinner tonight." for i in range(60)]
    for i in range(terms_mod.SMALL_VAULT + 10):
        body = list(filler)
        if i % 3 == 0:
            body[(i * 7) % 60] = f"The deploy of release {i} failed on friday; the cache was cold."
        if i % 5 == 0:
            body[(i * 11) % 60] = "Friday deploys need a warm cache and a second reviewer."
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"Chat {i}", description="a long chat", body="\n\n".join(body))
    store.sync(embed=False)
    con = store.con
    emb = TinyEmbedder("tiny-8", dim=8)
    if path != "bm25":
        vectors.embed_pending(con, emb, store.cfg.index_path)
    text = "why did the friday deploy fail with a cold cache"
    _, informative = terms_mod.bm25_terms(con, fts.query_terms(text))
    best: dict[int, float] = {}
    for crid, raw in con.execute(
        "SELECT rowid, -bm25(fts_chunk) FROM fts_chunk WHERE fts_chunk MATCH ?", (fts.match_expression(informative),)
    ):
        mem_rid = con.execute("SELECT mem_rid FROM chunks WHERE rid = ?", (crid,)).fetchone()[0]
        best[mem_rid] = max(best.get(mem_rid, -math.inf), raw)
    rid_of = dict(con.execute("SELECT id, rid FROM memory_index"))
    found = recall_mod.recall(
        con,
        text,
        embedder=None if path == "bm25" else emb,
        explain=True,
        vindex=VectorIndex() if path == "memory" else None,
    ).candidates
    assert sum("cbm25_raw" in h.signals for h in found) >= 20
    for hint in found:
        expected = best.get(rid_of[hint.id])
        assert hint.signals.get("cbm25_raw") == (None if expected is None else pytest.approx(expected, rel=1e-12))


def test_a_detail_the_user_gave_once_in_a_long_chat_is_hinted_by_its_memory_and_explained_by_its_turn(
    vault, model_store
):
    answer = "Here are some ideas for organising a closet. " + "Sort by season and use clear boxes. " * 40
    body = (
        "Chat on 2023/05/29.\n\n**user**: Can you help me organise my closet?\n\n"
        f"**assistant**: {answer}\n\n**user**: By the way, my sister's dog is called Biscuit.\n\n"
        f"**assistant**: {answer}\n\n**user**: Thanks, I'll sort the shoes first.\n\n**assistant**: {answer}"
    )
    vault.memory(
        "chat.md",
        "chat_closet",
        name="Closet help",
        description="Can you help me organise my closet?",
        tags=["chat"],
        body=body,
    )
    vault.memory(
        "deploy.md",
        "mem_deploy",
        name="Deploy day",
        description="We deploy on Tuesdays, never on Fridays",
        tags=["process"],
        body="Friday deploys broke the weekend twice.",
    )
    model_store.sync()
    roles = [
        r[0]
        for r in model_store.con.execute(
            "SELECT c.role FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.id = 'chat_closet' ORDER BY c.seq"
        )
    ]
    assert roles[:3] == ["user", "assistant", "assistant"] and roles.count("user") == 3
    res = model_store.recall("what did I say my sister's dog is called?", explain=True)
    first = res.candidates[0]
    assert first.id == "chat_closet"
    passage = first.signals["passage"]
    assert passage["role"] == "user" and "Biscuit" in passage["text"], passage
