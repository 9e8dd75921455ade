"""Copies made by the GPU's own cores (SM copies): a copy kernel, as nvbandwidth's ``*_memcpy_sm`` tests make.

A copy engine (:mod:`.engines`) and a kernel take different paths through the hardware: a kernel's loads and
stores go through the streaming multiprocessors, their caches and the memory system's queues, not the copy
engines' own DMA queues; a slowdown can show on one path only.

The kernel is written in Triton: it ships with torch's CUDA and ROCm wheels (no new dependency on a GPU
machine), and the same source runs on NVIDIA and AMD GPUs.  It is imported where the first SM copy is set up,
never at import (CPU machines and CI have no Triton).  Pinned host memory is passed to the kernel directly
(unified addressing), so one kernel makes the copies within a GPU, between GPUs (peer access enabled as for
the copy engines) and between pinned host memory and a GPU.

How it copies, as nvbandwidth's SM copy kernel does:

- one launch copies the buffer ``reps`` times in a loop inside the kernel, so a batch of ``reps`` copies is one
  launch with no gaps between copies (nvbandwidth's ``loopCount`` inside its kernel);
- a persistent grid: ``programs_per_sm`` programs per multiprocessor, each copying every ``programs``-th chunk
  of ``block`` 4-byte words (1-byte elements where the size is not a multiple of 4 bytes), the last chunk
  masked;
- loads bypass L1 (``cache_modifier=".cg"``, nvbandwidth's ``__ldcg``): with cached loads the repeated copies
  re-read L1-resident data, and host->device at 1-16 MiB showed a false 1000-1600 GB/s on one H100.

Both ways at once is one kernel (so that both directions share the multiprocessors all through, as nvbandwidth's
split-warp kernel does), in one of :data:`BIDIR_LAYOUTS`.

The CPU variant (logical host devices) makes an "SM copy" with the cores' element-wise kernel instead of
memcpy: ``torch.bitwise_or(src, 0, out=dst)`` on bytes (:func:`host_kernel_copy`), single-threaded as every
host copy: loads and stores of the cores' vector units rather than the C library's memcpy.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Optional

from .engines import CopyError

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

    from ..measurement import MeasurementInfo

__all__ = ["KernelConfig", "BIDIR_LAYOUTS", "DEFAULT_CONFIG", "SmCopier", "host_kernel_copy", "HOST_KERNEL",
           "KERNEL_LABEL", "programs_for", "element_view"]

#: how one kernel copies both ways: ``programs``: half the programs copy one way, half the other (one H100,
#: 2026-12-07: 0.92-0.97x nvbandwidth's split-warp kernel from 4 MiB up); ``alternate``: every program copies a
#: chunk one way, then the same chunk the other way (0.98-1.02x there with the default shape); ``paired``: every
#: program loads a chunk of each direction, then stores both (both loads in flight at once; 0.96-0.99x)
BIDIR_LAYOUTS = ("programs", "alternate", "paired")
#: ``info["engine"]`` of an SM copy on a GPU
KERNEL_LABEL = "triton copy kernel"
#: ``info["engine"]`` of an SM copy on host buffers (the CPU variant)
HOST_KERNEL = "torch.bitwise_or(src, 0, out=dst) on bytes (the host cores' element-wise kernel)"


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """The copy kernel's shape: programs per multiprocessor, words per chunk (``block``, a power of 2), warps
    per program, and the layout of both ways (:data:`BIDIR_LAYOUTS`).  The default is the shape that came
    closest to nvbandwidth's ``*_memcpy_sm`` on one H100 (``python benchmarks/sm_copies.py --variants``,
    docs/measuring.md): one way, every shape tried gave 0.99-1.01x from 4 MiB up; both ways, the ``alternate``
    layout at 4 programs per SM of 4 warps and 1024-word chunks gave 0.98-1.02x on three boots, the others
    0.90-0.99x."""

    programs_per_sm: int = 4
    block: int = 1024
    warps: int = 4
    bidir_layout: str = "alternate"

    def __post_init__(self) -> None:
        if not isinstance(self.programs_per_sm, int) or self.programs_per_sm < 1:
            raise ValueError(f"programs_per_sm must be an integer of at least 1, got {self.programs_per_sm!r}")
        if not isinstance(self.block, int) or self.block < 16 or self.block & (self.block - 1):
            raise ValueError(f"block must be a power of 2 of at least 16, got {self.block!r}")
        if self.warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"warps must be 1, 2, 4, 8, 16 or 32, got {self.warps!r}")
        if self.bidir_layout not in BIDIR_LAYOUTS:
            raise ValueError(f"bidir_layout must be one of {', '.join(BIDIR_LAYOUTS)}, got {self.bidir_layout!r}")

    def describe(self) -> str:
        return (f"{self.programs_per_sm} programs/SM, {self.block} words/chunk, {self.warps} warps, "
                f"both ways by {self.bidir_layout}")


DEFAULT_CONFIG = KernelConfig()


def programs_for(config: KernelConfig, multiprocessors: int, elements: int) -> int:
    """The grid: ``programs_per_sm`` x ``multiprocessors``, at most one program per chunk, at least 1."""
    chunks = -(-elements // config.block)
    return max(1, min(config.programs_per_sm * multiprocessors, chunks))


def element_view(t: "Tensor") -> "Tensor":
    """A byte buffer as 4-byte words where its size and address allow, else as it is (bytes)."""
    import torch

    if t.numel() % 4 == 0 and t.data_ptr() % 4 == 0:
        return t.view(torch.int32)
    return t


@functools.lru_cache(maxsize=1)
def _kernels() -> dict[str, Any]:
    """The Triton kernels, compiled on first launch; CopyError where Triton cannot be imported."""
    try:
        import triton
    except Exception as e:  # noqa: BLE001  (any import failure says the same)
        raise CopyError(f"SM copies on a GPU need Triton (it ships with torch's CUDA and ROCm wheels): "
                        f"import triton failed: {type(e).__name__}: {e}") from None

    from . import sm_kernels

    return {"one_way": sm_kernels.copy_one_way, "both_ways": sm_kernels.copy_both_ways, "triton": triton.__version__}


class SmCopier:
    """Copies by the kernel on the GPU ``device_index`` (the copy's source GPU, or the GPU of a host copy):
    ``reps`` copies in one launch, on the current stream."""

    def __init__(self, device_index: int, config: Optional[KernelConfig] = None) -> None:
        import torch

        self.config = config or DEFAULT_CONFIG
        self.device_index = device_index
        self.kernels = _kernels()
        self.multiprocessors = int(torch.cuda.get_device_properties(device_index).multi_processor_count)

    def info(self) -> "MeasurementInfo":
        """The measurement's ``info`` entries: ``engine`` and ``copy_kernel`` (its shape)."""
        return {"engine": KERNEL_LABEL,
                "copy_kernel": f"Triton {self.kernels['triton']}, {self.config.describe()}, "
                               f"{self.multiprocessors} SMs, L1-bypassing loads (.cg)"}

    def copy(self, src: "Tensor", dst: "Tensor", reps: int) -> None:
        """``dst`` = ``src``, ``reps`` times, in one launch on the current stream."""
        import torch

        s, d = element_view(src), element_view(dst)
        if s.dtype != d.dtype:
            s, d = src, dst
        n = s.numel()
        if n == 0 or reps < 1:
            return
        grid = (programs_for(self.config, self.multiprocessors, n),)
        with torch.cuda.device(self.device_index):
            self.kernels["one_way"][grid](d, s, n, reps, BLOCK=self.config.block, num_warps=self.config.warps)

    def copy_both(self, one: tuple["Tensor", "Tensor"], other: tuple["Tensor", "Tensor"], reps: int) -> None:
        """Both (src, dst) pairs (of one size) at once, ``reps`` times, in one launch on the current stream."""
        import torch

        views = [element_view(t) for t in (*one, *other)]
        if len({v.dtype for v in views}) != 1:
            views = [*one, *other]
        s1, d1, s2, d2 = views
        if s1.numel() != s2.numel():
            raise CopyError(f"both ways by one kernel needs two copies of one size, got {s1.numel()} and "
                            f"{s2.numel()} elements")
        n = s1.numel()
        if n == 0 or reps < 1:
            return
        programs = programs_for(self.config, self.multiprocessors, n)
        layout = BIDIR_LAYOUTS.index(self.config.bidir_layout)
        if layout == 0:  # half the programs each way: twice the one-way grid, an even count
            programs = max(2, 2 * programs)
        with torch.cuda.device(self.device_index):
            self.kernels["both_ways"][(programs,)](d1, s1, d2, s2, n, reps, BLOCK=self.config.block,
                                                   LAYOUT=layout, num_warps=self.config.warps)


def host_kernel_copy(src: "Tensor", dst: "Tensor") -> None:
    """The CPU variant of an SM copy: ``dst`` = ``src`` by the cores' element-wise kernel, not memcpy."""
    import torch

    torch.bitwise_or(src, 0, out=dst)
