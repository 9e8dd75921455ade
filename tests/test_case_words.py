"""Every word of a case's row agrees with its number (issue 45, item 1): the interval a row prints beside its
verdict is the one that decides it, a pooled figure names its runs, the table, the matrices, the HTML page and
the plots give one ratio for one case, and a tiny figure keeps its digits in every view."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_gpucomm.gate.decision import NO_PRIOR, Comparison, RunLocation, fit_case, judge
from pytest_gpucomm.gate.reasons import comparison_reason
from pytest_gpucomm.vocab import Status

DATA = Path(__file__).parent / "data" / "formats"
#: the statuses under which a row passes
PASSING = (Status.OK, Status.NOT_GATED, Status.IMPROVED)
#: an interval as the rows print it: ``[0.8, 1.01]``
INTERVAL = re.compile(r"\[([-+0-9.e]+), ([-+0-9.e]+)\]")


def _judged(ratio: float, sd: float, sessions: int, runs: int, n_comparisons: int, tolerance: float,
            again: list[float], seed: int) -> Comparison:
    """A case judged by the gate's own procedure: a baseline of ``sessions`` x ``runs`` runs whose session
    offsets spread by ``sd``, today's first run at ``ratio`` of its center and re-measures at ``again``."""
    rng = np.random.default_rng(seed)
    locs, labels = [], []
    for s in range(sessions):
        offset = rng.normal(0.0, sd)
        for _ in range(runs):
            locs.append(RunLocation(math.log(100.0) + offset + rng.normal(0.0, sd / 2), 1e-6, 30))
            labels.append(f"s{s}")
    model = fit_case(locs, labels)
    queue = list(again)

    def measure_again() -> tuple[RunLocation, bool]:
        r = queue.pop(0) if queue else ratio
        return RunLocation(model.center + math.log(r), 1e-6, 30), True

    first = RunLocation(model.center + math.log(ratio), 1e-6, 30)
    return judge(first, model, NO_PRIOR, measure_again if again else None, tolerance=tolerance,
                 n_comparisons=n_comparisons, max_remeasures=len(again)).comparison


@settings(max_examples=300, deadline=None)
@given(ratio=st.floats(0.3, 1.5), sd=st.floats(0.001, 0.2), sessions=st.integers(1, 6), runs=st.integers(1, 3),
       n_comparisons=st.integers(1, 400), tolerance=st.floats(0.01, 0.3),
       again=st.lists(st.floats(0.3, 1.5), max_size=3), seed=st.integers(0, 2**16))
@example(ratio=0.85, sd=0.03, sessions=3, runs=2, n_comparisons=170, tolerance=0.05, again=[], seed=0)
@example(ratio=0.5, sd=0.01, sessions=1, runs=3, n_comparisons=10, tolerance=0.05, again=[], seed=1)
def test_no_row_pairs_an_interval_wholly_below_the_tolerance_with_a_passing_status(
        ratio, sd, sessions, runs, n_comparisons, tolerance, again, seed):
    c = _judged(ratio, sd, sessions, runs, n_comparisons, tolerance, again, seed)
    text = comparison_reason(c)
    printed = [(float(lo), float(hi)) for lo, hi in INTERVAL.findall(text)]
    if c.status in PASSING:
        below = [iv for iv in printed if iv[1] < 1.0 - tolerance]
        assert not below, f"{c.status.value} row prints {below} below the limit {1.0 - tolerance:.3g}x: {text}"
    # what a row prints is the interval that decides it, never another one
    assert "95%" not in text, text
    for lo, hi in printed:
        assert (lo, hi) == (float(f"{c.lower_bound:.3g}"), float(f"{c.upper_bound:.3g}")), text


# --- (b) a pooled figure names its runs; a re-measure back at the baseline's speed says what it means --------


def _gate(tmp_path, level: float = 100.0, **settings):
    """A gate on a steady baseline of four runs (sessions of their own) of one copy case near ``level`` GB/s."""
    from pytest_gpucomm.gate import CaseRecord, Gate, GateSettings, save_run

    path = tmp_path / "cpu.json"
    for i, f in enumerate((0.998, 1.0, 1.002, 1.0)):
        r = CaseRecord(test_id=NODEID, op="copy", size_bytes=4096, world_size=1, samples_gbps=_steady(level * f))
        save_run(path, name="cpu", run_id=f"r{i}", date="2026-01-01T00:00:00+00:00", fingerprint={},
                 cases={r.key: r})
    g = Gate(GateSettings(spec=str(path), **settings))
    g.load(None, {}, {NODEID})
    return g


