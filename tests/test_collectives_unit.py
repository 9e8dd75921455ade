"""Unit tests of the collectives: busbw factors and S against nccl-tests' conventions, element counts, the
controller's combination of the ranks' results, and -- on 2 and 3 gloo ranks -- that every op of OPS, in
every form, computes what its definition expects.

Everything iterates over OPS, so an op added there is covered without editing this file (its nccl-tests
binary must be added to ``NCCL_TESTS`` below, with nccl-tests' own formula).
"""

from __future__ import annotations

import json
import pickle
import statistics
import subprocess
import sys

import pytest

from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.units import describe_size
from pytest_gpucomm.ops.collective_op import Shape
from pytest_gpucomm.ops.collective_results import BenchResult, WrongResult
from pytest_gpucomm.ops.collectives import (
    DTYPES,
    OPS,
    add_op_methods,
    busbw_factor,
    element_count,
    to_measurement,
)
from pytest_gpucomm.ops.single_op_timing import TAIL_MAX_OPS, TAIL_MIN_OPS

#: nccl-tests binary -> (busbw / algbw with n ranks, whether its "size" column is the full buffer of
#: n chunks), from nccl-tests doc/PERFORMANCE.md and src/*.cu (GetBw, GetCollByteCount).
NCCL_TESTS = {
    "all_reduce_perf": (lambda n: 2 * (n - 1) / n, False),
    "all_gather_perf": (lambda n: (n - 1) / n, True),
    "reduce_scatter_perf": (lambda n: (n - 1) / n, True),
    "alltoall_perf": (lambda n: (n - 1) / n, True),
    "broadcast_perf": (lambda n: 1.0, False),
    "reduce_perf": (lambda n: 1.0, False),
    "sendrecv_perf": (lambda n: 1.0, False),
}

SPLIT_OPS = [op for op, spec in OPS.items() if spec.split]
WHOLE_OPS = [op for op, spec in OPS.items() if not spec.split]
CASES = [(op, form == "in_place") for op, spec in OPS.items() for form in spec.forms]
CASE_IDS = [f"{op}-{'in' if ip else 'out'}place" for op, ip in CASES]


def nccl_tests_factor(op: str, n: int) -> float:
    return NCCL_TESTS[OPS[op].nccl_tests][0](n)


# -- what an op is --------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("op", list(OPS))
def test_busbw_factor_matches_nccl_tests(op, n):
    assert busbw_factor(op, n) == pytest.approx(nccl_tests_factor(op, n), rel=1e-12)


def test_busbw_factors_at_8_ranks():
    # a few numbers written out, so that a wrong formula in NCCL_TESTS cannot hide a wrong factor
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("all_gather", 4) == pytest.approx(0.75)
    assert busbw_factor("send_recv", 8) == 1.0


@pytest.mark.parametrize("op", list(OPS))
def test_s_is_the_full_buffer_where_nccl_tests_says_so(op):
    assert OPS[op].split is NCCL_TESTS[OPS[op].nccl_tests][1]


@pytest.mark.parametrize("op", list(OPS))
def test_every_op_has_a_default_form_and_compares_with_the_same_nccl_tests_column(op):
    spec = OPS[op]
    assert spec.forms and set(spec.forms) <= {"in_place", "out_of_place"}
    assert spec.default_in_place is (spec.forms[0] == "in_place")
    for form in spec.forms:
        assert spec.nccl_tests_column(form) == form


def test_busbw_factor_of_an_unknown_op_is_an_error():
    with pytest.raises(KeyError):
        busbw_factor("all_reduce_scatter", 2)


@pytest.mark.parametrize("op", SPLIT_OPS)
def test_split_ops_round_the_element_count_down_to_a_multiple_of_the_world(op):
    # 1000 bytes of float32 = 250 elements; on 3 ranks that rounds down to 249 (83 per rank), 996 bytes
    count = element_count(op, 1000, 3, "float32")
    assert count == 249
    assert count * DTYPES["float32"] == 996


