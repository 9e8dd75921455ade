"""The ``gpucomm`` command (pytest_gpucomm.cli, regate, saved): ``compare`` gives the verdicts of the pytest
run that made the report, replaying its re-measures; against another baseline, another report or other
settings it names what changed; ``show``, ``plot`` and ``html`` print and write what they say; bad input
exits 2 with a message naming the file or the value; ``python -m pytest_gpucomm`` and the console script
run it; ``baselines`` and ``env`` are reachable through it.

One set of runs per module (tests/simulated_copies.py: a copy sweep timed by a simulated clock, so the
verdicts are known): three runs saved as the baseline ``cpu``, then a run gated against it with one case
slowed down 30 % (a REGRESSION, measured again before its verdict), then an unchanged run; both gated runs
write a JSON report.  The tests read those files and write edited copies of them.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulated_copies import SLOW_CASE, record_baseline, run_pytest, write_files

from pytest_gpucomm import cli
from pytest_gpucomm.report.terminal import CURVES_HEADING, curve_line
from pytest_gpucomm.cli.regate import OFFLINE_NOTE
from pytest_gpucomm.report import plots
from pytest_gpucomm.report.saved import REPORT_VERSION

REPLAYED = " (replayed from the report)"
#: examples of the report fuzz
FUZZ_EXAMPLES = 150
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_runs")
    write_files(d)
    base = record_baseline(d)
    slow = run_pytest(d, "--gpu-baseline=cpu", "--gpucomm-json=slow.json", sim_run=5, slow=True)
    clean = run_pytest(d, "--gpu-baseline=cpu", "--gpucomm-json=clean.json", sim_run=6)
    return SimpleNamespace(dir=d, baseline=base, slow=d / "slow.json", slow_run=slow, clean=d / "clean.json",
                           clean_run=clean)


def gpucomm(*argv) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main([str(a) for a in argv], out=out)
    return code, out.getvalue()


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def scaled_baseline(runs, tmp_path, factor: float, drop: str = "") -> Path:
    """A copy of the baseline claiming ``factor`` x its bandwidth, without the cases whose key has ``drop``."""
    doc = load(runs.baseline)
    for key in [k for k in doc["cases"] if drop and drop in k]:
        del doc["cases"][key]
    for case in doc["cases"].values():
        for run in case["runs"]:
            run["samples_gbps"] = [x * factor for x in run["samples_gbps"]]
            run["summary"]["median_gbps"] *= factor
    return write(tmp_path / f"scaled-{factor:g}.json", doc)


def short(test_id: str) -> str:
    return test_id.split("::")[-1]


def changed_lines(text: str) -> dict[str, tuple[str, str]]:
    """The ``  <test>: run <status> -> now <status>`` lines of compare's output."""
    return {m[1]: (m[2], m[3]) for m in re.finditer(r"^  (\S+::\S+): run (.+) -> now (.+)$", text, re.M)}


# -- compare: the run's verdicts -------------------------------------------------------------------------


def test_the_runs_themselves_regress_on_the_slowed_case_only(runs):
    """What the comparisons below lean on: the slowed run failed on the gate, and only on its slowed case,
    which it measured again; the unchanged run passed."""
    assert runs.slow_run.returncode == 1, runs.slow_run.stdout + runs.slow_run.stderr
    assert runs.clean_run.returncode == 0, runs.clean_run.stdout + runs.clean_run.stderr
    failing = {row["test"]: row["baseline"]["status"] for row in load(runs.slow)["rows"]
               if row["baseline"]["status"] == "REGRESSION"}
    assert list(failing) == [f"test_sim.py::test_copy[{SLOW_CASE}]"]
    [row] = [r for r in load(runs.slow)["rows"] if r["test"] in failing]
    assert row["baseline"]["remeasured"] >= 1 and len(row["baseline"]["remeasures"]) == row["baseline"]["remeasured"]
    assert all("measurement" in a for a in row["baseline"]["remeasures"])