NODEID = "test_f.py::test_copy[0->1]"


def _steady(level: float, n: int = 40) -> list[float]:
    return [level * (1 + 0.001 * ((i * 7) % 11 - 5)) for i in range(n)]


class _Copy:
    """What Gate.judge reads of a measurement."""

    op, size_bytes, dtype, world_size, where = "copy", 4096, None, 1, "cpu:0->cpu:1"

    def __init__(self, level: float) -> None:
        self.samples_gbps = _steady(level)


def _again(*levels: float):
    from pytest_gpucomm.measurement import Remeasure

    queue = list(levels)
    return lambda: Remeasure(_Copy(queue.pop(0)), True, "in a new process")  # type: ignore[arg-type]


def test_a_regression_headline_names_the_runs_its_pooled_figure_is_made_of(tmp_path):
    from pytest_gpucomm.units import format_gbps

    v = _gate(tmp_path, max_remeasures=1).judge(NODEID, _Copy(50.0), None, _again(52.0))
    head = v.message.splitlines()[0]
    assert v.status is Status.REGRESSION, v.message
    pooled = format_gbps(math.sqrt(50.0 * 52.0))  # the geometric mean of the two runs: measured by neither
    assert f"drop, {pooled} (pooled: 50.00, 52.00) vs {format_gbps(v.baseline_gbps)} GB/s" in head, head
    assert v.details["runs_gbps"] == [pytest.approx(50.0, rel=1e-3), pytest.approx(52.0, rel=1e-3)]
    alone = _gate(tmp_path / "one", max_remeasures=0)  # one run: its own figure, nothing pooled
    head = alone.judge(NODEID, _Copy(50.0), None, None).message.splitlines()[0]
    assert "drop, 50.00 vs 100." in head and "pooled" not in head, head
    from pytest_gpucomm.gate.verdicts import now_figure

    assert now_figure(3.0, [1.0, 2.0, 4.0, 8.0]) == "3.00 (pooled over 4 runs, 1.00 to 8.00)"  # listed below


def test_a_re_measure_back_at_the_baselines_speed_says_what_it_means_for_the_verdict(tmp_path):
    from pytest_gpucomm.gate.decision import compare
    from pytest_gpucomm.gate.verdicts import remeasure_meaning

    v = _gate(tmp_path, max_remeasures=1).judge(NODEID, _Copy(12.0), None, _again(99.0))
    assert v.status is not Status.REGRESSION, v.message
    assert ("first run 12.00 GB/s (0.12x), measured again: 99.00 GB/s (0.99x) in a new process; the first run's "
            "drop did not repeat: the re-measure came back at 0.99x, nearer the baseline than the first run (0.12x); "
            "with every run pooled the drop is not shown beyond the tolerance: not a regression") in v.message
    # a regression whose runs disagree: the words say the slowdown comes and goes, and why it still fails
    model = _judged_model()
    c = compare([RunLocation(model.center + math.log(0.3), 1e-6, 30)] * 2, model, n_comparisons=10)
    assert c.status is Status.REGRESSION
    base = c.baseline_median_gbps
    # the copy: a first run at 0.124x, a re-measure at 0.944x (near the baseline, not within 5 % of it)
    text = remeasure_meaning(c, 0.124 * base, [0.944 * base, 0.3 * base])
    assert text.startswith("the slowdown comes and goes") and "1 of 2 re-measures came back at 0.944x, nearer the " \
        "baseline than the first run (0.124x)" in text and text.endswith("upper bound is below the limit: it fails")
    assert remeasure_meaning(c, 0.124 * base, [0.3 * base]) == ""  # nearer the first run: nothing to explain
    assert remeasure_meaning(c, 0.99 * base, [0.99 * base]) == ""  # the first run was not below the limit


def _judged_model():
    locs = [RunLocation(math.log(100.0) + x, 1e-6, 30) for x in (-0.002, 0.0, 0.002, 0.001, -0.001, 0.0)]
    return fit_case(locs, ["a", "a", "b", "b", "c", "c"])


# --- (c) one ratio per case in the table, the matrices, the HTML page and the plots -------------------------
# (d) and a tiny figure keeps its digits in each of them

#: the report the issue saw: a first run at 0.12x of the baseline, a re-measure near it, pooled to 0.342x
FIRST_SHARE, POOLED = 0.12, 0.342