@pytest.mark.parametrize("op", SPLIT_OPS)
@pytest.mark.parametrize(
    "size, n, dtype, expected",
    [
        (4096, 2, "float32", 1024),
        (4096, 3, "float32", 1023),
        (4096, 8, "float32", 1024),
        (1000, 3, "bfloat16", 498),   # 500 elements -> 498
        (1000, 7, "float16", 497),    # 500 elements -> 497
        (4, 8, "float32", 8),         # 1 element: at least one per rank
        (1, 2, "float32", 2),         # 0 elements: at least one per rank
    ],
)
def test_split_ops_element_count_table(op, size, n, dtype, expected):
    assert element_count(op, size, n, dtype) == expected


@pytest.mark.parametrize("op", WHOLE_OPS)
@pytest.mark.parametrize(
    "size, n, dtype, expected",
    [
        (1000, 3, "float32", 250),    # S / elsize, no rounding to the world
        (4096, 3, "float32", 1024),
        (1000, 7, "bfloat16", 500),
        (1001, 2, "float32", 250),    # a partial element is dropped
        (3, 2, "float16", 1),
        (1, 8, "float32", 1),         # at least one element
    ],
)
def test_whole_buffer_ops_keep_s_over_the_element_size(op, size, n, dtype, expected):
    assert element_count(op, size, n, dtype) == expected


def test_element_count_of_an_unknown_dtype_is_an_error():
    with pytest.raises(KeyError):
        element_count("all_reduce", 1024, 2, "float64")


