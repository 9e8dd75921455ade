"""The cause test per node in a job across nodes (issue 46, item 1): a variable set on node 1 alone slows node 1's
copy; node 1's row fails as REGRESSION and its cause test sets the variable back on node 1 alone, in a new
process of node 1's measuring rank, which brings it back; the cause line names the variable and node 1.  A
second copy's new process fails: its cause line names the error, and the job goes on.

Real processes: two simulated nodes of one gloo rank each (srun's variables set by hand, as in
test_launched_gate.py), CPU variant (the host buffers cpu:0 -> cpu:1, measured by local rank 0 of each node).
The copies are timed by a simulated clock (as tests/test_cause_plugin.py does, so that the verdicts do not
depend on the load of a shared machine): in the ranks by a ``sitecustomize`` module on their path, which the
new process the cause test starts imports too.  With ``SIM_NODE_SLOW=1`` every copy takes 1/0.7 times as long.
Two jobs: one records the baseline (its run doubled into a second session, as test_launched_gate.py does, so that
the gate can judge one run), one is judged with ``SIM_NODE_SLOW=1`` on node 1 only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from test_launched import ARGS, clean_env, free_port, run_all
from test_launched_gate import in_two_sessions

pytestmark = pytest.mark.slow  # jobs of several processes

#: imported at the start of every Python process whose path holds the test's folder: the ranks, and the new
#: process of the cause test's re-measure
SITECUSTOMIZE = """
import os
import sys

import numpy as np


def fake_measure(op, settings, agree=None, prepare=None, clocks=None):
    from pytest_gpucomm.ops.timing import Plan

    src = op.pairs[0][0]
    size = src.numel() * src.element_size()
    rng = np.random.default_rng(size)  # the same samples in every run: node 0's row is the baseline's
    if size == 2 * 2**20 and os.path.basename(sys.argv[0]) == "worker.py":
        raise RuntimeError("injected: the cause test's process of the 2 MiB copy fails")
    slower = 1 / 0.7 if os.environ.get("SIM_NODE_SLOW") == "1" else 1.0
    t = (5e-6 + size / 2e9) * slower * np.exp(rng.normal(0, 0.02, 50))
    with open("measured.txt", "a") as f:  # who measured: the node, the variable, the process
        f.write(f"{os.environ['SLURM_NODEID']} {os.environ.get('SIM_NODE_SLOW', '-')} {sys.argv[0]}\\n")
    return [float(x) for x in t], Plan(batch=1, samples=50, estimate_s=float(t[0]))


if os.environ.get("SIM_CLOCK") == "1":
    import pytest_gpucomm.ops.copies as copies

    copies.measure = fake_measure
"""

TEST_FILE = """
from pytest_gpucomm import sizes


@sizes("1MiB", "2MiB")
def test_copy(size, comm):
    comm.copy(("cpu:0", "cpu:1"), size)
"""

JOB_ARGS = ["--gpucomm-launch=slurm", "--gpu-baseline=cpu2", "--gpu-baseline-dir=baselines",
            "--gpucomm-tail-time=0", "--gpucomm-env=SIM_NODE_SLOW"]


def _job(tmp: Path, *args: str, slow_node: int | None = None) -> list[tuple[int, str]]:
    """A job of two simulated nodes of one rank each; ``slow_node``: the node whose rank has SIM_NODE_SLOW=1."""
    port = free_port()
    cmd = [sys.executable, "-m", "pytest", "test_copy.py", *ARGS, "-rf", *JOB_ARGS, *args]
    envs = []
    for node in (0, 1):
        env = clean_env(SLURM_PROCID=str(node), SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="1",
                        SLURM_NODEID=str(node), SLURM_NNODES="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        GPUCOMM_RANK_LOG="console", SIM_CLOCK="1")
        env["PYTHONPATH"] = str(tmp) + os.pathsep + env["PYTHONPATH"]  # the sitecustomize, in every process
        if node == slow_node:
            env["SIM_NODE_SLOW"] = "1"
        envs.append(env)
    # fresh interpreters: the ranks' sitecustomize is imported at an interpreter's start (a zygote's fork has none)
    return run_all([cmd, cmd], envs, tmp, fork=False)


def test_a_variable_set_on_node_1_alone_is_named_as_the_cause_of_node_1s_slower_copy_set_back_there_alone(
        tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp_path / "test_copy.py").write_text(TEST_FILE)
    recorded = _job(tmp_path, "--gpu-baseline-save")
    (tmp_path / "measured.txt").unlink()
    assert [code for code, _ in recorded] == [0, 0], recorded
    path = tmp_path / "baselines" / "cpu2.json"
    path.write_text(json.dumps(in_two_sessions(json.loads(path.read_text()))))

    results = _job(tmp_path, "--gpucomm-cause=2", "--gpucomm-json=r.json", slow_node=1)
    assert [code for code, _ in results] == [1, 1], "\n".join(t[-3000:] for _, t in results)
    text = results[0][1]
    assert "nodes.1.env.SIM_NODE_SLOW (absent) -> 1" in text, text  # the header: what changed, on node 1
    rows = {(r["size_bytes"] >> 20, r["info"]["node"]): r
            for r in json.loads((tmp_path / "r.json").read_text())["rows"]}
    host = rows[1, 1]["info"]["host"]
    for size in (1, 2):
        assert rows[size, 1]["status"] == "REGRESSION" and rows[size, 1]["baseline"]["ratio"] < 0.75, rows[size, 1]
        assert rows[size, 0]["baseline"]["ratio"] > 0.95 and "cause" not in rows[size, 0]["baseline"]  # as it was
    cause = rows[1, 1]["baseline"]["cause"]
    assert not cause["skipped"] and cause["cause"] == ["SIM_NODE_SLOW"], cause
    assert cause["change_nodes"] == [{"node": 1, "host": host, "peers": False}], cause
    assert [a["outcome"] for a in cause["attempts"]] == ["back"], cause  # unset on node 1, in a new process
    line = f"cause (node 1, {host}): SIM_NODE_SLOW=1 (unset again: "
    assert cause["text"].startswith(line) and line in text, text
    # the 2 MiB copy's new process fails: named in its cause line, and the job goes on in step
    cause = rows[2, 1]["baseline"]["cause"]
    assert cause["text"].startswith(f"no restoration of the environment (node 1, {host}) brings it back from "), cause
    assert "injected: the cause test's process of the 2 MiB copy fails" in cause["attempts"][0]["error"], cause
    assert "2 failed" in text and "2 failed" in results[1][1], results
    # the ranks measured with today's environment; one new process, on node 1, without the variable
    measured = [line.split() for line in (tmp_path / "measured.txt").read_text().splitlines()]
    rank = [(node, slow) for node, slow, prog in measured if prog.endswith(os.path.join("pytest", "__main__.py"))]
    assert set(rank) == {("0", "-"), ("1", "1")}, measured
    assert len(measured) == len(rank) + 1 and ("1", "-") in {(n, s) for n, s, _ in measured}, measured
