"""The HTML page answers first (issue 28): whether the run passed, the counts per verdict and the class
offsets, then the failing cases with their plots, then the rest, in tables; and it says the same whether it
comes from the run (pytest-html with ``--gpucomm-plots``), from ``gpucomm html REPORT``, from ``gpucomm html
REPORT --baseline B`` (the baseline's figures and ratios, not "-") or from ``gpucomm compare --json``'s
output (the baseline compare judged against, and its levels).

One set of runs per module (tests/simulated_copies.py: a copy sweep on a simulated clock): three runs saved
as the baseline ``cpu``; a gated run with one case slowed down (a REGRESSION, the run judged at the levels)
that writes its JSON report, its plots and pytest-html's report; an ungated run (no baseline: not judged, and said so
in the terminal, the JSON, JUnit and the page); ``gpucomm compare`` of the gated report against the baseline.
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
from pytest_gpucomm.report.html_parts import unrepeated

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
    plain = run_pytest(d, "--gpucomm-json=plain.json", "--junitxml=plain.xml", sim_run=6)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert cli.main(["compare", str(base), str(d / "report.json"), "--json", str(d / "compared.json"),
                     "--no-curves"], out=io.StringIO()) == 1
    return SimpleNamespace(dir=d, baseline=base, report=d / "report.json", plain=d / "plain.json",
                           compared=d / "compared.json", pytest_html=d / "pytest-html.html",
                           plain_run=plain)


def failures_first(levels) -> list[str]:
    """The headline's level bullets: every regression at a level first (classes, bands, cases), then the class
    offsets that are not one."""
    groups = ("classes", "bands", "cases")
    failed = [v for g in groups for v in levels[g] if v["status"] == "regression"]
    return [" ".join(unrepeated(v["text"]).split()) for v in failed + [v for v in levels["classes"] if v not in failed]]


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
    assert [text(li) for li in head.findall("ul[@class='levels']/li")] == failures_first(levels)
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
    assert root.findall(".//pre") == [] and section(root, "curves").find(".//table") is not None
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
    assert items and items == failures_first(compared)
    assert text(section(root, "headline").find("p[@class='verdict']")).startswith("FAILED")
    # whose verdicts the page shows: compare's, made against its file, not the run's
    assert text(section(root, "headline").find("p[@class='counts source']")) == (
        f"Shown: the verdicts gpucomm compare made against {runs.baseline}.")
    assert text(section(page_of(runs, runs.report, "--no-plots"), "headline").find("p[@class='counts source']")) == (
        "Shown: the run's stored verdicts.")


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


# -- a run without a baseline is not judged, never passed (issue 47) ---------------------------------------


def test_a_run_without_a_baseline_ends_on_not_judged_in_the_terminal_not_on_a_bare_passed(runs):
    lines = runs.plain_run.stdout.splitlines()
    final = [x for x in lines if x.startswith("6 passed")]  # pytest's final line (-q: without its = rule)
    assert final and final[-1].startswith("6 passed, 6 gpucomm cases not judged (no baseline) in "), lines[-4:]
    tail = " ".join(lines[lines.index(final[-1]) + 1:])
    assert tail.startswith("gpucomm: NOT JUDGED: no baseline: 6 cases measured, none judged; record one: pytest ... "
                           "--gpu-baseline=NAME --gpu-baseline-save"), tail
    assert runs.plain_run.returncode == 0  # said, not failed: measuring without a baseline is a use of its own


def test_a_run_without_a_baseline_says_not_judged_in_its_json_and_junit(runs):
    verdict = json.loads(runs.plain.read_text())["verdict"]
    assert (verdict["word"], verdict["why"], verdict["cases"], verdict["judged"]) == ("not judged", "no baseline", 6, 0)
    props = {p.get("name"): p.get("value") for p in ET.parse(runs.dir / "plain.xml").getroot().iter("property")
             if p.get("name", "").startswith("gpucomm.") and p.get("name").count(".") == 1}
    assert props["gpucomm.not_judged"] == "yes" and props["gpucomm.verdict"] == verdict["text"]
    assert (props["gpucomm.judged"], props["gpucomm.cases"]) == ("0", "6")


def test_the_page_of_a_run_without_a_baseline_is_grey_not_judged_with_the_command_to_record_one(runs):
    root = page_of(runs, runs.plain, "--no-plots")
    head = section(root, "headline")
    assert head.get("class") == "headline not-judged" and head.get("data-verdict") == "not judged"
    assert text(head.find("p[@class='verdict']")) == "NOT JUDGED no baseline: 6 cases measured, none judged"
    assert "pytest ... --gpu-baseline=NAME --gpu-baseline-save" in text(head.find("p[@class='record']"))
    assert "PASSED" not in text(root) and "none failing" not in text(root)
    style = root.find("head/style").text
    assert ".headline.not-judged { background: #eeeeee; border-left: 8px solid #757575; }" in style
    # against a baseline file given to the page, the statuses are still the run's: not judged
    root = page_of(runs, runs.plain, "--no-plots", "--baseline", str(runs.baseline))
    assert section(root, "headline").get("data-verdict") == "not judged"


# -- the page draws the baseline that judged the run (issue 47) ---------------------------------------------


def test_a_later_page_of_a_gated_report_draws_the_baseline_the_run_was_judged_against_without_baseline(runs):
    report = json.loads(runs.report.read_text())
    drawn = report["baseline"]["drawn"]
    judged = {r["baseline"]["case"] for r in report["rows"] if r.get("baseline")}
    assert set(drawn["cases"]) == judged and len(drawn["runs"]) == 3  # the three recorded runs
    assert all("samples_gbps" not in run for c in drawn["cases"].values() for run in c["runs"])  # small
    out = io.StringIO()
    page = runs.dir / "later.html"
    assert cli.main(["html", str(runs.report), "-o", str(page)], out=out) == 0
    assert "drawn against the baseline cpu as the run saw it (3 runs of this machine's shape, stored with the " \
           "report)" in " ".join(out.getvalue().split())
    root = ET.fromstring(page.read_text(encoding="utf-8"))
    assert text(root.find("body/header/p")).endswith("; baseline cpu (3 runs)")
    labels = [img.get("alt") for img in root.iter("img")]
    assert "sweep-test_copy_0-to-1" in labels
