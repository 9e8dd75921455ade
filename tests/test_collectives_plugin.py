"""Acceptance tests of the collectives on CPU (gloo worlds of rank processes), through pytester.

Each test writes a small test project into pytester's directory and runs it, in-process where that is
enough and in a separate process where the point is what happens to the processes (end of session,
Ctrl-C).  Task modules for the ranks are written next to the tests; the pool hands the controller's
sys.path (which holds pytester's directory) to the workers, so the ranks import them by name.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proc_helpers import listening_ports, rank_processes, rank_workers  # noqa: E402

from pytest_gpucomm.ops.collectives import OPS as OP_DEFS, busbw_factor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (/proc)")

FAST = ["--gpucomm-device=cpu", "--gpucomm-min-time=0.002", "-p", "no:cacheprovider"]
OPS = list(OP_DEFS)


# -- process helpers ----------------------------------------------------------------------------------

def _workers(parent_pid: int | None = None) -> dict[int, list[str]]:
    """Live rank workers (pid -> argv), optionally only those started by ``parent_pid``: started as processes
    of their own or forked by the session's zygote (which counts too: it must not outlive the session)."""
    return rank_processes(parent_pid)


def _is_worker(pid: int) -> bool:
    return pid in rank_processes()


_listening_ports = listening_ports


def _wait_until(cond, timeout: float, step: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step)


@pytest.fixture(autouse=True)
def no_workers_left_by_in_process_runs():
    """Every in-process pytester run must have stopped the workers it started by the time it returns."""
    before = set(_workers(os.getpid()))
    yield
    left = {pid: argv for pid, argv in _workers(os.getpid()).items() if pid not in before}
    assert not left, f"rank workers left running after the pytester run: {left}"


def _outcome(result, name: str, when: str = "call"):
    """The report of one phase of the inner test function ``name`` (in-process runs only)."""
    reports = [r for r in result.reprec.getreports("pytest_runtest_logreport")
               if r.nodeid.endswith("::" + name) and r.when == when]
    assert len(reports) == 1, [r.nodeid for r in reports]
    return reports[0]


# -- worlds and ops -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_gloo_worlds_of_2_and_4_run_every_collective_and_report_busbw(pytester):
    pytester.makepyfile(
        test_worlds=f"""
        import pytest

        OPS = {OPS!r}

        @pytest.mark.parametrize("op", OPS)
        def test_world2(comm, process_group, op):
            assert process_group.world_size == 2
            m = comm.collective(op, process_group, "4KiB")
            assert m.world_size == 2 and m.kind == "collective" and m.busbw_gbps > 0

        @pytest.mark.world(4)
        @pytest.mark.parametrize("op", OPS)
        def test_world4(comm, process_group, op):
            assert process_group.world_size == 4
            m = comm.collective(op, process_group, "4KiB")
            assert m.world_size == 4 and m.busbw_gbps > 0
        """
    )
    result = pytester.runpytest(*FAST, "--gpucomm-json=report.json", "-v")  # -v: the full table
    result.assert_outcomes(passed=2 * len(OPS))
    result.stdout.fnmatch_lines(["*= gpucomm results =*", "*devices / world*GB/s*"])

    # The terminal table: one row per measurement, "N ranks (gloo)", 4 KiB, a positive GB/s (busbw) figure.
    row = re.compile(r"^\s*(test_world[24]\[\w+\])\s+(\w+)\s+(\d) ranks \(gloo\)\s+4096\s+4 KiB\s+([0-9.e+-]+)\s")
    rows = {}
    for line in result.stdout.lines:
        mo = row.match(line)
        if mo:
            rows[(mo.group(2), int(mo.group(3)))] = float(mo.group(4))
    assert set(rows) == {(op, n) for op in OPS for n in (2, 4)}, result.stdout.str()
    assert all(g > 0 for g in rows.values())

    # The JSON report: busbw = algbw x nccl-tests' factor for the world size.
    doc = json.loads((pytester.path / "report.json").read_text())
    assert len(doc["rows"]) == 2 * len(OPS)
    for r in doc["rows"]:  # (the factors themselves are checked against nccl-tests in test_collectives_unit)
        n = r["world_size"]
        assert r["info"]["backend"] == "gloo"
        assert r["size_bytes"] == 4096
        assert r["busbw_factor"] == pytest.approx(busbw_factor(r["op"], n))
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * busbw_factor(r["op"], n))


