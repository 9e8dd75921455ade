"""The devices of the session and the policy on them: the detected hardware and its fingerprint, the sizes
and worlds a test may have, and why a test is skipped or refused before any fixture runs.

The hardware is detected (and torch imported) only when a test first uses a gpucomm fixture or marker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import pytest

from ..vocab import CPU_MAX_WORLD, DEFAULT_CPU_MAX_SIZE, DEFAULT_GPU_MAX_SIZE
from .markers import MarkerError, marks_of

if TYPE_CHECKING:
    from ..env.hardware import DeviceInfo
    from ..env.launch import Launch

__all__ = ["Devices", "check_requirements", "xdist_refusal"]


def xdist_refusal(kind: str, worker: Optional[str], allowed: bool) -> Optional[str]:
    """Why GPU measurements are refused in this process, or None when they may run.

    Under pytest-xdist every worker (``worker``: its id, e.g. ``gw0``) would start its own copies and
    rank pools on the same GPUs, and the workers would measure each other's traffic.
    """
    if kind != "gpu" or not worker or allowed:
        return None
    return (
        f"gpucomm: refusing to measure GPUs in pytest-xdist worker {worker}: each worker would run its own "
        "copies and rank pools on the same GPUs, so they would measure each other's traffic and every figure "
        "and verdict would be wrong. Run the GPU suites without -n, or pass --gpucomm-allow-xdist "
        "(GPUCOMM_ALLOW_XDIST=1) if each worker sees GPUs of its own (CUDA_VISIBLE_DEVICES per worker)."
    )


class Devices:
    """The devices measured on and the worlds of ranks over them.

    Of the session's settings: ``device`` (--gpucomm-device), ``env_names`` (--gpucomm-env, recorded in the
    fingerprint), ``max_size`` (--gpucomm-max-size; None: the default for the device kind) and ``allow_xdist``
    (--gpucomm-allow-xdist).  ``launch`` is this rank's place in a launched job (None with the rank pool):
    there the worlds are the job's.  ``worker`` is the pytest-xdist worker's id in a worker (None elsewhere):
    GPUs are not measured there unless allowed."""

    def __init__(self, device: str, env_names: tuple[str, ...] = (), max_size: Optional[int] = None,
                 allow_xdist: bool = False, launch: Optional["Launch"] = None, worker: Optional[str] = None) -> None:
        self._device = device
        self._env_names = env_names
        self._max_size = max_size
        self._allow_xdist = allow_xdist
        self.launch = launch
        self.worker = worker
        self._info: Optional["DeviceInfo"] = None
        self._fingerprint: Optional[dict[str, object]] = None

    @property
    def detected(self) -> bool:
        """Whether the hardware has been detected (by a test that used gpucomm)."""
        return self._info is not None

    @property
    def info(self) -> "DeviceInfo":
        if self._info is None:
            from ..env.hardware import CpuDevicesError, detect

            try:
                self._info = detect(self._device)
            except (RuntimeError, CpuDevicesError) as e:
                raise pytest.UsageError(str(e)) from None
        return self._info

    def check_gpu(self, value: str, origin: str) -> None:
        """With ``--gpucomm-device=gpu`` (``value`` as given, from ``origin``): detect the devices now, at the
        start, so that a machine whose torch sees no GPU stops with one line (exit status 4) before collection,
        where the same error would be a collection error with its traceback."""
        if self._device != "gpu" or self._info is not None:
            return
        from ..env.hardware import CpuDevicesError, detect

        try:
            self._info = detect("gpu")
        except CpuDevicesError as e:
            raise pytest.UsageError(str(e)) from None
        except RuntimeError:
            import torch

            cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
            build = f" (CUDA {cuda})" if cuda else f" (HIP {hip})" if hip else ""  # a CPU build says +cpu
            problem = (f"invalid --gpucomm-device {value!r} (from {origin}): torch {torch.__version__}{build} sees no "
                       f"GPU\n  install a torch built for your GPU, or measure the CPU variants with "
                       "--gpucomm-device=cpu")
        else:
            return
        raise pytest.UsageError(problem)  # outside the except block: no chained traceback

    @property
    def fingerprint(self) -> dict[str, object]:
        """The run's fingerprint: read from the hardware at first use, unless given (a pytest-xdist controller
        takes its workers'; a launched job across nodes adds every node's)."""
        if self._fingerprint is None:
            from ..env.hardware import fingerprint

            self._fingerprint = fingerprint(self.info, self._env_names)
        return self._fingerprint

    @fingerprint.setter
    def fingerprint(self, value: dict[str, object]) -> None:
        self._fingerprint = value

    @property
    def max_size(self) -> int:
        if self._max_size is not None:
            return self._max_size
        return DEFAULT_GPU_MAX_SIZE if self.info.kind == "gpu" else DEFAULT_CPU_MAX_SIZE

    def names(self) -> list[str]:
        """The devices measured on: ["cuda:0", "cuda:1", ...], or the logical host devices ["cpu:0", ...]."""
        return self.info.device_names()

    def refusal(self) -> Optional[str]:
        """Why this process may not measure (GPUs under pytest-xdist), or None."""
        return xdist_refusal(self.info.kind, self.worker, self._allow_xdist)

    def too_few(self, needed: int) -> str:
        info = self.info
        if info.kind == "gpu":
            return f"needs {needed} GPUs, found {info.count}"
        return f"needs {needed} devices, found {info.count} logical host devices (no GPU: CPU variant)"

    # -- worlds of ranks ------------------------------------------------------------------------------
    def max_world(self) -> int:
        """The largest process group: one rank per GPU, or on CPU up to CPU_MAX_WORLD gloo ranks (more where
        GPUCOMM_CPU_DEVICES asks for more logical devices: one rank each); in launched mode the job's world."""
        if self.launch is not None:
            return self.launch.world_size
        return self.info.count if self.info.kind == "gpu" else max(CPU_MAX_WORLD, self.info.count)

    def default_world(self) -> int:
        return self.launch.world_size if self.launch is not None else self.info.count

    def world_problem(self, world: int) -> Optional[str]:
        """Why a process group of ``world`` ranks cannot be had in this session (a skip reason), or None."""
        if self.launch is not None:
            if world == self.launch.world_size:
                return None
            return (f"needs a world of {world} ranks; this {self.launch.launcher} job has {self.launch.world_size} "
                    "(launched mode runs tests over the job's whole world)")
        return self.world_skip_reason(world) if world > self.max_world() else None

    def one_rank_reason(self) -> str:
        """Why the default world of one rank is skipped (the ``process_group`` fixture)."""
        if self.launch is not None:
            found = f"this {self.launch.launcher} job has 1 rank"
        elif self.info.kind == "gpu":
            found = f"found {self.info.count} GPU"
        else:
            found = f"found {self.info.count} logical host device"
        return (f"needs a world of 2 ranks or more: a collective of one rank moves nothing between devices "
                f"(busbw 0); {found} (@world(1) asks for one rank)")

    def world_skip_reason(self, world: int) -> str:
        if self.info.kind == "gpu":
            return f"needs a world of {world} ranks (one per GPU), found {self.info.count} GPUs"
        return f"needs a world of {world} ranks, at most {self.max_world()} gloo ranks run on CPU"


def check_requirements(item: pytest.Item, devices: Devices) -> None:
    """Before any fixture of a gpucomm test runs: its markers (read once, kept in item.stash) fail it when
    wrong; a process that may not measure fails it; too few devices, or a world the session cannot have,
    skip it with the reason."""
    try:
        marks = marks_of(item)
    except MarkerError as e:
        problem = str(e)
    else:
        problem = ""
    if problem:
        pytest.fail(problem, pytrace=False)  # outside the except block: no chained traceback
    refusal = devices.refusal()
    if refusal:
        pytest.fail(refusal, pytrace=False)
    if marks.gpus is not None and marks.gpus > devices.info.count:
        pytest.skip(devices.too_few(marks.gpus))
    if marks.world is not None and "process_group" in getattr(item, "fixturenames", ()):
        unavailable = devices.world_problem(marks.world)
        if unavailable:
            pytest.skip(unavailable)
