"""Unit tests for pytest_gpucomm.ranks: RankPool on gloo/cpu, its sockets, its workers.

Task functions live in tests/rank_tasks.py, imported by the workers as
``rank_tasks`` (tests/ is on the controller's sys.path under pytest's default
import mode, and the pool passes the controller's sys.path on to the workers).
"""

from __future__ import annotations

import _thread
import json
import os
import pickle
import secrets
import signal
import subprocess
import sys
import threading
import time
from contextlib import closing
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path
from typing import Iterator

import pytest

from conftest import POOL_ENV  # noqa: E402
from proc_helpers import (  # noqa: E402
    listening_ports,
    listening_sockets,
    process_running,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rank_tasks, whatever the import mode

from pytest_gpucomm.ranks.errors import (  # noqa: E402
    RankCrash,
    RankError,
    RankFailure,
    RankStartError,
    RankTimeout,
)
import pytest_gpucomm.ranks.logdirs as logdirs_module  # noqa: E402
import pytest_gpucomm.ranks.processes as processes_module  # noqa: E402
import pytest_gpucomm.ranks.spawn as spawn_module  # noqa: E402
from pytest_gpucomm.ranks.pool import RankPool  # noqa: E402
from pytest_gpucomm.ranks.protocol import Hello  # noqa: E402
from pytest_gpucomm.ranks.report import describe_returncode  # noqa: E402
from pytest_gpucomm.ranks.processes import ForkedProc  # noqa: E402
from pytest_gpucomm.ranks.spawn import (  # noqa: E402
    Zygote,
    accept_authenticated,
    loopback_listener,
    rank_start,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

ENV_MARK = "GPUCOMM_RANKS_TEST_MARK"
#: the environment of the module's zygote and of the pools it forks: pool2's, those of the tests of forked workers
#: (``start``) and of the four-rank test; with the tests' terminal width (conftest.POOL_ENV), so that a pool started or
#: restarted inside a test is forked too (pool2's restarts after a crash or a hang were processes of their own)
FORKED_ENV = {ENV_MARK: "from-pool", **POOL_ENV}


_listening_ports = listening_ports


def _pid_exists(pid: int) -> bool:
    """True while /proc/<pid> exists (zombies included, so this also checks reaping)."""
    return Path(f"/proc/{pid}").exists()


def _wait_until(predicate, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def _sleepers_gone(sleepers: list[dict], timeout_s: float = 5.0) -> bool:
    """Whether every ``sleep`` started by rank_tasks:start_sleeper is gone within the time."""
    return _wait_until(
        lambda: not any(process_running(s["pid"], s["start"]) for s in sleepers), timeout_s)


def _start_sleepers(pool: RankPool) -> list[dict]:
    sleepers = pool.run("rank_tasks:start_sleeper", timeout_s=30)
    assert [s["rank"] for s in sleepers] == list(range(pool.world_size))
    assert all(process_running(s["pid"], s["start"]) for s in sleepers)  # left running
    return sleepers


def _expected_allreduce(world_size: int, scale: float = 1.0) -> list[float]:
    total = sum(r + 1.0 for r in range(world_size)) * scale
    return [total, 10.0 * total]


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """The module's zygote, with the environment of ``pool2`` (FORKED_ENV)."""
    z = Zygote(FORKED_ENV, "gloo", start_timeout_s=60)
    yield z
    z.close()


@pytest.fixture(scope="module")
def pool2(zygote: Zygote) -> Iterator[RankPool]:
    """Two gloo ranks forked from the module's zygote, as the plugin's pools are (the tests that build their
    own pool start their workers both ways: ``start``)."""
    forks = zygote.forks  # the tests of forked workers may have used the zygote first
    pool = RankPool(2, "gloo", "cpu", start_timeout_s=60, env=FORKED_ENV, error_grace_s=1.0, zygote=zygote)
    pool.start()
    assert zygote.failed is None and zygote.forks == forks + 2, zygote
    yield pool
    pool.close()


@pytest.fixture(params=["exec", "fork"])
def start(request: pytest.FixtureRequest) -> Iterator[dict]:
    """RankPool keywords for workers that are processes of their own (exec) or forks of a zygote (fork): the
    module's, which pool2 shares (one import of torch for every forked pool of the module)."""
    if request.param == "exec":
        yield {}
        return
    z = request.getfixturevalue("zygote")
    forks = z.forks
    yield {"zygote": z, "env": FORKED_ENV}
    assert z.failed is None and z.forks > forks, z  # the test's workers were forked


# ----------------------------------------------------------------- happy path


def test_world_of_two_allreduce_returns_sum_on_every_rank(pool2: RankPool) -> None:
    results = pool2.run("rank_tasks:allreduce_sum", {"scale": 2.0}, timeout_s=30, label="t")
    assert results == [_expected_allreduce(2, 2.0)] * 2


def test_world_of_four_allreduce_returns_sum_on_every_rank(zygote: Zygote) -> None:
    """Four ranks forked from the module's zygote, as the plugin's pools start them: no import of torch of
    their own (four would take about 5 CPU-s on the 2-core CI machine)."""
    forks = zygote.forks
    with RankPool(4, "gloo", "cpu", start_timeout_s=60, env=FORKED_ENV, zygote=zygote) as pool:
        results = pool.run("rank_tasks:allreduce_sum", timeout_s=30)
        assert results == [_expected_allreduce(4)] * 4
        assert [r["rank"] for r in pool.run("rank_tasks:whoami", timeout_s=30)] == [0, 1, 2, 3]
    assert zygote.forks == forks + 4 and zygote.failed is None, zygote


def test_results_are_ordered_by_rank_and_context_is_filled_in(pool2: RankPool) -> None:
    results = pool2.run("rank_tasks:whoami", timeout_s=30)
    assert [(r["rank"], r["world_size"], r["local_rank"], r["backend"], r["device"])
            for r in results] == [(0, 2, 0, "gloo", "cpu"), (1, 2, 1, "gloo", "cpu")]


def test_pool_is_reused_across_runs(pool2: RankPool) -> None:
    pids = pool2.pids
    first = [r["pid"] for r in pool2.run("rank_tasks:whoami", timeout_s=30)]
    pool2.run("rank_tasks:allreduce_sum", timeout_s=30)
    second = [r["pid"] for r in pool2.run("rank_tasks:whoami", timeout_s=30)]
    assert first == second == pids == pool2.pids
    assert pool2.alive


def test_workers_inherit_environment_plus_overrides(pool2: RankPool) -> None:
    results = pool2.run("rank_tasks:getenv", {"names": [ENV_MARK, "PATH"]}, timeout_s=30)
    for r in results:
        assert r[ENV_MARK] == "from-pool"
        assert r["PATH"] == os.environ.get("PATH")


def test_task_module_added_to_sys_path_after_start_is_importable(
    pool2: RankPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gpucomm_late_tasks.py").write_text(
        "def square_rank(ctx, offset=0):\n    return ctx.rank * ctx.rank + offset\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # what pytester does, after the pool started
    assert pool2.run("gpucomm_late_tasks:square_rank", {"offset": 1}, timeout_s=30) == [1, 2]


# ----------------------------------------------------------------- task errors


def test_rank_error_names_rank_and_traceback_and_pool_stays_usable(pool2: RankPool) -> None:
    pids = pool2.pids
    with pytest.raises(RankError) as excinfo:
        pool2.run("rank_tasks:raise_on_rank", {"bad_rank": 1}, timeout_s=30,
                  label="tests/x.py::test_bad")
    err = excinfo.value
    assert err.rank == 1 and err.ranks == (1,)
    assert err.label == "tests/x.py::test_bad"
    msg = str(err)
    assert "rank(s) [1]" in msg and "tests/x.py::test_bad" in msg
    assert "ValueError: deliberate failure on rank 1" in msg
    assert "raise_on_rank" in msg  # the traceback's frame
    assert "ValueError" in err.tracebacks[1]
    # Every rank answered, so the process group is intact and kept.
    assert pool2.pids == pids
    assert pool2.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2


def test_rank_error_with_peer_stuck_in_collective_tears_down_and_recovers(
    pool2: RankPool,
) -> None:
    old_pids = pool2.pids
    t0 = time.monotonic()
    with pytest.raises(RankError) as excinfo:  # a RankTimeout if the grace did not end it
        pool2.run("rank_tasks:raise_on_rank", {"bad_rank": 1, "collective_after": True},
                  timeout_s=120)
    assert time.monotonic() - t0 < 60  # the 1 s grace, not the 120 s timeout
    err = excinfo.value
    assert err.rank == 1 and err.stuck == (0,)
    assert "deliberate failure on rank 1" in str(err)
    assert "all_reduce" in str(err)  # stack of the stuck rank
    assert not pool2.alive
    assert not any(_pid_exists(p) for p in old_pids)
    assert pool2.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2
    assert set(pool2.pids).isdisjoint(old_pids)


def test_unknown_task_is_reported_as_rank_error(pool2: RankPool) -> None:
    with pytest.raises(RankError) as excinfo:
        pool2.run("rank_tasks:no_such_task", timeout_s=30)
    assert excinfo.value.ranks == (0, 1)
    assert "no_such_task" in excinfo.value.tracebacks[0]  # the ranks' own error, not the task label
    assert pool2.alive


def test_unpicklable_result_is_reported_as_rank_error(pool2: RankPool) -> None:
    with pytest.raises(RankError, match="could not be sent"):
        pool2.run("rank_tasks:unpicklable_result", timeout_s=30)
    assert pool2.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2


def test_bad_arguments_are_rejected_before_running(pool2: RankPool) -> None:
    pids = pool2.pids
    with pytest.raises(ValueError):
        pool2.run("rank_tasks.whoami", timeout_s=30)
    with pytest.raises(ValueError):
        pool2.run("rank_tasks:whoami", timeout_s=0)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pool2.run("rank_tasks:whoami", {"x": lambda: 1}, timeout_s=30)
    assert pool2.alive and pool2.pids == pids  # a caller mistake does not cost the pool
    with pytest.raises(ValueError):
        RankPool(0)
    with pytest.raises(ValueError):
        RankPool(2, device="tpu")


# ----------------------------------------------------------------- hangs


@pytest.mark.slow
def test_hung_rank_raises_timeout_with_its_stack_and_next_run_restarts(pool2: RankPool) -> None:
    old_pids = pool2.pids
    t0 = time.monotonic()
    with pytest.raises(RankTimeout) as excinfo:
        pool2.run("rank_tasks:sleep_forever_on_rank", {"bad_rank": 1}, timeout_s=3,
                  label="tests/x.py::test_hang")
    elapsed = time.monotonic() - t0
    assert 3 <= elapsed < 30  # not early; and then ended (stack dump and kill take seconds)
    err = excinfo.value
    assert err.ranks == (1,) and err.finished == (0,) and err.timeout_s == 3
    msg = str(err)
    assert "rank(s) [1]" in msg and "tests/x.py::test_hang" in msg
    assert "sleep_forever_on_rank" in msg  # the hung rank's stack
    assert "sleep_forever_on_rank" in err.stacks[1]
    assert not any(_pid_exists(p) for p in old_pids)
    results = pool2.run("rank_tasks:whoami", timeout_s=30)
    new_pids = [r["pid"] for r in results]
    assert set(new_pids).isdisjoint(old_pids)
    assert pool2.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2


@pytest.mark.slow
def test_collective_entered_by_one_rank_times_out_with_collective_in_stack(
    pool2: RankPool,
) -> None:
    with pytest.raises(RankTimeout) as excinfo:
        pool2.run("rank_tasks:lonely_collective", {"lonely_rank": 0}, timeout_s=2)
    err = excinfo.value
    assert err.ranks == (0,) and err.finished == (1,)
    assert "lonely_collective" in err.stacks[0] and "all_reduce" in err.stacks[0]
    assert pool2.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2


# ----------------------------------------------------------------- crashes


def test_rank_exit_raises_crash_with_exit_code_promptly(pool2: RankPool) -> None:
    old_pids = pool2.pids
    t0 = time.monotonic()
    with pytest.raises(RankCrash) as excinfo:
        pool2.run("rank_tasks:exit_on_rank", {"bad_rank": 1, "code": 3}, timeout_s=120,
                  label="tests/x.py::test_crash")
    assert time.monotonic() - t0 < 60  # noticed as a crash, not at the 120 s timeout
    err = excinfo.value
    assert err.rank == 1 and err.returncodes[1] == 3
    msg = str(err)
    assert "rank 1 crashed (exit code 3)" in msg and "tests/x.py::test_crash" in msg
    assert not any(_pid_exists(p) for p in old_pids)
    assert pool2.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2


def test_a_rank_killed_by_a_signal_is_a_crash_naming_the_signal(pool2: RankPool) -> None:
    old_pids = pool2.pids
    with pytest.raises(RankCrash) as excinfo:
        pool2.run("rank_tasks:kill_self_on_rank", {"bad_rank": 1}, timeout_s=120)
    err = excinfo.value
    assert err.rank == 1 and err.returncodes[1] == -signal.SIGKILL
    assert "rank 1 crashed (killed by SIGKILL)" in str(err)
    assert not any(_pid_exists(p) for p in old_pids)
    assert pool2.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2


def test_crash_message_names_signal_for_killed_rank() -> None:
    assert describe_returncode(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert describe_returncode(3) == "exit code 3"
    assert describe_returncode(None) == "still running"


def test_keyboard_interrupt_during_run_tears_down_and_reraises(pool2: RankPool) -> None:
    old_pids = pool2.pids
    # A shell without job control starts a background job with SIGINT ignored, and Python then installs no
    # handler: interrupt_main would do nothing. The test installs Python's own for its run.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pool2.run("rank_tasks:sleep_forever_on_rank", timeout_s=60)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not pool2.alive
    assert not any(_pid_exists(p) for p in old_pids)
    # (the next run restarts lazily, as pinned by the tests above)


# ----------------------------------------------------------------- start / close


def test_start_failure_raises_start_error_with_stderr_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Time the other rank gets to report after rank 0 failed (default 3 s).
    monkeypatch.setattr(spawn_module, "START_FAILURE_GRACE_S", 1.0)
    pool = RankPool(2, backend="no-such-backend", start_timeout_s=60)
    try:
        with pytest.raises(RankStartError) as excinfo:
            pool.start()
        err = excinfo.value
        # Rank 0 fails in init_process_group; rank 1 may fail the same way or still be
        # waiting for rank 0's rendezvous store when the pool gives up on it.
        assert err.rank == 0 and set(err.ranks) <= {0, 1}
        msg = str(err)
        assert "rank 0" in msg and "failed during start-up" in msg
        assert "init_process_group failed" in msg and "no-such-backend" in msg
        assert "no-such-backend" in err.log_tails[0]  # the captured output tail
        assert not pool.alive and pool.pids == []
    finally:
        pool.close()


def test_close_reaps_workers_and_frees_ports_and_run_restarts_lazily() -> None:
    pool = RankPool(2, start_timeout_s=60)
    try:
        assert not pool.alive and pool.pids == []
        assert pool.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2
        pids = pool.pids
        log_dir = pool.log_dir
        ports = (pool.rendezvous_port, pool.control_port)
        assert pool.rendezvous_port in _listening_ports()  # so the check below means something
        assert pids and all(_pid_exists(p) for p in pids)
    finally:
        pool.close()
    pool.close()  # idempotent
    assert not pool.alive and pool.pids == []
    assert not any(_pid_exists(p) for p in pids)  # gone and reaped (no zombies)
    assert not set(ports) & _listening_ports()
    assert log_dir is not None and not log_dir.exists()
    # A closed pool starts again on demand (and is closed by the atexit hook otherwise).
    try:
        assert pool.run("rank_tasks:whoami", timeout_s=30)[1]["rank"] == 1
        assert set(pool.pids).isdisjoint(pids)
    finally:
        pool.close()
    assert pool.pids == []


# ----------------------------------------------------------------- sockets, worker


def test_control_listener_is_loopback_only_and_admits_only_the_authkey() -> None:
    key = secrets.token_bytes(32)
    with closing(loopback_listener(4)) as listener:
        host, port = listener.getsockname()
        assert host == "127.0.0.1"
        outcome: dict[str, object] = {}

        def connect(authkey: bytes) -> None:
            try:
                conn = Client((host, port), authkey=authkey)
            except AuthenticationError as exc:
                outcome["client"] = exc
                return
            conn.send(Hello(rank=0, pid=os.getpid()))
            outcome["client"] = conn

        for authkey, admitted in ((secrets.token_bytes(32), False), (key, True)):
            thread = threading.Thread(target=connect, args=(authkey,), daemon=True)
            thread.start()
            conn = accept_authenticated(listener, key)
            thread.join(30)
            assert not thread.is_alive()
            if admitted:
                assert conn is not None and conn.recv() == Hello(rank=0, pid=os.getpid())
                conn.close()
                outcome["client"].close()  # type: ignore[union-attr]
            else:
                assert conn is None
                assert isinstance(outcome["client"], AuthenticationError)


def test_workers_listen_on_loopback_only(pool2: RankPool) -> None:
    pool2.run("rank_tasks:allreduce_sum", timeout_s=30)  # gloo's pair sockets are up
    sockets = listening_sockets(pool2.pids)
    assert ("127.0.0.1", pool2.rendezvous_port) in sockets  # served by rank 0
    assert {addr for addr, _ in sockets} <= {"127.0.0.1", "::1"}, sockets
    # The control listener is closed once every rank has connected.
    assert pool2.control_port not in listening_ports()


def test_worker_module_imports_no_plugin_dependencies() -> None:
    code = (
        "import json, sys\n"
        "import pytest_gpucomm.ranks.worker\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, cwd=str(Path(__file__).resolve().parents[1]))
    modules = set(json.loads(out.stdout))
    assert not {m.split(".")[0] for m in modules} & {"pytest", "_pytest", "numpy", "scipy"}
    ranks = {m for m in modules if m.startswith("pytest_gpucomm.ranks.")}
    assert ranks == {"pytest_gpucomm.ranks.worker", "pytest_gpucomm.ranks.context",
                     "pytest_gpucomm.ranks.protocol", "pytest_gpucomm.ranks.reaper"}


# ----------------------------------------------------------------- errors


def test_rank_failures_pickle_round_trip() -> None:
    errs: list[RankFailure] = [
        RankError("boom", ranks=[1], label="l", tracebacks={1: "tb"}, stuck=[0]),
        RankTimeout("hang", ranks=[0], label="l", timeout_s=3, finished=[1], stacks={0: "s"}),
        RankCrash("dead", ranks=[1], label="l", returncodes={1: 3}, log_tails={1: "t"}),
        RankStartError("nope", ranks=[0, 1], label="l", log_tails={0: "a"}),
    ]
    for err in errs:
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is type(err) and str(copy) == str(err)
        assert copy.__dict__ == err.__dict__
        assert isinstance(copy, RankFailure)


# ----------------------------------------------------------------- leftovers


def test_close_kills_processes_left_running_by_tasks(start: dict) -> None:
    pool = RankPool(2, start_timeout_s=60, **start)
    try:
        sleepers = _start_sleepers(pool)
        pids = pool.pids
    finally:
        pool.close()
    assert _sleepers_gone(sleepers), sleepers
    assert not any(_pid_exists(p) for p in pids)  # the workers are reaped too


@pytest.mark.slow
def test_teardown_after_task_error_and_restarted_pool_close_kill_task_children(start: dict) -> None:
    pool = RankPool(2, start_timeout_s=60, error_grace_s=1.0, **start)
    try:
        first = _start_sleepers(pool)
        with pytest.raises(RankError):  # rank 0 stuck in the collective: torn down
            pool.run("rank_tasks:raise_on_rank", {"bad_rank": 1, "collective_after": True},
                     timeout_s=60)
        assert not pool.alive
        assert _sleepers_gone(first), first
        second = _start_sleepers(pool)  # restarted
        assert {s["pid"] for s in second}.isdisjoint(s["pid"] for s in first)
    finally:
        pool.close()
    assert _sleepers_gone(second), second


def test_processes_a_task_started_in_a_session_of_their_own_do_not_outlive_the_pool(start: dict) -> None:
    """Issue 49: a ``start_new_session`` child and a double-forked ``setsid`` grandchild of a task left the
    rank's process group; closing the pool ends them too (the worker is their subreaper)."""
    pool = RankPool(1, start_timeout_s=60, **start)
    try:
        sleepers = pool.run("rank_tasks:start_session_sleepers", timeout_s=30)[0]
        assert all(process_running(s["pid"], s["start"]) for s in sleepers)  # left running, outside the group
        assert all(os.getpgid(s["pid"]) != pool.pids[0] for s in sleepers)
    finally:
        pool.close()
    assert _sleepers_gone(sleepers, timeout_s=3.0), sleepers


@pytest.mark.slow
def test_a_hung_rank_torn_down_takes_the_processes_it_started_in_their_own_session(
        tmp_path: Path, start: dict) -> None:
    """The controller's side: a rank still running when its pool is torn down (a timeout) has its descendants
    outside its group killed before it is."""
    pool = RankPool(1, start_timeout_s=60, **start)
    try:
        with pytest.raises(RankTimeout):
            pool.run("rank_tasks:start_session_sleepers_then_hang", {"marker_dir": str(tmp_path)}, timeout_s=2)
        sleepers = json.loads((tmp_path / "rank0.json").read_text())
        assert len(sleepers) == 2
        assert _sleepers_gone(sleepers, timeout_s=3.0), sleepers
    finally:
        pool.close()


def test_children_of_a_crashed_rank_and_of_its_peers_are_killed(tmp_path: Path, start: dict) -> None:
    pool = RankPool(2, start_timeout_s=60, **start)
    try:
        with pytest.raises(RankCrash, match=r"rank 1 crashed \(exit code 3\)"):
            pool.run("rank_tasks:start_sleeper_then_exit_on_rank",
                     {"bad_rank": 1, "marker_dir": str(tmp_path)}, timeout_s=60)
        sleepers = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert _sleepers_gone(sleepers), sleepers
    finally:
        pool.close()


def test_log_dir_is_under_a_folder_of_this_process_removed_when_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # no other pool's folder there
    pool = RankPool(1, start_timeout_s=60)
    try:
        pool.start()
        log_dir = pool.log_dir
        assert log_dir is not None and log_dir.name.startswith("gpucomm-ranks-")
        root = log_dir.parent
        assert root.parent == tmp_path
        match = logdirs_module.ROOT_NAME.fullmatch(root.name)
        assert match is not None and int(match.group(1)) == os.getpid(), root
    finally:
        pool.close()
    assert not log_dir.exists() and not root.exists()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not _pid_exists(proc.pid)
    return proc.pid


def test_new_pool_removes_temp_folders_of_dead_controllers_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"gpucomm-{_dead_pid()}-abcd_123"
    (dead / "gpucomm-ranks-k2j4h5g6").mkdir(parents=True)
    (dead / "gpucomm-ranks-k2j4h5g6" / "rank0.log").write_text("left behind\n")
    live = tmp_path / f"gpucomm-{os.getppid()}-abcd_123"  # pytest's parent: alive
    (live / "gpucomm-ranks-zzzzzzzz").mkdir(parents=True)
    own = tmp_path / f"gpucomm-{os.getpid()}-abcd_456"  # this process: alive
    own.mkdir()
    dead_plain = tmp_path / f"gpucomm-{_dead_pid()}-efgh_789"  # no pool folder inside
    dead_plain.mkdir()
    dead_foreign = tmp_path / f"gpucomm-{_dead_pid()}-ijkl_012"  # someone else's content
    (dead_foreign / "notes.txt").parent.mkdir()
    (dead_foreign / "notes.txt").write_text("not ours\n")
    not_ours = [tmp_path / f"gpucomm-{_dead_pid()}-short", tmp_path / "gpucomm-ranks-abcdefgh",
                tmp_path / f"gpucomm-x{_dead_pid()}-abcdefgh"]
    for path in not_ours:
        path.mkdir()
    pool = RankPool(1, start_timeout_s=60)
    try:
        pool.start()
        assert pool.log_dir is not None and pool.log_dir.parent.parent == tmp_path
        assert not dead.exists() and not dead_plain.exists()
        assert live.exists() and own.exists() and dead_foreign.exists()
        assert all(path.exists() for path in not_ours)
    finally:
        pool.close()


def test_a_folder_whose_owner_holds_its_lock_stays_even_if_its_pid_looks_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller in another pid namespace sharing the temp folder: its pid means nothing here, but
    its lock on .owner does."""
    import fcntl
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    held = tmp_path / f"gpucomm-{_dead_pid()}-held_123"
    (held / "gpucomm-ranks-aaaaaaaa").mkdir(parents=True)
    (held / ".owner").write_text("")
    released = tmp_path / f"gpucomm-{_dead_pid()}-free_123"
    (released / "gpucomm-ranks-bbbbbbbb").mkdir(parents=True)
    (released / ".owner").write_text("")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(fd, fcntl.LOCK_SH); print('locked', flush=True); time.sleep(60)", str(held / ".owner")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        removed = logdirs_module.remove_stale_roots(tmp_path)
        assert removed == [released] and held.exists()
    finally:
        holder.kill()
        holder.wait()
    assert logdirs_module.remove_stale_roots(tmp_path) == [held]  # its owner is gone now
    del fcntl


def test_a_new_root_folder_never_looks_abandoned_while_its_owner_takes_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another controller looking at the folder between its creation and the owner's lock must not
    find an unlocked .owner (it would judge the owner gone and remove the folder: a pool start
    then failed with FileNotFoundError under xdist)."""
    import fcntl
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(logdirs_module, "_roots", {})
    monkeypatch.setattr(logdirs_module, "_owner_fds", {})
    seen: list[bool | None] = []
    real_flock = fcntl.flock

    def flock_seen_by_another(fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_SH:
            (root,) = [path for path in tmp_path.iterdir() if path.name.startswith(f"gpucomm-{os.getpid()}-")]
            seen.append(logdirs_module._owner_gone(str(root)))
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_seen_by_another)
    log_dir = logdirs_module.new_log_dir()
    try:
        assert seen == [None]  # no .owner yet: judged by the (live) pid, as a folder without one is
        assert (log_dir.parent / ".owner").exists() and log_dir.is_dir()
        monkeypatch.setattr(fcntl, "flock", real_flock)
        assert logdirs_module._owner_gone(str(log_dir.parent)) is False  # locked now
    finally:
        logdirs_module.remove_own_roots()


def test_a_pool_whose_log_folder_was_removed_starts_again_with_a_new_one() -> None:
    import shutil

    pool = RankPool(1, start_timeout_s=60)
    try:
        pool.start()
        first = pool.log_dir
        assert first is not None
        shutil.rmtree(first)
        os.kill(pool.pids[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pool.alive and time.monotonic() < deadline:  # the next run starts a new pool once it is seen dead
            time.sleep(0.05)
        assert pool.run("rank_tasks:whoami", timeout_s=60)[0]["rank"] == 0
        assert pool.log_dir is not None and pool.log_dir.is_dir()
    finally:
        pool.close()


def test_a_rank_reaped_by_someone_else_is_not_signalled_again(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen(["true"], start_new_session=True)
    os.waitpid(proc.pid, 0)  # reaped behind Popen's back (as with SIGCHLD ignored)
    p = processes_module.RankProcess(rank=0, proc=proc, log_path=Path(os.devnull), stack_path=Path(os.devnull),
                                 log_file=open(os.devnull, "wb"))
    signalled: list[int] = []
    monkeypatch.setattr(processes_module, "_kill_group", lambda q: signalled.append(q.pid) or True)
    try:
        processes_module.kill_ranks([p], wait_s=5)
    finally:
        p.log_file.close()
    assert p.reaped_elsewhere and signalled == []


def test_interrupts_are_held_back_while_ranks_are_released_and_arrive_after() -> None:
    seen: list[str] = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append("TERM"))
    try:
        with processes_module._signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert seen == []
        time.sleep(0.05)
        assert seen == ["TERM"]
    finally:
        signal.signal(signal.SIGTERM, old)


# ----------------------------------------------------------------- the zygote


def _ppid(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2:].split()[1])


def test_workers_forked_from_the_zygote_are_its_children_each_leading_its_own_session(zygote: Zygote) -> None:
    forks = zygote.forks  # the module's zygote: pool2 and other tests' pools may have been forked from it
    with RankPool(2, start_timeout_s=60, env=FORKED_ENV, zygote=zygote) as pool2:
        pool2.start()
        (zygote_pid,) = {_ppid(p) for p in pool2.pids}
        assert zygote_pid != os.getpid() and _ppid(zygote_pid) == os.getpid()
        assert "pytest_gpucomm.ranks.zygote" in Path(f"/proc/{zygote_pid}/cmdline").read_text()
        assert all(os.getsid(p) == p and os.getpgid(p) == p for p in pool2.pids)
        assert all(isinstance(w.proc, ForkedProc) for w in pool2._workers)
        assert pool2.run("rank_tasks:getenv", {"names": [ENV_MARK]}, timeout_s=30) == [{ENV_MARK: "from-pool"}] * 2
        # a second pool is forked too, without another zygote or another import of torch
        with RankPool(3, start_timeout_s=60, env=FORKED_ENV, zygote=zygote) as pool3:
            assert pool3.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(3)] * 3
            assert {_ppid(p) for p in pool3.pids} == {zygote_pid} and zygote.forks == forks + 5


def test_a_pool_of_another_environment_starts_its_workers_as_processes_of_their_own(zygote: Zygote) -> None:
    forks = zygote.forks
    with RankPool(1, start_timeout_s=60, env={ENV_MARK: "another"}, zygote=zygote) as pool:
        [env] = pool.run("rank_tasks:getenv", {"names": [ENV_MARK]}, timeout_s=30)
        assert env == {ENV_MARK: "another"} and _ppid(pool.pids[0]) == os.getpid()
    assert zygote.forks == forks and zygote.failed is None


def test_a_zygote_not_ready_in_time_leaves_the_workers_to_start_as_processes_of_their_own() -> None:
    z = Zygote({}, "gloo", start_timeout_s=0.001)
    try:
        with RankPool(2, start_timeout_s=60, zygote=z) as pool:
            assert pool.run("rank_tasks:allreduce_sum", timeout_s=30) == [_expected_allreduce(2)] * 2
            assert {_ppid(p) for p in pool.pids} == {os.getpid()}
        assert z.failed == "it was not ready within 0.001 s" and z.forks == 0
    finally:
        z.close()


def test_closing_the_zygote_ends_it_and_reaps_what_it_forked() -> None:
    z = Zygote({}, "gloo", start_timeout_s=60)
    pool = RankPool(2, start_timeout_s=60, zygote=z)
    try:
        pool.start()
        (zygote_pid,) = {_ppid(p) for p in pool.pids}
        pids = pool.pids
    finally:
        pool.close()
        z.close()
    assert not any(_pid_exists(p) for p in [*pids, zygote_pid])  # zombies included


def test_rank_start_is_fork_by_default_and_names_a_bad_value() -> None:
    assert rank_start({}) == "fork" and rank_start({"GPUCOMM_RANK_START": " Exec "}) == "exec"
    with pytest.raises(ValueError, match=r"invalid GPUCOMM_RANK_START 'vfork' \(from the environment\): "
                                         "expected fork or exec"):
        rank_start({"GPUCOMM_RANK_START": "vfork"})
