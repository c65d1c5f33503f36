"""A model is proven on this machine, in a child process, before it runs in ours.

llama.cpp is native code: on some CPUs, with some builds, it dies of a signal
(SIGSEGV in its AMX kernels on Sapphire Rapids-class Xeons, for one), and a
crash inside our process takes the command, the save, the MCP server or the
engine down with it. So the first time a model is used with a given llama.cpp
build on a given CPU, a child process loads it and embeds a few probe texts.
Its verdict is kept in ``native-checks.json`` in the models folder:

* the child answers and its vectors make sense: the model is **usable**, with
  the extra-buffer setting the child used (``cpu.py``);
* it dies of a signal, hangs, or gives nonsense with llama.cpp's extra
  buffers on: it is tried once more with them off, and that is remembered;
* it fails that way with them off too: the model is **unusable on this
  machine**. Loading it raises ``ModelUnusable``, a ``ModelError`` that says
  in one line which model, which signal and what to do; every command goes
  on with keyword (BM25) recall, a save writes its file and leaves its
  vectors pending, and ``status`` / ``doctor`` show the verdict.

The verdict is keyed by the model file's fingerprint, the llama.cpp build's
files, the CPU's model and flags, ``LD_PRELOAD`` and the extra-buffer
override: change any of them (upgrade llama-cpp-python, move the home to
another machine) and the model is proven again. ``marchdb model check``
proves it again on demand.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from marchdb.clock import utc_now_iso
from marchdb.embedding import cpu
from marchdb.errors import ModelUnusable
from marchdb.private import make_private_dirs, open_private

#: The verdicts, in the models folder.
VERDICTS_FILE = "native-checks.json"
_LOCK_FILE = ".native-checks.lock"
#: A verdicts file larger than this is not read (it holds a few dozen lines).
MAX_VERDICTS_BYTES = 256 * 1024
#: Verdicts kept (the newest): one per model, build and CPU seen.
MAX_VERDICTS = 64
#: Seconds a child may take to load the model and embed the probes: seconds
#: on an idle machine, tens on a loaded one; past it, it is taken as hung.
PROBE_TIMEOUT = 180.0
#: Exit code of a child that met an ordinary ModelError (a broken file): not
#: a verdict on the machine, the parent's own load will say why.
EXIT_MODEL_ERROR = 3

PROBE_PASSAGES = (
    "To reset your password, open Settings, choose Account and click 'Forgot password'.",
    "The Amazon rainforest is home to millions of insect species.",
    "要重置密码，请打开设置，选择账户，然后点击“忘记密码”。",
)
PROBE_QUERY = "How do I reset my password?"
# A passage of about 300 tokens: a batch as large as a memory's body makes
# (kernels may tile large batches differently from a short query).
PROBE_LONG = " ".join(f"Deploy step {i}: check the logs, run the migrations, restart the workers." for i in range(14))
#: The related pair must beat the unrelated one by this much (e5 squeezes
#: cosines into 0.7-0.95; any working model clears it widely).
PROBE_MARGIN = 0.02


@dataclass
class Verdict:
    """What the child process found: ``usable``, the extra-buffer ``mode``
    it proved (``auto``: llama.cpp's choice for this CPU, ``cpu.py``;
    ``off``: none), what happened in words (``detail``) and when."""

    usable: bool
    mode: str
    detail: str
    model: str = ""
    cpu: str = ""
    checked_at: str = field(default_factory=utc_now_iso)
    attempts: list[str] = field(default_factory=list)
    #: The model file's name, for people (``model`` is its fingerprint).
    name: str = ""

    @property
    def extra_buffers(self) -> bool | None:
        """What ``LlamaEmbedder(extra_buffers=...)`` is given: None for llama.cpp's own choice."""
        return None if self.mode == "auto" else self.mode == "on"

    def message(self) -> str:
        """The one line a user reads when the model is not used."""
        return (
            f"the embedding model {self.name or self.model} cannot run on this machine ({self.detail}; "
            f"CPU: {self.cpu}): recall uses keywords only and new vectors wait; after upgrading "
            f"llama-cpp-python or setting {cpu.OVERRIDE_ENV}, `marchdb model check` tries it again"
        )

    def summary(self) -> str:
        """One line for ``status``."""
        state = "usable" if self.usable else "UNUSABLE"
        return f"{state} on this CPU (checked {self.checked_at[:10]}): {self.detail}"


