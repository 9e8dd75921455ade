"""Clocks and throttling during a measurement: sampled from a thread while the timed batches run.

A bandwidth that dropped because the GPU ran at a lower clock (a power cap, heat, a hardware slowdown) is not
the link's fault, and the verdict should say so.  :class:`Sampler` reads the device's clocks and its
throttle reasons every :data:`INTERVAL_S` from a daemon thread while :func:`pytest_gpucomm.ops.timing.measure`
takes its samples, and once at the start and end of them; :class:`ClockSummary` is what a measurement keeps
(``Measurement.info["clocks"]``): the range of the SM and memory clocks, the reasons seen and in what share of
the readings, and the PCIe link as read under load.

Readers, one per device kind (:func:`reader_for`):

* NVIDIA: NVML (``pynvml``): ``nvmlDeviceGetClockInfo`` (SM, memory), ``nvmlDeviceGetCurrentClocksEventReasons``
  (``...ThrottleReasons`` before NVML 12.5), and the PCIe link's generation and width now.  One reading costs
  about 30 us (measured on an H200: three calls); at one reading per 20 ms that is 0.15 % of one core.
* AMD (a ROCm build of torch): AMD SMI's Python package (``amdsmi``), as its API reference documents it:
  ``amdsmi_get_clock_info`` (GFX as the "SM" clock, MEM; ``clk``, ``cur_clk`` before ROCm 6.2), the throttle
  residency accumulators of ``amdsmi_get_gpu_metrics_info`` (``ppt_residency_acc``, ``socket_thm_residency_acc``,
  ...: MI300 and later; one that grew between two readings is that reason) or its ``throttle_status`` (MI200,
  Navi), and the PCIe link of ``amdsmi_get_pcie_info``.  Not run on an AMD GPU yet (tested on a stand-in with
  the package's API): its cost per reading is not measured.  The package is initialised once per process,
  after the fingerprint's own session of it, and shut down at its exit.
* CPU (the CPU variants): the current frequency of the CPUs this process may run on
  (``/sys/devices/system/cpu/cpuN/cpufreq/scaling_cur_freq``) as the "SM" clock and the kernel's thermal
  throttle counters (``thermal_throttle/*_throttle_count``): a counter that grew during the measurement is
  a thermal throttle.  Where the kernel exposes neither (many virtual machines), nothing is read.

A reading whose reasons hold anything but "idle" counts as throttled ("any reason other than idle": a power
cap, the application clocks' setting, a thermal or hardware slowdown, sync boost).  Nothing here raises out of
a measurement: a reader that fails stops reading and the summary says what was read.
"""

from __future__ import annotations

import atexit
import glob
import os
import threading
import time
from types import ModuleType
from typing import Callable, Iterable, Optional, Protocol, Sequence, TypeGuard

from ..env.clocks import GEN_OF_GTS, ClockSummary, Reading, summarize

__all__ = ["INTERVAL_S", "Reader", "Sampler", "reader_for", "sampler_for", "clock_info", "NvmlReader", "AmdsmiReader",
           "CpuFreqReader", "Reading", "ClockSummary", "summarize"]

#: seconds between two readings of the sampling thread
INTERVAL_S = 0.02
class Reader(Protocol):
    device: str

    def read(self) -> Optional[Reading]:
        """One reading now, or None where nothing can be read (then the sampler stops asking)."""


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

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summaries(self) -> list[ClockSummary]:
        return [summarize(r.device, rs) for r, rs in zip(self._readers, self._readings)]


# ------------------------------------------------------------------------------------------- readers


class NvmlReader:
    """One NVIDIA GPU through NVML; ``nvml`` is the ``pynvml`` module (initialised here, once per process)."""

    def __init__(self, nvml: ModuleType, handle: object, device: str) -> None:
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


