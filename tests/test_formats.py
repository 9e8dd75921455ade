"""Formats that last (issue 27): a report and a baseline file of every layout ever written
(``tests/data/formats/``, each written by the code of its time) is read by ``gpucomm show``, ``compare``,
``plot``, ``html`` and the plugin's gate as today's document (``files.formats``: upgrade on read); a newer
version is refused naming both versions; a baseline upgraded on read is written back as today's version by
the next save, its earlier runs unchanged, and never by a read alone."""

from __future__ import annotations

import ast
import copy
import io
import json
import re
import sys
from pathlib import Path

import pytest

from pytest_gpucomm import cli
from pytest_gpucomm.files import formats
from pytest_gpucomm.files.formats import (BASELINE_VERSION, REPORT_VERSION, FormatError, upgrade_baseline,
                                          upgrade_report)
from pytest_gpucomm.cli.regate import OFFLINE_NOTE
from pytest_gpucomm.gate.store import SCHEMA_VERSION, load_baseline, read_document
from pytest_gpucomm.report import saved
from pytest_gpucomm.vocab import Status

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "formats"
REPORTS = sorted(DATA.glob("report_*.json"))
BASELINES = sorted(DATA.glob("baseline_*.json"))
WORDS = {s.value for s in Status}
COPY_CASE = "suites/test_copies.py::test_peer_copy[4KiB-0->1]"
FAST = ["-p", "no:cacheprovider", "-p", "no:randomly", "--gpucomm-device=cpu", "--gpucomm-min-time=0.01"]


def gpucomm(*argv) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main([str(a) for a in argv], out=out), out.getvalue()


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def layout(path: Path) -> str:
    return path.stem.split("_", 1)[1]


def statuses(report: dict) -> list:
    return [s for r in report["rows"] for s in (r.get("status"), (r.get("baseline") or {}).get("status")) if s]


# -- the stored samples ------------------------------------------------------------------------------------


def test_a_sample_is_stored_for_every_layout_the_module_names_and_for_today_s_version():
    """The layouts of the module doc's two tables, and the version written today, each have their file."""
    doc = formats.__doc__ or ""
    tables = doc.split("Reports::")[1].split("Baseline files::")
    named = [re.findall(r"^    (1-[a-z-]+) ", t, re.M) for t in tables]
    assert [layout(p) for p in REPORTS] == sorted(named[0] + [str(REPORT_VERSION)])
    assert [layout(p) for p in BASELINES] == sorted(named[1] + [str(BASELINE_VERSION)])
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    assert all(f"`{p.name}`" in readme for p in REPORTS + BASELINES)


