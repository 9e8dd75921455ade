"""A rank that hangs, named by the others as the hung one (issue 46, item 4): in a collective, where the
ranks that wait are blocked in the communicator with it, and before it joined the job (at import), where its
supervising parent ends it.  Two simulated nodes of one rank each, srun's variables set by hand."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_launched import free_port, run_all, slurm_nodes_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (fork, /proc)")

HANG_IN_COLLECTIVE = '''
import time

from pytest_gpucomm import rank_timeout


def stuck(ctx, rank):
    import torch
    import torch.distributed as dist

    if ctx.rank == rank:
        time.sleep(600)
    dist.all_reduce(torch.ones(1), group=ctx.group)
    return ctx.rank


def test_before():
    pass


@rank_timeout(4)
def test_rank_1_hangs_before_a_collective(process_group):
    process_group.run("test_hang_collective:stuck", {"rank": 1})


def test_after():
    pass
'''


@pytest.mark.slow
def test_a_rank_hung_while_the_others_wait_in_a_collective_is_named_as_the_hung_one(tmp_path: Path) -> None:
    """Rank 0 waits for rank 1 inside an all_reduce: before, rank 0's watchdog ended it naming itself and it
    printed no outcome; now rank 0 names rank 1 (its node, host and where it hung), fails the test with that
    and prints the session's summary, and rank 1 is ended."""
    (tmp_path / "test_hang_collective.py").write_text(HANG_IN_COLLECTIVE)
    port, ends = free_port(), []
    cmd = [sys.executable, "-m", "pytest", "test_hang_collective.py", "-p", "no:cacheprovider",
           "--gpucomm-timeout=30", "-rA", "--gpucomm-rank-log=console"]
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port) for r in range(2)], tmp_path, ends)
    host = socket.gethostname()
    code, text = results[0]
    assert code == 1, text
    named = (f"gpucomm: rank 1 (node 1, host {host}, cpu) did not reach the end of task test_hang_collective:stuck "
             "of test test_hang_collective.py::test_rank_1_hangs_before_a_collective: hung (rank 1 in stuck "
             "(test_hang_collective.py:")
    assert named in " ".join(text.split()), text
    assert "did not finish" not in text, text  # rank 0 does not name itself
    assert "FAILED test_hang_collective.py::test_rank_1_hangs_before_a_collective" in text, text
    assert "1 failed, 1 passed" in text, text  # the session's summary, on rank 0
    code1, text1 = results[1]
    assert code1 == 1, text1
    assert "named as hung by the other ranks" in text1 and "in stuck" in text1, text1  # its stacks
    assert "died" not in text + text1, (text, text1)
    assert max(ends) < 4 + 30, ends


def test_a_main_thread_in_a_sleep_is_busy_and_one_at_a_wait_line_waits() -> None:
    """Where a rank's main thread is tells the ranks which of them the others wait for."""
    import threading

    from pytest_gpucomm.plugin.launched.exchange import main_thread_state

    class Frame:  # the innermost frame's fields main_thread_state reads
        def __init__(self, filename: str, line: int, back: object = None) -> None:
            self.f_code = type("Code", (), {"co_name": "stuck", "co_filename": filename})()
            self.f_lineno, self.f_back = line, back

    me = threading.main_thread().ident or -1
    here = Path(__file__).resolve()
    line = next(i for i, t in enumerate(here.read_text().splitlines(), 1) if "work.wait()  # a wait line" in t)
    assert main_thread_state({me: Frame(str(here), 1)}) == ("busy", f"stuck ({here.name}:1)")
    assert main_thread_state({me: Frame(str(here), line)})[0] == "wait"
    assert main_thread_state({me: Frame("/x/torch/distributed/distributed_c10d.py", 3)})[0] == "wait"
    assert main_thread_state({}) == ("busy", "no Python frame")


def _never_called(work: object) -> None:
    work.wait()  # a wait line  # type: ignore[attr-defined]


HANG_AT_IMPORT = '''
import os
import time

if os.environ["RANK_OF_TEST"] == "1":
    time.sleep(600)


def test_group(process_group):
    assert process_group.world_size == 2
'''


def job_processes(marker: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``marker``: every process of the job, whoever
    started it, whatever session it moved to."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0") and stat[stat.rindex(")") + 2] not in "ZX":
            out.append(int(entry))
    return out


@pytest.mark.slow
def test_a_rank_hung_at_import_is_ended_by_its_parent_within_the_timeout_and_named(tmp_path: Path) -> None:
    """Rank 1's test file sleeps at import: before, nothing ended it (rank 0 waited out the join's 120 s and
    rank 1 stayed, with its supervising parent); now its parent ends it when --gpucomm-timeout has passed
    since its session's start, rank 0 names it as hung at once, and no process of the job is left."""
    (tmp_path / "test_hang_import.py").write_text(HANG_AT_IMPORT)
    port, ends = free_port(), []
    marker = f"GPUCOMM_TEST_JOB={port}"
    probe = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={"GPUCOMM_TEST_JOB": str(port)})
    try:  # the check below finds a live process of the job
        assert job_processes(marker) == [probe.pid]
    finally:
        probe.kill()
        probe.wait()
    cmd = [sys.executable, "-m", "pytest", "test_hang_import.py", "-p", "no:cacheprovider", "--gpucomm-timeout=10"]
    # fresh interpreters: job_processes reads /proc/<pid>/environ, which a zygote's fork keeps from the zygote
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port, GPUCOMM_TEST_JOB=str(port), COLUMNS="120")
                                  for r in range(2)], tmp_path, ends, fork=False)
    text = " ".join(results[0][1].split())
    assert results[0][0] == 1, results[0][1]
    assert (f"gpucomm: rank 1 ({socket.gethostname()}) ended before it joined the job: hung: it did not come to the "
            "job's meeting within 10 s of its session's start, collecting its tests (--gpucomm-timeout); its "
            "supervising parent ended it (killed by SIGABRT)") in text, results[0][1]
    assert results[1][0] == 1, results[1][1]
    assert "gpucomm: this rank is hung: it did not come" in results[1][1], results[1][1]
    assert max(ends) < 10 + 30, ends  # the timeout, the abort, the news: not the join's 120 s
    time.sleep(2)
    assert job_processes(marker) == []
