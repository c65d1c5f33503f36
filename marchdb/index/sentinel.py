"""Which texts the model was embedding when its process died: a native crash on one memory costs that memory's vectors, not every run.

llama.cpp is proven on this machine before it runs in ours
(``embedding.nativecheck``), but a crash can still come mid-run, on one
input: a text that makes it crash, a kernel that fails on one batch shape.
Such a crash kills the process that embeds (the engine, a sync, the MCP
server), and the next one met the same backlog and crashed again, forever.

So before a batch goes to the model, the texts it holds (their kinds and
content hashes), the model's fingerprint and the process are written to a
small file beside the index, ``<index>.embedding.<pid>.<n>``; it is removed
when the batch returns. Written before the call, it outlives the process's
death (a power cut is no crash of the model, so it is not fsynced). The next
process that embeds for the index (``recover``) finds the files of dead
processes (their pid gone, or another process or boot under it):

* their texts become **suspects**, kept in ``<index>.crashes.json``; each
  is embedded alone, in a separate process (``Embedder.embed_isolated``), so
  a crash there costs that process only and names the culprit;
* a text on which the model crashed alone is **quarantined**: never sent to
  the model again for that model, shown by ``status`` and ``doctor`` with
  its memory (still found by its keywords), and the rest of the backlog goes
  on. Editing the memory makes a new text, tried again; ``marchdb model
  check`` forgives every quarantined text (``forgive``);
* crashes that no single text explains (every batch crashes, whatever it
  holds) are counted; at ``CRASH_LIMIT`` in a row, or ``LONE_CRASH_LIMIT``
  texts crashing alone in a row, the model is unusable on this machine, as
  if its first check had crashed (``Embedder.condemn``): keyword recall, a
  plain warning, no loop.

A text embedded **alone** in a process that must answer (a message
recalled, in the engine or a command; a save's near-duplicate check, on the
new memory's name and description) is named the same way, marked alone
(``embed_alone``). A process that died on it needs no second run to name the
culprit: the next one to load the model (the engine restarted, the command
that saw the engine die) quarantines that text at once, for this model,
llama.cpp build and CPU (the key of the model's check,
``nativecheck.verdict_key``). A message quarantined is answered by keywords
with one plain line; a save whose probe is quarantined checks near-twins by
keywords, writes its file and leaves its vectors to a sync, which embeds them
apart. Such texts are kept until the model, the build or the CPU changes (or
``marchdb model check``), whether or not a memory holds them.

A process that dies while it embeds is not always a crash: ``kill -9``, the
kernel's out-of-memory killer or a host ending a slow command end it the
same way as far as its files tell. So a process that embeds points Python's
``faulthandler`` at a file of its own beside the index,
``<index>.fatal.<pid>.<start>``, which a native crash (SIGSEGV, SIGBUS,
SIGILL, SIGFPE, SIGABRT) fills with a traceback and a kill leaves empty. A
text embedded alone whose process died with that file empty was killed, not
crashed on: it is given to the model again, once; a second such death on
the same text quarantines it, so a crash the handler could not report costs
at most two runs. A batch whose process was killed is not counted among the
crashes no text explains (its texts are still embedded apart), up to
``KILL_LIMIT`` in a row. Where ``faulthandler`` is someone else's (enabled
before marchdb armed it), a death is taken for a crash, as before.

Both files are found by name next to the index, opened without following
links, and hold nothing but hashes (no memory text).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import faulthandler
import itertools
import json
import os
import signal
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from marchdb.clock import utc_now_iso

#: Crashes in a row that no text explained (every suspect embedded fine
#: alone) before the model is taken as unusable on this machine.
CRASH_LIMIT = 3
#: Texts in a row on which the model crashed alone before it is taken as
#: unusable (a model that crashes on every text is broken, not its inputs).
LONE_CRASH_LIMIT = 3
#: Batches in a row whose process was killed (no crash reported) that are
#: not counted as crashes; past it they are (a crash that could not report
#: itself must not run forever).
KILL_LIMIT = 5
#: How the ledger says a text was quarantined after its process died twice with no crash reported.
TWICE = "its process died on it twice"
#: The ledger is not read past this size (it holds hashes: ~130 bytes a text),
#: so it is written within it (a model at its bounds is ~360 KB).
MAX_LEDGER_BYTES = 512 * 1024
#: Quarantined texts kept per model (the newest).
MAX_QUARANTINED = 1000
#: Models whose ledger is kept (the one in use and a few before it).
MAX_MODELS = 4
#: Texts embedded alone (messages, save probes) quarantined per model, the newest kept.
MAX_ALONE = 1000
_INFLIGHT = ".embedding."
#: An in-flight record holds a few hashes a text; none is read past this.
_MAX_RECORD_BYTES = 64 * 1024
_LEDGER = ".crashes.json"
_FATAL = ".fatal."
#: ``(folder, index file name, fatal file path, its open file)`` while this
#: process's ``faulthandler`` writes to a file of ours; ``False`` once it
#: cannot (enabled by someone else, or the file could not be made).
_armed: tuple[str, str, str, object] | bool | None = None
_arm_lock = threading.Lock()
_counter = itertools.count()
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: The in-flight files this process has on disk now.
_IN_FLIGHT: set[str] = set()
#: Signals that end a process by default, which no crash of the model sends:
#: `timeout`, `kill`, a host ending a slow command, a terminal closed.
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def forget_in_flight() -> None:
    """Remove this process's in-flight files: it is ending (a signal, a
    shutdown that cannot wait), and what was being embedded is no suspect."""
    for name in list(_IN_FLIGHT):
        with contextlib.suppress(OSError):
            os.unlink(name)
        _IN_FLIGHT.discard(name)
    _disarm()  # its fatal file too: an exit that skips atexit (os._exit) would leave it


def _end_by_signal(signum: int, _frame: object) -> None:
    forget_in_flight()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # dies of it, as it would have


@contextlib.contextmanager
def _ended_not_crashed() -> Iterator[None]:
    """While the main thread embeds: a signal that would end the process
    (with its default action) first removes the in-flight files, so the
    next process does not take the end for a crash of the model on those
    texts. It waits for the model's call in progress (Python runs a handler
    between two calls into C), then the process dies of the same signal. A
    process with a handler of its own (the engine, the MCP server) keeps it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = []
    for signum in _ENDING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _end_by_signal)
            taken.append(signum)
    try:
        yield
    finally:
        for signum in taken:
            if signal.getsignal(signum) is _end_by_signal:
                signal.signal(signum, signal.SIG_DFL)