def test_the_module_holds_the_versions_the_writers_write_and_imports_only_the_standard_library():
    assert saved.REPORT_VERSION == REPORT_VERSION == 2 and SCHEMA_VERSION == BASELINE_VERSION == 2
    assert sorted(formats.REPORT_STEPS) == list(range(1, REPORT_VERSION))
    assert sorted(formats.BASELINE_STEPS) == list(range(1, BASELINE_VERSION))
    assert load(DATA / "report_2.json")["version"] == 2 and load(DATA / "baseline_2.json")["schema_version"] == 2
    tree = ast.parse(Path(formats.__file__).read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert all(n.level == 0 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)


# -- upgrade on read ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", REPORTS, ids=layout)
def test_every_report_reads_as_today_s_document_and_its_file_is_left_as_it_is(path):
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    before = copy.deepcopy(doc)
    up = saved.load_report(path)
    assert up["version"] == REPORT_VERSION and doc == before and path.read_text(encoding="utf-8") == text
    assert set(statuses(up)) <= WORDS, statuses(up)
    assert upgrade_report(up) == up  # today's document stays as it is
    assert up == saved.check_report(upgrade_report(doc))
    changed = {k for k in set(doc) | set(up) if doc.get(k) != up.get(k)}
    if layout(path) == "1-noisy":  # the step's changes, and nothing else
        assert changed == {"version", "rows"}
        assert [r["status"] for r in doc["rows"]] == ["improved", "noisy"]
        assert [r["status"] for r in up["rows"]] == [r["baseline"]["status"] for r in up["rows"]] == [
            "improved", Status.NOT_GATED.value]
        assert [r["baseline"]["remeasured"] for r in up["rows"]] == [0, 0]
        assert all(type(r["baseline"]["remeasured"]) is int for r in up["rows"])
        for old, new in zip(doc["rows"], up["rows"]):
            assert {k: v for k, v in old.items() if k not in ("status", "baseline")} == {
                k: v for k, v in new.items() if k not in ("status", "baseline")}
            assert {k: v for k, v in old["baseline"].items() if k not in ("status", "remeasured")} == {
                k: v for k, v in new["baseline"].items() if k not in ("status", "remeasured")}
    else:
        assert changed <= {"version"}


@pytest.mark.parametrize("path", BASELINES, ids=layout)
def test_every_baseline_reads_as_today_s_document_with_its_runs_unchanged(path):
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    up = read_document(path)
    assert up["schema_version"] == SCHEMA_VERSION and path.read_text(encoding="utf-8") == text
    assert up["runs"] == doc["runs"] and up["cases"] == doc["cases"]  # every run, sample and sketch as recorded
    assert upgrade_baseline(up) == up
    base = load_baseline(path)
    assert base.schema_version == SCHEMA_VERSION and base.doc == up
    changed = {k for k in set(doc) | set(up) if doc.get(k) != up.get(k)}
    if layout(path) == "1-published-runs":
        assert doc["source"] == "published" and up["source"] == base.source == "measured"
        assert changed == {"schema_version", "source", "source_detail"}
        assert up["source_detail"] == (doc["source_detail"] + f" Measured runs added from {doc['runs'][0]['date']} "
                                       "on; published floors are kept for the cases that have no measured run.")
        floors = [k for k, c in doc["cases"].items() if not c["runs"]]
        assert [k for k, c in base.cases.items() if c.floor_only] == floors
    else:
        assert changed <= {"schema_version"}


def test_the_steps_read_each_layout_s_words_by_their_content():
    rows = [{"test": "a", "status": "NEW"}, {"test": "b", "status": "ok", "baseline": {"status": "noisy",
                                                                                       "remeasured": True}}]
    doc = {"format": "pytest-gpucomm-report", "version": 1, "settings": {"tolerance": 0.05}, "rows": rows}
    up = upgrade_report(doc)
    assert up["settings"] == {"tolerance": 0.05, "strict": True}  # NEW is a word only strict runs wrote
    assert up["rows"][1]["baseline"] == {"status": "not gated", "remeasured": 1}
    assert up["rows"][0] is rows[0] and doc["rows"] is rows and rows[1]["baseline"]["status"] == "noisy"
    for words, strict in ([{"status": "new"}], None), ([{"baseline": {"status": "NOT GATED"}}], True):
        up = upgrade_report({"version": 1, "settings": {}, "rows": [{"test": "t", **w} for w in words]})
        assert up["settings"].get("strict") is strict
    kept = {"version": 1, "settings": {"strict": False}, "rows": [{"test": "t", "status": "NEW"}]}
    assert upgrade_report(kept)["settings"] == {"strict": False}  # what the run said stays
    assert upgrade_report({"version": 2, "rows": [{"status": "noisy"}]})["rows"] == [{"status": "noisy"}]
    for odd in ({"version": 1, "rows": "x"}, {"version": 1, "rows": [1, None], "settings": None}):
        assert upgrade_report(odd)["version"] == 2  # malformed: left for the report's checks
    published = {"schema_version": 1, "source": "published", "source_detail": "datasheet", "runs": [],
                 "cases": {"k": {"runs": [{"run_id": "r"}]}}}
    assert upgrade_baseline(published)["source_detail"] == (
        "datasheet Measured runs added from an unknown date on; published floors are kept for the cases that "
        "have no measured run.")
    floors_only = dict(published, cases={"k": {"runs": [], "floor_gbps": 1.0}})
    assert upgrade_baseline(floors_only)["source"] == "published"
    for label in ("1", True, 0, -3, 1.5, None):  # not a version: left for the schema to name
        assert upgrade_baseline({"schema_version": label, "source": "published", "cases": published["cases"]})[
            "schema_version"] == label
    assert upgrade_baseline({"schema_version": 1.0, "cases": []})["schema_version"] == 2


# -- a newer version -----------------------------------------------------------------------------------------


def test_a_newer_version_is_refused_naming_both_versions(tmp_path, capsys):
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(dict(load(DATA / "report_2.json"), version=3)))
    said = f"gpucomm: error: {newer}: report version 3 is newer than this pytest-gpucomm reads (2): upgrade " \
           "pytest-gpucomm"
    for argv in (["show", newer], ["compare", DATA / "baseline_2.json", newer], ["html", newer, "-o", tmp_path / "p"]):
        assert gpucomm(*argv) == (2, "") and capsys.readouterr().err == said + "\n"
    with pytest.raises(FormatError, match=r"^where: report version 3 is newer than this pytest-gpucomm reads \(2\)"):
        upgrade_report({"version": 3}, "where")
    base = tmp_path / "base.json"
    base.write_text(json.dumps(dict(load(DATA / "baseline_2.json"), schema_version=3)))
    assert gpucomm("compare", base, DATA / "report_2.json") == (2, "")
    assert capsys.readouterr().err == (f"gpucomm: error: {base}: baseline schema_version 3 is newer than this "
                                       "pytest-gpucomm reads (2): upgrade pytest-gpucomm\n")
    with pytest.raises(FormatError, match=r"^baseline schema_version 3.0 is newer than .* \(2\): upgrade"):
        upgrade_baseline({"schema_version": 3.0})


