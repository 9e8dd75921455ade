"""The gate's re-measure (``Record.redo``) on CPU: a copy in a new process, a collective in a new process
group, for the session's first ``MAX_FRESH_REMEASURES``; past them in the current state, saying why.

The tests call ``redo`` themselves, as the gate does, so they pin the re-measure and not the gate's use
of it.  The inner tests write what they saw to ``seen.json``; the outer tests check it.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from proc_helpers import process_running, rank_processes

from pytest_gpucomm import vocab
from pytest_gpucomm.measurement import Measurement, Remeasure
from pytest_gpucomm.ops import copies

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc)")

FAST = ["--gpucomm-device=cpu", "--gpucomm-min-time=0.002", "-p", "no:cacheprovider"]

PID_TASKS = "import os\n\ndef pid(ctx):\n    return os.getpid()\n"


def _workers_of(parent_pid: int) -> set[int]:
    """Live rank workers and zygotes started by ``parent_pid`` (zombies included: an unreaped child is a leak
    too)."""
    return set(rank_processes(parent_pid, zombies=True))


@pytest.fixture(autouse=True)
def no_workers_left():
    """Every in-process pytester run must have stopped the workers it started when it returns."""
    before = _workers_of(os.getpid())
    yield
    left = _workers_of(os.getpid()) - before
    assert not left, f"rank workers left running: {left}"


def _seen(pytester):
    return json.loads((pytester.path / "seen.json").read_text())


# -- copies -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_copys_fresh_remeasure_runs_in_a_new_process_each_time_and_the_record_keeps_the_first(pytester):
    pytester.makepyfile(
        """
        import json, os

        def test_copy(gpu_pair, comm, gpucomm_state):
            first = comm.copy(gpu_pair, "64KiB")
            record = gpucomm_state.records[-1]
            seen = []
            for _ in range(2):  # the gate may re-measure a case twice: each call is a new re-measure
                again = record.redo()
                m = again.measurement
                seen.append({"fresh": again.fresh, "how": again.how, "pid": m.info.get("pid"),
                             "alive_after": os.path.exists(f"/proc/{m.info.get('pid')}"),
                             "op": m.op, "devices": list(m.devices), "size": m.size_bytes, "n": m.n})
            assert record.measurement is first
            json.dump({"me": os.getpid(), "redo": seen, "count": gpucomm_state.fresh_remeasures},
                      open("seen.json", "w"))

        def test_copy_both_ways(gpu_pair, comm, gpucomm_state):
            comm.copy_both_ways(gpu_pair, "16KiB")
            again = gpucomm_state.records[-1].redo()
            assert again.fresh and again.measurement.op == "copy_bidir"
            assert again.measurement.bytes_per_iter == 2 * 16384
            assert again.measurement.info["pid"] != os.getpid()
        """
    )
    result = pytester.runpytest(*FAST, "-k", "0-")
    result.assert_outcomes(passed=2)
    seen = _seen(pytester)
    pids = [r["pid"] for r in seen["redo"]]
    assert all(isinstance(p, int) for p in pids) and seen["me"] not in pids and pids[0] != pids[1]
    for r in seen["redo"]:
        assert r["fresh"] and r["how"] == "in a new process"
        assert (r["op"], r["devices"], r["size"]) == ("copy", ["cpu:0", "cpu:1"], 65536) and r["n"] >= 10
        assert not r["alive_after"]  # the one-rank pool is closed (and reaped) before redo returns
    assert seen["count"] == 2  # each fresh re-measure counts against the session's cap


def test_a_failing_fresh_copy_process_fails_the_test_with_its_traceback_and_leaves_no_process(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm.ops.copies import copy_spec

        def test_copy_on_devices_the_worker_lacks(gpucomm_state):
            gpucomm_state.copy_in_new_process(copy_spec("peer", ["cuda:0", "cuda:99"], 4096), label="the test")
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*task 'the test: fresh re-measure of peer copy cuda:0->cuda:99' raised on rank(s)*(world size 1)*",
        # fewer than 100 GPUs on any machine
        "*CopyError: the copy needs cuda:0, cuda:99, but this process (pid *) sees * GPU*",
    ])


# A user's test module that imported pytest_gpucomm.ranks (for RankError, say) and runs the plugin twice in
# one process with pytester: the package outlives each in-process run, the submodules a run imported
# (pool, spawn, protocol) do not.  Nested in a pytest subprocess so that this session's own imports (other
# test files import ranks.pool) cannot hide it.
TWO_SESSIONS = f'''
import torch  # noqa: F401 - compiled: imported once, before pytester's snapshot of sys.modules

import pytest_gpucomm.ranks  # noqa: F401 - the package only, as `from pytest_gpucomm.ranks import RankError`

FRESH_COPY = """
from pytest_gpucomm.ops.copies import copy_spec

def test_fresh_copy(gpucomm_state):
    m = gpucomm_state.copy_in_new_process(copy_spec("peer", ["cpu:0", "cpu:1"], 4096), label="t")
    assert m.op == "copy" and m.n > 0
