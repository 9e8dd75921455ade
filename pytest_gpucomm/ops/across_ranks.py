"""What the ranks of a group work out together: the largest of a number over the ranks (:func:`agreement`: a
timing plan, a pace), and per iteration the slowest rank's time and the rank the others waited for, with each
rank's own summary (:func:`iteration_stats`).  Every rank of the group calls them, in the same order.

Imports no torch: it is passed in.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, Sequence

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["agreement", "IterationStats", "iteration_stats", "late_total"]


def agreement(torch: ModuleType, dist: ModuleType, device: str,
              group: Optional[ProcessGroup] = None) -> Callable[[float], float]:
    """``agree(x)``: the largest ``x`` over the ranks of ``group`` (None: the default group), on every rank --
    how the ranks agree on a timing plan or a pace (every rank calls it, in the same order)."""
    buf = torch.zeros(1, dtype=torch.float32 if device.startswith("cuda") else torch.float64, device=device)

    def agree(x: float) -> float:
        buf.fill_(x)
        dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=group)
        return float(buf.item())

    return agree


class IterationStats(NamedTuple):
    """One rank's share of :func:`iteration_stats`."""

    times: list[float]  # per iteration: the time of the slowest rank (the same on every rank)
    straggler: list[int]  # per iteration: the rank that arrived last (the same on every rank)
    own_median_s: float
    lag_median_s: float
    wait_median_s: float
    straggled: int  # iterations in which this rank arrived last
    #: the share of the iterations' time (the slowest rank's, summed) this rank spent waiting for the last
    #: rank (its wait, summed): a rank slowed outside its own timed region has the least of it, the ranks
    #: that waited for it the most, whichever iterations it happened in (the medians miss it when it is rare)
    wait_share: float = 0.0
    #: how much later than the first rank this rank began each op (each sample on GPU), summed over the ops, over
    #: the time the phase took on its clock, on clocks aligned across the ranks (:func:`late_total`); None where the
    #: ops' starts were not noted
    late_share: Optional[float] = None


def iteration_stats(torch: ModuleType, dist: ModuleType, own: Sequence[float], rank: int, world: int, device: str,
                    group: Optional[ProcessGroup] = None, entries: Optional[Sequence[float]] = None,
                    batch: int = 1) -> IterationStats:
    """Per iteration, the time of the slowest rank and the rank that the others waited for; and this
    rank's summary.  Called by every rank of ``group`` (None: the default group) with its ``own`` sample
    times, after the timed samples; ``rank`` and ``world`` are its rank in that group and the group's size.

    Why these figures.  In a collective that synchronizes its ranks (all_reduce, all_gather,
    reduce_scatter, all_to_all; the send/recv ring couples each rank to its neighbours) every rank
    finishes an iteration at about the same moment, so the ranks' own times differ by when each rank
    *started* it.  The rank that arrived last is the one the others waited for -- the iteration's
    straggler -- and its own time is the shortest (it did not wait); the iteration's time, as nccl-tests
    reports it and as the table shows it, is the longest own time (the maximum over the ranks), which
    includes the wait.  Hence, per iteration i and rank r, from three all-reduces of the ranks' k times:

    * ``max_i`` (MAX): the iteration's time;
    * ``min_i`` (MIN): the straggler's own time; the straggler is the lowest rank whose own time is
      ``min_i`` (MIN of ``rank if own == min_i else world``; exact, as ``min_i`` is one of the values);
    * ``lag = max_i - own_r``: how much later than the first rank r arrived (the straggler's lag is the
      largest; a rank that arrived first has 0); ``wait = own_r - min_i``: how long r waited for the
      straggler (the straggler's is 0).

    Each rank keeps the medians of its own time, lag and wait over the iterations, how often it was
    the straggler, and its ``wait_share``: its waits summed over the iterations, over the iterations'
    times summed.  A rank held up where its own clock does not run -- between two timed iterations, by a
    sleep, a stop (SIGSTOP) or another process on its core -- makes the others wait inside their next timed
    iteration while its own shows nothing: their share grows, its own does not.  Held up inside its own
    timed iteration instead, it shows a longer time of its own, and the others wait in the next one: the
    two cancel in the sums.  The medians see such a rank only when it is late in most iterations; the sums
    see it however rarely it happens.  Every rank gets the k iteration times and straggler ids, and
    :func:`.collectives.bench` returns them on rank 0 only, so that the results gathered at rank 0 grow as
    ranks + iterations, not ranks x iterations.  The iteration times are exactly the per-iteration maximum
    that the controller used to compute from every rank's samples (the same float64 values).

    Where an op does not make every rank wait for every other (broadcast and reduce from a root, and
    pairs that only wait for each other), the same figures are still defined -- the longest own time per
    iteration, the rank with the shortest, the gaps to both -- but "arrived last" holds only among ranks
    that wait for each other: the rank with the shortest time may simply have had less to wait for.

    The waits cancel, though, where a rank is held up *inside* an op after its own part of the op is done
    (its data sent: the others finish the op and wait in the next one, while its own time of the op grows as
    much as theirs): a stop (SIGSTOP) or another process on its core lands there as often as anywhere.  Where
    each rank noted when it began each op (``entries``, from :meth:`.timed_case.TimedLoop.entry_times`, in
    seconds on its own clock; ``batch`` ops per sample), the ranks also work out how much later than the first
    rank each one began each op, summed (:func:`late_total`), over the time the phase took on its own clock (from
    its first op's start to its last op's end; not the iterations' times summed, which count a stall twice where
    it falls inside a sample: once in the held rank's sample, once in the others' next one): its ``late_share``.
    A rank held up anywhere but inside an op before its data went out begins its next op late, and only it does;
    held up there, every rank's op is long and no rank began late (that stop names no one).  None when the ranks
    noted no starts or different numbers of them (on every rank alike).

    Raises ValueError, on every rank alike, when the ranks took different numbers of samples (the timing
    plan is agreed, so they cannot, unless the ranks ran with different settings).
    """
    import statistics

    k = len(own)
    noted = _counted(torch, dist, k, entries, rank, device, group)  # every rank calls it; if True, none has None
    if k == 0:
        return IterationStats([], [], 0.0, 0.0, 0.0, 0)
    late = late_total(torch, dist, entries, rank, device, group) if noted and entries is not None else None
    mine = torch.tensor([float(x) for x in own], dtype=torch.float64, device=device)
    hi, lo = mine.clone(), mine.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
    ids = torch.where(mine == lo, torch.full_like(mine, float(rank)), torch.full_like(mine, float(world)))
    dist.all_reduce(ids, op=dist.ReduceOp.MIN, group=group)
    times, low, who = hi.tolist(), lo.tolist(), [int(x) for x in ids.tolist()]
    own = [float(x) for x in own]
    return IterationStats(
        times=times,
        straggler=who,
        own_median_s=statistics.median(own),
        lag_median_s=statistics.median(t - o for t, o in zip(times, own)),
        wait_median_s=statistics.median(o - m for o, m in zip(own, low)),
        straggled=sum(1 for w in who if w == rank),
        wait_share=sum(o - m for o, m in zip(own, low)) / total if (total := sum(times)) > 0 else 0.0,
        late_share=None if late is None else (late / span if (span := _span(own, entries, batch)) > 0 else 0.0),
    )