def _is_fatal_name(base: str, name: str) -> bool:
    """Whether ``name`` is a fatal file this module gives for the index ``base``."""
    pid, dot, start = name[len(base) + len(_FATAL) :].partition(".")
    return (
        name.startswith(base + _FATAL)
        and bool(dot)
        and pid.isascii()
        and pid.isdigit()
        and start.isascii()
        and start.isdigit()
        and 0 < len(pid) < 10
    )


def _arm(folder: str, base: str) -> str | None:
    """The path of this process's fatal file beside the index ``base`` in
    ``folder``, ``faulthandler`` writing to it; None when it cannot be (the
    handler is someone else's, the folder refuses the file, or this process
    armed it for another index)."""
    global _armed
    with _arm_lock:
        if _armed is None:
            _armed = False
            start = _start_time(os.getpid())
            if faulthandler.is_enabled() or not start:
                return None
            path = os.path.join(folder, f"{base}{_FATAL}{os.getpid()}.{start}")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
            except OSError:
                return None
            fh = os.fdopen(fd, "w")
            faulthandler.enable(file=fh, all_threads=True)
            _armed = (folder, base, path, fh)
            atexit.register(_disarm)
        if isinstance(_armed, tuple) and _armed[:2] == (folder, base):
            return _armed[2]
        return None


