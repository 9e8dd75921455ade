"""Launched mode: this pytest process is one rank of a job started by torchrun, srun or mpirun.

:class:`LaunchedSession` holds what the session shares with the other ranks:

* one default process group for the session (NCCL/RCCL bound to the GPU of the local rank on GPU, gloo on
  CPU) and a gloo group for control messages, both with ``--gpucomm-timeout`` as their timeout, created
  when first needed (after collection) and destroyed at the end of the session;
* the executor of the ``process_group`` fixture (:class:`~pytest_gpucomm.ranks.inprocess.InProcessExecutor`);
* the job's layout (the node and local rank of every rank, :meth:`LaunchedSession.layout`) and the sub-groups
  of the topology-aware suites (one per node, one per local rank across the nodes:
  :meth:`LaunchedSession.group_executor`), made by every rank on first use;
* the agreement on the collected tests (:meth:`LaunchedSession.agree_on_collection`), on each test's
  outcome (:meth:`LaunchedSession.agree_on_outcome`) and on the session's exit status
  (:meth:`LaunchedSession.agree_on_exit_status`).

:func:`diverging_options` names the options that would make the ranks run different tests.

Hooks for the later parts of issue 12: :meth:`LaunchedSession.allgather` is the one way of exchanging
control messages (the gate's decisions, later); the hosts of every rank are known
after :meth:`LaunchedSession.start` (failure messages, per-node sections).
"""

from __future__ import annotations

import datetime
import hashlib
import os
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import pytest

from .launch import Launch

if TYPE_CHECKING:
    from .hardware import DeviceInfo
    from .ranks.inprocess import InProcessExecutor
    from .topology import Layout, SubGroup

__all__ = ["LaunchedSession", "diverging_options", "XDIST_REFUSAL"]

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


class LaunchedSession:
    """This rank's side of a launched job; see the module docstring."""

    def __init__(self, launch: Launch, timeout_s: float) -> None:
        self.launch = launch
        self.timeout_s = timeout_s
        self.backend = ""
        self.device = ""
        self.hosts: tuple[str, ...] = ()
        self.control: Any = None  # the gloo group of control messages
        self._executor: Optional["InProcessExecutor"] = None
        self._started = False
        self._owns_default = False
        self._layout: Optional["Layout"] = None
        self._subgroups: dict[str, tuple[list["SubGroup"], Any]] = {}  # kind -> (every group, this rank's handle)
        self._group_executors: dict[str, "InProcessExecutor"] = {}

    @property
    def started(self) -> bool:
        return self._started

    def start(self, info: "DeviceInfo") -> None:
        """Join the job's process groups (once per session).  Raises pytest.UsageError when this rank cannot
        (its GPU is missing, or a process group already exists in this process)."""
        if self._started:
            return
        import torch
        import torch.distributed as dist

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
        timeout = datetime.timedelta(seconds=self.timeout_s)
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
        self._started = True
        self.hosts = tuple(self.allgather(la.host))

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, ordered by rank, over the control group (picklable objects)."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.launch.world_size
        dist.all_gather_object(out, obj, group=self.control)
        return out

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
            from .ranks.context import RankContext
            from .ranks.inprocess import InProcessExecutor

            self.start(info)
            la = self.launch
            ctx = RankContext(rank=la.rank, world_size=la.world_size, local_rank=la.local_rank,
                              backend=self.backend, device=self.device, host=la.host, node_rank=la.node_rank,
                              n_nodes=la.n_nodes)
            self._executor = InProcessExecutor(ctx, self.control, self.hosts)
        return self._executor

    def layout(self, info: "DeviceInfo") -> "Layout":
        """The node index and local rank of every rank (gathered from every rank once per session: the
        launcher's numbering is checked, not assumed), and their hosts.  Every rank calls it at the same point
        (a test's set-up).  pytest.UsageError when two ranks claim the same local rank of one node."""
        if self._layout is None:
            from .topology import group_layout

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
        the job's layout has no groups of ``kind`` (see :meth:`~pytest_gpucomm.topology.Layout.problem`)."""
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

            from .ranks.inprocess import InProcessExecutor

            world = self.executor(info)
            groups, handle = self.subgroups(info, kind)
            mine = next(g for g in groups if self.launch.rank in g.ranks)
            ctx = dataclasses.replace(world.ctx, rank=mine.ranks.index(self.launch.rank), world_size=len(mine.ranks),
                                      group=handle, group_kind=kind, group_ranks=mine.ranks)
            self._group_executors[kind] = InProcessExecutor(ctx, self.control, self.hosts,
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
        digests = self.allgather(digest)
        if all(d == digests[0] for d in digests):
            return
        lists = self.allgather(list(nodeids))  # they differ: every list, to name the first difference
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
        failing ranks; the others get the failing ranks' messages as their own."""
        mine = (report.outcome, report.longreprtext if report.outcome == "failed" else "",
                report.longrepr if report.outcome == "skipped" else None, getattr(report, "wasxfail", None),
                self.device)
        try:
            every = self.allgather(mine)
        except Exception as e:  # a rank gone or the control group broken: the test cannot be agreed on
            report.outcome = "failed"
            report.longrepr = (f"gpucomm: the ranks of this {self.launch.launcher} job could not agree on the "
                               f"outcome of this test's {report.when}: {type(e).__name__}: {e}")
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
                report.wasxfail = m[3]  # type: ignore[attr-defined]

    def agree_on_exit_status(self, status: int) -> tuple[int, list[str]]:
        """The job's exit status -- the first rank's (in rank order) that is not 0, else 0 -- so that every
        rank exits with the same code (a failing gate on rank 0, an output it could not write), and a line
        for each rank whose status differs from this one's."""
        every = [int(s) for s in self.allgather(int(status))]
        agreed = next((s for s in every if s != 0), 0)
        notes = [f"gpucomm: exit status {s} on {self._where([r])} (this rank: {status}); every rank of the job "
                 f"exits with {agreed}" for r, s in enumerate(every) if s != status]
        return agreed, notes

    def close(self) -> None:
        """Wait for every rank (bounded by the timeout), then leave the process groups."""
        if not self._started:
            return
        import torch.distributed as dist

        self._started = False
        try:
            dist.barrier(group=self.control)
        except Exception:  # pragma: no cover - a rank gone: leave anyway
            pass
        if self._owns_default and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # pragma: no cover - best effort at the end of the session
                pass
