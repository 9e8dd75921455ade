"""The HTML page of a saved report (pytest_gpucomm.report.html): it parses as XML, holds every row's test id,
status and verdict message, the verdict counts, the curves' lines, one inline PNG per figure, the
environment diff; it escapes every text; it is written without matplotlib, with a note naming the extra;
headless Chromium reads it (where installed); and the pytest-html hook puts a run's plots into
pytest-html's report.

One real run per module on CPU (a copy sweep and an all_reduce sweep on gloo): a run saved as the baseline
``cpu``, then a run gated against it, saved as a JSON report; the tests edit copies of the two documents.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from collections import Counter

import pytest

from conftest import HTML_PLUGINS
from inprocess import run_inprocess

from pytest_gpucomm.report import html as htmlpage, html_parts as htmlpage_parts, plots
from pytest_gpucomm.plugin.html_plots import PytestHtmlPlots
from pytest_gpucomm.analysis.curves import sweeps_from_report
from pytest_gpucomm.report.saved import REPORT_VERSION, ReportError
from small_suite import SMALL_SUITE  # noqa: E402

TEST_FILE = SMALL_SUITE
RUN = ["test_small.py", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
       "--gpucomm-device=cpu", "--gpucomm-min-time=0.02", "--gpucomm-tail-time=0.02", "--gpu-baseline=cpu"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(report, baseline) of a CPU run gated against the baseline ``cpu`` that a first run saved."""
    d = tmp_path_factory.mktemp("html_run")
    (d / "test_small.py").write_text(TEST_FILE)
    for extra in (["--gpu-baseline-save"], ["--gpucomm-json=report.json"]):
        proc = run_inprocess(d, RUN + extra)
        # the gated run may find a regression against a one-run baseline on a loaded runner (exit 1): the page
        # shows whatever the verdicts are
        assert proc.returncode in ((0,) if "--gpu-baseline-save" in extra else (0, 1)), proc.stdout + proc.stderr
    return json.loads((d / "report.json").read_text()), json.loads((d / "baselines" / "cpu.json").read_text())


@pytest.fixture
def report(recorded):
    return copy.deepcopy(recorded[0])


@pytest.fixture
def baseline(recorded):
    return copy.deepcopy(recorded[1])


@pytest.fixture(scope="module")
def page(recorded):
    """The page of the recorded report against its baseline, with plots (drawn once: a few seconds)."""
    pytest.importorskip("matplotlib")
    report, baseline = recorded
    return htmlpage.html_page(report, baseline)


def _parse(text: str) -> ET.Element:
    """The page as XML: fails on an element left open, a stray ``<`` or ``&``, an HTML-only entity."""
    return ET.fromstring(text)


def _text(el: ET.Element) -> str:
    return "".join(el.itertext())


def _body_rows(root: ET.Element) -> list[ET.Element]:
    """The table's rows of the report's rows (not the sweeps' heading rows)."""
    return root.findall(".//table[@id='verdicts-table']/tbody/tr[@data-status]")


def _by_test(root: ET.Element) -> dict[str, ET.Element]:
    """The table's rows by their test id (the test cell's title; it shows the id without its file)."""
    return {tr.find("td[@class='test']").get("title"): tr for tr in _body_rows(root)}


def _verdict(tr: ET.Element) -> str:
    """The verdict cell's whole message: the folded part where it is folded, else the cell."""
    detail = tr.find("td[@class='message']/details/div")
    return _text(detail if detail is not None else tr.find("td[@class='message']"))


def _cells(tr: ET.Element) -> list[ET.Element]:
    return tr.findall("td")


HEADERS = list(htmlpage_parts.HEADERS)


# -- the page's content --------------------------------------------------------------------------------


def test_the_page_is_one_well_formed_document_without_scripts_or_outside_references(page):
    root = _parse(page)
    assert page.startswith("<!DOCTYPE html>") and root.tag == "html"
    assert root.find("head/style") is not None and root.find("head/meta[@charset='utf-8']") is not None
    assert root.findall(".//script") == [] and root.findall(".//link") == []
    for el in root.iter():  # nothing the browser would fetch: every src is a data URI, no href at all
        assert "href" not in el.attrib, el.attrib
        if "src" in el.attrib:
            assert el.attrib["src"].startswith("data:image/png;base64,"), el.attrib["src"][:80]


def test_the_header_names_the_hardware_the_date_and_the_baseline(recorded, page):
    report, baseline = recorded
    header = _text(_parse(page).find("body/header"))
    fp = report["fingerprint"]
    assert plots.context_line(report, baseline) in header
    assert f"CPU {fp['cpu']}, {fp['cpu_cores']} cores, gloo, host {fp['host']}" in header
    assert f"{fp['date'][:10]} {fp['date'][11:16]}" in header and "baseline cpu (1 run)" in header


