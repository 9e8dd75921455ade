"""What every training pattern of :mod:`.patterns` shares, naming none: a pattern's plan (:class:`PatternPlan`),
a rank's result (:class:`PatternResult`), how a case's result is checked (:func:`check_rows`,
:func:`merge_checks`), the sub-groups a case makes once per process (:func:`sub_group`), the rank's run of a
case (:func:`run_case`: its iterations timed, a two-part case's parts alone and together, the single iterations
one by one, the check on fresh inputs, who waited for whom), and the wrong results named (:func:`check_results`).
A new pattern is its plan and its case in :mod:`.patterns`; nothing here changes.

Imports no torch: a rank's run imports it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ..measurement import MeasurementInfo
from ..vocab import RANK_WARMUP_MIN_S, TAIL_TIME_FACTOR
from .collective_results import BenchResult, WrongResult

if TYPE_CHECKING:
    from .timing import Plan
    from torch import Tensor
    from ..ranks.context import RankContext

__all__ = ["PatternPlan", "PatternResult", "check_rows", "mismatches", "merge_checks", "sub_group", "PartsTimed",
           "run_case", "check_results"]


@dataclass(frozen=True)
class PatternPlan:
    """A pattern's plan for one shape, world and scale: what the ranks get (``spec``), and the figures."""

    pattern: str
    model: str
    world: int
    scale: int
    spec: dict[str, object]  # the per-rank task's argument
    bytes_per_iter: int
    busbw_factor: float
    per_step: int  # iterations per training step
    iteration: str  # one iteration, in words
    info: MeasurementInfo = field(default_factory=lambda: MeasurementInfo())


@dataclass(frozen=True)
class PatternResult(BenchResult):
    """A rank's result of :func:`.patterns.run_pattern`: a :class:`BenchResult`, and for the overlap (rank 0 only) the
    medians of the slowest rank's time per iteration of each part alone and overlapped (``dp_alone_s``,
    ``tp_alone_s``, ``dp_overlapped_s``, ``tp_overlapped_s``)."""

    overlap: dict[str, float] = field(default_factory=dict)


def check_rows(torch: ModuleType, got: Tensor, exp: Tensor) -> tuple[int, int, Optional[tuple[int, float, float]]]:
    """(wrong, checked, first wrong (flat index, got, expected)) of ``got`` against ``exp`` (exact small
    integers in bf16; 1% relative tolerance where a sum over many ranks rounds)."""
    got = got.reshape(-1).to(torch.float64)
    exp = exp.reshape(-1).to(torch.float64)
    if got.numel() != exp.numel():
        return max(got.numel(), exp.numel()), max(got.numel(), exp.numel()), (0, float(got.numel()),
                                                                            float(exp.numel()))
    return mismatches(got, exp, 1e-2)


def mismatches(got: Tensor, exp: Tensor, rtol: float) -> tuple[int, int, Optional[tuple[int, float, float]]]:
    """(wrong, checked, first wrong (flat index, got, expected)) of the flat float64 tensors ``got`` and ``exp``
    of one length, an element wrong where it differs from its expected value by more than ``rtol`` of it."""
    bad = (got - exp).abs() > rtol * exp.abs()
    n_bad = int(bad.sum().item())
    first = None
    if n_bad:
        i = int(bad.nonzero()[0].item())
        first = (i, float(got[i].item()), float(exp[i].item()))
    return n_bad, int(got.numel()), first


def merge_checks(acc: list[Any], part: tuple[int, int, Optional[tuple[int, float, float]]], offset: int = 0) -> None:
    """Add ``part`` (wrong, checked, first) to ``acc`` = [wrong, checked, first]; the first index shifted."""
    wrong, checked, first = part
    if wrong and acc[2] is None and first is not None:
        acc[2] = (first[0] + offset, first[1], first[2])
    acc[0] += wrong
    acc[1] += checked


#: this process's sub-groups, made once per use ("tp", "dp") and set of groups (every rank creates every group,
#: in order): the overlap's gradient sync gets a communicator of its own even where its ranks are a
#: tensor-parallel group's (a world of 2)
_GROUPS: dict[tuple[str, tuple[tuple[int, ...], ...]], Any] = {}


