"""Session state and the measuring fixture's object (``comm``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import pytest

from .measurement import Measurement
from .settings import Settings
from .vocab import CPU_MAX_WORLD, DEFAULT_CPU_MAX_SIZE, DEFAULT_GPU_MAX_SIZE, MAX_REMEASURE_RESTARTS
from .timing import TimingSettings
from .units import SizeError, describe_size, parse_size

__all__ = ["GpuPair", "Record", "State", "Comm", "STATE_KEY", "CPU_MAX_WORLD"]



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
    status: str = "measured"  # measured | ok | FAIL | gate verdicts: ok, REGRESSION, improved, new, noisy...
    baseline: Optional[dict[str, Any]] = None
    redo: Optional[Callable[[], Measurement]] = None  # the same measurement again (the gate's re-measure)


class State:
    """Everything gpucomm keeps for one pytest session (in config.stash)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        from .gate import Gate, GateSettings

        self.config = config
        self.settings = settings
        base_dir = Path(settings.baseline_dir) if settings.baseline_dir else Path(config.rootpath) / "baselines"
        self.gate = Gate(GateSettings(
            spec=settings.baseline, save=settings.baseline_save, search_dirs=(base_dir,),
            max_runs=settings.baseline_runs, tolerance=settings.tolerance, alpha=settings.alpha,
            strict=settings.baseline_strict,
        ))
        self._fingerprint: Optional[dict[str, Any]] = None
        self.notes: list[str] = []  # lines for the end of the terminal summary
        self.records: list[Record] = []
        self.group_restarts = 0  # process groups restarted for the gate's re-measures (MAX_REMEASURE_RESTARTS)
        self._info: Any = None
        self._buffers: Any = None
        self.pools: dict[int, Any] = {}

    # -- lazily created, so nothing heavy happens unless a gpucomm fixture or marker is used ---------
    @property
    def info(self) -> Any:
        if self._info is None:
            from .hardware import detect

            try:
                self._info = detect(self.settings.device)
            except RuntimeError as e:
                raise pytest.UsageError(str(e)) from None
        return self._info

    @property
    def fingerprint(self) -> dict[str, Any]:
        if self._fingerprint is None:
            from .hardware import fingerprint

            self._fingerprint = fingerprint(self.info)
        return self._fingerprint

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

    def group(self, world: int, timeout_s: Optional[float] = None, label: str = "") -> "ProcessGroup":
        """The process group of ``world`` ranks: one pool of workers per world size and session."""
        if world > self.max_world():
            raise pytest.UsageError(self.world_skip_reason(world))
        info = self.info
        if world not in self.pools:
            from .ops.collectives import worker_env
            from .ranks import RankPool

            self.pools[world] = RankPool(
                world,
                backend=info.backend,
                device=info.torch_device_type,
                env=worker_env(info.backend),
                start_timeout=max(120.0, self.settings.timeout_s),
            )
        return ProcessGroup(self.pools[world], info.backend, timeout_s or self.settings.timeout_s, label)

    def restart_for_remeasure(self, group: "ProcessGroup") -> None:
        """A new process group for the gate's re-measure of a collective -- for the first
        ``MAX_REMEASURE_RESTARTS`` of the session; later ones keep the group (the bench allocates new
        buffers anyway), since a change that slowed every collective would otherwise pay a group start
        for each."""
        if self.group_restarts < MAX_REMEASURE_RESTARTS:
            self.group_restarts += 1
            group.restart()

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



class ProcessGroup:
    """What the ``process_group`` fixture gives a test: a world of ranks that runs tasks.

    ``run("module:function", kwargs)`` calls ``function(ctx, **kwargs)`` on every rank and returns the
    per-rank results, ordered by rank.  The ranks are worker processes shared by every test of the
    session with the same world size; a failing, hanging or crashing rank fails the test with that
    rank's traceback or stack, and the workers are restarted for the next test.
    """

    def __init__(self, executor: Any, backend: str, timeout_s: float, label: str = "") -> None:
        self.executor = executor
        self.backend = backend
        self.timeout_s = timeout_s
        self.label = label  # the test id, named in failure messages

    @property
    def world_size(self) -> int:
        return int(self.executor.world_size)

    def run(self, task: str, kwargs: Optional[dict[str, Any]] = None, *, timeout: Optional[float] = None,
            label: str = "") -> list[Any]:
        from .ranks import RankFailure

        if not label:
            label = f"{self.label} (task {task})" if self.label else task
        try:
            return list(self.executor.run(task, kwargs or {}, timeout=timeout or self.timeout_s, label=label))
        except RankFailure as e:
            failure = str(e)
        pytest.fail(failure, pytrace=False)

    def restart(self) -> None:
        """Stop the ranks; the next run() starts them again with a new process group."""
        close = getattr(self.executor, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        return f"ProcessGroup(world_size={self.world_size}, backend={self.backend!r})"



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
        from .ops.collectives import DTYPES, OPS

        nodeid = self._request.node.nodeid
        if op not in OPS:
            raise pytest.UsageError(f"{nodeid}: unknown collective {op!r}; known: {', '.join(OPS)}")
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

    def _collective_once(self, op: str, group: "ProcessGroup", kwargs: dict[str, Any], n: int,
                         dtype: str) -> Measurement:
        from .ops.collectives import WrongResult, to_measurement

        results = group.run("pytest_gpucomm.ops.collectives:bench", kwargs, label=self._request.node.nodeid)
        try:
            return to_measurement(results, op=op, backend=group.backend, dtype=dtype, requested_bytes=n)
        except WrongResult as e:
            pytest.fail(str(e), pytrace=False)

    def all_reduce(self, group: "ProcessGroup", size: Any = None, **kw: Any) -> Measurement:
        return self.collective("all_reduce", group, size, **kw)

    def all_gather(self, group: "ProcessGroup", size: Any = None, **kw: Any) -> Measurement:
        return self.collective("all_gather", group, size, **kw)

    def reduce_scatter(self, group: "ProcessGroup", size: Any = None, **kw: Any) -> Measurement:
        return self.collective("reduce_scatter", group, size, **kw)

    def broadcast(self, group: "ProcessGroup", size: Any = None, **kw: Any) -> Measurement:
        return self.collective("broadcast", group, size, **kw)

    def reduce(self, group: "ProcessGroup", size: Any = None, **kw: Any) -> Measurement:
        return self.collective("reduce", group, size, **kw)

    def all_to_all(self, group: "ProcessGroup", size: Any = None, **kw: Any) -> Measurement:
        return self.collective("all_to_all", group, size, **kw)

    def send_recv(self, group: "ProcessGroup", size: Any = None, **kw: Any) -> Measurement:
        """Every rank sends to the next and receives from the previous at once (nccl-tests sendrecv)."""
        return self.collective("send_recv", group, size, **kw)

    def device_to_host(self, device: Any, size: Any = None) -> Measurement:
        """Device -> pinned host memory."""
        from .ops.copies import measure_host_device

        d, n = self._dev(device), self._size(size, "device_to_host")

        def run() -> Measurement:
            return measure_host_device(d, n, "d2h", self._state.timing, self._state.buffers)

        return self._record(run(), run, self._state.buffers.clear)
