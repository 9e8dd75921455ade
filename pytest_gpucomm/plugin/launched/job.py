"""Launched mode's job: this pytest process is one rank of a job started by torchrun, srun or mpirun.

:class:`LaunchedSession` holds what the session shares with the other ranks:

* one default process group for the session (NCCL/RCCL bound to the GPU of the local rank on GPU, gloo on
  CPU; gloo without touching a device where no gpucomm test is collected, for the agreements alone) and a
  gloo group for control messages, created once the tests are collected and destroyed at the end of the
  session (every rank then ignores SIGTERM to its end: the launcher that stops a node's ranks as soon as one
  exits would otherwise end them with another status than the job's); the ranks meet first in the
  rendezvous' store (:mod:`.arrival`: a rank that ends before it joins is named at once), within
  ``--gpucomm-timeout`` but at least :data:`JOIN_MIN_S` (launchers start ranks unevenly), which is also the
  groups' timeout; what bounds a hung rank is the deadline of each exchange (:mod:`.exchange`, the
  session's ``channel``);
* the executor of the ``process_group`` fixture (:class:`~pytest_gpucomm.ranks.inprocess.InProcessExecutor`);
* the job's layout (the node and local rank of every rank, :meth:`LaunchedSession.layout`) and the sub-groups
  of the topology-aware suites (one per node, one per local rank across the nodes:
  :meth:`LaunchedSession.group_executor`), made by every rank on first use;
* every node's fingerprint (:meth:`LaunchedSession.join`);
* what the other ranks need to learn of this rank's death: the process that stands for it, watched by the
  ranks on its machine, and where its supervising parent writes (:mod:`.deaths`, :mod:`.supervise`).

:class:`JobGroups` hands the ``process_group`` fixture the job's groups; :class:`LaunchShape` is the job's
section of the JSON report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import secrets
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional

import pytest

from ...env.launch import Launch
from ...vocab import RANK_START_TIMEOUT_S
from ..sigterm import ignore_from_now
from ...ranks.errors import JobBroken
from .arrival import Meeting, arrive, depart, wait_for_all
from .deaths import ident
from .exchange import JobExchange
from .supervise import arrived, departed, joined

if TYPE_CHECKING:
    from ...env.hardware import DeviceInfo
    from ...env.topology import Layout, SubGroup
    from ...ranks.inprocess import InProcessExecutor
    from ..devices import Devices
    from ..group import ProcessGroup
    from ..settings import Settings

__all__ = ["LaunchedSession", "JobGroups", "LaunchShape", "JobNode", "JOIN_MIN_S"]

#: the rendezvous (and the first exchange, where every rank gives its host) waits at least this long: as a
#: rank pool's start, at least the vocabulary's start timeout
JOIN_MIN_S = RANK_START_TIMEOUT_S


class LaunchedSession:
    """This rank's side of a launched job; see the module docstring.  ``channel`` is the job's control
    exchange (:class:`~.exchange.JobExchange`); ``nodes`` maps node -> (host, fingerprint) of every node of
    the job, once :meth:`join` has read them."""

    def __init__(self, launch: Launch, timeout_s: float) -> None:
        self.launch = launch
        self.timeout_s = timeout_s
        self.backend = ""
        self.channel = JobExchange(launch, timeout_s)
        self.nodes: dict[int, tuple[str, dict[str, object]]] = {}
        self._executor: Optional["InProcessExecutor"] = None
        self._started = False
        self._owns_default = False
        self._layout: Optional["Layout"] = None
        self._subgroups: dict[str, tuple[list["SubGroup"], Any]] = {}  # kind -> (every group, this rank's handle)
        self._group_executors: dict[str, "InProcessExecutor"] = {}
        self._arrived = False  # this rank came to the ranks' meeting (.arrival), to join or to say it will not

    @property
    def started(self) -> bool:
        return self._started

    def meeting(self) -> Meeting:
        """Where this rank meets the others before the job's process groups are made (:mod:`.arrival`)."""
        return Meeting.of(self.launch, max(self.timeout_s, JOIN_MIN_S))

    @property
    def meets(self) -> bool:
        """Whether the ranks meet first (:mod:`.arrival`), not under torchrun with restarts
        (:meth:`.arrival.Meeting.why_not`): there they join through torch's rendezvous alone."""
        return not Meeting.why_not(self.launch)

    def depart(self, how: Optional[str], say: Optional[Callable[[str], None]] = None) -> bool:
        """This rank ends its session without having joined the job, ``how``: the others learn it at once
        (:func:`.arrival.depart`; where this rank serves the rendezvous, it stays until every rank has come, and
        ``say`` is told a line for the user when that takes a while).
        Once per session, and not after this rank came to the meeting; whether the news was written.  ``how``
        None: nobody waits for this rank (every rank ends alike): only its supervising parent is told to say
        nothing."""
        if self._arrived or self._started:
            return False
        self._arrived = True
        departed()
        return how is not None and self.meets and depart(self.meeting(), how, say=say)

    def start(self, info: Optional["DeviceInfo"]) -> None:
        """Join the job's process groups (once per session); ``info`` None (no gpucomm test collected): the
        control group alone, gloo, with no device touched, for the agreements on the tests' outcomes.  Raises
        pytest.UsageError when this rank cannot (its GPU is missing, or a process group already exists in this
        process), :class:`JobBroken` when a rank does not arrive."""
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
        self._choose_device(info)
        if la.loopback and "GLOO_SOCKET_IFNAME" not in os.environ:
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # every rank on this host: gloo's sockets on loopback too
        # the rendezvous waits for ranks that a launcher starts unevenly (nodes booting the interpreter at
        # different speeds): at least JOIN_MIN_S; hung ranks are bounded by the exchanges' own deadlines
        join_s = max(self.timeout_s, JOIN_MIN_S)
        timeout = datetime.timedelta(seconds=join_s)
        kwargs = self._group_kwargs(dist, join_s, timeout)
        if self.backend != "gloo":
            kwargs["device_id"] = torch.device(self.channel.device)  # bind the communicator to this rank's GPU
        # a store's or the network's error is a rank gone after the meeting, named; a backend's (NCCL) goes on whole
        store_errors = tuple(getattr(dist, n) for n in ("DistStoreError", "DistNetworkError") if hasattr(dist, n))
        try:
            dist.init_process_group(**kwargs)
        except store_errors as e:
            raise JobBroken(f"gpucomm: {la.launcher} rank {la.rank} ({la.host}) could not make the job's process "
                            f"group ({type(e).__name__}: {' '.join(str(e).split())}); the session stops here",
                            ranks=(), label="joining the job", timeout_s=join_s) from None
        self._owns_default = True
        self._connect_control(dist, join_s, timeout)

    def _choose_device(self, info: Optional["DeviceInfo"]) -> None:
        """This rank's backend and device (its local rank's GPU, made current); pytest.UsageError where the
        node has no GPU for it."""
        la, channel = self.launch, self.channel
        if info is None:
            self.backend, channel.device = "gloo", f"local rank {la.local_rank}"
        elif info.kind == "gpu":
            import torch

            if la.local_rank >= info.count:
                raise pytest.UsageError(
                    f"gpucomm: {la.launcher} local rank {la.local_rank} on {la.host} has no GPU of its own: "
                    f"{info.count} visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r})")
            self.backend, channel.device = info.backend, f"{info.torch_device_type}:{la.local_rank}"
            torch.cuda.set_device(la.local_rank)
        else:
            self.backend, channel.device = "gloo", "cpu"

    def _group_kwargs(self, dist: Any, join_s: float, timeout: datetime.timedelta) -> dict[str, object]:
        """``init_process_group``'s arguments: where this job meets (the rendezvous' store, where the ranks
        meet first, else the launcher's ``env://`` or ``tcp://``)."""
        la = self.launch
        # the ranks meet first in the rendezvous' store (.arrival): a rank that ends before it joins is named at
        # once, instead of the others waiting out the join's timeout inside init_process_group
        self._arrived = True  # from here this rank's end is not a departure it announces itself
        arrived()  # its supervising parent still does, should it die before it joined
        kwargs: dict[str, object] = dict(backend=self.backend, rank=la.rank, world_size=la.world_size, timeout=timeout)
        if self.meets:
            started = time.monotonic()
            meeting = self.meeting()
            try:
                rendezvous = meeting.connect()
                arrive(rendezvous, meeting)
                wait_for_all(rendezvous, meeting, started + join_s, started)
            except JobBroken:
                departed()  # the others know, or learned already: nothing for the parent to tell
                raise
            rendezvous.set_timeout(timeout)
            # the default group's keys under torch's own prefix, as init_process_group's rendezvous puts them
            kwargs["store"] = dist.PrefixStore("default_pg", rendezvous)
        else:
            host = f"[{la.master_addr}]" if ":" in la.master_addr else la.master_addr
            kwargs["init_method"] = "env://" if la.launcher == "torchrun" else f"tcp://{host}:{la.master_port}"
        return kwargs

    def _connect_control(self, dist: Any, join_s: float, timeout: datetime.timedelta) -> None:
        """The control messages' channel, in a gloo group of its own (on CPU too): they never queue behind a
        test's ops; their keys under the job's own prefix in the rendezvous' store, where a rank's supervising
        parent finds them.  Then every rank's host, device and identity, exchanged once."""
        from torch.distributed.distributed_c10d import _get_default_store

        la, channel = self.launch, self.channel
        store = _get_default_store()
        if la.is_first:
            store.set("gpucomm/namespace", f"gpucomm/{secrets.token_hex(6)}")
        namespace = store.get("gpucomm/namespace").decode()
        raw = _innermost(store)
        channel.connect(dist.new_group(backend="gloo", timeout=timeout), dist.PrefixStore(namespace, raw))
        self._started = True
        every = channel.exchange((la.host, channel.device, ident(), la.node_rank), what="joining the job",
                                 timeout_s=join_s)
        channel.hosts = tuple(h for h, _, _, _ in every)
        channel.devices = tuple(d for _, d, _, _ in every)
        channel.nodes = tuple(n for _, _, _, n in every)
        channel.watch_peers([i for _, _, i, _ in every])
        if getattr(raw, "host", None) and getattr(raw, "port", None):
            joined(raw.host, int(raw.port), namespace, la.rank, la.world_size)

    def join(self, fingerprint: Callable[[], dict[str, object]]) -> dict[int, tuple[str, dict[str, object]]]:
        """Read every node's fingerprint into :attr:`nodes` (node -> (host, fingerprint)) and return them, each
        read by the node's local rank 0 (``fingerprint()`` is called on those ranks only)."""
        la = self.launch
        mine = (la.node_rank, la.host, fingerprint()) if la.local_rank == 0 else None
        self.nodes = {node: (host, fp) for node, host, fp in (m for m in self.channel.allgather(mine)
                                                              if m is not None)}
        return self.nodes

    def executor(self, info: "DeviceInfo") -> "InProcessExecutor":
        """The ``process_group`` fixture's executor: tasks run here, on this rank."""
        if self._executor is None:
            from ...ranks.context import RankContext
            from ...ranks.inprocess import InProcessExecutor

            self.start(info)
            la = self.launch
            ctx = RankContext(rank=la.rank, world_size=la.world_size, local_rank=la.local_rank,
                              backend=self.backend, device=self.channel.device, host=la.host,
                              node_rank=la.node_rank, n_nodes=la.n_nodes)
            self._executor = InProcessExecutor(ctx, self.channel, self.channel.hosts)
        return self._executor

    @contextlib.contextmanager
    def environment_executor(self, info: "DeviceInfo", env: Mapping[str, Optional[str]]
                             ) -> Iterator["InProcessExecutor"]:
        """An executor over a new process group of the whole job, made after this rank's environment took
        ``env`` (a name mapped to None is unset): the cause test's re-measure, where every rank sets the
        variables back together.  The communication libraries read their variables when a communicator is
        made, which the new group does at its first collective.  Every rank enters it at the same point; the
        group is destroyed and the environment restored on the way out."""
        import torch.distributed as dist

        from ...ranks.inprocess import InProcessExecutor

        base = self.executor(info)
        saved = {k: os.environ.get(k) for k in env}
        _apply(env)
        group = None
        try:
            group = dist.new_group(ranks=list(range(self.launch.world_size)), backend=self.backend)
            ctx = dataclasses.replace(base.ctx, group=group, group_ranks=tuple(range(self.launch.world_size)))
            yield InProcessExecutor(ctx, self.channel, self.channel.hosts)
        finally:
            if group is not None:
                dist.destroy_process_group(group)
            _apply(saved)

    def layout(self, info: "DeviceInfo") -> "Layout":
        """The node index and local rank of every rank (gathered from every rank once per session: the
        launcher's numbering is checked, not assumed), and their hosts.  Every rank calls it at the same point
        (a test's set-up).  pytest.UsageError when two ranks claim the same local rank of one node."""
        if self._layout is None:
            from ...env.topology import group_layout

            self.start(info)
            every = self.channel.allgather((self.launch.node_rank, self.launch.local_rank))
            try:
                self._layout = group_layout([n for n, _ in every], [k for _, k in every], self.channel.hosts)
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
            kwargs: dict[str, object] = dict(backend=self.backend, timeout=datetime.timedelta(seconds=self.timeout_s))
            if self.backend != "gloo":
                kwargs["device_id"] = torch.device(self.channel.device)
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

            from ...ranks.inprocess import InProcessExecutor

            world = self.executor(info)
            groups, handle = self.subgroups(info, kind)
            mine = next(g for g in groups if self.launch.rank in g.ranks)
            ctx = dataclasses.replace(world.ctx, rank=mine.ranks.index(self.launch.rank), world_size=len(mine.ranks),
                                      group=handle, group_kind=kind, group_ranks=mine.ranks)
            self._group_executors[kind] = InProcessExecutor(ctx, self.channel, self.channel.hosts,
                                                            job_size=self.launch.world_size, subgroups=groups)
        return self._group_executors[kind]

    def node_lines(self) -> list[str]:
        """Header lines of a job across nodes: its layout, and how its nodes differ from each other."""
        if not self.nodes:
            return []
        from ...env.fingerprint import node_differences

        la = self.launch
        differ = node_differences(self.nodes)
        lines = [f"gpucomm nodes: {la.n_nodes} x {la.local_world_size} ranks"
                 + ("; every node has the same environment" if not differ else "; the nodes differ:")]
        return lines + [f"gpucomm nodes differ: {d}" for d in differ]

    def shape(self, layout: str) -> "LaunchShape":
        """The job's shape for the JSON report; ``layout`` is the session's (``State.layout``)."""
        from ...env.fingerprint import node_differences

        la = self.launch
        return LaunchShape(launcher=la.launcher, world_size=la.world_size, n_nodes=la.n_nodes,
                           local_world_size=la.local_world_size, layout=layout or None,
                           master_addr=la.master_addr, master_port=la.master_port,
                           hosts=sorted(set(self.channel.hosts)),
                           nodes=[JobNode(n, h, fp) for n, (h, fp) in sorted(self.nodes.items())],
                           node_differences=node_differences(self.nodes))

    def close(self) -> None:
        """Wait for every rank (bounded by the timeout), then leave the process groups.  A broken session
        does neither (a rank it waits for may never come, and destroying a communicator a hung rank is in may
        hang): it aborts a GPU communicator and lets the process end; its watchdog's END_S bound stays."""
        if not self._started:
            self.channel.release_fd()
            return
        import torch.distributed as dist

        self._started = False
        if not self.channel.close():  # broken
            if self.backend != "gloo":
                try:
                    from torch.distributed.distributed_c10d import _abort_process_group

                    _abort_process_group()
                except Exception:  # pragma: no cover - an older torch, or already torn down
                    pass
            return
        ignore_from_now()  # every rank has its status: the launcher's SIGTERM to a node's ranks is not theirs
        if self._owns_default and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # pragma: no cover - best effort at the end of the session
                pass


