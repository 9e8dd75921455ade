"""One pytest run inside this process, for module fixtures (tests/test_cli.py, tests/test_htmlpage.py,
tests/test_plots.py).  Imported by module name (tests/ is on sys.path).

The ``pytester`` fixture is function-scoped, so a module fixture that records a run cannot use its in-process
runs; this does what they do: the run gets its own environment, working folder, ``sys.path`` and
``sys.modules`` (restored afterwards, so the next run imports its conftest.py and test files afresh), and its
output is captured.  A run in a process of its own would import torch again: about 2.4 of the 3 CPU-s that a
small run takes on the 2-core CI machine.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pytest
from _pytest.pytester import SysModulesSnapshot, SysPathsSnapshot

try:  # pytest 8.4 and later; before, its unraisable exception plugin made no such collections to turn off
    from _pytest.unraisableexception import gc_collect_iterations_key
except ImportError:  # pragma: no cover - the versions CI installs have it
    gc_collect_iterations_key = None


#: the terminal width of the pytest runs the tests start: so wide that the plugin wraps none of its lines
#: (tests/conftest.py)
COLUMNS = "1000"
#: what else every pytest run the tests start is given (tests/conftest.py): a flagged case measured again at once,
#: without the default wait of --gpu-remeasure-after (tests/test_remeasure_wait.py sets its own)
RUN_ENV = {"GPUCOMM_REMEASURE_AFTER": "0"}


@dataclass(frozen=True)
class Run:
    """What :func:`subprocess.run` would give for the run: its exit code and its output."""

    returncode: int
    stdout: str
    stderr: str


class _NoGcAtEnd:
    """What pytester's in-process runs do: no full garbage collection at the run's end (pytest's unraisable
    exception plugin makes one in its unconfigure and one more at its clean-up).  In a process that has
    imported torch, scipy and matplotlib each takes about 0.1 CPU-s on the 2-core CI machine."""

    @staticmethod
    def pytest_configure(config: pytest.Config) -> None:
        if gc_collect_iterations_key is not None:
            config.stash[gc_collect_iterations_key] = 0


def run_inprocess(folder: Path, args: Sequence[str], env: Optional[Mapping[str, str]] = None,
                  drop: Sequence[str] = ()) -> Run:
    """``pytest *args`` in ``folder``, with ``env`` set and the variables that start with one of ``drop``
    removed for the run; printed as on a terminal :data:`COLUMNS` wide unless ``env`` sets ``COLUMNS``, and
    with :data:`RUN_ENV` unless ``env`` sets its variables."""
    env = {"COLUMNS": COLUMNS, **RUN_ENV, **(env or {})}
    out, err = io.StringIO(), io.StringIO()
    modules, paths = SysModulesSnapshot(), SysPathsSnapshot()
    with pytest.MonkeyPatch.context() as mp:
        for name in [k for k in os.environ if drop and k.startswith(tuple(drop))]:
            mp.delenv(name)
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        mp.chdir(folder)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = pytest.main([str(a) for a in args], plugins=[_NoGcAtEnd()])
        finally:
            modules.restore()
            paths.restore()
    return Run(int(code), out.getvalue(), err.getvalue())
