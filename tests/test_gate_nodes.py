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
from pytest_gpucomm.gate.levels import STEADY_NAME
from pytest_gpucomm.gate.recording import save_records
from pytest_gpucomm.gate.run_levels import judge_levels
from pytest_gpucomm.vocab import DEFAULT_MAX_RUNS, default_engine_id
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


def test_a_save_keeps_one_run_per_node_labelled_with_its_host_and_every_group_of_one_test(tmp_path: Path) -> None:
    records = [Rec("t::intra", measured(1e-5, node=0, host="h0")), Rec("t::intra", measured(2e-5, node=1, host="h1")),
               Rec("t::across", measured(3e-5)), Rec("t::across", measured(4e-5))]  # two groups, one per local rank
    path, rid = tmp_path / "b.json", "0123456789ab"
    n = save_records(path, records, {"nccl": "2.21", "host": "h0"}, DATE, name="b", run_id=rid, layout="2x2",
                     max_runs=DEFAULT_MAX_RUNS, shipped_dir=None)
    assert n == 4
    b = load_baseline(path)
    by_id = {r.run_id: r for r in b.runs}
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


# -- each node judged as itself: its own runs, its own levels ---------------------------------------------

NODE_SIZES = [1 << (10 + 2 * i) for i in range(6)]  # 1 KiB .. 1 MiB: one class, 6 cases (levels.MIN_CLASS_CASES 5)
NODE_LEVELS = {0: 10.0, 1: 12.0}  # GB/s: two nodes of the same kind, each a little different


def _copy_id(size: int) -> str:
    from pytest_gpucomm.units import size_token

    return f"t.py::test_copy[{size_token(size)}-0->1]"


def _copy_samples(gbps: float, rng: Any, n: int = 40) -> list[float]:
    return [gbps * (1 + 0.002 * float(rng.standard_normal())) for _ in range(n)]


def _job_baseline(path: Path, sessions: int = 4) -> None:
    """A job baseline of 2 nodes (copies of 6 sizes on each, node 1 20 % faster than node 0), ``sessions``
    sessions of one job each, saved as gate.recording.save_records saves a job: one run per node, with the node and
    its host."""
    import numpy as np

    rng = np.random.default_rng(46)
    for s in range(sessions):
        runs = []
        for node, level in NODE_LEVELS.items():
            off = 1 + 0.004 * float(rng.standard_normal())  # the run's common offset
            cases = {}
            for size in NODE_SIZES:
                rec = CaseRecord(test_id=_copy_id(size), op="copy", size_bytes=size, world_size=1,
                                 samples_gbps=_copy_samples(level * off, rng), devices=("cpu:0", "cpu:1"), layout="2x1")
                cases[rec.key] = rec
            runs.append(RunToSave(f"job{s}-node{node}", DATE, {}, cases, f"s{s}", node, f"h{node}"))
        save_runs(path, name="b", runs=runs)


def _copy(size: int, gbps: float, node: int, rng: Any) -> Measurement:
    return Measurement(op="copy", size_bytes=size, samples_s=[size / (g * 1e9) for g in _copy_samples(gbps, rng)],
                       devices=("cpu:0", "cpu:1"), info={"node": node, "host": f"h{node}", "rank": node})


def _job_gate(path: Path, nodes: str = "own", job_nodes: tuple[int, ...] = (0, 1)) -> Gate:
    g = Gate(GateSettings(spec=str(path), nodes=nodes))
    g.load(None, {"nodes": {str(n): {"host": f"h{n}"} for n in job_nodes}}, {_copy_id(s) for s in NODE_SIZES})
    g.layout = "2x1"
    return g


def _judge_job(g: Gate, ratio: dict[int, float], nodes: tuple[int, ...] = (0, 1)) -> list[dict[str, Any]]:
    """Every node's copies judged at ``ratio[node]`` x its own baseline level, then the levels applied: the
    verdicts' dicts as the report keeps them, node by node."""
    import numpy as np

    from pytest_gpucomm.report.run import apply_levels

    rng = np.random.default_rng(7)
    records = []
    for node in nodes:
        for size in NODE_SIZES:
            m = _copy(size, NODE_LEVELS.get(node, 11.0) * ratio.get(node, 1.0), node, rng)
            rec = Rec(_copy_id(size), m)
            rec.baseline = g.judge(rec.nodeid, m, None, None).to_dict()  # type: ignore[attr-defined]
            rec.status = rec.baseline["status"]  # type: ignore[attr-defined]
            records.append(rec)
    levels = judge_levels(g.fitted(), [r.baseline for r in records], g.settings)  # type: ignore[attr-defined]
    apply_levels(records, levels)  # type: ignore[arg-type]
    g.last_levels = levels  # type: ignore[attr-defined]
    return [r.baseline for r in records]  # type: ignore[attr-defined]


