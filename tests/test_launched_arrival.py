"""The ranks' meeting before a launched job's process groups are made (plugin/launched/arrival.py): a rank that
ends before it joins -- a collection error, a usage error, a crash -- is named to the others at once, instead
of their waiting out the join's timeout inside torch's rendezvous.  A TCPStore in this process stands for the
rendezvous' store, threads for the other ranks; the end-to-end run is tests/test_launched.py's."""

from __future__ import annotations

import datetime
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pytest

from test_launched import LIMIT_S, clean_env

dist = pytest.importorskip("torch.distributed")

from pytest_gpucomm.env.launch import Launch  # noqa: E402
from pytest_gpucomm.plugin.launched.arrival import (  # noqa: E402
    Meeting,
    arrive,
    depart,
    wait_for_all,
)
from pytest_gpucomm.ranks.errors import JobBroken  # noqa: E402

PREFIX = "gpucomm/arrival/0/"


@pytest.fixture
def store() -> Any:
    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    yield server
    del server


def meeting(rank: int, world: int, port: int = 0, serves: bool = False, timeout_s: float = 30.0) -> Meeting:
    return Meeting(host="127.0.0.1", port=port, rank=rank, world_size=world, me=f"host{rank}", serves=serves,
                   timeout_s=timeout_s, prefix=PREFIX)


def later(seconds: float, fn: Callable[[], Any]) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_rank_that_comes_to_join_lets_the_others_through(store: Any) -> None:
    arrive(store, meeting(0, 3))
    others = [later(0.2, lambda r=r: arrive(store, meeting(r, 3))) for r in (1, 2)]
    start = time.monotonic()
    wait_for_all(store, meeting(0, 3), time.monotonic() + 30)
    assert time.monotonic() - start < 5
    for t in others:
        t.join()
    assert store.get(PREFIX + "all") == b"1"


def test_a_rank_that_ends_before_it_joins_is_named_at_once_with_how(store: Any) -> None:
    arrive(store, meeting(0, 3))
    later(0.2, lambda: arrive(store, meeting(2, 3), "1 error during collection\n(test_x.py: RuntimeError: no GPU)"))
    start = time.monotonic()
    with pytest.raises(JobBroken) as e:
        wait_for_all(store, meeting(0, 3), time.monotonic() + 30)  # rank 1 never comes: not waited for
    assert time.monotonic() - start < 5
    assert str(e.value) == ("gpucomm: rank 2 (host2) ended before it joined the job: 1 error during collection "
                            "(test_x.py: RuntimeError: no GPU); a job without every rank cannot go on: the session "
                            "stops here")
    assert e.value.ranks == (2,)


def test_the_ranks_that_never_come_are_named_at_the_deadline_and_a_latecomer_does_not_go_on_alone(store: Any) -> None:
    arrive(store, meeting(0, 4))
    arrive(store, meeting(2, 4))
    with pytest.raises(JobBroken) as e:
        wait_for_all(store, meeting(0, 4, timeout_s=1.0), time.monotonic() + 1.0)
    assert str(e.value) == ("gpucomm: ranks 1, 3 did not come to join the job within 1 s (not started, hung, or ended "
                            "without a word: the launcher's log says which); a job without every rank cannot go on: "
                            "the session stops here")
    assert e.value.ranks == (1, 3) and e.value.summary == "gpucomm: ranks 1, 3 did not come to join the job within 1 s"
    # rank 0 said in the store that it gave up: the ranks that come now do not pass the meeting without it
    arrive(store, meeting(1, 4))
    arrive(store, meeting(3, 4))
    with pytest.raises(JobBroken, match=r"^gpucomm: rank 0 \(host0\) ended before it joined the job: it gave up "
                                        r"waiting for ranks 1, 3 after 1 s; a job without every rank"):
        wait_for_all(store, meeting(3, 4), time.monotonic() + 30)


def test_the_rank_that_serves_the_store_stays_until_every_rank_has_read_that_the_job_cannot_start(store: Any) -> None:
    server = meeting(0, 3, serves=True)
    arrive(store, server)
    arrive(store, meeting(1, 3), "killed by SIGKILL")  # needs nothing more: counted as seen
    late: list[BaseException] = []

    def rank_2() -> None:
        time.sleep(0.6)
        arrive(store, meeting(2, 3))
        try:
            wait_for_all(store, meeting(2, 3), time.monotonic() + 30)
        except JobBroken as e:
            late.append(e)

    t = threading.Thread(target=rank_2)
    t.start()
    start = time.monotonic()
    with pytest.raises(JobBroken) as e:
        wait_for_all(store, server, time.monotonic() + 30)
    assert 0.5 < time.monotonic() - start < 5  # it stayed until rank 2 had read the news
    t.join()
    assert str(e.value).startswith("gpucomm: rank 1 (host1) ended before it joined the job: killed by SIGKILL; ")
    assert e.value.summary == "gpucomm: rank 1 (host1) ended before it joined the job"
    assert [str(x) for x in late] == [str(e.value)]
    assert int(store.add(PREFIX + "seen", 0)) == 3


