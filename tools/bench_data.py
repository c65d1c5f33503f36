"""Shared parts of the recall benchmarks: sets and their variants, off-topic
messages, the held-out split, and a vector cache that survives index rebuilds.

* **Sets** live in ``../shared/bench/NAME`` (memories.jsonl, queries.jsonl,
  qrels.tsv). A *variant* is derived, written once under ``.bench/sets/``:
  ``cmrc2018-hant`` is cmrc2018 converted to Traditional characters with
  OpenCC (``s2t``; the ``bench`` extra installs it); ``crosslingual`` is the
  40 memories of ``tools/data/crosslingual.jsonl`` (each asked about in the
  other language) among 160 of chats and cmrc2018; ``chatqa`` is the shared
  ``chats`` vault with the questions of ``tools/data/chatqa`` (259, one
  session each); ``chatpara`` the same vault with the questions of
  ``tools/data/chatpara`` (100 paraphrased questions about what the user
  said, 11 of them spanning sessions); ``locomo-long`` is locomo with each conversation's
  consecutive sessions merged into ~11,000-character memories
  (``tools/make_locomo_long.py``).
* **Off-topic messages** for a vault: the other sets' questions (chatqa's
  among them), questions in the vault's own language and script about
  subjects no set holds (``tools/data/offtopic_*.txt``; for the chat vaults
  also ``tools/data/chatqa/offtopic.txt``, requests in the chats' own
  register), and chit-chat (``tools/data/chitchat.txt``).
* **Held-out split**: every query (and off-topic message) falls into half
  ``train`` or ``test`` by a seeded hash of its text, the same on every run.
  Constants are chosen on ``train`` and reported on ``test``.
* **Vector cache**: an index is rebuilt whenever a ``sql/*.sql`` file
  changes; ``CachedEmbedder`` keeps every vector it computed (by model, kind
  and text) in ``.bench/vectors-<model>.sqlite``, so a rebuild embeds nothing
  it embedded before.
"""

from __future__ import annotations

# marchdb before numpy, as in every marchdb process: it sets OpenBLAS's spin timeout,
# which OpenBLAS reads when numpy loads (see tools/bench_latency.py).
import marchdb  # noqa: F401  # isort: skip

import hashlib
import json
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path

import apsw
import numpy as np

from marchdb.embedding import Embedder


def _find_bench() -> Path:
    # ../shared/bench next to the checkout, or further up (git worktrees).
    env = os.environ.get("MARCHDB_BENCH")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "shared" / "bench").is_dir():
            return parent / "shared" / "bench"
    return here.parents[2] / "shared" / "bench"


#: The shared benchmark sets (``MARCHDB_BENCH`` overrides).
BENCH = _find_bench()
DATA = Path(__file__).resolve().parent / "data"
#: Sets with queries (chats has none: it is a vault for off-topic quiet).
QUERY_SETS = ("locomo", "cmrc2018", "cranfield")
#: Derived sets: name -> (source set, converter name).
VARIANTS = {
    "cmrc2018-hant": ("cmrc2018", "s2t"),
    "crosslingual": ("chats+cmrc2018", "crosslingual"),
    "chatqa": ("chats", "chatqa"),
    "chatpara": ("chats", "chatpara"),
    "locomo-long": ("locomo", "locomo-long"),
    "chats-qa-described": ("chats-qa", "described"),
    "paraphrase": ("", "paraphrase"),
}
#: Query sets of our own (tools/data/NAME: queries.jsonl, qrels.tsv,
#: offtopic.txt) about a shared set's memories.
OWN_QUERIES = {"chatqa": "chats", "chatpara": "chats"}
#: Shared sets whose memories are another shared set's, unchanged
#: (``chats-qa`` asks about the ``chats`` sessions): one vault, so the
#: questions of either are answerable in both, never off-topic there, and
#: a vault filled with the sets' memories takes them once.
SAME_MEMORIES = {"chats-qa": "chats"}
#: Memories of the shared sets around the 40 of tools/data/crosslingual.jsonl.
CROSSLINGUAL_BACKGROUND = 160
#: Script of each set's text, for the in-language off-topic messages.
LANGUAGE = {
    "locomo": "en",
    "cranfield": "en",
    "chats": "en",
    "chatqa": "en",
    "chatpara": "en",
    "chats-qa": "en",
    "chats-qa-described": "en",
    "paraphrase": "en+zh",
    "locomo-long": "en",
    "cmrc2018": "zh",
    "cmrc2018-hant": "zh-hant",
    "crosslingual": "en+zh",
}
SPLIT_SEED = "marchdb-heldout-1"


