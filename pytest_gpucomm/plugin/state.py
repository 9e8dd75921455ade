"""What gpucomm keeps for one pytest session: settings, the detected hardware, the gate, the rank pools,
and a :class:`Record` for every measurement a test made.

Nothing heavy happens on construction: the hardware is detected, torch imported and rank pools started
only when a test first uses a gpucomm fixture or marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

import pytest

from .. import vocab
from ..measurement import Record
from .settings import Settings
from ..vocab import (CPU_MAX_WORLD, DEFAULT_BASELINE_DIR, DEFAULT_CPU_MAX_SIZE, DEFAULT_GPU_MAX_SIZE,
                    RANK_START_TIMEOUT_S, Status)

if TYPE_CHECKING:
    from ..gate import Gate
    from .group import ProcessGroup
    from ..env.hardware import DeviceInfo
    from ..env.launch import Launch
    from .launched import LaunchedSession
    from ..measurement import Measurement, Remeasure
    from ..ops.copies import BufferPool
    from ..ops.timing import TimingSettings

__all__ = ["Record", "State", "STATE_KEY", "state_of", "xdist_refusal"]


def xdist_refusal(kind: str, worker: Optional[str], allowed: bool) -> Optional[str]:
    """Why GPU measurements are refused in this process, or None when they may run.

    Under pytest-xdist every worker (``worker``: its id, e.g. ``gw0``) would start its own copies and
    rank pools on the same GPUs, and the workers would measure each other's traffic.
    """
    if kind != "gpu" or not worker or allowed:
        return None
    return (
        f"gpucomm: refusing to measure GPUs in pytest-xdist worker {worker}: each worker would run its own "
        "copies and rank pools on the same GPUs, so they would measure each other's traffic and every figure "
        "and verdict would be wrong. Run the GPU suites without -n, or pass --gpucomm-allow-xdist "
        "(GPUCOMM_ALLOW_XDIST=1) if each worker sees GPUs of its own (CUDA_VISIBLE_DEVICES per worker)."
    )


class State:
    """Everything gpucomm keeps for one pytest session (in ``config.stash[STATE_KEY]``)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self._gate: Optional["Gate"] = None
        self.notes: list[str] = []  # lines for the end of the terminal summary
        self.write_failed = False  # an output (report, baseline) could not be written at the end
        self.levels: Any = None  # the run judged at the levels (gate.levels.RunLevels), set at the session's end
        self.curves: list[dict[str, Any]] = []  # the "curves" section (curves.curve_report), set at its end
        #: the baseline file's document as judged against (before this run saved into it), set at its end
        self.baseline_doc: Optional[dict[str, Any]] = None
        self.plot_paths: list[Any] = []  # the plots drawn at its end (--gpucomm-plots)
        self.from_workers: dict[str, Any] = {}  # under pytest-xdist, in the controller: what workers sent
        self.report_order: dict[str, int] = {}  # test id -> the order its call phase finished in
        self.finished_tests: set[str] = set()  # test ids that ran to their end (set up, called, torn down)
        self.records: list[Record] = []
        self.fresh_remeasures = 0  # the gate's re-measures made in a new process or process group
        self.pools: dict[int, Any] = {}  # world size -> ranks.RankPool
        self.fold_pools: dict[tuple[int, int], Any] = {}  # (world size, fold) -> ranks.RankPool (fold_group)
        self.zygote: Any = None  # ranks.spawn.Zygote: forks every pool's workers (GPUCOMM_RANK_START=fork)
        self._info: Optional["DeviceInfo"] = None
        self._fingerprint: Optional[dict[str, Any]] = None
        self._buffers: Optional["BufferPool"] = None
        #: launched mode (pytest started once per rank by torchrun, srun or mpirun): this rank's place in the
        #: job, and the session's side of it; both None with the rank pool
        self.launch: Optional["Launch"] = None
        self.launched: Optional["LaunchedSession"] = None
        #: why the launcher's variables could not be read (--gpucomm-launch=auto): an error only once a
        #: gpucomm test is collected, so that runs without gpucomm tests are left alone
        self.launch_error: Optional[str] = None
        #: launched mode, on a quiet rank: why its exit status is the job's, printed at the end of its output
        self.launch_notes: list[str] = []
        #: launched mode: node -> (host, fingerprint) of every node of the job (read once gpucomm tests run)
        self.node_fingerprints: dict[int, tuple[str, dict[str, Any]]] = {}
        #: launched mode, on a rank other than 0: the gate runs on rank 0 and this rank follows its decisions
        self.follows_gate = False

    def set_launch(self, launch: Optional["Launch"]) -> None:
        """Run as one rank of a launched job (``launch``), or with the rank pool (None)."""
        self.launch = launch
        self.launched = None
        if launch is not None:  # the rank pool imports nothing of launched mode
            from .launched import LaunchedSession

            self.launched = LaunchedSession(launch, self.settings.timeout_s)

    @property
    def speaks(self) -> bool:
        """Whether this process prints the gpucomm table and writes the reports and the baseline: always
        with the rank pool, only global rank 0 in launched mode."""
        return self.launch is None or self.launch.is_first

    def launch_extra(self) -> Optional[dict[str, Any]]:
        """The job's shape for the JSON report (launched mode), else None."""
        la = self.launch
        if la is None:
            return None
        hosts = self.launched.hosts if self.launched is not None else ()
        from ..env.fingerprint import node_differences

        return {"launcher": la.launcher, "world_size": la.world_size, "n_nodes": la.n_nodes,
                "local_world_size": la.local_world_size, "layout": self.layout or None,
                "master_addr": la.master_addr, "master_port": la.master_port, "hosts": sorted(set(hosts)),
                "nodes": [{"node": n, "host": h, "fingerprint": fp}
                          for n, (h, fp) in sorted(self.node_fingerprints.items())],
                "node_differences": node_differences(self.node_fingerprints)}

    @property
    def layout(self) -> str:
        """A job across nodes: "<nodes>x<ranks per node>", part of the baseline's case keys; else ""."""
        la = self.launch
        return f"{la.n_nodes}x{la.local_world_size}" if la is not None and la.n_nodes > 1 else ""

    def join_job(self) -> None:
        """Launched mode, once the job's process groups exist: read every node's fingerprint (on the node's
        local rank 0; across nodes the run's fingerprint holds them under ``nodes``, so that the change since
        the baseline names the node), and key the gate's cases by the job's layout."""
        assert self.launched is not None
        self.node_fingerprints = self.launched.node_fingerprints(lambda: self.fingerprint)
        self.gate.layout = self.layout
        if self.layout:  # the run's fingerprint holds every node's: a change on any node is named
            self._fingerprint = dict(self.fingerprint,
                                     nodes={str(n): fp for n, (_, fp) in self.node_fingerprints.items()})

    def node_lines(self) -> list[str]:
        """Header lines of a job across nodes: its layout, and how its nodes differ from each other."""
        if self.launch is None or not self.node_fingerprints:
            return []
        from ..env.fingerprint import node_differences

        la = self.launch
        differ = node_differences(self.node_fingerprints)
        lines = [f"gpucomm nodes: {la.n_nodes} x {la.local_world_size} ranks"
                 + ("; every node has the same environment" if not differ else "; the nodes differ:")]
        return lines + [f"gpucomm nodes differ: {d}" for d in differ]

    def load_gate(self, nodeids: set[str]) -> None:
        """Read the baseline; in launched mode on global rank 0 only, which tells every rank whether it could
        (a missing or corrupt baseline stops every rank with rank 0's message), the others follow it."""
        from ..gate import GateUsageError

        def load() -> None:
            try:
                self.gate.load(self.info.model if self.info.kind == "gpu" else None, self.fingerprint, nodeids)
            except GateUsageError as e:
                raise pytest.UsageError(str(e)) from None

        launched = self.launched if self.launched is not None and self.launched.started else None
        if launched is None:
            return load()
        problem = None
        if self.speaks:
            try:
                load()
            except pytest.UsageError as e:
                problem = str(e)
        problem = launched.broadcast(problem)
        if problem:
            raise pytest.UsageError(problem if self.speaks
                                    else f"{problem} (on global rank 0, which reads the baseline)")
        self.follows_gate = not self.speaks

    # -- lazily created, so nothing heavy happens unless a gpucomm fixture or marker is used ---------
    @property
    def gate(self) -> "Gate":
        """The regression gate of the session (inactive without --gpu-baseline)."""
        if self._gate is None:
            from ..gate import Gate, GateSettings

            s = self.settings
            base_dir = Path(s.baseline_dir) if s.baseline_dir else Path(self.config.rootpath) / DEFAULT_BASELINE_DIR
            self._gate = Gate(GateSettings(
                spec=s.baseline, save=s.baseline_save, search_dirs=(base_dir,), max_runs=s.baseline_runs,
                tolerance=s.tolerance, alpha=s.alpha, strict=s.baseline_strict, tail_tolerance=s.tail_tolerance,
                folds=s.folds,
            ))
        return self._gate

    @property
    def detected(self) -> bool:
        """Whether the hardware has been detected (by a test that used gpucomm)."""
        return self._info is not None

    @property
    def info(self) -> "DeviceInfo":
        if self._info is None:
            from ..env.hardware import CpuDevicesError, detect

            try:
                self._info = detect(self.settings.device)
            except (RuntimeError, CpuDevicesError) as e:
                raise pytest.UsageError(str(e)) from None
        return self._info

    def headline(self) -> Optional[str]:
        """The hardware line of the summary: of this process, or of the xdist workers that measured."""
        if self.detected:
            return self.info.headline()
        return self.from_workers.get("headline")

    @property
    def fingerprint(self) -> dict[str, Any]:
        if self._fingerprint is None and self.from_workers.get("fingerprint") is not None:
            self._fingerprint = dict(self.from_workers["fingerprint"])
        if self._fingerprint is None:
            from ..env.hardware import fingerprint

            self._fingerprint = fingerprint(self.info)
        return self._fingerprint

    @property
    def buffers(self) -> "BufferPool":
        if self._buffers is None:
            from ..ops.copies import BufferPool

            self._buffers = BufferPool()
        return self._buffers

    @property
    def timing(self) -> "TimingSettings":
        from ..ops.timing import TimingSettings

        return TimingSettings(min_time_s=self.settings.min_time_s)

    @property
    def max_size(self) -> int:
        if self.settings.max_size is not None:
            return self.settings.max_size
        return DEFAULT_GPU_MAX_SIZE if self.info.kind == "gpu" else DEFAULT_CPU_MAX_SIZE

    def devices(self) -> list[str]:
        return self.info.device_names()

    def refusal(self) -> Optional[str]:
        """Why this process may not measure (GPUs under pytest-xdist), or None."""
        workerinput = getattr(self.config, "workerinput", None)
        worker = str(workerinput.get("workerid", "worker")) if workerinput is not None else None
        return xdist_refusal(self.info.kind, worker, self.settings.allow_xdist)

    def too_few(self, needed: int) -> str:
        info = self.info
        if info.kind == "gpu":
            return f"needs {needed} GPUs, found {info.count}"
        return f"needs {needed} devices, found {info.count} logical host devices (no GPU: CPU variant)"

    # -- process groups -------------------------------------------------------------------------------
    def max_world(self) -> int:
        """The largest process group: one rank per GPU, or on CPU up to CPU_MAX_WORLD gloo ranks (more where
        GPUCOMM_CPU_DEVICES asks for more logical devices: one rank each); in launched mode the job's world."""
        if self.launch is not None:
            return self.launch.world_size
        return self.info.count if self.info.kind == "gpu" else max(CPU_MAX_WORLD, self.info.count)

    def default_world(self) -> int:
        return self.launch.world_size if self.launch is not None else self.info.count

    def world_problem(self, world: int) -> Optional[str]:
        """Why a process group of ``world`` ranks cannot be had in this session (a skip reason), or None."""
        if self.launch is not None:
            if world == self.launch.world_size:
                return None
            return (f"needs a world of {world} ranks; this {self.launch.launcher} job has {self.launch.world_size} "
                    "(launched mode runs tests over the job's whole world)")
        return self.world_skip_reason(world) if world > self.max_world() else None

    def one_rank_reason(self) -> str:
        """Why the default world of one rank is skipped (the ``process_group`` fixture)."""
        if self.launch is not None:
            found = f"this {self.launch.launcher} job has 1 rank"
        elif self.info.kind == "gpu":
            found = f"found {self.info.count} GPU"
        else:
            found = f"found {self.info.count} logical host device"
        return (f"needs a world of 2 ranks or more: a collective of one rank moves nothing between devices "
                f"(busbw 0); {found} (@world(1) asks for one rank)")

    def world_skip_reason(self, world: int) -> str:
        if self.info.kind == "gpu":
            return f"needs a world of {world} ranks (one per GPU), found {self.info.count} GPUs"
        return f"needs a world of {world} ranks, at most {self.max_world()} gloo ranks run on CPU"

    @property
    def multi_node(self) -> bool:
        """Whether this session is one rank of a launched job of more than one node (from the launcher's
        variables: known at collection, the same on every rank)."""
        return self.launch is not None and self.launch.n_nodes > 1

    def group_problem(self, kind: str) -> Optional[str]:
        """Why the groups of ``kind`` (``topology.GROUP_KINDS``) cannot be had in this session (a skip
        reason), or None.  In a launched job of several nodes this gathers the job's layout: every rank calls
        it at the same point.  pytest.UsageError for an unknown kind."""
        from ..env.topology import WORLD, check_group_kind

        try:
            check_group_kind(kind, "process_group")
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
        if kind == WORLD:
            return None
        if self.launched is None:
            return (f"group kind {kind!r} needs a job launched on more than one node (torchrun, srun, mpirun); "
                    "this session runs a rank pool on one host")
        if not self.multi_node:  # self.launch is set with self.launched (set_launch)
            return (f"group kind {kind!r} needs a job of more than one node; "
                    f"this {cast('Launch', self.launch).launcher} job has 1")
        return self.launched.layout(self.info).problem(kind)

    def group(self, world: int, timeout_s: Optional[float] = None, label: str = "",
              kind: str = "world") -> "ProcessGroup":
        """The process group of ``world`` ranks: one pool of workers per world size and session.  In a
        launched job of several nodes, ``kind`` ``"intra-node"`` or ``"inter-node"`` gives the job's groups of
        that kind, each rank in its own (see :mod:`.topology`); pytest.UsageError when they cannot be had
        (:meth:`group_problem` says why)."""
        from .group import ProcessGroup

        problem = self.world_problem(world) or self.group_problem(kind)
        if problem:
            raise pytest.UsageError(problem)
        info = self.info
        if self.launched is not None:  # one rank of a launched job: the task runs here, on every rank
            if kind != "world":
                executor = self.launched.group_executor(info, kind)
            else:
                executor = self.launched.executor(info)
            return ProcessGroup(executor, executor.backend, timeout_s or self.settings.timeout_s, label)
        if world not in self.pools:
            self.pools[world] = self._new_pool(world)
        return ProcessGroup(self.pools[world], info.backend, timeout_s or self.settings.timeout_s, label)

    def fold_group(self, group: "ProcessGroup", i: int) -> "ProcessGroup":
        """The i-th other process group (i >= 1) of ``group``'s world: a pool of its own, started at its first
        use and kept for the session, in which the gate measures a case's folds (``--gpucomm-folds``)."""
        from .group import ProcessGroup

        key = (group.world_size, i)
        if key not in self.fold_pools:
            self.fold_pools[key] = self._new_pool(group.world_size)
        return ProcessGroup(self.fold_pools[key], group.backend, group.timeout_s, f"{group.label} (fold {i + 1})")

    def _new_pool(self, world: int) -> Any:
        """A ranks.RankPool of ``world`` workers with the session's backend, device type and worker
        environment (not started yet)."""
        from ..ops.collectives import worker_env
        from ..ranks import RankPool

        info = self.info
        return RankPool(world, backend=info.backend, device=info.torch_device_type, env=worker_env(info.backend),
                        start_timeout_s=self._start_timeout_s, zygote=self.session_zygote())

    @property
    def _start_timeout_s(self) -> float:
        return max(RANK_START_TIMEOUT_S, self.settings.timeout_s)

    def session_zygote(self) -> Any:
        """The session's ranks.spawn.Zygote, made at the first pool (its process starts with that pool's
        start: a session that collects a process_group test may still start no pool); None where
        GPUCOMM_RANK_START=exec or in launched mode."""
        from ..ops.collectives import worker_env
        from ..ranks.spawn import Zygote, rank_start

        if self.zygote is None and self.launched is None and rank_start() == "fork":
            backend = self.info.backend
            self.zygote = Zygote(worker_env(backend), backend, start_timeout_s=self._start_timeout_s)
        return self.zygote

    # -- the gate's re-measures ------------------------------------------------------------------------
    def remeasure(self, fresh: Callable[[], "Measurement"], same: Callable[[], "Measurement"], fresh_how: str,
                  same_how: str) -> "Remeasure":
        """One re-measure of a flagged case: by ``fresh`` (in a new process or process group) for the first
        ``vocab.MAX_FRESH_REMEASURES`` of the session, copies and collectives together, else by ``same``
        (in the current state): each fresh one costs a process start, and a change that slowed every case
        would otherwise pay one per case.  ``fresh_how`` / ``same_how`` say where it was measured."""
        from ..measurement import Remeasure

        limit = vocab.MAX_FRESH_REMEASURES  # read at each call (tests lower it)
        if self.fresh_remeasures < limit:
            self.fresh_remeasures += 1  # counted when started: a failed start cost a process start too
            return Remeasure(fresh(), fresh=True, how=fresh_how)
        return Remeasure(same(), fresh=False,
                         how=f"{same_how}: the session's {limit} fresh re-measures were used up")

    def copy_in_new_process(self, spec: dict[str, Any], label: str = "") -> "Measurement":
        """Measure the copy ``spec`` (``ops.copies.copy_spec``) in a new process -- new streams, buffers and
        timing state -- started for it as a one-rank pool (the session's backend, device type and worker
        environment) and closed right after.  Its rank 0 selects device 0, and the copy addresses its
        devices by index, so a copy between any two devices works.  A failing, hanging or dying process
        fails the test as a failing rank of a collective does (with its traceback, stack or exit code)."""
        import dataclasses

        from .group import ProcessGroup
        from ..measurement import Measurement

        pool = self._new_pool(1)
        what = f"{label}: fresh re-measure of {spec['copy']} copy {'->'.join(spec['devices'])}"
        try:
            kwargs = dict(spec, timing=dataclasses.asdict(self.timing))
            (result,) = ProcessGroup(pool, self.info.backend, self.settings.timeout_s, what).run(
                "pytest_gpucomm.ops.copies:bench_copy", kwargs, label=what)
        finally:
            pool.close()
        return Measurement.from_dict(result)

    # -- the gate -------------------------------------------------------------------------------------
    @property
    def gates(self) -> bool:
        """Whether each test's records are judged: the baseline is loaded here, or (launched mode) rank 0
        judges and this rank follows."""
        return self.gate.loaded or self.follows_gate

    def judge(self, records: list[Record], tolerance: Optional[float],
              tail_tolerance: Optional[float] = None) -> list[str]:
        """The baseline verdict on each record; returns the failure messages.  The gate may re-measure a
        flagged case through ``Record.redo`` (each call a new :class:`Remeasure`); the record keeps its
        first measurement, the gate reports the re-measures.  A recording run (--gpu-baseline-save)
        reports its verdicts but does not fail.  ``tail_tolerance`` overrides the session's for the tail verdict.

        Launched mode: the gate runs on global rank 0, which sends every rank each re-measure before it
        makes it (every rank measures again together) and then the verdicts; the others follow."""
        launched = self.launched if self.launched is not None and self.launched.started else None
        if launched is None:
            return self._judge(records, tolerance, [r.redo for r in records], tail_tolerance)
        if not self.speaks:
            return self._follow(launched, records)

        def leading(i: int, redo: Callable[[], "Remeasure"]) -> Callable[[], "Remeasure"]:
            def again() -> "Remeasure":
                launched.broadcast(("redo", i))
                return redo()
            return again

        try:
            failures = self._judge(records, tolerance,
                                   [None if r.redo is None else leading(i, r.redo) for i, r in enumerate(records)],
                                   tail_tolerance)
        except BaseException as e:
            launched.broadcast(("error", f"{type(e).__name__}: {e}"))
            raise
        launched.broadcast(("done", [(r.baseline, str(r.status)) for r in records], failures))
        return failures

    def _follow(self, launched: "LaunchedSession", records: list[Record]) -> list[str]:
        """A rank other than 0 in launched mode: re-measure when rank 0 says, then take its verdicts."""
        own: Optional[BaseException] = None  # a re-measure that failed here: raised once rank 0 has spoken
        while True:
            message = launched.broadcast()
            if message[0] == "redo":
                try:
                    records[message[1]].redo()
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as e:  # pytest.fail's too; on every rank alike (a task's error is every
                    own = own or e          # rank's): rank 0's "error" comes next, read here, not by the next
                continue                    # exchange
            if own is not None:
                raise own
            if message[0] == "error":
                pytest.fail(f"gpucomm: the gate failed on global rank 0: {message[1]}", pytrace=False)
            for r, (baseline, status) in zip(records, message[1]):
                r.baseline, r.status = baseline, Status(status)
            return list(message[2])

    def _judge(self, records: list[Record], tolerance: Optional[float],
               redos: list[Optional[Callable[[], "Remeasure"]]],
               tail_tolerance: Optional[float] = None) -> list[str]:
        failures = []
        for r, redo in zip(records, redos):
            v = self.gate.judge(r.nodeid, r.measurement, tolerance, redo, tail_tolerance, r.fold)
            r.baseline = v.to_dict()
            if r.status is not Status.FAILED:
                r.status = v.status
            if v.failed and not self.settings.baseline_save:
                failures.append(v.message)
        return failures

    def ran_every_test(self, session: pytest.Session) -> bool:
        """Whether the session ran every test it collected to its end (not stopped by -x, --maxfail,
        pytest.exit or an interrupt)."""
        collected = int(getattr(session, "testscollected", 0) or 0)
        if collected:
            return len(self.finished_tests) >= collected
        return not (session.shouldstop or session.shouldfail)

    # -- pytest-xdist: the workers measure, the controller reports ------------------------------------
    def worker_output(self) -> dict[str, Any]:
        """What a pytest-xdist worker sends the controller: its records, fingerprint and notes, as plain
        JSON values (execnet carries no other types)."""
        import json

        from .reporting import baseline_extra

        data = {
            "records": [{"nodeid": r.nodeid, "measurement": r.measurement.to_dict(with_samples=True),
                         "checks": r.checks, "status": str(r.status), "baseline": r.baseline} for r in self.records],
            "fingerprint": self.fingerprint if self.records else None,
            "headline": self.headline() if self.records else None,
            "notes": self.notes,
            "baseline": baseline_extra(self) if self.records else None,
            "baseline_path": str(self.gate.path) if self.settings.baseline and self.gate.path is not None else None,
            "gate_header": self.gate.header_lines()[1:] if self.settings.baseline and self.gate.loaded else [],
        }
        return json.loads(json.dumps(data))

    def add_worker_output(self, data: dict[str, Any]) -> None:
        """In the controller: take a worker's records (see ``worker_output``) into this session's."""
        from ..measurement import Measurement

        for r in data.get("records", []):
            self.records.append(Record(nodeid=r["nodeid"], measurement=Measurement.from_dict(r["measurement"]),
                                       checks=list(r["checks"]), status=Status(r["status"]), baseline=r["baseline"]))
        for key in ("fingerprint", "headline", "baseline", "baseline_path", "gate_header"):
            if data.get(key) and key not in self.from_workers:
                self.from_workers[key] = data[key]
        self.from_workers["workers"] = self.from_workers.get("workers", 0) + (1 if data.get("records") else 0)
        self.notes += data.get("notes", [])

    def close(self) -> None:
        for pool in [*self.pools.values(), *self.fold_pools.values()]:
            try:
                pool.close()
            except Exception:  # pragma: no cover - best effort at teardown
                pass
        self.pools.clear()
        self.fold_pools.clear()
        if self.zygote is not None:  # after the pools: the workers it forked die with it
            self.zygote.close()
            self.zygote = None
        if self._buffers is not None:
            self._buffers.clear()
        if self.launched is not None:
            self.launched.close()


STATE_KEY = pytest.StashKey[State]()


def state_of(config: pytest.Config) -> State:
    """The gpucomm state of a pytest session."""
    return config.stash[STATE_KEY]
