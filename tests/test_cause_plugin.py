"""The cause test in a real session (issue 29): a copy made slower by an environment variable that the baseline
did not have fails as REGRESSION, and its verdict names the variable, found by measuring the case again in a new
process with it set back.

The copies are timed by a simulated clock (as tests/simulated_copies.py does, for verdicts a test can predict):
here in the test's own process by its conftest, and in the new processes the cause test starts by a
``sitecustomize`` module on their path.  Both read ``SIM_ENV_SLOW``: set to 1, every copy takes 1/0.7 times as
long.  The variable is added to the recorded environment with ``--gpucomm-env`` (it is no communication
variable), as a user would add theirs.
"""

from __future__ import annotations

import json

from inprocess import run_inprocess

SIMCLOCK = """
import os
import zlib

import numpy as np
from pytest_gpucomm.ops.timing import Plan


def fake_measure(op, settings, agree=None, prepare=None, clocks=None):
    src = op.pairs[0][0]
    size = src.numel() * src.element_size()
    rng = np.random.default_rng(1000 * int(os.environ.get("SIM_RUN", "0")) + size)
    slower = 1 / 0.7 if os.environ.get("SIM_ENV_SLOW") == "1" else 1.0
    t = (5e-6 + size / 2e9) * slower * np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.02, 50))
    return [float(x) for x in t], Plan(batch=1, samples=50, estimate_s=float(t[0]))
"""

CONFTEST = """
import pytest
import pytest_gpucomm.ops.copies as copies
from pytest_gpucomm import vocab
from simclock import fake_measure


@pytest.fixture(autouse=True)
def simulated_timing(monkeypatch):
    monkeypatch.setattr(copies, "measure", fake_measure)
    monkeypatch.setattr(vocab, "MAX_FRESH_REMEASURES", 0)  # the gate's re-measures here, still slow
"""

#: imported at the start of every Python process whose path holds this folder: the rank workers of the pools
SITECUSTOMIZE = """
import os
if os.environ.get("SIM_IN_WORKERS") == "1":
    import pytest_gpucomm.ops.copies as copies
    from simclock import fake_measure
    copies.measure = fake_measure
"""

TEST_FILE = """
from pytest_gpucomm import sizes

@sizes("1MiB", "4MiB", "16MiB")
def test_copy(gpu_pair, size, comm):
    comm.copy(gpu_pair, size)
"""

ARGS = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--gpucomm-device=cpu", "--gpucomm-min-time=0.01",
        "--gpucomm-env=SIM_ENV_SLOW", "--gpu-baseline=cpu"]


def _run(folder, *args, sim_run, slow=False, session=None):
    env = {"SIM_RUN": str(sim_run), "SIM_IN_WORKERS": "1"}
    if slow:
        env["SIM_ENV_SLOW"] = "1"
    if session:
        env["GPUCOMM_BASELINE_SESSION"] = session
    return run_inprocess(folder, ["test_c.py", *ARGS, *args], env=env, drop=("SIM_", "GPUCOMM_"))


def test_a_regression_caused_by_an_environment_variable_names_it_after_measuring_with_it_set_back(tmp_path):
    for name, text in (("simclock.py", SIMCLOCK), ("conftest.py", CONFTEST), ("sitecustomize.py", SITECUSTOMIZE),
                       ("test_c.py", TEST_FILE)):
        (tmp_path / name).write_text(text)
    for i in range(3):
        rec = _run(tmp_path, "--gpu-baseline-save", sim_run=i, session=f"sim-{i}")
        assert rec.returncode == 0, rec.stdout + rec.stderr
    report = tmp_path / "r.json"
    run = _run(tmp_path, "--gpucomm-cause=3", f"--gpucomm-json={report}", sim_run=7, slow=True)
    assert run.returncode == 1, run.stdout + run.stderr
    rows = [r for r in json.loads(report.read_text())["rows"] if r["status"] == "REGRESSION"]
    assert len(rows) >= 4 and all(r["baseline"].get("cause") for r in rows), rows
    tested = [r for r in rows if not r["baseline"]["cause"]["skipped"]]
    assert len(tested) == 3  # the budget
    for r in tested:
        cause = r["baseline"]["cause"]
        assert cause["cause"] == ["SIM_ENV_SLOW"] and len(cause["attempts"]) == 1
        assert cause["text"].startswith("cause: SIM_ENV_SLOW=1 (unset again: ")
        ratio = cause["attempts"][0]["ratio"]
        assert 0.95 <= ratio <= 1.05, ratio  # back to the baseline in the new process, without the variable
        assert cause["text"] in r["baseline"]["message"]
    # the cases whose own verdict failed were tested at their test; a case that only its level failed (its own
    # verdict could not gate it) at the session's end, the level's line in the summary
    assert any("level" not in r["baseline"]["cause"] for r in tested)
    assert any("level" in r["baseline"]["cause"] for r in tested)
    assert "gpucomm cause of the REGRESSION (case residual) copy, " in run.stdout
    assert "gpucomm: 1 more regression at the levels not tested for a cause: the session's 3 cause tests" in run.stdout
    for r in rows:
        if r["baseline"]["cause"]["skipped"]:
            assert "cause test not run: the session's 3 cause tests were used" in r["baseline"]["message"]