def test_the_table_has_a_row_per_report_row_with_its_test_id_figures_status_and_verdict(recorded, page):
    report, baseline = recorded
    root = _parse(htmlpage.html_page(report, with_plots=False))  # the run's own verdicts and figures
    rows = _by_test(root)
    assert len(rows) == len(report["rows"]) == 9 and len(_body_rows(root)) == 9
    for row in report["rows"]:
        tr = rows[row["test"]]
        cells = {h: _text(td) for h, td in zip(HEADERS, _cells(tr))}
        assert cells["test"] == row["test"].split("::")[-1]
        assert cells["status"] == tr.get("data-status") == row["status"]
        verdict = row["baseline"]
        flat = " ".join(verdict["message"].split())  # a REGRESSION's message has lines; XML attributes fold them
        assert " ".join(_verdict(tr).split()) == flat != ""
        assert " ".join(tr.find("td[@class='status']").get("title").split()) == flat
        runs = len(verdict.get("runs_gbps") or [1])  # the verdict's ratio, saying when it pools several runs
        assert cells["ratio"] == f"{verdict['ratio']:.3f}" + (f" ({runs} runs)" if runs > 1 else "")
        assert float(cells["baseline GB/s"]) == pytest.approx(verdict["baseline_gbps"], rel=0.01)
        assert float(cells["GB/s"]) == pytest.approx(row["gbps"], rel=0.01)
        assert float(cells["p50 us"]) == pytest.approx(row["p50_us"], rel=0.01)
        assert float(cells["p99 us"]) == pytest.approx(row["p99_us"], rel=0.01)
        # the single ops' tail where the row has them (the collectives), empty for a copy
        assert cells["1-op tail"].startswith("p99 ") == (row["kind"] == "collective"), cells["1-op tail"]
    # grouped by sweep: a heading row (op, devices or world, test) before the sizes of each sweep, in size order
    groups = [(_text(tb.find("tr[@class='sweep']/th")), [_cells(tr)[1].text for tr in tb.findall("tr[@data-status]")])
              for tb in root.findall(".//table[@id='verdicts-table']/tbody")]
    assert [h for h, _ in groups] == ["copy, cpu:0->cpu:1 (test_copy[0->1])", "copy, cpu:1->cpu:0 (test_copy[1->0])",
                                      groups[2][0]] and groups[2][0].startswith("all_reduce"), groups
    assert [sizes for _, sizes in groups] == [["4 KiB", "16 KiB", "64 KiB"]] * 2 + [["1 KiB", "4 KiB", "16 KiB"]]
    assert "2 ranks (gloo)" in groups[2][0] and groups[2][0].endswith("(test_ar)")


def test_rows_are_coloured_by_status_and_the_counts_line_counts_each_status(report):
    statuses = ["REGRESSION", "TAIL", "FLOOR", "FAIL", "ok", "new", "not gated", "improved", "NEW"]
    for row, status in zip(report["rows"], statuses):
        row["status"] = status
    report["rows"][4]["baseline"] = None  # a row without a verdict (a threshold only)
    report["rows"][4]["checks"] = ["bandwidth >= 1 GB/s: ok (7.08 GB/s)"]
    root = _parse(htmlpage.html_page(report, with_plots=False))
    got = {tr.get("data-status"): tr.get("class") for tr in _body_rows(root)}
    assert got == {"REGRESSION": "status-fail", "TAIL": "status-fail", "FLOOR": "status-fail", "FAIL": "status-fail",
                   "ok": "status-pass", "improved": "status-pass", "new": "status-info", "not gated": "status-info",
                   "NEW": "status-fail"}
    ok_row = [tr for tr in _body_rows(root) if tr.get("data-status") == "ok"][0]
    assert _text(_cells(ok_row)[-1]) == "bandwidth >= 1 GB/s: ok (7.08 GB/s)"
    assert [_text(c) for c in _cells(ok_row)[6:8]] == ["-", "-"]  # no baseline figure, no ratio
    counts = _text(root.find(".//p[@class='counts']"))
    expected = ", ".join(f"{n} {s}" for s, n in sorted(Counter(statuses).items()))
    assert counts.startswith(f"9 rows; verdicts: {expected}"), counts


