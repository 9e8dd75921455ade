"""Collectives over a torch.distributed process group, timed as nccl-tests times them.

This module holds three parts:

* what an op is: one :class:`CollectiveOp` subclass per op, registered in :data:`OPS` -- its buffers,
  input fill, expected result and torch.distributed call (per rank, torch passed in), its busbw factor,
  its forms, whether S is split among the ranks, and its nccl-tests counterpart.  Everything else (the
  bench, the controller, the suites, the comparison with nccl-tests, the tests) reads OPS;
* the controller's side: :class:`BenchResult` (one rank's result), :func:`to_measurement` (the ranks'
  results -> one :class:`~pytest_gpucomm.measurement.Measurement`, or :class:`WrongResult`), and
  :func:`op_method` / :func:`add_op_methods` (the measuring fixture's ``comm.all_reduce(...)`` etc.);
* the per-rank task :func:`bench`, run on every rank of the group (by the rank pool): it builds the
  buffers, warms up, agrees with the other ranks on a plan, captures up to ``GRAPH_OPS`` iterations in a
  CUDA/HIP graph on GPU and replays it (as ``nccl-tests -G``) or loops on CPU, times each sample (device
  events / host clock), and finally re-initializes the buffers, runs the op once more -- from a graph and
  eagerly, the paths that were timed -- and counts the wrong elements of the result; last, with the other
  ranks, it finds each iteration's time (that of the slowest rank) and the rank the others waited for
  (:func:`iteration_stats`).

Sizes follow nccl-tests: S is the per-rank buffer for all_reduce, broadcast, reduce and send/recv, and the
full gathered/scattered buffer for all_gather, reduce_scatter and all_to_all.  busbw = algbw x factor
with n ranks: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; others 1.
all_reduce, broadcast and reduce exist only in place in torch (an out-of-place form would add a device copy
of S bytes to every iteration, which nccl-tests does not do), so they are measured in place and compared
with nccl-tests' in-place column.

Imports no torch: the per-rank functions import it when they run.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Optional, Sequence, cast

from ..measurement import Measurement
from ..units import describe_size
from ..vocab import DEFAULT_MIN_TIME_S, DTYPES, TAIL_TIME_FACTOR
from .specs import COLLECTIVE, OpSpec

__all__ = [
    "OPS",
    "CollectiveOp",
    "Shape",
    "BenchResult",
    "WrongResult",
    "busbw_factor",
    "element_count",
    "to_measurement",
    "ranks_info",
    "iteration_stats",
    "IterationStats",
    "op_method",
    "add_op_methods",
    "bench",
    "DTYPES",
]

IN_PLACE, OUT_OF_PLACE = "in_place", "out_of_place"


# -- what an op is ---------------------------------------------------------------------------------

class Shape(NamedTuple):
    """One rank's view of an op's buffers: ``count`` elements make S; ``chunk`` is a rank's share of them
    (``count / world`` for split ops, else ``count``).  ``rank`` and ``world`` are within the group the op
    runs over: ``group`` (a torch.distributed process group; None: the default group), whose global ranks,
    ordered by group rank, are ``ranks`` (``()``: the default group's)."""

    count: int  # type: ignore[assignment]  # the field shadows tuple.count on purpose: nccl-tests' name
    chunk: int
    rank: int
    world: int
    group: Any = None
    ranks: tuple[int, ...] = ()

    def peer(self, group_rank: int) -> int:
        """The global rank of ``group_rank``: torch.distributed's ``src``, ``dst`` and peers are global."""
        return self.ranks[group_rank] if self.ranks else group_rank


def _pattern(torch: Any, n: int, device: str, dtype: Any) -> Any:
    """1, 2, 3, 1, 2, 3, ...: small integers, exact in every dtype, no zeros."""
    return (torch.arange(n, device=device, dtype=torch.int64) % 3 + 1).to(dtype)


def _tri(n: int) -> int:
    """1 + 2 + ... + n: the sum over the ranks of inputs scaled by rank + 1."""
    return n * (n + 1) // 2


class CollectiveOp:
    """One collective, defined once: everything the bench, the controller, the report and the comparison
    with nccl-tests need to know of it.  A new op is a subclass and an entry in :data:`OPS`.

    Class attributes:

    * ``name``: our name (``comm.<name>()``, the report's ``op``);
    * ``forms``: the forms torch.distributed offers, ``IN_PLACE`` / ``OUT_OF_PLACE``, the default first;
    * ``split``: S is the full buffer made of ``world`` chunks (else S is the buffer of each rank);
    * ``nccl_tests``: the nccl-tests binary that measures the same op (``all_reduce_perf``);
    * ``aliases``: other spellings of the op (NCCL API, nccl-tests) beyond the names derived from
      ``name`` and ``nccl_tests``.

    The per-rank methods (``buffers``, ``fill``, ``expected``, ``run``) get torch or torch.distributed
    passed in, so that this module imports without torch.
    """

    name: ClassVar[str]
    forms: ClassVar[tuple[str, ...]]
    nccl_tests: ClassVar[str]
    split: ClassVar[bool] = False
    aliases: ClassVar[tuple[str, ...]] = ()

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

    def buffers(self, new: Callable[[int], Any], s: Shape, in_place: bool) -> tuple[Any, Any]:
        """(input, output) of one rank; ``new(k)`` allocates ``k`` elements.  The same tensor twice (or
        a view) for an in-place form.  Here: one buffer of S in place, two out of place."""
        inp = new(s.count)
        return (inp, inp) if in_place else (inp, new(s.count))

    def fill(self, torch: Any, v: Any, s: Shape, device: str) -> Any:
        """The input values of one rank, given ``v``: the pattern 1, 2, 3, 1, ... in the buffer's dtype
        and length.  Values that make a wrong element detectable."""
        return v * (s.rank + 1)

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        """The output one rank must see (float64), or None when it has none to check."""
        raise NotImplementedError

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        """The op, once (captured in a graph, or launched eagerly), over ``s.group``."""
        raise NotImplementedError

    @property
    def doc(self) -> str:
        """The first line of the op's docstring."""
        return (type(self).__doc__ or "").strip().splitlines()[0]

    def __repr__(self) -> str:
        return f"<collective {self.name}>"


class AllReduce(CollectiveOp):
    """Every rank gets the sum of every rank's buffer (S bytes each)."""

    name = "all_reduce"
    forms = (IN_PLACE,)  # an out-of-place form would add a copy of S to every iteration (not in torch)
    nccl_tests = "all_reduce_perf"

    def factor(self, n: int) -> float:
        return 2 * (n - 1) / n

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        return _pattern(torch, s.count, device, torch.float64) * _tri(s.world)

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        dist.all_reduce(inp, group=s.group)


class AllGather(CollectiveOp):
    """Every rank gets every rank's chunk; S is the gathered buffer."""

    name = "all_gather"
    forms = (OUT_OF_PLACE, IN_PLACE)
    nccl_tests = "all_gather_perf"
    split = True

    def buffers(self, new: Callable[[int], Any], s: Shape, in_place: bool) -> tuple[Any, Any]:
        c = s.chunk
        out = new(s.count)
        return (out[s.rank * c:(s.rank + 1) * c] if in_place else new(c)), out

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        idx = torch.arange(s.count, device=device)
        base = _pattern(torch, s.chunk, device, torch.float64).repeat(s.world)
        return base * (idx // s.chunk + 1)

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        fn(out, inp, group=s.group)


class ReduceScatter(CollectiveOp):
    """Every rank gets its chunk of the sum of every rank's buffer; S is the full buffer."""

    name = "reduce_scatter"
    forms = (OUT_OF_PLACE, IN_PLACE)
    nccl_tests = "reduce_scatter_perf"
    split = True

    def buffers(self, new: Callable[[int], Any], s: Shape, in_place: bool) -> tuple[Any, Any]:
        c = s.chunk
        inp = new(s.count)
        return inp, (inp[s.rank * c:(s.rank + 1) * c] if in_place else new(c))

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        full = _pattern(torch, s.count, device, torch.float64) * _tri(s.world)
        return full[s.rank * s.chunk:(s.rank + 1) * s.chunk]

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        fn(out, inp, group=s.group)


class Broadcast(CollectiveOp):
    """Every rank gets rank 0's buffer (S bytes)."""

    name = "broadcast"
    forms = (IN_PLACE,)
    nccl_tests = "broadcast_perf"
    aliases = ("bcast",)

    def fill(self, torch: Any, v: Any, s: Shape, device: str) -> Any:
        return v if s.rank == 0 else torch.full_like(v, -3)

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        return _pattern(torch, s.count, device, torch.float64)

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        dist.broadcast(inp, src=s.peer(0), group=s.group)


class Reduce(CollectiveOp):
    """Rank 0 gets the sum of every rank's buffer (S bytes each)."""

    name = "reduce"
    forms = (IN_PLACE,)
    nccl_tests = "reduce_perf"

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        if s.rank != 0:
            return None
        return _pattern(torch, s.count, device, torch.float64) * _tri(s.world)

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        dist.reduce(inp, dst=s.peer(0), group=s.group)


class AllToAll(CollectiveOp):
    """Chunk j of rank i goes to rank j, as chunk i; S is a rank's full buffer."""

    name = "all_to_all"
    forms = (OUT_OF_PLACE,)
    nccl_tests = "alltoall_perf"
    split = True

    def fill(self, torch: Any, v: Any, s: Shape, device: str) -> Any:
        r, n, c = s.rank, s.world, s.chunk
        idx = torch.arange(s.count, device=device)
        # element k of the chunk for rank j: r*n + j + 1, plus a ripple inside the chunk
        return (r * n + idx // c + 1 + (idx % c % 3) * n * n).to(v.dtype)

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        r, n, c = s.rank, s.world, s.chunk
        i = torch.arange(s.count, device=device)
        src = i // c  # source rank of this chunk
        return (src * n + r + 1 + (i % c % 3) * n * n).to(torch.float64)

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        dist.all_to_all_single(out, inp, group=s.group)


class SendRecv(CollectiveOp):
    """Every rank sends to the next and receives from the previous at once (nccl-tests sendrecv)."""

    name = "send_recv"
    forms = (OUT_OF_PLACE,)
    nccl_tests = "sendrecv_perf"

    def expected(self, torch: Any, s: Shape, device: str) -> Any:
        src = (s.rank - 1) % s.world
        return _pattern(torch, s.count, device, torch.float64) * (src + 1)

    def run(self, dist: Any, inp: Any, out: Any, s: Shape) -> None:
        nxt, prv = s.peer((s.rank + 1) % s.world), s.peer((s.rank - 1) % s.world)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, nxt, group=s.group),
                                       dist.P2POp(dist.irecv, out, prv, group=s.group)])
        for req in reqs:
            req.wait()


