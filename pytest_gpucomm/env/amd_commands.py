"""The second and third sources of an AMD reading (:mod:`.amd`): the ``amd-smi`` command's JSON (``version``,
``static``, ``firmware``, ``topology``, ``xgmi``, ``metric --clock --pcie``; layouts as amd-smi's
``amdsmi_commands.py`` writes them) and ``rocm-smi`` text (``--showdriverversion``, ``--showtopotype``), each
run through a :data:`~.amd_sources.Runner`.  Stdlib only."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from .amd_sources import (CLOCK_DOMAINS, Runner, SourceFailed, SourceUnavailable, clock_entry, firmware_versions,
                          na, number, pcie_gen, rocm_version_file)

__all__ = ["parse_amd_smi_json", "from_amd_smi", "from_rocm_smi"]


def parse_amd_smi_json(text: str, command: str) -> list[dict[str, Any]]:
    """The per-device objects of one ``amd-smi ... --json`` answer: a list of objects (ROCm 6.x), one object,
    or ``{"gpu_data": [...]}``; only GPU entries (those with a ``gpu`` key) where devices are listed.
    SourceFailed naming ``command`` when the text is not such JSON."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        first = text.strip().splitlines()[0][:80] if text.strip() else "(no output)"
        raise SourceFailed(f"{command}: not JSON ({e.msg} at line {e.lineno}): {first!r}") from None
    if isinstance(doc, Mapping) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    if isinstance(doc, Mapping):
        doc = [doc]
    if not isinstance(doc, list) or not all(isinstance(d, Mapping) for d in doc):
        raise SourceFailed(f"{command}: expected a JSON list of objects, got {type(doc).__name__}")
    gpus = [dict(d) for d in doc if "gpu" in d]
    return gpus if gpus else [dict(d) for d in doc]


def _amd_smi(run: Runner, args: Sequence[str], notes: Optional[list[str]]) -> Optional[list[dict[str, Any]]]:
    """Run ``amd-smi <args> --json``; with ``notes`` a failure is noted and gives None, without it (the
    command the source depends on) it raises SourceFailed."""
    argv = ["amd-smi", *args, "--json"]
    command = " ".join(argv)
    try:
        rc, out, err = run(argv)
        if rc != 0:
            first = (err or out).strip().splitlines()[:1]
            raise SourceFailed(f"{command}: exit status {rc}" + (f": {first[0][:120]}" if first else ""))
        return parse_amd_smi_json(out, command)
    except SourceFailed as e:
        if notes is None:
            raise
        notes.append(str(e))
        return None


