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

import io
import json
from types import SimpleNamespace

import pytest
from inprocess import run_inprocess

from pytest_gpucomm import cli
from pytest_gpucomm.cli.compare import FROM_RUN
from pytest_gpucomm.report.html_parts import esc

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


@pytest.fixture(scope="module")
def slowed(tmp_path_factory):
    """A baseline of 3 runs without the variable, then a run with it, its cause tests and its JSON report."""
    tmp_path = tmp_path_factory.mktemp("cause")
    for name, text in (("simclock.py", SIMCLOCK), ("conftest.py", CONFTEST), ("sitecustomize.py", SITECUSTOMIZE),
                       ("test_c.py", TEST_FILE)):
        (tmp_path / name).write_text(text)
    for i in range(3):
        rec = _run(tmp_path, "--gpu-baseline-save", sim_run=i, session=f"sim-{i}")
        assert rec.returncode == 0, rec.stdout + rec.stderr
    report = tmp_path / "r.json"
    run = _run(tmp_path, "--gpucomm-cause=3", f"--gpucomm-json={report}", sim_run=7, slow=True)
    return SimpleNamespace(dir=tmp_path, run=run, report=report, baseline=tmp_path / "baselines" / "cpu.json")


def test_a_regression_caused_by_an_environment_variable_names_it_after_measuring_with_it_set_back(slowed):
    run, report = slowed.run, slowed.report
    assert run.returncode == 1, run.stdout + run.stderr
    rows = [r for r in json.loads(report.read_text())["rows"] if r["status"] == "REGRESSION"]
    assert len(rows) >= 4 and all(r["baseline"].get("cause") for r in rows), rows
    tested = [r for r in rows if not r["baseline"]["cause"]["skipped"]]
    assert len(tested) == 3  # the budget
    for r in tested:
        cause = r["baseline"]["cause"]
        assert cause["cause"] == ["SIM_ENV_SLOW"] and len(cause["attempts"]) == 1
        assert cause["text"].startswith("cause: SIM_ENV_SLOW=1 (unset again: ")
        attempt = cause["attempts"][0]
        assert attempt["outcome"] == "back"  # back to the baseline in the new process, without the variable
        low, high = attempt["ci95"]
        assert low <= attempt["ratio"] <= high and high >= 1 - r["baseline"]["tolerance"]
        assert attempt["vs_slowed_ci95"][0] > 1  # shown faster than the slowed run
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


def _words(text):
    """``text`` with its runs of white space as one space: a line as it reads, however the command wrapped it."""
    return " ".join(text.split())


def _gpucomm(*argv):
    out = io.StringIO()
    code = cli.main([str(a) for a in argv], out=out)
    return code, out.getvalue()


def test_compare_show_and_html_print_the_cause_lines_the_live_run_saved(slowed, tmp_path):
    """Issue 45: ``gpucomm compare`` judged the report again and dropped the run's ``cause:`` lines; ``show``
    printed none."""
    rows = json.loads(slowed.report.read_text())["rows"]
    own = [r for r in rows if (r["baseline"].get("cause") or {}).get("text", "").startswith("cause: ")
           and "level" not in r["baseline"]["cause"]]
    levels = [r["baseline"]["cause"] for r in rows
              if "level" in (r["baseline"].get("cause") or {}) and not r["baseline"]["cause"]["skipped"]]
    assert own and levels
    out = tmp_path / "again.json"
    code, text = _gpucomm("compare", slowed.baseline, slowed.report, "--no-curves", "--json", out)
    assert code == 1, text
    for r in own:  # in the failing test's message, marked as the run's
        assert _words(f"FAILED {r['test']}:") in _words(text)
        assert _words(f"{r['baseline']['cause']['line']} {FROM_RUN}") in _words(text)
    for cause in levels:  # the summary's line of each level tested, as the live run printed it
        summary = next(line for line in slowed.run.stdout.splitlines() if f") {cause['level']}: " in line)
        assert _words(summary) in _words(text)
    again = {r["test"]: r["baseline"] for r in json.loads(out.read_text())["rows"]}
    for r in own:  # the written report keeps the run's cause in each verdict
        assert again[r["test"]]["cause"]["attempts"] == r["baseline"]["cause"]["attempts"]
        assert r["baseline"]["cause"]["line"] in again[r["test"]]["message"]
    code, shown = _gpucomm("show", slowed.report, "--no-curves")
    assert code == 0, shown
    for r in own:
        assert _words(f"gpucomm {r['test']}: {r['baseline']['cause']['line']}") in _words(shown)
    for cause in levels:
        assert _words(cause["text"][len("cause: "):]) in _words(shown)
    for report in (slowed.report, out):  # the run's page, and the page of compare's report
        page = tmp_path / f"{report.stem}.html"
        assert _gpucomm("html", report, "-o", page, "--no-plots")[0] == 0
        for r in own:
            assert esc(r["baseline"]["cause"]["line"]) in page.read_text()


