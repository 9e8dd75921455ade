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

The sources are read in :mod:`.amdsmi_reader` (the library) and :mod:`.amd_commands` (``amd-smi``, ``rocm-smi``),
with what they share in :mod:`.amd_sources`; this module tries them in order (:func:`read_amd`).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, Optional

from .amd_commands import from_amd_smi, from_rocm_smi
from .amd_sources import Runner, SourceFailed, SourceUnavailable, error_text, rocm_version_file, run_command
from .sources import first_answer
from .amdsmi_reader import from_amdsmi

__all__ = ["SOURCES", "read_amd", "pair_types"]

#: the sources, in the order they are tried
SOURCES = ("amdsmi", "amd-smi", "rocm-smi")


def _import_amdsmi() -> object:
    """The installed ``amdsmi`` package; SourceUnavailable when it is not installed, SourceFailed when it is
    but cannot load (its import opens libamd_smi.so and raises OSError or KeyError without it)."""
    try:
        return importlib.import_module("amdsmi")
    except ImportError as e:
        raise SourceUnavailable(f"not installed ({error_text(e)})") from None
    except Exception as e:  # noqa: BLE001 - a broken install is named, never fatal
        raise SourceFailed(f"import amdsmi: {error_text(e)}") from None


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


def read_amd(*, load_amdsmi: Callable[[], object] = _import_amdsmi, run: Runner = run_command,
             rocm_file: Callable[[], Optional[str]] = rocm_version_file) -> dict[str, object]:
    """The AMD part of the fingerprint, from the first source that answers (see the module docstring).

    ``load_amdsmi`` gives the ``amdsmi`` module (or raises SourceUnavailable / SourceFailed), ``run`` runs a
    command, ``rocm_file`` reads the installed ROCm version: the defaults are the real ones, tests pass fakes.
    Never raises; with no source at all the reading has ``source`` None and empty fields.
    """
    used, sources, reading = first_answer([
        ("amdsmi", lambda: from_amdsmi(load_amdsmi(), rocm_file)),
        ("amd-smi", lambda: from_amd_smi(run, rocm_file)),
        ("rocm-smi", lambda: from_rocm_smi(run, rocm_file)),
    ])
    if reading is not None:
        return {"source": used, "sources": sources, **reading}
    return {"source": None, "sources": sources, "driver": None, "rocm": rocm_file(), "amdsmi_library": None,
            "gpus": [], "links": {}, "notes": []}

