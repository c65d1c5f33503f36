"""One exception family for marchdb, and the exit codes of the CLI.

Every message says what went wrong *and what to do next*; the CLI prints the
message on one line of stderr and exits with the class's ``exit_code``.
``EXIT_CODES`` is the whole table (the README lists it; a test keeps them
equal).
"""

from __future__ import annotations


def check_text(value: object, what: str) -> None:
    """Raise ``InvalidInput`` when ``value`` is text that is not valid
    Unicode: a lone surrogate, what a shell argument or a file name holding a
    byte that is not UTF-8 (``caf\\xe9``) becomes in Python. Nothing can store,
    match or print it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInput(
                f"{what} is not valid Unicode (at character {exc.start + 1}: a byte that is not UTF-8?); "
                "give it as UTF-8 text"
            ) from None


class MarchError(Exception):
    """Base class of every error marchdb raises on purpose. Raise a subclass:
    the base's exit code 1 means "unexpected"."""

    exit_code = 1
    kind = "error"

    def to_dict(self) -> dict:
        """The error as data (``status``, ``message``) for front-ends that answer in JSON."""
        return {"status": self.kind, "message": str(self)}

    @classmethod
    def from_dict(cls, data: dict) -> MarchError:
        """The error back from its ``to_dict`` data (what the warm engine
        sends); ``KeyError`` or ``TypeError`` when a field of the class is
        missing or of another type."""
        # (No typing.Self: this module is on the hook's path, and typing costs it ~5 ms.)
        return cls(_text(data["message"]))


class InvalidInput(MarchError):
    """A caller passed something marchdb refuses (bad id, empty name, ...)."""

    exit_code = 2
    kind = "invalid_input"


class ConfigError(MarchError):
    """The configuration (config.json, environment, flags) or the memory root is unusable."""

    exit_code = 3
    kind = "config_error"


class ModelError(MarchError):
    """The embedding model is missing, broken or cannot be loaded."""

    exit_code = 4
    kind = "model_error"


class ModelUnusable(ModelError):
    """The model crashed (or gave nonsense) in llama.cpp on this machine, and
    is not loaded: recall uses keywords until ``marchdb model check`` proves
    it again (``embedding.nativecheck``)."""

    kind = "model_unusable"


class NotFound(MarchError):
    """No memory has this id."""

    exit_code = 5
    kind = "not_found"

    def __init__(self, message: str, mem_id: str):
        super().__init__(message)
        self.mem_id = mem_id

    def to_dict(self) -> dict:
        """``{"status": "not_found", "id", "message"}``."""
        return {"status": self.kind, "id": self.mem_id, "message": str(self)}

    @classmethod
    def from_dict(cls, data: dict) -> NotFound:
        """The error back from its ``to_dict`` data."""
        return cls(_text(data["message"]), _text(data["id"]))


class Conflict(MarchError):
    """Several files hold the same memory id; the user must fix them."""

    exit_code = 6
    kind = "conflict"

    def __init__(self, message: str, mem_id: str, paths: list[str]):
        super().__init__(message)
        self.mem_id = mem_id
        self.paths = list(paths)

    def to_dict(self) -> dict:
        """``{"status": "conflict", "id", "paths", "message"}``."""
        return {"status": self.kind, "id": self.mem_id, "paths": self.paths, "message": str(self)}

    @classmethod
    def from_dict(cls, data: dict) -> Conflict:
        """The error back from its ``to_dict`` data."""
        paths = data["paths"]
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        return cls(_text(data["message"]), _text(data["id"]), [_text(p) for p in paths])


class IndexUnavailable(MarchError):
    """The SQLite index cannot be opened or written."""

    exit_code = 7
    kind = "index_unavailable"


class FileError(MarchError):
    """A file marchdb needs (a memory, a profile) cannot be read or written."""

    exit_code = 8
    kind = "file_error"


class Retry(MarchError):
    """Something changed while marchdb worked on it (a file edited mid-save);
    nothing was written, and the same call will most likely succeed again."""

    exit_code = 10
    kind = "retry"


class Expired(Retry):
    """The caller stopped waiting (the warm engine was busy or slow): the
    request was dropped before it recorded anything, so the caller's own
    answer is the only one."""

    kind = "expired"


class Unanswered(MarchError):
    """The warm engine took a write (save, log) and did not answer in time:
    it may or may not have been done, and doing it again here could do it
    twice."""

    exit_code = 12
    kind = "unanswered"


