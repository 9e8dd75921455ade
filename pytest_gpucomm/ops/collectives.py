"""Collectives over a torch.distributed process group, timed as nccl-tests times them.

This module holds both halves:

* what an op is (its message size S, its busbw factor, whether it has an in-place form) -- pure, used by
  the controller, the report and the tests;
* the per-rank task :func:`bench`, run on every rank of the group (in the rank pool, or in-process when
  pytest itself runs on every rank under torchrun): it builds the buffers, warms up, agrees with the
  other ranks on a plan, captures up to ``GRAPH_OPS`` iterations in a CUDA/HIP graph on GPU and replays
  it (as ``nccl-tests -G``) or loops on CPU, times each sample (device events / host clock), and finally
  re-initializes the buffers, runs the op once more -- from a graph and eagerly, the paths that were timed
  -- and counts the wrong elements of the result.

Sizes follow nccl-tests: S is the per-rank buffer for all_reduce, broadcast, reduce and send/recv, and the
full gathered/scattered buffer for all_gather, reduce_scatter and all_to_all.  busbw = algbw x factor
with n ranks: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; others 1.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

__all__ = ["OPS", "OpSpec", "busbw_factor", "element_count", "bench", "DTYPES"]

from ..vocab import DTYPES


@dataclass(frozen=True)
class OpSpec:
    """``forms``: the forms torch.distributed offers, the default first.  all_reduce, broadcast and
    reduce exist only in place in torch (an out-of-place form would add a device copy of S bytes to
    every iteration, which nccl-tests does not do), so they are measured in place and compared with
    nccl-tests' in-place column."""

    name: str
    factor: Callable[[int], float]
    forms: tuple[str, ...]
    split: bool = False  # S is the full buffer made of n chunks (all_gather, reduce_scatter, all_to_all)

    @property
    def default_in_place(self) -> bool:
        return self.forms[0] == "in_place"


OPS: dict[str, OpSpec] = {
    "all_reduce": OpSpec("all_reduce", lambda n: 2 * (n - 1) / n, ("in_place",)),
    "all_gather": OpSpec("all_gather", lambda n: (n - 1) / n, ("out_of_place", "in_place"), split=True),
    "reduce_scatter": OpSpec("reduce_scatter", lambda n: (n - 1) / n, ("out_of_place", "in_place"), split=True),
    "broadcast": OpSpec("broadcast", lambda n: 1.0, ("in_place",)),
    "reduce": OpSpec("reduce", lambda n: 1.0, ("in_place",)),
    "all_to_all": OpSpec("all_to_all", lambda n: (n - 1) / n, ("out_of_place",), split=True),
    "send_recv": OpSpec("send_recv", lambda n: 1.0, ("out_of_place",)),
}


def busbw_factor(op: str, world_size: int) -> float:
    return OPS[op].factor(world_size)


