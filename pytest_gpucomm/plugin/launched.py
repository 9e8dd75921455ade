"""Launched mode: this pytest process is one rank of a job started by torchrun, srun or mpirun.

:class:`LaunchedSession` holds what the session shares with the other ranks:

* one default process group for the session (NCCL/RCCL bound to the GPU of the local rank on GPU, gloo on
  CPU) and a gloo group for control messages, created when first needed (after collection) and destroyed
  at the end of the session; their timeout, which bounds the rendezvous, is ``--gpucomm-timeout`` but at
  least :data:`JOIN_MIN_S` (launchers start ranks unevenly); what bounds a hung rank is the deadline of each
  exchange, below;
* the executor of the ``process_group`` fixture (:class:`~pytest_gpucomm.ranks.inprocess.InProcessExecutor`);
* the job's layout (the node and local rank of every rank, :meth:`LaunchedSession.layout`) and the sub-groups
  of the topology-aware suites (one per node, one per local rank across the nodes:
  :meth:`LaunchedSession.group_executor`), made by every rank on first use;
* the agreement on the collected tests (:meth:`LaunchedSession.agree_on_collection`), on each test's
  outcome (:meth:`LaunchedSession.agree_on_outcome`) and on the session's exit status
  (:meth:`LaunchedSession.agree_on_exit_status`).

:func:`diverging_options` names the options that would make the ranks run different tests.

Every control exchange (a task's outcomes, a test's outcome, the exit status, the collected tests, and
:meth:`LaunchedSession.allgather` for any other control message) has a deadline, and a rank that does not
arrive is named:

* each rank announces its arrival in the job's c10d store (the default group's store, under the prefix
  ``gpucomm/``): it sets ``arrive/<seq>/<rank>``, adds 1 to ``arrive/<seq>``, and the rank whose add makes
  the count the world size sets ``done/<seq>``; every rank waits for ``done/<seq>`` until the deadline (a
  task's ``timeout_s``, from ``@rank_timeout`` or ``--gpucomm-timeout``; ``--gpucomm-timeout`` for the
  others), then exchanges the data over the gloo control group.  ``seq`` counts the exchanges, alike on
  every rank; only the counter is waited on, and the per-rank keys are read only when the wait fails (by
  halves, ``check`` of many keys at once).  Each rank deletes its key of two exchanges back, rank 0 the
  counter and ``done`` key, so the store does not grow with the session;
* on a timeout (or a store that went away) the waiting ranks raise :class:`JobBroken`, which names the ranks
  that did not arrive with their host and device, fails the test, and marks the session broken: no further
  collective exchange (later phases and the exit status are not agreed, ``close`` skips its barrier and
  does not destroy the communicators), and the plugin stops the session (exit status 1).  They also set
  ``abort/<rank>`` for each missing rank;
* on every rank a :class:`Watchdog` thread, armed for each task and exchange at its deadline plus
  :data:`GRACE_S`, and a watcher thread blocked on this rank's ``abort/<rank>`` key (on a connection of its
  own, ``Store.clone()``: a store client serves one operation at a time), end a hung rank:
  :data:`GRACE_S` after the deadline or after the others named it, it writes which rank, host and what it
  did not finish, and the Python stacks of all its threads, to the stderr it had when the session began,
  then ``os._exit(1)``.  The grace lets the waiting ranks report first.  Once broken, a rank that has not
  ended :data:`END_S` later is ended the same way, so nothing is left behind.

:func:`redirect_output` sends a quiet rank's output to its ``--gpucomm-rank-log`` file.
"""

from __future__ import annotations

import datetime
import faulthandler
import hashlib
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import pytest

from ..env.launch import Launch
from ..ranks.errors import JobBroken

if TYPE_CHECKING:
    from ..env.hardware import DeviceInfo
    from ..ranks.inprocess import InProcessExecutor
    from ..env.topology import Layout, SubGroup

__all__ = ["LaunchedSession", "JobBroken", "Watchdog", "diverging_options", "redirect_output", "XDIST_REFUSAL",
           "GRACE_S", "END_S", "JOIN_MIN_S"]

