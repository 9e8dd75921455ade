"""The baseline the views draw (pytest_gpucomm.report.drawn, issue 47): the runs of the report's machine shape
only, by the gate's rule, and what the report stores of the baseline that judged it, so that a later page
draws what the run saw.  On the shipped data: baselines/h200.json (1-GPU and 2-GPU runs) and the README's
showcase report benchmarks/data/h200_1gpu_copies_slowed_report.json (one H200)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from pytest_gpucomm import cli
from pytest_gpucomm.report.document import ReportDocument
from pytest_gpucomm.report.drawn import DRAWN_KEY, drawn_document, fitted_reference, stored_figures
from pytest_gpucomm.report.saved import load_reference

ROOT = Path(__file__).resolve().parents[1]
SHOWCASE = ROOT / "benchmarks" / "data" / "h200_1gpu_copies_slowed_report.json"
H200 = ROOT / "baselines" / "h200.json"


def _one_gpu_runs() -> int:
    return sum(1 for r in json.loads(H200.read_text())["runs"] if (r.get("fingerprint") or {}).get("count") == 1)


def test_a_baseline_given_to_plot_or_html_is_drawn_from_its_runs_of_the_reports_machine_shape_only():
    doc = ReportDocument.load(SHOWCASE)
    ref = load_reference(str(H200))
    every = json.loads(H200.read_text())["runs"]
    fitted = fitted_reference(ref, doc)
    assert 0 < _one_gpu_runs() < len(every)  # the file holds both machines
    assert fitted.figures.n_runs == _one_gpu_runs()  # the 2 x H200 runs are set aside, as the gate sets them
    assert any("2 x NVIDIA H200" in line and "set aside" in line for line in fitted.lines), fitted.lines


def test_gpucomm_plot_says_first_whose_verdicts_and_which_runs_it_draws(tmp_path):
    out = io.StringIO()
    assert cli.main(["plot", str(SHOWCASE), "--baseline", str(H200), "-o", str(tmp_path / "p")], out=out) == 0
    text = " ".join(out.getvalue().split())
    assert text.startswith("gpucomm plot: the run's stored verdicts (failed: 20 failing cases of 20); drawn against "
                           f"the baseline h200 ({H200}), its {_one_gpu_runs()} runs of this machine's shape"), text


def test_the_report_stores_the_baseline_cases_it_measured_with_the_runs_summaries_and_a_page_draws_them():
    baseline = {"schema": "pytest-gpucomm-baseline", "name": "b",
                "runs": [{"run_id": "r1", "date": "d", "session": "s", "fingerprint": {"big": "x" * 100}},
                         {"run_id": "r2", "date": "d", "session": "s"}],
                "cases": {"k1": {"test_id": "t", "op": "copy", "size_bytes": 4096, "world_size": 1,
                                 "runs": [{"run_id": "r1", "samples_gbps": [1.0] * 50,
                                           "summary": {"median_gbps": 1.0, "p50_us": 4.0, "cv": 0.1}}]},
                          "k2": {"test_id": "u", "op": "copy", "size_bytes": 4096, "world_size": 1, "runs": []}}}
    drawn = drawn_document(baseline, ["k1", None])
    assert drawn is not None and list(drawn["cases"]) == ["k1"]  # the report's cases only
    assert drawn["cases"]["k1"]["runs"] == [{"run_id": "r1", "summary": {"median_gbps": 1.0, "p50_us": 4.0}}]
    assert drawn["runs"] == [{"run_id": "r1", "date": "d", "session": "s"}]  # the runs used, no fingerprint
    assert drawn_document(baseline, ["k9"]) is None and drawn_document(None, ["k1"]) is None
    doc = ReportDocument.load(SHOWCASE)
    assert stored_figures(doc) is None  # written before reports kept it
    with_drawn = ReportDocument.from_json({**doc.to_json(), "baseline": {**doc.baseline.data, DRAWN_KEY: drawn}})
    figures = stored_figures(with_drawn)
    assert figures is not None and figures.name == "b" and figures.n_runs == 1
    assert figures.document["cases"]["k1"]["runs"][0]["summary"]["median_gbps"] == 1.0
