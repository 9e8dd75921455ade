"""A rank's supervising parent: how the other ranks of a launched job learn that a rank died, and of what.

How a process ended -- the signal that killed it, or its exit code -- is seen only by its parent, and the
parent of a rank is its launcher (torchrun's agent, slurmstepd, orted or Hydra's proxy), which tells the
other nodes nothing.  So in launched mode pytest forks once, in ``pytest_cmdline_main`` (:func:`supervise`,
before the session starts, before the plugin imports torch or opens a GPU): the child runs the session as
the rank, and the parent -- the process the launcher started and watches -- only waits for it.  Once the
child has joined the job it tells the parent where the job's store is (:func:`joined`), and when it leaves
the job at the session's end it says so (:func:`left`).  If the child ends in between -- killed by a signal,
SIGKILL included, or exiting on its own -- the parent writes how into the job's store and wakes every rank
(:func:`~.deaths.announce`): the others say ``rank 3 (hostB, cuda:1) died: killed by SIGKILL`` at once,
instead of waiting out their deadline to say it "did not finish".  A child that ends before it came to the
ranks' meeting (:mod:`.arrival`; where to meet is the first thing it tells the parent, :func:`meeting`), or
came there but had not joined yet, is announced there instead: ``rank 3 (hostB) ended before it joined the
job: killed by SIGKILL``.  Then the parent ends as its child did (the same signal, no core file of its own,
or the same exit code), so the launcher sees what it would have seen without it.

Signals: the parent passes on to the child SIGTERM and SIGHUP, which launchers and schedulers send to end a
rank (the child, in the same process group, usually gets them from the same ``killpg`` too: the plugin's
SIGTERM handler takes two within a second as one, :mod:`..sigterm`); it ignores the other signals that would
end it (SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM), which terminals and launchers send to the
process group, so the child gets them.  The child dies with the parent (``PR_SET_PDEATHSIG``): a parent
killed by SIGKILL takes the child along, and then the ranks on the same host find its process gone
(:mod:`.deaths`).

Designs weighed: a handler in the rank itself (for SIGTERM, SIGABRT, SIGSEGV) sees nothing of SIGKILL (the
OOM killer, a scheduler's ``kill -9``) and runs, for a Python handler, only between bytecodes -- not while
the rank is blocked in a collective or a store wait; the ranks on one host checking whether a missing rank's
process exists learn that it is gone, not of what, and only on that host (kept as the fallback,
:mod:`.deaths`); the launcher's own report (torchrun's failure table) comes on that node only, after the
job.  The parent sees every end, at the cost of one fork per rank (copy-on-write: the parent keeps the
pages of pytest as it was before the session, tens of MB) and, on a death only, of importing torch in the
parent to reach the store (a second or two).

A hung child is ended by the parent too, where nothing in the child could end it: from the session's start
(:func:`deadline`, sent with the job's timeout) the child must come to the meeting within
``--gpucomm-timeout`` (at least :data:`COLLECT_MIN_S`), and, once there, join the job within the join's own
time (twice the meeting's timeout: the meeting, then torch's rendezvous); after it joined, its own watchdogs
bound every task and exchange (:mod:`.exchange`).  A child hung before (importing a test file, stuck in the
store) gets SIGABRT (pytest's faulthandler writes its Python stacks to its output; no core file), SIGKILL
:data:`ABORT_S` later if it is still there, and the others are told at the meeting that it ended hung, with
where and how long: ``rank 1 (hostB) ended before it joined the job: hung: it did not come to the job's
meeting within 10 s of its session's start (--gpucomm-timeout), collecting its tests; its supervising parent
ended it (killed by SIGABRT)``.  The parent then exits with status 1.

No supervision (the fallback alone then names a dead rank, without its signal) where a fork is not safe or
not wanted: ``GPUCOMM_SUPERVISE=0``; not Linux; a second pytest session in one process (pytester's
in-process runs); a job of one rank; more than one thread running already, or a GPU driver already open in
this process (a conftest that touched CUDA: a forked child could not use it).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Optional

from ...checks import env_flag

__all__ = ["supervise", "deadline", "meeting", "arrived", "departed", "joined", "left", "supervisor_pid",
           "why_unsupervised", "describe_end"]

#: the signals the parent passes on to the child
FORWARDED = ("SIGTERM", "SIGHUP")
#: the signals the parent ignores (their default would end it): the child gets them from the process group
IGNORED = ("SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGALRM")
#: how long the parent may take to write a death into the job's store
REPORT_S = 10.0
_PR_SET_PDEATHSIG = 1
#: the least time a rank has, from its session's start, to come to the job's meeting (collecting its tests:
#: importing torch and the test files takes seconds on a loaded machine), whatever ``--gpucomm-timeout`` says
COLLECT_MIN_S = 10.0
#: after SIGABRT, how long a hung child has to end before SIGKILL
ABORT_S = 5.0


class _Child:
    """The child's side: the pipe to its parent."""

    fd: Optional[int] = None
    parent: Optional[int] = None
    why_not: str = ""  # why this rank is not supervised


