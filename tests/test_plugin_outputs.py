"""What a pytest run shows and writes beyond its table (issue 14): the curves section in the terminal summary
and the JSON report (compared with the baseline's curves where it has the sweep); the plots drawn at the
session's end with --gpucomm-plots (option, ini and environment forms; PNG or SVG); the usage errors of a
bad format and of matplotlib missing (naming the extra); each test's figures and verdict on its line under
-v; the plots inside pytest-html's report.

The runs measure a copy sweep on a simulated clock (tests/simulated_copies.py), so the figures and the
verdicts are known: a case slowed down 30 % is a REGRESSION against a baseline of unchanged runs.
"""

from __future__ import annotations

import base64
import json
import re
import sys

import pytest

from conftest import HTML_PLUGINS
from inprocess import RUN_ENV

from simulated_copies import CONFTEST, FAST, SLOW_CASE, SLOWER, TEST_FILE

from pytest_gpucomm.report.terminal import CURVES_HEADING, curve_line
from pytest_gpucomm.units import format_size
from pytest_gpucomm.report.plots import EXTRA
from pytest_gpucomm.units import format_gbps

# pytester's in-process runs drop the modules imported during a run, and matplotlib's compiled parts cannot
# be imported a second time in one process: import it before any run (as conftest.py does for torch)
try:
    import matplotlib.figure  # noqa: F401
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.backends.backend_svg  # noqa: F401
except ImportError:  # the tests that draw skip
    matplotlib = None

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SWEEPS = {"copy, cpu:0->cpu:1": "test_sim.py::test_copy[0->1]", "copy, cpu:1->cpu:0": "test_sim.py::test_copy[1->0]"}
FIGURES = ("sweep-test_copy_0-to-1", "sweep-test_copy_1-to-0", "matrix-test_copy-copy")


@pytest.fixture
def sim(pytester, monkeypatch):
    """The simulated sweep in the pytester folder; no SIM_ / GPUCOMM_ variable of the caller leaks in."""
    import os

    for k in [k for k in os.environ if k.startswith(("SIM_", "GPUCOMM_"))]:
        monkeypatch.delenv(k)
    for name, value in RUN_ENV.items():  # as tests/conftest.py's contract
        monkeypatch.setenv(name, value)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_sim=TEST_FILE)
    monkeypatch.setenv("SIM_RUN", "7")
    return pytester


def run(pytester, *args):
    return pytester.runpytest(*FAST, *args)


def record(pytester, monkeypatch, runs=(0, 1, 2)):
    """Save ``runs`` into the baseline ``cpu``, each a session of its own."""
    for i in runs:
        monkeypatch.setenv("SIM_RUN", str(i))
        monkeypatch.setenv("GPUCOMM_BASELINE_SESSION", f"sim-{i}")
        assert run(pytester, "--gpu-baseline=cpu", "--gpu-baseline-save").ret == 0
    monkeypatch.delenv("GPUCOMM_BASELINE_SESSION")
    monkeypatch.setenv("SIM_RUN", "7")


def slow_down(monkeypatch):
    monkeypatch.setenv("SIM_SLOW_CASE", SLOW_CASE)
    monkeypatch.setenv("SIM_SLOWER", repr(SLOWER))


