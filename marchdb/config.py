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

A memory root that is obviously not a vault (the file system's root, a system
folder, the home folder itself, marchdb's home) is refused unless
``allowUnusualRoot`` is true in config.json (or ``MARCH_ALLOW_UNUSUAL_ROOT=1``):
a scan of ``/`` reads the whole disk, and a save into ``/usr`` writes
``/usr/2026/...``. Every setting is checked for its type and range.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from marchdb.errors import ConfigError, MarchError
from marchdb.private import engine_off
from marchdb.vault.roots import in_plain_sight, unusual_root

DEFAULT_MIN_SCORE = 0.5
#: The working page (``now``) is shown as stale once older than this many hours.
DEFAULT_NOW_STALE_HOURS = 24.0
#: ... and at most a year.
MAX_NOW_STALE_HOURS = 24 * 366
#: The warm engine (``marchdb serve``) exits after this many idle minutes.
DEFAULT_DAEMON_IDLE_MINUTES = 30.0
#: Seconds a hook's prompt waits for a starting engine: within the 10 s hook
#: timeout ``marchdb install`` sets, with room for the answer.
DEFAULT_HOOK_WAIT_SECONDS = 6.0
#: config.json larger than this is refused (it holds a few settings).
MAX_CONFIG_BYTES = 1024 * 1024
#: Most embedding threads a setting may ask for.
MAX_THREADS = 256


class Config:
    """Resolved settings for one marchdb process (``load_config`` makes one).

    A plain class, not a dataclass: the hook imports this module on every
    prompt, and ``dataclasses`` (with the ``inspect`` it pulls in) would be
    a large share of a hook process's own time."""

    __slots__ = FIELDS = (
        "home",
        "memory_root",
        "index_path",
        "embedding_model",
        "min_score",
        "threads",
        "prefixes",
        "models_path",
        "dense_weight",
        "project_tag_prefix",
        "root_source",
        "daemon_autostart",
        "use_engine",
        "hook_wait_seconds",
        "daemon_idle_minutes",
        "allow_unusual_root",
        "projects",
        "project_rules",
        "recall_env",
        "ignored_keys",
        "now_stale_hours",
        "sources",
        "import_sessions",
    )

    def __init__(
        self,
        home: Path,
        memory_root: Path,
        index_path: Path,
        embedding_model: str | None = None,
        min_score: float = DEFAULT_MIN_SCORE,
        threads: int | None = None,
        prefixes: dict | None = None,
        models_path: Path | None = None,
        dense_weight: float | None = None,
        project_tag_prefix: str = "project/",
        root_source: str = "",
        daemon_autostart: bool = True,
        use_engine: bool = True,
        hook_wait_seconds: float = DEFAULT_HOOK_WAIT_SECONDS,
        daemon_idle_minutes: float = DEFAULT_DAEMON_IDLE_MINUTES,
        allow_unusual_root: bool = False,
        projects: dict[str, str] | None = None,
        project_rules: dict[str, dict] | None = None,
        recall_env: str | None = None,
        ignored_keys: tuple[str, ...] = (),
        now_stale_hours: float = DEFAULT_NOW_STALE_HOURS,
        sources: dict[str, str] | None = None,
        import_sessions: bool = False,
    ):
        #: Import each agent host's finished sessions in the background
        #: (``importSessions``; ``lifecycle.keep``).
        self.import_sessions = import_sessions
        self.home = home
        self.memory_root = memory_root
        self.index_path = index_path
        self.embedding_model = embedding_model
        self.min_score = min_score
        self.threads = threads
        self.prefixes = prefixes
        self.models_path = models_path
        self.dense_weight = dense_weight
        #: Tag form of a project (seed 000: ``project/NAME``); ``projectTagPrefix``.
        self.project_tag_prefix = project_tag_prefix
        #: Where the memory root was set ("" for the default under the home).
        self.root_source = root_source
        #: Whether clients start the warm engine when it is not running
        #: (``daemonAutoStart``); one that runs is still used.
        self.daemon_autostart = daemon_autostart
        #: Whether clients use a warm engine at all (``MARCH_DAEMON=0``: never;
        #: every command answers in its own process, loading the model there).
        self.use_engine = use_engine
        #: How long a hook's prompt waits for an engine that is starting
        #: (``hookWaitSeconds``; 0: keyword recall until it is warm).
        self.hook_wait_seconds = hook_wait_seconds
        self.daemon_idle_minutes = daemon_idle_minutes
        #: ``allowUnusualRoot``: accept a root ``unusual_root`` would refuse.
        self.allow_unusual_root = allow_unusual_root
        #: ``projects``: folder -> project name, for hosts that report their
        #: working directory (a folder not listed is named by its git root).
        self.projects: dict[str, str] = {} if projects is None else projects
        #: What a ``projects`` entry written as an object says of its project,
        #: by project name: ``{"recall": bool | None, "apart": bool, "untagged": bool}``
        #: (``switches``: recall off or on there; ``apart``: recall there only
        #: from memories tagged for it, plus untagged ones when ``untagged``).
        self.project_rules: dict[str, dict] = {} if project_rules is None else project_rules
        #: ``MARCH_RECALL``: ``"off"`` or ``"on"`` for the session of the host
        #: that passes it (``switches``), None when unset.
        self.recall_env = recall_env
        #: Keys of config.json that are no setting (told once per command; a
        #: near miss of a setting's name is an error instead: ``_check_keys``).
        self.ignored_keys = ignored_keys
        #: ``nowStaleHours``: the working page is shown as stale past this age.
        self.now_stale_hours = now_stale_hours
        #: Where each setting that shapes an answer came from (an environment
        #: variable, a config.json key, "default"): ``--explain`` says it.
        self.sources: dict[str, str] = {} if sources is None else sources

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def require_root(self) -> Path:
        """The memory root, or a ``ConfigError`` when a configured root is
        missing or obviously not a vault (``unusual_root``). Never created on
        the fly: an unmounted drive or a typo must not look like an empty
        vault (a sync would empty the index)."""
        # The CLI's --root is the API's root=: name both.
        source = "--root (root= in the API)" if self.root_source == "--root" else self.root_source
        where = f" (set by {source})" if source else ""
        if not self.memory_root.is_dir():
            raise ConfigError(
                f"memory root {self.memory_root}{where} does not exist or is not a folder; "
                f"create it (mkdir -p) or point {self.root_source or 'MARCH_MEMORY_ROOT'} at your vault"
            )
        reason = None if self.allow_unusual_root else unusual_root(self.memory_root, self.home)
        if reason:
            raise ConfigError(
                f"memory root {self.memory_root}{where} is not a vault: {reason}; point "
                f"{self.root_source or 'MARCH_MEMORY_ROOT'} at the folder that holds your memories, or set "
                '"allowUnusualRoot": true in config.json (or MARCH_ALLOW_UNUSUAL_ROOT=1) if you really mean it'
            )
        return self.memory_root

    def check_index_place(self) -> None:
        """Raise ``ConfigError`` when the index would lie among the memories:
        its -wal, -shm and lock files would sit in the vault, and a name
        ending in .md would be read as a note (a hidden folder of the root is
        fine: scans skip it, as Obsidian does). A root that is no vault at all
        (``unusual_root``: it holds the home, it is /tmp, ...) is refused by
        ``require_root`` where a root is needed, which says more; one allowed
        on purpose (``allowUnusualRoot``) is the user's call."""
        if self.allow_unusual_root or unusual_root(self.memory_root, self.home):
            return
        if in_plain_sight(os.path.realpath(self.index_path.parent), os.path.realpath(self.memory_root)):
            raise ConfigError(
                f"indexPath {self.index_path} is inside the memory root {self.memory_root}; put the index "
                "outside it (or in a hidden folder of it, such as .marchdb/)"
            )

    @property
    def models_dir(self) -> Path:
        """Where built-in recipes are built: ``MARCH_MODELS_DIR``, ``modelsDir``
        in config.json, or ``$MARCH_HOME/models``."""
        return self.models_path or self.home / "models"

    @property
    def profiles_dir(self) -> Path:
        """``$MARCH_HOME/memory/profiles`` (agent.md, user.md)."""
        return self.home / "memory" / "profiles"


#: Settings a client sends with each request to the warm engine: the engine
#: answers with them (they shape a recall, not what it has loaded).
REQUEST_SETTINGS = (
    "min_score",
    "dense_weight",
    "project_tag_prefix",
    "projects",
    "project_rules",
    "recall_env",
    "now_stale_hours",
    "import_sessions",
)


def request_settings(cfg: Config) -> dict:
    """The settings of ``cfg`` a request carries (``REQUEST_SETTINGS``), as JSON values."""
    return {key: getattr(cfg, key) for key in REQUEST_SETTINGS}


def with_settings(cfg: Config, settings: dict, sources: dict[str, str] | None = None) -> Config:
    """A copy of ``cfg`` with ``settings`` (keys of ``REQUEST_SETTINGS``) in place of its own."""
    copy = Config(**{key: getattr(cfg, key) for key in Config.FIELDS})
    for key, value in settings.items():
        if key not in REQUEST_SETTINGS:
            raise KeyError(key)
        setattr(copy, key, value)
    copy.sources = {**cfg.sources, **(sources or {})}
    return copy


#: The engine's idle time may be from a minute to a week: 0.0001 minutes was
#: taken, and an engine started (loading the model) for every call.
MIN_IDLE_MINUTES, MAX_IDLE_MINUTES = 1, 7 * 24 * 60
#: What a bad idle time is told (``daemonIdleMinutes``, ``serve --idle``).
IDLE_RULE = f"a number of minutes, at least {MIN_IDLE_MINUTES} minute and at most a week ({MAX_IDLE_MINUTES:,})"


def idle_minutes_ok(value: object) -> bool:
    """Whether ``value`` may be the engine's idle time: from a minute to a
    week (``daemonIdleMinutes``, ``serve --idle``)."""
    return type(value) in (int, float) and MIN_IDLE_MINUTES <= value <= MAX_IDLE_MINUTES  # type: ignore[operator]


def _read_limited(path: Path) -> bytes:
    """A small regular file's bytes, without blocking on a FIFO (config.json
    may be a link: dotfile managers make them)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path} is not a regular file; replace it with a JSON file")
        chunks, left = [], MAX_CONFIG_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES:,} bytes; it should hold a few settings")
    return data


def read_config_file(home: Path) -> dict:
    """``$MARCH_HOME/config.json`` as a dict ({} when absent)."""
    path = home / "config.json"
    try:
        raw = _read_limited(path)
    except FileNotFoundError:
        return {}
    except NotADirectoryError:
        raise ConfigError(
            f"marchdb's home {home} is a file, not a folder; point MARCH_HOME (or --home) at a folder"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}; check its permissions") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8 JSON") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); fix or delete it") from None
    except RecursionError:
        raise ConfigError(f"{path} nests too deeply to be a settings file; fix or delete it") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{path} must hold a JSON object like {{"memoryRoot": "..."}}')
    return data


def _number(raw: object, name: str, example: str) -> float:
    """A finite number from a setting (JSON number or environment text)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ConfigError(f"{name}={raw!r} is not a number; use {example}")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number; use {example}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name}={raw!r} is not a finite number; use {example}")
    return value


