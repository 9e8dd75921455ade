"""One rank's collective case and its timed loop: the op's buffers, filled and checked
(:class:`CollectiveCase`), timed as ``nccl-tests -G`` times it (:class:`TimedLoop`: graphs of ``GRAPH_OPS``
ops replayed ``GRAPH_REPLAYS`` times on GPU, a loop on CPU), and the buffers registered with the
communicator for large messages (:func:`registered_buffers`).  The collectives' :func:`~.collectives.bench`,
the training patterns and the node pairs time their iterations through it.

Imports no torch: it is passed in.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional

from .collective_op import CollectiveOp, Shape, small_pattern

if TYPE_CHECKING:
    from torch import dtype as DType, Tensor
    from torch.cuda import CUDAGraph
    from torch.distributed import ProcessGroup

__all__ = ["CollectiveCase", "TimedLoop", "REGISTER_MIN_BYTES", "GRAPH_OPS", "GRAPH_REPLAYS", "graph_shape",
           "registered_buffers"]


class CollectiveCase:
    """Buffers, the op as a callable, and its expected result, for one rank (``rank`` of ``n`` in ``group``,
    whose global ranks are ``ranks``; None and ``()``: the default group)."""

    def __init__(self, torch: ModuleType, dist: ModuleType, op: CollectiveOp, count: int, rank: int, n: int,
                 device: str, dtype: DType, in_place: bool, fill: bool = True, group: Optional[ProcessGroup] = None,
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
        v = small_pattern(self.torch, self.inp.numel(), self.device, self.dtype)
        self.inp.copy_(self.op.fill(self.torch, v, self.shape, self.device))

    def expected(self) -> Optional[Tensor]:
        return self.op.expected(self.torch, self.shape, self.device)

    def result(self) -> Tensor:
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

    def __init__(self, torch: ModuleType, case: CollectiveCase, gpu: bool, use_graph: bool, eager_calls: int) -> None:
        self.torch, self.case, self.gpu = torch, case, gpu
        self.use_graph = gpu and use_graph
        self.eager_calls = eager_calls
        self.calls = 0
        self.graphs: dict[int, CUDAGraph] = {}
        self.graph_error = ""
        self._entries: Optional[list[Any]] = None  # while recording (:meth:`record`): where each op began

    def record(self) -> None:
        """From now on, note when each op began (:meth:`entry_times`): on CPU the host clock before each op of
        every sample, on GPU the device's start event of every sample.  Called after the warm-up and the graph
        capture, just before the timed samples; the note costs one clock read and a list append per op."""
        self._entries = []

    def entry_times(self) -> Optional[list[float]]:
        """When each recorded op (CPU) or sample (GPU) began, in seconds from the first one, on this rank's
        own clock (the host's or the device's); None when :meth:`record` was not called.  Stops the recording.
        The ranks' clocks need not agree: :func:`.across_ranks.iteration_stats` aligns them."""
        got, self._entries = self._entries, None
        if not got:
            return got  # None (not recorded) or []
        if not self.gpu:
            return [t - got[0] for t in got]
        first = got[0]  # device events: each sample's start, timed against the first (after a sync)
        self.sync()
        return [first.elapsed_time(e) / 1e3 for e in got]

    def capture(self, batch: int) -> Optional[CUDAGraph]:
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

    def _graph(self, batch: int) -> Optional[CUDAGraph]:
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
            if self._entries is not None:
                self._entries.append(start)
            if g is not None:
                for _ in range(replays):
                    g.replay()
            else:
                for _ in range(batch):
                    self.case.run()
            end.record()
            return lambda: start.elapsed_time(end) / 1e3
        clock, run, entries = time.perf_counter, self.case.run, self._entries
        t0 = t = clock()
        if entries is None:
            for _ in range(batch):
                run()
            t = clock()
        else:  # each op's start: the end of the one before (a list append apart)
            entry = entries.append
            for _ in range(batch):
                entry(t)
                run()
                t = clock()
        dt = t - t0
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


def registered_buffers(torch: ModuleType, dist: ModuleType, device: str,
                       group: Optional[ProcessGroup] = None) -> tuple[object, object, str]:
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

