"""Baselines of jobs across nodes: the layout in the case key, one run per node saved in one write with the
node and its host, and the lines that say how the nodes of a job differ from each other."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from pytest_gpucomm.gate import Gate, GateSettings
from pytest_gpucomm.env.fingerprint import node_differences
from pytest_gpucomm.gate.cases import CaseRecord, case_key
from pytest_gpucomm.gate.schema import BaselineError
from pytest_gpucomm.gate.store import RunToSave, load_baseline, save_run, save_runs
from pytest_gpucomm.measurement import Measurement

DATE = "2026-12-01T00:00:00+00:00"


def test_the_layout_is_the_last_part_of_a_case_key_and_absent_on_one_host() -> None:
    assert (case_key("t::a[4KiB]", "all_reduce", 4096, "float32", 16, "2x8")
            == "t::a[4KiB]|all_reduce|4096B|float32|ws16|2x8")
    assert case_key("t::a[4KiB]", "all_reduce", 4096, "float32", 2) == "t::a[4KiB]|all_reduce|4096B|float32|ws2"


@pytest.mark.parametrize("layout", ["2", "0x8", "2x", "2 x 8", "x8"])
def test_a_malformed_layout_is_refused_naming_it(layout: str) -> None:
    with pytest.raises(ValueError, match=f"layout must be '<nodes>x<ranks per node>'.*got {layout!r}"):
        case_key("t", "all_reduce", 4096, "float32", 16, layout)


def record(test_id: str, level: float, layout: str = "2x2") -> CaseRecord:
    return CaseRecord(test_id=test_id, op="all_reduce", size_bytes=4096, world_size=2, samples_gbps=[level] * 5,
                      dtype="float32", devices=("rank0", "rank1"), layout=layout)


def test_save_runs_writes_every_node_run_with_its_node_host_and_fingerprint_and_loads_them_back(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    r0, r1 = record("t::x", 10.0), record("t::x", 11.0)
    save_runs(path, name="b", runs=[RunToSave("run-node0", DATE, {"nccl": "2.21"}, {r0.key: r0}, "s1", 0, "h0"),
                                    RunToSave("run-node1", DATE, {"nccl": "2.23"}, {r1.key: r1}, "s1", 1, "h1")])
    b = load_baseline(path)
    assert [(r.run_id, r.node, r.host, r.fingerprint["nccl"], r.session) for r in b.runs] == [
        ("run-node0", 0, "h0", "2.21", "s1"), ("run-node1", 1, "h1", "2.23", "s1")]
    [entry] = b.cases.values()
    assert entry.layout == "2x2" and entry.key.endswith("|ws2|2x2")
    assert [r.samples_gbps[0] for r in entry.runs] == [10.0, 11.0]


def test_save_runs_writes_nothing_when_one_of_its_runs_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    good = record("t::x", 10.0)
    save_run(path, name="b", run_id="first", date=DATE, fingerprint={}, cases={good.key: good})
    before = path.read_text()
    bad = record("t::x", -1.0)
    with pytest.raises(ValueError, match="samples_gbps must be a non-empty list of positive finite numbers"):
        save_runs(path, name="b", runs=[RunToSave("n0", DATE, {}, {good.key: good}, None, 0, "h0"),
                                        RunToSave("n1", DATE, {}, {bad.key: bad}, None, 1, "h1")])
    assert path.read_text() == before


def test_a_layout_that_is_not_nodes_x_ranks_makes_the_file_invalid(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    rec = record("t::x", 10.0)
    save_run(path, name="b", run_id="first", date=DATE, fingerprint={}, cases={rec.key: rec})
    doc = json.loads(path.read_text())
    next(iter(doc["cases"].values()))["layout"] = "two by two"
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match="layout"):
        load_baseline(path)


@dataclass
class Rec:
    nodeid: str
    measurement: Measurement
    redo: Optional[Callable[[], Any]] = None


def measured(level_s: float, **info: Any) -> Measurement:
    return Measurement(op="all_reduce", size_bytes=4096, samples_s=[level_s] * 5, devices=("rank0", "rank1"),
                       world_size=2, dtype="float32", kind="collective", info=dict(info))


def test_gate_save_keeps_one_run_per_node_labelled_with_its_host_and_every_group_of_one_test(tmp_path: Path) -> None:
    g = Gate(GateSettings(spec=str(tmp_path / "b.json"), save=True))
    g.load(None, {}, set())
    g.layout = "2x2"
    records = [Rec("t::intra", measured(1e-5, node=0, host="h0")), Rec("t::intra", measured(2e-5, node=1, host="h1")),
               Rec("t::across", measured(3e-5)), Rec("t::across", measured(4e-5))]  # two groups, one per local rank
    path, n = g.save(records, {"nccl": "2.21", "host": "h0"}, DATE)
    assert n == 4
    b = load_baseline(path)
    by_id = {r.run_id: r for r in b.runs}
    rid = g.run_id
    assert set(by_id) == {rid, f"{rid}-part1", f"{rid}-node0", f"{rid}-node1"}
    # every run holds the job's fingerprint, the node's own under "nodes"
    assert (by_id[f"{rid}-node1"].node, by_id[f"{rid}-node1"].host) == (1, "h1")
    assert all(r.fingerprint == {"nccl": "2.21", "host": "h0"} for r in b.runs)
    assert len({r.session for r in b.runs}) == 1  # one session: nodes are runs of it, not sessions
    intra = b.cases[case_key("t::intra", "all_reduce", 4096, "float32", 2, "2x2")]
    across = b.cases[case_key("t::across", "all_reduce", 4096, "float32", 2, "2x2")]
    assert len(intra.runs) == 2 and len(across.runs) == 2  # nothing dropped


def test_a_regression_on_one_node_names_the_node(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    for i, level in enumerate([10.0, 10.1, 9.9, 10.05]):
        rec = CaseRecord(test_id="t::intra", op="all_reduce", size_bytes=4096, world_size=2,
                         samples_gbps=[level * (1 + 0.001 * (k % 3)) for k in range(30)], dtype="float32",
                         layout="2x2")
        save_run(path, name="b", run_id=f"r{i}", date=DATE, fingerprint={}, cases={rec.key: rec}, session=f"s{i}")
    g = Gate(GateSettings(spec=str(path)))
    g.load(None, {}, {"t::intra"})
    g.layout = "2x2"
    slow = 4096 * 2 * (2 - 1) / 2 / 5.0e9  # a time that gives 5 GB/s busbw on 2 ranks: half the baseline
    v = g.judge("t::intra", measured(slow, node=1, host="h1"), None, None)
    assert v.failed and "all_reduce on node 1 (h1): 2 ranks at 4 KiB" in v.message, v.message


def test_nodes_with_the_same_environment_give_no_line() -> None:
    fp = {"nccl": "2.21", "driver": "550"}
    assert node_differences({0: ("h0", dict(fp, host="h0", date="1")), 1: ("h1", dict(fp, host="h1", date="2"))}) == []


def test_the_node_that_differs_from_the_others_is_named_with_what_differs() -> None:
    nodes = {n: (f"h{n}", {"nccl": "2.21", "nic": {"fw": "28.39"}}) for n in range(4)}
    nodes[2] = ("h2", {"nccl": "2.21", "nic": {"fw": "28.41"}})
    assert node_differences(nodes) == ["node 2 (h2) differs from the other 3 nodes: nic.fw 28.39 -> 28.41"]


def test_with_two_nodes_the_second_is_named_against_the_first() -> None:
    nodes = {0: ("h0", {"nccl": "2.21"}), 1: ("h1", {"nccl": "2.23"})}
    assert node_differences(nodes) == ["node 1 (h1) differs from node 0 (h0): nccl 2.21 -> 2.23"]


def test_max_runs_counts_a_jobs_node_runs_as_one_so_a_save_of_many_nodes_keeps_them_all_and_the_history(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    rec = record("t::copy", 10.0)
    save_run(path, name="b", run_id="old", date=DATE, fingerprint={}, cases={rec.key: rec}, max_runs=2, session="s0")
    runs = [RunToSave(f"job-node{n}", DATE, {}, {rec.key: record("t::copy", 10.0 + n)}, "s1", n, f"h{n}")
            for n in range(32)]
    save_runs(path, name="b", runs=runs, max_runs=2)
    [entry] = load_baseline(path).cases.values()
    ids = [r.run_id for r in entry.runs]
    assert ids[0] == "old" and ids[1:] == [f"job-node{n}" for n in range(32)]
    save_run(path, name="b", run_id="newest", date=DATE, fingerprint={}, cases={rec.key: rec}, max_runs=2)
    [entry] = load_baseline(path).cases.values()
    assert [r.run_id for r in entry.runs][0] == "job-node0" and len(entry.runs) == 33  # "old" went, the job stays


def test_run_group_strips_only_the_node_and_part_suffixes() -> None:
    from pytest_gpucomm.gate.store import run_group

    assert [run_group(r) for r in ("ab12-node3", "ab12-node3-part1", "ab12-part2", "ab12", "node3")] == [
        "ab12", "ab12", "ab12", "ab12", "node3"]
