"""One exception family for marchdb.

Every message says what went wrong *and what to do next*; the CLI prints the
message on one line of stderr and exits with ``exit_code``.
"""

from __future__ import annotations


class MarchError(Exception):
    """Base class of every error marchdb raises on purpose."""

    exit_code = 1


class ConfigError(MarchError):
    """The configuration (config.json, environment, flags) is unusable."""

    exit_code = 2


class InvalidInput(MarchError):
    """A caller passed something marchdb refuses (bad id, empty name, ...)."""

    exit_code = 2


class IndexUnavailable(MarchError):
    """The SQLite index cannot be opened or written."""

    exit_code = 3


class ModelError(MarchError):
    """The embedding model is missing, broken or cannot be loaded."""

    exit_code = 4


class NotFound(MarchError):
    """A memory id is not in the vault."""

    exit_code = 5


class Conflict(MarchError):
    """Several files hold the same memory id; the user must fix them."""

    exit_code = 6

    def __init__(self, message: str, paths: list[str] | None = None):
        super().__init__(message)
        self.paths = list(paths or [])
