"""A message asking the user's own past back: read from its words, and its scores lifted, its order not."""

from __future__ import annotations

import pytest

from marchdb.index import calibrate, vectors
from marchdb.index import recall as recall_mod
from marchdb.index import terms as terms_mod
from marchdb.index.asking import MAX_CHARS, asks_back


@pytest.mark.parametrize(
    "text",
    [
        "What did I say my sister's dog is called?",
        "Remind me which gym I switched to last spring.",
        "How much did I pay for that lens?",
        "which tyres was I going to buy again?",
        "What\u2019s the name of the café I told you about?",
    ],
)
def test_a_question_about_what_the_user_said_asks_back(text):
    assert asks_back(text)


@pytest.mark.parametrize(
    "text",
    [
        "How do I descale a kettle?",  # first person, nothing of the past
        "When did Caroline go to the support group?",  # the past, not the user's
        "I was thinking we could ship on Friday.",  # the user's past, no question
        "ok thanks",
        "",
        "What did I say about this file?\n\n```python\n" + "x = 1\n" * (MAX_CHARS // 6) + "```",  # a paste
    ],
)
def test_other_messages_do_not_ask_back(text):
    assert not asks_back(text)


def _vault_of(vault, n):
    for i in range(n):
        vault.memory(
            f"m{i}.md",
            f"mem_{i}",
            name=f"Home note {i}",
            description=f"the boiler in flat {i}" if i % 4 == 0 else f"the garden, bed {i}",
            body=f"The boiler of flat {i} was serviced." if i % 4 == 0 else f"Water bed {i} on Sundays.",
        )


@pytest.mark.parametrize("size", [terms_mod.SMALL_VAULT + 10, terms_mod.SMALL_VAULT - 10])
def test_asking_back_lifts_every_score_alike_and_moves_nothing_in_a_vault_past_small(vault, store, size):
    from conftest import TinyEmbedder

    _vault_of(vault, size)
    store.sync(embed=False)
    emb = TinyEmbedder("tiny-8", dim=8)
    vectors.embed_pending(store.con, emb, store.cfg.index_path)
    calib = calibrate.ensure(store.con, emb)
    qvec = emb.embed_queries(["the boiler"])[0]
    # the same words once stopwords and the words that frame a question are
    # left out ("about", "boiler"), the same vector: only the asking differs
    asking = recall_mod.score(store.con, "What did I say about the boiler?", qvec, calib)
    plain = recall_mod.score(store.con, "What about the boiler?", qvec, calib)
    assert [h.id for h in asking] == [h.id for h in plain]
    lift = recall_mod.ASKS_BACK_LIFT if size >= terms_mod.SMALL_VAULT else 0.0
    assert lift > 0 or size < terms_mod.SMALL_VAULT
    for a, p in zip(asking, plain):
        assert a.score == pytest.approx(min(1.0, p.score + lift), abs=1e-9)
