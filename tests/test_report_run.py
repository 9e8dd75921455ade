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


def _doc(records, **settings):
    from pytest_gpucomm.report.document import ReportDocument

    return ReportDocument.of_run(records, settings={"baseline": None, **settings})


def test_a_run_without_a_baseline_is_not_judged_and_says_how_to_record_one():
    from pytest_gpucomm.report.run import RECORD, judgement

    plain = [Record(f"t.py::test_copy[{i}]", _record(i, "ok").measurement) for i in range(3)]
    j = judgement(_doc(plain))
    assert (j.word, j.why, j.cases, j.judged) == ("not judged", "no baseline", 3, 0)
    assert j.text().startswith("not judged: no baseline: 3 cases measured, none judged; record one: ")
    assert RECORD in j.text() and "--gpu-baseline=NAME --gpu-baseline-save" in RECORD
    assert j.to_dict()["word"] == "not judged" and j.to_dict()["text"] == j.text()


def test_a_run_judged_on_fewer_than_half_its_cases_is_not_judged_and_one_failing_case_fails_it():
    from pytest_gpucomm.report.run import judgement

    loud = [_record(i, "not gated", spread_assumed="session") for i in range(3)] + [_record(3, "ok")]
    j = judgement(_doc(loud, baseline="h200"))
    assert j.word == "not judged" and j.why == "fewer than half the cases judged against baseline h200"
    assert j.text().startswith("not judged: fewer than half the cases judged against baseline h200: 4 cases measured, "
                               "1 judged; record runs on other boots or days")
    failing = loud[:3] + [Record("t.py::test_copy[3]", loud[3].measurement, status="REGRESSION",
                                 baseline={"status": "REGRESSION"})]
    assert judgement(_doc(failing, baseline="h200")).text() == "failed: 1 failing case of 4"
    judged = [_record(i, "ok") for i in range(3)] + [_record(3, "new")]
    assert judgement(_doc(judged, baseline="h200")).text() == "passed: 3 of 4 cases judged, none failing"


def test_the_json_report_says_first_whether_the_run_was_judged():
    doc = _doc([Record("t.py::test_copy[0]", _record(0, "ok").measurement)])
    data = doc.to_json()
    assert list(data)[:3] == ["format", "version", "verdict"] and data["verdict"]["word"] == "not judged"
    from pytest_gpucomm.report.document import ReportDocument

    assert ReportDocument.from_json(data) == doc  # derived: not kept as a key this version does not know