class AmdsmiReader:
    """One AMD GPU through AMD SMI; ``smi`` is the ``amdsmi`` module (initialised), ``handle`` its processor
    handle.  The reasons come from the GPU metrics (``amdsmi_get_gpu_metrics_info``, one call a reading, no
    wait): a throttle residency accumulator that grew since the previous reading sets its reason (MI300 and
    later), else a true ``throttle_status`` (earlier GPUs); ``amdsmi_get_violation_status`` is not called, as it
    waits about 100 ms between two readings of the same metrics.  A call that raises is not asked again (each
    clock, the metrics, the PCIe link on its own); a field that reads "N/A" once is read again next time."""

    #: the throttle residency accumulators of the GPU metrics and their reason bits (``env.clocks.REASONS``)
    RESIDENCIES = (("prochot_residency_acc", 0x1000), ("ppt_residency_acc", 0x2000),
                   ("socket_thm_residency_acc", 0x4000), ("vr_thm_residency_acc", 0x8000),
                   ("hbm_thm_residency_acc", 0x10000))
    #: the bit of a true ``throttle_status`` (GPUs before MI300, whose metrics have no residencies)
    THROTTLE_STATUS = 0x40000

    def __init__(self, smi: ModuleType, handle: object, device: str) -> None:
        self.smi, self.handle, self.device = smi, handle, device
        self._asked = {"GFX": True, "MEM": True, "metrics": True, "pcie": True}
        self._last: dict[str, int] = {}

    def _clock(self, kind: str) -> Optional[float]:
        if not self._asked[kind]:
            return None
        try:
            c = self.smi.amdsmi_get_clock_info(self.handle, getattr(self.smi.AmdSmiClkType, kind))
        except Exception:  # noqa: BLE001 - this clock not supported: the other still counts
            self._asked[kind] = False
            return None
        v = c.get("clk", c.get("cur_clk")) if isinstance(c, dict) else None
        return float(v) if _count(v) or isinstance(v, float) else None  # "N/A": not read

    def _reason_bits(self) -> int:
        if not self._asked["metrics"]:
            return 0
        try:
            m = self.smi.amdsmi_get_gpu_metrics_info(self.handle)
        except Exception:  # noqa: BLE001 - no metrics: the clocks still count
            self._asked["metrics"] = False
            return 0
        bits, seen = 0, False
        for key, bit in self.RESIDENCIES:
            v = m.get(key) if isinstance(m, dict) else None
            if _count(v):
                seen = True
                if key in self._last and v > self._last[key]:
                    bits |= bit
                self._last[key] = v
        if seen:
            return bits
        status = m.get("throttle_status") if isinstance(m, dict) else None
        return self.THROTTLE_STATUS if _count(status) and status else 0

    def _link(self) -> tuple[Optional[int], Optional[int]]:
        if self._asked["pcie"]:
            try:
                m = self.smi.amdsmi_get_pcie_info(self.handle).get("pcie_metric") or {}
            except Exception:  # noqa: BLE001
                self._asked["pcie"] = False
                return None, None
            speed, width = m.get("pcie_speed"), m.get("pcie_width")
            gen = GEN_OF_GTS.get(speed / 1000) if _count(speed) else None
            if gen is not None and _count(width):
                return gen, width
        return None, None

    def read(self) -> Optional[Reading]:
        sm, mem = self._clock("GFX"), self._clock("MEM")
        if sm is None and mem is None:
            return None
        gen, width = self._link()
        return Reading(t=time.perf_counter(), sm_mhz=sm, mem_mhz=mem, reasons=self._reason_bits(), pcie_gen=gen,
                       pcie_width=width)


def _count(v: object) -> TypeGuard[int]:
    """Whether ``v`` is a whole number (not a bool, not AMD SMI's "N/A")."""
    return isinstance(v, int) and not isinstance(v, bool)


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


_NVML: dict[str, Optional[ModuleType]] = {}


def _nvml() -> Optional[ModuleType]:
    """The pynvml module, initialised once in this process (None where it does not import or init)."""
    if "module" not in _NVML:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML["module"] = pynvml
        except Exception:  # noqa: BLE001 - no NVML: no clock readings
            _NVML["module"] = None
    return _NVML["module"]


def _amdsmi() -> Optional[ModuleType]:
    """The amdsmi module, initialised once in this process and shut down at its exit (None where it does not
    import or init)."""
    if "module" not in _AMDSMI:
        try:
            from ..env.hardware import amd_reading

            amd_reading()  # the fingerprint's own AMD SMI session (init ... shut_down) first, once per process
        except Exception:  # noqa: BLE001
            pass
        try:
            import amdsmi

            amdsmi.amdsmi_init()
            atexit.register(amdsmi.amdsmi_shut_down)
            _AMDSMI["module"] = amdsmi
        except Exception:  # noqa: BLE001 - no AMD SMI: no clock readings
            _AMDSMI["module"] = None
    return _AMDSMI["module"]


_AMDSMI: dict[str, Optional[ModuleType]] = {}


def _rocm() -> bool:
    import torch

    return getattr(torch.version, "hip", None) is not None


def _same_bdf(a: object, b: str) -> bool:
    """Two PCI addresses equal whatever the width of their domain (``0000:c1:00.0``, NVML's ``00000000:...``)."""
    def key(x: str) -> tuple[int, ...]:
        dom, bus, rest = x.strip().lower().split(":")
        dev, fn = rest.split(".")
        return int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16)

    try:
        return key(str(a)) == key(b)
    except ValueError:
        return False


def _amd_reader(smi: ModuleType, device: str, index: str, bus_id: Optional[str]) -> Optional[Reader]:
    handles = list(smi.amdsmi_get_processor_handles())
    if bus_id:
        found = [h for h in handles if _same_bdf(smi.amdsmi_get_gpu_device_bdf(h), bus_id)]
        handle = found[0] if found else None
    else:
        handle = handles[int(index or 0)] if int(index or 0) < len(handles) else None
    if handle is None:
        return None
    reader = AmdsmiReader(smi, handle, device)
    return reader if reader.read() is not None else None


def reader_for(device: str, bus_id: Optional[str] = None, nvml: Callable[[], Optional[ModuleType]] = _nvml,
               amd: Callable[[], Optional[ModuleType]] = _amdsmi, rocm: Callable[[], bool] = _rocm) -> Optional[Reader]:
    """The reader of ``device`` ("cuda:0", "cpu:1"), or None where nothing can be read.  A CUDA device is found
    in NVML -- or in AMD SMI on a ROCm build of torch -- by its PCI ``bus_id`` (torch's numbering need not be the
    library's) or, without one, by its number."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        r = CpuFreqReader("cpu")
        return r if r.read() is not None else None
    if kind != "cuda":
        return None
    if rocm():
        smi = amd()
        try:
            return _amd_reader(smi, device, index, bus_id) if smi is not None else None
        except Exception:  # noqa: BLE001
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


def clock_info(sampler: Sampler) -> list[dict[str, object]]:
    """What a measurement keeps of its sampler (``Measurement.info["clocks"]``): the summary of each device
    that gave a reading."""
    return [s.to_dict() for s in sampler.summaries() if s.readings]


