"""Launched mode: pytest started once per rank by torchrun, or with srun's variables set by hand.

Each test starts real processes (CPU variants, gloo over loopback) and checks what a user sees: exit 0 on
every rank, the gpucomm table printed once, the JSON report written once by rank 0 with the job's world,
and no process left behind.
"""

from __future__ import annotations

import fnmatch
import getpass
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import launch_zygote
import pytest_gpucomm
from inprocess import RUN_ENV

REPO = str(Path(pytest_gpucomm.__file__).resolve().parent.parent)
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "MPI_LOCAL", "GPUCOMM_", "TORCHELASTIC_", "PYTEST_")
LAUNCHER_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "PYTEST_ADDOPTS"}
LIMIT_S = 90  # a hung run fails the test instead of the suite

SMALL = '''
from pytest_gpucomm import sizes


def whoami(ctx):
    return {"rank": ctx.rank, "world": ctx.world_size, "node": ctx.node_rank, "device": ctx.device}


@sizes("4KiB")
def test_all_reduce(process_group, size, comm):
    m = comm.all_reduce(process_group, size)
    assert m.world_size == process_group.world_size


def test_every_rank_runs_the_task(process_group):
    out = process_group.run("test_small:whoami")
    assert [o["rank"] for o in out] == list(range(process_group.world_size))
'''

