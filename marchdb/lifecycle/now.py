"""The working page (seed 003's ``NOW.md``): what the agent is doing now, what is next, where it is stuck.

Short-term memory in seed 003's three layers: one page, overwritten as the
work moves on, read at the start of every session. It is not a memory: it
lives beside the profiles (``$MARCH_HOME/memory/now.md``), outside the vault,
so it is never indexed, searched or hinted, and each home (each agent, seed
003's "各自独立 memory/") has its own. Hosts inject it with the profiles as a
``[now]`` block that says how old it is; a page older than ``nowStaleHours``
(config.json, or ``MARCH_NOW_STALE_HOURS``; 24 by default) is shown as stale,
never as current. Its age is the file's last change, so an edit by hand
counts as an update.

Written whole and atomically (a temp file beside it, fsync, rename), never
through a link; at most ``ops.MAX_NOW_CHARS`` characters.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import time
import unicodedata
from pathlib import Path

from marchdb import redact
from marchdb.errors import FileError, InvalidInput, check_text
from marchdb.modeltext import for_model
from marchdb.ops import MAX_NOW_CHARS
from marchdb.vault.files import fsync_dir, read_file, write_temp

#: The page's file, in ``$MARCH_HOME/memory`` beside ``profiles/``.
NOW_FILE = "now.md"
#: Largest file read (a page edited by hand may be longer than a write may
#: make it; what is injected is cut to ``MAX_NOW_CHARS``).
MAX_NOW_BYTES = 64 * 1024
#: The first line of the block the page is injected in.
NOW_HEADER = "[now]"
#: A page whose file time is further ahead than this is dated in the future
#: (a clock set back since, a copy from another machine): its age cannot be
#: told, and it is shown as stale rather than as "just now" forever.
FUTURE_SLACK_SECONDS = 300


def page_path(home: Path) -> Path:
    """``$MARCH_HOME/memory/now.md``."""
    return Path(home) / "memory" / NOW_FILE


def check_page(text: object) -> str:
    """A caller's page, checked: text of at most ``MAX_NOW_CHARS`` characters
    (line ends as ``\\n``, surrounding blank lines dropped), no NUL or other
    control character but newlines and tabs (it goes into every prompt).
    Raises ``InvalidInput``."""
    if not isinstance(text, str):
        raise InvalidInput(f"the page must be text, got {type(text).__name__}")
    check_text(text, "the page")
    page = text.replace("\r\n", "\n").strip()
    if not page:
        raise InvalidInput('give the page\'s text (marchdb now "Migrating the gateway; blocked on DNS"), or clear it')
    odd = next((c for c in page if unicodedata.category(c) == "Cc" and c not in "\n\t"), None)
    if odd is not None:
        raise InvalidInput(f"the page holds the control character U+{ord(odd):04X}; a page is plain text")
    if len(page) > MAX_NOW_CHARS:
        raise InvalidInput(
            f"the page is {len(page):,} characters; it holds at most {MAX_NOW_CHARS:,} (a few lines of what is "
            "going on now): move lasting facts into memories (marchdb save) and the day's events into the log"
        )
    return page


def read_page(home: Path, stale_hours: float, now: float | None = None) -> dict:
    """The page as data (its ``<private>`` regions left out and secrets
    replaced by markers): ``{"text", "path", "updated_at" (ISO, local time),
    "age_seconds", "age" ("3 h ago"), "stale", "stale_after_hours"}``;
    ``text`` "" (and the times None) when there is no page or it is empty; a
    page dated in the future is stale, its ``age_seconds`` None.
    Raises ``FileError`` when it cannot be read (a link, not UTF-8)."""
    path = page_path(home)
    out: dict = {"text": "", "path": str(path), "updated_at": None, "age_seconds": None, "age": None}
    out.update(stale=False, stale_after_hours=stale_hours)
    try:
        data, st = read_file(path, MAX_NOW_BYTES)
    except FileNotFoundError:
        return out
    except OSError as exc:
        why = "it is a symbolic link, never read through" if exc.errno == errno.ELOOP else exc.strerror
        raise FileError(f"cannot read the working page {path}: {why}; make it a regular file") from None
    if len(data) > MAX_NOW_BYTES:
        raise FileError(
            f"the working page {path} is over {MAX_NOW_BYTES:,} bytes; shorten it (it goes into every prompt)"
        )
    try:
        text = data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n").strip()
    except UnicodeDecodeError as exc:
        raise FileError(f"the working page {path} is not UTF-8 text (byte {exc.start}); re-save it as UTF-8") from None
    # What an agent and every session see: no <private> region, no secret
    # (the file stays as written; doctor points the secret out).
    text = redact.redact(redact.without_private(text))[0].strip()
    if not text:
        return out
    age = (time.time() if now is None else now) - st.st_mtime
    changed = dt.datetime.fromtimestamp(st.st_mtime).astimezone()
    out.update(text=text, updated_at=changed.isoformat(timespec="seconds"))
    if age < -FUTURE_SLACK_SECONDS:
        out.update(age="at a time in the future", stale=True)
    else:
        age = max(0.0, age)
        out.update(age_seconds=round(age), age=age_words(age), stale=age > stale_hours * 3600)
    return out


def write_page(home: Path, text: object, mtime: float | None = None) -> Path:
    """Replace the page with ``text`` (``check_page``); ``mtime``: the time it
    was written, when that is not now (an imported ``NOW.md`` keeps its age).
    Never through a link. Returns its path."""
    return _replace(home, check_page(text).encode("utf-8") + b"\n", mtime)


def clear_page(home: Path) -> Path:
    """Empty the page (the file stays, empty: no ``[now]`` block is injected)."""
    return _replace(home, b"", None)


def _replace(home: Path, data: bytes, mtime: float | None) -> Path:
    path = page_path(home)
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
        raise FileError(f"{path} is not a regular file (a link?); marchdb never writes through one: remove it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = write_temp(path.parent, data, 0o600)
        try:
            if mtime is not None:
                os.utime(tmp, (mtime, mtime))
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        fsync_dir(path.parent)
    except OSError as exc:
        raise FileError(f"cannot write the working page {path}: {exc.strerror or exc}; check the disk") from None
    return path


def age_words(seconds: float) -> str:
    """How long ago, for a person: "just now", "12 min ago", "3 h ago", "5 days ago"."""
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} days ago"


def block(page: dict) -> str:
    """The ``[now]`` block for a page (``read_page``): its age on the first
    line, said as stale past ``stale_after_hours``, then the page (cut to
    ``MAX_NOW_CHARS``, saying so; as a model may read it, ``modeltext``); "" for no page."""
    text = page.get("text") or ""
    if not text:
        return ""
    when = f"updated {page['age']} ({dt.datetime.fromisoformat(page['updated_at']):%Y-%m-%d %H:%M})"
    if page["age_seconds"] is None:
        when = (
            f"STALE: {when}, so how old it is cannot be told (the clock was set back, or the file's time is "
            "wrong); check it with the user before acting on it, then refresh it (memory_now) or clear it"
        )
    elif page["stale"]:
        hours = f"{page['stale_after_hours']:g} h"
        when = (
            f"STALE: {when}, older than {hours}; it may no longer hold: check it with the user before acting on "
            "it, then refresh it (memory_now) or clear it"
        )
    if len(text) > MAX_NOW_CHARS:
        text = text[:MAX_NOW_CHARS].rstrip() + f"\n(cut: the page is longer than {MAX_NOW_CHARS:,} characters)"
    return f"{NOW_HEADER}\n{when}\n{for_model(text)}"
