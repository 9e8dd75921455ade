"""The rank pools of the session: the ``process_group`` fixture's worlds of worker processes (one pool per
world size, kept for the session), the folds' pools (``--gpucomm-folds``), and the zygote that forks their
workers (``GPUCOMM_RANK_START=fork``).

In launched mode the ``process_group`` fixture's groups are the job's instead
(:class:`~.launched.job.JobGroups`); both answer :class:`Groups`.  Nothing starts until a test asks for a
group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional, Protocol

import pytest

from ..vocab import RANK_START_TIMEOUT_S
from .devices import Devices

if TYPE_CHECKING:
    from ..ranks.pool import RankPool
    from ..ranks.spawn import Zygote
    from .group import ProcessGroup

__all__ = ["Groups", "RankPools", "is_world"]


class Groups(Protocol):
    """Where the ``process_group`` fixture's groups come from: :class:`RankPools`, or a launched job's."""

    @property
    def multi_node(self) -> bool:
        """Whether the groups span more than one node (a launched job of several nodes)."""
        ...

    def group_problem(self, kind: str) -> Optional[str]:
        """Why the groups of ``kind`` cannot be had (a skip reason), or None."""
        ...

    def group(self, world: int, timeout_s: Optional[float] = None, label: str = "",
              kind: str = "world") -> "ProcessGroup":
        """The process group of ``world`` ranks of ``kind``."""
        ...


def is_world(kind: str) -> bool:
    """Whether ``kind`` (``topology.GROUP_KINDS``) is the whole world; pytest.UsageError for an unknown kind."""
    from ..env.topology import WORLD, check_group_kind

    try:
        check_group_kind(kind, "process_group")
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    return kind == WORLD


class RankPools:
    """The session's rank pools: started at first use, kept for the session, closed at its end.

    ``timeout_s``: a group's timeout where its test gives none (--gpucomm-timeout).  ``forks``: whether the
    pools' workers may be forked from a zygote (not in launched mode, where only the gate's fresh re-measures of
    copies start pools)."""

    multi_node = False  # the pools run on this host

    def __init__(self, timeout_s: float, devices: Devices, forks: bool = True) -> None:
        self.timeout_s = timeout_s
        self.devices = devices
        self.forks = forks
        self.pools: dict[int, "RankPool"] = {}  # world size -> its pool
        self.fold_pools: dict[tuple[int, int], "RankPool"] = {}  # (world size, fold) -> its pool (fold_group)
        self.zygote: Optional["Zygote"] = None  # forks every pool's workers (GPUCOMM_RANK_START=fork)

    def group_problem(self, kind: str) -> Optional[str]:
        """Why the groups of ``kind`` cannot be had (a skip reason): a pool has only its world.
        pytest.UsageError for an unknown kind."""
        if is_world(kind):
            return None
        return (f"group kind {kind!r} needs a job launched on more than one node (torchrun, srun, mpirun); "
                "this session runs a rank pool on one host")

    def group(self, world: int, timeout_s: Optional[float] = None, label: str = "",
              kind: str = "world") -> "ProcessGroup":
        """The process group of ``world`` ranks: one pool of workers per world size and session;
        pytest.UsageError when it cannot be had (``Devices.world_problem`` and :meth:`group_problem` say
        why)."""
        from .group import ProcessGroup

        problem = self.devices.world_problem(world) or self.group_problem(kind)
        if problem:
            raise pytest.UsageError(problem)
        info = self.devices.info
        if world not in self.pools:
            self.pools[world] = self.new_pool(world)
        return ProcessGroup(self.pools[world], info.backend, timeout_s or self.timeout_s, label)

    def fold_group(self, group: "ProcessGroup", i: int) -> "ProcessGroup":
        """The i-th other process group (i >= 1) of ``group``'s world: a pool of its own, started at its first
        use and kept for the session, in which the gate measures a case's folds (``--gpucomm-folds``)."""
        from .group import ProcessGroup

        key = (group.world_size, i)
        if key not in self.fold_pools:
            self.fold_pools[key] = self.new_pool(group.world_size)
        return ProcessGroup(self.fold_pools[key], group.backend, group.timeout_s, f"{group.label} (fold {i + 1})")

    def new_pool(self, world: int, env: Optional[Mapping[str, Optional[str]]] = None) -> "RankPool":
        """A ranks.RankPool of ``world`` workers with the session's backend, device type and worker
        environment (not started yet); ``env`` changes that environment (a name mapped to None is unset), and
        then the workers are new processes, never forks of the zygote, whose torch read the session's."""
        from ..ops.collectives import worker_env
        from ..ranks import RankPool

        info = self.devices.info
        workers: dict[str, Optional[str]] = {**worker_env(info.backend), **(env or {})}
        return RankPool(world, backend=info.backend, device=info.torch_device_type, env=workers,
                        start_timeout_s=self._start_timeout_s, zygote=None if env else self.session_zygote())

    @property
    def _start_timeout_s(self) -> float:
        return max(RANK_START_TIMEOUT_S, self.timeout_s)

    def session_zygote(self) -> Optional["Zygote"]:
        """The session's ranks.spawn.Zygote, made at the first pool (its process starts with that pool's
        start: a session that collects a process_group test may still start no pool); None where
        GPUCOMM_RANK_START=exec or in launched mode."""
        from ..ops.collectives import worker_env
        from ..ranks.spawn import Zygote, rank_start

        if self.zygote is None and self.forks and rank_start() == "fork":
            backend = self.devices.info.backend
            self.zygote = Zygote(worker_env(backend), backend, start_timeout_s=self._start_timeout_s)
        return self.zygote

    def close(self) -> None:
        """Stop every pool, then the zygote (the workers it forked die with it)."""
        for pool in [*self.pools.values(), *self.fold_pools.values()]:
            try:
                pool.close()
            except Exception:  # pragma: no cover - best effort at teardown
                pass
        self.pools.clear()
        self.fold_pools.clear()
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None
