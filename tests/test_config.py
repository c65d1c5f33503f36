"""Settings: which folders may be a memory root and where the index may lie."""

from __future__ import annotations

import json

import pytest

from marchdb.config import load_config
from marchdb.errors import ConfigError
from marchdb.vault.roots import unusual_root


def test_a_root_holding_marchs_home_in_plain_sight_is_refused_but_not_in_a_hidden_folder(tmp_path):
    # The same rule as a scan's (files.hidden): a home the scan would walk into is refused.
    root = tmp_path / "vault"
    for home in (root / "mh", root / "notes" / "mh"):
        assert "holds marchdb's home" in (unusual_root(root, home) or "")
    for home in (root / ".march", root / "notes" / ".cache" / "mh"):
        assert unusual_root(root, home) is None
    assert "marchdb's home" in (unusual_root(root, root) or "")  # the folder itself: not a vault either


def test_the_index_may_lie_in_a_hidden_folder_of_the_root_only(tmp_path):
    root, home = tmp_path / "vault", tmp_path / "home"
    root.mkdir()
    home.mkdir()

    def place(index):
        (home / "config.json").write_text(json.dumps({"indexPath": str(index)}))
        load_config(home=home, root=root, env={}).check_index_place()

    for index in (root / "idx.sqlite", root / "sub" / "idx.sqlite"):
        with pytest.raises(ConfigError, match="is inside the memory root"):
            place(index)
    for index in (root / ".marchdb" / "idx.sqlite", root / "sub" / ".x" / "idx.sqlite", tmp_path / "idx.sqlite"):
        place(index)


@pytest.mark.parametrize("minutes", [0.0001, 0.5, 0, -1, 20000, "30", True])
def test_the_engines_idle_time_has_a_sane_minimum(tmp_path, minutes):
    # daemonIdleMinutes: 0.0001 was accepted: an engine started (and loaded the model) for every call.
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"daemonIdleMinutes": minutes}))
    with pytest.raises(ConfigError, match="at least 1 minute"):
        load_config(home=home, root=tmp_path, env={})


@pytest.mark.parametrize("minutes", [1, 2.5, 30, 10080])
def test_idle_times_from_a_minute_to_a_week_are_taken(tmp_path, minutes):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"daemonIdleMinutes": minutes}))
    assert load_config(home=home, root=tmp_path, env={}).daemon_idle_minutes == minutes


def test_serve_idle_has_the_same_minimum(tmp_path):
    from typer.testing import CliRunner

    from marchdb.cli.main import app

    for bad in ("0.0001", "0.5", "0", "20000"):
        out = CliRunner().invoke(
            app, ["--home", str(tmp_path / "home"), "--root", str(tmp_path), "serve", "--idle", bad]
        )
        assert out.exit_code == 2 and "at least 1 minute" in out.stderr, (bad, out.stderr)


def test_home_and_variables_in_paths_come_from_the_environment_given(tmp_path):
    # The warm engine resolves a hook's settings with the hook's environment (hosts.relay).
    home = tmp_path / "home"
    home.mkdir()
    cfg = load_config(home=home, env={"HOME": str(tmp_path / "someone"), "MARCH_MEMORY_ROOT": "~/notes"})
    assert cfg.memory_root == tmp_path / "someone" / "notes"
    (home / "config.json").write_text(json.dumps({"memoryRoot": "$VAULTS/work", "indexPath": "${CACHE}/i.sqlite"}))
    cfg = load_config(home=home, env={"VAULTS": str(tmp_path / "v"), "CACHE": str(tmp_path / "c")})
    assert cfg.memory_root == tmp_path / "v" / "work" and cfg.index_path == tmp_path / "c" / "i.sqlite"
    assert load_config(home=home, env={}).memory_root == home / "$VAULTS" / "work"  # unknown: left as written
