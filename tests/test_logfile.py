"""marchdb's own log files: one JSON line per record, rotated by size, never through a link."""

from __future__ import annotations

import json
import os
import re

import pytest

from marchdb import logfile


def test_append_rotates_by_size_and_keeps_a_bounded_number_of_files(tmp_path):
    path = tmp_path / "logs" / "lifecycle.log"
    for i in range(200):
        logfile.append(path, {"op": "test", "n": i, "pad": "x" * 100}, max_bytes=2000, backups=2)
    names = sorted(p.name for p in path.parent.iterdir() if not p.name.endswith(".lock"))
    assert names == ["lifecycle.log", "lifecycle.log.1", "lifecycle.log.2"]
    assert all(p.stat().st_size <= 2000 for p in path.parent.iterdir())
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["n"] == 199 and last["at"].endswith("Z")
    older = [json.loads(ln)["n"] for ln in (tmp_path / "logs" / "lifecycle.log.1").read_text().splitlines()]
    assert older == sorted(older) and older[-1] < json.loads(path.read_text().splitlines()[0])["n"]
    sizes = logfile.sizes(path.parent)
    assert [s["file"] for s in sizes] == names and all(s["keep_bytes"] == logfile.MAX_BYTES for s in sizes)
    assert logfile.sizes(tmp_path / "missing") == []


def test_a_log_path_that_is_a_symlink_is_refused(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("not ours\n")
    (tmp_path / "logs").mkdir()
    os.symlink(target, tmp_path / "logs" / "lifecycle.log")
    with pytest.raises(OSError):
        logfile.append(tmp_path / "logs" / "lifecycle.log", {"op": "x"})
    assert target.read_text() == "not ours\n"


def test_a_lock_file_that_is_a_symlink_is_never_followed(tmp_path):
    # O_CREAT through a link would create (or open) a file anywhere the link points.
    (tmp_path / "logs").mkdir()
    os.symlink(tmp_path / "created-elsewhere", tmp_path / "logs" / "hooks.log.lock")
    with pytest.raises(OSError):
        logfile.append_line(tmp_path / "logs" / "hooks.log", b"line\n")
    assert not (tmp_path / "created-elsewhere").exists() and not (tmp_path / "logs" / "hooks.log").exists()


def test_log_files_are_private_to_their_user(tmp_path):
    logfile.append(tmp_path / "logs" / "lifecycle.log", {"op": "x"})
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in (tmp_path / "logs").iterdir())


def test_doctor_reports_the_size_of_every_log(tmp_path, vault):
    from typer.testing import CliRunner

    from marchdb.cli.main import app

    logfile.append(tmp_path / "home" / "logs" / logfile.LIFECYCLE, {"op": "test"})
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    out = runner.invoke(app, [*base, "doctor"], env={"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")})
    assert out.exit_code == 0, out.output
    assert "logs: recall_log 0 rows (keeps the last 100,000); open_log 0 rows" in out.stdout
    assert re.search(r"lifecycle.log \d+ bytes \(rotated at 256 KB\)", out.stdout)
    data = json.loads(runner.invoke(app, [*base, "doctor", "--json"], env={"MARCH_EMBED_MODEL": "x"}).stdout)
    assert {r.get("log") or r.get("file") for r in data["logs"]} == {"recall_log", "open_log", "runs", "lifecycle.log"}


def test_a_record_with_a_path_that_is_not_utf8_is_still_one_json_line(tmp_path):
    path = tmp_path / "logs" / "lifecycle.log"
    logfile.append(path, {"op": "import", "path": "/tmp/caf\udce9"})
    assert json.loads(path.read_text())["path"] == "/tmp/caf\udce9"


def test_doctor_reports_the_engines_output_file_too(tmp_path, vault):
    # logs/daemon.out (what a background engine prints) was left out: only *.log files were sized.
    from typer.testing import CliRunner

    from marchdb.cli.main import app

    logfile.append(tmp_path / "home" / "logs" / logfile.LIFECYCLE, {"op": "test"})
    out_file = tmp_path / "home" / "logs" / "daemon.out"
    out_file.write_text("marchdb serve: warming up\n")
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    text = runner.invoke(app, [*base, "doctor"], env=env)
    assert text.exit_code == 0, text.output
    assert "daemon.out 26 bytes (begun afresh when an engine starts past 1,024 KB)" in text.stdout
    data = json.loads(runner.invoke(app, [*base, "doctor", "--json"], env=env).stdout)
    (row,) = [r for r in data["logs"] if r.get("file") == "daemon.out"]
    assert row == {"file": "daemon.out", "bytes": 26, "keep_bytes": logfile.DAEMON_OUT_BYTES, "rotated": False}
    assert [r["rotated"] for r in data["logs"] if r.get("file") == logfile.LIFECYCLE] == [True]