#: after its deadline (or after the other ranks named it as hung), a rank waits this long before its
#: watchdog ends it, so that the waiting ranks report the failure first
GRACE_S = 10.0
#: once the session is broken, a rank that has not ended within this long is ended by its watchdog
END_S = 60.0
#: the rendezvous (and the first exchange, where every rank gives its host) waits at least this long
JOIN_MIN_S = 120.0
#: a watcher's wait for its abort key is renewed this often (a store wait needs a timeout)
_WATCH_S = 24 * 3600.0

XDIST_REFUSAL = ("-n/--dist (pytest-xdist): a rank's tests would run in worker processes that are not ranks of "
                 "the job")


def diverging_options(config: pytest.Config) -> list[str]:
    """The given options that would make the ranks of a launched job run different tests, each with why."""
    out = []
    maxfail = int(config.getoption("maxfail", 0) or 0)
    if maxfail:
        out.append(f"-x/--maxfail={maxfail}: a rank that stops after its failures leaves the other ranks waiting "
                   "for it in the next test's collectives")
    for dest, flag in (("lf", "--lf/--last-failed"), ("failedfirst", "--ff/--failed-first"),
                       ("newfirst", "--nf/--new-first"), ("stepwise", "--sw/--stepwise")):
        if config.getoption(dest, False):
            out.append(f"{flag}: each rank selects or orders the tests from its own cache, so the ranks may run "
                       "different tests, or the same ones in another order")
    numprocesses = config.getoption("numprocesses", None)
    dist = config.getoption("dist", "no")
    if numprocesses or dist not in ("no", None):
        out.append(XDIST_REFUSAL)
    return out


class Watchdog:
    """One daemon thread that ends this process when it is stuck past a deadline.

    :meth:`arm` sets the deadline of the task or exchange under way (:meth:`disarm` clears it); :meth:`final`
    sets a deadline that only moves earlier and is never cleared (a rank named as hung, a broken session).
    When a deadline passes, the thread writes the reason and the Python stacks of every thread to ``fd``
    (unbuffered) and calls ``os._exit(1)``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._cond = threading.Condition()
        self._armed: Optional[tuple[float, str]] = None
        self._final: Optional[tuple[float, str]] = None
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self._firing = threading.Lock()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpucomm-watchdog", daemon=True)
            self._thread.start()

    def arm(self, deadline: float, why: str) -> None:
        """End this process at ``deadline`` (``time.monotonic()``) unless :meth:`disarm` comes first."""
        with self._cond:
            self._armed = (deadline, why)
            self._start()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._armed = None

    def final(self, deadline: float, why: str) -> None:
        """End this process at ``deadline`` whatever happens (an earlier final deadline is kept)."""
        with self._cond:
            if self._final is None or deadline < self._final[0]:
                self._final = (deadline, why)
            self._start()
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._armed = self._final = None
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                due = min((d for d in (self._armed, self._final) if d is not None), default=None)
                if due is None:
                    self._cond.wait()
                    continue
                left = due[0] - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
            self.fire(due[1])

    def fire(self, why: str) -> None:
        """Write ``why`` and every thread's stack to ``fd``, then end the process with status 1."""
        if not self._firing.acquire(blocking=False):
            return
        try:
            os.write(self.fd, f"\n{why}\nPython stacks of every thread (pid {os.getpid()}):\n".encode(errors="replace"))
            faulthandler.dump_traceback(file=self.fd, all_threads=True)
            os.write(self.fd, b"\n")
        finally:
            os._exit(1)


