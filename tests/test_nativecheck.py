"""A native crash in llama.cpp costs a warning, never the command.

The crash is real, on any CPU: a tiny shared library given by ``LD_PRELOAD``
defines ``ggml_backend_sched_graph_compute_async`` (which libllama calls
through its PLT at every embedding) as a ``raise(SIGSEGV)``. Without the
child-process check, `marchdb recall` died of it with exit 139; with it,
every command that would embed says one line, answers with keyword recall
and exits 0."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from marchdb.embedding import nativecheck

MARCHDB = str(Path(sys.executable).with_name("marchdb"))
CRASH_C = """
#include <signal.h>
int ggml_backend_sched_graph_compute_async(void *sched, void *graph) { raise(SIGSEGV); return 0; }
"""


@pytest.fixture(scope="session")
def crash_library(tmp_path_factory) -> Path:
    """A shared library that makes llama.cpp's graph computation die of SIGSEGV."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the crashing library (apt-get install gcc)")
    folder = tmp_path_factory.mktemp("crash")
    (folder / "crash.c").write_text(CRASH_C, encoding="utf-8")
    lib = folder / "libcrash.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(lib), str(folder / "crash.c")], check=True)
    return lib


@pytest.fixture
def crashing(tmp_path, mixed_vault, default_model_path, crash_library):
    """The environment of a user whose llama.cpp crashes at every embedding,
    with an indexed vault (keyword side) and the real default model."""
    env = {
        **os.environ,
        "MARCH_HOME": str(tmp_path / "home"),
        "MARCH_MEMORY_ROOT": str(mixed_vault.root),
        "MARCH_EMBED_MODEL": str(default_model_path),
        "LD_PRELOAD": str(crash_library),
        "MARCH_DAEMON": "0",
    }
    env.pop("MARCH_MODELS_DIR", None)
    return env


