"""Hook events translated by the host adapters and answered by the library (Store.hook) on a real vault and index.

These run in-process with keyword recall (no model) to test the rules: which
event gets which block, run ids across prompts, record-only at Stop, and that
bad input answers nothing and is logged. test_daemon.py runs the same through
real processes with the default model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from marchdb import hooks, logfile
from marchdb.errors import Expired
from marchdb.hosts import BadEvent, adapter, claude_code
from marchdb.hosts.hook import answer_here
from marchdb.index import runs
from marchdb.store import Store

MARCHDB = str(Path(sys.executable).with_name("marchdb"))


@pytest.fixture
def bm25_store(cfg, mixed_vault):
    store = Store(cfg, use_model=False)
    store.sync(embed=False)
    yield store
    store.close()


def handle(store, host: str, raw, options=()) -> dict:
    """What ``marchdb hook HOST`` prints for ``raw`` when it answers in-process:
    ``{"stdout", "note"}``, the note logged as the hook logs it. For the
    generic host ``raw`` may be a dict: the message as ``text``, and options."""
    if isinstance(raw, dict):
        raw, given = raw["text"], dict(raw)
        given.pop("text")
        options = []
        for name, value in given.items():
            flag = hooks_op_flag(name)
            options += [flag] if value is True else [] if value in (None, False) else [f"{flag}={value}"]
    module = adapter(host)
    try:
        parsed = module.parse(raw, list(options))
    except BadEvent as exc:
        logfile.log(store.cfg.home, "hooks", f"{host}: {exc}")
        return {"stdout": "", "note": str(exc)}
    if parsed is None:
        return {"stdout": "", "note": None}
    answer = answer_here(store, module, parsed)
    if answer["note"]:
        logfile.log(store.cfg.home, "hooks", f"{host}: {answer['note']}")
    return answer


def hooks_op_flag(name: str) -> str:
    from marchdb import ops

    return str(ops.HOOK.param(name).flag)


def event(name: str, session: str = "s1", **fields) -> str:
    return json.dumps({"session_id": session, "hook_event_name": name, "cwd": "/tmp", **fields})


def context_of(answer: dict, name: str) -> str:
    data = json.loads(answer["stdout"])
    assert data["hookSpecificOutput"]["hookEventName"] == name
    assert set(data) == {"hookSpecificOutput"}  # never decision / continue: those steer Claude
    return data["hookSpecificOutput"]["additionalContext"]


def test_session_start_injects_the_profiles(bm25_store):
    (bm25_store.cfg.profiles_dir / "user.md").write_text("# User\n\nPrefers tea.\n", encoding="utf-8")
    text = context_of(handle(bm25_store, "claude-code", event("SessionStart", source="startup")), "SessionStart")
    assert text.startswith("[agent_profile]") and "[user_profile]" in text and "Prefers tea." in text


def test_prompt_gets_a_recall_block_once_per_ten_runs(bm25_store):
    prompt = "Dog's medication carprofen tablet"
    first = handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))
    assert context_of(first, "UserPromptSubmit").startswith("[recall]\n- mem_dog | score=")
    # The next prompt is a new run of the same session: the memory hinted one run ago is suppressed.
    again = handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))
    assert again["stdout"] == ""
    assert [r[0] for r in bm25_store.con.execute("SELECT run_id FROM runs ORDER BY seq")] == ["cc:s1:1", "cc:s1:2"]
    # Another session has its own runs and never saw that hint: it gets it (the 10-run window is
    # counted per conversation), and the first session still holds it back.
    other = handle(bm25_store, "claude-code", event("UserPromptSubmit", session="s2", prompt=prompt))
    assert context_of(other, "UserPromptSubmit").startswith("[recall]\n- mem_dog | score=")
    assert runs.current_run_id(bm25_store.con, hooks.session_key("claude-code", "s2")) == "cc:s2:1"
    assert handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))["stdout"] == ""
    conversations = bm25_store.con.execute("SELECT run_id, conversation FROM runs ORDER BY seq").fetchall()
    assert conversations == [("cc:s1:1", "cc:s1"), ("cc:s1:2", "cc:s1"), ("cc:s2:1", "cc:s2"), ("cc:s1:3", "cc:s1")]


def test_stop_records_without_injecting_or_suppressing(bm25_store):
    handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt="what about the weekend hike?"))
    stop = handle(
        bm25_store,
        "claude-code",
        event("Stop", stop_hook_active=False, last_assistant_message="Biscuit gets half a carprofen tablet."),
    )
    assert stop["stdout"] == ""  # any output on Stop would make Claude continue
    logged = bm25_store.con.execute(
        "SELECT run_id, trigger, mem_id FROM recall_log WHERE trigger = 'record'"
    ).fetchall()
    assert logged == [("cc:s1:1", "record", "mem_dog")]
    # Recorded, not injected: the next prompt about it is still hinted.
    nxt = handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt="Dog's medication carprofen"))
    assert "mem_dog" in context_of(nxt, "UserPromptSubmit")


def test_stop_reads_the_reply_from_the_transcript_when_not_sent(bm25_store, tmp_path):
    transcript = tmp_path / "session.jsonl"
    lines = [
        {"type": "user", "message": {"role": "user", "content": "how is the dog?"}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": "..."}]}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "Biscuit takes half a carprofen tablet with breakfast."}],
            },
        },
        {"type": "attachment", "attachment": {"type": "hook_additional_context", "content": ["x"]}},
    ]
    transcript.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    assert claude_code.latest_assistant_text(str(transcript)).startswith("Biscuit takes half")
    handle(bm25_store, "claude-code", event("Stop", transcript_path=str(transcript)))
    assert bm25_store.con.execute("SELECT mem_id FROM recall_log WHERE trigger = 'record'").fetchall() == [("mem_dog",)]
    assert (
        claude_code.latest_assistant_text(str(tmp_path / "missing.jsonl")) == ""
        and claude_code.latest_assistant_text(None) == ""
    )
    assert (
        claude_code.latest_assistant_text("a\x00b") == ""
        and claude_code.latest_assistant_text("~no-such-user-here/x.jsonl") == ""
    )


def test_a_transcript_path_that_is_a_fifo_is_never_opened_for_reading(bm25_store, tmp_path):
    # Opened, it blocked the engine's request thread, and every prompt after it waited.
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    done = []
    worker = threading.Thread(target=lambda: done.append(claude_code.latest_assistant_text(str(fifo))), daemon=True)
    worker.start()
    worker.join(10)
    assert done == [""]
    answer = handle(bm25_store, "claude-code", event("Stop", transcript_path=str(fifo)))
    assert answer["stdout"] == "" and "nothing recorded" in answer["note"]


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "not json at all",
        '{"hook_event_name": "UserPromptSubmit", "prompt": "carprofen',  # truncated
        "[1, 2, 3]",
        '{"hook_event_name": "UserPromptSubmit"}',  # no prompt
        '{"hook_event_name": "UserPromptSubmit", "prompt": 42}',
        '{"hook_event_name": "PreToolUse", "tool_name": "Bash"}',  # an event marchdb does not answer
        '{"hook_event_name": "NewEventOf2027", "session_id": "s1"}',
        '{"hook_event_name": "UserPromptSubmit", "session_id": {"x": 1}, "prompt": "\\ud800 carprofen"}',
        "[" * 100_000,  # nested past Python's recursion limit: once blamed on the engine as its failure
    ],
)
def test_bad_events_answer_nothing_and_never_raise(bm25_store, raw):
    answer = handle(bm25_store, "claude-code", raw)
    assert answer["stdout"] == "" or json.loads(answer["stdout"])["hookSpecificOutput"]


def test_a_hook_without_the_engine_never_builds_a_large_index_itself(tmp_path, vault):
    # The first prompt on a new home with 10,000 files took 10.7 s (the hook built the whole
    # keyword index, racing the engine it had just started): past Claude Code's hook timeout.
    from marchdb.index.keeper import FIRST_SCAN_INLINE_FILES

    vault.memory("dog.md", "mem_dog", name="Dog's medication", description="carprofen tablet with food")
    for i in range(FIRST_SCAN_INLINE_FILES):
        vault.memory(f"m{i}.md", f"mem_{i}", name=f"Garden note {i}", description="tomatoes and beans")
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(vault.root)}
    event = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "Dog's medication carprofen tablet"}
    done = subprocess.run(
        [MARCHDB, "hook", "claude-code"], input=json.dumps(event), capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0 and done.stdout == ""
    said = logfile.read_log(tmp_path / "home", "hooks")
    assert any(f"the index is not built yet ({FIRST_SCAN_INLINE_FILES + 1:,} files" in line for line in said), said
    (vault.root / "m0.md").unlink()  # at the bound, the hook builds it and answers
    done = subprocess.run(
        [MARCHDB, "hook", "claude-code"], input=json.dumps(event), capture_output=True, text=True, env=env, timeout=60
    )
    assert "mem_dog" in done.stdout


def test_odd_text_from_the_host_still_gets_its_recall(bm25_store):
    # A lone surrogate (half an emoji) refused the whole prompt; a BOM made the event "not JSON".
    text = "Dog's medication carprofen tablet"
    surrogate = event("UserPromptSubmit", session="odd1", prompt="\ud83d " + text)
    for raw in (surrogate, "\ufeff" + event("UserPromptSubmit", session="odd2", prompt=text)):
        answer = handle(bm25_store, "claude-code", raw)
        assert "mem_dog" in json.loads(answer["stdout"])["hookSpecificOutput"]["additionalContext"], raw[:60]


def test_one_profile_that_cannot_be_read_keeps_the_other_in_the_session(bm25_store):
    handle(bm25_store, "claude-code", event("SessionStart"))  # creates the starter profiles
    (bm25_store.cfg.profiles_dir / "user.md").write_bytes(b"x" * (70 * 1024))
    answer = handle(bm25_store, "claude-code", event("SessionStart"))
    context = json.loads(answer["stdout"])["hookSpecificOutput"]["additionalContext"]
    assert "[agent_profile]" in context and "x" * 100 not in context
    assert "larger than 65,536 bytes" in answer["note"]
    # The generic contract too: the hints and the other profile still come.
    generic = {"text": "Dog's medication carprofen", "profiles": True}
    answer = handle(bm25_store, "generic", (generic))
    assert answer["stdout"].startswith("[agent_profile]") and "- mem_dog | score=" in answer["stdout"]
    assert "larger than 65,536 bytes" in answer["note"]


def test_bad_input_is_explained_in_the_hook_log_and_doctor(bm25_store):
    handle(bm25_store, "claude-code", "{broken")
    assert any("not JSON" in line for line in logfile.read_log(bm25_store.cfg.home, "hooks"))
    assert any("not JSON" in line for line in bm25_store.doctor()["hook_log"])


def test_the_hook_log_is_rotated_by_size(tmp_path):
    for i in range(4000):
        logfile.log(tmp_path, "hooks", f"event {i} " + "x" * 100)
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == ["hooks.log", "hooks.log.1", "hooks.log.2", "hooks.log.lock"]
    assert all((tmp_path / "logs" / name).stat().st_size <= logfile.MAX_BYTES for name in logs)
    assert logfile.read_log(tmp_path, "hooks", 1)[0].endswith("event 3999 " + "x" * 100)


def test_missing_vault_answers_nothing_and_says_why(bm25_store, mixed_vault):
    mixed_vault.root.rename(mixed_vault.root.with_name("away"))
    answer = handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt="Dog's medication carprofen"))
    assert answer["stdout"] == ""
    assert "does not exist" in answer["note"]
    assert any("does not exist" in line for line in logfile.read_log(bm25_store.cfg.home, "hooks"))


def test_a_huge_prompt_is_read_from_its_start(bm25_store):
    # ~1 MB; the padding holds no words (words the vault lacks would lower the BM25 share)
    prompt = "Dog's medication carprofen? " + "... " * 270_000
    answer = handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))
    assert "mem_dog" in context_of(answer, "UserPromptSubmit")


def test_injected_context_stays_under_claude_codes_limit(bm25_store):
    (bm25_store.cfg.profiles_dir / "agent.md").write_text("x" * 50_000, encoding="utf-8")
    (bm25_store.cfg.profiles_dir / "user.md").write_text("Prefers tea. " + "y" * 50_000, encoding="utf-8")
    text = context_of(handle(bm25_store, "claude-code", event("SessionStart")), "SessionStart")
    assert len(text) <= hooks.MAX_CONTEXT_CHARS
    assert "[user_profile]\nPrefers tea." in text and text.count("(cut: ") == 2  # both profiles keep their start


def test_generic_contract(bm25_store):
    args = {"text": "Dog's medication carprofen", "run_id": "job-7", "trigger": "user"}
    out = handle(bm25_store, "generic", (args))["stdout"]
    assert out.startswith("[recall]\n- mem_dog | score=") and out.endswith("\n")
    with_profiles = handle(bm25_store, "generic", ({**args, "run_id": "job-8", "profiles": True}))
    assert with_profiles["stdout"].startswith("[agent_profile]")
    assert handle(bm25_store, "generic", ({"text": "zzqx unrelated"}))["stdout"] == ""


def test_the_working_directory_names_the_project(tmp_path):
    repo = tmp_path / "code" / "march-cli"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "deep").mkdir(parents=True)
    assert hooks.project_for(str(repo / "src" / "deep"), {}) == "march-cli"
    assert hooks.project_for(str(repo), {}) == "march-cli"
    assert hooks.project_for(str(tmp_path / "code"), {}) is None  # no repository: no guess
    mapped = {str(tmp_path / "code"): "all-code", str(repo / "src"): "cli-sources"}
    assert hooks.project_for(str(repo / "src" / "deep"), mapped) == "cli-sources"  # the longest folder wins
    assert hooks.project_for(str(tmp_path / "code" / "other"), mapped) == "all-code"
    for bad in (None, "", "relative/path", 42, "/a\x00b"):
        assert hooks.project_for(bad, mapped) is None


def test_a_prompt_ranks_the_memories_of_the_repository_it_is_typed_in(tmp_path, cfg, vault):
    for i in range(30):
        vault.memory(f"g{i}.md", f"mem_g{i}", name=f"Garden {i}", description="tomatoes and beans", tags=["garden"])
    for animal in ("zebra", "walrus", "heron"):
        for i, tags in enumerate(([animal], [animal, "project/march-cli"])):
            vault.memory(
                f"{animal}{i}.md", f"mem_{animal}{i}", name=f"{animal} notes {i}", description=animal, tags=tags
            )
    repo = tmp_path / "code" / "march-cli"
    (repo / ".git").mkdir(parents=True)
    store = Store(cfg, use_model=False)
    try:
        store.sync(embed=False)
        # (hinted memories are suppressed for the next runs: one animal per prompt)
        plain = store.recall("walrus notes").hints[0].id  # no project: the order as it is without one
        for animal, cwd, first in (("zebra", repo / "src", "mem_zebra1"), ("walrus", tmp_path, plain)):
            prompt = event("UserPromptSubmit", prompt=f"{animal} notes", cwd=str(cwd))
            text = context_of(handle(store, "claude-code", prompt), "UserPromptSubmit")
            assert text.startswith(f"[recall]\n- {first} |"), cwd
        # The generic contract takes the project as a field (marchdb hook generic --project).
        args = {"text": "heron notes", "run_id": "job-1", "project": "march-cli"}
        assert handle(store, "generic", (args))["stdout"].startswith("[recall]\n- mem_heron1 |")
    finally:
        store.close()


def test_projects_in_config_are_checked(tmp_path):
    from marchdb.config import load_config
    from marchdb.errors import ConfigError

    home = tmp_path / "h"
    home.mkdir()
    (home / "config.json").write_text('{"projects": {"~/code/x": "x"}}')
    assert list(load_config(home=home, env={}).projects.values()) == ["x"]
    for bad in ('{"projects": ["x"]}', '{"projects": {"/a": ""}}', '{"projects": {"/a": 5}}'):
        (home / "config.json").write_text(bad)
        with pytest.raises(ConfigError, match="projects"):
            load_config(home=home, env={})


def test_a_session_whose_old_runs_were_pruned_never_reuses_a_run_id(bm25_store):
    prompt = "Dog's medication carprofen tablet"
    for _ in range(3):
        handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))
    assert runs.current_run_id(bm25_store.con, hooks.session_key("claude-code", "s1")) == "cc:s1:3"
    with bm25_store.con:  # as the log bound does to the oldest runs (sql/003_lifecycle.sql)
        bm25_store.con.execute("DELETE FROM runs")
    # The next run starts after the last turn the recall log remembers: no stale hint belongs to it.
    fresh = runs.next_run_id(bm25_store.con, hooks.session_key("claude-code", "s1"))
    assert fresh == "cc:s1:2"  # turn 1 hinted (logged); turns 2 and 3 hinted nothing
    assert bm25_store.con.execute("SELECT count(*) FROM recall_log WHERE run_id = ?", (fresh,)).fetchone() == (0,)
    # A session whose id extends another's is its own.
    assert runs.next_run_id(bm25_store.con, hooks.session_key("claude-code", "s1:x")) == "cc:s1:x:1"


def test_a_hook_process_loads_no_yaml_numpy_sqlite_or_cli_framework(tmp_path):
    # A hook runs on every prompt: what its process imports is its start-up time (a config
    # check once pulled in the YAML parser through notes: ~45 ms a prompt; dataclasses, with
    # the inspect module it imports, ~20 ms; typing, for one annotation, ~5 ms).
    code = (
        "import sys, marchdb.cli.entry, marchdb.engine.client as c, marchdb.config as cfg;"
        f"conf = cfg.load_config(home={str(tmp_path / 'home')!r}, root={str(tmp_path)!r}, env={{}});"
        "c.identity(conf);"
        "heavy = ('yaml', 'frontmatter', 'numpy', 'apsw', 'typer', 'llama_cpp', 'dataclasses', 'inspect', 'typing');"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_hook_answering_without_the_engine_loads_neither_numpy_nor_llama_cpp(cfg, mixed_vault):
    # Keyword recall only: numpy (~130 ms, once pulled in through sqlite_vec's package)
    # and the model are for the engine; the first prompt of a session waits for this one.
    # Nor what only SQL tables, searches and imports use (apsw.ext alone was ~30 ms).
    unwanted = ("numpy", "llama_cpp", "sqlite_vec", "apsw.ext", "marchdb.search", "marchdb.lifecycle.importing")
    code = (
        "import sys, marchdb.hosts.hook as e; e.run_hook({}, ['claude-code']);"
        f"print(sorted(m for m in {unwanted!r} if m in sys.modules), file=sys.stderr)"
    )
    env = {**os.environ, "MARCH_HOME": str(cfg.home), "MARCH_MEMORY_ROOT": str(mixed_vault.root), "MARCH_DAEMON": "0"}
    prompt = event("UserPromptSubmit", prompt="Dog's medication carprofen tablet")
    out = subprocess.run(
        [sys.executable, "-c", code], input=prompt, capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0 and out.stderr.strip() == "[]", out.stderr
    assert "[recall]" in json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]


def test_the_next_turn_follows_the_highest_and_odd_run_ids_do_not_break_it(bm25_store):
    prompt = "Dog's medication carprofen tablet"
    handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))  # cc:s1:1
    # Runs of the session's conversation that the hook did not name, one of them last.
    bm25_store.recall(prompt, run_id="cc:s1:7", conversation="cc:s1")
    bm25_store.recall(prompt, run_id="cc:s1:²", conversation="cc:s1")  # not a number int() reads
    bm25_store.recall(prompt, run_id="manual", conversation="cc:s1")
    assert runs.next_run_id(bm25_store.con, hooks.session_key("claude-code", "s1")) == "cc:s1:8"
    answer = handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))
    assert answer["note"] is None or "Traceback" not in answer["note"]
    assert runs.current_run_id(bm25_store.con, hooks.session_key("claude-code", "s1")) == "cc:s1:8"


def test_writers_waiting_on_a_rotation_keep_the_whole_log_budget(tmp_path):
    # A writer that waited for the lock on a file another had just rotated
    # away rotated a second time: six writers kept ~150 KB of a 768 KB budget.
    code = (
        "import sys; from pathlib import Path; from marchdb import logfile\n"
        "for i in range(1500): logfile.log(Path(sys.argv[1]), 'hooks', f'{sys.argv[2]} {i} ' + 'x' * 150)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), f"w{n}"]) for n in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    sizes = [(tmp_path / "logs" / name).stat().st_size for name in ("hooks.log.1", "hooks.log.2")]
    assert all(logfile.MAX_BYTES * 0.9 < size <= logfile.MAX_BYTES for size in sizes), sizes


def test_hook_errors_go_to_the_log_of_the_home_given_with_home(tmp_path):
    home, elsewhere = tmp_path / "given", tmp_path / "user"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(elsewhere), "MARCH_DAEMON": "0"}
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    done = subprocess.run(
        [marchdb, "--home", str(home), "hook", "nosuchhost"], input="{}", capture_output=True, text=True, env=env
    )
    assert done.returncode == 0 and done.stdout == ""
    assert any("unknown host" in line for line in logfile.read_log(home, "hooks"))
    assert not (elsewhere / ".march").exists()


def test_a_recall_whose_caller_stopped_waiting_records_nothing(bm25_store):
    # The engine answers a hook after the hook gave up and answered on its own:
    # those hints were never shown, so they must not be logged (they would
    # suppress the memory for ten runs) and the prompt must not count twice.
    prompt = "Dog's medication carprofen tablet"
    bm25_store.deadline = time.time() - 1
    try:
        # Raised, not an empty answer: the engine refuses, and its client answers on its own.
        with pytest.raises(Expired):
            handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))
        with pytest.raises(Expired):
            bm25_store.recall(prompt, run_id="late")
    finally:
        bm25_store.deadline = None
    assert bm25_store.con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert bm25_store.con.execute("SELECT count(*) FROM recall_log").fetchone()[0] == 0
    again = handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt))
    assert context_of(again, "UserPromptSubmit").startswith("[recall]\n- mem_dog | score=")
    assert [r[0] for r in bm25_store.con.execute("SELECT run_id FROM runs")] == ["cc:s1:1"]


def test_a_long_session_id_still_gets_hints_and_runs_of_its_own(bm25_store):
    # 196 characters and more made a run id over its bound: no recall at all.
    prompt = "Dog's medication carprofen tablet"
    answers = [
        handle(bm25_store, "claude-code", event("UserPromptSubmit", prompt=prompt, session_id=sid))
        for sid in ("s" * 400 + "a", "s" * 400 + "b")
    ]
    assert all("mem_dog" in a["stdout"] for a in answers), answers  # two sessions: each is hinted once
    runs = [r[0] for r in bm25_store.con.execute("SELECT run_id FROM runs")]
    assert len(set(runs)) == 2 and all(len(r) <= 200 for r in runs)


#: The ``marchdb`` console script (``marchdb.cli.entry:main``) with the hook's stdin
#: budget (``EVENT_WAIT_SECONDS``, 5 s) at one second.
MARCHDB_WITH_A_SHORT_EVENT_WAIT = """
import sys
from marchdb.cli import entry
from marchdb.hosts import hook
hook.EVENT_WAIT_SECONDS = 1.0
sys.argv[0] = "marchdb"
sys.exit(entry.main())
"""


def test_a_hook_whose_stdin_stays_open_answers_nothing_and_says_why(tmp_path):
    # It waited forever: the prompt with it. Both hosts' hooks run at once, each
    # in its own home: each waits out its stdin budget (1 s here), in parallel.
    hosts = ("claude-code", "generic")
    procs = {}
    for host in hosts:
        procs[host] = subprocess.Popen(
            [sys.executable, "-c", MARCHDB_WITH_A_SHORT_EVENT_WAIT, "--home", str(tmp_path / host), "hook", host],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "MARCH_DAEMON": "0"},
        )
        procs[host].stdin.write(b'{"hook_event_name": "UserPromptSubmit", "prompt": "hi"')  # and never closed
        procs[host].stdin.flush()
    started = time.monotonic()
    for host in hosts:
        proc = procs[host]
        out = proc.stdout.read()  # until the hook exits: it must not wait for stdin to close
        assert proc.wait(timeout=30) == 0 and out == b"", host
        assert time.monotonic() - started < 15, host
        proc.stdin.close()
        assert any("did not end within 1 s" in line for line in logfile.read_log(tmp_path / host, "hooks")), host


def test_the_event_is_read_from_whatever_stdin_is(tmp_path):
    # A host may hand the hook a pipe, a file, a socket or nothing at all
    # (/dev/null): each is read to its end without waiting out the 5 s budget.
    import socket

    home, root = tmp_path / "home", tmp_path / "vault"
    root.mkdir()
    env = {**os.environ, "MARCH_DAEMON": "0", "MARCH_HOME": str(home), "MARCH_MEMORY_ROOT": str(root)}
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    start = event("SessionStart", source="startup")

    def hook(stdin) -> str:
        began = time.monotonic()
        done = subprocess.run([marchdb, "hook", "claude-code"], stdin=stdin, capture_output=True, env=env, timeout=60)
        assert done.returncode == 0 and done.stderr == b""
        assert time.monotonic() - began < 4.5  # never the stdin deadline
        return done.stdout.decode()

    event_file = tmp_path / "event.json"
    event_file.write_text(start)
    with event_file.open("rb") as f:
        assert "[agent_profile]" in context_of({"stdout": hook(f)}, "SessionStart")
    with open(os.devnull, "rb") as f:
        assert hook(f) == ""
    assert any("the event is empty" in line for line in logfile.read_log(home, "hooks"))
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(start.encode())
        ours.shutdown(socket.SHUT_WR)
        assert "[agent_profile]" in context_of({"stdout": hook(theirs)}, "SessionStart")


def test_a_generic_hook_with_a_bad_option_says_which_in_the_hook_log(tmp_path):
    # It was logged as "SystemExit: 2", the usage going to a stderr hosts may drop.
    env = {**os.environ, "MARCH_DAEMON": "0", "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(tmp_path)}
    marchdb = str(Path(sys.executable).with_name("marchdb"))
    for options, said in (
        (["--bogus", "1"], "unknown option '--bogus 1'"),
        (["--trigger", "bogus"], "invalid choice: 'bogus'"),
        (["--run"], "expected one argument"),
        (["--pro", "x"], "unknown option '--pro x'"),  # ambiguous (--profiles, --project): argparse exited
    ):
        done = subprocess.run(
            [marchdb, "hook", "generic", *options], input="hi", capture_output=True, text=True, env=env
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        assert any(said in line for line in logfile.read_log(tmp_path / "home", "hooks")), said


def test_the_rules_of_each_event_are_data_decided_before_anything_runs():
    # Store.hook carries the plan out; the rules themselves read no file and no index.
    start = hooks.plan("session_start", source="startup")
    assert (start.profiles, start.start_imports, start.afresh, start.recall) == (True, True, False, False)
    assert hooks.plan("session_start", source="clear").afresh and hooks.plan("compact").afresh
    assert not hooks.plan("compact").profiles
    prompt = hooks.plan("prompt", text="deploy")
    assert (prompt.run, prompt.trigger, prompt.inject, prompt.record_only) == ("next", "user", True, False)
    tool = hooks.plan("tool", text="deploy")
    assert (tool.run, tool.trigger, tool.inject) == ("current", "assistant", True)
    stop = hooks.plan("stop", text="done")
    assert (stop.run, stop.record_only, stop.inject) == ("current", True, False)
    assert not hooks.plan("prompt", text="deploy", record_only=True).inject  # what a host cannot take
    assert hooks.plan("prompt", text="  ").skip == "a prompt without its text; nothing injected"
    message = hooks.plan("message", text="deploy", trigger="assistant", profiles=True)
    assert (message.run, message.trigger, message.block, message.profiles) == ("given", "assistant", True, True)
    assert not hooks.plan("message", text="").recall


def test_the_answer_is_cut_to_what_every_host_keeps_whole():
    answer = hooks.answer("x" * (hooks.MAX_CONTEXT_CHARS + 500), [], "cc:s:1", ["", "a note"])
    assert len(answer["context"]) <= hooks.MAX_CONTEXT_CHARS + 1 and answer["context"].endswith("characters)\n")
    assert (answer["run_id"], answer["note"]) == ("cc:s:1", "a note")
    assert hooks.answer("  ", [], None, [])["context"] == ""