@pytest.mark.parametrize("which", ["slow", "clean"])
def test_compare_against_the_runs_baseline_gives_the_runs_verdicts_replaying_its_remeasures(runs, tmp_path, which):
    report, run = getattr(runs, which), getattr(runs, f"{which}_run")
    out = tmp_path / "compared.json"
    code, text = gpucomm("compare", runs.baseline, report, "--json", out)
    # exit 1 exactly when the pytest run failed on the gate
    assert code == run.returncode, text
    original, compared = load(report), load(out)
    assert [r["test"] for r in compared["rows"]] == [r["test"] for r in original["rows"]]
    for was, now in zip(original["rows"], compared["rows"]):
        assert now["status"] == was["baseline"]["status"] == was["status"], was["test"]
        # the whole verdict is the run's: its figures, interval, re-measures; the texts say they were replayed
        a, b = was["baseline"], now["baseline"]
        assert "offline" not in b
        assert b["message"].replace(REPLAYED, "") == a["message"], was["test"]
        assert [x["how"] for x in b["remeasures"]] == [x["how"] + REPLAYED for x in a["remeasures"]]
        assert [x["measurement"] for x in b["remeasures"]] == [x["measurement"] for x in a["remeasures"]]
        assert {k: v for k, v in b.items() if k not in ("message", "remeasures")} == \
            {k: v for k, v in a.items() if k not in ("message", "remeasures")}
    assert compared["compared"]["kind"] == "baseline" and compared["compared"]["against"] == str(runs.baseline)
    assert OFFLINE_NOTE not in text and "verdicts differ from the run's" not in text
    n_failed = sum(1 for r in original["rows"] if r["baseline"]["status"] == "REGRESSION")
    levels = original["baseline"]["levels"]
    assert compared["compared"]["levels"] == levels
    n_levels = sum(v["status"] == "regression" for g in ("classes", "bands", "cases") for v in levels[g])
    # the word is the run's own judgement (its JSON's verdict): a run that judged fewer than half its cases is
    # NOT JUDGED in both, never "passed"
    word = {"failed": "FAILED", "passed": "passed", "not judged": "NOT JUDGED"}[original["verdict"]["word"]]
    last = " ".join(text[text.rindex("gpucomm compare: "):].split())
    said = (f"gpucomm compare: {word} ({n_failed} failing verdicts of {len(original['rows'])} rows, {n_levels} "
            "regressions at the levels)")
    if word == "NOT JUDGED":  # then how many were judged and what to record: more runs of the baseline
        v = original["verdict"]
        assert last.startswith(said + f"; {v['judged']} of {v['cases']} cases judged; record runs on other boots or "
                               "days"), last
    else:
        assert last == said
    counts = Counter(r["baseline"]["status"] for r in original["rows"])
    assert "gpucomm verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) in text
    assert f"the report {report} against the baseline cpu ({runs.baseline})" in text.splitlines()[0]


def test_compare_finds_a_baseline_by_name_in_the_baseline_dir_its_environment_variable_or_the_current_folder(
        runs, monkeypatch, tmp_path):
    expected, _ = gpucomm("compare", runs.baseline, runs.slow, "--no-curves")
    assert expected == 1
    monkeypatch.delenv("GPUCOMM_BASELINE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./baselines here
    code, _ = gpucomm("compare", "cpu", runs.slow, "--no-curves")
    assert code == 2
    assert gpucomm("compare", "cpu", runs.slow, "--baseline-dir", runs.baseline.parent, "--no-curves")[0] == expected
    monkeypatch.setenv("GPUCOMM_BASELINE_DIR", str(runs.baseline.parent))
    assert gpucomm("compare", "cpu", runs.slow, "--no-curves")[0] == expected
    monkeypatch.delenv("GPUCOMM_BASELINE_DIR")
    monkeypatch.chdir(runs.dir)
    code, text = gpucomm("compare", "cpu", runs.slow, "--no-curves")
    assert code == expected and "against the baseline cpu (baselines/cpu.json)" in text


def test_compare_against_a_baseline_claiming_half_the_bandwidth_finds_only_the_slowed_case_slower_than_its_class(
        runs, tmp_path):
    # every case is twice the baseline, and the slowed one only 1.4x: its residual is 30 % below its class's
    half = scaled_baseline(runs, tmp_path, 0.5)
    out = tmp_path / "compared.json"
    code, text = gpucomm("compare", half, runs.slow, "--json", out, "--no-curves")
    assert code == 1, text
    rows = load(out)["rows"]
    expected = {r["test"]: "REGRESSION" if SLOW_CASE in r["test"] else "improved" for r in rows}
    assert {r["test"]: r["status"] for r in rows} == expected
    [slowed] = [r["baseline"] for r in rows if SLOW_CASE in r["test"]]
    assert slowed["message"].startswith("REGRESSION (case residual) copy, cpu:0->cpu:1, 64 KiB: 3")
    assert [v["level"] for v in slowed["levels"]] == ["case"]
    assert "gpucomm REGRESSION (case residual) copy, cpu:0->cpu:1, 64 KiB: " in text
    run = {r["test"]: r["baseline"]["status"] for r in load(runs.slow)["rows"]}
    assert changed_lines(text) == {t: (s, expected[t]) for t, s in run.items() if s != expected[t]}
    assert f"{len(changed_lines(text))} verdicts differ from the run's" in text
    assert load(out)["compared"]["against"] == str(half)


def test_compare_where_the_gate_wants_re_measures_the_report_lacks_judges_on_what_it_holds_and_says_so(
        runs, tmp_path):
    triple = scaled_baseline(runs, tmp_path, 3.0)  # every case of the unchanged run is now a third of the baseline
    out = tmp_path / "compared.json"
    code, text = gpucomm("compare", triple, runs.clean, "--json", out, "--no-curves")
    assert code == 1
    rows = load(out)["rows"]
    assert [r["status"] for r in rows] == ["REGRESSION"] * len(rows)
    # said on the verdict's own line (the message's first), not after the lines under it
    assert all(r["baseline"]["offline"] == OFFLINE_NOTE
               and r["baseline"]["message"].splitlines()[0].endswith(f"({OFFLINE_NOTE})") for r in rows)
    assert all(r["baseline"]["remeasured"] == 0 for r in rows)  # the unchanged run re-measured nothing
    notes = text.split("notes:\n", 1)[1].splitlines()[:len(rows)]
    assert notes == [f"  {r['test']}: {OFFLINE_NOTE}" for r in rows]
    lines = text.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith("FAILED ")]
    # the test, then its message: the first line (what, where, how much), then the detail, indented
    assert [lines[i] for i in failed] == [f"FAILED {r['test']}:" for r in rows]
    assert [lines[i + 1] for i in failed] == [f"  {r['baseline']['message'].splitlines()[0]}" for r in rows]


