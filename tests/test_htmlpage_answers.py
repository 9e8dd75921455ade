"""The HTML page answers first (issue 28): whether the run passed, the counts per verdict and the class
offsets, then the failing cases with their plots, then the rest, in tables; and it says the same whether it
comes from the run (pytest-html with ``--gpucomm-plots``), from ``gpucomm html REPORT``, from ``gpucomm html
REPORT --baseline B`` (the baseline's figures and ratios, not "-") or from ``gpucomm compare --json``'s
output (the baseline compare judged against, and its levels).

One set of runs per module (tests/simulated_copies.py: a copy sweep on a simulated clock): three runs saved
as the baseline ``cpu``; a gated run with one case slowed down (a REGRESSION, the run judged at the levels)
that writes its JSON report, its plots and pytest-html's report; an ungated run; ``gpucomm compare`` of the
gated report against the baseline.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from conftest import HTML_PLUGINS
from simulated_copies import CONFTEST, SLOW_CASE, TEST_FILE, record_baseline, run_pytest

from pytest_gpucomm import cli
from pytest_gpucomm.report import html as htmlpage

# the run draws its plots in this process (tests/inprocess.py), whose modules it drops afterwards, and
# matplotlib's compiled parts cannot be imported twice in one process: import them before any run
pytest.importorskip("matplotlib")
pytest.importorskip("pytest_html")
import matplotlib.backends.backend_agg  # noqa: E402,F401
import matplotlib.figure  # noqa: E402,F401

#: the sections the page holds, in this order (the plots last)
SECTIONS = ["headline", "failing", "results", "matrices", "curves", "environment", "plots"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("html_answers")
    (d / "conftest.py").write_text(CONFTEST)
    (d / "test_sim.py").write_text(TEST_FILE)
    base = record_baseline(d)
    gated = run_pytest(d, "--gpu-baseline=cpu", "--gpucomm-json=report.json", "--gpucomm-plots=plots",
                       "--html=pytest-html.html", "--self-contained-html", *HTML_PLUGINS, sim_run=5, slow=True)
    assert gated.returncode == 1, gated.stdout + gated.stderr  # the slowed case is a REGRESSION
    plain = run_pytest(d, "--gpucomm-json=plain.json", sim_run=6)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert cli.main(["compare", str(base), str(d / "report.json"), "--json", str(d / "compared.json"),
                     "--no-curves"], out=io.StringIO()) == 1
    return SimpleNamespace(dir=d, baseline=base, report=d / "report.json", plain=d / "plain.json",
                           compared=d / "compared.json", pytest_html=d / "pytest-html.html")


def page_of(runs, report, *extra: str) -> ET.Element:
    out = runs.dir / f"page-{len(list(runs.dir.glob('page-*')))}.html"
    assert cli.main(["html", str(report), "-o", str(out), *extra], out=io.StringIO()) == 0
    return ET.fromstring(out.read_text(encoding="utf-8"))


def text(el: ET.Element) -> str:
    return " ".join("".join(el.itertext()).split())


def section(root: ET.Element, name: str) -> ET.Element:
    found = root.find(f".//section[@id='{name}']")
    assert found is not None, name
    return found


def fragment(path) -> ET.Element:
    """The gpucomm part of pytest-html's report (its ``gpucomm`` element), which is well-formed on its own."""
    page = path.read_text(encoding="utf-8")
    start = page.index('<div class="gpucomm">')
    depth, i = 0, start
    while True:
        opening, closing = page.find("<div", i), page.find("</div>", i)
        if opening != -1 and opening < closing:
            depth, i = depth + 1, opening + 4
        else:
            depth, i = depth - 1, closing + 6
            if depth == 0:
                return ET.fromstring(page[start:i])


