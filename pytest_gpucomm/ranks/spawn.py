"""Starting the rank processes of a pool.

:func:`start_ranks` spawns one ``python -m pytest_gpucomm.ranks.worker`` per rank (or has the session's
:class:`Zygote` fork it, torch imported once) and waits until every rank has initialised its process group:

* the control channel is a TCP listener on 127.0.0.1; each worker connects to it and both
  sides authenticate with a fresh random key that the worker reads from its stdin (never
  from its command line), then the worker says :class:`~.protocol.Hello`;
* the rendezvous store's socket is bound here, on 127.0.0.1, and its file descriptor is
  handed to rank 0, which serves the store on it (no free-port race, no bind to every
  interface);
* every rank reports :class:`~.protocol.Ready` or :class:`~.protocol.InitError`; when a rank
  fails (or exits), the others get :data:`START_FAILURE_GRACE_S` to report too, then
  everything is killed and :class:`~.errors.RankStartError` says what each failed rank
  said and printed.

Workers run in their own process group; :func:`~.processes.kill_ranks` kills that group whenever a
worker is stopped, gracefully exited or crashed (so whatever a task left running goes too),
before reaping the worker (a rank process's bookkeeping, stacks and end are :mod:`.processes`'). Workers die
with the controller (``PR_SET_PDEATHSIG``, set by the worker) and write a faulthandler dump of their
stacks to ``rank<N>.stacks`` on SIGUSR1 (:func:`~.processes.dump_stacks`); their stdout/stderr go to
``rank<N>.log``.  Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge, wait
from pathlib import Path
from typing import IO, Any, Mapping, Sequence, cast

from pytest_gpucomm.ranks import report
from pytest_gpucomm.ranks.errors import RankStartError
from pytest_gpucomm.ranks.processes import ForkedProc, RankProcess, dump_stacks, kill_ranks, release_ranks
from pytest_gpucomm.ranks.protocol import Hello, InitError, Ready
from pytest_gpucomm.vocab import RANK_START_TIMEOUT_S

__all__ = [
    "Zygote",
    "StartedRanks",
    "rank_start",
    "start_ranks",
    "controller_sys_path",
    "loopback_listener",
    "accept_authenticated",
    "POLL_INTERVAL_S",
    "START_FAILURE_GRACE_S",
    "RANK_START_ENV",
    "RANK_START_CHOICES",
]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
POLL_INTERVAL_S = 0.2
START_FAILURE_GRACE_S = 3.0  # after one rank failed to start, time for the others to report
#: how a session's rank workers start: ``fork`` from the session's :class:`Zygote` (torch imported once), or
#: ``exec``, each a new ``python -m pytest_gpucomm.ranks.worker``
RANK_START_ENV = "GPUCOMM_RANK_START"
RANK_START_CHOICES = ("fork", "exec")


def rank_start(environ: Mapping[str, str] = os.environ) -> str:
    """``GPUCOMM_RANK_START`` (default ``fork``); ValueError naming a value that is neither choice."""
    raw = environ.get(RANK_START_ENV, "")
    value = raw.strip().lower() or "fork"
    if value not in RANK_START_CHOICES:
        raise ValueError(f"invalid {RANK_START_ENV} {raw!r} (from the environment): expected fork or exec")
    return value


def controller_sys_path() -> list[str]:
    """This process's sys.path with '' resolved, the package root first."""
    out: list[str] = [_PACKAGE_ROOT]
    for entry in sys.path:
        entry = os.path.abspath(entry) if entry else os.getcwd()
        if entry not in out:
            out.append(entry)
    return out


@dataclass
class StartedRanks:
    """What :func:`start_ranks` hands back: every rank ready, connected, ordered by rank."""

    processes: list[RankProcess]
    control_port: int
    rendezvous_port: int


# --------------------------------------------------------------------------- sockets