def test_compare_against_another_report_takes_it_as_a_one_run_baseline(runs, tmp_path):
    out = tmp_path / "compared.json"
    code, text = gpucomm("compare", runs.slow, runs.clean, "--json", out, "--no-curves")
    assert code == 0, text  # the unchanged run is faster than the slowed one, nowhere slower
    assert " ".join(text.split("\nhardware: ")[0].split()) == (
        f"gpucomm compare: a judgement made now of the report {runs.clean} against the report {runs.slow} (taken as "
        "a one-run baseline), not the run's stored verdicts")
    doc = load(out)
    assert doc["compared"]["kind"] == "report" and doc["compared"]["against"] == str(runs.slow)
    now = {r["test"]: r["status"] for r in doc["rows"]}
    run = {r["test"]: r["baseline"]["status"] for r in load(runs.clean)["rows"]}
    assert changed_lines(text) == {t: (run[t], now[t]) for t in now if now[t] != run[t]}
    slowed = f"test_sim.py::test_copy[{SLOW_CASE}]"
    row = doc["rows"][[r["test"] for r in doc["rows"]].index(slowed)]["baseline"]
    # 1.43 x the slowed run's bandwidth; but a one-run baseline of the CPU variants: no spread is known (no file of
    # this hardware, no prior for CPUs), so no verdict either way, and the row says the spread is assumed
    assert now[slowed] == "not gated" and row["ratio"] > 1.3 and row["spread_assumed"] == "session and run"
    # the other way round: the slowed case is 30 % slower on one run of today, no evidence on an assumed spread
    code, text = gpucomm("compare", runs.clean, runs.slow, "--no-curves")
    assert code == 0 and "gpucomm verdicts: 6 not gated" in text, text


def test_compare_that_could_judge_fewer_than_half_the_cases_ends_not_judged_never_passed(runs):
    # a one-run baseline of the CPU variants: every verdict "not gated" (no spread known), exit 0 as the plugin's
    # run; the last line said "passed" (seen on an H100 with nccl-tests files: 0 of 18 judged)
    code, text = gpucomm("compare", runs.clean, runs.slow, "--no-curves")
    last = " ".join(text[text.rindex("gpucomm compare: "):].split())
    assert code == 0 and last.startswith("gpucomm compare: NOT JUDGED (0 failing verdicts of 6 rows"), last
    # the reference is a report, one run: what to record is a baseline, not more runs into that report
    assert last.endswith("(0 failing verdicts of 6 rows, 0 regressions at the levels); 0 of 6 cases judged; record a "
                         "baseline in several sessions (pytest ... --gpu-baseline=NAME --gpu-baseline-save) and "
                         "compare with it"), last


def test_a_report_taken_as_a_baseline_leaves_out_rows_of_figure_0_and_says_how_many(runs, tmp_path):
    """A collective of one rank has busbw 0 (reports of 1-GPU runs written before such tests were skipped):
    nothing to compare with, so those rows are not in the one-run baseline, and the first line says so."""
    doc = load(runs.slow)
    zeroed = doc["rows"][0]["test"]
    doc["rows"][0].update(kind="collective", busbw_factor=0.0)  # its figure is now a busbw of 0 GB/s
    old = write(tmp_path / "zero.json", doc)
    out = tmp_path / "compared.json"
    code, text = gpucomm("compare", old, runs.clean, "--json", out, "--no-curves")
    assert " ".join(text.split("\nhardware: ")[0].split()) == (
        f"gpucomm compare: a judgement made now of the report {runs.clean} against the report {old} (taken as a "
        f"one-run baseline; 1 of the report's {len(doc['rows'])} rows left out: their figure is 0 GB/s (a collective "
        "of one rank has busbw 0), nothing to compare with), not the run's stored verdicts")
    statuses = {r["test"]: r["status"] for r in load(out)["rows"]}
    assert statuses[zeroed] == "new" and list(statuses.values()).count("new") == 1