def _disarm() -> None:
    """At a normal exit: the handler off, the fatal file gone."""
    global _armed
    if isinstance(_armed, tuple):
        faulthandler.disable()
        _armed[3].close()  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):
            os.unlink(_armed[2])
        _armed = False


def key(kind: str, h: str) -> str:
    """How a text is named in the ledger."""
    return f"{kind}:{h}"


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot (Linux), so a
    pid reused by another process is not taken for the one that wrote."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has died and waits for its parent (its socket already
    closed: a client that saw it die must not take it for alive)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3] in (b"Z", b"X")


def _alive(pid: int, boot: str, start: str) -> bool:
    if boot and boot != _boot_id():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process holds the pid: only a start time can tell
    if _zombie(pid):
        return False
    return not start or _start_time(pid) in ("", start)


@dataclass
class Ledger:
    """What the crashes of one model (on one llama.cpp build and CPU) left:
    ``suspects`` and ``quarantined`` by ``key(kind, hash)``; ``alone``, the
    texts it crashed on embedded alone (messages, save probes), kept whether
    or not a memory holds them; ``crashes``, those found in a row that no
    text explained; ``lone``, texts in a row it crashed on alone."""

    suspects: dict[str, dict] = field(default_factory=dict)
    quarantined: dict[str, dict] = field(default_factory=dict)
    crashes: int = 0
    alone: dict[str, dict] = field(default_factory=dict)
    lone: int = 0
    #: Texts embedded alone whose process was killed (no crash reported) once.
    killed: dict[str, dict] = field(default_factory=dict)
    #: Batches in a row whose process was killed (no crash reported).
    kills: int = 0

    def as_dict(self) -> dict:
        return {
            "suspects": self.suspects,
            "quarantined": self.quarantined,
            "crashes": self.crashes,
            "alone": self.alone,
            "lone": self.lone,
            "killed": self.killed,
            "kills": self.kills,
        }

    def refused(self, name: str) -> dict | None:
        """What is known of the text ``name`` when the model must not get it."""
        return self.alone.get(name) or self.quarantined.get(name)


