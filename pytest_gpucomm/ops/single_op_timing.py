"""Single operations, each timed on its own, after a case's batched samples: how many fill the case's budget at
the slowest rank's pace (:func:`single_op_phase`), how each is timed (:func:`single_ops`: device events
behind a host-released :class:`FlagLatch` on GPU, the host clock on CPU), and the fields of a rank's result
they give (:func:`single_op_fields`, the slowest rank's time of each op on rank 0).  The collectives and the
training patterns share it; ``info["tail"]`` holds what the controller makes of it
(:func:`~.collective_results.tail_info`).

Imports no torch: it is passed in.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, TypedDict

from .across_ranks import iteration_stats

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["TAIL_MAX_OPS", "TAIL_MIN_OPS", "TAIL_CHUNK", "LATCH_RELEASE_S", "SingleOpFields", "SingleOps", "FlagLatch",
           "single_ops",
           "single_op_phase", "single_op_fields"]

#: single-op phase: the most and the fewest single ops timed per case
TAIL_MAX_OPS = 10_000
TAIL_MIN_OPS = 20
#: the most single ops enqueued behind one latch (the device queue must hold them all while the latch holds)
TAIL_CHUNK = 64
#: a latch not released by the host within this long is released by a timer (the host was blocked: the
#: device queue was full); that chunk's times include the wait and are dropped
LATCH_RELEASE_S = 2.0


class SingleOpFields(TypedDict, total=False):
    """What a rank's result (:class:`~.collective_results.BenchResult`, a pattern's too) holds of its single-op
    phase, passed to it as keyword arguments: per op the slowest rank's time (on rank 0 only; ``()`` on the
    others), this rank's own p50 and p99, how a single op was timed, the timer's step and the overhead of an
    empty timed interval, the time budget that set the number of single ops, and this rank's share of the single
    ops' time spent waiting for the last rank (:attr:`.across_ranks.IterationStats.wait_share`) and how much
    later than the first rank it began them (:attr:`~.across_ranks.IterationStats.late_share`)."""

    op_times_s: tuple[float, ...]
    op_own_p50_s: float
    op_own_p99_s: float
    op_timer: str
    op_timer_resolution_s: float
    op_timer_overhead_s: float
    op_budget_s: float
    op_wait_share: float
    op_late_share: Optional[float]


class SingleOps(NamedTuple):
    """One rank's single-op phase (see :func:`single_ops`)."""

    own_s: list[float]  # this rank's time of each single op
    timer: str
    resolution_s: float
    overhead_s: float
    #: when each single op began, in seconds from the first, on this rank's clock (the host's; the device's on GPU)
    entries_s: Optional[list[float]] = None


class FlagLatch:
    """Hold a CUDA stream until the host says go: the stream waits (``cuStreamWaitValue32``, a stream memory
    operation of the driver) until a word of pinned host memory reaches a value, which the host writes once
    it has enqueued everything behind the latch.  Unlike a spin kernel of estimated length, the device never
    starts before the host is done, however long the host takes, so no op's interval holds host time.

    A timer releases a latch the host has not released within ``LATCH_RELEASE_S`` (a host blocked because
    the device queue is full would otherwise wait forever); :meth:`release` then returns False.
    ``FlagLatch.create`` returns None where the driver or the stream memory operations are missing."""

    def __init__(self, torch: ModuleType, lib: Any) -> None:
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
    def create(cls, torch: ModuleType) -> "Optional[FlagLatch]":
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


