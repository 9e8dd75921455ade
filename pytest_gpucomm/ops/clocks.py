"""Clocks and throttling during a measurement: sampled from a thread while the timed batches run.

A bandwidth that dropped because the GPU ran at a lower clock (a power cap, heat, a hardware slowdown) is not
the link's fault, and the verdict should say so.  :class:`Sampler` reads the device's clocks and its
throttle reasons every :data:`INTERVAL_S` from a daemon thread while :func:`pytest_gpucomm.ops.timing.measure`
takes its samples, and once at the start and end of them; :class:`ClockSummary` is what a measurement keeps
(``Measurement.info["clocks"]``): the range of the SM and memory clocks, the reasons seen and in what share of
the readings, and the PCIe link as read under load.

Readers, one per device kind (:func:`reader_for`; AMD GPUs are not sampled yet: their clocks are in the
fingerprint, :mod:`pytest_gpucomm.env.amd`):

* NVIDIA: NVML (``pynvml``): ``nvmlDeviceGetClockInfo`` (SM, memory), ``nvmlDeviceGetCurrentClocksEventReasons``
  (``...ThrottleReasons`` before NVML 12.5), and the PCIe link's generation and width now.  One reading costs
  about 30 us (measured on an H200: three calls); at one reading per 20 ms that is 0.15 % of one core.
* CPU (the CPU variants): the current frequency of the CPUs this process may run on
  (``/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq``) as the "SM" clock and the kernel's thermal
  throttle counters (``thermal_throttle/*_throttle_count``): a counter that grew during the measurement is
  a thermal throttle.  Where the kernel exposes neither (many virtual machines), nothing is read.

A reading whose reasons hold anything but "idle" counts as throttled ("any reason other than idle": a power
cap, the application clocks' setting, a thermal or hardware slowdown, sync boost).  Nothing here raises out of
a measurement: a reader that fails stops reading and the summary says what was read.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Protocol, Sequence

__all__ = ["INTERVAL_S", "REASONS", "IDLE", "Reading", "Reader", "ClockSummary", "Sampler", "reason_names",
           "summarize", "reader_for", "sampler_for", "clock_info", "throttle_text", "NvmlReader", "CpuFreqReader"]

#: seconds between two readings of the sampling thread
INTERVAL_S = 0.02
#: NVML's clock event (throttle) reason bits and the words a message uses for them
REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "idle"), (0x2, "application clocks setting"), (0x4, "power cap"), (0x8, "hardware slowdown"),
    (0x10, "sync boost"), (0x20, "thermal (software)"), (0x40, "thermal (hardware)"), (0x80, "power brake"),
    (0x100, "display clock"),
)
IDLE = 0x1


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


class Reader(Protocol):
    device: str

    def read(self) -> Optional[Reading]:
        """One reading now, or None where nothing can be read (then the sampler stops asking)."""


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

    def to_dict(self) -> dict[str, Any]:
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


class Sampler:
    """Reads ``readers`` every ``interval_s`` from a daemon thread between :meth:`start` and :meth:`stop`, and
    once at each; :meth:`summaries` gives one :class:`ClockSummary` per reader.  A context manager too."""

    def __init__(self, readers: Sequence[Reader], interval_s: float = INTERVAL_S) -> None:
        self._readers = list(readers)
        self._interval = interval_s
        self._readings: list[list[Reading]] = [[] for _ in self._readers]
        self._live = [True] * len(self._readers)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _read_all(self) -> None:
        for i, reader in enumerate(self._readers):
            if not self._live[i]:
                continue
            try:
                r = reader.read()
            except Exception:  # noqa: BLE001 - a reader that fails stops reading; the measurement goes on
                r = None
            if r is None:
                self._live[i] = False
            else:
                self._readings[i].append(r)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._read_all()

    def start(self) -> "Sampler":
        if self._readers and self._thread is None:
            self._read_all()
            self._thread = threading.Thread(target=self._run, name="gpucomm-clocks", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._read_all()

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def summaries(self) -> list[ClockSummary]:
        return [summarize(r.device, rs) for r, rs in zip(self._readers, self._readings)]


# ------------------------------------------------------------------------------------------- readers


class NvmlReader:
    """One NVIDIA GPU through NVML; ``nvml`` is the ``pynvml`` module (initialised here, once per process)."""

    def __init__(self, nvml: Any, handle: Any, device: str) -> None:
        self.nvml, self.handle, self.device = nvml, handle, device
        self._reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                         or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        self._pcie = True

    def read(self) -> Optional[Reading]:
        n, h = self.nvml, self.handle
        gen = width = None
        if self._pcie:
            try:
                gen, width = n.nvmlDeviceGetCurrPcieLinkGeneration(h), n.nvmlDeviceGetCurrPcieLinkWidth(h)
            except Exception:  # noqa: BLE001 - not every GPU says; the clocks still count
                self._pcie = False
        return Reading(t=time.perf_counter(), sm_mhz=float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                       mem_mhz=float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)), reasons=int(self._reasons(h)),
                       pcie_gen=gen, pcie_width=width)


class CpuFreqReader:
    """The CPUs this process may run on: their mean current frequency, and whether a thermal throttle counter
    grew since the first reading.  ``root`` is the sysfs folder of the CPUs (tests pass another)."""

    #: the reason bit a grown thermal counter sets (NVML's software thermal slowdown)
    THERMAL = 0x20

    def __init__(self, device: str = "cpu", root: str = "/sys/devices/system/cpu",
                 cpus: Optional[Iterable[int]] = None) -> None:
        self.device, self.root = device, root
        self.cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        self._first: Optional[int] = None

    def _freqs(self) -> list[float]:
        out = []
        for c in self.cpus:
            try:
                with open(f"{self.root}/cpu{c}/cpufreq/scaling_cur_freq", encoding="ascii") as f:
                    out.append(int(f.read().strip()) / 1000)  # kHz -> MHz
            except (OSError, ValueError):
                continue
        return out

    def _throttles(self) -> Optional[int]:
        total, found = 0, False
        for c in self.cpus:
            for path in glob.glob(f"{self.root}/cpu{c}/thermal_throttle/*_throttle_count"):
                try:
                    with open(path, encoding="ascii") as f:
                        total += int(f.read().strip())
                    found = True
                except (OSError, ValueError):
                    continue
        return total if found else None

    def read(self) -> Optional[Reading]:
        freqs, count = self._freqs(), self._throttles()
        if not freqs and count is None:
            return None
        if self._first is None:
            self._first = count
        grew = count is not None and self._first is not None and count > self._first
        return Reading(t=time.perf_counter(), sm_mhz=sum(freqs) / len(freqs) if freqs else None,
                       reasons=self.THERMAL if grew else 0)


_NVML: dict[str, Any] = {}


def _nvml() -> Any:
    """The pynvml module, initialised once in this process (None where it does not import or init)."""
    if "module" not in _NVML:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML["module"] = pynvml
        except Exception:  # noqa: BLE001 - no NVML: no clock readings
            _NVML["module"] = None
    return _NVML["module"]


def reader_for(device: str, bus_id: Optional[str] = None,
               nvml: Callable[[], Any] = _nvml) -> Optional[Reader]:
    """The reader of ``device`` ("cuda:0", "cpu:1"), or None where nothing can be read.  A CUDA device is found
    in NVML by its PCI ``bus_id`` (torch's numbering need not be NVML's) or, without one, by its number."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        r = CpuFreqReader("cpu")
        return r if r.read() is not None else None
    if kind != "cuda":
        return None
    n = nvml()
    if n is None:
        return None
    try:
        handle = (n.nvmlDeviceGetHandleByPciBusId(bus_id) if bus_id
                  else n.nvmlDeviceGetHandleByIndex(int(index or 0)))
        reader = NvmlReader(n, handle, device)
        reader.read()
        return reader
    except Exception:  # noqa: BLE001
        return None


