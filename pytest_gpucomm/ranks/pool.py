"""Controller side: a pool of torch.distributed rank processes.

A :class:`RankPool` spawns ``world_size`` worker processes (see
:mod:`pytest_gpucomm.ranks.worker`) that form one process group, and runs
*tasks* -- ``"module:function"`` callables taking a
:class:`~pytest_gpucomm.ranks.context.RankContext` -- on every rank. The pool is
meant to be started once per world size and session and reused by every test;
after a failure that leaves the process group unusable (crash, hang, a rank
stuck after a peer raised) it is torn down and the next :meth:`RankPool.run`
starts a fresh one.

:class:`InProcessExecutor` runs the same task functions when pytest itself runs
on every rank (``torchrun -m pytest``), gathering the results with
``all_gather_object``. Both satisfy the :class:`Executor` protocol.

Only the stdlib is used here (torch is imported lazily by
:class:`InProcessExecutor`).
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from multiprocessing.connection import (
    Connection,
    answer_challenge,
    deliver_challenge,
    wait,
)
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from pytest_gpucomm.ranks.context import RankContext, load_task
from pytest_gpucomm.ranks.errors import (
    RankCrash,
    RankError,
    RankFailure,
    RankStartError,
    RankTimeout,
)

__all__ = ["Executor", "RankPool", "InProcessExecutor"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_LOG_TAIL_LINES = 40
_LOG_TAIL_BYTES = 8192
_POLL_INTERVAL = 0.2
_START_FAILURE_GRACE = 3.0  # after one rank failed to start, time for the others to report


@runtime_checkable
class Executor(Protocol):
    """Something that runs a task on every rank and returns per-rank results."""

    @property
    def world_size(self) -> int: ...

    def run(
        self, task: str, kwargs: dict[str, Any] | None = None, *, timeout: float, label: str = ""
    ) -> list[Any]: ...


# --------------------------------------------------------------------------- helpers


def _describe_returncode(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


def _tail(path: Path, lines: int = _LOG_TAIL_LINES, max_bytes: int = _LOG_TAIL_BYTES) -> str:
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


def _indent(text: str, prefix: str = "    ") -> str:
    text = text.rstrip("\n")
    if not text:
        return prefix + "<empty>"
    return "\n".join(prefix + line for line in text.splitlines())


def _controller_sys_path() -> list[str]:
    """The controller's sys.path with '' resolved, package root first."""
    out: list[str] = [_PACKAGE_ROOT]
    for entry in sys.path:
        entry = os.path.abspath(entry) if entry else os.getcwd()
        if entry not in out:
            out.append(entry)
    return out


_live_pools: "weakref.WeakSet[RankPool]" = weakref.WeakSet()


def _close_live_pools() -> None:
    for pool in list(_live_pools):
        try:
            pool.close()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            pass


atexit.register(_close_live_pools)


class _Worker:
    """Controller-side bookkeeping for one rank process."""

    def __init__(self, rank: int, proc: subprocess.Popen, log_path: Path, stack_path: Path,
                 log_file: IO[bytes]) -> None:
        self.rank = rank
        self.proc = proc
        self.log_path = log_path
        self.stack_path = stack_path
        self.log_file = log_file
        self.conn: Connection | None = None

    def exited(self) -> bool:
        return self.proc.poll() is not None


# --------------------------------------------------------------------------- RankPool


