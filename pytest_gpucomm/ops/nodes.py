"""The inter-node pair test: send/recv between the GPUs of two nodes, every local rank at once.

For a pair of nodes (a, b), the GPU of local rank k on node a sends S bytes to the GPU of local rank k on
node b, for every k at once, while b sends to a (pairwise, and a ring of two nodes) or to the next node of
the ring (a ring of three or more nodes).  The phases -- which ranks send to which, and which node pairs
they make -- come from :func:`pytest_gpucomm.env.topology.node_pair_phases`; this module has

* the per-rank task :func:`exchange`, run on every rank of the job (the default group): per phase, the
  ranks of the phase's pairs send and receive at once (one ``batch_isend_irecv``), the others wait; timed
  as the collectives are (:func:`pytest_gpucomm.ops.timing.measure`, every rank agreeing on the plan over the
  default group), each iteration launched eagerly (no CUDA graph: a rank that waits has no op to capture),
  then checked: each receiver compares what it got with its sender's pattern;
* :func:`to_measurements`: the ranks' results -> one :class:`~pytest_gpucomm.measurement.Measurement` per
  node pair, whose time per iteration is the slowest of the ranks of its two nodes.

The figure: ``op`` ``"node_pair"``, bytes = S, the message of one GPU pair in one direction; busbw factor 1,
so busbw = algbw = S / t, the bandwidth of each GPU pair across the two nodes, one way, while every local
rank of both nodes sends and receives at once (as nccl-tests' sendrecv counts S per rank).  A slow node or
NIC shows up as the pairs it is in.

Imports no torch: the task imports it when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ..measurement import Measurement, MeasurementInfo
from ..units import describe_size
from ..vocab import DEFAULT_DTYPE, DEFAULT_MAX_SAMPLES, DEFAULT_MIN_TIME_S, DTYPES, RANK_WARMUP_MIN_S
from .pattern_runs import mismatches
from .specs import COLLECTIVE, OpSpec

if TYPE_CHECKING:
    from .timing import Plan
    from torch import Tensor
    from torch import dtype as DType
    from ..ranks.context import RankContext

__all__ = ["OP", "PhaseResult", "exchange", "to_measurements", "phase_kwargs"]

OP = "node_pair"
#: its spec (:mod:`.specs`)
SPECS = (OpSpec(OP, COLLECTIVE, COLLECTIVE),)


@dataclass(frozen=True)
class PhaseResult:
    """One rank's result of one phase: its samples (seconds per iteration), and what it checked."""

    rank: int
    samples_s: tuple[float, ...]
    batch: int
    active: bool  # this rank sent or received in the phase
    wrong: int = 0
    checked: int = 0
    first_wrong: Optional[tuple[int, float, float]] = None  # (index, got, expected)
    peer: int = -1  # the rank it received from


def phase_kwargs(phases: Sequence[Any]) -> list[list[list[int]]]:
    """The task's ``phases`` argument: each phase's (sender, receiver) global ranks, as plain lists."""
    return [[[int(s), int(d)] for s, d in p.edges] for p in phases]


def _pattern(torch: ModuleType, n: int, device: str, dtype: DType) -> Tensor:
    return (torch.arange(n, device=device, dtype=torch.int64) % 3 + 1).to(dtype)


class PhaseExchange:
    """This rank's sends and receives of one phase, as a callable (nothing to do when it waits)."""

    def __init__(self, torch: ModuleType, dist: ModuleType, rank: int, edges: Sequence[Sequence[int]], count: int,
                 device: str, dtype: DType) -> None:
        self.torch, self.dist, self.device, self.dtype = torch, dist, device, dtype
        sends = [d for s, d in edges if s == rank]
        recvs = [s for s, d in edges if d == rank]
        if len(sends) > 1 or len(recvs) > 1:
            raise ValueError(f"rank {rank} sends to {sends} and receives from {recvs} in one phase; at most one each")
        self.dst = sends[0] if sends else None
        self.src = recvs[0] if recvs else None
        self.rank = rank
        self.inp = torch.empty(count, device=device, dtype=dtype) if self.dst is not None else None
        self.out = torch.empty(count, device=device, dtype=dtype) if self.src is not None else None
        self.fill()

    @property
    def active(self) -> bool:
        return self.dst is not None or self.src is not None

    def fill(self) -> None:
        """The input: the pattern scaled by the sender's global rank + 1; the output poisoned."""
        if self.inp is not None:
            self.inp.copy_(_pattern(self.torch, self.inp.numel(), self.device, self.dtype) * (self.rank + 1))
        if self.out is not None:
            self.out.fill_(-7)

    def run(self) -> None:
        dist = self.dist
        ops = []
        if self.dst is not None:
            ops.append(dist.P2POp(dist.isend, self.inp, self.dst))
        if self.src is not None:
            ops.append(dist.P2POp(dist.irecv, self.out, self.src))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()

    def check(self) -> tuple[int, int, Optional[tuple[int, float, float]]]:
        """(wrong, checked, first wrong) of what this rank received."""
        if self.out is None or self.src is None:
            return 0, 0, None
        torch = self.torch
        exp = _pattern(torch, self.out.numel(), self.device, torch.float64) * (self.src + 1)
        return mismatches(self.out.to(torch.float64), exp, 0.0 if self.dtype == torch.float32 else 1e-2)


