"""The job's layout (node and local rank of every rank) -> the groups of each kind and the inter-node pair
phases; and the collectives' bench and the pair exchange run over sub-groups on a gloo pool of 4 ranks."""

from __future__ import annotations

import pytest
from proc_helpers import gloo_pool

from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.ops.collective_results import BenchResult
from pytest_gpucomm.ops.collectives import to_measurement
from pytest_gpucomm.ops.nodes import PhaseResult, WrongPairs, to_measurements
from pytest_gpucomm.env.topology import (
    GROUP_KINDS,
    INTER_NODE,
    INTRA_NODE,
    WORLD,
    check_group_kind,
    group_layout,
    node_pair_phases,
    node_pair_problem,
)

TWO_BY_TWO = group_layout([0, 0, 1, 1], [0, 1, 0, 1], ["h0", "h0", "h1", "h1"])


def test_two_nodes_of_two_give_one_intra_group_per_node_and_one_inter_group_per_local_rank() -> None:
    intra = TWO_BY_TWO.groups(INTRA_NODE)
    assert [(g.index, g.ranks, g.label) for g in intra] == [(0, (0, 1), "node 0 (h0)"), (1, (2, 3), "node 1 (h1)")]
    assert intra[1].info() == {"group_kind": INTRA_NODE, "node": 1, "host": "h1"}
    inter = TWO_BY_TWO.groups(INTER_NODE)
    assert [(g.index, g.ranks) for g in inter] == [(0, (0, 2)), (1, (1, 3))]
    assert inter[1].info() == {"group_kind": INTER_NODE, "group": "local rank 1 across 2 nodes", "local_rank": 1}
    assert [g.ranks for g in TWO_BY_TWO.groups(WORLD)] == [(0, 1, 2, 3)]
    assert TWO_BY_TWO.group_of(INTER_NODE, 3).ranks == (1, 3)


def test_groups_follow_the_gathered_node_indices_not_the_rank_order() -> None:
    # a launcher that places ranks round-robin, with node indices 3 and 7 (not 0..N-1)
    layout = group_layout([3, 7, 3, 7, 3, 7], [0, 0, 1, 1, 2, 2], ["a", "b"] * 3)
    assert layout.node_ids == (3, 7) and layout.n_nodes == 2
    assert [(g.index, g.ranks, g.host) for g in layout.groups(INTRA_NODE)] == [(3, (0, 2, 4), "a"),
                                                                              (7, (1, 3, 5), "b")]
    assert [(g.index, g.ranks) for g in layout.groups(INTER_NODE)] == [(0, (0, 1)), (1, (2, 3)), (2, (4, 5))]
    assert layout.peer(7, 2) == 5


def test_uneven_nodes_have_intra_node_groups_but_no_inter_node_groups() -> None:
    layout = group_layout([0, 0, 0, 1, 1], [0, 1, 2, 0, 1], ["h0"] * 3 + ["h1"] * 2)
    assert [len(g.ranks) for g in layout.groups(INTRA_NODE)] == [3, 2]
    why = layout.problem(INTER_NODE)
    assert why == ("group kind 'inter-node' needs the same local ranks on every node (one group per local rank k, "
                   "with local rank k of every node); this job's nodes differ: node 0 (h0): local ranks 0, 1, 2, "
                   "node 1 (h1): local ranks 0, 1")
    with pytest.raises(ValueError, match="needs the same local ranks on every node"):
        layout.groups(INTER_NODE)
    assert "needs the same local ranks on every node" in (node_pair_problem(layout, "ring") or "")


def test_nodes_of_one_rank_have_inter_node_groups_but_no_intra_node_groups() -> None:
    layout = group_layout([0, 1], [0, 0], ["a", "b"])  # 2 nodes of 1 GPU
    assert layout.problem(INTRA_NODE) == ("group kind 'intra-node' needs at least 2 ranks on every node (a "
                                          "collective of one rank moves nothing); one rank on node 0 (a), node 1 (b)")
    assert [g.ranks for g in layout.groups(INTER_NODE)] == [(0, 1)]
    assert [p.pairs[0].label for p in node_pair_phases(layout, "ring")] == ["node 0 (a) <-> node 1 (b)"]


def test_one_node_has_no_sub_group_kinds() -> None:
    layout = group_layout([0, 0], [0, 1])
    assert layout.problem(WORLD) is None
    for kind in (INTRA_NODE, INTER_NODE):
        assert layout.problem(kind) == f"group kind {kind!r} needs a job of more than one node; this one has 1"
    assert node_pair_problem(layout, "ring") == ("the inter-node pair test needs a job of more than one node; "
                                                 "this one has 1")


