"""Where things live: ``MARCH_HOME``, ``config.json``, the memory root, the index.

Resolution, first found wins:

* home: ``--home`` flag, ``MARCH_HOME``, ``~/.march``;
* memory root: ``--root`` flag, ``MARCH_MEMORY_ROOT``, ``memoryRoot`` in
  ``$MARCH_HOME/config.json``, ``$MARCH_HOME/March Memories``;
* index: ``indexPath`` in config.json, ``$MARCH_HOME/index.sqlite``;
* built models: ``MARCH_MODELS_DIR``, ``modelsDir``, ``$MARCH_HOME/models``;
* embedding model: ``--model`` flag, ``MARCH_EMBED_MODEL``, ``embeddingModel``
  in config.json, the built-in default recipe (``e5``). A value is a path to a
  ``.gguf`` file or the name of a built-in recipe.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

DEFAULT_MIN_SCORE = 0.5

AGENT_PROFILE = """\
# Agent Profile

How the agent works, speaks and collaborates. This file is injected into every
run as [agent_profile]; edit it freely. Keep searchable events out of it: those
belong in memories.
"""

USER_PROFILE = """\
# User Profile

The user's stable preferences, long-term goals and facts. Injected into every
run as [user_profile]; edit it freely.
"""


@dataclass
class Config:
    """Resolved settings for one marchdb process."""

    home: Path
    memory_root: Path
    index_path: Path
    embedding_model: str | None = None
    min_score: float = DEFAULT_MIN_SCORE
    threads: int | None = None
    prefixes: dict | None = None
    models_path: Path | None = None
    dense_weight: float | None = None
    #: Tag form of a project (seed 000: ``project/NAME``); ``projectTagPrefix``.
    project_tag_prefix: str = "project/"
    #: Where the memory root was set ("" for the default under the home).
    root_source: str = ""

    def require_root(self) -> Path:
        """The memory root, or a ``ConfigError`` when a configured root is
        missing. Never created on the fly: an unmounted drive or a typo
        must not look like an empty vault (a sync would empty the index)."""
        if not self.memory_root.is_dir():
            where = f" (set by {self.root_source})" if self.root_source else ""
            raise ConfigError(
                f"memory root {self.memory_root}{where} does not exist or is not a folder; "
                f"create it (mkdir -p) or point {self.root_source or 'MARCH_MEMORY_ROOT'} at your vault"
            )
        return self.memory_root

    @property
    def models_dir(self) -> Path:
        """Where built-in recipes are built: ``MARCH_MODELS_DIR``, ``modelsDir``
        in config.json, or ``$MARCH_HOME/models``."""
        return self.models_path or self.home / "models"

    @property
    def profiles_dir(self) -> Path:
        """``$MARCH_HOME/memory/profiles`` (agent.md, user.md)."""
        return self.home / "memory" / "profiles"


def read_config_file(home: Path) -> dict:
    """``$MARCH_HOME/config.json`` as a dict ({} when absent)."""
    path = home / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}; check its permissions") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); fix or delete it") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{path} must hold a JSON object like {{"memoryRoot": "..."}}')
    return data


def _expand(value: str, base: Path) -> Path:
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    return path if path.is_absolute() else (base / path)


def load_config(
    home: str | os.PathLike | None = None,
    root: str | os.PathLike | None = None,
    model: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Resolve the configuration from flags, environment and config.json."""
    env = os.environ if env is None else env
    home_path = Path(home) if home else Path(env.get("MARCH_HOME") or "~/.march").expanduser()
    home_path = home_path.absolute()
    data = read_config_file(home_path)

    if root:
        root_path, root_source = Path(root).expanduser(), "--root"
    elif env.get("MARCH_MEMORY_ROOT"):
        root_path, root_source = Path(env["MARCH_MEMORY_ROOT"]).expanduser(), "MARCH_MEMORY_ROOT"
    elif data.get("memoryRoot"):
        if not isinstance(data["memoryRoot"], str):
            raise ConfigError("memoryRoot in config.json must be a path string")
        root_path, root_source = _expand(data["memoryRoot"], home_path), "memoryRoot in config.json"
    else:
        root_path, root_source = home_path / "March Memories", ""

    index_value = data.get("indexPath")
    index_path = _expand(index_value, home_path) if isinstance(index_value, str) else home_path / "index.sqlite"

    embed = model or env.get("MARCH_EMBED_MODEL") or data.get("embeddingModel") or None
    if embed is not None and not isinstance(embed, str):
        raise ConfigError("embeddingModel in config.json must be a path or a recipe name")

    score_raw = env.get("MARCH_MEMORY_RECALL_MIN_SCORE", data.get("recallMinScore", DEFAULT_MIN_SCORE))
    try:
        min_score = float(score_raw)
    except (TypeError, ValueError):
        raise ConfigError(f"MARCH_MEMORY_RECALL_MIN_SCORE={score_raw!r} is not a number; use e.g. 0.5") from None

    threads_raw = env.get("MARCH_THREADS", data.get("threads"))
    try:
        threads = int(threads_raw) if threads_raw not in (None, "") else None
    except (TypeError, ValueError):
        raise ConfigError(f"threads={threads_raw!r} is not a whole number") from None

    prefixes = data.get("embeddingPrefixes")
    if prefixes is not None and not isinstance(prefixes, dict):
        raise ConfigError('embeddingPrefixes must be an object like {"query": "query: ", "passage": "passage: "}')

    weight = data.get("recallDenseWeight")
    if weight is not None and (not isinstance(weight, (int, float)) or not 0 <= weight <= 1):
        raise ConfigError("recallDenseWeight must be a number from 0 to 1 (the dense share of the fusion)")

    prefix = data.get("projectTagPrefix", "project/")
    if not isinstance(prefix, str):
        raise ConfigError('projectTagPrefix must be a string like "project/" (a memory tagged project/NAME)')

    models_value = env.get("MARCH_MODELS_DIR") or data.get("modelsDir")
    models_path = _expand(models_value, home_path) if isinstance(models_value, str) and models_value else None

    return Config(
        home=home_path,
        models_path=models_path,
        dense_weight=weight,
        project_tag_prefix=prefix,
        memory_root=root_path.absolute(),
        root_source=root_source,
        index_path=index_path.absolute(),
        embedding_model=embed,
        min_score=min_score,
        threads=threads,
        prefixes=prefixes,
    )


def ensure_layout(cfg: Config) -> list[Path]:
    """Create the home, the default memory root and missing profiles; never
    overwrite. A configured memory root is never created (``require_root``).

    Returns the paths created, so a caller can tell the user.
    """
    created: list[Path] = []
    folders = (cfg.home, cfg.profiles_dir) if cfg.root_source else (cfg.home, cfg.memory_root, cfg.profiles_dir)
    for folder in folders:
        if not folder.exists():
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create {folder}: {exc.strerror}") from None
            created.append(folder)
    for name, text in (("agent.md", AGENT_PROFILE), ("user.md", USER_PROFILE)):
        path = cfg.profiles_dir / name
        try:
            # "x" mode: never clobber a profile another process just wrote.
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(text)
            created.append(path)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ConfigError(f"cannot create {path}: {exc.strerror}") from None
    return created
