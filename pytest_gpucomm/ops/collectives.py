"""Collectives over a torch.distributed process group, timed as nccl-tests times them.

This module holds what each op is and the two ends of a measurement:

* the ops: one :class:`~.collective_op.CollectiveOp` subclass per op, registered in :data:`OPS` -- its
  buffers, input fill, expected result and torch.distributed call (per rank, torch passed in), its busbw
  factor, its forms, whether S is split among the ranks, and its nccl-tests counterpart.  Everything else
  (the bench, the controller, the suites, the comparison with nccl-tests, the tests) reads OPS; a new op is
  a subclass and an entry here;
* the controller's side: :func:`to_measurement` (the ranks' results, :class:`~.collective_results.BenchResult`,
  -> one :class:`~pytest_gpucomm.measurement.Measurement`, or :class:`~.collective_results.WrongResult`),
  :func:`op_method` / :func:`add_op_methods` (the measuring fixture's ``comm.all_reduce(...)`` etc.), and
  the environment the NCCL workers need (:func:`worker_env`);
* the per-rank task :func:`bench`, run on every rank of the group (by the rank pool): it builds the
  buffers, warms up, agrees with the other ranks on a plan, captures up to ``GRAPH_OPS`` iterations in a
  CUDA/HIP graph on GPU and replays it (as ``nccl-tests -G``) or loops on CPU, times each sample (device
  events / host clock), and finally re-initializes the buffers, runs the op once more -- from a graph and
  eagerly, the paths that were timed -- and counts the wrong elements of the result; last, with the other
  ranks, it finds each iteration's time (that of the slowest rank) and the rank the others waited for.

What the task is made of lives beside it: the op base class and a rank's buffer shape
(:mod:`.collective_op`), the case's buffers and its timed loop with graphs and registered buffers
(:mod:`.timed_case`), what the ranks work out together (:mod:`.across_ranks`), the single ops timed one by
one after the samples (:mod:`.single_op_timing`), and a rank's result (:mod:`.collective_results`).

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
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, cast

from ..measurement import Measurement, MeasurementInfo
from ..units import describe_size
from ..vocab import (DEFAULT_DTYPE, DEFAULT_MAX_SAMPLES, DEFAULT_MIN_TIME_S, DTYPES, RANK_WARMUP_MIN_S,
                     TAIL_TIME_FACTOR)
from .across_ranks import agreement, iteration_stats
from .collective_op import IN_PLACE, OUT_OF_PLACE, CollectiveOp, Shape, small_pattern, triangular
from .collective_results import BenchResult, WrongResult, ranks_clocks, ranks_info, tail_info
from .single_op_timing import single_op_fields, single_op_phase
from .specs import COLLECTIVE, OpSpec
from .timed_case import (GRAPH_OPS, GRAPH_REPLAYS, REGISTER_MIN_BYTES, CollectiveCase, TimedLoop, graph_shape,
                         registered_buffers)

if TYPE_CHECKING:
    from torch import Tensor
    from ..ranks.context import RankContext
    from .clocks import Sampler
    from .single_op_timing import SingleOps
    from .timing import Plan, TimingSettings

__all__ = [
    "OPS",
    "busbw_factor",
    "element_count",
    "to_measurement",
    "op_method",
    "add_op_methods",
    "NCCL_WORKER_ENV",
    "worker_env",
    "bench",
]


class AllReduce(CollectiveOp):
    """Every rank gets the sum of every rank's buffer (S bytes each)."""

    name = "all_reduce"
    forms = (IN_PLACE,)  # an out-of-place form would add a copy of S to every iteration (not in torch)
    nccl_tests = "all_reduce_perf"

    def factor(self, n: int) -> float:
        return 2 * (n - 1) / n

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        return small_pattern(torch, s.count, device, torch.float64) * triangular(s.world)

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
        dist.all_reduce(inp, group=s.group)