def exchange(ctx: RankContext, phases: list[list[list[int]]], size_bytes: int, dtype: str = DEFAULT_DTYPE,
             min_time_s: float = DEFAULT_MIN_TIME_S, max_samples: int = DEFAULT_MAX_SAMPLES) -> list[PhaseResult]:
    """Per-rank task, on every rank of the job (the default group; ``ctx.rank`` is the global rank): for each
    phase in order, time this rank's sends and receives of ``size_bytes`` (the ranks of other pairs wait, but
    agree on the plan and meet at the barriers), then check what it received.  One :class:`PhaseResult` per
    phase."""
    import torch
    import torch.distributed as dist

    from .timing import TimingSettings, measure
    from .across_ranks import agreement
    from .timed_case import TimedLoop

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    if ctx.group is not None:
        raise ValueError("the inter-node pair test runs over the job's default group, not a sub-group")
    gpu = ctx.device.startswith("cuda")
    tdtype = getattr(torch, dtype)
    count = max(1, size_bytes // DTYPES[dtype])
    settings = TimingSettings(min_time_s=min_time_s, max_samples=max_samples, warmup_min_s=RANK_WARMUP_MIN_S)
    agree = agreement(torch, dist, ctx.device)

    # a collective of the whole group first: on NCCL the first call on a communicator must be made by all of
    # its ranks, and point-to-point calls between some of them must not be that first call
    dist.barrier()
    out = []
    for edges in phases:
        ex = PhaseExchange(torch, dist, ctx.rank, edges, count, ctx.device, tdtype)
        timed = TimedLoop(torch, ex, gpu, use_graph=False, eager_calls=settings.warmup_iters)  # type: ignore[arg-type]

        def prepare(p: Plan, timed: TimedLoop = timed) -> None:
            timed.sync()
            dist.barrier()

        samples, plan = measure(timed, settings, agree=agree, prepare=prepare)
        ex.fill()
        timed.sync()
        dist.barrier()
        ex.run()
        timed.sync()
        wrong, checked, first = ex.check()
        out.append(PhaseResult(rank=ctx.rank, samples_s=tuple(samples), batch=plan.batch, active=ex.active,
                               wrong=wrong, checked=checked, first_wrong=first,
                               peer=ex.src if ex.src is not None else -1))
        del ex, timed
    dist.barrier()
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return out


class WrongPairs(Exception):
    """A receiver saw a wrong element; the message names the ranks, their nodes and the first wrong element."""


def to_measurements(results: Sequence[Sequence[PhaseResult]], phases: Sequence[Any], *, backend: str, dtype: str,
                    size_bytes: int, pattern: str,
                    where: Optional[Callable[[int], str]] = None) -> list[Measurement]:
    """One measurement per node pair of every phase (in phase order): ``results`` are every rank's phase
    results (ordered by global rank); a pair's time per iteration is the slowest of the ranks of its two
    nodes.  :class:`WrongPairs` if a receiver saw a wrong element (``where(rank)`` names a rank in it)."""
    count = max(1, size_bytes // DTYPES[dtype])
    where = where or (lambda r: f"rank {r}")
    bad_lines = []
    for per_rank in results:
        for i, pr in enumerate(per_rank):
            if pr.wrong:
                assert pr.first_wrong is not None
                j, got, exp = pr.first_wrong
                bad_lines.append(f"  {where(pr.rank)}, from {where(pr.peer)} ({pattern} phase {i + 1}): {pr.wrong} "
                                 f"of {pr.checked} elements wrong (first at index {j}: got {got:g}, expected {exp:g})")
    if bad_lines:
        raise WrongPairs(f"the inter-node pair test ({pattern}) received wrong data at "
                         f"{describe_size(count * DTYPES[dtype])} ({backend}):\n" + "\n".join(bad_lines))
    out = []
    for i, phase in enumerate(phases):
        for pair in phase.pairs:
            mine = [results[r][i] for r in pair.ranks]
            k = min(len(p.samples_s) for p in mine)
            samples = [max(p.samples_s[j] for p in mine) for j in range(k)]
            info: MeasurementInfo = {"backend": backend, "pattern": pattern, "batch": mine[0].batch, "graph": False,
                                     "timer": "device events" if backend != "gloo" else "host clock", **pair.info()}
            if count * DTYPES[dtype] != size_bytes:
                info["requested_bytes"] = size_bytes
            out.append(Measurement(op=OP, size_bytes=count * DTYPES[dtype], samples_s=samples,
                                   devices=tuple(f"rank{r}" for r in pair.ranks), busbw_factor=1.0,
                                   world_size=len(pair.ranks), dtype=dtype, kind="collective", info=info))
    return out
