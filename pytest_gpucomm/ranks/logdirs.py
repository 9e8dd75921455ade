"""Temporary folders for the pools' per-rank logs, and removal of those left behind.

Every pool's log folder (``gpucomm-ranks-XXXXXXXX``) lives under one folder per controller
process, ``<tmp>/gpucomm-<pid>-XXXXXXXX`` (``<tmp>`` is :func:`tempfile.gettempdir`).
:meth:`RankPool.close <pytest_gpucomm.ranks.pool.RankPool.close>` removes the pool's folder
(and the process's folder once it is empty), the atexit hook of :mod:`.pool` removes the
rest. A controller that dies without running either (SIGKILL, a SIGTERM nobody handles)
leaves its folder behind; the next pool started on the machine removes it
(:func:`remove_stale_roots`): only folders named exactly ``gpucomm-<pid>-XXXXXXXX``, owned by
the current user, holding nothing but ``gpucomm-ranks-XXXXXXXX`` folders and the owner's lock
file ``.owner`` (``.owner-pending`` until it is locked), whose owner is gone. The owner
holds a shared ``flock`` on ``.owner`` for as long as it lives; a folder is stale only when
an exclusive lock on it can be taken, which works across pid namespaces (containers sharing
``<tmp>``) on one kernel. A folder without ``.owner`` is judged by its ``<pid>``: one that is
alive (or alive again, reused) keeps it.
A leftover may survive, but no live controller's folder is removed. Stdlib only.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

__all__ = [
    "ROOT_NAME",
    "POOL_PREFIX",
    "new_log_dir",
    "release_root",
    "remove_own_roots",
    "remove_stale_roots",
]

POOL_PREFIX = "gpucomm-ranks-"
ROOT_NAME = re.compile(r"gpucomm-([1-9][0-9]{0,9})-[a-z0-9_]{8}")  # mkdtemp's 8-char suffix
_POOL_NAME = re.compile(re.escape(POOL_PREFIX) + r"[a-z0-9_]{8}")
OWNER_FILE = ".owner"
OWNER_PENDING = ".owner-pending"  # the lock file until it is locked (see _claim)

_lock = threading.Lock()
_roots: dict[str, Path] = {}  # temp base folder -> this process's root folder there
_owner_fds: dict[Path, int] = {}  # root -> the open, share-locked .owner file
_roots_pid = os.getpid()


def _own_roots() -> dict[str, Path]:
    """This process's roots (forgotten in a forked child: they are the parent's)."""
    global _roots, _roots_pid, _owner_fds
    if _roots_pid != os.getpid():
        _roots, _owner_fds, _roots_pid = {}, {}, os.getpid()
    return _roots


def _claim(root: Path) -> None:
    """Hold a shared lock on ``root/.owner`` for this process's lifetime: the root is in use.

    The file is created and locked as ``.owner-pending`` and only then renamed to ``.owner``:
    created as ``.owner`` and locked after, another process could take the lock in between,
    judge the owner gone and remove the folder that was just made. A folder without ``.owner``
    is judged by its pid, which is this live process's.
    """
    pending = root / OWNER_PENDING
    fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.rename(pending, root / OWNER_FILE)
    except BaseException:
        os.close(fd)
        raise
    _owner_fds[root] = fd


def _unclaim(root: Path) -> None:
    fd = _owner_fds.pop(root, None)
    if fd is not None:
        os.close(fd)


def _owner_gone(path: str) -> bool | None:
    """Whether the owner of the root at ``path`` is gone (its lock can be taken); None without .owner."""
    try:
        fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: the owner lives
    finally:
        os.close(fd)
    return True


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a process (a zombie or another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):
        return True  # cannot tell: keep the folder
    return True


def _is_stale_root(path: str, name: str) -> bool:
    match = ROOT_NAME.fullmatch(name)
    if match is None or int(match.group(1)) == os.getpid():
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    try:
        children = os.listdir(path)
    except OSError:
        return False
    if not all(_POOL_NAME.fullmatch(child) or child in (OWNER_FILE, OWNER_PENDING) for child in children):
        return False  # not one of ours after all
    gone = _owner_gone(path)
    if gone is not None:
        return gone
    return not _pid_alive(int(match.group(1)))


def remove_stale_roots(base: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the root folders in ``base`` (default: the temp folder) of dead controllers.

    Returns the folders removed. Errors (a folder vanishing meanwhile, no permission)
    are ignored: this is housekeeping.
    """
    base = os.fspath(base) if base is not None else tempfile.gettempdir()
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        if _is_stale_root(entry.path, entry.name):
            shutil.rmtree(entry.path, ignore_errors=True)
            if not os.path.lexists(entry.path):
                removed.append(Path(entry.path))
    return removed


def new_log_dir() -> Path:
    """A fresh ``gpucomm-ranks-XXXXXXXX`` folder under this process's root folder.

    Removes dead controllers' root folders first (:func:`remove_stale_roots`).
    """
    base = tempfile.gettempdir()
    remove_stale_roots(base)
    with _lock:
        roots = _own_roots()
        root = roots.get(base)
        if root is None or not root.is_dir():
            root = Path(tempfile.mkdtemp(prefix=f"gpucomm-{os.getpid()}-", dir=base))
            _claim(root)
            roots[base] = root
        return Path(tempfile.mkdtemp(prefix=POOL_PREFIX, dir=root))


def release_root(root: Path) -> None:
    """Remove this process's root folder ``root`` if no pool folder is left in it."""
    with _lock:
        roots = _own_roots()
        for base, known in list(roots.items()):
            if known == root:
                if any(child != OWNER_FILE for child in _listdir(root)):
                    return  # another pool's folder is still there
                _unclaim(root)
                shutil.rmtree(root, ignore_errors=True)
                del roots[base]


def remove_own_roots() -> None:
    """Remove every root folder of this process, whatever is left in it (at exit)."""
    with _lock:
        roots = _own_roots()
        for root in roots.values():
            _unclaim(root)
            shutil.rmtree(root, ignore_errors=True)
        roots.clear()


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
