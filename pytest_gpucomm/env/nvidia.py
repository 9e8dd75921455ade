"""What the fingerprint records of an NVIDIA machine's GPUs and links, read through NVML.

Two sources, tried in this order; the first that answers is used:

1. NVML through the ``pynvml`` module of the ``nvidia-ml-py`` package (NVIDIA's own bindings), called as the
   NVML API reference documents it: ``nvmlInit``, then per GPU ``nvmlDeviceGetHandleByPciBusId`` (the GPUs
   torch sees, in torch's order) or ``nvmlDeviceGetHandleByIndex``, and the getters named in :func:`_gpu`;
   ``nvmlShutdown`` at the end, whatever happened;
2. ``nvidia-smi -q -x`` (its XML report), for the fields it has, where the module is not installed.

Per GPU: the PCIe link's generation and width now and at most, every NVLink up or down with its version and
error counters, the VBIOS, the ECC mode now and pending, pending page retirements and row remaps, the
persistence and compute modes, MIG, the power limit and its default, the application and maximum clocks,
and the NUMA node and CPU affinity.  A field the GPU does not have (NVLink on a PCIe card, page retirement
on a GPU that remaps rows) is left out without a note; any other failing call is a note.  Nothing here
raises.  The shape, whichever source gave it::

    {"source": "nvml", "sources": {"nvml": "used", "nvidia-smi": "not tried"},
     "driver": "580.159.04", "cuda_driver": "13.0", "nvml_library": "13.580.159.04",
     "gpus": [{"device": "cuda:0", "bus_id": "00000000:18:00.0", "name": "NVIDIA H200", "vbios": "96.00.A5.00.01",
               "pcie": {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16},
               "nvlink": {"0": {"up": true, "version": 4, "remote": "00000000:05:00.0", "remote_type": "switch",
                                "error_counts": {"replay": 0, ...}}, ...},
               "ecc": {"current": "on", "pending": "on"}, "row_remap": {"pending": false, "failed": false},
               "persistence": "on", "compute_mode": "default", "mig": "off",
               "power_limit_w": 700.0, "power_default_w": 700.0,
               "application_clocks_mhz": {"sm": 1980, "mem": 3201}, "max_clocks_mhz": {"sm": 1980, "mem": 3201},
               "numa_node": 0, "cpu_affinity": "0-15"}],
     "topology": {"0-1": "NV18"},  # None from nvidia-smi -q -x, which has no links: then `nvidia-smi topo -m` is read
     "notes": []}

Error counters accumulate from the driver's load: they are recorded under ``error_counts``, which
:data:`pytest_gpucomm.env.fingerprint.VOLATILE_KEYS` names, so a diff of two fingerprints does not report
them; :func:`link_findings` reports links down, PCIe links narrower or slower than they can be, pending
remaps and retirements, whatever the baseline.
"""

from __future__ import annotations

import importlib
import xml.etree.ElementTree as ET
from typing import Any, Callable, Mapping, Optional, Sequence

from .sources import Calls, Runner, SourceFailed, SourceUnavailable, first_answer, library_session, run_command

__all__ = ["SOURCES", "NVLINK_MAX", "read_nvidia", "from_nvml", "from_nvidia_smi", "cpu_list", "link_findings",
           "pcie_text"]

SOURCES = ("nvml", "nvidia-smi")
#: links asked for per GPU (NVML_NVLINK_MAX_LINKS is 18 on Hopper and Blackwell)
NVLINK_MAX = 18
_ERROR_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))
_COMPUTE_MODES = {0: "default", 1: "exclusive thread", 2: "prohibited", 3: "exclusive process"}
#: NVML's nvmlIntNvLinkDeviceType_t: what the far end of an NVLink is
_REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch"}
#: NVML's nvmlGpuTopologyLevel_t as nvidia-smi topo -m writes it
_TOPOLOGY_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _import_pynvml() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise SourceUnavailable(f"pynvml does not import ({e}): pip install nvidia-ml-py") from None


