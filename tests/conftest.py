"""Shared fixtures: a real vault folder, a real home, a real SQLite index."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from marchdb.config import load_config


class Vault:
    """A memory root in ``tmp_path`` with helpers to write real files."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, text: str | bytes) -> Path:
        """Write a file (text is dedented) and return its path."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def memory(
        self,
        rel: str,
        mem_id: str,
        name: str = "A memory",
        description: str | None = "what it is about",
        tags: list[str] | None = None,
        body: str = "Body text.",
        status: str = "active",
    ) -> Path:
        """Write a well-formed memory file."""
        lines = ["---", f"id: {mem_id}", f"name: {name}"]
        if description is not None:
            lines.append(f"description: {description}")
        lines.append("tags:")
        lines += [f"  - {t}" for t in (tags or ["test"])]
        lines += [f"status: {status}", "created_at: 2026-05-14T10:30:00.000Z", "---", "", body, ""]
        return self.write(rel, "\n".join(lines))


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    """An empty vault folder."""
    return Vault(tmp_path / "vault")


@pytest.fixture
def cfg(tmp_path: Path, vault: Vault):
    """A configuration pointing at ``vault`` with a throwaway home."""
    return load_config(home=tmp_path / "home", root=vault.root, env={})


@pytest.fixture
def store(cfg):
    """A Store on the test vault; embedding is off unless a test asks."""
    from marchdb.store import Store

    s = Store(cfg)
    yield s
    s.close()