def test_two_ranks_claiming_one_local_rank_of_a_node_are_named() -> None:
    with pytest.raises(ValueError, match="ranks 0 and 2 both say they are local rank 0 of node 0"):
        group_layout([0, 0, 0], [0, 1, 0])
    with pytest.raises(ValueError, match="3 node indices, 2 local ranks"):
        group_layout([0, 0, 1], [0, 1])


def test_an_unknown_group_kind_is_named_with_where_it_came_from() -> None:
    assert check_group_kind("intra-node", "x") == "intra-node"
    with pytest.raises(ValueError, match=r"process_group: unknown group kind 'intra'; known: world, intra-node, "
                                         r"inter-node"):
        check_group_kind("intra", "process_group")
    assert GROUP_KINDS == ("world", "intra-node", "inter-node")


def test_a_ring_of_two_nodes_is_one_pair_both_ways_every_local_rank_at_once() -> None:
    [phase] = node_pair_phases(TWO_BY_TWO, "ring")
    assert sorted(phase.edges) == [(0, 2), (1, 3), (2, 0), (3, 1)]
    [pair] = phase.pairs
    assert pair.label == "node 0 (h0) <-> node 1 (h1)" and pair.ranks == (0, 1, 2, 3)
    assert node_pair_phases(TWO_BY_TWO, "pairwise") == [phase]


def test_a_ring_of_three_nodes_runs_every_link_at_once_one_pair_per_link() -> None:
    layout = group_layout([0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 1], ["a", "a", "b", "b", "c", "c"])
    [phase] = node_pair_phases(layout, "ring")
    assert sorted(phase.edges) == [(0, 2), (1, 3), (2, 4), (3, 5), (4, 0), (5, 1)]
    assert [p.label for p in phase.pairs] == ["node 0 (a) -> node 1 (b)", "node 1 (b) -> node 2 (c)",
                                             "node 2 (c) -> node 0 (a)"]
    assert phase.pairs[2].ranks == (0, 1, 4, 5)


def test_pairwise_runs_each_pair_of_nodes_in_turn_up_to_four_nodes() -> None:
    layout = group_layout([0, 1, 2, 3], [0, 0, 0, 0])
    phases = node_pair_phases(layout, "pairwise")
    assert [p.pairs[0].label for p in phases] == ["node 0 <-> node 1", "node 0 <-> node 2", "node 0 <-> node 3",
                                                 "node 1 <-> node 2", "node 1 <-> node 3", "node 2 <-> node 3"]
    assert sorted(phases[4].edges) == [(1, 3), (3, 1)]
    five = group_layout(range(5), [0] * 5)
    assert node_pair_problem(five, "pairwise") == (
        "pairwise runs the node pairs one at a time, only where the job has at most 4 nodes; this one has 5 (the "
        "ring covers every node)")
    assert node_pair_problem(five, "ring") is None
    with pytest.raises(ValueError, match="unknown node pair pattern 'star'; known: ring, pairwise"):
        node_pair_phases(five, "star")


def _phase(rank: int, samples: tuple[float, ...], wrong: int = 0) -> PhaseResult:
    return PhaseResult(rank=rank, samples_s=samples, batch=1, active=True, wrong=wrong, checked=10,
                       first_wrong=(3, 0.0, 2.0) if wrong else None, peer=(rank + 2) % 4)


def test_a_pairs_time_is_its_slowest_rank_per_iteration_and_its_where_names_the_nodes() -> None:
    layout = group_layout([0, 1, 2, 3], [0, 0, 0, 0], ["a", "b", "c", "d"])
    phases = node_pair_phases(layout, "pairwise")[:2]  # 0<->1, then 0<->2
    results = [[_phase(r, (1.0, 1.0)), _phase(r, (1.0, 1.0))] for r in range(4)]
    results[1][0] = _phase(1, (2.0, 4.0))  # node 1 slow in the first phase
    ms = to_measurements(results, phases, backend="gloo", dtype="float32", size_bytes=4096, pattern="pairwise")
    assert [m.samples_s for m in ms] == [[2.0, 4.0], [1.0, 1.0]]
    assert ms[0].where == "node 0 (a) <-> node 1 (b): 2 ranks (gloo)"
    assert (ms[0].op, ms[0].busbw_factor, ms[0].world_size, ms[0].size_bytes) == ("node_pair", 1.0, 2, 4096)
    assert ms[0].algbw_gbps == pytest.approx(4096 / 3.0 / 1e9)  # S over the median time


def test_wrong_data_in_the_pair_test_names_the_receiver_and_its_sender() -> None:
    phases = node_pair_phases(TWO_BY_TWO, "ring")
    results = [[_phase(r, (1.0,), wrong=5 if r == 3 else 0)] for r in range(4)]
    with pytest.raises(WrongPairs, match=r"  rank 3, from rank 1 \(ring phase 1\): 5 of 10 elements wrong"):
        to_measurements(results, phases, backend="gloo", dtype="float32", size_bytes=4096, pattern="ring")