class Sentinel:
    """The sentinel files and the ledger of the index at ``index_path``,
    for the model ``fingerprint`` (``Embedder.crash_key``: the model, the
    llama.cpp build and the CPU). The ledger is read and written under the
    index's writer lock (callers hold it)."""

    def __init__(self, index_path: str | os.PathLike, fingerprint: str):
        self.index_path = os.path.abspath(index_path)
        self.fingerprint = fingerprint
        self.folder = os.path.dirname(self.index_path)
        self.base = os.path.basename(self.index_path)
        self._lock = threading.Lock()

    # -- the files of batches in flight -----------------------------------

    @contextlib.contextmanager
    def inflight(self, items: list[tuple[str, str]], alone: bool = False) -> Iterator[None]:
        """Around one call of the model on the texts ``items`` (``(kind,
        hash)``): their names on disk while it runs (``alone``: one text, in
        a call of its own, so a crash names it). When the file cannot be
        written (a read-only folder) the batch runs without it."""
        pid = os.getpid()
        name = os.path.join(self.folder, f"{self.base}{_INFLIGHT}{pid}.{next(_counter)}")
        record = {
            "pid": pid,
            "boot": _boot_id(),
            "start": _start_time(pid),
            "model": self.fingerprint,
            "texts": [key(k, h) for k, h in items],
            "at": utc_now_iso(),
        }
        if alone:
            record["alone"] = True
        fatal = _arm(self.folder, self.base)
        if fatal is not None:
            record["fatal"] = os.path.basename(fatal)
        written = False
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
            _IN_FLIGHT.add(name)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(record, fh)
            written = True
        except OSError:
            pass
        try:
            with _ended_not_crashed():
                yield
        finally:
            if written:
                with contextlib.suppress(OSError):
                    os.unlink(name)
            _IN_FLIGHT.discard(name)

    def _dead_batches(self) -> list[tuple[str, dict | None]]:
        """``(file, record)`` of the batches of dead processes (record None:
        unreadable, a file cut short by the death itself)."""
        prefix = self.base + _INFLIGHT
        out: list[tuple[str, dict | None]] = []
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return []
        for entry in entries:
            pid_part, _, n_part = entry.name[len(prefix) :].partition(".")
            if (
                not entry.name.startswith(prefix)
                or not (_digits(pid_part) and _digits(n_part))  # only the names this module gives
                or not entry.is_file(follow_symlinks=False)
            ):
                continue
            record = _read_json(entry.path, _MAX_RECORD_BYTES)
            if isinstance(record, dict):
                pid = _pid(record.get("pid"))
                record["pid"], record["start"] = pid, str(record.get("start", ""))
                if pid and _alive(pid, str(record.get("boot", "")), record["start"]):
                    continue
                out.append((entry.path, record))
            else:
                pid = _pid(int(pid_part))
                if pid and _alive(pid, "", ""):
                    continue  # being written this instant
                out.append((entry.path, None))
        return out

    def _killed(self, record: dict) -> bool:
        """Whether the dead process of ``record`` was killed rather than
        crashed: its fatal file, which a native crash fills, is there and empty."""
        name = record.get("fatal")
        if not isinstance(name, str) or not _is_fatal_name(self.base, name):
            return False  # no handler of ours: any death may be a crash
        try:
            st = os.lstat(os.path.join(self.folder, name))
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size == 0

    def _sweep_fatal(self) -> None:
        """Remove the fatal files of processes that are gone (read first, by
        ``recover``, for their in-flight files)."""
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return
        for entry in entries:
            if not _is_fatal_name(self.base, entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            pid, _, start = entry.name[len(self.base) + len(_FATAL) :].partition(".")
            if int(pid) != os.getpid() and not _alive(int(pid), "", start):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

    # -- the ledger ---------------------------------------------------------

    @property
    def ledger_path(self) -> str:
        return os.path.join(self.folder, self.base + _LEDGER)

    def _read_all(self) -> dict[str, dict]:
        data = _read_json(self.ledger_path, MAX_LEDGER_BYTES)
        return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}

    def read(self) -> Ledger:
        """This model's ledger as it is on disk (empty when there is none)."""
        return _ledger(self._read_all().get(self.fingerprint) or {})

    def write(self, ledger: Ledger) -> None:
        """Keep ``ledger`` for this model (best effort: a folder that cannot
        be written means the next crash is found again, never a lost index)."""
        data = self._read_all()
        data.pop(self.fingerprint, None)
        newest = sorted(ledger.quarantined.items(), key=lambda kv: str(kv[1].get("at", "")))[-MAX_QUARANTINED:]
        ledger.quarantined = dict(newest)
        ledger.alone = dict(sorted(ledger.alone.items(), key=lambda kv: str(kv[1].get("at", "")))[-MAX_ALONE:])
        ledger.killed = dict(sorted(ledger.killed.items(), key=lambda kv: str(kv[1].get("at", "")))[-MAX_ALONE:])
        if (
            ledger.suspects
            or ledger.quarantined
            or ledger.crashes
            or ledger.alone
            or ledger.lone
            or ledger.killed
            or ledger.kills
        ):
            data[self.fingerprint] = ledger.as_dict()
        data = dict(list(data.items())[-MAX_MODELS:])
        text = json.dumps(data, ensure_ascii=False)
        # Past MAX_LEDGER_BYTES the file is not read at all: the models used
        # before go first (this one is last), so this one's texts stay kept.
        while len(text.encode("utf-8")) > MAX_LEDGER_BYTES and len(data) > 1:
            del data[next(iter(data))]
            text = json.dumps(data, ensure_ascii=False)
        with contextlib.suppress(OSError):
            _write_json(self.ledger_path, text)

    def recover(self, pending: list[tuple[str, str, str]]) -> tuple[Ledger, int, int]:
        """Read what dead processes left: their texts become suspects (a
        text embedded alone is quarantined at once), and the ledger forgets
        texts no longer pending (edited, deleted, embedded). ``pending``:
        every text lacking a vector, as ``vectors.pending_texts`` lists them.
        Returns the ledger, how many crashes no text explains yet were found
        now, and how many texts embedded alone were quarantined now."""
        with self._lock:
            ledger = self.read()
            before = json.dumps(ledger.as_dict(), sort_keys=True)
            found = lone = 0
            dead = self._dead_batches()
            calls: dict[tuple, int] = {}
            for _, record in dead:
                if record is not None:
                    who = (record.get("pid"), record.get("start"))
                    calls[who] = calls.get(who, 0) + 1
            for path, record in dead:
                if record is not None and record.get("model") == self.fingerprint:
                    texts = record.get("texts")
                    names = [n for n in texts if isinstance(n, str)] if isinstance(texts, list) else []
                    if record.get("alone") and len(names) == 1:
                        # Alone in its call, and its process in no other call
                        # (a backlog's batch beside it could be what crashed).
                        if calls.get((record.get("pid"), record.get("start"))) != 1:
                            pass
                        elif self._killed(record) and names[0] not in ledger.killed:
                            ledger.killed[names[0]] = {"at": utc_now_iso()}  # given to the model again, once
                        else:
                            ledger.alone[names[0]] = {
                                "at": utc_now_iso(),
                                "detail": "llama.cpp crashed on it, embedded alone"
                                if names[0] not in ledger.killed
                                else TWICE + ", embedded alone",
                            }
                            ledger.killed.pop(names[0], None)
                            lone += 1
                    else:
                        if self._killed(record) and ledger.kills < KILL_LIMIT:
                            ledger.kills += 1  # its texts are still embedded apart: a crash may hide
                        else:
                            found += 1
                        for name in names:
                            if name not in ledger.quarantined:
                                ledger.suspects.setdefault(name, {"since": str(record.get("at", ""))})
                with contextlib.suppress(OSError):
                    os.unlink(path)
            self._sweep_fatal()
            ledger.crashes += found
            ledger.lone += lone
            alive = {key(k, h) for k, h, _ in pending}
            ledger.suspects = {k: v for k, v in ledger.suspects.items() if k in alive}
            ledger.quarantined = {k: v for k, v in ledger.quarantined.items() if k in alive}
            if json.dumps(ledger.as_dict(), sort_keys=True) != before:
                self.write(ledger)
            return ledger, found, lone

    def without_quarantined(
        self, pending: list[tuple[str, str, str]], ledger: Ledger | None = None
    ) -> list[tuple[str, str, str]]:
        """``pending`` but the texts this model crashed on alone."""
        ledger = ledger or self.read()
        if not ledger.quarantined and not ledger.alone:
            return pending
        return [p for p in pending if ledger.refused(key(p[0], p[1])) is None]

    def settle(self, outcome: dict[str, str | None], explained: bool, suspects: set[str] | None = None) -> None:
        """After suspects were embedded apart: ``outcome`` maps each one
        tried to None (it embedded fine) or how the model crashed on it
        alone (quarantined). ``explained``: the crashes found so far are
        accounted for (a culprit was found, or a batch went through), so
        their count starts again. ``suspects``: texts to embed apart too.
        Under the writer lock."""
        with self._lock:
            ledger = self.read()
            before = json.dumps(ledger.as_dict(), sort_keys=True)
            for name, crash in outcome.items():
                ledger.suspects.pop(name, None)
                if crash is not None:
                    ledger.quarantined[name] = {"at": utc_now_iso(), "detail": crash}
            for name in suspects or ():
                if ledger.refused(name) is None and name not in outcome:
                    ledger.suspects.setdefault(name, {"since": utc_now_iso()})
            if explained:
                ledger.crashes = ledger.lone = ledger.kills = 0
            if json.dumps(ledger.as_dict(), sort_keys=True) != before:
                self.write(ledger)


