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
    """Chats with an assistant about a boiler, notes about one, and garden notes."""
    for i in range(n):
        if i % 4 == 0:
            turns = [
                ("user", f"The boiler of flat {i} was serviced."),
                ("assistant", "Good: a yearly service keeps it safe."),
                ("user", "It makes a noise at night."),
                ("assistant", "Bleed the radiators first."),
            ]
            body = "\n\n".join(f"**{who}**: {what}" for who, what in turns)
            name, description = f"Boiler chat {i}", f"the boiler in flat {i}"
        elif i % 4 == 1:
            body, name, description = f"The boiler of flat {i} was replaced.", f"Boiler note {i}", f"flat {i}"
        else:
            body, name, description = f"Water bed {i} on Sundays.", f"Garden note {i}", f"the garden, bed {i}"
        vault.memory(f"m{i}.md", f"mem_{i}", name=name, description=description, body=body)


@pytest.mark.parametrize("path", ["vec0", "memory"])
@pytest.mark.parametrize("size", [terms_mod.SMALL_VAULT + 10, terms_mod.SMALL_VAULT - 10])
def test_asking_back_lifts_the_scores_of_chats_with_an_assistant_alike_and_moves_nothing(vault, store, size, path):
    from conftest import TinyEmbedder

    from marchdb.index.vecindex import VectorIndex

    _vault_of(vault, size)
    store.sync(embed=False)
    emb = TinyEmbedder("tiny-8", dim=8)
    vectors.embed_pending(store.con, emb, store.cfg.index_path)
    calib = calibrate.ensure(store.con, emb)
    qvec = emb.embed_queries(["the boiler"])[0]
    # the same words once stopwords and the words that frame a question are
    # left out ("about", "boiler"), the same vector: only the asking differs
    vindex = VectorIndex() if path == "memory" else None
    asking = recall_mod.score(store.con, "What did I say about the boiler?", qvec, calib, vindex=vindex)
    plain = recall_mod.score(store.con, "What about the boiler?", qvec, calib, vindex=vindex)
    assert [h.id for h in asking] == [h.id for h in plain]
    chats = {f"mem_{i}" for i in range(0, size, 4)}
    assert chats & {h.id for h in plain} and {h.id for h in plain} - chats
    for a, p in zip(asking, plain):
        lift = recall_mod.ASKS_BACK_LIFT if size >= terms_mod.SMALL_VAULT and a.id in chats else 0.0
        assert a.score == pytest.approx(min(1.0, p.score + lift), abs=1e-9), a.id
    assert recall_mod.ASKS_BACK_LIFT > 0
