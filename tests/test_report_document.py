"""The report document (pytest_gpucomm.report.document): a session makes it once, and the JSON report it
writes reads back as the same document, in the same layout, byte for byte; so do the shipped reports and
what ``gpucomm compare --json`` writes; the views render a document as they render its JSON.

One set of runs per module (tests/simulated_copies.py: a copy sweep on a simulated clock): three runs saved
as the baseline ``cpu``, then a gated run with one case slowed down (a REGRESSION, measured again, the run
judged at the levels) that writes the JSON report.  A conftest hook of that run checks, in the session, the
document the plugin made against the file it wrote.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from simulated_copies import CONFTEST, record_baseline, run_pytest, write_files

from pytest_gpucomm import cli
from pytest_gpucomm.measurement import Measurement, Record
from pytest_gpucomm.report.document import ReportDocument, RowVerdict
from pytest_gpucomm.report.html import html_page
from pytest_gpucomm.report.saved import check_report
from pytest_gpucomm.report.run import judgement
from pytest_gpucomm.report.terminal import summary_lines

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"

#: in the gated run, at its end: the session's document against itself read back and against its file
CHECK = """

def pytest_unconfigure(config):
    import json
    from pathlib import Path

    from pytest_gpucomm.plugin.reporting import REPORT_KEY
    from pytest_gpucomm.report.document import ReportDocument

    if REPORT_KEY not in config.stash or not Path("report.json").exists():
        return
    doc = config.stash[REPORT_KEY].document
    Path("check.json").write_text(json.dumps({
        "round_trip": ReportDocument.from_json(doc.to_json()) == doc,
        "file": ReportDocument.load("report.json") == doc,
        "text": Path("report.json").read_text() == json.dumps(doc.to_json(), indent=1) + "\\n",
        "rows": len(doc.rows),
    }))
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("document_runs")
    write_files(d)
    (d / "conftest.py").write_text(CONFTEST + CHECK)
    base = record_baseline(d)
    proc = run_pytest(d, "--gpu-baseline=cpu", "--gpucomm-json=report.json", sim_run=5, slow=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the slowed case is a REGRESSION
    return SimpleNamespace(dir=d, baseline=base, report=d / "report.json",
                           check=json.loads((d / "check.json").read_text()))


def test_the_sessions_document_reads_back_from_its_json_and_from_the_file_it_wrote_byte_for_byte(run):
    assert run.check == {"round_trip": True, "file": True, "text": True, "rows": 6}


def test_a_gated_runs_document_holds_the_verdicts_levels_curves_and_the_environment_diff(run):
    doc = ReportDocument.load(run.report)
    assert ReportDocument.from_json(doc.to_json()) == doc
    assert [r.status for r in doc.rows].count("REGRESSION") >= 1
    assert all(r.verdict is not None and r.verdict.case for r in doc.rows)
    assert doc.baseline is not None and doc.baseline.path and doc.baseline.environment_diff is not None
    assert doc.levels is not None and doc.levels.run_levels().summary()
    assert doc.curves is not None and len(doc.curves) == 2  # a sweep each way
    assert any(r.verdict is not None and r.verdict.reruns("remeasures") for r in doc.rows)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*_report.json")))
def test_the_shipped_reports_read_back_as_the_same_document_and_the_same_json(name):
    text = (DATA / name).read_text()
    doc = ReportDocument.from_json(json.loads(text), name)
    assert ReportDocument.from_json(doc.to_json()) == doc
    # a report of an earlier version reads as today's (files.formats): the same JSON but its version, and the
    # "verdict" this version derives from the rows and the levels (report.run.judgement)
    expected = dict(check_report(json.loads(text), name))
    written = doc.to_json()
    assert written.pop("verdict") == judgement(doc).to_dict()
    expected.pop("verdict", None)
    assert json.dumps(written, indent=1) == json.dumps(expected, indent=1)


def test_gpucomm_compare_makes_a_new_document_that_reads_back_and_that_show_renders(run, tmp_path):
    out = tmp_path / "compared.json"
    code = cli.main(["compare", str(run.baseline), str(run.report), "--json", str(out), "--no-curves"],
                    out=io.StringIO())
    assert code == 1
    doc, before = ReportDocument.load(out), ReportDocument.load(run.report)
    assert ReportDocument.from_json(doc.to_json()) == doc
    assert doc.compared is not None and doc.compared["kind"] == "baseline" and doc.levels is not None
    assert [r.test for r in doc.rows] == [r.test for r in before.rows]
    assert [r.measurement for r in doc.rows] == [r.measurement for r in before.rows]
    assert [r.status for r in doc.rows] == [r.verdict.status for r in doc.rows if r.verdict is not None]
    shown = io.StringIO()
    assert cli.main(["show", str(out), "--no-curves"], out=shown) == 0
    assert "REGRESSION" in shown.getvalue()


def test_the_views_render_a_document_as_they_render_its_json(run):
    raw = json.loads(run.report.read_text())
    doc = ReportDocument.from_json(raw)
    assert html_page(doc, with_plots=False) == html_page(raw, with_plots=False)
    lines = summary_lines(doc, headline="h", gate_header=["gate"], notes=["note"])
    assert lines == summary_lines(ReportDocument.from_json(doc.to_json()), headline="h", gate_header=["gate"],
                                  notes=["note"])
    assert lines[0] == "hardware: h" and lines[-1] == "note" and "gate" in lines
    assert any(line.startswith("gpucomm verdicts: ") for line in lines)


def test_a_nan_in_a_verdict_compares_equal_after_the_round_trip_and_tuples_read_back_as_lists():
    m = Measurement(op="copy", size_bytes=4096, samples_s=[1e-6, 2e-6, 3e-6], devices=("cpu:0", "cpu:1"),
                    info={"pair": ("a", "b")})
    record = Record("t.py::test_copy[4KiB]", m, baseline={"status": "ok", "ratio": math.nan, "ci95": (0.9, 1.1)})
    doc = ReportDocument.of_run([record], settings={"tolerance": 0.05}, fingerprint=None)
    assert ReportDocument.from_json(json.loads(json.dumps(doc.to_json()))) == doc
    (row,) = doc.rows
    assert isinstance(row.verdict, RowVerdict) and row.verdict.data["ci95"] == [0.9, 1.1]
    assert math.isnan(row.verdict.data["ratio"]) and row.verdict.ratio is not None
    assert row.measurement.info == {"pair": ["a", "b"]}
    assert replace(doc, settings={"tolerance": 0.1}) != doc


def test_a_record_is_copied_into_its_row_so_that_adding_to_the_record_after_leaves_the_row_as_it_was():
    m = Measurement(op="copy", size_bytes=4096, samples_s=[1e-6, 2e-6, 3e-6], devices=("cpu:0", "cpu:1"),
                    busbw_factor=1, info={"links": 1})
    record = Record("t.py::test_copy[4KiB]", m, baseline={"status": "ok", "ratio": 1.0})
    (row,) = ReportDocument.of_run([record]).rows
    m.info["links"] = 2
    m.samples_s.append(4e-6)
    record.baseline["ratio"] = 0.5  # type: ignore[index]
    assert row.measurement.info == {"links": 1} and row.measurement.samples_s == [1e-6, 2e-6, 3e-6]
    assert row.verdict is not None and row.verdict.ratio == 1.0
    assert row.to_json()["busbw_factor"] == 1.0 and isinstance(row.to_json()["busbw_factor"], float)


def test_the_views_take_the_sweeps_crossings_from_the_curves_section_the_analysis_made(run):
    from pytest_gpucomm.analysis.curve_fit import curve_model

    doc = ReportDocument.load(run.report)
    assert doc.sweeps is doc.sweeps and len(doc.sweeps) == 2  # made once per document
    for sweep in doc.sweeps:
        assert doc.crossings(sweep) == curve_model(sweep).crossings
    # the section is what the views read: a crossing written there is the one they draw
    data = doc.to_json()
    data["curves"][0]["model"]["crossings"][0]["size_bytes"] = 12345
    edited = ReportDocument.from_json(data)
    first = next(s for s in edited.sweeps if (s.key[0] or s.label) == data["curves"][0]["sweep"])
    assert edited.crossings(first)[0].size_bytes == 12345
    # without the section (a report of an earlier version) they are worked out from the rows
    del data["curves"]
    bare = ReportDocument.from_json(data)
    assert [bare.crossings(s) for s in bare.sweeps] == [curve_model(s).crossings for s in bare.sweeps]