ARGS = ["-p", "no:cacheprovider", "--gpucomm-min-time=0.01", "--gpucomm-timeout=60"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables (the tests may run under one), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    # but the CPU contract and the plugin set of tests/conftest.py stay
    contract = ("GPUCOMM_DEVICE", *RUN_ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS")
    env.update({k: os.environ[k] for k in contract if k in os.environ})
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def processes_in_session(sid: int) -> list[int]:
    """Processes (not zombies) of the session ``sid``: what a launcher started in it and left running."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, tty_nr, ...
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def run_all(cmds: list[list[str]], envs: list[dict[str, str]], cwd: Path,
            ends: list[float] | None = None, fork: bool = True) -> list[tuple[int, str]]:
    """Start every command at once (each in a session of its own), wait for all; (exit code, output) each, and
    in ``ends`` the seconds each took.  Fails the test if one does not end within LIMIT_S or leaves a process
    behind.  A ``python -m pytest`` rank is a fork of the worker's zygote, which has imported torch already
    (tests/launch_zygote.py), unless ``fork`` is False: a test that needs its ranks to be fresh interpreters."""
    start = time.monotonic()
    (cwd / "temproot").mkdir(exist_ok=True)  # the quiet ranks' default log folders: here, not in /tmp
    envs = [{"PYTEST_DEBUG_TEMPROOT": str(cwd / "temproot"), **e} for e in envs]
    procs: list[Any] = []
    try:
        for c, e in zip(cmds, envs):
            procs.append((launch_zygote.spawn(c, e, cwd) if fork else None)
                         or subprocess.Popen(c, env=e, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True, start_new_session=True))
    except BaseException:
        for p in procs:
            if p.poll() is None:
                launch_zygote.kill_group(p, 9)
                p.wait()
        raise
    done: list[Any] = [None] * len(procs)

    def wait(i: int) -> None:
        try:
            out, _ = procs[i].communicate(timeout=LIMIT_S)
            done[i] = (procs[i].returncode, out, time.monotonic() - start)
        except subprocess.TimeoutExpired as e:
            done[i] = e

    waiters = [threading.Thread(target=wait, args=(i,)) for i in range(len(procs))]
    try:
        for t in waiters:
            t.start()
        for t in waiters:
            t.join()
    finally:
        for p in procs:
            if p.poll() is None:
                launch_zygote.kill_group(p, 9)
                p.wait()
    deadline = time.monotonic() + 5
    while any(processes_in_session(p.pid) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {p.pid: processes_in_session(p.pid) for p in procs}
    for pids in left.values():
        for pid in pids:
            os.kill(pid, 9)
    for i, d in enumerate(done):
        if isinstance(d, subprocess.TimeoutExpired):  # what each process printed: the end of the hung one's says why
            outs = [x[1] if isinstance(x, tuple) else _text(getattr(x, "output", None)) for x in done]
            raise AssertionError(f"process {i} did not end within {LIMIT_S} s; the end of each one's output:\n"
                                 + "\n".join(f"--- process {j}:\n{o[-4000:]}" for j, o in enumerate(outs))) from d
        if isinstance(d, BaseException):
            raise d
    assert not any(left.values()), f"processes left behind: {left}"
    if ends is not None:
        ends.extend(d[2] for d in done)
    return [(d[0], d[1]) for d in done]


def _text(raw: Any) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw or "")


def torchrun(nnodes: int, node_rank: int, nproc: int, port: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--node-rank={node_rank}",
            f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", f"--master-port={port}",
            "-m", "pytest", *args]


def check_one_report(outputs: list[str], json_path: Path, world: int, n_nodes: int) -> None:
    text = "\n".join(outputs)
    assert text.count("2 passed") == 1, text  # rank 0 speaks; the others write to their rank logs
    assert text.count("test session starts") == 1, text
    assert text.count("= gpucomm results =") == 1, text  # the table: rank 0 only
    assert text.count("gpucomm: wrote 1 measurements to") == 1, text
    doc = json.loads(json_path.read_text())
    assert [r["world_size"] for r in doc["rows"]] == [world]
    assert doc["launch"]["world_size"] == world and doc["launch"]["n_nodes"] == n_nodes


@pytest.fixture
def small(tmp_path: Path) -> Path:
    (tmp_path / "test_small.py").write_text(SMALL)
    return tmp_path


@pytest.mark.slow
def test_torchrun_one_node_two_ranks(small: Path) -> None:
    """On an 80-column terminal: the job's header lines are wrapped to it as every other line of the plugin's
    (a word longer than the width, the rank logs' path, stays whole on its line)."""
    out = small / "out.json"
    cmd = torchrun(1, 0, 2, free_port(), "test_small.py", *ARGS, f"--gpucomm-json={out}")
    [(code, text)] = run_all([cmd], [clean_env(COLUMNS="80")], small)
    assert code == 0, text
    assert "gpucomm launch: torchrun rank 0 of 2" in text and "gpucomm launch: torchrun rank 1 of 2" not in text
    assert "gpucomm rank logs: rank 1 writes its output to" in text, text
    header = text.split("test session starts")[1].split("collected")[0].splitlines()
    ours = [line for line in header if line.startswith(("gpucomm", "    "))]
    assert len(ours) >= 3 and not [line for line in ours if len(line) > 80 and " " in line.strip()], ours
    check_one_report([text], out, world=2, n_nodes=1)


@pytest.mark.slow
def test_a_job_of_one_rank_skips_the_collectives_saying_why_and_runs_the_rest(small: Path) -> None:
    out = small / "out.json"
    cmd = torchrun(1, 0, 1, free_port(), "test_small.py", *ARGS, "-rs", f"--gpucomm-json={out}")
    [(code, text)] = run_all([cmd], [clean_env()], small)
    assert code == 0 and "2 skipped" in text, text
    assert ("needs a world of 2 ranks or more: a collective of one rank moves nothing between devices (busbw 0); "
            "this torchrun job has 1 rank (@world(1) asks for one rank)") in text


@pytest.mark.slow
def test_torchrun_two_simulated_nodes_of_one_rank_each(small: Path) -> None:
    """Two torchrun agents, one rank each (two local ranks a node: the Open MPI and MPICH tests below)."""
    out, port = small / "out.json", free_port()
    cmds = [torchrun(2, k, 1, port, "test_small.py", *ARGS, f"--gpucomm-json={out}") for k in (0, 1)]
    results = run_all(cmds, [clean_env(), clean_env()], small)
    assert [code for code, _ in results] == [0, 0], results
    assert "node 0 of 2" in results[0][1] and "gpucomm launch:" not in results[1][1]  # node 1's rank is quiet
    check_one_report([t for _, t in results], out, world=2, n_nodes=2)


def slurm_env(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    return clean_env(SLURM_PROCID=str(rank), SLURM_NTASKS=str(world), SLURM_LOCALID=str(rank),
                     SLURM_NTASKS_PER_NODE=str(world), SLURM_NODEID="0", SLURM_STEP_NODELIST="localhost",
                     SLURM_STEP_ID="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **extra)


@pytest.mark.slow
def test_srun_variables_set_by_hand_on_two_processes(small: Path) -> None:
    out, port = small / "out.json", free_port()
    cmd = [sys.executable, "-m", "pytest", "test_small.py", *ARGS, f"--gpucomm-json={out}"]
    results = run_all([cmd, cmd], [slurm_env(0, 2, port), slurm_env(1, 2, port)], small)
    assert [code for code, _ in results] == [0, 0], results
    assert results[1][1].strip() == "", results[1][1]  # rank 1 writes to its rank log
    check_one_report([t for _, t in results], out, world=2, n_nodes=1)


@pytest.mark.slow
def test_ranks_that_collected_different_tests_all_stop_naming_the_first_difference(small: Path) -> None:
    port = free_port()
    cmds = [[sys.executable, "-m", "pytest", "test_small.py", *ARGS, *extra] for extra in ([], ["-k", "task"])]
    console = {"GPUCOMM_RANK_LOG": "console"}  # every rank's own message, on its console
    results = run_all(cmds, [slurm_env(0, 2, port, **console), slurm_env(1, 2, port, **console)], small)
    assert [code for code, _ in results] == [4, 4], results
    for _, text in results:
        assert "the ranks of this slurm job collected different tests" in text, text
        assert "rank 0 (on " in text and "2 tests" in text
        assert ("rank 1 (on " in text and "1 tests; first difference at test 1: rank 0 has "
                "'test_small.py::test_all_reduce[4KiB]', rank 1 has 'test_small.py::test_every_rank_runs_the_task'"
                in text), text
    assert "= gpucomm results =" not in results[0][1]


@pytest.mark.parametrize("option, why", [
    ("-x", "-x/--maxfail=1: a rank that stops after its failures"),
    ("--maxfail=3", "-x/--maxfail=3"),
    ("-n1", "-n/--dist (pytest-xdist)"),
])
@pytest.mark.slow
def test_options_that_make_ranks_diverge_are_refused(small: Path, option: str, why: str) -> None:
    cmd = [sys.executable, "-m", "pytest", "test_small.py", *ARGS, option]
    [(code, text)] = run_all([cmd], [slurm_env(0, 2, free_port())], small)  # refused before the rendezvous
    assert code == 4, text
    assert "gpucomm: refused in launched mode (slurm), where every rank must run the same tests" in text
    assert why in text


@pytest.mark.slow
def test_last_failed_is_refused_in_launched_mode(small: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", "test_small.py", "--gpucomm-min-time=0.01", "--lf"]
    [(code, text)] = run_all([cmd], [slurm_env(0, 2, free_port())], small)
    assert code == 4 and "--lf/--last-failed: each rank selects or orders the tests from its own cache" in text, text


# -- the option, in-process (no launcher started) -----------------------------------------------------

COLLECTIVE = '''
def test_group(process_group):
    assert process_group.world_size == 2
'''


def test_launch_option_rejects_an_unknown_value(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(COLLECTIVE)
    result = pytester.runpytest("--gpucomm-launch=docker")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid --gpucomm-launch 'docker' (from the command line): expected auto, pool, "
                                 "torchrun, mpi, slurm*"])


def test_a_named_launcher_without_its_variables_is_a_usage_error(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k in LAUNCHER_VARS or k.startswith(LAUNCHER_PREFIXES[:4])]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("GPUCOMM_LAUNCH", "torchrun")
    pytester.makepyfile(COLLECTIVE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid launcher environment (--gpucomm-launch=torchrun): "
                                 "torchrun: RANK is not set*"])


def test_auto_with_a_broken_launcher_environment_leaves_runs_without_gpucomm_tests_alone(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_PROCID", "zero")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # a task of an srun step
    pytester.makepyfile("def test_plain():\n    pass\n")
    assert pytester.runpytest().ret == pytest.ExitCode.OK
    pytester.makepyfile(COLLECTIVE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid launcher environment (--gpucomm-launch=auto): slurm: SLURM_PROCID='zero' "
                                 "is not a whole number (--gpucomm-launch=pool ignores the launcher)*"])


def test_pool_ignores_the_launcher_variables(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_PROCID", "zero")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("--gpucomm-launch=pool")
    assert result.ret == pytest.ExitCode.OK
    assert "gpucomm launch:" not in result.stdout.str()


# -- outcomes agreed by every rank ------------------------------------------------------------------

OUTCOMES = '''
import os

import pytest

RANK = int(os.environ["RANK_OF_TEST"])


def test_group(process_group, comm, gpucomm_state):
    first = comm.all_reduce(process_group, 4096)
    again = gpucomm_state.records[-1].redo()  # as the gate re-measures a flagged case
    assert again.fresh is False, again.how
    assert "the job's process group (launched mode) cannot be restarted" in again.how


def test_fails_on_rank_1_only():
    if RANK == 1:
        pytest.fail("boom on 1")


def test_skipped_on_rank_0_only():
    if RANK == 0:
        pytest.skip("no such link on 0")


def test_passes():
    pass
'''


@pytest.mark.slow
def test_a_failure_or_a_skip_on_one_rank_is_every_ranks_with_that_rank_named(tmp_path: Path) -> None:
    (tmp_path / "test_outcomes.py").write_text(OUTCOMES)
    port = free_port()
    cmd = [sys.executable, "-m", "pytest", "test_outcomes.py", *ARGS, "-rA", "--gpucomm-rank-log=console"]
    envs = [slurm_env(r, 2, port, RANK_OF_TEST=str(r)) for r in (0, 1)]
    results = run_all([cmd, cmd], envs, tmp_path)
    assert [code for code, _ in results] == [1, 1], results  # the same exit status on every rank
    for _, text in results:
        assert "1 failed, 2 passed, 1 skipped" in text, text
        assert "call failed on rank 1 (" in text and "cpu) of this slurm job of 2 ranks" in text, text
        assert "boom on 1" in text, text
    assert "SKIPPED [1] test_outcomes.py:23: no such link on 0\n" in results[0][1], results[0][1]
    assert ("SKIPPED [1] test_outcomes.py:23: no such link on 0 (skipped on rank 0 (" in results[1][1]
            and "agreed by every rank" in results[1][1]), results[1][1]


PLAIN_OUTCOMES = '''
import os

import pytest

RANK, LAST = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]) - 1


@pytest.fixture
def broken_on_the_last_rank():
    if RANK == LAST:
        raise RuntimeError("set-up broke on the last rank")


def test_passes():
    pass


def test_fails_on_the_last_rank_only():
    assert RANK != LAST, "boom on the last rank"


def test_skipped_on_rank_0_only():
    if RANK == 0:
        pytest.skip("not on rank 0")


@pytest.mark.xfail(reason="known on the last rank")
def test_xfails_on_the_last_rank_only():
    assert RANK != LAST


def test_errors_in_its_set_up_on_the_last_rank(broken_on_the_last_rank):
    pass
'''


@pytest.mark.slow
def test_plain_tests_are_agreed_by_every_rank_and_every_node_exits_with_the_jobs_status_at_once(tmp_path: Path) -> None:
    """No gpucomm fixture in the session: the outcomes are agreed all the same (each failing rank's message,
    a skip, an xfail, an error in a set-up), every node of torchrun exits with the job's status within seconds
    of the other (node 0 used to wait 300 s in torchrun's exit barrier), and only rank 0 prints the session; the
    other rank's output is in the rank log that rank 0's header names."""
    (tmp_path / "test_plain.py").write_text(PLAIN_OUTCOMES)
    port, temp = free_port(), tmp_path / "temp"
    cmds = [torchrun(2, k, 1, port, "test_plain.py", "-p", "no:cacheprovider", "-rA") for k in (0, 1)]
    ends: list[float] = []
    results = run_all(cmds, [clean_env(PYTEST_DEBUG_TEMPROOT=str(temp))] * 2, tmp_path, ends)
    assert [code for code, _ in results] == [1, 1], results
    assert abs(ends[0] - ends[1]) < 10, ends
    text, node1 = results[0][1], results[1][1]
    summary = "1 failed, 1 passed, 1 skipped, 1 xfailed, 1 error"
    assert summary in text, text
    assert "gpucomm: call failed on rank 1 (" in text and "boom on the last rank" in text, text
    assert "gpucomm: setup failed on rank 1 (" in text and "set-up broke on the last rank" in text, text
    assert "test session starts" not in node1 and summary not in node1, node1  # torchrun's own lines only
    [header] = [line for line in text.splitlines() if line.startswith("gpucomm rank logs: ")]
    logs = temp / f"pytest-of-{getpass.getuser()}" / f"gpucomm-torchrun-{port}"
    assert header.startswith(f"gpucomm rank logs: rank 1 writes its output to {logs}/rank-<R>.log"), header
    log = (logs / "rank-1.log").read_text()
    assert summary in log and "test session starts" in log, log


RANK_0_FAILS_AT_THE_END = '''
import os

import pytest


def pytest_configure(config):
    if os.environ["RANK"] == "0":
        config.pluginmanager.register(Rank0Status(), "rank0status")


class Rank0Status:
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):  # before gpucomm's: as the gate's failing shift on rank 0 does
        session.exitstatus = 1
'''


@pytest.mark.slow
def test_a_nonzero_exit_status_on_rank_0_is_every_ranks_under_torchrun(small: Path) -> None:
    (small / "conftest.py").write_text(RANK_0_FAILS_AT_THE_END)
    cmd = torchrun(1, 0, 2, free_port(), "test_small.py", *ARGS, "--gpucomm-min-time=0.002",
                   "--gpucomm-rank-log=console")
    [(code, text)] = run_all([cmd], [clean_env()], small)
    assert code == 1, text
    assert text.count("2 passed") == 2, text
    assert "gpucomm: exit status 1 on rank 0 (on " in text and "every rank of the job exits with 1" in text, text
    assert "exitcode  : 1" in text, text  # torchrun may stop rank 1 (SIGTERM) once it sees rank 0 exit with 1


# -- a straggler named ----------------------------------------------------------------------------------

LATE_RANK_3 = '''
import os
import time

from pytest_gpucomm.ops import collectives

DELAY_S = 0.02

if os.environ["SLURM_PROCID"] == "3":  # launched mode runs the task in this process: make global rank 3 late
    _sample = collectives.TimedLoop.sample

    def _late(self, batch):
        # before the sample's clock starts (its host clock on CPU): rank 3 enters each sample's first op 20 ms
        # after the others, who wait for it inside their timed samples
        time.sleep(DELAY_S)
        return _sample(self, batch)

    collectives.TimedLoop.sample = _late
'''

ONE_ALL_REDUCE = '''
from pytest_gpucomm import sizes


@sizes("4KiB")
def test_all_reduce(process_group, size, comm):
    comm.all_reduce(process_group, size)
'''


@pytest.mark.slow
def test_a_rank_made_late_is_named_the_slowest_rank_and_its_node_an_outlier(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(LATE_RANK_3)
    (tmp_path / "test_late.py").write_text(ONE_ALL_REDUCE)
    out, port = tmp_path / "out.json", free_port()
    cmd = [sys.executable, "-m", "pytest", "test_late.py", *ARGS, f"--gpucomm-json={out}"]
    results = run_all([cmd] * 4, [slurm_2x2_env(r, port) for r in range(4)], tmp_path)
    assert [code for code, _ in results] == [0] * 4, results
    text = results[0][1]
    host = socket.gethostname()
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("gpucomm slowest ranks ("))
    case = lines[i + 1]
    assert case.startswith(f"  test_late.py::test_all_reduce[4KiB] (all_reduce 4 KiB): rank 3 (node 1, {host}, cpu) "
                           "arrived last in "), text
    last, n = (int(x) for x in case.split("arrived last in ")[1].split(" iterations")[0].split(" of "))
    assert last >= 2 * n / 3 and n >= 10, case
    assert "stands out: rank 3 (node 1" in case, case
    j = lines.index(next(line for line in lines if line.startswith("gpucomm outlier nodes (")))
    assert lines[j + 1].startswith(f"  node 1 ({host}): rank 3; late in test_late.py::test_all_reduce[4KiB]"), text
    assert not any(line.startswith("  node 0") for line in lines), text  # only the late rank's node
    assert all("slowest ranks" not in t and "outlier nodes" not in t for _, t in results[1:])  # rank 0 speaks
    doc = json.loads(out.read_text())
    [row] = doc["rows"]
    assert row["stragglers"]["slowest"]["rank"] == 3 and row["stragglers"]["slowest"]["node"] == 1
    assert [r["rank"] for r in row["stragglers"]["outlier_ranks"]] == [3]
    ranks = row["info"]["ranks"]
    assert ranks["rank"] == [0, 1, 2, 3] and ranks["node"] == [0, 0, 1, 1]
    assert ranks["straggled"][3] == last and len(ranks["straggler"]) == n == row["n"]
    assert ranks["lag_median_s"][3] > 0.01  # it arrived about 20 ms after the first rank
    # the iteration's time includes the wait for rank 3
    assert row["median_us"] > 1e4
    assert [(o["node"], o["host"], o["ranks"]) for o in doc["outliers"]] == [(1, host, [3])]


# -- a rank that hangs, named; the session ends on every rank --------------------------------------

def slurm_2x2_env(rank: int, port: int, **extra: str) -> dict[str, str]:
    """srun's variables for rank ``rank`` of 2 simulated nodes x 2 ranks (every process on this host)."""
    return clean_env(SLURM_PROCID=str(rank), SLURM_NTASKS="4", SLURM_LOCALID=str(rank % 2),
                     SLURM_NTASKS_PER_NODE="2", SLURM_NODEID=str(rank // 2), SLURM_STEP_NODELIST="node[1-2]",
                     SLURM_STEP_ID="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK_OF_TEST=str(rank),
                     **extra)


def slurm_nodes_env(rank: int, port: int, **extra: str) -> dict[str, str]:
    """srun's variables for rank ``rank`` of 2 simulated nodes x 1 rank: the fewest processes across nodes."""
    return clean_env(SLURM_PROCID=str(rank), SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="1",
                     SLURM_NODEID=str(rank), SLURM_STEP_NODELIST="node[1-2]", SLURM_STEP_ID="0",
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK_OF_TEST=str(rank), **extra)


# the hung (or dying) rank is the last of 2 simulated nodes of one rank each: the rank that waits for it is
# on the other node (2 x 2 ranks took twice the processes to check the same thing)
HANG_IN_TASK = '''
import time

from pytest_gpucomm import rank_timeout


def nap(ctx, rank, seconds):
    if ctx.rank == rank:
        time.sleep(seconds)
    return ctx.rank


def test_before():
    pass


@rank_timeout(4)
def test_a_task_hangs_on_rank_1(process_group):
    process_group.run("test_hang_task:nap", {"rank": 1, "seconds": 600})


def test_after():
    pass
'''


def check_hung_rank_1(results: list[tuple[int, str]], what: str, within: str) -> None:
    """Rank 0 (node 0) fails the test naming rank 1 and its host, stops the session and exits 1; rank 1's
    watchdog writes its stacks and ends it with status 1."""
    host = socket.gethostname()
    named = f"gpucomm: rank 1 ({host}, cpu) did not finish {what} within {within} s; a hung communicator " \
            "cannot be recovered: the session stops here"
    code, text = results[0]
    assert code == 1, text
    assert named in text, text
    assert "1 failed, 1 passed" in text, text  # the session stopped: test_after did not run
    assert "::test_after" not in text, text
    code1, text1 = results[1]
    assert code1 == 1, text1
    assert f"rank 1 ({host}, cpu)" in text1 and f"did not finish {what}" in text1, text1
    assert "Python stacks of every thread" in text1, text1


@pytest.mark.slow
def test_a_rank_that_hangs_in_a_task_is_named_and_every_rank_exits_1(tmp_path: Path) -> None:
    (tmp_path / "test_hang_task.py").write_text(HANG_IN_TASK)
    port = free_port()
    cmd = [sys.executable, "-m", "pytest", "test_hang_task.py", *ARGS, "-rA", "--gpucomm-rank-log=console"]
    start = time.monotonic()
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port) for r in range(2)], tmp_path)
    assert time.monotonic() - start < LIMIT_S
    check_hung_rank_1(results, "task test_hang_task:nap of test test_hang_task.py::test_a_task_hangs_on_rank_1",
                      "4")
    assert "did not finish task test_hang_task:nap" in results[1][1], results[1][1]
    assert 'File "' in results[1][1] and "in nap" in results[1][1], results[1][1]  # the hung rank's stack


HANG_IN_BODY = '''
import os
import time


def test_before(process_group):
    assert process_group.world_size == 2


def test_the_body_hangs_on_rank_1():
    if os.environ["RANK_OF_TEST"] == "1":
        time.sleep(600)


def test_after():
    pass
'''


@pytest.mark.slow
def test_a_rank_that_hangs_in_a_test_body_is_named_by_the_outcome_agreement(tmp_path: Path) -> None:
    (tmp_path / "test_hang_body.py").write_text(HANG_IN_BODY)
    port = free_port()
    cmd = [sys.executable, "-m", "pytest", "test_hang_body.py", "-p", "no:cacheprovider", "--gpucomm-timeout=6",
           "-rA", "--gpucomm-rank-log=console"]
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port) for r in range(2)], tmp_path)
    check_hung_rank_1(results, "the call of test test_hang_body.py::test_the_body_hangs_on_rank_1", "6")
    assert "in test_the_body_hangs_on_rank_1" in results[1][1], results[1][1]  # the hung rank's stack


