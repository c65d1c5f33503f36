"""The host adapters and installers, on each host's documented JSON (the real
programs run in test_real_hosts.py where they can be installed; Cursor,
VS Code and Cline cannot run headless here)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from marchdb import ops
from marchdb.errors import FileError
from marchdb.hosts import HOSTS, BadEvent, adapter, claude_code, codex, cursor, gemini, install, qwen
from marchdb.hosts.hook import answer_here
from marchdb.store import Store


@pytest.fixture
def store(cfg, vault):
    vault.memory(
        "deploy.md",
        "mem_deploy",
        name="Release freeze on Fridays",
        description="No production deploys on Friday afternoons",
        tags=["deploy"],
        body="Friday deploys broke the weekend twice.",
    )
    for i in range(60):  # keyword recall needs a vault whose word statistics mean something
        vault.memory(f"f{i}.md", f"mem_f{i}", name=f"Garden note {i}", description=f"tomatoes and beans {i}")
    s = Store(cfg, use_model=False)
    s.sync(embed=False)
    yield s
    s.close()


def answer(store, host: str, event: dict) -> dict:
    module = adapter(host)
    parsed = module.parse(json.dumps(event), [])
    return {"parsed": parsed, **(answer_here(store, module, parsed) if parsed else {"stdout": ""})}


# ---------------------------------------------------------------- Cursor (documented JSON)


def test_cursor_session_start_gives_the_profiles_as_additional_context(store):
    event = {
        "hook_event_name": "sessionStart",
        "conversation_id": "c1",
        "session_id": "c1",
        "workspace_roots": ["/tmp"],
    }
    out = answer(store, "cursor", event)
    assert set(json.loads(out["stdout"])) == {"additional_context"}
    assert "[agent_profile]" in json.loads(out["stdout"])["additional_context"]


def test_cursor_steers_after_a_tool_with_the_agents_words_from_its_transcript(store, tmp_path):
    # The adapter read agent_message, which Cursor's postToolUse does not carry: the steer never fired.
    transcript = tmp_path / "c2.jsonl"
    lines = [
        {"role": "user", "message": {"content": [{"type": "text", "text": "<user_query>\nship it\n</user_query>"}]}},
        {
            "role": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "Now I deploy the release on Friday afternoon."},
                    {"type": "tool_use", "name": "Shell", "input": {"command": "git push"}},
                ]
            },
        },
    ]
    transcript.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    base = {"conversation_id": "c2", "generation_id": "g1", "workspace_roots": ["/tmp"]}
    tool = {
        **base,
        "hook_event_name": "postToolUse",
        "tool_name": "Shell",
        "tool_input": {"command": "git push"},
        "tool_output": "{}",
        "tool_use_id": "call_1",
        "transcript_path": str(transcript),
    }
    out = answer(store, "cursor", tool)
    assert out["parsed"]["text"] == "Now I deploy the release on Friday afternoon."
    assert json.loads(out["stdout"])["additional_context"].startswith("[recall]\n- mem_deploy | score=")
    # Cursor's CLI gives no transcript: what the tool was asked to do is recalled on.
    cli = {**tool, "conversation_id": "c3", "transcript_path": None, "tool_input": {"command": "deploy friday"}}
    assert answer(store, "cursor", cli)["parsed"]["text"] == "deploy friday"
    # The reply at the end is recorded, never answered (Cursor reads nothing from afterAgentResponse).
    done = answer(store, "cursor", {**base, "hook_event_name": "afterAgentResponse", "text": "Deployed."})
    assert done["stdout"] == "" and done["parsed"]["event"] == "stop"


def test_cursor_gives_each_prompt_its_hints_as_additional_context(store):
    prompt = {
        "conversation_id": "c4",
        "hook_event_name": "beforeSubmitPrompt",
        "prompt": "Can we deploy on Friday afternoon?",
        "workspace_roots": ["/tmp"],
    }
    out = json.loads(answer(store, "cursor", prompt)["stdout"])
    assert out["continue"] is True and out["additional_context"].startswith("[recall]\n- mem_deploy | score=")
    quiet = json.loads(answer(store, "cursor", {**prompt, "conversation_id": "c5", "prompt": "what's 2+2"})["stdout"])
    assert quiet == {"continue": True}  # the prompt goes on; nothing is added
    assert "beforeSubmitPrompt" in cursor.installer().events


# ---------------------------------------------------------------- VS Code (Claude Code's hooks, camelCase)


def test_vscode_events_in_camel_case_are_answered_as_vscode_takes_them(store):
    # Claude Code's adapter read session_id / hook_event_name only: in VS Code it said nothing.
    start = {"sessionId": "v1", "hookEventName": "SessionStart", "source": "new", "cwd": "/tmp", "timestamp": "t"}
    out = answer(store, "claude-code", start)
    assert out["parsed"]["host"] == "vscode"
    context = json.loads(out["stdout"])["hookSpecificOutput"]
    assert context["hookEventName"] == "SessionStart" and "[user_profile]" in context["additionalContext"]
    # Its UserPromptSubmit takes no context: the prompt opens a run, its hints are only recorded.
    prompt = {"sessionId": "v1", "hookEventName": "UserPromptSubmit", "prompt": "Can we deploy on Friday afternoon?"}
    said = answer(store, "claude-code", prompt)
    assert said["stdout"] == "" and said["parsed"]["event"] == "prompt"
    logged = list(store.con.execute("SELECT trigger FROM recall_log WHERE mem_id = 'mem_deploy'"))
    assert logged == [("record",)]
    # After a tool, what it was asked to do is recalled on, and VS Code takes that context.
    tool = {
        "sessionId": "v1",
        "hookEventName": "PostToolUse",
        "tool_name": "runInTerminal",
        "tool_input": {"command": "deploy the release friday afternoon"},
        "tool_response": "ok",
    }
    steer = json.loads(answer(store, "claude-code", tool)["stdout"])["hookSpecificOutput"]
    assert steer["hookEventName"] == "PostToolUse" and "mem_deploy" in steer["additionalContext"]
    # The same hooks serve VS Code: `install vscode` writes Claude Code's file, and doctor lists it once.
    assert adapter("vscode").installer().user_file() == claude_code.installer().user_file()


# ---------------------------------------------------------------- Cline (both engines' JSON)


def test_cline_events_are_told_by_their_object_not_their_name(store):
    vscode = {
        "hookName": "UserPromptSubmit",
        "taskId": "t1",
        "workspaceRoots": ["/tmp"],
        "userPromptSubmit": {"prompt": "Can we deploy on Friday afternoon?", "attachments": []},
    }
    out = answer(store, "cline", vscode)
    assert json.loads(out["stdout"])["contextModification"].startswith("[recall]\n- mem_deploy | score=")
    tool = {
        "hookName": "PostToolUse",
        "taskId": "t2",
        "workspaceRoots": ["/tmp"],
        "postToolUse": {"toolName": "run_commands", "parameters": {"commands": "deploy friday afternoon release"}},
    }
    steer = answer(store, "cline", tool)
    assert steer["parsed"]["event"] == "tool" and "mem_deploy" in steer["stdout"]
    start = answer(store, "cline", {"hookName": "TaskStart", "taskId": "t3", "taskStart": {"taskMetadata": {}}})
    assert "[user_profile]" in json.loads(start["stdout"])["contextModification"]
    end = answer(store, "cline", {"hookName": "TaskComplete", "taskId": "t3", "taskComplete": {"taskMetadata": {}}})
    assert end["parsed"] is None  # no result to record
    end = answer(
        store,
        "cline",
        {"hookName": "TaskComplete", "taskId": "t3", "taskComplete": {"taskMetadata": {"result": "done"}}},
    )
    assert end["stdout"] == "" and end["parsed"]["event"] == "stop"
    # The CLI runs the same files in its own words and drops their answers: its plugin answers
    # it instead, so its hook events are left alone (one prompt, one run).
    for name in ("tool_result", "agent_start", "agent_end", "user_prompt_submit"):
        assert answer(store, "cline", {**tool, "hookName": name, "taskId": "t4"})["parsed"] is None


def test_the_cline_clis_plugin_events_are_read_as_a_plugins(store):
    prompt = {
        "hook_event_name": "UserPromptSubmit",
        "session_id": "s1",
        "cwd": "/tmp",
        "prompt": "Can we deploy on Friday afternoon?",
    }
    out = answer(store, "cline", prompt)
    assert out["parsed"]["host"] == "cline-cli" and out["stdout"].startswith("[recall]\n- mem_deploy | score=")
    steer = {"hook_event_name": "PostToolUse", "session_id": "s1", "assistant_text": "a deploy on friday afternoon"}
    assert answer(store, "cline", steer)["parsed"]["event"] == "tool"
    stop = {"hook_event_name": "Stop", "session_id": "s1", "last_assistant_message": "Deployed."}
    assert answer(store, "cline", stop)["stdout"] == ""
    start = answer(store, "cline", {"hook_event_name": "SessionStart", "session_id": "s2", "source": "startup"})
    assert "[user_profile]" in start["stdout"] and not start["stdout"].startswith("{")


# ---------------------------------------------------------------- Gemini, Codex: what is read


def test_gemini_never_recalls_on_the_context_it_was_given(store):
    prompt = "<hook_context>[agent_profile]\nDeploy on Friday afternoons</hook_context>\n\nhow are the tomatoes?"
    parsed = gemini.parse(json.dumps({"hook_event_name": "BeforeAgent", "session_id": "g", "prompt": prompt}), [])
    assert parsed["text"] == "how are the tomatoes?"


def test_codex_reads_the_assistants_words_of_this_turn_from_its_rollout(tmp_path):
    lines = [
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "<environment_context>x</environment_context>"}],
            },
        },
        {
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        },
        {
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking the calendar."}],
            },
        },
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "arguments": "{}"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "output": "ok"}},
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert codex.latest_assistant_text(str(path), this_turn=True) == "Checking the calendar."
    with path.open("a") as fh:
        fh.write(json.dumps(lines[1]) + "\n")  # a new prompt: the earlier words belong to the last turn
    assert codex.latest_assistant_text(str(path), this_turn=True) == ""
    assert codex.latest_assistant_text(str(path)) == "Checking the calendar."


def test_claude_code_tool_events_read_only_this_turn(tmp_path):
    entries = [
        {"type": "user", "message": {"content": "first question"}},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "An old answer."}]}},
        {"type": "user", "message": {"content": "second question"}},
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Bash"}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    assert claude_code.latest_assistant_text(str(path), this_turn=True) == ""  # no text since the prompt
    assert claude_code.latest_assistant_text(str(path)) == "An old answer."


@pytest.mark.parametrize("host", ["claude-code", "codex", "gemini", "cursor", "cline", "hermes"])
def test_bad_events_are_refused_with_a_reason_for_the_hook_log(host):
    module = adapter(host)
    for raw in ("", "garbage", "[1]", '{"a": ' + "[" * 10_000):
        with pytest.raises(BadEvent):
            module.parse(raw, [])
    assert module.parse(json.dumps({"hook_event_name": "Nope", "hookName": "nope"}), []) is None


@pytest.mark.parametrize("host", list(HOSTS))
def test_each_host_is_one_module_that_declares_all_of_it(host):
    from pathlib import Path

    module = adapter(host)
    docs = Path(__file__).resolve().parent.parent / "docs" / "hosts" / module.DOCS
    assert module.TITLE and docs.is_file(), f"{host}: no docs page {docs}"
    assert isinstance(module.EVENTS, dict) and callable(module.parse) and callable(module.render)
    assert (module.PROGRAM is None) == bool(getattr(module, "NOT_RUN", None)), f"{host}: a program, or why not"
    if module.PROGRAM is not None:  # the page says which release the real-host test ran
        assert module.PROGRAM["version"] in docs.read_text(encoding="utf-8"), f"{module.DOCS} names no version"
    sample = module.sample_prompt("s1", "Can we deploy on Friday afternoon?")
    assert isinstance(sample, str) and (host == "generic" or module.parse(sample, []) is not None)
    if host in install.installable():
        assert install.command_is_ours(install.hook_command(host), host)
        assert install.target(host).events


def test_install_and_hook_help_name_every_host_of_the_registry():
    from typer.testing import CliRunner

    from marchdb.cli.main import app

    runner = CliRunner()
    for command, hosts in (("install", install.installable()), ("uninstall", install.installable()), ("hook", HOSTS)):
        out = runner.invoke(app, [command, "--help"], terminal_width=400)
        assert all(h in out.stdout for h in hosts), (command, out.stdout)


# ---------------------------------------------------------------- installers


def test_cursor_hooks_are_flat_entries_in_a_versioned_file(tmp_path):
    spec = install.target("cursor")
    path = tmp_path / ".cursor" / "hooks.json"
    theirs = {"version": 1, "hooks": {"beforeShellExecution": [{"command": "./audit.sh"}]}}
    path.parent.mkdir()
    path.write_text(json.dumps(theirs))
    command = install.hook_command("cursor")
    assert spec.install_file(path, command).events == tuple(cursor.EVENTS)
    data = json.loads(path.read_text())
    assert data["hooks"]["sessionStart"] == [{"type": "command", "command": command, "timeout": 10}]
    assert data["hooks"]["beforeShellExecution"] == theirs["hooks"]["beforeShellExecution"]
    assert spec.uninstall_file(path).changed and json.loads(path.read_text()) == theirs
    fresh = tmp_path / "new" / "hooks.json"
    spec.install_file(fresh, command)
    assert json.loads(fresh.read_text())["version"] == 1
    spec.uninstall_file(fresh)
    assert not fresh.exists()  # it made the file, and nothing else was ever in it


def test_cline_hook_files_are_ours_only_when_marked(tmp_path):
    spec = install.target("cline").parts[0]  # the hook files (the CLI's plugin is the other part)
    folder = tmp_path / ".clinerules" / "hooks"
    command = install.hook_command("cline")
    result = spec.install_in(folder, command)
    assert result.events == spec.events
    for event in spec.events:
        path = folder / event
        assert stat.S_IMODE(path.stat().st_mode) & 0o111 and path.read_text().startswith("#!/bin/sh\n")
    assert not spec.install_in(folder, command).changed  # twice: nothing to change
    (folder / "TaskStart").unlink()
    (folder / "TaskStart").write_text("#!/bin/sh\necho mine\n")  # the user's own hook
    with pytest.raises(FileError, match="not marchdb's hook"):
        spec.install_in(folder, command)
    removed = spec.uninstall_in(folder)
    assert "TaskStart" not in removed.events and (folder / "TaskStart").read_text() == "#!/bin/sh\necho mine\n"


def test_cline_is_installed_once_and_an_earlier_second_copy_goes(tmp_path, monkeypatch):
    # marchdb wrote ~/Documents/Cline/Hooks and ~/.cline/hooks; the CLI reads both, and ran every event twice.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLINE_DIR", raising=False)
    spec = install.target("cline")
    legacy = tmp_path / ".cline" / "hooks"
    spec.parts[0].install_in(legacy, install.hook_command("cline"))
    results = install.install("cline", None, install.marchdb_argv(launcher=True), {})
    hooks, plugins = tmp_path / "Documents" / "Cline" / "Hooks", tmp_path / ".cline" / "plugins"
    assert [r.settings for r in results] == [hooks, legacy, plugins]
    assert not any(legacy.iterdir()) and any("twice" in n for n in results[1].notes)
    assert [r["where"] for r in spec.found(None)] == [str(hooks), str(plugins)]


def test_a_refused_cline_install_leaves_things_as_they_were(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLINE_DIR", raising=False)
    mine = tmp_path / ".cline" / "plugins" / "marchdb.js"
    mine.parent.mkdir(parents=True)
    mine.write_text("// the user's own plugin of that name\n")
    with pytest.raises(FileError, match="not marchdb's"):
        install.install("cline", None, install.marchdb_argv(launcher=True), {})
    # The extension's hook files, written first, were taken back; the user's file is untouched.
    hooks = tmp_path / "Documents" / "Cline" / "Hooks"
    assert not hooks.exists() or not any(hooks.iterdir())
    assert mine.read_text() == "// the user's own plugin of that name\n"
    assert install.target("cline").found(None) == []


def test_the_installed_command_is_quiet_without_marchdb_and_carries_the_shells_settings(tmp_path):
    import subprocess

    command = install.command_for(
        "cline", [str(tmp_path / "gone" / "marchdb")], {"MARCH_MEMORY_RECALL_MIN_SCORE": "0.4"}
    )
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, input="{}")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert "env MARCH_MEMORY_RECALL_MIN_SCORE=0.4 " in command
    assert install.carried_env({"MARCH_MEMORY_RECALL_MIN_SCORE": "0.4", "PATH": "/bin"}) == {
        "MARCH_MEMORY_RECALL_MIN_SCORE": "0.4"
    }


def test_the_installed_command_starts_python_isolated_and_is_quiet_once_marchdb_is_uninstalled(tmp_path):
    import subprocess

    command = install.hook_command("claude-code")
    # This Python, isolated (-I: the session's folder is not on its path) and without site (-S), on the launcher.
    argv = install.marchdb_argv(launcher=True)
    assert argv[:3] == [sys.executable, "-I", "-S"] and argv[3].endswith(install.LAUNCHER)
    assert install.command_is_ours(command, "claude-code")
    # Older forms are ours too (an upgrade replaces them); a user's own script is not.
    for older in ("/v/bin/marchdb hook claude-code", "exec /v/bin/python -m marchdb hook claude-code"):
        assert install.command_is_ours(older, "claude-code")
    assert not install.command_is_ours("/v/bin/python -I -S /x/audit.py hook claude-code", "claude-code")
    # pip uninstall marchdb keeps the venv's Python: the command then exits at once, saying nothing.
    gone = [sys.executable, "-I", "-S", str(tmp_path / "gone" / install.LAUNCHER)]
    done = subprocess.run(["/bin/sh", "-c", install.command_for("codex", gone, {})], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_hermes_plugin_folder_that_is_not_ours_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes"))
    monkeypatch.setenv("PATH", "/nonexistent")  # no `hermes config set` here
    folder = tmp_path / "hermes" / "plugins" / "marchdb"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("# someone else's plugin called marchdb\n")
    with pytest.raises(FileError, match="not marchdb's"):
        install.install("hermes", None, ["/usr/bin/marchdb"], {})
    assert not install.uninstall("hermes", None)[0].changed and (folder / "__init__.py").exists()


def test_hermes_uninstall_removes_exactly_what_install_wrote(tmp_path, monkeypatch):
    # It deleted the whole plugin folder: a NOTES.md and a cache/ the user kept there were gone.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes"))
    monkeypatch.setenv("PATH", "/nonexistent")
    folder = tmp_path / "hermes" / "plugins" / "marchdb"
    install.install("hermes", None, install.marchdb_argv(launcher=True), {})
    (folder / "NOTES.md").write_text("mine")
    (folder / "cache").mkdir()
    (folder / "cache" / "x").write_text("mine too")
    assert install.uninstall("hermes", None)[0].changed
    assert sorted(p.name for p in folder.iterdir()) == ["NOTES.md", "cache"]
    install.install("hermes", None, install.marchdb_argv(launcher=True), {})
    (folder / "NOTES.md").unlink()
    shutil.rmtree(folder / "cache")
    (folder / "__pycache__").mkdir()  # Hermes imported the plugin
    (folder / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"compiled")
    install.uninstall("hermes", None)
    assert not folder.exists()  # nothing of the user's left in it: the folder install made goes too


def test_hermes_plugin_yaml_is_never_written_through_a_link(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes"))
    monkeypatch.setenv("PATH", "/nonexistent")
    folder = tmp_path / "hermes" / "plugins" / "marchdb"
    install.install("hermes", None, ["/old/bin/marchdb"], {})
    victim = tmp_path / "victim.yaml"
    victim.write_text("someone else's\n")
    (folder / "plugin.yaml").unlink()
    (folder / "plugin.yaml").symlink_to(victim)
    with pytest.raises(FileError, match="not marchdb's"):
        install.install("hermes", None, install.marchdb_argv(launcher=True), {})
    assert victim.read_text() == "someone else's\n"


def _hermes_provider(tmp_path, argv: list[str]):
    """The provider module install writes, loaded with a stand-in for Hermes' base class."""
    import importlib.util
    import types

    from marchdb.hosts.hermes import provider_source

    agent = types.ModuleType("agent")
    base = types.ModuleType("agent.memory_provider")
    base.MemoryProvider = object
    sys.modules.setdefault("agent", agent)
    sys.modules["agent.memory_provider"] = base
    path = tmp_path / "provider.py"
    path.write_text(provider_source(argv))
    spec = importlib.util.spec_from_file_location("marchdb_hermes_provider", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MarchdbMemoryProvider()


def test_hermes_tool_names_never_reach_marchdbs_command_line(tmp_path, cfg):
    # The tool name was a command-line word: "--help" gave the model the CLI's help.
    argv = install.marchdb_argv(cfg.home, cfg.memory_root, cfg.embedding_model, launcher=True)
    provider = _hermes_provider(tmp_path, argv)
    said = json.loads(provider.handle_tool_call("--help", {}))
    assert "no tool '--help'" in said["error"] and "Usage" not in json.dumps(said)
    # A refusal says why, not "marchdb did not answer".
    refused = json.loads(provider.handle_tool_call("memory_save", {"name": "x", "unknown_argument": 1}))
    assert "did not answer" not in refused["error"] and "unknown_argument" in refused["error"]
    assert json.loads(provider.handle_tool_call("memory_open", {"id": "mem_nope"}))["status"] == "not_found"


def test_hermes_tools_are_the_tables_agent_operations():
    names = {t["name"] for t in ops.tools()}
    from marchdb.hosts.hermes import TOOLS

    assert set(TOOLS) <= names
    search = next(t for t in ops.tools() if t["name"] == "memory_search")
    assert (
        search["parameters"]["required"] == ["query"] and search["parameters"]["properties"]["limit"]["maximum"] == 100
    )


def test_a_session_window_starts_afresh_after_clear_or_compaction(store):
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s9", "prompt": "Can we deploy on Friday afternoon?"}
    assert "mem_deploy" in answer(store, "claude-code", prompt)["stdout"]
    assert answer(store, "claude-code", prompt)["stdout"] == ""  # hinted one run ago: suppressed
    answer(store, "claude-code", {"hook_event_name": "SessionStart", "session_id": "s9", "source": "compact"})
    # The summary may not hold the hint any more: it is hinted again.
    assert "mem_deploy" in answer(store, "claude-code", prompt)["stdout"]
    answer(store, "claude-code", {"hook_event_name": "PreCompact", "session_id": "s9"})
    assert "mem_deploy" in answer(store, "claude-code", prompt)["stdout"]
    runs = [r[0] for r in store.con.execute("SELECT conversation FROM runs ORDER BY seq")]
    assert runs[-1] == "cc:s9~2" and os.path.commonprefix(runs) == "cc:s9"


# ---------------------------------------------------------------- qwen, gemini: which events count


def test_qwen_recalls_on_what_the_user_typed_not_on_each_model_call(store):
    typed = json.loads(qwen.sample_prompt("q1", "Can we deploy on Friday afternoon?"))
    assert qwen.parse(json.dumps(typed), [])["text"] == "Can we deploy on Friday afternoon?"
    # Qwen fires UserPromptSubmit again before the model call that carries a tool's result.
    again = {**typed, "prompt": ""}
    del again["submitted_prompt"]
    assert qwen.parse(json.dumps(again), []) is None
    out = json.loads(answer(store, "qwen", typed)["stdout"])["hookSpecificOutput"]
    assert out["hookEventName"] == "UserPromptSubmit" and "mem_deploy" in out["additionalContext"]


def test_gemini_compress_starts_the_window_afresh_only_when_it_compresses(store, tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text("{}\n")
    event = {"hook_event_name": "PreCompress", "session_id": "g1", "trigger": "auto", "transcript_path": str(chat)}
    assert gemini.parse(json.dumps(event), []) is None  # before nearly every call: a short chat is not compressed
    assert gemini.parse(json.dumps({**event, "trigger": "manual"}), [])["event"] == "compact"
    with chat.open("r+b") as fh:
        fh.truncate(gemini.COMPRESS_AT_BYTES)
    assert gemini.parse(json.dumps(event), [])["event"] == "compact"
    assert "PreCompress" in gemini.installer().events


# ---------------------------------------------------------------- installers: links, owners, notes, edits


def test_install_into_a_project_never_writes_through_a_link_out_of_it(tmp_path):
    # install --project through a symlinked .claude rewrote another program's settings.json.
    project, elsewhere = tmp_path / "project", tmp_path / "other-program"
    project.mkdir()
    elsewhere.mkdir()
    (elsewhere / "settings.local.json").write_text('{"theirs": 1}')
    (project / ".claude").symlink_to(elsewhere)
    with pytest.raises(FileError, match="leads outside"):
        install.install("claude-code", project, install.marchdb_argv(launcher=True), {})
    assert (elsewhere / "settings.local.json").read_text() == '{"theirs": 1}'
    assert sorted(p.name for p in elsewhere.iterdir()) == ["settings.local.json"]
    (project / ".gemini").symlink_to(elsewhere)
    with pytest.raises(FileError, match="leads outside"):
        install.install("gemini", project, install.marchdb_argv(launcher=True), {})
    # A link that stays inside the project is followed.
    (project / "config").mkdir()
    (project / ".qwen").symlink_to(project / "config")
    install.install("qwen", project, install.marchdb_argv(launcher=True), {})
    assert (project / "config" / "settings.json").is_file()


def test_a_refused_install_leaves_no_note(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{}")
    path.chmod(0o444)
    with pytest.raises(FileError, match="read-only"):
        install.target("claude-code").install_file(path, install.hook_command())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can write another user's file")
def test_a_root_install_leaves_the_file_its_owners(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"theirs": 1}')
    os.chown(path, 4242, 4243)
    os.chown(tmp_path, 4242, 4243)
    result = install.target("claude-code").install_file(path, install.hook_command())
    for written in (path, result.backup, path.with_name("settings.json.marchdb-install")):
        assert (os.stat(written).st_uid, os.stat(written).st_gid) == (4242, 4243), written
    path.write_text(json.dumps({**json.loads(path.read_text()), "more": 2}))
    os.chown(path, 4242, 4243)
    install.target("claude-code").uninstall_file(path)
    assert (os.stat(path).st_uid, os.stat(path).st_gid) == (4242, 4243)


def test_an_edited_marchdb_hook_is_removed_by_uninstall_and_replaced_by_install(tmp_path):
    # The user sent its output to a log: uninstall left it, and the next install added a second one.
    spec = install.target("claude-code")
    path = tmp_path / "settings.json"
    spec.install_file(path, install.hook_command())
    data = json.loads(path.read_text())
    for groups in data["hooks"].values():
        groups[0]["hooks"][0]["command"] += " 2>>/tmp/marchdb-hook.log"
    path.write_text(json.dumps(data))
    again = spec.install_file(path, install.hook_command())
    assert again.changed and again.replaced
    data = json.loads(path.read_text())
    assert all(len(groups) == 1 for groups in data["hooks"].values())
    for groups in data["hooks"].values():
        groups[0]["hooks"][0]["command"] = "MARCH_THREADS=2 " + groups[0]["hooks"][0]["command"] + " >/dev/null"
    path.write_text(json.dumps(data))
    assert spec.uninstall_file(path).changed and not path.exists()
    for edited in ("/v/bin/marchdb --home /h hook codex 2>&1", "exec env A=1 /v/bin/python -m marchdb hook codex >x"):
        assert install.command_is_ours(edited, "codex"), edited
    assert not install.command_is_ours("/v/bin/marchdb-wrapper hook codex 2>&1", "codex")


# ---------------------------------------------------------------- compaction


def test_codex_compaction_starts_the_window_afresh_without_the_profiles_twice(store):
    # Codex keeps the context its session began with; SessionStart(compact) gave the profiles again.
    event = {"hook_event_name": "SessionStart", "session_id": "x1", "source": "compact"}
    out = answer(store, "codex", event)
    assert out["parsed"]["event"] == "compact" and out["stdout"] == ""
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "x1", "prompt": "Can we deploy on Friday afternoon?"}
    assert "mem_deploy" in answer(store, "codex", prompt)["stdout"]  # a fresh window
    assert "[user_profile]" in answer(store, "codex", {**event, "source": "startup"})["stdout"]


def test_hermes_compaction_hints_again_only_what_it_summarized(store, cfg, tmp_path):
    # Hermes keeps its first messages whole: the hint there was given a second time after a compaction.
    provider = _hermes_provider(
        tmp_path, install.marchdb_argv(cfg.home, cfg.memory_root, cfg.embedding_model, launcher=True)
    )
    provider.initialize("h1")
    prompt = "Can we deploy on Friday afternoon?"
    first = provider.prefetch(prompt)
    assert "mem_deploy" in first
    provider.on_pre_compress([{"role": "user", "content": "how are the tomatoes?"}])  # the hint stays in the head
    assert "mem_deploy" not in provider.prefetch(prompt)
    summarized = [{"role": "user", "content": [{"type": "text", "text": f"<memory-context>{first}</memory-context>"}]}]
    provider.on_pre_compress(summarized)  # now the hint is in what Hermes summarizes away
    assert "mem_deploy" in provider.prefetch(prompt)


# ---------------------------------------------------------------- trust


def test_codex_and_gemini_project_hooks_say_when_the_host_will_not_read_them(tmp_path, monkeypatch):
    # install codex --project did nothing until Codex trusted the project, and doctor said nothing.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "home" / ".codex"))
    project = tmp_path / "project"
    project.mkdir()
    argv = install.marchdb_argv(launcher=True)
    [result] = install.install("codex", project, argv, {})
    assert any("only in a project it trusts" in n for n in result.notes)
    rows = install.installed(project)
    problems = codex.doctor(rows, str(project))
    assert [p["kind"] for p in problems if p["kind"] == "codex_project_untrusted"] == ["codex_project_untrusted"]
    (tmp_path / "home" / ".codex").mkdir(parents=True, exist_ok=True)
    (tmp_path / "home" / ".codex" / "config.toml").write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n')
    assert codex.project_trusted(str(project / "sub"))
    assert not [p for p in codex.doctor(rows, str(tmp_path)) if p["kind"] == "codex_project_untrusted"]
    # Gemini reads a project's settings only in a trusted folder once its folder trust is on.
    gemini_home = tmp_path / "home" / ".gemini"
    gemini_home.mkdir(parents=True)
    (gemini_home / "settings.json").write_text(json.dumps({"security": {"folderTrust": {"enabled": True}}}))
    [result] = install.install("gemini", project, argv, {})
    assert any("does not trust" in n for n in result.notes)
    assert [p["kind"] for p in gemini.doctor(install.installed(project), str(project))] == ["gemini_folder_untrusted"]
    (gemini_home / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    assert gemini.folder_trusted(str(project)) and gemini.doctor(install.installed(project), str(project)) == []


def test_every_setting_marchdb_reads_from_the_environment_reaches_the_hooks_or_says_why_not():
    # MARCH_NOW_STALE_HOURS, MARCH_LLAMA_EXTRA_BUFFERS and MARCH_IMPORT_SESSIONS were read
    # by marchdb but left out of the installed command: a hook answered without them.
    import re

    package = Path(install.__file__).parent.parent
    read = set()
    for source in package.rglob("*.py"):
        read |= set(re.findall(r"[\"'](MARCH_[A-Z_]+)[\"']", source.read_text(encoding="utf-8")))
    assert read - set(install.CARRIED_ENV) - set(install.NOT_CARRIED_ENV) == set()
    assert not set(install.CARRIED_ENV) & set(install.NOT_CARRIED_ENV)


def test_doctor_says_it_cannot_tell_codex_trust_when_codex_is_not_here(tmp_path, monkeypatch):
    # With codex not on PATH, doctor said nothing of trust: read as "all is well".
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "home" / ".codex"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    install.install("codex", None, install.marchdb_argv(launcher=True), {})
    problems = codex.doctor(install.installed(None), str(tmp_path))
    [unknown] = [p for p in problems if p["kind"] == "codex_trust_unknown"]
    assert "cannot tell" in unknown["detail"] and "/hooks" in unknown["advice"]


def test_what_a_tool_was_asked_is_the_texts_of_its_input_not_its_name_or_keys():
    # VS Code's steer recalled on 'runInTerminal {"command": "..."}': the tool's name and the
    # JSON keys were words of the message, and a memory naming every other word scored 0.4995.
    asked = claude_code.tool_asked({"command": "deploy friday", "options": [{"cwd": "/srv"}, 3], "dry": True})
    assert asked == "deploy friday\n/srv"
    assert claude_code.tool_asked(None) == "" and claude_code.tool_asked({"n": 1}) == ""
    assert len(claude_code.tool_asked({"patch": "x" * 10_000})) == claude_code.TOOL_TEXT_CHARS
