"""A tiny, fast run of tools/stress.py's load and kill -9 scenarios (BM25 only).

The full figures come from ``tools/stress.py``; this keeps the properties in CI:
concurrent savers and recallers in separate processes never see an error or
``database is locked`` and lose no memory, and a sync killed with SIGKILL at a
random moment never touches the files and is fully repaired by the next sync.
"""

from __future__ import annotations

import argparse

import stress  # tools/stress.py: pytest puts tools/ on sys.path (pyproject.toml)


def _args(**overrides) -> argparse.Namespace:
    values = dict(
        models_dir=None,  # BM25 only: the load variant passes a model path that does not exist
        seed=5,
        load_size=40,
        seconds=1.5,  # all four processes at once: ~70 saves and ~700 recalls here, 3 s doubled that for nothing
        writers=2,
        readers=2,
        kill_runs=2,
        kill_size=300,
        embed_kill_runs=0,
        embed_kill_size=0,
        kill_clock="index",
        kill_calibrations=1,  # one full sync to time the kill window by, not the median of two
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def test_concurrent_savers_and_recallers_lose_nothing(tmp_path):
    result = stress.run_load(_args(), tmp_path, "bm25")
    assert result["errors"] == 0, result["error_samples"]
    assert result["locked_errors"] == 0
    assert result["crashed_processes"] == [] and result["missing_results"] == 0
    assert result["created"] > 0 and result["reader_ops"] > 0
    assert result["lost"] == 0, result["lost_samples"]
    assert result["duplicate_ids_returned"] == 0
    assert result["temp_files_left"] == []
    assert result["index_check"]["ok"], result["index_check"]["problems"]
    assert result["memories_after"] == result["memories_before"] + result["created"]


def test_sync_killed_with_sigkill_recovers(tmp_path):
    result = stress.run_faults(_args(), tmp_path)
    for run in result["no_embed"]:
        assert run["files_changed"] == 0, run["files_changed_samples"]
        assert run["check"]["ok"], run["check"]["problems"]
        assert run["check"]["integrity"] == "ok"
    assert result["no_embed_ok"] == 2
