"""Tests of pytest_gpucomm.env.fingerprint: what changed in the environment since the baseline."""

from __future__ import annotations

import pickle

from pytest_gpucomm.env.fingerprint import ABSENT, diff_fingerprints, format_fingerprint_diff


def test_diff_fingerprints_reports_changes_additions_removals_and_ignores_volatile_keys():
    old = {"driver": "550.54", "nccl": "2.20.5", "date": "2024-01-01", "run_id": "a",
           "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-1"}], "torch": "2.3", "cuda": {"runtime": "12.4"}}
    new = {"driver": "560.35", "nccl": "2.20.5", "date": "2024-06-01", "run_id": "b",
           "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-2"}], "cuda": {"runtime": "12.4", "toolkit": "12.6"},
           "world_size": 2}
    diffs = diff_fingerprints(old, new)
    assert diffs == [
        ("cuda.toolkit", ABSENT, "12.6"),
        ("driver", "550.54", "560.35"),
        ("gpus.0.uuid", "GPU-1", "GPU-2"),
        ("torch", "2.3", ABSENT),
        ("world_size", ABSENT, 2),
    ]
    assert diff_fingerprints(old, old) == []
    assert diff_fingerprints(None, {"a": 1}) == [("a", ABSENT, 1)]
    assert diff_fingerprints({"a": 2}, {"a": 2.0}) == []
    assert diff_fingerprints({"a": None}, {}) == [("a", None, ABSENT)]
    text = format_fingerprint_diff(diffs)
    assert "driver 550.54 -> 560.35" in text and "torch 2.3 -> (absent)" in text


def test_extra_ignored_keys_are_skipped_at_any_depth():
    old = {"host": "runner-1", "gpus": [{"name": "H200", "host": "a"}]}
    new = {"host": "runner-2", "gpus": [{"name": "H200", "host": "b"}]}
    assert diff_fingerprints(old, new, ignore={"host"}) == []
    assert [k for k, _, _ in diff_fingerprints(old, new)] == ["gpus.0.host", "host"]


def test_format_fingerprint_diff_says_so_when_nothing_changed_and_cuts_long_lists():
    assert format_fingerprint_diff([]) == "no fingerprint change"
    diffs = [(f"k{i}", i, i + 1) for i in range(10)]
    text = format_fingerprint_diff(diffs, limit=3)
    assert text == "k0 0 -> 1; k1 1 -> 2; k2 2 -> 3; and 7 more"


def test_absent_survives_pickling_as_the_same_object():
    # ABSENT is a sentinel that callers test with `is`: a pickled copy must be that same object
    assert pickle.loads(pickle.dumps(("driver", ABSENT, "560.35")))[1] is ABSENT


def test_an_environment_is_compared_with_the_newest_run_of_its_own_source_else_the_newest_of_all():
    from pytest_gpucomm.env.fingerprint import latest_of_source, source_tool

    ours_old, ours_new = {"driver": "1"}, {"driver": "2"}
    nvb = {"driver": "3", "source": {"tool": "nvbandwidth"}}
    nccl = {"comm_library": "NCCL 2.28.9", "source": {"tool": "nccl-tests", "binary": "all_reduce_perf"}}
    runs = [ours_old, nvb, ours_new, nccl]
    assert [source_tool(f) for f in runs] == [None, "nvbandwidth", None, "nccl-tests"]
    assert runs[latest_of_source(runs, {"driver": "9"})] is ours_new  # a run of ours: ours, not the nccl-tests file
    assert runs[latest_of_source(runs, {"source": {"tool": "nvbandwidth"}})] is nvb
    assert runs[latest_of_source(runs, {"source": {"tool": "rccl-tests"}})] is nccl  # none of that source: the newest
    assert runs[latest_of_source(runs, None)] is nccl and latest_of_source([], {}) is None