def test_a_report_whose_every_row_has_figure_0_is_refused_as_a_baseline_saying_why(runs, tmp_path, capsys):
    doc = load(runs.slow)
    for row in doc["rows"]:
        row.update(kind="collective", busbw_factor=0.0)
    zeros = write(tmp_path / "zeros.json", doc)
    code, text = gpucomm("compare", zeros, runs.clean, "--no-curves")
    assert code == 2 and text == ""
    assert capsys.readouterr().err == (
        f"gpucomm: error: {zeros}: cannot take the report as a baseline: every one of its {len(doc['rows'])} rows has "
        "a figure of 0 GB/s (a collective of one rank has busbw 0), nothing to compare with\n")


def test_compare_settings_override_the_runs_tolerance_and_strictness(runs, tmp_path):
    slowed = f"test_sim.py::test_copy[{SLOW_CASE}]"
    out = tmp_path / "compared.json"
    code, text = gpucomm("compare", runs.baseline, runs.slow, "--tolerance", "0.5", "--json", out, "--no-curves")
    assert code == 0, text  # a 30 % drop is within a 50 % tolerance
    doc = load(out)
    assert doc["compared"]["settings"]["tolerance"] == 0.5
    now = {r["test"]: r["status"] for r in doc["rows"]}
    run = {r["test"]: r["baseline"]["status"] for r in load(runs.slow)["rows"]}
    assert changed_lines(text) == {t: (run[t], now[t]) for t in now if now[t] != run[t]}
    assert changed_lines(text)[slowed][0] == "REGRESSION" and now[slowed] in ("ok", "not gated")
    assert all(r["baseline"]["tolerance"] == 0.5 for r in doc["rows"])
    # a baseline lacking a case: "new", which fails only with --strict, as --gpu-baseline-strict (and so do
    # the cases the baseline's three runs cannot gate)
    gone = "test_sim.py::test_copy[4KiB-1->0]"
    missing = scaled_baseline(runs, tmp_path, 1.0, drop=short(gone))
    code, text = gpucomm("compare", missing, runs.clean, "--json", out, "--force", "--no-curves")
    statuses = {r["test"]: r["status"] for r in load(out)["rows"]}
    assert code == 0 and statuses[gone] == "new"
    assert {s for t, s in statuses.items() if t != gone} <= {"ok", "not gated", "improved"}
    code, text = gpucomm("compare", missing, runs.clean, "--strict", "--json", out, "--force", "--no-curves")
    strict = {r["test"]: r["status"] for r in load(out)["rows"]}
    assert code == 1 and strict[gone] == "NEW"
    assert {t: s for t, s in strict.items() if t != gone} == \
        {t: s.upper() if s == "not gated" else s for t, s in statuses.items() if t != gone}
    assert f"FAILED {gone}:\n  NEW (--gpu-baseline-strict): copy on cpu:1->cpu:0 at 4 KiB: not in the baseline\n" \
        f"    no entry for {gone}|copy|4096B|-|ws1 in {missing}\n" in text


def test_compare_shows_the_curves_against_the_baseline_unless_told_not_to(runs):
    code, text = gpucomm("compare", runs.baseline, runs.slow)
    sweeps = load(runs.slow)["curves"]
    assert CURVES_HEADING in text.splitlines()
    assert text.count("; vs baseline: peak ") == len(sweeps) == 2
    code, text = gpucomm("compare", runs.baseline, runs.slow, "--no-curves")
    assert CURVES_HEADING not in text and "vs baseline" not in text


# -- show ------------------------------------------------------------------------------------------------


def test_show_prints_the_table_the_counts_the_run_and_the_curves(runs):
    report = load(runs.slow)
    code, text = gpucomm("show", runs.slow, "-v")
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("gpucomm show: the run's stored verdicts (") and lines[1] == f"report: {runs.slow}"
    for row in report["rows"]:  # -v: one table line per row, with its test id and verdict
        [line] = [ln for ln in lines if f" {short(row['test'])} " in f" {ln} "]
        assert line.rstrip().endswith(row["status"])
    compact = gpucomm("show", runs.slow)[1].splitlines()
    for sweep in ("copy, cpu:0->cpu:1 (test_copy[0->1])", "copy, cpu:1->cpu:0 (test_copy[1->0])"):
        i = compact.index(sweep)  # the sweep's heading, then its sizes in order, each with its verdict
        assert [ln.split()[:2] for ln in compact[i + 1:i + 4]] == [["4", "KiB"], ["16", "KiB"], ["64", "KiB"]]
    counts = Counter(r["status"] for r in report["rows"])
    assert "gpucomm verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) in lines
    assert f"judged in the run against {runs.baseline} (6 comparisons)" in lines
    # the run's levels: the slowed case is slower than its class
    assert any(ln.startswith("gpucomm REGRESSION (case residual) copy, cpu:0->cpu:1, 64 KiB: ") for ln in lines)
    heading = lines.index(CURVES_HEADING)
    assert heading > max(i for i, ln in enumerate(lines) if short(report["rows"][-1]["test"]) in ln)
    for entry in report["curves"]:  # the report's own section, with the comparison the run made
        assert f"  {curve_line(entry)}" in lines[heading:] and "; vs baseline: peak " in curve_line(entry)


