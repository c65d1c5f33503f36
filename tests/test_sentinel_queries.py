"""A message (or a save's probe) that crashes llama.cpp costs a warning and a keyword answer, once.

The crash is real, as in ``test_sentinel``: a preloaded library raises
SIGSEGV in llama.cpp's graph computation when the batch holds the token of
"Zyzzyva", which no memory of the vault and no probe of the model has. A
message holding it crashes the process that embeds it (the engine, a command
without the engine); the next process to load the model quarantines that
message for this model, llama.cpp build and CPU, and answers it by keywords.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest
from test_daemon import engine_processes
from test_sentinel import (  # noqa: F401 - fixtures
    MARCHDB,
    TRIGGER_ENV,
    crash_on_token_library,
    crashing_env,
    culprit_token,
    missing_vectors,
    run,
)

CRASHING = "Zyzzyva aside: which tablet does Biscuit take at breakfast, carprofen?"


@pytest.fixture
def query_env(tmp_path, mixed_vault, default_model_path, crash_on_token_library, culprit_token):  # noqa: F811
    env = crashing_env(tmp_path, mixed_vault.root, default_model_path, crash_on_token_library, culprit_token)
    done = run(env, "sync")
    assert done.returncode == 0, done.stderr  # no memory holds the token: every one is embedded
    return env


@pytest.fixture
def engine_env(query_env, tmp_path):
    env = {k: v for k, v in query_env.items() if k != "MARCH_DAEMON"}
    yield env
    from marchdb.engine import daemon

    home = tmp_path / "home"
    daemon.stop(home)
    for pid in engine_processes(home):  # one started by a command of this test, still starting
        os.kill(pid, signal.SIGKILL)


def keyword_answer(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    answer = json.loads(proc.stdout)
    assert answer["mode"] == "bm25" and "llama.cpp crashed on this message before" in answer["warning"], answer
    assert answer["hints"] and answer["hints"][0]["id"] == "mem_dog"
    return answer


def test_a_message_that_crashes_the_command_gets_a_line_and_keywords_the_first_time(query_env):
    # Without the engine, the command embeds the message itself: the process that did dies, and
    # the command (its parent) says so and answers again, by keywords.
    first = run(query_env, "recall", CRASHING, "--json")
    keyword_answer(first)
    assert "llama.cpp crashed (SIGSEGV) on a text this command gave the model" in first.stderr, first.stderr
    again = run(query_env, "recall", CRASHING, "--json")
    keyword_answer(again)
    assert "SIGSEGV" not in again.stderr  # put aside: no second crash
    text = run(query_env, "recall", CRASHING)
    assert text.returncode == 0 and "mem_dog" in text.stdout, text.stderr
    assert "llama.cpp crashed on this message before" in text.stderr
    # Other messages still use the model.
    other = run(query_env, "recall", "Biscuit carprofen tablet breakfast", "--json")
    assert other.returncode == 0 and json.loads(other.stdout)["mode"] == "hybrid", other.stderr


def test_a_crash_outside_the_model_is_the_command_s_own(query_env, tmp_path):
    # Only a crash while the model embeds is answered again: any other native crash ends the
    # command by the same signal, as before, and nothing is run twice.
    marker = tmp_path / "ran"
    code = (
        "import os, signal; from marchdb.cli.guard import guard; guard({}, ['status']); "
        f"open({str(marker)!r}, 'a').write('x'); os.kill(os.getpid(), signal.SIGSEGV)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=query_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr)
    assert marker.read_text() == "x" and "llama.cpp crashed" not in proc.stderr


def test_recall_through_the_engine_answers_by_keywords_and_the_engine_dies_at_most_once(engine_env, tmp_path):
    from marchdb.engine import client

    home = tmp_path / "home"
    first = run(engine_env, "recall", CRASHING, "--json")  # starts the engine, which dies on the message
    keyword_answer(first)
    second = run(engine_env, "recall", CRASHING, "--json")  # a new engine: it answers by keywords
    keyword_answer(second)
    pid = client.engine_pid(home)
    assert pid is not None
    for _ in range(2):
        keyword_answer(run(engine_env, "recall", CRASHING, "--json"))
    assert client.engine_pid(home) == pid and client.engine_alive(home)  # never died again
    other = run(engine_env, "recall", "Biscuit carprofen tablet breakfast", "--json")
    assert other.returncode == 0 and json.loads(other.stdout)["mode"] == "hybrid", other.stderr


def test_a_hook_with_the_crashing_prompt_exits_0_and_the_engine_stops_dying(engine_env, tmp_path):
    from marchdb.engine import client

    home = tmp_path / "home"
    warm = run(engine_env, "recall", "Biscuit carprofen tablet breakfast")  # starts the engine
    assert warm.returncode == 0 and client.ping(home), warm.stderr
    pids = set()
    for i in range(4):
        event = {"session_id": f"s{i}", "hook_event_name": "UserPromptSubmit", "prompt": CRASHING, "cwd": "/tmp"}
        done = subprocess.run(
            [MARCHDB, "hook", "claude-code"],
            input=json.dumps(event),
            capture_output=True,
            text=True,
            env=engine_env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "mem_dog" in done.stdout  # by keywords: in the hook's own process, or the engine's
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not client.ping(home):
            time.sleep(0.2)  # the engine a hook started for the next prompts
        pids.add(client.engine_pid(home))
    assert len(pids) <= 2, pids  # the first engine died on the prompt; the next one answers it
    assert client.engine_alive(home)


def test_a_save_whose_probe_crashes_writes_its_file_and_leaves_its_vectors_pending(query_env, tmp_path):
    args = [
        "save",
        "--name",
        "Zyzzyva feeding",
        "--description",
        "The weevil eats palm fronds",
        "--tag",
        "insects",
        "--body",
        "Palms.",
    ]
    second = run(query_env, *args, "--json")
    # The process embedding the probe died before it wrote anything; the command ran again.
    assert second.returncode == 0, second.stderr
    assert "llama.cpp crashed (SIGSEGV)" in second.stderr
    root = Path(query_env["MARCH_MEMORY_ROOT"])
    assert len([p for p in root.rglob("*.md") if "zyzzyva" in p.name]) == 1  # written once
    saved = json.loads(second.stdout)
    assert saved["status"] == "created" and (root / saved["path"]).is_file()
    said = " ".join(saved["warnings"])
    assert "llama.cpp crashed on this memory's name and description before" in said
    assert "near-duplicates were looked for by keywords" in said and "marchdb sync" in said
    index = tmp_path / "home" / "index.sqlite"
    assert saved["id"] in missing_vectors(index)
    # The next sync embeds its texts apart: what crashes stays quarantined, the rest is embedded, no death.
    synced = run(query_env, "sync")
    assert synced.returncode == 0, synced.stderr
    con = apsw.Connection(str(index), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        left = {mem for mem, n in con.execute("SELECT id, meta_missing + chunks_missing FROM diag_vectors") if n}
    finally:
        con.close()
    assert left == {saved["id"]}
    status = json.loads(run(query_env, "status", "--json").stdout)
    assert saved["id"] in status["model_crashed_on"]


def test_a_save_whose_own_vectors_crash_keeps_its_file_and_is_not_done_twice(query_env, tmp_path):
    # The name and description pass; the body holds the token: the file is written, then the model
    # crashes on the memory's texts. The save is not run again (it would write a second memory):
    # the command says what was kept, with the model error's code; a sync embeds the rest apart.
    args = ["save", "--name", "Weevil diet", "--description", "what the weevil eats", "--tag", "insects"]
    args += ["--body", "Zyzzyva eat palms."]
    first = run(query_env, *args, "--json")
    assert first.returncode == 4, (first.returncode, first.stderr)
    assert "llama.cpp crashed (SIGSEGV) while this command embedded what it had written" in first.stderr
    assert "marchdb sync" in first.stderr
    root = Path(query_env["MARCH_MEMORY_ROOT"])
    saved = [p for p in root.rglob("*.md") if "Zyzzyva eat palms." in p.read_text(encoding="utf-8")]
    assert len(saved) == 1, saved
    synced = run(query_env, "sync")
    assert synced.returncode == 0, synced.stderr
    index = tmp_path / "home" / "index.sqlite"
    assert len(missing_vectors(index)) == 1  # its chunk, quarantined; every other text embedded
    found = run(query_env, "recall", "what does the weevil eat", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["hints"], found.stderr


LONG = " ".join(["which tablet does Biscuit take at breakfast, and is carprofen the one for his joints?"] * 40)


def killed_while_it_embeds(env: dict, *args: str) -> int | None:
    """Run ``marchdb ARGS`` and SIGKILL it while the model embeds. The command's process is
    killed; the one embedding (its child) dies with it. Its pid, once dead, if the kill landed
    while the model ran; None otherwise."""
    home = Path(env["MARCH_HOME"])
    proc = subprocess.Popen([MARCHDB, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    flying: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None and not flying:
        flying = list(home.glob("index.sqlite.embedding.*"))
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    if not flying:
        return None
    from marchdb.index import sentinel

    pid = int(flying[0].name.split(".")[3])
    gone = time.monotonic() + 30
    while time.monotonic() < gone and os.path.exists(f"/proc/{pid}") and not sentinel._zombie(pid):
        time.sleep(0.01)
    return pid if list(home.glob(f"index.sqlite.embedding.{pid}.*")) else None


def killed_while_embedding(env: dict, message: str) -> None:
    """Run ``recall message`` without the engine and SIGKILL it while the model embeds the message."""
    home = Path(env["MARCH_HOME"])
    for _ in range(5):
        pid = killed_while_it_embeds(env, "recall", message)
        if pid is not None:
            assert list(home.glob(f"index.sqlite.fatal.{pid}.*")), "the fatal file is made before the model runs"
            return
    raise AssertionError("the kill never landed while the message was embedded")


def test_a_command_killed_while_it_embeds_a_message_is_no_crash_the_first_time(query_env):
    # kill -9, the out-of-memory killer, a host's timeout: the process dies as a crash would, but
    # left its fatal file empty. The message goes to the model again; a second such death on it
    # quarantines it (a crash the handler could not report costs at most two runs).
    home = Path(query_env["MARCH_HOME"])
    killed_while_embedding(query_env, LONG)
    again = run(query_env, "recall", LONG, "--json")
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert answer["mode"] == "hybrid" and not answer.get("warning"), answer
    assert not list(home.glob("index.sqlite.fatal.*"))  # the dead one's swept, the live one's removed at exit
    killed_while_embedding(query_env, LONG)
    twice = json.loads(run(query_env, "recall", LONG, "--json").stdout)
    assert twice["mode"] == "bm25" and "died twice before" in twice["warning"], twice
    assert "crashed" not in twice["warning"].split("(")[0]  # not said to be llama.cpp's crash


def test_march_embed_of_a_crashing_text_is_a_model_error_at_once(query_env):
    select = f"SELECT length(march_embed('{CRASHING}'))"
    first = run(query_env, "sql", select)
    # The process embedding it died; the command ran the statement again: a model error, in one line.
    assert first.returncode == 4, (first.returncode, first.stderr)
    assert "llama.cpp crashed (SIGSEGV)" in first.stderr
    assert "march_embed: llama.cpp crashed on this text before" in first.stderr, first.stderr
    second = run(query_env, "sql", select)
    assert second.returncode == 4 and "SIGSEGV" not in second.stderr, (second.returncode, second.stderr)
    # As a passage it is another text to the model: tried, and crashes once too.
    passage = f"SELECT length(march_embed('{CRASHING}', 'passage'))"
    crashed = run(query_env, "sql", passage)
    assert crashed.returncode == 4 and "SIGSEGV" in crashed.stderr, crashed.stderr
    assert "crashed on this text before" in run(query_env, "sql", passage).stderr
    healthy = run(query_env, "sql", "SELECT length(march_embed('Biscuit carprofen tablet breakfast'))")
    assert healthy.returncode == 0 and "1536" in healthy.stdout, healthy.stderr


def test_a_quarantined_message_is_tried_again_on_another_llama_cpp_build_or_cpu(query_env, tmp_path):
    assert "SIGSEGV" in run(query_env, "recall", CRASHING).stderr
    keyword_answer(run(query_env, "recall", CRASHING, "--json"))
    # The same library at another path: another LD_PRELOAD, so another (model, build, CPU)
    # as the model's check counts them. The message is tried again there, and crashes again once (the command answering by keywords all the same).
    copy = tmp_path / "elsewhere" / "libcrash.so"
    copy.parent.mkdir()
    shutil.copy(query_env["LD_PRELOAD"], copy)
    moved = {**query_env, "LD_PRELOAD": str(copy)}
    assert "SIGSEGV" in run(moved, "recall", CRASHING).stderr
    keyword_answer(run(moved, "recall", CRASHING, "--json"))
    # Without the crash, it is given to the model: nothing quarantined there.
    healthy = {k: v for k, v in query_env.items() if k not in ("LD_PRELOAD", TRIGGER_ENV)}
    answer = run(healthy, "recall", CRASHING, "--json")
    assert answer.returncode == 0 and json.loads(answer.stdout)["mode"] == "hybrid", answer.stderr
    # And back on the first triple, still answered by keywords, no crash.
    keyword_answer(run(query_env, "recall", CRASHING, "--json"))


# ---------------------------------------------------------------- the bookkeeping, without native code


def dead_call(
    index: str, key: str, names: list[list[str]], alone: bool = True, pid: int = 2**22 + 9, fatal: str | None = None
) -> None:
    """The in-flight files a process killed mid-call leaves (pid beyond pid_max's default): one per call;
    ``fatal``: what its fatal file holds (None: it had none)."""
    for n, texts in enumerate(names):
        record = {
            "pid": pid,
            "boot": "",
            "start": "",
            "model": key,
            "texts": texts,
            **({"alone": True} if alone else {}),
        }
        if fatal is not None:
            record["fatal"] = f"{Path(index).name}.fatal.{pid}.1234"
            Path(f"{index}.fatal.{pid}.1234").write_text(fatal, encoding="utf-8")
        Path(f"{index}.embedding.{pid}.{n}").write_text(json.dumps(record), encoding="utf-8")


def query_name(text: str) -> str:
    from marchdb.index import sentinel
    from marchdb.index.focus import focus
    from marchdb.vault.notes import text_hash

    return sentinel.key("query", text_hash(focus(text)))


@pytest.fixture
def tiny_store(vault, cfg):
    from conftest import TinyEmbedder

    from marchdb.store import Store

    vault.memory("dog.md", "mem_dog", name="Dog's medication", description="Biscuit takes carprofen at breakfast")
    vault.memory("cat.md", "mem_cat", name="Cat food", description="Tuna on Sundays")
    s = Store(cfg, embedder=TinyEmbedder("tiny-8", dim=8))
    s.sync()
    yield s
    s.close()


def test_a_message_a_dead_process_embedded_alone_is_answered_by_keywords(tiny_store):
    from marchdb.index import sentinel, vectors

    emb, index = tiny_store.embedder(), str(tiny_store.cfg.index_path)
    message = "Biscuit carprofen breakfast zyzzyva"
    assert tiny_store.recall(message).mode == "hybrid"
    dead_call(index, emb.crash_key, [[query_name(message)]])
    vectors.check_crashes(tiny_store.con, emb, index)  # what loading the model does
    ledger = sentinel.Sentinel(index, emb.crash_key).read()
    assert set(ledger.alone) == {query_name(message)} and ledger.lone == 1 and ledger.crashes == 0
    answer = tiny_store.recall(message, explain=True)
    assert answer.mode == "bm25" and "llama.cpp crashed on this message before" in (answer.warning or "")
    assert answer.candidates[0].id == "mem_dog"  # by its words
    guard = sentinel.Sentinel(index, emb.crash_key)
    ledger = guard.read()
    ledger.crashes = 1  # a batch's crash no text explains, found before
    guard.write(ledger)
    assert tiny_store.recall("Biscuit carprofen breakfast").mode == "hybrid"  # given to the model
    # ... which ends the texts crashing alone in a row, and explains no batch's crash.
    assert (guard.read().lone, guard.read().crashes) == (0, 1)
    # Kept though no memory holds it, and for this key only.
    vectors.embed_pending(tiny_store.con, emb, index)
    assert query_name(message) in sentinel.Sentinel(index, emb.crash_key).read().alone
    assert sentinel.Sentinel(index, "another build or CPU").read().alone == {}


def test_a_message_whose_process_was_killed_is_given_to_the_model_again_once(tiny_store):
    from marchdb.index import sentinel, vectors

    emb, index = tiny_store.embedder(), str(tiny_store.cfg.index_path)
    message = "Biscuit carprofen breakfast"
    dead_call(index, emb.crash_key, [[query_name(message)]], fatal="")  # killed: nothing reported
    vectors.check_crashes(tiny_store.con, emb, index)
    ledger = sentinel.Sentinel(index, emb.crash_key).read()
    assert (ledger.alone, ledger.lone, set(ledger.killed)) == ({}, 0, {query_name(message)})
    assert not list(Path(index).parent.glob("*.fatal.*"))  # the dead process's file swept
    assert tiny_store.recall(message).mode == "hybrid"
    dead_call(index, emb.crash_key, [[query_name(message)]], fatal="", pid=2**22 + 11)  # killed on it again
    vectors.check_crashes(tiny_store.con, emb, index)
    ledger = sentinel.Sentinel(index, emb.crash_key).read()
    assert set(ledger.alone) == {query_name(message)} and ledger.lone == 1 and ledger.killed == {}
    answer = tiny_store.recall(message)
    assert answer.mode == "bm25" and "died twice before" in (answer.warning or "")


@pytest.mark.parametrize(
    "fatal", ["Fatal Python error: Segmentation fault\n", None], ids=["a crash reported", "no handler of ours"]
)
def test_a_message_whose_process_crashed_or_may_have_is_quarantined_at_once(tiny_store, fatal):
    from marchdb.index import sentinel, vectors

    emb, index = tiny_store.embedder(), str(tiny_store.cfg.index_path)
    message = "Biscuit carprofen breakfast"
    dead_call(index, emb.crash_key, [[query_name(message)]], fatal=fatal)
    vectors.check_crashes(tiny_store.con, emb, index)
    ledger = sentinel.Sentinel(index, emb.crash_key).read()
    assert set(ledger.alone) == {query_name(message)} and ledger.killed == {}
    assert "llama.cpp crashed on this message before" in (tiny_store.recall(message).warning or "")


def test_batches_whose_process_was_killed_are_no_crashes_up_to_a_limit(tiny_store):
    from marchdb.errors import ModelUnusable
    from marchdb.index import sentinel, vectors

    emb, index = tiny_store.embedder(), str(tiny_store.cfg.index_path)
    for i in range(sentinel.KILL_LIMIT):  # kill -9 of a sync, again and again, before any batch went through
        dead_call(index, emb.crash_key, [["meta:00aa"]], alone=False, fatal="", pid=2**22 + 30 + i)
        vectors.check_crashes(tiny_store.con, emb, index)
    ledger = sentinel.Sentinel(index, emb.crash_key).read()
    assert (ledger.crashes, ledger.kills) == (0, sentinel.KILL_LIMIT)
    # Past the limit a death without a reported crash counts as one: a crash that could not report itself ends.
    for i in range(sentinel.CRASH_LIMIT - 1):
        dead_call(index, emb.crash_key, [["meta:00aa"]], alone=False, fatal="", pid=2**22 + 40 + i)
        vectors.check_crashes(tiny_store.con, emb, index)
    dead_call(index, emb.crash_key, [["meta:00aa"]], alone=False, fatal="", pid=2**22 + 50)
    with pytest.raises(ModelUnusable, match="crashed 3 times in a row"):
        vectors.check_crashes(tiny_store.con, emb, index)


def test_a_sync_killed_again_and_again_leaves_the_model_usable(query_env):
    # Four syncs killed with SIGKILL while the model embeds a batch made the model unusable on
    # this machine ("llama.cpp crashed 3 times in a row ... on no single text").
    assert run(query_env, "rebuild", "--no-embed").returncode == 0
    kills = 0
    for _ in range(12):
        kills += killed_while_it_embeds(query_env, "sync") is not None
        if kills == 4:
            break
    assert kills == 4
    done = run(query_env, "sync", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(run(query_env, "status", "--json").stdout)
    assert status["memories_without_vector"] == 0 and status["chunks_without_vector"] == 0, status
    assert "UNUSABLE" not in str(status["model_check"]), status["model_check"]


def test_a_fatal_file_named_outside_the_index_folder_proves_no_kill(tiny_store, tmp_path):
    from marchdb.index import sentinel, vectors

    emb, index = tiny_store.embedder(), str(tiny_store.cfg.index_path)
    elsewhere = tmp_path / "empty"
    elsewhere.write_text("", encoding="utf-8")
    message = "Biscuit carprofen breakfast"
    pid = 2**22 + 13
    record = {"pid": pid, "boot": "", "start": "", "model": emb.crash_key, "alone": True}
    record |= {"texts": [query_name(message)], "fatal": f"../../{elsewhere.name}"}
    Path(f"{index}.embedding.{pid}.0").write_text(json.dumps(record), encoding="utf-8")
    vectors.check_crashes(tiny_store.con, emb, index)
    assert set(sentinel.Sentinel(index, emb.crash_key).read().alone) == {query_name(message)}
    assert elsewhere.exists()


def test_a_call_alone_beside_another_call_of_the_same_dead_process_proves_nothing(tiny_store):
    from marchdb.index import sentinel, vectors

    emb, index = tiny_store.embedder(), str(tiny_store.cfg.index_path)
    message = "Biscuit carprofen breakfast"
    # A backlog's batch ran beside the message (the engine embeds both at once): either may have crashed.
    dead_call(index, emb.crash_key, [[query_name(message)], ["meta:0000"]])
    vectors.check_crashes(tiny_store.con, emb, index)
    assert sentinel.Sentinel(index, emb.crash_key).read().alone == {}
    assert tiny_store.recall(message).mode == "hybrid"


def test_texts_crashing_alone_three_times_in_a_row_make_the_model_unusable(tiny_store):
    from marchdb.errors import ModelUnusable
    from marchdb.index import sentinel, vectors

    emb, index = tiny_store.embedder(), str(tiny_store.cfg.index_path)
    for i in range(sentinel.LONE_CRASH_LIMIT - 1):
        dead_call(index, emb.crash_key, [[query_name(f"message {i}")]], pid=2**22 + 10 + i)
        vectors.check_crashes(tiny_store.con, emb, index)
    dead_call(index, emb.crash_key, [[query_name("message last")]], pid=2**22 + 20)
    with pytest.raises(ModelUnusable, match="crashed on 3 texts in a row"):
        vectors.check_crashes(tiny_store.con, emb, index)


def test_a_process_dead_but_not_yet_reaped_is_dead():
    # The engine's socket closes as it dies: the client that saw it must not take it for alive.
    from marchdb.index import sentinel

    child = subprocess.Popen(["sleep", "30"])
    try:
        start = sentinel._start_time(child.pid)
        assert sentinel._alive(child.pid, sentinel._boot_id(), start)
        child.kill()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not sentinel._zombie(child.pid):
            time.sleep(0.01)
        assert not sentinel._alive(child.pid, sentinel._boot_id(), start)  # a zombie, not waited for
    finally:
        child.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_command_stopped_by_a_signal_while_it_embeds_its_message_is_no_crash(tmp_path, signum):
    # `timeout 5 marchdb recall ...`, a closed terminal: the process was ended,
    # llama.cpp did not crash. Its message was quarantined as a crash ("llama.cpp
    # crashed on this message before", keyword answers for good), and three such
    # in a row made the model unusable on this machine.
    from marchdb.index import sentinel

    index = tmp_path / "index.sqlite"
    script = (
        "import signal, sys, time\n"
        # Its default action, whatever this test inherited (`nohup` ignores SIGHUP).
        f"signal.signal({int(signum)}, signal.SIG_DFL)\n"
        "from marchdb.index import sentinel\n"
        "class Model:\n"
        "    crash_key = 'tiny-key'\n"
        "sentinel.embed_alone(sys.argv[1], Model(), 'query', 'a message', lambda: time.sleep(60))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(index)])
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("index.sqlite.embedding.*")):
            assert time.monotonic() < deadline and child.poll() is None, "the message was never in flight"
            time.sleep(0.01)
        child.send_signal(signum)
        assert child.wait(10) == -signum  # it still dies of the signal
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert list(tmp_path.glob("index.sqlite.embedding.*")) == []
    ledger, found, lone = sentinel.Sentinel(str(index), "tiny-key").recover([])
    assert (ledger.alone, ledger.lone, found, lone) == ({}, 0, 0, 0)
