"""Shared fixtures: a real vault folder, a real home, a real SQLite index, the real model.

Tests that use the default model (``default_model_path``, ``default_embedder``,
``model_cfg``, ``model_store``) are marked ``model`` automatically, so
``pytest -m "not model"`` runs the fast subset. The model is built once per
session (about a second) into ``MARCHDB_TEST_MODEL_DIR`` when set, which
lets CI keep it between runs, else into the session's temp dir.
"""

from __future__ import annotations

import functools
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import typer.testing

from marchdb.config import load_config
from marchdb.embedding import Embedder

# Bytecode is kept, as a user's Python keeps it: with PYTHONDONTWRITEBYTECODE set
# (some sandboxes set it), each pytest-xdist worker rewrote and compiled every
# test module at every run, and each of the marchdb processes the tests start
# compiled marchdb's modules again (tools/bench_hosts.py keeps it for the same
# reason). __pycache__ is in .gitignore.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# typer's CliRunner builds the app's click command afresh on every invoke: ~20 ms
# of reading every command's signature and type hints, ~290 times in the fast
# subset (5-6 s of CPU). The command depends on the app alone (each invoke gets
# its own click context), so it is built once per app, as a click app's tests do.
if hasattr(typer.testing, "_get_command"):
    typer.testing._get_command = functools.cache(typer.testing._get_command)


class Vault:
    """A memory root in ``tmp_path`` with helpers to write real files."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, text: str | bytes) -> Path:
        """Write a file (text is dedented) and return its path."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def memory(
        self,
        rel: str,
        mem_id: str,
        name: str = "A memory",
        description: str | None = "what it is about",
        tags: list[str] | None = None,
        body: str = "Body text.",
        status: str = "active",
    ) -> Path:
        """Write a well-formed memory file."""
        lines = ["---", f"id: {mem_id}", f"name: {name}"]
        if description is not None:
            lines.append(f"description: {description}")
        lines.append("tags:")
        lines += [f"  - {t}" for t in (tags or ["test"])]
        lines += [f"status: {status}", "created_at: 2026-05-14T10:30:00.000Z", "---", "", body, ""]
        return self.write(rel, "\n".join(lines))


#: Settings a developer's shell may carry that would point a test's processes at another
#: vault, model or threshold (MARCH_HOME stays: unset, it means ~/.march).
INHERITED_SETTINGS = (
    "MARCH_MEMORY_ROOT",
    "MARCH_MODELS_DIR",
    "MARCH_EMBED_MODEL",
    "MARCH_MEMORY_RECALL_MIN_SCORE",
    "MARCH_THREADS",
    "MARCH_ALLOW_UNUSUAL_ROOT",
)


#: Where hosts keep their settings: a test that installs hooks must never reach the real ones.
HOST_SETTINGS = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "HERMES_HOME", "CLINE_DIR", "XDG_CONFIG_HOME")


@pytest.fixture(autouse=True)
def _no_engine_unless_asked(monkeypatch, tmp_path_factory):
    """No test starts a warm engine (``marchdb serve``) behind its back; the
    tests of the engine turn this off for the processes they start. Nor does
    a setting from the shell that ran pytest reach a test, nor does a test
    reach the real home: HOME is a folder of its own (``~/.claude``,
    ``~/.cursor``... of whoever runs the tests stay untouched)."""
    monkeypatch.setenv("MARCH_DAEMON", "0")
    for name in INHERITED_SETTINGS + HOST_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("user-home")))


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    """An empty vault folder."""
    return Vault(tmp_path / "vault")


@pytest.fixture
def cfg(tmp_path: Path, vault: Vault):
    """A configuration pointing at ``vault`` with a throwaway home and no
    model: a recall is BM25 only, announced (with the default recipe a
    first recall built and loaded the model, ~13 s, in a test of the fast
    subset; tests of the model use ``model_cfg``)."""
    return load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "no-model.gguf"), env={})


@pytest.fixture
def store(cfg):
    """A Store on the test vault; embedding is off unless a test asks."""
    from marchdb.store import Store

    s = Store(cfg)
    yield s
    s.close()


@pytest.fixture
def model_cfg(tmp_path: Path, vault: Vault, default_model_path: Path):
    """A configuration using the real default model."""
    # The models folder of the run: the model's check on this CPU (nativecheck) is made once there.
    env = {"MARCH_MODELS_DIR": str(default_model_path.parent)}
    return load_config(home=tmp_path / "home", root=vault.root, model=str(default_model_path), env=env)


@pytest.fixture
def model_store(model_cfg):
    """A Store with the real default model."""
    from marchdb.store import Store

    s = Store(model_cfg)
    yield s
    s.close()