_READERS: dict[str, Optional[Reader]] = {}


def sampler_for(devices: Iterable[str]) -> Sampler:
    """A sampler of the devices a measurement uses: a CUDA device by NVML (found by torch's PCI bus id), the
    host's CPUs once for every ``cpu:N`` and ``host`` (the CPU variants' logical devices share them).  Readers
    are made once per process; a device nothing can be read of is left out."""
    readers: list[Reader] = []
    for name in dict.fromkeys("cpu" if d.startswith("cpu") or d == "host" else d for d in devices):
        if name not in _READERS:
            _READERS[name] = reader_for(name, _bus_id(name))
        r = _READERS[name]
        if r is not None and r not in readers:
            readers.append(r)
    return Sampler(readers)


def _bus_id(device: str) -> Optional[str]:
    if not device.startswith("cuda:"):
        return None
    from ..env.hardware import torch_bus_ids

    try:
        ids = torch_bus_ids()
        return ids[int(device.split(":")[1])] if ids else None
    except Exception:  # noqa: BLE001 - no bus id: NVML's own numbering
        return None


def clock_info(sampler: Sampler) -> list[dict[str, Any]]:
    """What a measurement keeps of its sampler (``Measurement.info["clocks"]``): the summary of each device
    that gave a reading."""
    return [s.to_dict() for s in sampler.summaries() if s.readings]


def throttle_text(info: Any) -> Optional[str]:
    """``cuda:0 throttled (power cap) in 96% of 301 clock readings: SM 1305-1980 MHz`` for each device that
    throttled during a measurement (its ``info["clocks"]``), joined with "; "; None where none did."""
    clocks = info.get("clocks") if isinstance(info, dict) else None
    texts = []
    for c in clocks if isinstance(clocks, list) else []:
        s = ClockSummary.from_dict(c) if isinstance(c, dict) else None
        if s is not None and s.throttled:
            texts.append(s.text())
    return "; ".join(texts) or None