DIES_IN_BODY = HANG_IN_BODY.replace("time.sleep(600)", "END").replace("hangs", "dies").replace(
    "import time", "import signal\nimport time")


# an exit code's wording and the supervising parent's own exit with it: test_launched_deaths.py (a real store)
@pytest.mark.parametrize("end, supervise, how, code", [
    ("os.kill(os.getpid(), signal.SIGKILL)", "1", "killed by SIGKILL", -9),
    # no supervising parent: the rank on the same machine finds its process gone
    ("os.kill(os.getpid(), signal.SIGKILL)", "0",
     "its process (pid * on this machine) is gone; how it ended is its launcher's to tell", -9),
])
@pytest.mark.slow
def test_a_rank_that_dies_is_named_dead_with_how_it_ended_at_once(tmp_path: Path, end: str, supervise: str, how: str,
                                                                  code: int) -> None:
    (tmp_path / "test_dies.py").write_text(DIES_IN_BODY.replace("END", end))
    port = free_port()
    # the default timeout (300 s): only the news of the death ends the others' wait within LIMIT_S
    cmd = [sys.executable, "-m", "pytest", "test_dies.py", "-p", "no:cacheprovider"]
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port, GPUCOMM_SUPERVISE=supervise) for r in range(2)],
                      tmp_path)
    text = results[0][1]
    assert results[0][0] == 1 and "1 failed, 1 passed" in text, text
    line = next(line for line in text.splitlines() if line.startswith("gpucomm: rank 1 ("))
    assert fnmatch.fnmatch(line, f"gpucomm: rank 1 ({socket.gethostname()}, cpu) died: {how} (the other ranks were at "
                                 "the call of test test_dies.py::test_the_body_dies_on_rank_1); a job with a dead rank "
                                 "cannot go on: the session stops here"), line
    assert "did not finish" not in text, text
    assert results[1][0] == code, results[1]  # the supervising parent ends as the rank did
    assert ("gpucomm rank deaths: no supervising parent (GPUCOMM_SUPERVISE=0)" in text) == (supervise == "0"), text