# -- in a job across nodes (issue 46, item 1): which variables a case's cause test sets back, and where -----------

def _job_fp(*envs):
    return {"env": dict(envs[0]), "nodes": {str(k): {"host": f"vm-{k}", "env": dict(e)} for k, e in enumerate(envs)}}


def _job_case(info):
    """(gate, record, what each re-measure set back) of a case measured with ``info`` (a node's copy:
    ``{"node": N}``; a collective over the world: ``{}``) in a job of 2 nodes where NCCL_ALGO=Ring was set on
    node 1 and OMP_NUM_THREADS=1 on node 0 since the baseline.  Each re-measure is back at 1x."""
    from pytest_gpucomm.measurement import Record

    then = _job_fp({"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "2"})
    gate = SimpleNamespace(baseline=SimpleNamespace(), baseline_fingerprint=then, case_model=lambda key: None,
                           fingerprint=_job_fp({"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "Ring"}))
    asked = []

    def with_env(env):
        asked.append(dict(env))
        return SimpleNamespace(samples_gbps=[10.0 * (1 + 0.001 * (i % 3)) for i in range(50)])

    record = Record(nodeid="t.py::test_x", measurement=SimpleNamespace(info=info), with_env=with_env,
                    baseline={"status": "REGRESSION", "baseline_gbps": 10.0, "ratio": 0.6, "case": "k",
                              "tolerance": 0.05, "prediction_sd": 0.01, "message": "REGRESSION: ..."})
    return gate, record, asked


def _causes():
    from pytest_gpucomm.plugin.cause import CauseTests

    return CauseTests(cause_cases=1, baseline_save=False, tolerance=0.05)


def _explained(info):
    """The cause test of :func:`_job_case`'s case: (the variables each re-measure set back, the verdict)."""
    gate, record, asked = _job_case(info)
    verdict = dict(record.baseline or {})
    _causes().explain(gate, record, verdict)
    return asked, verdict
def test_a_nodes_copy_is_tested_on_that_nodes_variables_alone_and_its_line_names_the_node():
    asked, verdict = _explained({"node": 1, "host": "vm-1"})
    assert asked == [{"NCCL_ALGO": None}]  # node 0's OMP_NUM_THREADS is no cause of node 1's copy
    assert verdict["cause"]["line"].startswith("cause (node 1, vm-1): NCCL_ALGO=Ring (unset again: ")
    assert verdict["message"].endswith(verdict["cause"]["line"])


def test_a_job_wide_case_is_tested_on_every_nodes_variables_each_named_with_its_node():
    asked, verdict = _explained({})
    assert asked == [{"NCCL_ALGO": None}]  # the libraries' own first; back at once
    assert verdict["cause"]["change_nodes"] == [{"node": 1, "host": "vm-1", "peers": False},
                                                {"node": 0, "host": "vm-0", "peers": False}]
    assert verdict["cause"]["line"].startswith("cause (node 1, vm-1): NCCL_ALGO=Ring (unset again: ")


def test_a_failing_level_tested_on_a_nodes_copy_names_the_node_in_its_summary_line_and_in_the_cases_message():
    gate, record, asked = _job_case({"node": 1, "host": "vm-1"})
    level = SimpleNamespace(level="case", keys=["k"], level_name="case residual", name="copy, 1 MiB")
    lines = _causes().explain_levels(gate, [record], SimpleNamespace(failed=[level]))
    assert asked == [{"NCCL_ALGO": None}]
    assert len(lines) == 1 and lines[0].startswith(
        "gpucomm cause of the REGRESSION (case residual) copy, 1 MiB (node 1, vm-1): NCCL_ALGO=Ring (unset again: ")
    message = (record.baseline or {})["message"]
    assert message.endswith("(the case residual copy, 1 MiB, tested on t.py::test_x, node 1)"), message
