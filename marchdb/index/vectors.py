"""Dense vectors in the index: which model, which texts, resumable embedding.

Vectors are keyed by (kind, content hash) in the plain ``vectors`` table and
stored in the vec0 tables ``vec_meta`` / ``vec_chunk`` under the same rowid.
A moved or renamed file keeps its hashes, so it is never embedded again; a
new model fingerprint drops every vector and re-embeds. Each batch commits on
its own, so a killed run leaves a consistent index and the next sync resumes.
Each batch's texts are named on disk while the model runs (``sentinel``): a
run that died of a native crash leaves suspects, embedded apart by the next
run, and the text the model crashes on alone is never given to it again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import apsw

from marchdb.errors import ModelError, ModelUnusable
from marchdb.index import calibrate, sentinel
from marchdb.index.db import (
    bump_meta,
    drop_vector_tables,
    ensure_vector_tables,
    get_meta,
    has_table,
    has_vector_tables,
    set_meta,
    transaction,
)
from marchdb.index.locks import embed_lease, writer_lock
from marchdb.vault.chunks import embedded_chunk_text
from marchdb.vault.notes import metadata_text

if TYPE_CHECKING:
    import numpy as np  # imported where used: a command that never embeds skips its ~130 ms import

#: Coarse candidates per kind re-ranked by cosine, in the SQL path of recall
#: (vec0 ``bit`` tables) and in the in-memory coarse tier (``vecindex``).
K_COARSE = 400
#: Texts embedded per transaction (and per progress step).
EMBED_BATCH = 32


def bump_generation(con: apsw.Connection) -> None:
    """Mark that vectors were added or deleted (inside the writing
    transaction): processes holding vectors in memory refresh on it."""
    bump_meta(con, "vector_gen")


def _blob(vec: np.ndarray) -> bytes:
    import numpy as np

    return np.ascontiguousarray(vec, dtype=np.float32).tobytes()


def prepare_model(con: apsw.Connection, embedder, guard: sentinel.Sentinel | None = None) -> bool:
    """Point the index at ``embedder``'s model; drop all vectors when it
    changed. Returns True when vectors were dropped (all is re-embedded).
    ``guard``: the model's probes run as a batch of no text (a crash there
    is counted, ``sentinel``)."""
    fingerprint, dim = embedder.fingerprint, embedder.dim
    current = get_meta(con, "model_fingerprint")
    if current == fingerprint and get_meta(con, "dim") == str(dim) and get_meta(con, "vector_center"):
        if dim % 8 == 0 and not has_bits(con):
            with transaction(con):  # an index made before the coarse tables existed
                ensure_vector_tables(con, dim)
                _backfill_bits(con)
        return False
    with guard.inflight([]) if guard is not None else contextlib.nullcontext():
        center = vector_center(embedder)
    with transaction(con):
        drop_vector_tables(con)
        set_meta(con, "model_fingerprint", fingerprint)
        set_meta(con, "dim", dim)
        set_meta(con, "vector_center", center.tobytes().hex())
        ensure_vector_tables(con, dim)
        bump_generation(con)
        # Calibration belongs to a model; a new model needs a new one.
        con.execute("DELETE FROM meta WHERE key LIKE 'calibration%'")
    return current is not None


def vector_center(embedder) -> np.ndarray:
    """The model's common direction: the mean of its probe passages' vectors
    (see ``probes``), subtracted before taking sign bits for the coarse KNN."""
    import numpy as np

    from marchdb.index.probes import PAIRS

    return embedder.embed_passages(list(dict.fromkeys(p for _, _, p in PAIRS))).mean(axis=0).astype(np.float32)


def center_blob(con: apsw.Connection) -> bytes:
    """The stored centre vector as a float32 blob."""
    return bytes.fromhex(get_meta(con, "vector_center") or "")


def usable(con: apsw.Connection, fingerprint: str | None = None) -> bool:
    """Whether the index holds vector tables of the model ``fingerprint``
    (None: of any model) — the question recall, save's twin check, maintain
    and the SQL functions ask before they read a vector."""
    current = get_meta(con, "model_fingerprint")
    if current is None or (fingerprint is not None and current != fingerprint):
        return False
    return has_vector_tables(con)


def has_bits(con: apsw.Connection) -> bool:
    """Whether the index keeps sign-bit tables (dimension a multiple of 8)."""
    return has_table(con, "vec_meta_bits")


def _backfill_bits(con: apsw.Connection) -> None:
    center = center_blob(con)
    for table in ("vec_meta", "vec_chunk"):
        con.execute(
            f"INSERT INTO {table}_bits(rowid, embedding) "
            f"SELECT rowid, vec_quantize_binary(vec_sub(embedding, ?)) FROM {table}",
            (center,),
        )


def pending_texts(con: apsw.Connection, paths: list[str] | None = None) -> list[tuple[str, str, str]]:
    """``(kind, hash, text)`` of every active memory's metadata and chunks
    that has no vector yet, metadata first (only the memories at ``paths``
    when given: a save's own)."""
    only = "" if paths is None else "AND m.path IN (SELECT value FROM json_each(:paths)) "
    args = {} if paths is None else {"paths": json.dumps(paths)}
    out: list[tuple[str, str, str]] = []
    for meta_hash, name, desc, tags_json in con.execute(
        "SELECT meta_hash, name, description, tags_json FROM memory_index m WHERE status = 'active' "
        + only
        + "AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.kind = 'meta' AND v.hash = m.meta_hash) "
        "GROUP BY meta_hash",
        args,
    ):
        out.append(("meta", meta_hash, metadata_text(name, desc, json.loads(tags_json))))
    # a chunk is embedded as chunks.embedded_chunk_text makes it (its hash is that text's)
    for chash, text, role, name, desc, chunks in con.execute(
        "SELECT c.hash, c.text, c.role, m.name, m.description, "
        "(SELECT count(*) FROM chunks n WHERE n.mem_rid = c.mem_rid) FROM chunks c "
        "JOIN memory_index m ON m.rid = c.mem_rid "
        "WHERE m.status = 'active' "
        + only
        + "AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.kind = 'chunk' AND v.hash = c.hash) "
        "GROUP BY c.hash",
        args,
    ):
        out.append(("chunk", chash, embedded_chunk_text(name, desc, text, role, chunks)))
    return out


def mark_complete_if_nothing_pending(con: apsw.Connection, fingerprint: str) -> bool:
    """Mark the index's vectors complete for ``fingerprint`` when no active
    text lacks one, checked and marked in one write transaction (a save in
    between clears the mark, or waits for it). Returns whether it did."""
    with transaction(con):
        if get_meta(con, "model_fingerprint") != fingerprint or not has_vector_tables(con):
            return False
        row = con.execute(
            "SELECT EXISTS (SELECT 1 FROM memory_index m WHERE status = 'active' AND NOT EXISTS "
            "(SELECT 1 FROM vectors v WHERE v.kind = 'meta' AND v.hash = m.meta_hash)) "
            "OR EXISTS (SELECT 1 FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.status = 'active' "
            "AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.kind = 'chunk' AND v.hash = c.hash))"
        ).fetchone()
        if row is None or row[0]:
            return False
        set_meta(con, "vectors_complete", fingerprint)
    return True


def store_vectors(con: apsw.Connection, items: list[tuple[str, str]], vecs: np.ndarray) -> int:
    """Insert vectors for ``(kind, hash)`` items in one transaction; items
    another process stored meanwhile are skipped. Returns how many were new."""
    added = 0
    with transaction(con):
        center = center_blob(con)
        bits = has_bits(con)
        for (kind, h), vec in zip(items, vecs):
            row = con.execute(
                "INSERT INTO vectors(kind, hash) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING vid", (kind, h)
            ).fetchone()
            if row is None:
                continue
            table = "vec_meta" if kind == "meta" else "vec_chunk"
            blob = _blob(vec)
            con.execute(f"INSERT INTO {table}(rowid, embedding) VALUES (?, ?)", (row[0], blob))
            if bits:
                con.execute(
                    f"INSERT INTO {table}_bits(rowid, embedding) VALUES (?, vec_quantize_binary(vec_sub(?, ?)))",
                    (row[0], blob, center),
                )
            added += 1
        if added:
            bump_generation(con)
    return added


def collect_garbage(con: apsw.Connection) -> int:
    """Delete vectors no memory refers to any more. Returns how many."""
    with transaction(con):
        stale = con.execute(
            "SELECT vid, kind FROM vectors v WHERE "
            "(kind = 'meta' AND NOT EXISTS (SELECT 1 FROM memory_index m WHERE m.meta_hash = v.hash)) OR "
            "(kind = 'chunk' AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.hash = v.hash))"
        ).fetchall()
        has_tables = has_vector_tables(con)
        bits = has_tables and has_bits(con)
        for vid, kind in stale:
            if has_tables:
                table = "vec_meta" if kind == "meta" else "vec_chunk"
                con.execute(f"DELETE FROM {table} WHERE rowid = ?", (vid,))
                if bits:
                    con.execute(f"DELETE FROM {table}_bits WHERE rowid = ?", (vid,))
            con.execute("DELETE FROM vectors WHERE vid = ?", (vid,))
        if stale:
            bump_generation(con)
    return len(stale)


def embed_pending(
    con: apsw.Connection,
    embedder,
    index_path: str | os.PathLike,
    progress: Callable[[int, int], None] | None = None,
    batch: int = EMBED_BATCH,
    limit: int | None = None,
    wait: bool = True,
    background: bool = False,
    keep_going: Callable[[], bool] | None = None,
) -> int | None:
    """Embed every text (or the first ``limit``) that lacks a vector for
    ``embedder``'s model. Returns how many were stored, or None when another
    process holds the embedding lease and ``wait`` is False.

    The model runs outside any lock or transaction; each batch is then
    written under the writer lock in its own short transaction, so readers
    and savers are never held up by a long embedding run. The whole run holds
    ``locks.embed_lease``, so no two processes embed the same backlog; texts
    indexed meanwhile (a save, another sync) are embedded by the same run
    before it ends. ``background``: the model's background lane, beside its
    queries (``LlamaEmbedder``). ``keep_going()``, asked before each batch,
    may end the run early (the watcher has changes to apply first).
    """
    if (
        get_meta(con, "vectors_complete") in (embedder.fingerprint, complete_but_quarantined(embedder))
        and get_meta(con, "model_fingerprint") == embedder.fingerprint
    ):
        return 0  # nothing was written since the last complete pass: stay a stat walk
    with embed_lease(index_path, wait) as lease:
        if not lease:
            return None
        return _embed_held(con, embedder, index_path, lease, progress, batch, limit, background, keep_going)


def _embed_held(con, embedder, index_path, lease, progress, batch, limit, background, keep_going) -> int:
    guard = sentinel.Sentinel(index_path, embedder.crash_key)
    with writer_lock(index_path):
        _recover(guard, embedder, pending_texts(con))  # before the model runs at all: its probes may be what crashed
        prepare_model(con, embedder, guard)
        collect_garbage(con)
        pending, ledger = _recover(guard, embedder, pending_texts(con))
        # A bounded run (a hook's dirty check) must stay quick: suspects wait
        # for a full one, which embeds them apart (seconds: a process to start).
        pending = pending if limit is None else _not_suspect(pending, ledger)
    tried: set[tuple[str, str]] = set()
    done = 0
    total = len(pending) if limit is None else min(limit, len(pending))
    stopped = False
    if progress:
        progress(0, total)
    while pending and not stopped:
        room = None if limit is None else limit - len(tried)
        todo = pending[:room]
        suspects = [p for p in todo if sentinel.key(p[0], p[1]) in ledger.suspects]
        while suspects:  # a culprit's memory makes its other texts suspects too: they are next
            done += _isolate(con, embedder, index_path, guard, suspects)
            tried.update((k, h) for k, h, _ in suspects)
            todo = [p for p in todo if (p[0], p[1]) not in tried]
            ledger = guard.read()
            suspects = [p for p in todo if sentinel.key(p[0], p[1]) in ledger.suspects]
            if progress:
                progress(len(tried), total)
        # Similar lengths together make the model's batches efficient.
        for start in range(0, len(todo), batch):
            if keep_going is not None and not keep_going():
                stopped = True
                break
            part = todo[start : start + batch]
            done += _embed_batch(con, embedder, index_path, guard, ledger, part, background)
            tried.update((k, h) for k, h, _ in part)
            if progress:
                progress(len(tried), total)
        if stopped or (limit is not None and len(tried) >= limit):
            break
        # What was indexed while this run embedded (a save, another sync):
        # this run takes it too, rather than leaving it for the next sync.
        with writer_lock(index_path):
            pending = [p for p in _recover(guard, embedder, pending_texts(con))[0] if (p[0], p[1]) not in tried]
            ledger = guard.read()
            pending = pending if limit is None else _not_suspect(pending, ledger)
        total = len(tried) + (len(pending) if limit is None else min(limit - len(tried), len(pending)))
    with writer_lock(index_path):
        with transaction(con):
            set_meta(con, "vector_error", None)
            # Re-checked inside the transaction: another process may have added
            # memories since our list was made. Texts the model crashed on
            # are not pending: they are never given to it again.
            left = pending_texts(con)
            if not guard.without_quarantined(left):
                # Texts quarantined on this build and CPU: complete here only.
                set_meta(con, "vectors_complete", complete_but_quarantined(embedder) if left else embedder.fingerprint)
        # Given up under the writer lock: a writer that indexed texts after
        # the check above finds the lease free (it is not held once that
        # writer's own write is done), so it can embed them itself; one that
        # indexed them before had them embedded here.
        lease.release()
    return done


def complete_but_quarantined(embedder) -> str:
    """The ``vectors_complete`` mark of an index whose only texts without a
    vector are quarantined (``sentinel``) for this model, llama.cpp build and
    CPU: on another build or CPU they are tried again."""
    return f"{embedder.fingerprint} {embedder.crash_key}"


def embed_texts_of(
    con: apsw.Connection, embedder, index_path: str | os.PathLike, paths: list[str], limit: int | None = None
) -> tuple[int, int]:
    """Embed the pending texts of the memories at ``paths`` (a save's own;
    metadata first, at most ``limit`` of them) in the model's foreground,
    without the embedding lease: a save must not wait behind a backlog
    another process embeds (at worst a text both embed is stored once).
    Returns how many were stored and how many are left pending."""
    guard = sentinel.Sentinel(index_path, embedder.crash_key)
    with writer_lock(index_path):
        prepare_model(con, embedder, guard)
        ledger = guard.read()
        pending = guard.without_quarantined(pending_texts(con, paths), ledger)
    todo = pending[:limit]
    left = len(pending) - len(todo)
    done = 0
    suspects = [p for p in todo if sentinel.key(p[0], p[1]) in ledger.suspects]
    while suspects:
        done += _isolate(con, embedder, index_path, guard, suspects)
        todo = [p for p in todo if p not in suspects]
        ledger = guard.read()
        suspects = [p for p in todo if sentinel.key(p[0], p[1]) in ledger.suspects]
    for start in range(0, len(todo), EMBED_BATCH):
        part = todo[start : start + EMBED_BATCH]
        done += _embed_batch(con, embedder, index_path, guard, ledger, part, False)
    return done, left


def suspect_texts_of(con: apsw.Connection, embedder, index_path: str | os.PathLike, paths: list[str]) -> int:
    """Make the texts of the memories at ``paths`` that lack a vector
    suspects (``sentinel``): the model crashed on one of their texts
    (a save's probe), so the next full run embeds them apart, not here.
    Returns how many."""
    guard = sentinel.Sentinel(index_path, embedder.crash_key)
    with writer_lock(index_path):
        names = {sentinel.key(k, h) for k, h, _ in pending_texts(con, paths)}
        guard.settle({}, explained=False, suspects=names)
    return len(names)


def _recover(guard: sentinel.Sentinel, embedder, pending: list[tuple[str, str, str]]):
    """``(pending, ledger)``: what a dead process was embedding becomes
    suspect (``sentinel``), quarantined texts leave ``pending``; crashes
    that no text explained, again and again, make the model unusable here
    (``ModelUnusable``). Under the writer lock."""
    ledger, found, alone = guard.recover(pending)
    if found and ledger.crashes >= sentinel.CRASH_LIMIT:
        _condemn(
            guard,
            embedder,
            f"llama.cpp crashed {ledger.crashes} times in a row while embedding memories, on no single text",
        )
    if alone and ledger.lone >= sentinel.LONE_CRASH_LIMIT:
        _condemn(guard, embedder, f"llama.cpp crashed on {ledger.lone} texts in a row, each embedded alone")
    return guard.without_quarantined(pending, ledger), ledger


def check_crashes(con: apsw.Connection, embedder, index_path: str | os.PathLike) -> None:
    """Read what dead processes left, as a model is loaded: a crash outside
    any backlog (the model's calibration, at a recall) is counted even when
    every text has its vector, and enough of them make the model unusable
    here (``ModelUnusable``)."""
    guard = sentinel.Sentinel(index_path, embedder.crash_key)
    with writer_lock(index_path):
        _recover(guard, embedder, pending_texts(con))


def _not_suspect(pending: list[tuple[str, str, str]], ledger: sentinel.Ledger) -> list[tuple[str, str, str]]:
    return [p for p in pending if sentinel.key(p[0], p[1]) not in ledger.suspects]


def _condemn(guard: sentinel.Sentinel, embedder, detail: str) -> None:
    guard.settle({}, explained=True)
    raise ModelUnusable(embedder.condemn(detail))


def _embed_batch(con, embedder, index_path, guard, ledger, part, background: bool) -> int:
    """One call of the model on ``part``, its texts named on disk while it
    runs (``sentinel``), its vectors stored. Returns how many were new."""
    with guard.inflight([(k, h) for k, h, _ in part]):
        vecs = embedder.embed_passages([t for _, _, t in part], background=background)
    with writer_lock(index_path):
        if get_meta(con, "model_fingerprint") != embedder.fingerprint:
            raise ModelError("another process switched the embedding model mid-run; run `marchdb sync` again")
        added = store_vectors(con, [(k, h) for k, h, _ in part], vecs)
        if ledger.crashes or ledger.lone or ledger.kills:
            guard.settle({}, explained=True)  # a batch went through: the crashes before were not the model's way
            ledger.crashes = ledger.lone = ledger.kills = 0
    return added


def _isolate(con, embedder, index_path, guard: sentinel.Sentinel, suspects) -> int:
    """Embed the suspects one by one, apart (``Embedder.embed_isolated``):
    those the model crashes on alone are quarantined, the others stored.
    Returns how many vectors were stored."""
    import numpy as np

    results = embedder.embed_isolated([t for _, _, t in suspects], sentinel.LONE_CRASH_LIMIT)
    in_a_row = 0
    for r in results:
        in_a_row = in_a_row + 1 if isinstance(r, str) else 0 if r is not None else in_a_row
        if in_a_row >= sentinel.LONE_CRASH_LIMIT:
            with writer_lock(index_path):
                _condemn(guard, embedder, f"llama.cpp crashed on {in_a_row} texts in a row, each embedded alone")
    made = [(p, r) for p, r in zip(suspects, results) if r is not None and not isinstance(r, str)]
    outcome: dict[str, str | None] = {  # those not tried stay suspects
        sentinel.key(k, h): (r if isinstance(r, str) else None)
        for (k, h, _), r in zip(suspects, results)
        if r is not None
    }
    added = 0
    with writer_lock(index_path):
        if made:
            if get_meta(con, "model_fingerprint") != embedder.fingerprint:
                raise ModelError("another process switched the embedding model mid-run; run `marchdb sync` again")
            vecs = np.stack([np.asarray(r, dtype=np.float32) for _, r in made])
            added = store_vectors(con, [(k, h) for (k, h, _), _ in made], vecs)
        crashed = [name for name, crash in outcome.items() if crash is not None]
        guard.settle(outcome, explained=bool(crashed), suspects=_siblings(con, crashed))
    return added


def _siblings(con: apsw.Connection, names: list[str]) -> set[str]:
    """Every text of the memories holding the texts ``names`` (``sentinel.key``):
    the model crashed on one, and another (an overlapping chunk, the name and
    description) likely holds what it crashed on."""
    out: set[str] = set()
    for name in names:
        kind, _, h = name.partition(":")
        if kind == "meta":
            rids = con.execute("SELECT rid FROM memory_index WHERE meta_hash = ?", (h,)).fetchall()
        else:
            rids = con.execute("SELECT DISTINCT mem_rid FROM chunks WHERE hash = ?", (h,)).fetchall()
        for (rid,) in rids:
            out.update(
                sentinel.key("meta", m)
                for (m,) in con.execute("SELECT meta_hash FROM memory_index WHERE rid = ?", (rid,))
            )
            out.update(
                sentinel.key("chunk", c) for (c,) in con.execute("SELECT hash FROM chunks WHERE mem_rid = ?", (rid,))
            )
    return out - set(names)


def embed_after_sync(
    con,
    emb,
    index_path,
    report,
    progress,
    limit: int | None,
    wait: bool,
    long_lived,
    background: bool = True,
    keep_going: Callable[[], bool] | None = None,
) -> int | None:
    """Embed what a sync left pending into ``report`` (``embedded``,
    ``model``, ``warnings``): at most ``limit`` texts; ``wait=False`` leaves
    them to another process that holds the embedding lease; ``background``:
    in the model's background lane; ``keep_going``: see ``embed_pending``. The model's
    calibration is made once, and the index's ``vector_error`` follows what
    happened (an old error fixed since must not stay in status and doctor).
    Returns ``embed_pending``'s answer (None: the lease was taken), 0 when embedding failed."""
    report.model = emb.fingerprint
    guard = sentinel.Sentinel(index_path, emb.crash_key)
    quarantined = set(guard.read().quarantined)
    try:
        embedded = embed_pending(
            con, emb, index_path, progress, limit=limit, wait=wait, background=background, keep_going=keep_going
        )
        if embedded is None:
            report.warnings.append(
                "another marchdb process is computing vectors; the newest memories are matched "
                "by keywords until it is done"
            )
            return None
        report.embedded = embedded
        settle(con, emb, embedded, long_lived)
    except ModelError as exc:
        report.warnings.append(f"embedding stopped: {exc}")
        record_error(con, str(exc))
    new = set(guard.read().quarantined) - quarantined
    if new:
        ids = sorted({r["id"] for r in sentinel.quarantined_memories(con, index_path, emb.crash_key, new)})
        report.warnings.append(
            f"llama.cpp crashed on the text of {', '.join(ids)}: it is no longer given to the model and is "
            "found by its keywords only; the rest was embedded (marchdb doctor)"
        )
    return report.embedded


def settle(con: apsw.Connection, emb, embedded: int, long_lived) -> None:
    """After an embedding run: the model's calibration (made once, so recall
    starts fast), the buffers of a long-lived process given back, and no
    ``vector_error`` left from an earlier failure."""
    calibrate.ensure(con, emb)
    if embedded and long_lived:
        emb.release_buffers()  # a long-lived process: back to a query-sized buffer
    if get_meta(con, "vector_error") is not None:
        record_error(con, None)


def record_error(con: apsw.Connection, error: str | None) -> None:
    """Why vectors are missing (``status`` and ``doctor`` show it), or None;
    nothing written when it says so already (a write makes every other
    connection drop its page cache: a watcher with no model wrote at every change)."""
    if get_meta(con, "vector_error") == error:
        return
    with transaction(con):
        set_meta(con, "vector_error", error)
