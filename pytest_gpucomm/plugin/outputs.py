"""The files a run writes (reports, the baseline and its lock), checked before any test runs.

A path that cannot be written is a usage error at the start, not a traceback after every test has run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

__all__ = ["check_output_path", "check_output_folder"]


def check_output_path(path: "str | os.PathLike[str]", what: str) -> None:
    """Raise ``pytest.UsageError`` naming ``what`` (the option) and the reason when a file cannot be written
    at ``path``: it is a directory or not a regular file, it is not writable, or its folder (the nearest one
    that exists: missing folders are created on writing) is not a writable directory."""
    p = Path(path)  # as it will be written: no ~ expansion (the writers do none)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise pytest.UsageError(f"{what} {str(p)!r}: cannot be written: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise pytest.UsageError(f"{what} {str(p)!r}: is a directory, not a file to write")
        if not stat.S_ISREG(st.st_mode):
            raise pytest.UsageError(f"{what} {str(p)!r}: is not a regular file (a FIFO, a socket or a device)")
        if not os.access(p, os.W_OK):
            raise pytest.UsageError(f"{what} {str(p)!r}: the file is not writable")
    _check_nearest_folder(p.parent, f"{what} {str(p)!r}")


def check_output_folder(path: "str | os.PathLike[str]", what: str) -> None:
    """Raise ``pytest.UsageError`` naming ``what`` when files cannot be written into the folder ``path``: it,
    or the nearest folder above it that exists (missing folders are created on writing), is not a writable
    directory."""
    _check_nearest_folder(Path(path), what)


def _check_nearest_folder(folder: Path, what: str) -> None:
    asked = folder
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise pytest.UsageError(f"{what}: {str(folder)!r} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"{what}: the folder {str(folder)!r} is not writable"
                                + ("" if folder == asked else f" (the nearest that exists of {str(asked)!r})"))