def test_each_nodes_copies_are_judged_against_that_nodes_own_runs_and_keep_its_node(tmp_path: Path) -> None:
    _job_baseline(tmp_path / "b.json")
    g = _job_gate(tmp_path / "b.json")
    verdicts = _judge_job(g, {0: 1.0, 1: 1.0})
    assert {v["status"] for v in verdicts} == {"ok"}, [v["message"] for v in verdicts]
    assert sorted({(v["node"], v["host"], v["baseline_nodes"]) for v in verdicts}) == [(0, "h0", "own"),
                                                                                       (1, "h1", "own")]
    assert all(v["case"].endswith(f"|2x1|node{v['node']}") for v in verdicts)
    # each node's baseline figure is its own: 10 and 12 GB/s, not their pooled 11
    assert {v["node"]: round(v["baseline_gbps"]) for v in verdicts} == {0: 10, 1: 12}


def test_node_1_at_node_0s_speed_fails_against_its_own_runs_but_not_against_every_nodes_pooled(
        tmp_path: Path) -> None:
    _job_baseline(tmp_path / "b.json")
    slower = {0: 1.0, 1: NODE_LEVELS[0] / NODE_LEVELS[1]}  # node 1 17 % below its own runs, at node 0's figure
    own = _judge_job(_job_gate(tmp_path / "b.json"), slower)
    assert {v["node"] for v in own if v["status"] == "REGRESSION"} == {1}
    assert all("copy on node 1 (h1): cpu:0->cpu:1" in v["message"] for v in own if v["node"] == 1)
    pooled = _judge_job(_job_gate(tmp_path / "b.json", "pooled"), slower)
    assert not any(v["status"] == "REGRESSION" for v in pooled), [v["message"] for v in pooled]
    assert {v["baseline_nodes"] for v in pooled} == {"pooled"}


@pytest.mark.parametrize("slow", [0, 1])
def test_a_class_slowdown_on_one_node_marks_only_that_nodes_rows_and_its_level_names_the_node(
        tmp_path: Path, slow: int) -> None:
    _job_baseline(tmp_path / "b.json")
    g = _job_gate(tmp_path / "b.json")
    verdicts = _judge_job(g, {slow: 0.6})
    other = 1 - slow
    assert all(v["status"] == "REGRESSION" for v in verdicts if v["node"] == slow)
    assert not any(v["status"] == "REGRESSION" for v in verdicts if v["node"] == other), [
        v["message"] for v in verdicts if v["node"] == other]
    levels = g.last_levels  # type: ignore[attr-defined]
    # a small class is judged by its median and by its steady offset (levels.STEADY_NAME): both fail on that node
    [klass, steady] = [v for v in levels.classes if v.failed]
    assert klass.node == slow and klass.headline().startswith(
        f"REGRESSION (class offset) copies between GPUs <= 1 MiB on node {slow} (h{slow}): 40."), klass.headline()
    assert steady.node == slow and steady.headline().startswith(
        f"REGRESSION (class offset) copies between GPUs <= 1 MiB, {STEADY_NAME} on node {slow} (h{slow}): 40."), \
        steady.headline()
    assert all(k.endswith(f"|node{slow}") for k in klass.keys)
    assert [v.node for v in levels.classes] == [0, 0, 1, 1]  # a class offset and a steady offset per node
    d = levels.to_dict()
    # the other node's class passes ("ok" before its median shared the class's alpha with its steady offset; at
    # half the level it may read "not gated")
    assert [(c["node"], c["host"], c["status"] == "regression") for c in d["classes"]] == [
        (n, f"h{n}", n == slow) for n in (0, 0, 1, 1)]
    assert all(c["status"] in ("ok", "not gated") for c in d["classes"] if c["node"] == other), d["classes"]
    # each slowed row keeps the failing level that covers it, with its node; no row of the other node has one
    assert all({lv["node"] for lv in v["levels"]} == {slow} for v in verdicts if v["node"] == slow)
    assert not any(v.get("levels") for v in verdicts if v["node"] == other)


def test_the_nodes_levels_split_the_session_alpha_by_their_share_of_the_cases(tmp_path: Path) -> None:
    _job_baseline(tmp_path / "b.json")
    g = _job_gate(tmp_path / "b.json")
    _judge_job(g, {})
    levels = g.last_levels  # type: ignore[attr-defined]
    # 12 cases, 6 a node: each node's levels at half the session's alpha, so the residuals' level is that of one
    # run of the 12 cases: alpha x share / 12
    # each node's small class judged twice (its median, its steady offset), each at half the class's level
    assert [v.alpha for v in levels.classes] == pytest.approx([g.settings.alpha * 0.4 / 2 / 2] * 4)
    assert [v.alpha for v in levels.cases] == pytest.approx([g.settings.alpha * 0.25 / 12] * 12)
    assert g.n_comparisons == 12  # each node's copy is a comparison of its own


