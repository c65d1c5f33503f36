"""How a memory's body is cut into the chunks the index scores and embeds.

Paragraphs are packed into chunks of at most ``CHUNK_CHARS`` characters; a
daily-log entry is a chunk of its own; in a chat, a person's turns and an
assistant's are never packed together, and each chunk knows whose it is
(``body_chunks``'s roles), so a detail the user gave once is found as the
user's. ``embedded_chunk_text`` says what text a chunk is embedded as.
Bytes of files never come here: text in, text out.
"""

from __future__ import annotations

import re
from collections import Counter

#: Body chunks are paragraph groups of at most this many characters.
CHUNK_CHARS = 800

_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|(?<=[.])\s+")
#: A daily-log entry heading (seed 003's ``### HH:MM - title``, ``capture``).
ENTRY_HEADING = re.compile(r"^### (\d{1,2}:\d\d)\b[ \t]*-?[ \t]*(.*)$", re.M)
_ENTRY_START = re.compile(r"^(?=### \d{1,2}:\d\d\b)", re.M)


def chunk_body(body: str, max_chars: int = CHUNK_CHARS) -> list[str]:
    """Split a body into chunks of at most ``max_chars`` characters.

    Paragraphs (blank-line separated) are packed together while they fit;
    a paragraph longer than the limit is cut at sentence ends, then hard-cut.
    A daily-log entry (a ``### HH:MM`` heading and what follows it) is never
    packed with another entry, so recall scores each entry on its own.
    In a chat (``chat_turns``) a person's turns are never packed with an
    assistant's (``body_chunks`` says which is which).
    Chunks hold body text only (seed 000: no name/description/tags in them).
    """
    return [text for text, _role in body_chunks(body, max_chars)]


#: The role of a chunk: ``"user"`` (what a person said in a chat: the user,
#: or either person of a conversation between two), ``"assistant"`` (what
#: an assistant answered), ``""`` (not a chat).
USER, ASSISTANT, PLAIN = "user", "assistant", ""

#: A chat turn's label at the start of a line, as chat transcripts are written
#: in Markdown: ``**user**: text``, ``**Caroline**: text``, ``**User:** text``,
#: or the label alone on its line, as ``marchdb import`` writes it
#: (``**User** · 14:05``). The speaker is a name of at most 40 characters.
_TURN = re.compile(r"^\*\*([^*\n:]{1,40}?)(?::\*\*[ \t]|\*\*(?:[ \t]·[ \t]\d{1,2}:\d\d)?(?::[ \t]|:?[ \t]*$))", re.M)
#: Speakers that are an assistant, not a person (case-insensitive).
ASSISTANT_NAMES = frozenset(
    "assistant ai bot chatbot chatgpt gpt claude gemini copilot codex model agent system tool".split()
)
#: A body is a chat when it has at least this many turns, by at least two
#: speakers, each speaking at least twice: a note with "**Pros**: ... **Cons**: ..." is not one.
CHAT_MIN_TURNS = 4


def chat_turns(body: str) -> tuple[str, list[tuple[str, str]]] | None:
    """A chat's text before its first turn and its turns, ``(role, text)``
    (``USER`` or ``ASSISTANT``; the text with its label), or None when the
    body is not a chat (``CHAT_MIN_TURNS``)."""
    labels = list(_TURN.finditer(body))
    counts = Counter(m.group(1).strip().lower() for m in labels)
    # The speakers are the labels that recur about as often as the most
    # frequent one: an answer's own bold labels ("**Step 1:** ...", a
    # "**Note**: ..." or two) stay inside its turn.
    top = max(counts.values(), default=0)
    speakers = {label for label, n in counts.items() if n >= max(2, top / 2)}
    starts = [m for m in labels if m.group(1).strip().lower() in speakers]
    if len(speakers) < 2 or len(starts) < CHAT_MIN_TURNS:
        return None
    turns = []
    for m, nxt in zip(starts, [*starts[1:], None]):
        text = body[m.start() : nxt.start() if nxt else len(body)].strip()
        role = ASSISTANT if m.group(1).strip().lower() in ASSISTANT_NAMES else USER
        turns.append((role, text))
    return body[: starts[0].start()], turns


def body_chunks(body: str, max_chars: int = CHUNK_CHARS) -> list[tuple[str, str]]:
    """``chunk_body``'s chunks with their role (``USER``, ``ASSISTANT``,
    ``PLAIN``). In a chat, each run of a person's turns and each assistant
    turn is chunked on its own: what the user said once ("my sister's dog
    is called Max") is a chunk of its own, not a line inside 800 characters
    of the answer, so recall can find it (and weigh it) as the user's."""
    chat = chat_turns(body)
    if chat is None:
        return [(chunk, PLAIN) for section in _ENTRY_START.split(body) for chunk in _chunk_section(section, max_chars)]
    head, turns = chat
    out: list[tuple[str, str]] = []
    # the text before the first turn (a date line) goes with a person's first
    # turns, as a paragraph would; before an assistant's, it stands alone
    run = [head.strip()] if head.strip() else []
    if run and turns[0][0] != USER:
        out += [(chunk, PLAIN) for chunk in _chunk_section(head, max_chars)]
        run = []
    for i, (role, text) in enumerate(turns):
        if role == USER:
            # consecutive turns of people (a conversation between two) are
            # packed together as paragraphs are
            run.append(text)
            if i + 1 < len(turns) and turns[i + 1][0] == USER:
                continue
            out += [(chunk, USER) for chunk in _chunk_section("\n\n".join(run), max_chars)]
            run = []
        else:
            out += [(chunk, ASSISTANT) for chunk in _chunk_section(text, max_chars)]
    return out


def _chunk_section(body: str, max_chars: int) -> list[str]:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", body) if p.strip()]
    pieces: list[str] = []
    for para in paragraphs:
        if len(para) <= max_chars:
            pieces.append(para)
            continue
        buf = ""
        for sentence in (s for s in _SENTENCE_END.split(para) if s and s.strip()):
            while len(sentence) > max_chars:
                if buf:
                    pieces.append(buf)
                    buf = ""
                pieces.append(sentence[:max_chars])
                sentence = sentence[max_chars:]
            if len(buf) + len(sentence) + 1 > max_chars and buf:
                pieces.append(buf)
                buf = ""
            buf = f"{buf} {sentence}".strip() if buf else sentence.strip()
        if buf:
            pieces.append(buf)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 2 + len(piece) > max_chars:
            chunks.append(current)
            current = piece
        else:
            current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


def embedded_chunk_text(name: str, description: str, chunk: str, role: str, chunks: int) -> str:
    """The text a body chunk is embedded as. A short note (a body of one
    plain chunk) is embedded whole: its name and description, then its
    body. Its body alone rarely says what it is about ("Friday deploys
    broke the weekend twice."), and its metadata alone misses what the body
    adds; a message in other words than either is closer to the whole
    (tools/bench_small.py paraphrase). A body that begins with the
    description says it once (an imported paragraph's description is often
    its first sentence). A longer body's chunks, and a chat's turns, are
    embedded as they are: the heading would weigh on every chunk alike. FTS
    and ``--explain`` read the chunk's own text."""
    if chunks != 1 or role != PLAIN:
        return chunk
    if description and chunk.startswith(description.rstrip(".。…").strip()):
        description = ""
    return "\n".join(p for p in (name, description, chunk) if p)