def test_in_place_and_out_of_place_forms_pass_and_out_of_place_all_reduce_is_an_error(pytester):
    pytester.makepyfile(
        test_forms="""
        import pytest

        @pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
        @pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
        def test_both_forms(comm, process_group, op, in_place):
            m = comm.collective(op, process_group, "4KiB", in_place=in_place)
            assert m.info["in_place"] is in_place
            assert m.size_bytes == 4096

        def test_default_form_is_out_of_place(comm, process_group):
            assert comm.all_gather(process_group, "4KiB").info["in_place"] is False

        def test_out_of_place_all_reduce(comm, process_group):
            comm.all_reduce(process_group, "4KiB", in_place=False)
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=5, failed=1)
    report = _outcome(result, "test_out_of_place_all_reduce")
    assert report.failed
    text = report.longreprtext
    assert "all_reduce has no out-of-place form" in text
    assert "test_forms.py::test_out_of_place_all_reduce" in text
    # only the five measurements that ran are in the table
    assert sum(1 for line in result.stdout.lines if "2 ranks (gloo)" in line) == 5


# -- correctness check --------------------------------------------------------------------------------

CORRUPT_TASKS = """
import torch
import torch.distributed as dist

_original = None
WRONG = 5


def corrupt(ctx):
    '''On rank 1, every all_reduce of the float32 data (the op under test) leaves its first WRONG elements zeroed;
    the ranks' own bookkeeping on gloo (the agreements, the samples' figures: float64) is left alone.'''
    global _original
    if ctx.rank != 1 or _original is not None:
        return False
    _original = dist.all_reduce

    def broken(tensor, *args, **kwargs):
        work = _original(tensor, *args, **kwargs)
        if tensor.dtype == torch.float32:
            tensor.view(-1)[:WRONG] = 0
        return work

    dist.all_reduce = broken
    return True


def restore(ctx):
    global _original
    if _original is None:
        return False
    dist.all_reduce = _original
    _original = None
    return True
"""


def test_correctness_check_catches_a_corrupted_all_reduce_result(pytester):
    pytester.makepyfile(corrupt_tasks=CORRUPT_TASKS)
    pytester.makepyfile(
        test_corrupt="""
        def test_corrupted(comm, process_group):
            assert process_group.run("corrupt_tasks:corrupt") == [False, True]
            comm.all_reduce(process_group, "4KiB")

        def test_after_restore(comm, process_group):
            assert process_group.run("corrupt_tasks:restore") == [False, True]
            m = comm.all_reduce(process_group, "4KiB")
            assert m.size_bytes == 4096
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1, failed=1)
    report = _outcome(result, "test_corrupted")
    assert report.failed
    text = report.longreprtext
    assert "wrong result" in text
    assert "4,096 bytes" in text
    assert "on 2 ranks (gloo)" in text
    assert re.search(r"rank 1: 5 of 1024 elements wrong \(first at index 0: got 0, expected 3\)", text), text
    assert "rank 0:" not in text  # rank 0's own result was right
    assert _outcome(result, "test_after_restore").passed


# -- failures on the ranks ----------------------------------------------------------------------------

FAIL_TASKS = """
import os
import time

import torch.distributed as dist


def boom(ctx):
    if ctx.rank == 1:
        raise ValueError("boom")
    return ctx.rank


def sleep_forever_on_rank_one(ctx):
    if ctx.rank == 1:
        while True:
            time.sleep(3600)
    return ctx.rank


_real_all_reduce = dist.all_reduce


def die_in_next_all_reduce(ctx):
    '''Rank 1 exits with status 3 in its next all_reduce.'''
    if ctx.rank == 1:
        def dying(*args, **kwargs):
            os._exit(3)
        dist.all_reduce = dying
    return ctx.rank
"""