@dataclass
class _Outcome:
    """One child's run: ``kind`` is ``ok``, ``crash`` (a signal), ``wrong``
    (nonsense vectors), ``hung``, ``failed`` (another exit) or ``error`` (an
    ordinary model error: a broken file, which the parent's own load tells)."""

    kind: str
    detail: str
    extra_used: bool | None = None


#: Verdicts this process has read or made, by key: the machine, the build
#: and the model do not change under a running process.
_memo: dict[str, Verdict] = {}


def _llama_build_id() -> str:
    """The llama.cpp build llama-cpp-python carries: its native libraries'
    names, sizes and modification times (a reinstall or rebuild changes them),
    found without importing it."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return "none"
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    parts = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(lib), key=lambda e: e.name):
            if entry.name.endswith((".so", ".dylib", ".dll")) and entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                parts.append(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16] if parts else "none"


def _model_id(path: Path) -> str:
    from marchdb.embedding import identity

    name = identity.fingerprint_of(path)
    if name:
        return name
    st = path.stat()
    return f"{path.name}-{st.st_size}-{st.st_mtime_ns}"


def verdict_key(path: Path, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(key, model id)`` for the model at ``path`` on this machine, with
    this llama.cpp build and this environment."""
    env = os.environ if env is None else env
    model = _model_id(path)
    parts = [
        model,
        _llama_build_id(),
        cpu.read_cpu().fingerprint(),
        env.get("LD_PRELOAD", ""),
        env.get(cpu.OVERRIDE_ENV, "").strip().lower(),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24], model


def _read_all(folder: Path) -> dict[str, dict]:
    try:
        fd = open_private(folder / VERDICTS_FILE, os.O_RDONLY)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_VERDICTS_BYTES + 1)
    if len(raw) > MAX_VERDICTS_BYTES:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _from_row(row: dict) -> Verdict | None:
    try:
        return Verdict(
            usable=bool(row["usable"]),
            mode=str(row["mode"]),
            detail=str(row.get("detail", "")),
            model=str(row.get("model", "")),
            cpu=str(row.get("cpu", "")),
            checked_at=str(row.get("checked_at", "")),
            attempts=[str(a) for a in row.get("attempts", [])],
            name=str(row.get("name", "")),
        )
    except (KeyError, TypeError):
        return None


