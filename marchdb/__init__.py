"""marchdb: a local memory engine for AI agents.

The library's face::

    from marchdb import Store, MarchError

``Store`` is a vault and its index (``marchdb.store``); every refusal is a
``MarchError`` (``marchdb.errors``) whose message says what to do next. A
recall returns a ``RecallResult`` of ``Hint`` objects; ``sync`` a
``SyncReport``. The names are loaded on first use, so that a hook, which
imports a part of this package on every prompt, never pays for the index.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing itself costs a hook's start-up; type checkers know this name
if TYPE_CHECKING:
    from marchdb.errors import (
        ConfigError,
        Conflict,
        Expired,
        FileError,
        IndexUnavailable,
        InvalidInput,
        MarchError,
        ModelError,
        ModelUnusable,
        NotFound,
        Retry,
        SearchFailed,
        Unanswered,
    )
    from marchdb.index.results import Hint, RecallResult
    from marchdb.index.sync import SyncReport
    from marchdb.store import Store

__all__ = [
    "Conflict",
    "ConfigError",
    "Expired",
    "FileError",
    "Hint",
    "IndexUnavailable",
    "InvalidInput",
    "MarchError",
    "ModelError",
    "ModelUnusable",
    "NotFound",
    "Retry",
    "SearchFailed",
    "Unanswered",
    "RecallResult",
    "Store",
    "SyncReport",
    "__version__",
]

#: Where each public name lives.
_HOMES = {
    "Store": "marchdb.store",
    "Hint": "marchdb.index.results",
    "RecallResult": "marchdb.index.results",
    "SyncReport": "marchdb.index.sync",
    **dict.fromkeys(
        (
            "MarchError",
            "InvalidInput",
            "ConfigError",
            "ModelError",
            "NotFound",
            "Conflict",
            "IndexUnavailable",
            "FileError",
            "Retry",
            "Expired",
            "SearchFailed",
            "Unanswered",
            "ModelUnusable",
        ),
        "marchdb.errors",
    ),
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'marchdb' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if "numpy" not in _sys.modules and "OPENBLAS_THREAD_TIMEOUT" not in _os.environ:
    # OpenBLAS (numpy's, for the in-memory KNN) keeps its threads spinning
    # for ~2^28 cycles after each product; the query embedding that follows
    # then finds no idle core and runs on one thread beside a spinning one.
    # OpenBLAS reads this when numpy loads; a user's own setting wins.
    _os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"