def _counted(torch: ModuleType, dist: ModuleType, k: int, entries: Optional[Sequence[float]], rank: int,
             device: str, group: Optional[ProcessGroup]) -> bool:
    """Whether every rank of ``group`` noted the same number of op starts, one or more (the same answer on every
    rank), from one all-reduce (MAX) of ``[k, -k, e, -e]`` (``k`` the rank's samples, ``e`` its starts, -1 for
    none); ValueError, on every rank alike, when the ranks took different numbers of samples."""
    e = -1.0 if entries is None else float(len(entries))
    counts = torch.tensor([float(k), -float(k), e, -e], dtype=torch.float64, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=group)
    most, fewest = int(counts[0].item()), int(-counts[1].item())
    if most != fewest:
        raise ValueError(f"the ranks took different numbers of timed samples ({fewest} to {most}; rank {rank}: "
                         f"{k}): the timing plan should have been agreed by every rank")
    return bool(counts[2].item() == -counts[3].item() >= 1)


def _span(own: Sequence[float], entries: Optional[Sequence[float]], batch: int) -> float:
    """How long the phase took on this rank's clock: from its first op's start to its last op's end (the last
    entry plus the last op's time: the last sample's on GPU, where an entry is a sample's start)."""
    if not entries:
        return 0.0
    per_entry = batch * len(own) / len(entries)  # ops (iterations) between two entries: 1, or a sample's batch
    return float(entries[-1] - entries[0] + own[-1] * per_entry)


def late_total(torch: ModuleType, dist: ModuleType, entries: Sequence[float], rank: int, device: str,
               group: Optional[ProcessGroup] = None) -> float:
    """How much later than the first rank this rank began its ops, summed: ``sum_j (t_j - min_r t_rj)``, with
    ``t_j`` when it began op j (``entries``, seconds on its own clock), every rank of ``group`` calling it with
    the same number of entries.

    The ranks' clocks need not agree (hosts boot at different times, devices count from their own start): each
    rank's clock is set against rank 0's (the group's) by the median of their differences over the ops.  The
    ops of a collective end at about the same moment on every rank, and the next begins right after, so that
    median is the clocks' offset (with any steady difference in when the ranks leave an op, which is nobody's
    delay); a rank held up in a minority of the ops does not move it.  A rank late in most ops moves it and is
    not seen here: the medians of :func:`iteration_stats` name that one.  Two collectives of ``len(entries)``
    float64 numbers: rank 0's entries to every rank (a sum with zeros elsewhere, exact), and the earliest start
    of each op (MIN)."""
    import statistics

    mine = torch.tensor([float(x) for x in entries], dtype=torch.float64, device=device)
    ref = mine.clone() if rank == 0 else torch.zeros_like(mine)
    dist.all_reduce(ref, op=dist.ReduceOp.SUM, group=group)
    offset = statistics.median(a - b for a, b in zip(mine.tolist(), ref.tolist()))
    aligned = mine - offset
    first = aligned.clone()
    dist.all_reduce(first, op=dist.ReduceOp.MIN, group=group)
    return float((aligned - first).sum().item())