def loopback_listener(backlog: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1 on a free port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def accept_authenticated(listener: socket.socket, authkey: bytes) -> Connection | None:
    """Accept one connection and run the mutual authkey challenge; None if either fails."""
    try:
        sock, _ = listener.accept()
    except OSError:
        return None
    conn: Connection | None = None
    try:
        sock.setblocking(True)  # Connection does plain blocking reads on the fd
        conn = Connection(sock.detach())
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
    except Exception:
        if conn is not None:
            conn.close()
        else:
            sock.close()
        return None
    return conn


# --------------------------------------------------------------------------- start


def _worker_env(env: Mapping[str, "str | None"], backend: str) -> dict[str, str]:
    """The workers' environment: this process's, with ``env`` on top (a name mapped to None is unset)."""
    out = dict(os.environ)
    for k, v in env.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    path = os.pathsep.join(controller_sys_path())
    user_path = env.get("PYTHONPATH")
    out["PYTHONPATH"] = path + (os.pathsep + user_path if user_path else "")
    out["PYTHONUNBUFFERED"] = "1"
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in out:
        # Single-node pool: keep gloo's pair sockets on loopback too
        # (its default follows the hostname, which may not resolve usefully).
        out["GLOO_SOCKET_IFNAME"] = "lo"
    return out


def start_ranks(
    world_size: int,
    backend: str,
    device: str,
    *,
    start_timeout_s: float,
    env: Mapping[str, "str | None"],
    log_dir: Path,
    label: str = "",
    zygote: "Zygote | None" = None,
) -> StartedRanks:
    """Spawn ``world_size`` workers and wait until each has its process group ready.

    Args:
        world_size, backend, device: of the process group (rank *r* uses GPU *r* on cuda).
        start_timeout_s: how long every rank gets to get ready; also the process group's
            own timeout.
        env: environment overrides for the workers, on top of ``os.environ``.
        log_dir: where ``rank<N>.log`` and ``rank<N>.stacks`` go.
        label: what the pool is started for, named in the failure message.
        zygote: forks the workers where it runs with the workers' environment (:meth:`Zygote.fork`); else,
            or where it cannot, each worker is a new process.

    Raises:
        RankStartError: a rank failed or did not get ready in time; every worker has been
            killed and reaped.
    """
    authkey = secrets.token_bytes(32)
    processes: list[RankProcess] = []
    listener = loopback_listener(world_size)
    try:
        control_port = listener.getsockname()[1]
        # Rendezvous socket: bound here on loopback, served by rank 0 (fd passed down).
        rdzv = loopback_listener(max(128, world_size))
        rendezvous_port = rdzv.getsockname()[1]
        try:
            worker_env = _worker_env(env, backend)
            for rank in range(world_size):
                cmd = [
                    sys.executable, "-m", "pytest_gpucomm.ranks.worker",
                    "--rank", str(rank),
                    "--world-size", str(world_size),
                    "--local-rank", str(rank),
                    "--backend", backend,
                    "--device", device,
                    "--control-port", str(control_port),
                    "--rendezvous-port", str(rendezvous_port),
                    *(["--rendezvous-fd", str(rdzv.fileno())] if rank == 0 else []),
                    "--stack-file", str(log_dir / f"rank{rank}.stacks"),
                    "--init-timeout", str(start_timeout_s),
                    "--parent-pid", str(os.getpid()),
                ]
                fds = (rdzv.fileno(),) if rank == 0 else ()
                forked = zygote.fork(rank, cmd, worker_env, log_dir, authkey, fds) if zygote is not None else None
                processes.append(forked or _spawn(rank, cmd, worker_env, log_dir, authkey, pass_fds=fds))
        finally:
            rdzv.close()  # rank 0 has its own copy; only it keeps the port open
        handshake = _Handshake(processes, listener, authkey, world_size=world_size,
                               backend=backend, device=device, label=label)
        handshake.await_ready(start_timeout_s)
    except BaseException:
        release_ranks(processes)
        raise
    finally:
        listener.close()  # only the handshaken connections matter now
    return StartedRanks(processes, control_port, rendezvous_port)


def _rank_files(rank: int, log_dir: Path) -> tuple[Path, Path, IO[bytes]]:
    """A worker's log path, its (emptied) stacks file and the log opened for its output."""
    log_path = log_dir / f"rank{rank}.log"
    stack_path = log_dir / f"rank{rank}.stacks"
    stack_path.write_bytes(b"")
    return log_path, stack_path, open(log_path, "wb")


def _spawn(rank: int, cmd: list[str], env: dict[str, str], log_dir: Path, authkey: bytes,
           pass_fds: Sequence[int]) -> RankProcess:
    log_path, stack_path, log_file = _rank_files(rank, log_dir)
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT,
            env=env, start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds),
        )
    except BaseException:
        log_file.close()
        raise
    try:
        if proc.stdin is None:  # pragma: no cover - stdin=PIPE always sets it
            raise OSError("no stdin pipe")
        proc.stdin.write(authkey.hex().encode() + b"\n")
        proc.stdin.close()
    except OSError:
        pass  # died at once; the handshake reports it
    return RankProcess(rank, proc, log_path, stack_path, log_file)


#: variables that may differ between the zygote's environment and a fork's, set in the fork: pytest's name of
#: the running test (read by nothing at import), and the controller's sys.path (which grows as pytest imports
#: test folders; the fork puts it in front of its own, as every task does)
_PER_FORK = frozenset({"PYTEST_CURRENT_TEST", "PYTHONPATH"})


def _fixed(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _PER_FORK}