def test_a_node_without_runs_of_its_own_is_judged_against_the_pooled_runs_and_the_header_says_so(
        tmp_path: Path) -> None:
    _job_baseline(tmp_path / "b.json")
    g = _job_gate(tmp_path / "b.json", job_nodes=(0, 1, 2))
    header = "\n".join(g.header_lines())
    assert ("gpucomm baseline nodes: each node judged against its own runs and at its own levels "
            "(--gpu-baseline-nodes=own)") in header
    assert ("gpucomm baseline nodes: node 2 (h2) is new (no runs of its own in the baseline): judged against nodes "
            "0, 1 pooled") in header, header
    assert all(len(line) <= 120 for line in header.splitlines() if line.startswith("gpucomm baseline nodes:"))
    verdicts = _judge_job(g, {}, nodes=(0, 2))
    new = [v for v in verdicts if v["node"] == 2]
    assert {v["baseline_nodes"] for v in new} == {"pooled"} and g.pooled_nodes == {2}
    assert all("node 2 has no runs of its own in baseline b: judged against the runs of every node pooled"
               in v["message"] for v in new), new[0]["message"]
    assert {v["baseline_nodes"] for v in verdicts if v["node"] == 0} == {"own"}


def test_the_pooled_mode_is_said_in_the_header(tmp_path: Path) -> None:
    _job_baseline(tmp_path / "b.json")
    assert ("gpucomm baseline nodes: every node judged against every node's runs pooled (--gpu-baseline-nodes=pooled)"
            in _job_gate(tmp_path / "b.json", "pooled").header_lines())


def test_an_unknown_nodes_mode_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="GateSettings.nodes must be one of own, pooled, got 'mine'"):
        GateSettings(spec="b", nodes="mine")


def test_a_node_level_read_back_from_the_json_report_keeps_its_node_and_prints_it(tmp_path: Path) -> None:
    from pytest_gpucomm.report.document import Levels
    from pytest_gpucomm.report.run import level_lines

    _job_baseline(tmp_path / "b.json")
    g = _job_gate(tmp_path / "b.json")
    _judge_job(g, {1: 0.6})
    back = Levels(json.loads(json.dumps(g.last_levels.to_dict()))).run_levels()  # type: ignore[attr-defined]
    assert [(v.node, v.host) for v in back.classes] == [(0, "h0"), (0, "h0"), (1, "h1"), (1, "h1")]
    assert [v.name for v in back.classes] == [f"copies between GPUs <= 1 MiB{s}" for s in ("", f", {STEADY_NAME}")] * 2
    lines = level_lines(back, {k: k.split("|")[0] for v in back.all for k in v.keys})  # key -> test, as the rows
    assert any(line.startswith("gpucomm REGRESSION (class offset) copies between GPUs <= 1 MiB on node 1 (h1): ")
               for line in lines), lines
    assert "    covers t.py::test_copy[1KiB-0->1] on node 1" in lines, lines


def test_a_case_key_of_one_node_splits_back_into_the_case_and_the_node() -> None:
    from pytest_gpucomm.gate.cases import node_key, split_node_key

    key = case_key("t::c[4KiB-0->1]", "copy", 4096, None, 1, "2x1")
    assert node_key(key, 3) == key + "|node3" and split_node_key(node_key(key, 3)) == (key, 3)
    assert node_key(key, None) == key and split_node_key(key) == (key, None)


@pytest.mark.parametrize("args, env, message", [
    (["--gpu-baseline-nodes=mine"], {}, "invalid --gpu-baseline-nodes 'mine' (from the command line): expected own or "
                                        "pooled"),
    ([], {"GPUCOMM_BASELINE_NODES": "all"}, "invalid --gpu-baseline-nodes 'all' (from the GPUCOMM_BASELINE_NODES "
                                            "environment variable): expected own or pooled"),
])
def test_a_bad_baseline_nodes_mode_is_a_usage_error_naming_the_value_and_where_it_came_from(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str],
        message: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*" + message])


def test_a_case_of_the_default_engine_keys_as_without_the_engine_option() -> None:
    # --gpucomm-engine=both names torch's cases [...-torch]: a baseline recorded without the option gates them
    assert case_key("t::a[4KiB-torch]", "all_reduce", 4096, "float32", 2) == case_key("t::a[4KiB]", "all_reduce",
                                                                                      4096, "float32", 2)
    assert case_key("t::a[torch]", "all_reduce", 4096, "float32", 2).startswith("t::a|")
    assert case_key("t::a[4KiB-nccl-tests]", "all_reduce", 4096, "float32", 2).startswith("t::a[4KiB-nccl-tests]|")


def test_a_copy_of_the_default_copy_engine_keys_as_without_the_copy_engine_option() -> None:
    assert default_engine_id("s::test_peer_copy[4KiB-0->1-ce]") == "s::test_peer_copy[4KiB-0->1]"
    assert default_engine_id("s::test_peer_copy[4KiB-0->1-ce-torch]") == "s::test_peer_copy[4KiB-0->1]"
    assert default_engine_id("s::test_peer_copy[4KiB-0->1-sm]") == "s::test_peer_copy[4KiB-0->1-sm]"