def test_the_page_opens_on_the_verdict_then_the_failing_case_with_its_plot(runs):
    root = page_of(runs, runs.report)
    ids = [s.get("id") for s in root.iter("section")]
    assert ids == SECTIONS
    head = section(root, "headline")
    assert head.get("class") == "headline failed" and text(head.find("p[@class='verdict']")).startswith(
        "FAILED 1 failing case of 6; 1 regression at the levels")
    chips = [text(li) for li in head.findall("ul[@class='chips']/li")]
    assert "1 REGRESSION" in chips and sum(int(c.split()[0]) for c in chips) == 6
    report = json.loads(runs.report.read_text())
    levels = report["baseline"]["levels"]
    assert [text(li) for li in head.findall("ul[@class='levels']/li")] == [
        " ".join(v["text"].split()) for group in ("classes", "bands", "cases") for v in levels[group]
        if group == "classes" or v["status"] == "regression"]  # the class offsets, then what failed at its level
    [case] = section(root, "failing").findall("article")
    [row] = [r for r in report["rows"] if SLOW_CASE in r["test"]]
    first, *rest = row["baseline"]["message"].splitlines()
    assert case.get("data-status") == "REGRESSION" and text(case.find("h3")) == f"REGRESSION {row['test']}"
    assert text(case.find("p[@class='message-head']")) == " ".join(first.split())
    assert text(case.find("p[@class='message-detail']")) == " ".join(" ".join(rest).split())
    assert [img.get("alt") for img in case.iter("img")] == ["sweep-test_copy_0-to-1"]  # its sweep's plot
    shown = [img.get("alt") for img in section(root, "plots").iter("img")]
    assert "sweep-test_copy_0-to-1" not in shown and "sweep-test_copy_1-to-0" in shown  # each plot once
    # tables, not the terminal's text; type that reads
    assert root.findall(".//pre") == [] and section(root, "curves").find("table") is not None
    assert section(root, "matrices").findall(".//table[@class='matrix']")
    assert "font-size: 15px" in root.find("head/style").text


def test_a_page_of_an_ungated_report_with_a_baseline_gives_its_figures_and_ratios(runs):
    root = page_of(runs, runs.plain, "--baseline", str(runs.baseline))
    rows = root.findall(".//table[@id='verdicts-table']/tbody/tr[@data-status]")
    plain = {r["test"]: r for r in json.loads(runs.plain.read_text())["rows"]}
    assert len(rows) == len(plain) == 6
    for tr in rows:
        cells = [text(td) for td in tr.findall("td")]
        base, ratio = float(cells[6]), float(cells[7])  # not "-": the baseline's figure, today / it
        assert ratio == pytest.approx(plain[tr.find("td").get("title")]["gbps"] / base, rel=1e-2)  # base rounded
        assert 0.9 < ratio < 1.1  # an unchanged run
    assert "baseline GB/s: cpu's" in text(section(root, "results").find("p[@class='note']"))


def test_a_page_of_compares_output_names_the_baseline_and_keeps_the_levels(runs):
    root = page_of(runs, runs.compared)
    context = text(root.find("body/header/p"))
    assert "baseline cpu (judged by gpucomm compare" in context and "no baseline" not in context
    compared = json.loads(runs.compared.read_text())["compared"]["levels"]
    items = [text(li) for li in section(root, "headline").findall("ul[@class='levels']/li")]
    assert items and items == [" ".join(v["text"].split()) for group in ("classes", "bands", "cases")
                               for v in compared[group] if group == "classes" or v["status"] == "regression"]
    assert text(section(root, "headline").find("p[@class='verdict']")).startswith("FAILED")


def test_pytest_html_holds_the_same_page_as_gpucomm_html_of_the_runs_report(runs):
    ours = page_of(runs, runs.report)
    theirs = fragment(runs.pytest_html)
    assert [s.get("id") for s in theirs.iter("section")] == SECTIONS
    for name in SECTIONS[:-1]:  # the same text: verdicts, failing case, tables (the plots are the run's files)
        assert text(section(theirs, name)) == text(section(ours, name)), name
    plots = sorted(p.stem for p in (runs.dir / "plots").glob("*.png"))
    assert sorted(img.get("alt") for img in theirs.iter("img")) == plots
    assert [img.get("alt") for img in section(theirs, "failing").iter("img")] == ["sweep-test_copy_0-to-1"]
    assert htmlpage.RESULTS_HEADING in text(theirs)
