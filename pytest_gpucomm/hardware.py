"""Hardware discovery: which devices to measure on, and the environment fingerprint of a run.

torch is imported inside the functions, never at module import, so that loading the plugin stays cheap
and touches no GPU until a gpucomm fixture or marker is used.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .vocab import CPU_LOGICAL_DEVICES

__all__ = [
    "DeviceInfo",
    "detect",
    "fingerprint",
    "CPU_LOGICAL_DEVICES",
    "COMM_ENV_PREFIXES",
]


#: Environment variables recorded in the fingerprint: everything that steers the communication stack.
COMM_ENV_PREFIXES = (
    "NCCL_",
    "RCCL_",
    "TORCH_NCCL_",
    "HSA_",
    "HIP_",
    "ROCR_",
    "GPU_",
    "CUDA_",
    "NVSHMEM_",
    "TORCH_SYMM_MEM_",
    "UCX_",
    "FI_",
    "GLOO_",
    "OMP_NUM_THREADS",
)


@dataclass
class DeviceInfo:
    """What the session measures on."""

    kind: str  # "gpu" or "cpu"
    count: int  # GPUs visible, or CPU_LOGICAL_DEVICES on CPU
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
            f"no GPU used: CPU {self.model}, {self.cpu_cores} cores; {CPU_LOGICAL_DEVICES} logical host devices; "
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


def _amd_driver() -> str:
    out = _run(["rocm-smi", "--showdriverversion"])
    m = re.search(r"Driver version:\s*(\S+)", out)
    if m:
        return m.group(1)
    try:
        with open("/sys/module/amdgpu/version", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


@lru_cache(maxsize=4)
def detect(requested: str = "auto") -> DeviceInfo:
    """Find the devices to measure on.

    ``requested`` is "auto" (GPU when one is visible, else CPU), "gpu" (error when none) or "cpu".
    """
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
            count=CPU_LOGICAL_DEVICES,
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


def topology(info: DeviceInfo) -> dict[str, str]:
    """Link type between each pair of GPUs ("0-1": "NV18", "PIX", "XGMI"...), from the vendor tool."""
    if info.kind != "gpu" or info.count < 2:
        return {}
    links: dict[str, str] = {}
    if info.vendor == "NVIDIA":
        out = _run(["nvidia-smi", "topo", "-m"])
        rows = [ln.split() for ln in out.splitlines() if re.match(r"^\s*GPU\d+\s", ln)]
        for row in rows:
            i = int(row[0][3:])
            for j in range(info.count):
                if j != i and 1 + j < len(row):
                    links[f"{min(i, j)}-{max(i, j)}"] = row[1 + j]
    else:
        out = _run(["rocm-smi", "--showtopotype"])
        for m in re.finditer(r"GPU(\d+)\s+GPU(\d+)\s+(\S+)", out):
            i, j = int(m.group(1)), int(m.group(2))
            if i != j:
                links[f"{min(i, j)}-{max(i, j)}"] = m.group(3)
        if not links:
            for line in out.splitlines():
                cells = line.split()
                if cells and re.fullmatch(r"GPU\d+", cells[0]):
                    i = int(cells[0][3:])
                    for j, c in enumerate(cells[1 : 1 + info.count]):
                        if j != i:
                            links[f"{min(i, j)}-{max(i, j)}"] = c
    return links


def comm_environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(COMM_ENV_PREFIXES)}


def fingerprint(info: DeviceInfo) -> dict[str, Any]:
    """The environment of a run, recorded with every result and compared with the baseline's."""
    fp: dict[str, Any] = {
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
        "env": comm_environment(),
    }
    if info.kind == "gpu":
        fp["memory_gib"] = round(info.memory_gib, 1)
        fp["peer_access"] = dict(info.peer_access)
        fp["topology"] = topology(info)
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
    return lines


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
