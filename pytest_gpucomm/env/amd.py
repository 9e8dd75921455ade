"""What the fingerprint records of an AMD (ROCm) machine, read through AMD's management library.

Three sources, tried in this order; the first that answers is used and the later ones are not tried:

1. the ``amdsmi`` Python package (AMD SMI's Python interface, shipped with ROCm under
   ``/opt/rocm/share/amd_smi`` and on PyPI), called as its API reference documents it
   (https://rocm.docs.amd.com/projects/amdsmi/en/latest/reference/amdsmi-py-api.html; the same text is
   ``py-interface/README.md`` of https://github.com/ROCm/amdsmi): ``amdsmi_init``,
   ``amdsmi_get_processor_handles``, then per GPU ``amdsmi_get_gpu_device_bdf``,
   ``amdsmi_get_gpu_enumeration_info`` (its ``hip_id``, ROCm 6.4 and later), ``amdsmi_get_gpu_driver_info``,
   ``amdsmi_get_gpu_asic_info``, ``amdsmi_get_gpu_vbios_info``, ``amdsmi_get_fw_info``,
   ``amdsmi_get_pcie_info``, ``amdsmi_get_clock_info`` (GFX and MEM), ``amdsmi_get_gpu_xgmi_link_status``,
   ``amdsmi_get_link_metrics``, per ordered pair ``amdsmi_topo_get_link_type``, ``amdsmi_topo_get_link_weight``
   and ``amdsmi_is_P2P_accessible``, and ``amdsmi_get_lib_version`` / ``amdsmi_get_rocm_version``; always
   ``amdsmi_shut_down`` at the end, whatever happened;
2. the ``amd-smi`` command's JSON output (``version``, ``static``, ``firmware``, ``topology``, ``xgmi``,
   ``metric --clock --pcie``; layouts as amd-smi's ``amdsmi_commands.py`` writes them);
3. ``rocm-smi`` text, the tool the fingerprint read before (``--showdriverversion``, ``--showtopotype``).

A source that is not there (the package does not import, the command is not on PATH) is *unavailable* and
skipped; one that is there but fails at its start (``amdsmi_init`` raises, ``amd-smi static`` exits non-zero or
prints no JSON) is *failed*, named with its error in ``sources``, and the next one is tried.  A single call that
fails inside the source used (one GPU's firmware, say) leaves its field out and is named in ``notes``.  Nothing
here raises: detection never stops on a management tool.

The reading is one JSON object, the same shape whichever source gave it (:func:`read_amd`)::

    {"source": "amdsmi", "sources": {"amdsmi": "used", "amd-smi": "not tried", "rocm-smi": "not tried"},
     "driver": "6.12.12", "rocm": "6.4.1", "amdsmi_library": "25.4.2",
     "gpus": [{"index": 0, "bdf": "0000:05:00.0", "name": "AMD Instinct MI300X", "vbios": "...",
               "firmware": {"PSP_SOSDRV": "00.36.02.59", ...},
               "pcie": {"max_width": 16, "max_speed_gts": 32, "version": 5, "slot_type": "OAM",
                        "width": 16, "speed_gts": 32},
               "xgmi": {"status": ["U", ...], "bit_rate": 32, "max_bandwidth": 512,
                        "read_kb": {"1": ...}, "write_kb": {"1": ...}},
               "clocks": {"gfx": {"min_mhz": 500, "max_mhz": 2100, "locked": False,
                                  "current_mhz": 132, "deep_sleep": True}, "mem": {...}}}, ...],
     "links": {"0->1": {"type": "XGMI", "hops": 1, "weight": 15, "p2p": "ENABLED"}, ...},
     "notes": []}

Rules and why:

* GPUs are numbered by HIP's enumeration (``hip_id``) where the library gives it, because the suites' test
  ids (``0->1``) use torch's device numbers, which are HIP's; older libraries give no ``hip_id``, and their
  handle order is used (each GPU's ``bdf`` is recorded, so a mismatch can be told).  Visible-device masks
  (``HIP_VISIBLE_DEVICES``) are not applied: the fingerprint describes the machine.
* Link types are decoded with the library's own ``AmdSmiLinkType`` enum, as its reference says to
  ("translated according to the enum amdsmi_link_type_t"), never with integers written here: the numbers
  differ between releases (``amdsmi_wrapper.py`` of 2024-10 has ``AMDSMI_LINK_TYPE_XGMI = 1`` next to the
  older ``AMDSMI_IOLINK_TYPE_XGMI = 2``).  The name loses its ``AMDSMI_LINK_TYPE_`` prefix: ``XGMI``, ``PCIE``.
* Peer access is written ``ENABLED``/``DISABLED``, as ``amd-smi topology`` writes its ``link_status``, so that
  the library and the command give the same value.
* PCIe speeds are in GT/s: the library gives MT/s (32000 on Gen 5) and ``amd-smi`` divides by 1000, as done
  here.  Only the link's state is kept (widths, speeds, generation, slot), not its traffic counters.
* Volatile values are recorded under keys that :data:`pytest_gpucomm.env.fingerprint.VOLATILE_KEYS` names,
  so that a diff of two fingerprints ignores them: the current clock (``current_mhz``), whether the clock
  sleeps (``deep_sleep``), and the accumulated xGMI traffic (``read_kb``, ``write_kb``).  Clock limits and
  locks, link widths, speeds and states are not volatile: a change there is a change of the machine.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

__all__ = [
    "SOURCES",
    "SourceUnavailable",
    "SourceFailed",
    "read_amd",
    "from_amdsmi",
    "from_amd_smi",
    "from_rocm_smi",
    "parse_amd_smi_json",
    "pair_types",
    "run_command",
    "rocm_version_file",
]

#: the sources, in the order they are tried
SOURCES = ("amdsmi", "amd-smi", "rocm-smi")

#: clock domains read: the two that ``amd-smi metric --clock`` reports besides the video clocks
CLOCK_DOMAINS = ("GFX", "MEM")

#: seconds one command may take: ``amd-smi static`` on 8 GPUs takes a few
COMMAND_TIMEOUT_S = 30.0

#: longest error text kept in ``sources`` and ``notes``
_MAX_ERROR = 200

#: a command runner: argv -> (exit status, stdout, stderr); raises FileNotFoundError when the command is missing
Runner = Callable[[Sequence[str]], tuple[int, str, str]]


class SourceUnavailable(Exception):
    """The source is not on this machine (package not installed, command not on PATH): skipped."""


class SourceFailed(Exception):
    """The source is there but could not start (init failed, no GPU, no JSON): named, and the next is tried."""


def _error(e: BaseException) -> str:
    """``Type: message`` on one line (AmdSmiLibraryException's message spans lines), at most _MAX_ERROR long."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 3] + "..."


def run_command(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
    """Run ``argv``: (exit status, stdout, stderr).  FileNotFoundError when the command is not on PATH; a
    command that runs past ``timeout`` gives status 124 and says so on stderr."""
    if not shutil.which(argv[0]):
        raise FileNotFoundError(f"{argv[0]}: not found on PATH")
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(argv)}: timed out after {timeout:g} s"
    except OSError as e:
        return 126, "", f"{' '.join(argv)}: {e}"
    return out.returncode, out.stdout, out.stderr


def rocm_version_file(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The installed ROCm version from ``$ROCM_PATH/.info/version`` or ``/opt/rocm/.info/version`` (e.g.
    ``6.4.1-120``), None where neither exists."""
    env = os.environ if env is None else env
    roots = [env.get("ROCM_PATH", ""), env.get("ROCM_HOME", ""), "/opt/rocm"]
    for root in dict.fromkeys(r for r in roots if r):
        try:
            text = (Path(root) / ".info" / "version").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if text:
            return text.splitlines()[0].strip()
    return None


def _import_amdsmi() -> Any:
    """The installed ``amdsmi`` package; SourceUnavailable when it is not installed, SourceFailed when it is
    but cannot load (its import opens libamd_smi.so and raises OSError or KeyError without it)."""
    try:
        return importlib.import_module("amdsmi")
    except ImportError as e:
        raise SourceUnavailable(f"not installed ({_error(e)})") from None
    except Exception as e:  # noqa: BLE001 - a broken install is named, never fatal
        raise SourceFailed(f"import amdsmi: {_error(e)}") from None


# --------------------------------------------------------------------------------------------- helpers


def _enum_name(value: Any, enum: Any, prefixes: Iterable[str]) -> Any:
    """``value``'s member name in ``enum`` (an IntEnum class of the library), without the given prefixes;
    ``value`` itself when neither it nor the enum names it."""
    name = getattr(value, "name", None)
    if name is None and enum is not None and not isinstance(value, str):
        try:
            name = enum(value).name
        except (ValueError, TypeError):
            name = None
    if name is None and isinstance(value, str):
        name = value
    if name is None:
        return f"type {value}"
    for p in prefixes:
        if name.startswith(p):
            return name[len(p):]
    return name


def _na(value: Any) -> Any:
    """None for the library's and the command's "not available" markers."""
    if value is None or (isinstance(value, str) and value.strip().upper() in ("N/A", "")):
        return None
    return value


def _number(value: Any) -> Any:
    """The number of a ``{"value": 32, "unit": "GT/s"}`` field of amd-smi's JSON, or the value itself."""
    if isinstance(value, Mapping):
        value = value.get("value")
    return _na(value)


def _gts(mts: Any) -> Any:
    """MT/s (the library's PCIe speeds) -> GT/s, as amd-smi prints them (32000 -> 32, 2500 -> 2.5)."""
    mts = _na(mts)
    if not isinstance(mts, (int, float)) or isinstance(mts, bool):
        return mts
    return round(mts / 1000) if mts % 1000 == 0 else round(mts / 1000, 1)


def _flag(value: Any) -> Optional[bool]:
    """A clock lock / deep-sleep flag: the library gives 0/1 (or True/False), amd-smi ENABLED/DISABLED."""
    value = _na(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().upper() in ("ENABLED", "TRUE", "YES", "1")
    return bool(value)


def _one_or_each(values: Mapping[str, Any]) -> Any:
    """One value when every link has the same (the usual case), else the value of each peer."""
    distinct = {json.dumps(v, sort_keys=True) for v in values.values()}
    if len(distinct) == 1:
        return next(iter(values.values()))
    return dict(values) if values else None


def _pcie_gen(value: Any) -> Any:
    """5 from the library's 5 or amd-smi's "Gen 5"."""
    value = _na(value)
    if isinstance(value, str) and value.strip().lower().startswith("gen"):
        try:
            return int(value.strip()[3:])
        except ValueError:
            return value
    return value


def pair_types(reading: Mapping[str, Any]) -> dict[str, str]:
    """The link type of each unordered GPU pair, ``{"0-1": "XGMI", ...}``: the fingerprint's ``topology``
    layout (as :func:`pytest_gpucomm.env.hardware.parse_nvidia_topo` gives it), from the reading's ordered links."""
    out: dict[str, str] = {}
    for key, link in (reading.get("links") or {}).items():
        try:
            a, b = (int(x) for x in key.split("->"))
        except ValueError:
            continue
        t = link.get("type") if isinstance(link, Mapping) else None
        if t is not None and a < b:
            out[f"{a}-{b}"] = str(t)
    return dict(sorted(out.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("-"))))


# --------------------------------------------------------------------------------------------- amdsmi


class _Calls:
    """Calls one library function after another; a failing one leaves its field out and is noted."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - any library error is a note, never fatal
            self.notes.append(f"{what}: {_error(e)}")
            return None


def from_amdsmi(smi: Any, rocm_file: Callable[[], Optional[str]] = rocm_version_file) -> dict[str, Any]:
    """Read the node through the ``amdsmi`` module ``smi`` (the real package or a fake with its API).

    SourceFailed when ``amdsmi_init`` or ``amdsmi_get_processor_handles`` raises or finds no GPU; any later
    call that raises is a note.  ``amdsmi_shut_down`` is always called at the end, as the API reference's
    examples do (in ``finally``), even after a failed ``amdsmi_init``; its own failure is a note.
    """
    call = _Calls()
    try:
        try:
            smi.amdsmi_init()
        except Exception as e:  # noqa: BLE001
            raise SourceFailed(f"amdsmi_init: {_error(e)}") from None
        try:
            handles = list(smi.amdsmi_get_processor_handles())
        except Exception as e:  # noqa: BLE001
            raise SourceFailed(f"amdsmi_get_processor_handles: {_error(e)}") from None
        if not handles:
            raise SourceFailed("amdsmi_get_processor_handles: no AMD GPU")
        reading = _read_amdsmi(smi, handles, call, rocm_file)
    finally:
        try:
            smi.amdsmi_shut_down()
        except Exception as e:  # noqa: BLE001
            call.notes.append(f"amdsmi_shut_down: {_error(e)}")
    reading["notes"] = call.notes
    return reading


def _hip_ids(smi: Any, handles: list[Any], call: _Calls) -> list[int]:
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


def _read_amdsmi(smi: Any, handles: list[Any], call: _Calls, rocm_file: Callable[[], Optional[str]]) -> dict:
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
            driver = _na(drv.get("driver_version"))
        asic = call(f"amdsmi_get_gpu_asic_info(GPU {i})", smi.amdsmi_get_gpu_asic_info, h)
        if isinstance(asic, Mapping):
            gpu["name"] = _na(asic.get("market_name"))
        vbios = call(f"amdsmi_get_gpu_vbios_info(GPU {i})", smi.amdsmi_get_gpu_vbios_info, h)
        if isinstance(vbios, Mapping):
            gpu["vbios"] = _na(vbios.get("version", vbios.get("vbios_version_string")))
        fw = call(f"amdsmi_get_fw_info(GPU {i})", smi.amdsmi_get_fw_info, h)
        if isinstance(fw, Mapping):
            gpu["firmware"] = _firmware(fw.get("fw_list") or [], fw_enum)
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
                link["type"] = _enum_name(lt.get("type"), link_enum, ("AMDSMI_LINK_TYPE_",))
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
            rocm = _na(got[1])
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
    return _na(v) if isinstance(v, str) else None


def _firmware(fw_list: Iterable[Any], fw_enum: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in fw_list:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("fw_name", entry.get("fw_id"))
        name = _enum_name(name, fw_enum, ("AMDSMI_FW_ID_", "FW_ID_"))
        out[str(name)] = _na(entry.get("fw_version"))
    return dict(sorted(out.items()))


def _pcie_from_library(p: Mapping[str, Any]) -> dict[str, Any]:
    st = p.get("pcie_static") or {}
    me = p.get("pcie_metric") or {}
    return {
        "max_width": _na(st.get("max_pcie_width")),
        "max_speed_gts": _gts(st.get("max_pcie_speed")),
        "version": _pcie_gen(st.get("pcie_interface_version")),
        "slot_type": _na(st.get("slot_type")),
        "width": _na(me.get("pcie_width")),
        "speed_gts": _gts(me.get("pcie_speed")),
    }


def _xgmi_from_library(smi: Any, h: Any, i: int, call: _Calls, link_enum: Any,
                       index_of_bdf: Mapping[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if hasattr(smi, "amdsmi_get_gpu_xgmi_link_status"):
        st = call(f"amdsmi_get_gpu_xgmi_link_status(GPU {i})", smi.amdsmi_get_gpu_xgmi_link_status, h)
        if isinstance(st, Mapping):
            out["status"] = [str(s) for s in (st.get("status") or [])]
    if hasattr(smi, "amdsmi_get_link_metrics"):
        lm = call(f"amdsmi_get_link_metrics(GPU {i})", smi.amdsmi_get_link_metrics, h)
        if isinstance(lm, Mapping):
            rate: dict[str, Any] = {}
            bw: dict[str, Any] = {}
            rd: dict[str, Any] = {}
            wr: dict[str, Any] = {}
            for n, link in enumerate(lm.get("links") or []):
                if not isinstance(link, Mapping):
                    continue
                if _enum_name(link.get("link_type"), link_enum, ("AMDSMI_LINK_TYPE_",)) != "XGMI":
                    continue
                peer = index_of_bdf.get(str(link.get("bdf", "")).lower())
                key = str(peer) if peer is not None else f"link{n}"
                # bit_rate / max_bandwidth: per link in amdsmi_link_metrics_t, once per GPU in some releases
                rate[key] = _na(link.get("bit_rate", lm.get("bit_rate")))
                bw[key] = _na(link.get("max_bandwidth", lm.get("max_bandwidth")))
                rd[key], wr[key] = _na(link.get("read")), _na(link.get("write"))
            if rate:
                out.update(bit_rate=_one_or_each(rate), max_bandwidth=_one_or_each(bw), read_kb=rd, write_kb=wr)
    return out


def _clocks_from_library(smi: Any, h: Any, i: int, call: _Calls, clk_enum: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for domain in CLOCK_DOMAINS:
        kind = getattr(clk_enum, domain, None) if clk_enum is not None else None
        if kind is None:
            call.notes.append(f"amdsmi_get_clock_info(GPU {i}, {domain}): the library has no AmdSmiClkType.{domain}")
            continue
        c = call(f"amdsmi_get_clock_info(GPU {i}, {domain})", smi.amdsmi_get_clock_info, h, kind)
        if isinstance(c, Mapping):
            out[domain.lower()] = _clock_entry(c, "clk_deep_sleep")
    return out


def _clock_entry(c: Mapping[str, Any], deep_sleep_key: str) -> dict[str, Any]:
    """One clock domain, from the library's ``amdsmi_get_clock_info`` or amd-smi's ``metric --clock`` entry:
    the same keys but deep sleep's, and amd-smi's numbers are ``{"value", "unit"}`` (``_number`` reads both)."""
    return {
        "min_mhz": _number(c.get("min_clk")),
        "max_mhz": _number(c.get("max_clk")),
        "locked": _flag(c.get("clk_locked")),
        "current_mhz": _number(c.get("clk")),
        "deep_sleep": _flag(c.get(deep_sleep_key)),
    }


# --------------------------------------------------------------------------------------------- amd-smi


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
            driver = _na(drv.get("version"))
        bus = s.get("bus") or {}
        gpu: dict[str, Any] = {"index": g, "bdf": _na(bus.get("bdf")),
                               "name": _na((s.get("asic") or {}).get("market_name"))}
        bios = s.get("ifwi", s.get("vbios"))
        if isinstance(bios, Mapping):
            gpu["vbios"] = _na(bios.get("version"))
        if g in firmware:
            gpu["firmware"] = _firmware(firmware[g].get("fw_list") or [], None)
        m = metric.get(g, {})
        pcie = m.get("pcie")
        mp = pcie if isinstance(pcie, Mapping) else {}
        gpu["pcie"] = {
            "max_width": _na(bus.get("max_pcie_width")),
            "max_speed_gts": _number(bus.get("max_pcie_speed")),
            "version": _pcie_gen(bus.get("pcie_interface_version")),
            "slot_type": _na(bus.get("slot_type")),
            "width": _na(mp.get("width")),
            "speed_gts": _number(mp.get("speed")),
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
            link: dict[str, Any] = {}
            if "link_type" in peer:
                link["type"] = _na(peer["link_type"])
            if "num_hops" in peer:
                link["hops"] = peer["num_hops"]
            if "weight" in peer:
                link["weight"] = peer["weight"]
            if "link_status" in peer:
                link["p2p"] = _na(peer["link_status"])
            links[f"{g}->{j}"] = link

    v = version[0] if version else {}
    return {
        "driver": driver,
        "rocm": _na(v.get("rocm_version")) or rocm_file(),
        "amdsmi_library": _na(v.get("amdsmi_library_version")),
        "gpus": gpus,
        "links": dict(sorted(links.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("->")))),
        "notes": notes,
    }


def _xgmi_from_cli(entry: Optional[Mapping[str, Any]], index_of_bdf: Mapping[str, int]) -> dict[str, Any]:
    lm = (entry or {}).get("link_metrics")
    if not isinstance(lm, Mapping):
        return {}
    out: dict[str, Any] = {"bit_rate": _number(lm.get("bit_rate")), "max_bandwidth": _number(lm.get("max_bandwidth"))}
    rd: dict[str, Any] = {}
    wr: dict[str, Any] = {}
    for link in lm.get("links") or []:
        if not isinstance(link, Mapping):
            continue
        peer = link.get("gpu", index_of_bdf.get(str(link.get("bdf", "")).lower()))
        read, write = _number(link.get("read")), _number(link.get("write"))
        if peer is None or (read is None and write is None):
            continue  # the GPU itself: "N/A"
        rd[str(peer)], wr[str(peer)] = read, write
    if rd:
        out.update(read_kb=rd, write_kb=wr)
    return out


def _clocks_from_cli(clock: Any) -> dict[str, Any]:
    """gfx and mem from ``amd-smi metric --clock``: its ``gfx_0`` (one entry per XCD, the same limits on each)
    and ``mem_0``, the domains the library reads."""
    out: dict[str, Any] = {}
    if not isinstance(clock, Mapping):
        return out
    for domain in CLOCK_DOMAINS:
        c = clock.get(f"{domain.lower()}_0")
        if isinstance(c, Mapping):
            out[domain.lower()] = _clock_entry(c, "deep_sleep")
    return out


# --------------------------------------------------------------------------------------------- rocm-smi


def from_rocm_smi(run: Runner, rocm_file: Callable[[], Optional[str]] = rocm_version_file) -> dict[str, Any]:
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
    links: dict[str, dict[str, Any]] = {}
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


# --------------------------------------------------------------------------------------------- all


def read_amd(*, load_amdsmi: Callable[[], Any] = _import_amdsmi, run: Runner = run_command,
             rocm_file: Callable[[], Optional[str]] = rocm_version_file) -> dict[str, Any]:
    """The AMD part of the fingerprint, from the first source that answers (see the module docstring).

    ``load_amdsmi`` gives the ``amdsmi`` module (or raises SourceUnavailable / SourceFailed), ``run`` runs a
    command, ``rocm_file`` reads the installed ROCm version: the defaults are the real ones, tests pass fakes.
    Never raises; with no source at all the reading has ``source`` None and empty fields.
    """
    sources = {name: "not tried" for name in SOURCES}
    readers: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("amdsmi", lambda: from_amdsmi(load_amdsmi(), rocm_file)),
        ("amd-smi", lambda: from_amd_smi(run, rocm_file)),
        ("rocm-smi", lambda: from_rocm_smi(run, rocm_file)),
    ]
    for name, reader in readers:
        try:
            reading = reader()
        except SourceUnavailable as e:
            sources[name] = f"unavailable: {e}"
            continue
        except SourceFailed as e:
            sources[name] = f"failed: {e}"
            continue
        except Exception as e:  # noqa: BLE001 - a source's bug is named, never fatal to detection
            sources[name] = f"failed: {_error(e)}"
            continue
        sources[name] = "used"
        return {"source": name, "sources": sources, **reading}
    return {"source": None, "sources": sources, "driver": None, "rocm": rocm_file(), "amdsmi_library": None,
            "gpus": [], "links": {}, "notes": []}