def test_a_rank_that_raises_fails_the_test_with_its_traceback_and_the_next_test_passes(pytester):
    pytester.makepyfile(fail_tasks=FAIL_TASKS)
    pytester.makepyfile(
        test_raises="""
        def test_raises(process_group):
            process_group.run("fail_tasks:boom")

        def test_next(comm, process_group):
            assert comm.all_reduce(process_group, "4KiB").size_bytes == 4096
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1, failed=1)
    text = _outcome(result, "test_raises").longreprtext
    assert "raised on rank(s) [1]" in text
    assert "rank 1 traceback" in text
    assert "Traceback (most recent call last)" in text
    assert 'raise ValueError("boom")' in text  # the line of the task that raised
    assert "fail_tasks.py" in text and "in boom" in text
    assert "ValueError: boom" in text
    assert _outcome(result, "test_next").passed


@pytest.mark.slow
def test_a_hung_rank_fails_the_test_after_rank_timeout_with_its_stack_and_the_pool_restarts(pytester):
    pytester.makepyfile(fail_tasks=FAIL_TASKS)
    pytester.makepyfile(
        test_hang="""
        import pytest

        @pytest.mark.rank_timeout(3)
        def test_hangs(process_group):
            process_group.run("fail_tasks:sleep_forever_on_rank_one")

        def test_next(comm, process_group):
            assert comm.all_reduce(process_group, "4KiB").size_bytes == 4096
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1, failed=1)
    report = _outcome(result, "test_hangs")
    assert 2.9 <= report.duration < 120, report.duration  # 3 s, plus a stack dump; not the 300 s default
    text = report.longreprtext
    assert "timed out after 3 s on rank(s) [1]" in text
    assert "rank 1 (hung) stack" in text
    assert "in sleep_forever_on_rank_one" in text  # the hung rank's own frame
    assert "torn down" in text
    assert _outcome(result, "test_next").passed


@pytest.mark.slow
def test_gpucomm_timeout_option_bounds_work_on_the_ranks(pytester):
    pytester.makepyfile(fail_tasks=FAIL_TASKS)
    pytester.makepyfile(
        test_hang_option="""
        def test_hangs(process_group):
            process_group.run("fail_tasks:sleep_forever_on_rank_one")
        """
    )
    result = pytester.runpytest(*FAST, "--gpucomm-timeout=3")
    result.assert_outcomes(failed=1)
    report = _outcome(result, "test_hangs")
    assert 2.9 <= report.duration < 120, report.duration  # not the 300 s default
    text = report.longreprtext
    assert "timed out after 3 s on rank(s) [1]" in text
    assert "in sleep_forever_on_rank_one" in text


@pytest.mark.slow
def test_a_rank_that_dies_fails_the_test_as_a_crash_of_that_rank_and_the_next_test_passes(pytester):
    pytester.makepyfile(fail_tasks=FAIL_TASKS)
    pytester.makepyfile(
        test_dies="""
        def test_dies(comm, process_group):
            process_group.run("fail_tasks:die_in_next_all_reduce")
            comm.all_reduce(process_group, "4KiB")

        def test_next(comm, process_group):
            assert comm.all_reduce(process_group, "4KiB").size_bytes == 4096
        """
    )
    result = pytester.runpytest(*FAST, "--gpucomm-timeout=200")
    result.assert_outcomes(passed=1, failed=1)
    report = _outcome(result, "test_dies")
    assert report.duration < 150, report.duration  # noticed as a crash, not as a timeout
    text = report.longreprtext
    assert "rank 1 crashed (exit code 3) while running 'test_dies.py::test_dies'" in text, text
    assert "torn down" in text
    assert _outcome(result, "test_next").passed


# -- processes: end of session, Ctrl-C ---------------------------------------------------------------

RECORD_POOL = """
import json, os

def record(process_group, path):
    ex = process_group.executor
    with open(path + ".tmp", "w") as f:
        json.dump({"controller": os.getpid(), "workers": ex.pids, "log_dir": str(ex.log_dir),
                   "ports": [p for p in (ex.control_port, ex.rendezvous_port) if p]}, f)
    os.replace(path + ".tmp", path)
"""


RECORD_PARENTS = """
import json, os

def test_all_reduce(comm, process_group):
    comm.all_reduce(process_group, "4KiB")
    pids = process_group.executor.pids
    parents = [int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) for p in pids]
    with open("parents.json", "w") as f:
        json.dump({"workers": pids, "parents": parents}, f)
"""


@pytest.mark.parametrize("start", ["fork", "exec"])
def test_the_pools_workers_are_forked_from_a_zygote_unless_gpucomm_rank_start_is_exec(pytester, monkeypatch, start):
    pytester.makepyfile(test_parents=RECORD_PARENTS)
    monkeypatch.setenv("GPUCOMM_RANK_START", start)
    pytester.runpytest(*FAST).assert_outcomes(passed=1)
    seen = json.loads((pytester.path / "parents.json").read_text())
    (parent,) = set(seen["parents"])
    if start == "exec":
        assert parent == os.getpid()  # this process ran the session (in-process pytester)
    else:
        assert parent != os.getpid() and not Path(f"/proc/{parent}").exists()  # the zygote, ended with the session
    assert not _workers(os.getpid())