def sub_group(dist: ModuleType, groups: Sequence[Sequence[int]], rank: int, backend: str,
              use: str = "tp") -> tuple[Any, tuple[int, ...]]:
    """This rank's group of ``groups`` (global ranks; every rank calls it with the same groups) and that group's
    ranks, the groups made once per process and ``use``."""
    key = (use, tuple(tuple(g) for g in groups))
    if key not in _GROUPS:
        mine = None
        for g in key[1]:  # every rank calls new_group for every group, in the same order
            handle = dist.new_group(list(g), backend=backend)
            if rank in g:
                mine = (handle, g)
        _GROUPS[key] = mine
    return _GROUPS[key]


class PartsTimed:
    """Adapter of a case of two parts (the overlap pattern's, whose ``iteration(first, second)`` runs either
    part or both and ``seconds`` reads their times) for the timing engine: each sample
    ``batch`` iterations of the ``parts`` asked for; a sample's mean part times are appended to ``split`` when the
    sample is read."""

    def __init__(self, case: Any, parts: tuple[bool, bool]) -> None:
        self.case, self.parts = case, parts
        self.split: list[tuple[float, float]] = []

    def sample(self, batch: int) -> Callable[[], float]:
        marks = [self.case.iteration(*self.parts) for _ in range(batch)]

        def seconds() -> float:
            times = [self.case.seconds(m) for m in marks]
            self.split.append((sum(t[1] for t in times) / batch, sum(t[2] for t in times) / batch))
            return sum(t[0] for t in times)

        return seconds

    def sync(self) -> None:
        self.case.sync()


