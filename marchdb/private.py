"""What only the user may read or write: the home, private folders and files.

The home holds the engine's socket and lock, the logs and the index; a folder
another user can write to could hold their socket (a fake engine reading every
prompt) or their lock (a pid to signal). Files are opened without following
links and never block on a FIFO. Only the standard library (a hook imports it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path


def home_dir(home: str | os.PathLike | None = None) -> Path:
    """The home a command uses: ``--home``, ``MARCH_HOME`` or ``~/.march``
    (as ``config.load_config`` resolves it, without reading config.json)."""
    raw = home or os.environ.get("MARCH_HOME") or "~/.march"
    return Path(raw).expanduser().absolute()


def untrusted_home(home: Path) -> str | None:
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


def _acl_writer(path: Path) -> str | None:
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


def open_private(path: Path, flags: int, mode: int = 0o600) -> int:
    """A descriptor on ``path`` if it is a regular file (created with
    ``mode`` when ``flags`` say so), never through a link and never blocking
    on a FIFO; ``OSError`` otherwise."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def make_private_dirs(path: Path, top: Path | None = None) -> None:
    """Create ``path`` with mode 0700, and the missing folders between it and
    ``top`` (default: ``path`` alone) too; folders above ``top`` get the usual
    mode. (``mkdir(parents=True)`` gives every folder the umask's mode: a home
    made group-writable by a umask of 002 is not trusted by its own engine.)"""
    path = Path(path)
    top = path if top is None else Path(top)
    if not os.path.isdir(top.parent):
        os.makedirs(top.parent, exist_ok=True)
    missing = []
    here = path
    while not os.path.isdir(here) and here != top.parent:
        missing.append(here)
        here = here.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
