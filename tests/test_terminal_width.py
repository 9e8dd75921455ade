"""Every line the plugin prints fits the terminal (issue 28): a representative gated run -- a copy sweep on a
simulated clock with one case slowed down (a REGRESSION, measured again, the run judged at the levels, the
curves against the baseline's, the copy matrices) and an all_reduce sweep on gloo (the single ops' tail
column, a sweep the baseline lacks) -- printed at ``COLUMNS=120`` and at 80.

pytest's own lines are pytest's to lay out: its header (``platform``, ``rootdir``, ``configfile``,
``plugins``, ``cachedir``: never wrapped), the separators, the progress lines, the failure's title line and
the short test summary (cut by pytest to the terminal, but not where ``CI`` or ``BUILD_NUMBER`` is set: on CI
its ``FAILED`` lines run to their end), and its warnings summary (other code's warnings).  Every other line
is the plugin's: the settings, hardware, max-size and baseline lines of the header, the failure's message,
and the "gpucomm results" section.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inprocess import run_inprocess
from simulated_copies import CONFTEST, FAST, SLOW_CASE, SLOWER, TEST_FILE, record_baseline

#: the lines pytest itself writes and never wraps (its header; the short test summary's, uncut on CI)
PYTEST_LINES = ("platform ", "rootdir:", "configfile:", "plugins:", "cachedir:", "FAILED ", "ERROR ")

COLLECTIVE_FILE = """
from pytest_gpucomm import sizes

@sizes("1KiB", "4KiB", "16KiB")
def test_ar(comm, process_group, size):
    comm.collective("all_reduce", process_group, size)
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("terminal")
    (d / "conftest.py").write_text(CONFTEST)
    (d / "test_sim.py").write_text(TEST_FILE)
    (d / "test_coll.py").write_text(COLLECTIVE_FILE)
    record_baseline(d)  # the copy sweep's three runs, each a session of its own
    return d


def gated_run(folder: Path, columns: int, *extra: str):
    env = {"SIM_RUN": "5", "SIM_SLOW_CASE": SLOW_CASE, "SIM_SLOWER": repr(SLOWER), "COLUMNS": str(columns)}
    proc = run_inprocess(folder, ["test_sim.py", "test_coll.py", *FAST, "--gpucomm-tail-time=0.01",
                                  "--gpu-baseline=cpu", f"--gpucomm-json=report-{columns}.json", *extra],
                         env=env, drop=("SIM_", "GPUCOMM_"))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the slowed case is a REGRESSION
    return proc.stdout.splitlines(), json.loads((folder / f"report-{columns}.json").read_text())


def outside_warnings(lines: list[str]) -> list[str]:
    """The lines outside pytest's warnings summary: other code's warnings, in pytest's layout (on the GPU
    machine its editable install made pytest warn that it could not rewrite pytest_gpucomm.plugin's asserts,
    a line of 160 columns)."""
    out, inside = [], False
    for line in lines:
        if line.startswith("=") and " warnings summary " in line:
            inside = True
        elif inside and line.startswith("-- Docs:"):
            inside = False
        elif not inside:
            out.append(line)
    return out


@pytest.mark.parametrize("columns", [120, 80])
def test_every_line_of_a_gated_run_fits_the_terminal_and_nothing_is_printed_twice(folder, columns):
    lines, report = gated_run(folder, columns)
    wide = [line for line in outside_warnings(lines) if len(line) > columns and not line.startswith(PYTEST_LINES)]
    assert wide == [], "\n".join(wide)
    results = lines.index(next(line for line in lines if "gpucomm results" in line))
    summary = lines[results + 1:]
    # nothing twice: the header's hardware, max-size, baseline and environment lines are not repeated below
    for head in ("gpucomm hardware:", "gpucomm max-size:", "gpucomm baseline:", "gpucomm environment"):
        assert sum(line.startswith(head) for line in lines) == 1, head
    assert not any(line.startswith("hardware:") for line in summary)
    # the compact table: each sweep's sizes together, in size order, under its heading
    for heading, sizes in (("copy, cpu:0->cpu:1 (test_copy[0->1])", ["4 KiB", "16 KiB", "64 KiB"]),
                           ("all_reduce in place, 2 ranks (gloo), float32 (test_ar)", ["1 KiB", "4 KiB", "16 KiB"])):
        i = summary.index(heading)
        assert [" ".join(line.split()[:2]) for line in summary[i + 1:i + 4]] == sizes
    assert summary[summary.index("copy, cpu:0->cpu:1 (test_copy[0->1])") + 3].rstrip().endswith("REGRESSION")
    # the curves: a line per sweep (wrapped where the terminal is narrower), what is known only
    curves = "\n".join(summary)
    assert "cannot tell" not in curves and "not known" not in curves and "latency-bandwidth model" not in curves
    # the REGRESSION's first line: what, where and how much, in about 100 characters; the detail below it
    [message] = [r["baseline"]["message"] for r in report["rows"] if r["status"] == "REGRESSION"
                 and r["baseline"]["status"] == "REGRESSION" and SLOW_CASE in r["test"]]
    first = message.splitlines()[0]
    assert len(first) <= 100 and first.startswith("REGRESSION: copy on cpu:0->cpu:1 at 64 KiB: "), first
    drop = float(first.split(": ")[2].split("%")[0])
    assert drop == pytest.approx((1 - 1 / SLOWER) * 100, abs=4) and first.endswith(" GB/s")
    assert all(line.startswith("  ") for line in message.splitlines()[1:])
    at = lines.index(first if len(first) <= columns else first[:first.rindex(" ", 0, columns + 1)])
    assert lines[at + 1].startswith(" ")  # in the terminal too: the first line, then the detail indented


def test_the_full_table_with_v_lists_every_row_with_its_test_id(folder):
    lines, report = gated_run(folder, 120, "-v")
    summary = lines[lines.index(next(line for line in lines if "gpucomm results" in line)) + 1:]
    assert summary[0].startswith("gpucomm gate: ")  # how much of the run the gate judged, first
    head = next(i for i, line in enumerate(summary) if line.split()[:3] == ["test", "op", "devices"])
    assert all(line.startswith(("gpucomm gate:", "    ")) for line in summary[:head])  # then the table
    summary = summary[head:]
    for row in report["rows"]:  # one line each, in the order of the compact table's sweeps
        assert sum(f" {row['test'].split('::')[-1]} " in f" {line} " for line in summary) == 1


def test_a_line_is_wrapped_at_spaces_never_inside_a_figure_or_a_word():
    from pytest_gpucomm.text import DEFAULT_WIDTH, clamp_width, fit, wrap

    line = ("  copy, cuda:1->cuda:0: floor 7.12 us, peak 1.74 GB/s at 64 KiB, still rising; vs baseline: worst 4 KiB "
            "0.99x (65,536 bytes) in /a/very/long/path/that/is/one/word/and/longer/than/the/width/of/this/terminal")
    out = wrap(line, 60)
    assert out[0].startswith("  copy,") and all(x.startswith("      ") for x in out[1:])  # under the line's indent
    assert " ".join(out).split() == line.split()  # every word kept, in order
    for figure in ("7.12 us", "1.74 GB/s", "64 KiB", "4 KiB", "65,536 bytes"):
        assert any(figure in x for x in out), figure
    assert [len(x) <= 60 for x in out] == [not x.strip().startswith("/a/very") for x in out]  # a long word whole
    assert wrap("short", 60) == ["short"] and fit(["a\nb"], 60) == ["a", "b"]
    assert clamp_width(None) == clamp_width(0) == DEFAULT_WIDTH == 120 and clamp_width(20) == 60