#: The collectives, by name, in the order of the suites and the reports.
OPS: dict[str, CollectiveOp] = {
    op.name: op
    for op in (AllReduce(), AllGather(), ReduceScatter(), Broadcast(), Reduce(), AllToAll(), SendRecv())
}
#: their specs (:mod:`.specs`)
SPECS = tuple(OpSpec(name, COLLECTIVE, COLLECTIVE) for name in OPS)


def busbw_factor(op: str, world_size: int) -> float:
    """busbw / algbw of ``op`` on ``world_size`` ranks."""
    return OPS[op].factor(world_size)


def element_count(op: str, size_bytes: int, world_size: int, dtype: str) -> int:
    """Elements of the S-byte buffer, rounded down so split ops divide evenly among the ranks (as
    nccl-tests does); at least one element (per rank for split ops)."""
    es = DTYPES[dtype]
    count = size_bytes // es
    if OPS[op].split:
        count = max(world_size, count // world_size * world_size)
    return max(1, count)


# -- a rank's result, and the controller's combination of them ---------------------------------------

@dataclass(frozen=True)
class BenchResult:
    """What :func:`bench` returns from one rank."""

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
    # -- who the others waited for (see :func:`iteration_stats`); compact: per-iteration data on rank 0 only
    straggler: tuple[int, ...] = ()  # rank 0: per iteration, the (group) rank that arrived last; else ()
    own_median_s: float = 0.0  # this rank's own time of an iteration (median over the iterations)
    lag_median_s: float = 0.0  # how much later than the first rank this rank arrived (median)
    wait_median_s: float = 0.0  # how long this rank waited for the last one to arrive (median)
    straggled: int = 0  # iterations in which this rank arrived last
    host: str = ""  # where the rank ran: host, node index, device
    node: int = 0
    device: str = ""
    # -- single operations, each timed on its own (see :func:`single_ops`); per-op data on rank 0 only
    op_times_s: tuple[float, ...] = ()  # rank 0: per single op, the slowest rank's time; else ()
    op_own_p50_s: float = 0.0  # this rank's own single-op times: median and 99th percentile
    op_own_p99_s: float = 0.0
    op_timer: str = ""  # how a single op was timed
    op_timer_resolution_s: float = 0.0  # the timer's step
    op_timer_overhead_s: float = 0.0  # median time of an empty timed interval (start, stop, nothing between)
    op_budget_s: float = 0.0  # the time budget that set the number of single ops


class WrongResult(Exception):
    """A collective left wrong elements on some rank; the message names each such rank."""

    def __init__(self, message: str, bad: Sequence[BenchResult]) -> None:
        super().__init__(message)
        self.bad = tuple(bad)


def _wrong_message(op: str, backend: str, results: Sequence[BenchResult], bad: Sequence[BenchResult]) -> str:
    lines = [
        f"{op} produced a wrong result at {describe_size(results[0].size_bytes)} on {len(results)} ranks "
        f"({backend}):"
    ]
    for r in bad:
        assert r.first_wrong is not None
        i, got, exp = r.first_wrong
        path = f" after {r.wrong_path}" if r.wrong_path else ""
        lines.append(f"  rank {r.rank}: {r.wrong} of {r.checked} elements wrong{path} "
                     f"(first at index {i}: got {got:g}, expected {exp:g})")
    return "\n".join(lines)


def to_measurement(results: Sequence[BenchResult], *, op: str, backend: str, dtype: str,
                   requested_bytes: int) -> Measurement:
    """The measurement of the ranks' results (one per rank, ordered by rank).  Raises :class:`WrongResult`
    if any rank saw a wrong element.

    An iteration ends when the slowest rank ends: its time is the maximum over the ranks, which
    :func:`bench` computed on the ranks and returned on rank 0 only (``results[0].samples_s``).  The
    per-rank summaries and rank 0's per-iteration straggler ids go, column by column, into
    ``info["ranks"]`` (see :func:`ranks_info`); :mod:`pytest_gpucomm.analysis.stragglers` reads them."""
    world = len(results)
    first = results[0]
    bad = [r for r in results if r.wrong]
    if bad:
        raise WrongResult(_wrong_message(op, backend, results, bad), bad)
    samples = list(first.samples_s)
    info: dict[str, Any] = {
        "backend": backend,
        "in_place": first.in_place,  # the form the ranks ran
        "batch": first.batch,
        "graph": bool(first.graph),
        "timer": "device events" if backend != "gloo" else "host clock",
    }
    for key in ("graph_error", "registered", "register_note"):
        if getattr(first, key):
            info[key] = getattr(first, key)
    if first.size_bytes != requested_bytes:
        info["requested_bytes"] = requested_bytes
    info["ranks"] = ranks_info(results)
    if first.op_times_s:
        info["tail"] = tail_info(results)
    return Measurement(
        op=op,
        size_bytes=first.size_bytes,
        samples_s=samples,
        devices=tuple(f"rank{r}" for r in range(world)),
        busbw_factor=busbw_factor(op, world),
        world_size=world,
        dtype=dtype,
        kind="collective",
        info=info,
    )


def ranks_info(results: Sequence[BenchResult]) -> dict[str, list[Any]]:
    """The ranks' compact data, one list per field, in the order of ``results`` (the group's ranks):
    ``rank``, ``node``, ``host``, ``device``, ``own_median_s``, ``lag_median_s``, ``wait_median_s``,
    ``straggled`` (one entry per rank), and ``straggler`` (one entry per iteration: the rank, as named in
    ``rank``, that arrived last).  O(ranks + iterations) numbers per case, never ranks x iterations."""
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
        "straggler": [ids[i] for i in results[0].straggler],
    }