def redirect_output(config: pytest.Config, directory: str, rank: int, origin: str) -> str:
    """Send everything this process prints from now on -- pytest's output, and what C libraries (NCCL, gloo)
    write to file descriptors 1 and 2 -- to ``directory/rank-<rank>.log`` (created, truncated); return its
    path.  pytest's output capture keeps its own copies of descriptors 1 and 2 and puts them back after each
    test; they are redirected too.  Raises pytest.UsageError naming the option and the path when the folder
    or the file cannot be made."""
    path = os.path.join(directory, f"rank-{rank}.log")
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        raise pytest.UsageError(f"invalid --gpucomm-rank-log {directory!r} (from {origin}): rank {rank} cannot "
                                f"write its log {path}: {e.strerror or e}") from None
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    capman = config.pluginmanager.getplugin("capturemanager")
    capturing = getattr(capman, "_global_capturing", None)
    saved = [getattr(getattr(capturing, name, None), "targetfd_save", None) for name in ("out", "err")]
    for target in (1, 2, *(s for s in saved if isinstance(s, int))):
        os.dup2(fd, target)
    os.close(fd)
    return path


class LaunchedSession:
    """This rank's side of a launched job; see the module docstring."""

    def __init__(self, launch: Launch, timeout_s: float) -> None:
        self.launch = launch
        self.timeout_s = timeout_s
        self.backend = ""
        self.device = ""
        self.hosts: tuple[str, ...] = ()
        self.devices: tuple[str, ...] = ()
        self.control: Any = None  # the gloo group of control messages
        #: why the session is broken (a rank hung or gone): no further collective exchange; None while sound
        self.broken: Optional[str] = None
        self._executor: Optional["InProcessExecutor"] = None
        self._started = False
        self._owns_default = False
        self._layout: Optional["Layout"] = None
        self._subgroups: dict[str, tuple[list["SubGroup"], Any]] = {}  # kind -> (every group, this rank's handle)
        self._group_executors: dict[str, "InProcessExecutor"] = {}
        self._closing = False
        self._store: Any = None
        self._watcher: Optional[threading.Thread] = None
        self._seq = 0
        try:  # the stderr of the session's start (pytest's capture is suspended now): a hung rank writes there
            fd = os.dup(2)
        except OSError:  # pragma: no cover - no stderr at all
            fd = 2
        self.watchdog = Watchdog(fd)

    @property
    def started(self) -> bool:
        return self._started

    def start(self, info: "DeviceInfo") -> None:
        """Join the job's process groups (once per session).  Raises pytest.UsageError when this rank cannot
        (its GPU is missing, or a process group already exists in this process), :class:`JobBroken` when a
        rank does not arrive."""
        if self._started:
            return
        import torch
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _get_default_store

        la = self.launch
        if dist.is_initialized():
            raise pytest.UsageError(
                "gpucomm: launched mode: a torch.distributed process group already exists in this process "
                "(made by a conftest or another plugin); gpucomm makes the session's own, so leave it out or "
                "run with --gpucomm-launch=pool")
        if info.kind == "gpu":
            if la.local_rank >= info.count:
                raise pytest.UsageError(
                    f"gpucomm: {la.launcher} local rank {la.local_rank} on {la.host} has no GPU of its own: "
                    f"{info.count} visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})")
            self.backend, self.device = info.backend, f"{info.torch_device_type}:{la.local_rank}"
            torch.cuda.set_device(la.local_rank)
        else:
            self.backend, self.device = "gloo", "cpu"
        if la.loopback and "GLOO_SOCKET_IFNAME" not in os.environ:
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # every rank on this host: gloo's sockets on loopback too
        # the rendezvous waits for ranks that a launcher starts unevenly (nodes booting the interpreter at
        # different speeds): at least JOIN_MIN_S; hung ranks are bounded by the exchanges' own deadlines
        join_s = max(self.timeout_s, JOIN_MIN_S)
        timeout = datetime.timedelta(seconds=join_s)
        host = f"[{la.master_addr}]" if ":" in la.master_addr else la.master_addr
        init_method = "env://" if la.launcher == "torchrun" else f"tcp://{host}:{la.master_port}"
        kwargs: dict[str, Any] = dict(backend=self.backend, init_method=init_method, rank=la.rank,
                                      world_size=la.world_size, timeout=timeout)
        if self.backend != "gloo":
            kwargs["device_id"] = torch.device(self.device)  # bind the communicator to this rank's GPU
        dist.init_process_group(**kwargs)
        self._owns_default = True
        # control messages in a gloo group of their own (on CPU too): they never queue behind a test's ops
        self.control = dist.new_group(backend="gloo", timeout=timeout)
        self._store = dist.PrefixStore("gpucomm/", _get_default_store())
        self._started = True
        self._watch()
        every = self.exchange((la.host, self.device), what="joining the job", timeout_s=join_s)
        self.hosts = tuple(h for h, _ in every)
        self.devices = tuple(d for _, d in every)

    # -- the deadline-aware exchange ------------------------------------------------------------------

    def _me(self) -> str:
        la = self.launch
        return f"rank {la.rank} ({la.host}, {self.device or '?'})"

    def _ranks(self, ranks: Sequence[int]) -> str:
        """``rank 3 (hostB, cuda:1)``, or ``ranks 2 (hostB, cuda:0), 3 (hostB, cuda:1)`` (8 at most named)."""
        named = [f"{r} ({self.hosts[r] if r < len(self.hosts) else '?'}, "
                 f"{self.devices[r] if r < len(self.devices) else '?'})" for r in ranks[:8]]
        more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
        return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(named)}{more}"

    def _store_address(self) -> str:
        store = self._store
        for _ in range(8):  # PrefixStores around the TCPStore
            if hasattr(store, "host") and hasattr(store, "port"):
                return f"{store.host}:{store.port}"
            store = getattr(store, "underlying_store", None)
            if store is None:
                break
        return f"{self.launch.master_addr}:{self.launch.master_port}"

    def _watch(self) -> None:
        """Start this rank's watcher: a thread blocked on ``abort/<rank>`` over a store connection of its own.
        Woken with a message (the other ranks named this rank as hung), it has the watchdog end this process
        GRACE_S later; woken with an empty value (this rank's own close), it ends; if the store goes away
        while the session runs, the job is over: the watchdog ends this rank if it has not ended within the
        timeout."""
        clone = getattr(self._store, "clone", None)
        if clone is None:  # an older torch: the watchdog of each task and exchange still ends a hung rank
            return
        try:
            store = clone()  # a connection of its own: a store client serves one operation at a time
        except Exception:  # a store that cannot be cloned: as above
            return
        key = f"abort/{self.launch.rank}"

        def watch() -> None:
            while True:
                try:
                    store.wait([key], datetime.timedelta(seconds=_WATCH_S))
                    message = store.get(key).decode(errors="replace")
                except Exception as e:
                    if "timeout" in str(e).lower() and not self._closing:
                        continue
                    if not self._closing:
                        self.watchdog.final(
                            time.monotonic() + self.timeout_s + GRACE_S,
                            f"gpucomm: {self._me()}: the job's store ({self._store_address()}) went away while "
                            f"the session ran ({type(e).__name__}: {e}); the job is over, and this rank did not "
                            f"end within {self.timeout_s + GRACE_S:g} s: it exits (status 1)")
                    return
                if message:
                    self.watchdog.final(
                        time.monotonic() + GRACE_S,
                        f"{message}\ngpucomm: this is {self._me()}, named by the other ranks: it did not end "
                        f"within {GRACE_S:g} s of that and exits (status 1)")
                return

        self._watcher = threading.Thread(target=watch, name="gpucomm-abort-watcher", daemon=True)
        self._watcher.start()

    def _stop_watcher(self) -> None:
        """Wake this rank's watcher (an empty ``abort/<rank>``) and wait for it to end: a thread still blocked
        in the store when the interpreter finalizes, and woken then (the store's host ending), would abort the
        process (C++ unwinding through a thread that Python ends)."""
        self._closing = True
        if self._watcher is None:
            return
        try:
            self._store.set(f"abort/{self.launch.rank}", "")
        except Exception:  # the store gone: the watcher's wait fails and it ends by itself
            pass
        self._watcher.join(timeout=5)

    def _break(self, message: str, what: str, timeout_s: float, ranks: Sequence[int] = ()) -> JobBroken:
        """Mark the session broken; the error to raise."""
        if self.broken is None:
            self.broken = message
            self.watchdog.final(time.monotonic() + END_S,
                                f"gpucomm: {self._me()}: the session stopped ({message}), and this rank did not "
                                f"end within {END_S:g} s: it exits (status 1)")
        finished = [r for r in range(self.launch.world_size) if r not in set(ranks)]
        return JobBroken(message, ranks=ranks, label=what, timeout_s=timeout_s, finished=finished)

    def _missing(self, seq: int, ranks: list[int]) -> list[int]:
        """The ranks without their ``arrive/<seq>/<rank>`` key, found by halves."""
        if not ranks or self._store.check([f"arrive/{seq}/{r}" for r in ranks]):
            return []
        if len(ranks) == 1:
            return ranks
        mid = len(ranks) // 2
        return self._missing(seq, ranks[:mid]) + self._missing(seq, ranks[mid:])

    def _arrive(self, seq: int, deadline: float, what: str, timeout_s: float) -> None:
        """Announce this rank at exchange ``seq`` and wait until every rank has, or raise :class:`JobBroken`
        naming the ranks that did not arrive by ``deadline``."""
        store, rank, world = self._store, self.launch.rank, self.launch.world_size
        try:
            if seq >= 2:  # every rank is past exchange seq - 2: its keys are not needed any more
                store.delete_key(f"arrive/{seq - 2}/{rank}")
                if rank == 0:
                    store.delete_key(f"arrive/{seq - 2}")
                    store.delete_key(f"done/{seq - 2}")
            store.set(f"arrive/{seq}/{rank}", "1")
            if store.add(f"arrive/{seq}", 1) >= world:
                store.set(f"done/{seq}", "1")
                return
            store.wait([f"done/{seq}"], datetime.timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
            return
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        try:
            if store.check([f"done/{seq}"]):  # the last rank arrived as the wait gave up
                return
            missing: Optional[list[int]] = self._missing(seq, list(range(world)))
        except Exception as e:
            missing, error = None, f"{type(e).__name__}: {e}"
        tail = "a hung communicator cannot be recovered: the session stops here"
        if missing:
            message = f"gpucomm: {self._ranks(missing)} did not finish {what} within {timeout_s:g} s; {tail}"
            first = next(r for r in range(world) if r not in set(missing))
            for r in missing if rank == first else ():  # one rank tells them; their watchers end them after
                try:  # the grace that lets this report come first
                    store.set(f"abort/{r}", message)
                except Exception:
                    break
        elif missing is None:
            message = (f"gpucomm: {self._me()} lost the job's store ({self._store_address()}) while waiting for "
                       f"every rank to finish {what} ({error}): the rank or launcher that served it (rank 0, or "
                       f"the torchrun agent of node 0) has probably ended; {tail}")
        else:
            message = f"gpucomm: the ranks could not meet to exchange {what} ({error}); {tail}"
        raise self._break(message, what, timeout_s, missing or ())

    def exchange(self, obj: Any, *, what: str, timeout_s: Optional[float] = None,
                 deadline: Optional[float] = None) -> list[Any]:
        """Every rank's ``obj`` (picklable), ordered by rank, once every rank has arrived; ``what`` names
        what a rank that does not arrive by ``deadline`` (``time.monotonic()``; default: ``timeout_s`` from
        now, ``--gpucomm-timeout`` by default) did not finish.  Raises :class:`JobBroken` then, and at once
        when the session is already broken."""
        import torch.distributed as dist

        timeout = self.timeout_s if timeout_s is None else timeout_s
        if self.broken is not None:
            raise JobBroken(self.broken, ranks=(), label=what, timeout_s=timeout)
        if deadline is None:
            deadline = time.monotonic() + timeout
        seq = self._seq
        self._seq += 1
        self.watch(deadline, what, timeout)
        try:
            self._arrive(seq, deadline, what, timeout)
            out: list[Any] = [None] * self.launch.world_size
            try:
                dist.all_gather_object(out, obj, group=self.control)
            except Exception as e:
                raise self._break(f"gpucomm: the control group failed while the ranks exchanged {what} "
                                  f"({type(e).__name__}: {e}); a rank has probably ended; a hung communicator "
                                  "cannot be recovered: the session stops here", what, timeout) from None
            return out
        finally:
            self.watchdog.disarm()

    def watch(self, deadline: float, what: str, timeout_s: float) -> None:
        """Arm the watchdog: this rank ends GRACE_S after ``deadline`` unless ``watchdog.disarm()`` first."""
        self.watchdog.arm(deadline + GRACE_S,
                          f"gpucomm: {self._me()} did not finish {what} within {timeout_s:g} s (and {GRACE_S:g} s "
                          "of grace); a hung rank cannot be recovered: it exits (status 1)")

    def allgather(self, obj: Any, what: str = "a control message") -> list[Any]:
        """Every rank's ``obj``, ordered by rank, over the control group (picklable objects), within
        ``--gpucomm-timeout``; see :meth:`exchange`."""
        return self.exchange(obj, what=what)

    def broadcast(self, obj: Any = None) -> Any:
        """Global rank 0's ``obj`` on every rank (the others' ``obj`` is ignored), over the control group."""
        return self.allgather(obj if self.launch.is_first else None)[0]

    def node_fingerprints(self, fingerprint: Callable[[], dict[str, Any]]) -> dict[int, tuple[str, dict[str, Any]]]:
        """Node -> (host, fingerprint) of every node of the job, each read by the node's local rank 0
        (``fingerprint()`` is called on those ranks only)."""
        la = self.launch
        mine = (la.node_rank, la.host, fingerprint()) if la.local_rank == 0 else None
        return {node: (host, fp) for node, host, fp in (m for m in self.allgather(mine) if m is not None)}

    def executor(self, info: "DeviceInfo") -> "InProcessExecutor":
        """The ``process_group`` fixture's executor: tasks run here, on this rank."""
        if self._executor is None:
            from ..ranks.context import RankContext
            from ..ranks.inprocess import InProcessExecutor

            self.start(info)
            la = self.launch
            ctx = RankContext(rank=la.rank, world_size=la.world_size, local_rank=la.local_rank,
                              backend=self.backend, device=self.device, host=la.host, node_rank=la.node_rank,
                              n_nodes=la.n_nodes)
            self._executor = InProcessExecutor(ctx, self, self.hosts)
        return self._executor

    def layout(self, info: "DeviceInfo") -> "Layout":
        """The node index and local rank of every rank (gathered from every rank once per session: the
        launcher's numbering is checked, not assumed), and their hosts.  Every rank calls it at the same point
        (a test's set-up).  pytest.UsageError when two ranks claim the same local rank of one node."""
        if self._layout is None:
            from ..env.topology import group_layout

            self.start(info)
            every = self.allgather((self.launch.node_rank, self.launch.local_rank))
            try:
                self._layout = group_layout([n for n, _ in every], [k for _, k in every], self.hosts)
            except ValueError as e:
                raise pytest.UsageError(f"gpucomm: {self.launch.launcher} job: {e}") from None
        return self._layout

    def subgroups(self, info: "DeviceInfo", kind: str) -> tuple[list["SubGroup"], Any]:
        """The groups of ``kind`` and this rank's torch.distributed handle of its own group.

        On first use of a kind every rank creates every group of it, in the same order (``new_group`` is
        called by every rank of the default group for every group), with the session's backend and timeout;
        on GPU each is bound to this rank's device, as the default group is.  ValueError with the reason when
        the job's layout has no groups of ``kind`` (see :meth:`~pytest_gpucomm.env.topology.Layout.problem`)."""
        if kind not in self._subgroups:
            import torch
            import torch.distributed as dist

            groups = self.layout(info).groups(kind)
            kwargs: dict[str, Any] = dict(backend=self.backend, timeout=datetime.timedelta(seconds=self.timeout_s))
            if self.backend != "gloo":
                kwargs["device_id"] = torch.device(self.device)
            mine = None
            for g in groups:
                handle = dist.new_group(list(g.ranks), **kwargs)
                if self.launch.rank in g.ranks:
                    mine = handle
            self._subgroups[kind] = (groups, mine)
        return self._subgroups[kind]

    def group_executor(self, info: "DeviceInfo", kind: str) -> "InProcessExecutor":
        """The executor of a ``process_group`` of ``kind`` (``"intra-node"``, ``"inter-node"``): tasks run
        here, on this rank, over its own group of the kind (``ctx.group``, with ``ctx.rank`` and
        ``ctx.world_size`` within it); every rank's outcome is gathered over the control group."""
        if kind not in self._group_executors:
            import dataclasses

            from ..ranks.inprocess import InProcessExecutor

            world = self.executor(info)
            groups, handle = self.subgroups(info, kind)
            mine = next(g for g in groups if self.launch.rank in g.ranks)
            ctx = dataclasses.replace(world.ctx, rank=mine.ranks.index(self.launch.rank), world_size=len(mine.ranks),
                                      group=handle, group_kind=kind, group_ranks=mine.ranks)
            self._group_executors[kind] = InProcessExecutor(ctx, self, self.hosts,
                                                            job_size=self.launch.world_size, subgroups=groups)
        return self._group_executors[kind]

    def _where(self, ranks: Sequence[int]) -> str:
        hosts = sorted({self.hosts[r] for r in ranks if r < len(self.hosts)})
        listed = ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
        return f"rank{'s' if len(ranks) > 1 else ''} {listed}" + (f" (on {', '.join(hosts[:4])})" if hosts else "")

    def agree_on_collection(self, nodeids: Sequence[str]) -> None:
        """Every rank must have collected the same tests in the same order; else every rank stops with a
        pytest.UsageError naming the ranks that differ from rank 0 and the first test where they do.

        Only a digest of each rank's list travels, unless they differ."""
        digest = hashlib.sha256("\n".join(nodeids).encode()).hexdigest()
        digests = self.allgather(digest, what="collecting the tests")
        if all(d == digests[0] for d in digests):
            return
        # every list, to name the first difference
        lists = self.allgather(list(nodeids), what="comparing the collected tests")
        first = lists[0]
        groups: dict[str, list[int]] = {}
        for r, d in enumerate(digests):
            groups.setdefault(d, []).append(r)
        lines = [f"gpucomm: the ranks of this {self.launch.launcher} job collected different tests, so they would "
                 f"wait for each other in different collectives; every rank stops here."]
        lines.append(f"  {self._where(groups.pop(digests[0]))}: {len(first)} tests")
        for ranks in groups.values():
            other = lists[ranks[0]]
            i = next((k for k, (a, b) in enumerate(zip(first, other)) if a != b), min(len(first), len(other)))
            a = repr(first[i]) if i < len(first) else "(no more tests)"
            b = repr(other[i]) if i < len(other) else "(no more tests)"
            lines.append(f"  {self._where(ranks)}: {len(other)} tests; first difference at test {i + 1}: "
                         f"rank 0 has {a}, rank {ranks[0]} has {b}")
        lines.append("  Run the same files, options and -k/-m selection on every rank, with the same plugins.")
        raise pytest.UsageError("\n".join(lines))

    def _rank_where(self, rank: int, device: str) -> str:
        host = self.hosts[rank] if rank < len(self.hosts) else "?"
        return f"rank {rank} ({host}, {device})"

    def agree_on_outcome(self, report: pytest.TestReport) -> None:
        """Make this rank's report of one phase of a test (set-up, call, tear-down) the job's: if the phase
        failed on any rank, it fails on every rank, with each failing rank's message and where it ran (rank,
        host, device); else if it was skipped on some rank, it is skipped on every rank, with that rank's
        reason.  Every rank runs the same phases, since a failed or skipped set-up is agreed before the call.

        A rank whose own report failed keeps its traceback, and gets a "gpucomm ranks" section naming the
        failing ranks; the others get the failing ranks' messages as their own.  A rank that does not finish
        the phase within ``--gpucomm-timeout`` fails it on the others, named (the session is then broken);
        once broken, reports are left as they are."""
        if self.broken is not None:
            return
        mine = (report.outcome, report.longreprtext if report.outcome == "failed" else "",
                report.longrepr if report.outcome == "skipped" else None, getattr(report, "wasxfail", None),
                self.device)
        try:
            every = self.exchange(mine, what=f"the {report.when} of test {report.nodeid}")
        except Exception as e:  # a rank hung or gone, or the control group broken: named in the message
            report.outcome = "failed"
            report.longrepr = str(e) if isinstance(e, JobBroken) else (
                f"gpucomm: the ranks of this {self.launch.launcher} job could not agree on the outcome of this "
                f"test's {report.when}: {type(e).__name__}: {e}")
            return
        failed = [(r, m) for r, m in enumerate(every) if m[0] == "failed"]
        if failed:
            ranks = ", ".join(self._rank_where(r, m[4]) for r, m in failed)
            head = (f"gpucomm: {report.when} failed on {ranks} of this {self.launch.launcher} job of "
                    f"{self.launch.world_size} ranks; it fails on every rank")
            if report.outcome == "failed":
                report.sections.append(("gpucomm ranks", head))
                return
            report.outcome = "failed"
            report.longrepr = "\n\n".join([head] + [f"-- {self._rank_where(r, m[4])}:\n{m[1]}" for r, m in failed])
            return
        skipped = [(r, m) for r, m in enumerate(every) if m[0] == "skipped"]
        if skipped and report.outcome != "skipped":
            r, m = skipped[0]
            where = self._rank_where(r, m[4])
            longrepr = m[2]
            if isinstance(longrepr, tuple) and len(longrepr) == 3:
                reason = f"{longrepr[2]} (skipped on {where}; agreed by every rank)"
                report.longrepr = (longrepr[0], longrepr[1], reason)
            else:
                report.longrepr = (str(report.location[0]), int(report.location[1] or 0) + 1,
                                   f"skipped on {where}; agreed by every rank")
            report.outcome = "skipped"
            if m[3] is not None:
                report.wasxfail = m[3]

    def agree_on_exit_status(self, status: int) -> tuple[int, list[str]]:
        """The job's exit status -- the first rank's (in rank order) that is not 0, else 0 -- so that every
        rank exits with the same code (a failing gate on rank 0, an output it could not write), and a line
        for each rank whose status differs from this one's.  A broken session agrees on nothing: its status
        is 1 (or this rank's, if not 0), as on every rank of a broken job."""
        if self.broken is None:
            try:
                every = [int(s) for s in self.allgather(int(status),
                                                        what="the session (the agreement on the exit status)")]
            except JobBroken as e:
                return (status or 1), [str(e)]
        else:
            return (status or 1), []
        agreed = next((s for s in every if s != 0), 0)
        notes = [f"gpucomm: exit status {s} on {self._where([r])} (this rank: {status}); every rank of the job "
                 f"exits with {agreed}" for r, s in enumerate(every) if s != status]
        return agreed, notes

    def _release_fd(self) -> None:
        """Close the watchdog's copy of stderr (once it can no longer fire)."""
        if self.watchdog.fd > 2:
            try:
                os.close(self.watchdog.fd)
            except OSError:  # pragma: no cover
                pass
            self.watchdog.fd = 2

    def close(self) -> None:
        """Wait for every rank (bounded by the timeout), then leave the process groups.  A broken session
        does neither (a rank it waits for may never come, and destroying a communicator a hung rank is in may
        hang): it aborts a GPU communicator and lets the process end; its watchdog's END_S bound stays."""
        if not self._started:
            self._release_fd()
            return
        import torch.distributed as dist

        self._started = False
        self._stop_watcher()
        if self.broken is not None:
            if self.backend != "gloo":
                try:
                    from torch.distributed.distributed_c10d import _abort_process_group

                    _abort_process_group()
                except Exception:  # pragma: no cover - an older torch, or already torn down
                    pass
            return
        self.watch(time.monotonic() + self.timeout_s, "the end of the session (the last barrier)", self.timeout_s)
        try:
            dist.barrier(group=self.control)
        except Exception:  # pragma: no cover - a rank gone: leave anyway
            pass
        self.watchdog.stop()
        self._release_fd()
        if self._owns_default and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # pragma: no cover - best effort at the end of the session
                pass
