"""Topology-aware suites in a job of 2 simulated nodes x 2 ranks (srun's variables set by hand, gloo over
loopback): collectives over the world, each node and one rank per node, with the kind in the test id; the
inter-node pair test over a ring and pairwise; one JSON row per group and per node pair, written once by
rank 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_gpucomm.measurement import Measurement
from test_launched import ARGS, free_port, run_all, slurm_2x2_env

pytestmark = pytest.mark.slow  # jobs of several ranks

TOPOLOGY = '''
import pytest

from pytest_gpucomm import sizes


@pytest.mark.parametrize("op, in_place", [("all_reduce", True), ("broadcast", True), ("send_recv", False)],
                         ids=["all_reduce", "broadcast", "send_recv"])
@sizes("4KiB")
def test_collective(op, in_place, group_kind, process_group, size, comm, gpucomm_state):
    before = len(gpucomm_state.records)
    m = comm.collective(op, process_group, size, in_place=in_place)
    assert process_group.kind == group_kind
    made = gpucomm_state.records[before:]
    assert len(made) == (1 if group_kind == "world" else 2)
    assert m.gbps == min(r.measurement.gbps for r in made)  # the slowest group is returned
    assert m.world_size == process_group.world_size == (4 if group_kind == "world" else 2)


@pytest.mark.parametrize("pattern", ["ring", "pairwise"])
@sizes("4KiB")
def test_node_pairs(pattern, process_group, size, comm):
    m = comm.node_pairs(process_group, pattern, size)
    assert m.op == "node_pair" and m.info["pattern"] == pattern
'''


def test_collectives_over_each_group_kind_and_node_pairs_on_two_nodes_of_two_ranks(tmp_path: Path) -> None:
    (tmp_path / "test_topology_small.py").write_text(TOPOLOGY)
    out, port = tmp_path / "out.json", free_port()
    cmd = [sys.executable, "-m", "pytest", "test_topology_small.py", *ARGS, "-v", f"--gpucomm-json={out}"]
    results = run_all([cmd] * 4, [slurm_2x2_env(r, port) for r in range(4)], tmp_path)
    assert [code for code, _ in results] == [0] * 4, results
    text = "\n".join(t for _, t in results)
    assert text.count("11 passed") == 1, text  # rank 0 speaks, for every rank (each test's outcome is agreed)
    for kind in ("world", "intra-node", "inter-node"):
        assert f"test_collective[{kind}-4KiB-broadcast] PASSED" in text, text
    assert "test_node_pairs[4KiB-ring] PASSED" in text and "test_node_pairs[4KiB-pairwise] PASSED" in text, text

    rows = json.loads(out.read_text())["rows"]
    by_test: dict[str, list[dict]] = {}
    for r in rows:
        by_test.setdefault(r["test"], []).append(r)
    for op in ("all_reduce", "broadcast", "send_recv"):
        world = by_test[f"test_topology_small.py::test_collective[world-4KiB-{op}]"]
        assert [r["world_size"] for r in world] == [4]
        intra = by_test[f"test_topology_small.py::test_collective[intra-node-4KiB-{op}]"]
        assert [(r["world_size"], r["info"]["node"]) for r in intra] == [(2, 0), (2, 1)]
        assert [Measurement.from_dict(r).where for r in intra] == [f"node {n} ({r['info']['host']}): 2 ranks (gloo)"
                                                                  for n, r in enumerate(intra)]
        inter = by_test[f"test_topology_small.py::test_collective[inter-node-4KiB-{op}]"]
        assert [(r["world_size"], r["info"]["group"], r["devices"]) for r in inter] == [
            (2, "local rank 0 across 2 nodes", ["rank0", "rank2"]),
            (2, "local rank 1 across 2 nodes", ["rank1", "rank3"])]
        assert [r["devices"] for r in intra] == [["rank0", "rank1"], ["rank2", "rank3"]]
    for pattern in ("ring", "pairwise"):
        [pair] = by_test[f"test_topology_small.py::test_node_pairs[4KiB-{pattern}]"]
        assert (pair["op"], pair["world_size"], pair["info"]["nodes"]) == ("node_pair", 4, [0, 1])
        where = Measurement.from_dict(pair).where
        assert where.startswith("node 0 (") and " <-> node 1 (" in where and where.endswith("): 4 ranks (gloo)"), where