FAILS_TO_COLLECT_ON_RANK_1 = '''
import os

from pytest_gpucomm import sizes

if os.environ["RANK_OF_TEST"] == "1":
    raise RuntimeError("no GPU on this rank")


@sizes("1KB")
def test_all_reduce(process_group, size, comm):
    pass
'''


@pytest.mark.slow
def test_a_rank_that_fails_to_collect_is_named_by_the_others_at_once(tmp_path: Path) -> None:
    """Rank 1 of 2 simulated nodes fails to collect its tests: before, rank 0 waited out the join's timeout
    (the default 300 s) inside torch's rendezvous and ended with an INTERNALERROR; now the ranks meet first
    (plugin/launched/arrival.py) and rank 0 names rank 1, how it ended and where its output is, at once."""
    (tmp_path / "test_collect.py").write_text(FAILS_TO_COLLECT_ON_RANK_1)
    port, ends = free_port(), []
    cmd = [sys.executable, "-m", "pytest", "test_collect.py", "-p", "no:cacheprovider"]
    results = run_all([cmd] * 2, [slurm_nodes_env(r, port, COLUMNS="120") for r in range(2)], tmp_path, ends)
    assert [code for code, _ in results] == [1, 2], results  # rank 1: pytest's own status for its error
    text = results[0][1]
    assert max(ends) < 30, ends
    assert "INTERNALERROR" not in text, text
    log = tmp_path / "temproot" / f"pytest-of-{getpass.getuser()}" / f"gpucomm-slurm-{port}" / "rank-1.log"
    assert " ".join(text.split()).count(
        f"gpucomm: rank 1 ({socket.gethostname()}) ended before it joined the job: 1 error during collection "
        f"(test_collect.py: RuntimeError: no GPU on this rank); its output: {log}; a job without every rank cannot go "
        "on: the session stops here") == 1, text
    assert f"!! gpucomm: rank 1 ({socket.gethostname()}) ended before it joined the job !!" in text, text
    assert "RuntimeError: no GPU on this rank" in log.read_text()
    # wrapped to the terminal; only a path longer than a line (this test's temporary folder) stays whole
    assert all(len(line) <= 120 or " " not in line.strip() for line in text.splitlines()), text


