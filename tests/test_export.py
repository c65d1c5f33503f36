"""`marchdb export FILE`: one portable SQLite file, reused elsewhere without re-embedding."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess

import pytest
from typer.testing import CliRunner

from marchdb.cli.main import app


def _cli(home, root, model=None):
    runner = CliRunner()

    def invoke(*args):
        base = ["--home", str(home), "--root", str(root)]
        if model:
            base += ["--model", str(model)]
        return runner.invoke(app, [*base, *args], env={"MARCH_EMBED_MODEL": str(home / "none.gguf")})

    return invoke


def _js(result) -> dict:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_an_export_moved_with_its_vault_embeds_nothing_again(tmp_path, mixed_vault, default_model_path):
    cli = _cli(tmp_path / "home", mixed_vault.root, default_model_path)
    assert _js(cli("sync", "--json"))["embedded"] == 10
    assert _js(cli("recall", "why does the prompt cache miss?", "--run", "run-1", "--json"))["hints"]
    _js(cli("open", "mem_dog", "--json"))
    out = tmp_path / "elsewhere" / "march-index.sqlite"
    out.parent.mkdir()
    info = _js(cli("export", str(out), "--json"))
    assert info["path"] == str(out) and info["bytes"] == out.stat().st_size
    assert (info["memories"], info["vectors"], info["recall_log"], info["open_log"]) == (5, 10, 1, 1)
    assert info["calibrated"] is True and info["model"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["march-index.sqlite"]  # one file, WAL folded in

    # Another machine: the same Markdown at another path (fresh mtimes), a
    # config pointing indexPath at the copy, the same model.
    moved_root = tmp_path / "other-machine" / "Vault" / "March Memories"
    shutil.copytree(mixed_vault.root, moved_root, copy_function=shutil.copyfile)
    other_home = tmp_path / "other-machine" / "home"
    other_home.mkdir()
    (other_home / "config.json").write_text(json.dumps({"indexPath": str(out)}))
    other = _cli(other_home, moved_root, default_model_path)
    report = _js(other("sync", "--json"))
    assert report["embedded"] == 0, report
    assert (report["added"], report["removed"], report["updated"], report["scanned"]) == (0, 0, 0, 5)
    status = _js(other("status", "--json"))
    assert status["index_path"] == str(out) and status["memories"] == 5 and status["memories_without_vector"] == 0
    recalled = _js(other("recall", "why does the prompt cache miss?", "--json"))
    assert recalled["mode"] == "hybrid" and recalled["hints"][0]["id"] == "mem_cache"
    history = _js(other("sql", "SELECT run_id, id FROM hint_history", "--json"))["rows"]
    assert history == [{"run_id": "run-1", "id": "mem_cache"}]  # the logs travelled


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 shell on this machine")
def test_the_export_opens_in_the_stock_sqlite3_shell(tmp_path, mixed_vault):
    cli = _cli(tmp_path / "home", mixed_vault.root)
    cli("sync")
    out = tmp_path / "x.sqlite"
    _js(cli("export", str(out), "--json"))
    shown = subprocess.run(
        ["sqlite3", str(out), "SELECT memories FROM diag_summary; PRAGMA journal_mode;"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert shown == ["5", "delete"]  # a plain single file until marchdb opens it (then WAL)
    # Every memory's text and the logs: its owner's only, whatever the umask (it was 0644).
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_export_refuses_what_it_must_not_write(tmp_path, mixed_vault):
    cli = _cli(tmp_path / "home", mixed_vault.root)
    cli("sync")
    stranger = tmp_path / "notes.txt"
    stranger.write_text("mine")
    refused = cli("export", str(stranger))
    assert refused.exit_code == 2 and "exists; pass --force" in refused.stderr
    refused = cli("export", str(stranger), "--force")
    assert refused.exit_code == 2 and "is not an earlier export" in refused.stderr
    assert stranger.read_text() == "mine"
    inside = cli("export", str(mixed_vault.root / "index.sqlite"))
    assert inside.exit_code == 2 and "inside the memory root" in inside.stderr
    assert not (mixed_vault.root / "index.sqlite").exists()
    itself = cli("export", str(tmp_path / "home" / "index.sqlite"), "--force")
    assert itself.exit_code == 2 and "the index itself" in itself.stderr
    link = tmp_path / "link.sqlite"
    link.symlink_to(tmp_path / "target.sqlite")
    refused = cli("export", str(link))
    assert refused.exit_code == 2 and "symlink" in refused.stderr and not (tmp_path / "target.sqlite").exists()
    refused = cli("export", str(tmp_path))
    assert refused.exit_code == 2 and "is a folder" in refused.stderr
    refused = cli("export", str(tmp_path / "no" / "such" / "dir.sqlite"))
    assert refused.exit_code == 2 and "does not exist" in refused.stderr
    # an earlier export is replaced with --force, and only then
    out = tmp_path / "export.sqlite"
    _js(cli("export", str(out), "--json"))
    assert cli("export", str(out)).exit_code == 2
    assert _js(cli("export", str(out), "--force", "--json"))["memories"] == 5
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file left
    # Another home's index (live, or taken from an export) is never an earlier export: its logs would go.
    other = _cli(tmp_path / "other", mixed_vault.root)
    other("sync")
    refused = cli("export", str(tmp_path / "other" / "index.sqlite"), "--force")
    assert refused.exit_code == 2 and "is not an earlier export" in refused.stderr
    adopted = tmp_path / "adopted"
    adopted.mkdir()
    (adopted / "config.json").write_text(json.dumps({"indexPath": str(out)}))
    assert _cli(adopted, mixed_vault.root)("status").exit_code == 0  # a home takes the export as its index
    refused = cli("export", str(out), "--force")
    assert refused.exit_code == 2 and "is not an earlier export" in refused.stderr
    # ... and an export made from an adopted copy is a fresh export, replaceable (a nightly backup).
    nightly = tmp_path / "nightly.sqlite"
    assert _cli(adopted, mixed_vault.root)("export", str(nightly)).exit_code == 0
    assert _cli(adopted, mixed_vault.root)("export", str(nightly), "--force").exit_code == 0
    # SQLite takes <db>-journal for a journal and deletes it: such names are refused.
    refused = cli("export", str(tmp_path / "home" / "index.sqlite-journal"))
    assert refused.exit_code == 2 and "index itself" in refused.stderr
    # Its own home: config.json, logs, profiles are never written over (they broke the home).
    (tmp_path / "home" / "logs").mkdir(exist_ok=True)
    for mine in ("config.json", "logs/hooks.log", "memory/profiles/agent.md", "backup"):
        refused = cli("export", str(tmp_path / "home" / mine))
        assert refused.exit_code == 2 and "among marchdb's own files" in refused.stderr, mine
    assert not (tmp_path / "home" / "config.json").exists() and cli("status").exit_code == 0
    assert cli("export", str(tmp_path / "home" / "backup.sqlite")).exit_code == 0
    refused = cli("export", str(tmp_path / "x.db-journal"))
    assert refused.exit_code == 2 and "journal" in refused.stderr and not (tmp_path / "x.db-journal").exists()


def test_a_file_name_too_long_is_a_clear_error(tmp_path, vault, store):
    # `export` to a 300-character name was "unexpected OSError ... File name too long" (exit 1, "a bug").
    from marchdb.errors import InvalidInput

    vault.memory("a.md", "mem_a")
    store.sync(embed=False)
    for name in ("x" * 300 + ".sqlite", "x" * 240 + ".sqlite", "é" * 120 + ".sqlite"):
        with pytest.raises(InvalidInput, match="file name is too long") as refused:
            store.export(tmp_path / name)
        assert "choose a shorter name" in str(refused.value)
    with pytest.raises(InvalidInput, match="cannot look at"):
        store.export(tmp_path / ("d" * 300) / "index.sqlite")  # a folder whose name is too long
    assert store.export(tmp_path / ("x" * 200 + ".sqlite"))["memories"] == 1  # a long name that fits
