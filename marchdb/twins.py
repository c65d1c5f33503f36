"""What a save would collide with: a memory of the same name or meaning, a
file marchdb cannot read that holds the id, a ``supersedes`` ring, a
``conflicts_with`` that cannot be.

seed 003's reconcile-before-writing: a save that nearly duplicates an active
memory writes nothing and names the twin (update it, or ``force``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from marchdb.errors import Conflict, IndexUnavailable, InvalidInput, NotFound
from marchdb.index import db, vectors
from marchdb.vault.files import read_file

#: Rounds of re-applying an update onto a file that keeps changing under us.
RACE_RETRIES = 5
#: Largest ``-N`` suffix tried for a taken file name.
MAX_NAME_SUFFIX = 1000


#: Cosine similarity of metadata vectors above which a new memory is a near-duplicate.
#: Deliberately high: raw cosines of unrelated texts reach 0.8-0.9 with e5,
#: so only a restatement of the same memory should pass this.
DUPLICATE_COSINE = 0.97


def superseders(con, mem_id: str, depth: int = 20) -> set[str]:
    """The ids of the memories that supersede ``mem_id``, directly or
    through others (at most ``depth`` steps): saving one of them as
    superseded by ``mem_id`` would make a ring (``sql/superseded.sql``)."""
    found: set[str] = set()
    frontier = [mem_id]
    for _ in range(depth):
        nxt = [
            r[0]
            for ident in frontier
            for r in con.execute(
                "SELECT n.id FROM supersedes s JOIN memory_index n ON n.rid = s.rid WHERE s.target = ?", (ident,)
            )
            if r[0] not in found
        ]
        found.update(nxt)
        frontier = nxt
        if not frontier:
            break
    return found


def check_supersedes(con, mem_id: str | None, targets: list[str], rescan: Callable[[], object] | None) -> None:
    """Refuse ``supersedes`` targets that cannot be: the memory itself, one
    that already supersedes it (a ring replaces nothing), an id no memory
    has. ``rescan`` (a light sync) runs once before an unknown id is refused:
    the files may have been written a moment ago, as ``open`` allows for."""
    above = superseders(con, mem_id) if mem_id is not None else set()
    for target in targets:
        if target == mem_id:
            raise InvalidInput(f"memory {target} cannot supersede itself; name the older memories it replaces")
        if target in above:
            raise InvalidInput(
                f"{target} already supersedes {mem_id} (directly or through others); memories that replace "
                "each other replace none, so remove one of the two `supersedes`"
            )
    _require_known(con, targets, rescan, "superseded")


def check_conflicts_with(
    con, mem_id: str | None, targets: list[str], supersedes: list[str] | None, rescan: Callable[[], object] | None
) -> None:
    """Refuse ``conflicts_with`` targets that cannot be: the memory itself,
    one it also supersedes (replacing says the new one holds; a contradiction
    says a person must decide), an id no memory has (``rescan`` as above)."""
    for target in targets:
        if target == mem_id:
            raise InvalidInput(f"memory {target} cannot contradict itself; name the other memories it contradicts")
        if target in (supersedes or []):
            raise InvalidInput(
                f"{target} is named in both supersedes and conflicts_with; supersedes says this memory holds now, "
                "conflicts_with that a person must decide which does: pass one"
            )
    _require_known(con, targets, rescan, "contradicted")


def _require_known(con, targets: list[str], rescan: Callable[[], object] | None, what: str) -> None:
    unknown = [t for t in targets if not db.id_taken(con, t)]
    if unknown and rescan is not None:
        rescan()  # one scan for all of them
        unknown = [t for t in unknown if not db.id_taken(con, t)]
    if unknown:
        raise NotFound(f"no memory has id {unknown[0]}, so it cannot be {what}; check the id", unknown[0])


def find_same_name(con, name: str) -> dict | None:
    """An active memory whose name equals ``name`` ignoring case, or None."""
    if name.isascii():
        row = con.execute(
            "SELECT id, path, name FROM memory_index WHERE lower(name) = lower(?) AND status = 'active' "
            "ORDER BY id LIMIT 1",
            (name,),
        ).fetchone()
    else:
        # SQLite's lower() folds ASCII letters only; fold the rest in Python.
        folded = name.casefold()
        row = next(
            (
                r
                for r in con.execute("SELECT id, path, name FROM memory_index WHERE status = 'active' ORDER BY id")
                if r[2].casefold() == folded
            ),
            None,
        )
    if row is None:
        return None
    return {"id": row[0], "path": row[1], "why": f"a memory named {row[2]!r} exists"}


def find_similar(con, vector, fingerprint: str, threshold: float = DUPLICATE_COSINE) -> dict | None:
    """The active memory whose metadata vector is most similar to ``vector``,
    if its cosine similarity is at least ``threshold``; else None.

    Only vectors of the model ``fingerprint`` count (the index's vectors
    belong to the model named in ``meta``).
    """
    if not vectors.usable(con, fingerprint):
        return None
    dim = db.get_meta(con, "dim")
    if str(len(vector)) != dim:
        raise IndexUnavailable(
            f"the index stores {dim}-dimensional vectors for this model but it produced {len(vector)}; "
            "run `marchdb rebuild`"
        )
    import numpy as np  # here: commands that never embed skip its ~130 ms import

    blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
    # sqlite-vec: KNN in a CTE with a capped k, join afterwards.
    row = con.execute(
        "WITH knn AS (SELECT rowid, distance FROM vec_meta WHERE embedding MATCH ? AND k = 8) "
        "SELECT m.id, m.path, m.name, knn.distance FROM knn JOIN vectors v ON v.vid = knn.rowid AND v.kind = 'meta' "
        "JOIN memory_index m ON m.meta_hash = v.hash WHERE m.status = 'active' ORDER BY knn.distance, m.id LIMIT 1",
        (blob,),
    ).fetchone()
    if row is None:
        return None
    similarity = 1.0 - float(row[3])
    if similarity < threshold:
        return None
    return {
        "id": row[0],
        "path": row[1],
        "why": f"memory {row[2]!r} says nearly the same (similarity {similarity:.2f})",
    }


#: How much of a file the index could not read is searched for an id line.
TWIN_PROBE_BYTES = 64 * 1024


#: Problems of files whose frontmatter could not be read: one of them may
#: still declare an id (a note without any frontmatter, ``missing_id``, does not).
TWIN_PROBE_KINDS = ("parse_error", "not_utf8", "too_large", "invalid_id")


#: The frontmatter at the start of a file (to its closing line, or as far as
#: it goes in a file cut short).
_HEAD = re.compile(rb"\A(?:\xef\xbb\xbf)?---[ \t]*\r?\n(.*?)(?:^---[ \t]*\r?$|\Z)", re.S | re.M)


def unreadable_holders(con, root: Path, mem_id: str) -> list[str]:
    """Files whose frontmatter the index could not read (broken YAML, not
    UTF-8, too large, an id that is not text) but whose frontmatter still has
    the line ``id: <mem_id>``.

    Creating a memory with that id would make a second holder the day the
    file is fixed, and every later save or log of the id would fail on the
    conflict. Links are never read (their target is not ours to look at);
    only the frontmatter counts (an ``id:`` line in a body says nothing)."""
    line = re.compile(rb"^id:[ \t]*[\"']?" + re.escape(mem_id.encode("utf-8")) + rb"[\"']?[ \t]*\r?$", re.M)
    return [rel for rel, head in _unreadable_heads(con, root) if line.search(head)]


def _unreadable_heads(con, root: Path) -> Iterator[tuple[str, bytes]]:
    """``(path, frontmatter bytes)`` of each file the index could not read as
    a memory (``TWIN_PROBE_KINDS``) that still begins with a frontmatter, by
    path. Links are never read (their target is not ours to look at)."""
    marks = ",".join("?" * len(TWIN_PROBE_KINDS))
    for (rel,) in con.execute(
        f"SELECT DISTINCT path FROM problems WHERE kind IN ({marks}) ORDER BY path", TWIN_PROBE_KINDS
    ):
        try:
            data, _ = read_file(root / rel, TWIN_PROBE_BYTES, root)
        except (OSError, ValueError):
            continue  # a link, a FIFO, gone, or a name the file system cannot take back
        head = _HEAD.match(data[:TWIN_PROBE_BYTES])
        if head:
            yield rel, head.group(1)


#: A ``source:`` line of a frontmatter, as an import writes it (a key made plain by ``sources.source_key``).
_SOURCE_LINE = re.compile(rb"^source:[ \t]*([\"']?)([^\r\n]+?)\1[ \t]*\r?$", re.M)


def unreadable_sources(con, root: Path) -> dict[str, str]:
    """The ``source:`` keys of the files the index could not read as memories
    (read as ``unreadable_holders`` reads them), each with its path: an
    imported memory whose YAML a hand edit broke still holds its source, and
    an import that did not know it would write a second copy of the item."""
    found: dict[str, str] = {}
    for rel, head in _unreadable_heads(con, root):
        line = _SOURCE_LINE.search(head)
        if line:
            found.setdefault(line.group(2).decode("utf-8", "replace"), rel)
    return found


def refuse_twin(
    con, root: Path, mem_id: str, also: list[str] | None = None, then: str = "save again, or use another id"
) -> None:
    """Raise ``Conflict`` when files that cannot be read as memories still
    hold ``mem_id`` (``unreadable_holders``; ``also``: more such paths the
    caller found), instead of creating a second file with that id (``then``:
    what to do once the file is fixed)."""
    stuck = list(dict.fromkeys([*(also or []), *unreadable_holders(con, root, mem_id)]))
    if stuck:
        details = dict(
            con.execute(
                "SELECT path, detail FROM problems WHERE path IN (SELECT value FROM json_each(?))", (json.dumps(stuck),)
            )
        )
        why = "; ".join(f"{p}: {details.get(p, 'not a readable file')}" for p in stuck)
        raise Conflict(
            f"id {mem_id} is held by a file marchdb cannot read as a memory ({why}); fix or move it "
            f"(`marchdb doctor` says how), then {then}; nothing was written",
            mem_id,
            [str(root / p) for p in stuck],
        )
