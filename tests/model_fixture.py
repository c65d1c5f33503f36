"""Session fixtures for the real default embedding model.

The lead's ``tests/conftest.py`` imports these; the model tests import them
too, so they also run alone. The model is built once per session (about a
second) into ``MARCHDB_TEST_MODEL_DIR`` when set, which lets CI keep it
between runs, else into the session's temp dir. Results are memoised at
module level so that importing the fixtures into several namespaces still
builds and loads only once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_memo: dict[str, object] = {}


def model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder where test models are built and cached."""
    env = os.environ.get("MARCHDB_TEST_MODEL_DIR")
    return Path(env) if env else tmp_path_factory.getbasetemp() / "models"


@pytest.fixture(scope="session")
def default_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the default (e5) GGUF, built once per session."""
    if "path" not in _memo:
        from marchdb.embedding.build import build_model
        from marchdb.embedding.recipes import DEFAULT_RECIPE

        _memo["path"] = build_model(DEFAULT_RECIPE, model_cache_dir(tmp_path_factory))
    return _memo["path"]  # type: ignore[return-value]


@pytest.fixture(scope="session")
def default_embedder(default_model_path: Path):
    """A LlamaEmbedder on the default model, shared by the whole session (2 threads, as on CI)."""
    if "embedder" not in _memo:
        pytest.importorskip("llama_cpp")
        from marchdb.embedding.llama import LlamaEmbedder

        _memo["embedder"] = LlamaEmbedder(default_model_path, threads=2)
    return _memo["embedder"]
