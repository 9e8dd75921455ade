"""What a device's clocks did during a measurement: the readings, their summary and the words for them.

The readings are taken by :mod:`pytest_gpucomm.ops.clocks` (a thread beside the timed samples); a measurement keeps
their summary (``Measurement.info["clocks"]``, :meth:`ClockSummary.to_dict`), which the gate, the reports and the
``gpucomm`` command read back here without importing what measures.  A reading whose reasons hold anything but
"idle" counts as throttled.  Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

__all__ = ["REASONS", "IDLE", "GEN_OF_GTS", "Reading", "ClockSummary", "reason_names", "summarize", "throttle_text"]

#: NVML's clock event (throttle) reason bits and the words a message uses for them, then AMD SMI's (the GPU
#: metrics' throttle residencies, MI300 and later; their ``throttle_status`` before) on bits of their own
REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "idle"), (0x2, "application clocks setting"), (0x4, "power cap"), (0x8, "hardware slowdown"),
    (0x10, "sync boost"), (0x20, "thermal (software)"), (0x40, "thermal (hardware)"), (0x80, "power brake"),
    (0x100, "display clock"),
    (0x1000, "processor hot"), (0x2000, "package power (PPT)"), (0x4000, "socket thermal"),
    (0x8000, "voltage regulator thermal"), (0x10000, "HBM thermal"), (0x40000, "throttle status"),
)
IDLE = 0x1
#: a PCIe link's generation by its speed in GT/s (AMD's readings give the speed, NVIDIA's the generation)
GEN_OF_GTS = {2.5: 1, 5: 2, 8: 3, 16: 4, 32: 5, 64: 6}


def reason_names(mask: int) -> list[str]:
    """The words for the reason bits in ``mask``; an unknown bit is named by its value."""
    names = [name for bit, name in REASONS if mask & bit]
    known = 0
    for bit, _ in REASONS:
        known |= bit
    if mask & ~known:
        names.append(f"reason 0x{mask & ~known:x}")
    return names


@dataclass(frozen=True)
class Reading:
    """One reading of one device: clocks in MHz (None where not read), the reason bits, the PCIe link."""

    t: float
    sm_mhz: Optional[float]
    mem_mhz: Optional[float] = None
    reasons: int = 0
    pcie_gen: Optional[int] = None
    pcie_width: Optional[int] = None


@dataclass(frozen=True)
class ClockSummary:
    """What a measurement keeps of its readings (``Measurement.info["clocks"]``)."""

    device: str
    readings: int
    sm_mhz: Optional[tuple[float, float]] = None  # (min, max) over the readings
    mem_mhz: Optional[tuple[float, float]] = None
    reasons: tuple[tuple[str, float], ...] = ()  # (reason, share of the readings), "idle" left out
    throttled_share: float = 0.0  # the share of readings with any reason but idle
    pcie: Optional[str] = None  # "Gen5 x16": the fastest link state read during the measurement

    @property
    def throttled(self) -> bool:
        return self.throttled_share > 0

    def text(self) -> str:
        """``cuda:0 throttled (power cap) in 96% of 301 clock readings: SM 1305-1980 MHz`` or, unthrottled,
        ``cuda:0 clocks: SM 1980 MHz, memory 3201 MHz (301 readings)``."""
        clocks = ", ".join(f"{what} {_span(span)} MHz" for what, span in (("SM", self.sm_mhz), ("memory", self.mem_mhz))
                           if span is not None)
        if self.throttled:
            why = ", ".join(r for r, _ in self.reasons) or "a reason"
            return (f"{self.device} throttled ({why}) in {self.throttled_share:.0%} of {self.readings} clock readings"
                    + (f": {clocks}" if clocks else ""))
        return f"{self.device} clocks: {clocks or 'not read'} ({self.readings} readings)"

    def to_dict(self) -> dict[str, object]:
        return {"device": self.device, "readings": self.readings,
                "sm_mhz": list(self.sm_mhz) if self.sm_mhz else None,
                "mem_mhz": list(self.mem_mhz) if self.mem_mhz else None,
                "reasons": {r: round(s, 4) for r, s in self.reasons}, "throttled_share": round(self.throttled_share, 4),
                "pcie": self.pcie}

    @classmethod
    def from_dict(cls, d: Any) -> "ClockSummary":
        def span(v: Any) -> Optional[tuple[float, float]]:
            return (float(v[0]), float(v[1])) if isinstance(v, (list, tuple)) and len(v) == 2 else None

        return cls(device=str(d.get("device", "")), readings=int(d.get("readings") or 0),
                   sm_mhz=span(d.get("sm_mhz")), mem_mhz=span(d.get("mem_mhz")),
                   reasons=tuple((str(k), float(v)) for k, v in (d.get("reasons") or {}).items()),
                   throttled_share=float(d.get("throttled_share") or 0.0), pcie=d.get("pcie"))


def _span(span: tuple[float, float]) -> str:
    lo, hi = span
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"


def summarize(device: str, readings: Sequence[Reading]) -> ClockSummary:
    """The summary of one device's readings."""
    if not readings:
        return ClockSummary(device=device, readings=0)

    def span(values: Iterable[Optional[float]]) -> Optional[tuple[float, float]]:
        vs = [v for v in values if v is not None]
        return (min(vs), max(vs)) if vs else None

    n = len(readings)
    counts: dict[str, int] = {}
    for r in readings:
        for name in reason_names(r.reasons & ~IDLE):
            counts[name] = counts.get(name, 0) + 1
    throttled = sum(1 for r in readings if r.reasons & ~IDLE)
    links = [(r.pcie_gen, r.pcie_width) for r in readings if r.pcie_gen is not None and r.pcie_width is not None]
    best = max(links) if links else None
    return ClockSummary(device=device, readings=n, sm_mhz=span(r.sm_mhz for r in readings),
                        mem_mhz=span(r.mem_mhz for r in readings),
                        reasons=tuple(sorted(((k, v / n) for k, v in counts.items()), key=lambda kv: -kv[1])),
                        throttled_share=throttled / n, pcie=f"Gen{best[0]} x{best[1]}" if best else None)


def throttle_text(info: object) -> Optional[str]:
    """``cuda:0 throttled (power cap) in 96% of 301 clock readings: SM 1305-1980 MHz`` for each device that
    throttled during a measurement (its ``info["clocks"]``), joined with "; "; None where none did."""
    clocks = info.get("clocks") if isinstance(info, dict) else None
    texts = []
    for c in clocks if isinstance(clocks, list) else []:
        s = ClockSummary.from_dict(c) if isinstance(c, dict) else None
        if s is not None and s.throttled:
            texts.append(s.text())
    return "; ".join(texts) or None