def _expand(value: str, base: Path, env: Mapping[str, str]) -> Path:
    path = _user_path(_expand_vars(value, env), env)
    return path if path.is_absolute() else (base / path)


def _user_path(value: str | os.PathLike, env: Mapping[str, str]) -> Path:
    # ~ is the HOME of ``env``: the warm engine resolves a hook's settings
    # with the hook's environment (hosts.relay), not its own.
    text = os.fspath(value)
    if (text == "~" or text.startswith("~/")) and env.get("HOME"):
        return Path(env["HOME"] + text[1:])
    return Path(text).expanduser()


def _expand_vars(value: str, env: Mapping[str, str]) -> str:
    """``os.path.expandvars`` over ``env``: ``$NAME`` and ``${NAME}``, left as
    written when ``env`` lacks them."""
    import re

    def one(m: re.Match) -> str:
        name = m.group(1).strip("{}")
        return env.get(name, m.group(0))

    return re.sub(r"\$(\w+|\{[^}]*\})", one, value, flags=re.ASCII) if "$" in value else value


#: Most entries of the ``projects`` map.
MAX_PROJECTS = 1000


#: What a ``projects`` entry written as an object may say, and of what type.
PROJECT_KEYS = {"name": str, "recall": bool, "apart": bool, "untagged": bool}