def _innermost(store: Any) -> Any:
    """The store under a chain of PrefixStores (the rendezvous' TCPStore)."""
    for _ in range(16):
        under = getattr(store, "underlying_store", None)
        if under is None:
            break
        store = under
    return store


@dataclass(frozen=True)
class JobNode:
    """One node of the job in the JSON report's "launch" section."""

    node: int
    host: str
    fingerprint: dict[str, object]


@dataclass(frozen=True)
class LaunchShape:
    """The job's shape: the JSON report's "launch" section (launched mode)."""

    launcher: str
    world_size: int
    n_nodes: int
    local_world_size: int
    layout: Optional[str]  # "<nodes>x<ranks per node>" across nodes, else None
    master_addr: str
    master_port: int
    hosts: list[str]
    nodes: list[JobNode]
    node_differences: list[str]

    def to_dict(self) -> dict[str, object]:
        """As the JSON report holds it."""
        return asdict(self)


def _apply(env: Mapping[str, Optional[str]]) -> None:
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class JobGroups:
    """Launched mode's process groups for the ``process_group`` fixture: the job's world, or in a job of
    several nodes its groups of a kind (``"intra-node"``, ``"inter-node"``), each rank in its own (see
    :mod:`pytest_gpucomm.env.topology`).  The pool mode's counterpart is :class:`~..pools.RankPools`."""

    def __init__(self, session: LaunchedSession, devices: "Devices", settings: "Settings") -> None:
        self.session = session
        self.devices = devices
        self.settings = settings

    @property
    def multi_node(self) -> bool:
        """Whether the job has more than one node (from the launcher's variables: known at collection, the
        same on every rank)."""
        return self.session.launch.n_nodes > 1

    def group_problem(self, kind: str) -> Optional[str]:
        """Why the groups of ``kind`` cannot be had in this job (a skip reason), or None.  In a job of several
        nodes this gathers the job's layout: every rank calls it at the same point.  pytest.UsageError for an
        unknown kind."""
        from ..pools import is_world

        if is_world(kind):
            return None
        if not self.multi_node:
            return (f"group kind {kind!r} needs a job of more than one node; "
                    f"this {self.session.launch.launcher} job has 1")
        return self.session.layout(self.devices.info).problem(kind)

    def group(self, world: int, timeout_s: Optional[float] = None, label: str = "",
              kind: str = "world") -> "ProcessGroup":
        """The job's process group of ``kind``: tasks run here, on every rank; pytest.UsageError when it
        cannot be had (:meth:`group_problem` and ``Devices.world_problem`` say why)."""
        from ..group import ProcessGroup

        problem = self.devices.world_problem(world) or self.group_problem(kind)
        if problem:
            raise pytest.UsageError(problem)
        info = self.devices.info
        executor = self.session.executor(info) if kind == "world" else self.session.group_executor(info, kind)
        return ProcessGroup(executor, executor.backend, timeout_s or self.settings.timeout_s, label)

    @contextlib.contextmanager
    def group_with_env(self, group: "ProcessGroup", env: Mapping[str, Optional[str]]) -> Iterator["ProcessGroup"]:
        """``group``'s world in a new process group whose ranks took ``env`` (the cause test's: every rank sets
        the variables back together; :meth:`LaunchedSession.environment_executor`)."""
        from ..group import ProcessGroup

        with self.session.environment_executor(self.devices.info, env) as executor:
            yield ProcessGroup(executor, executor.backend, group.timeout_s, f"{group.label} (cause test)")