# -- the gpucomm command -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", REPORTS, ids=layout)
def test_gpucomm_show_and_compare_read_every_report(path):
    code, text = gpucomm("show", path, "--no-curves", "-v")  # -v: the full table, a row its test id
    assert code == 0 and f"report: {path}" in text and "noisy" not in text.replace(path.name, "")
    assert len([line for line in text.splitlines() if "test_peer_copy[4KiB-0->1]" in line]) == 1
    code, text = gpucomm("compare", DATA / "baseline_2.json", path, "--no-curves")
    assert code in (0, 1) and re.search(r"^gpucomm compare: (passed|FAILED|NOT JUDGED) \(", text, re.M), text


@pytest.mark.parametrize("path", BASELINES, ids=layout)
def test_gpucomm_compare_and_show_take_every_baseline(path):
    code, text = gpucomm("compare", path, DATA / "report_2.json", "--no-curves", "-v")
    assert code in (0, 1) and f"against the baseline {load(path)['name']} ({path})" in text
    assert re.search(r"^gpucomm compare: (passed|FAILED|NOT JUDGED) \(", text, re.M), text
    [row] = [line for line in text.splitlines() if line.strip().startswith(COPY_CASE.split("::")[1] + "  ")]
    assert not row.endswith(" new")  # the copy case is in the baseline (its table row)
    code, text = gpucomm("show", DATA / "report_2.json", "--baseline", path)
    assert code == 0


def test_the_noisy_report_reads_alike_in_show_compare_plot_and_html(tmp_path):
    path = DATA / "report_1-noisy.json"
    code, text = gpucomm("show", path, "--no-curves")
    assert code == 0 and "gpucomm verdicts: 1 improved, 1 not gated" in text
    assert "noisy" not in text.replace(path.name, "")
    code, text = gpucomm("compare", DATA / "baseline_1-unlabelled.json", path, "--no-curves")
    assert code in (0, 1) and "noisy" not in text.replace(path.name, "")
    pytest.importorskip("matplotlib")
    code, text = gpucomm("plot", path, "-o", tmp_path / "figs")
    assert code == 0 and "\nwrote " in text and any((tmp_path / "figs").iterdir())
    page = tmp_path / "page.html"
    code, text = gpucomm("html", path, "-o", page, "--no-plots")
    body = page.read_text(encoding="utf-8")
    assert code == 0 and ">not gated<" in body and "noisy" not in body