def test_op_definitions_and_comparisons_import_without_torch():
    code = ("import sys\n"
            "import pytest_gpucomm.ops.collectives, pytest_gpucomm.compare.nccl_tests, "
            "pytest_gpucomm.compare.raw_copies\n"
            "heavy = [m for m in ('torch', 'cupy', 'numpy', 'pytest') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the controller's side ------------------------------------------------------------------------

def _result(rank=0, samples=(1e-3, 2e-3, 3e-3), **kw) -> BenchResult:
    fields = dict(rank=rank, in_place=False, samples_s=tuple(samples), batch=4, graph=0, graph_error="",
                  registered=False, register_note="", size_bytes=4096, wrong=0, checked=1024,
                  first_wrong=None, wrong_path="")
    fields.update(kw)
    return BenchResult(**fields)


def test_a_bench_result_survives_pickling():
    r = _result(wrong=2, first_wrong=(3, 0.0, 2.0), wrong_path="a graph replay")
    assert pickle.loads(pickle.dumps(r)) == r


def test_to_measurement_takes_rank_0s_iteration_times_and_the_ranks_compact_data():
    # bench returns the per-iteration times (the slowest rank's) and straggler ids on rank 0 only
    results = [_result(0, (2e-3, 5e-3, 4e-3), straggler=(1, 0, 1), own_median_s=2e-3, lag_median_s=0.0,
                       wait_median_s=1e-3, straggled=1, host="h0", node=0, device="cpu"),
               _result(1, (), own_median_s=1e-3, lag_median_s=2e-3, wait_median_s=0.0, straggled=2, host="h1",
                       node=1, device="cpu")]
    m = to_measurement(results, op="all_gather", backend="gloo", dtype="float32", requested_bytes=4096)
    assert m.samples_s == [2e-3, 5e-3, 4e-3]
    assert (m.op, m.size_bytes, m.world_size, m.dtype, m.kind) == ("all_gather", 4096, 2, "float32", "collective")
    assert m.devices == ("rank0", "rank1")
    assert m.busbw_factor == pytest.approx(busbw_factor("all_gather", 2))
    ranks = m.info.pop("ranks")
    assert m.info == {"backend": "gloo", "in_place": False, "batch": 4, "graph": False, "timer": "host clock"}
    assert ranks == {"rank": [0, 1], "node": [0, 1], "host": ["h0", "h1"], "device": ["cpu", "cpu"],
                     "own_median_s": [2e-3, 1e-3], "lag_median_s": [0.0, 2e-3], "wait_median_s": [1e-3, 0.0],
                     "straggled": [1, 2], "wait_share": [0.0, 0.0], "op_wait_share": [0.0, 0.0],
                     "straggler": [1, 0, 1]}


def test_to_measurement_names_stragglers_by_the_ranks_of_the_results():
    # a group's rank i is results[i]; its rank field says which rank it is (e.g. of a sub-group)
    results = [_result(4, (1e-3, 1e-3), straggler=(1, 1)), _result(6, ())]
    m = to_measurement(results, op="all_reduce", backend="gloo", dtype="float32", requested_bytes=4096)
    assert m.info["ranks"]["straggler"] == [6, 6] and m.info["ranks"]["rank"] == [4, 6]


def test_to_measurement_notes_graphs_registration_and_a_rounded_size():
    results = [_result(r, graph=50, graph_error="RuntimeError: no", registered=True, register_note="x",
                       size_bytes=996, in_place=True) for r in range(3)]
    m = to_measurement(results, op="reduce_scatter", backend="nccl", dtype="bfloat16", requested_bytes=1000)
    assert m.size_bytes == 996
    del m.info["ranks"]
    assert m.info == {"backend": "nccl", "in_place": True, "batch": 4, "graph": True, "timer": "device events",
                      "graph_error": "RuntimeError: no", "registered": True, "register_note": "x",
                      "requested_bytes": 1000}


def test_a_wrong_element_on_any_rank_is_a_wrong_result_naming_each_such_rank():
    results = [
        _result(0),
        _result(1, wrong=5, checked=1024, first_wrong=(0, 0.0, 3.0)),
        _result(2, wrong=1, checked=1024, first_wrong=(7, 2.5, 1.0), wrong_path="a graph replay"),
    ]
    with pytest.raises(WrongResult) as e:
        to_measurement(results, op="all_reduce", backend="gloo", dtype="float32", requested_bytes=4096)
    assert str(e.value) == (
        f"all_reduce produced a wrong result at {describe_size(4096)} on 3 ranks (gloo):\n"
        "  rank 1: 5 of 1024 elements wrong (first at index 0: got 0, expected 3)\n"
        "  rank 2: 1 of 1024 elements wrong after a graph replay (first at index 7: got 2.5, expected 1)"
    )
    assert [r.rank for r in e.value.bad] == [1, 2]


def test_add_op_methods_gives_a_method_per_op_that_calls_collective():
    class Fixture:
        def collective(self, op, group, size=None, **kw):
            return (op, group, size, kw)

        def all_reduce(self, group, size=None, **kw):  # a method the class defines itself stays
            return "own"

    add_op_methods(Fixture)
    f = Fixture()
    assert f.all_reduce("g") == "own"
    for op in OPS:
        if op != "all_reduce":
            assert getattr(f, op)("g", "4KiB", in_place=True) == (op, "g", "4KiB", {"in_place": True})
            assert getattr(Fixture, op).__name__ == op and getattr(Fixture, op).__doc__


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op", list(OPS))
def test_measurement_of_a_collective_derives_busbw_from_algbw(op, n):
    # median 2 ms over samples of 1, 2 and 3 ms: algbw = 4096 B / 2 ms = 2.048e6 B/s = 0.002048 GB/s
    m = Measurement(
        op=op,
        size_bytes=4096,
        samples_s=[3e-3, 1e-3, 2e-3],
        devices=tuple(f"rank{r}" for r in range(n)),
        busbw_factor=busbw_factor(op, n),
        world_size=n,
        dtype="float32",
        kind="collective",
        info={"backend": "gloo"},
    )
    assert m.bytes_per_iter == 4096
    assert m.median_s == pytest.approx(2e-3)
    assert m.algbw_gbps == pytest.approx(4096 / 2e-3 / 1e9)
    assert m.busbw_gbps == pytest.approx(m.algbw_gbps * nccl_tests_factor(op, n))
    assert m.gbps == pytest.approx(m.busbw_gbps)  # collectives are judged on busbw
    assert m.samples_gbps == pytest.approx([4096 * nccl_tests_factor(op, n) / 1e9 / s for s in m.samples_s])
    assert m.where == f"{n} ranks (gloo)"
    d = m.to_dict(with_samples=False)
    assert d["busbw_gbps"] == pytest.approx(d["algbw_gbps"] * d["busbw_factor"])
    assert d["world_size"] == n and d["kind"] == "collective"


def test_nccl_workers_get_graph_registration_off_unless_the_user_sets_it():
    from pytest_gpucomm.ops.collectives import worker_env

    assert worker_env("nccl", {}) == {"NCCL_GRAPH_REGISTER": "0"}
    assert worker_env("nccl", {"NCCL_GRAPH_REGISTER": "1"}) == {}
    assert worker_env("gloo", {}) == {}


def test_a_batch_of_small_ops_is_replays_of_whole_graphs():
    from pytest_gpucomm.ops.timed_case import GRAPH_OPS, GRAPH_REPLAYS, graph_shape

    assert graph_shape(GRAPH_OPS * GRAPH_REPLAYS) == (GRAPH_OPS, GRAPH_REPLAYS)
    assert graph_shape(2 * GRAPH_OPS) == (GRAPH_OPS, 2)
    assert graph_shape(GRAPH_OPS - 1) == (GRAPH_OPS - 1, 1)  # below one graph: one graph of the batch
    assert graph_shape(1) == (1, 1)


# -- every op computes what its definition expects (gloo ranks) -----------------------------------

@pytest.fixture(scope="module")
def gloo_zygote():
    """The zygote that forks both pools' workers: one import of torch for the module's 5 ranks."""
    from conftest import POOL_ENV
    from pytest_gpucomm.ranks.spawn import Zygote

    z = Zygote(POOL_ENV, "gloo", start_timeout_s=60)
    yield z
    z.close()


@pytest.fixture(scope="module", params=[2, 3], ids=["2ranks", "3ranks"])
def gloo_pool(request, gloo_zygote):
    from proc_helpers import gloo_pool as started_pool

    yield from started_pool(request.param, gloo_zygote)


@pytest.mark.parametrize("op, in_place", CASES, ids=CASE_IDS)
def test_every_op_and_form_gives_its_expected_result_on_gloo(gloo_pool, op, in_place):
    n = gloo_pool.world_size
    kwargs = {"op": op, "size_bytes": 1000, "dtype": "float32", "in_place": in_place, "min_time_s": 0.002}
    results = list(gloo_pool.run("pytest_gpucomm.ops.collectives:bench", kwargs, timeout_s=120))
    assert [r.rank for r in results] == list(range(n))
    for r in results:
        assert isinstance(r, BenchResult)
        assert (r.wrong, r.first_wrong, r.in_place) == (0, None, in_place)
        assert r.size_bytes == element_count(op, 1000, n, "float32") * 4
        assert r.graph == 0 and not r.registered
    # rank 0 returns the iteration times and who arrived last in each; the others their summaries only
    first = results[0]
    assert len(first.samples_s) == len(first.straggler) >= 10
    assert all(r.samples_s == () and r.straggler == () for r in results[1:])
    assert set(first.straggler) <= set(range(n)) and sum(r.straggled for r in results) == len(first.straggler)
    for r in results:
        # the iteration's time is the longest own time, so its median bounds each rank's median own time
        assert 0 < r.own_median_s <= statistics.median(first.samples_s)
        assert r.lag_median_s >= 0 and r.wait_median_s >= 0 and r.device == "cpu" and r.host
    # each rank checked every element of its result (reduce: only rank 0 has one)
    import torch

    count = element_count(op, 1000, n, "float32")
    for r in results:
        exp = OPS[op].expected(torch, Shape(count, count // n if OPS[op].split else count, r.rank, n), "cpu")
        assert r.checked == (0 if exp is None else exp.numel())
    assert results[0].checked > 0
    m = to_measurement(results, op=op, backend="gloo", dtype="float32", requested_bytes=1000)
    assert m.world_size == n and m.busbw_gbps > 0


# -- single operations, each timed on its own (the tail) --------------------------------------------

def test_to_measurement_puts_the_single_op_figures_and_their_histogram_in_info_tail():
    import numpy as np

    from pytest_gpucomm.sketches import Histogram

    times = tuple(1e-4 * (1 + 0.01 * i) for i in range(1200))  # 100 us .. 1.3 ms
    results = [_result(0, op_times_s=times, op_own_p50_s=1e-4, op_own_p99_s=2e-4, op_timer="host clock per operation",
                       op_timer_resolution_s=1e-9, op_timer_overhead_s=5e-8, op_budget_s=0.1),
               _result(1, (), op_own_p50_s=3e-4, op_own_p99_s=4e-4, op_timer="host clock per operation",
                       op_timer_resolution_s=1e-9, op_timer_overhead_s=7e-8, op_budget_s=0.1)]
    tail = to_measurement(results, op="all_reduce", backend="gloo", dtype="float32", requested_bytes=4096).info["tail"]
    p50, p99, p999 = np.percentile(np.array(times) * 1e6, [50, 99, 99.9])
    assert tail["n"] == 1200
    assert (tail["p50_us"], tail["p99_us"], tail["p999_us"]) == pytest.approx((p50, p99, p999))
    assert tail["max_us"] == pytest.approx(max(times) * 1e6) and tail["jitter"] == pytest.approx(p99 / p50)
    assert tail["own_p50_us"] == pytest.approx([100.0, 300.0]) and tail["own_p99_us"] == pytest.approx([200.0, 400.0])
    assert tail["overhead_us"] == pytest.approx(0.07) and tail["resolution_us"] == pytest.approx(0.001)
    assert (tail["timer"], tail["budget_s"]) == ("host clock per operation", 0.1)
    hist = Histogram.from_dict(tail["hist"])
    assert hist.n == 1200 and hist.quantile(0.5) == pytest.approx(p50 * 1e-6, rel=0.003)
    json.dumps(tail)  # the JSON report takes it as it is


def test_to_measurement_states_no_p99_9_below_1000_single_ops():
    results = [_result(0, op_times_s=tuple(1e-4 + 1e-7 * i for i in range(999)), op_timer="host clock per operation")]
    tail = to_measurement(results, op="all_reduce", backend="gloo", dtype="float32", requested_bytes=4096).info["tail"]
    assert tail["n"] == 999 and tail["p999_us"] is None and tail["p99_us"] > tail["p50_us"]


@pytest.mark.parametrize("op", ["all_reduce", "send_recv"])
def test_bench_times_single_ops_from_its_budget_and_returns_the_slowest_ranks_time_per_op(gloo_pool, op):
    kwargs = {"op": op, "size_bytes": 4096, "dtype": "float32", "min_time_s": 0.002, "tail_time_s": 0.05}
    results = list(gloo_pool.run("pytest_gpucomm.ops.collectives:bench", kwargs, timeout_s=120))
    first = results[0]
    k = len(first.op_times_s)
    assert TAIL_MIN_OPS <= k <= TAIL_MAX_OPS  # from the 0.05 s budget at the agreed time of one op
    assert all(r.op_times_s == () for r in results[1:])
    for r in results:
        assert 0 < r.op_own_p50_s <= r.op_own_p99_s and r.op_budget_s == 0.05
        assert r.op_timer == "host clock per operation" and r.op_timer_resolution_s > 0 and r.op_timer_overhead_s > 0
        # per op the time is the slowest rank's: its median bounds every rank's own median
        assert r.op_own_p50_s <= statistics.median(first.op_times_s)
    m = to_measurement(results, op=op, backend="gloo", dtype="float32", requested_bytes=4096)
    assert m.info["tail"]["n"] == k and m.info["tail"]["p50_us"] <= m.info["tail"]["p99_us"] <= m.info["tail"]["max_us"]
    assert len(m.samples_s) >= 10  # the batched samples are still there


def test_bench_skips_the_single_ops_with_a_zero_budget(gloo_pool):
    kwargs = {"op": "all_reduce", "size_bytes": 1024, "min_time_s": 0.002, "tail_time_s": 0}
    results = list(gloo_pool.run("pytest_gpucomm.ops.collectives:bench", kwargs, timeout_s=120))
    assert all(r.op_times_s == () and r.op_timer == "" for r in results)
    m = to_measurement(results, op="all_reduce", backend="gloo", dtype="float32", requested_bytes=1024)
    assert "tail" not in m.info and len(m.samples_s) >= 10
