"""Copies: peer-to-peer (one way and both ways), host-to-device and device-to-host, and all peers at once.

On a GPU a copy is one call of the GPU runtime's own asynchronous copy of contiguous bytes on one stream,
as nvbandwidth (CUDA) and TransferBench (ROCm) issue their copies, timed with device events: the CUDA
driver's ``cuMemcpyAsync``, or HIP's ``hipMemcpyAsync`` on ROCm builds of torch (``ops.engines``: one
engine, a table of entry points per platform; ``GPUCOMM_COPY_CALL`` and ``GPUCOMM_HIP_LIBRARY``
choose).  Peer access is enabled through torch first, where the pair supports it.  torch's
``dst.copy_(src)`` is not used for the timed copies: between two GPUs it adds a two-way barrier between
the source and destination streams to every copy, which on 2 x H200 made a 256 KiB peer copy take 11 us
instead of 3 (23 GB/s against 85 GB/s raw).  It is the fallback where the runtime's library does not load
(or ``GPUCOMM_COPY_CALL=torch``); the measurement's ``info["engine"]`` says which was used (and
``info["engine_note"]`` why, after a fallback).  Small copies are batched behind a short spin
kernel (a "latch", as nvbandwidth does) so the host has enqueued the whole batch before the device starts
it: the device then runs the copies back to back and launch overhead is not measured.

On CPU a copy is a host memcpy between two buffers, timed with the host clock; "both ways" runs two
copies at once in two threads.

Copies by the GPU's own cores (``engine="sm"``, ``--gpucomm-copy-engine=sm|both``): the same copies made by a
copy kernel (:mod:`.sm_copy`, as nvbandwidth's ``*_memcpy_sm``), ops named with ``_sm`` (``copy_sm``,
``copy_bidir_sm``, ``h2d_sm``, ``d2h_sm``, ``host_bidir_sm``) so that baselines and the gate keep them apart;
on host buffers the cores' element-wise kernel instead of memcpy.  Host memory to and from a device at once
(``measure_host_both_ways``, op ``host_bidir``): nvbandwidth's ``*_bidirectional_memcpy_ce`` / ``_sm``.

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

How a copy is timed (the latch, the streams, the threads, the check of the copied data) is :mod:`.copy_timing`'s.
In launched mode (one pytest process per rank) copies stay node-local: on every node at once, one rank of
the node measures the copy between that node's devices, and the ranks exchange their outcomes, from which one
measurement per node is made (:mod:`.node_copies`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from ..measurement import Measurement, MeasurementInfo, copy_where
from .copy_timing import (CudaCopy, CudaPattern, HostCopy, HostPattern, device_index, gpu_batches, single_threaded,
                          verify_copies)
from .engines import CE, SM, CopyError, copy_engine_of
from .sm_copy import HOST_KERNEL, KernelConfig
from .specs import COPY, HOST_KIND, PEER_KIND, OpSpec
from .clocks import Sampler, clock_info, sampler_for
from .timing import TimingSettings, measure

if TYPE_CHECKING:
    from torch import Tensor

    from ..ranks.context import RankContext

#: ``CopyError`` is :mod:`.engines`' (a copy the runtime's library refused), named here for the copies' callers
__all__ = ["CopyError", "measure_copy", "measure_host_device", "BufferPool", "copy_spec", "measure_spec",
           "bench_copy", "measure_pattern", "pattern_pairs", "PATTERN_OPS", "ONE_TO_ALL", "ALL_TO_ONE", "ALL_PAIRS",
           "PEER", "HOST_DEVICE", "SPECS", "HOST_PATTERN_MEMORY_SHARE", "fill_pattern", "sm_op", "SM_SUFFIX",
           "measure_host_both_ways", "HOST_BOTH_WAYS_ACCOUNTING", "BOTH"]


class BufferPool:
    """One growing byte buffer per (device, role), so a sweep does not allocate at every size.

    A pinned host buffer serves one GPU at a time (``user``): when another GPU asks for it, it is
    allocated afresh.  On 2 x H200, host->device copies from a pinned buffer that the other GPU had just
    copied from ran 10-28% slower, with a CV of 5-18% instead of under 1%, than from a fresh one.
    """

    def __init__(self) -> None:
        self._bufs: dict[tuple[str, str, bool], "Tensor"] = {}
        self._users: dict[tuple[str, str, bool], Optional[str]] = {}

    def get(self, device: str, role: str, nbytes: int, pinned: bool = False, user: Optional[str] = None) -> "Tensor":
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


def fill_pattern(buf: "Tensor") -> None:
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


def sm_op(op: str, engine: str) -> str:
    """The op of a copy by ``engine``: ``op`` for the copy engines, ``op`` + ``_sm`` for the copy kernel (so that
    the baselines and the gate's classes keep the two apart)."""
    return op + SM_SUFFIX if copy_engine_of(engine, f"the {op} copy") == SM else op


def measure_copy(
    src_dev: str,
    dst_dev: str,
    size: int,
    settings: TimingSettings,
    pool: BufferPool,
    both_ways: bool = False,
    engine: str = CE,
    kernel: Optional[KernelConfig] = None,
) -> Measurement:
    """Peer copy src_dev -> dst_dev of ``size`` bytes (and dst_dev -> src_dev at once when both_ways); the two
    devices may be one (a copy within a device).  ``engine`` ``"sm"``: by the copy kernel (:mod:`.sm_copy`,
    shaped by ``kernel``), run on the source GPU; both ways is then one kernel on the source GPU."""
    import torch

    op = sm_op("copy_bidir" if both_ways else "copy", engine)
    what = f"{op} {src_dev}->{dst_dev} ({size} bytes)"
    a_src = pool.get(src_dev, "a_src", size)
    b_dst = pool.get(dst_dev, "b_dst", size)
    pairs = [(a_src, b_dst)]
    if both_ways:
        b_src = pool.get(dst_dev, "b_src", size)
        a_dst = pool.get(src_dev, "a_dst", size)
        pairs.append((b_src, a_dst))
    info: MeasurementInfo = {}
    if src_dev.startswith("cuda"):
        i, j = device_index(src_dev), device_index(dst_dev)
        peer = bool(torch.cuda.can_device_access_peer(i, j)) if i != j else True
        info["peer_access"] = peer
        if engine != CE and not peer:  # the kernel on GPU i would read GPU j's memory: a fault for the process
            raise CopyError(f"{what}: a copy by kernel between GPUs needs peer access, and {src_dev} cannot "
                            f"access {dst_dev} (torch.cuda.can_device_access_peer); the copy engines stage it")
        streams = [(torch.cuda.Stream(device=i), torch.cuda.Stream(device=j))]
        if both_ways and engine == CE:
            streams.append((torch.cuda.Stream(device=j), torch.cuda.Stream(device=i)))
        timed: "CudaCopy | HostCopy"
        timed = CudaCopy(pairs, streams, latch_device=i, what=what, engine=engine, kernel=kernel)
        info["timer"] = "device events"
        info.update(timed.engine_info)
        settings = gpu_batches(settings)
    else:
        timed = HostCopy(pairs, engine)
        info["timer"] = "host clock"
        if engine == SM:
            info["engine"] = HOST_KERNEL
    clocks = sampler_for((src_dev, dst_dev))
    with single_threaded(not src_dev.startswith("cuda")):
        samples, p = measure(timed, settings, clocks=clocks)
    verify_copies(timed, pairs, what)
    info["batch"] = p.batch
    _keep_clocks(info, clocks)
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
                        pool: BufferPool, engine: str = CE, kernel: Optional[KernelConfig] = None) -> Measurement:
    """Pinned host memory -> device ("h2d") or device -> pinned host memory ("d2h"); ``engine`` ``"sm"``: by
    the copy kernel on the device (op ``h2d_sm``, ``d2h_sm``)."""
    import torch

    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    if not device.startswith("cuda"):
        raise CopyError(f"host<->device copies need a GPU device, got {device!r}")
    op = sm_op(direction, engine)
    host = pool.get("cpu", f"pinned_{direction}", size, pinned=True, user=device)
    dev = pool.get(device, f"{direction}_dev", size)
    src, dst = (host, dev) if direction == "h2d" else (dev, host)
    i = device_index(device)
    what = f"{op} {device} ({size} bytes)"
    timed = CudaCopy([(src, dst)], [(torch.cuda.Stream(device=i), None)], latch_device=i, what=what,
                     engine=engine, kernel=kernel)
    clocks = sampler_for((device,))
    samples, p = measure(timed, gpu_batches(settings), clocks=clocks)
    verify_copies(timed, [(src, dst)], what)
    info: MeasurementInfo = {"timer": "device events", **timed.engine_info, "pinned": True, "batch": p.batch}
    _keep_clocks(info, clocks)
    return Measurement(
        op=op,
        size_bytes=size,
        samples_s=samples,
        devices=("host", device) if direction == "h2d" else (device, "host"),
        kind="copy",
        info=info,
    )


