"""ranks.reaper (issue 49): a rank's descendants that left its process group, found through the subreaper's
process tree and ended; no rank pool (a small Python process plays the rank)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proc_helpers import process_running, process_start_time
from pytest_gpucomm.ranks import reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER and /proc")

ROOT = str(Path(__file__).resolve().parents[1])

#: a rank's stand-in: becomes a subreaper, starts ``sleep 301`` as a daemon (its own session, its parent shell
#: gone at once), prints the sleep's pid, then ends its descendants itself (argv[1] == "end": prints those
#: signalled and those left, zombies included) or waits on stdin
_RANK = """
import os, subprocess, sys
from pytest_gpucomm.ranks import reaper
assert reaper.become_subreaper()
out = subprocess.run(["sh", "-c", "sleep 301 >/dev/null 2>&1 </dev/null & echo $!"], start_new_session=True,
                     capture_output=True, text=True, check=True).stdout
print(out.strip(), flush=True)
if sys.argv[1] == "end":
    print(reaper.end_descendants(), reaper.descendants(os.getpid(), zombies=True), flush=True)
else:
    sys.stdin.read()
"""


def _rank(mode: str) -> tuple[subprocess.Popen, int, int | None]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _RANK, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    sleeper = int(proc.stdout.readline())
    return proc, sleeper, process_start_time(sleeper)


def _gone(pid: int, start: int | None) -> bool:
    import time

    end = time.monotonic() + 3.0
    while process_running(pid, start) and time.monotonic() < end:
        time.sleep(0.02)
    return not process_running(pid, start)


def test_a_daemon_started_in_its_own_session_stays_below_the_subreaper_and_is_killed_from_outside() -> None:
    proc, sleeper, start = _rank("wait")
    try:
        assert process_running(sleeper, start)
        assert os.getsid(sleeper) != os.getsid(proc.pid)  # outside the rank's session and group
        assert reaper.descendants(proc.pid) == [sleeper]  # re-parented to the rank, not to init
        assert reaper.kill_descendants(proc.pid) == [sleeper]
        assert _gone(sleeper, start)
        assert reaper.descendants(proc.pid) == []
    finally:
        proc.communicate("")
    assert proc.returncode == 0


def test_a_rank_ending_its_descendants_itself_terminates_and_reaps_them() -> None:
    proc, sleeper, start = _rank("end")
    out, _ = proc.communicate()
    assert proc.returncode == 0
    assert out.strip() == f"[{sleeper}] []"  # signalled, and reaped: not even a zombie is left below the rank
    assert _gone(sleeper, start)


def test_descendants_of_a_process_without_children_is_empty_and_killing_them_signals_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert reaper.descendants(proc.pid) == []
        assert reaper.kill_descendants(proc.pid) == []
    finally:
        proc.communicate(b"")
