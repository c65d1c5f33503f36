"""``marchdb doctor``: every problem with the vault or the index, and what to do.

The problems themselves come from the ``diag_problems`` view (readable from
the stock sqlite3 shell); this module adds the advice a person needs, so the
CLI, the MCP server and any other front-end show the same words.
"""

from __future__ import annotations

import re
import stat
import unicodedata
from pathlib import Path

import apsw

from marchdb import logfile
from marchdb.index.db import rows

#: What to do about each kind of problem in ``diag_problems``.
ADVICE = {
    "missing_id": "add an `id:` to the frontmatter if this note should be a memory; otherwise ignore",
    "invalid_id": "make the id a quoted string without control characters",
    "missing_description": "add a one-line `description:`; without it the memory is never shown as a hint",
    "missing_name": "add a `name:`",
    "duplicate_id": "give all but one of these files a new id (or delete the copies), then `marchdb sync`",
    "parse_error": "fix the YAML between the `---` lines (quote values that contain ':' or '#'; no aliases or "
    "merge keys; within the frontmatter limits of the README's 'Limits and safety')",
    "not_utf8": "re-save the file as UTF-8 text (binary files do not belong in the memory root)",
    "too_large": "split the file or move it out of the memory root",
    "unreadable": "fix the file's permissions",
    "unreadable_dir": "fix the folder's permissions",
    "invalid_field": "fix the field's type in the frontmatter",
    "invalid_tags": "tags may hold letters, digits, '/ - _ . + #' and a name's middle dot '·' (node.js, c++, c#, 莱昂德罗·内托), 100 characters each, "
    "50 per memory",
    "symlink": "move the real file into the memory root; links are never followed",
    "not_regular": "replace it with a regular file, or move it out of the memory root (it is never read)",
    "bad_file_name": "rename the file or folder (its name is not valid UTF-8, e.g. from an old Latin-1 system)",
    "missing_vector": "run `marchdb sync`; if it persists, `marchdb model check`",
    "contradiction": "decide which holds: supersede the other (marchdb save --id KEEP --supersedes OTHER), "
    "deprecate one, or remove conflicts_with if both hold after all",
    "lookalike_id": "give one of them an id that reads differently (ids differing only in case, width or "
    "invisible characters are easy to confuse)",
    "supersedes_itself": "remove the memory's own id from its `supersedes:`",
    "conflicts_with_itself": "remove the memory's own id from its `conflicts_with:`",
    "unknown_id": "fix the id (`marchdb search` finds the memory meant), or remove it from the field if that "
    "memory was deleted",
    "supersedes_and_conflicts": "keep the id in one field: `supersedes` when this memory replaces the other, "
    "`conflicts_with` when a person has still to decide which holds",
    "supersedes_ring": "decide which of the memories holds now and remove the `supersedes:` that points back "
    "to an older one (marchdb save --id OLDER --supersedes '')",
    "mixed_script_id": "give it an id whose words are each in one script (a Cyrillic 'о' inside a Latin word "
    "reads as 'o': an agent told the id may type another)",
    "secret": "remove the secret from the file and keep it in a password manager: marchdb never rewrites your "
    "files, so until then it stays in the file (memory_open shows it), while hints, the index and the "
    "injected context carry a [redacted: ...] marker in its place",
}


#: Scripts whose letters pass for one another (Latin "o", Cyrillic "о", Greek "ο").
_LOOKALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC")
_ID_WORD = re.compile(r"[^\W\d_]+")


def mixed_scripts(ident: str) -> tuple[str, list[str]] | None:
    """The first word of ``ident`` whose letters come from scripts that look
    alike (``gооd`` with Cyrillic о's), and those scripts; None when there is
    none. Words of one script each (``заметка_db``) are fine."""
    for word in _ID_WORD.findall(unicodedata.normalize("NFKC", ident)):
        scripts = set()
        for c in word:
            script = unicodedata.name(c, "").split(" ", 1)[0]
            if script in _LOOKALIKE_SCRIPTS:
                scripts.add(script)
        if len(scripts) > 1:
            return word, sorted(s.title() for s in scripts)
    return None


def mixed_scripts_warning(ident: str) -> str | None:
    """What a save says about an id that mixes scripts (``mixed_scripts``), or None."""
    found = mixed_scripts(ident)
    if found is None:
        return None
    word, scripts = found
    return (
        f"the id {ident!r} mixes scripts in {word!r} ({' and '.join(scripts)} letters that look alike): "
        "an agent told it may type another; consider an id in one script"
    )


#: Lines of the hook log ``marchdb doctor`` shows.
HOOK_LOG_LINES = 10


def advice(kind: str) -> str:
    """What to do about a problem of ``kind`` ("" when there is nothing to add)."""
    return ADVICE.get(kind, "")