def _projects(raw: object, home: Path, env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, dict]]:
    """``projects`` of config.json checked: folder paths to project names,
    and the rules of the entries written as objects
    (``{"name": "acme", "recall": false, "apart": true, "untagged": false}``), by name."""
    if raw is None:
        return {}, {}
    if not isinstance(raw, dict) or len(raw) > MAX_PROJECTS:
        raise ConfigError(
            f"projects in config.json must be an object of at most {MAX_PROJECTS} entries like "
            '{"~/code/march-cli": "march-cli"} (folder: project name)'
        )
    out, rules = {}, {}
    for folder, entry in raw.items():
        spec = entry if isinstance(entry, dict) else {"name": entry}
        odd = sorted(k for k in spec if k not in PROJECT_KEYS)
        if odd:
            raise ConfigError(
                f"projects[{folder!r}] in config.json has {', '.join(map(repr, odd))}; an entry may say "
                + ", ".join(PROJECT_KEYS)
            )
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            raise ConfigError(f"projects[{folder!r}] in config.json must name a project of 1 to 100 characters")
        for key, kind in PROJECT_KEYS.items():
            if key != "name" and key in spec and not isinstance(spec[key], kind):
                raise ConfigError(f"projects[{folder!r}].{key} in config.json must be true or false")
        out[str(_expand(folder, home, env))] = name.strip()
        if isinstance(entry, dict):
            rules[name.strip()] = {
                "recall": spec.get("recall"),
                "apart": spec.get("apart", False),
                "untagged": spec.get("untagged", True),
            }
    return out, rules