class SearchFailed(MarchError):
    """ripgrep is missing or failed, so ``memory_search`` cannot answer."""

    exit_code = 11
    kind = "search_failed"


def unanswered_message(op: str, why: object) -> str:
    """What to tell a caller whose save or log the warm engine took and did not answer."""
    return (
        f"the warm engine did not answer {op} ({why}); it may have been done: look "
        "(`marchdb search`, today's log) before trying again, and see logs/daemon.log in MARCH_HOME"
    )


def _text(value: object) -> str:
    """A field of an engine's answer that must be text (``TypeError`` otherwise)."""
    if not isinstance(value, str):
        raise TypeError("expected text")
    return value


def _family(cls: type[MarchError]) -> list[type[MarchError]]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_family(sub)]
    return out


#: The errors a refusal of the warm engine names by ``kind``, rebuilt as
#: themselves: every class of this module that has a kind of its own (a new
#: one is included without being listed).
_BY_KIND: dict[str, type[MarchError]] = {
    cls.kind: cls for cls in _family(MarchError) if cls.__module__ == __name__ and "kind" in vars(cls)
}


def remote_error(kind: str, message: str, exit_code: int, fields: dict | None = None) -> MarchError:
    """A ``MarchError`` the warm engine raised, rebuilt on the client's side:
    the same class (``except Conflict`` catches it) with the fields its
    ``to_dict`` carried (``NotFound``'s id, ``Conflict``'s paths), its
    message and its exit code."""
    exc: MarchError | None = None
    cls = _BY_KIND.get(kind)
    if cls is not None:
        try:
            exc = cls.from_dict({**(fields or {}), "message": message})
        except (KeyError, TypeError):
            pass  # an engine of another version left a field out: the plain error below still says it all
    if exc is None:
        exc = MarchError(message)
        exc.kind = kind
    exc.exit_code = exit_code
    return exc


#: The CLI's exit codes. 9 is not an error: ``save`` wrote nothing because a
#: near-duplicate exists (its result says which memory to update instead).
EXIT_DUPLICATE = 9
#: Exit status of a command stopped by Ctrl-C: a shell's status for a
#: command a SIGINT ends (128 + 2).
EXIT_INTERRUPTED = 130
#: Exit status of a command stopped by SIGTERM (``timeout``, a harness's
#: time limit): a shell's status for a command a SIGTERM ends (128 + 15).
EXIT_TERMINATED = 143
#: Exit status when stdout is closed early (``| head``): a shell's status for
#: a command killed by SIGPIPE (128 + 13), never "a bug".
EXIT_PIPE = 141

EXIT_CODES: list[tuple[int, str]] = [
    (0, "success"),
    (MarchError.exit_code, "unexpected error (a bug: please report it)"),
    (InvalidInput.exit_code, "invalid input: a bad argument or option"),
    (ConfigError.exit_code, "configuration: config.json, the environment or the memory root"),
    (
        ModelError.exit_code,
        "the embedding model is missing, broken or fails its check, or llama.cpp crashed on what the command "
        "had written (it is kept; `marchdb sync` embeds it apart)",
    ),
    (NotFound.exit_code, "no memory has that id"),
    (Conflict.exit_code, "several files hold that id, or a file marchdb cannot read still holds it"),
    (IndexUnavailable.exit_code, "the index file cannot be opened or written"),
    (
        FileError.exit_code,
        "a memory, profile or settings file cannot be read or written (`import --apply`, "
        "`maintain --apply`: some items could not be done, the rest was)",
    ),
    (EXIT_DUPLICATE, "save wrote nothing: a near-duplicate memory exists"),
    (Retry.exit_code, "something changed meanwhile; nothing was written, try again"),
    (SearchFailed.exit_code, "ripgrep is missing or failed"),
    (Unanswered.exit_code, "the warm engine took a save or log and did not answer in time: look before retrying"),
    (EXIT_INTERRUPTED, "stopped by Ctrl-C (`marchdb sql` stops the statement it runs)"),
    (
        EXIT_PIPE,
        "the output was closed before all of it was written (piped into `head`), as for any command a SIGPIPE ends",
    ),
    (EXIT_TERMINATED, "stopped by SIGTERM (`timeout`, a time limit), after cleaning up as for Ctrl-C"),
]
