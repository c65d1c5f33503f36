"""The host adapters and installers, on each host's documented JSON (the real
programs run in test_real_hosts.py where they can be installed; Cursor and
Cline cannot run headless here)."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from marchdb import ops
from marchdb.errors import FileError
from marchdb.hosts import BadEvent, adapter, claude_code, codex, cursor, gemini, install
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


def test_cursor_steers_after_a_tool_with_what_the_agent_said(store):
    base = {"conversation_id": "c2", "generation_id": "g1", "workspace_roots": ["/tmp"]}
    tool = {
        **base,
        "hook_event_name": "postToolUse",
        "tool_name": "Shell",
        "tool_input": {"command": "git push"},
        "tool_output": "{}",
        "agent_message": "Now I deploy the release on Friday afternoon.",
    }
    out = answer(store, "cursor", tool)
    assert json.loads(out["stdout"])["additional_context"].startswith("[recall]\n- mem_deploy | score=")
    # The reply at the end is recorded, never answered (Cursor reads nothing from afterAgentResponse).
    done = answer(store, "cursor", {**base, "hook_event_name": "afterAgentResponse", "text": "Deployed."})
    assert done["stdout"] == "" and done["parsed"]["event"] == "stop"
    # beforeSubmitPrompt cannot carry context: marchdb does not install it, and answers nothing for it.
    assert cursor.parse(json.dumps({**base, "hook_event_name": "beforeSubmitPrompt", "prompt": "x"}), []) is None


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
    cli = {
        "hookName": "tool_result",
        "taskId": "t2",
        "workspaceRoots": ["/tmp"],
        "postToolUse": {"toolName": "run_commands", "parameters": {"commands": "deploy friday afternoon release"}},
    }
    steer = answer(store, "cline", cli)
    assert steer["parsed"]["event"] == "tool" and "mem_deploy" in steer["stdout"]
    start = answer(store, "cline", {"hookName": "agent_start", "taskId": "t3", "taskStart": {"taskMetadata": {}}})
    assert "[user_profile]" in json.loads(start["stdout"])["contextModification"]
    end = answer(
        store,
        "cline",
        {"hookName": "agent_end", "taskId": "t3", "turn": {"outputText": "done"}, "taskComplete": {"taskMetadata": {}}},
    )
    assert end["stdout"] == "" and end["parsed"]["event"] == "stop"


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


def test_every_host_the_hook_answers_has_an_installer_or_is_generic():
    from marchdb.hosts import HOSTS

    assert set(HOSTS) - {"generic"} == set(install.TARGETS)
    for name in install.TARGETS:
        assert install.command_is_ours(install.hook_command(name), name)


# ---------------------------------------------------------------- installers


def test_cursor_hooks_are_flat_entries_in_a_versioned_file(tmp_path):
    spec = install.TARGETS["cursor"]
    path = tmp_path / ".cursor" / "hooks.json"
    theirs = {"version": 1, "hooks": {"beforeShellExecution": [{"command": "./audit.sh"}]}}
    path.parent.mkdir()
    path.write_text(json.dumps(theirs))
    command = install.hook_command("cursor")
    assert spec.install(path, command).events == ("sessionStart", "postToolUse", "afterAgentResponse")
    data = json.loads(path.read_text())
    assert data["hooks"]["sessionStart"] == [{"type": "command", "command": command, "timeout": 10}]
    assert data["hooks"]["beforeShellExecution"] == theirs["hooks"]["beforeShellExecution"]
    assert spec.uninstall(path).changed and json.loads(path.read_text()) == theirs
    fresh = tmp_path / "new" / "hooks.json"
    spec.install(fresh, command)
    assert json.loads(fresh.read_text())["version"] == 1
    spec.uninstall(fresh)
    assert not fresh.exists()  # it made the file, and nothing else was ever in it


def test_cline_hook_files_are_ours_only_when_marked(tmp_path):
    spec = install.TARGETS["cline"]
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


def test_the_installed_command_is_quiet_without_marchdb_and_carries_the_shells_settings(tmp_path):
    import subprocess

    command = install._command("cline", [str(tmp_path / "gone" / "marchdb")], {"MARCH_MEMORY_RECALL_MIN_SCORE": "0.4"})
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
    done = subprocess.run(["/bin/sh", "-c", install._command("codex", gone, {})], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_hermes_plugin_folder_that_is_not_ours_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes"))
    spec = install.TARGETS["hermes"]
    folder = spec.path(None)
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("# someone else's plugin called marchdb\n")
    with pytest.raises(FileError, match="not marchdb's plugin"):
        spec.install(folder, ["/usr/bin/marchdb"])
    assert not spec.uninstall(folder).changed and (folder / "__init__.py").exists()


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
