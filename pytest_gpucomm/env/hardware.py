"""Hardware discovery: which devices to measure on, and the environment fingerprint of a run.

On AMD GPUs the driver version, the link types and the fingerprint's ``amd`` part come from AMD's management
library (:mod:`pytest_gpucomm.env.amd`: the ``amdsmi`` package, else ``amd-smi``, else ``rocm-smi``), read once.

torch is imported inside the functions, never at module import, so that loading the plugin stays cheap
and touches no GPU until a gpucomm fixture or marker is used.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional, Sequence

from ..vocab import CPU_DEVICES_ENV, CPU_LOGICAL_DEVICES, MAX_CPU_DEVICES, MIN_CPU_DEVICES

__all__ = [
    "DeviceInfo",
    "CpuDevicesError",
    "cpu_logical_devices",
    "detect",
    "fingerprint",
    "parse_nvidia_topo",
    "parse_rocm_topo",
]


@dataclass
class DeviceInfo:
    """What the session measures on."""

    kind: str  # "gpu" or "cpu"
    count: int  # GPUs visible, or the logical host devices on CPU (cpu_logical_devices())
    vendor: str  # "NVIDIA", "AMD", or the CPU vendor
    model: str  # "NVIDIA H200", "AMD Instinct MI300X", CPU model name
    runtime: str  # "CUDA 13.0", "ROCm/HIP 6.2", "none"
    driver: str
    torch: str
    comm_library: str  # "NCCL 2.27.3", "RCCL ...", "gloo"
    memory_gib: float = 0.0
    cpu_cores: int = 0
    peer_access: dict[str, bool] = field(default_factory=dict)  # "0->1": True

    @property
    def backend(self) -> str:
        return "nccl" if self.kind == "gpu" else "gloo"

    @property
    def torch_device_type(self) -> str:
        return "cuda" if self.kind == "gpu" else "cpu"

    def device_names(self) -> list[str]:
        t = self.torch_device_type
        return [f"{t}:{i}" for i in range(self.count)]

    def headline(self) -> str:
        if self.kind == "gpu":
            return (
                f"{self.count} x {self.model} ({self.vendor}), {self.memory_gib:.0f} GiB each; driver {self.driver}; "
                f"{self.runtime}; {self.comm_library}; torch {self.torch}"
            )
        return (
            f"no GPU used: CPU {self.model}, {self.cpu_cores} cores; {self.count} logical host devices; "
            f"gloo; torch {self.torch}"
        )


def _run(cmd: list[str], timeout: float = 10.0) -> str:
    if not shutil.which(cmd[0]):
        return ""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout if out.returncode == 0 else ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def gpu_available() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


def _nvidia_driver() -> str:
    try:
        import pynvml  # nvidia-ml-py, where installed

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out.strip() else "unknown"


def torch_bus_ids() -> Optional[list[str]]:
    """The PCI bus ids of the GPUs torch sees, in torch's order (``00000000:18:00.0``, NVML's form), or None
    where torch does not give them: the management libraries number GPUs their own way."""
    import torch

    ids = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        bus, dev = getattr(p, "pci_bus_id", None), getattr(p, "pci_device_id", None)
        if bus is None or dev is None:
            return None
        ids.append(f"{getattr(p, 'pci_domain_id', 0) or 0:08x}:{bus:02x}:{dev:02x}.0")
    return ids


@lru_cache(maxsize=1)
def nvidia_reading() -> dict[str, object]:
    """This machine's NVIDIA reading (:func:`pytest_gpucomm.env.nvidia.read_nvidia`: NVML, else
    ``nvidia-smi -q -x``) of the GPUs torch sees, read once per process: the fingerprint keeps all of it."""
    from .nvidia import read_nvidia

    return read_nvidia(bus_ids=torch_bus_ids())


@lru_cache(maxsize=1)
def amd_reading() -> dict[str, object]:
    """This machine's AMD management reading (:func:`pytest_gpucomm.env.amd.read_amd`: amdsmi, else amd-smi, else
    rocm-smi), read once per process: detection takes its driver version, the fingerprint all of it."""
    from .amd import read_amd

    return read_amd()


def _amd_driver() -> str:
    driver = amd_reading().get("driver")
    if driver:
        return str(driver)
    try:
        with open("/sys/module/amdgpu/version", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


class CpuDevicesError(ValueError):
    """A bad GPUCOMM_CPU_DEVICES value; the message names it and the accepted range."""


def cpu_logical_devices() -> int:
    """How many logical host devices the CPU variants use: ``GPUCOMM_CPU_DEVICES`` (a whole number from
    MIN_CPU_DEVICES to MAX_CPU_DEVICES), else ``vocab.CPU_LOGICAL_DEVICES``.  CpuDevicesError otherwise."""
    raw = os.environ.get(CPU_DEVICES_ENV)
    if raw is None:
        return CPU_LOGICAL_DEVICES
    try:
        n = int(raw.strip())
    except ValueError:
        n = 0
    if not MIN_CPU_DEVICES <= n <= MAX_CPU_DEVICES:
        raise CpuDevicesError(
            f"invalid {CPU_DEVICES_ENV} {raw!r} (from the {CPU_DEVICES_ENV} environment variable): expected the "
            f"number of logical host devices of the CPU variants, a whole number from {MIN_CPU_DEVICES} to "
            f"{MAX_CPU_DEVICES} (unset: {CPU_LOGICAL_DEVICES})"
        )
    return n


def detect(requested: str = "auto") -> DeviceInfo:
    """Find the devices to measure on.

    ``requested`` is "auto" (GPU when one is visible, else CPU), "gpu" (error when none) or "cpu".  On CPU
    the logical device count is ``cpu_logical_devices()`` (CpuDevicesError for a bad GPUCOMM_CPU_DEVICES).
    """
    return _detect(requested, cpu_logical_devices())


@lru_cache(maxsize=4)
def _detect(requested: str, cpu_devices: int) -> DeviceInfo:
    import torch

    tv = str(torch.__version__)
    if requested not in ("auto", "gpu", "cpu"):
        raise ValueError(f"unknown device {requested!r}: expected auto, gpu or cpu")
    use_gpu = requested == "gpu" or (requested == "auto" and gpu_available())
    if use_gpu and not gpu_available():
        raise RuntimeError(
            "--gpucomm-device=gpu was asked for, but torch sees no GPU "
            f"(torch {tv}, CUDA {torch.version.cuda}, HIP {getattr(torch.version, 'hip', None)})"
        )
    if not use_gpu:
        return DeviceInfo(
            kind="cpu",
            count=cpu_devices,
            vendor=platform.machine(),
            model=cpu_model(),
            runtime="none",
            driver="none",
            torch=tv,
            comm_library="gloo",
            cpu_cores=os.cpu_count() or 1,
        )
    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    hip = getattr(torch.version, "hip", None)
    vendor = "AMD" if hip else "NVIDIA"
    model = props.name
    if hip:
        runtime = f"ROCm/HIP {hip}"
        driver = _amd_driver()
    else:
        runtime = f"CUDA {torch.version.cuda}"
        driver = _nvidia_driver()
    try:
        v = torch.cuda.nccl.version()
        ver = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        comm = f"{'RCCL' if hip else 'NCCL'} {ver}"
    except Exception:
        comm = "RCCL" if hip else "NCCL (version unknown)"
    peer: dict[str, bool] = {}
    for i in range(count):
        for j in range(count):
            if i != j:
                peer[f"{i}->{j}"] = bool(torch.cuda.can_device_access_peer(i, j))
    return DeviceInfo(
        kind="gpu",
        count=count,
        vendor=vendor,
        model=model,
        runtime=runtime,
        driver=driver,
        torch=tv,
        comm_library=comm,
        memory_gib=props.total_memory / 2**30,
        cpu_cores=os.cpu_count() or 1,
        peer_access=peer,
    )


_GPU_TOKEN = re.compile(r"GPU(\d+)$")
_DEVICE_COLUMN = re.compile(r"(GPU|NIC)\d+$|mlx\d+_\d+$")


def _pair(i: int, j: int) -> str:
    return f"{min(i, j)}-{max(i, j)}"


def parse_nvidia_topo(text: str) -> dict[str, str]:
    """Link type between each pair of GPUs from ``nvidia-smi topo -m``: {"0-1": "NV18", ...}.

    The matrix has a header of device columns (GPU0.., then NICs) followed by affinity columns, and one
    row per device; a GPU row's first cells are its links to the header's devices ("X" to itself).  The
    legend and the NIC rows are ignored.  Text that holds no such matrix gives {}.
    """
    columns: list[str] = []
    links: dict[str, str] = {}
    for line in text.splitlines():
        cells = re.sub(r"\x1b\[[0-9;]*m", "", line).split()
        if not cells:
            continue
        if not columns:
            # the header names the device columns; a device row has "X" (itself) among its first cells
            if _GPU_TOKEN.match(cells[0]) and "X" not in cells:
                columns = list(itertools.takewhile(_DEVICE_COLUMN.match, cells))
            continue
        row = _GPU_TOKEN.match(cells[0])
        if row is None:
            continue
        i = int(row.group(1))
        for col, value in zip(columns, cells[1:]):
            g = _GPU_TOKEN.match(col)
            if g is not None and int(g.group(1)) != i and value != "X":
                links[_pair(i, int(g.group(1)))] = value
    return links


def parse_rocm_topo(text: str) -> dict[str, str]:
    """Link type between each pair of GPUs from ``rocm-smi --showtopotype``: {"0-1": "XGMI", ...}.

    rocm-smi prints a matrix: a header row of GPU columns, then one row per GPU with "0" on the diagonal
    and PCIE, XGMI (or XXXX, unknown) elsewhere, between lines of "=" banners.  Text without it gives {}.
    """
    columns: list[int] = []
    links: dict[str, str] = {}
    for line in text.splitlines():
        cells = line.split()
        if not cells or cells[0].startswith("="):
            continue
        if all(_GPU_TOKEN.match(c) for c in cells):  # the header: GPU0 GPU1 ...
            columns = [int(c[3:]) for c in cells]
            continue
        row = _GPU_TOKEN.match(cells[0])
        if row is None or not columns:
            continue
        i = int(row.group(1))
        for j, value in zip(columns, cells[1:]):
            if j != i:
                links[_pair(i, j)] = value
    return links


def topology(info: DeviceInfo) -> dict[str, str]:
    """Link type between each pair of GPUs ("0-1": "NV18", "PIX", "XGMI"...), from the vendor tool: nvidia-smi,
    or on AMD the management reading (:func:`amd_reading`)."""
    if info.kind != "gpu" or info.count < 2:
        return {}
    if info.vendor == "NVIDIA":
        from_nvml = nvidia_reading().get("topology")
        if isinstance(from_nvml, dict):
            return dict(from_nvml)
        return parse_nvidia_topo(_run(["nvidia-smi", "topo", "-m"]))  # the fallback where NVML is missing
    from .amd import pair_types

    return pair_types(amd_reading())


def comm_environment(extra: Sequence[str] = ()) -> dict[str, str]:
    """The environment variables a run records (:func:`pytest_gpucomm.env.variables.recorded_environment`):
    those that steer communication and the host threads, the names or patterns in ``extra``, never a secret."""
    from .variables import recorded_environment

    return recorded_environment(os.environ, extra)


def fingerprint(info: DeviceInfo, env_names: Sequence[str] = ()) -> dict[str, object]:
    """The environment of a run, recorded with every result and compared with the baseline's; ``env_names``
    are the variables the user adds to the recorded ones (``--gpucomm-env``)."""
    fp: dict[str, object] = {
        "kind": info.kind,
        "vendor": info.vendor,
        "model": info.model,
        "count": info.count,
        "driver": info.driver,
        "runtime": info.runtime,
        "comm_library": info.comm_library,
        "torch": info.torch,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count() or 1,
        "host": socket.gethostname(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "env": comm_environment(env_names),
    }
    if info.kind == "gpu":
        fp["memory_gib"] = round(info.memory_gib, 1)
        fp["peer_access"] = dict(info.peer_access)
        fp["topology"] = topology(info)
        if info.vendor == "NVIDIA":
            # per GPU: PCIe and NVLink state, VBIOS, ECC, remaps, modes, power limit, clocks, NUMA and CPU affinity
            fp["nvidia"] = json.loads(json.dumps(nvidia_reading(), default=str))
        if info.vendor == "AMD":
            # driver, ROCm, xGMI links and their state, PCIe, firmware, clocks: see pytest_gpucomm.env.amd
            fp["amd"] = json.loads(json.dumps(amd_reading(), default=str))
    return fp


def device_summary_lines(info: DeviceInfo) -> list[str]:
    lines = [f"gpucomm hardware: {info.headline()}"]
    if info.kind == "gpu" and info.peer_access:
        off = [k for k, v in info.peer_access.items() if not v]
        if off:
            lines.append(
                f"gpucomm WARNING: peer access is OFF for {', '.join(off)}: copies between these GPUs are "
                "staged through host memory (about a tenth of the link speed)"
            )
        else:
            lines.append("gpucomm peer access: on for every pair")
    if info.kind == "gpu":
        from .device_state import link_findings

        reading = {"nvidia": nvidia_reading()} if info.vendor == "NVIDIA" else {"amd": amd_reading()}
        lines += [f"gpucomm WARNING: {f}" for f in link_findings(reading, info.count)]
    return lines


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


#: overrides the session label of a recorded run (e.g. a CI job that records on a machine that never reboots)
SESSION_ENV = "GPUCOMM_BASELINE_SESSION"


def session_label(date_iso: str | None = None) -> str:
    """The occasion a baseline run is recorded on: this host, this boot (Linux boot id) and this UTC day,
    e.g. ``vm-3f2a9c1e-2026-12-01``; runs of one label count as one session's evidence in the gate.
    ``GPUCOMM_BASELINE_SESSION`` overrides it."""
    override = os.environ.get(SESSION_ENV, "").strip()
    if override:
        return override
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip().replace("-", "")[:8] or "noboot"
    except OSError:
        boot = "noboot"
    day = (date_iso or now_iso())[:10]
    return f"{socket.gethostname()}-{boot}-{day}"