def _text(v: object) -> Any:
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def _on_off(v: Any) -> Optional[str]:
    return None if v is None else ("on" if int(v) else "off")


def cpu_list(words: Sequence[int], bits: int = 64) -> str:
    """A CPU affinity bitmask (NVML's words, lowest first) as a list of ranges: ``0-15,32-47``."""
    cpus = [w * bits + b for w, word in enumerate(words) for b in range(bits) if int(word) >> b & 1]
    ranges: list[str] = []
    for c in cpus:
        if ranges and int(ranges[-1].split("-")[-1]) == c - 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{c}"
        else:
            ranges.append(str(c))
    return ",".join(ranges)


def _quiet(nvml: Any) -> Callable[[BaseException], bool]:
    """NVML's "not supported" and "invalid argument" (a link number the GPU does not have): no note."""
    names = ("NVMLError_NotSupported", "NVMLError_InvalidArgument", "NVMLError_FunctionNotFound")
    kinds = tuple(k for k in (getattr(nvml, n, None) for n in names) if isinstance(k, type))
    return lambda e: isinstance(e, kinds) if kinds else False


def from_nvml(nvml: Any, bus_ids: Optional[Sequence[str]] = None) -> dict[str, object]:
    """Read the GPUs through the ``pynvml`` module ``nvml`` (the real one or a fake with its API).  ``bus_ids``:
    the PCI bus ids of the GPUs torch sees, in torch's order (``cuda:0`` first); None: NVML's order.
    SourceFailed when ``nvmlInit`` raises or finds no GPU; later failures are notes."""
    call = Calls(_quiet(nvml))
    with library_session(nvml.nvmlInit, nvml.nvmlShutdown, ("nvmlInit", "nvmlShutdown"), call):
        if bus_ids is None:
            count = call("nvmlDeviceGetCount", nvml.nvmlDeviceGetCount) or 0
            handles = [call(f"nvmlDeviceGetHandleByIndex({i})", nvml.nvmlDeviceGetHandleByIndex, i)
                       for i in range(count)]
        else:
            handles = [call(f"nvmlDeviceGetHandleByPciBusId({b})", nvml.nvmlDeviceGetHandleByPciBusId, b)
                       for b in bus_ids]
        if not any(h is not None for h in handles):
            raise SourceFailed("NVML found no GPU")
        cuda = call("nvmlSystemGetCudaDriverVersion", nvml.nvmlSystemGetCudaDriverVersion)
        reading = {
            "driver": _text(call("nvmlSystemGetDriverVersion", nvml.nvmlSystemGetDriverVersion)),
            "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
            "nvml_library": _text(call("nvmlSystemGetNVMLVersion", nvml.nvmlSystemGetNVMLVersion)),
            "gpus": [_gpu(nvml, h, i, call) for i, h in enumerate(handles) if h is not None],
        }
        reading["topology"] = _topology(nvml, [h for h in handles if h is not None], reading["gpus"], call)
    reading["notes"] = call.notes
    return reading


