"""gpucomm fleet's rules (gate.fleet, gate.fleet_baseline, gate.fleet_outputs) on fleets drawn from the real runs
of the shipped H100 baseline (benchmarks/fleet_reports.py: its cases measured in several sessions), and the
command itself."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from pytest_gpucomm.gate.fleet import (MIN_PEER_NODES, FleetError, NodeInput, admit, biweight_scale,
                                       judge_fleet)
from pytest_gpucomm.gate.fleet_outputs import drain_document, junit_xml, text_lines
from pytest_gpucomm.gate.store import load_baseline
from scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SMALL_HOST = "host<->device copies <= 1 MiB"


def _generator():
    return load_script(Path("benchmarks/fleet_reports.py"))


FR = _generator()


@pytest.fixture(scope="module")
def h100():
    return FR.load_source("h100")


@pytest.fixture(scope="module")
def baseline():
    return load_baseline(ROOT / "baselines" / "h100.json")


def _fleet(src, n, seed, **kw):
    return FR.node_inputs(src, FR.draw_fleet(src, n, np.random.default_rng(seed), **kw))


def test_an_aa_fleet_of_32_healthy_nodes_names_nobody_and_the_fleet_passes(h100, baseline):
    r = judge_fleet(_fleet(h100, 32, 1), baseline)
    assert [v.lines()[0] for v in r.drain] == [] and not r.fleet_failed and not r.failed
    assert {s.status for s in r.shifts} == {"OK"}


def test_a_node_15_percent_slower_in_one_class_is_named_by_its_peers_without_a_baseline(h100):
    r = judge_fleet(_fleet(h100, 16, 2, slow={5: (SMALL_HOST, 0.85)}))
    assert [v.node.name for v in r.drain] == ["node0005"]
    first = r.drain[0].lines()[0]
    assert first.startswith(f"node node0005: {SMALL_HOST} 1") and "slower than its peers (bound 0." in first
    assert r.shifts == [] and "no baseline" in text_lines(r)[-1]


def test_a_slow_node_is_also_said_slower_than_the_baseline_when_one_is_given(h100, baseline):
    r = judge_fleet(_fleet(h100, 16, 3, slow={0: (SMALL_HOST, 0.85)}), baseline)
    assert [v.node.name for v in r.drain] == ["node0000"]
    assert "slower than the baseline" in r.drain[0].lines()[0] and r.drain[0].status == "slow and regressed"


def test_a_10_percent_drop_of_every_small_case_on_16_nodes_fails_the_fleet_verdict(h100, baseline):
    r = judge_fleet(_fleet(h100, 16, 4, drop=("small", 0.9)), baseline)
    (small,) = [s for s in r.shifts if s.level == "class" and s.name == SMALL_HOST]
    assert small.status == "REGRESSION" and 0.87 < small.ratio < 0.93 and small.bound < 0.95
    assert [s.status for s in r.shifts if s.level == "class" and s.name != SMALL_HOST] == ["OK"]
    assert r.fleet_failed and any(line.startswith(f"fleet: {SMALL_HOST}: 0.") for line in text_lines(r))


def test_every_node_moved_the_same_is_no_node_slower_than_its_peers(h100):
    r = judge_fleet(_fleet(h100, 16, 5, drop=("small", 0.8)))
    assert r.drain == []


def test_a_report_of_another_hardware_shape_is_left_out_and_named(h100):
    nodes = _fleet(h100, 9, 6)
    odd = NodeInput("gpu-b3", "b3.json", "gpu-b3", "2 x NVIDIA H200", dict(nodes[0].locs), dict(nodes[0].members))
    kept, left = admit(nodes + [odd])
    assert len(kept) == 9 and [(e.name, e.reason) for e in left] == [
        ("gpu-b3", "another hardware shape: 2 x NVIDIA H200; the fleet's is 1 x NVIDIA H100 80GB HBM3 "
                   "(9 of 10 reports)")]


def test_a_report_of_another_test_set_is_left_out_naming_how_many_cases_it_holds(h100):
    nodes = _fleet(h100, 9, 7)
    few = dict(list(nodes[0].locs.items())[:5])
    odd = NodeInput("gpu-c1", "c1.json", "gpu-c1", nodes[0].shape, few, dict(nodes[0].members))
    r = judge_fleet(nodes + [odd])
    assert [e.to_dict() for e in r.excluded] == [{
        "node": "gpu-c1", "report": "c1.json",
        "reason": f"another suite or test set: it holds 5 of the fleet's {len(nodes[0].locs)} cases (at least 90% "
                  "needed)"}]
    assert "1 reports left out" in text_lines(r)[-1]


def test_fewer_reports_than_the_peers_need_and_no_baseline_is_a_usage_error(h100):
    with pytest.raises(FleetError, match=f"7 usable reports and no --baseline: .* needs at least {MIN_PEER_NODES}"):
        judge_fleet(_fleet(h100, 7, 8))


def test_a_small_fleet_with_a_baseline_is_judged_against_it_and_says_the_peers_were_not(h100, baseline):
    r = judge_fleet(_fleet(h100, 3, 9), baseline)
    assert r.drain == [] and any("no node is judged against its peers" in n for n in r.notes)


def test_the_drain_list_and_the_junit_file_name_each_node_with_its_reason(h100, baseline):
    from pytest_gpucomm.gate.fleet import Excluded

    r = judge_fleet(_fleet(h100, 16, 10, slow={3: (SMALL_HOST, 0.85)}), baseline,
                    excluded=[Excluded("gpu-x", "x.json", "report file does not exist")])
    drain = drain_document(r)
    assert [d["node"] for d in drain["drain"]] == ["node0003"]
    assert drain["drain"][0]["reason"] == r.drain[0].lines()[0]
    assert drain["left_out"] == [{"node": "gpu-x", "report": "x.json", "reason": "report file does not exist"}]
    suite = ET.fromstring(junit_xml(r)).find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert len(cases) == 16 + 1 + 1 and suite.get("failures") == "1" and suite.get("errors") == "1"
    assert cases["node0003"].find("failure").get("message") == r.drain[0].lines()[0]
    assert cases["gpu-x"].find("error") is not None and cases["fleet"].find("failure") is None
    assert cases["node0001"].find("failure") is None


def test_the_level_of_each_node_is_the_fleets_alpha_over_its_nodes(h100):
    r = judge_fleet(_fleet(h100, 20, 11), alpha=0.01)
    assert r.notes[0] == "20 nodes; each judged at alpha 0.01 / 20 = 0.0005, tolerance 5%"


def test_the_biweight_scale_is_the_sd_of_normal_data_and_ignores_a_far_outlier():
    x = np.random.default_rng(0).normal(0.0, 0.02, 4000)
    assert biweight_scale(x) == pytest.approx(0.02, rel=0.05)
    assert biweight_scale(np.append(x[:200], [5.0] * 5)) == pytest.approx(biweight_scale(x[:200]), rel=0.1)


# -- the command ---------------------------------------------------------------------------------------------


def _run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pytest_gpucomm", "fleet", *args], capture_output=True, text=True,
                          cwd=cwd, env={**__import__("os").environ, "COLUMNS": "200"})


def test_the_command_names_the_slow_node_and_each_report_left_out_and_writes_its_files(h100, tmp_path):
    drawn = FR.draw_fleet(h100, 12, np.random.default_rng(12), slow={2: (SMALL_HOST, 0.85)})
    FR.write_fleet(h100, drawn, tmp_path / "shared")
    (tmp_path / "shared" / "node0009.json").write_text('{"format": "pytest-gpucomm-report", "rows": [')
    p = _run(str(tmp_path / "shared"), str(tmp_path / "gone.json"), "--baseline", str(ROOT / "baselines/h100.json"),
             "--drain", str(tmp_path / "drain.json"), "--junitxml", str(tmp_path / "j.xml"), cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert all(len(line) <= 120 for line in p.stdout.splitlines())
    lines = p.stdout.replace("\n    ", " ").splitlines()  # a wrapped line's continuation joined
    # the node first, with its strongest finding: its slowed class, or a band of it (which is the stronger depends
    # on the file's runs the fleet is drawn from: a band of it since the H100's eighth boot)
    first = lines[1]
    assert first.startswith("node node0002: ") and "slower than its peers" in first, first
    assert first.startswith(f"node node0002: {SMALL_HOST} 1") or re.match(
        r"node node0002: (h2d|d2h), \S+, [0-9]+ KiB-1 MiB 1[0-9.]+% slower", first), first
    assert any(line.startswith("left out: node0009 (") and "cut short" in line for line in lines)
    assert any(line.startswith("left out: gone (") and "does not exist" in line for line in lines)
    assert lines[-3].startswith("gpucomm fleet: FAILED: 1 of 11 nodes to drain, the fleet as a whole healthy")
    assert [d["node"] for d in json.loads((tmp_path / "drain.json").read_text())["drain"]] == ["node0002"]
    assert ET.parse(tmp_path / "j.xml").getroot().find("testsuite").get("failures") == "1"


def test_the_command_exits_2_naming_a_folder_without_reports_and_an_output_that_exists(tmp_path):
    (tmp_path / "empty").mkdir()
    p = _run(str(tmp_path / "empty"), cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.strip() == f"gpucomm: error: REPORT {tmp_path / 'empty'}: a folder " \
                                                      "holding no *.json report"
    (tmp_path / "d.json").write_text("{}")
    p = _run(str(tmp_path / "x.json"), "--drain", str(tmp_path / "d.json"), cwd=tmp_path)
    assert p.returncode == 2 and "--drain" in p.stderr and "--force" in p.stderr


def test_the_fleet_pages_fitted_spreads_and_false_nodes_are_the_saved_calibration_of_the_shipped_files():
    # docs/fleet.md's tables are benchmarks/data/fleet_calibration.json, and each machine's session and run counts
    # there are the shipped files': a file grown without the calibration run again, or a stale cell, fails here
    saved = json.loads((ROOT / "benchmarks" / "data" / "fleet_calibration.json").read_text())["sources"]
    page = (ROOT / "docs" / "fleet.md").read_text().splitlines()
    shapes = {"h200x2": ("h200.json", 2, "2 x H200"), "h200x1": ("h200.json", 1, "1 x H200"),
              "h100": ("h100.json", 1, "1 x H100")}
    assert set(saved) == set(shapes)
    for name, (path, count, label) in shapes.items():
        runs = [r for r in json.loads((ROOT / "baselines" / path).read_text())["runs"]
                if r["fingerprint"]["count"] == count]
        fitted = saved[name]["fitted"]
        assert (fitted["sessions"], fitted["runs"]) == (len({r["session"] for r in runs}), len(runs)), name
        head = f"| {label} ({fitted['sessions']} sessions, {fitted['runs']} runs) |"
        at = next((i for i, line in enumerate(page) if line.startswith(head)), -1)
        assert at >= 0, f"docs/fleet.md has no row '{head}'"
        for line, (klass, fig) in zip(page[at:], sorted(fitted["classes"].items())):
            cells = [c.strip() for c in line.strip("|").split("|")][1:]
            assert cells[:2] == [klass, str(fig["cases"])], (line, klass)
            # two decimals of the file's three (0.845 is written 0.85 or 0.84)
            assert [float(c.rstrip(" %")) for c in cells[2:]] == pytest.approx(
                [fig["session_sd_pct"], fig["run_sd_pct"]], abs=0.0051), (line, fig)
    aa = next(line for line in page if line.startswith("| A/A, fleets of 1,000: false nodes per fleet"))
    h100 = saved["h100"]["aa"]
    assert f"| {h100['false_nodes_per_fleet']:g} ({h100['false_nodes_total']} in {h100['fleets']}, below) |" in aa
