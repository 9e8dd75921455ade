"""Launched mode: copies stay node-local, measured on every node at once, one row per node.

The acceptance test starts 2 simulated nodes x 2 ranks, srun's variables set by hand (CPU variant: host
buffers cpu:0 and cpu:1, gloo over loopback); the unit tests pin who measures on a node and how every
rank's outcome becomes one measurement per node (or the failure naming the rank).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_launched import ARGS, free_port, run_all, slurm_2x2_env

from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.ops.copies import CopyError, copy_spec
from pytest_gpucomm.ops.node_copies import measuring_local_rank, node_measurements
from pytest_gpucomm.plugin.parametrize import launched_pairs_reason
from pytest_gpucomm.ranks import RankError

COPIES = '''
import os

import pytest

from pytest_gpucomm import sizes

NODE = int(os.environ["SLURM_NODEID"])  # srun: the node of this process


@sizes("4KiB")
def test_peer_copy(gpu_pair, size, comm):
    m = comm.copy(gpu_pair, size)
    assert m.info["node"] == NODE  # the test gets its own node's measurement
    assert m.devices == (gpu_pair.src, gpu_pair.dst)


@sizes("4KiB")
def test_peer_copy_both_ways(gpu_link, size, comm):
    assert comm.copy_both_ways(gpu_link, size).info["node"] == NODE


def test_remeasure_of_node_1s_row(comm, gpucomm_state, request):
    comm.copy(("cpu:0", "cpu:1"), 8192)
    rows = [r for r in gpucomm_state.records if r.nodeid == request.node.nodeid]
    assert [r.measurement.info["node"] for r in rows] == [0, 1]
    again = rows[1].redo()  # every rank at once, as the gate's re-measure runs
    assert again.fresh is False, again.how
    assert again.how.startswith("in the same process, with new buffers: in launched mode"), again.how
    assert again.measurement.info["node"] == 1 and again.measurement.info["rank"] == 2
    assert again.measurement.size_bytes == 8192 and again.measurement.n > 0


def test_copy_failing_on_node_1(comm):
    with pytest.raises(pytest.fail.Exception) as e:
        comm.copy(("cpu:0", "cpu:1"), 12345)
    text = str(e.value)
    assert "raised on rank(s) [2]" in text, text
    assert "(rank 2 on " in text and ", node 1)" in text and "injected: this copy fails on node 1" in text, text
'''

FAIL_ON_NODE_1 = '''
import os

import pytest_gpucomm.ops.copies as copies

_measure_copy = copies.measure_copy


def _fails_on_node_1(src, dst, size, *args, **kwargs):
    if size == 12345 and os.environ["SLURM_NODEID"] == "1":
        raise copies.CopyError("injected: this copy fails on node 1")
    return _measure_copy(src, dst, size, *args, **kwargs)


copies.measure_copy = _fails_on_node_1
'''


@pytest.mark.slow
def test_two_nodes_measure_their_copies_at_once_one_row_per_node(tmp_path: Path) -> None:
    (tmp_path / "test_copies.py").write_text(COPIES)
    (tmp_path / "conftest.py").write_text(FAIL_ON_NODE_1)
    out, bench, port = tmp_path / "out.json", tmp_path / "bench.json", free_port()
    # srun's variables set by hand, not torchrun: its agents would add two processes that import torch
    cmd = [sys.executable, "-m", "pytest", "test_copies.py", *ARGS, "-rA", f"--gpucomm-json={out}",
           f"--gpucomm-benchmark-json={bench}"]
    results = run_all([cmd] * 4, [slurm_2x2_env(r, port) for r in range(4)], tmp_path)
    assert [code for code, _ in results] == [0] * 4, results
    text = "\n".join(t for _, t in results)
    assert text.count("5 passed") == 1, text  # rank 0 speaks, for every rank (each test's outcome is agreed)
    assert text.count("= gpucomm results =") == 1 and text.count("gpucomm: wrote 8 measurements to") == 1, text
    table = results[0][1][results[0][1].index("= gpucomm results ="):]
    for node in (0, 1):
        assert f"node {node} (" in table and "): cpu:0->cpu:1" in table, table
    rows = json.loads(out.read_text())["rows"]
    seen = sorted((r["test"].split("::")[1], r["info"]["node"]) for r in rows)
    assert seen == sorted((case, node) for node in (0, 1) for case in (
        "test_peer_copy[4KiB-0->1]", "test_peer_copy[4KiB-1->0]", "test_peer_copy_both_ways[4KiB-0<->1]",
        "test_remeasure_of_node_1s_row")), seen
    for r in rows:
        assert r["info"]["host"] and r["info"]["rank"] == 2 * r["info"]["node"]  # local rank 0 of its node
        assert r["world_size"] == 1 and r["kind"] == "copy"
    names = [b["fullname"] for b in json.loads(bench.read_text())["benchmarks"]]
    assert len(set(names)) == 8 and "test_copies.py::test_peer_copy[4KiB-0->1][copy-4096-node1]" in names, names


# -- unit: who measures on a node, and the per-node measurements ----------------------------------------

@pytest.mark.parametrize("spec, local_world, rank", [
    (copy_spec("peer", ["cuda:3", "cuda:1"], 4096), 8, 3),  # the source's rank
    (copy_spec("peer", ["cuda:1", "cuda:3"], 4096, both_ways=True), 8, 1),  # the link's first device
    (copy_spec("host_device", ["cuda:5"], 4096, direction="d2h"), 8, 5),  # the GPU's rank
    (copy_spec("peer", ["cuda:6", "cuda:7"], 4096), 4, 2),  # more GPUs than ranks: modulo the ranks
    (copy_spec("peer", ["cuda:6", "cuda:7"], 4096), 1, 0),  # one rank per node measures every copy
    (copy_spec("peer", ["cpu:1", "cpu:0"], 4096), 2, 0),  # host buffers: local rank 0
])
def test_measuring_local_rank(spec: dict, local_world: int, rank: int) -> None:
    assert measuring_local_rank(spec, local_world) == rank


def test_measuring_local_rank_refuses_a_node_without_ranks() -> None:
    with pytest.raises(ValueError, match="local_world_size=0"):
        measuring_local_rank(copy_spec("peer", ["cpu:0", "cpu:1"], 8), 0)


def _row(node: int, rank: int) -> dict:
    return Measurement(op="copy", size_bytes=8, samples_s=[1e-6, 2e-6], devices=("cuda:0", "cuda:1"),
                       info={"node": node, "host": f"h{node}", "rank": rank}).to_dict(with_samples=True)


HOSTS = ("h0", "h0", "h1", "h1")


def test_node_measurements_one_per_node_in_node_order() -> None:
    outcomes = [(0, True, None), (0, True, _row(0, 1)), (1, True, _row(1, 2)), (1, True, None)]
    got = node_measurements(outcomes, HOSTS, "t")
    assert [(m.info["node"], m.info["rank"]) for m in got] == [(0, 1), (1, 2)]
    assert got[1].where == "node 1 (h1): cuda:0->cuda:1" and got[1].samples_s == [1e-6, 2e-6]


def test_node_measurements_of_a_remeasure_of_one_node() -> None:
    outcomes = [(0, True, None), (0, True, None), (1, True, _row(1, 2)), (1, True, None)]
    assert [m.info["node"] for m in node_measurements(outcomes, HOSTS, "t", only_node=1)] == [1]
    with pytest.raises(CopyError, match="node 0 alone re-measures a launched copy once, on one rank; node 0: 0"):
        node_measurements(outcomes, HOSTS, "t", only_node=0)


def test_node_measurements_name_the_rank_whose_copy_raised() -> None:
    outcomes = [(0, True, _row(0, 0)), (0, True, None), (1, False, "Traceback...\nCopyError: bad"), (1, True, None)]
    with pytest.raises(RankError) as e:
        node_measurements(outcomes, HOSTS, "test_x[0->1]: peer copy cuda:0->cuda:1")
    assert e.value.ranks == (2,)
    assert "raised on rank(s) [2] (world size 4); ranks [0, 1, 3] finished" in str(e.value)
    assert "(rank 2 on h1, node 1)" in str(e.value) and "CopyError: bad" in str(e.value)


def test_node_measurements_refuse_a_node_measured_twice_or_not_at_all() -> None:
    outcomes = [(0, True, _row(0, 0)), (0, True, _row(0, 1)), (1, True, None), (1, True, None)]
    with pytest.raises(CopyError, match=r"node 0: 2 measurements \(ranks \[0, 1\]\); node 1: 0 measurements"):
        node_measurements(outcomes, HOSTS, "t")


def test_launched_pair_skip_reason_names_cuda_visible_devices() -> None:
    reason = launched_pairs_reason(1, "3")
    assert reason.startswith("needs 2 GPUs of this node visible to each rank, found 1 (CUDA_VISIBLE_DEVICES '3')")
    assert "unset" in launched_pairs_reason(1, None)