def test_the_page_lists_the_bands_and_cases_that_failed_at_their_level_first_then_the_class_offsets(report):
    levels = report["baseline"]["levels"]  # the recorded run's own levels
    assert levels["classes"], levels
    root = _parse(htmlpage.html_page(report, with_plots=False))
    items = [_text(li) for li in root.findall(".//ul[@class='levels']/li")]
    # no band or case failed in the recorded run (a class that failed on a loaded runner comes first)
    assert sorted(items) == sorted(htmlpage_parts.unrepeated(c["text"]) for c in levels["classes"])
    failed = {**levels["classes"][0], "level": "band", "status": "regression", "text": "REGRESSION (op band) x <b>"}
    report["baseline"]["levels"]["bands"] = [failed]
    root = _parse(htmlpage.html_page(report, with_plots=False))
    # what failed at its level comes first, before the class offsets that did not
    assert [_text(li) for li in root.findall(".//ul[@class='levels']/li")][0] == "REGRESSION (op band) x <b>"


def test_status_class_follows_whether_the_status_fails_the_test():
    assert ([htmlpage.status_class(s) for s in ("REGRESSION", "TAIL", "FLOOR", "FAIL", "NOT GATED", "NEW")]
            == ["fail"] * 6)
    assert [htmlpage.status_class(s) for s in ("ok", "floor-ok", "improved")] == ["pass"] * 3
    assert [htmlpage.status_class(s) for s in ("new", "not gated", "measured", "no such status")] == ["info"] * 4


def _curve_rows(root: ET.Element) -> list[list[str]]:
    return [[_text(td) for td in tr.findall("td")] for tr in root.findall(".//table[@id='curves-table']/tbody/tr")]


def test_the_curves_section_is_a_table_of_each_sweeps_curve_and_its_comparison_with_the_baseline(recorded, page):
    from pytest_gpucomm.report.document import ReportDocument
    from pytest_gpucomm.report.terminal import curve_cells, curve_entries
    from pytest_gpucomm.analysis.baseline_figures import BaselineFigures

    report, baseline = recorded
    sweeps = sweeps_from_report(report)
    assert len(sweeps) == 3  # the two copy directions and all_reduce
    root = _parse(page)
    assert root.findall(".//pre") == []  # a table, not the terminal's text
    heads = [h.text for h in root.findall(".//table[@id='curves-table']/thead/tr/th")]
    assert heads == list(htmlpage_parts.CURVE_HEADERS)
    doc = ReportDocument.from_json(report)
    entries = curve_entries(doc, BaselineFigures.of(baseline))
    assert _curve_rows(root) == [[curve_cells(e)[h] for h in htmlpage_parts.CURVE_HEADERS] for e in entries]
    assert all(row[-1].startswith("peak ") for row in _curve_rows(root))  # every sweep is in the baseline
    # without a baseline document: the report's own section, with the comparisons the run made
    alone = _curve_rows(_parse(htmlpage.html_page(report, with_plots=False)))
    assert alone == [[curve_cells(c.data)[h] for h in htmlpage_parts.CURVE_HEADERS] for c in doc.curves]


def test_the_copy_matrices_are_tables_of_what_the_terminal_prints_and_absent_without_copies(recorded, page):
    from pytest_gpucomm.analysis.matrices import copy_matrices, figure_text, ratio_text, shown_matrices

    report, baseline = recorded
    [m] = shown_matrices(copy_matrices(report["rows"], baseline))  # the run copies both ways: a 2 x 2 matrix
    size = m.fullest_size()
    section = _parse(page).find(".//section[@id='matrices']")
    gbps, ratios = section.findall(".//table[@class='matrix']")
    for table, text in ((gbps, figure_text), (ratios, ratio_text)):
        assert [th.text for th in table.findall("thead/tr/th")][1:] == m.destinations
        cells = [[_text(c) for c in tr] for tr in table.findall("tbody/tr")]
        assert cells == [[s] + [text(m.cells[size][(s, d)]) if (s, d) in m.cells[size] else "-"
                                for d in m.destinations] for s in m.sources]
    collectives = dict(report, rows=[r for r in report["rows"] if r["kind"] != "copy"])
    assert _parse(htmlpage.html_page(collectives, with_plots=False)).find(".//section[@id='matrices']") is None


def test_a_sweep_the_baseline_lacks_is_said_to_be_missing_from_it(report, baseline):
    for name in [k for k in baseline["cases"] if "test_ar" in k]:
        del baseline["cases"][name]
    rows = _curve_rows(_parse(htmlpage.html_page(report, baseline, with_plots=False)))
    assert [row[0].split(",")[0] for row in rows] == ["copy", "copy", "all_reduce in place"]
    assert [row[-1].split(" ")[0] for row in rows] == ["peak", "peak", "not"] and rows[2][-1] == "not in the baseline"