def test_show_with_a_baseline_compares_the_curves_with_it_and_no_curves_leaves_them_out(runs, tmp_path):
    half = scaled_baseline(runs, tmp_path, 0.5)
    code, text = gpucomm("show", runs.slow, "--baseline", half)
    assert code == 0
    peaks = re.findall(r"; vs baseline: peak ([0-9.]+)x", text)
    assert len(peaks) == 2 and all(1.3 < float(p) < 2.7 for p in peaks)  # about twice the half baseline
    code, text = gpucomm("show", runs.slow, "--no-curves")
    assert code == 0 and CURVES_HEADING not in text and "vs baseline" not in text
    assert "gpucomm verdicts: " in text


# -- plot and html ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_plot_writes_each_figure_and_names_the_files(runs, tmp_path, fmt):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "figs"
    argv = ["plot", runs.slow, "--baseline", runs.baseline, "-o", folder] + (["--format", fmt] if fmt != "png" else [])
    code, text = gpucomm(*argv)
    assert code == 0
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("wrote "))
    named = [Path(line.strip()) for line in lines[at + 1:]]
    assert lines[at] == f"wrote {len(named)} plots to {folder}"
    # first, whose verdicts and which baseline's runs: the CPU runs of the file, as the gate fits it
    assert " ".join(" ".join(lines[:at]).split()).startswith(
        f"gpucomm plot: the run's stored verdicts (failed: 1 failing case of 6; 1 regression at the levels); drawn "
        f"against the baseline cpu ({runs.baseline}), its 3 runs of this machine's shape")
    assert sorted(named) == sorted(folder.iterdir())
    # a figure per sweep and the copies' matrix
    assert sorted(p.name for p in named) == sorted(f"{stem}.{fmt}" for stem in (
        "sweep-test_copy_0-to-1", "sweep-test_copy_1-to-0", "matrix-test_copy-copy"))
    for p in named:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) if fmt == "png" else b"<svg" in data[:2000]


def test_html_writes_one_page_holding_the_verdicts_and_the_plots(runs, tmp_path):
    pytest.importorskip("matplotlib")
    import xml.etree.ElementTree as ET

    page = tmp_path / "out" / "page.html"
    code, text = gpucomm("html", runs.slow, "--baseline", runs.baseline, "-o", page)
    assert code == 0 and text.startswith("gpucomm html: the run's stored verdicts (") and text.endswith(
        f"\nwrote {page}\n")
    body = page.read_text(encoding="utf-8")
    root = ET.fromstring(body)
    cells = ["".join(td.itertext()) for td in root.iter("td")]
    for row in load(runs.slow)["rows"]:
        assert row["test"] in cells or short(row["test"]) in cells
    assert cells.count("REGRESSION") == 1 and cells.count("not gated") == 5
    assert body.count('src="data:image/png;base64,') == 3
    code, _ = gpucomm("html", runs.slow, "-o", page, "--no-plots", "--force")
    assert code == 0 and "data:image" not in page.read_text(encoding="utf-8")


# -- bad input -------------------------------------------------------------------------------------------


def _newer(runs, tmp_path):
    doc = load(runs.slow)
    doc["version"] = 99
    return write(tmp_path / "newer.json", doc)


def _not_json(runs, tmp_path):
    p = tmp_path / "cut.json"
    text = runs.slow.read_text()
    p.write_text(text[:text.index('"rows"')])  # cut short between two keys
    return p


BAD = [
    ("missing-report", lambda r, t: ["show", t / "missing.json"],
     lambda r, t: f"{t / 'missing.json'}: report file does not exist"),
    ("baseline-as-report", lambda r, t: ["show", r.baseline],
     lambda r, t: f"{r.baseline}: not a pytest-gpucomm report: schema 'pytest-gpucomm-baseline' (a baseline file?)"),
    ("newer-report", lambda r, t: ["compare", r.baseline, _newer(r, t)],
     lambda r, t: f"{t / 'newer.json'}: report version 99 is newer than this pytest-gpucomm reads ({REPORT_VERSION})"),
    ("cut-report", lambda r, t: ["compare", r.baseline, _not_json(r, t)],
     lambda r, t: f"{t / 'cut.json'}: the file is cut short"),
    ("unknown-name", lambda r, t: ["compare", "mi301", r.slow, "--baseline-dir", r.baseline.parent],
     lambda r, t: f"no baseline named 'mi301' in {r.baseline.parent}, {SHIPPED}; available baselines: cpu, h100, "
                  "h200, mi300x"),
    ("missing-baseline", lambda r, t: ["plot", r.slow, "--baseline", t / "gone.json", "-o", t / "figs"],
     lambda r, t: f"{t / 'gone.json'}: baseline or report file does not exist"),
    ("cut-baseline", lambda r, t: ["html", r.slow, "--baseline", _not_json(r, t), "-o", t / "p.html"],
     lambda r, t: f"{t / 'cut.json'}: the file is cut short"),
    ("tolerance", lambda r, t: ["compare", r.baseline, r.slow, "--tolerance", "1.5"],
     lambda r, t: "invalid --tolerance 1.5: expected a fraction in (0, 1)"),
    ("alpha", lambda r, t: ["compare", r.baseline, r.slow, "--alpha", "0"], lambda r, t: "invalid --alpha 0.0"),
    ("tail-tolerance", lambda r, t: ["compare", r.baseline, r.slow, "--tail-tolerance", "-1"],
     lambda r, t: "invalid --tail-tolerance -1.0"),
]


