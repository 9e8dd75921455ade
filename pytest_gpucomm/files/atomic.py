"""Write a file so that readers see the old content or the new, never half of it.

The new text goes to a temporary file beside the target, ``.<name>.XXXXXXXX.tmp`` (eight characters of
``a-z0-9_``, the form :func:`tempfile.mkstemp` uses), which is renamed over the target; or, where an existing
file must not be replaced (``replace=False``), linked to the target's name, which fails if that name exists
by then, so a file another process created meanwhile is never replaced.  A writer holds an
exclusive ``flock`` on its temporary file for as long as the file is its own, so a crashed writer's
leftover (the lock dies with the process) can be told from a live writer's file:
:func:`remove_stale_temp_files` removes only the former.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Callable, Optional

try:  # POSIX only; elsewhere temporary files are written without the liveness lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["write_atomic", "temp_file_pattern", "remove_stale_temp_files", "named_error"]

_TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
_TEMP_LEN = 8
_TEMP_ATTEMPTS = 100


def temp_file_pattern(path: Path) -> "re.Pattern[str]":
    """The names :func:`write_atomic` gives the temporary files of ``path`` (matched against a bare name)."""
    chars = re.escape(_TEMP_CHARS)
    return re.compile(rf"\.{re.escape(Path(path).name)}\.[{chars}]{{{_TEMP_LEN}}}\.tmp\Z")


def _create_temp(path: Path) -> tuple[int, Path]:
    """Create ``.<name>.XXXXXXXX.tmp`` beside ``path`` (O_EXCL, mode 0600) and take its liveness lock."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(_TEMP_ATTEMPTS):
        tag = "".join(secrets.choice(_TEMP_CHARS) for _ in range(_TEMP_LEN))
        tmp = path.parent / f".{path.name}.{tag}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileExistsError:
            continue
        if fcntl is None:
            return fd, tmp
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a cleaner is looking at it this instant and will remove it: start again
            os.close(fd)
            continue
        except OSError:  # no flock on this file system: write unlocked (only a concurrent cleaner could race)
            return fd, tmp
        try:  # a cleaner may have removed the file between its creation and the lock: start again
            if os.stat(tmp, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)
    raise FileExistsError(f"{path}: could not create a temporary file beside it after {_TEMP_ATTEMPTS} attempts")


def write_atomic(path: Path, text: "str | bytes", check: Optional[Callable[[Path], None]] = None, *,
                 replace: bool = True) -> None:
    """Write ``text`` (UTF-8; or ``bytes`` as they are) to a temp file beside ``path``, fsync it, let ``check``
    inspect it (an exception there keeps the old file), then rename it over ``path`` and fsync the folder.

    ``replace=False``: ``path`` must not exist when the new file takes its name; if it does (another process
    made it while this one wrote), FileExistsError naming it, and nothing is replaced.  An OSError of the
    write (a read-only file system, a full disk, no permission) names ``path``, not the temporary file
    (:func:`named_error`)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(path)
    except OSError as e:
        raise named_error(e, path) from None
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # created 0600; give the file the usual mode
        if check is not None:
            check(Path(tmp))
        if replace:
            os.replace(tmp, path)
        else:
            _place_new(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)  # while the liveness lock is still held
        except FileNotFoundError:
            pass
        if isinstance(e, OSError) and e.filename in (None, str(tmp)):  # os.write names no file
            raise named_error(e, path) from None
        raise
    finally:
        os.close(fd)  # releases the liveness lock
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def named_error(e: OSError, path: Path) -> OSError:
    """``e``, an error of writing ``path`` (through its temporary file, or making its folder), as the same kind
    of error naming ``path``, the file the caller asked for: the temporary file is gone by the time anyone
    reads the message, and its name (``.p.html.co1budhe.tmp``) is not one the user gave."""
    if e.errno is None:
        return e
    return OSError(e.errno, e.strerror or str(e), str(path))  # OSError(errno, ...) is PermissionError & co.


def _place_new(tmp: Path, path: Path) -> None:
    """Give the written ``tmp`` the name ``path`` only where no file has it: a hard link fails when the name
    exists, so the check and the naming are one step; where the file system has no hard links, checked, then
    renamed."""
    taken = FileExistsError(errno.EEXIST, "exists: it was created while this was written; not replaced", str(path))
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise taken from None
    except OSError:  # no hard links here (some network and FAT file systems)
        if os.path.lexists(path):
            raise taken from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def remove_stale_temp_files(path: Path) -> list[Path]:
    """Remove the temporary files that writers of ``path`` killed mid-write left beside it.

    Only names matching :func:`temp_file_pattern` for ``path`` are considered, only regular files (not
    links), and only those whose writer is gone: a live :func:`write_atomic` holds an exclusive lock on its
    file, and a file that cannot be locked (or opened, or checked) is left alone.  Without ``flock``
    (Windows) nothing is removed.  Returns the files removed; errors are not raised (this is tidying).
    """
    path = Path(path)
    if fcntl is None:
        return []
    pattern = temp_file_pattern(path)
    removed: list[Path] = []
    try:
        names = [n for n in os.listdir(path.parent) if pattern.match(n)]
    except OSError:
        return removed
    for name in sorted(names):
        tmp = path.parent / name
        try:
            if not stat.S_ISREG(os.stat(tmp, follow_symlinks=False).st_mode):
                continue
            fd = os.open(tmp, os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a live writer holds it (or locks do not work here): leave it
                continue
            try:
                if os.stat(tmp, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
                    continue  # replaced since it was opened
                os.unlink(tmp)
                removed.append(tmp)
            except OSError:
                continue
        finally:
            os.close(fd)
    return removed