def forgive(con: apsw.Connection, index_path: str | os.PathLike) -> int:
    """Forget every quarantined and suspect text of every model, so that the
    next sync gives them to the model again (``marchdb model check``, after
    an upgrade of llama-cpp-python). Returns how many quarantined texts were
    forgiven."""
    from marchdb.index.db import set_meta, transaction
    from marchdb.index.locks import writer_lock

    guard = Sentinel(index_path, "")
    with writer_lock(index_path):
        data = guard._read_all()
        count = sum(len(v.get("quarantined") or {}) for v in data.values())
        if not data:
            return 0
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.lstat(guard.ledger_path).st_mode):
                os.unlink(guard.ledger_path)
        if count:
            with transaction(con):
                set_meta(con, "vectors_complete", None)  # they lack vectors: a sync must look again
    return count


def quarantined_memories(
    con: apsw.Connection, index_path: str | os.PathLike, fingerprint: str | None, only: set[str] | None = None
) -> list[dict]:
    """The memories whose texts the model ``fingerprint`` (None: the one
    the index holds vectors of) crashed on (``only``: of these texts):
    ``[{"path", "id", "kind", "detail"}]``, by path."""
    if fingerprint is None:
        row = con.execute("SELECT value FROM meta WHERE key = 'model_fingerprint'").fetchone()
        fingerprint = str(row[0]) if row and row[0] is not None else None
    if not fingerprint:
        return []
    ledger = Sentinel(index_path, fingerprint).read()
    out = []
    for name, info in {**ledger.alone, **ledger.quarantined}.items():
        if only is not None and name not in only:
            continue
        kind, _, h = name.partition(":")
        if kind not in ("meta", "chunk"):
            continue  # a message recalled: no memory's
        if kind == "meta":
            rows = con.execute("SELECT path, id FROM memory_index WHERE meta_hash = ?", (h,)).fetchall()
        else:
            rows = con.execute(
                "SELECT m.path, m.id FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE c.hash = ?", (h,)
            ).fetchall()
        for path, mem_id in rows:
            what = "its name and description" if kind == "meta" else "a passage of its text"
            out.append({"path": path, "id": mem_id, "kind": kind, "detail": f"{what}: {info.get('detail', '')}"})
    out.sort(key=lambda r: (r["path"], r["kind"]))
    return out