#: how a both-ways host copy counts (``info["accounting"]``)
HOST_BOTH_WAYS_ACCOUNTING = ("per direction: one direction's bytes over the span of both directions copying at "
                             "once (the total / 2)")


def measure_host_both_ways(device: str, size: int, settings: TimingSettings, pool: BufferPool,
                           engine: str = CE, kernel: Optional[KernelConfig] = None) -> Measurement:
    """Host memory -> ``device`` and ``device`` -> host memory at once, ``size`` bytes each way (op
    ``host_bidir``, by the copy kernel ``host_bidir_sm``): nvbandwidth's ``host_to_device_bidirectional_memcpy_*``
    and ``device_to_host_bidirectional_memcpy_*`` in one measurement.

    Counted per direction (``HOST_BOTH_WAYS_ACCOUNTING``): ``bytes_per_iter`` is ``size``, over the span of
    both.  By the copy engines each direction copies on its own stream, and ``info`` adds each direction's own
    figure as nvbandwidth's ``*_bidirectional_memcpy_ce`` tests count it -- its bytes over its own time while
    the other direction copies (``h2d_gbps``, ``d2h_gbps``: medians over the samples).  By the copy kernel both
    directions are one kernel (the figure is the total / 2 over its time, as nvbandwidth's
    ``*_bidirectional_memcpy_sm`` counts).  Pinned host memory on a GPU; on host buffers (the CPU variant,
    ``device`` a logical host device) two threads copy at once, each direction's own figure from the common
    start to its thread's end."""
    import statistics

    import torch

    op = sm_op("host_bidir", engine)
    what = f"{op} host<->{device} ({size} bytes)"
    on_gpu = device.startswith("cuda")
    info: MeasurementInfo = {"accounting": HOST_BOTH_WAYS_ACCOUNTING}
    timed: "CudaPattern | CudaCopy | HostPattern"
    if on_gpu:
        host_src = pool.get("cpu", "pinned_bidir_h2d", size, pinned=True, user=device)
        host_dst = pool.get("cpu", "pinned_bidir_d2h", size, pinned=True, user=device)
        pairs = [(host_src, pool.get(device, "bidir_h2d_dev", size)),
                 (pool.get(device, "bidir_d2h_dev", size), host_dst)]
        i = device_index(device)
        if engine == SM:
            timed = CudaCopy(pairs, [(torch.cuda.Stream(device=i), None)], latch_device=i, what=what, engine=SM,
                             kernel=kernel)
        else:
            timed = CudaPattern(pairs, [(torch.cuda.Stream(device=i), None), (torch.cuda.Stream(device=i), None)],
                                latch_device=i, what=what)
        info.update({"timer": "device events", **timed.engine_info, "pinned": True})
        settings = gpu_batches(settings)
    else:
        pairs = [(pool.get("host", "bidir_h2d", size), pool.get(device, "bidir_h2d_dev", size)),
                 (pool.get(device, "bidir_d2h_dev", size), pool.get("host", "bidir_d2h", size))]
        timed = HostPattern(pairs, engine)
        info["timer"] = "host clock"
        if engine == SM:
            info["engine"] = HOST_KERNEL
    clocks = sampler_for((device,))
    with single_threaded(not on_gpu):
        samples, p = measure(timed, settings, clocks=clocks)
    if isinstance(timed, (CudaPattern, HostPattern)):
        read = timed.link_times[-len(samples):]  # the timed samples' are the last read
        h2d, d2h = ([size * batch / max(t[k], 1e-12) / 1e9 for batch, t in read] for k in (0, 1))
        info["h2d_gbps"], info["d2h_gbps"] = statistics.median(h2d), statistics.median(d2h)
    verify_copies(timed, pairs, what)
    info["batch"] = p.batch
    _keep_clocks(info, clocks)
    return Measurement(op=op, size_bytes=size, bytes_per_iter=size, samples_s=samples,
                       devices=("host", device), kind="copy", info=info)


