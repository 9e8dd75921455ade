"""What a collective op is, before any op: :class:`CollectiveOp`, the base class each collective of
:mod:`.collectives` subclasses (its buffers, input fill, expected result and torch.distributed call, per rank
with torch passed in; its busbw factor, its forms, whether S is split among the ranks, its nccl-tests
counterpart), the :class:`Shape` of one rank's buffers it is given, and the input values every op starts
from (:func:`small_pattern`).

Imports no torch: the per-rank methods get it passed in.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Callable, ClassVar, NamedTuple, Optional

if TYPE_CHECKING:
    from torch import dtype as DType, Tensor
    from torch.distributed import ProcessGroup

__all__ = ["IN_PLACE", "OUT_OF_PLACE", "Shape", "small_pattern", "triangular", "CollectiveOp"]

IN_PLACE, OUT_OF_PLACE = "in_place", "out_of_place"


class Shape(NamedTuple):
    """One rank's view of an op's buffers: ``count`` elements make S; ``chunk`` is a rank's share of them
    (``count / world`` for split ops, else ``count``).  ``rank`` and ``world`` are within the group the op
    runs over: ``group`` (a torch.distributed process group; None: the default group), whose global ranks,
    ordered by group rank, are ``ranks`` (``()``: the default group's)."""

    count: int  # type: ignore[assignment]  # the field shadows tuple.count on purpose: nccl-tests' name
    chunk: int
    rank: int
    world: int
    group: Optional[ProcessGroup] = None
    ranks: tuple[int, ...] = ()

    def peer(self, group_rank: int) -> int:
        """The global rank of ``group_rank``: torch.distributed's ``src``, ``dst`` and peers are global."""
        return self.ranks[group_rank] if self.ranks else group_rank


def small_pattern(torch: ModuleType, n: int, device: str, dtype: DType) -> Tensor:
    """1, 2, 3, 1, 2, 3, ...: small integers, exact in every dtype, no zeros."""
    return (torch.arange(n, device=device, dtype=torch.int64) % 3 + 1).to(dtype)


def triangular(n: int) -> int:
    """1 + 2 + ... + n: the sum over the ranks of inputs scaled by rank + 1."""
    return n * (n + 1) // 2


class CollectiveOp:
    """One collective, defined once: everything the bench, the controller, the report and the comparison
    with nccl-tests need to know of it.  A new op is a subclass and an entry in :data:`.collectives.OPS`.

    Class attributes:

    * ``name``: our name (``comm.<name>()``, the report's ``op``);
    * ``forms``: the forms torch.distributed offers, ``IN_PLACE`` / ``OUT_OF_PLACE``, the default first;
    * ``split``: S is the full buffer made of ``world`` chunks (else S is the buffer of each rank);
    * ``nccl_tests``: the nccl-tests binary that measures the same op (``all_reduce_perf``);
    * ``aliases``: other spellings of the op (NCCL API, nccl-tests) beyond the names derived from
      ``name`` and ``nccl_tests``.
    * ``waits_for_all``: no rank ends the op before every rank has begun it (all_reduce, all_gather,
      reduce_scatter, all_to_all), so that a rank that begins late holds every other up: only then do the ranks
      note when each op began (:func:`.across_ranks.late_total`).  A root that sends (broadcast) or a rank that
      only waits for its neighbour (send_recv) runs ahead of the others by several ops, which is no one's delay.

    The per-rank methods (``buffers``, ``fill``, ``expected``, ``run``) get torch or torch.distributed
    passed in, so that this module imports without torch.
    """

    name: ClassVar[str]
    forms: ClassVar[tuple[str, ...]]
    nccl_tests: ClassVar[str]
    split: ClassVar[bool] = False
    aliases: ClassVar[tuple[str, ...]] = ()
    waits_for_all: ClassVar[bool] = True

    def factor(self, n: int) -> float:
        """busbw / algbw on ``n`` ranks (nccl-tests doc/PERFORMANCE.md): (n-1)/n where S is split among
        the ranks, else 1; all_reduce overrides it."""
        return (n - 1) / n if self.split else 1.0

    @property
    def default_in_place(self) -> bool:
        return self.forms[0] == IN_PLACE

    def nccl_tests_column(self, form: str) -> str:
        """The nccl-tests column (``IN_PLACE`` / ``OUT_OF_PLACE``) that our ``form`` compares with:
        nccl-tests measures both placements, and each of ours meets the same one."""
        return form

    def buffers(self, new: Callable[[int], Tensor], s: Shape, in_place: bool) -> tuple[Tensor, Tensor]:
        """(input, output) of one rank; ``new(k)`` allocates ``k`` elements.  The same tensor twice (or
        a view) for an in-place form.  Here: one buffer of S in place, two out of place."""
        inp = new(s.count)
        return (inp, inp) if in_place else (inp, new(s.count))

    def fill(self, torch: ModuleType, v: Tensor, s: Shape, device: str) -> Tensor:
        """The input values of one rank, given ``v``: the pattern 1, 2, 3, 1, ... in the buffer's dtype
        and length.  Values that make a wrong element detectable."""
        return v * (s.rank + 1)

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        """The output one rank must see (float64), or None when it has none to check."""
        raise NotImplementedError

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
        """The op, once (captured in a graph, or launched eagerly), over ``s.group``."""
        raise NotImplementedError

    @property
    def doc(self) -> str:
        """The first line of the op's docstring."""
        return (type(self).__doc__ or "").strip().splitlines()[0]

    def __repr__(self) -> str:
        return f"<collective {self.name}>"