def test_the_medians_report_s_re_measures_are_read_and_compare_says_it_cannot_replay_them(tmp_path):
    path = DATA / "report_1-medians.json"
    assert [len(r["baseline"]["remeasures"]) for r in load(path)["rows"]] == [1, 0]
    assert all("measurement" not in a for r in load(path)["rows"] for a in r["baseline"]["remeasures"])
    faster = load(DATA / "baseline_1-sessions.json")  # the copy case claiming a million times its bandwidth,
    for case in faster["cases"].values():  # as the run was judged (README.md), so that it is flagged again
        for run in case["runs"] if case["op"] == "copy" else []:
            run["samples_gbps"] = [x * 1e6 for x in run["samples_gbps"]]
    scaled = tmp_path / "scaled.json"
    scaled.write_text(json.dumps(faster))
    code, text = gpucomm("compare", scaled, path, "--no-curves")
    assert code in (0, 1) and f"{COPY_CASE}: {OFFLINE_NOTE}" in text


# -- the plugin's gate ---------------------------------------------------------------------------------------


def _suites(pytester) -> None:
    suites = pytester.mkdir("suites")
    (suites / "test_copies.py").write_text((ROOT / "suites" / "test_copies.py").read_text(encoding="utf-8"),
                                           encoding="utf-8")


@pytest.mark.parametrize("path", [p for p in BASELINES if layout(p) != "2"], ids=layout)
def test_the_plugin_gates_against_every_baseline_and_a_read_writes_nothing(pytester, path):
    _suites(pytester)
    base = pytester.path / path.name
    base.write_bytes(path.read_bytes())
    report = pytester.path / "report.json"
    result = pytester.runpytest(COPY_CASE, f"--gpu-baseline={base}", "--gpu-tolerance=0.95",
                                f"--gpucomm-json={report}", *FAST)
    assert result.ret in (0, 1), result.stdout.str()
    runs = len({r["run_id"] for c in load(path)["cases"].values() for r in c["runs"]})
    result.stdout.fnmatch_lines([f"gpucomm baseline: {base} (measured, {runs} run*"])
    [row] = load(report)["rows"]
    assert row["baseline"]["status"] in WORDS - {"new", "NEW"} and row["baseline"]["baseline_runs"] >= 1
    assert base.read_bytes() == path.read_bytes()  # reading never writes: the file is still version 1


@pytest.mark.parametrize("path", [DATA / "baseline_1-unlabelled.json", DATA / "baseline_1-published-runs.json"],
                         ids=layout)
def test_a_save_writes_an_upgraded_baseline_back_as_today_s_version_with_its_earlier_runs_unchanged(pytester, path):
    _suites(pytester)
    base = pytester.path / path.name
    base.write_bytes(path.read_bytes())
    old = load(path)
    result = pytester.runpytest(COPY_CASE, f"--gpu-baseline={base}", "--gpu-baseline-save", *FAST)
    assert result.ret == 0, result.stdout.str()
    new = load(base)
    assert new["schema_version"] == SCHEMA_VERSION and new["source"] == "measured"
    assert new["runs"][:len(old["runs"])] == old["runs"] and len(new["runs"]) == len(old["runs"]) + 1
    for key, case in old["cases"].items():
        assert new["cases"][key]["runs"][:len(case["runs"])] == case["runs"]
        assert new["cases"][key].get("floor_gbps") == case.get("floor_gbps")
    [copy_key] = [k for k in new["cases"] if k.startswith(COPY_CASE + "|")]
    assert len(new["cases"][copy_key]["runs"]) == len(old["cases"][copy_key]["runs"]) + 1
    assert new["source_detail"].count("Measured runs added from") == (layout(path) == "1-published-runs")
    assert "session" not in json.dumps(old["runs"]) and all("session" not in r for r in new["runs"][:-1])
    assert load_baseline(base).doc == new
