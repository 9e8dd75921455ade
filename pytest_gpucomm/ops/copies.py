"""Copies: peer-to-peer (one way and both ways), host-to-device and device-to-host, and all peers at once.

On a GPU a copy is one call of the GPU runtime's own asynchronous copy of contiguous bytes on one stream,
as nvbandwidth (CUDA) and TransferBench (ROCm) issue their copies, timed with device events: the CUDA
driver's ``cuMemcpyAsync``, or HIP's ``hipMemcpyAsync`` on ROCm builds of torch (``ops.engines``: one
engine, a table of entry points per platform; ``GPUCOMM_COPY_ENGINE`` and ``GPUCOMM_HIP_LIBRARY``
choose).  Peer access is enabled through torch first, where the pair supports it.  torch's
``dst.copy_(src)`` is not used for the timed copies: between two GPUs it adds a two-way barrier between
the source and destination streams to every copy, which on 2 x H200 made a 256 KiB peer copy take 11 us
instead of 3 (23 GB/s against 85 GB/s raw).  It is the fallback where the runtime's library does not load
(or ``GPUCOMM_COPY_ENGINE=torch``); the measurement's ``info["engine"]`` says which was used (and
``info["engine_note"]`` why, after a fallback).  Small copies are batched behind a short spin
kernel (a "latch", as nvbandwidth does) so the host has enqueued the whole batch before the device starts
it: the device then runs the copies back to back and launch overhead is not measured.

On CPU a copy is a host memcpy between two buffers, timed with the host clock; "both ways" runs two
copies at once in two threads.

All peers at once (as nvbandwidth's one_to_all / all_to_one tests and TransferBench do): one device
writing to every peer at once (``one_to_all``), every peer writing to one device (``all_to_one``), every
ordered pair at once (``all_pairs``) -- what pair tests cannot show: whether a device's links, copy
engines and memory sustain all of its peers together (on an MI300X node, its 7 xGMI links).  Each pair is
one copy from its own source buffer to its own destination buffer, issued on a stream of its source device
(as the pair copy, and nvbandwidth's "write" tests); all start together behind one latch.  The figure
gated is the aggregate: the bytes of every pair over the time from the common start to the end of the
last pair (so one slow link slows it).  ``info`` adds the per-link figure (the aggregate / the links) and
each link's own bandwidth: its bytes over the time from its start to the end of its own copies, while the
others copy too (device events on its own stream; on CPU each thread's host clock).  See
``measure_pattern``.

A copy is described by a plain spec (``copy_spec``), so that the same copy can be measured here
(``measure_spec``, with the session's buffers) or in a new process (the rank task ``bench_copy``, with
buffers, streams and timing of its own: the gate's fresh re-measure).

In launched mode (one pytest process per rank) copies stay node-local: on every node at once, one rank of
the node measures the copy between that node's devices (``measuring_local_rank``), and the ranks exchange
their outcomes, from which ``node_measurements`` makes one measurement per node (or the failure naming
the ranks that raised).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from ..measurement import Measurement, copy_where
from .timing import TimingSettings, measure
from . import engines
from .engines import CopyError
from .specs import COPY, HOST_KIND, PEER_KIND, OpSpec

__all__ = ["CopyError", "measure_copy", "measure_host_device", "BufferPool", "copy_spec", "measure_spec",
           "bench_copy", "measuring_local_rank", "node_measurements", "measure_pattern", "pattern_pairs",
           "PATTERN_OPS", "ONE_TO_ALL", "ALL_TO_ONE", "ALL_PAIRS",
           "spin_rate",
]

_LATCH_MARGIN_S = 50e-6
_LATCH_MAX_S = 0.02
#: a batch of GPU copies lasts at least this long.  Each batch pays once for the start of its first copy
#: after the latch; at 200 us batches that cost 2-10% against raw copies at 64 KiB-4 MiB on 2 x H200
#: (host->device and both ways most), so GPU copies batch like the raw reference does.
GPU_BATCH_S = 1e-3


class BufferPool:
    """One growing byte buffer per (device, role), so a sweep does not allocate at every size.

    A pinned host buffer serves one GPU at a time (``user``): when another GPU asks for it, it is
    allocated afresh.  On 2 x H200, host->device copies from a pinned buffer that the other GPU had just
    copied from ran 10-28% slower, with a CV of 5-18% instead of under 1%, than from a fresh one.
    """

    def __init__(self) -> None:
        self._bufs: dict[tuple[str, str, bool], Any] = {}
        self._users: dict[tuple[str, str, bool], Optional[str]] = {}

    def get(self, device: str, role: str, nbytes: int, pinned: bool = False, user: Optional[str] = None) -> Any:
        import torch

        key = (device, role, pinned)
        buf = self._bufs.get(key)
        if buf is None or buf.numel() < nbytes or self._users.get(key) != user:
            self._bufs.pop(key, None)
            del buf
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
                buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            else:
                buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
            fill_pattern(buf)
            self._bufs[key] = buf
            self._users[key] = user
        return buf[:nbytes]

    def clear(self) -> None:
        self._bufs.clear()
        self._users.clear()


def fill_pattern(buf: Any) -> None:
    """Distinct 8-byte words (not zeros: nothing may go faster on untouched or zero pages)."""
    import torch

    words = buf.numel() // 8
    if words:
        w = buf[: words * 8].view(torch.int64)
        chunk = 1 << 25
        for off in range(0, words, chunk):
            m = min(chunk, words - off)
            idx = torch.arange(off + 1, off + 1 + m, dtype=torch.int64, device=buf.device)
            w[off : off + m].copy_(idx * -7046029254386353131)  # a large odd constant: all bytes vary
    rest = buf.numel() - words * 8
    if rest:
        buf[words * 8 :].copy_(torch.arange(1, rest + 1, dtype=torch.uint8, device=buf.device))


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


class _Latch:
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


class _CudaCopy:
    """src -> dst (and, both ways, dst -> src at the same time) on GPUs, or host <-> device."""

    def __init__(self, pairs: list[tuple[Any, Any]], streams: list[tuple[Any, Any]], latch_device: int,
                 what: str = "copy"):
        import torch

        self.torch = torch
        self.pairs = pairs  # (src, dst) tensors, one per direction
        self.streams = streams  # (copy stream, idle stream on the other device) per direction
        self.main = streams[0][0]
        self.latch = _Latch(latch_device)
        self.what = what
        selection = engines.current()
        self.copier = selection.engine  # None: torch's copy_
        self.engine = selection.label
        self.engine_info = selection.info()
        # the copier's arguments per direction: (dst pointer, src pointer, bytes, [kind,] stream handle)
        if self.copier is not None:
            self.calls = [self.copier.call(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(),
                                           stream.cuda_stream, src.is_cuda, dst.is_cuda)
                          for (src, dst), (stream, _) in zip(pairs, streams)]
            for src, dst in pairs:
                if src.is_cuda and dst.is_cuda and src.device != dst.device and src.numel():
                    dst[:1].copy_(src[:1])  # torch enables peer access (src device -> dst device) on first use
        self.settle()

    def settle(self) -> None:
        """Wait for all work on the devices of the buffers (their fill or poisoning ran on other streams)."""
        for dev in {t.device for pair in self.pairs for t in pair if t.device.type == "cuda"}:
            self.torch.cuda.synchronize(dev)

    def _copies(self, index: int, batch: int) -> None:
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
    def __init__(self, torch: Any, stream: Optional[Any]) -> None:
        self.ctx = torch.cuda.stream(stream) if stream is not None else None

    def __enter__(self) -> None:
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _threads_at_once(pairs: list[tuple[Any, Any]], batch: int) -> list[float]:
    """Copy every pair ``batch`` times, a thread per pair, all released together: each thread's seconds from
    the common start to its end.  A copy that raises in its thread raises here."""
    barrier = threading.Barrier(len(pairs) + 1)
    ends = [0.0] * len(pairs)
    errors: list[BaseException] = []

    def work(k: int, src: Any, dst: Any) -> None:
        try:
            barrier.wait()
            for _ in range(batch):
                dst.copy_(src)
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


class _HostCopy:
    """Host memcpy between buffers; both ways = two threads copying at once."""

    def __init__(self, pairs: list[tuple[Any, Any]]):
        self.pairs = pairs

    def sample(self, batch: int) -> Callable[[], float]:
        if len(self.pairs) == 1:
            src, dst = self.pairs[0]
            t0 = time.perf_counter()
            for _ in range(batch):
                dst.copy_(src)
            dt = time.perf_counter() - t0
            return lambda: dt
        dt = max(_threads_at_once(self.pairs, batch))
        return lambda: dt

    def sync(self) -> None:
        pass

    def settle(self) -> None:
        pass


def _verify(timed: Any, pairs: list[tuple[Any, Any]], what: str) -> None:
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


class _single_threaded:
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

    def __exit__(self, *exc: Any) -> None:
        if self.active:
            import torch

            torch.set_num_threads(self.saved)


def _gpu_batches(settings: TimingSettings) -> TimingSettings:
    return dataclasses.replace(settings, target_batch_s=max(settings.target_batch_s, GPU_BATCH_S))


def _device_index(name: str) -> int:
    return int(name.split(":")[1]) if ":" in name else 0


def measure_copy(
    src_dev: str,
    dst_dev: str,
    size: int,
    settings: TimingSettings,
    pool: BufferPool,
    both_ways: bool = False,
) -> Measurement:
    """Peer copy src_dev -> dst_dev of ``size`` bytes (and dst_dev -> src_dev at once when both_ways)."""
    import torch

    op = "copy_bidir" if both_ways else "copy"
    what = f"{op} {src_dev}->{dst_dev} ({size} bytes)"
    a_src = pool.get(src_dev, "a_src", size)
    b_dst = pool.get(dst_dev, "b_dst", size)
    pairs = [(a_src, b_dst)]
    if both_ways:
        b_src = pool.get(dst_dev, "b_src", size)
        a_dst = pool.get(src_dev, "a_dst", size)
        pairs.append((b_src, a_dst))
    info: dict[str, Any] = {}
    if src_dev.startswith("cuda"):
        i, j = _device_index(src_dev), _device_index(dst_dev)
        peer = bool(torch.cuda.can_device_access_peer(i, j)) if i != j else True
        info["peer_access"] = peer
        streams = [(torch.cuda.Stream(device=i), torch.cuda.Stream(device=j))]
        if both_ways:
            streams.append((torch.cuda.Stream(device=j), torch.cuda.Stream(device=i)))
        timed: Any = _CudaCopy(pairs, streams, latch_device=i, what=what)
        info["timer"] = "device events"
        info.update(timed.engine_info)
        settings = _gpu_batches(settings)
    else:
        timed = _HostCopy(pairs)
        info["timer"] = "host clock"
    with _single_threaded(not src_dev.startswith("cuda")):
        samples, p = measure(timed, settings)
    _verify(timed, pairs, what)
    info["batch"] = p.batch
    return Measurement(
        op=op,
        size_bytes=size,
        bytes_per_iter=size * (2 if both_ways else 1),
        samples_s=samples,
        devices=(src_dev, dst_dev),
        kind="copy",
        info=info,
    )


def measure_host_device(device: str, size: int, direction: str, settings: TimingSettings,
                        pool: BufferPool) -> Measurement:
    """Pinned host memory -> device ("h2d") or device -> pinned host memory ("d2h")."""
    import torch

    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    if not device.startswith("cuda"):
        raise CopyError(f"host<->device copies need a GPU device, got {device!r}")
    host = pool.get("cpu", f"pinned_{direction}", size, pinned=True, user=device)
    dev = pool.get(device, f"{direction}_dev", size)
    src, dst = (host, dev) if direction == "h2d" else (dev, host)
    i = _device_index(device)
    what = f"{direction} {device} ({size} bytes)"
    timed = _CudaCopy([(src, dst)], [(torch.cuda.Stream(device=i), None)], latch_device=i, what=what)
    samples, p = measure(timed, _gpu_batches(settings))
    _verify(timed, [(src, dst)], what)
    return Measurement(
        op=direction,
        size_bytes=size,
        samples_s=samples,
        devices=("host", device) if direction == "h2d" else (device, "host"),
        kind="copy",
        info={"timer": "device events", **timed.engine_info, "pinned": True, "batch": p.batch},
    )


# -- a copy as plain data: measured here, or in a new process ----------------------------------------

PEER, HOST_DEVICE = "peer", "host_device"


def copy_spec(copy: str, devices: Sequence[str], size_bytes: int, *, both_ways: bool = False,
              direction: str = "") -> dict[str, Any]:
    """A copy as plain JSON values: ``copy`` is ``"peer"`` (``devices`` = [src, dst], ``both_ways``),
    ``"host_device"`` (``devices`` = [device], ``direction`` "h2d" or "d2h"), or a pattern of all peers at
    once (``pattern_pairs``): ``"one_to_all"`` ([src, *dsts]), ``"all_to_one"`` ([*srcs, dst]) or
    ``"all_pairs"`` (the devices), at least two distinct devices."""
    if copy in PATTERN_OPS:
        pattern_pairs(copy, devices)  # checks the devices
        if both_ways or direction:
            raise ValueError(f"the {copy} pattern has no both_ways or direction, got {both_ways!r} and {direction!r}")
        return {"copy": copy, "devices": [str(d) for d in devices], "size_bytes": int(size_bytes),
                "both_ways": False, "direction": ""}
    if copy not in (PEER, HOST_DEVICE):
        raise ValueError(f"copy must be one of {', '.join(repr(c) for c in (PEER, HOST_DEVICE, *PATTERN_OPS))}, "
                         f"got {copy!r}")
    if copy == PEER and len(devices) != 2:
        raise ValueError(f"a peer copy needs [src, dst] devices, got {list(devices)!r}")
    if copy == HOST_DEVICE and (len(devices) != 1 or direction not in ("h2d", "d2h")):
        raise ValueError(f"a host<->device copy needs one device and direction 'h2d' or 'd2h', got "
                         f"{list(devices)!r} and {direction!r}")
    return {"copy": copy, "devices": [str(d) for d in devices], "size_bytes": int(size_bytes),
            "both_ways": bool(both_ways), "direction": direction}


def measure_spec(spec: Mapping[str, Any], settings: TimingSettings, pool: BufferPool) -> Measurement:
    """Measure the copy ``spec`` (see ``copy_spec``) in this process, with buffers from ``pool``."""
    devices, size = spec["devices"], int(spec["size_bytes"])
    if spec["copy"] in PATTERN_OPS:
        return measure_pattern(spec["copy"], devices, size, settings, pool)
    if spec["copy"] == PEER:
        return measure_copy(devices[0], devices[1], size, settings, pool, bool(spec.get("both_ways")))
    return measure_host_device(devices[0], size, spec["direction"], settings, pool)


def _check_visible(devices: Sequence[str]) -> None:
    """Every CUDA device of the copy must be visible here, addressed by its own index (the rank worker
    selects its GPU with ``torch.cuda.set_device``, which must not limit a copy to that GPU)."""
    import torch

    wanted = sorted({_device_index(d) for d in devices if d.startswith("cuda")})
    if not wanted:
        return
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if wanted[-1] >= seen:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise CopyError(
            f"the copy needs {', '.join(f'cuda:{i}' for i in wanted)}, but this process (pid {os.getpid()}) "
            f"sees {seen} GPU{'' if seen == 1 else 's'}"
            + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
        )


def bench_copy(ctx: Any, *, copy: str, devices: Sequence[str], size_bytes: int, timing: Mapping[str, Any],
               both_ways: bool = False, direction: str = "") -> dict[str, Any]:
    """Rank task: measure one copy (the arguments of ``copy_spec``, and ``timing``: the fields of a
    :class:`TimingSettings`) with buffers, streams and timing state of this process alone.

    Returns ``Measurement.to_dict(with_samples=True)``; its ``info["pid"]`` is this process's id.
    """
    spec = copy_spec(copy, devices, size_bytes, both_ways=both_ways, direction=direction)
    _check_visible(spec["devices"])
    pool = BufferPool()
    try:
        m = measure_spec(spec, TimingSettings(**timing), pool)
    finally:
        pool.clear()
    m.info["pid"] = os.getpid()
    return m.to_dict(with_samples=True)


# -- all peers at once: one-to-all, all-to-one, every pair ----------------------------------------------

ONE_TO_ALL, ALL_TO_ONE, ALL_PAIRS = "one_to_all", "all_to_one", "all_pairs"
#: the patterns of many copies at once (a ``copy_spec``'s ``copy``) -> their measurement's op
PATTERN_OPS = {ONE_TO_ALL: "copy_one_to_all", ALL_TO_ONE: "copy_all_to_one", ALL_PAIRS: "copy_all_pairs"}
#: the specs of every copy's op (:mod:`.specs`): one way and both ways between devices, host<->device,
#: and the patterns
SPECS = (OpSpec("copy", COPY, PEER_KIND),
         OpSpec("copy_bidir", COPY, PEER_KIND),
         OpSpec("h2d", COPY, HOST_KIND),
         OpSpec("d2h", COPY, HOST_KIND),
         OpSpec(PATTERN_OPS[ONE_TO_ALL], COPY, PEER_KIND),
         OpSpec(PATTERN_OPS[ALL_TO_ONE], COPY, PEER_KIND),
         OpSpec(PATTERN_OPS[ALL_PAIRS], COPY, PEER_KIND))
#: host buffers of one pattern may take at most this share of the host's memory: 2 x pairs x size bytes
#: grow as n^2 (all pairs of 8 logical devices at 16 MiB: 1.8 GB), and the session's other buffers, its rank
#: pools and the rest of the machine need the remainder; past it the copy fails with the reason, not the host
HOST_PATTERN_MEMORY_SHARE = 0.25


def pattern_pairs(copy: str, devices: Sequence[str]) -> list[tuple[str, str]]:
    """The (source, destination) pairs of a pattern, in the order they are issued: ``"one_to_all"`` of
    [src, *dsts] is src -> each dst; ``"all_to_one"`` of [*srcs, dst] each src -> dst; ``"all_pairs"`` every
    ordered pair of the devices, source-major.  ValueError for another ``copy``, fewer than two devices or
    a device named twice."""
    devs = [str(d) for d in devices]
    if copy not in PATTERN_OPS:
        raise ValueError(f"copy pattern must be one of {', '.join(PATTERN_OPS)}, got {copy!r}")
    if len(devs) < 2 or len(set(devs)) != len(devs):
        raise ValueError(f"the {copy} pattern needs at least two distinct devices, got {devs!r}")
    if copy == ONE_TO_ALL:
        return [(devs[0], d) for d in devs[1:]]
    if copy == ALL_TO_ONE:
        return [(d, devs[-1]) for d in devs[:-1]]
    return [(a, b) for a in devs for b in devs if a != b]


def _link_id(src: str, dst: str) -> str:
    return f"{src.split(':')[-1]}->{dst.split(':')[-1]}"


class _CudaPattern(_CudaCopy):
    """Many pairs at once on GPUs (``_CudaCopy``, one stream per pair), with each pair's own time: device
    events on its stream around its copies, from when the latch released the stream to the end of its
    batch.  ``link_times`` gets (batch, seconds per pair) for every sample read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the latch covers the host's enqueue of every pair's copies: its cap on the enqueue cost of one
        # iteration is per copy call, and one iteration here is a call per pair
        self.latch.MAX_ENQUEUE_S = _Latch.MAX_ENQUEUE_S * len(self.pairs)
        self.link_times: list[tuple[int, list[float]]] = []
        self._events: list[tuple[Any, Any]] = []

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