def tail_info(results: Sequence[BenchResult]) -> dict[str, Any]:
    """``info["tail"]``: the single-operation times' figures (the slowest rank's per op: ``n``, ``p50_us``,
    ``p99_us``, ``p999_us`` -- None below 1,000 ops --, ``max_us``, ``jitter`` = p99 / p50), their sparse
    histogram (``hist``, :class:`pytest_gpucomm.gate.sketches.Histogram`: what the tail rule counts), each rank's
    own ``own_p50_us`` / ``own_p99_us``, and the timer: ``timer``, ``resolution_us``, ``overhead_us``
    (the largest over the ranks), ``budget_s``."""
    from ..gate.sketches import Histogram, tail_figures

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


# -- the measuring fixture's per-op methods ---------------------------------------------------------

def op_method(name: str) -> Callable[..., Measurement]:
    """A method for the measuring fixture (a class with ``collective(op, group, size, **kw)``):
    ``comm.<name>(group, size=None, **kw)`` is ``comm.collective(name, group, size, **kw)``."""
    if name not in OPS:
        raise ValueError(f"unknown collective {name!r}; known: {', '.join(OPS)}")

    def method(self: Any, group: Any, size: Any = None, **kw: Any) -> Measurement:
        return self.collective(name, group, size, **kw)

    method.__name__ = name
    method.__doc__ = OPS[name].doc
    return method