def run_case(ctx: RankContext, make_case: Callable[[], Any], *, min_time_s: float, max_samples: int,
             tail_time_s: Optional[float], parts: Optional[tuple[str, str]] = None,
             note_starts: bool = False) -> PatternResult:
    """A rank's run of a pattern's case, on every rank of the job's default group: ``make_case()`` builds the
    case (after a barrier of the whole group: on NCCL the first call on a communicator is made by all its ranks);
    its iterations are timed (warm-up, plan agreed by every rank); a case of two ``parts`` (their names, e.g.
    ``("dp", "tp")``: the case runs ``iteration(first, second)``) has each part timed alone first, then both
    (the measurement), and the result's ``overlap`` gives each part's median time, ``<part>_alone_s`` and
    ``<part>_overlapped_s``; then single iterations one by one (:func:`.single_op_timing.single_op_phase`:
    ``tail_time_s``, None: 3 x ``min_time_s``; 0 skips them), one more on fresh inputs and poisoned outputs
    whose wrong elements are counted, and last, with the other ranks, each iteration's time (the slowest
    rank's) and who arrived last (:func:`.across_ranks.iteration_stats`).  ``note_starts`` (a case of one part whose
    every op makes each rank wait for every other: :func:`.patterns.waits_for_all`): also note when each iteration
    began, timed and single, for the ranks' late shares (:attr:`.across_ranks.IterationStats.late_share`)."""
    import statistics

    import torch
    import torch.distributed as dist

    from .across_ranks import agreement, iteration_stats
    from .clocks import clock_info, sampler_for
    from .single_op_timing import single_op_fields, single_op_phase
    from .timed_case import TimedLoop
    from .timing import TimingSettings, measure

    n, r, gpu = ctx.world_size, ctx.rank, ctx.device.startswith("cuda")
    # a collective of the whole group first: on NCCL the first call on a communicator is made by all its ranks
    dist.barrier()
    case = make_case()
    settings = TimingSettings(min_time_s=min_time_s, max_samples=max_samples, warmup_min_s=RANK_WARMUP_MIN_S)
    agree = agreement(torch, dist, ctx.device)
    timed: Any = None  # the timed case, set below: prepare reads it when measure calls it
    note_starts = note_starts and parts is None

    def prepare(p: Plan) -> None:
        timed.sync()
        dist.barrier()
        if note_starts:
            timed.record()  # when each timed iteration begins (:func:`~.across_ranks.late_total`)

    times: dict[str, list[float]] = {}  # a two-part case: each part's time per iteration (from the start to its end)
    if parts is not None:  # each part alone first (each its own plan), then both: the measurement
        alone_keys = (f"{parts[0]}_alone_s", f"{parts[1]}_alone_s")
        for k, (key, on) in enumerate(((alone_keys[0], (True, False)), (alone_keys[1], (False, True)))):
            timed = PartsTimed(case, on)
            alone, _ = measure(timed, settings, agree=agree, prepare=prepare)
            times[key] = [split[k] for split in timed.split[len(timed.split) - len(alone):]]
        timed = PartsTimed(case, (True, True))
    else:
        timed = TimedLoop(torch, case, gpu, use_graph=False, eager_calls=settings.warmup_iters)
    clocks = sampler_for((ctx.device,))
    samples, timing_plan = measure(timed, settings, agree=agree, prepare=prepare, clocks=clocks)
    if parts is not None:  # the samples are read last, in order: the last entries of split are theirs
        both = timed.split[len(timed.split) - len(samples):]
        times[f"{parts[0]}_overlapped_s"] = [d for d, _ in both]
        times[f"{parts[1]}_overlapped_s"] = [t for _, t in both]
    entries = timed.entry_times() if note_starts else None
    budget = TAIL_TIME_FACTOR * min_time_s if tail_time_s is None else float(tail_time_s)
    singles = single_op_phase(torch, dist, case.run, timed.sync, agree, gpu, budget, launches=case.launches,
                              note_starts=note_starts)
    wrong, checked, first = _checked(case, timed.sync, dist)
    del case
    timed = None  # not del: prepare's closure holds the name; either way the buffers are freed here
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    its = iteration_stats(torch, dist, samples, r, n, ctx.device, entries=entries, batch=timing_plan.batch)
    tail = single_op_fields(torch, dist, singles, budget, r, n, ctx.device)
    overlap = {}
    for key, own in times.items():  # every rank, in the same order
        overlap[key] = statistics.median(iteration_stats(torch, dist, own, r, n, ctx.device).times)
    first_rank = r == 0
    return PatternResult(
        rank=r, in_place=False, samples_s=tuple(its.times) if first_rank else (), batch=timing_plan.batch, graph=0,
        graph_error="", registered=False, register_note="", size_bytes=0, wrong=wrong, checked=checked,
        first_wrong=first, wrong_path="", straggler=tuple(its.straggler) if first_rank else (),
        own_median_s=its.own_median_s, lag_median_s=its.lag_median_s, wait_median_s=its.wait_median_s,
        straggled=its.straggled, wait_share=its.wait_share, late_share=its.late_share,
        host=ctx.host or socket.gethostname(), node=ctx.node_rank, device=ctx.device,
        clocks=tuple(clock_info(clocks)), overlap=overlap if first_rank else {}, **tail)


def _checked(case: Any, sync: Callable[[], None],
             dist: ModuleType) -> tuple[int, int, Optional[tuple[int, float, float]]]:
    """One more iteration of ``case`` on fresh inputs and poisoned outputs, every rank together: its wrong
    elements, the elements checked and the first wrong one (``case.check()``)."""
    case.fill()
    sync()
    dist.barrier()
    case.run()
    sync()
    return case.check()


def check_results(results: Sequence[BenchResult], p: PatternPlan, *, backend: str) -> None:
    """:class:`WrongResult`, naming every rank that saw a wrong element of the plan ``p``'s pattern, if any did."""
    bad = [r for r in results if r.wrong]
    if bad:
        lines = [f"{p.pattern} ({p.model}, scale 1/{p.scale}) produced a wrong result on {len(results)} ranks "
                 f"({backend}):"]
        for r in bad:
            assert r.first_wrong is not None
            i, got, exp = r.first_wrong
            lines.append(f"  rank {r.rank}: {r.wrong} of {r.checked} elements wrong (first at index {i}: got {got:g}, "
                         f"expected {exp:g})")
        raise WrongResult("\n".join(lines), bad)