KILLED_ON_RANK_3 = '''
import os
import signal
import time


def test_before():
    pass


def test_rank_3_is_killed():
    if os.environ["RANK"] == "3":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)


def test_after():
    pass
'''


@pytest.mark.slow
def test_a_rank_killed_under_torchrun_is_named_dead_and_the_ranks_that_waited_are_not_blamed(tmp_path: Path) -> None:
    """2 simulated nodes x 2 ranks under torchrun, rank 3 killed with SIGKILL in a plain test: every rank
    learns of it at once (the default timeout, 300 s, is far beyond LIMIT_S); rank 0 names rank 3 as dead by
    SIGKILL, and neither rank 1, which waited, nor rank 2, which its torchrun agent then stopped."""
    (tmp_path / "test_killed.py").write_text(KILLED_ON_RANK_3)
    port = free_port()
    cmds = [torchrun(2, k, 2, port, "test_killed.py", "-p", "no:cacheprovider") for k in (0, 1)]
    results = run_all(cmds, [clean_env(), clean_env()], tmp_path)
    assert [code for code, _ in results] == [1, 1], results
    text = results[0][1]
    assert "1 failed, 1 passed" in text and "::test_after" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("gpucomm: rank")]
    assert lines and all(line == lines[0] for line in lines), text
    assert lines[0] == (f"gpucomm: rank 3 ({socket.gethostname()}, local rank 1) died: killed by SIGKILL (the other "
                        "ranks were at the call of test test_killed.py::test_rank_3_is_killed); a job with a dead rank "
                        "cannot go on: the session stops here"), text
    assert "did not finish" not in text, text


