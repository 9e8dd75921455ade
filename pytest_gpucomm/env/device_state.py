"""What changed in the GPUs and their links since the baseline, said per device, and which cases it can slow.

The fingerprint diff (:mod:`.fingerprint`) lists every leaf that changed; a verdict needs less and more: only
the changes that can slow *its* case, each said as a person would ("cuda:0 PCIe link at Gen4 x8 (baseline:
Gen5 x16)").  :func:`device_changes` compares the vendor readings of two fingerprints (``nvidia``:
:mod:`.nvidia`; ``amd``: :mod:`.amd`) GPU by GPU, and :func:`affects` says whether a change can touch a case:

* ``pcie``: the PCIe link of a GPU, and the CPUs it is near: the host<->device copies of that GPU;
* ``links``: its NVLinks or xGMI links: the copies between GPUs that involve it, and every collective;
* ``gpu``: the GPU itself (VBIOS, ECC, MIG, compute and persistence modes, the power limit, the clocks): every
  case that uses it, and every collective.

Collectives name their ranks, not their devices, so a change of any GPU counts for them.  :func:`link_findings`
says, whatever the baseline, what is wrong with the links of one fingerprint (a link down, a PCIe link narrower
than it can be, pending remaps).  Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

__all__ = ["DeviceChange", "device_changes", "affects", "link_findings", "pcie_under_load"]


@dataclass(frozen=True)
class DeviceChange:
    """One change of one device: its device name, its scope (``pcie``, ``links``, ``gpu``) and the phrase."""

    device: str
    scope: str
    text: str


def _gen_width(p: object) -> Optional[str]:
    if not isinstance(p, Mapping) or p.get("gen") is None and p.get("width") is None:
        return None
    return f"Gen{p.get('gen', '?')} x{p.get('width', '?')}"


def _pcie_key(g: Mapping[str, Any]) -> Optional[str]:
    """What of a PCIe link two readings are compared by: its width now and what it can do, not its generation
    now, which an idle GPU trains down to save power (a reading at a session's start is taken idle; the
    generation under load is the measurement's own, :func:`pcie_under_load`)."""
    p = g.get("pcie")
    if not isinstance(p, Mapping) or all(p.get(k) is None for k in ("width", "gen_max", "width_max")):
        return None
    return f"x{p.get('width')} of Gen{p.get('gen_max')} x{p.get('width_max')}"


def _links_up(links: object) -> Optional[str]:
    if not isinstance(links, Mapping) or not links:
        return None
    up = sum(1 for v in links.values() if isinstance(v, Mapping) and v.get("up"))
    return f"{up} of {len(links)} up"


def _clocks(c: object) -> Optional[str]:
    if not isinstance(c, Mapping) or c.get("sm") is None and c.get("mem") is None:
        return None
    return f"SM {c.get('sm', '?')} MHz, memory {c.get('mem', '?')} MHz"


def _watts(w: Optional[float]) -> Optional[str]:
    return None if w is None else f"{w:g} W"


def _plain(v: object) -> Optional[str]:
    return None if v is None else str(v)


#: (scope, how the phrase starts, how a GPU's reading gives the value): NVIDIA's reading; the PCIe link is said
#: as it was read and compared by :func:`_pcie_key` (see :data:`_KEYS`)
_NVIDIA: Sequence[tuple[str, str, Callable[[Mapping[str, Any]], Optional[str]]]] = (
    ("pcie", "PCIe link at", lambda g: _gen_width(g.get("pcie"))),
    ("pcie", "CPU affinity", lambda g: _plain(g.get("cpu_affinity"))),
    ("pcie", "NUMA node", lambda g: _plain(g.get("numa_node"))),
    ("links", "NVLinks", lambda g: _links_up(g.get("nvlink"))),
    ("gpu", "VBIOS", lambda g: _plain(g.get("vbios"))),
    ("gpu", "ECC", lambda g: _plain((g.get("ecc") or {}).get("current"))),
    ("gpu", "MIG", lambda g: _plain(g.get("mig"))),
    ("gpu", "compute mode", lambda g: _plain(g.get("compute_mode"))),
    ("gpu", "persistence mode", lambda g: _plain(g.get("persistence"))),
    ("gpu", "power limit", lambda g: _watts(g.get("power_limit_w"))),
    ("gpu", "application clocks", lambda g: _clocks(g.get("application_clocks_mhz"))),
    ("gpu", "row remaps pending", lambda g: _plain((g.get("row_remap") or {}).get("pending"))),
)


def _amd_pcie(g: Mapping[str, Any]) -> Optional[str]:
    p = g.get("pcie")
    if not isinstance(p, Mapping) or p.get("width") is None and p.get("speed_gts") is None:
        return None
    return f"x{p.get('width', '?')} at {p.get('speed_gts', '?')} GT/s"


def _amd_xgmi(g: Mapping[str, Any]) -> Optional[str]:
    status = (g.get("xgmi") or {}).get("status")
    if not isinstance(status, list) or not status:
        return None
    return f"{sum(1 for s in status if s == 'U')} of {len(status)} up"


#: AMD's reading (env/amd.py's shape)
_AMD: Sequence[tuple[str, str, Callable[[Mapping[str, Any]], Optional[str]]]] = (
    ("pcie", "PCIe link", _amd_pcie),
    ("links", "xGMI links", _amd_xgmi),
    ("gpu", "VBIOS", lambda g: _plain(g.get("vbios"))),
)


def _gpus(fp: Optional[Mapping[str, Any]], vendor: str) -> dict[str, Mapping[str, Any]]:
    reading = (fp or {}).get(vendor)
    gpus = reading.get("gpus") if isinstance(reading, Mapping) else None
    out: dict[str, Mapping[str, Any]] = {}
    for i, g in enumerate(gpus if isinstance(gpus, list) else []):
        if isinstance(g, Mapping):
            out[str(g.get("device") or f"cuda:{g.get('index', i)}")] = g
    return out


def device_changes(baseline: Optional[Mapping[str, Any]], now: Optional[Mapping[str, Any]]) -> list[DeviceChange]:
    """Each field of each GPU that differs between the baseline's fingerprint and today's, as a phrase:
    ``cuda:0 PCIe link at Gen4 x8 (baseline: Gen5 x16)``.  A GPU or a field that one side did not read is no
    change (an older baseline has no ``nvidia`` part)."""
    out: list[DeviceChange] = []
    for vendor, fields in (("nvidia", _NVIDIA), ("amd", _AMD)):
        old, new = _gpus(baseline, vendor), _gpus(now, vendor)
        for device in sorted(set(old) & set(new)):
            for scope, what, value in fields:
                key = _KEYS.get(what, value)
                a, b = value(old[device]), value(new[device])
                if a is not None and b is not None and key(old[device]) != key(new[device]):
                    out.append(DeviceChange(device, scope, f"{device} {what} {b} (baseline: {a})"))
    return out


#: how a field is compared where that is not by the phrase's value
_KEYS: dict[str, Callable[[Mapping[str, Any]], Optional[str]]] = {"PCIe link at": _pcie_key}


def pcie_under_load(fp: Optional[Mapping[str, Any]], device: str, read: Optional[str]) -> Optional[str]:
    """A host<->device case's likely cause from its own reading of the link under load (``read``, "Gen4 x16":
    ``ClockSummary.pcie``): ``cuda:0 PCIe link at Gen4 x16 while measured (capable of Gen5 x16)`` when the link
    ran slower or narrower than the GPU's reading in ``fp`` says it can; None otherwise."""
    top = _pcie_max(fp, device)
    if not read or top is None:
        return None
    try:
        gen, width = (int(x) for x in read.replace("Gen", "").replace("x", "").split())
    except ValueError:
        return None
    if gen < top[0] or width < top[1]:
        return f"{device} PCIe link at {read} while measured (capable of Gen{top[0]} x{top[1]})"
    return None


def _pcie_max(fp: Optional[Mapping[str, Any]], device: str) -> Optional[tuple[int, int]]:
    """(generation, width) the GPU's link can run at in its slot: NVML's ``gen_max``/``width_max`` (the device
    and the system together); None where the fingerprint does not say.  Not on AMD: AMD SMI's
    ``max_pcie_speed``/``max_pcie_width`` are the GPU's own (sysfs ``max_link_speed``), so a Gen5 GPU in a Gen4
    slot would be named below what it can do on every host copy."""
    g = _gpus(fp, "nvidia").get(device)
    p = g.get("pcie") if g else None
    if not isinstance(p, Mapping):
        return None
    try:
        gen, width = p.get("gen_max"), p.get("width_max")
        return (int(gen), int(width)) if gen is not None and width is not None else None
    except (TypeError, ValueError):
        return None


def affects(change: DeviceChange, op: str, devices: Sequence[str], kind: str) -> bool:
    """Whether ``change`` can slow a case of ``op`` on ``devices`` (a measurement's op, devices and kind)."""
    if kind == "collective":
        return change.scope in ("links", "gpu")
    if change.device not in devices:
        return False
    host = any(not str(d).startswith(("cuda", "gpu")) for d in devices) or op in ("h2d", "d2h")
    if change.scope == "pcie":
        return host
    if change.scope == "links":
        return not host
    return True


def link_findings(fp: Optional[Mapping[str, Any]], gpu_count: Optional[int] = None) -> list[str]:
    """What is wrong with the GPUs' links and memory in the fingerprint ``fp`` (its ``nvidia`` or ``amd``
    reading), whatever the baseline: NVIDIA's from :func:`pytest_gpucomm.env.nvidia.link_findings`; on AMD an
    xGMI link down (``D``) on a machine of several GPUs and a PCIe link narrower than it can be."""
    from .nvidia import link_findings as nvidia_findings

    out: list[str] = []
    nvidia = (fp or {}).get("nvidia")
    if isinstance(nvidia, Mapping):
        out += nvidia_findings(nvidia, gpu_count=gpu_count)
    gpus = _gpus(fp, "amd")
    several = (gpu_count if gpu_count is not None else len(gpus)) > 1
    for device, g in gpus.items():
        status = (g.get("xgmi") or {}).get("status") or []
        down = [str(i) for i, v in enumerate(status) if v == "D"]
        if down and several:
            out.append(f"{device}: xGMI link {', '.join(down)} down ({len(status) - len(down)} of {len(status)} up)")
        p = g.get("pcie") or {}
        if isinstance(p.get("width"), int) and isinstance(p.get("max_width"), int) and p["width"] < p["max_width"]:
            out.append(f"{device}: PCIe link at x{p['width']} (capable of x{p['max_width']})")
    return out