def _gpu(nvml: Any, h: Any, i: int, call: Calls) -> dict[str, object]:
    """One GPU's reading; ``i`` is its torch number."""
    def get(what: str, *args: Any) -> Any:
        fn = getattr(nvml, what, None)
        return None if fn is None else call(f"{what}(cuda:{i})", fn, h, *args)

    pci = get("nvmlDeviceGetPciInfo")
    g: dict[str, object] = {"device": f"cuda:{i}", "bus_id": _text(getattr(pci, "busId", None)),
                         "name": _text(get("nvmlDeviceGetName")), "vbios": _text(get("nvmlDeviceGetVbiosVersion"))}
    g["pcie"] = {"gen": get("nvmlDeviceGetCurrPcieLinkGeneration"), "width": get("nvmlDeviceGetCurrPcieLinkWidth"),
                 "gen_max": get("nvmlDeviceGetMaxPcieLinkGeneration"),
                 "width_max": get("nvmlDeviceGetMaxPcieLinkWidth")}
    links: dict[str, Any] = {}
    for link in range(NVLINK_MAX):
        state = get("nvmlDeviceGetNvLinkState", link)
        if state is None:
            continue
        counts = {name: get("nvmlDeviceGetNvLinkErrorCounter", link, c) for name, c in _ERROR_COUNTERS}
        remote = get("nvmlDeviceGetNvLinkRemotePciInfo", link) if state else None
        links[str(link)] = {"up": bool(state), "version": get("nvmlDeviceGetNvLinkVersion", link),
                            "remote": _text(getattr(remote, "busId", None)),
                            "remote_type": _REMOTE_TYPES.get(get("nvmlDeviceGetNvLinkRemoteDeviceType", link))
                            if state else None,
                            "error_counts": {k: v for k, v in counts.items() if v is not None}}
    g["nvlink"] = links
    ecc = get("nvmlDeviceGetEccMode")
    g["ecc"] = {"current": _on_off(ecc[0]), "pending": _on_off(ecc[1])} if ecc else None
    retired = get("nvmlDeviceGetRetiredPagesPendingStatus")
    g["retired_pages_pending"] = None if retired is None else bool(retired)
    remap = get("nvmlDeviceGetRemappedRows")
    g["row_remap"] = {"pending": bool(remap[2]), "failed": bool(remap[3])} if remap else None
    g["persistence"] = _on_off(get("nvmlDeviceGetPersistenceMode"))
    mode = get("nvmlDeviceGetComputeMode")
    g["compute_mode"] = _COMPUTE_MODES.get(mode, mode)
    mig = get("nvmlDeviceGetMigMode")
    g["mig"] = _on_off(mig[0]) if mig else None
    for key, what in (("power_limit_w", "nvmlDeviceGetPowerManagementLimit"),
                      ("power_default_w", "nvmlDeviceGetPowerManagementDefaultLimit")):
        mw = get(what)
        g[key] = None if mw is None else round(mw / 1000, 1)
    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    g["application_clocks_mhz"] = {"sm": get("nvmlDeviceGetApplicationsClock", sm),
                                   "mem": get("nvmlDeviceGetApplicationsClock", mem)}
    g["max_clocks_mhz"] = {"sm": get("nvmlDeviceGetMaxClockInfo", sm), "mem": get("nvmlDeviceGetMaxClockInfo", mem)}
    g["numa_node"] = get("nvmlDeviceGetNumaNodeId")
    words = get("nvmlDeviceGetCpuAffinity", 16)
    g["cpu_affinity"] = cpu_list(words) if words else None
    return g


def _topology(nvml: Any, handles: Sequence[Any], gpus: Sequence[Mapping[str, Any]], call: Calls) -> dict[str, str]:
    """The link between each pair of GPUs as ``nvidia-smi topo -m`` writes it, from NVML: ``NV<k>`` for k NVLinks
    between the two (direct, or both GPUs on NVSwitches: the fewer of their switch links), else the PCIe
    path's level (PIX, PXB, PHB, NODE, SYS) from ``nvmlDeviceGetTopologyCommonAncestor``."""
    def bus(b: Any) -> str:
        return str(b or "").lower()[-12:]

    out: dict[str, str] = {}
    for i in range(len(gpus)):
        for j in range(i + 1, len(gpus)):
            links_i = [v for v in (gpus[i].get("nvlink") or {}).values() if v.get("up")]
            links_j = [v for v in (gpus[j].get("nvlink") or {}).values() if v.get("up")]
            direct = sum(1 for v in links_i if v.get("remote_type") == "gpu" and bus(v.get("remote")) ==
                         bus(gpus[j].get("bus_id")))
            switched = min(sum(1 for v in links_i if v.get("remote_type") == "switch"),
                           sum(1 for v in links_j if v.get("remote_type") == "switch"))
            if direct or switched:
                out[f"{i}-{j}"] = f"NV{direct or switched}"
                continue
            ancestor = getattr(nvml, "nvmlDeviceGetTopologyCommonAncestor", None)
            level = None if ancestor is None else call(f"nvmlDeviceGetTopologyCommonAncestor(cuda:{i}, cuda:{j})",
                                                       ancestor, handles[i], handles[j])
            if level is not None:
                out[f"{i}-{j}"] = _TOPOLOGY_LEVELS.get(int(level), str(level))
    return out