def problems(con: apsw.Connection) -> list[dict]:
    """Every row of ``diag_problems``, and ids that look alike
    (``lookalike_ids``), each with its ``advice``, by kind then path."""
    found = rows(con, "SELECT path, kind, detail FROM diag_problems ORDER BY kind, path")
    found += lookalike_ids(con) + mixed_script_ids(con)
    found.sort(key=lambda r: (r["kind"], r["path"]))
    for row in found:
        row["advice"] = advice(row["kind"])
    return found


def lookalike_ids(con: apsw.Connection) -> list[dict]:
    """Memories whose ids differ but read the same (``mem_a`` and ``mem_A``,
    ``café`` composed and decomposed, full-width letters, a zero-width space):
    an agent told one may open the other. Computed here, not in SQL: SQLite
    has no Unicode normalisation."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for mem_id, path in con.execute("SELECT id, path FROM memory_index ORDER BY id"):
        key = "".join(c for c in unicodedata.normalize("NFKC", mem_id) if unicodedata.category(c) not in ("Cc", "Cf"))
        groups.setdefault(key.casefold(), []).append((mem_id, path))
    out = []
    for members in groups.values():
        ids = sorted({m for m, _ in members})
        if len(ids) < 2:
            continue
        for mem_id, path in members:
            others = ", ".join(repr(o) for o in ids if o != mem_id)
            out.append({"path": path, "kind": "lookalike_id", "detail": f"id {mem_id!r} reads like {others}"})
    return out


def mixed_script_ids(con: apsw.Connection) -> list[dict]:
    """Memories whose id mixes look-alike scripts inside a word
    (``notes.mixed_scripts``: ``mem_gооd`` with Cyrillic о's). Indexed as
    written; said here, as an id easy to mistype."""
    out = []
    for mem_id, path in con.execute("SELECT id, path FROM memory_index ORDER BY id"):
        found = mixed_scripts(mem_id)
        if found is not None:
            word, scripts = found
            detail = f"id {mem_id!r} mixes {' and '.join(scripts)} letters in {word!r}"
            out.append({"path": path, "kind": "mixed_script_id", "detail": detail})
    return out


def logs(con: apsw.Connection, logs_dir: Path) -> list[dict]:
    """How big each log is and what bounds it: the index's logs
    (``diag_logs``: rows, keep_rows, oldest), marchdb's log files
    (bytes, keep_bytes per file; ``logfile``) and the engine's output
    (``engine_output``)."""
    return rows(con, "SELECT * FROM diag_logs") + logfile.sizes(logs_dir) + engine_output(logs_dir)


def engine_output(logs_dir: Path) -> list[dict]:
    """What engines started in the background print (``daemon.out``), as
    ``logfile.sizes`` gives a log file, with ``rotated`` False: it is not
    rotated but begun afresh when an engine starts and finds it past
    ``keep_bytes`` (``client.start``). ``[]`` when there is none (or a link,
    never followed)."""
    path = Path(logs_dir) / logfile.DAEMON_OUT
    try:
        st = path.lstat()
    except OSError:
        return []
    if not stat.S_ISREG(st.st_mode):
        return []
    return [{"file": logfile.DAEMON_OUT, "bytes": st.st_size, "keep_bytes": logfile.DAEMON_OUT_BYTES, "rotated": False}]


def home_problems(paths, max_bytes: int) -> list[dict]:
    """Secrets in the files of the home that go into every session (``paths``:
    the profiles and the working page, each read up to ``max_bytes``). They
    are never rewritten; what is injected carries markers in their place
    (``profiles``, ``now``)."""
    from marchdb import redact
    from marchdb.vault.files import read_file

    out = []
    for path in paths:
        try:
            data, _ = read_file(path, max_bytes)
        except OSError:
            continue  # missing, a link: said where it is read
        found = redact.find(redact.without_private(data.decode("utf-8", "replace")))
        if found:
            detail = f"holds {redact.summary(found)}, replaced by a marker wherever it is injected"
            out.append({"path": str(path), "kind": "secret", "detail": detail, "advice": advice("secret")})
    return out


def root_problems(cfg, as_of: str) -> list[dict]:
    """The memory root's problem, if it has one: missing (an unmounted
    drive), or a folder marchdb refuses (a system folder, another home);
    ``as_of`` says when the index last looked at the files."""
    from marchdb.errors import ConfigError

    if not cfg.memory_root.is_dir():
        return [
            {
                "path": str(cfg.memory_root),
                "kind": "missing_root",
                "detail": "the memory root is not there (an unmounted drive, a moved folder?); recall and "
                f"search answer from the index {as_of}",
                "advice": "mount or create the folder, or point MARCH_MEMORY_ROOT / memoryRoot at your vault",
            }
        ]
    try:
        cfg.require_root()
    except ConfigError as exc:
        return [
            {
                "path": str(cfg.memory_root),
                "kind": "refused_root",
                "detail": str(exc),
                "advice": "point MARCH_MEMORY_ROOT / memoryRoot at the folder that holds your memories",
            }
        ]
    return []
