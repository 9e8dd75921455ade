"""A straggler held up outside the timed loop (issue 46, item 4), on two simulated nodes of one rank each: rank 1
sleeps before some of its timed samples, where its own clock does not run; it is late in a quarter of them, so it
is not last in most iterations and its median lag is nothing, but the other rank's waits, summed, name it.  And
rank 1 stopped for 0.5 s (SIGSTOP, continued by another process) between two ops of a timed sample: its own
sample grows as much as the other's, so the waits cancel, but it began its next op late, and that names it.  A
healthy job notes the late shares and names no rank."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from pytest_gpucomm.analysis.stragglers import LATE_FOR, WAITED_FOR

from test_launched import ARGS, ONE_ALL_REDUCE, free_port, run_all, slurm_nodes_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

OUTSIDE_ON_RANK_1 = '''
import os
import time

from pytest_gpucomm.ops import timed_case

if os.environ["SLURM_PROCID"] == "1":  # launched mode runs the task in this process
    _sample = timed_case.TimedLoop.sample
    _calls = [0]

    def _held_up(self, batch):
        # before every 4th sample's clock starts: outside this rank's timed region, as a stop or another
        # process on its core would hold it up; the other rank waits inside its own timed sample
        _calls[0] += 1
        if _calls[0] % 4 == 0:
            time.sleep(0.050)
        return _sample(self, batch)

    timed_case.TimedLoop.sample = _held_up
'''

def _two_nodes(tmp_path: Path, name: str, test_file: str, conftest: str = "") -> tuple[str, dict]:
    """Run ``test_file`` as ``name`` on two simulated nodes of one rank each (launched mode), with ``conftest``;
    rank 0's output and the JSON report, both nodes having passed."""
    if conftest:
        (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / name).write_text(test_file)
    out, port = tmp_path / "out.json", free_port()
    cmd = [sys.executable, "-m", "pytest", name, *ARGS, f"--gpucomm-json={out}"]
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port, COLUMNS="120") for r in range(2)], tmp_path)
    assert [code for code, _ in results] == [0, 0], results
    return results[0][1], json.loads(out.read_text())


@pytest.mark.slow
def test_a_rank_held_up_outside_the_timed_loop_in_some_iterations_is_named_waited_for(tmp_path: Path) -> None:
    text, doc = _two_nodes(tmp_path, "test_outside.py", ONE_ALL_REDUCE, OUTSIDE_ON_RANK_1)
    flat = " ".join(text.split())
    host = socket.gethostname()
    assert ("test_outside.py::test_all_reduce[4KiB] (all_reduce 4 KiB): rank " in flat
            and f"; waited for: rank 1 (node 1, {host}, cpu): the others waited " in flat), text
    [row] = doc["rows"]
    st = row["stragglers"]
    # rank 1 is late in a quarter of the iterations only, so the old rule (st["clear"]: last in most of them) is
    # silent on a quiet machine; not asserted, as on a loaded one the rank that shares its core with more work is
    # last in most of them too (18 or more of 21 once, in the slow tier on the 2-core machine)
    assert [r["rank"] for r in st["waited_for"]] == [1], st
    assert st["waited_for"][0]["excess_wait"] >= WAITED_FOR, st
    assert [(o["node"], o["ranks"]) for o in doc["outliers"]] == [(1, [1])], doc["outliers"]
    assert f"node 1 ({host}): rank 1; waited for in test_outside.py::test_all_reduce[4KiB]" in flat, text
    sections = text[text.index("gpucomm slowest ranks ("):text.index("gpucomm: wrote")]
    assert all(len(line) <= 120 for line in sections.splitlines()), sections


STOPPED_ON_RANK_1 = '''
import os
import signal
import subprocess

from pytest_gpucomm.ops import timed_case

if os.environ["SLURM_PROCID"] == "1":  # launched mode runs the task in this process
    _record, _run = timed_case.TimedLoop.record, timed_case.CollectiveCase.run
    _ops = [None]

    def _recording(self):
        _ops[0] = 0  # the timed samples begin
        return _record(self)

    def _run_then_stop(self):
        _run(self)
        if _ops[0] is not None:
            _ops[0] += 1
            if _ops[0] == 5:  # after the 5th timed op, before the 6th, inside a timed sample: a real stop
                subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -CONT {os.getpid()}"])
                os.kill(os.getpid(), signal.SIGSTOP)

    timed_case.TimedLoop.record = _recording
    timed_case.CollectiveCase.run = _run_then_stop
'''


@pytest.mark.slow
def test_a_rank_stopped_inside_a_timed_sample_is_named_by_when_it_began_its_next_op(tmp_path: Path) -> None:
    text, doc = _two_nodes(tmp_path, "test_stopped.py", ONE_ALL_REDUCE, STOPPED_ON_RANK_1)
    flat = " ".join(text.split())
    host = socket.gethostname()
    [row] = doc["rows"]
    st = row["stragglers"]
    assert len(st["waited_for"]) == 1, (st, row["info"]["ranks"], row["samples_s"], row["info"]["batch"])
    [named] = st["waited_for"]
    assert named["rank"] == 1 and named["excess_late"] >= LATE_FOR, st
    assert named["excess_wait"] < WAITED_FOR, st  # the waits cancel: the rule before the late shares is silent
    assert f"; waited for: rank 1 (node 1, {host}, cpu): it began its ops " in flat, text
    assert [(o["node"], o["ranks"]) for o in doc["outliers"]] == [(1, [1])], doc["outliers"]


THREE_ALL_REDUCES = '''
from pytest_gpucomm import sizes


@sizes("1KiB", "4KiB", "16KiB")
def test_all_reduce(process_group, size, comm):
    comm.all_reduce(process_group, size)
'''


@pytest.mark.slow
def test_a_healthy_job_notes_late_shares_and_names_no_rank(tmp_path: Path) -> None:
    _, doc = _two_nodes(tmp_path, "test_healthy.py", THREE_ALL_REDUCES)
    assert len(doc["rows"]) == 3
    for row in doc["rows"]:
        ranks = row["info"]["ranks"]
        assert len(ranks["late_share"]) == len(ranks["op_late_share"]) == 2, ranks  # both phases noted them
        assert row["stragglers"]["waited_for"] == [], row["stragglers"]
    assert doc["outliers"] == [], doc["outliers"]