def curves_block(lines):
    """The lines of the curves section (from its heading to the next summary line that is not its own)."""
    i = lines.index(CURVES_HEADING)
    block = []
    for line in lines[i + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return i, block


# -- the curves section ----------------------------------------------------------------------------------


def test_the_curves_section_follows_the_table_and_is_the_json_reports_curves(sim):
    result = run(sim, "--gpucomm-json=report.json")
    assert result.ret == 0
    doc = json.loads((sim.path / "report.json").read_text())
    lines = result.outlines
    table = max(i for i, line in enumerate(lines) if "(test_copy[1->0])" in line)
    heading, block = curves_block(lines)
    assert heading > table  # after the table
    assert [(e["label"], e["sweep"]) for e in doc["curves"]] == list(SWEEPS.items())
    expected = []
    for e in doc["curves"]:  # one line per sweep
        expected.append(f"  {curve_line(e)}")
        assert expected[-1].startswith(f"  {e['label']}: floor ") and " peak " in expected[-1]
        assert e["comparison"] is None  # no baseline
        rows = [r for r in doc["rows"] if r["devices"] == e["label"].split(", ")[1].split("->")]
        assert e["model"]["peak_gbps"] == pytest.approx(max(r["gbps"] for r in rows))
        assert e["model"]["latency_floor_s"] == pytest.approx(
            min(rows, key=lambda r: r["size_bytes"])["median_us"] * 1e-6)
    assert block == expected
    assert not any("; vs baseline:" in line for line in block)


def test_against_a_baseline_the_curves_are_compared_with_its_curves(sim, monkeypatch):
    record(sim, monkeypatch)
    slow_down(monkeypatch)
    result = run(sim, "--gpu-baseline=cpu", "--gpucomm-json=report.json")
    assert result.ret == 1  # the slowed case
    doc = json.loads((sim.path / "report.json").read_text())
    _, block = curves_block(result.outlines)
    assert block == [f"  {curve_line(e)}" for e in doc["curves"]]
    compared = [line.split("; vs baseline: ", 1)[1] for line in block]
    assert compared == [f"peak {e['comparison']['peak_ratio']:.2f}x, floor {e['comparison']['latency_ratio']:.2f}x, "
                        f"worst {format_size(min(e['comparison']['ratios'], key=lambda r: r[1])[0])} "
                        f"{min(r for _, r in e['comparison']['ratios']):.2f}x" for e in doc["curves"]]
    by_label = {e["label"]: e["comparison"] for e in doc["curves"]}
    slowed, other = by_label["copy, cpu:0->cpu:1"], by_label["copy, cpu:1->cpu:0"]
    for c in (slowed, other):
        assert c["text_short"].startswith(f"peak {c['peak_ratio']:.2f}x, latency floor {c['latency_ratio']:.2f}x")
        assert [s for s, _ in c["ratios"]] == [4096, 16384, 65536]
    # the slowed case is the sweep's largest size: its ratio there is the worst, and the peak drops with it
    assert slowed["ratios"][-1][1] == pytest.approx(1 / SLOWER, rel=0.1)
    assert slowed["text_short"].endswith(f"worst size 64KiB {slowed['ratios'][-1][1]:.2f}x")
    assert slowed["peak_ratio"] < 0.9 and 0.9 < other["peak_ratio"] < 1.1
    assert slowed["latency_ratio"] == pytest.approx(1.0, abs=0.1)


# -- the plots -------------------------------------------------------------------------------------------


def _expect_plots(result, folder, fmt):
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted(f"{stem}.{fmt}" for stem in FIGURES)
    for name in files:
        data = (folder / name).read_bytes()
        assert data.startswith(PNG_MAGIC) if fmt == "png" else b"<svg" in data[:2000]
    return files


@pytest.mark.parametrize("form", ["option", "ini", "env"])
def test_gpucomm_plots_draws_the_figures_at_the_end_of_the_run(sim, monkeypatch, form):
    pytest.importorskip("matplotlib")
    if form == "option":
        result = run(sim, "--gpucomm-plots=figs")
    elif form == "ini":
        sim.makeini("[pytest]\ngpucomm_plots = figs\n")
        result = run(sim)
    else:
        monkeypatch.setenv("GPUCOMM_PLOTS", "figs")
        result = run(sim)
    _expect_plots(result, sim.path / "figs", "png")
    assert "gpucomm: drew 3 plots into figs" in result.outlines


@pytest.mark.parametrize("form", ["option", "ini", "env"])
def test_gpucomm_plots_format_svg_writes_svg_files(sim, monkeypatch, form):
    pytest.importorskip("matplotlib")
    if form == "option":
        result = run(sim, "--gpucomm-plots=figs", "--gpucomm-plots-format=svg")
    elif form == "ini":
        sim.makeini("[pytest]\ngpucomm_plots_format = SVG\n")
        result = run(sim, "--gpucomm-plots=figs")
    else:
        monkeypatch.setenv("GPUCOMM_PLOTS_FORMAT", "svg")
        result = run(sim, "--gpucomm-plots=figs")
    _expect_plots(result, sim.path / "figs", "svg")


def test_plots_of_a_gated_run_are_drawn_against_the_baseline_as_it_was_before_the_run(sim, monkeypatch):
    pytest.importorskip("matplotlib")
    record(sim, monkeypatch, runs=(0, 1))
    result = run(sim, "--gpu-baseline=cpu", "--gpu-baseline-save", "--gpucomm-plots=figs")
    _expect_plots(result, sim.path / "figs", "png")
    assert "gpucomm: drew 3 plots into figs (against the baseline as it was before this run)" in result.outlines


@pytest.mark.parametrize("args, env, origin", [
    (["--gpucomm-plots=figs", "--gpucomm-plots-format=jpg"], {}, "'jpg' (from the command line)"),
    (["--gpucomm-plots=figs"], {"GPUCOMM_PLOTS_FORMAT": "gif"}, "'gif' (from the GPUCOMM_PLOTS_FORMAT environment"),
], ids=["option", "env"])
def test_a_bad_plots_format_is_a_usage_error_naming_the_value_and_where_it_came_from(sim, monkeypatch, args, env,
                                                                                     origin):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    result = run(sim, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"invalid --gpucomm-plots-format {origin}" in err and "expected png or svg" in err, err
    assert not (sim.path / "figs").exists()


def test_without_matplotlib_gpucomm_plots_is_a_usage_error_naming_the_extra_before_any_test_runs(sim, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: `import matplotlib` fails
    result = run(sim, "--gpucomm-plots=figs", "--gpucomm-json=report.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert re.search(re.escape("--gpucomm-plots=figs (from the command line): the plots need matplotlib, which "
                               "cannot be imported (") + r".+" + re.escape(f"): install the plots extra, {EXTRA}"),
                     err), err
    assert "passed" not in result.stdout.str() and not (sim.path / "report.json").exists()
    assert not (sim.path / "figs").exists()
    # matplotlib is only needed when plots are asked for
    result = run(sim, "--gpucomm-json=report.json")
    assert result.ret == 0 and json.loads((sim.path / "report.json").read_text())["curves"]


# -- -v: each test's figures on its line -----------------------------------------------------------------


LINE = re.compile(r"^(test_sim\.py::test_copy\[\S+\]) (PASSED|FAILED) (.*?)\s+\[\s*\d+%\]$")


def live_lines(result):
    return {m[1]: (m[2], m[3]) for m in map(LINE.match, result.outlines) if m}


def test_under_v_each_line_shows_the_figure_the_ratio_and_the_verdict(sim, monkeypatch):
    record(sim, monkeypatch, runs=(0, 1, 2))
    slow_down(monkeypatch)
    result = run(sim, "-v", "--gpu-baseline=cpu", "--gpucomm-json=report.json")
    rows = json.loads((sim.path / "report.json").read_text())["rows"]
    got = live_lines(result)
    runs = {r["test"]: len(r["baseline"].get("runs_gbps") or [1]) for r in rows}  # the verdict's ratio pools them
    assert got == {r["test"]: ("FAILED" if r["status"] == "REGRESSION" else "PASSED",
                               f"{format_gbps(r['gbps'])} GB/s {r['baseline']['ratio']:.2f}x"
                               + (f" ({runs[r['test']]} runs)" if runs[r["test"]] > 1 else "") + f" {r['status']}")
                   for r in rows}
    assert got[f"test_sim.py::test_copy[{SLOW_CASE}]"][1].endswith("REGRESSION")


def test_under_v_without_a_baseline_the_line_shows_the_figure_only_and_without_v_nothing(sim):
    result = run(sim, "-v", "--gpucomm-json=report.json")
    rows = json.loads((sim.path / "report.json").read_text())["rows"]
    assert live_lines(result) == {r["test"]: ("PASSED", f"{format_gbps(r['gbps'])} GB/s") for r in rows}
    quiet = run(sim)
    assert quiet.ret == 0 and not live_lines(quiet)
    assert not any(" GB/s" in line for line in quiet.outlines if line.startswith("test_sim.py"))


# -- pytest-html -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_with_pytest_html_the_plots_go_into_its_report(sim):
    pytest.importorskip("pytest_html")
    pytest.importorskip("matplotlib")
    result = sim.runpytest_subprocess(*HTML_PLUGINS, *FAST, "--gpucomm-plots=figs", "--html=report.html",
                                      "--self-contained-html")
    result.assert_outcomes(passed=6)
    page = (sim.path / "report.html").read_text(encoding="utf-8")
    assert page.count("<h2>gpucomm results</h2>") == 1  # the run's page, its plots the files it drew
    files = sorted((sim.path / "figs").iterdir())
    assert [p.stem for p in files] == sorted(FIGURES)
    for p in files:
        assert f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode("ascii")}"' in page
        assert f'alt="{p.stem}"' in page
    # without --gpucomm-plots, nothing is added to pytest-html's report
    plain = sim.runpytest_subprocess(*HTML_PLUGINS, *FAST, "--html=plain.html", "--self-contained-html")
    plain.assert_outcomes(passed=6)
    assert "gpucomm results" not in (sim.path / "plain.html").read_text(encoding="utf-8")


def test_a_report_that_replaces_a_file_says_so(pytester):
    """Issue 27: an output is replaced only with --force or saying so; a run writes its reports where it is told
    every run, so it says when it replaced one."""
    pytester.makepyfile("""
        def test_copy(gpu_pair, comm):
            comm.copy(gpu_pair, "4KiB")
    """)
    (pytester.path / "r.json").write_text("{}")
    result = pytester.runpytest("--gpucomm-device=cpu", "--gpucomm-min-time=0.01", "--gpucomm-json=r.json",
                                "--gpucomm-benchmark-json=b.json")
    result.stdout.fnmatch_lines(["gpucomm: wrote 2 measurements to r.json (replacing the file that was there)",
                                 "gpucomm: wrote the pytest-benchmark export to b.json"])
