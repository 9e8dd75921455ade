"""The bytes of a file that pytest-gpucomm reads back (a report, a baseline file, a published floor), read
so that no file can hang or exhaust the reader.

A FIFO, a socket or a device given where a file is expected would block the open or read without end
(``/dev/zero`` until memory runs out); a file of gigabytes would be read whole before its JSON is parsed.
So the type is checked with ``os.stat`` before the open (a FIFO or device is never opened), the open is
non-blocking (a file swapped for a FIFO in between cannot hang it), the type is checked again on the open
descriptor, and at most ``limit + 1`` bytes are read.  Every problem is ``error(message)``, the message
naming the file, what it is and what it was taken for.  Standard library only.
"""

from __future__ import annotations

import os
import stat
from typing import Callable, Optional

__all__ = ["read_regular_file", "size_text"]

_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def size_text(n: int) -> str:
    """``n`` bytes as a limit reads: whole MiB as such, else the bytes."""
    mib = 1024 * 1024
    return f"{n // mib} MiB" if n >= mib and n % mib == 0 else f"{n} bytes"


def read_regular_file(path: "str | os.PathLike[str]", *, what: str, limit: int, limit_name: str,
                      error: Callable[[str], Exception]) -> bytes:
    """The bytes of the regular file ``path`` of at most ``limit`` bytes; ``error(message)`` is raised where
    it does not exist, is a directory, a FIFO, a socket or a device, is larger than ``limit`` (or grows past
    it while read), or cannot be opened or read.  ``what`` is the file's role ("baseline", "report"),
    ``limit_name`` the setting that holds the limit (named in the message)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode, what, error)
        if st.st_size > limit:
            raise _too_large(path, st.st_size, what, limit, limit_name, error)
        fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise error(f"{path}: {what} file does not exist") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what} file") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} file: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the check above
            raise _not_regular(path, st.st_mode, what, error)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, max(st.st_size + 1, 1 << 16)))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if left <= 0:  # it grew past the limit while it was read
        raise _too_large(path, None, what, limit, limit_name, error)
    return b"".join(chunks)


def _not_regular(path: "str | os.PathLike[str]", mode: int, what: str,
                 error: Callable[[str], Exception]) -> Exception:
    if stat.S_ISDIR(mode):
        return error(f"{path}: is a directory, not a {what} file")
    kind = next((name for test, name in _SPECIAL if test(mode)), "a special file")
    return error(f"{path}: is {kind}, not a regular file: not a {what} file")


def _too_large(path: "str | os.PathLike[str]", size: Optional[int], what: str, limit: int, limit_name: str,
               error: Callable[[str], Exception]) -> Exception:
    got = f" ({size} bytes)" if size is not None else ""
    return error(f"{path}: is larger than {size_text(limit)}{got}, the most a {what} file may hold ({limit_name}): "
                 f"not a {what} file")
