"""A launched rank's death, learned by the others (issue 27): its supervising parent sees how it ended and
writes it into the job's store, waking every rank; where a rank has no supervisor, a rank on its machine finds
its process gone.  These start no job: a TCPStore in this process stands for the job's, and a small script
for the rank (the end-to-end runs are tests/test_launched.py's)."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from test_launched import LIMIT_S, clean_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (fork, /proc)")

NS = "gpucomm/test"

RANK = '''
import os, signal, sys, time
from pytest_gpucomm.plugin.launched import supervise as s

s.supervise(2, True)
assert s.supervisor_pid() == os.getppid(), s.why_unsupervised()
s.joined("127.0.0.1", int(sys.argv[1]), "gpucomm/test", 1, 2)
END
'''


@pytest.fixture
def store() -> Any:
    dist = pytest.importorskip("torch.distributed")
    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    yield server
    del server


def run_rank(store: Any, end: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RANK.replace("END", end), str(store.port)], env=clean_env(),
                          capture_output=True, text=True, timeout=LIMIT_S)


@pytest.mark.parametrize("end, how, code", [
    ("os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL", -signal.SIGKILL),
    ("os.kill(os.getpid(), signal.SIGSEGV)", "killed by SIGSEGV", -signal.SIGSEGV),
    ("os._exit(7)", "exit code 7", 7),
])
def test_the_supervisor_announces_how_its_rank_ended_and_ends_the_same_way(store: Any, end: str, how: str,
                                                                          code: int) -> None:
    import torch.distributed as dist

    from pytest_gpucomm.plugin.launched.deaths import dead_ranks

    p = run_rank(store, f"import faulthandler; faulthandler.disable(); {end}")
    assert p.returncode == code, p.stderr  # what the launcher sees is what the rank did
    assert dead_ranks(dist.PrefixStore(NS, store)) == {1: how}
    assert dist.PrefixStore(NS, store).get("abort/0") == b"dead 1"  # rank 0 woken


def test_a_rank_that_left_the_job_is_no_death(store: Any) -> None:
    import torch.distributed as dist

    from pytest_gpucomm.plugin.launched.deaths import dead_ranks

    p = run_rank(store, "s.left(); os._exit(3)")
    assert p.returncode == 3, p.stderr
    assert dead_ranks(dist.PrefixStore(NS, store)) == {}
    assert not dist.PrefixStore(NS, store).check(["abort/0"])


def test_the_supervisor_passes_sigterm_on_and_says_it_was_sent(store: Any, tmp_path: Path) -> None:
    import torch.distributed as dist

    from pytest_gpucomm.plugin.launched.deaths import dead_ranks

    ready = tmp_path / "ready"
    end = (f"signal.signal(signal.SIGTERM, lambda *a: os._exit(2)); open({str(ready)!r}, 'w').close(); "
           "time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", RANK.replace("END", end), str(store.port)], env=clean_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + LIMIT_S
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGTERM)  # the parent only, as `kill PID` does: it passes it on
    _, err = p.communicate(timeout=LIMIT_S)
    assert p.returncode == 2, err
    assert dead_ranks(dist.PrefixStore(NS, store)) == {1: "exit code 2, after it was sent SIGTERM"}


def test_a_rank_on_the_same_machine_announces_a_process_that_is_gone(store: Any) -> None:
    import torch.distributed as dist

    from pytest_gpucomm.plugin.launched.deaths import PeerWatch, dead_ranks, ident

    prefixed = dist.PrefixStore(NS, store)
    peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        machine, _, _ = ident()
        with open(f"/proc/{peer.pid}/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        watch = PeerWatch(0, [ident(), (machine, peer.pid, start), ("another machine", peer.pid, start)],
                          lambda: prefixed.clone())
        assert set(watch.peers) == {1}  # a rank of another machine (or pid namespace) is not watched
        time.sleep(1.5)
        assert dead_ranks(prefixed) == {}  # alive
        peer.kill()
        peer.wait()
        deadline = time.monotonic() + 10
        while not dead_ranks(prefixed) and time.monotonic() < deadline:
            time.sleep(0.1)
        watch.stop()
    finally:
        if peer.poll() is None:
            peer.kill()
    assert dead_ranks(prefixed) == {1: f"its process (pid {peer.pid}, on this machine) is gone; how it ended is its "
                                       "launcher's to tell"}
    assert prefixed.get("abort/0") == b"dead 1" and prefixed.get("abort/2") == b"dead 1"


def test_the_first_news_of_a_death_is_kept() -> None:
    dist = pytest.importorskip("torch.distributed")
    from pytest_gpucomm.plugin.launched.deaths import announce, dead_ranks

    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    prefixed = dist.PrefixStore(NS, server)
    announce(prefixed, 3, 4, "killed by SIGKILL")
    announce(prefixed, 3, 4, "its process is gone")
    announce(prefixed, 2, 4, "exit code 2, after it was sent SIGTERM")
    assert dead_ranks(prefixed) == {3: "killed by SIGKILL", 2: "exit code 2, after it was sent SIGTERM"}
    assert list(dead_ranks(prefixed)) == [3, 2]  # first death first


def test_describe_end() -> None:
    from pytest_gpucomm.plugin.launched.supervise import describe_end

    assert describe_end(signal.SIGKILL, []) == "killed by SIGKILL"
    assert describe_end(signal.SIGKILL, [signal.SIGTERM]) == "killed by SIGKILL, after it was sent SIGTERM"
    assert describe_end(signal.SIGTERM, [signal.SIGTERM]) == "killed by SIGTERM"
    assert describe_end(3 << 8, []) == "exit code 3"
