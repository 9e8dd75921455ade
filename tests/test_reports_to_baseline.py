"""benchmarks/reports_to_baseline.py: a JSON report's first measurements added to a baseline file as one run each,
as a recording run saves them (how the H100's eighth and ninth boots, whose time went to A/A runs, joined
baselines/h100.json)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from pytest_gpucomm.gate.store import load_baseline, new_document, write_document

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "data" / "h100_boot10_aa2_report.json"


def _add(*args: str) -> int:
    """The script's ``main`` (run from its file: benchmarks/ is not a package)."""
    return runpy.run_path(str(ROOT / "benchmarks" / "reports_to_baseline.py"))["main"](list(args))


def test_a_reports_first_measurements_become_one_run_of_the_session_and_a_second_add_is_refused(tmp_path):
    target = tmp_path / "h100.json"
    write_document(target, new_document("h100"))
    assert _add(str(target), str(REPORT), "--session", "vm-boot9-aa-2026-12-07") == 0
    base = load_baseline(target)
    report = json.loads(REPORT.read_text())
    (run,) = base.runs
    assert run.session == "vm-boot9-aa-2026-12-07" and run.date == report["fingerprint"]["date"]
    assert len(base.cases) == len(report["rows"]) == 26
    row = next(r for r in report["rows"] if (r.get("baseline") or {}).get("remeasures"))  # the re-measured one
    (entry,) = [c for c in base.cases.values() if c.test_id == row["test"]]
    expected = [row["bytes_per_iter"] / s / 1e9 for s in row["samples_s"]]
    assert entry.runs[0].samples_gbps == pytest.approx(expected)  # the first run's samples, not the re-measure's
    with pytest.raises(SystemExit, match="is already there"):
        _add(str(target), str(REPORT), "--session", "again")


def test_a_report_without_rows_is_refused_naming_it(tmp_path):
    target = tmp_path / "h100.json"
    write_document(target, new_document("h100"))
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"fingerprint": {"date": "2026-12-07T00:00:00+00:00"}, "rows": []}))
    with pytest.raises(SystemExit, match=f"{empty}: no rows"):
        _add(str(target), str(empty), "--session", "s")
    assert json.loads(target.read_text())["runs"] == []  # the file left as it was


def test_a_report_that_is_not_json_and_a_target_that_is_not_a_baseline_are_refused_naming_them(tmp_path):
    target = tmp_path / "h100.json"
    write_document(target, new_document("h100"))
    before = target.read_bytes()
    bad = tmp_path / "cut.json"
    bad.write_text('{"rows": [')
    with pytest.raises(SystemExit, match=f"{bad}: .*cut short"):
        _add(str(target), str(bad), "--session", "s")
    assert target.read_bytes() == before
    not_a_baseline = tmp_path / "list.json"
    not_a_baseline.write_text("[]")
    assert _add(str(not_a_baseline), str(REPORT), "--session", "s") == 2
    assert not_a_baseline.read_text() == "[]"