def test_subgroup_results_make_one_measurement_each_with_the_groups_size() -> None:
    def res(rank: int, times: tuple[float, ...]) -> BenchResult:  # the group's rank 0 returns the iteration times
        return BenchResult(rank=rank, in_place=True, samples_s=times, batch=1, graph=0, graph_error="",
                           registered=False, register_note="", size_bytes=4096, wrong=0, checked=1,
                           first_wrong=None, wrong_path="", straggler=(0,) * len(times))

    m = to_measurement([res(0, (2.0,)), res(1, ())], op="all_reduce", backend="gloo", dtype="float32",
                       requested_bytes=4096)
    m.info.update(TWO_BY_TWO.groups(INTRA_NODE)[1].info())
    assert isinstance(m, Measurement) and m.world_size == 2 and m.samples_s == [2.0]
    assert m.where == "node 1 (h1): 2 ranks (gloo)"
    m.info = {"backend": "gloo", **TWO_BY_TWO.groups(INTER_NODE)[0].info()}
    assert m.where == "local rank 0 across 2 nodes: 2 ranks (gloo)"


# -- on a gloo pool of 4 ranks, as 2 nodes of 2 -----------------------------------------------------

@pytest.fixture(scope="module")
def pool4():
    yield from gloo_pool(4)


@pytest.mark.parametrize("kind", [INTRA_NODE, INTER_NODE])
@pytest.mark.parametrize("op, in_place", [("all_reduce", True), ("broadcast", True), ("reduce", True),
                                          ("all_gather", False), ("all_to_all", False), ("send_recv", False)])
def test_bench_over_sub_groups_gives_each_group_its_own_right_result(pool4, kind, op, in_place) -> None:
    groups = [list(g.ranks) for g in TWO_BY_TWO.groups(kind)]
    kwargs = {"op": op, "size_bytes": 1000, "dtype": "float32", "in_place": in_place, "min_time_s": 0.002}
    out = list(pool4.run("rank_tasks:bench_in_subgroups", {"groups": groups, "kwargs": kwargs}, timeout_s=120))
    for g in groups:
        results = [out[r] for r in g]
        assert [r.rank for r in results] == [0, 1]  # group ranks
        assert all(r.wrong == 0 for r in results), results
        m = to_measurement(results, op=op, backend="gloo", dtype="float32", requested_bytes=1000)
        assert m.world_size == 2


def test_the_pair_exchange_checks_what_each_rank_received_from_its_peer_on_the_other_node(pool4) -> None:
    phases = node_pair_phases(TWO_BY_TWO, "ring")
    from pytest_gpucomm.ops.nodes import phase_kwargs

    kwargs = {"phases": phase_kwargs(phases), "size_bytes": 4096, "dtype": "float32", "min_time_s": 0.002}
    out = list(pool4.run("pytest_gpucomm.ops.nodes:exchange", kwargs, timeout_s=120))
    assert [[(p.rank, p.peer, p.wrong, p.checked) for p in per] for per in out] == [
        [(0, 2, 0, 1024)], [(1, 3, 0, 1024)], [(2, 0, 0, 1024)], [(3, 1, 0, 1024)]]
    [m] = to_measurements(out, phases, backend="gloo", dtype="float32", size_bytes=4096, pattern="ring")
    assert m.world_size == 4 and m.info["pair"] == "node 0 (h0) <-> node 1 (h1)" and m.n >= 1


# -- the plugin, on one host (no launcher) ---------------------------------------------------------

KINDS_ON_ONE_HOST = '''
import pytest


def test_world(group_kind, process_group):
    assert group_kind == "world" and process_group.kind == "world"


@pytest.mark.parametrize("group_kind", ["intra-node"], indirect=True)
def test_intra(group_kind, process_group):
    pass


def test_inter_by_argument(process_group, comm):
    comm.all_reduce(process_group, 4096, kind="inter-node")


@pytest.mark.parametrize("group_kind", ["intra"], indirect=True)
def test_unknown(group_kind, process_group):
    pass
'''


def test_group_kinds_on_one_host_leave_the_ids_alone_and_skip_sub_groups_with_the_reason(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(KINDS_ON_ONE_HOST)
    result = pytester.runpytest("-v", "-rs", "--gpucomm-launch=pool")
    result.assert_outcomes(passed=1, skipped=2, errors=1)
    result.stdout.fnmatch_lines([
        "*::test_world PASSED*",  # no kind in the id: not parametrized on one host
        "SKIPPED [[]1[]] *: group kind 'intra-node' needs a job launched on more than one node (torchrun, srun, "
        "mpirun); this session runs a rank pool on one host",
        "SKIPPED [[]1[]] *: group kind 'inter-node' needs a job launched on more than one node*",
    ])
    result.stdout.fnmatch_lines(["*process_group: unknown group kind 'intra'; known: world, intra-node, inter-node*"])