class AllGather(CollectiveOp):
    """Every rank gets every rank's chunk; S is the gathered buffer."""

    name = "all_gather"
    forms = (OUT_OF_PLACE, IN_PLACE)
    nccl_tests = "all_gather_perf"
    split = True

    def buffers(self, new: Callable[[int], Tensor], s: Shape, in_place: bool) -> tuple[Tensor, Tensor]:
        c = s.chunk
        out = new(s.count)
        return (out[s.rank * c:(s.rank + 1) * c] if in_place else new(c)), out

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        idx = torch.arange(s.count, device=device)
        base = small_pattern(torch, s.chunk, device, torch.float64).repeat(s.world)
        return base * (idx // s.chunk + 1)

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        fn(out, inp, group=s.group)


class ReduceScatter(CollectiveOp):
    """Every rank gets its chunk of the sum of every rank's buffer; S is the full buffer."""

    name = "reduce_scatter"
    forms = (OUT_OF_PLACE, IN_PLACE)
    nccl_tests = "reduce_scatter_perf"
    split = True

    def buffers(self, new: Callable[[int], Tensor], s: Shape, in_place: bool) -> tuple[Tensor, Tensor]:
        c = s.chunk
        inp = new(s.count)
        return inp, (inp[s.rank * c:(s.rank + 1) * c] if in_place else new(c))

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        full = small_pattern(torch, s.count, device, torch.float64) * triangular(s.world)
        return full[s.rank * s.chunk:(s.rank + 1) * s.chunk]

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        fn(out, inp, group=s.group)


class Broadcast(CollectiveOp):
    """Every rank gets rank 0's buffer (S bytes)."""

    name = "broadcast"
    waits_for_all = False  # see CollectiveOp
    forms = (IN_PLACE,)
    nccl_tests = "broadcast_perf"
    aliases = ("bcast",)

    def fill(self, torch: ModuleType, v: Tensor, s: Shape, device: str) -> Tensor:
        return v if s.rank == 0 else torch.full_like(v, -3)

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        return small_pattern(torch, s.count, device, torch.float64)

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
        dist.broadcast(inp, src=s.peer(0), group=s.group)


class Reduce(CollectiveOp):
    """Rank 0 gets the sum of every rank's buffer (S bytes each)."""

    name = "reduce"
    waits_for_all = False  # see CollectiveOp
    forms = (IN_PLACE,)
    nccl_tests = "reduce_perf"

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        if s.rank != 0:
            return None
        return small_pattern(torch, s.count, device, torch.float64) * triangular(s.world)

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
        dist.reduce(inp, dst=s.peer(0), group=s.group)


class AllToAll(CollectiveOp):
    """Chunk j of rank i goes to rank j, as chunk i; S is a rank's full buffer."""

    name = "all_to_all"
    forms = (OUT_OF_PLACE,)
    nccl_tests = "alltoall_perf"
    split = True

    def fill(self, torch: ModuleType, v: Tensor, s: Shape, device: str) -> Tensor:
        r, n, c = s.rank, s.world, s.chunk
        idx = torch.arange(s.count, device=device)
        # element k of the chunk for rank j: r*n + j + 1, plus a ripple inside the chunk
        return (r * n + idx // c + 1 + (idx % c % 3) * n * n).to(v.dtype)

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        r, n, c = s.rank, s.world, s.chunk
        i = torch.arange(s.count, device=device)
        src = i // c  # source rank of this chunk
        return (src * n + r + 1 + (i % c % 3) * n * n).to(torch.float64)

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
        dist.all_to_all_single(out, inp, group=s.group)


class SendRecv(CollectiveOp):
    """Every rank sends to the next and receives from the previous at once (nccl-tests sendrecv)."""

    name = "send_recv"
    waits_for_all = False  # see CollectiveOp
    forms = (OUT_OF_PLACE,)
    nccl_tests = "sendrecv_perf"

    def expected(self, torch: ModuleType, s: Shape, device: str) -> Optional[Tensor]:
        src = (s.rank - 1) % s.world
        return small_pattern(torch, s.count, device, torch.float64) * (src + 1)

    def run(self, dist: ModuleType, inp: Tensor, out: Tensor, s: Shape) -> None:
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


# -- the controller's side: the ranks' results combined, the measuring fixture's per-op methods -----------

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
    info: MeasurementInfo = {
        "backend": backend,
        "in_place": first.in_place,  # the form the ranks ran
        "batch": first.batch,
        "graph": bool(first.graph),
        "timer": "device events" if backend != "gloo" else "host clock",
    }
    if first.graph_error:
        info["graph_error"] = first.graph_error
    if first.registered:
        info["registered"] = first.registered
    if first.register_note:
        info["register_note"] = first.register_note
    if first.size_bytes != requested_bytes:
        info["requested_bytes"] = requested_bytes
    info["ranks"] = ranks_info(results)
    if first.op_times_s:
        info["tail"] = tail_info(results)
    info.update({"clocks": ranks_clocks(results)} if any(r.clocks for r in results) else {})
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


# -- per-rank side: the steps of one case, kept apart as nccl-tests' common.cu keeps them ----------------

def _form(op: str, dtype: str, in_place: Optional[bool]) -> tuple[CollectiveOp, bool]:
    """The op and the form it runs in (``in_place`` None: the op's default); a ValueError for an unknown op or
    dtype, or a form the op does not have in torch.distributed."""
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
    return spec, in_place


class _RankCase:
    """One rank's case while it is measured: its buffers (registered with the communicator for large messages,
    as nccl-tests registers them), the timed loop over them, and what became of the registration.  Every step
    reads them from here, so that :meth:`clean_up` drops the last references to the buffers and graphs before
    the pool and the allocator's cache are released."""

    clocks: Sampler  # the devices' clocks, read beside the timed samples (set by time())

    def __init__(self, torch: ModuleType, dist: ModuleType, ctx: RankContext, spec: CollectiveOp, count: int,
                 dtype: str, in_place: bool, register: bool) -> None:
        self.torch, self.dist, self.device, self.group = torch, dist, ctx.device, ctx.group
        self.gpu = ctx.device.startswith("cuda")
        self.waits_for_all = spec.waits_for_all
        self.pool: Any = None
        self.backend: Any = None
        self.note = ""
        self.timed: Optional[TimedLoop] = None  # set by time()
        group, ranks, n, r = ctx.group, tuple(ctx.group_ranks), ctx.world_size, ctx.rank
        tdtype = getattr(torch, dtype)
        if self.gpu and register and count * DTYPES[dtype] >= REGISTER_MIN_BYTES:
            dist.all_reduce(torch.zeros(1, device=ctx.device), group=group)  # the communicator, before the pool
            self.pool, self.backend, self.note = registered_buffers(torch, dist, ctx.device, group)
        case = None
        if self.pool is not None:
            try:
                with torch.cuda.use_mem_pool(self.pool):  # only the buffers: fill()'s temporaries stay outside
                    case = CollectiveCase(torch, dist, spec, count, r, n, ctx.device, tdtype, in_place, fill=False,
                                          group=group, ranks=ranks)
                case.fill()
                self.backend.register_mem_pool(self.pool)
            except Exception as e:
                self.note = f"{type(e).__name__}: {e}"
                self.backend = None
        if case is None:
            case = CollectiveCase(torch, dist, spec, count, r, n, ctx.device, tdtype, in_place, group=group,
                                  ranks=ranks)
        self.case: Optional[CollectiveCase] = case

    def settings(self, graph: bool, min_time_s: float, max_samples: int) -> TimingSettings:
        """The timing engine's settings: on GPU with graphs, a batch is replays of a graph of GRAPH_OPS ops."""
        from .timing import TimingSettings

        graphs = self.gpu and graph
        batch = GRAPH_OPS * GRAPH_REPLAYS
        return TimingSettings(
            min_time_s=min_time_s,
            max_samples=max_samples,
            warmup_min_s=RANK_WARMUP_MIN_S,
            target_batch_s=1e-3 if graphs else 200e-6,
            # GPU: a batch is replays of a graph of GRAPH_OPS ops, and the host waits for each batch of small
            # ops before the next (a long queue of captured collectives slows each of them; see GRAPH_OPS)
            batch_step=GRAPH_OPS if graphs else 1,
            max_batch=batch if graphs else None,
            max_inflight_iters=batch if graphs else 256,
        )

    def time(self, graph: bool, min_time_s: float, max_samples: int
             ) -> tuple[list[float], Plan, Callable[[float], float]]:
        """The timed samples (warm-up, the agreed plan, graph capture outside the samples; the device's clocks
        read beside them into ``clocks``): the per-iteration times, the plan and ``agree``, the ranks'
        agreement on a figure (the single ops agree on their pace)."""
        from .clocks import sampler_for
        from .timing import measure

        settings = self.settings(graph, min_time_s, max_samples)
        assert self.case is not None
        self.timed = TimedLoop(self.torch, self.case, self.gpu, graph, eager_calls=settings.warmup_iters)
        agree = agreement(self.torch, self.dist, self.device, self.group)

        def prepare(p: Plan) -> None:
            t = cast(TimedLoop, self.timed)  # measure calls this before timed is dropped
            t.sample(p.batch)  # capture (on GPU) outside the timed samples
            t.sync()
            self.dist.barrier(group=self.group)
            if self.waits_for_all:
                t.record()  # when each timed op begins (:func:`~.across_ranks.late_total`)

        self.clocks = sampler_for((self.device,))
        samples, plan = measure(self.timed, settings, agree=agree, prepare=prepare, clocks=self.clocks)
        return samples, plan, agree

    def single_ops(self, agree: Callable[[float], float], budget: float) -> Optional[SingleOps]:
        """The single ops timed one by one after the samples (:func:`~.single_op_timing.single_op_phase`)."""
        assert self.case is not None and self.timed is not None
        return single_op_phase(self.torch, self.dist, self.case.run, self.timed.sync, agree, self.gpu, budget,
                               group=self.group, note_starts=self.waits_for_all)

    def check(self, graph_inner: int, dtype: str) -> tuple[int, Optional[tuple[int, float, float]], int, str]:
        """Correctness after timing, on each path that was timed (a graph replay, eager launches): fresh
        inputs, poisoned outputs, one op, compare.  The wrong elements of the worst path, the first of them
        (index, got, expected), the elements checked, and the path ("" when only eager launches were timed)."""
        torch, case, timed = self.torch, self.case, self.timed
        assert case is not None and timed is not None
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
            self.dist.barrier(group=self.group)
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
        return wrong, first, checked, wrong_path

    def clean_up(self) -> tuple[bool, str]:
        """Deregister the pool, drop the buffers and graphs, then release the pool and the allocator's cache;
        whether the buffers were registered, and the graph error of the timed loop ("": none)."""
        registered = self.pool is not None and self.backend is not None
        if registered:
            try:
                self.backend.deregister_mem_pool(self.pool)
            except Exception as e:
                self.note = f"deregister: {type(e).__name__}: {e}"
        assert self.timed is not None
        graph_error = self.timed.graph_error
        self.case = self.timed = None  # drop the buffers and graphs before the pool and the cache are released
        if self.gpu:
            self.torch.cuda.synchronize()
            self.pool = None
            self.torch.cuda.empty_cache()
        return registered, graph_error


def bench(ctx: RankContext, op: str, size_bytes: int, dtype: str = DEFAULT_DTYPE, in_place: Optional[bool] = None,
          min_time_s: float = DEFAULT_MIN_TIME_S, graph: bool = True, max_samples: int = DEFAULT_MAX_SAMPLES,
          register: bool = True, tail_time_s: Optional[float] = None) -> BenchResult:
    """Per-rank task: time ``op`` at ``size_bytes`` and check its result.  Runs on every rank.

    The op runs over ``ctx.group`` (None: the default group), as rank ``ctx.rank`` of ``ctx.world_size``:
    every torch.distributed call here -- the op, the agreement on the plan, the barriers -- passes that
    group, so that the groups of a kind (one per node, one per local rank) run at once, each on its own.

    The steps, each of :class:`_RankCase`: the buffers (registered for large messages), the timed samples
    (graphs captured outside them), the single ops, the check of the result, the clean-up; last, with the
    other ranks, each iteration's time and who the others waited for.  After the batched samples (the
    median figures), single ops are timed one by one (:func:`~.single_op_timing.single_ops`): as many as
    fill ``tail_time_s`` (None: ``TAIL_TIME_FACTOR`` x ``min_time_s``) at the agreed (slowest rank's) wall
    time of one, between ``TAIL_MIN_OPS`` and ``TAIL_MAX_OPS``; 0 skips the phase."""
    import torch
    import torch.distributed as dist

    from .clocks import clock_info

    spec, in_place = _form(op, dtype, in_place)
    n, r = ctx.world_size, ctx.rank
    count = element_count(op, size_bytes, n, dtype)
    rc = _RankCase(torch, dist, ctx, spec, count, dtype, in_place, register)
    samples, plan, agree = rc.time(graph, min_time_s, max_samples)
    entries = cast(TimedLoop, rc.timed).entry_times()  # None where not noted (the op does not wait for all)
    budget = TAIL_TIME_FACTOR * min_time_s if tail_time_s is None else float(tail_time_s)
    singles = rc.single_ops(agree, budget)
    timed = cast(TimedLoop, rc.timed)
    # the timed samples replayed a graph if the graph of their shape was captured
    graph_inner = plan.batch if timed.use_graph and graph_shape(plan.batch)[0] in timed.graphs else 0
    del timed
    wrong, first, checked, wrong_path = rc.check(graph_inner, dtype)
    registered, graph_error = rc.clean_up()
    # Who the others waited for: every rank of the group, after the correctness check (see iteration_stats).
    # Rank 0 alone returns the per-iteration data, the others their summaries (compact gathered results).
    its = iteration_stats(torch, dist, samples, r, n, ctx.device, group=ctx.group, entries=entries, batch=plan.batch)
    first_rank = r == 0
    tail = single_op_fields(torch, dist, singles, budget, r, n, ctx.device, group=ctx.group)
    return BenchResult(
        rank=r,
        in_place=in_place,
        samples_s=tuple(its.times) if first_rank else (),
        batch=plan.batch,
        graph=graph_inner,
        graph_error=graph_error,
        registered=registered,
        register_note=rc.note,
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
        wait_share=its.wait_share,
        late_share=its.late_share,
        host=ctx.host or socket.gethostname(),
        node=ctx.node_rank,
        device=ctx.device,
        clocks=tuple(clock_info(rc.clocks)),
        **tail,
    )
