"""A straggler held up outside the timed loop (issue 46, item 4): rank 1 of two simulated nodes of one rank
each sleeps before some of its timed samples, where its own clock does not run; it is late in a quarter of
them, so it is not last in most iterations and its median lag is nothing, but the other rank's waits, summed,
name it."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from pytest_gpucomm.analysis.stragglers import WAITED_FOR

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

@pytest.mark.slow
def test_a_rank_held_up_outside_the_timed_loop_in_some_iterations_is_named_waited_for(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(OUTSIDE_ON_RANK_1)
    (tmp_path / "test_outside.py").write_text(ONE_ALL_REDUCE)
    out, port = tmp_path / "out.json", free_port()
    cmd = [sys.executable, "-m", "pytest", "test_outside.py", *ARGS, f"--gpucomm-json={out}"]
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port, COLUMNS="120") for r in range(2)], tmp_path)
    assert [code for code, _ in results] == [0, 0], results
    text = results[0][1]
    flat = " ".join(text.split())
    host = socket.gethostname()
    assert ("test_outside.py::test_all_reduce[4KiB] (all_reduce 4 KiB): rank " in flat
            and f"; waited for: rank 1 (node 1, {host}, cpu): the others waited " in flat), text
    doc = json.loads(out.read_text())
    [row] = doc["rows"]
    st = row["stragglers"]
    assert not st["clear"], st  # not last in most iterations, by a median lag of nothing: the old rule is silent
    assert [r["rank"] for r in st["waited_for"]] == [1], st
    assert st["waited_for"][0]["excess_wait"] >= WAITED_FOR, st
    assert [(o["node"], o["ranks"]) for o in doc["outliers"]] == [(1, [1])], doc["outliers"]
    assert f"node 1 ({host}): rank 1; waited for in test_outside.py::test_all_reduce[4KiB]" in flat, text
    sections = text[text.index("gpucomm slowest ranks ("):text.index("gpucomm: wrote")]
    assert all(len(line) <= 120 for line in sections.splitlines()), sections