def _keep_clocks(info: MeasurementInfo, clocks: Sampler) -> None:
    """The clocks and throttle reasons read during the timed samples (``info["clocks"]``), where any were."""
    read = clock_info(clocks)
    if read:
        info["clocks"] = read


# -- a copy as plain data: measured here, or in a new process ----------------------------------------

PEER, HOST_DEVICE = "peer", "host_device"
#: a host<->device copy's direction for both ways at once (``measure_host_both_ways``)
BOTH = "both"
#: the end of an op's name made by the copy kernel (``sm_op``)
SM_SUFFIX = "_sm"


def copy_spec(copy: str, devices: Sequence[str], size_bytes: int, *, both_ways: bool = False,
              direction: str = "", engine: str = CE) -> dict[str, Any]:
    """A copy as plain JSON values: ``copy`` is ``"peer"`` (``devices`` = [src, dst], ``both_ways``; src and
    dst may be one device), ``"host_device"`` (``devices`` = [device], ``direction`` "h2d", "d2h" or "both"),
    or a pattern of all peers at once (``pattern_pairs``): ``"one_to_all"`` ([src, *dsts]), ``"all_to_one"``
    ([*srcs, dst]) or ``"all_pairs"`` (the devices), at least two distinct devices.  ``engine``: ``"ce"`` the
    copy engines, ``"sm"`` the copy kernel (:mod:`.sm_copy`; not for the patterns)."""
    engine = copy_engine_of(engine, f"a {copy} copy")
    if copy in PATTERN_OPS:
        pattern_pairs(copy, devices)  # checks the devices
        if both_ways or direction:
            raise ValueError(f"the {copy} pattern has no both_ways or direction, got {both_ways!r} and {direction!r}")
        if engine != CE:
            raise ValueError(f"the {copy} pattern is made by the copy engines only, got engine {engine!r}")
        return {"copy": copy, "devices": [str(d) for d in devices], "size_bytes": int(size_bytes),
                "both_ways": False, "direction": "", "engine": CE}
    if copy not in (PEER, HOST_DEVICE):
        raise ValueError(f"copy must be one of {', '.join(repr(c) for c in (PEER, HOST_DEVICE, *PATTERN_OPS))}, "
                         f"got {copy!r}")
    if copy == PEER and len(devices) != 2:
        raise ValueError(f"a peer copy needs [src, dst] devices, got {list(devices)!r}")
    if copy == HOST_DEVICE and (len(devices) != 1 or direction not in ("h2d", "d2h", BOTH)):
        raise ValueError(f"a host<->device copy needs one device and direction 'h2d', 'd2h' or 'both', got "
                         f"{list(devices)!r} and {direction!r}")
    return {"copy": copy, "devices": [str(d) for d in devices], "size_bytes": int(size_bytes),
            "both_ways": bool(both_ways), "direction": direction, "engine": engine}


