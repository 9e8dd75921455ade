"""The corpus spread prior (gate/prior.py, issue 43): fitted across machines, trusted from two, read safely, used
for the one-session cases of hardware no file covers, and checked leave-one-machine-out."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pytest_gpucomm.gate.calibration import Case
from pytest_gpucomm.gate.calibration_corpus import leave_one_machine_out, one_session
from pytest_gpucomm.gate.decision import RunLocation
from pytest_gpucomm.gate.levels import member
from pytest_gpucomm.gate.prior import (MIN_MACHINES, PRIOR_FILE, PriorError, corpus_of_files, fit_corpus, load_prior,
                                       prior_path)

ROOT = Path(__file__).resolve().parents[1]


def _machine(name: str, *, seed: int, session_sd: float, run_sd: float, sessions: int = 3, runs: int = 3,
             kinds: tuple[str, ...] = ("h2d",)) -> tuple[list[Case], dict[str, int]]:
    """A simulated machine: host<->device copies 4 KiB-1 GiB, each case's runs drawn around its centre with the
    given spreads between sessions and between runs (log bandwidth)."""
    rng = np.random.default_rng(seed)
    session = {f"{name}-s{s}-r{r}": s for s in range(sessions) for r in range(runs)}
    cases = []
    for op in kinds:
        for size in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 1 << 30):
            test = f"suites/test_copies.py::test_{op}[{size}-gpu0]"
            key = f"{test}|{op}|{size}B|-|ws1"
            offs = rng.normal(0.0, session_sd, sessions)
            locs = {r: RunLocation(3.0 + offs[s] + float(rng.normal(0.0, run_sd)), 1e-6, 100, 0.003)
                    for r, s in session.items()}
            kind = "collective" if op == "all_reduce" else "host"
            cases.append(Case(key, "collective" if kind == "collective" else "copy", "", locs,
                              member(key, test_id=test, op=op, kind=kind, size_bytes=size, dtype=None, world_size=1,
                                     devices=["host", "cuda:0"])))
    return cases, session


def test_a_class_is_trusted_only_where_two_machines_hold_runs_of_it_in_several_sessions():
    one = fit_corpus({"a": _machine("a", seed=1, session_sd=0.004, run_sd=0.003)})
    assert MIN_MACHINES == 2 and one.classes and not any(p.trusted for p in one.classes.values())
    assert one.trusted("host<->device copies <= 1 MiB") is None
    two = fit_corpus({"a": _machine("a", seed=1, session_sd=0.004, run_sd=0.003),
                      "b": _machine("b", seed=2, session_sd=0.004, run_sd=0.003)})
    p = two.trusted("host<->device copies > 1 MiB")
    assert p is not None and p.machines == ("a", "b") and p.cases == 4
    assert 0.003 <= math.sqrt(p.session_s2) < 0.02 and p.session_df > 0 and p.run_df > 0
    assert "not trusted" in one.classes["host<->device copies > 1 MiB"].describe()


def test_machines_that_disagree_give_the_prior_few_degrees_of_freedom():
    alike = fit_corpus({n: _machine(n, seed=i, session_sd=0.01, run_sd=0.005, sessions=6)
                        for i, n in enumerate("abc")})
    apart = fit_corpus({"a": _machine("a", seed=1, session_sd=0.002, run_sd=0.005, sessions=6),
                        "b": _machine("b", seed=2, session_sd=0.05, run_sd=0.005, sessions=6)})
    klass = "host<->device copies > 1 MiB"
    assert apart.classes[klass].session_df < alike.classes[klass].session_df


def test_the_shipped_prior_is_the_fit_of_the_shipped_baselines():
    shipped = load_prior()
    fitted = fit_corpus(corpus_of_files([ROOT / "baselines" / "h200.json", ROOT / "baselines" / "h100.json"]))
    assert shipped.machines == fitted.machines and len(shipped.machines) == 3
    assert set(shipped.classes) == set(fitted.classes)
    for klass, p in shipped.classes.items():
        q = fitted.classes[klass]
        assert (p.trusted, p.machines, p.cases) == (q.trusted, q.machines, q.cases), klass
        for a, b in ((p.session_s2, q.session_s2), (p.run_s2, q.run_s2), (p.residual_s2, q.residual_s2),
                     (p.session_df, q.session_df), (p.run_df, q.run_df)):
            assert a == pytest.approx(b, rel=1e-6) or (math.isinf(a) and math.isinf(b)), klass
    # the host<->device classes are on 3 machines (two H200 shapes, one H100); the others on one: not trusted
    assert {k for k, p in shipped.classes.items() if p.trusted} == {"host<->device copies <= 1 MiB",
                                                                     "host<->device copies > 1 MiB"}


@pytest.mark.parametrize("content, expected", [
    (None, "spread prior file does not exist"),
    ("{not json", "is not valid JSON"),
    ('{"schema": "pytest-gpucomm-baseline"}', "its schema is 'pytest-gpucomm-baseline'"),
    ("NEGATIVE", "session_s2 must be a number >= 0, got -1"),
    ("NO_CLASSES", "missing field 'classes'"),
], ids=["missing", "not-json", "other-schema", "negative-variance", "missing-field"])
def test_a_missing_or_damaged_prior_is_an_error_naming_the_file(tmp_path, content, expected):
    path = tmp_path / "prior.json"
    doc = json.loads(PRIOR_FILE.read_text())
    if content == "NEGATIVE":
        next(iter(doc["classes"].values()))["session_s2"] = -1
        content = json.dumps(doc)
    elif content == "NO_CLASSES":
        del doc["classes"]
        content = json.dumps(doc)
    if content is not None:
        path.write_text(content)
    with pytest.raises(PriorError, match=expected) as e:
        load_prior(path)
    assert str(path) in str(e.value)


def test_the_prior_option_reads_a_path_none_or_the_shipped_file():
    assert prior_path(None) == PRIOR_FILE and prior_path("none") is None and prior_path("NONE") is None
    assert prior_path("~/p.json") == Path("~/p.json").expanduser()


def test_a_gate_that_needs_the_prior_stops_on_a_damaged_one_naming_it(tmp_path):
    from pytest_gpucomm.gate import Gate, GateSettings
    from pytest_gpucomm.gate.schema import BaselineError

    bad = tmp_path / "prior.json"
    bad.write_text("[]")
    g = Gate(GateSettings(spec="x", prior_path=bad))
    with pytest.raises(BaselineError, match=rf"the spread prior {bad} is not a valid spread prior"):
        g.use_corpus(bad)


def test_a_one_session_baseline_of_a_machine_the_prior_never_saw_gates_its_steady_cases_without_false_alarms():
    # three machines alike: two make the prior, the third's sessions are each a one-session baseline in turn
    machines = {n: _machine(n, seed=i, session_sd=0.002, run_sd=0.002, sessions=3, runs=3) for i, n in enumerate("abc")}
    prior = fit_corpus({n: m for n, m in machines.items() if n != "c"})
    r = one_session(*machines["c"], (0.10,), corpus=prior)
    assert r["false_alarm_suites"] == 0 and r["suites"] == 18
    assert r["copy_gated_share"] > 0.5 and r["uniform_detection"]["10%"] == 1.0
    none = one_session(*machines["c"], (0.10,), corpus=None)
    assert none["false_alarm_suites"] == 0 and none["copy_gated_share"] == 0.0  # assumed spreads judge nothing


def test_leave_one_machine_out_fits_each_machines_prior_without_it():
    machines = {n: _machine(n, seed=i, session_sd=0.002, run_sd=0.002, sessions=2, runs=2) for i, n in enumerate("abc")}
    r = leave_one_machine_out(machines, (0.10,))
    assert set(r) == {"a", "b", "c"}
    for name, x in r.items():
        assert name not in x["prior"]["machines"] and len(x["prior"]["machines"]) == 2
        assert x["with_prior"]["false_alarm_suites"] == 0


def test_the_calibration_command_checks_the_corpus_leave_one_machine_out(tmp_path, capsys):
    from pytest_gpucomm.gate.calibration import main

    assert main(["--corpus", str(ROOT / "baselines" / "h100.json"), "--per-case-every", "0"]) == 2
    assert "1 GPU machine(s): leaving one out needs two or more" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["--corpus", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