def element_count(op: str, size_bytes: int, world_size: int, dtype: str) -> int:
    """Elements of the S-byte buffer, rounded down so split ops divide evenly among the ranks (as
    nccl-tests does); at least one element (per rank for split ops)."""
    es = DTYPES[dtype]
    count = size_bytes // es
    if OPS[op].split:
        count = max(world_size, count // world_size * world_size)
    return max(1, count)


# -- per-rank side --------------------------------------------------------------------------------

def _pattern(torch: Any, n: int, device: str, dtype: Any) -> Any:
    """1, 2, 3, 1, 2, 3, ...: small integers, exact in every dtype, no zeros."""
    return (torch.arange(n, device=device, dtype=torch.int64) % 3 + 1).to(dtype)


class _Case:
    """Buffers, the op as a callable, and its expected result, for one rank."""

    def __init__(self, torch: Any, dist: Any, op: str, count: int, rank: int, n: int, device: str,
                 dtype: Any, in_place: bool, fill: bool = True) -> None:
        self.torch, self.dist = torch, dist
        self.op, self.count, self.rank, self.n = op, count, rank, n
        self.device, self.dtype, self.in_place = device, dtype, in_place
        c = count // n if OPS[op].split else count
        self.chunk = c
        mk = lambda k: torch.empty(k, device=device, dtype=dtype)  # noqa: E731
        if op in ("all_reduce", "broadcast", "reduce"):
            self.inp = self.out = mk(count)
        elif op == "all_gather":
            self.out = mk(count)
            self.inp = self.out[rank * c:(rank + 1) * c] if in_place else mk(c)
        elif op == "reduce_scatter":
            self.inp = mk(count)
            self.out = self.inp[rank * c:(rank + 1) * c] if in_place else mk(c)
        elif op == "all_to_all":
            self.inp, self.out = mk(count), mk(count)
        elif op == "send_recv":
            self.inp, self.out = mk(count), mk(count)
        else:
            raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
        if fill:
            self.fill()

    def fill(self) -> None:
        """Inputs that make a wrong element detectable; outputs poisoned."""
        torch, r, n, c = self.torch, self.rank, self.n, self.chunk
        if self.out is not self.inp:
            self.out.fill_(-7)
        v = _pattern(torch, self.inp.numel(), self.device, self.dtype)
        if self.op == "all_to_all":
            idx = torch.arange(self.inp.numel(), device=self.device)
            # element k of the chunk for rank j: r*n + j + 1, plus a ripple inside the chunk
            v = r * n + idx // c + 1 + (idx % c % 3) * n * n
            self.inp.copy_(v.to(self.dtype))
        elif self.op == "broadcast":
            self.inp.copy_(v if r == 0 else torch.full_like(v, -3))
        else:
            self.inp.copy_(v * (r + 1))

    def expected(self) -> Any:
        torch, r, n, c = self.torch, self.rank, self.n, self.chunk
        tri = n * (n + 1) // 2
        if self.op == "all_reduce":
            return _pattern(torch, self.count, self.device, torch.float64) * tri
        if self.op == "all_gather":
            idx = torch.arange(self.count, device=self.device)
            base = _pattern(torch, c, self.device, torch.float64).repeat(n)
            return base * (idx // c + 1)
        if self.op == "reduce_scatter":
            full = _pattern(torch, self.count, self.device, torch.float64) * tri
            return full[r * c:(r + 1) * c]
        if self.op == "broadcast":
            return _pattern(torch, self.count, self.device, torch.float64)
        if self.op == "reduce":
            if r != 0:
                return None
            return _pattern(torch, self.count, self.device, torch.float64) * tri
        if self.op == "all_to_all":
            i = torch.arange(self.count, device=self.device)
            s = i // c  # source rank of this chunk
            return (s * n + r + 1 + (i % c % 3) * n * n).to(torch.float64)
        if self.op == "send_recv":
            src = (r - 1) % n
            return _pattern(torch, self.count, self.device, torch.float64) * (src + 1)
        raise AssertionError(self.op)

    def result(self) -> Any:
        return self.out

    def run(self) -> None:
        dist, torch = self.dist, self.torch
        op = self.op
        if op == "all_reduce":
            dist.all_reduce(self.inp)
        elif op == "all_gather":
            _all_gather(dist, self.out, self.inp)
        elif op == "reduce_scatter":
            _reduce_scatter(dist, self.out, self.inp)
        elif op == "broadcast":
            dist.broadcast(self.inp, src=0)
        elif op == "reduce":
            dist.reduce(self.inp, dst=0)
        elif op == "all_to_all":
            dist.all_to_all_single(self.out, self.inp)
        elif op == "send_recv":
            nxt, prv = (self.rank + 1) % self.n, (self.rank - 1) % self.n
            reqs = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, self.inp, nxt), dist.P2POp(dist.irecv, self.out, prv)]
            )
            for req in reqs:
                req.wait()
        del torch


def _all_gather(dist: Any, out: Any, inp: Any) -> None:
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, inp)


def _reduce_scatter(dist: Any, out: Any, inp: Any) -> None:
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(out, inp)


class _Timed:
    """Adapter for the timing engine: graph replay + events on GPU, a loop + host clock on CPU.

    On GPU the first ``eager_calls`` samples (the warm-up, which creates the communicator) launch the op
    eagerly; every later sample of ``batch`` iterations replays a CUDA/HIP graph of ``min(batch, GRAPH_OPS)``
    back-to-back ops (captured once per size) ``batch / GRAPH_OPS`` times, as ``nccl-tests -G`` does, so
    small messages are timed without Python's launch cost.  If capture fails, samples fall back to eager
    launches and the error is reported.
    """

    def __init__(self, torch: Any, case: _Case, gpu: bool, use_graph: bool, eager_calls: int) -> None:
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