MIXED_MEMORIES = [
    (
        "mem_cache",
        "Context cache ordering",
        "Put volatile layers after the large stable context, or the prefix cache is invalidated",
        ["cache", "architecture"],
        "Moving the recall block in front of the system prompt made every request miss the prefix cache.",
    ),
    (
        "mem_db",
        "数据库凭据轮换",
        "数据库密码保存在保险库里，每月用运维脚本轮换一次",
        ["运维", "安全"],
        "每月第一个周一运行轮换脚本，脚本会更新保险库中的密码并滚动重启服务。",
    ),
    (
        "mem_review",
        "Code review style",
        "The user wants short review comments, one issue per comment, each with a fix",
        ["preferences", "review"],
        "Keep review comments short. One issue per comment. Always suggest a concrete fix.",
    ),
    (
        "mem_hike",
        "周末爬山路线",
        "香山适合半天往返，凤凰岭适合全天徒步",
        ["户外"],
        "香山：地铁到北宫门，半天往返。凤凰岭：早上出发，全天徒步，带足水。",
    ),
    (
        "mem_dog",
        "Dog's medication",
        "Biscuit takes half a carprofen tablet with breakfast for joint pain",
        ["pets", "health"],
        "The vet prescribed carprofen in March. Half a tablet with breakfast.",
    ),
]


@pytest.fixture
def mixed_vault(vault: Vault) -> Vault:
    """A few real memories in English and Chinese."""
    for mem_id, name, desc, tags, body in MIXED_MEMORIES:
        vault.memory(f"2026/05/week2/{mem_id}.md", mem_id, name=name, description=desc, tags=tags, body=body)
    return vault


class TinyEmbedder(Embedder):
    """A deterministic embedder, for tests of vector bookkeeping and
    arithmetic only (user-facing tests use the real model)."""

    def __init__(self, fingerprint: str = "tiny-test", dim: int = 4):
        self.fingerprint, self.dim = fingerprint, dim

    def _vectors(self, texts):
        import hashlib

        import numpy as np

        rows = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            v = np.frombuffer(digest[: self.dim * 4], dtype=np.uint32).astype(np.float32) / 2**32 - 0.5
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32)

    def embed(self, texts, kind, progress=None):
        return self._vectors(texts)


def model_command_env(home: Path, root: Path, model: Path) -> dict:
    """The environment of a marchdb command that embeds with ``model`` in its
    own process (no engine), for the vault ``root`` and the home ``home``."""
    return {
        **os.environ,
        "MARCH_HOME": str(home),
        "MARCH_MEMORY_ROOT": str(root),
        "MARCH_EMBED_MODEL": str(model),
        "MARCH_MODELS_DIR": str(model.parent),
        "MARCH_DAEMON": "0",
    }


def wait_idle(watcher, timeout: float = 30.0) -> bool:
    """Block until ``watcher`` has applied every change it has seen (False
    when ``timeout`` seconds pass first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watcher.idle:
            return True
        time.sleep(0.02)
    return False


# ---------------------------------------------------------------- the real model

MODEL_FIXTURES = {"default_model_path", "default_embedder", "model_cfg", "model_store"}


def pytest_collection_modifyitems(items):
    """Mark every test that loads the real model ``model``."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


def model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder where test models are built and cached: one for the whole run,
    shared by pytest-xdist's workers (``MARCHDB_TEST_MODEL_DIR`` keeps it
    across runs)."""
    env = os.environ.get("MARCHDB_TEST_MODEL_DIR")
    if env:
        return Path(env)
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "models"


@pytest.fixture(scope="session")
def default_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the default (e5) GGUF, built once per run: the first worker
    builds it, the others wait on the folder's lock and find it built."""
    import fcntl

    from marchdb.embedding import nativecheck
    from marchdb.embedding.build import build_model
    from marchdb.embedding.recipes import DEFAULT_RECIPE

    folder = model_cache_dir(tmp_path_factory)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = build_model(DEFAULT_RECIPE, folder)
    # Checked on this CPU once, here, as a user's first use does: the tests that
    # point MARCH_MODELS_DIR at this folder find the verdict instead of paying
    # for the check wherever it falls (an engine's first start, a hook's wait).
    nativecheck.ensure_proven(folder, path)
    return path


@pytest.fixture(scope="session")
def dictionary_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zh/en dictionary's file (``bridge``, as a home's ``cache/`` holds
    it), made once per run like the model: the first worker builds it, the
    others wait on the lock and find it made. Only test_bridge.py's tests
    of the cache build one of their own."""
    import fcntl

    from marchdb import bridge

    folder = model_cache_dir(tmp_path_factory) / "dictionary"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / bridge._cache_name()
    with open(folder / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        con = bridge._open_cache(path)
        if con is None:
            bridge._write_cache(path)
        else:
            con.close()
    return path


@pytest.fixture
def dictionary(dictionary_file: Path):
    """This process's dictionary (``bridge.load``, opened once per process),
    opened from ``dictionary_file`` unless the process has one open already:
    a store's first recall across scripts then opens it instead of building one."""
    from marchdb import bridge

    return bridge.load(dictionary_file.parent)


@pytest.fixture(scope="session")
def default_embedder(default_model_path: Path):
    """A LlamaEmbedder on the default model, shared by the whole session (2 threads, as on CI)."""
    from marchdb.embedding.llama import LlamaEmbedder

    with LlamaEmbedder(default_model_path, threads=2) as embedder:
        yield embedder