def split_of(text: str) -> str:
    """``train`` or ``test``: a fixed, seeded half of any query text."""
    digest = hashlib.sha256(f"{SPLIT_SEED}\n{text}".encode()).digest()
    return "train" if digest[0] % 2 == 0 else "test"


def read_lines(name: str) -> list[str]:
    """Non-empty, non-comment lines of ``tools/data/NAME``."""
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [l.strip() for l in lines if l.strip() and not l.lstrip().startswith("#")]


def to_traditional(texts: Sequence[str]) -> list[str]:
    """Texts in Traditional characters (OpenCC s2t; ``pip install -e '.[bench]'``)."""
    from opencc import OpenCC

    cc = OpenCC("s2t")
    return [cc.convert(t) for t in texts]


def set_dir(name: str, work: Path = Path(".bench")) -> Path:
    """The folder of set ``name``: a shared set, a variant (built on first
    use under ``work/sets``), or a path."""
    if name in VARIANTS:
        source, conv = VARIANTS[name]
        out = work.resolve() / "sets" / name
        if not (out / "done").exists():
            _convert_set(BENCH / source, out, conv)
        return out
    path = Path(name)
    if path.is_dir():
        return path.resolve()
    return BENCH / name


def crosslingual_items() -> list[dict]:
    """The 40 (memory, question) pairs of tools/data/crosslingual.jsonl:
    20 English memories asked in Chinese, 20 Chinese ones asked in English."""
    out = []
    for line in (DATA / "crosslingual.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            item["memory"] = {"id": item["id"], "created_at": None, **item["memory"]}
            out.append(item)
    return out


def crosslingual_background(n: int = CROSSLINGUAL_BACKGROUND, seed: int = 3) -> list[dict]:
    """``n`` memories of the shared sets: half English chats, half Chinese paragraphs."""
    rng = random.Random(seed)
    out = []
    for name, k in (("chats", n // 2), ("cmrc2018", n - n // 2)):
        mems = [json.loads(l) for l in (BENCH / name / "memories.jsonl").read_text().splitlines() if l.strip()]
        out += rng.sample(mems, min(k, len(mems)))
    return out


def _write_crosslingual(out: Path) -> None:
    items = crosslingual_items()
    mems = [i["memory"] for i in items] + crosslingual_background()
    queries = [{"id": f"q-{i['id']}", "text": i["question"]} for i in items]
    (out / "memories.jsonl").write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in mems))
    (out / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    (out / "qrels.tsv").write_text(
        "query-id\tmemory-id\tgrade\n" + "".join(f"q-{i['id']}\t{i['id']}\t1\n" for i in items)
    )


def _write_paraphrase(out: Path) -> None:
    """The memories of tools/data/paraphrase.jsonl (an agent's decisions,
    preferences, people, errands; English and Chinese), each asked about in
    other words than its own ("can we ship this on friday?" for "We deploy
    on Tuesdays, never on Fridays"): for tools/bench_small.py."""
    out.mkdir(parents=True, exist_ok=True)
    items = [json.loads(l) for l in (DATA / "paraphrase.jsonl").read_text(encoding="utf-8").splitlines() if l.strip()]
    mems = [{"id": i["id"], "created_at": None, **i["memory"]} for i in items]
    queries = [{"id": f"{i['id']}-q{n}", "text": q} for i in items for n, q in enumerate(i["questions"])]
    qrels = [f"{i['id']}-q{n}\t{i['id']}\t1\n" for i in items for n, _ in enumerate(i["questions"])]
    (out / "memories.jsonl").write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in mems))
    (out / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    (out / "qrels.tsv").write_text("query-id\tmemory-id\tgrade\n" + "".join(qrels))
    (out / "done").write_text("ok")


def _write_described(src: Path, out: Path) -> None:
    """``src`` with each chat's description made as ``marchdb import`` makes
    one (``transcripts.described``: what the user settled, then what they
    asked) from its user turns, instead of its first words."""
    from marchdb.lifecycle.transcripts import described
    from marchdb.vault.chunks import USER, chat_turns

    out.mkdir(parents=True, exist_ok=True)
    mems = [json.loads(l) for l in (src / "memories.jsonl").read_text().splitlines() if l.strip()]
    label = re.compile(r"^\*\*[^*\n]{1,40}\*\*:?\s*")
    for m in mems:
        chat = chat_turns(m.get("body") or "")
        if chat is not None:
            prompts = [label.sub("", text) for role, text in chat[1] if role == USER]
            if prompts:
                m["description"] = described(prompts)
    (out / "memories.jsonl").write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in mems))
    for f in ("queries.jsonl", "qrels.tsv"):
        (out / f).write_bytes((src / f).read_bytes())
    (out / "done").write_text("ok")