# ----------------------------------------------------------------------------------------- nvidia-smi


def _xml_int(node: Optional[ET.Element], path: str) -> Optional[int]:
    text = node.findtext(path) if node is not None else None
    if not text:
        return None
    head = text.strip().split()[0].rstrip("x")
    try:
        return int(float(head))
    except ValueError:
        return None


def _xml_text(node: Optional[ET.Element], path: str) -> Optional[str]:
    text = node.findtext(path) if node is not None else None
    text = text.strip() if text else None
    return None if text in (None, "", "N/A", "[N/A]", "Not Supported", "[Not Supported]") else text


def _xml_mode(node: Optional[ET.Element], path: str) -> Optional[str]:
    text = _xml_text(node, path)
    return None if text is None else {"enabled": "on", "disabled": "off"}.get(text.lower(), text.lower())


def from_nvidia_smi(run: Runner, bus_ids: Optional[Sequence[str]] = None) -> dict[str, object]:
    """Read the GPUs from ``nvidia-smi -q -x``: every field above that its XML report has (no NVLink)."""
    try:
        status, out, err = run(["nvidia-smi", "-q", "-x"])
    except FileNotFoundError as e:
        raise SourceUnavailable(str(e)) from None
    if status != 0 or not out.strip():
        raise SourceFailed(f"nvidia-smi -q -x exited {status}: {' '.join(err.split())[:200]}")
    try:
        root = ET.fromstring(out)
    except ET.ParseError as e:
        raise SourceFailed(f"nvidia-smi -q -x: not XML ({e})") from None
    gpus = root.findall("gpu")
    if bus_ids is not None:
        by_bus = {(g.get("id") or "").lower()[-12:]: g for g in gpus}
        gpus = [by_bus[b.lower()[-12:]] for b in bus_ids if b.lower()[-12:] in by_bus]
    if not gpus:
        raise SourceFailed("nvidia-smi -q -x lists no GPU")
    return {"driver": _xml_text(root, "driver_version"), "cuda_driver": _xml_text(root, "cuda_version"),
            "nvml_library": None, "gpus": [_xml_gpu(g, i) for i, g in enumerate(gpus)], "topology": None,
            "notes": []}


def _xml_gpu(g: ET.Element, i: int) -> dict[str, object]:
    link = g.find("pci/pci_gpu_link_info")
    power = g.find("gpu_power_readings") if g.find("gpu_power_readings") is not None else g.find("power_readings")
    remap = g.find("remapped_rows")
    retired = _xml_text(g, "retired_pages/pending_retirement")
    return {
        "device": f"cuda:{i}", "bus_id": g.get("id"), "name": _xml_text(g, "product_name"),
        "vbios": _xml_text(g, "vbios_version"),
        "pcie": {"gen": _xml_int(link, "pcie_gen/current_link_gen"),
                 "width": _xml_int(link, "link_widths/current_link_width"),
                 "gen_max": _xml_int(link, "pcie_gen/max_link_gen"),
                 "width_max": _xml_int(link, "link_widths/max_link_width")},
        "nvlink": {},
        "ecc": {"current": _xml_mode(g, "ecc_mode/current_ecc"), "pending": _xml_mode(g, "ecc_mode/pending_ecc")},
        "retired_pages_pending": None if retired is None else retired.lower() == "yes",
        "row_remap": None if remap is None or _xml_text(remap, "remapped_row_pending") is None else {
            "pending": (_xml_text(remap, "remapped_row_pending") or "").lower() == "yes",
            "failed": (_xml_text(remap, "remapped_row_failure_occurred") or "").lower() == "yes"},
        "persistence": _xml_mode(g, "persistence_mode"),
        "compute_mode": (_xml_text(g, "compute_mode") or "").lower().replace("_", " ") or None,
        "mig": _xml_mode(g, "mig_mode/current_mig"),
        "power_limit_w": _xml_float(power, "current_power_limit") or _xml_float(power, "power_limit"),
        "power_default_w": _xml_float(power, "default_power_limit"),
        "application_clocks_mhz": {"sm": _xml_int(g, "applications_clocks/graphics_clock"),
                                   "mem": _xml_int(g, "applications_clocks/mem_clock")},
        "max_clocks_mhz": {"sm": _xml_int(g, "max_clocks/sm_clock"), "mem": _xml_int(g, "max_clocks/mem_clock")},
        "numa_node": None, "cpu_affinity": None,
    }


