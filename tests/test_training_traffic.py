"""The training-step patterns (pytest_gpucomm.ops.patterns): their plans and figures, their result checks
(a wrong element is caught), and the patterns run through pytester on a gloo world of 4 ranks."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from pytest_gpucomm.ops.collectives import BenchResult
from pytest_gpucomm.ops.patterns import (CPU_SCALE, DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, MODELS, PATTERNS,
                                         ModelShape, WrongResult, _DataParallel, _Experts, check_rows, ddp_buckets,
                                         moe_counts, plan, to_measurement)

FAST = ["--gpucomm-device=cpu", "--gpucomm-min-time=0.002", "-p", "no:cacheprovider"]


# -- plans ----------------------------------------------------------------------------------------

def test_ddp_buckets_are_a_first_bucket_then_caps_then_the_rest():
    assert ddp_buckets(100, 10, 25) == [10, 25, 25, 25, 15]
    assert ddp_buckets(5, 10, 25) == [5]
    with pytest.raises(ValueError, match="0 elements"):
        ddp_buckets(0, 10, 25)


def test_dp_plan_of_the_8b_shape_is_its_whole_bf16_gradient_in_ddp_buckets():
    p = plan("dp_grad_sync", MODELS["llama3-8b"], 8)
    assert p.bytes_per_iter == 2 * 8_030_000_000
    n_elem = 8_030_000_000
    assert p.info["buckets"] == len(ddp_buckets(n_elem, DDP_FIRST_BUCKET_BYTES // 2, DDP_BUCKET_BYTES // 2)) == 614
    assert p.busbw_factor == pytest.approx(2 * 7 / 8)  # all_reduce's
    assert p.per_step == 1
    scaled = plan("dp_grad_sync", MODELS["llama3-8b"], 8, CPU_SCALE)
    assert scaled.bytes_per_iter == 2 * (n_elem // CPU_SCALE) and scaled.info["buckets"] == 40


def test_moe_counts_are_seeded_skewed_and_route_every_token_to_top_k_experts():
    c1, load = moe_counts(4, 1000, 160, 6, 0.6, seed=3)
    c2, _ = moe_counts(4, 1000, 160, 6, 0.6, seed=3)
    c3, _ = moe_counts(4, 1000, 160, 6, 0.6, seed=4)
    assert c1 == c2 and c1 != c3
    assert all(sum(row) == 6000 for row in c1) and sum(load) == 4 * 6000
    assert max(load) > 3 * (sum(load) / len(load))  # skewed: the busiest expert gets several times the mean


def test_moe_plan_states_the_imbalance_and_a_busbw_factor_of_the_bytes_that_leave_their_rank():
    p = plan("moe_all_to_all", MODELS["deepseek-v2-moe"], 4, CPU_SCALE)
    counts = p.spec["counts"]
    rows = sum(map(sum, counts))
    assert rows == 4 * 4096 * 6
    assert p.busbw_factor == pytest.approx(1 - sum(counts[i][i] for i in range(4)) / rows)
    assert p.info["expert_imbalance"] > 1 and p.info["rank_imbalance"] >= 1
    assert "busiest expert" in p.info["imbalance"] and p.per_step == 2 * 59
    assert p.bytes_per_iter == round(2 * rows / 4 * p.spec["width"] * 2)


def test_tp_and_pp_plans_groups_and_stages():
    tp = plan("tp_layer", MODELS["llama3-70b"], 4)
    assert tp.spec["groups"] == [[0, 1], [2, 3]] and tp.busbw_factor == 0.5 and tp.per_step == 160
    assert tp.bytes_per_iter == 4 * 8192 * 8192 * 2
    tp8 = plan("tp_layer", MODELS["llama3-8b"], 8, tp_groups=[[4, 5, 6, 7], [0, 1, 2, 3]])
    assert tp8.info["tp"] == 4 and tp8.busbw_factor == 0.75
    pp = plan("pp_send_recv", MODELS["llama3-8b"], 4)
    assert pp.spec["forward"] == [[0, 1], [1, 2], [2, 3]] and pp.bytes_per_iter == 2 * 8192 * 4096 * 2
    pp2 = plan("pp_send_recv", MODELS["llama3-8b"], 4, stages=[[0, 1], [2, 3]])
    assert pp2.spec["forward"] == [[0, 2], [1, 3]]


@pytest.mark.parametrize("pattern, model, world, kw, match", [
    ("tp_layer", "llama3-8b", 3, {}, "even world"),
    ("tp_layer", "llama3-8b", 4, {"tp_groups": [[0, 1], [1, 2]]}, "each rank 0..3 once"),
    ("pp_send_recv", "llama3-8b", 4, {"stages": [[0, 1, 2, 3]]}, "2 stages or more"),
    ("dp_grad_sync", "llama3-8b", 1, {}, "2 ranks or more"),
    ("dp_grad_sync", "deepseek-v2-moe", 2, {}, "no data-parallel gradient"),
    ("moe_all_to_all", "llama3-8b", 2, {}, "no experts"),
    ("dp_grad_sync", "llama3-8b", 2, {"scale": 0}, "scale=0"),
    ("ring_attention", "llama3-8b", 2, {}, "unknown pattern 'ring_attention'"),
])
def test_plan_refuses_what_cannot_run_naming_the_value(pattern, model, world, kw, match):
    with pytest.raises(ValueError, match=match):
        plan(pattern, MODELS[model], world, **kw)


# -- result checks: a wrong result is caught -----------------------------------------------------

def test_check_rows_counts_the_wrong_elements_and_names_the_first():
    exp = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
    assert check_rows(torch, exp.clone(), exp) == (0, 4, None)
    got = exp.clone()
    got[1, 0] = 5
    assert check_rows(torch, got, exp) == (1, 4, (2, 5.0, 3.0))
    assert check_rows(torch, exp[:1], exp)[0] > 0  # a result of the wrong length is wrong


def test_moe_check_catches_a_misplaced_segment_and_a_wrong_combine():
    counts = [[3, 2], [1, 4]]
    e = _Experts(torch, None, "cpu", 1, counts, 5)  # rank 1 of 2: receives 2 rows from rank 0, 4 from itself
    e.recv.copy_(e.expect_recv)
    e.back.copy_(e.sent)
    assert e.check() == (0, (6 + 5) * 5, None)
    e.recv[[0, 2]] = e.recv[[2, 0]].clone()  # a row from rank 0 swapped with one of its own
    wrong, _, first = e.check()
    assert wrong > 0 and first is not None and first[0] == 0
    e.recv.copy_(e.expect_recv)
    e.back.fill_(-7)  # the combine never arrived
    wrong, _, first = e.check()
    assert wrong == 5 * 5 and first[0] == e.recv.numel()


def test_dp_check_wants_the_sum_over_every_rank():
    dp = _DataParallel(torch, None, "cpu", 4, 1000, 100, 250)
    assert [v.numel() for v in dp.views] == [100, 250, 250, 250, 150]
    assert dp.check()[0] > 0  # not reduced: each element is a quarter of the sum
    dp.grad.mul_(4)  # what an all-reduce over 4 ranks of equal gradients gives
    assert dp.check() == (0, 1000, None)
    dp.views[3][7] = 0  # one bucket lost an element
    assert dp.check()[0] == 1 and dp.check()[2][0] == 100 + 250 + 250 + 7


def _result(rank: int, wrong: int = 0) -> BenchResult:
    return BenchResult(rank=rank, in_place=False, samples_s=(1e-3, 2e-3, 3e-3) if rank == 0 else (), batch=1,
                       graph=0, graph_error="", registered=False, register_note="", size_bytes=0, wrong=wrong,
                       checked=10, first_wrong=(3, 0.0, 4.0) if wrong else None, wrong_path="",
                       straggler=(0, 1, 0) if rank == 0 else ())


def test_to_measurement_gives_the_step_time_and_refuses_a_wrong_result():
    p = plan("tp_layer", MODELS["llama3-8b"], 2, CPU_SCALE)
    m = to_measurement([_result(0), _result(1)], p, backend="gloo")
    assert m.op == "tp_layer" and m.world_size == 2 and m.dtype == "bfloat16"
    assert m.info["step_comm_s"] == pytest.approx(2e-3 * 64)
    assert m.info["step"].startswith("tp_layer of the llama3-8b shape on 2 ranks (scaled 1/4096): 128.0 ms per "
                                     "training step (64 x 2.0 ms: ")
    with pytest.raises(WrongResult, match=r"rank 1: 2 of 10 elements wrong \(first at index 3: got 0, expected 4\)"):
        to_measurement([_result(0), _result(1, wrong=2)], p, backend="gloo")


# -- the patterns on a gloo world of 4 ---------------------------------------------------------------

pytestmark_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


@pytestmark_linux
def test_the_patterns_run_and_check_their_results_on_a_gloo_world_of_4(pytester):
    pytester.makepyfile(test_patterns="""
        import pytest
        from pytest_gpucomm.ops.patterns import MODELS, ModelShape

        # a small dense shape: 125000 parameters at the CPU scale, in 4 buckets; the others are the suite's shapes
        MODELS.setdefault("tiny", ModelShape("tiny", params=2e6 * 4096 / 16, hidden=4096, layers=2, seq=64))

        @pytest.mark.world(4)
        def test_dp(process_group, comm):
            m = comm.dp_grad_sync(process_group, "tiny")
            assert m.world_size == 4 and m.op == "dp_grad_sync"

        @pytest.mark.world(4)
        def test_moe(process_group, comm):
            comm.moe_all_to_all(process_group, "deepseek-v2-moe")

        @pytest.mark.world(4)
        @pytest.mark.parametrize("model", ["tiny", "llama3-8b"])
        def test_tp(process_group, comm, model):
            comm.tp_layer(process_group, model)

        @pytest.mark.world(4)
        def test_pp(process_group, comm):
            comm.pp_send_recv(process_group, "tiny")

        def test_dp_on_the_moe_shape(process_group, comm):
            comm.dp_grad_sync(process_group, "deepseek-v2-moe")
        """)
    result = pytester.runpytest(*FAST, "--gpucomm-json=report.json")
    result.assert_outcomes(passed=5, errors=0, failed=1)
    result.stdout.fnmatch_lines(["*test_dp_on_the_moe_shape*the deepseek-v2-moe shape has no data-parallel gradient*"])
    rows = {r["test"].split("::")[-1]: r for r in json.loads((pytester.path / "report.json").read_text())["rows"]}
    assert set(rows) == {"test_dp", "test_moe", "test_tp[tiny]", "test_tp[llama3-8b]", "test_pp"}
    for name, r in rows.items():
        info = r["info"]
        assert r["world_size"] == 4 and r["dtype"] == "bfloat16" and info["backend"] == "gloo", name
        assert info["scale"] == 4096 and info["step_comm_s"] > 0 and " per training step " in info["step"], name
        assert r["busbw_gbps"] > 0 and r["n"] >= 10 and len(info["ranks"]["rank"]) == 4, name
    assert rows["test_dp"]["op"] == "dp_grad_sync" and rows["test_dp"]["info"]["buckets"] == 4
    assert rows["test_dp"]["busbw_factor"] == pytest.approx(1.5)
    assert rows["test_moe"]["op"] == "moe_all_to_all" and "busiest expert" in rows["test_moe"]["info"]["imbalance"]
    assert rows["test_tp[llama3-8b]"]["info"]["tp_groups"] == [[0, 1], [2, 3]]
    assert rows["test_tp[llama3-8b]"]["info"]["per_step"] == 64
    assert rows["test_pp"]["info"]["stages"] == 4 and rows["test_pp"]["busbw_factor"] == 1.0