def load_config(
    home: str | os.PathLike | None = None,
    root: str | os.PathLike | None = None,
    model: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Resolve the configuration from flags, environment and config.json."""
    env = os.environ if env is None else env
    home_path = Path(home) if home else _user_path(env.get("MARCH_HOME") or "~/.march", env)
    home_path = home_path.absolute()
    data = read_config_file(home_path)
    ignored = _check_keys(data)

    if root:
        root_path, root_source = _user_path(root, env), "--root"
    elif env.get("MARCH_MEMORY_ROOT"):
        root_path, root_source = _user_path(env["MARCH_MEMORY_ROOT"], env), "MARCH_MEMORY_ROOT"
    elif data.get("memoryRoot") is not None:
        # An empty one (a template not filled in) must not mean the default vault without a word.
        if not isinstance(data["memoryRoot"], str) or not data["memoryRoot"].strip():
            raise ConfigError("memoryRoot in config.json must be a path string (or left out for the default)")
        root_path, root_source = _expand(data["memoryRoot"], home_path, env), "memoryRoot in config.json"
    else:
        root_path, root_source = home_path / "March Memories", ""

    index_value = data.get("indexPath")
    if index_value is not None and (not isinstance(index_value, str) or not index_value.strip()):
        raise ConfigError("indexPath in config.json must be a file path string")
    index_path = _expand(index_value, home_path, env) if index_value else home_path / "index.sqlite"

    embed = model or env.get("MARCH_EMBED_MODEL") or data.get("embeddingModel") or None
    if embed is not None and not isinstance(embed, str):
        raise ConfigError("embeddingModel in config.json must be a path or a recipe name")

    if "MARCH_MEMORY_RECALL_MIN_SCORE" in env:
        score_raw, score_source = env["MARCH_MEMORY_RECALL_MIN_SCORE"], "MARCH_MEMORY_RECALL_MIN_SCORE"
    else:
        score_raw, score_source = data.get("recallMinScore", DEFAULT_MIN_SCORE), "recallMinScore"
    sources = {
        "min_score": score_source if score_source != "recallMinScore" or "recallMinScore" in data else "default",
        "dense_weight": "recallDenseWeight" if "recallDenseWeight" in data else "default",
    }
    min_score = _number(score_raw, score_source, "e.g. 0.5")
    if not 0 <= min_score <= 1:
        # Below 0 (or NaN) every memory would be hinted; above 1 none ever.
        raise ConfigError(f"{score_source}={score_raw!r} is out of range; use a number from 0 to 1, e.g. 0.5")

    threads_raw = env.get("MARCH_THREADS", data.get("threads"))
    threads = None
    if threads_raw not in (None, ""):
        value = _number(threads_raw, "threads", "a whole number such as 4")
        if not value.is_integer() or not 1 <= value <= MAX_THREADS:
            raise ConfigError(f"threads={threads_raw!r} must be a whole number from 1 to {MAX_THREADS}")
        threads = int(value)

    prefixes = data.get("embeddingPrefixes")
    if prefixes is not None and (
        not isinstance(prefixes, dict) or not all(isinstance(v, str) for v in prefixes.values())
    ):
        raise ConfigError('embeddingPrefixes must be an object like {"query": "query: ", "passage": "passage: "}')

    weight = data.get("recallDenseWeight")
    if weight is not None and (
        isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1
    ):
        raise ConfigError("recallDenseWeight must be a number from 0 to 1 (the dense share of the fusion)")

    autostart = data.get("daemonAutoStart", True)
    if not isinstance(autostart, bool):
        raise ConfigError("daemonAutoStart in config.json must be true or false")
    # MARCH_DAEMON=0: no engine at all, neither started nor used (daemonAutoStart
    # false only keeps clients from starting one).
    use_engine = not engine_off(env)
    hook_wait = data.get("hookWaitSeconds", DEFAULT_HOOK_WAIT_SECONDS)
    if isinstance(hook_wait, bool) or not isinstance(hook_wait, (int, float)) or not 0 <= hook_wait <= 8:
        raise ConfigError(
            "hookWaitSeconds in config.json must be a number of seconds from 0 to 8 (hosts give a hook 10 s)"
        )
    idle = data.get("daemonIdleMinutes", DEFAULT_DAEMON_IDLE_MINUTES)
    if not idle_minutes_ok(idle):
        raise ConfigError(f"daemonIdleMinutes in config.json must be {IDLE_RULE}")

    prefix = data.get("projectTagPrefix", "project/")
    if not isinstance(prefix, str):
        raise ConfigError('projectTagPrefix must be a string like "project/" (a memory tagged project/NAME)')
    from marchdb.vault.tags import normalize_tag

    try:
        normalize_tag(prefix + "name")
    except MarchError:
        raise ConfigError(
            f"projectTagPrefix {prefix!r} cannot start a tag (letters, digits and _ / - . + # only), "
            'so no memory could carry it; use a form like "project/"'
        ) from None

    where = "MARCH_NOW_STALE_HOURS" if env.get("MARCH_NOW_STALE_HOURS") else "nowStaleHours"
    stale_raw = env.get("MARCH_NOW_STALE_HOURS") or data.get("nowStaleHours")
    stale = _number(stale_raw, where, "a number of hours such as 24") if stale_raw is not None else None
    if stale is not None and not 0 < stale <= MAX_NOW_STALE_HOURS:
        raise ConfigError(f"{where}={stale_raw!r} must be a number of hours above 0, at most a year (8784)")

    models_value = env.get("MARCH_MODELS_DIR") or data.get("modelsDir")
    if models_value is not None and not isinstance(models_value, str):
        raise ConfigError("modelsDir in config.json must be a folder path string")
    models_path = _expand(models_value, home_path, env) if models_value else None

    allow_raw = env.get("MARCH_ALLOW_UNUSUAL_ROOT")
    if allow_raw is not None and allow_raw != "":
        allow_unusual = allow_raw.strip().lower() in ("1", "true", "yes")
    else:
        allow_unusual = data.get("allowUnusualRoot", False)
        if not isinstance(allow_unusual, bool):
            raise ConfigError("allowUnusualRoot in config.json must be true or false")

    from marchdb.switches import env_switch

    try:
        recall_env = env_switch(env)
    except ValueError as exc:
        raise ConfigError(f"{exc}; use MARCH_RECALL=off (or on) for the session, or unset it") from None
    projects, project_rules = _projects(data.get("projects"), home_path, env)

    import_raw = env.get("MARCH_IMPORT_SESSIONS")
    if import_raw is not None and import_raw != "":
        import_sessions = import_raw.strip().lower() in ("1", "true", "yes")
    else:
        import_sessions = data.get("importSessions", False)
        if not isinstance(import_sessions, bool):
            raise ConfigError("importSessions in config.json must be true or false")

    for what, path in (("home", home_path), ("memory root", root_path), ("index path", index_path)):
        try:
            os.fsencode(path).decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(
                f"the {what} {os.fsencode(path)!r} is not valid UTF-8; rename the folder or choose another"
            ) from None

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
        daemon_autostart=autostart and use_engine,
        use_engine=use_engine,
        hook_wait_seconds=float(hook_wait),
        daemon_idle_minutes=float(idle),
        allow_unusual_root=allow_unusual,
        projects=projects,
        project_rules=project_rules,
        recall_env=recall_env,
        ignored_keys=ignored,
        now_stale_hours=DEFAULT_NOW_STALE_HOURS if stale is None else stale,
        sources=sources,
        import_sessions=import_sessions,
    )


#: Every key config.json may hold (README, "Where things live").
CONFIG_KEYS = (
    "memoryRoot",
    "indexPath",
    "embeddingModel",
    "embeddingPrefixes",
    "modelsDir",
    "recallMinScore",
    "recallDenseWeight",
    "threads",
    "daemonAutoStart",
    "daemonIdleMinutes",
    "hookWaitSeconds",
    "projectTagPrefix",
    "projects",
    "allowUnusualRoot",
    "nowStaleHours",
    "importSessions",
)


def _check_keys(data: dict) -> tuple[str, ...]:
    """The keys of ``data`` that are no setting. One that looks like a
    setting's name misspelt (``memoryroot``) is a ``ConfigError``: ignored,
    its value would silently not apply — memories saved into the default
    vault instead of the one meant. Keys starting with ``_`` or ``$`` (a
    comment, a schema) are left alone."""
    unknown = [k for k in data if k not in CONFIG_KEYS and not k.startswith(("_", "$"))]
    if not unknown:
        return ()
    import difflib  # only for a config with odd keys: most commands never need it

    for key in unknown:
        near = [k for k in CONFIG_KEYS if k.lower() == key.lower()] or difflib.get_close_matches(
            key, CONFIG_KEYS, n=1, cutoff=0.8
        )
        if near:
            raise ConfigError(
                f"config.json has {key!r}, which is no setting: did you mean {near[0]!r}? "
                "(names are case-sensitive); fix the name, then run this again"
            )
    return tuple(unknown)