class _HostPattern:
    """Many pairs at once on host buffers, one thread per pair (torch single-threaded, as ``_HostCopy``):
    the sample is from the common start to the last thread's end; ``link_times`` gets (batch, seconds from
    the start to each thread's end) for every sample read.  A copy that raises in its thread raises here."""

    def __init__(self, pairs: list[tuple[Any, Any]]):
        self.pairs = pairs
        self.link_times: list[tuple[int, list[float]]] = []

    def sample(self, batch: int) -> Callable[[], float]:
        own = _threads_at_once(self.pairs, batch)
        total = max(own)

        def seconds() -> float:
            self.link_times.append((batch, own))
            return total

        return seconds

    def sync(self) -> None:
        pass

    def settle(self) -> None:
        pass


def _host_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0  # unknown: not checked


def measure_pattern(copy: str, devices: Sequence[str], size: int, settings: TimingSettings,
                    pool: BufferPool) -> Measurement:
    """Every pair of the pattern ``copy`` (``pattern_pairs``) of ``size`` bytes at once.

    The measurement's op is ``PATTERN_OPS[copy]``, its devices ``devices``, its ``size_bytes`` one pair's
    bytes and its ``bytes_per_iter`` those of every pair: the gated figure is the aggregate.  ``info``:
    ``links`` (pairs), ``per_link_gbps`` (aggregate / links), ``link_gbps`` (each pair's own median GB/s,
    "0->1": x), ``slowest_link``, ``link_timer`` (what the per-pair figures time), and as a pair copy's
    ``timer``, ``engine``, ``peer_access``, ``batch``.  CopyError where a pair's data is wrong, the driver's
    copy fails, or host buffers would take more than ``HOST_PATTERN_MEMORY_SHARE`` of the host's memory."""
    import statistics

    import torch

    links = pattern_pairs(copy, devices)
    op = PATTERN_OPS[copy]
    what = f"{op} {copy_where(op, devices)} ({size} bytes)"
    on_gpu = str(devices[0]).startswith("cuda")
    if not on_gpu:
        need, have = 2 * len(links) * size, _host_memory_bytes()
        if have and need > HOST_PATTERN_MEMORY_SHARE * have:
            raise CopyError(
                f"{what}: its {len(links)} copies need {need / 2**30:.1f} GiB of host buffers, more than "
                f"{HOST_PATTERN_MEMORY_SHARE:.0%} of this host's {have / 2**30:.1f} GiB; lower --gpucomm-max-size "
                "or GPUCOMM_CPU_DEVICES"
            )
    # buffers by (device, the other end): the patterns share them, so a GPU holds one source and one
    # destination per peer whichever pattern runs
    pairs = [(pool.get(s, f"peers_to_{d}", size), pool.get(d, f"peers_from_{s}", size)) for s, d in links]
    info: dict[str, Any] = {"links": len(links)}
    if on_gpu:
        off = [_link_id(s, d) for s, d in links
               if not torch.cuda.can_device_access_peer(_device_index(s), _device_index(d))]
        info["peer_access"] = not off
        if off:
            info["no_peer_access"] = off
        streams = [(torch.cuda.Stream(device=_device_index(s)), None) for s, _ in links]
        timed: Any = _CudaPattern(pairs, streams, latch_device=_device_index(links[0][0]), what=what)
        info["timer"] = "device events"
        info.update(timed.engine_info)
        info["link_timer"] = ("device events on each pair's stream, from its start to the end of its copies, "
                              "while every other pair copies")
        settings = _gpu_batches(settings)
    else:
        timed = _HostPattern(pairs)
        info["timer"] = "host clock"
        info["link_timer"] = "host clock of each pair's thread, from the common start to its end"
    with _single_threaded(not on_gpu):
        samples, p = measure(timed, settings)
    read = timed.link_times[-len(samples):]  # the timed samples' are the last read
    _verify(timed, pairs, what)
    info["batch"] = p.batch
    m = Measurement(op=op, size_bytes=size, bytes_per_iter=size * len(links), samples_s=samples,
                    devices=tuple(str(d) for d in devices), kind="copy", info=info)
    own = {_link_id(s, d): statistics.median(size * batch / max(t[k], 1e-12) / 1e9 for batch, t in read)
           for k, (s, d) in enumerate(links)}
    info["per_link_gbps"] = m.algbw_gbps / len(links)
    info["link_gbps"] = own
    info["slowest_link"] = min(own, key=own.__getitem__)
    return m


