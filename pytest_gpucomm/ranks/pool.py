"""Controller side: a pool of torch.distributed rank processes.

A :class:`RankPool` spawns ``world_size`` worker processes (see
:mod:`pytest_gpucomm.ranks.worker`, started by :mod:`pytest_gpucomm.ranks.spawn`) that form
one process group, and runs *tasks* -- ``"module:function"`` callables taking a
:class:`~pytest_gpucomm.ranks.context.RankContext` -- on every rank. The pool is meant to be
started once per world size and session and reused by every test; after a failure that
leaves the process group unusable (crash, hang, a rank stuck after a peer raised) it is torn
down and the next :meth:`RankPool.run` starts a fresh one.

This module holds the run loop: send a :class:`~.protocol.Task`, collect the replies, and
turn a raising, hanging or dying rank into a :class:`~.errors.RankFailure` (messages from
:mod:`pytest_gpucomm.ranks.report`). Only the stdlib is used here.
"""

from __future__ import annotations

import atexit
import shutil
import threading
import time
import traceback
import weakref
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Mapping, cast

from pytest_gpucomm.ranks import report
from pytest_gpucomm.ranks.logdirs import new_log_dir as _new_log_dir
from pytest_gpucomm.ranks.logdirs import release_root as _release_log_root
from pytest_gpucomm.ranks.logdirs import remove_own_roots
from pytest_gpucomm.ranks.errors import RankCrash, RankError, RankFailure, RankTimeout
from pytest_gpucomm.ranks.protocol import Shutdown, Task, TaskError, TaskOk
from pytest_gpucomm.vocab import RANK_START_TIMEOUT_S
from pytest_gpucomm.ranks.processes import RankProcess, dump_stacks, kill_ranks, release_ranks
from pytest_gpucomm.ranks.spawn import POLL_INTERVAL_S, Zygote, controller_sys_path, start_ranks

__all__ = ["RankPool"]

_HUNG_TAIL_LINES = 10  # output lines shown per hung rank (its stack says more)


_live_pools: "weakref.WeakSet[RankPool]" = weakref.WeakSet()


def _close_live_pools() -> None:
    """At exit: close every pool, then remove this process's temporary folders."""
    for pool in list(_live_pools):
        try:
            pool.close()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            pass
    remove_own_roots()


atexit.register(_close_live_pools)


