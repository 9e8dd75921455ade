"""How a copy is timed: on a GPU, the runtime's own asynchronous copy (:mod:`.engines`) on its streams, between
device events, small copies batched behind a spin kernel (:class:`SpinLatch`) so that the device runs them back
to back (:class:`CudaCopy`; an SM copy is one launch of the copy kernel of :mod:`.sm_copy` per batch; many
pairs at once with each pair's own time, :class:`CudaPattern`); on the host, a
memcpy per thread (:class:`HostCopy`, :class:`HostPattern`; or the cores' element-wise kernel for an SM
copy's CPU variant), torch single-threaded meanwhile
(:class:`single_threaded`).  After timing, :func:`verify_copies` checks the copied data: a fast wrong copy is a
failure, not a figure.  :mod:`.copies` measures with these.

Imports no torch until a copy is made.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from . import engines
from .engines import CopyError
from .sm_copy import KERNEL_LABEL, KernelConfig, SmCopier, host_kernel_copy
from .timing import TimingSettings

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor
    from torch.cuda import Event, Stream

__all__ = ["GPU_BATCH_S", "spin_rate", "SpinLatch", "CudaCopy", "HostCopy", "CudaPattern", "HostPattern",
           "verify_copies", "single_threaded", "gpu_batches", "device_index", "memcpy", "host_copy_call",
           "HostCopyCall"]

_LATCH_MARGIN_S = 50e-6
_LATCH_MAX_S = 0.02
#: a batch of GPU copies lasts at least this long.  Each batch pays once for the start of its first copy
#: after the latch; at 200 us batches that cost 2-10% against raw copies at 64 KiB-4 MiB on 2 x H200
#: (host->device and both ways most), so GPU copies batch like the raw reference does.
GPU_BATCH_S = 1e-3


_CLOCK_HZ: dict[int, float] = {}


def spin_rate(device_index: int) -> float:
    """Cycles per second of torch.cuda._sleep on this device (measured once)."""
    import torch

    if device_index not in _CLOCK_HZ:
        with torch.cuda.device(device_index):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(20_000_000)  # let the clocks ramp up from idle first
            s.record()
            torch.cuda._sleep(2_000_000)
            e.record()
            e.synchronize()
            secs = s.elapsed_time(e) / 1e3
        _CLOCK_HZ[device_index] = min(max(2_000_000 / max(secs, 1e-6), 1e8), 5e9)
    return _CLOCK_HZ[device_index]


class SpinLatch:
    """Hold a stream with a spin kernel long enough for the host to enqueue a batch.

    The host's cost to enqueue one copy is observed as it goes, but capped: when the device queue is
    full the host blocks, and a blocked enqueue must not stretch the next latch (that would feed on
    itself).
    """

    MAX_ENQUEUE_S = 100e-6

    def __init__(self, device_index: int) -> None:
        self.device_index = device_index
        self.enqueue_s_per_iter = 20e-6

    def hold(self, batch: int) -> None:
        import torch

        secs = min(batch * self.enqueue_s_per_iter * 1.5 + _LATCH_MARGIN_S, _LATCH_MAX_S)
        torch.cuda._sleep(int(secs * spin_rate(self.device_index)))

    def observe(self, batch: int, seconds: float) -> None:
        seen = min(seconds / batch, self.MAX_ENQUEUE_S)
        self.enqueue_s_per_iter = 0.8 * self.enqueue_s_per_iter + 0.2 * seen


class CudaCopy:
    """src -> dst (and, both ways, dst -> src at the same time) on GPUs, or host <-> device."""

    def __init__(self, pairs: list[tuple["Tensor", "Tensor"]], streams: list[tuple["Stream", Optional["Stream"]]],
                 latch_device: int, what: str = "copy", engine: str = engines.CE,
                 kernel: Optional["KernelConfig"] = None):
        """``engine`` ``"ce"``: the copy engines (:mod:`.engines`), a call per copy; ``"sm"``: the copy kernel
        (:mod:`.sm_copy`, shaped by ``kernel``), one launch per batch on each pair's stream; two pairs with
        one stream are both ways in one kernel."""
        import torch

        self.torch = torch
        self.pairs = pairs  # (src, dst) tensors, one per direction
        self.streams = streams  # (copy stream, idle stream on the other device) per direction
        self.main = streams[0][0]
        self.latch = SpinLatch(latch_device)
        self.what = what
        self.sm: dict[int, SmCopier] = {}
        if engine == engines.SM:
            self.copier: Optional[engines.Engine] = None
            self.sm = {s.device.index: SmCopier(s.device.index, kernel) for s, _ in streams}
            self.engine = KERNEL_LABEL
            self.engine_info = self.sm[self.main.device.index].info()
            if len(pairs) != len(streams) and (len(pairs), len(streams)) != (2, 1):
                raise ValueError(f"{what}: an SM copy takes a stream per pair, or two pairs on one stream (both "
                                 f"ways in one kernel), got {len(pairs)} pairs and {len(streams)} streams")
            self._enable_peers()
            self.settle()
            return
        selection = engines.current()
        self.copier = selection.engine  # None: torch's copy_
        self.engine = selection.label
        self.engine_info = selection.info()
        # the copier's arguments per direction: (dst pointer, src pointer, bytes, [kind,] stream handle)
        if self.copier is not None:
            self.calls = [self.copier.call(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(),
                                           stream.cuda_stream, src.is_cuda, dst.is_cuda)
                          for (src, dst), (stream, _) in zip(pairs, streams)]
            self._enable_peers()
        self.settle()

    def _enable_peers(self) -> None:
        for src, dst in self.pairs:
            if src.is_cuda and dst.is_cuda and src.device != dst.device and src.numel():
                dst[:1].copy_(src[:1])  # torch enables peer access (src device -> dst device) on first use

    def settle(self) -> None:
        """Wait for all work on the devices of the buffers (their fill or poisoning ran on other streams)."""
        for dev in {t.device for pair in self.pairs for t in pair if t.device.type == "cuda"}:
            self.torch.cuda.synchronize(dev)

    def _copies(self, index: int, batch: int) -> None:
        if self.sm:
            stream = self.streams[index][0]
            copier = self.sm[stream.device.index]
            if len(self.pairs) > len(self.streams):  # both ways in one kernel
                copier.copy_both(self.pairs[0], self.pairs[1], batch)
            else:
                copier.copy(*self.pairs[index], batch)
            return
        if self.copier is None:
            src, dst = self.pairs[index]
            other = self.streams[index][1]
            with _maybe_stream(self.torch, other):
                for _ in range(batch):
                    dst.copy_(src, non_blocking=True)
            return
        self.copier.copy(self.calls[index], batch, self.what)

    def sample(self, batch: int) -> Callable[[], float]:
        torch = self.torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.main):
            self.latch.hold(batch)
            start.record(self.main)
        t0 = time.perf_counter()
        ends = []
        for index, (stream, _) in enumerate(self.streams):
            if stream is not self.main:
                stream.wait_event(start)
            with torch.cuda.stream(stream):
                self._copies(index, batch)
            if stream is not self.main:
                ev = torch.cuda.Event()
                ev.record(stream)
                ends.append(ev)
        for ev in ends:
            self.main.wait_event(ev)
        end.record(self.main)
        self.latch.observe(batch, time.perf_counter() - t0)
        return lambda: start.elapsed_time(end) / 1e3

    def sync(self) -> None:
        for stream, _ in self.streams:
            stream.synchronize()


class _maybe_stream:
    def __init__(self, torch: ModuleType, stream: Optional["Stream"]) -> None:
        self.ctx = torch.cuda.stream(stream) if stream is not None else None

    def __enter__(self) -> None:
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def memcpy(src: "Tensor", dst: "Tensor") -> None:
    """A host copy by memcpy (torch's ``copy_`` of contiguous bytes)."""
    dst.copy_(src)


#: a host copy of ``src`` into ``dst``
HostCopyCall = Callable[["Tensor", "Tensor"], None]


def host_copy_call(engine: str) -> HostCopyCall:
    """The host copy of an engine: memcpy (``"ce"``), the cores' element-wise kernel (``"sm"``)."""
    return host_kernel_copy if engines.copy_engine_of(engine, "a host copy") == engines.SM else memcpy


def _threads_at_once(pairs: list[tuple["Tensor", "Tensor"]], batch: int,
                     copy: HostCopyCall = memcpy) -> list[float]:
    """Copy every pair ``batch`` times, a thread per pair, all released together: each thread's seconds from
    the common start to its end.  A copy that raises in its thread raises here."""
    barrier = threading.Barrier(len(pairs) + 1)
    ends = [0.0] * len(pairs)
    errors: list[BaseException] = []

    def work(k: int, src: "Tensor", dst: "Tensor") -> None:
        try:
            barrier.wait()
            for _ in range(batch):
                copy(src, dst)
        except BaseException as e:  # noqa: BLE001  (raised in the caller's thread below)
            errors.append(e)
        ends[k] = time.perf_counter()

    threads = [threading.Thread(target=work, args=(k, src, dst), daemon=True) for k, (src, dst) in enumerate(pairs)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [e - t0 for e in ends]


class HostCopy:
    """Host memcpy between buffers (``engine`` "sm": the cores' element-wise kernel, :mod:`.sm_copy`); both
    ways = two threads copying at once."""

    def __init__(self, pairs: list[tuple["Tensor", "Tensor"]], engine: str = engines.CE):
        self.pairs = pairs
        self.copy = host_copy_call(engine)

    def sample(self, batch: int) -> Callable[[], float]:
        if len(self.pairs) == 1:
            src, dst = self.pairs[0]
            copy = self.copy
            t0 = time.perf_counter()
            for _ in range(batch):
                copy(src, dst)
            dt = time.perf_counter() - t0
            return lambda: dt
        dt = max(_threads_at_once(self.pairs, batch, self.copy))
        return lambda: dt

    def sync(self) -> None:
        pass

    def settle(self) -> None:
        pass


def verify_copies(timed: Union["CudaCopy", "HostCopy", "HostPattern"], pairs: list[tuple["Tensor", "Tensor"]],
                  what: str) -> None:
    """Poison the destinations, copy once more, and compare a strided sample and the tail with the sources.

    A fast wrong copy is a failure, not a figure.
    """
    for _, dst in pairs:
        dst.fill_(0xA5)
    timed.settle()
    timed.sample(1)
    timed.sync()
    for src, dst in pairs:
        n = src.numel()
        stride = max(1, n // (1 << 20)) | 1  # odd: the sample visits every byte position of a word
        a, b = src[::stride].to("cpu"), dst[::stride].to("cpu")
        tail_a, tail_b = src[-4096:].to("cpu"), dst[-4096:].to("cpu")
        bad = int((a != b).sum()) + int((tail_a != tail_b).sum())
        if bad:
            raise CopyError(
                f"{what}: the copied data is wrong in {bad} of {a.numel() + tail_a.numel()} checked bytes"
            )


class single_threaded:
    """One memcpy per thread on the host: torch's intra-op pool would split a copy over all cores and
    make its time depend on how busy the other cores are."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.saved = 0

    def __enter__(self) -> None:
        if self.active:
            import torch

            self.saved = torch.get_num_threads()
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.active:
            import torch

            torch.set_num_threads(self.saved)


def gpu_batches(settings: TimingSettings) -> TimingSettings:
    return dataclasses.replace(settings, target_batch_s=max(settings.target_batch_s, GPU_BATCH_S))


def device_index(name: str) -> int:
    return int(name.split(":")[1]) if ":" in name else 0


class CudaPattern(CudaCopy):
    """Many pairs at once on GPUs (``CudaCopy``, one stream per pair), with each pair's own time: device
    events on its stream around its copies, from when the latch released the stream to the end of its
    batch.  ``link_times`` gets (batch, seconds per pair) for every sample read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the latch covers the host's enqueue of every pair's copies: its cap on the enqueue cost of one
        # iteration is per copy call, and one iteration here is a call per pair
        self.latch.MAX_ENQUEUE_S = SpinLatch.MAX_ENQUEUE_S * len(self.pairs)
        self.link_times: list[tuple[int, list[float]]] = []
        self._events: list[tuple["Event", "Event"]] = []

    def _copies(self, index: int, batch: int) -> None:
        stream = self.streams[index][0]
        begin = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        super()._copies(index, batch)
        end.record(stream)
        self._events.append((begin, end))

    def sample(self, batch: int) -> Callable[[], float]:
        self._events = []
        total = super().sample(batch)
        events = self._events

        def seconds() -> float:
            self.link_times.append((batch, [b.elapsed_time(e) / 1e3 for b, e in events]))
            return total()

        return seconds


class HostPattern:
    """Many pairs at once on host buffers, one thread per pair (torch single-threaded, as ``HostCopy``):
    the sample is from the common start to the last thread's end; ``link_times`` gets (batch, seconds from
    the start to each thread's end) for every sample read.  A copy that raises in its thread raises here."""

    def __init__(self, pairs: list[tuple["Tensor", "Tensor"]], engine: str = engines.CE):
        self.pairs = pairs
        self.copy = host_copy_call(engine)
        self.link_times: list[tuple[int, list[float]]] = []

    def sample(self, batch: int) -> Callable[[], float]:
        own = _threads_at_once(self.pairs, batch, self.copy)
        total = max(own)

        def seconds() -> float:
            self.link_times.append((batch, own))
            return total

        return seconds

    def sync(self) -> None:
        pass

    def settle(self) -> None:
        pass