def worker_env(backend: str, environ: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The defaults of ``NCCL_WORKER_ENV`` that ``environ`` (the user's environment) does not set."""
    environ = os.environ if environ is None else environ
    if backend != "nccl":
        return {}
    return {k: v for k, v in NCCL_WORKER_ENV.items() if k not in environ}


def _registered_buffers(torch: Any, dist: Any, device: str) -> tuple[Any, Any, str]:
    """A memory pool of the communication library's own allocator (ncclMemAlloc), registered with the
    communicator, as nccl-tests allocates its buffers: zero-copy transfers become possible for
    all_gather, all_to_all and send/recv.  Returns (pool, backend, note); pool None when unavailable."""
    try:
        backend = dist.group.WORLD._get_backend(torch.device(device))
        pool = torch.cuda.MemPool(backend.mem_allocator)
        return pool, backend, ""
    except Exception as e:  # older torch, or a backend without an allocator
        return None, None, f"{type(e).__name__}: {e}"


def bench(ctx: Any, op: str, size_bytes: int, dtype: str = "float32", in_place: Optional[bool] = None,
          min_time_s: float = 0.1, graph: bool = True, max_samples: int = 1000,
          register: bool = True) -> dict[str, Any]:
    """Per-rank task: time ``op`` at ``size_bytes`` and check its result.  Runs on every rank."""
    import torch
    import torch.distributed as dist

    from ..timing import TimingSettings, measure

    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    spec = OPS[op]
    if in_place is None:
        in_place = spec.default_in_place
    form = "in_place" if in_place else "out_of_place"
    if form not in spec.forms:
        raise ValueError(f"{op} has no {form.replace('_', '-')} form in torch.distributed (it has: "
                         f"{', '.join(f.replace('_', '-') for f in spec.forms)})")
    n, r = ctx.world_size, ctx.rank
    gpu = ctx.device.startswith("cuda")
    tdtype = getattr(torch, dtype)
    count = element_count(op, size_bytes, n, dtype)
    pool, backend, pool_note = None, None, ""
    if gpu and register and count * DTYPES[dtype] >= REGISTER_MIN_BYTES:
        dist.all_reduce(torch.zeros(1, device=ctx.device))  # the communicator must exist before the pool
        pool, backend, pool_note = _registered_buffers(torch, dist, ctx.device)
    case = None
    if pool is not None:
        try:
            with torch.cuda.use_mem_pool(pool):  # only the buffers: fill()'s temporaries stay outside
                case = _Case(torch, dist, op, count, r, n, ctx.device, tdtype, in_place, fill=False)
            case.fill()
            backend.register_mem_pool(pool)
        except Exception as e:
            pool_note = f"{type(e).__name__}: {e}"
            backend = None
    if case is None:
        case = _Case(torch, dist, op, count, r, n, ctx.device, tdtype, in_place)
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
    timed = _Timed(torch, case, gpu, graph, eager_calls=settings.warmup_iters)
    agree_buf = torch.zeros(1, dtype=torch.float64 if not gpu else torch.float32, device=ctx.device)

    def agree(x: float) -> float:
        agree_buf.fill_(x)
        dist.all_reduce(agree_buf, op=dist.ReduceOp.MAX)
        return float(agree_buf.item())

    def prepare(p: Any) -> None:
        timed.sample(p.batch)  # capture (on GPU) outside the timed samples
        timed.sync()
        dist.barrier()

    samples, plan = measure(timed, settings, agree=agree, prepare=prepare)
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
        dist.barrier()
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
    return {
        "rank": r,
        "in_place": in_place,
        "samples_s": samples,
        "batch": plan.batch,
        "graph": graph_inner,
        "graph_error": graph_error,
        "registered": registered,
        "register_note": pool_note,
        "size_bytes": count * DTYPES[dtype],
        "wrong": wrong,
        "checked": checked,
        "first_wrong": first,
        "wrong_path": wrong_path,
    }