def test_every_figure_is_inline_as_a_png_with_its_label_as_alt_text(recorded, page):
    report, baseline = recorded
    labels = [f.get_label() for f in plots.all_figures(report, baseline)]
    imgs = _parse(page).findall(".//img")  # a failing case's beside it, the others in the plots section
    assert len(labels) == 5 and sorted(img.get("alt") for img in imgs) == sorted(labels)
    for img in imgs:
        src = img.get("src")
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_the_environment_diff_of_the_run_is_a_table_of_what_changed(report):
    report["baseline"]["environment_diff"] = [["driver", "550.54", "560.35"], ["nic_firmware", None, "28.39"]]
    root = _parse(htmlpage.html_page(report, with_plots=False))
    rows = [[_text(td) for td in tr.findall("td")] for tr in root.findall(".//table[@id='environment-table']/tbody/tr")]
    assert rows == [["driver", "550.54", "560.35"], ["nic_firmware", "(absent)", "28.39"]]
    report["baseline"]["environment_diff"] = []
    env = _parse(htmlpage.html_page(report, with_plots=False)).find(".//section[@id='environment']")
    assert "Same as when the baseline was recorded" in _text(env)
    del report["baseline"]
    assert _parse(htmlpage.html_page(report, with_plots=False)).find(".//section[@id='environment']") is None


def test_every_text_is_escaped(report):
    evil = "suites/x.py::test_a[<script>alert('x')</script>&amp;\"]"
    report["rows"][0]["test"] = evil
    report["rows"][0]["baseline"]["message"] = "drop </td></tr><b>bold</b> & more"
    report["baseline"]["environment_diff"] = [["<k>", "a&b", '"q"']]
    title = "CI <nightly> & \"friends\""
    text = htmlpage.html_page(report, title=title, with_plots=False)
    root = _parse(text)
    assert "<script" not in text and "<b>" not in text and "<k>" not in text
    assert root.findall(".//script") == [] and root.findall(".//b") == []
    tr = _by_test(root)[evil]
    assert _text(_cells(tr)[0]) == evil.split("::")[-1]
    assert _text(_cells(tr)[-1]) == "drop </td></tr><b>bold</b> & more"
    assert root.find("head/title").text == title == _text(root.find("body/header/h1"))
    assert [_text(td) for td in root.findall(".//table[@id='environment-table']/tbody/tr/td")] == ["<k>", "a&b", '"q"']


def test_a_dollar_in_the_fingerprint_leaves_the_page_and_its_plots_whole(report, baseline, page):
    """A host name or model holding ``$x^$`` made matplotlib's mathtext fail the plots, and with them the page
    (test_plots.py checks that the figures draw such a text as written)."""
    pytest.importorskip("matplotlib")
    text = "$x^$ and an unbalanced $"
    report["fingerprint"].update(cpu=text, host=text)
    root = _parse(htmlpage.html_page(report, baseline))
    assert f"CPU {text}, " in _text(root.find("body/header")) and f"host {text}; " in _text(root.find("body/header"))
    imgs = root.findall(".//section[@id='plots']//img")
    # as many plots as the same run's page without the dollars (how many depends on the recorded run's figures:
    # a real CPU run, whose single ops may be too few for a latency plot on a loaded machine)
    assert len(imgs) == len(_parse(page).findall(".//section[@id='plots']//img")) >= 1
    assert all(img.get("src").startswith("data:image/png;base64,") for img in imgs)


def test_without_matplotlib_the_page_is_written_with_a_note_naming_the_extra(report, baseline, monkeypatch):
    def unavailable():
        raise plots.PlotsUnavailable(f"the gpucomm plots need matplotlib, which cannot be imported (test): "
                                     f"install the plots extra, {plots.EXTRA}")

    monkeypatch.setattr(plots, "_mpl", unavailable)
    root = _parse(htmlpage.html_page(report, baseline))
    note = root.find(".//section[@id='plots']/p[@id='plots-unavailable']")
    assert note is not None and plots.EXTRA in _text(note) and "matplotlib" in _text(note)
    assert root.findall(".//img") == []
    assert len(_body_rows(root)) == len(report["rows"])  # the rest of the page is there
    assert len(_curve_rows(root)) == 3


def test_with_plots_false_the_plots_section_is_left_out(report):
    root = _parse(htmlpage.html_page(report, with_plots=False))
    assert root.find(".//section[@id='plots']") is None and root.findall(".//img") == []