def _tell(line: str) -> None:
    fd = _Child.fd
    if fd is None:
        return
    try:
        os.write(fd, (line + "\n").encode())
    except OSError:  # the parent is gone
        _Child.fd = None


def deadline(seconds: float, join_s: float, what: str) -> None:
    """From now the child must come to the meeting within ``seconds`` (else it is hung ``what``, say
    "collecting its tests (--gpucomm-timeout)"), and once there, join the job within ``join_s``: the parent
    ends it otherwise."""
    _tell(f"W\t{seconds:g}\t{join_s:g}\t{' '.join(what.split())}")


def meeting(text: str) -> None:
    """Where the child meets the other ranks before it joins (an :class:`.arrival.Meeting` as JSON): should
    it end before it comes there, the parent tells them (:func:`.arrival.depart`)."""
    _tell("M\t" + text)


def arrived() -> None:
    """The child comes to the meeting to join: should it end before it joined, the parent still tells the
    others (they may wait for it there)."""
    _tell("A")


def departed() -> None:
    """The child told the others itself that it ends without joining, or learned at the meeting that the job
    cannot start: the parent has nothing to tell them."""
    _tell("D")


def joined(host: str, port: int, namespace: str, rank: int, world_size: int) -> None:
    """The child joined the job: where its store is (a TCPStore at ``host:port``), the job's key prefix."""
    _tell("J\t" + json.dumps({"host": host, "port": port, "ns": namespace, "rank": rank, "world": world_size}))


def left() -> None:
    """The child leaves the job (the session's end, or its watchdog ending it): its end is no death."""
    _tell("L")


def supervisor_pid() -> Optional[int]:
    """The supervising parent's pid in a supervised rank, else None."""
    return _Child.parent if _Child.fd is not None else None


def why_unsupervised() -> str:
    """Why this rank has no supervising parent ("" when it has one or is no rank)."""
    return _Child.why_not


def _cannot(world_size: int, first: bool) -> str:
    """Why this process must not fork a supervising parent, or ""."""
    raw = os.environ.get("GPUCOMM_SUPERVISE", "").strip().lower()
    if not env_flag("GPUCOMM_SUPERVISE", True):  # checks.flag's words; a bad one refused at start_rank
        return f"GPUCOMM_SUPERVISE={raw}"
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return "not Linux"
    if not first:
        return "not the first pytest session of this process"
    if world_size < 2:
        return "a job of one rank"
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return "a pytest-xdist worker"
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = threading.active_count()
    if threads > 1:
        return f"{threads} threads running before the session (a fork would copy one)"
    gpu = _open_gpu_device()
    if gpu:
        return f"a GPU device ({gpu}) already open in this process"
    return ""