def test_the_watchdog_writes_every_threads_stack_and_ends_the_process_with_status_1() -> None:
    stuck = ("import time\nfrom pytest_gpucomm.plugin.launched import Watchdog\nw = Watchdog(2)\n"
             "w.arm(time.monotonic() + 0.2, 'gpucomm: stuck in the test')\ntime.sleep(60)\n")
    p = subprocess.run([sys.executable, "-c", stuck], env=clean_env(), capture_output=True, text=True, timeout=LIMIT_S)
    assert p.returncode == 1, p.stderr
    assert "gpucomm: stuck in the test\nPython stacks of every thread" in p.stderr, p.stderr
    assert 'File "<string>", line 5 in <module>' in p.stderr, p.stderr  # the main thread, in its sleep
    disarmed = ("import time\nfrom pytest_gpucomm.plugin.launched import Watchdog\nw = Watchdog(2)\n"
                "w.arm(time.monotonic() + 0.2, 'never')\nw.disarm()\ntime.sleep(0.5)\n")
    p = subprocess.run([sys.executable, "-c", disarmed], env=clean_env(), capture_output=True, text=True,
                       timeout=LIMIT_S)
    assert p.returncode == 0 and "never" not in p.stderr, p.stderr


# -- mpirun's variables, set by hand --------------------------------------------------------------------