def measure_spec(spec: Mapping[str, Any], settings: TimingSettings, pool: BufferPool) -> Measurement:
    """Measure the copy ``spec`` (see ``copy_spec``) in this process, with buffers from ``pool``."""
    devices, size, engine = spec["devices"], int(spec["size_bytes"]), str(spec.get("engine", CE))
    if spec["copy"] in PATTERN_OPS:
        return measure_pattern(spec["copy"], devices, size, settings, pool)
    if spec["copy"] == PEER:
        return measure_copy(devices[0], devices[1], size, settings, pool, bool(spec.get("both_ways")), engine)
    if spec["direction"] == BOTH:
        return measure_host_both_ways(devices[0], size, settings, pool, engine)
    return measure_host_device(devices[0], size, spec["direction"], settings, pool, engine)


def _check_visible(devices: Sequence[str]) -> None:
    """Every CUDA device of the copy must be visible here, addressed by its own index (the rank worker
    selects its GPU with ``torch.cuda.set_device``, which must not limit a copy to that GPU)."""
    import torch

    wanted = sorted({device_index(d) for d in devices if d.startswith("cuda")})
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


def bench_copy(ctx: Optional[RankContext], *, copy: str, devices: Sequence[str], size_bytes: int,
               timing: Mapping[str, Any], both_ways: bool = False, direction: str = "",
               engine: str = CE) -> dict[str, Any]:
    """Rank task: measure one copy (the arguments of ``copy_spec``, and ``timing``: the fields of a
    :class:`TimingSettings`) with buffers, streams and timing state of this process alone.

    Returns ``Measurement.to_dict(with_samples=True)``; its ``info["pid"]`` is this process's id.
    """
    spec = copy_spec(copy, devices, size_bytes, both_ways=both_ways, direction=direction, engine=engine)
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
#: the specs of every copy's op (:mod:`.specs`): one way and both ways between devices, host<->device one way
#: and both ways, each by the copy engines and by the copy kernel (``_sm``), and the patterns
SPECS = (OpSpec("copy", COPY, PEER_KIND),
         OpSpec("copy_bidir", COPY, PEER_KIND),
         OpSpec("h2d", COPY, HOST_KIND),
         OpSpec("d2h", COPY, HOST_KIND),
         OpSpec("host_bidir", COPY, HOST_KIND),
         OpSpec("copy_sm", COPY, PEER_KIND),
         OpSpec("copy_bidir_sm", COPY, PEER_KIND),
         OpSpec("h2d_sm", COPY, HOST_KIND),
         OpSpec("d2h_sm", COPY, HOST_KIND),
         OpSpec("host_bidir_sm", COPY, HOST_KIND),
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
    info: MeasurementInfo = {"links": len(links)}
    if on_gpu:
        off = [_link_id(s, d) for s, d in links
               if not torch.cuda.can_device_access_peer(device_index(s), device_index(d))]
        info["peer_access"] = not off
        if off:
            info["no_peer_access"] = off
        streams = [(torch.cuda.Stream(device=device_index(s)), None) for s, _ in links]
        timed: "CudaPattern | HostPattern"
        timed = CudaPattern(pairs, streams, latch_device=device_index(links[0][0]), what=what)
        info["timer"] = "device events"
        info.update(timed.engine_info)
        info["link_timer"] = ("device events on each pair's stream, from its start to the end of its copies, "
                              "while every other pair copies")
        settings = gpu_batches(settings)
    else:
        timed = HostPattern(pairs)
        info["timer"] = "host clock"
        info["link_timer"] = "host clock of each pair's thread, from the common start to its end"
    clocks = sampler_for(str(d) for d in devices)
    with single_threaded(not on_gpu):
        samples, p = measure(timed, settings, clocks=clocks)
    read = timed.link_times[-len(samples):]  # the timed samples' are the last read
    verify_copies(timed, pairs, what)
    info["batch"] = p.batch
    _keep_clocks(info, clocks)
    m = Measurement(op=op, size_bytes=size, bytes_per_iter=size * len(links), samples_s=samples,
                    devices=tuple(str(d) for d in devices), kind="copy", info=info)
    own = {_link_id(s, d): statistics.median(size * batch / max(t[k], 1e-12) / 1e9 for batch, t in read)
           for k, (s, d) in enumerate(links)}
    info["per_link_gbps"] = m.algbw_gbps / len(links)
    info["link_gbps"] = own
    info["slowest_link"] = min(own, key=own.__getitem__)
    return m

