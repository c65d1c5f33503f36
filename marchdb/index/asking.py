"""Whether a message asks the user's own past back.

"What did I say my sister's dog is called?", "remind me which gym I switched
to", "how much did I pay for that lens?": the user asks for something they
told an agent before, in other words than they used then. Such a question
shares few words with the chat that answers it, and its closest passage
scores little above the best of thousands of look-alikes, so it scored
below the hint threshold three times in four on paraphrased questions
about long chats, though the right chat ranked first twice in three.
Asked this way, the user says a memory exists: recall lifts the message's
scores by ``recall.ASKS_BACK_LIFT`` (``sql/recall.sql``), which moves no
candidate in the order.

A plain rule, English only: a short question in the first person with a
word of the past or of recalling ("did", "was", "told", "remind", "last",
"ago"...). A long message (a pasted file that says "I was") is not such a
question; Chinese messages are not read for it yet.
"""

from __future__ import annotations

import re

#: Longest message read as a question about the past: a real one is a
#: sentence or two (the longest of the benchmark sets' is 151 characters).
MAX_CHARS = 300
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i've|i'd|i'm)\b", re.IGNORECASE)
_PAST = re.compile(
    r"\b(?:did|was|were|had|said|told|mentioned|remind|decided|settled|picked|chose|last|recently|ago|again)\b",
    re.IGNORECASE,
)
_QUESTION = re.compile(r"\?\s*$|^\s*(?:remind|what|which|when|where|who|whom|whose|how|did|was|were)\b", re.IGNORECASE)


def asks_back(text: str) -> bool:
    """Whether ``text`` is a short question in the first person about what was said or done before."""
    if len(text) > MAX_CHARS:
        return False
    text = text.replace("\u2019", "'")
    return bool(_QUESTION.search(text) and _FIRST_PERSON.search(text) and _PAST.search(text))
