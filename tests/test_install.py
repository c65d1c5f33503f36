"""`marchdb install|uninstall HOST` on real settings files."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.errors import FileError
from marchdb.hosts import install
from marchdb.hosts import settings as settings_mod

THEIRS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "~/bin/their-hook.sh", "timeout": 5}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit"}]}],
    },
}


CLAUDE = install.target("claude-code")
EVENTS = CLAUDE.events


def claude_install(path, command):
    return CLAUDE.install_file(path, command)


def claude_uninstall(path):
    return CLAUDE.uninstall_file(path)


@pytest.fixture
def settings(tmp_path):
    path = tmp_path / "claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(THEIRS, indent=4), encoding="utf-8")
    return path


def ours(data: dict, event: str) -> list[dict]:
    return [
        h
        for g in data["hooks"].get(event, [])
        if isinstance(g, dict) and isinstance(g.get("hooks"), list)
        for h in g["hooks"]
        if install.is_ours(h)
    ]


def test_install_adds_our_hooks_and_keeps_everything_else(settings):
    command = install.hook_command()
    result = claude_install(settings, command)
    assert result.changed and result.events == EVENTS
    data = json.loads(settings.read_text())
    for event in EVENTS:
        [hook] = ours(data, event)
        assert hook == {"type": "command", "command": command, "timeout": install.TIMEOUT_SECONDS}
        assert "matcher" not in data["hooks"][event][-1]
    assert command.endswith(" hook claude-code") and os.path.isabs(command.split()[2])
    # theirs, untouched
    assert data["model"] == "opus" and data["permissions"] == THEIRS["permissions"]
    assert data["hooks"]["PreToolUse"] == THEIRS["hooks"]["PreToolUse"]
    assert data["hooks"]["UserPromptSubmit"][0] == THEIRS["hooks"]["UserPromptSubmit"][0]
    assert json.loads(result.backup.read_text()) == THEIRS


def test_install_twice_changes_nothing_and_uninstall_restores(settings):
    command = install.hook_command()
    claude_install(settings, command)
    after_first = settings.read_text()
    again = claude_install(settings, command)
    assert not again.changed and settings.read_text() == after_first
    removed = claude_uninstall(settings)
    assert removed.changed and set(removed.events) == set(EVENTS)
    assert json.loads(settings.read_text()) == THEIRS
    assert not claude_uninstall(settings).changed


def test_a_moved_installation_replaces_its_old_hook(settings):
    claude_install(settings, "/old/venv/bin/marchdb hook claude-code")
    result = claude_install(settings, install.hook_command())
    # Said, not done silently (it may be another home's hook); the backup keeps it.
    assert result.replaced == ("/old/venv/bin/marchdb hook claude-code",)
    assert "/old/venv/bin/marchdb" in result.backup.read_text()
    data = json.loads(settings.read_text())
    assert all(len(ours(data, e)) == 1 for e in EVENTS)
    assert ours(data, "Stop")[0]["command"] == install.hook_command()


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[1, 2]",
        '{"hooks": []}',
        '{"hooks": {"Stop": {}}}',
        '{"a": 1e400}',  # read as infinity, it would be written back as Infinity: not JSON
        '{"a": NaN}',
        '{"env": {"A": "1"}, "env": {"B": "2"}}',  # json keeps the last: env.A would be lost
        '{"a": ' + "[" * 100_000,  # nested too deeply for the parser: exit 1 ("a bug") before
    ],
)
def test_a_file_it_cannot_read_is_refused_untouched(settings, content):
    settings.write_text(content, encoding="utf-8")
    before = settings.stat().st_mtime_ns
    with pytest.raises(Exception) as err:
        claude_install(settings, install.hook_command())
    assert "nothing was changed" in str(err.value) or "fix it by hand" in str(err.value)
    assert settings.read_text() == content and settings.stat().st_mtime_ns == before
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]  # no backup, no temp file


@pytest.mark.parametrize("groups", [[{"hooks": None}], [{"hooks": 5}], [5, "x", None]])
def test_odd_hook_groups_of_others_are_kept_as_they_are(settings, groups):
    settings.write_text(json.dumps({"hooks": {"Stop": groups}}), encoding="utf-8")
    assert claude_install(settings, install.hook_command()).changed
    data = json.loads(settings.read_text())
    assert data["hooks"]["Stop"][: len(groups)] == groups and len(ours(data, "Stop")) == 1
    assert claude_uninstall(settings).changed
    assert json.loads(settings.read_text()) == {"hooks": {"Stop": groups}}


def test_a_project_given_as_an_empty_name_or_a_claude_that_is_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    out = runner.invoke(app, ["install", "claude-code", "--project", ""])  # "$PROJECT" unset in a script
    assert out.exit_code == 3 and "give the project folder" in out.stderr and not (tmp_path / ".claude").exists()
    (tmp_path / ".claude").write_text("not a folder")
    out = runner.invoke(app, ["install", "claude-code", "--project", str(tmp_path)])
    assert out.exit_code == 8 and "nothing was changed" in out.stderr and out.stderr.count("\n") == 1
    assert (tmp_path / ".claude").read_text() == "not a folder"


def test_a_symlinked_settings_file_is_refused(settings, tmp_path):
    link = tmp_path / "claude" / "linked.json"
    link.symlink_to(settings)
    with pytest.raises(FileError, match="symlink"):
        claude_install(link, install.hook_command())
    assert json.loads(settings.read_text()) == THEIRS


def test_cli_install_user_and_project(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-home"))
    runner = CliRunner()
    out = runner.invoke(app, ["--home", str(tmp_path / "h"), "install", "claude-code", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)["results"][0]
    assert data["settings"] == str(tmp_path / "claude-home" / "settings.json") and data["changed"]
    assert f"--home {tmp_path / 'h'}" in data["command"]  # a non-default home travels with the hook
    # --user, the obvious reverse of install --user, removes them again.
    assert runner.invoke(app, ["uninstall", "claude-code", "--user"]).exit_code == 0
    assert not (tmp_path / "claude-home" / "settings.json").exists()  # install made it: gone again
    assert runner.invoke(app, ["--home", str(tmp_path / "h"), "install", "claude-code", "--user"]).exit_code == 0
    project = tmp_path / "proj"
    project.mkdir()
    out = runner.invoke(app, ["install", "claude-code", "--project", str(project)])
    assert out.exit_code == 0 and (project / ".claude" / "settings.local.json").exists()
    assert runner.invoke(app, ["uninstall", "claude-code", "--project", str(project)]).exit_code == 0
    # It made the file, and nothing but its hooks was ever in it: uninstall removes it again.
    assert sorted(p.name for p in (project / ".claude").iterdir()) == []
    # A root chosen by this shell (flag or environment) travels with the hook:
    # Claude Code runs hooks without this shell's environment.
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "c1"))
    out = runner.invoke(app, ["--home", str(tmp_path / "h"), "--root", str(tmp_path / "v1"), "install", "claude-code"])
    assert out.exit_code == 0, out.output
    assert f"--root {tmp_path / 'v1'} hook" in (tmp_path / "c1" / "settings.json").read_text()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "c2"))
    monkeypatch.setenv("MARCH_MEMORY_ROOT", str(tmp_path / "v2"))
    assert runner.invoke(app, ["--home", str(tmp_path / "h"), "install", "claude-code"]).exit_code == 0
    assert f"--root {tmp_path / 'v2'} hook" in (tmp_path / "c2" / "settings.json").read_text()
    bad = runner.invoke(app, ["install", "clod-code"])
    assert bad.exit_code == 3 and ", ".join(install.installable()) in bad.stderr


def test_a_model_file_travels_as_an_absolute_path_and_a_recipe_as_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert f"--model {tmp_path / 'my-model.gguf'} hook" in install.hook_command(
        "claude-code", None, None, "my-model.gguf"
    )
    assert "--model e5 hook" in install.hook_command("claude-code", None, None, "e5")


def test_the_engine_and_its_clients_name_one_model_file_one_way(tmp_path, monkeypatch):
    from marchdb.config import load_config
    from marchdb.engine import client

    monkeypatch.chdir(tmp_path)
    relative = load_config(home=tmp_path / "h", root="vault", model="my-model.gguf", env={})
    absolute = load_config(home=tmp_path / "h", root=tmp_path / "vault", model=str(tmp_path / "my-model.gguf"), env={})
    assert client.identity(relative) == client.identity(absolute)
    assert client.identity(load_config(home=tmp_path / "h", model="e5", env={}))["model"] == "e5"


@pytest.mark.parametrize(
    "before",
    [
        {"hooks": {"Stop": []}},
        {"hooks": {}},
        {},
        {"env": {"X": "1"}},
        {"hooks": {"SessionStart": [], "UserPromptSubmit": [], "Stop": []}},  # install creates nothing
    ],
)
def test_uninstall_removes_only_what_install_created(settings, before):
    settings.write_text(json.dumps(before), encoding="utf-8")
    claude_install(settings, install.hook_command())
    assert settings.with_name("settings.json.marchdb-install").exists()
    claude_uninstall(settings)
    assert json.loads(settings.read_text()) == before  # a "Stop": [] or "hooks": {} of theirs stays
    assert not settings.with_name("settings.json.marchdb-install").exists()


def test_backups_keep_the_settings_permissions(settings):
    data = {**THEIRS, "env": {"ANTHROPIC_API_KEY": "sk-secret"}}
    settings.write_text(json.dumps(data), encoding="utf-8")
    os.chmod(settings, 0o600)
    first = claude_install(settings, install.hook_command())
    data = json.loads(settings.read_text())
    settings.write_text(json.dumps({**data, "model": "sonnet"}))  # the user changed something since
    second = claude_uninstall(settings)
    for path in (settings, first.backup, second.backup):
        assert oct(os.stat(path).st_mode & 0o777) == "0o600", path
    third = claude_install(settings, install.hook_command())
    claude_uninstall(settings)  # nothing else changed: the user's own file comes back, with its mode
    assert third.backup is not None and oct(os.stat(settings).st_mode & 0o777) == "0o600"


def test_an_install_over_one_that_kept_no_note_uninstalls_as_before(settings):
    # An older marchdb created the event lists and kept no note: uninstall removes them emptied.
    before = {
        "hooks": {e: [{"hooks": [{"type": "command", "command": "/old/bin/marchdb hook claude-code"}]}] for e in EVENTS}
    }
    settings.write_text(json.dumps(before), encoding="utf-8")
    claude_install(settings, install.hook_command())
    assert not settings.with_name("settings.json.marchdb-install").exists()
    claude_uninstall(settings)
    assert json.loads(settings.read_text()) == {}


def test_only_marchdbs_own_hooks_count_as_ours(settings):
    # "marchdb" somewhere in a user's own command made install replace it and uninstall delete it.
    own = "/home/me/bin/marchdb-audit.sh hook claude-code"
    settings.write_text(json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": own}]}]}}))
    claude_install(settings, install.hook_command())
    claude_uninstall(settings)
    assert own in settings.read_text()
    for command, mine in (
        ("/x/venv/bin/marchdb --home /h hook claude-code", True),
        ("/usr/bin/python3 -m marchdb hook claude-code", True),
        ("/x/not-marchdb hook claude-code", False),
        ("echo marchdb hook claude-code", False),
    ):
        assert install.is_ours({"type": "command", "command": command}) is mine, command


def test_a_read_only_settings_file_is_left_alone(settings):
    settings.write_text("{}")
    settings.chmod(0o444)
    with pytest.raises(FileError, match="read-only"):
        claude_install(settings, install.hook_command())
    assert settings.read_text() == "{}"


def test_backups_do_not_pile_up(settings):
    # Each install and uninstall writes one when the user changed the file in between: eight after four cycles.
    settings.write_text('{"model": "x"}')
    for i in range(4):
        claude_install(settings, install.hook_command())
        settings.write_text(json.dumps({**json.loads(settings.read_text()), "n": i}))
        claude_uninstall(settings)
    backups = [p for p in settings.parent.iterdir() if ".marchdb-backup-" in p.name]
    assert len(backups) == settings_mod.KEEP_BACKUPS
    assert json.loads(settings.read_text()) == {"model": "x", "n": 3}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(THEIRS, indent=4) + "\n",
        json.dumps(THEIRS),  # one line, no final newline
        json.dumps(THEIRS, indent="\t", ensure_ascii=True) + "\n",
        '{"name": "caf\u00e9"}\n',
    ],
)
def test_uninstall_gives_back_the_users_own_bytes(settings, text):
    # A 4-space or one-line file came back reformatted (the same JSON), and two backups stayed.
    settings.write_text(text, encoding="utf-8")
    claude_install(settings, install.hook_command())
    installed = settings.read_text(encoding="utf-8")
    claude_uninstall(settings)
    assert settings.read_text(encoding="utf-8") == text
    assert sorted(p.name for p in settings.parent.iterdir()) == ["settings.json"]
    # While installed, the file kept its own layout too.
    assert ("\n" in installed.strip()) == ("\n" in text.strip())


HOST_WRITER = """
import json, os, sys, time
settings, stop, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
n = 0
while not os.path.exists(stop):
    with open(settings) as fh:
        data = json.loads(fh.read() or "{}")
    data[f"key{n}"] = n
    tmp = settings + ".host.tmp"
    with open(tmp, "w") as fh:
        fh.write(json.dumps(data))
    os.replace(tmp, settings)
    print(f"key{n}", flush=True)
    n += 1
    time.sleep(pause)
