"""What only the user may read or write: the home, private folders and files.

The home holds the engine's socket and lock, the logs and the index; a folder
another user can write to could hold their socket (a fake engine reading every
prompt) or their lock (a pid to signal). Files are opened without following
links and never block on a FIFO. A hook's fast path stands on it, so it
imports ``os`` and ``stat`` alone (paths are strings or ``os.PathLike``).
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

#: The folder of marchdb's logs in its home.
LOG_DIR = "logs"
#: What engines started in the background print (``logs/daemon.out``).
DAEMON_OUT = "daemon.out"


def home_path(home: str | os.PathLike | None = None) -> str:
    """The home a command uses, an absolute path: ``--home``, ``MARCH_HOME``
    or ``~/.march`` (as ``config.load_config`` resolves it, without reading
    config.json)."""
    raw = os.fspath(home or os.environ.get("MARCH_HOME") or "~/.march")
    return os.path.abspath(os.path.expanduser(raw))


def engine_off(env) -> bool:
    """Whether ``env`` (a mapping of environment variables) turns the warm
    engine off: ``MARCH_DAEMON=0`` (or off, no, false)."""
    return env.get("MARCH_DAEMON", "").strip().lower() in ("0", "off", "no", "false")


def home_dir(home: str | os.PathLike | None = None) -> Path:
    """``home_path`` as a ``Path``."""
    from pathlib import Path

    return Path(home_path(home))


def untrusted_home(home: str | os.PathLike) -> str | None:
    """Why the engine files of ``home`` (socket, lock, logs) must not be
    trusted, or None. The socket answers prompts with context to inject and
    the lock names a process to signal: in a folder another user owns or can
    write to, either may be theirs (a fake engine reading every prompt)."""
    try:
        st = os.stat(home)
    except FileNotFoundError:
        return None  # created (ours, 0700) when the first engine starts
    except OSError as exc:
        return f"{home} cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{home} is not a folder"
    if st.st_uid != os.getuid():
        return f"{home} belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and not _own_group(st.st_gid)):
        return f"{home} can be written by other users (mode {stat.S_IMODE(st.st_mode):o}); chmod go-w it"
    other = _acl_writer(home) if st.st_mode & 0o020 else None  # with an ACL, the group bits are its mask
    if other:
        return f"{home} can be written by {other} (an access control list); remove it with setfacl -b"
    return None


#: Linux's POSIX ACL in an extended attribute: a version, then (tag, perm, id) entries.
_ACL_XATTR = "system.posix_acl_access"


_ACL_USER, _ACL_GROUP, _ACL_WRITE = 0x02, 0x08, 0x02


def _acl_writer(path: str | os.PathLike) -> str | None:
    # Named users and groups an ACL lets write (through its mask, which the
    # mode's group bits show: the caller asks only when they grant write).
    try:
        raw = os.getxattr(path, _ACL_XATTR, follow_symlinks=False)
    except (OSError, AttributeError):  # no ACL, no xattr support, not Linux
        return None
    import struct

    for offset in range(4, len(raw) - 7, 8):
        tag, perm, ident = struct.unpack_from("<HHI", raw, offset)
        if not perm & _ACL_WRITE:
            continue
        if tag == _ACL_USER and ident != os.getuid():
            return f"user {ident}"
        if tag == _ACL_GROUP and not _own_group(ident):
            return f"group {ident}"
    return None


def _own_group(gid: int) -> bool:
    # A umask of 002 (Debian and Ubuntu give users a group of their own)
    # makes folders group-writable: harmless when nobody else is in it.
    import grp
    import pwd

    try:
        group = grp.getgrgid(gid)
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return False
    # A group named after the user (the private group), no one else listed in it.
    return group.gr_name == user and all(member == user for member in group.gr_mem)


def open_private(path: str | os.PathLike, flags: int, mode: int = 0o600) -> int:
    """A descriptor on ``path`` if it is a regular file (created with
    ``mode`` when ``flags`` say so), never through a link and never blocking
    on a FIFO; ``OSError`` otherwise."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def make_private_dirs(path: str | os.PathLike, top: str | os.PathLike | None = None) -> None:
    """Create ``path`` with mode 0700, and the missing folders between it and
    ``top`` (default: ``path`` alone) too; folders above ``top`` get the usual
    mode. (``mkdir(parents=True)`` gives every folder the umask's mode: a home
    made group-writable by a umask of 002 is not trusted by its own engine.)"""
    here = os.path.normpath(os.fspath(path))
    top_parent = os.path.dirname(here if top is None else os.path.normpath(os.fspath(top))) or "."
    if not os.path.isdir(top_parent):
        os.makedirs(top_parent, exist_ok=True)
    missing = []
    while not os.path.isdir(here) and here != top_parent:
        missing.append(here)
        parent = os.path.dirname(here) or "."
        if parent == here:  # the top of the file system
            break
        here = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