def _write_all(folder: Path, data: dict[str, dict]) -> None:
    target = folder / VERDICTS_FILE
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(target).st_mode):
            # A link or anything else in its place is not ours to replace.
            raise OSError(errno.EEXIST, "not a regular file", str(target))
    newest = sorted(data.items(), key=lambda kv: str(kv[1].get("checked_at", "")))[-MAX_VERDICTS:]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{VERDICTS_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(dict(newest), fh, ensure_ascii=False, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = open_private(folder / _LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def raise_if_unusable(verdict: Verdict) -> Verdict:
    """``verdict``, or ``ModelUnusable`` when it says the model must not run here."""
    return _usable(verdict)


def known_verdict(folder: Path, path: Path) -> Verdict | None:
    """The remembered verdict for the model at ``path`` here, or None (never proves)."""
    key, _model = verdict_key(path)
    if key in _memo:
        return _memo[key]
    row = _read_all(folder).get(key)
    return _from_row(row) if row else None


def ensure_proven(folder: Path, path: Path, force: bool = False, say=None) -> Verdict | None:
    """The verdict for the model at ``path`` on this machine, proving it in a
    child process first when there is none (or ``force``). ``say(line)``
    tells a person what is happening (a probe takes seconds). Raises
    ``ModelUnusable`` when the model must not be loaded here; None when it
    could not be proven for an ordinary reason (a broken file: the caller's
    own load says why), which is not remembered."""
    key, model = verdict_key(path)
    verdict = None if force else _memo.get(key)
    if verdict is not None:
        return _usable(verdict)
    keep = True
    try:
        make_private_dirs(folder)
        with _locked(folder):
            row = None if force else _read_all(folder).get(key)
            verdict = _from_row(row) if row else None
            if verdict is None:
                if say is not None:
                    say(f"marchdb: checking that llama.cpp runs {path.name} on this CPU, in a separate process...")
                verdict, keep = _prove(path, model)
                if verdict is None:
                    return None
                if say is not None and verdict.usable and len(verdict.attempts) > 1:
                    say(f"marchdb: {verdict.attempts[0]}; the model runs with them off")
                if keep:
                    data = _read_all(folder)
                    data[key] = asdict(verdict)
                    _write_all(folder, data)
    except OSError as exc:
        # A read-only or full models folder: proven for this process only.
        if say is not None:
            say(f"marchdb: cannot keep the model check in {folder} ({exc.strerror}); it runs again next time")
        verdict, keep = _prove(path, model)
        if verdict is None:
            return None
    if keep:
        _memo[key] = verdict
    return _usable(verdict)


def condemn(folder: Path | None, path: Path, detail: str) -> Verdict:
    """Remember that the model at ``path`` is unusable on this machine,
    though its check passed: it kept crashing on real texts mid-run
    (``index.sentinel``). Kept in ``folder`` when given and writable, and for
    this process in any case; ``marchdb model check`` proves it again."""
    key, model = verdict_key(path)
    the_cpu = cpu.read_cpu()
    verdict = Verdict(
        False, "off", detail, model=model, cpu=f"{the_cpu.model}, {the_cpu.simd()}", attempts=[detail], name=path.name
    )
    _memo[key] = verdict
    if folder is not None:
        with contextlib.suppress(OSError):
            make_private_dirs(folder)
            with _locked(folder):
                data = _read_all(folder)
                data[key] = asdict(verdict)
                _write_all(folder, data)
    return verdict


def _usable(verdict: Verdict) -> Verdict:
    if not verdict.usable:
        raise ModelUnusable(verdict.message())
    return verdict


def _prove(path: Path, model: str) -> tuple[Verdict | None, bool]:
    """Run the child with llama.cpp's own choice of buffers, then, if that
    crashes or gives nonsense, with the extra buffers off. Returns the
    verdict (None: an ordinary model error) and whether it may be kept (a
    hang may be the machine's load of the moment)."""
    attempts: list[str] = []
    the_cpu = cpu.read_cpu()
    cpu_words = f"{the_cpu.model}, {the_cpu.simd()}"
    last: _Outcome | None = None
    for mode in ("auto", "off"):
        outcome = _run_child(path, mode)
        if outcome.kind == "error":
            return None, False
        attempts.append(f"extra buffers {mode}: {outcome.detail}")
        if outcome.kind == "ok":
            verdict = Verdict(True, mode, outcome.detail, model=model, cpu=cpu_words, attempts=attempts, name=path.name)
            return verdict, True
        last = outcome
        if mode == "auto" and outcome.extra_used is False:
            break  # auto already ran without extra buffers: nothing else to try
    assert last is not None
    verdict = Verdict(False, "off", last.detail, model=model, cpu=cpu_words, attempts=attempts, name=path.name)
    return verdict, last.kind != "hung"


def _child_command(path: Path, mode: str) -> list[str]:
    # -I: the child must not import from the current folder or PYTHONPATH (a
    # hook runs in the host's project folder); marchdb's own path is passed.
    paths = [p for p in sys.path if p and os.path.isabs(p)]
    boot = (
        "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
        "from marchdb.embedding.children import check_main; check_main(sys.argv[2:])"
    )
    return [sys.executable, "-I", "-c", boot, json.dumps(paths), str(path), mode]


def _run_child(path: Path, mode: str) -> _Outcome:
    started = time.monotonic()
    try:
        proc = subprocess.run(
            _child_command(path, mode),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _Outcome("hung", f"llama.cpp did not finish embedding in {PROBE_TIMEOUT:.0f} s")
    except OSError as exc:
        return _Outcome("error", f"cannot start {sys.executable}: {exc.strerror}")
    replies = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError):
            reply = json.loads(line)
            if isinstance(reply, dict):
                replies.append(reply)
    extra = replies[0].get("extra_buffers") if replies else None
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        stage = "while embedding" if replies else "while loading the model"
        return _Outcome("crash", f"llama.cpp crashed with {name} {stage}", extra)
    if proc.returncode == EXIT_MODEL_ERROR:
        return _Outcome("error", str(replies[-1].get("why", "")) if replies else "")
    answer = replies[-1] if replies else None
    if proc.returncode != 0 or answer is None or "ok" not in answer:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return _Outcome("failed", f"the check process failed with exit code {proc.returncode}: {tail[0][:200]}", extra)
    if not answer["ok"]:
        return _Outcome("wrong", str(answer.get("why", "the vectors make no sense")), extra)
    seconds = time.monotonic() - started
    return _Outcome("ok", f"proven in {seconds:.1f} s, {answer.get('reason', '')}", extra)