def test_a_departing_rank_that_serves_the_store_says_that_it_waits_then_lets_a_late_rank_learn() -> None:
    port = free_port()
    said: list[str] = []
    serving = threading.Thread(target=lambda: said.append(str(depart(meeting(0, 2, port, serves=True),
                                                                     "a usage error: no GPU", say=said.append))))
    serving.start()
    time.sleep(1.5)  # past the time after which the serving rank says it waits
    client = meeting(1, 2, port).connect()
    arrive(client, meeting(1, 2, port))
    with pytest.raises(JobBroken, match=r"^gpucomm: rank 0 \(host0\) ended before it joined the job: a usage error"):
        wait_for_all(client, meeting(1, 2, port), time.monotonic() + 30)
    serving.join(timeout=10)
    assert not serving.is_alive()
    assert said[0].startswith(f"gpucomm: rank 0 serves the job's rendezvous (127.0.0.1:{port}): it waits up to ")
    assert said[0].endswith("s for every rank to come and learn that the job cannot start (1 not come yet)")
    assert said[1:] == ["True"]


def test_a_rank_that_cannot_reach_the_rendezvous_says_where_and_within_how_long() -> None:
    port = free_port()  # nobody serves it
    with pytest.raises(JobBroken) as e:
        meeting(1, 2, port, timeout_s=0.5).connect()
    assert str(e.value).startswith(f"gpucomm: rank 1 (host1) could not reach the job's rendezvous at 127.0.0.1:{port} "
                                   "in ")
    assert "the rank or torchrun agent that serves it (rank 0, or node 0's agent) has not started" in str(e.value)


def launch(launcher: str, rank: int) -> Launch:
    return Launch(launcher=launcher, rank=rank, world_size=2, local_rank=0, local_world_size=1, node_rank=rank,
                  n_nodes=2, master_addr="10.0.0.1", master_port=29500, host=f"node{rank}")


@pytest.mark.parametrize("launcher, env, serves, why_not", [
    ("slurm", {}, True, ""),
    ("torchrun", {"TORCHELASTIC_MAX_RESTARTS": "0"}, True, ""),
    # torchrun's agent of node 0 serves the store (torch's _create_c10d_store reads the same variable)
    ("torchrun", {"TORCHELASTIC_USE_AGENT_STORE": "True"}, False, ""),
    # with restarts the agent's store outlives a round of workers: torch's own rendezvous alone
    ("torchrun", {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_MAX_RESTARTS": "3"}, False,
     "torchrun restarts its workers (TORCHELASTIC_MAX_RESTARTS=3)"),
])
def test_who_serves_the_meeting_and_where_the_ranks_do_not_meet(launcher: str, env: dict[str, str], serves: bool,
                                                                 why_not: str) -> None:
    m = Meeting.of(launch(launcher, 0), 120.0, env)
    assert (m.serves, m.prefix, m.address, m.me) == (serves, "gpucomm/arrival/", "10.0.0.1:29500", "node0")
    assert not Meeting.of(launch(launcher, 1), 120.0, env).serves
    assert Meeting.from_json(m.to_json()) == m
    assert Meeting.why_not(launch(launcher, 0), env) == why_not


RANK = '''
import os, signal, sys
from pytest_gpucomm.plugin.launched import supervise as s
from pytest_gpucomm.plugin.launched.arrival import Meeting

s.supervise(2, True)
assert s.supervisor_pid() == os.getppid(), s.why_unsupervised()
s.meeting(Meeting("127.0.0.1", int(sys.argv[1]), 1, 2, "hostB", False, 30.0, "gpucomm/arrival/0/").to_json())
END
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (fork)")
@pytest.mark.parametrize("end, told", [
    ("import faulthandler; faulthandler.disable(); os.kill(os.getpid(), signal.SIGKILL)",
     "gone\t1\thostB\tkilled by SIGKILL"),
    # it came to join, then died before it joined: the others wait for it at the meeting
    ("s.arrived(); import faulthandler; faulthandler.disable(); os.kill(os.getpid(), signal.SIGKILL)",
     "gone\t1\thostB\tkilled by SIGKILL"),
    ("s.departed(); os._exit(3)", None),  # it told the others itself: the parent says nothing
])
def test_the_supervisor_tells_the_others_when_its_rank_ends_before_the_meeting(store: Any, end: str,
                                                                            told: str | None) -> None:
    p = subprocess.run([sys.executable, "-c", RANK.replace("END", end), str(store.port)], env=clean_env(),
                       capture_output=True, text=True, timeout=LIMIT_S)
    assert p.returncode in (-9, 3), p.stderr
    key = PREFIX + "rank/1"
    assert (store.get(key).decode() if store.check([key]) else None) == told


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (fork)")
def test_a_supervisor_that_serves_the_meeting_for_its_dead_rank_0_ends_at_sigterm() -> None:
    """Rank 0 dies before the meeting: its parent serves the store for the others, up to the meeting's
    timeout; a SIGTERM (the launcher ending the job) ends that wait at once."""
    import os
    import signal

    port = free_port()
    script = (RANK.replace("1, 2, \"hostB\", False, 30.0", "0, 2, \"hostA\", True, 60.0")
              .replace("END", "import faulthandler; faulthandler.disable(); os.kill(os.getpid(), signal.SIGKILL)"))
    p = subprocess.Popen([sys.executable, "-c", script, str(port)], env=clean_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        client = meeting(1, 2, port, timeout_s=30).connect()  # served by the parent
        deadline = time.monotonic() + LIMIT_S
        while not client.check(["gpucomm/arrival/0/rank/0"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("gpucomm/arrival/0/rank/0").decode() == "gone\t0\thostA\tkilled by SIGKILL"
        start = time.monotonic()
        os.kill(p.pid, signal.SIGTERM)
        _, err = p.communicate(timeout=LIMIT_S)
        assert time.monotonic() - start < 5 and p.returncode == -signal.SIGTERM, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
