"""The status type that every table, report and JUnit property prints."""

import json

from pytest_gpucomm.vocab import Status


def test_a_status_prints_and_serialises_as_its_word():
    assert f"{Status.REGRESSION}" == "REGRESSION" and str(Status.FLOOR_OK) == "floor-ok"
    assert json.dumps({"status": Status.NOT_GATED}) == '{"status": "not gated"}'
    assert json.dumps({"status": Status.NOT_GATED_STRICT}) == '{"status": "NOT GATED"}'
    assert Status("improved") is Status.IMPROVED and Status.OK == "ok"


def test_only_missed_thresholds_regressions_tails_strict_new_strict_not_gated_and_floors_fail():
    assert {s for s in Status if s.failed} == {Status.FAILED, Status.REGRESSION, Status.TAIL, Status.NEW_STRICT,
                                               Status.NOT_GATED_STRICT, Status.FLOOR}


def test_the_measuring_time_the_start_timeout_and_the_baseline_folder_are_the_vocabularys_everywhere():
    import inspect

    from pytest_gpucomm.cli import baselines
    from pytest_gpucomm.ops import timing
    from pytest_gpucomm import vocab
    from pytest_gpucomm.ops import collectives, nodes, patterns
    from pytest_gpucomm.ranks import pool, spawn

    def default(f, name):
        return inspect.signature(f).parameters[name].default

    assert timing.TimingSettings().min_time_s == vocab.DEFAULT_MIN_TIME_S == 0.1
    for f in (collectives.bench, patterns.run_pattern, nodes.exchange):
        assert default(f, "min_time_s") == vocab.DEFAULT_MIN_TIME_S, f
        assert default(f, "max_samples") == vocab.DEFAULT_MAX_SAMPLES == timing.TimingSettings().max_samples, f
    for f in (collectives.bench, nodes.exchange):
        assert default(f, "dtype") == vocab.DEFAULT_DTYPE == "float32", f
    assert default(pool.RankPool.__init__, "start_timeout_s") == vocab.RANK_START_TIMEOUT_S == 120.0
    assert default(spawn.Zygote.__init__, "start_timeout_s") == vocab.RANK_START_TIMEOUT_S
    assert baselines.DEFAULT_BASELINE_DIR == vocab.DEFAULT_BASELINE_DIR == "baselines"  # its name there, kept
