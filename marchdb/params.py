"""How an operation and its arguments are declared and checked: ``Param`` and ``Operation``.

The operations themselves are declared once, in ``ops``, which reads every
front-end's arguments off them. Only the standard library: a hook imports this.
"""

from __future__ import annotations

import math

from marchdb.errors import InvalidInput, check_text

#: Types a parameter may have: text, a whole number, a number, yes/no, or a
#: list of texts ("strs"; one text is taken as a list of one).
KINDS = ("str", "int", "float", "bool", "strs")


class Param:
    """One argument of an operation.

    ``flag``: how the CLI spells it (``"--run"``), ``""`` for a positional
    argument, None when the CLI does not offer it. ``mcp``: whether agents
    see it in the MCP schema. ``hook``: whether ``marchdb hook generic``
    takes it as an option. ``cli_default``: the CLI's default when it
    differs from the library's (``log`` leaves embedding to the next sync).
    """

    __slots__ = (
        "name",
        "kind",
        "help",
        "default",
        "required",
        "choices",
        "low",
        "high",
        "max_chars",
        "flag",
        "short",
        "metavar",
        "mcp",
        "hook",
        "cli_default",
        "nonblank",
        "one_line",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        help: str,
        default: object = None,
        *,
        required: bool = False,
        choices: tuple[str, ...] | None = None,
        low: float | None = None,
        high: float | None = None,
        max_chars: int | None = None,
        flag: str | None = None,
        short: str | None = None,
        metavar: str | None = None,
        mcp: bool = True,
        hook: bool = False,
        cli_default: object = ...,
        nonblank: bool = False,
        one_line: bool = False,
    ):
        assert kind in KINDS, kind
        #: A text that must hold more than spaces (an id, a run id) when given.
        self.nonblank = nonblank
        #: A name (a run, a project): no line break or other control character, which
        #: no tag can hold and which would split the log line it is written on.
        self.one_line = one_line
        self.name, self.kind, self.help, self.default = name, kind, help, default
        self.required, self.choices, self.low, self.high, self.max_chars = required, choices, low, high, max_chars
        self.flag, self.short, self.metavar, self.mcp, self.hook = flag, short, metavar, mcp, hook
        self.cli_default = default if cli_default is ... else cli_default

    def __repr__(self) -> str:
        return f"Param({self.name!r}, {self.kind!r})"

    def bounds(self) -> dict:
        """The parameter's bounds by their JSON schema names (``minimum``,
        ``maximum``, ``maxLength``): for the schemas agents read."""
        found = {"minimum": self.low, "maximum": self.high, "maxLength": self.max_chars}
        return {k: v for k, v in found.items() if v is not None}

    def check(self, value: object, op: str) -> object:
        """``value`` if it is of this parameter's type and within its bounds
        (a list for ``strs``), else ``InvalidInput`` saying what is wanted.
        None (JSON's null) is not given: the default."""
        if value is None:
            if self.required:
                raise InvalidInput(f"{op} needs {self.name}: {self.help}")
            return self.default
        what = f"{op}: {self.name}"
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise InvalidInput(f"{what} must be true or false, got {shown(value)}")
        elif self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"{what} must be a whole number, got {shown(value)}")
        elif self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidInput(f"{what} must be a number, got {shown(value)}")
        elif self.kind == "str":
            if not isinstance(value, str):
                raise InvalidInput(f"{what} must be text, got {shown(value)}")
            check_text(value, what)
            if self.nonblank and not value.strip():
                raise InvalidInput(f"{what} must not be empty: {self.help}")
            if self.one_line and any(c < " " or c == "\x7f" for c in value):
                raise InvalidInput(f"{what} must be one line of text, without line breaks or control characters")
        else:  # strs
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise InvalidInput(f"{what} must be a list of texts, got {shown(value)}")
            value = list(value)
            for item in value:
                check_text(item, what)
        if self.choices is not None and value not in self.choices:
            raise InvalidInput(f"{what} must be one of {', '.join(self.choices)}, got {shown(value)}")
        if self.low is not None and value < self.low:  # type: ignore[operator]
            raise InvalidInput(f"{what} must be at least {self.low:g}, got {value}")
        if self.high is not None and value > self.high:  # type: ignore[operator]
            raise InvalidInput(f"{what} must be at most {self.high:g}, got {value}")
        if self.max_chars is not None and isinstance(value, str) and len(value) > self.max_chars:
            raise InvalidInput(f"{what} is {len(value):,} characters; at most {self.max_chars:,} are taken")
        return value


class Operation:
    """One operation: what it is called, what an agent reads about it, its
    parameters, and the ``Store`` method that does it (called with every
    parameter as a keyword). ``mcp``: an MCP tool; ``prompt``: an MCP prompt
    instead (its answer's ``text`` is the message handed to the model).
    ``as_written``: keys of its answer handed back as they are (a file's own
    text read on request, a block already made for a model; dotted for a key
    of the items under another: ``results.matches``); every other text of the
    answer goes through ``modeltext.for_model``."""

    __slots__ = (
        "name",
        "command",
        "summary",
        "description",
        "params",
        "method",
        "writes",
        "mcp",
        "errors_as_data",
        "prompt",
        "as_written",
    )

    def __init__(
        self,
        name: str,
        *,
        command: str | None,
        summary: str,
        description: str,
        params: tuple[Param, ...],
        method: str,
        writes: bool = False,
        mcp: bool = True,
        errors_as_data: tuple[type[Exception], ...] = (),
        prompt: bool = False,
        as_written: tuple[str, ...] = (),
    ):
        self.name, self.command, self.summary, self.description = name, command, summary, description
        self.params, self.method, self.writes, self.mcp = params, method, writes, mcp
        self.errors_as_data, self.prompt, self.as_written = errors_as_data, prompt, as_written

    def __repr__(self) -> str:
        return f"Operation({self.name!r})"

    def param(self, name: str) -> Param:
        """The parameter called ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def checked(self, args: object) -> dict:
        """``args`` checked against the parameters, with every default filled in.
        An argument the operation does not take is an error, not ignored: a
        misspelt ``run_idd`` would silently turn off de-duplication."""
        if not isinstance(args, dict):
            raise InvalidInput(f"{self.name}: the arguments must be an object of names and values")
        unknown = [k for k in args if not isinstance(k, str) or k not in self._names()]
        if unknown:
            raise InvalidInput(
                f"{self.name} takes no argument {shown(unknown[0])}; it takes {', '.join(self._names())}"
            )
        return {p.name: p.check(args.get(p.name, p.default), self.name) for p in self.params}

    def _names(self) -> list[str]:
        return [p.name for p in self.params]


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
