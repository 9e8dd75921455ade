"""The plots (pytest_gpucomm.report.plots), drawn from a report and a baseline recorded on CPU, checked through
matplotlib's objects: axes scales, the series' data, the baseline band, marked regressions, the matrices'
cells, the titles; and the files save_all writes.

One real run per module (a copy sweep and an all_reduce sweep on gloo, saved as a baseline and a JSON
report); the tests edit copies of the two documents (a second baseline run, a verdict, more devices).
"""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from inprocess import run_inprocess

from pytest_gpucomm.report import plots
from pytest_gpucomm.analysis.curves import curve_model, curve_report, sweeps_from_report
from small_suite import SMALL_SUITE  # noqa: E402

TEST_FILE = SMALL_SUITE
SIZES = {"copy": [4096, 16384, 65536], "all_reduce": [1024, 4096, 16384]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(report, baseline) of one real CPU run that saved itself as the baseline ``cpu``."""
    pytest.importorskip("matplotlib")
    d = tmp_path_factory.mktemp("plots_run")
    (d / "test_small.py").write_text(TEST_FILE)
    cmd = ["test_small.py", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "--gpucomm-device=cpu", "--gpucomm-min-time=0.01", "--gpu-baseline=cpu", "--gpu-baseline-save",
           "--gpucomm-json=report.json"]
    proc = run_inprocess(d, cmd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((d / "report.json").read_text()), json.loads((d / "baselines" / "cpu.json").read_text())


@pytest.fixture
def report(recorded):
    return copy.deepcopy(recorded[0])


@pytest.fixture
def baseline(recorded):
    """The recorded baseline with a second run at 0.9 x the first's figures (a run-to-run band)."""
    doc = copy.deepcopy(recorded[1])
    doc["runs"].append(dict(doc["runs"][0], run_id="slower-run"))
    for case in doc["cases"].values():
        run = copy.deepcopy(case["runs"][0])
        run["run_id"] = "slower-run"
        run["samples_gbps"] = [g * 0.9 for g in run["samples_gbps"]]
        run["summary"]["median_gbps"] *= 0.9
        run["summary"]["p50_us"] /= 0.9
        case["runs"].append(run)
    return doc


def _gid(fig, gid):
    return [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]


def _one(fig, gid):
    found = _gid(fig, gid)
    assert len(found) == 1, (gid, found)
    return found[0]


def _figure(figs, label):
    found = [f for f in figs if f.get_label() == label]
    assert len(found) == 1, (label, [f.get_label() for f in figs])
    return found[0]


def _rows(report, test_prefix):
    return sorted((r for r in report["rows"] if r["test"].startswith(test_prefix)), key=lambda r: r["size_bytes"])


def _copy_rows(report, src, dst):
    return sorted((r for r in report["rows"] if r["op"] == "copy" and r["devices"] == [src, dst]),
                  key=lambda r: r["size_bytes"])


def _band_ys(collection, x):
    """The y values of a fill_between polygon at x."""
    v = collection.get_paths()[0].vertices
    return sorted({round(float(y), 9) for xx, y in v if math.isclose(xx, x, rel_tol=1e-9)})


def _run_medians(case):
    return [run["summary"]["median_gbps"] for run in case["runs"]]


def _case(baseline, row):
    key = f"{row['test']}|{row['op']}|{row['size_bytes']}B|{row['dtype'] or '-'}|ws{row['world_size']}"
    return baseline["cases"][key]


# -- without matplotlib --------------------------------------------------------------------------------


def test_without_matplotlib_the_module_imports_and_drawing_raises_plots_unavailable_naming_the_extra(monkeypatch):
    code = "import sys, pytest_gpucomm.report.plots; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    doc = {"format": "pytest-gpucomm-report", "version": 1, "rows": []}
    for draw in (plots.sweep_figures, plots.copy_matrix_figures, plots.latency_figures, plots.all_figures):
        with pytest.raises(plots.PlotsUnavailable, match=re.escape(plots.EXTRA)):
            draw(doc)
    assert issubclass(plots.PlotsUnavailable, ImportError)


# -- the sweeps ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_sweep_figure_draws_todays_medians_and_spread_on_log_axes(report):
    figs = plots.sweep_figures(report)
    assert sorted(f.get_label() for f in figs) == ["sweep-test_ar", "sweep-test_copy_0-to-1", "sweep-test_copy_1-to-0"]
    for label, prefix in (("sweep-test_copy_0-to-1", None), ("sweep-test_ar", "test_small.py::test_ar")):
        fig = _figure(figs, label)
        rows = _copy_rows(report, "cpu:0", "cpu:1") if prefix is None else _rows(report, prefix)
        (ax,) = fig.axes  # no baseline: one panel
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        today = _one(fig, "today")
        assert list(today.get_xdata()) == [r["size_bytes"] for r in rows]
        assert np.allclose(today.get_ydata(), [r["gbps"] for r in rows], rtol=1e-12)
        spread = _one(fig, "today-spread")
        for r in rows:  # the 10th and 90th percentile of the per-iteration figures
            per_iteration = r["bytes_per_iter"] * r["busbw_factor"] / 1e9 / np.array(r["samples_s"])
            expected = [np.percentile(per_iteration, 10), np.percentile(per_iteration, 90)]
            assert np.allclose(_band_ys(spread, r["size_bytes"]), sorted(expected), rtol=1e-6)
        assert not _gid(fig, "baseline") and not _gid(fig, "baseline-band")


def test_a_sweep_figure_draws_the_baselines_median_and_its_run_to_run_band(report, baseline):
    fig = _figure(plots.sweep_figures(report, baseline), "sweep-test_copy_1-to-0")
    rows = _copy_rows(report, "cpu:1", "cpu:0")
    cases = [_case(baseline, r) for r in rows]
    line = _one(fig, "baseline")
    assert list(line.get_xdata()) == SIZES["copy"]
    assert np.allclose(line.get_ydata(), [np.median(_run_medians(c)) for c in cases], rtol=1e-12)
    band = _one(fig, "baseline-band")
    for r, c in zip(rows, cases):  # lowest and highest run median: the recorded run and the one at 0.9 x
        lo, hi = min(_run_medians(c)), max(_run_medians(c))
        assert hi == pytest.approx(lo / 0.9)
        assert np.allclose(_band_ys(band, r["size_bytes"]), [lo, hi], rtol=1e-6)
    ratio = _one(fig, "ratio")  # the lower panel: today / baseline per size
    assert np.allclose(ratio.get_ydata(), [r["gbps"] / np.median(_run_medians(c)) for r, c in zip(rows, cases)])
    assert fig.axes[1].get_xscale() == "log"


def test_a_row_whose_verdict_is_regression_is_marked_at_its_size(report, baseline):
    (row,) = [r for r in _copy_rows(report, "cpu:0", "cpu:1") if r["size_bytes"] == 16384]
    row["baseline"]["status"] = "REGRESSION"
    (tail_row,) = [r for r in _rows(report, "test_small.py::test_ar") if r["size_bytes"] == 4096]
    tail_row["status"] = "TAIL"
    figs = plots.sweep_figures(report, baseline)
    marker = _one(_figure(figs, "sweep-test_copy_0-to-1"), "marked-REGRESSION")
    assert marker.get_offsets().tolist() == [[16384, row["gbps"]]]
    assert marker.get_label() == "REGRESSION"
    assert _one(_figure(figs, "sweep-test_ar"), "marked-TAIL").get_offsets().tolist() == [[4096, tail_row["gbps"]]]
    other = _figure(figs, "sweep-test_copy_1-to-0")
    assert not [a for a in other.axes[0].get_children() if str(a.get_gid()).startswith("marked-")]


def test_the_80_and_90_percent_sizes_are_marked_and_said_to_be_interpolated(report):
    # today's copy 0->1 reshaped to a curve that levels off: 1, 10, 10 GB/s at 4, 16, 64 KiB
    for r, g in zip(_copy_rows(report, "cpu:0", "cpu:1"), (1.0, 10.0, 10.0)):
        r["samples_s"] = [r["size_bytes"] / (g * 1e9)] * len(r["samples_s"])
        r["gbps"] = g
    # the curves section as the analysis makes it of these rows (the plots draw the section's crossings)
    report["curves"] = curve_report(sweeps_from_report(report))
    (sweep,) = [s for s in sweeps_from_report(report) if s.where == "cpu:0->cpu:1"]
    model = curve_model(sweep)
    fig = _figure(plots.sweep_figures(report), "sweep-test_copy_0-to-1")
    for share in (0.8, 0.9):
        c = model.crossing(share)
        assert c.interpolated and 4096 < c.size_bytes < 16384
        line = _one(fig, f"crossing-{share:g}")
        assert list(line.get_xdata()) == [c.size_bytes, c.size_bytes]
        assert line.get_linestyle() == "--" and line.get_label().endswith("(interpolated)")
        assert f"{share:.0%} of peak" in line.get_label()
    # the real all_reduce sweep: each share is either marked at curve_model's size or said not known
    fig = _figure(plots.sweep_figures(report), "sweep-test_ar")
    model = curve_model([s for s in sweeps_from_report(report) if s.op == "all_reduce"][0])
    for share in (0.8, 0.9):
        c = model.crossing(share)
        if c.size_bytes is not None:
            assert list(_one(fig, f"crossing-{share:g}").get_xdata()) == [c.size_bytes, c.size_bytes]
        else:
            assert c.reason in _one(fig, "crossing-notes").get_text()


def test_titles_name_the_hardware_the_date_and_the_baseline(report, baseline):
    fp = report["fingerprint"]
    figs = plots.all_figures(report, baseline)
    assert len(figs) == 5  # three sweeps, one copy matrix, one small-message latency
    for fig in figs:
        title = " ".join(fig.get_suptitle().split())  # wrapped to the figure's width: title_lines
        assert f"CPU {fp['cpu']}, {fp['cpu_cores']} cores, gloo, host {fp['host']}" in title
        assert f"{fp['date'][:10]} {fp['date'][11:16]}" in title
        assert "baseline cpu (2 runs)" in title
    assert "baseline cpu (judged in the run; its file not drawn)" in " ".join(
        plots.sweep_figures(report)[0].get_suptitle().split())
    del report["baseline"]
    assert "; no baseline" in " ".join(plots.sweep_figures(report)[0].get_suptitle().split())
    gpu = {"kind": "gpu", "count": 8, "model": "NVIDIA H200", "comm_library": "nccl 2.28.9", "driver": "570.1",
           "host": "h0"}
    assert plots.hardware_line(gpu) == "8 x NVIDIA H200, nccl 2.28.9, driver 570.1, host h0"


def _svg_texts(fig) -> list[str]:
    """The texts of ``fig`` as its SVG holds them, each text a <text> element (``svg.fonttype`` none): a text
    drawn as mathtext would be glyphs, not its string."""
    import io
    from html import unescape

    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg")
    return [unescape(t) for t in re.findall(r"<text\b[^>]*>([^<]*)</text>", buf.getvalue().decode("utf-8"))]


@pytest.mark.parametrize("text", ["$x^2$", "$x^$", "an unbalanced $"])
def test_a_dollar_in_the_fingerprint_or_a_device_is_drawn_as_written(report, baseline, text):
    """matplotlib reads the text between two ``$`` as mathtext: a host name or a CPU or GPU model holding ``$x^$``
    failed every figure (and the HTML page), ``$x^2$`` was drawn as a formula, and an unbalanced ``$`` in both the
    model and the host name made what lies between them one."""
    report["fingerprint"].update(cpu=f"cpu {text}", host=f"host-{text}")
    for r in report["rows"]:
        r["devices"] = [f"{d} {text}" if d.startswith("cpu:") else d for d in r["devices"]]
    figs = plots.all_figures(report, baseline)
    assert len(figs) == 5
    for fig in figs:
        texts = _svg_texts(fig)
        title = [t for t in texts if t.startswith(f"CPU cpu {text}, ")]
        drawn = " ".join(texts)  # the title wrapped to the figure's width: a text element per line
        assert len(title) == 1 and (f"CPU cpu {text}, {report['fingerprint']['cpu_cores']} cores, gloo, host "
                                    f"host-{text}; " in drawn and "; baseline cpu (2 runs)" in drawn), texts
    matrix = _figure(figs, "matrix-test_copy-copy")
    assert {f"cpu:0 {text}", f"cpu:1 {text}"} <= set(_svg_texts(matrix))


# -- the copy matrices ---------------------------------------------------------------------------------


def test_the_copy_matrices_hold_the_gbps_and_the_ratio_to_the_baseline_for_the_devices_seen(report, baseline):
    # two more devices (cpu:2, cpu:10: natural order) in pairs the baseline does not have
    extra = []
    for r in _copy_rows(report, "cpu:0", "cpu:1"):
        for src, dst, k in (("cpu:2", "cpu:10", 0.5), ("cpu:10", "cpu:0", 0.25)):
            e = copy.deepcopy(r)
            e["devices"], e["gbps"] = [src, dst], r["gbps"] * k
            e["samples_s"] = [t / k for t in r["samples_s"]]  # the figure is the samples' (as the table's)
            e["test"] = r["test"].replace("-0->1]", f"-{src[4:]}->{dst[4:]}]")
            extra.append(e)
    report["rows"] += extra
    (fig,) = plots.copy_matrix_figures(report, baseline)
    assert fig.get_label() == "matrix-test_copy-copy"
    srcs, dsts = ["cpu:0", "cpu:1", "cpu:2", "cpu:10"], ["cpu:0", "cpu:1", "cpu:10"]
    for size in SIZES["copy"]:
        rows = [r for r in report["rows"] if r["op"] == "copy" and r["size_bytes"] == size]
        gb, ratio = _one(fig, f"gbps-{size}"), _one(fig, f"ratio-{size}")
        for im in (gb, ratio):
            assert [t.get_text() for t in im.axes.get_yticklabels()] == srcs
            assert [t.get_text() for t in im.axes.get_xticklabels()] == dsts
        cells, rcells = gb.get_array(), ratio.get_array()
        seen = set()
        for r in rows:
            i, k = srcs.index(r["devices"][0]), dsts.index(r["devices"][1])
            seen.add((i, k))
            assert cells[i, k] == pytest.approx(r["gbps"], rel=1e-12)
            if r["devices"][0] in ("cpu:0", "cpu:1") and r["devices"][1] in ("cpu:0", "cpu:1"):
                assert rcells[i, k] == pytest.approx(r["gbps"] / np.median(_run_medians(_case(baseline, r))))
            else:  # not in the baseline: blank
                assert np.ma.is_masked(rcells[i, k])
        for i in range(len(srcs)):  # pairs not measured: blank
            for k in range(len(dsts)):
                if (i, k) not in seen:
                    assert np.ma.is_masked(cells[i, k]) and np.ma.is_masked(rcells[i, k])
        assert ratio.norm.vmin + ratio.norm.vmax == pytest.approx(2.0)  # centred on 1
        assert ratio.norm.vmax - 1.0 >= float(np.max(np.abs(rcells.compressed() - 1.0))) - 1e-12
        assert ratio.get_cmap().name.startswith("RdBu")
        assert gb.norm.vmin == 0.0 and gb.norm.vmax == pytest.approx(max(r["gbps"] for r in rows))
    # without a baseline: the GB/s row only; sizes asked for
    (fig,) = plots.copy_matrix_figures(report, sizes=[16384])
    assert len(_gid(fig, "gbps-16384")) == 1 and not _gid(fig, "gbps-4096") and not _gid(fig, "ratio-16384")


def test_one_way_copies_of_several_tests_share_one_matrix_with_the_host_as_a_row_and_a_column(report, baseline):
    # host -> device and device -> host rows, as suites/test_copies.py's host tests make them
    for r in _copy_rows(report, "cpu:0", "cpu:1"):
        for op, devices, k in (("h2d", ["host", "cpu:0"], 0.5), ("d2h", ["cpu:1", "host"], 0.25)):
            e = copy.deepcopy(r)
            e["op"], e["devices"], e["gbps"] = op, devices, r["gbps"] * k
            e["samples_s"] = [t / k for t in r["samples_s"]]
            e["test"] = r["test"].replace("::test_copy[", f"::test_{op}[")
            report["rows"].append(e)
    figs = plots.copy_matrix_figures(report, baseline)
    assert [f.get_label() for f in figs] == ["matrix-all_one-way_copies-one-way", "matrix-test_copy-copy",
                                             "matrix-test_h2d-h2d", "matrix-test_d2h-d2h"]
    both = figs[0]
    assert "all one-way copies: peer, host to device and device to host" in both.texts[0].get_text()
    devs = ["cpu:0", "cpu:1", "host"]
    for size in SIZES["copy"]:
        gb, ratio = _one(both, f"gbps-{size}"), _one(both, f"ratio-{size}")
        assert [t.get_text() for t in gb.axes.get_yticklabels()] == devs
        assert [t.get_text() for t in gb.axes.get_xticklabels()] == devs
        cells = gb.get_array()
        for r in report["rows"]:
            if r["size_bytes"] == size and r["op"] in ("copy", "h2d", "d2h"):
                assert cells[devs.index(r["devices"][0]), devs.index(r["devices"][1])] == pytest.approx(r["gbps"])
        assert np.ma.is_masked(cells[2, 2]) and np.ma.is_masked(cells[0, 0])  # host->host, cpu:0->cpu:0
        assert np.ma.is_masked(ratio.get_array()[2, 0])  # host->cpu:0 is not in the baseline
    # one mapping of ratio to colour in every panel of every figure, centred on 1, at least the tolerance wide
    clims = {_one(f, f"ratio-{size}").get_clim() for f in figs for size in SIZES["copy"] if _gid(f, f"ratio-{size}")}
    assert len(clims) == 1, clims
    [(lo, hi)] = clims
    assert lo + hi == pytest.approx(2.0) and hi - 1 >= report["settings"]["tolerance"]
    # one copy test only: no combined matrix (it would repeat the test's own)
    only = [r for r in report["rows"] if r["op"] not in ("h2d", "d2h")]
    assert [f.get_label() for f in plots.copy_matrix_figures(dict(report, rows=only))] == ["matrix-test_copy-copy"]


# -- small messages ------------------------------------------------------------------------------------


def _hist_series(row):
    from pytest_gpucomm.sketches import BIN_RATIO, Histogram

    bins = row["info"]["tail"]["hist"]["bins"]
    n = sum(c for _, c in bins)
    x = [Histogram.lower_edge(i) * math.sqrt(BIN_RATIO) * 1e6 for i, _ in bins]
    y = [sum(c for _, c in bins[j:]) / n for j in range(len(bins))]
    return x, y


def test_the_latency_figure_draws_todays_single_ops_against_the_baselines_tail_sketches(report, baseline):
    from pytest_gpucomm.sketches import TailSketch

    row = _rows(report, "test_small.py::test_ar")[0]  # the smallest size
    case = _case(baseline, row)
    sketch = TailSketch.from_info(row["info"]["tail"])
    case["runs"][0]["tail"] = sketch.to_dict()
    case["runs"][1]["tail"] = dict(sketch.to_dict(), p50_us=sketch.p50_s * 1e6 * 1.2)
    (fig,) = plots.latency_figures(report, baseline)
    assert fig.get_label() == "latency-test_ar_1KiB"
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    from matplotlib.ticker import LogFormatterSciNotation

    assert not isinstance(ax.xaxis.get_minor_formatter(), LogFormatterSciNotation)  # plain: see the next test
    today = _one(fig, "today")
    x, y = _hist_series(row)
    assert np.allclose(today.get_xdata(), x, rtol=1e-12) and np.allclose(today.get_ydata(), y, rtol=1e-12)
    assert today.get_ydata()[0] == 1.0
    lines = _gid(fig, "baseline-sketch")
    assert len(lines) == 2
    for line, scale in zip(lines, (1.0, 1.2)):
        levels = sorted(sketch.ratios)
        p50 = sketch.p50_s * 1e6 * scale
        assert np.allclose(line.get_xdata(), [p50] + [p50 * sketch.ratios[q] for q in levels]
                           + [p50 * sketch.max_ratio], rtol=1e-5)
        assert np.allclose(line.get_ydata(), [0.5] + [1 - q for q in levels] + [1 / sketch.n])
    assert not _gid(fig, "baseline-batch") and not _gid(fig, "today-batch")
    assert "all_reduce 1 KiB, 2 ranks: single-op latency" in fig.get_suptitle()


def test_a_narrow_latency_axis_is_labelled_in_plain_numbers():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    ax.plot([1.25, 1.31], [1.0, 0.001])  # 10,000 single ops within 1.25-1.31 us, as on one H200
    ax.set_xscale("log")
    plots._plain_log_labels(ax.xaxis)
    FigureCanvasAgg(fig).draw()
    labels = [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()]
    assert "1.25" in labels and "1.3" in labels and not any("10^" in t or "times" in t for t in labels)


def test_without_sketches_the_latency_figure_draws_the_per_iteration_times_of_both(report, baseline):
    baseline = copy.deepcopy(baseline)  # a baseline recorded before runs kept their single ops' sketch
    for c in baseline["cases"].values():
        for r in c["runs"]:
            r.pop("tail", None)
    row = _rows(report, "test_small.py::test_ar")[0]
    case = _case(baseline, row)
    (fig,) = plots.latency_figures(report, baseline)
    k = row["bytes_per_iter"] * row["busbw_factor"] / 1e9
    lines = _gid(fig, "baseline-batch")
    assert len(lines) == len(case["runs"]) == 2
    for line, run in zip(lines, case["runs"]):
        assert np.allclose(line.get_xdata(), sorted(k / g * 1e6 for g in run["samples_gbps"]), rtol=1e-9)
    today = _one(fig, "today-batch")
    assert np.allclose(today.get_xdata(), sorted(s * 1e6 for s in row["samples_s"]), rtol=1e-12)
    n = len(row["samples_s"])
    assert np.allclose(today.get_ydata(), [(n - j) / n for j in range(n)])
    # at the sizes asked for: one figure per row with a single-op record there, a training-step pattern's left out
    pattern = copy.deepcopy(row)
    pattern.update(test="test_small.py::test_step[dp]", op="dp_grad_sync", size_bytes=4096)
    pattern["info"]["step_comm_s"] = 0.01
    report["rows"].append(pattern)
    assert [f.get_label() for f in plots.latency_figures(report, sizes=[4096, 16384])] == [
        "latency-test_ar_4KiB", "latency-test_ar_16KiB"]


# -- saving and bad input ------------------------------------------------------------------------------


def test_save_all_writes_png_and_svg_files_with_safe_names(report, baseline, tmp_path):
    figs = plots.all_figures(report, baseline)
    figs = [_figure(figs, label) for label in ("sweep-test_ar", "matrix-test_copy-copy", "latency-test_ar_1KiB")]
    for fmt, magic in (("png", b"\x89PNG"), ("svg", b"<svg")):
        paths = plots.save_all(figs, tmp_path / fmt, fmt=fmt)
        assert len(paths) == len(figs) == len({p.name for p in paths})
        for p in paths:
            assert p.parent == tmp_path / fmt and re.fullmatch(rf"[A-Za-z0-9._-]+\.{fmt}", p.name)
            data = p.read_bytes()
            assert len(data) > 1000 and magic in data[:2000]  # a real image, not an empty file
    from matplotlib.figure import Figure

    odd = Figure(figsize=(1, 1))
    odd.set_label("../../etc/passwd x?")
    paths = plots.save_all([odd, odd], tmp_path / "odd")
    assert [p.name for p in paths] == ["etc_passwd_x.png", "etc_passwd_x-2.png"]
    assert all(p.parent == tmp_path / "odd" and p.stat().st_size > 0 for p in paths)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["odd", "png", "svg"]  # nothing written elsewhere
    with pytest.raises(ValueError, match="invalid plot format 'jpg': one of png, svg"):
        plots.save_all(figs, tmp_path, fmt="jpg")


def test_a_document_of_another_format_or_a_newer_version_is_refused_naming_what_was_found(report, baseline):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match="not a pytest-gpucomm report: format 'pytest-benchmark'"):
        plots.sweep_figures({"format": "pytest-benchmark", "version": 1, "rows": []})
    from pytest_gpucomm.report.saved import REPORT_VERSION

    with pytest.raises(ValueError, match=f"report version {REPORT_VERSION + 1} is newer than this pytest-gpucomm "
                                         f"reads \\({REPORT_VERSION}\\)"):
        plots.copy_matrix_figures(dict(report, version=REPORT_VERSION + 1))
    with pytest.raises(ValueError, match="not a pytest-gpucomm baseline: format 'pytest-gpucomm-report'"):
        plots.latency_figures(report, report)
    with pytest.raises(ValueError, match="not a pytest-gpucomm report: a list"):
        plots.all_figures([])


def test_a_title_wider_than_its_figure_is_wrapped_at_words_never_cut_at_the_edge():
    context = ("1 x NVIDIA H200, NCCL 2.28.9, driver 580.159.04, host vm; 2026-12-01 22:05 UTC; baseline h200 "
               "(judged in the run; its file not drawn)")
    lines = plots.title_lines(f"copy h2d\n{context}", 4.0)
    assert lines[0] == "copy h2d" and " ".join(lines[1:]) == context and len(lines) >= 3
    assert all(len(x) * plots.TITLE_POINTS * 0.62 <= 4.0 * 72 for x in lines)  # each fits 4 inches
    assert plots.title_lines("a\nb", 8.0) == ["a", "b"]


def test_every_ratio_panel_of_a_report_has_one_colour_scale_at_least_the_runs_tolerance():
    assert plots.ratio_scale([0.94, 1.01], 0.05) == pytest.approx(0.06)
    assert plots.ratio_scale([0.99], 0.1) == 0.1  # within the tolerance: the scale is the tolerance
    assert plots.ratio_scale([0.0, 3.0], None) == 1.0  # at most 1
    assert plots.ratio_scale([], "x") == 0.05  # a tolerance that is not a fraction: the default
