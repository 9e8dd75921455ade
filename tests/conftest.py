"""What every test of this suite runs with, whatever machine it runs on.

* **The CPU contract.** A test measures on the CPU variants (host memory copies, gloo) unless it is marked
  ``@pytest.mark.gpu``: ``GPUCOMM_DEVICE=cpu`` is set for it, and so for every pytest run and process it
  starts, so that ``device=auto`` on a machine with GPUs does not turn a check of the CPU path into a GPU run
  (another device count, the ``h200`` baseline name, NCCL ranks sharing one GPU). A test that checks the
  device choice itself passes ``--gpucomm-device`` or hides the GPUs from its subprocess
  (:data:`NO_GPU_ENV`).
* **The plugin set.** The pytest runs a test starts load these plugins and no other that the machine has
  installed (``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` with ``PYTEST_PLUGINS``): a GPU machine's pytest-timeout,
  pytest-cov, anyio or jaxtyping plugins would change the output and the modules a run imports.  A test
  that needs pytest-html asks for it (:data:`HTML_PLUGINS`).
* **One terminal width.** The pytest runs a test starts print as on a terminal :data:`COLUMNS` wide, so wide
  that the plugin wraps none of its lines: a test matches a line whole, whatever terminal (or pytest-xdist
  worker, which sets ``COLUMNS`` to 80) runs the suite; a module's fixture runs its pytest with the same
  width (``tests/inprocess.py``, which holds :data:`COLUMNS`).  The tests of the plugin's fitting to a terminal
  (``tests/test_terminal_width.py``) set their own width.
* **Re-measures at once.** ``GPUCOMM_REMEASURE_AFTER=0``: a test's flagged case is measured again without the
  default wait of ``--gpu-remeasure-after`` (the tests of that wait set their own).
* **GPU tests** (``@pytest.mark.gpu``) keep the machine's device and are skipped, with the reason, where torch
  sees no GPU.
"""

from __future__ import annotations

import gc
import sys
from typing import Iterator

# Modules with compiled parts must be imported before pytester takes its sys.modules snapshot: pytester's
# in-process runs remove the modules imported during a run, and torch, numpy and scipy cannot be imported a
# second time in one process.  The gate's decision and store bring in numpy, scipy and jsonschema.
import torch

import pytest_gpucomm.gate.decision  # noqa: F401
import pytest_gpucomm.gate.store  # noqa: F401
import pytest

# Imported once here, as loading the plugin did until it stopped needing them (vocab.py holds the words it read
# from them): each in-process run that judges a baseline or names an engine would import them again, and drop them
# after (about 10 % more CPU in tests/test_gate_plugin.py)
import pytest_gpucomm.compare.tool_engine  # noqa: F401
import pytest_gpucomm.gate.cause  # noqa: F401
import pytest_gpucomm.gate.verdicts  # noqa: F401

from inprocess import COLUMNS, RUN_ENV

# What is imported by now (torch, numpy, scipy, the plugin) stays for the process's life: frozen, it is left out of
# every later full garbage collection, which would otherwise walk its objects again each time (the many in-process
# runs of a worker trigger dozens: about 7 of 69 CPU-s of tests/test_gate_plugin.py and tests/test_cli.py)
gc.freeze()

pytest_plugins = ["pytester"]

#: the plugins that the pytest runs started by the tests load, by module name (pytest before 9.2 reads
#: PYTEST_PLUGINS as module names only): ours, and xdist for the tests of -n.  A test of pytest-html adds
#: HTML_PLUGINS to its run's arguments.
TEST_RUN_PLUGINS = ("pytest_gpucomm.plugin", "xdist.plugin", "xdist.looponfail")
HTML_PLUGINS = ("-p", "pytest_metadata.plugin", "-p", "pytest_html.plugin")

#: what the tests' own gloo pools and zygotes add to ``os.environ`` (tests/test_ranks.py, proc_helpers.gloo_pool): the
#: terminal width that every test runs with (``_cpu_contract``).  A zygote forks only the workers of a pool whose
#: environment is its own; one made by a fixture of the module, where that width is not set yet, would otherwise leave a
#: pool started or restarted inside a test to start its workers as processes of their own, each importing torch again
POOL_ENV = {"COLUMNS": COLUMNS}

#: the environment of a subprocess that must see no GPU (a check of what happens on a machine without one)
NO_GPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}


def _gpu_count() -> int:
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver: no GPU to test on
        return 0


GPU_COUNT = _gpu_count()


def _set_contract(mp: pytest.MonkeyPatch) -> None:
    mp.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    mp.setenv("PYTEST_PLUGINS", ",".join(TEST_RUN_PLUGINS))
    mp.setenv("GPUCOMM_DEVICE", "cpu")
    for name, value in RUN_ENV.items():  # a flagged case measured again at once
        mp.setenv(name, value)


def pytest_sessionfinish() -> None:
    """The zygote that forks the ranks of the launched-mode tests' jobs (tests/launch_zygote.py) ends with the
    session of the process that started it: no process of the suite outlives it."""
    zygote = sys.modules.get("launch_zygote")
    if zygote is not None:
        zygote.stop()


@pytest.fixture(autouse=True, scope="session")
def _cpu_contract_of_fixtures() -> Iterator[None]:
    """The contract for the fixtures of a module or of the session as well: they are set up before a test's
    own fixtures (a module's recording job started on a GPU machine's device and plugins otherwise)."""
    with pytest.MonkeyPatch.context() as mp:
        _set_contract(mp)
        yield


@pytest.fixture(autouse=True)
def _cpu_contract(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    _set_contract(monkeypatch)
    monkeypatch.setenv("COLUMNS", COLUMNS)  # a test's runs (not the session's own output: its fixtures' runs
    # set it themselves, tests/inprocess.py)
    marker = request.node.get_closest_marker("gpu")
    if marker is None:
        return
    needed = int(marker.kwargs.get("count", 1))
    if GPU_COUNT < needed:
        pytest.skip(f"a GPU test: needs {needed} GPU(s) that torch can see, found {GPU_COUNT}")
    monkeypatch.delenv("GPUCOMM_DEVICE", raising=False)