def _report(first_gbps: float) -> dict:
    """The stored report_2.json with its copy rows (0->1 and 1->0: a 2 x 2 matrix) at ``first_gbps`` on their
    first run, judged a REGRESSION at the pooled ratio :data:`POOLED` against a baseline figure
    ``first_gbps / FIRST_SHARE``, the first run and one re-measure pooled."""
    doc = json.loads((DATA / "report_2.json").read_text())
    for r in doc["rows"]:  # the words of the code of its time: not what is tested here
        r["baseline"]["message"] = r["baseline"]["status"]
    (row,) = [r for r in doc["rows"] if r["kind"] == "copy"]
    scale = row["gbps"] / first_gbps
    row["samples_s"] = [t * scale for t in row["samples_s"]]
    for key in ("median_us", "p50_us", "p99_us"):
        row[key] *= scale
    for key in ("algbw_gbps", "busbw_gbps", "gbps"):
        row[key] = first_gbps
    base = first_gbps / FIRST_SHARE
    again = POOLED ** 2 * base ** 2 / first_gbps  # pooled: the geometric mean of the two runs
    row["baseline"].update(baseline_gbps=base, ratio=POOLED, runs_gbps=[first_gbps, again], runs_pooled=2,
                           message=f"REGRESSION: copy: the verdict at {POOLED}x")
    back = copy.deepcopy(row)
    back["devices"], back["test"] = ["cpu:1", "cpu:0"], row["test"].replace("0->1", "1->0")
    doc["rows"].append(back)
    return doc


def _views(report: dict) -> dict[str, str]:
    """Every view of ``report`` that prints a row's figures: the terminal summary (compact and full), the
    HTML page (its results table and matrices), as text."""
    from pytest_gpucomm.report import html
    from pytest_gpucomm.report.document import as_document
    from pytest_gpucomm.report.terminal import summary_lines

    doc = as_document(report)
    return {"compact": "\n".join(summary_lines(doc, width=200)),
            "full": "\n".join(summary_lines(doc, width=200, full=True)),
            "html": html.html_page(report, with_plots=False)}


def test_the_table_the_matrices_the_html_page_and_the_plots_give_the_verdicts_ratio_for_a_case():
    report = _report(7.4)
    views = _views(report)
    for name in ("compact", "full"):
        text = views[name]
        assert f"{POOLED:.3f} (2 runs)" in text, text  # the table's: the verdict's, saying it pools two runs
        matrix = text[text.index("today / baseline"):]
        assert f"{POOLED:.2f}x" in matrix and f"{FIRST_SHARE:.2f}x" not in matrix, matrix
    page = views["html"]
    assert f">{POOLED:.3f} (2 runs)<" in page and f">{POOLED:.2f}x<" in page and f">{FIRST_SHARE:.2f}x<" not in page
    # against a baseline file the HTML table and the matrices still give the verdict's ratio
    from pytest_gpucomm.report import html

    stored = json.loads((DATA / "baseline_2.json").read_text())
    page = html.html_page(report, stored, with_plots=False)
    assert f">{POOLED:.3f} (2 runs)<" in page and f">{POOLED:.2f}x<" in page
    pytest.importorskip("matplotlib")
    from pytest_gpucomm.report import plots

    (fig,) = plots.copy_matrix_figures(report, stored)
    cells = [im for ax in fig.axes for im in ax.get_images() if (im.get_gid() or "").startswith("ratio-")]
    assert cells and all(v == pytest.approx(POOLED) for im in cells for v in im.get_array().compressed())


def test_a_figure_of_4_mb_per_second_keeps_its_digits_in_every_view():
    from pytest_gpucomm.units import format_gbps

    tiny = 0.004
    report = _report(tiny)
    views = _views(report)
    for name, text in views.items():
        assert format_gbps(tiny) == "0.004" and "0.004" in text, name  # today's figure
        assert format_gbps(tiny / FIRST_SHARE) in text, name  # the baseline's: 0.0333
        assert "0.00," not in text and " 0.00 " not in text and ">0.00<" not in text, name
    # a tiny ratio keeps its digits in the table and the matrices (it printed 0.000 and 0.00x)
    for r in report["rows"]:
        if r["kind"] == "copy":
            r["baseline"]["ratio"] = 3e-4
    views = _views(report)
    assert "0.0003 (2 runs)" in views["compact"] and "0.0003x" in views["compact"] and "0.000 " not in views["full"]
    # the matrix's cells
    from pytest_gpucomm.analysis.matrices import Cell, figure_text, ratio_text

    assert figure_text(Cell(tiny)) == "0.004" and ratio_text(Cell(tiny, 0.5)) == "0.008x"
    from pytest_gpucomm.units import format_ratio

    assert format_ratio(1.02e-6) == "1e-06" and format_ratio(0.342) == "0.342" and format_ratio(0.12, 2) == "0.12"
