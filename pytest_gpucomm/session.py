"""Session state and the measuring fixture's object (``comm``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

import pytest

from .measurement import Measurement
from .settings import DEFAULT_CPU_MAX_SIZE, DEFAULT_GPU_MAX_SIZE, Settings
from .timing import TimingSettings
from .units import SizeError, parse_size

__all__ = ["GpuPair", "Record", "State", "Comm", "STATE_KEY", "CPU_MAX_WORLD"]

#: gloo worlds on CPU may be larger than the logical device count; this bounds them.
CPU_MAX_WORLD = 8


class GpuPair(NamedTuple):
    """An ordered pair of devices, e.g. ("cuda:0", "cuda:1"); its test id is "0->1"."""

    src: str
    dst: str

    @property
    def id(self) -> str:
        return f"{self.src.split(':')[-1]}->{self.dst.split(':')[-1]}"


@dataclass
class Record:
    """One measurement made by one test, with what was checked of it."""

    nodeid: str
    measurement: Measurement
    checks: list[str] = field(default_factory=list)  # human lines: "bandwidth >= 40 GB/s: ok"
    status: str = "measured"  # measured | ok | FAIL | later: REGRESSION, improved, new, noisy
    baseline: Optional[dict[str, Any]] = None


class State:
    """Everything gpucomm keeps for one pytest session (in config.stash)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.records: list[Record] = []
        self._info: Any = None
        self._buffers: Any = None
        self.pools: dict[int, Any] = {}
        self.used = False

    # -- lazily created, so nothing heavy happens unless a gpucomm fixture or marker is used ---------
    @property
    def info(self) -> Any:
        if self._info is None:
            from .hardware import detect

            self.used = True
            try:
                self._info = detect(self.settings.device)
            except RuntimeError as e:
                raise pytest.UsageError(str(e)) from None
        return self._info

    @property
    def buffers(self) -> Any:
        if self._buffers is None:
            from .ops.copies import BufferPool

            self._buffers = BufferPool()
        return self._buffers

    @property
    def timing(self) -> TimingSettings:
        return TimingSettings(min_time_s=self.settings.min_time_s)

    @property
    def max_size(self) -> int:
        if self.settings.max_size is not None:
            return self.settings.max_size
        return DEFAULT_GPU_MAX_SIZE if self.info.kind == "gpu" else DEFAULT_CPU_MAX_SIZE

    def max_world(self) -> int:
        """The largest process group: one rank per GPU, or up to CPU_MAX_WORLD gloo ranks on CPU."""
        return self.info.count if self.info.kind == "gpu" else CPU_MAX_WORLD

    def default_world(self) -> int:
        return self.info.count

    def world_skip_reason(self, world: int) -> str:
        if self.info.kind == "gpu":
            return f"needs a world of {world} ranks (one per GPU), found {self.info.count} GPUs"
        return f"needs a world of {world} ranks, at most {CPU_MAX_WORLD} gloo ranks run on CPU"

    def devices(self) -> list[str]:
        return self.info.device_names()

    def close(self) -> None:
        for pool in list(self.pools.values()):
            try:
                pool.close()
            except Exception:  # pragma: no cover - best effort at teardown
                pass
        self.pools.clear()
        if self._buffers is not None:
            self._buffers.clear()


STATE_KEY = pytest.StashKey[State]()


class Comm:
    """The measuring fixture: each method runs one measurement and returns a :class:`Measurement`.

    The size of a measurement is, in this order: the ``size`` argument, the test's ``size`` parameter
    (from ``@sizes``), the ``size=`` of its ``@bandwidth`` or ``@latency`` marker.
    """

    def __init__(self, state: State, request: pytest.FixtureRequest) -> None:
        self._state = state
        self._request = request
        self.measurements: list[Measurement] = []

    # -- helpers ----------------------------------------------------------------------------------
    def _size(self, size: Any, what: str) -> int:
        where = f"{self._request.node.nodeid} comm.{what}(size=...)"
        if size is not None:
            try:
                return parse_size(size, where)
            except SizeError as e:
                raise pytest.UsageError(str(e)) from None
        callspec = getattr(self._request.node, "callspec", None)
        if callspec is not None and "size" in callspec.params:
            return int(callspec.params["size"])
        from .markers import read_bandwidth, read_latency

        for spec in (read_bandwidth(self._request.node), read_latency(self._request.node)):
            if spec is not None and spec.size is not None:
                return spec.size
        raise pytest.UsageError(
            f"{self._request.node.nodeid}: comm.{what}() has no size: pass size=, parametrize with @sizes, "
            "or give size= to @bandwidth/@latency"
        )

    def _record(self, m: Measurement) -> Measurement:
        self.measurements.append(m)
        self._state.records.append(Record(nodeid=self._request.node.nodeid, measurement=m))
        return m

    def _pair(self, pair: Any, dst: Optional[str]) -> GpuPair:
        if isinstance(pair, GpuPair):
            return pair
        if isinstance(pair, (tuple, list)) and len(pair) == 2 and dst is None:
            return GpuPair(self._dev(pair[0]), self._dev(pair[1]))
        if dst is not None:
            return GpuPair(self._dev(pair), self._dev(dst))
        raise pytest.UsageError(f"{self._request.node.nodeid}: comm.copy() needs a gpu_pair or src and dst devices")

    def _dev(self, d: Any) -> str:
        devs = self._state.devices()
        if isinstance(d, int):
            name = f"{self._state.info.torch_device_type}:{d}"
        else:
            name = str(d)
        if name not in devs:
            raise pytest.UsageError(
                f"{self._request.node.nodeid}: device {d!r} is not one of the devices in use ({', '.join(devs)})"
            )
        return name

    # -- copies -----------------------------------------------------------------------------------
    def copy(self, pair: Any, size: Any = None, *, dst: Optional[str] = None, both_ways: bool = False) -> Measurement:
        """Peer copy pair.src -> pair.dst (both directions at once with both_ways=True)."""
        from .ops.copies import measure_copy

        p = self._pair(pair, dst)
        n = self._size(size, "copy")
        return self._record(measure_copy(p.src, p.dst, n, self._state.timing, self._state.buffers, both_ways))

    def copy_both_ways(self, pair: Any, size: Any = None) -> Measurement:
        return self.copy(pair, size, both_ways=True)

    def host_to_device(self, device: Any, size: Any = None) -> Measurement:
        """Pinned host memory -> device."""
        from .ops.copies import measure_host_device

        d = self._dev(device)
        return self._record(
            measure_host_device(d, self._size(size, "host_to_device"), "h2d", self._state.timing, self._state.buffers)
        )

    def device_to_host(self, device: Any, size: Any = None) -> Measurement:
        """Device -> pinned host memory."""
        from .ops.copies import measure_host_device

        d = self._dev(device)
        return self._record(
            measure_host_device(d, self._size(size, "device_to_host"), "d2h", self._state.timing, self._state.buffers)
        )