class RankPool:
    """A reusable group of ``world_size`` rank processes forming one process group.

    Args:
        world_size: number of ranks (one process each, local ranks 0..N-1).
        backend: torch.distributed backend (``"gloo"``, ``"nccl"``).
        device: ``"cpu"`` or ``"cuda"``; with ``"cuda"`` rank *r* uses GPU *r*.
        start_timeout: seconds to wait for every rank to initialise its process
            group; also the process group's own timeout.
        env: environment overrides for the workers (on top of ``os.environ``).
        error_grace: after a rank raised, seconds the other ranks get to answer
            before the pool is torn down.
        shutdown_grace: seconds :meth:`close` waits for a graceful exit before
            killing.

    The pool is started lazily by :meth:`run` (or explicitly by :meth:`start`)
    and restarted by :meth:`run` whenever it is not :attr:`alive`. Use
    :meth:`close` (or ``with RankPool(...) as pool``) to shut it down; live
    pools are also closed at interpreter exit.

    Workers get ``os.environ`` plus ``env``, ``PYTHONPATH`` built from this
    process's ``sys.path`` (the current ``sys.path`` is also sent with every
    task, so directories added later -- pytester -- work), and, for gloo,
    ``GLOO_SOCKET_IFNAME=lo`` unless set. Their stdout/stderr go to
    ``log_dir/rank<N>.log``. The rendezvous store is served by rank 0 on a
    127.0.0.1 socket, the control channel is an authenticated 127.0.0.1
    connection (authkey sent over the worker's stdin).

    Workers die with the controller (``PR_SET_PDEATHSIG``). Linux delivers that
    signal when the *thread* that spawned them exits, so start pools from a
    long-lived thread (pytest's main thread is fine). Calls are serialised by a
    lock; one task runs on the pool at a time.
    """

    def __init__(
        self,
        world_size: int,
        backend: str = "gloo",
        device: str = "cpu",
        *,
        start_timeout: float = 120.0,
        env: dict[str, str] | None = None,
        error_grace: float = 3.0,
        shutdown_grace: float = 5.0,
    ) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive int, got {world_size!r}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if start_timeout <= 0:
            raise ValueError(f"start_timeout must be > 0, got {start_timeout!r}")
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.start_timeout = float(start_timeout)
        self.env: dict[str, str] = dict(env or {})
        self.error_grace = float(error_grace)
        self.shutdown_grace = float(shutdown_grace)

        self._lock = threading.RLock()
        self._workers: list[_Worker] = []
        self._listener: socket.socket | None = None
        self._tmpdir: Path | None = None
        self._task_counter = 0
        self._start_label = ""
        self.control_port: int | None = None
        self.rendezvous_port: int | None = None
        _live_pools.add(self)

    # ------------------------------------------------------------------ public

    def __repr__(self) -> str:
        state = "alive" if self.alive else "stopped"
        return (f"RankPool(world_size={self.world_size}, backend={self.backend!r}, "
                f"device={self.device!r}, {state}, pids={self.pids})")

    def __enter__(self) -> "RankPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        """True when every rank process is running and connected."""
        return bool(self._workers) and all(
            w.conn is not None and not w.conn.closed and not w.exited() for w in self._workers
        )

    @property
    def pids(self) -> list[int]:
        """Process ids of the current rank processes, ordered by rank ([] when stopped)."""
        return [w.proc.pid for w in self._workers]

    @property
    def log_dir(self) -> Path | None:
        """Directory holding the per-rank ``rank<N>.log`` files (None before start)."""
        return self._tmpdir

    def start(self) -> None:
        """Spawn the workers and wait until every rank reports its process group ready.

        Does nothing when the pool is already alive; tears down a half-dead
        pool first.

        Raises:
            RankStartError: a rank failed or did not get ready in ``start_timeout``
                seconds; the message has each failing rank's output tail.
        """
        self._start(label="")

    def _start(self, label: str) -> None:
        with self._lock:
            if self.alive:
                return
            self._teardown()
            self._start_label = label
            try:
                self._start_once()
            except BaseException:
                self._teardown()
                raise

    def run(
        self,
        task: str,
        kwargs: dict[str, Any] | None = None,
        *,
        timeout: float,
        label: str = "",
    ) -> list[Any]:
        """Run ``task`` (``"module:function"``) on every rank; return results ordered by rank.

        Starts (or restarts) the pool first when it is not alive.

        Raises:
            RankError: the task raised on some rank (message has its traceback).
            RankTimeout: some rank did not finish within ``timeout`` seconds
                (message has the hung ranks' stacks); the pool is torn down.
            RankCrash: a rank process died; the pool is torn down.
            RankStartError: the pool could not be (re)started.
        """
        if timeout is None or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if ":" not in task:
            raise ValueError(f"task must be given as 'module:function', got {task!r}")
        label = label or task
        try:
            ForkingPickler.dumps(dict(kwargs or {}))
        except Exception as exc:
            raise TypeError(f"kwargs for task {task!r} cannot be pickled: {exc}") from exc
        with self._lock:
            try:
                if not self.alive:
                    self._start(label)
                return self._run(task, dict(kwargs or {}), float(timeout), label)
            except RankFailure:
                raise
            except BaseException:
                # KeyboardInterrupt, or an unexpected controller-side error: the
                # ranks are in an unknown state, so start over next time.
                self._teardown()
                raise

    def close(self) -> None:
        """Shut the pool down: graceful shutdown, then kill; reap every child. Idempotent."""
        with self._lock:
            for w in self._workers:
                if w.conn is not None and not w.exited():
                    try:
                        w.conn.send(("shutdown",))
                    except (OSError, ValueError):
                        pass
            deadline = time.monotonic() + self.shutdown_grace
            for w in self._workers:
                try:
                    w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            self._teardown()
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None
            _live_pools.discard(self)

    # ------------------------------------------------------------------ start

    def _worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        path = os.pathsep.join(_controller_sys_path())
        user_path = self.env.get("PYTHONPATH")
        env["PYTHONPATH"] = path + (os.pathsep + user_path if user_path else "")
        env["PYTHONUNBUFFERED"] = "1"
        if self.backend == "gloo" and "GLOO_SOCKET_IFNAME" not in env:
            # Single-node pool: keep gloo's pair sockets on loopback too
            # (its default follows the hostname, which may not resolve usefully).
            env["GLOO_SOCKET_IFNAME"] = "lo"
        return env

    def _start_once(self) -> None:
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="gpucomm-ranks-"))
        _live_pools.add(self)
        authkey = secrets.token_bytes(32)

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(self.world_size)
        self._listener = listener
        self.control_port = listener.getsockname()[1]
        # Rendezvous socket: bound here on loopback, served by rank 0 (fd passed down).
        rdzv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        rdzv.bind(("127.0.0.1", 0))
        rdzv.listen(max(128, self.world_size))
        self.rendezvous_port = rdzv.getsockname()[1]

        env = self._worker_env()
        try:
            self._spawn(listener, rdzv, authkey, env)
        finally:
            rdzv.close()  # rank 0 has its own copy; only it keeps the port open
        self._await_ready(listener, authkey)

    def _spawn(self, listener: socket.socket, rdzv: socket.socket, authkey: bytes,
               env: dict[str, str]) -> None:
        assert self._tmpdir is not None  # internal invariant, set by _start_once
        for rank in range(self.world_size):
            log_path = self._tmpdir / f"rank{rank}.log"
            stack_path = self._tmpdir / f"rank{rank}.stacks"
            stack_path.write_bytes(b"")
            log_file = open(log_path, "wb")
            cmd = [
                sys.executable, "-m", "pytest_gpucomm.ranks.worker",
                "--rank", str(rank),
                "--world-size", str(self.world_size),
                "--local-rank", str(rank),
                "--backend", self.backend,
                "--device", self.device,
                "--control-port", str(self.control_port),
                "--rendezvous-port", str(self.rendezvous_port),
                *(["--rendezvous-fd", str(rdzv.fileno())] if rank == 0 else []),
                "--stack-file", str(stack_path),
                "--init-timeout", str(self.start_timeout),
                "--parent-pid", str(os.getpid()),
            ]
            try:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT,
                    env=env, start_new_session=True, close_fds=True,
                    pass_fds=(rdzv.fileno(),) if rank == 0 else (),
                )
            except BaseException:
                log_file.close()
                raise
            self._workers.append(_Worker(rank, proc, log_path, stack_path, log_file))
            try:
                if proc.stdin is None:  # pragma: no cover - stdin=PIPE always sets it
                    raise OSError("no stdin pipe")
                proc.stdin.write(authkey.hex().encode() + b"\n")
                proc.stdin.close()
            except OSError:
                pass  # died at once; reported below

    def _await_ready(self, listener: socket.socket, authkey: bytes) -> None:
        pending_conns: list[Connection] = []
        by_conn: dict[Connection, int] = {}
        ready: set[int] = set()
        init_errors: dict[int, str] = {}
        deadline = time.monotonic() + self.start_timeout
        failure_deadline: float | None = None
        try:
            while True:
                failed = self._failed_at_start(ready, init_errors)
                if not failed and len(ready) == self.world_size:
                    break
                now = time.monotonic()
                if failed:
                    # Let the other ranks report too (they often fail the same way),
                    # but don't wait for ranks stuck waiting on the failed one.
                    if failure_deadline is None:
                        failure_deadline = now + _START_FAILURE_GRACE
                    unaccounted = [w.rank for w in self._workers
                                   if w.rank not in ready and w.rank not in failed]
                    if not unaccounted or now >= failure_deadline:
                        self._drain_start_messages(pending_conns, by_conn, ready,
                                                   init_errors, 0.3)
                        failed = self._failed_at_start(ready, init_errors)
                        raise self._start_error(failed, init_errors, ready,
                                                "failed during start-up")
                remaining = deadline - now
                if remaining <= 0:
                    not_ready = [w.rank for w in self._workers if w.rank not in ready]
                    stacks = self._dump_stacks(not_ready)
                    raise self._start_error(
                        set(not_ready), init_errors, ready,
                        f"did not become ready within {self.start_timeout:g} s",
                        stacks=stacks,
                    )
                objs: list[Any] = [listener, *pending_conns]
                for obj in wait(objs, timeout=min(_POLL_INTERVAL, remaining)):
                    if obj is listener:
                        self._accept(listener, authkey, pending_conns)
                    else:
                        self._handle_start_message(obj, pending_conns, by_conn, ready, init_errors)
        except BaseException:
            for c in pending_conns:
                if c not in by_conn:
                    c.close()
            self._teardown()
            raise
        # Only the handshaken connections matter now.
        for c in pending_conns:
            if c not in by_conn:
                c.close()
        listener.close()
        self._listener = None

    def _failed_at_start(self, ready: set[int], init_errors: dict[int, str]) -> set[int]:
        return set(init_errors) | {w.rank for w in self._workers
                                   if w.exited() and w.rank not in ready}

    def _accept(self, listener: socket.socket, authkey: bytes,
                pending_conns: list[Connection]) -> None:
        try:
            sock, _ = listener.accept()
        except OSError:
            return
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
            return
        pending_conns.append(conn)

    def _handle_start_message(self, conn: Connection, pending_conns: list[Connection],
                              by_conn: dict[Connection, int], ready: set[int],
                              init_errors: dict[int, str]) -> None:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            pending_conns.remove(conn)
            rank = by_conn.pop(conn, None)
            conn.close()
            if rank is not None:
                self._workers[rank].conn = None
            return
        kind = msg[0]
        if kind == "hello":
            rank = int(msg[1])
            if 0 <= rank < self.world_size and self._workers[rank].conn is None:
                by_conn[conn] = rank
                self._workers[rank].conn = conn
        elif kind == "ready":
            ready.add(int(msg[1]))
        elif kind == "init_error":
            init_errors[int(msg[1])] = str(msg[2])

    def _drain_start_messages(self, pending_conns: list[Connection],
                              by_conn: dict[Connection, int], ready: set[int],
                              init_errors: dict[int, str], seconds: float) -> None:
        end = time.monotonic() + seconds
        while pending_conns and (left := end - time.monotonic()) > 0:
            for obj in wait(list(pending_conns), timeout=left):
                self._handle_start_message(obj, pending_conns, by_conn, ready, init_errors)

    def _start_error(self, ranks: set[int], init_errors: dict[int, str], ready: set[int],
                     what: str, stacks: dict[int, str] | None = None) -> RankStartError:
        self._kill_all()
        tails = {w.rank: _tail(w.log_path) for w in self._workers}
        lines = [
            f"rank(s) {sorted(ranks)} of a {self.backend}/{self.device} pool of "
            f"world size {self.world_size} {what}"
            + (f" (starting the pool for {self._start_label!r})." if self._start_label else "."),
            f"ready ranks: {sorted(ready)}; still starting (killed): "
            f"{sorted(set(range(self.world_size)) - ready - ranks)}",
        ]
        for w in self._workers:
            if w.rank not in ranks:
                continue
            lines.append(f"--- rank {w.rank} (pid {w.proc.pid}, {_describe_returncode(w.proc.returncode)})")
            if w.rank in init_errors:
                lines.append("  init_process_group failed:")
                lines.append(_indent(init_errors[w.rank]))
            if stacks and stacks.get(w.rank):
                lines.append("  stack:")
                lines.append(_indent(stacks[w.rank]))
            lines.append("  output tail:")
            lines.append(_indent(tails[w.rank]))
        return RankStartError("\n".join(lines), ranks=ranks, label=self._start_label,
                              log_tails={r: tails[r] for r in ranks if r in tails})

    # ------------------------------------------------------------------ run

    def _run(self, task: str, kwargs: dict[str, Any], timeout: float, label: str) -> list[Any]:
        self._task_counter += 1
        task_id = self._task_counter
        msg = ("task", task_id, task, kwargs, _controller_sys_path())
        for w in self._workers:
            try:
                if w.conn is None:
                    raise OSError("not connected")
                w.conn.send(msg)
            except (OSError, ValueError):
                pass  # the liveness check below reports it as a crash

        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        pending = {w.rank for w in self._workers}
        start = time.monotonic()
        deadline = start + timeout
        grace_deadline: float | None = None

        while pending:
            now = time.monotonic()
            # --- crashed ranks (prompt: EOF wakes the wait below, poll catches the rest)
            dead = [w.rank for w in self._workers if w.rank in pending and w.exited()]
            if dead:
                raise self._crash_error(dead, label, results, errors)
            if grace_deadline is not None and now >= grace_deadline:
                raise self._error_with_stuck(label, errors, sorted(pending), results)
            if now >= deadline:
                raise self._timeout_error(label, timeout, sorted(pending), results, errors)
            limit = min(deadline, grace_deadline or deadline) - now
            conns = [self._workers[r].conn for r in pending]
            ready_conns = wait([c for c in conns if c is not None],
                               timeout=min(_POLL_INTERVAL, max(0.0, limit)))
            for conn in ready_conns:
                rank = next(w.rank for w in self._workers if w.conn is conn)
                try:
                    reply = conn.recv()
                except (EOFError, OSError):
                    # Connection lost: the process is dying; wait for it briefly.
                    try:
                        self._workers[rank].proc.wait(timeout=2.0)
                    except subprocess.TimeoutExpired:
                        pass
                    raise self._crash_error([rank], label, results, errors,
                                            connection_lost=True) from None
                except Exception:
                    # Received whole, but the controller cannot unpickle the result.
                    pending.discard(rank)
                    errors[rank] = ("the task's return value could not be unpickled in the "
                                    "controller:\n" + traceback.format_exc())
                    if grace_deadline is None:
                        grace_deadline = time.monotonic() + self.error_grace
                    continue
                status, reply_id = reply[0], reply[1]
                if reply_id != task_id:
                    continue  # stale reply (should not happen: pools restart after trouble)
                pending.discard(rank)
                if status == "ok":
                    results[rank] = reply[2]
                else:
                    errors[rank] = str(reply[2])
                    if grace_deadline is None:
                        grace_deadline = time.monotonic() + self.error_grace
        if errors:
            raise self._error(label, errors, results)
        return [results[r] for r in range(self.world_size)]

    # ------------------------------------------------------------------ failures

    def _error(self, label: str, errors: dict[int, str], results: dict[int, Any]) -> RankError:
        lines = [f"task {label!r} raised on rank(s) {sorted(errors)} "
                 f"(world size {self.world_size}); ranks {sorted(results)} finished."]
        for rank in sorted(errors):
            lines.append(f"--- rank {rank} traceback:")
            lines.append(_indent(errors[rank]))
        return RankError("\n".join(lines), ranks=errors, label=label, tracebacks=errors)

    def _error_with_stuck(self, label: str, errors: dict[int, str], stuck: list[int],
                          results: dict[int, Any]) -> RankError:
        stacks = self._dump_stacks(stuck)
        self._kill_all()
        lines = [
            f"task {label!r} raised on rank(s) {sorted(errors)} (world size {self.world_size}); "
            f"rank(s) {stuck} did not finish within {self.error_grace:g} s afterwards "
            f"(probably waiting in a collective for the failed rank), so the pool was "
            f"torn down and will restart on the next run.",
            f"finished ranks: {sorted(results)}",
        ]
        for rank in sorted(errors):
            lines.append(f"--- rank {rank} traceback:")
            lines.append(_indent(errors[rank]))
        for rank in stuck:
            lines.append(f"--- rank {rank} (stuck) stack:")
            lines.append(_indent(stacks.get(rank, "")))
        self._teardown()
        return RankError("\n".join(lines), ranks=errors, label=label, tracebacks=errors,
                         stuck=stuck)

    def _timeout_error(self, label: str, timeout: float, hung: list[int],
                       results: dict[int, Any], errors: dict[int, str]) -> RankTimeout:
        stacks = self._dump_stacks(hung)
        self._kill_all()
        finished = sorted(set(results) | set(errors))
        lines = [
            f"task {label!r} timed out after {timeout:g} s on rank(s) {hung} "
            f"(world size {self.world_size}); finished ranks: {finished}. "
            f"The pool was torn down and will restart on the next run.",
        ]
        for rank in sorted(errors):
            lines.append(f"--- rank {rank} raised:")
            lines.append(_indent(errors[rank]))
        for rank in hung:
            lines.append(f"--- rank {rank} (hung) stack:")
            lines.append(_indent(stacks.get(rank, "") or "<no stack dump received>"))
            tail = _tail(self._workers[rank].log_path, lines=10)
            if tail:
                lines.append(f"  rank {rank} output tail:")
                lines.append(_indent(tail))
        self._teardown()
        return RankTimeout("\n".join(lines), ranks=hung, label=label, timeout=timeout,
                           finished=finished, stacks=stacks)

    def _crash_error(self, dead: list[int], label: str, results: dict[int, Any],
                     errors: dict[int, str], connection_lost: bool = False) -> RankCrash:
        # Others may be dying at the same moment (e.g. a shared fault); look briefly.
        time.sleep(0.1)
        dead_set = set(dead) | {w.rank for w in self._workers
                                if w.exited() and w.rank not in results and w.rank not in errors}
        self._kill_all()
        dead = sorted(dead_set)
        codes = {r: self._workers[r].proc.returncode for r in dead}
        tails = {r: _tail(self._workers[r].log_path) for r in dead}
        first = ", ".join(f"rank {r} crashed ({_describe_returncode(codes[r])})" for r in dead)
        lines = [
            f"{first} while running {label!r} (world size {self.world_size}); "
            f"the pool was torn down and will restart on the next run.",
        ]
        if connection_lost:
            lines.append("(the control connection to the rank was lost)")
        for rank in dead:
            lines.append(f"--- rank {rank} (pid {self._workers[rank].proc.pid}) output tail:")
            lines.append(_indent(tails[rank]))
        self._teardown()
        return RankCrash("\n".join(lines), ranks=dead, label=label, returncodes=codes,
                         log_tails=tails)

    def _dump_stacks(self, ranks: list[int], wait_s: float = 2.0) -> dict[int, str]:
        """SIGUSR1 the given ranks and collect the faulthandler dumps they write."""
        if not hasattr(signal, "SIGUSR1"):
            return {}
        offsets: dict[int, int] = {}
        for rank in ranks:
            w = self._workers[rank]
            if w.exited():
                continue
            try:
                offsets[rank] = w.stack_path.stat().st_size
                os.kill(w.proc.pid, signal.SIGUSR1)
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
                    size = self._workers[rank].stack_path.stat().st_size
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
                with open(self._workers[rank].stack_path, "rb") as f:
                    f.seek(off)
                    stacks[rank] = f.read().decode("utf-8", errors="replace")
            except OSError:
                stacks[rank] = ""
        return stacks

    # ------------------------------------------------------------------ teardown

    def _kill_all(self) -> None:
        """SIGKILL every worker (and its process group) and reap it."""
        for w in self._workers:
            if w.proc.poll() is None:
                try:
                    os.killpg(w.proc.pid, signal.SIGKILL)
                except OSError:
                    try:
                        w.proc.kill()
                    except OSError:
                        pass
        for w in self._workers:
            try:
                w.proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
                pass

    def _teardown(self) -> None:
        """Kill and reap every worker, close every connection and the listener."""
        self._kill_all()
        for w in self._workers:
            if w.conn is not None:
                try:
                    w.conn.close()
                except OSError:
                    pass
                w.conn = None
            if w.proc.stdin is not None:
                try:
                    w.proc.stdin.close()
                except OSError:
                    pass
            try:
                w.log_file.close()
            except OSError:
                pass
        self._workers = []
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
            self._listener = None


# --------------------------------------------------------------------------- in-process


class InProcessExecutor:
    """Runs tasks in this process when torch.distributed is already initialised.

    For the multi-node mode, where pytest itself runs on every rank (e.g. under
    ``torchrun``): every rank calls :meth:`run` with the same task, the task
    runs here with a :class:`RankContext` built from ``dist.get_rank()``,
    ``dist.get_world_size()`` and ``LOCAL_RANK``, and the per-rank outcomes are
    gathered to every rank with ``all_gather_object``.

    Args:
        device: device string for the context; default ``"cuda:<LOCAL_RANK>"``
            for the nccl backend, else ``"cpu"``.

    ``timeout`` cannot interrupt in-process code; when exceeded, all thread
    stacks are dumped to stderr (faulthandler) and the process group's own
    timeout is what eventually ends a hang.
    """

    def __init__(self, device: str | None = None) -> None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "InProcessExecutor needs an initialised torch.distributed default process "
                "group (run pytest under torchrun, or call init_process_group first)"
            )
        self._dist = dist
        self.backend = str(dist.get_backend())
        self.rank = dist.get_rank()
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        if device is None:
            device = f"cuda:{self.local_rank}" if self.backend == "nccl" else "cpu"
        self.device = device

    @property
    def world_size(self) -> int:
        return self._dist.get_world_size()

    def context(self) -> RankContext:
        """The :class:`RankContext` tasks receive in this process."""
        return RankContext(rank=self.rank, world_size=self.world_size,
                           local_rank=self.local_rank, backend=self.backend,
                           device=self.device)

    def run(
        self,
        task: str,
        kwargs: dict[str, Any] | None = None,
        *,
        timeout: float,
        label: str = "",
    ) -> list[Any]:
        """Run ``task`` here and return every rank's result, ordered by rank.

        Raises:
            RankError: the task raised on one or more ranks (on every rank, so
                all ranks fail the test consistently).
        """
        label = label or task
        outcome: tuple[str, Any]
        faulthandler.dump_traceback_later(timeout, repeat=False, file=sys.stderr, exit=False)
        try:
            try:
                fn = load_task(task)
                outcome = ("ok", fn(self.context(), **(kwargs or {})))
            except Exception:
                outcome = ("error", traceback.format_exc())
        finally:
            faulthandler.cancel_dump_traceback_later()
        gathered: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(gathered, outcome)
        errors = {r: str(o[1]) for r, o in enumerate(gathered) if o[0] != "ok"}
        if errors:
            lines = [f"task {label!r} raised on rank(s) {sorted(errors)} "
                     f"(world size {self.world_size}, in-process)."]
            for rank in sorted(errors):
                lines.append(f"--- rank {rank} traceback:")
                lines.append(_indent(errors[rank]))
            raise RankError("\n".join(lines), ranks=errors, label=label, tracebacks=errors)
        return [o[1] for o in gathered]