class RankPool:
    """A reusable group of ``world_size`` rank processes forming one process group.

    Args:
        world_size: number of ranks (one process each, local ranks 0..N-1).
        backend: torch.distributed backend (``"gloo"``, ``"nccl"``).
        device: ``"cpu"`` or ``"cuda"``; with ``"cuda"`` rank *r* uses GPU *r*.
        start_timeout_s: seconds to wait for every rank to initialise its process
            group; also the process group's own timeout.
        env: environment overrides for the workers (on top of ``os.environ``; None unsets a variable).
        error_grace_s: after a rank raised, seconds the other ranks get to answer
            before the pool is torn down.
        shutdown_grace_s: seconds :meth:`close` waits for a graceful exit before
            killing.
        zygote: a :class:`~.spawn.Zygote` that forks the workers (torch imported once, in it), for the
            pools of one session; the caller closes it after the pools.  None: each worker is a new process.

    The pool is started lazily by :meth:`run` (or explicitly by :meth:`start`)
    and restarted by :meth:`run` whenever it is not :attr:`alive`. Use
    :meth:`close` (or ``with RankPool(...) as pool``) to shut it down; live
    pools are also closed at interpreter exit.

    Workers get ``os.environ`` plus ``env``, ``PYTHONPATH`` built from this
    process's ``sys.path`` (the current ``sys.path`` is also sent with every
    task, so directories added later -- pytester -- work), and, for gloo,
    ``GLOO_SOCKET_IFNAME=lo`` unless set. Their stdout/stderr go to
    ``log_dir/rank<N>.log``; :attr:`log_dir` is ``<tmp>/gpucomm-<pid>-XXXXXXXX/
    gpucomm-ranks-XXXXXXXX``, removed by :meth:`close` (see :mod:`.logdirs`, which also
    removes what dead controllers left behind when a pool starts). The rendezvous store is served by rank 0 on a
    127.0.0.1 socket, the control channel is an authenticated 127.0.0.1
    connection (authkey sent over the worker's stdin).

    Each worker leads its own process group; whenever a worker is stopped --
    :meth:`close`, a teardown after a failure, a crash -- its whole group is
    killed, so processes a task left running go with it (unless they left the
    group themselves). Workers die with the controller (``PR_SET_PDEATHSIG``). Linux delivers that
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
        start_timeout_s: float = RANK_START_TIMEOUT_S,
        env: Mapping[str, "str | None"] | None = None,
        error_grace_s: float = 3.0,
        shutdown_grace_s: float = 5.0,
        zygote: Zygote | None = None,
    ) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive int, got {world_size!r}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be > 0, got {start_timeout_s!r}")
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.start_timeout_s = float(start_timeout_s)
        self.env: dict[str, "str | None"] = dict(env or {})
        self.error_grace_s = float(error_grace_s)
        self.shutdown_grace_s = float(shutdown_grace_s)
        self.zygote = zygote

        self._lock = threading.RLock()
        self._workers: list[RankProcess] = []
        self._tmpdir: Path | None = None
        self._task_counter = 0
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
        return [w.pid for w in self._workers]

    @property
    def log_dir(self) -> Path | None:
        """Directory holding the per-rank ``rank<N>.log`` files (None before start)."""
        return self._tmpdir

    def start(self) -> None:
        """Spawn the workers and wait until every rank reports its process group ready.

        Does nothing when the pool is already alive; tears down a half-dead
        pool first.

        Raises:
            RankStartError: a rank failed or did not get ready in ``start_timeout_s``
                seconds; the message has each failing rank's output tail.
        """
        self._start(label="")

    def run(
        self,
        task: str,
        kwargs: Mapping[str, object] | None = None,
        *,
        timeout_s: float,
        label: str = "",
    ) -> list[object]:
        """Run ``task`` (``"module:function"``) on every rank; return results ordered by rank.

        Starts (or restarts) the pool first when it is not alive.

        Raises:
            RankError: the task raised on some rank (message has its traceback).
            RankTimeout: some rank did not finish within ``timeout_s`` seconds
                (message has the hung ranks' stacks); the pool is torn down.
            RankCrash: a rank process died; the pool is torn down.
            RankStartError: the pool could not be (re)started.
        """
        if timeout_s is None or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        if ":" not in task:
            raise ValueError(f"task must be given as 'module:function', got {task!r}")
        label = label or task
        kwargs = dict(kwargs or {})
        try:
            ForkingPickler.dumps(kwargs)
        except Exception as exc:
            raise TypeError(f"kwargs for task {task!r} cannot be pickled: {exc}") from exc
        with self._lock:
            try:
                if not self.alive:
                    self._start(label)
                return self._run(task, kwargs, float(timeout_s), label)
            except RankFailure:
                raise
            except BaseException:
                # KeyboardInterrupt, or an unexpected controller-side error: the
                # ranks are in an unknown state, so start over next time.
                self._teardown()
                raise

    def close(self) -> None:
        """Shut the pool down: graceful shutdown, then kill; reap every child. Idempotent.

        Every worker's process group is killed once the worker has exited (or been
        killed), before it is reaped, so what the tasks left running does not outlive
        the pool; the pool's log folder is removed.
        """
        with self._lock:
            for w in self._workers:
                if w.conn is not None and not w.exited():
                    try:
                        w.conn.send(Shutdown())
                    except (OSError, ValueError):
                        pass
            deadline = time.monotonic() + self.shutdown_grace_s
            for w in self._workers:
                # Not reaped here: the teardown kills each worker's process group (what
                # its tasks left running) while the worker is still a zombie.
                w.wait_exited(max(0.0, deadline - time.monotonic()))
            self._teardown()
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                _release_log_root(self._tmpdir.parent)
                self._tmpdir = None
            _live_pools.discard(self)

    # ------------------------------------------------------------------ start

    def _start(self, label: str) -> None:
        with self._lock:
            if self.alive:
                return
            self._teardown()
            if self._tmpdir is None or not self._tmpdir.is_dir():  # (re)made if something removed it
                self._tmpdir = _new_log_dir()
            _live_pools.add(self)
            started = start_ranks(
                self.world_size, self.backend, self.device,
                start_timeout_s=self.start_timeout_s, env=self.env,
                log_dir=self._tmpdir, label=label, zygote=self.zygote,
            )
            self._workers = started.processes
            self.control_port = started.control_port
            self.rendezvous_port = started.rendezvous_port

    # ------------------------------------------------------------------ run

    def _run(self, task: str, kwargs: dict[str, object], timeout_s: float, label: str) -> list[object]:
        self._task_counter += 1
        task_id = self._task_counter
        msg = Task(task_id=task_id, spec=task, kwargs=kwargs, sys_path=controller_sys_path())
        for w in self._workers:
            try:
                if w.conn is None:
                    raise OSError("not connected")
                w.conn.send(msg)
            except (OSError, ValueError):
                pass  # the liveness check below reports it as a crash

        results: dict[int, object] = {}
        errors: dict[int, str] = {}
        pending = {w.rank for w in self._workers}
        deadline = time.monotonic() + timeout_s
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
                raise self._timeout_error(label, timeout_s, sorted(pending), results, errors)
            limit = min(deadline, grace_deadline or deadline) - now
            conns = [self._workers[r].conn for r in pending]
            ready_conns = wait([c for c in conns if c is not None],
                               timeout=min(POLL_INTERVAL_S, max(0.0, limit)))
            for conn in cast("list[Connection]", ready_conns):  # wait returns the workers' conns given it
                rank = next(w.rank for w in self._workers if w.conn is conn)
                try:
                    reply = conn.recv()
                except (EOFError, OSError):
                    # Connection lost: the process is dying; wait for it briefly.
                    self._workers[rank].wait_exited(2.0)
                    raise self._crash_error([rank], label, results, errors,
                                            connection_lost=True) from None
                except Exception:
                    # Received whole, but the controller cannot unpickle the result.
                    reply = TaskError(task_id=task_id, traceback=(
                        "the task's return value could not be unpickled in the "
                        "controller:\n" + traceback.format_exc()))
                if not isinstance(reply, (TaskOk, TaskError)) or reply.task_id != task_id:
                    continue  # stale reply (should not happen: pools restart after trouble)
                pending.discard(rank)
                if isinstance(reply, TaskOk):
                    results[rank] = reply.result
                else:
                    errors[rank] = str(reply.traceback)
                    if grace_deadline is None:
                        grace_deadline = time.monotonic() + self.error_grace_s
        if errors:
            raise report.task_error(label, self.world_size, errors, finished=results)
        return [results[r] for r in range(self.world_size)]

    # ------------------------------------------------------------------ failures

    def _error_with_stuck(self, label: str, errors: dict[int, str], stuck: list[int],
                          results: dict[int, object]) -> RankError:
        stacks = dump_stacks(self._workers, stuck)
        kill_ranks(self._workers, self._kill_wait_s)
        err = report.task_error_with_stuck(label, self.world_size, errors, stuck,
                                           finished=results, stacks=stacks,
                                           grace_s=self.error_grace_s)
        self._teardown()
        return err

    def _timeout_error(self, label: str, timeout_s: float, hung: list[int],
                       results: dict[int, object], errors: dict[int, str]) -> RankTimeout:
        stacks = dump_stacks(self._workers, hung)
        kill_ranks(self._workers, self._kill_wait_s)
        err = report.timeout_failure(
            label, self.world_size, timeout_s, hung,
            finished=sorted(set(results) | set(errors)), errors=errors, stacks=stacks,
            tails={r: self._workers[r].output_tail(lines=_HUNG_TAIL_LINES) for r in hung},
        )
        self._teardown()
        return err

    def _crash_error(self, dead: list[int], label: str, results: dict[int, object],
                     errors: dict[int, str], connection_lost: bool = False) -> RankCrash:
        # Others may be dying at the same moment (e.g. a shared fault); look briefly.
        time.sleep(0.1)
        dead_set = set(dead) | {w.rank for w in self._workers
                                if w.exited() and w.rank not in results and w.rank not in errors}
        kill_ranks(self._workers, self._kill_wait_s)
        dead = sorted(dead_set)
        err = report.crash_failure(
            label, self.world_size, dead,
            returncodes={r: self._workers[r].proc.returncode for r in dead},
            pids={r: self._workers[r].pid for r in dead},
            tails={r: self._workers[r].output_tail() for r in dead},
            connection_lost=connection_lost,
        )
        self._teardown()
        return err

    # ------------------------------------------------------------------ teardown

    def _teardown(self) -> None:
        """Kill every worker and its process group, reap it, close every connection."""
        workers, self._workers = self._workers, []
        release_ranks(workers, self._kill_wait_s)

    @property
    def _kill_wait_s(self) -> float:
        """How long a killed rank may take to exit: a GPU rank killed inside a driver call (tearing down its
        context, NCCL's mappings) can take far longer than a CPU one."""
        return 60.0 if self.device == "cuda" else 10.0