def test_write_html_writes_the_page_atomically_and_keeps_the_old_one_on_bad_input(report, baseline, tmp_path):
    target = tmp_path / "out" / "page.html"
    assert htmlpage.write_html(target, report, with_plots=False) == target
    assert target.read_text(encoding="utf-8") == htmlpage.html_page(report, with_plots=False)
    before = target.read_bytes()
    with pytest.raises(ReportError, match="not a pytest-gpucomm report: schema 'pytest-gpucomm-baseline'"):
        htmlpage.write_html(target, baseline, with_plots=False)  # a baseline where a report is expected
    assert target.read_bytes() == before and sorted(p.name for p in target.parent.iterdir()) == ["page.html"]


def test_a_report_given_as_the_baseline_is_refused_naming_what_was_found(report):
    with pytest.raises(ValueError, match="not a pytest-gpucomm baseline: format 'pytest-gpucomm-report'"):
        htmlpage.html_page(report, report, with_plots=False)
    with pytest.raises(ReportError, match=f"report version {REPORT_VERSION + 1} is newer than this pytest-gpucomm"):
        htmlpage.html_page(dict(report, version=REPORT_VERSION + 1), with_plots=False)


# -- in a browser --------------------------------------------------------------------------------------


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium test: no chromium, chromium-browser or "
                    "google-chrome on PATH (Debian's package 'chromium' provides it)")
def test_headless_chromium_reads_the_table_and_the_images(recorded, page, tmp_path):
    report, baseline = recorded
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    proc = subprocess.run([_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom", path.as_uri()],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    dom = proc.stdout
    assert '<table id="verdicts-table">' in dom
    assert dom.count("<tr class=\"status-") == len(report["rows"])
    assert dom.count('src="data:image/png;base64,') == len(plots.all_figures(report, baseline))


# -- pytest-html ---------------------------------------------------------------------------------------


def _png(width: int = 2, height: int = 2) -> bytes:
    """A small valid PNG (grey pixels), written by hand so the test needs no matplotlib."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (PNG_MAGIC + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


HTML_CONFTEST = """
import shutil
from pathlib import Path

import pytest

from pytest_gpucomm.plugin.html_plots import PytestHtmlPlots

HERE = Path(__file__).parent
PLOTS = HERE / "plots"


def pytest_configure(config):
    config.pluginmanager.register(PytestHtmlPlots(lambda: sorted(PLOTS.glob("*.png"))), "gpucomm-html-plots")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    # as the gpucomm plugin writes its plots (--gpucomm-plots): at session finish, tryfirst
    PLOTS.mkdir(exist_ok=True)
    for name in ("sweep-a.png", "matrix-b.png"):
        shutil.copy(HERE / "source.png", PLOTS / name)
"""


def test_the_pytest_html_hook_puts_the_plots_written_at_session_finish_into_its_report(pytester):
    pytest.importorskip("pytest_html")
    png = _png()
    pytester.makeconftest(HTML_CONFTEST)
    (pytester.path / "source.png").write_bytes(png)
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess(*HTML_PLUGINS, "-p", "no:cacheprovider", "--html=report.html",
                                           "--self-contained-html")
    result.assert_outcomes(passed=1)
    text = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert "<h2>gpucomm plots</h2>" in text
    b64 = base64.b64encode(png).decode("ascii")
    assert text.count(f'src="data:image/png;base64,{b64}"') == 2
    assert 'alt="sweep-a"' in text and 'alt="matrix-b"' in text


def test_the_pytest_html_hook_is_optional_without_pytest_html(pytester):
    pytester.makeconftest(HTML_CONFTEST)
    (pytester.path / "source.png").write_bytes(_png())
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:html")
    result.assert_outcomes(passed=1)
    assert "PluginValidationError" not in result.stdout.str() + result.stderr.str()


def test_the_pytest_html_fragment_names_a_file_it_cannot_show(tmp_path):
    (tmp_path / "a.png").write_bytes(_png())
    (tmp_path / "notes.txt").write_text("x")
    plugin = PytestHtmlPlots(lambda: [tmp_path / "a.png", tmp_path / "gone.png", tmp_path / "notes.txt"])
    root = ET.fromstring(plugin.fragment())
    assert [img.get("alt") for img in root.iter("img")] == ["a"]
    notes = [_text(p) for p in root.iter("p")]
    assert notes[0].startswith(f"{tmp_path / 'gone.png'}: cannot be read")
    assert notes[1] == f"{tmp_path / 'notes.txt'}: not an image this report shows (PNG or SVG)"
    summary: list[str] = []
    plugin.pytest_html_results_summary(prefix=[], summary=summary, postfix=[], session=None)
    assert summary == [plugin.fragment()]
    empty = ET.fromstring(PytestHtmlPlots(lambda: []).fragment())
    assert "No plot was written" in _text(empty)
