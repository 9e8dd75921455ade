"""Unit tests of the collectives' arithmetic: busbw factors, element counts, forms, Measurement.

No processes are started here; everything is pure Python (pytest_gpucomm.ops.collectives imports torch
only inside the per-rank task).
"""

from __future__ import annotations

import pytest

from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.ops.collectives import DTYPES, OPS, busbw_factor, element_count

ALL_OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv"]
SPLIT_OPS = ["all_gather", "reduce_scatter", "all_to_all"]
WHOLE_OPS = ["all_reduce", "broadcast", "reduce", "send_recv"]


def nccl_tests_factor(op: str, n: int) -> float:
    """busbw / algbw as nccl-tests' PERFORMANCE.md defines it."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def test_the_seven_collectives_are_known():
    assert sorted(OPS) == sorted(ALL_OPS)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op", ALL_OPS)
def test_busbw_factor_matches_nccl_tests(op, n):
    assert busbw_factor(op, n) == pytest.approx(nccl_tests_factor(op, n), rel=1e-12)


@pytest.mark.parametrize(
    "op, n, expected",
    [
        ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
        ("all_gather", 2, 0.5), ("all_gather", 4, 0.75), ("all_gather", 8, 0.875),
        ("reduce_scatter", 2, 0.5), ("reduce_scatter", 4, 0.75), ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5), ("all_to_all", 4, 0.75), ("all_to_all", 8, 0.875),
        ("broadcast", 2, 1.0), ("broadcast", 4, 1.0), ("broadcast", 8, 1.0),
        ("reduce", 2, 1.0), ("reduce", 4, 1.0), ("reduce", 8, 1.0),
        ("send_recv", 2, 1.0), ("send_recv", 4, 1.0), ("send_recv", 8, 1.0),
    ],
)
def test_busbw_factor_literal_values(op, n, expected):
    # the same table written out as numbers, so a wrong formula above cannot hide a wrong factor
    assert busbw_factor(op, n) == pytest.approx(expected, rel=1e-12)


def test_busbw_factor_of_an_unknown_op_is_an_error():
    with pytest.raises(KeyError):
        busbw_factor("all_reduce_scatter", 2)


@pytest.mark.parametrize("op", SPLIT_OPS)
def test_split_ops_round_the_element_count_down_to_a_multiple_of_the_world(op):
    # 1000 bytes of float32 = 250 elements; on 3 ranks that rounds down to 249 (83 per rank), 996 bytes
    count = element_count(op, 1000, 3, "float32")
    assert count == 249
    assert count % 3 == 0
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


@pytest.mark.parametrize(
    "op, forms",
    [
        ("all_reduce", ("in_place",)),
        ("broadcast", ("in_place",)),
        ("reduce", ("in_place",)),
        ("all_gather", ("out_of_place", "in_place")),
        ("reduce_scatter", ("out_of_place", "in_place")),
        ("all_to_all", ("out_of_place",)),
        ("send_recv", ("out_of_place",)),
    ],
)
def test_forms_of_each_op_default_first(op, forms):
    assert OPS[op].forms == forms
    assert OPS[op].default_in_place is (forms[0] == "in_place")


@pytest.mark.parametrize("op", ALL_OPS)
def test_split_flag_marks_the_ops_whose_s_is_the_full_buffer(op):
    assert OPS[op].split is (op in SPLIT_OPS)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op", ALL_OPS)
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
    from pytest_gpucomm.ops.collectives import GRAPH_OPS, GRAPH_REPLAYS, graph_shape

    assert graph_shape(GRAPH_OPS * GRAPH_REPLAYS) == (GRAPH_OPS, GRAPH_REPLAYS)
    assert graph_shape(2 * GRAPH_OPS) == (GRAPH_OPS, 2)
    assert graph_shape(GRAPH_OPS - 1) == (GRAPH_OPS - 1, 1)  # below one graph: one graph of the batch
    assert graph_shape(1) == (1, 1)
