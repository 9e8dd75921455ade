"""What the three sources of an AMD reading share (:mod:`.amd` tries them: the ``amdsmi`` library,
:mod:`.amdsmi_reader`; the ``amd-smi`` and ``rocm-smi`` commands, :mod:`.amd_commands`): how a source that is
not there or cannot start says so (:class:`SourceUnavailable`, :class:`SourceFailed`), the command runner, the
installed ROCm version, and how a value is written whichever source read it (N/A as None, amd-smi's
``{"value", "unit"}`` numbers, PCIe speeds in GT/s, clock flags, an enum member's name, firmware versions, one
clock domain).  Stdlib only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, TypeVar

from .sources import COMMAND_TIMEOUT_S, Runner, SourceFailed, SourceUnavailable, error_text, run_command

__all__ = ["SourceUnavailable", "SourceFailed", "Runner", "COMMAND_TIMEOUT_S", "CLOCK_DOMAINS", "error_text",
           "run_command", "rocm_version_file", "enum_name", "na", "number", "gts", "flag", "one_or_each", "pcie_gen",
           "firmware_versions", "clock_entry"]

#: clock domains read: the two that ``amd-smi metric --clock`` reports besides the video clocks
CLOCK_DOMAINS = ("GFX", "MEM")


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


def enum_name(value: Any, enum: Any, prefixes: Iterable[str]) -> Any:
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


_T = TypeVar("_T")


def na(value: _T) -> Optional[_T]:
    """None for the library's and the command's "not available" markers."""
    if value is None or (isinstance(value, str) and value.strip().upper() in ("N/A", "")):
        return None
    return value


def number(value: object) -> object:
    """The number of a ``{"value": 32, "unit": "GT/s"}`` field of amd-smi's JSON, or the value itself."""
    if isinstance(value, Mapping):
        value = value.get("value")
    return na(value)


def gts(mts: object) -> object:
    """MT/s (the library's PCIe speeds) -> GT/s, as amd-smi prints them (32000 -> 32, 2500 -> 2.5)."""
    mts = na(mts)
    if not isinstance(mts, (int, float)) or isinstance(mts, bool):
        return mts
    return round(mts / 1000) if mts % 1000 == 0 else round(mts / 1000, 1)


def flag(value: object) -> Optional[bool]:
    """A clock lock / deep-sleep flag: the library gives 0/1 (or True/False), amd-smi ENABLED/DISABLED."""
    value = na(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().upper() in ("ENABLED", "TRUE", "YES", "1")
    return bool(value)


def one_or_each(values: Mapping[str, object]) -> object:
    """One value when every link has the same (the usual case), else the value of each peer."""
    distinct = {json.dumps(v, sort_keys=True) for v in values.values()}
    if len(distinct) == 1:
        return next(iter(values.values()))
    return dict(values) if values else None


def pcie_gen(value: object) -> object:
    """5 from the library's 5 or amd-smi's "Gen 5"."""
    value = na(value)
    if isinstance(value, str) and value.strip().lower().startswith("gen"):
        try:
            return int(value.strip()[3:])
        except ValueError:
            return value
    return value


def firmware_versions(fw_list: Iterable[object], fw_enum: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for entry in fw_list:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("fw_name", entry.get("fw_id"))
        name = enum_name(name, fw_enum, ("AMDSMI_FW_ID_", "FW_ID_"))
        out[str(name)] = na(entry.get("fw_version"))
    return dict(sorted(out.items()))


def clock_entry(c: Mapping[str, object], deep_sleep_key: str) -> dict[str, object]:
    """One clock domain, from the library's ``amdsmi_get_clock_info`` or amd-smi's ``metric --clock`` entry:
    the same keys but deep sleep's, and amd-smi's numbers are ``{"value", "unit"}`` (``number`` reads both)."""
    return {
        "min_mhz": number(c.get("min_clk")),
        "max_mhz": number(c.get("max_clk")),
        "locked": flag(c.get("clk_locked")),
        "current_mhz": number(c.get("clk")),
        "deep_sleep": flag(c.get(deep_sleep_key)),
    }