def problems(con: apsw.Connection, index_path: str | os.PathLike, fingerprint: str | None = None) -> list[dict]:
    """``doctor`` rows for the quarantined memories."""
    return [
        {
            "path": row["path"],
            "kind": "model_crashed_on",
            "detail": f"{row['id']}: {row['detail']}",
            "advice": "llama.cpp crashed on this memory's text, so it is no longer given to the model: it is "
            "still found by its keywords, not by meaning. Editing the memory tries its new text; after "
            "upgrading llama-cpp-python, `marchdb model check` tries them all again",
        }
        for row in quarantined_memories(con, index_path, fingerprint)
    ]


def summary(con: apsw.Connection, index_path: str | os.PathLike, fingerprint: str | None = None) -> str | None:
    """One line for ``status``: how many memories the model crashed on, or None."""
    rows = quarantined_memories(con, index_path, fingerprint)
    if not rows:
        return None
    ids = sorted({r["id"] for r in rows})
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return f"{len(ids)} memor{'y' if len(ids) == 1 else 'ies'} found by keywords only: the model crashed on {shown} (marchdb doctor)"


def _ledger(row: dict) -> Ledger:
    def table(name: str) -> dict:
        value = row.get(name)
        return {k: v for k, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}

    def count(name: str) -> int:
        value = row.get(name)
        return value if isinstance(value, int) else 0

    return Ledger(
        table("suspects"),
        table("quarantined"),
        count("crashes"),
        table("alone"),
        count("lone"),
        table("killed"),
        count("kills"),
    )


# -- a text embedded alone, in a process that must answer -------------------------

#: The ledgers this process read, by path: ``(the file's stat, its rows)``;
#: a message's check costs a ``stat`` while the file is unchanged.
_seen: dict[str, tuple[tuple, dict[str, dict]]] = {}


