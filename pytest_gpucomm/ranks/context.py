"""What a task function gets to know about the rank it runs on.

This module imports nothing heavy (stdlib only) so that task modules and the
worker can both share it.

A *task* is a plain function ``fn(ctx: RankContext, **kwargs) -> object`` named
by a ``"module:function"`` string (``"module:Class.attr"`` also works). It
runs on every rank; the controller receives the per-rank return values
ordered by rank. Return values must be picklable; prefer plain Python values
(convert tensors with ``.tolist()`` / ``.item()`` or move them to CPU).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["RankContext", "load_task"]


@dataclass(frozen=True)
class RankContext:
    """Identity of the calling rank inside its process group.

    Attributes:
        rank: rank in the group the task runs over: the global rank in the default process group, unless
            ``group`` is set (launched mode, a sub-group kind), then the rank within ``group``.
        world_size: number of ranks in that group.
        local_rank: rank within the node (selects the GPU).
        backend: torch.distributed backend, e.g. ``"gloo"`` or ``"nccl"``.
        device: torch device string for this rank, e.g. ``"cpu"`` or ``"cuda:1"``.
        host: the host this rank runs on (launched mode; ``""`` in a pool, where every rank is on this host).
        node_rank, n_nodes: this rank's node and the number of nodes (0 and 1 in a pool).
        group: the torch.distributed process group to pass as ``group=`` to every call (None: the default
            group).  Set in launched mode for a sub-group kind; never pickled there.
        group_kind: ``"world"``, ``"intra-node"`` or ``"inter-node"`` (see :mod:`pytest_gpucomm.env.topology`).
        group_ranks: the global ranks of ``group``, ordered by group rank (``()``: the whole default group);
            torch.distributed's ``src``, ``dst`` and peers are global ranks: see :meth:`global_rank_of`.
    """

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: str
    host: str = ""
    node_rank: int = 0
    n_nodes: int = 1
    group: Optional[ProcessGroup] = field(default=None, compare=False, repr=False)
    group_kind: str = "world"
    group_ranks: tuple[int, ...] = ()

    @property
    def is_first(self) -> bool:
        """True on rank 0 (of the group)."""
        return self.rank == 0

    def global_rank_of(self, group_rank: int) -> int:
        """The global rank of ``group_rank`` of this context's group."""
        return self.group_ranks[group_rank] if self.group_ranks else group_rank

    @property
    def global_rank(self) -> int:
        """This rank's global rank in the default process group."""
        return self.global_rank_of(self.rank)


def load_task(spec: str) -> Callable[..., object]:
    """Import and return the callable named by ``"module:function"``.

    Raises:
        ValueError: when ``spec`` is not of the form ``"module:function"``.
        ImportError / AttributeError: when the module or attribute is missing.
        TypeError: when the named object is not callable.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"task must be given as 'module:function', got {spec!r}")
    obj: object = importlib.import_module(module_name)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(
                f"task {spec!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    if not callable(obj):
        raise TypeError(f"task {spec!r} is not callable (got {type(obj).__name__})")
    return obj
