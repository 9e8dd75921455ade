"""A copy sweep timed by a simulated clock, for the tests of the gpucomm command and of the plugin's outputs
(tests/test_cli.py, tests/test_plugin_outputs.py).  Imported by module name (tests/ is on sys.path).

Real CPU timings on a shared 2-core machine swing by tens of percent between runs, so a verdict of a real
run is not reproducible; these tests need verdicts they can predict (one case slowed on purpose is a
REGRESSION, the others are not).  ``CONFTEST`` replaces the copies' timing engine, as
tests/test_gate_plugin.py does, with a latency-bandwidth curve (time = ``LATENCY_S`` + size / ``BYTES_PER_S``,
so a sweep has a latency floor and a rising curve) and the noise the gate is designed for (3 % within a
run, 1 % between runs, a few outliers), seeded by ``SIM_RUN`` and the test id.  ``SIM_SLOW_CASE`` (a part
of a test id) and ``SIM_SLOWER`` (a factor on the time) slow the matching cases down, and with
``SIM_SLOW_FOR`` only for that many seconds after the run's first measurement (a slow state that ends).  The
gate's re-measures run in the test's process (``MAX_FRESH_REMEASURES`` 0), where the simulated clock applies;
with ``SIM_FRESH_HERE`` they count as fresh (as a copy's in a new process does) while still measured here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence

from inprocess import Run, run_inprocess

CONFTEST = """
import os
import time
import zlib

import numpy as np
import pytest
import pytest_gpucomm.ops.copies as copies
from pytest_gpucomm import vocab
from pytest_gpucomm.ops.timing import Plan

LATENCY_S, BYTES_PER_S = 5e-6, 2e9
FIRST = []  # when the run measured first (SIM_SLOW_FOR counts from it)


@pytest.fixture(autouse=True)
def simulated_timing(monkeypatch, request):
    run = int(os.environ.get("SIM_RUN", "0"))
    rng = np.random.default_rng(1000 * run + zlib.crc32(request.node.nodeid.encode()))
    offset = rng.normal(0, 0.01)
    slow_case = os.environ.get("SIM_SLOW_CASE")
    slower = float(os.environ.get("SIM_SLOWER", "1")) if slow_case and slow_case in request.node.nodeid else 1.0
    slow_for = float(os.environ.get("SIM_SLOW_FOR", "inf"))

    def fake_measure(op, settings, agree=None, prepare=None, clocks=None):
        src = op.pairs[0][0]
        size = src.numel() * src.element_size()
        FIRST[:] = FIRST or [time.monotonic()]
        now_slower = slower if time.monotonic() - FIRST[0] < slow_for else 1.0
        t = (LATENCY_S + size / BYTES_PER_S) * now_slower * np.exp(offset + rng.normal(0, 0.03, 50))
        t[rng.random(50) < 0.03] *= 1.4
        return [float(x) for x in t], Plan(batch=1, samples=50, estimate_s=float(t[0]))

    monkeypatch.setattr(copies, "measure", fake_measure)
    if os.environ.get("SIM_FRESH_HERE"):
        from pytest_gpucomm.plugin.remeasures import Remeasures

        monkeypatch.setattr(Remeasures, "copy_in_new_process",
                            lambda self, spec, label="", env=None: copies.measure_spec(
                                spec, self.timing(), copies.BufferPool()))
    else:
        monkeypatch.setattr(vocab, "MAX_FRESH_REMEASURES", 0)
"""

#: three sizes per direction: two sweeps (cpu:0->cpu:1 and back) of three points, six cases
TEST_FILE = """
from pytest_gpucomm import sizes

@sizes("4KiB", "16KiB", "64KiB")
def test_copy(gpu_pair, size, comm):
    comm.copy(gpu_pair, size)
"""

#: the case the slowed runs slow down (a part of its test id), and by how much: 30 % less bandwidth, far
#: beyond the 5 % tolerance and the simulated noise, so it is a REGRESSION in every run
SLOW_CASE = "64KiB-0->1"
SLOWER = 1 / 0.7

FAST = ["-p", "no:cacheprovider", "-p", "no:randomly", "--gpucomm-device=cpu", "--gpucomm-min-time=0.01"]


def write_files(folder: Path) -> None:
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_sim.py").write_text(TEST_FILE)


def run_pytest(folder: Path, *args: str, sim_run: int, session: Optional[str] = None, slow: bool = False,
               extra_env: Optional[Mapping[str, str]] = None) -> Run:
    """One pytest run of the simulated sweep in ``folder``, in this process (:func:`inprocess.run_inprocess`),
    without the SIM_ and GPUCOMM_ variables of the tests' own environment."""
    env = {"SIM_RUN": str(sim_run)}
    if session:
        env["GPUCOMM_BASELINE_SESSION"] = session
    if slow:
        env["SIM_SLOW_CASE"], env["SIM_SLOWER"] = SLOW_CASE, repr(SLOWER)
    env.update(extra_env or {})
    return run_inprocess(folder, ["test_sim.py", "-q", *FAST, *args], env=env, drop=("SIM_", "GPUCOMM_"))


def record_baseline(folder: Path, runs: Sequence[int] = (0, 1, 2), name: str = "cpu") -> Path:
    """Save ``runs`` into the baseline ``name``, each run a session of its own (as runs on other boots or
    days): the gate then gates the cases rather than assuming the spread between sessions."""
    for i in runs:
        proc = run_pytest(folder, f"--gpu-baseline={name}", "--gpu-baseline-save", sim_run=i, session=f"sim-{i}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder / "baselines" / f"{name}.json"