class Zygote:
    """A process that imports torch once and forks rank workers (:mod:`.zygote`), for the pools of one session.

    It is started (:meth:`launch`, else at the first :meth:`fork`) with the workers' environment
    ``_worker_env(env, backend)``, and forks only for a start whose environment is that one but for
    ``PYTEST_CURRENT_TEST`` and ``PYTHONPATH``: torch and its libraries read some of the environment at
    import, in the zygote.  Where it cannot be started (no ``os.fork`` or ``os.pidfd_open``, imports that
    fail, no answer within ``start_timeout_s``), :meth:`fork` returns None and the workers are new
    processes, as without it; :attr:`failed` says why.  :meth:`close` ends it, and with it any worker it forked:
    close it after the pools it served."""

    def __init__(self, env: Mapping[str, str], backend: str, start_timeout_s: float = RANK_START_TIMEOUT_S) -> None:
        self.env = _worker_env(env, backend)
        self.start_timeout_s = start_timeout_s
        self.failed: str | None = None if hasattr(os, "fork") and hasattr(os, "pidfd_open") else (
            "this platform has no os.fork or os.pidfd_open")
        self.forks = 0
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._sock: socket.socket | None = None
        self._log: IO[bytes] | None = None
        self._ready = False
        self._started_at = 0.0

    def __repr__(self) -> str:
        state = f"failed: {self.failed}" if self.failed else ("running" if self._proc is not None else "not started")
        return f"Zygote({state}, {self.forks} forks)"

    def fork(self, rank: int, cmd: Sequence[str], env: Mapping[str, str], log_dir: Path, authkey: bytes,
             pass_fds: Sequence[int]) -> RankProcess | None:
        """The worker of ``cmd`` (a ``python -m pytest_gpucomm.ranks.worker`` command line) forked, or None where
        the zygote cannot fork it (another environment, or no zygote: see :attr:`failed`)."""
        if _fixed(env) != _fixed(self.env):
            return None
        with self._lock:
            if not self._running():
                return None
            log_path, stack_path, log_file = _rank_files(rank, log_dir)
            argv = list(cmd[cmd.index("pytest_gpucomm.ranks.worker") + 1:])
            try:
                reply = self._ask(("spawn", argv, dict(env), str(log_path), authkey, bool(pass_fds)), pass_fds)
                if reply[0] != "pid":
                    raise OSError(str(reply[1]))
                proc = ForkedProc(int(reply[1]), self)
            except (OSError, EOFError) as e:
                log_file.close()
                self._give_up(f"a fork failed: {e}")
                return None
        self.forks += 1
        return RankProcess(rank, proc, log_path, stack_path, log_file)

    def reap(self, pid: int) -> int | None:
        """Reap the zygote's child ``pid`` (which has exited) and return its ``Popen.returncode``; None when the
        zygote is gone."""
        with self._lock:
            if self._conn is None:
                return None
            try:
                reply = self._ask(("reap", pid), ())
            except (OSError, EOFError):
                return None
        return reply[1] if reply[0] == "status" else None

    def close(self) -> None:
        """End the zygote (closing its socket ends its loop; SIGKILL after 5 s) and reap it."""
        with self._lock:
            self._close()

    def launch(self) -> None:
        """Start the zygote's process now, without waiting for its imports (the first :meth:`fork` waits), so
        that they overlap with other work; ``benchmarks/rank_start.py`` times the zygote's start this way.  A
        session does not call it: its zygote starts at its first pool's start."""
        with self._lock:
            if not self.failed and self._proc is None:
                self._launch()

    # -- inside the lock -----------------------------------------------------------------------------------

    def _running(self) -> bool:
        if self.failed:
            return False
        if self._proc is None:
            self._launch()
        if self._proc is not None and not self._ready:
            self._await_ready()
        return self._proc is not None and self._proc.poll() is None

    def _launch(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._log = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pytest_gpucomm.ranks.zygote", "--fd", str(theirs.fileno()),
                 "--parent-pid", str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True, close_fds=True, pass_fds=(theirs.fileno(),))
        except OSError as e:
            ours.close()
            self._give_up(f"it did not start: {e}")
            return
        finally:
            theirs.close()
        self._sock, self._conn = ours, Connection(os.dup(ours.fileno()))
        self._started_at = time.monotonic()

    def _await_ready(self) -> None:
        assert self._conn is not None
        if not self._conn.poll(max(0.0, self._started_at + self.start_timeout_s - time.monotonic())):
            self._give_up(f"it was not ready within {self.start_timeout_s:g} s")
            return
        try:
            _, problem = self._conn.recv()
        except (EOFError, OSError):
            problem = "it exited during its start-up"
        if problem:
            self._give_up(str(problem).strip().splitlines()[-1])
        else:
            self._ready = True

    def _ask(self, request: tuple[Any, ...], fds: Sequence[int]) -> tuple[Any, ...]:
        assert self._conn is not None and self._sock is not None
        self._conn.send(request)
        if fds:
            socket.send_fds(self._sock, [b"f"], list(fds))
        return cast(tuple, self._conn.recv())

    def _give_up(self, why: str) -> None:
        if self._log is not None and self._proc is not None:
            with contextlib.suppress(OSError):
                self._log.seek(0)
                tail = self._log.read()[-2000:].decode("utf-8", "replace").strip()
                why += f"; its output ended: {tail.splitlines()[-1]}" if tail else ""
        self.failed = why
        self._close()

    def _close(self) -> None:
        for handle in (self._conn, self._sock):
            if handle is not None:
                handle.close()
        self._conn = self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