def test_a_bad_gpucomm_rank_start_is_a_usage_error_naming_it(pytester, monkeypatch):
    pytester.makepyfile(test_parents=RECORD_PARENTS)
    monkeypatch.setenv("GPUCOMM_RANK_START", "spawn")
    result = pytester.runpytest(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid environment: invalid GPUCOMM_RANK_START 'spawn' (from the environment): "
                                 "expected fork or exec*"])


@pytest.mark.slow
def test_end_of_session_leaves_no_worker_process_and_no_listening_port(pytester):
    pytester.makepyfile(record_pool=RECORD_POOL)
    pytester.makepyfile(
        test_session_end="""
        from record_pool import record

        def test_all_reduce(comm, process_group):
            comm.all_reduce(process_group, "4KiB")
            record(process_group, "pool.json")
        """
    )
    result = pytester.runpytest_subprocess(*FAST)
    result.assert_outcomes(passed=1)
    info = json.loads((pytester.path / "pool.json").read_text())
    assert len(info["workers"]) == 2
    # pytest has exited: its workers must be gone (not even zombies: /proc/<pid> is checked)
    assert _wait_until(lambda: not any(_is_worker(p) for p in info["workers"]), 30), info
    assert not _workers(info["controller"])
    listening = _listening_ports() & set(info["ports"])
    assert not listening, f"ports of the pool still listening: {listening}"
    assert not Path(info["log_dir"]).exists()  # the ranks' log folder is removed too


@pytest.mark.slow
def test_ctrl_c_during_a_test_stops_the_rank_workers(pytester):
    pytester.makepyfile(record_pool=RECORD_POOL)
    pytester.makepyfile(
        test_interrupted="""
        import time
        from record_pool import record

        def test_sleeps_after_measuring(comm, process_group):
            comm.all_reduce(process_group, "4KiB")
            record(process_group, "pool.json")
            time.sleep(60)
        """
    )
    log = open(pytester.path / "pytest.log", "wb")
    # Started in the background by a shell without job control, this process and its children ignore SIGINT,
    # and Python installs no handler at start: the child puts Python's back before pytest starts.
    restore = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
               "runpy.run_module('pytest', run_name='__main__', alter_sys=True)")
    proc = subprocess.Popen(
        [sys.executable, "-c", restore, *FAST, "test_interrupted.py"],
        cwd=pytester.path, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        marker = pytester.path / "pool.json"
        started = _wait_until(lambda: marker.exists() or proc.poll() is not None, 60)
        assert started and proc.poll() is None, (pytester.path / "pytest.log").read_text()
        workers = rank_workers(proc.pid)
        assert len(workers) == 2, workers
        info = json.loads(marker.read_text())
        assert sorted(workers) == sorted(info["workers"])
        workers = _workers(proc.pid)  # and the zygote they were forked from
        os.kill(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    out = (pytester.path / "pytest.log").read_text()
    assert rc == 2, out  # pytest.ExitCode.INTERRUPTED
    assert "KeyboardInterrupt" in out
    assert _wait_until(lambda: not any(_is_worker(p) for p in workers), 30), _workers(proc.pid)
    assert not _workers(proc.pid)
    assert not Path(info["log_dir"]).exists()


# -- marker validation --------------------------------------------------------------------------------

def test_invalid_world_and_rank_timeout_markers_are_errors_naming_the_test_and_marker(pytester):
    pytester.makepyfile(
        test_bad_markers="""
        import pytest

        @pytest.mark.world(0)
        def test_world_zero(process_group):
            pass

        @pytest.mark.rank_timeout(-1)
        def test_negative_timeout(process_group):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(errors=2)
    world = _outcome(result, "test_world_zero", "setup").longreprtext
    assert "test_bad_markers.py::test_world_zero" in world and "@world(0)" in world
    timeout = _outcome(result, "test_negative_timeout", "setup").longreprtext
    assert "test_bad_markers.py::test_negative_timeout" in timeout and "@rank_timeout(seconds=-1)" in timeout
    assert not _workers(os.getpid())  # nothing was started for them


def test_a_failing_task_run_by_the_test_itself_names_the_test(pytester):
    pytester.makepyfile(
        own_tasks="""
        def boom(ctx):
            if ctx.rank == 1:
                raise RuntimeError("kaput")
            return ctx.rank
        """
    )
    pytester.makepyfile(
        test_own="""
        def test_own_task(process_group):
            process_group.run("own_tasks:boom")
        """
    )
    result = pytester.runpytest("--gpucomm-min-time=0.002", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "test_own.py::test_own_task (task own_tasks:boom)" in text
    assert "rank 1" in text and "kaput" in text
