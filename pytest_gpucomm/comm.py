"""The ``comm`` fixture's object: each method runs one measurement and returns a ``Measurement``.

The collective methods (``comm.all_reduce(group, size)``, ...) are made from the op table
(:data:`pytest_gpucomm.ops.collectives.OPS`): an op added there is a method here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

import pytest

from .group import ProcessGroup
from .markers import marks_of
from .ops.collectives import OPS, add_op_methods
from .state import Record, State
from .units import SizeError, parse_size
from .vocab import DTYPE_ALIASES, DTYPES

if TYPE_CHECKING:
    from .measurement import Measurement

__all__ = ["Comm", "GpuPair"]


class GpuPair(NamedTuple):
    """An ordered pair of devices, e.g. ("cuda:0", "cuda:1"); its test id is "0->1"."""

    src: str
    dst: str

    @property
    def id(self) -> str:
        return f"{self.src.split(':')[-1]}->{self.dst.split(':')[-1]}"


def _size_or_usage_error(value: Any, where: str) -> int:
    try:
        return parse_size(value, where)
    except SizeError as e:
        raise pytest.UsageError(str(e)) from None


@add_op_methods
class Comm:
    """The measuring fixture: each method runs one measurement and returns a :class:`Measurement`.

    The size of a measurement is, in this order: the ``size`` argument, the test's ``size`` parameter
    (from ``@sizes``), the ``size=`` of its ``@bandwidth`` or ``@latency`` marker.
    """

    def __init__(self, state: State, request: pytest.FixtureRequest) -> None:
        self._state = state
        self._request = request

    # -- helpers ----------------------------------------------------------------------------------
    def _size(self, size: Any, what: str) -> int:
        nodeid = self._request.node.nodeid
        if size is not None:
            return _size_or_usage_error(size, f"{nodeid} comm.{what}(size=...)")
        callspec = getattr(self._request.node, "callspec", None)
        if callspec is not None and "size" in callspec.params:
            return _size_or_usage_error(callspec.params["size"], f"{nodeid} parameter 'size'")
        marks = marks_of(self._request.node)
        for spec in (marks.bandwidth, marks.latency):
            if spec is not None and spec.size is not None:
                return spec.size
        raise pytest.UsageError(
            f"{self._request.node.nodeid}: comm.{what}() has no size: pass size=, parametrize with @sizes, "
            "or give size= to @bandwidth/@latency"
        )

    def _record(self, m: Measurement, run: Callable[[], Measurement], fresh: Callable[[], None]) -> Measurement:
        """Keep ``m``; the gate may call ``redo`` to measure once more, after ``fresh`` has discarded the
        state a run keeps (buffers, the process group), so that a per-session condition -- an algorithm or
        a buffer placement chosen at set-up -- does not decide the verdict twice."""

        def redo() -> Measurement:
            fresh()
            return run()

        self._state.records.append(Record(nodeid=self._request.node.nodeid, measurement=m, redo=redo))
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

        def run() -> Measurement:
            return measure_copy(p.src, p.dst, n, self._state.timing, self._state.buffers, both_ways)

        return self._record(run(), run, self._state.buffers.clear)

    def copy_both_ways(self, pair: Any, size: Any = None) -> Measurement:
        return self.copy(pair, size, both_ways=True)

    def host_to_device(self, device: Any, size: Any = None) -> Measurement:
        """Pinned host memory -> device."""
        from .ops.copies import measure_host_device

        d, n = self._dev(device), self._size(size, "host_to_device")

        def run() -> Measurement:
            return measure_host_device(d, n, "h2d", self._state.timing, self._state.buffers)

        return self._record(run(), run, self._state.buffers.clear)

    # -- collectives ------------------------------------------------------------------------------
    def collective(self, op: str, group: "ProcessGroup", size: Any = None, *, dtype: str = "float32",
                   in_place: Optional[bool] = None) -> Measurement:
        """Time ``op`` over ``group`` at ``size`` bytes (S as nccl-tests defines it) and check its result."""
        nodeid = self._request.node.nodeid
        if op not in OPS:
            raise pytest.UsageError(f"{nodeid}: unknown collective {op!r}; known: {', '.join(OPS)}")
        dtype = DTYPE_ALIASES.get(str(dtype).lower(), dtype)
        if dtype not in DTYPES:
            raise pytest.UsageError(f"{nodeid}: unknown dtype {dtype!r} for {op}; known: {', '.join(DTYPES)}")
        if not isinstance(group, ProcessGroup):
            raise pytest.UsageError(f"{nodeid}: comm.{op}() needs the process_group fixture, got {group!r}")
        n = self._size(size, op)
        spec = OPS[op]
        ip = spec.default_in_place if in_place is None else bool(in_place)
        form = "in_place" if ip else "out_of_place"
        if form not in spec.forms:
            raise pytest.UsageError(f"{nodeid}: {op} has no {form.replace('_', '-')} form in torch.distributed")
        kwargs = {"op": op, "size_bytes": n, "dtype": dtype, "in_place": ip,
                  "min_time_s": self._state.settings.min_time_s}

        def run() -> Measurement:
            return self._collective_once(op, group, kwargs, n, dtype)

        return self._record(run(), run, lambda: self._state.restart_for_remeasure(group))

    def _collective_once(self, op: str, group: ProcessGroup, kwargs: dict[str, Any], n: int,
                         dtype: str) -> "Measurement":
        from .ops.collectives import WrongResult, to_measurement

        results = group.run("pytest_gpucomm.ops.collectives:bench", kwargs, label=self._request.node.nodeid)
        try:
            return to_measurement(results, op=op, backend=group.backend, dtype=dtype, requested_bytes=n)
        except WrongResult as e:
            failure = str(e)
        pytest.fail(failure, pytrace=False)  # outside the except block: no chained traceback

    def device_to_host(self, device: Any, size: Any = None) -> Measurement:
        """Device -> pinned host memory."""
        from .ops.copies import measure_host_device

        d, n = self._dev(device), self._size(size, "device_to_host")

        def run() -> Measurement:
            return measure_host_device(d, n, "d2h", self._state.timing, self._state.buffers)

        return self._record(run(), run, self._state.buffers.clear)