# -- launched mode: node-local copies, measured on every node at once ---------------------------------

def measuring_local_rank(spec: Mapping[str, Any], local_world_size: int) -> int:
    """Which local rank of each node measures the copy ``spec`` (see ``copy_spec``) in launched mode.

    On GPU, the local rank whose GPU is the copy's first device: the source of a peer copy, the lower
    device of a both-ways copy, the GPU of a host<->device copy, the first device of a pattern.  Where a
    node has more GPUs than ranks, the device's index modulo the node's ranks (with one rank per node, that
    rank measures every copy).
    Host buffers (the CPU variant, ``cpu:0`` and ``cpu:1``): local rank 0."""
    if local_world_size < 1:
        raise ValueError(f"a node has at least one rank, got local_world_size={local_world_size!r}")
    first = str(spec["devices"][0])
    if not first.startswith("cuda"):
        return 0
    return _device_index(first) % local_world_size


def node_measurements(outcomes: Sequence[tuple[int, bool, Any]], hosts: Sequence[str], label: str,
                      only_node: Optional[int] = None) -> list[Measurement]:
    """One measurement per node, ordered by node, from every rank's outcome of a launched copy.

    ``outcomes[r]`` is rank r's ``(node, ok, payload)``: ``(node, True, None)`` from a rank that did not
    measure, ``(node, True, Measurement.to_dict(with_samples=True))`` from the rank that did, and
    ``(node, False, traceback text)`` from a rank whose copy raised.  ``hosts[r]`` is rank r's host (may
    be empty).  Every node must have exactly one measurement; with ``only_node`` (a re-measure of one
    node's copy), that node one and the others none.

    Raises:
        RankError: the copy raised on some rank; the message names each (rank, host, node) with its
            traceback.
        CopyError: a node has no measurement, or more than one (the ranks disagree on who measures).
    """
    from ..ranks import report

    def where(r: int) -> str:
        host = hosts[r] if r < len(hosts) and hosts[r] else "?"
        return f"rank {r} on {host}, node {outcomes[r][0]}"

    errors = {r: f"({where(r)})\n{payload}" for r, (_, ok, payload) in enumerate(outcomes) if not ok}
    if errors:
        finished = [r for r in range(len(outcomes)) if r not in errors]
        raise report.task_error(label, len(outcomes), errors, finished)
    per_node: dict[int, list[int]] = {}
    for r, (node, _, payload) in enumerate(outcomes):
        per_node.setdefault(int(node), [])
        if payload is not None:
            per_node[int(node)].append(r)
    wrong = {node: ranks for node, ranks in per_node.items()
             if len(ranks) != (1 if only_node is None or node == only_node else 0)}
    if wrong:
        said = "; ".join(f"node {node}: {len(ranks)} measurements" + (f" (ranks {ranks})" if ranks else "")
                         for node, ranks in sorted(wrong.items()))
        what = "every node measures" if only_node is None else f"node {only_node} alone re-measures"
        raise CopyError(f"{label}: {what} a launched copy once, on one rank; {said}")
    if only_node is not None and only_node not in per_node:
        raise CopyError(f"{label}: node {only_node} has no rank in this job (nodes {sorted(per_node)})")
    return [Measurement.from_dict(outcomes[ranks[0]][2]) for _, ranks in sorted(per_node.items()) if ranks]
