"""A rank process on the controller's side: its bookkeeping (:class:`RankProcess`; :class:`ForkedProc`, the
``Popen`` of a worker a zygote forked), its stacks on demand (:func:`dump_stacks`: SIGUSR1 and the
faulthandler dump it writes to ``rank<N>.stacks``), and its end: :func:`kill_ranks` kills a worker's whole
process group whenever it is stopped, gracefully exited or crashed (so whatever a task left running goes too),
and first, while it runs, every descendant that left that group (:mod:`.reaper`), before reaping it;
:func:`release_ranks` does so with SIGINT and SIGTERM held back and closes its handles.  :mod:`.spawn` starts them.
Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterator, Sequence, cast

from pytest_gpucomm.ranks.reaper import kill_descendants

if TYPE_CHECKING:
    from pytest_gpucomm.ranks.spawn import Zygote

__all__ = ["LOG_TAIL_LINES", "LOG_TAIL_BYTES", "RankProcess", "ForkedProc", "dump_stacks", "kill_ranks",
           "release_ranks"]

LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 8192


def _tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """Last ``lines`` lines (at most ``max_bytes``) of a text file; '' if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


@dataclass(eq=False)
class RankProcess:
    """Controller-side bookkeeping for one rank process."""

    rank: int
    proc: "subprocess.Popen | ForkedProc"
    log_path: Path
    stack_path: Path
    log_file: IO[bytes]
    conn: Connection | None = field(default=None)
    #: something else reaped the process (e.g. SIGCHLD ignored): its pid may belong to another process now
    reaped_elsewhere: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> bool:
        """True once the process has exited; does **not** reap it (see :func:`kill_ranks`).

        An exited worker stays a zombie until :func:`kill_ranks` reaps it, so its pid --
        which is also its process group id -- cannot be reused by another process before
        its group has been killed.
        """
        if self.proc.returncode is not None:
            return True
        if isinstance(self.proc, ForkedProc):
            return self.proc.exited_unreaped()
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped behind Popen's back; nothing left to wait for
            self.reaped_elsewhere = True
            return True
        except OSError:  # pragma: no cover - EINTR is retried by Python; anything else
            return self.proc.poll() is not None
        return info is not None

    def wait_exited(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the process to exit, without reaping it."""
        deadline = time.monotonic() + timeout_s
        delay = 0.005
        while not self.exited():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)
        return True

    def output_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the rank's captured stdout/stderr ('' if unreadable)."""
        return _tail(self.log_path, lines=lines)


class ForkedProc:
    """The ``subprocess.Popen`` of a worker that :class:`Zygote` forked (the zygote's child, not this
    process's): exit seen through a pidfd, reaped by the zygote, which keeps it a zombie until then."""

    def __init__(self, pid: int, zygote: "Zygote") -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = None
        self._zygote = zygote
        self._pidfd: int | None = os.pidfd_open(pid)

    def exited_unreaped(self) -> bool:
        if self.returncode is not None or self._pidfd is None:
            return True
        return bool(select.select([self._pidfd], [], [], 0)[0])

    def poll(self) -> int | None:
        if self.returncode is None and self.exited_unreaped():
            self._reap()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if self._pidfd is not None and not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(["rank worker", str(self.pid)], timeout or 0.0)
            self._reap()
        return cast(int, self.returncode)

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def _reap(self) -> None:
        code = self._zygote.reap(self.pid)
        # None: the zygote is gone, and its forks died with it (PR_SET_PDEATHSIG is SIGKILL)
        self.returncode = -int(signal.SIGKILL) if code is None else code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


# --------------------------------------------------------------------------- stacks, stop


def dump_stacks(processes: Sequence[RankProcess], ranks: Sequence[int],
                wait_s: float = 2.0) -> dict[int, str]:
    """SIGUSR1 the given ranks and collect the faulthandler dumps they write."""
    if not hasattr(signal, "SIGUSR1"):
        return {}
    offsets: dict[int, int] = {}
    for rank in ranks:
        p = processes[rank]
        if p.exited():
            continue
        try:
            offsets[rank] = p.stack_path.stat().st_size
            os.kill(p.pid, signal.SIGUSR1)
        except OSError:
            offsets.pop(rank, None)
    stacks: dict[int, str] = {}
    sizes: dict[int, int] = {}
    end = time.monotonic() + wait_s
    while offsets and time.monotonic() < end:
        time.sleep(0.1)
        done = True
        for rank, off in offsets.items():
            try:
                size = processes[rank].stack_path.stat().st_size
            except OSError:
                continue
            # Done with a rank once its dump exists and stopped growing.
            if size <= off or sizes.get(rank) != size:
                done = False
            sizes[rank] = size
        if done:
            break
    for rank, off in offsets.items():
        try:
            with open(processes[rank].stack_path, "rb") as f:
                f.seek(off)
                stacks[rank] = f.read().decode("utf-8", errors="replace")
        except OSError:
            stacks[rank] = ""
    return stacks


def _kill_group(p: RankProcess) -> bool:
    """SIGKILL the process group led by ``p``; False if there was none to signal.

    Only called while the worker is unreaped (running or a zombie): its pid, which is the
    group's id (workers are started with ``start_new_session=True``), cannot have been
    reused, so the signal reaches the worker's group and nothing else.
    """
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    except OSError:  # pragma: no cover - anything else: the same as no group
        return False
    return True


def kill_ranks(processes: Sequence[RankProcess], wait_s: float = 10.0) -> None:
    """SIGKILL every rank process and its whole process group, then reap it.

    Whatever a task started on a rank (child processes left running) is in that rank's
    process group and is killed with it, whether the rank was still running, exited
    gracefully or crashed. Order, per rank: kill the group if the rank still runs; wait
    (up to ``wait_s``) for the rank to exit *without reaping it* (``waitid`` with
    ``WNOWAIT``); kill the group again while the rank is a zombie (its pid, the group id,
    is still taken, so no other process can own it; this catches children forked in the
    meantime and those of a rank that had already exited); only then reap the rank.
    Children that left the group themselves (``setsid``, ``setpgid``) are still the running worker's
    descendants (it is their subreaper on Linux, :mod:`.reaper`): they are killed before it is; a worker
    that exits ends them itself, one that died abruptly left them to init.
    ``wait_s`` is per rank: a GPU rank killed in the middle of a driver call can take many seconds to
    exit.  A rank reaped by someone else (its pid may be another process's now) is not signalled again.
    """
    for p in processes:
        if not p.exited():
            kill_descendants(p.pid)  # what left its group but not its tree (the worker is their subreaper)
        if not p.exited() and not _kill_group(p):
            try:
                p.proc.kill()
            except OSError:
                pass
    for p in processes:
        if p.proc.returncode is not None or p.reaped_elsewhere:
            continue  # already reaped: its pid may be reused, leave its group id alone
        if not p.wait_exited(wait_s):  # pragma: no cover
            continue  # unkillable (D state): reaping it would block
        if p.reaped_elsewhere:
            continue
        _kill_group(p)
        try:
            p.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:  # pragma: no cover - exited, so cannot happen
            pass


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs (in the main thread, where Python runs signal
    handlers): a handler that raises (Ctrl-C, gpucomm's SIGTERM) would stop the block half-way.  A signal
    that arrived meanwhile is handled after the block, by the handler that was in place."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        for signum in pending:
            handler = previous[signal.Signals(signum)]
            if callable(handler):
                handler(signum, None)
            elif handler in (signal.SIG_DFL, None):
                os.kill(os.getpid(), signum)


def release_ranks(processes: Sequence[RankProcess], wait_s: float = 10.0) -> None:
    """Kill and reap every rank process, close its connection, stdin and log file.

    In the main thread, SIGINT and SIGTERM are held back meanwhile (and delivered after): an interrupt
    in the middle would leave ranks unkilled and unreaped."""
    with _signals_held():
        kill_ranks(processes, wait_s)
        _close_handles(processes)


def _close_handles(processes: Sequence[RankProcess]) -> None:
    for p in processes:
        if p.conn is not None:
            try:
                p.conn.close()
            except OSError:
                pass
            p.conn = None
        if p.proc.stdin is not None:
            try:
                p.proc.stdin.close()
            except OSError:
                pass
        try:
            p.log_file.close()
        except OSError:
            pass