@pytest.mark.parametrize("argv, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_a_message_naming_the_file_or_the_value(runs, tmp_path, capsys, argv, message):
    code, text = gpucomm(*argv(runs, tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and text == ""
    assert err.startswith("gpucomm: error: ") and message(runs, tmp_path) in err, err
    assert not (tmp_path / "figs").exists() and not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("argv, message", [
    (["--tail-tolerance", "500"], "invalid --tail-tolerance 500.0: expected a number from 0 to below 99"),
    (["--tail-tolerance", "inf"], "invalid --tail-tolerance inf: expected a number from 0 to below 99"),
    (["--tail-tolerance", "nan"], "invalid --tail-tolerance nan: expected a number from 0 to below 99"),
    (["--tolerance", "0"], "invalid --tolerance 0.0: expected a fraction in (0, 1), e.g. 0.05"),
    (["--alpha", "inf"], "invalid --alpha inf: expected a number above 0 and below 1"),
], ids=["tail-500", "tail-inf", "tail-nan", "tolerance-0", "alpha-inf"])
def test_compare_refuses_a_value_out_of_its_range_before_reading_any_file(tmp_path, capsys, argv, message):
    """The plugin's own range checks (``checks``), run before the baseline and the report are read: neither
    file exists here, and the message is about the value, not the files."""
    code, text = gpucomm("compare", tmp_path / "missing-baseline.json", tmp_path / "missing-report.json", *argv)
    err = capsys.readouterr().err
    assert code == 2 and text == ""
    assert err.startswith("gpucomm: error: ") and message in err and "does not exist" not in err, err


def _limited_gpucomm(*argv) -> subprocess.CompletedProcess:
    """``python -m pytest_gpucomm`` in a process of at most 2 GiB of memory and 60 s: a reader that blocks on
    a FIFO or reads /dev/zero without end fails the test instead of hanging or exhausting the machine."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run([sys.executable, "-m", "pytest_gpucomm", *map(str, argv)], capture_output=True, text=True,
                          timeout=60, preexec_fn=limit)


SPECIAL = [
    ("fifo-report", lambda r, f: ["show", f], "is a FIFO, not a regular file: not a report file"),
    ("fifo-compared-with", lambda r, f: ["compare", f, r.slow],
     "is a FIFO, not a regular file: not a baseline or report file"),
    ("fifo-compared", lambda r, f: ["compare", r.baseline, f], "is a FIFO, not a regular file: not a report file"),
    ("fifo-baseline-option", lambda r, f: ["show", r.slow, "--baseline", f],
     "is a FIFO, not a regular file: not a baseline or report file"),
    ("dev-zero-report", lambda r, f: ["show", "/dev/zero"], "is a character device, not a regular file: not a report"),
]


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="no FIFOs or /dev/zero")
@pytest.mark.parametrize("argv, message", [s[1:] for s in SPECIAL], ids=[s[0] for s in SPECIAL])
def test_a_fifo_or_a_device_given_as_a_file_is_refused_at_once_with_exit_2(runs, tmp_path, argv, message):
    """Issue 27: these hung (the FIFO) or read until MemoryError (/dev/zero); the plugin's baseline reader
    refused them already, and every file is now read by the same one."""
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    proc = _limited_gpucomm(*argv(runs, fifo))
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("gpucomm: error: ") and message in first, proc.stderr


@pytest.mark.parametrize("argv", [["compare", "b.json", "r.json", "--tolerance", "abc"], ["plot", "r.json", "-o", "d",
                                  "--format", "jpg"], ["show"], [], ["frobnicate"]],
                         ids=["not-a-number", "format", "no-report", "no-command", "unknown-command"])
def test_usage_errors_exit_2_with_argparses_usage(capsys, argv):
    assert gpucomm(*argv)[0] == 2
    assert "usage: gpucomm" in capsys.readouterr().err


def test_plot_without_matplotlib_exits_2_naming_the_extra(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    code, _ = gpucomm("plot", runs.slow, "-o", tmp_path / "figs")
    err = capsys.readouterr().err
    # the extra, as pytest-gpucomm was installed here (a checkout's: pip install -e '<checkout>[plots]')
    assert code == 2 and err.startswith("gpucomm: error: ") and plots.EXTRA in err and "[plots]" in plots.EXTRA
    # the page is still written, with a note instead of the plots
    code, _ = gpucomm("html", runs.slow, "-o", tmp_path / "p.html")
    assert code == 0 and "[plots]" in (tmp_path / "p.html").read_text(encoding="utf-8")


# -- the command itself ----------------------------------------------------------------------------------


def test_python_m_pytest_gpucomm_runs_the_command_with_its_exit_codes(runs, tmp_path):
    def run(*argv):
        return subprocess.run([sys.executable, "-m", "pytest_gpucomm", *map(str, argv)], capture_output=True,
                              text=True, timeout=120)

    helped = run("--help")
    assert helped.returncode == 0, helped.stderr
    for command in ("show", "compare", "plot", "html", "baselines", "env"):
        assert command in helped.stdout
    assert "Exit codes: 0 done; 1 compare found a failing verdict; 2 bad input or usage." in helped.stdout
    compared = run("compare", runs.baseline, runs.slow, "--no-curves")
    assert compared.returncode == 1 and "gpucomm compare: FAILED" in compared.stdout
    missing = run("show", tmp_path / "missing.json")
    assert missing.returncode == 2 and missing.stderr.startswith("gpucomm: error: ")


def test_the_console_script_is_cli_main():
    tomllib = pytest.importorskip("tomllib")
    doc = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert doc["project"]["scripts"]["gpucomm"] == "pytest_gpucomm.cli:main"


def test_show_and_compare_need_neither_torch_nor_matplotlib_nor_pytest(runs):
    """A report made on the GPU machine is read where no GPU stack is (saved.py reads it without torch), and the
    gate judges it without the plugin's host (pytest)."""
    code = ("import io, sys; from pytest_gpucomm.cli import main; "
            f"codes = [main(['show', {str(runs.slow)!r}], out=io.StringIO()), "
            f"main(['compare', {str(runs.baseline)!r}, {str(runs.slow)!r}], out=io.StringIO())]; "
            "print(codes, *(name in sys.modules for name in ('torch', 'matplotlib', 'pytest')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["[0,", "1]", "False", "False", "False"], proc.stdout + proc.stderr


def test_baselines_and_env_are_commands_of_gpucomm(runs, capsys):
    code, text = gpucomm("baselines", "list", "--baseline-dir", runs.baseline.parent)
    assert code == 0
    [line] = [ln for ln in text.splitlines() if ln.startswith("cpu ")]
    assert line.split()[:5] == ["cpu", "measured", "6", "3", "3"]
    code, text = gpucomm("baselines", "show", "mi301", "--baseline-dir", runs.baseline.parent)
    assert code == 2 and "mi301" in capsys.readouterr().err
    code, text = gpucomm("env", "--baseline", runs.baseline)
    assert code == 0 and "kind: cpu" in text.splitlines()  # GPUCOMM_DEVICE=cpu, as the tests pin it
    code, text = gpucomm("env", "--device", "cpu")
    assert code == 0 and "kind: cpu" in text.splitlines()
    code, text = gpucomm("env", "--device", "tpu")
    assert code == 2 and "invalid device 'tpu' (from --device): expected auto, gpu or cpu" in capsys.readouterr().err


def test_a_report_cut_inside_a_string_is_named_as_cut_short(tmp_path, capsys):
    cut = tmp_path / "cut.json"
    cut.write_text('{"format": "pytest-gpucomm-report", "version": 1, "rows": [{"test": "suites/test_x.py::t')
    assert cli.main(["show", str(cut)]) == 2
    err = capsys.readouterr().err
    assert f"gpucomm: error: {cut}: the file is cut short (truncated): the string that starts at line 1 column" in err
    assert "never ends" in err


# -- two single reports of one H200 (recorded on the device machine, benchmarks/data) ---------------------

H200_REPORTS = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
SHIPPED = Path(__file__).resolve().parent.parent / "baselines"


def _slowed_report(src: Path, dst: Path, factor: float) -> Path:
    """A copy of a saved report whose every sample is ``factor`` x the bandwidth (times / factor)."""
    doc = load(src)
    for row in doc["rows"]:
        row["samples_s"] = [t / factor for t in row["samples_s"]]
    return write(dst, doc)


def test_two_single_reports_borrow_the_shipped_files_spreads_pass_an_a_a_and_fail_a_uniform_10_percent_drop(
        tmp_path, monkeypatch):
    before = H200_REPORTS / "h200_1gpu_boot1_run1_report.json"
    after = H200_REPORTS / "h200_1gpu_boot1_run2_report.json"
    code, text = gpucomm("compare", before, after, "--baseline-dir", SHIPPED, "--no-curves")
    assert code == 0, text
    assert re.search(r"^gpucomm baseline: 20 cases of one session borrow their spreads from "
                     rf"{re.escape(str(SHIPPED / 'h200.json'))} \(\d+ runs in \d+ sessions\)$", text, re.M), text
    assert "gpucomm compare: offline: no case is measured again; the report's own re-measures are replayed" in text
    assert any(ln.startswith("gpucomm sensitivity: ") for ln in text.splitlines())
    code, text = gpucomm("compare", before, _slowed_report(after, tmp_path / "slow.json", 0.9), "--baseline-dir",
                         SHIPPED, "--no-curves")
    assert code == 1 and "REGRESSION" in text, text
    # the shipped file is found after the user's folder, which has none
    code, text = gpucomm("compare", before, after, "--baseline-dir", tmp_path, "--no-curves")
    assert code == 0 and f"borrow their spreads from {SHIPPED / 'h200.json'}" in text, text
    # without the same hardware's file the host<->device cases borrow from the corpus prior, and the header says so
    monkeypatch.setattr("pytest_gpucomm.gate.shipped.shipped_folder", lambda part: None)
    code, text = gpucomm("compare", before, after, "--baseline-dir", tmp_path, "--no-curves")
    assert code == 0 and re.search(r"^gpucomm baseline: 20 cases of one session borrow their spreads from the corpus "
                                   r"prior of \d machines", text, re.M), text



def test_a_one_run_ab_judges_its_class_offsets_on_the_borrowed_spreads_and_fails_a_10_percent_small_class_drop(
        tmp_path):
    """Issue 45 item 3: the class offsets of a one-run baseline borrow their spreads from the same file as its
    cases (baselines/h200.json), so a 10 % drop of the host<->device copies up to 1 MiB alone fails there."""
    before = H200_REPORTS / "h200_1gpu_boot1_run1_report.json"
    doc = load(H200_REPORTS / "h200_1gpu_boot1_run2_report.json")
    for row in doc["rows"]:
        if row["size_bytes"] <= 1 << 20:
            row["samples_s"] = [t / 0.9 for t in row["samples_s"]]
    slow = write(tmp_path / "small.json", doc)
    code, text = gpucomm("compare", before, slow, "--baseline-dir", SHIPPED, "--no-curves", "--json",
                         tmp_path / "out.json")
    assert code == 1, text
    assert re.search(r"^gpucomm REGRESSION \(class offset\) host<->device copies <= 1 MiB: 9\.\d% slower", text,
                     re.M), text
    classes = {v["name"]: v for v in load(tmp_path / "out.json")["compared"]["levels"]["classes"]}
    small, large = classes["host<->device copies <= 1 MiB"], classes["host<->device copies > 1 MiB"]
    assert not small["assumed"] and small["status"] == "regression"
    assert not large["assumed"] and large["status"] == "ok"

# -- a fuzz over report documents: whatever is in the file, bad input exits 2 naming the file -------------

_GARBAGE = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(),
                     st.text(max_size=4), st.just([]), st.just({}), st.lists(st.integers(-2, 2), max_size=3),
                     st.dictionaries(st.text(max_size=3), st.integers(-2, 2), max_size=2))


def _mutate(doc, data) -> str:
    """Replace (or delete) the value at a random JSON path of ``doc``; returns the path."""
    node, path = doc, "$"
    while True:
        keys = list(range(len(node))) if isinstance(node, list) else sorted(node) if isinstance(node, dict) else []
        if not keys:
            break
        key = data.draw(st.sampled_from(keys))
        child = node[key]
        if not isinstance(child, (dict, list)) or not child or data.draw(st.integers(0, 3)) == 0:
            if isinstance(node, dict) and data.draw(st.integers(0, 5)) == 0:
                del node[key]
                return f"{path}[{key!r}] deleted"
            node[key] = data.draw(_GARBAGE)
            return f"{path}[{key!r}] = {node[key]!r}"
        node, path = child, f"{path}[{key!r}]"
    return path


@pytest.fixture(scope="module")
def fuzz_files(runs):
    """(the report, the baseline): paths only, so that a falsifying example prints short."""
    return runs.slow, runs.baseline


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])
@given(data=st.data())
def test_whatever_a_report_holds_gpucomm_exits_0_1_or_2_never_with_a_traceback(fuzz_files, tmp_path, capsys, data):
    """Issue 27: a garbage field of a report (a list for a fingerprint, a zero sample time, a string for a
    curve) gave a traceback and exit 1, compare's "regression found"; every field the readers use is now
    checked on read, and the message names the file and the JSON path."""
    report, baseline = fuzz_files
    doc = load(report)
    where = _mutate(doc, data)
    p = tmp_path / "fuzzed.json"
    p.write_text(json.dumps(doc))
    for argv in (["show", p], ["compare", baseline, p]):
        try:
            code, _ = gpucomm(*argv)
        except Exception as e:  # noqa: BLE001 - the failure names the mutation
            raise AssertionError(f"{argv[0]} with {where}: {type(e).__name__}: {e}") from e
        err = capsys.readouterr().err
        assert code in ((0, 2) if argv[0] == "show" else (0, 1, 2)), (argv[0], where, code, err)
        if code == 2:
            assert err.startswith(f"gpucomm: error: {p}: "), (argv[0], where, err)