"""


def test_two_sessions(pytester):
    pytester.makepyfile(FRESH_COPY)
    for session in (1, 2):
        result = pytester.runpytest(*{FAST!r}, "--gpucomm-timeout=30")  # pools' start timeout: 120 s
        assert result.ret == 0, f"session {{session}}: " + result.stdout.str()
'''


@pytest.mark.slow
def test_a_second_in_process_session_starts_its_one_rank_pool_when_the_ranks_package_outlived_the_first(pytester):
    pytester.makepyfile(test_sessions=TWO_SESSIONS)
    # A failing second session waits out the pool's start timeout (120 s), then its message names the pool
    # that never became ready; a pass takes the start of two one-rank pools, seconds.
    result = pytester.runpytest_subprocess("-p", "pytester", "-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=1)


# -- collectives ------------------------------------------------------------------------------------

def test_a_collectives_fresh_remeasure_runs_in_a_new_process_group(pytester):
    pytester.makepyfile(pid_tasks=PID_TASKS)
    pytester.makepyfile(
        """
        import json

        def test_all_reduce(process_group, comm, gpucomm_state):
            before = process_group.run("pid_tasks:pid")
            first = comm.all_reduce(process_group, 4096)
            again = gpucomm_state.records[-1].redo()
            after = process_group.run("pid_tasks:pid")
            assert gpucomm_state.records[-1].measurement is first
            json.dump({"before": before, "after": after, "fresh": again.fresh, "how": again.how,
                       "op": again.measurement.op, "world": again.measurement.world_size}, open("seen.json", "w"))
        """
    )
    pytester.syspathinsert()
    pytester.runpytest(*FAST).assert_outcomes(passed=1)
    seen = _seen(pytester)
    assert set(seen["before"]).isdisjoint(seen["after"])  # new ranks: a new process group
    assert seen["fresh"] and seen["how"] == "in a new process group"
    assert (seen["op"], seen["world"]) == ("all_reduce", 2)


# -- the session's cap ------------------------------------------------------------------------------

@pytest.mark.slow
def test_past_max_fresh_remeasures_copies_and_collectives_remeasure_in_place_and_say_why(pytester, monkeypatch):
    monkeypatch.setattr(vocab, "MAX_FRESH_REMEASURES", 2)
    pytester.makepyfile(pid_tasks=PID_TASKS)
    pytester.makepyfile(
        """
        import json, os

        def test_remeasures(gpu_pair, process_group, comm, gpucomm_state):
            comm.copy(gpu_pair, "16KiB")
            copy = gpucomm_state.records[-1]
            comm.all_reduce(process_group, 4096)
            coll = gpucomm_state.records[-1]
            seen = []
            for record in (copy, coll, coll, copy):  # the cap is shared by copies and collectives
                ranks = process_group.run("pid_tasks:pid")
                again = record.redo()
                seen.append({"fresh": again.fresh, "how": again.how, "pid": again.measurement.info.get("pid"),
                             "new_ranks": ranks != process_group.run("pid_tasks:pid")})
            json.dump({"me": os.getpid(), "seen": seen, "count": gpucomm_state.fresh_remeasures},
                      open("seen.json", "w"))
        """
    )
    pytester.syspathinsert()
    pytester.runpytest(*FAST, "-k", "0-").assert_outcomes(passed=1)
    seen = _seen(pytester)
    copy1, coll1, coll2, copy2 = seen["seen"]
    assert (copy1["fresh"], coll1["fresh"], coll2["fresh"], copy2["fresh"]) == (True, True, False, False)
    assert copy1["pid"] not in (None, seen["me"]) and coll1["new_ranks"]
    assert coll2["how"] == "in the same process group: the session's 2 fresh re-measures were used up"
    assert not coll2["new_ranks"]
    assert copy2["how"] == "in the same process: the session's 2 fresh re-measures were used up"
    assert copy2["pid"] is None  # measured here, in the pytest process
    assert seen["count"] == 2


@pytest.mark.slow
def test_no_rank_worker_outlives_a_session_that_remeasured_copies_and_collectives(pytester):
    pytester.makepyfile(pid_tasks=PID_TASKS)
    pytester.makepyfile(
        """
        import json, os

        def test_remeasures(gpu_pair, process_group, comm, gpucomm_state):
            comm.copy(gpu_pair, "16KiB")
            copy_pid = gpucomm_state.records[-1].redo().measurement.info["pid"]
            comm.all_reduce(process_group, 4096)
            gpucomm_state.records[-1].redo()
            json.dump({"controller": os.getpid(), "pids": [copy_pid] + process_group.run("pid_tasks:pid")},
                      open("seen.json", "w"))
        """
    )
    result = pytester.runpytest_subprocess(*FAST, "-k", "0-")
    result.assert_outcomes(passed=1)
    seen = _seen(pytester)
    assert len(seen["pids"]) == 3
    assert not [p for p in seen["pids"] if process_running(p, None)]
    assert not _workers_of(seen["controller"])


# -- units ------------------------------------------------------------------------------------------

def test_bench_copy_measures_with_buffers_of_its_own_and_returns_a_measurement_dict_with_its_pid():
    spec = copies.copy_spec("peer", ["cpu:0", "cpu:1"], 8192, both_ways=True)
    d = copies.bench_copy(None, **spec, timing={"min_time_s": 0.002})
    json.dumps(d)  # plain JSON values: it crosses the process boundary
    m = Measurement.from_dict(d)
    assert (m.op, m.devices, m.size_bytes, m.bytes_per_iter) == ("copy_bidir", ("cpu:0", "cpu:1"), 8192, 16384)
    assert m.info["pid"] == os.getpid() and m.n >= 10


@pytest.mark.parametrize("args, message", [
    (("nvlink", ["cpu:0", "cpu:1"], 1), "copy must be one of 'peer', 'host_device'"),
    (("peer", ["cpu:0"], 1), "a peer copy needs [src, dst] devices"),
    (("host_device", ["cuda:0"], 1), "direction 'h2d', 'd2h' or 'both'"),
])
def test_copy_spec_rejects_what_names_no_copy(args, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        copies.copy_spec(*args)


def test_a_remeasure_is_frozen():
    r = Remeasure(Measurement(op="copy", size_bytes=1, samples_s=[1.0], devices=("cpu:0", "cpu:1")), True, "here")
    with pytest.raises(AttributeError):
        r.fresh = False  # type: ignore[misc]