class _Handshake:
    """The start-up conversation: accept, authenticate, and collect Hello/Ready/InitError."""

    def __init__(self, processes: list[RankProcess], listener: socket.socket, authkey: bytes,
                 *, world_size: int, backend: str, device: str, label: str) -> None:
        self.processes = processes
        self.listener = listener
        self.authkey = authkey
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.label = label
        self.conns: list[Connection] = []  # authenticated, not closed
        self.rank_of: dict[Connection, int] = {}  # those that said Hello
        self.ready: set[int] = set()
        self.init_errors: dict[int, str] = {}

    def await_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        failure_deadline: float | None = None
        try:
            while True:
                failed = self._failed()
                if not failed and len(self.ready) == self.world_size:
                    return
                now = time.monotonic()
                if failed:
                    # Let the other ranks report too (they often fail the same way),
                    # but don't wait for ranks stuck waiting on the failed one.
                    if failure_deadline is None:
                        failure_deadline = now + START_FAILURE_GRACE_S
                    unaccounted = [p.rank for p in self.processes
                                   if p.rank not in self.ready and p.rank not in failed]
                    if not unaccounted or now >= failure_deadline:
                        self._drain(0.3)
                        raise self._failure(self._failed(), "failed during start-up")
                remaining = deadline - now
                if remaining <= 0:
                    not_ready = [p.rank for p in self.processes if p.rank not in self.ready]
                    stacks = dump_stacks(self.processes, not_ready)
                    raise self._failure(set(not_ready),
                                        f"did not become ready within {timeout_s:g} s",
                                        stacks=stacks)
                objs: list[Any] = [self.listener, *self.conns]
                for obj in wait(objs, timeout=min(POLL_INTERVAL_S, remaining)):
                    if obj is self.listener:
                        conn = accept_authenticated(self.listener, self.authkey)
                        if conn is not None:
                            self.conns.append(conn)
                    else:  # the rest of objs: self.conns
                        self._receive(cast(Connection, obj))
        finally:
            for conn in self.conns:
                if conn not in self.rank_of:
                    conn.close()

    def _failed(self) -> set[int]:
        return set(self.init_errors) | {p.rank for p in self.processes
                                        if p.exited() and p.rank not in self.ready}

    def _receive(self, conn: Connection) -> None:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            self.conns.remove(conn)
            rank = self.rank_of.pop(conn, None)
            conn.close()
            if rank is not None:
                self.processes[rank].conn = None
            return
        if isinstance(msg, Hello):
            if 0 <= msg.rank < self.world_size and self.processes[msg.rank].conn is None:
                self.rank_of[conn] = msg.rank
                self.processes[msg.rank].conn = conn
        elif isinstance(msg, Ready):
            self.ready.add(msg.rank)
        elif isinstance(msg, InitError):
            self.init_errors[msg.rank] = msg.traceback
        else:
            # a message of no class this controller knows fails the rank at once, naming the class, instead of
            # leaving it "not ready" until the start timeout: a Ready of another import of the protocol module
            # (a package that outlived a re-import of its modules) was such a message
            rank = self.rank_of.get(conn, getattr(msg, "rank", None))
            if isinstance(rank, int) and 0 <= rank < self.world_size:
                kind = type(msg)
                self.init_errors[rank] = (
                    f"rank {rank} sent a start-up message of a class this controller does not know: "
                    f"{kind.__module__}.{kind.__qualname__} (expected {Hello.__module__}.Hello, Ready or InitError; "
                    "two imports of that module in one process?)")

    def _drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while self.conns and (left := end - time.monotonic()) > 0:
            for conn in wait(list(self.conns), timeout=left):
                self._receive(cast(Connection, conn))  # wait returns the objects given: self.conns

    def _failure(self, failed: set[int], what: str,
                 stacks: Mapping[int, str] | None = None) -> RankStartError:
        kill_ranks(self.processes)
        return report.start_failure(
            what, failed=failed, ready=self.ready, world_size=self.world_size,
            backend=self.backend, device=self.device, label=self.label,
            pids={p.rank: p.pid for p in self.processes},
            returncodes={p.rank: p.proc.returncode for p in self.processes},
            init_errors=self.init_errors, stacks=stacks or {},
            tails={p.rank: p.output_tail() for p in self.processes},
        )

