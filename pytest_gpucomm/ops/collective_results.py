"""What a rank returns for a collective (:class:`BenchResult`, which a training pattern's result extends), the
error of a wrong result (:class:`WrongResult`), and the ranks' results turned into a measurement's
``info["ranks"]`` (:func:`ranks_info`) and ``info["tail"]`` (:func:`tail_info`) on the controller.

Stdlib only: a result crosses from the rank to the controller pickled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..measurement import RanksInfo, TailInfo

__all__ = ["ranks_clocks", "BenchResult", "WrongResult", "ranks_info", "tail_info"]


@dataclass(frozen=True)
class BenchResult:
    """What :func:`.collectives.bench` returns from one rank."""

    rank: int
    in_place: bool  # the form the rank ran
    samples_s: tuple[float, ...]  # seconds per iteration, one per sample
    batch: int  # iterations per sample
    graph: int  # iterations per sample replayed from a CUDA/HIP graph; 0 if none
    graph_error: str  # why graph capture failed ("" if it did not)
    registered: bool  # the buffers were registered with the communicator
    register_note: str  # why they were not, or what failed at deregistration
    size_bytes: int  # the S measured (rounded to whole elements, and to the world for split ops)
    wrong: int  # wrong elements of the result (on the path with the most)
    checked: int  # elements checked (0 when the rank has no result to check)
    first_wrong: Optional[tuple[int, float, float]]  # (index, got, expected) of the first wrong one
    wrong_path: str  # the path that gave the wrong result ("a graph replay", "an eager launch", "")
    # -- who the others waited for (see :func:`.across_ranks.iteration_stats`); compact: per-iteration data on
    # rank 0 only
    straggler: tuple[int, ...] = ()  # rank 0: per iteration, the (group) rank that arrived last; else ()
    own_median_s: float = 0.0  # this rank's own time of an iteration (median over the iterations)
    lag_median_s: float = 0.0  # how much later than the first rank this rank arrived (median)
    wait_median_s: float = 0.0  # how long this rank waited for the last one to arrive (median)
    straggled: int = 0  # iterations in which this rank arrived last
    wait_share: float = 0.0  # the share of the iterations' time this rank waited for the last one (sums)
    #: how much later than the first rank it began each op (sample, on GPU), summed, over the time the timed samples
    #: took; None: not noted (:attr:`.across_ranks.IterationStats.late_share`)
    late_share: Optional[float] = None
    host: str = ""  # where the rank ran: host, node index, device
    node: int = 0
    device: str = ""
    clocks: tuple[dict[str, object], ...] = ()  # this rank's device clocks during the timed samples (ops.clocks)
    # -- single operations, each timed on its own (see :func:`.single_op_timing.single_ops`); per-op data on rank 0 only
    op_times_s: tuple[float, ...] = ()  # rank 0: per single op, the slowest rank's time; else ()
    op_own_p50_s: float = 0.0  # this rank's own single-op times: median and 99th percentile
    op_own_p99_s: float = 0.0
    op_timer: str = ""  # how a single op was timed
    op_timer_resolution_s: float = 0.0  # the timer's step
    op_timer_overhead_s: float = 0.0  # median time of an empty timed interval (start, stop, nothing between)
    op_budget_s: float = 0.0  # the time budget that set the number of single ops
    op_wait_share: float = 0.0  # the share of the single ops' time this rank waited for the last one (sums)
    op_late_share: Optional[float] = None  # the same as late_share, of the single ops


class WrongResult(Exception):
    """A collective left wrong elements on some rank; the message names each such rank."""

    def __init__(self, message: str, bad: Sequence[BenchResult]) -> None:
        super().__init__(message)
        self.bad = tuple(bad)


def ranks_clocks(results: Sequence[BenchResult]) -> list[dict[str, object]]:
    """The clocks each rank read of its device during the timed samples, once per device of a host (gloo ranks
    on one host read the same CPUs): ``info["clocks"]`` of the measurement, where any were read."""
    seen: set[tuple[str, str]] = set()
    out = []
    for r in results:
        for c in r.clocks:
            key = (r.host, str(c.get("device")))
            if key not in seen:
                seen.add(key)
                out.append(dict(c))
    return out


def ranks_info(results: Sequence[BenchResult]) -> RanksInfo:
    """The ranks' compact data, one list per field, in the order of ``results`` (the group's ranks):
    ``rank``, ``node``, ``host``, ``device``, ``own_median_s``, ``lag_median_s``, ``wait_median_s``,
    ``straggled``, ``wait_share``, ``op_wait_share``, ``late_share``, ``op_late_share`` (one entry per rank; the
    last two where every rank noted its ops' starts), and ``straggler`` (one entry per
    iteration: the rank, as named in ``rank``, that arrived last).  O(ranks + iterations) numbers per case,
    never ranks x iterations."""
    ids = [r.rank for r in results]
    return {
        "rank": ids,
        "node": [r.node for r in results],
        "host": [r.host for r in results],
        "device": [r.device for r in results],
        "own_median_s": [r.own_median_s for r in results],
        "lag_median_s": [r.lag_median_s for r in results],
        "wait_median_s": [r.wait_median_s for r in results],
        "straggled": [r.straggled for r in results],
        "wait_share": [r.wait_share for r in results],
        "op_wait_share": [r.op_wait_share for r in results],
        "straggler": [ids[i] for i in results[0].straggler],
        **{key: shares for key in ("late_share", "op_late_share")
           if None not in (shares := [getattr(r, key) for r in results])},
    }


def tail_info(results: Sequence[BenchResult]) -> TailInfo:
    """``info["tail"]``: the single-operation times' figures (the slowest rank's per op: ``n``, ``p50_us``,
    ``p99_us``, ``p999_us`` -- None below 1,000 ops --, ``max_us``, ``jitter`` = p99 / p50), their sparse
    histogram (``hist``, :class:`pytest_gpucomm.sketches.Histogram`: what the tail rule counts), each rank's
    own ``own_p50_us`` / ``own_p99_us``, and the timer: ``timer``, ``resolution_us``, ``overhead_us``
    (the largest over the ranks), ``budget_s``."""
    from ..sketches import Histogram, tail_figures

    first = results[0]
    times = list(first.op_times_s)
    return {
        **tail_figures(times).to_dict(),
        "own_p50_us": [r.op_own_p50_s * 1e6 for r in results],
        "own_p99_us": [r.op_own_p99_s * 1e6 for r in results],
        "timer": first.op_timer,
        "resolution_us": max(r.op_timer_resolution_s for r in results) * 1e6,
        "overhead_us": max(r.op_timer_overhead_s for r in results) * 1e6,
        "budget_s": first.op_budget_s,
        "hist": Histogram.from_samples(times).to_dict(),
    }

