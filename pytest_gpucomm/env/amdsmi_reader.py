"""The first source of an AMD reading (:mod:`.amd`): the ``amdsmi`` Python package, called as its API reference
documents it (the calls are listed in :mod:`.amd`'s docstring), ``amdsmi_shut_down`` always called at the end.
A call that raises inside it leaves its field out and is a note; one that raises at the start is
:class:`~.amd_sources.SourceFailed`.  Stdlib only: the package is passed in."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from .sources import Calls, library_session
from .amd_sources import (CLOCK_DOMAINS, SourceFailed, clock_entry, enum_name, error_text, firmware_versions, gts,
                          na, one_or_each, pcie_gen, rocm_version_file)

__all__ = ["from_amdsmi"]


def from_amdsmi(smi: Any, rocm_file: Callable[[], Optional[str]] = rocm_version_file) -> dict[str, Any]:
    """Read the node through the ``amdsmi`` module ``smi`` (the real package or a fake with its API).

    SourceFailed when ``amdsmi_init`` or ``amdsmi_get_processor_handles`` raises or finds no GPU; any later
    call that raises is a note.  ``amdsmi_shut_down`` is always called at the end, as the API reference's
    examples do (in ``finally``), even after a failed ``amdsmi_init``; its own failure is a note.
    """
    call = Calls()
    with library_session(smi.amdsmi_init, smi.amdsmi_shut_down, ("amdsmi_init", "amdsmi_shut_down"), call):
        try:
            handles = list(smi.amdsmi_get_processor_handles())
        except Exception as e:  # noqa: BLE001
            raise SourceFailed(f"amdsmi_get_processor_handles: {error_text(e)}") from None
        if not handles:
            raise SourceFailed("amdsmi_get_processor_handles: no AMD GPU")
        reading = _read_amdsmi(smi, handles, call, rocm_file)
    reading["notes"] = call.notes
    return reading


def _hip_ids(smi: Any, handles: list[Any], call: Calls) -> list[int]:
    """Each handle's HIP device number, or the handle order where the library has no enumeration info (or
    gives numbers that are not one per GPU)."""
    if not hasattr(smi, "amdsmi_get_gpu_enumeration_info"):
        return list(range(len(handles)))
    ids: list[Optional[int]] = []
    for i, h in enumerate(handles):
        info = call(f"amdsmi_get_gpu_enumeration_info(handle {i})", smi.amdsmi_get_gpu_enumeration_info, h)
        hip = info.get("hip_id") if isinstance(info, Mapping) else None
        ids.append(hip if isinstance(hip, int) and not isinstance(hip, bool) else None)
    known = [x for x in ids if x is not None]
    if len(known) != len(ids) or sorted(known) != list(range(len(handles))):
        return list(range(len(handles)))
    return known


def _read_amdsmi(smi: Any, handles: list[Any], call: Calls, rocm_file: Callable[[], Optional[str]]) -> dict:
    link_enum = getattr(smi, "AmdSmiLinkType", None)
    clk_enum = getattr(smi, "AmdSmiClkType", None)
    fw_enum = getattr(smi, "AmdSmiFwBlock", None)
    ids = _hip_ids(smi, handles, call)
    order = sorted(range(len(handles)), key=lambda k: ids[k])
    bdfs: dict[int, Any] = {}
    for k in order:
        bdfs[ids[k]] = call(f"amdsmi_get_gpu_device_bdf(GPU {ids[k]})", smi.amdsmi_get_gpu_device_bdf, handles[k])
    index_of_bdf = {str(b).lower(): i for i, b in bdfs.items() if b}

    driver = None
    gpus = []
    for k in order:
        i, h = ids[k], handles[k]
        gpu: dict[str, Any] = {"index": i, "bdf": bdfs[i]}
        drv = call(f"amdsmi_get_gpu_driver_info(GPU {i})", smi.amdsmi_get_gpu_driver_info, h)
        if isinstance(drv, Mapping) and driver is None:
            driver = na(drv.get("driver_version"))
        asic = call(f"amdsmi_get_gpu_asic_info(GPU {i})", smi.amdsmi_get_gpu_asic_info, h)
        if isinstance(asic, Mapping):
            gpu["name"] = na(asic.get("market_name"))
        vbios = call(f"amdsmi_get_gpu_vbios_info(GPU {i})", smi.amdsmi_get_gpu_vbios_info, h)
        if isinstance(vbios, Mapping):
            gpu["vbios"] = na(vbios.get("version", vbios.get("vbios_version_string")))
        fw = call(f"amdsmi_get_fw_info(GPU {i})", smi.amdsmi_get_fw_info, h)
        if isinstance(fw, Mapping):
            gpu["firmware"] = firmware_versions(fw.get("fw_list") or [], fw_enum)
        pcie = call(f"amdsmi_get_pcie_info(GPU {i})", smi.amdsmi_get_pcie_info, h)
        if isinstance(pcie, Mapping):
            gpu["pcie"] = _pcie_from_library(pcie)
        gpu["xgmi"] = _xgmi_from_library(smi, h, i, call, link_enum, index_of_bdf)
        gpu["clocks"] = _clocks_from_library(smi, h, i, call, clk_enum)
        gpus.append(gpu)

    links: dict[str, dict[str, Any]] = {}
    for a in order:
        for b in order:
            if a == b:
                continue
            i, j = ids[a], ids[b]
            link: dict[str, Any] = {}
            lt = call(f"amdsmi_topo_get_link_type(GPU {i}, GPU {j})", smi.amdsmi_topo_get_link_type,
                      handles[a], handles[b])
            if isinstance(lt, Mapping):
                link["type"] = enum_name(lt.get("type"), link_enum, ("AMDSMI_LINK_TYPE_",))
                link["hops"] = lt.get("hops")
            w = call(f"amdsmi_topo_get_link_weight(GPU {i}, GPU {j})", smi.amdsmi_topo_get_link_weight,
                     handles[a], handles[b])
            if w is not None:
                link["weight"] = w
            p2p = call(f"amdsmi_is_P2P_accessible(GPU {i}, GPU {j})", smi.amdsmi_is_P2P_accessible,
                       handles[a], handles[b])
            if p2p is not None:
                link["p2p"] = "ENABLED" if p2p else "DISABLED"
            links[f"{i}->{j}"] = link

    lib = call("amdsmi_get_lib_version", smi.amdsmi_get_lib_version)
    rocm = None
    if hasattr(smi, "amdsmi_get_rocm_version"):
        got = call("amdsmi_get_rocm_version", smi.amdsmi_get_rocm_version)
        if isinstance(got, (tuple, list)) and len(got) == 2 and got[0]:
            rocm = na(got[1])
    return {
        "driver": driver,
        "rocm": rocm or rocm_file(),
        "amdsmi_library": _lib_version(lib),
        "gpus": gpus,
        "links": links,
    }


def _lib_version(v: Any) -> Optional[str]:
    """``25.4.2`` from amdsmi_get_lib_version's dict (year.major.minor.release before ROCm 6.4, which dropped
    the year), or the text it gave."""
    if isinstance(v, Mapping):
        parts = [str(v[k]) for k in ("year", "major", "minor", "release") if v.get(k) is not None]
        return ".".join(parts) or None
    return na(v) if isinstance(v, str) else None


def _pcie_from_library(p: Mapping[str, Any]) -> dict[str, Any]:
    st = p.get("pcie_static") or {}
    me = p.get("pcie_metric") or {}
    return {
        "max_width": na(st.get("max_pcie_width")),
        "max_speed_gts": gts(st.get("max_pcie_speed")),
        "version": pcie_gen(st.get("pcie_interface_version")),
        "slot_type": na(st.get("slot_type")),
        "width": na(me.get("pcie_width")),
        "speed_gts": gts(me.get("pcie_speed")),
    }


def _xgmi_from_library(smi: Any, h: Any, i: int, call: Calls, link_enum: Any,
                       index_of_bdf: Mapping[str, int]) -> dict[str, object]:
    out: dict[str, object] = {}
    if hasattr(smi, "amdsmi_get_gpu_xgmi_link_status"):
        st = call(f"amdsmi_get_gpu_xgmi_link_status(GPU {i})", smi.amdsmi_get_gpu_xgmi_link_status, h)
        if isinstance(st, Mapping):
            out["status"] = [str(s) for s in (st.get("status") or [])]
    if hasattr(smi, "amdsmi_get_link_metrics"):
        lm = call(f"amdsmi_get_link_metrics(GPU {i})", smi.amdsmi_get_link_metrics, h)
        if isinstance(lm, Mapping):
            rate: dict[str, object] = {}
            bw: dict[str, object] = {}
            rd: dict[str, object] = {}
            wr: dict[str, object] = {}
            for n, link in enumerate(lm.get("links") or []):
                if not isinstance(link, Mapping):
                    continue
                if enum_name(link.get("link_type"), link_enum, ("AMDSMI_LINK_TYPE_",)) != "XGMI":
                    continue
                peer = index_of_bdf.get(str(link.get("bdf", "")).lower())
                key = str(peer) if peer is not None else f"link{n}"
                # bit_rate / max_bandwidth: per link in amdsmi_link_metrics_t, once per GPU in some releases
                rate[key] = na(link.get("bit_rate", lm.get("bit_rate")))
                bw[key] = na(link.get("max_bandwidth", lm.get("max_bandwidth")))
                rd[key], wr[key] = na(link.get("read")), na(link.get("write"))
            if rate:
                out.update(bit_rate=one_or_each(rate), max_bandwidth=one_or_each(bw), read_kb=rd, write_kb=wr)
    return out


def _clocks_from_library(smi: Any, h: Any, i: int, call: Calls, clk_enum: Any) -> dict[str, object]:
    out: dict[str, object] = {}
    for domain in CLOCK_DOMAINS:
        kind = getattr(clk_enum, domain, None) if clk_enum is not None else None
        if kind is None:
            call.notes.append(f"amdsmi_get_clock_info(GPU {i}, {domain}): the library has no AmdSmiClkType.{domain}")
            continue
        c = call(f"amdsmi_get_clock_info(GPU {i}, {domain})", smi.amdsmi_get_clock_info, h, kind)
        if isinstance(c, Mapping):
            out[domain.lower()] = clock_entry(c, "clk_deep_sleep")
    return out

