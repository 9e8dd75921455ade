"""The files a run writes (reports, the baseline and its lock), checked before any test runs.

A path that cannot be written is a usage error at the start, not a traceback after every test has run.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from .settings import Settings, origin

__all__ = ["check_outputs", "check_output_path", "check_file", "check_output_folder"]


def check_outputs(config: pytest.Config, settings: Settings) -> None:
    """The files this process writes at the end (--gpucomm-json, --gpucomm-benchmark-json, --gpucomm-plots, and
    pytest's own --junitxml, which carries the gpucomm properties), checked before any test runs: a file is
    created and removed where each will be written, and one that cannot be is a usage error (exit status 4)
    naming the option, the path and the reason."""
    for path, option in ((settings.json_path, "--gpucomm-json"),
                         (settings.benchmark_json, "--gpucomm-benchmark-json")):
        if path:
            check_file(path, f"{option}={path} (from {origin(config, option)})")
    xml = getattr(config.option, "xmlpath", None)
    if xml:
        check_file(xml, f"--junitxml={xml}")
    if settings.plots_dir:
        _check_plots(config, settings.plots_dir)


def _check_plots(config: pytest.Config, folder: str) -> None:
    """--gpucomm-plots, before any test runs: matplotlib must import (else a usage error naming the extra) and
    the folder must be one that can be made."""
    where = origin(config, "--gpucomm-plots")
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        from ..report.plots import EXTRA

        raise pytest.UsageError(f"--gpucomm-plots={folder} (from {where}): the plots need matplotlib, which cannot be "
                                f"imported ({e}): install the plots extra, {EXTRA}") from None
    except ValueError as e:  # matplotlib refuses an unknown backend as it is imported
        backend = os.environ.get("MPLBACKEND")
        if backend is None:
            raise
        raise pytest.UsageError(f"invalid environment: MPLBACKEND={backend!r} (read by matplotlib for --gpucomm-plots="
                                f"{folder}): {e}; set it to a backend matplotlib knows (agg draws to files) or unset "
                                "it") from None
    check_output_folder(os.path.abspath(folder), f"--gpucomm-plots={folder} (from {where})")


def check_output_path(path: "str | os.PathLike[str]", what: str) -> None:
    """:func:`check_file` of ``path``, the message starting ``what 'path'`` (``what``: the option, or what the
    file is: "--gpu-baseline-save: the baseline")."""
    check_file(path, f"{what} {str(path)!r}")


def check_file(path: "str | os.PathLike[str]", label: str) -> None:
    """Raise ``pytest.UsageError`` starting with ``label`` (the option and the path as the user gave them)
    and saying why a file cannot be written at ``path``: it is a directory or not a regular file, it is not
    writable, or a file cannot be created in its folder (the nearest one that exists: missing folders are
    created on writing; tried by creating and removing a file there, as the write will create its
    temporary file beside it)."""
    p = Path(path)  # as it will be written: no ~ expansion (the writers do none)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise pytest.UsageError(f"{label}: cannot write there: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise pytest.UsageError(f"{label}: is a directory, not a file to write")
        if not stat.S_ISREG(st.st_mode):
            raise pytest.UsageError(f"{label}: is not a regular file (a FIFO, a socket or a device)")
        if not os.access(p, os.W_OK):
            raise pytest.UsageError(f"{label}: the file is not writable")
    _check_nearest_folder(p.parent, label)


def check_output_folder(path: "str | os.PathLike[str]", what: str) -> None:
    """Raise ``pytest.UsageError`` naming ``what`` when files cannot be written into the folder ``path``: it,
    or the nearest folder above it that exists (missing folders are created on writing), is not a directory,
    or a file cannot be created and removed there."""
    _check_nearest_folder(Path(path), what)


def _check_nearest_folder(folder: Path, what: str) -> None:
    asked = folder
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    nearest = "" if folder == asked else f" (the nearest that exists of {str(asked)!r})"
    if not folder.is_dir():
        raise pytest.UsageError(f"{what}: {str(folder)!r} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"{what}: the folder {str(folder)!r} is not writable" + nearest)
    _try_a_file(folder, what, f" (in {str(folder)!r}, the nearest folder that exists of {str(asked)!r})"
                if nearest else "")


def _try_a_file(folder: Path, what: str, where: str) -> None:
    """Create a file in ``folder`` and remove it: the only sure test that a write will work there (a
    read-only file system, /proc, a full quota, or running as root where the folder's mode says no)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpucomm-probe-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise pytest.UsageError(f"{what}: cannot write there: {e.strerror or e}{where}") from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