"""


def test_a_concurrent_writer_loses_nothing_to_install(settings):
    # Concurrent installs lost keys the host wrote meanwhile: the edit reads again before it writes,
    # and a write that lands between that check and the replace is found by the swap and put back
    # (a loaded CI machine lost one so to a check-then-replace).
    # The host is a process of its own, as it is for real (a thread of this process could be
    # switched to by the interpreter between the edit's last read and its write).
    import subprocess
    import sys
    import time

    settings.write_text("{}")
    stop = settings.with_name("stop")
    writer = subprocess.Popen(
        [sys.executable, "-c", HOST_WRITER, str(settings), str(stop), "0.02"], stdout=subprocess.PIPE, text=True
    )
    first = writer.stdout.readline() if writer.stdout else ""  # writing already when the installs begin
    try:
        for i in range(24):
            claude_install(settings, install.hook_command(home=settings.parent / f"h{i}"))
            time.sleep(0.02)  # installs spread over several of the host's writes
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=30)
    written = [first.strip(), *out.split()]
    assert len(written) >= 4, written
    data = json.loads(settings.read_text())
    lost = [k for k in written if k not in data]
    assert lost == []
    # The host may overwrite an install with what it read before it (its own race, not ours);
    # one more install after it stops leaves exactly one hook.
    claude_install(settings, install.hook_command(home=settings.parent / "last"))
    assert len(ours(json.loads(settings.read_text()), "Stop")) == 1


def test_the_swap_an_edit_ends_with_trades_two_names_in_one_step(tmp_path):
    # What lets an edit see the very file its write replaced (a host's write a moment before).
    from marchdb.vault.files import exchange

    ours_, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours_.write_text("ours")
    theirs.write_text("theirs")
    if not exchange(ours_, theirs):
        pytest.skip("this file system cannot swap two names")
    assert (ours_.read_text(), theirs.read_text()) == ("theirs", "ours")
    theirs.unlink()
    with pytest.raises(FileNotFoundError):
        exchange(ours_, theirs)
    assert ours_.read_text() == "theirs"


def test_doctor_says_when_hooks_run_the_older_slower_command_and_install_mends_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-home"))
    monkeypatch.chdir(tmp_path)
    home = ["--home", str(tmp_path / "h"), "--root", str(tmp_path / "vault")]
    (tmp_path / "vault").mkdir()
    path = tmp_path / "claude-home" / "settings.json"
    path.parent.mkdir()
    older = "test -x /old/venv/bin/marchdb || exit 0; exec /old/venv/bin/marchdb hook claude-code"
    path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": older}]}]}}))
    runner = CliRunner()

    def problems() -> list[dict]:
        out = runner.invoke(app, [*home, "doctor", "--json"])
        return [p for p in json.loads(out.stdout)["problems"] if p["kind"] == "hook_command_older"]

    [problem] = problems()
    assert "/old/venv/bin/marchdb hook claude-code" in problem["detail"]
    assert problem["advice"] == "run `marchdb install claude-code` again: it replaces them"
    assert runner.invoke(app, [*home, "install", "claude-code"]).exit_code == 0
    assert problems() == []
    assert older not in path.read_text()  # replaced, not doubled