def run(env: dict, *args: str, stdin: str = "", timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([MARCHDB, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def _one_warning(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if "cannot run on this machine" in line]
    assert len(lines) == 1, result.stderr
    assert "SIGSEGV" in lines[0] and "multilingual-e5-small" in lines[0] and "model check" in lines[0]


def test_the_library_really_crashes_llama_cpp(crash_library, default_model_path):
    # What every command did before: the same embedding in this process dies of the signal.
    code = (
        "import sys; from marchdb.embedding.llama import LlamaEmbedder; "
        "LlamaEmbedder(sys.argv[1], threads=1).embed(['hello'], 'query')"
    )
    env = {**os.environ, "LD_PRELOAD": str(crash_library)}
    proc = subprocess.run([sys.executable, "-c", code, str(default_model_path)], env=env, capture_output=True)
    assert proc.returncode == -signal.SIGSEGV


def test_recall_save_sync_and_context_answer_with_keywords(crashing, tmp_path):
    recall = run(crashing, "recall", "Biscuit carprofen tablet breakfast")
    _one_warning(recall)
    assert recall.stdout.startswith("[recall]\n- mem_dog |")
    answer = json.loads(run(crashing, "recall", "Biscuit carprofen tablet breakfast", "--json").stdout)
    assert answer["mode"] == "bm25" and answer["hints"][0]["id"] == "mem_dog"
    assert "SIGSEGV" in answer["warning"]
    # The verdict is kept: the next command does not try again, and says the same.
    verdicts = json.loads((tmp_path / "home" / "models" / nativecheck.VERDICTS_FILE).read_text())
    assert [v["usable"] for v in verdicts.values()] == [False]
    # auto, then extra buffers off where auto had them on (on an AMX CPU auto is already off)
    attempts = verdicts[next(iter(verdicts))]["attempts"]
    assert 1 <= len(attempts) <= 2 and all("SIGSEGV" in a for a in attempts)

    save = run(
        crashing,
        "save",
        "--name",
        "Deploy day",
        "--description",
        "We deploy on Tuesdays, never on Fridays",
        "--tag",
        "process",
        "--body",
        "Friday deploys broke the weekend twice.",
        "--json",
    )
    assert save.returncode == 0, save.stderr
    saved = json.loads(save.stdout)
    assert Path(saved["path"]).is_file()

    sync = run(crashing, "sync")
    assert sync.returncode == 0, sync.stderr
    assert "cannot run on this machine" in sync.stderr

    context = run(crashing, "context", "when do we deploy?")
    assert context.returncode == 0, context.stderr
    assert saved["id"] in context.stdout

    status = json.loads(run(crashing, "status", "--json").stdout)
    assert status["model_check"].startswith("UNUSABLE") and "SIGSEGV" in status["model_check"]
    doctor = json.loads(run(crashing, "doctor", "--json").stdout)
    assert [p["kind"] for p in doctor["problems"] if p["kind"] == "model_unusable"] == ["model_unusable"]


def test_without_the_crash_the_model_is_proven_again_and_used(crashing, tmp_path):
    assert run(crashing, "recall", "Biscuit carprofen").returncode == 0
    healthy = {k: v for k, v in crashing.items() if k != "LD_PRELOAD"}
    recall = run(healthy, "recall", "what does the dog take for its joints?", "--json")
    assert recall.returncode == 0, recall.stderr
    assert "cannot run" not in recall.stderr
    answer = json.loads(recall.stdout)
    assert answer["mode"] != "bm25" and answer["hints"][0]["id"] == "mem_dog"
    status = json.loads(run(healthy, "status", "--json").stdout)
    assert status["model_check"].startswith("usable")
    # model check proves it again on demand, and says what it found on this CPU
    check = run(healthy, "model", "check")
    assert check.returncode == 0 and "this CPU: usable" in check.stdout


def test_model_check_fails_plainly_under_the_crash(crashing):
    check = run(crashing, "model", "check")
    assert check.returncode == 4
    assert "SIGSEGV" in check.stderr and "Traceback" not in check.stderr


def test_the_engine_and_a_hook_go_on_with_keywords(crashing, tmp_path):
    env = {k: v for k, v in crashing.items() if k != "MARCH_DAEMON"}
    home = tmp_path / "home"
    try:
        recall = run(env, "recall", "Biscuit carprofen tablet breakfast", "--json")
        assert recall.returncode == 0, recall.stderr
        assert json.loads(recall.stdout)["hints"][0]["id"] == "mem_dog"
        from marchdb.engine import client

        assert client.wait_ready(home, 120), (home / "logs" / "daemon.log").read_text()
        status = json.loads(run(env, "serve", "--status", "--json").stdout)
        assert "cannot run on this machine" in status["model"]
        event = {
            "session_id": "s1",
            "hook_event_name": "UserPromptSubmit",
            "prompt": "does Biscuit still take carprofen with breakfast?",
            "cwd": str(tmp_path),
        }
        hooked = run(env, "hook", "claude-code", stdin=json.dumps(event), timeout=60)
        assert hooked.returncode == 0, hooked.stderr
        assert "mem_dog" in hooked.stdout
    finally:
        from marchdb.engine import daemon

        daemon.stop(home)


def test_the_mcp_server_answers_with_keywords(crashing):
    import asyncio

    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=MARCHDB, args=["mcp"], env=crashing)

    async def session():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            result = await s.call_tool("memory_recall", {"text": "Biscuit carprofen tablet breakfast"})
            return result.is_error, "".join(getattr(c, "text", "") for c in result.content)

    is_error, text = asyncio.run(asyncio.wait_for(session(), timeout=240))
    assert not is_error, text
    assert "mem_dog" in text


def test_a_broken_verdicts_file_is_proven_again(tmp_path, default_model_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / nativecheck.VERDICTS_FILE).write_text("{not json", encoding="utf-8")
    assert nativecheck._read_all(folder) == {}
    verdict = nativecheck.ensure_proven(folder, default_model_path, force=True)
    assert verdict is not None and verdict.usable
    kept = json.loads((folder / nativecheck.VERDICTS_FILE).read_text())
    assert len(kept) == 1


def test_a_linked_verdicts_file_is_never_followed(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text('{"k": {"usable": false, "mode": "off", "detail": "planted"}}', encoding="utf-8")
    (folder / nativecheck.VERDICTS_FILE).symlink_to(target)
    assert nativecheck._read_all(folder) == {}
    with pytest.raises(OSError):
        nativecheck._write_all(folder, {})
    assert (folder / nativecheck.VERDICTS_FILE).is_symlink() and "planted" in target.read_text()


def test_a_first_command_says_what_it_is_doing_whatever_its_output_is(tmp_path, default_model_path):
    # A new home: the model is built and checked (seconds). With stdout and stderr
    # both pipes, as in a script or a host's shell tool, the person still learns why it waits.
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_DAEMON": "0"}
    for name in ("MARCH_EMBED_MODEL", "MARCH_MODELS_DIR", "MARCH_MEMORY_ROOT", "LD_PRELOAD"):
        env.pop(name, None)
    (tmp_path / "home" / "March Memories").mkdir(parents=True)
    saved = run(env, "remember", "We deploy on Tuesdays, never on Fridays")
    assert saved.returncode == 0, saved.stderr
    assert "marchdb: building the embedding model e5" in saved.stderr
    assert "marchdb: checking that llama.cpp runs" in saved.stderr
    again = run(env, "recall", "when do we deploy?")
    assert again.returncode == 0 and "marchdb:" not in again.stderr  # said once, not at every command