def _cached_ledger(guard: Sentinel) -> Ledger:
    path = guard.ledger_path
    try:
        st = os.lstat(path)
    except OSError:
        return Ledger()
    sig = (st.st_ino, st.st_size, st.st_mtime_ns)
    seen = _seen.get(path)
    if seen is None or seen[0] != sig:
        seen = (sig, guard._read_all())
        _seen[path] = seen
    return _ledger(seen[1].get(guard.fingerprint) or {})


def refusal(what: str, info: dict, instead: str = "matched by keywords only") -> str:
    """The line a person reads when ``what`` is not given to the model
    (``instead``: what is done without its vector)."""
    when = str(info.get("at", ""))[:16].replace("T", " ")
    how = (
        f"the process embedding {what} died twice before ({when}; killed, or a crash it could not report)"
        if str(info.get("detail", "")).startswith(TWICE)
        else f"llama.cpp crashed on {what} before ({when})"
    )
    return (
        f"{how}, so it is not given to the model again on this machine: {instead} "
        "(`marchdb model check` tries it again)"
    )


def embed_alone(index_path: str | os.PathLike, embedder, kind: str, text: str, run):
    """``(run(), None)``, ``run`` embedding ``text`` alone (a message, a
    save's probe) with its name (``key(kind, hash)``) on disk while it runs;
    or ``(None, info)`` without running it when the model (``embedder``, on
    this build and CPU) crashed on it before (``info``: when, how). The
    process does not survive such a crash: the next one to load the model
    quarantines the text (``recover``). Costs a ``stat`` and a small file
    written and removed."""
    from marchdb.vault.notes import text_hash

    guard = Sentinel(index_path, embedder.crash_key)
    name = key(kind, text_hash(text))
    ledger = _cached_ledger(guard)
    info = ledger.refused(name)
    if info is not None:
        return None, info
    with guard.inflight([(kind, name.partition(":")[2])], alone=True):
        result = run()
    if ledger.lone:
        _answered(guard)
    return result, None


def _answered(guard: Sentinel) -> None:
    """A text embedded alone went through: crashes on texts alone are no longer in a row."""
    from marchdb.index.locks import writer_lock

    with contextlib.suppress(OSError), writer_lock(guard.index_path), guard._lock:
        ledger = guard.read()
        if ledger.lone:  # batches' crashes no text explains are not explained by this one
            ledger.lone = 0
            guard.write(ledger)


def in_flight_of(index_path: str | os.PathLike, pid: int) -> list[dict]:
    """The records of the in-flight files that process ``pid`` left beside
    ``index_path``: what the model was embedding when it died (read by the
    command that ran it in a child, ``cli.guard``)."""
    folder, base = os.path.split(os.path.abspath(index_path))
    prefix = f"{base}{_INFLIGHT}{pid}."
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    records = []
    for name in names:
        if name.startswith(prefix) and _digits(name[len(prefix) :]):
            record = _read_json(os.path.join(folder, name), _MAX_RECORD_BYTES)
            if isinstance(record, dict) and _pid(record.get("pid")) == pid:
                records.append(record)
    return records


def _digits(text: str) -> bool:
    """Whether ``text`` is a number as this module writes it (``str.isdigit``
    also takes ``²`` and other scripts' digits, which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def _pid(value: object) -> int:
    """``value`` as a process id, or 0 when it cannot be one (a file cut
    short or planted: ``os.kill`` overflows past a C int)."""
    return value if type(value) is int and 0 < value < 2**31 else 0


def _read_json(path: str, limit: int):
    """The JSON at ``path``, or None for anything but a regular file of at
    most ``limit`` bytes holding JSON (a folder, a FIFO, a file cut short,
    arrays nested past the parser's recursion limit)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)  # a folder cannot even be wrapped in a file object
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _write_json(path: str, text: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise OSError(errno.EEXIST, "not a regular file", path)  # not ours to replace
    import tempfile  # only when a ledger is written: a hook's keyword answer skips its import

    folder = str(Path(path).parent)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{Path(path).name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
