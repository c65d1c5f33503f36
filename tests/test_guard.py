"""The ``marchdb`` command runs in a child of the process the caller started (``cli.guard``).

These tests run the guard in real processes, with real signals: the child
does what a command would (leave the in-flight file the crash sentinel
writes while the model embeds, read stdin, exit, die of a signal), and the
parent is watched from outside. The crash of llama.cpp itself is real in
``test_sentinel`` and ``test_sentinel_queries``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def guarded(tmp_path: Path, command: str, then: str) -> list[str]:
    """A Python command line running ``guard`` for ``marchdb COMMAND``, then ``then`` in whichever
    process the command runs in (the child, and the parent when it runs it once more)."""
    code = (
        "import json, os, signal, sys, time\n"
        "from marchdb.cli import guard\n"
        f"guard.guard({{}}, [{command!r}])\n"
        f"open({str(tmp_path / 'runs')!r}, 'a').write('x')\n"
        "def in_flight(alone):\n"
        f"    name = os.path.join({str(tmp_path / 'home')!r}, f'index.sqlite.embedding.{{os.getpid()}}.0')\n"
        "    with open(name, 'w') as fh: json.dump({'pid': os.getpid(), 'texts': ['query:00'], 'alone': alone}, fh)\n"
        f"{then}\n"
    )
    return [sys.executable, "-c", code]


@pytest.fixture
def env(tmp_path):
    (tmp_path / "home").mkdir()
    return {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(tmp_path)}


def runs(tmp_path: Path) -> int:
    return len((tmp_path / "runs").read_text())


def test_the_child_s_exit_code_is_the_command_s(tmp_path, env):
    proc = subprocess.run(guarded(tmp_path, "status", "sys.exit(7)"), env=env, capture_output=True, timeout=60)
    assert proc.returncode == 7 and runs(tmp_path) == 1


def test_a_crash_while_the_model_embeds_runs_the_command_once_more(tmp_path, env):
    # The second run crashes too (this stand-in has no sentinel to put the text aside): it is the last.
    then = "in_flight(True); os.kill(os.getpid(), signal.SIGSEGV)"
    proc = subprocess.run(guarded(tmp_path, "recall", then), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGSEGV
    assert "llama.cpp crashed (SIGSEGV) on a text this command gave the model" in proc.stderr
    assert runs(tmp_path) == 2


def test_a_command_that_read_its_stdin_from_a_pipe_is_not_run_again(tmp_path, env):
    then = "guard.stdin_taken(); sys.stdin.read(); in_flight(True); os.kill(os.getpid(), signal.SIGSEGV)"
    proc = subprocess.run(
        guarded(tmp_path, "save", then), env=env, input="a body", capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 4, proc.stderr
    assert "before it wrote anything; run it again" in proc.stderr and runs(tmp_path) == 1


def test_stdin_from_a_file_is_read_again_from_where_it_stood(tmp_path, env):
    body = tmp_path / "body.txt"
    body.write_text("skipped|the body", encoding="utf-8")
    then = (
        "guard.stdin_taken(); seen = sys.stdin.read()\n"
        f"open({str(tmp_path / 'seen')!r}, 'a').write(seen + '\\n')\n"
        f"if len(open({str(tmp_path / 'runs')!r}).read()) == 1:\n"
        "    in_flight(True); os.kill(os.getpid(), signal.SIGSEGV)"
    )
    with open(body, "rb", buffering=0) as stdin:
        stdin.read(len("skipped|"))
        proc = subprocess.run(guarded(tmp_path, "save", then), env=env, stdin=stdin, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "seen").read_text() == "the body\nthe body\n"


def test_a_write_whose_own_vectors_crash_is_not_done_twice(tmp_path, env):
    then = "in_flight(False); os.kill(os.getpid(), signal.SIGSEGV)"
    proc = subprocess.run(guarded(tmp_path, "log", then), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4 and runs(tmp_path) == 1
    assert "while this command embedded what it had written: that is kept" in proc.stderr


def test_a_batch_of_a_command_that_writes_nothing_is_run_again(tmp_path, env):
    then = "in_flight(False); os.kill(os.getpid(), signal.SIGBUS)"
    proc = subprocess.run(guarded(tmp_path, "sync", then), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGBUS and runs(tmp_path) == 2
    assert "crashed (SIGBUS) while this command embedded a batch of texts" in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1])
def test_a_child_ended_by_a_signal_ends_the_command_by_it(tmp_path, env, signum):
    # The out-of-memory killer, a kill of the child alone: the caller sees what it would have seen.
    then = f"in_flight(True); os.kill(os.getpid(), {int(signum)})"
    proc = subprocess.run(guarded(tmp_path, "recall", then), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signum and runs(tmp_path) == 1, proc.stderr
    assert proc.stderr == ""


def test_a_fifo_or_folder_under_the_in_flight_name_is_no_record_and_no_wait(tmp_path, env):
    then = (
        f"home = {str(tmp_path / 'home')!r}\n"
        "os.mkfifo(os.path.join(home, f'index.sqlite.embedding.{os.getpid()}.0'))\n"
        "os.mkdir(os.path.join(home, f'index.sqlite.embedding.{os.getpid()}.1'))\n"
        "os.kill(os.getpid(), signal.SIGSEGV)"
    )
    proc = subprocess.run(guarded(tmp_path, "recall", then), env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == -signal.SIGSEGV and runs(tmp_path) == 1 and "llama.cpp" not in proc.stderr


def test_another_process_s_in_flight_file_proves_nothing(tmp_path, env):
    # A file naming another pid (another command embedding at the same time) is not this crash's.
    other = tmp_path / "home" / "index.sqlite.embedding.1.0"
    other.write_text(json.dumps({"pid": 1, "texts": ["query:00"], "alone": True}), encoding="utf-8")
    then = "os.kill(os.getpid(), signal.SIGSEGV)"
    proc = subprocess.run(guarded(tmp_path, "recall", then), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGSEGV and runs(tmp_path) == 1 and "llama.cpp" not in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_sent_to_the_command_reaches_the_child(tmp_path, env, signum):
    then = (
        f"signal.signal({int(signum)}, lambda *a: sys.exit(50)); open({str(tmp_path / 'ready')!r}, 'w')\ntime.sleep(60)"
    )
    proc = subprocess.Popen(
        guarded(tmp_path, "status", then),
        env=env,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal, not a background job
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signum)
    assert proc.wait(30) == 50  # the child's handler ran, and its status is the command's


def test_killing_the_command_kills_the_child(tmp_path, env):
    then = f"open({str(tmp_path / 'child')!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)"
    proc = subprocess.Popen(guarded(tmp_path, "status", then), env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    child = int((tmp_path / "child").read_text())
    proc.kill()
    proc.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the child outlived the command")


def test_servers_and_hooks_are_not_forked(tmp_path, env):
    for command in ("serve", "mcp", "browse", "hook"):
        proc = subprocess.Popen(guarded(tmp_path, command, "print(os.getpid())"), env=env, stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=60)
        assert int(out) == proc.pid, command
    proc = subprocess.Popen(guarded(tmp_path, "recall", "print(os.getpid())"), env=env, stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    assert int(out) != proc.pid