def ompi_env(rank: int, port: int) -> dict[str, str]:
    return clean_env(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_LOCAL_RANK=str(rank % 2),
                     OMPI_COMM_WORLD_LOCAL_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def mpich_env(rank: int, port: int) -> dict[str, str]:
    return clean_env(PMI_RANK=str(rank), PMI_SIZE="4", MPI_LOCALRANKID=str(rank % 2), MPI_LOCALNRANKS="2",
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK_OF_TEST=str(rank))


@pytest.mark.slow
def test_open_mpi_variables_set_by_hand_on_two_nodes_of_two_ranks(small: Path) -> None:
    out, port = small / "out.json", free_port()
    cmd = [sys.executable, "-m", "pytest", "test_small.py", *ARGS, f"--gpucomm-json={out}"]
    results = run_all([cmd] * 4, [ompi_env(r, port) for r in range(4)], small)
    assert [code for code, _ in results] == [0, 0, 0, 0], results
    assert "gpucomm launch: mpi rank 0 of 4 (local rank 0 of 2, node 0 of 2)" in results[0][1], results[0][1]
    check_one_report([t for _, t in results], out, world=4, n_nodes=2)


WRITES_TO_FD_2 = '''
import os


def pytest_unconfigure(config):  # after the last test, as NCCL's or gloo's own messages come
    os.write(2, ("fd 2 of rank " + os.environ["RANK_OF_TEST"] + "\\n").encode())
'''


@pytest.mark.slow
def test_mpich_variables_set_by_hand_with_the_output_of_ranks_1_to_3_in_rank_logs(small: Path) -> None:
    (small / "conftest.py").write_text(WRITES_TO_FD_2)
    out, port, logs = small / "out.json", free_port(), small / "logs" / "job"
    cmd = [sys.executable, "-m", "pytest", "test_small.py", *ARGS, f"--gpucomm-json={out}",
           f"--gpucomm-rank-log={logs}"]
    results = run_all([cmd] * 4, [mpich_env(r, port) for r in range(4)], small)
    assert [code for code, _ in results] == [0, 0, 0, 0], results
    rank0 = results[0][1]
    assert "gpucomm launch: mpi rank 0 of 4 (local rank 0 of 2, node 0 of 2)" in rank0, rank0
    assert f"gpucomm rank logs: ranks 1-3 write their output to {logs}/rank-<R>.log" in rank0, rank0
    assert "fd 2 of rank 0\n" in rank0, rank0  # rank 0's output is not redirected
    assert sorted(p.name for p in logs.iterdir()) == ["rank-1.log", "rank-2.log", "rank-3.log"]
    texts = [rank0]
    for r in (1, 2, 3):
        assert results[r][1].strip() == "", results[r][1]  # nothing on the rank's own stdout or stderr
        log = (logs / f"rank-{r}.log").read_text()
        assert f"gpucomm launch: mpi rank {r} of 4" in log and f"fd 2 of rank {r}\n" in log, log
        assert "= 2 passed in " in log, log
    check_one_report(texts, out, world=4, n_nodes=2)


def test_a_rank_log_folder_that_cannot_be_made_is_a_usage_error_naming_it(small: Path) -> None:
    (small / "blocker").write_text("a file, not a folder")
    bad = small / "blocker" / "logs"
    cmd = [sys.executable, "-m", "pytest", "test_small.py", f"--gpucomm-rank-log={bad}"]
    [(code, text)] = run_all([cmd], [slurm_env(1, 2, free_port())], small)  # refused before the rendezvous
    assert code == 4, text
    assert (f"invalid --gpucomm-rank-log '{bad}' (from the command line): rank 1 cannot write its log "
            f"{bad}/rank-1.log: Not a directory") in text, text
    cmd = [sys.executable, "-m", "pytest", "test_small.py"]
    [(code, text)] = run_all([cmd], [slurm_env(0, 2, free_port(), GPUCOMM_RANK_LOG=str(bad))], small)
    assert code == 4, text
    assert (f"invalid --gpucomm-rank-log '{bad}' (from the GPUCOMM_RANK_LOG environment variable): cannot "
            "create the folder: Not a directory") in text, text
