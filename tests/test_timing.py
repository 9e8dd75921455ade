"""The timing engine's planning and sampling, on a fake operation with known times."""

import pytest

from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.summary import summarize
from pytest_gpucomm.ops.timing import TimingSettings, measure, plan


class FakeOp:
    """Each iteration takes `per_iter` seconds (reported, not slept); counts calls."""

    def __init__(self, per_iter):
        self.per_iter = per_iter
        self.calls = []
        self.syncs = 0

    def sample(self, batch):
        self.calls.append(batch)
        return lambda: batch * self.per_iter

    def sync(self):
        self.syncs += 1


def test_plan_batches_small_iterations_to_fill_the_target_batch_time():
    s = TimingSettings(min_time_s=0.1, target_batch_s=200e-6)
    p = plan(2e-6, s)
    assert p.batch == 100
    assert p.samples == 500


def test_plan_uses_single_iterations_for_large_messages_and_fills_min_time():
    s = TimingSettings(min_time_s=1.0)
    p = plan(0.02, s)
    assert p.batch == 1
    assert p.samples == 50


def test_plan_respects_min_and_max_samples():
    s = TimingSettings(min_time_s=0.1, min_samples=10, max_samples=100)
    assert plan(1.0, s).samples == 10
    assert plan(1e-4, TimingSettings(min_time_s=10, max_samples=100)).samples == 100


def test_plan_caps_the_batch_and_rounds_it_to_whole_graphs():
    s = TimingSettings(min_time_s=0.1, target_batch_s=1e-3, batch_step=5, max_batch=50)
    assert plan(1e-5, s).batch == 50  # 100 wanted, capped
    assert plan(6e-5, s).batch == 20  # 17 wanted, rounded up to whole graphs of 5
    assert plan(3e-4, s).batch == 4  # below one graph: one graph of 4
    assert plan(2e-3, s).batch == 1


def test_settings_reject_a_graph_size_that_does_not_divide_the_cap():
    with pytest.raises(ValueError, match="batch_step"):
        TimingSettings(batch_step=3, max_batch=50)
    with pytest.raises(ValueError, match="max_batch"):
        TimingSettings(max_batch=0)


def test_warmup_runs_the_agreed_count_to_fill_the_warmup_time():
    op = FakeOp(1e-5)
    agreed = []

    def agree(x):
        agreed.append(x)
        return 5e-3 if len(agreed) == 1 else x  # the first value agreed is the warm-up's time per iteration

    measure(op, TimingSettings(min_time_s=0.01, warmup_iters=3, warmup_min_s=0.05), agree=agree)
    # 3 set-up iterations, 3 timed ones, 0.05 s at the slowest rank's 5 ms = 10 more, then 3 probes,
    # then the first batch
    assert op.calls[:19] == [1] * 19
    assert op.calls[19] > 1


def test_measure_returns_per_iteration_times_and_excludes_warmup():
    op = FakeOp(5e-6)
    samples, p = measure(op, TimingSettings(min_time_s=0.01, warmup_iters=3, warmup_min_s=0))
    assert p.batch > 1
    assert len(samples) == p.samples
    assert all(s == pytest.approx(5e-6) for s in samples)
    assert op.calls[:3] == [1, 1, 1]  # warm-up iterations come first and are not in the samples


def test_measure_uses_agree_so_every_rank_plans_the_same():
    op = FakeOp(1e-3)
    seen = []

    def agree(x):
        seen.append(x)
        return 4e-3  # another rank is slower: plan for it

    samples, p = measure(op, TimingSettings(min_time_s=0.04, warmup_min_s=0), agree=agree)
    assert seen
    assert p.estimate_s == pytest.approx(4e-3)
    assert p.samples == 10


def test_settings_reject_negative_min_time():
    with pytest.raises(ValueError, match="min_time_s"):
        TimingSettings(min_time_s=-1)


def test_summary_statistics_of_known_samples():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median_s == 3.0
    assert s.n == 5
    assert s.min_s == 1.0 and s.max_s == 100.0
    assert s.p99_s == pytest.approx(96.16)
    assert s.cv == pytest.approx(s.stdev_s / s.mean_s)


def test_summary_rejects_empty_and_non_positive_samples():
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, 0.0])


def test_measurement_derives_bandwidth_from_the_median_time():
    m = Measurement(op="all_reduce", size_bytes=10**9, samples_s=[0.5, 1.0, 2.0], devices=("cuda:0",),
                    busbw_factor=1.5, world_size=4, kind="collective")
    assert m.algbw_gbps == pytest.approx(1.0)
    assert m.busbw_gbps == pytest.approx(1.5)
    assert m.gbps == m.busbw_gbps
    assert m.samples_gbps == pytest.approx([3.0, 1.5, 0.75])


def test_both_ways_copy_counts_the_bytes_of_both_directions():
    m = Measurement(op="copy_bidir", size_bytes=10**9, bytes_per_iter=2 * 10**9, samples_s=[1.0],
                    devices=("cuda:0", "cuda:1"))
    assert m.gbps == pytest.approx(2.0)
