"""Tests of the pytest_gpucomm.gate package: its cheap import, its public names, and Gate's verdicts."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import pytest_gpucomm
from pytest_gpucomm import gate
from pytest_gpucomm.gate import CaseRecord, Gate, GateSettings, GateUsageError, Verdict, save_run
from pytest_gpucomm.gate.run_levels import judge_levels
from pytest_gpucomm.measurement import Remeasure
from pytest_gpucomm.vocab import Status

PACKAGE_ROOT = Path(pytest_gpucomm.__file__).resolve().parent.parent
HEAVY = ("numpy", "scipy", "jsonschema", "filelock", "torch")


def test_importing_the_gate_and_building_one_imports_nothing_heavy():
    code = (
        "import json, sys\n"
        "from pytest_gpucomm.gate import Gate, GateSettings\n"
        "g = Gate(GateSettings(spec='h200', save=True, search_dirs=('baselines',)))\n"
        "off = Gate(GateSettings(spec=None))\n"
        "assert (g.active, g.loaded, off.active, off.loaded) == (True, False, False, False)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_every_public_name_resolves_and_an_unknown_one_is_an_attribute_error():
    for name in gate.__all__:
        assert getattr(gate, name) is not None, name
    assert set(gate.__all__) <= set(dir(gate))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gate.nope  # noqa: B018


# --- Gate.judge with a baseline file ----------------------------------------------------------------


@dataclass
class FakeMeasurement:
    """What Gate.judge reads of a measurement."""

    samples_gbps: list[float]
    op: str = "copy"
    size_bytes: int = 4096
    dtype: str | None = None
    world_size: int = 1
    where: str = "cpu:0->cpu:1"


NODEID = "test_f.py::test_copy[0->1]"


def _record(samples: list[float]) -> CaseRecord:
    return CaseRecord(test_id=NODEID, op="copy", size_bytes=4096, world_size=1, samples_gbps=samples)


def _loaded_gate(tmp_path: Path, runs: list[list[float]], **settings) -> Gate:
    path = tmp_path / "cpu.json"
    for i, samples in enumerate(runs):
        r = _record(samples)
        save_run(path, name="cpu", run_id=f"r{i}", date="2026-01-01T00:00:00+00:00", fingerprint={},
                 cases={r.key: r})
    g = Gate(GateSettings(spec=str(path), **settings))
    g.load(None, {}, {NODEID})
    return g


def _steady(level: float, n: int = 40) -> list[float]:
    return [level * (1 + 0.001 * ((i * 7) % 11 - 5)) for i in range(n)]


#: four baseline runs (sessions of their own: saved without a session label) 0.2 % apart: a gated case
STEADY_RUNS = [_steady(100.0 * f) for f in (0.998, 1.0, 1.002, 1.0)]


def test_judge_maps_the_decision_to_status_and_failed_follows_the_status(tmp_path):
    g = _loaded_gate(tmp_path, [_steady(100.0)] * 3)
    ok = g.judge(NODEID, FakeMeasurement(_steady(100.0)), None, None)
    assert ok.status is Status.OK and not ok.failed
    slow = g.judge(NODEID, FakeMeasurement(_steady(50.0)), None, None)
    assert slow.status is Status.REGRESSION and slow.failed
    assert slow.message.startswith("REGRESSION: copy on cpu:0->cpu:1 at 4 KiB")
    assert json.loads(json.dumps(slow.to_dict()))["status"] == "REGRESSION"
    fast = g.judge(NODEID, FakeMeasurement(_steady(200.0)), None, None)
    assert fast.status is Status.IMPROVED and not fast.failed


def test_the_baseline_is_fitted_once_into_one_object_that_every_verdict_and_the_levels_read(tmp_path):
    from pytest_gpucomm.gate.baseline_fit import FittedBaseline, fit_baseline

    g = _loaded_gate(tmp_path, STEADY_RUNS)
    fitted = g.fitted()
    assert isinstance(fitted, FittedBaseline) and fitted.baseline is g.baseline and fitted.path == g.path
    expected = fit_baseline(g.baseline, g.path)
    # (repr: a model may hold a NaN, which equals nothing)
    figures = (fitted.models, fitted.locs, fitted.commons)
    assert repr(figures) == repr((expected.models, expected.locs, expected.commons))
    key = next(iter(fitted.models))
    slow = g.judge(NODEID, FakeMeasurement(_steady(50.0)), None, None)
    assert judge_levels(g.fitted(), [slow.to_dict()], g.settings) is not None
    assert g.fitted() is fitted  # the verdicts and the levels read the one fit
    assert g.case_model(key) is fitted.models[key] and g.commons() == fitted.commons
    g.use_spreads_of(g.baseline, "itself")  # another source of the spreads: fitted again, once
    again = g.fitted()
    assert again is not fitted and again.spread_source is g.baseline and g.fitted() is again


def test_a_flagged_case_is_measured_again_and_the_runs_are_pooled(tmp_path):
    g = _loaded_gate(tmp_path, STEADY_RUNS, max_remeasures=2)
    calls = []

    def again() -> Remeasure:
        calls.append(1)
        return Remeasure(FakeMeasurement(_steady(100.0)), True, "in a new process")  # type: ignore[arg-type]

    v = g.judge(NODEID, FakeMeasurement(_steady(90.0)), None, again)  # a one-off glitch, then normal runs
    # not a regression; its runs of today 10 % apart, this run could not have caught a 10 % drop: not gated
    assert v.status is Status.NOT_GATED and v.remeasured == len(calls) == 2
    assert v.details["spread_floor"] == "runs_now" and v.details["runs_now_var"] > 0
    d = v.to_dict()
    assert d["runs_pooled"] == 3 and d["group"] == "copy"
    assert d["log_ratio"] == pytest.approx(math.log(0.90) / 3, abs=2e-3)  # the pooled ratio, not the first run's
    assert [a["median_gbps"] for a in d["remeasures"]] == [pytest.approx(100.0, rel=1e-3)] * 2
    # every figure printed as units.format_gbps prints it: 90.00, 100.0 (issue 45, item 1)
    assert ("first run 90.00 GB/s (0.9x), measured again: 100.0 GB/s (1x) in a new process; 100.0 GB/s (1x) in a "
            "new process" in v.message)
    # re-measures back at the baseline's speed say what that means for the verdict (issue 45, item 1)
    assert ("the first run's drop did not repeat: all 2 re-measures came back at 1x, 1x, nearer the baseline than "
            "the first run (0.9x); with every run pooled the drop is not shown beyond the tolerance: not a "
            "regression" in v.message)
    slow = g.judge(NODEID, FakeMeasurement(_steady(50.0)), None,
                   lambda: Remeasure(FakeMeasurement(_steady(50.0)), True, "in a new process"))  # type: ignore[arg-type]
    assert slow.status is Status.REGRESSION and slow.remeasured == 1  # measured once more, then decided
    steady = g.judge(NODEID, FakeMeasurement(_steady(100.0)), None, again)
    assert steady.remeasured == 0 and len(calls) == 2  # only a flagged first run is measured again


def test_a_verdict_dict_has_the_decisions_details_and_no_p_value(tmp_path):
    g = _loaded_gate(tmp_path, STEADY_RUNS)
    d = json.loads(json.dumps(g.judge(NODEID, FakeMeasurement(_steady(100.0)), None, None).to_dict()))
    assert "p_value" not in d and d["remeasured"] == 0 and d["status"] == "ok"
    for key in ("alpha", "tolerance", "upper_bound", "detectable_drop", "gated", "runs_pooled", "prediction_sd",
                "baseline_runs", "baseline_sessions", "group", "log_ratio", "remeasures"):
        assert key in d, key
    assert d["baseline_runs"] == 4 and d["baseline_sessions"] == 4 and d["gated"] and d["remeasures"] == []


def _loaded_gate_of_cases(tmp_path: Path, n_cases: int, runs: list[list[float]], **settings) -> tuple[Gate, list[str]]:
    """A gate whose baseline has ``n_cases`` copy cases, each with the same ``runs``."""
    path = tmp_path / "cpu.json"
    nodeids = [f"test_f.py::test_copy[{i}]" for i in range(n_cases)]
    for i, samples in enumerate(runs):
        recs = [CaseRecord(test_id=n, op="copy", size_bytes=4096, world_size=1, samples_gbps=samples) for n in nodeids]
        save_run(path, name="cpu", run_id=f"r{i}", date="2026-01-01T00:00:00+00:00", fingerprint={},
                 cases={r.key: r for r in recs})
    g = Gate(GateSettings(spec=str(path), **settings))
    g.load(None, {}, set(nodeids))
    return g, nodeids


def test_the_class_offset_judges_the_pooled_ratio_so_re_measured_glitches_do_not_fail_the_session(tmp_path):
    g, nodeids = _loaded_gate_of_cases(tmp_path, 6, STEADY_RUNS, max_remeasures=2)
    assert set(g.commons()) == {"copy"} and g.commons()["copy"]["runs"] == 4

    def again(level: float) -> Remeasure:
        return Remeasure(FakeMeasurement(_steady(level)), True, "in a new process")  # type: ignore[arg-type]

    # every case: a first run 10 % slow, then two normal re-measures
    glitches = [g.judge(n, FakeMeasurement(_steady(90.0)), None, lambda: again(100.0)) for n in nodeids]
    assert all(v.status is Status.NOT_GATED and v.remeasured == 2 for v in glitches)  # runs 10 % apart: not gated
    levels = judge_levels(g.fitted(), [v.to_dict() for v in glitches], g.settings)
    sh, steady = levels.classes  # a small class: its median, then its steady offset (gate.levels.STEADY_NAME)
    assert sh.name == "copies between GPUs <= 1 MiB" and len(sh.keys) == 6 and not levels.failed
    assert steady.name == "copies between GPUs <= 1 MiB, weighted by steadiness" and steady.keys == sh.keys
    assert sh.ratio == pytest.approx(0.90 ** (1 / 3), rel=2e-3)  # the pooled ratio, not the first run's 0.90
    # the same six cases slow in every run: the class offset fails the session, and covers every case
    slow = [g.judge(n, FakeMeasurement(_steady(90.0)), None, lambda: again(90.0)) for n in nodeids]
    levels = judge_levels(g.fitted(), [v.to_dict() for v in slow], g.settings)
    sh, steady = levels.classes
    assert sh.failed and sh.ratio == pytest.approx(0.90, rel=2e-3) and levels.failed == [sh, steady]
    assert set(levels.failed_keys()) == {v.details["case"] for v in slow}


def test_a_case_whose_baseline_runs_differ_widely_is_not_gated_or_fails_as_NOT_GATED_when_strict(tmp_path):
    runs = [_steady(100.0 * f) for f in (0.85, 1.0, 1.15)]
    v = _loaded_gate(tmp_path, runs).judge(NODEID, FakeMeasurement(_steady(100.0)), None, None)
    assert v.status is Status.NOT_GATED and not v.failed and not v.details["gated"]
    assert v.details["detectable_drop"] > 0.10 and "record more baseline runs" in v.message
    v = _loaded_gate(tmp_path, runs, strict=True).judge(NODEID, FakeMeasurement(_steady(100.0)), None, None)
    assert v.status is Status.NOT_GATED_STRICT and v.failed
    assert v.message.startswith("NOT GATED (--gpu-baseline-strict): copy on cpu:0->cpu:1 at 4 KiB")


def test_a_case_missing_from_the_baseline_is_new_or_fails_as_NEW_when_strict(tmp_path):
    other = "test_f.py::test_other"
    v = _loaded_gate(tmp_path, [_steady(100.0)]).judge(other, FakeMeasurement(_steady(1.0)), None, None)
    assert v.status is Status.NEW and not v.failed
    v = _loaded_gate(tmp_path, [_steady(100.0)], strict=True).judge(other, FakeMeasurement(_steady(1.0)), None, None)
    assert v.status is Status.NEW_STRICT and v.failed and "no entry for test_f.py::test_other" in v.message


def test_a_floor_only_case_is_floor_ok_or_FLOOR(tmp_path):
    path = tmp_path / "tiny.json"
    r = _record([1.0])
    doc = gate.new_document("tiny")
    doc["source"] = "published"
    doc["cases"][r.key] = {"test_id": NODEID, "op": "copy", "size_bytes": 4096, "world_size": 1, "runs": [],
                           "floor_gbps": 44.0}
    gate.write_document(path, doc)
    g = Gate(GateSettings(spec=str(path)))
    g.load(None, {}, {NODEID})
    assert g.n_comparisons == 1  # floor-only cases spend no alpha (and there is always at least one)
    above = g.judge(NODEID, FakeMeasurement([45.0, 46.0, 47.0]), None, None)
    assert above.status is Status.FLOOR_OK and not above.failed
    below = g.judge(NODEID, FakeMeasurement([40.0, 41.0, 42.0]), None, None)
    assert below.status is Status.FLOOR and below.failed and "below the published floor" in below.message
    near = g.judge(NODEID, FakeMeasurement([42.0, 42.5, 43.0]), None, None)  # 3.4 % below: within 5 %
    assert near.status is Status.FLOOR_OK and "-3.4% from the published floor 44 GB/s" in near.message
    again = g.judge(NODEID, FakeMeasurement([40.0]), None,
                    lambda: Remeasure(FakeMeasurement([48.0, 48.0, 48.0]), True, "in a new process"))  # type: ignore[arg-type]
    assert again.status is Status.FLOOR_OK and again.remeasured == 1 and again.details["remeasures"][0]["fresh"]


def test_a_verdict_takes_a_status_word_and_refuses_an_unknown_one():
    assert Verdict("not gated").status is Status.NOT_GATED
    with pytest.raises(ValueError):
        Verdict("noisy")  # the old word is gone
    with pytest.raises(ValueError):
        Verdict("fine")


def test_loading_a_missing_baseline_name_is_a_usage_error(tmp_path):
    g = Gate(GateSettings(spec="h200", search_dirs=(tmp_path,)))
    with pytest.raises(GateUsageError, match="--gpu-baseline=h200: no baseline named 'h200'"):
        g.load(None, {}, set())  # the plugin raises it as a pytest usage error (test_gate_plugin)
    assert not g.loaded


def test_every_gate_saves_under_a_run_id_of_its_own():
    settings = GateSettings(spec="cpu", save=True, search_dirs=(), max_runs=5, tolerance=0.05, alpha=0.01,
                            strict=False)
    assert Gate(settings).run_id != Gate(settings).run_id