def _xml_float(node: Optional[ET.Element], path: str) -> Optional[float]:
    text = _xml_text(node, path)
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------- all


def read_nvidia(*, bus_ids: Optional[Sequence[str]] = None, load_nvml: Callable[[], Any] = _import_pynvml,
                run: Runner = run_command) -> dict[str, object]:
    """The NVIDIA part of the fingerprint, from the first source that answers (see the module docstring).
    ``load_nvml`` gives the ``pynvml`` module and ``run`` runs a command: tests pass fakes.  Never raises."""
    used, sources, reading = first_answer([
        ("nvml", lambda: from_nvml(load_nvml(), bus_ids)),
        ("nvidia-smi", lambda: from_nvidia_smi(run, bus_ids)),
    ])
    if reading is not None:
        return {"source": used, "sources": sources, **reading}
    return {"source": None, "sources": sources, "driver": None, "cuda_driver": None, "nvml_library": None,
            "gpus": [], "topology": None, "notes": []}


# ------------------------------------------------------------------------------------------ findings


def pcie_text(pcie: Mapping[str, object], now: bool = True) -> str:
    """``Gen5 x16`` (now) or the most the link can do (``now=False``); ``?`` for what was not read."""
    gen, width = (pcie.get("gen"), pcie.get("width")) if now else (pcie.get("gen_max"), pcie.get("width_max"))
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def link_findings(reading: Mapping[str, Any], *, gpu_count: Optional[int] = None) -> list[str]:
    """What is wrong with the links and memory of the GPUs, whatever the baseline: an NVLink down (on a machine
    of several GPUs; where some links of a GPU are up and others down, also on one), a PCIe link narrower than
    it can be, row remaps or page retirements pending, a row remap that failed.  One short line each.

    A PCIe link's *generation* below its maximum is not reported here: GPUs train their link down while idle
    to save power, and a reading at the start of a session is taken idle (the measurement's own reading
    under load, :mod:`pytest_gpucomm.ops.clocks`, is what a verdict names)."""
    out: list[str] = []
    gpus = list(reading.get("gpus") or [])
    several = (gpu_count if gpu_count is not None else len(gpus)) > 1
    for g in gpus:
        dev = g.get("device") or "a GPU"
        links = g.get("nvlink") or {}
        down = sorted((k for k, v in links.items() if not v.get("up")), key=int)
        if down and (several or len(down) < len(links)):
            which = "every NVLink" if len(down) == len(links) else f"NVLink {', '.join(down)}"
            out.append(f"{dev}: {which} down ({len(links) - len(down)} of {len(links)} up)")
        pcie = g.get("pcie") or {}
        if isinstance(pcie.get("width"), int) and isinstance(pcie.get("width_max"), int) \
                and pcie["width"] < pcie["width_max"]:
            out.append(f"{dev}: PCIe link at {pcie_text(pcie)} (capable of {pcie_text(pcie, now=False)})")
        remap = g.get("row_remap") or {}
        if remap.get("failed"):
            out.append(f"{dev}: a row remap failed (the GPU needs service)")
        elif remap.get("pending"):
            out.append(f"{dev}: row remaps pending (applied at the next GPU reset)")
        if g.get("retired_pages_pending"):
            out.append(f"{dev}: page retirements pending (applied at the next GPU reset)")
    return out