def add_op_methods(cls: type) -> type:
    """Class decorator: give ``cls`` a method per op of :data:`OPS` (:func:`op_method`), except where
    the class defines that name itself."""
    for name in OPS:
        if name not in vars(cls):
            method = op_method(name)
            method.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, method)
    return cls


# -- per-rank side --------------------------------------------------------------------------------

class CollectiveCase:
    """Buffers, the op as a callable, and its expected result, for one rank (``rank`` of ``n`` in ``group``,
    whose global ranks are ``ranks``; None and ``()``: the default group)."""

    def __init__(self, torch: Any, dist: Any, op: CollectiveOp, count: int, rank: int, n: int, device: str,
                 dtype: Any, in_place: bool, fill: bool = True, group: Any = None,
                 ranks: tuple[int, ...] = ()) -> None:
        self.torch, self.dist, self.op = torch, dist, op
        self.device, self.dtype, self.in_place = device, dtype, in_place
        self.shape = Shape(count, count // n if op.split else count, rank, n, group, tuple(ranks))
        mk = lambda k: torch.empty(k, device=device, dtype=dtype)  # noqa: E731
        self.inp, self.out = op.buffers(mk, self.shape, in_place)
        if fill:
            self.fill()

    def fill(self) -> None:
        """Inputs that make a wrong element detectable; outputs poisoned."""
        if self.out is not self.inp:
            self.out.fill_(-7)
        v = _pattern(self.torch, self.inp.numel(), self.device, self.dtype)
        self.inp.copy_(self.op.fill(self.torch, v, self.shape, self.device))

    def expected(self) -> Any:
        return self.op.expected(self.torch, self.shape, self.device)

    def result(self) -> Any:
        return self.out

    def run(self) -> None:
        self.op.run(self.dist, self.inp, self.out, self.shape)


class TimedLoop:
    """Adapter for the timing engine: graph replay + events on GPU, a loop + host clock on CPU.

    On GPU the first ``eager_calls`` samples (the warm-up, which creates the communicator) launch the op
    eagerly; every later sample of ``batch`` iterations replays a CUDA/HIP graph of ``min(batch, GRAPH_OPS)``
    back-to-back ops (captured once per size) ``batch / GRAPH_OPS`` times, as ``nccl-tests -G`` does, so
    small messages are timed without Python's launch cost.  If capture fails, samples fall back to eager
    launches and the error is reported.
    """

    def __init__(self, torch: Any, case: CollectiveCase, gpu: bool, use_graph: bool, eager_calls: int) -> None:
        self.torch, self.case, self.gpu = torch, case, gpu
        self.use_graph = gpu and use_graph
        self.eager_calls = eager_calls
        self.calls = 0
        self.graphs: dict[int, Any] = {}
        self.graph_error = ""

    def capture(self, batch: int) -> Any:
        """A graph of ``batch`` back-to-back ops, or None (and ``graph_error`` says why) if capture fails."""
        torch = self.torch
        try:
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(batch):
                    self.case.run()
            torch.cuda.synchronize()
            return g
        except Exception as e:  # fall back to eager launches, and say so in the result
            self.graph_error = f"{type(e).__name__}: {e}"
            torch.cuda.synchronize()
            return None

    def _graph(self, batch: int) -> Any:
        if batch not in self.graphs and not self.graph_error:
            g = self.capture(batch)
            if g is not None:
                self.graphs[batch] = g
        return self.graphs.get(batch)

    def release(self) -> None:
        self.graphs.clear()

    def sample(self, batch: int) -> Callable[[], float]:
        torch = self.torch
        self.calls += 1
        if self.gpu:
            g, replays = None, 1
            if self.use_graph and self.calls > self.eager_calls:
                ops, replays = graph_shape(batch)
                g = self._graph(ops)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            if g is not None:
                for _ in range(replays):
                    g.replay()
            else:
                for _ in range(batch):
                    self.case.run()
            end.record()
            return lambda: start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        for _ in range(batch):
            self.case.run()
        dt = time.perf_counter() - t0
        return lambda: dt

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()


#: Registered (zero-copy) buffers pay off for large messages only.
REGISTER_MIN_BYTES = 4 << 20

#: Ops per CUDA/HIP graph, and graph replays per sample.  In torch's captured graphs the time per op grows
#: with the number of ops in the graph (2 x H200, torch 2.11, NCCL 2.28.9, 1 KiB all_reduce: 8.4 us per op
#: at 5-10 ops, 13 us at 100, 20 us at 200), while nccl-tests' own graphs stay at 6.2-6.4 us from 20 to 100
#: ops.  A sample of small messages is therefore 10 replays of a 5-op graph between two events, and the
#: host waits for it before the next (as ``nccl-tests -G 10`` launches graphs): of the shapes tried (1 to
#: 200 ops per graph, 1 or 10 replays) this gave the lowest time per op for every op measured, and it makes
#: the small-message batch the same in every run, so baselines and gate runs measure the same thing.
GRAPH_OPS = 5
GRAPH_REPLAYS = 10

def graph_shape(batch: int) -> tuple[int, int]:
    """(ops per graph, replays) for a batch of ``batch`` ops: whole graphs of ``GRAPH_OPS`` (the plan makes
    larger batches multiples of it), or one graph of a smaller batch."""
    ops = GRAPH_OPS if batch % GRAPH_OPS == 0 else batch
    return ops, batch // ops


#: Environment defaults for nccl workers, unless the user's environment sets them.  NCCL registers the
#: buffers of captured collectives by itself (NCCL_GRAPH_REGISTER=1); with torch's allocators that gave
#: wrong results on 2 x H200 (out-of-place all_gather replayed from a graph left the peer's half
#: unwritten, and after such graphs were freed, explicitly registered buffers came back wrong too), and
#: once a hang.  With it off, and the buffers registered explicitly (below), every op was right and as fast
#: as nccl-tests.
NCCL_WORKER_ENV = {"NCCL_GRAPH_REGISTER": "0"}


def worker_env(backend: str, environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The defaults of ``NCCL_WORKER_ENV`` that ``environ`` (the user's environment) does not set."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    if backend != "nccl":
        return {}
    return {k: v for k, v in NCCL_WORKER_ENV.items() if k not in env}


def _registered_buffers(torch: Any, dist: Any, device: str, group: Any = None) -> tuple[Any, Any, str]:
    """A memory pool of the communication library's own allocator (ncclMemAlloc), registered with the
    communicator of ``group`` (None: the default group), as nccl-tests allocates its buffers: zero-copy
    transfers become possible for all_gather, all_to_all and send/recv.  Returns (pool, backend, note); pool
    None when unavailable."""
    try:
        backend = (group if group is not None else dist.group.WORLD)._get_backend(torch.device(device))
        pool = torch.cuda.MemPool(backend.mem_allocator)
        return pool, backend, ""
    except Exception as e:  # older torch, or a backend without an allocator
        return None, None, f"{type(e).__name__}: {e}"


class IterationStats(NamedTuple):
    """One rank's share of :func:`iteration_stats`."""

    times: list[float]  # per iteration: the time of the slowest rank (the same on every rank)
    straggler: list[int]  # per iteration: the rank that arrived last (the same on every rank)
    own_median_s: float
    lag_median_s: float
    wait_median_s: float
    straggled: int  # iterations in which this rank arrived last


def iteration_stats(torch: Any, dist: Any, own: Sequence[float], rank: int, world: int, device: str,
                    group: Any = None) -> IterationStats:
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

    Each rank keeps the medians of its own time, lag and wait over the iterations, and how often it was
    the straggler; every rank gets the k iteration times and straggler ids, and :func:`bench` returns
    them on rank 0 only, so that the results gathered at rank 0 grow as ranks + iterations, not ranks x
    iterations.  The iteration times are exactly the per-iteration maximum that the controller used to
    compute from every rank's samples (the same float64 values).

    Where an op does not make every rank wait for every other (broadcast and reduce from a root, and
    pairs that only wait for each other), the same figures are still defined -- the longest own time per
    iteration, the rank with the shortest, the gaps to both -- but "arrived last" holds only among ranks
    that wait for each other: the rank with the shortest time may simply have had less to wait for.

    Raises ValueError, on every rank alike, when the ranks took different numbers of samples (the timing
    plan is agreed, so they cannot, unless the ranks ran with different settings).
    """
    import statistics

    k = len(own)
    counts = torch.tensor([float(k), -float(k)], dtype=torch.float64, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=group)
    most, fewest = int(counts[0].item()), int(-counts[1].item())
    if most != fewest:
        raise ValueError(f"the ranks took different numbers of timed samples ({fewest} to {most}; rank {rank}: "
                         f"{k}): the timing plan should have been agreed by every rank")
    if k == 0:
        return IterationStats([], [], 0.0, 0.0, 0.0, 0)
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
    )


#: single-op phase: the most and the fewest single ops timed per case
TAIL_MAX_OPS = 10_000
TAIL_MIN_OPS = 20
#: the most single ops enqueued behind one latch (the device queue must hold them all while the latch holds)
TAIL_CHUNK = 64
#: a latch not released by the host within this long is released by a timer (the host was blocked: the
#: device queue was full); that chunk's times include the wait and are dropped
LATCH_RELEASE_S = 2.0


class SingleOps(NamedTuple):
    """One rank's single-op phase (see :func:`single_ops`)."""

    own_s: list[float]  # this rank's time of each single op
    timer: str
    resolution_s: float
    overhead_s: float


class FlagLatch:
    """Hold a CUDA stream until the host says go: the stream waits (``cuStreamWaitValue32``, a stream memory
    operation of the driver) until a word of pinned host memory reaches a value, which the host writes once
    it has enqueued everything behind the latch.  Unlike a spin kernel of estimated length, the device never
    starts before the host is done, however long the host takes, so no op's interval holds host time.

    A timer releases a latch the host has not released within ``LATCH_RELEASE_S`` (a host blocked because
    the device queue is full would otherwise wait forever); :meth:`release` then returns False.
    ``FlagLatch.create`` returns None where the driver or the stream memory operations are missing."""

    def __init__(self, torch: Any, lib: Any) -> None:
        import ctypes
        import threading

        self._c = ctypes
        # the _v2 entry point (CUDA 11.7+) needs no driver module option; the first one may
        self._wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
        self._wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self._wait.restype = ctypes.c_int
        self.flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        dptr = ctypes.c_uint64()
        get = lib.cuMemHostGetDevicePointer_v2
        get.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
        get.restype = ctypes.c_int
        rc = get(ctypes.byref(dptr), ctypes.c_void_p(self.flag.data_ptr()), 0)
        if rc:
            raise OSError(f"cuMemHostGetDevicePointer failed with CUresult {rc}")
        self.dptr = dptr.value
        self.word = ctypes.c_int32.from_address(self.flag.data_ptr())
        self.value = 0
        self._timer: Any = None
        self._lock = threading.Lock()

    #: why the last :meth:`create` gave None
    unavailable = ""

    @classmethod
    def create(cls, torch: Any) -> "Optional[FlagLatch]":
        import ctypes

        if getattr(torch.version, "hip", None) or not getattr(torch.version, "cuda", None):
            FlagLatch.unavailable = "not a CUDA build of torch"
            return None
        try:
            latch = cls(torch, ctypes.CDLL("libcuda.so.1"))
            latch.hold(torch.cuda.current_stream())  # a first hold and release proves the call works here
            latch.release()
            torch.cuda.current_stream().synchronize()
            return latch
        except (OSError, AttributeError, RuntimeError) as e:
            FlagLatch.unavailable = f"{type(e).__name__}: {e}"
            return None

    def hold(self, stream: Any) -> None:
        import threading

        self.value = (self.value + 1) & 0x7FFFFFFF
        rc = self._wait(self._c.c_void_p(stream.cuda_stream), self.dptr, self.value, 0)  # 0: CU_STREAM_WAIT_VALUE_GEQ
        if rc:
            raise RuntimeError(f"cuStreamWaitValue32 failed with CUresult {rc}")
        self._timer = threading.Timer(LATCH_RELEASE_S, self._set)
        self._timer.daemon = True
        self._timer.start()

    def _set(self) -> bool:
        with self._lock:
            if self.word.value == self.value:
                return False
            self.word.value = self.value
            return True

    def release(self) -> bool:
        """Let the stream go; False when the timer had already released it."""
        self._timer.cancel()
        return self._set()


def single_ops(torch: Any, run: Callable[[], None], gpu: bool, n_ops: int, launches: int = 1) -> SingleOps:
    """Time ``n_ops`` single ops, each on its own: on GPU a pair of device events around each op, on CPU the
    host clock.  Each rank calls it with the same ``n_ops`` (the ops are collectives).

    GPU: the ops are enqueued in chunks of at most ``TAIL_CHUNK`` collectives (an op of ``launches``
    collectives, a pattern's iteration, counts as that many) behind a :class:`FlagLatch`, which the host
    releases once the whole chunk is enqueued: the ops and their events run back to back on the device, and
    an op's time is its device time, never the host's launch gap.  A chunk whose latch the timer had to
    release (the device queue was full) is timed again in smaller chunks; when even one op does not fit, or
    one op holds more than ``TAIL_CHUNK`` collectives, or the latch is not available (no driver stream memory
    operations), the ops are timed without a latch: the device then starts each as soon as it is enqueued
    (long iterations keep the host ahead of the device; the timer string says which way was used).  The
    timer's figures come from empty event pairs enqueued the same way (resolution: the smallest step between
    distinct intervals; overhead: the median empty interval).  CPU: resolution from
    ``time.get_clock_info``, overhead the median of back-to-back ``perf_counter`` pairs."""
    if not gpu:
        pairs = []
        for _ in range(1000):
            t0 = time.perf_counter()
            pairs.append(time.perf_counter() - t0)
        own: list[float] = []
        for _ in range(n_ops):
            t0 = time.perf_counter()
            run()
            own.append(time.perf_counter() - t0)
        pairs.sort()
        return SingleOps(own, "host clock per operation", time.get_clock_info("perf_counter").resolution,
                         pairs[len(pairs) // 2])
    cuda = torch.cuda
    launches = max(1, int(launches))
    latch = FlagLatch.create(torch) if launches <= TAIL_CHUNK else None
    why = FlagLatch.unavailable if launches <= TAIL_CHUNK else f"one op holds {launches} collectives"
    stream = cuda.current_stream()

    def chunk(k: int, body: Optional[Callable[[], None]]) -> tuple[list[float], bool]:
        evs = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(k)]
        if latch is not None:
            latch.hold(stream)
        for s_, e_ in evs:
            s_.record()
            if body is not None:
                body()
            e_.record()
        released = latch.release() if latch is not None else True
        cuda.synchronize()
        return [s_.elapsed_time(e_) / 1e3 for s_, e_ in evs], released

    empty, _ = chunk(100, None)
    own = []
    unlatched = 0
    size = max(1, TAIL_CHUNK // launches)
    # Every rank makes exactly n_ops calls, whatever its latch did (the ops are collectives, and the ranks'
    # times are paired op by op): a chunk the timer released keeps its times, counted as unlatched, and the
    # next chunks are smaller -- or, after a single op, unlatched.
    while len(own) < n_ops:
        got, released = chunk(min(size, n_ops - len(own)), run)
        own += got
        if not released:
            unlatched += len(got)
            if size == 1:
                latch, why = None, "one op does not fit the device queue behind it"
            size = max(1, size // 2)
    seen = sorted(set(empty) | set(own))
    # the clock's step: the smallest difference between two distinct intervals measured (the events' tick,
    # 32 ns on an H200, not the ~1.3 us an empty pair takes, which is the overhead)
    steps = [b - a for a, b in zip(seen, seen[1:]) if b - a > 1e-12]
    empty.sort()
    how = "device events per operation, behind a host-released latch" if latch is not None else \
        f"device events per operation, no latch ({why})"
    if unlatched:
        how += f"; {unlatched} of {n_ops} ops behind a latch the timer released (host time included)"
    return SingleOps(own, how, min(steps) if steps else 0.0, empty[len(empty) // 2])


def agreement(torch: Any, dist: Any, device: str, group: Any = None) -> Callable[[float], float]:
    """``agree(x)``: the largest ``x`` over the ranks of ``group`` (None: the default group), on every rank --
    how the ranks agree on a timing plan or a pace (every rank calls it, in the same order)."""
    buf = torch.zeros(1, dtype=torch.float32 if device.startswith("cuda") else torch.float64, device=device)

    def agree(x: float) -> float:
        buf.fill_(x)
        dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=group)
        return float(buf.item())

    return agree


def single_op_phase(torch: Any, dist: Any, run: Callable[[], None], sync: Callable[[], None],
                    agree: Callable[[float], float], gpu: bool, budget_s: float,
                    group: Any = None, launches: int = 1) -> Optional[SingleOps]:
    """The single-op phase of a case, after its timed samples, on every rank of ``group``: ``run`` (one op,
    or one iteration of a pattern) three times (and, for short ops, 20 more) back to back to get the agreed
    (slowest rank's, ``agree``) wall time of one, then as many single ops as fill ``budget_s`` at that
    time, between ``TAIL_MIN_OPS`` and ``TAIL_MAX_OPS`` (:func:`single_ops`), so that every rank makes the
    same calls.  None when ``budget_s`` is 0 or less (the phase skipped).  ``launches``: the collectives one
    ``run`` makes (:func:`single_ops`)."""
    if budget_s <= 0:
        return None

    def wall(k: int) -> float:  # k ops enqueued back to back, then waited for: per op, the host or the device
        sync()
        t0 = time.perf_counter()
        for _ in range(k):
            run()
        sync()
        return (time.perf_counter() - t0) / k

    per_op = max(agree(wall(3)), 1e-9)
    if budget_s / per_op > 100:  # short ops: the wait at the end weighs on 3 ops; 20 tell the pace
        per_op = max(agree(wall(20)), 1e-9)
    n_ops = max(TAIL_MIN_OPS, min(TAIL_MAX_OPS, int(budget_s / per_op)))
    dist.barrier(group=group)
    return single_ops(torch, run, gpu, n_ops, launches)


def single_op_fields(torch: Any, dist: Any, singles: Optional[SingleOps], budget_s: float, rank: int, world: int,
                     device: str, group: Any = None) -> dict[str, Any]:
    """:class:`BenchResult`'s single-op fields (``op_times_s``, per op the slowest rank's time, on rank 0 only;
    this rank's own p50 and p99; the timer; the budget) of the phase ``singles``; {} where it was skipped.
    Every rank of ``group`` calls it (:func:`iteration_stats`)."""
    if singles is None:
        return {}
    import statistics

    op_its = iteration_stats(torch, dist, singles.own_s, rank, world, device, group=group)
    own_sorted = sorted(singles.own_s)
    return dict(op_times_s=tuple(op_its.times) if rank == 0 else (), op_own_p50_s=statistics.median(own_sorted),
                op_own_p99_s=own_sorted[min(len(own_sorted) - 1, int(0.99 * len(own_sorted)))],
                op_timer=singles.timer, op_timer_resolution_s=singles.resolution_s,
                op_timer_overhead_s=singles.overhead_s, op_budget_s=budget_s)


def bench(ctx: Any, op: str, size_bytes: int, dtype: str = "float32", in_place: Optional[bool] = None,
          min_time_s: float = DEFAULT_MIN_TIME_S, graph: bool = True, max_samples: int = 1000,
          register: bool = True, tail_time_s: Optional[float] = None) -> BenchResult:
    """Per-rank task: time ``op`` at ``size_bytes`` and check its result.  Runs on every rank.

    The op runs over ``ctx.group`` (None: the default group), as rank ``ctx.rank`` of ``ctx.world_size``:
    every torch.distributed call here -- the op, the agreement on the plan, the barriers -- passes that
    group, so that the groups of a kind (one per node, one per local rank) run at once, each on its own.

    After the batched samples (the median figures), single ops are timed one by one (:func:`single_ops`):
    as many as fill ``tail_time_s`` (None: ``TAIL_TIME_FACTOR`` x ``min_time_s``) at the agreed (slowest
    rank's) wall time of one, between ``TAIL_MIN_OPS`` and ``TAIL_MAX_OPS``; 0 skips the phase."""
    import torch
    import torch.distributed as dist

    from .timing import TimingSettings, measure

    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    spec = OPS[op]
    if in_place is None:
        in_place = spec.default_in_place
    form = IN_PLACE if in_place else OUT_OF_PLACE
    if form not in spec.forms:
        raise ValueError(f"{op} has no {form.replace('_', '-')} form in torch.distributed (it has: "
                         f"{', '.join(f.replace('_', '-') for f in spec.forms)})")
    n, r = ctx.world_size, ctx.rank
    group = getattr(ctx, "group", None)
    ranks = tuple(getattr(ctx, "group_ranks", ()) or ())
    gpu = ctx.device.startswith("cuda")
    tdtype = getattr(torch, dtype)
    count = element_count(op, size_bytes, n, dtype)
    pool: Any = None
    backend: Any = None
    pool_note = ""
    if gpu and register and count * DTYPES[dtype] >= REGISTER_MIN_BYTES:
        dist.all_reduce(torch.zeros(1, device=ctx.device), group=group)  # the communicator, before the pool
        pool, backend, pool_note = _registered_buffers(torch, dist, ctx.device, group)
    case = None
    if pool is not None:
        try:
            with torch.cuda.use_mem_pool(pool):  # only the buffers: fill()'s temporaries stay outside
                case = CollectiveCase(torch, dist, spec, count, r, n, ctx.device, tdtype, in_place, fill=False,
                             group=group, ranks=ranks)
            case.fill()
            backend.register_mem_pool(pool)
        except Exception as e:
            pool_note = f"{type(e).__name__}: {e}"
            backend = None
    if case is None:
        case = CollectiveCase(torch, dist, spec, count, r, n, ctx.device, tdtype, in_place, group=group, ranks=ranks)
    graphs = gpu and graph
    batch = GRAPH_OPS * GRAPH_REPLAYS
    settings = TimingSettings(
        min_time_s=min_time_s,
        max_samples=max_samples,
        warmup_min_s=0.02,
        target_batch_s=1e-3 if graphs else 200e-6,
        # GPU: a batch is replays of a graph of GRAPH_OPS ops, and the host waits for each batch of small
        # ops before the next (a long queue of captured collectives slows each of them; see GRAPH_OPS)
        batch_step=GRAPH_OPS if graphs else 1,
        max_batch=batch if graphs else None,
        max_inflight_iters=batch if graphs else 256,
    )
    timed: Optional[TimedLoop]  # set to None at the end, to drop the buffers and graphs
    timed = TimedLoop(torch, case, gpu, graph, eager_calls=settings.warmup_iters)
    agree = agreement(torch, dist, ctx.device, group)

    def prepare(p: Any) -> None:
        t = cast(TimedLoop, timed)  # measure calls this before timed is dropped
        t.sample(p.batch)  # capture (on GPU) outside the timed samples
        t.sync()
        dist.barrier(group=group)

    samples, plan = measure(timed, settings, agree=agree, prepare=prepare)
    budget = TAIL_TIME_FACTOR * min_time_s if tail_time_s is None else float(tail_time_s)
    singles = single_op_phase(torch, dist, case.run, timed.sync, agree, gpu, budget, group=group)
    # the timed samples replayed a graph if the graph of their shape was captured
    graph_inner = plan.batch if timed.use_graph and graph_shape(plan.batch)[0] in timed.graphs else 0
    # Correctness after timing, on each path that was timed (a graph replay, eager launches): fresh
    # inputs, poisoned outputs, one op, compare.
    timed.release()
    paths: list[tuple[str, Callable[[], None]]] = []
    check_graph = None
    if graph_inner:
        check_graph = timed.capture(1)
        if check_graph is not None:
            paths.append(("a graph replay", check_graph.replay))
    paths.append(("an eager launch" if graph_inner else "", case.run))
    exp = case.expected()
    wrong, first, checked, wrong_path = 0, None, 0, ""
    for path, run_once in paths:
        case.fill()
        timed.sync()
        dist.barrier(group=group)
        run_once()
        timed.sync()
        if exp is None:
            continue
        got = case.result().to(torch.float64)
        tol = 0.0 if dtype == "float32" else 1e-2
        bad = (got - exp).abs() > tol * exp.abs()
        n_bad = int(bad.sum().item())
        checked = int(got.numel())
        if n_bad > wrong:
            i = int(bad.nonzero()[0].item())
            wrong, first, wrong_path = n_bad, (i, float(got[i].item()), float(exp[i].item())), path
        del got, bad
    del exp, paths, check_graph
    registered = pool is not None and backend is not None
    if registered:
        try:
            backend.deregister_mem_pool(pool)
        except Exception as e:
            pool_note = f"deregister: {type(e).__name__}: {e}"
    graph_error = timed.graph_error
    case = timed = None  # drop the buffers and graphs before the pool and the cache are released
    if gpu:
        torch.cuda.synchronize()
        del pool
        torch.cuda.empty_cache()
    # Who the others waited for: every rank of the group, after the correctness check (see iteration_stats).
    # Rank 0 alone returns the per-iteration data, the others their summaries (compact gathered results).
    its = iteration_stats(torch, dist, samples, r, n, ctx.device, group=group)
    first_rank = r == 0
    tail = single_op_fields(torch, dist, singles, budget, r, n, ctx.device, group=group)
    return BenchResult(
        rank=r,
        in_place=in_place,
        samples_s=tuple(its.times) if first_rank else (),
        batch=plan.batch,
        graph=graph_inner,
        graph_error=graph_error,
        registered=registered,
        register_note=pool_note,
        size_bytes=count * DTYPES[dtype],
        wrong=wrong,
        checked=checked,
        first_wrong=first,
        wrong_path=wrong_path,
        straggler=tuple(its.straggler) if first_rank else (),
        own_median_s=its.own_median_s,
        lag_median_s=its.lag_median_s,
        wait_median_s=its.wait_median_s,
        straggled=its.straggled,
        host=ctx.host or socket.gethostname(),
        node=ctx.node_rank,
        device=ctx.device,
        **tail,
    )
