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
    from .measurement import Measurement, Remeasure

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

    def _record(self, m: Measurement, fresh: Optional[Callable[[], Measurement]], same: Callable[[], Measurement],
                fresh_how: str, same_how: str) -> Measurement:
        """Keep ``m``; the gate may call the record's ``redo`` to measure once more: ``fresh`` measures in a
        new process state (a new process group, a new process), so that a per-session condition -- an
        algorithm or a buffer placement chosen at set-up -- does not decide the verdict twice; ``same``
        measures in the current one, once the session's fresh re-measures are used up (see
        :meth:`State.remeasure`).  ``fresh_how`` and ``same_how`` say where ("in a new process").  Without
        ``fresh`` (a state that cannot be made anew), every re-measure is ``same``, not fresh, and ``same_how``
        says why."""

        def redo() -> "Remeasure":
            if fresh is None:
                from .measurement import Remeasure

                return Remeasure(same(), fresh=False, how=same_how)
            return self._state.remeasure(fresh, same, fresh_how, same_how)

        self._state.records.append(Record(nodeid=self._request.node.nodeid, measurement=m, redo=redo))
        return m

    def _copy(self, spec: dict[str, Any]) -> Measurement:
        """Measure the copy ``spec`` (``ops.copies.copy_spec``) here; its fresh re-measure runs in a new
        process, its other re-measures here with new buffers.  In launched mode, on every node at once
        (see :meth:`_copy_on_every_node`)."""
        from .ops.copies import measure_spec

        state = self._state
        if state.launch is not None:
            return self._copy_on_every_node(spec)

        def here() -> Measurement:
            return measure_spec(spec, state.timing, state.buffers)

        def fresh() -> Measurement:
            state.buffers.clear()  # this process's buffers are not needed while the new one measures
            return state.copy_in_new_process(spec, label=self._request.node.nodeid)

        def same() -> Measurement:
            state.buffers.clear()
            return here()

        return self._record(here(), fresh, same, "in a new process", "in the same process")

    def _copy_on_every_node(self, spec: dict[str, Any]) -> Measurement:
        """Launched mode: the copy ``spec`` between the devices of each node, on every node at once.

        On each node one rank measures (``ops.copies.measuring_local_rank``: the rank whose GPU is the
        copy's source or device; local rank 0 for host buffers) while the node's other ranks wait; then every
        rank has every node's measurement, labelled with its node and host (``info["node"]``, ``["host"]``,
        ``["rank"]``), and records one row per node -- 16 nodes, 16 rows of this test.  The test gets its own
        node's measurement.  A copy that raises on one rank fails the test on every rank, naming that rank,
        its host and node.

        The re-measure of a node's row measures that node's copy again, by the same rank in the same process
        with new buffers, while every rank waits for it: a launched job's ranks re-measure together, so it is
        not made in a new process."""
        state, la = self._state, self._state.launch
        assert la is not None
        same_how = ("in the same process, with new buffers: in launched mode every rank re-measures together, "
                    "so the copy is measured again by the same rank of its node, not in a new process")
        mine: Optional[Measurement] = None
        for m in self._measure_on_nodes(spec):
            node = int(m.info["node"])

            def same(node: int = node) -> Measurement:
                state.buffers.clear()
                return self._measure_on_nodes(spec, node)[0]

            self._record(m, None, same, "", same_how)
            if node == la.node_rank:
                mine = m
        assert mine is not None  # node_measurements gives one measurement for every node with a rank
        return mine

    def _measure_on_nodes(self, spec: dict[str, Any], only_node: Optional[int] = None) -> list[Measurement]:
        """Every node's measurement of the copy ``spec`` (launched mode), ordered by node; with
        ``only_node``, that node's alone (the other nodes' ranks wait).  Called by every rank at once."""
        import traceback

        from .ops.copies import CopyError, measure_spec, measuring_local_rank, node_measurements
        from .ranks import RankFailure

        state, la, launched = self._state, self._state.launch, self._state.launched
        assert la is not None and launched is not None
        launched.start(state.info)  # joined at collection; a no-op here
        label = f"{self._request.node.nodeid}: {spec['copy']} copy {'->'.join(spec['devices'])}"
        outcome: tuple[int, bool, Any] = (la.node_rank, True, None)
        if la.local_rank == measuring_local_rank(spec, la.local_world_size) \
                and (only_node is None or only_node == la.node_rank):
            try:
                m = measure_spec(spec, state.timing, state.buffers)
                m.info.update(node=la.node_rank, host=la.host, rank=la.rank)
                outcome = (la.node_rank, True, m.to_dict(with_samples=True))
            except Exception:  # every rank waits in the exchange below: it must hear of the failure
                outcome = (la.node_rank, False, traceback.format_exc())
        try:
            every = launched.allgather(outcome)
        except Exception as e:  # a rank gone or the control group broken (its timeout)
            failure = (f"{label}: the ranks of this {la.launcher} job could not exchange the copy's results: "
                       f"{type(e).__name__}: {e}")
        else:
            try:
                return node_measurements(every, launched.hosts, label, only_node)
            except (RankFailure, CopyError) as e:  # the copy raised on some rank, or no rank of a node measured
                failure = str(e)
        pytest.fail(failure, pytrace=False)  # outside the except block: no chained traceback

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
        from .ops.copies import PEER, copy_spec

        p = self._pair(pair, dst)
        n = self._size(size, "copy")
        return self._copy(copy_spec(PEER, [p.src, p.dst], n, both_ways=both_ways))

    def copy_both_ways(self, pair: Any, size: Any = None) -> Measurement:
        return self.copy(pair, size, both_ways=True)

    def host_to_device(self, device: Any, size: Any = None) -> Measurement:
        """Pinned host memory -> device."""
        from .ops.copies import HOST_DEVICE, copy_spec

        d, n = self._dev(device), self._size(size, "host_to_device")
        return self._copy(copy_spec(HOST_DEVICE, [d], n, direction="h2d"))

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

        def fresh() -> Measurement:
            group.restart()  # new ranks: the next run starts a new process group
            return run()

        if not group.restartable:  # launched mode: the job's process group lives as long as the session
            return self._record(run(), None, run, "",
                                "in the same process group: the job's process group (launched mode) cannot be "
                                "restarted")
        return self._record(run(), fresh, run, "in a new process group", "in the same process group")

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
        from .ops.copies import HOST_DEVICE, copy_spec

        d, n = self._dev(device), self._size(size, "device_to_host")
        return self._copy(copy_spec(HOST_DEVICE, [d], n, direction="d2h"))
