"""Which folders may be a memory root: never the system's, a home, or marchdb's own.

A memory root is scanned whole and written into by saves: ``/``, ``/usr`` or
the user's home would make every ``.md`` file in it a memory. ``config``
refuses such a root unless ``allowUnusualRoot`` says otherwise; ``import``
refuses such a source.
"""

from __future__ import annotations

import os
from pathlib import Path

#: System folders: never a memory root, nor anything inside them.
SYSTEM_TREES = (
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/System",
    "/private/etc",
    # /var holds vaults only in /var/home (Fedora Silverblue's homes) or a
    # temp folder (/var/tmp, macOS's /private/var/folders); the rest is the system's.
    "/var/lib",
    "/var/log",
    "/var/cache",
    "/var/spool",
    "/var/mail",
    "/var/backups",
    "/var/run",
    "/var/lock",
    "/var/db",
    "/private/var/db",
    "/private/var/log",
)
#: Folders that are not a vault themselves, though vaults may lie below them
#: (a USB drive under /run/media, a temp folder under /tmp or macOS's /private/var).
NOT_ROOTS = (
    "/",
    "/var",
    "/run",
    "/home",
    "/Users",
    "/tmp",
    "/opt",
    "/srv",
    "/mnt",
    "/media",
    "/Volumes",
    "/private",
    "/private/var",
    "/private/tmp",
    "/root",
    "/var/tmp",
    "/var/home",
    "/run/media",
)
#: Folders of the user's home that hold settings and keys, never notes.
HOME_SETTINGS = (".ssh", ".gnupg", ".aws", ".kube", ".docker", ".config", ".cache", ".local", ".claude")


def unusual_root(root: Path, home: Path) -> str | None:
    """Why ``root`` is obviously not a memory root (None when it may be one):
    the file system's root, a system folder or anything inside one, a folder
    such as ``/home`` or ``/tmp`` itself, the user's home folder, marchdb's
    home, or a folder that holds marchdb's home in plain sight."""
    real = os.path.realpath(root)
    if real == os.path.realpath(os.sep) or real in NOT_ROOTS:
        return f"{real} is a top-level folder of the system, not a vault (a scan would read all of it)"
    for tree in SYSTEM_TREES:
        if real == tree or real.startswith(tree + "/"):
            return f"{real} is inside the system folder {tree}"
    try:
        user_home = os.path.realpath(Path.home())
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        user_home = None
    if real == user_home:
        return "it is your home folder: every .md file in it would become a memory, and saves would land in it"
    if user_home and os.path.dirname(real) == user_home and os.path.basename(real) in HOME_SETTINGS:
        return f"{real} holds your settings and keys, not notes"
    march_home = os.path.realpath(home)
    if real == march_home:
        return "it is marchdb's home (profiles, models, index), not a folder of memories"
    if os.path.isdir(os.path.join(real, "memory", "profiles")) and any(
        os.path.lexists(os.path.join(real, name)) for name in ("daemon.lock", "index.sqlite.lock")
    ):
        return "it is a marchdb home (profiles, index), another one than this; not a folder of memories"
    if in_plain_sight(march_home, real):
        return f"it holds marchdb's home {march_home}; keep the memories in a folder of their own"
    return None


def in_plain_sight(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it outside any hidden
    folder (one a scan would walk into); both real paths."""
    # Imported here: the warm engine's client path (a hook, a quick recall) loads config but not files,
    # whose imports (secrets, threading, typing) would add to every hook's start-up; only a Store asks this.
    from marchdb.vault.files import hidden

    inside = os.path.relpath(path, folder)
    # The scan's own rule, so the two cannot drift; "." is the folder itself, where the scan starts.
    return inside == "." or not hidden(inside)
