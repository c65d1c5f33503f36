"""The code is linted, formatted and type-checked as CI requires (ruff, mypy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_clean(command):
    tool = BIN / command[0]
    assert tool.exists(), f"{command[0]} is not installed: pip install -e '.[test]'"
    out = subprocess.run([str(tool), *command[1:]], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