def _by_gpu(entries: Optional[list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    out = {}
    for e in entries or []:
        try:
            out[int(e["gpu"])] = e
        except (KeyError, TypeError, ValueError):
            continue
    return out


def from_amd_smi(run: Runner, rocm_file: Callable[[], Optional[str]] = rocm_version_file) -> dict[str, Any]:
    """Read the node through the ``amd-smi`` command (``run`` runs it).  SourceUnavailable when the command is
    not there, SourceFailed when ``amd-smi static`` fails or is not JSON; the other commands are notes."""
    notes: list[str] = []
    try:
        static = _by_gpu(_amd_smi(run, ["static"], None))
    except FileNotFoundError as e:
        raise SourceUnavailable(f"not found ({e})") from None
    if not static:
        raise SourceFailed("amd-smi static --json: no GPU in the answer")
    version = _amd_smi(run, ["version"], notes) or [{}]
    firmware = _by_gpu(_amd_smi(run, ["firmware"], notes))
    topology = _by_gpu(_amd_smi(run, ["topology"], notes))
    xgmi = _by_gpu(_amd_smi(run, ["xgmi"], notes))
    metric = _by_gpu(_amd_smi(run, ["metric", "--clock", "--pcie"], notes))

    index_of_bdf = {str((e.get("bus") or {}).get("bdf", "")).lower(): g for g, e in static.items()}
    driver = None
    gpus = []
    for g in sorted(static):
        s = static[g]
        drv = s.get("driver") or {}
        if driver is None and isinstance(drv, Mapping):
            driver = na(drv.get("version"))
        bus = s.get("bus") or {}
        gpu: dict[str, Any] = {"index": g, "bdf": na(bus.get("bdf")),
                               "name": na((s.get("asic") or {}).get("market_name"))}
        bios = s.get("ifwi", s.get("vbios"))
        if isinstance(bios, Mapping):
            gpu["vbios"] = na(bios.get("version"))
        if g in firmware:
            gpu["firmware"] = firmware_versions(firmware[g].get("fw_list") or [], None)
        m = metric.get(g, {})
        pcie = m.get("pcie")
        mp = pcie if isinstance(pcie, Mapping) else {}
        gpu["pcie"] = {
            "max_width": na(bus.get("max_pcie_width")),
            "max_speed_gts": number(bus.get("max_pcie_speed")),
            "version": pcie_gen(bus.get("pcie_interface_version")),
            "slot_type": na(bus.get("slot_type")),
            "width": na(mp.get("width")),
            "speed_gts": number(mp.get("speed")),
        }
        gpu["xgmi"] = _xgmi_from_cli(xgmi.get(g), index_of_bdf)
        gpu["clocks"] = _clocks_from_cli(m.get("clock"))
        gpus.append(gpu)

    links: dict[str, dict[str, Any]] = {}
    for g in sorted(topology):
        for peer in topology[g].get("links") or []:
            if not isinstance(peer, Mapping):
                continue
            j = peer.get("gpu")
            if not isinstance(j, int) or j == g:
                continue
            link: dict[str, object] = {}
            if "link_type" in peer:
                link["type"] = na(peer["link_type"])
            if "num_hops" in peer:
                link["hops"] = peer["num_hops"]
            if "weight" in peer:
                link["weight"] = peer["weight"]
            if "link_status" in peer:
                link["p2p"] = na(peer["link_status"])
            links[f"{g}->{j}"] = link

    v = version[0] if version else {}
    return {
        "driver": driver,
        "rocm": na(v.get("rocm_version")) or rocm_file(),
        "amdsmi_library": na(v.get("amdsmi_library_version")),
        "gpus": gpus,
        "links": dict(sorted(links.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("->")))),
        "notes": notes,
    }


def _xgmi_from_cli(entry: Optional[Mapping[str, object]], index_of_bdf: Mapping[str, int]) -> dict[str, object]:
    lm = (entry or {}).get("link_metrics")
    if not isinstance(lm, Mapping):
        return {}
    out: dict[str, object] = {"bit_rate": number(lm.get("bit_rate")), "max_bandwidth": number(lm.get("max_bandwidth"))}
    rd: dict[str, object] = {}
    wr: dict[str, object] = {}
    for link in lm.get("links") or []:
        if not isinstance(link, Mapping):
            continue
        peer = link.get("gpu", index_of_bdf.get(str(link.get("bdf", "")).lower()))
        read, write = number(link.get("read")), number(link.get("write"))
        if peer is None or (read is None and write is None):
            continue  # the GPU itself: "N/A"
        rd[str(peer)], wr[str(peer)] = read, write
    if rd:
        out.update(read_kb=rd, write_kb=wr)
    return out


def _clocks_from_cli(clock: object) -> dict[str, object]:
    """gfx and mem from ``amd-smi metric --clock``: its ``gfx_0`` (one entry per XCD, the same limits on each)
    and ``mem_0``, the domains the library reads."""
    out: dict[str, object] = {}
    if not isinstance(clock, Mapping):
        return out
    for domain in CLOCK_DOMAINS:
        c = clock.get(f"{domain.lower()}_0")
        if isinstance(c, Mapping):
            out[domain.lower()] = clock_entry(c, "deep_sleep")
    return out


def from_rocm_smi(run: Runner, rocm_file: Callable[[], Optional[str]] = rocm_version_file) -> dict[str, object]:
    """Read what ``rocm-smi`` text gives: the driver version and the link type of each pair.  SourceUnavailable
    when the command is not there, SourceFailed when neither answer holds anything."""
    from .hardware import parse_rocm_topo  # the parser the fingerprint used before this module

    def text(args: list[str]) -> str:
        try:
            rc, out, err = run(["rocm-smi", *args])
        except FileNotFoundError as e:
            raise SourceUnavailable(f"not found ({e})") from None
        return out if rc == 0 else ""

    drv = re.search(r"Driver version:\s*(\S+)", text(["--showdriverversion"]))
    pairs = parse_rocm_topo(text(["--showtopotype"]))
    if drv is None and not pairs:
        raise SourceFailed("rocm-smi --showdriverversion / --showtopotype: no driver version, no link matrix")
    links: dict[str, dict[str, object]] = {}
    for key, t in pairs.items():
        a, b = key.split("-")
        links[f"{a}->{b}"] = {"type": t}
        links[f"{b}->{a}"] = {"type": t}
    return {
        "driver": drv.group(1) if drv else None,
        "rocm": rocm_file(),
        "amdsmi_library": None,
        "gpus": [],
        "links": dict(sorted(links.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("->")))),
        "notes": [],
    }