def single_ops(torch: ModuleType, run: Callable[[], None], gpu: bool, n_ops: int, launches: int = 1,
               note_starts: bool = False) -> SingleOps:
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
    ``time.get_clock_info``, overhead the median of back-to-back ``perf_counter`` pairs.  ``note_starts``: also
    note when each op began (``entries_s``: the host clock before it on CPU, its start event on GPU, from the
    first op's), for :func:`.across_ranks.late_total`; only for ops that wait for every rank."""
    if not gpu:
        return _host_ops(run, n_ops, note_starts)
    cuda = torch.cuda
    launches = max(1, int(launches))
    latch = FlagLatch.create(torch) if launches <= TAIL_CHUNK else None
    why = FlagLatch.unavailable if launches <= TAIL_CHUNK else f"one op holds {launches} collectives"
    stream = cuda.current_stream()

    began: list[float] = []  # each op's start event, timed against the first op's
    first: list[Any] = []

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
        if body is not None and note_starts:
            first[:] = first or [evs[0][0]]
            began.extend(first[0].elapsed_time(s_) / 1e3 for s_, _ in evs)
        return [s_.elapsed_time(e_) / 1e3 for s_, e_ in evs], released

    empty, _ = chunk(100, None)
    own: list[float] = []
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
    return SingleOps(own, how, min(steps) if steps else 0.0, empty[len(empty) // 2], began if note_starts else None)


def _host_ops(run: Callable[[], None], n_ops: int, note_starts: bool) -> SingleOps:
    """:func:`single_ops` on CPU: the host clock around each op."""
    pairs = []
    for _ in range(1000):
        t0 = time.perf_counter()
        pairs.append(time.perf_counter() - t0)
    own: list[float] = []
    starts: list[float] = []
    for _ in range(n_ops):
        t0 = time.perf_counter()
        run()
        own.append(time.perf_counter() - t0)
        if note_starts:
            starts.append(t0)
    pairs.sort()
    return SingleOps(own, "host clock per operation", time.get_clock_info("perf_counter").resolution,
                     pairs[len(pairs) // 2], [t - starts[0] for t in starts] if note_starts else None)


def single_op_phase(torch: ModuleType, dist: ModuleType, run: Callable[[], None], sync: Callable[[], None],
                    agree: Callable[[float], float], gpu: bool, budget_s: float,
                    group: Optional[ProcessGroup] = None, launches: int = 1,
                    note_starts: bool = False) -> Optional[SingleOps]:
    """The single-op phase of a case, after its timed samples, on every rank of ``group``: ``run`` (one op,
    or one iteration of a pattern) three times (and, for short ops, 20 more) back to back to get the agreed
    (slowest rank's, ``agree``) wall time of one, then as many single ops as fill ``budget_s`` at that
    time, between ``TAIL_MIN_OPS`` and ``TAIL_MAX_OPS`` (:func:`single_ops`), so that every rank makes the
    same calls.  None when ``budget_s`` is 0 or less (the phase skipped).  ``launches``: the collectives one
    ``run`` makes, ``note_starts``: note when each op began (:func:`single_ops`)."""
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
    return single_ops(torch, run, gpu, n_ops, launches, note_starts)


def single_op_fields(torch: ModuleType, dist: ModuleType, singles: Optional[SingleOps], budget_s: float, rank: int,
                     world: int, device: str, group: Optional[ProcessGroup] = None) -> SingleOpFields:
    """:class:`~.collective_results.BenchResult`'s single-op fields (:class:`SingleOpFields`) of the phase
    ``singles``; {} where it was skipped.
    Every rank of ``group`` calls it (:func:`.across_ranks.iteration_stats`)."""
    if singles is None:
        return {}
    import statistics

    op_its = iteration_stats(torch, dist, singles.own_s, rank, world, device, group=group, entries=singles.entries_s)
    own_sorted = sorted(singles.own_s)
    return {"op_times_s": tuple(op_its.times) if rank == 0 else (), "op_own_p50_s": statistics.median(own_sorted),
            "op_own_p99_s": own_sorted[min(len(own_sorted) - 1, int(0.99 * len(own_sorted)))],
            "op_timer": singles.timer, "op_timer_resolution_s": singles.resolution_s,
            "op_timer_overhead_s": singles.overhead_s, "op_budget_s": budget_s,
            "op_wait_share": op_its.wait_share, "op_late_share": op_its.late_share}

