"""How much of a run the gate could judge (report.run.Coverage, issue 43): counted from the verdicts, said first
and last where fewer than half were judged."""

from __future__ import annotations

from pytest_gpucomm.measurement import Measurement, Record
from pytest_gpucomm.report.run import coverage


def _record(i: int, status: str, **baseline: object) -> Record:
    m = Measurement(op="copy", size_bytes=4096 << i, samples_s=[1e-6, 2e-6, 3e-6], devices=("cpu:0", "cpu:1"))
    return Record(f"t.py::test_copy[{i}]", m, baseline={"status": status, **baseline})


def test_a_case_is_judged_when_it_is_gated_or_the_evidence_decided_it():
    records = [_record(0, "ok"), _record(1, "REGRESSION"), _record(2, "improved"), _record(3, "TAIL"),
               _record(4, "not gated", spread_assumed="session"), _record(5, "not gated", spread_assumed=""),
               _record(6, "new")]
    cov = coverage(records)
    assert cov is not None and (cov.judged, cov.total, cov.assumed, cov.wide, cov.new) == (4, 7, 1, 1, 1)
    assert not cov.loud and cov.headline("h200").startswith("gpucomm gate: judged 4 of 7 cases against baseline h200 (")
    assert coverage([]) is None and coverage([Record("t.py::x", records[0].measurement)]) is None  # no verdict


def test_fewer_than_half_judged_is_loud_and_says_what_to_record():
    records = [_record(i, "not gated", spread_assumed="session and run") for i in range(3)] + [_record(3, "ok")]
    cov = coverage(records)
    assert cov is not None and cov.loud and cov.share == 0.25
    head = cov.headline("auto")
    assert head.startswith("gpucomm gate: NOT JUDGED: only 1 of 4 cases could be judged against baseline auto (3 not "
                           "gated, their spread between sessions assumed")
    assert "--gpu-baseline=auto --gpu-baseline-save" in head and "--gpu-baseline=auto --gpu-baseline-save" in cov.fix(
        "auto")
    assert cov.last_line("auto").startswith("gpucomm: NOT JUDGED: 1 of 4 cases judged against baseline auto; record")
    assert cov.to_dict() == {"judged": 1, "cases": 4, "share": 0.25, "not_gated_assumed": 3, "not_gated_wide": 0,
                             "new": 0, "fewer_than_half": True}