def _convert_set(src: Path, out: Path, conv: str) -> None:
    if conv == "described":
        _write_described(src, out)
        return
    if conv == "paraphrase":
        _write_paraphrase(out)
        return
    if conv in ("crosslingual", *OWN_QUERIES, "locomo-long"):
        out.mkdir(parents=True, exist_ok=True)
        if conv == "crosslingual":
            _write_crosslingual(out)
        elif conv in OWN_QUERIES:
            (out / "memories.jsonl").write_bytes((src / "memories.jsonl").read_bytes())
            for f in ("queries.jsonl", "qrels.tsv"):
                (out / f).write_bytes((DATA / conv / f).read_bytes())
        else:
            import subprocess
            import sys

            tool = Path(__file__).resolve().parent / "make_locomo_long.py"
            subprocess.run(
                [sys.executable, str(tool), str(out), "--src", str(src)], check=True, stdout=subprocess.DEVNULL
            )
        (out / "done").write_text("ok")
        return
    assert conv == "s2t", conv
    out.mkdir(parents=True, exist_ok=True)
    mems = [json.loads(l) for l in (src / "memories.jsonl").read_text().splitlines() if l.strip()]
    fields = ("name", "description", "body")
    for f in fields:
        for m, t in zip(mems, to_traditional([m.get(f) or "" for m in mems])):
            m[f] = t
    for m, tags in zip(mems, [to_traditional(m.get("tags") or []) for m in mems]):
        m["tags"] = tags
    queries = [json.loads(l) for l in (src / "queries.jsonl").read_text().splitlines() if l.strip()]
    for q, t in zip(queries, to_traditional([q["text"] for q in queries])):
        q["text"] = t
    (out / "memories.jsonl").write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in mems))
    (out / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    (out / "qrels.tsv").write_text((src / "qrels.tsv").read_text())
    (out / "done").write_text("ok")


def base_name(name: str) -> str:
    """The shared set a set or variant comes from ("a+b" for several); a
    path to a variant's folder counts as the variant (its own sources' questions are not off-topic)."""
    short = Path(name).name
    source = VARIANTS.get(short, (short, ""))[0]
    return "+".join(SAME_MEMORIES.get(s, s) for s in source.split("+"))


def other_questions(name: str) -> list[str]:
    """Every query of the shared sets other than ``name``'s own sources (and
    the sets with the same memories, ``SAME_MEMORIES``), and of our own
    query sets about other sets' memories (chatqa)."""
    own = set(base_name(name).split("+"))
    own |= {s for s, same in SAME_MEMORIES.items() if same in own}
    out: list[str] = []
    for other in sorted(p for p in BENCH.iterdir() if p.is_dir() and p.name not in own):
        out += [json.loads(l)["text"] for l in (other / "queries.jsonl").read_text().splitlines() if l.strip()]
    for qset, source in OWN_QUERIES.items():
        if source not in own:
            lines = (DATA / qset / "queries.jsonl").read_text().splitlines()
            out += [json.loads(l)["text"] for l in lines if l.strip()]
    return out


def in_language_offtopic(name: str) -> list[str]:
    """Questions in the vault's language and script that no set answers."""
    lang = LANGUAGE.get(Path(name).name, LANGUAGE.get(base_name(name), "en"))
    if "chats" in base_name(name).split("+") and lang == "en":
        # requests in the chat sessions' own register that no session answers
        return read_lines("offtopic_en.txt") + read_lines("chatqa/offtopic.txt")
    if lang == "en+zh":
        return read_lines("offtopic_en.txt") + read_lines("offtopic_zh.txt")
    if lang == "zh-hant":
        return to_traditional(read_lines("offtopic_zh.txt"))
    return read_lines(f"offtopic_{lang}.txt")


def chitchat() -> list[str]:
    """Messages no memory should answer: greetings, acknowledgements, nonsense."""
    return read_lines("chitchat.txt")


def offtopic(name: str, n_other: int = 300, seed: int = 7) -> dict[str, list[str]]:
    """Off-topic messages for vault ``name`` by kind: ``other`` (a seeded
    sample of the other sets' questions), ``language`` (in its own language
    and script), ``chitchat``; and for the chat vaults ``recall``: the user
    asking what they said before, about things no session holds
    (``tools/data/chatpara/offtopic.txt``)."""
    others = other_questions(name)
    rng = random.Random(seed)
    out = {
        "other": rng.sample(others, min(n_other, len(others))),
        "language": in_language_offtopic(name),
        "chitchat": chitchat(),
    }
    if "chats" in base_name(name).split("+") and LANGUAGE.get(Path(name).name, "en") == "en":
        out["recall"] = read_lines("chatpara/offtopic.txt")
    return out


class CachedEmbedder(Embedder):
    """An embedder that remembers every vector it computed, on disk.

    Benchmark indexes are rebuilt whenever the schema changes; with this
    cache a rebuild re-embeds nothing (vectors are keyed by the model's
    fingerprint, the kind and the text)."""

    def __init__(self, inner: Embedder, cache_dir: Path):
        self.inner = inner
        self.fingerprint, self.dim = inner.fingerprint, inner.dim
        cache_dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(inner.fingerprint.encode()).hexdigest()[:12]
        self.con = apsw.Connection(str(cache_dir / f"vectors-{name}.sqlite"))
        self.con.setbusytimeout(60_000)  # several benchmarks may fill one cache at once
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("CREATE TABLE IF NOT EXISTS v(key BLOB PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID")

    def __getattr__(self, name):  # n_ctx, count_tokens... of the real model
        return getattr(self.inner, name)

    @staticmethod
    def _key(kind: str, text: str) -> bytes:
        return hashlib.blake2b(f"{kind}\0{text}".encode(), digest_size=16).digest()

    def embed(self, texts, kind, progress=None):
        """``inner.embed`` for the texts not seen before; the rest from the cache."""
        keys = [self._key(kind, t) for t in texts]
        found: dict[bytes, np.ndarray] = {}
        for i in range(0, len(keys), 500):
            part = keys[i : i + 500]
            marks = ",".join("?" * len(part))
            for k, blob in self.con.execute(f"SELECT key, vec FROM v WHERE key IN ({marks})", part):
                found[bytes(k)] = np.frombuffer(blob, dtype=np.float32)
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            vecs = self.inner.embed([texts[i] for i in missing], kind, progress)
            with self.con:
                self.con.executemany(
                    "INSERT OR REPLACE INTO v(key, vec) VALUES (?, ?)",
                    [(keys[i], np.ascontiguousarray(v, dtype=np.float32).tobytes()) for i, v in zip(missing, vecs)],
                )
            for i, v in zip(missing, vecs):
                found[keys[i]] = np.asarray(v, dtype=np.float32)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32)


def cached_store(cfg, cache_dir: Path = Path(".bench")):
    """A Store whose embedder is the configured model behind a ``CachedEmbedder``."""
    from marchdb.embedding import load_embedder
    from marchdb.store import Store

    store = Store(cfg)
    store._embedder = CachedEmbedder(load_embedder(cfg), cache_dir.resolve())
    return store
