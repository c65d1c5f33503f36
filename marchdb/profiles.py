"""Profiles and the context block an agent injects every run (seed 000).

``$MARCH_HOME/memory/profiles/agent.md`` and ``user.md`` are the fixed,
always-injected identity and preferences; they are not recalled on demand.
The context shows them as ``[agent_profile]`` and ``[user_profile]``, then
the working page as ``[now]`` (``now``) when there is one, then, when
passive recall found something, a ``[recall]`` block of one-line hints
(id, score, name, short description; never a memory's body).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from marchdb.config import Config
from marchdb.errors import ConfigError, FileError, InvalidInput
from marchdb.hints import contradiction_lines, hint_line, recall_block
from marchdb.modeltext import for_model
from marchdb.vault.files import read_file

PROFILE_FILES = {"agent_profile": "agent.md", "user_profile": "user.md"}
#: Largest profile read: it goes into every prompt.
MAX_PROFILE_BYTES = 64 * 1024


def read_profiles(cfg: Config, problems: list[str] | None = None) -> dict:
    """``{"agent_profile": text, "user_profile": text}`` from the profile files.

    Missing files are created first (``config.ensure_layout``, never
    overwriting), so a fresh home yields the starter texts. The files are
    read as they are now; the user may edit them at any time. Like memories,
    they are read only as regular files, never through a link or from a
    FIFO, and at most ``MAX_PROFILE_BYTES`` each. A profile that cannot be
    read raises ``FileError``; with ``problems`` (a list) its text is "" and
    the reason is appended there instead, so the other still reaches the
    prompt (a hook at the start of a session). ``<private>`` regions are left
    out and secrets replaced by markers (``redact``).
    """
    if not all(os.path.lexists(cfg.profiles_dir / name) for name in PROFILE_FILES.values()):
        ensure_layout(cfg)
    from marchdb import redact

    out = {}
    for key, name in PROFILE_FILES.items():
        try:
            # What goes into every prompt: no <private> region, no secret (the
            # file stays as written; doctor points the secret out).
            out[key] = redact.redact(redact.without_private(_read_profile(cfg.profiles_dir / name)))[0].strip()
        except FileError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
            out[key] = ""
    return out


def _read_profile(path: Path) -> str:
    try:
        data, _st = read_file(path, MAX_PROFILE_BYTES)
        if len(data) > MAX_PROFILE_BYTES:
            raise FileError(f"{path} is larger than {MAX_PROFILE_BYTES:,} bytes; it goes into every prompt, shorten it")
        return data.decode("utf-8").removeprefix("\ufeff").strip()
    except UnicodeDecodeError as exc:
        raise FileError(f"{path} is not UTF-8 text (byte {exc.start}); re-save it as UTF-8") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileError(
                f"{path} is a symbolic link; marchdb never reads through links: put the file there"
            ) from None
        raise FileError(
            f"cannot read {path}: {exc.strerror} (it must be a regular file); check the file and its permissions"
        ) from None


def _field(hint: object, key: str) -> object:
    # Hints arrive as dicts (JSON, MCP) or as recall.Hint objects.
    if isinstance(hint, Mapping):
        return hint[key]
    try:
        return getattr(hint, key)
    except AttributeError:
        raise KeyError(key) from None


def format_hint_lines(hints: Iterable[Mapping | object]) -> str:
    """Seed 000's recall lines, one per hint:
    ``- <id> | score=0.62 | <name> | <short description>``.

    A hint is a dict or an object (``recall.Hint``) with ``id``, ``score``,
    ``name`` and ``description``; the description is cut to
    80 characters (``recall.short``). Returns "" for no hints.
    """
    hints, lines = list(hints), []
    for hint in hints:
        try:
            mem_id, score, name = _field(hint, "id"), _field(hint, "score"), _field(hint, "name")
        except KeyError:
            raise InvalidInput(f"a recall hint needs id, score and name (and a description); got {hint!r}") from None
        try:
            score_text = f"{float(score):.2f}"  # type: ignore[arg-type]  # checked just below
        except (TypeError, ValueError):
            raise InvalidInput(f"hint {mem_id}: score {score!r} is not a number") from None
        try:
            description = _field(hint, "description") or ""
        except KeyError:
            description = ""  # a hint without a description is shown without one (seed 000)
        lines.append(hint_line(str(mem_id), float(score_text), str(name), str(description)))
    return "\n".join(lines + contradiction_lines(hints))


def format_context(profiles: Mapping, hints_text: str | Iterable[Mapping | object] | None = None, now: str = "") -> str:
    """The text injected at the start of an agent run.

    ``[agent_profile]`` and ``[user_profile]`` blocks, then the working page's
    ``[now]`` block when there is one (``now``: ``now.block``'s text), then a
    ``[recall]`` block when there are hints. ``hints_text`` is the output of
    ``format_hint_lines`` (a list of hints is formatted here too). The
    profiles' text is as a model may read it (``modeltext.for_model``: a
    ``[recall]`` line in a profile is not a block).
    """
    blocks = []
    for key in PROFILE_FILES:
        if key not in profiles:
            raise InvalidInput(f"profiles lack {key!r}; pass the dict read_profiles() returns")
        blocks.append(f"[{key}]\n{for_model(str(profiles[key] or '')).strip()}")
    if now.strip():
        blocks.append(now.strip())
    if hints_text is not None and not isinstance(hints_text, str):
        hints_text = format_hint_lines(hints_text)
    if hints_text and hints_text.strip():
        blocks.append(recall_block(hints_text).strip())
    return "\n\n".join(blocks) + "\n"


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
                # The home holds the engine's socket and lock: private to its user.
                if folder == cfg.home:
                    from marchdb.private import make_private_dirs

                    make_private_dirs(folder)
                else:
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