def _open_gpu_device() -> str:
    """A GPU device file this process has open (a driver initialised before the fork), or ""."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return ""
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri/")):
            return target
    return ""


def supervise(world_size: int, first: bool) -> None:
    """In a rank of a launched job: fork; the child returns (and runs the session), the parent supervises it
    and never returns.  Does nothing, saying why in :func:`why_unsupervised`, where a fork is not safe;
    ``first``: this is the first pytest session of this process."""
    why = _cannot(world_size, first)
    if why:
        _Child.why_not = why if first and world_size > 1 else ""  # worth saying in a job's first session
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    # the signals the parent handles are held from before the fork until its handlers are in place: one sent
    # to it in between (a launcher's SIGTERM under load) reaches its handler, not the default that ends it
    held = {getattr(signal, name) for name in (*FORWARDED, *IGNORED)}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    pid = os.fork()
    if pid == 0:  # the child: the rank
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        os.close(read_fd)
        _die_with(parent)
        _Child.fd, _Child.parent = write_fd, parent
        return
    os.close(write_fd)
    code = 70  # EX_SOFTWARE, if the parent itself fails
    try:
        code = _Parent(pid, read_fd).run(before)
    finally:
        os._exit(code)


def _die_with(parent: int) -> None:
    """The child gets SIGKILL when its parent ends (Linux's PR_SET_PDEATHSIG), so that no rank is left behind
    by a supervisor killed with SIGKILL."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except Exception:  # pragma: no cover - no prctl: the launcher's own kill still reaches the group
        pass
    if os.getppid() != parent:  # the parent ended before the call
        os._exit(1)


def describe_end(status: int, sent: list[int]) -> str:
    """How a process ended, from its wait status: ``killed by SIGKILL``, ``exit code 7``, with the signals it
    was sent (``exit code 2, after it was sent SIGTERM``)."""
    from ...ranks.report import describe_returncode

    code = os.waitstatus_to_exitcode(status)
    text = describe_returncode(code)
    if code < 0 and os.WCOREDUMP(status):
        text += " (core dumped)"
    others = [_name(s) for s in dict.fromkeys(sent) if s != -code]
    if others:
        text += f", after it was sent {' and '.join(others)}"
    return text


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _Parent:
    """The supervising parent: waits for the child, reads its messages, reports its death, ends as it did."""

    def __init__(self, child: int, read_fd: int) -> None:
        self.child = child
        self.fd: Optional[int] = read_fd
        self.buffer = b""
        self.job: Optional[dict[str, Any]] = None  # where the child joined, until it left
        self.meeting: Optional[str] = None  # where the child meets the others, until it joined or departed
        self.came = False  # the child came to the meeting (its session's, not a later one's)
        self.sent: list[int] = []
        #: (when, why): the child is hung if it has not come to the meeting, or joined, by ``when``
        self.due: Optional[tuple[float, str]] = None
        self.join_s = 0.0
        self.hung = ""  # why the parent ended the child as hung

    def _forward(self, signum: int, frame: Optional[FrameType]) -> None:
        self.sent.append(signum)
        try:
            os.kill(self.child, signum)
        except OSError:
            pass

    def run(self, mask: Any = ()) -> int:
        """Supervise; ``mask``: the signal mask to restore once the handlers are in place."""
        for name in FORWARDED:
            signal.signal(getattr(signal, name), self._forward)
        for name in IGNORED:
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        status = self._wait()
        self._drain()
        how = describe_end(status, self.sent)
        if self.hung:
            how = f"{self.hung}; its supervising parent ended it ({how})"
        if self.job is not None:
            self._report(how)
        elif self.meeting is not None:  # it ended before it joined: the others would wait for it at the meeting
            self._depart(how)
        return 1 if self.hung else self._mirror(status)

    def _wait(self) -> int:
        while True:
            if self.fd is not None:
                ready, _, _ = select.select([self.fd], [], [], 0.5)
                if ready:
                    self._read()
            if self.due is not None and time.monotonic() >= self.due[0] and not self.hung:
                self._end_hung(self.due[1])
            pid, status = os.waitpid(self.child, os.WNOHANG if self.fd is not None or self.due is not None else 0)
            if pid:
                return status
            if self.fd is None and self.due is not None:
                time.sleep(0.2)

    def _end_hung(self, why: str) -> None:
        """The child is hung, ``why``: SIGABRT (its Python stacks from pytest's faulthandler, no core file),
        SIGKILL :data:`ABORT_S` later if it has not ended; say so on this process's stderr (the launcher's)."""
        self.hung, self.due = why, None
        try:
            os.write(2, f"gpucomm: this rank is {why}; its supervising parent (pid {os.getpid()}) ends it "
                        f"(SIGABRT: its Python stacks in its output)\n".encode(errors="replace"))
        except OSError:
            pass
        try:
            import resource

            resource.prlimit(self.child, resource.RLIMIT_CORE, (0, 0))
        except (ImportError, AttributeError, ValueError, OSError):
            pass
        try:
            os.kill(self.child, signal.SIGABRT)
            end = time.monotonic() + ABORT_S
            while time.monotonic() < end:
                if os.waitid(os.P_PID, self.child, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return  # ended (reaped by the caller)
                time.sleep(0.1)
            os.kill(self.child, signal.SIGKILL)
        except OSError:
            pass

    def _read(self) -> None:
        assert self.fd is not None
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            data = b""
        if not data:  # every writer closed: only the exit is left to wait for
            os.close(self.fd)
            self.fd = None
            return
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            kind, _, rest = line.decode(errors="replace").partition("\t")
            if kind == "J":
                self.due = None  # joined: its own watchdogs bound it from here
                try:
                    self.job, self.came, self.meeting = json.loads(rest), True, None
                except ValueError:
                    self.job = None
            elif kind == "L":
                self.job, self.due = None, None
            elif kind == "W" and not self.came:
                seconds, join_s, what = (rest.split("\t", 2) + ["", ""])[:3]
                try:
                    wait_s, self.join_s = max(float(seconds), COLLECT_MIN_S), float(join_s)
                except ValueError:
                    continue
                self.due = (time.monotonic() + wait_s,
                            f"hung: it did not come to the job's meeting within {wait_s:g} s of its session's start, "
                            f"{what}")
            elif kind == "M" and not self.came:  # a later session's (pytester's, in a test) is not the rank's
                self.meeting = rest
            elif kind == "A":
                self.came = True
                if self.due is not None:
                    self.due = (time.monotonic() + self.join_s,
                                f"hung: it came to the job's meeting but did not join the job within {self.join_s:g} s")
            elif kind == "D":
                self.meeting, self.came, self.due = None, True, None

    def _drain(self) -> None:
        """What the child wrote just before it ended."""
        while self.fd is not None and select.select([self.fd], [], [], 0)[0]:
            self._read()

    def _report(self, how: str) -> None:
        """Write ``how`` the child ended into the job's store, and wake every rank."""
        job = self.job
        assert job is not None
        try:
            import datetime

            import torch.distributed as dist

            from .deaths import announce

            store = dist.TCPStore(str(job["host"]), int(job["port"]), is_master=False,
                                  timeout=datetime.timedelta(seconds=REPORT_S))
            announce(dist.PrefixStore(str(job["ns"]), store), int(job["rank"]), int(job["world"]), how)
        except Exception:  # the store gone (the job over), or torch unusable here: the others time out
            pass

    def _depart(self, how: str) -> None:
        """Tell the other ranks that the child ended, ``how``, before it came to meet them (and where it
        served the rendezvous, serve it until they have all come)."""
        for name in ("SIGTERM", "SIGHUP", "SIGINT"):  # nothing to pass on now: they end the wait (and this parent)
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        try:
            from .arrival import Meeting, depart

            depart(Meeting.from_json(str(self.meeting)), how)
        except Exception:  # torch unusable here, or a meeting that does not read: the others time out
            pass

    def _mirror(self, status: int) -> int:
        """End as the child did: its signal (without a core file of this process), else its exit code."""
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                import resource

                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            except (ImportError, ValueError, OSError):
                pass
            try:
                signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            except (OSError, ValueError):
                pass
            os.kill(os.getpid(), sig)
            return 128 + sig
        return os.waitstatus_to_exitcode(status) & 0xFF
