"""The ``comm`` fixture's object: each method runs one measurement and returns a ``Measurement``.

The collective methods (``comm.all_reduce(group, size)``, ...) are made from the op table
(:data:`pytest_gpucomm.ops.collectives.OPS`): an op added there is a method here.

In a launched job of several nodes a collective runs over a group kind (:mod:`.topology`): ``"world"``, or
``"intra-node"`` / ``"inter-node"``, where every group of the kind runs at once; each group's measurement is
recorded (its node or local rank named), and the method returns the slowest of them.
The copies of one source to one destination (``comm.copy``, ``comm.host_to_device``, ...) are
:class:`.copy_methods.CopyMethods`'s.  ``comm.copy_one_to_all(hub, size)``, ``comm.copy_all_to_one(hub, size)``
and ``comm.copy_all_pairs(size)`` copy between all peers at once (:func:`.ops.copies.measure_pattern`).
``comm.node_pairs()`` is the inter-node pair test (:mod:`.ops.nodes`); ``comm.training(pattern, group, model)``
(and ``comm.dp_grad_sync``, ``moe_all_to_all``, ``tp_layer``, ``pp_send_recv``, ``overlap_dp_tp``) the
training-step patterns (:mod:`.ops.patterns`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import pytest

from .copy_methods import CopyMethods, DeviceLike, GpuPair, PairLike
from .group import ProcessGroup
from .markers import SweepSize, marks_of
from ..ops.collectives import OPS, add_op_methods
from ..measurement import Record
from .state import State
from ..units import SizeError, SizeLike, parse_size
from ..vocab import DTYPE_ALIASES, DTYPES

if TYPE_CHECKING:
    from ..measurement import Measurement, Remeasure

__all__ = ["Comm", "GpuPair"]


def _size_or_usage_error(value: SizeLike, where: str) -> int:
    try:
        return parse_size(value, where)
    except SizeError as e:
        raise pytest.UsageError(str(e)) from None


@add_op_methods
class Comm(CopyMethods):
    """The measuring fixture: each method runs one measurement and returns a :class:`Measurement`.

    The size of a measurement is, in this order: the ``size`` argument, the test's ``size`` parameter
    (from ``@sizes``), the ``size=`` of its ``@bandwidth`` or ``@latency`` marker.
    """

    def __init__(self, state: State, request: pytest.FixtureRequest) -> None:
        self._state = state
        self._request = request

    # -- helpers ----------------------------------------------------------------------------------
    def _size(self, size: Optional[SizeLike], what: str) -> int:
        nodeid = self._request.node.nodeid
        if size is not None:
            return _size_or_usage_error(size, f"{nodeid} comm.{what}(size=...)")
        callspec = getattr(self._request.node, "callspec", None)
        if callspec is not None and "size" in callspec.params:
            value = callspec.params["size"]
            if isinstance(value, SweepSize):  # @sizes: parsed at collection
                return value.nbytes
            return _size_or_usage_error(value, f"{nodeid} parameter 'size'")
        marks = marks_of(self._request.node)
        for spec in (marks.bandwidth, marks.latency):
            if spec is not None and spec.size is not None:
                return spec.size
        raise pytest.UsageError(
            f"{self._request.node.nodeid}: comm.{what}() has no size: pass size=, parametrize with @sizes, "
            "or give size= to @bandwidth/@latency"
        )

    def _record(self, m: Measurement, fresh: Optional[Callable[[], Measurement]], same: Callable[[], Measurement],
                fresh_how: str, same_how: str, fold: Optional[Callable[[int], Measurement]] = None,
                with_env: Optional[Callable[[Mapping[str, Optional[str]]], Measurement]] = None) -> Measurement:
        """Keep ``m``; the gate may call the record's ``redo`` to measure once more: ``fresh`` measures in a
        new process state (a new process group, a new process), so that a per-session condition -- an
        algorithm or a buffer placement chosen at set-up -- does not decide the verdict twice; ``same``
        measures in the current one, once the session's fresh re-measures are used up (see
        :meth:`.remeasures.Remeasures.remeasure`).  ``fresh_how`` and ``same_how`` say where ("in a new
        process").  Without ``fresh`` (a state that cannot be made anew), every re-measure is ``same``, not
        fresh, and ``same_how`` says why.  ``fold(i)`` measures it in the session's i-th other process group
        (``Record.fold``)."""

        def redo() -> "Remeasure":
            return self._state.remeasures.remeasure(fresh, same, fresh_how, same_how, self._request.node.nodeid)

        self._state.records.append(Record(nodeid=self._request.node.nodeid, measurement=m, redo=redo, fold=fold,
                                          with_env=with_env))
        return m

    def _copy(self, spec: dict[str, object]) -> Measurement:
        """Measure the copy ``spec`` (``ops.copies.copy_spec``) here; its fresh re-measure runs in a new
        process, its other re-measures here with new buffers.  In launched mode, on every node at once
        (see :meth:`_copy_on_every_node`)."""
        from ..ops.copies import measure_spec

        state = self._state
        if state.launch is not None:
            return self._copy_on_every_node(spec)

        def here() -> Measurement:
            return measure_spec(spec, state.settings.timing(), state.buffers)

        def fresh() -> Measurement:
            state.buffers.clear()  # this process's buffers are not needed while the new one measures
            return state.remeasures.copy_in_new_process(spec, label=self._request.node.nodeid)

        def same() -> Measurement:
            state.buffers.clear()
            return here()

        def with_env(env: Mapping[str, Optional[str]]) -> Measurement:
            state.buffers.clear()
            return state.remeasures.copy_in_new_process(spec, label=f"{self._request.node.nodeid} (cause test)",
                                                        env=env)

        return self._record(here(), fresh, same, "in a new process", "in the same process", with_env=with_env)

    def _copy_on_every_node(self, spec: dict[str, object]) -> Measurement:
        """Launched mode: the copy ``spec`` between the devices of each node, on every node at once.

        On each node one rank measures (``ops.copies.measuring_local_rank``: the rank whose GPU is the
        copy's source or device; local rank 0 for host buffers) while the node's other ranks wait; then every
        rank has every node's measurement, labelled with its node and host (``info["node"]``, ``["host"]``,
        ``["rank"]``), and records one row per node -- 16 nodes, 16 rows of this test.  The test gets its own
        node's measurement.  A copy that raises on one rank fails the test on every rank, naming that rank,
        its host and node.

        The re-measure of a node's row measures that node's copy again, by the same rank in the same process
        with new buffers, while every rank waits for it: a launched job's ranks re-measure together, so it is
        not made in a new process.  The cause test's re-measure of a node's row (``Record.with_env``) is made in
        a new process by that rank, with the variables set back there alone: on that node, for its copy."""
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

            def with_env(env: Mapping[str, Optional[str]], node: int = node) -> Measurement:
                state.buffers.clear()
                try:
                    return self._measure_on_nodes(spec, node, env)[0]
                except pytest.fail.Exception as e:  # every rank alike: the cause test names it and goes on
                    raise RuntimeError(_short_failure(str(e))) from None

            self._record(m, None, same, "", same_how, with_env=with_env)
            if node == la.node_rank:
                mine = m
        assert mine is not None  # node_measurements gives one measurement for every node with a rank
        return mine

    def _measure_on_nodes(self, spec: dict[str, Any], only_node: Optional[int] = None,
                          env: Optional[Mapping[str, Optional[str]]] = None) -> list[Measurement]:
        """Every node's measurement of the copy ``spec`` (launched mode), ordered by node; with
        ``only_node``, that node's alone (the other nodes' ranks wait); with ``env``, measured in a new process
        whose environment has these variables set (None: unset; the cause test's).  Called by every rank at
        once."""
        import traceback

        from ..ops.copies import CopyError, measure_spec
        from ..ops.node_copies import measuring_local_rank, node_measurements
        from ..ranks import RankFailure

        state, la, launched = self._state, self._state.launch, self._state.launched
        assert la is not None and launched is not None
        launched.start(state.devices.info)  # joined at collection; a no-op here
        label = f"{self._request.node.nodeid}: {spec['copy']} copy {'->'.join(spec['devices'])}"
        outcome: tuple[int, bool, Any] = (la.node_rank, True, None)
        if la.local_rank == measuring_local_rank(spec, la.local_world_size) \
                and (only_node is None or only_node == la.node_rank):
            try:
                if env is None:
                    m = measure_spec(spec, state.settings.timing(), state.buffers)
                else:
                    m = state.remeasures.copy_in_new_process(spec, label=f"{self._request.node.nodeid} (cause test, "
                                                             f"node {la.node_rank})", env=env)
                m.info.update({"node": la.node_rank, "host": la.host, "rank": la.rank})
                outcome = (la.node_rank, True, m.to_dict(with_samples=True))
            except (Exception, pytest.fail.Exception):  # every rank waits in the exchange below: it must hear of
                # the failure (the new process's fails as pytest.fail)
                outcome = (la.node_rank, False, traceback.format_exc())
        try:
            every = launched.channel.allgather(outcome)
        except Exception as e:  # a rank gone or the control group broken (its timeout)
            failure = (f"{label}: the ranks of this {la.launcher} job could not exchange the copy's results: "
                       f"{type(e).__name__}: {e}")
        else:
            try:
                return node_measurements(every, launched.channel.hosts, label, only_node)
            except (RankFailure, CopyError) as e:  # the copy raised on some rank, or no rank of a node measured
                failure = str(e)
        pytest.fail(failure, pytrace=False)  # outside the except block: no chained traceback

    def _pair(self, pair: PairLike, dst: Optional[DeviceLike]) -> GpuPair:
        if isinstance(pair, GpuPair):
            return pair
        if isinstance(pair, (tuple, list)) and len(pair) == 2 and dst is None:
            return GpuPair(self._dev(pair[0]), self._dev(pair[1]))
        if dst is not None:
            return GpuPair(self._dev(pair), self._dev(dst))
        raise pytest.UsageError(f"{self._request.node.nodeid}: comm.copy() needs a gpu_pair or src and dst devices")

    def _dev(self, d: object) -> str:
        """The name of device ``d`` (a name, or an index); a UsageError where it is not one in use."""
        devs = self._state.devices.names()
        if isinstance(d, int):
            name = f"{self._state.devices.info.torch_device_type}:{d}"
        else:
            name = str(d)
        if name not in devs:
            raise pytest.UsageError(
                f"{self._request.node.nodeid}: device {d!r} is not one of the devices in use ({', '.join(devs)})"
            )
        return name

    # -- copies one to one: .copy_methods.CopyMethods; all peers at once (ops.copies.measure_pattern) -----
    def copy_one_to_all(self, hub: DeviceLike, size: Optional[SizeLike] = None, *,
                        peers: Optional[Sequence[DeviceLike]] = None) -> Measurement:
        """``hub`` writing to every peer at once (``peers``; default: every other device in use), each copy
        ``size`` bytes.  The figure is the aggregate (every copy's bytes over the span of all of them);
        ``info`` has the per-link figure and each link's own (see :func:`.ops.copies.measure_pattern`)."""
        from ..ops.copies import ONE_TO_ALL, copy_spec

        h, others = self._hub_and_peers(hub, peers, "copy_one_to_all")
        return self._copy(copy_spec(ONE_TO_ALL, [h, *others], self._size(size, "copy_one_to_all")))

    def copy_all_to_one(self, hub: DeviceLike, size: Optional[SizeLike] = None, *,
                        peers: Optional[Sequence[DeviceLike]] = None) -> Measurement:
        """Every peer (``peers``; default: every other device in use) writing to ``hub`` at once, each copy
        ``size`` bytes; figures as :meth:`copy_one_to_all`."""
        from ..ops.copies import ALL_TO_ONE, copy_spec

        h, others = self._hub_and_peers(hub, peers, "copy_all_to_one")
        return self._copy(copy_spec(ALL_TO_ONE, [*others, h], self._size(size, "copy_all_to_one")))

    def copy_all_pairs(self, size: Optional[SizeLike] = None, *,
                       devices: Optional[Sequence[DeviceLike]] = None) -> Measurement:
        """Every ordered pair of ``devices`` (default: every device in use) copying at once, each copy ``size``
        bytes; figures as :meth:`copy_one_to_all`.  Skipped, with the reason, with fewer than two devices."""
        from ..ops.copies import ALL_PAIRS, copy_spec

        if devices is None:
            devs = self._state.devices.names()
            if len(devs) < 2:
                pytest.skip(self._state.devices.too_few(2))
        else:
            devs = self._distinct([self._dev(d) for d in devices], "copy_all_pairs", "devices")
        return self._copy(copy_spec(ALL_PAIRS, devs, self._size(size, "copy_all_pairs")))

    def _hub_and_peers(self, hub: DeviceLike, peers: Optional[Sequence[DeviceLike]],
                       what: str) -> tuple[str, list[str]]:
        h = self._dev(hub)
        if peers is None:
            return h, [d for d in self._state.devices.names() if d != h]
        return h, self._distinct([self._dev(p) for p in peers if self._dev(p) != h], what, "peers")

    def _distinct(self, devs: list[str], what: str, arg: str) -> list[str]:
        if len(devs) < (1 if arg == "peers" else 2) or len(set(devs)) != len(devs):
            raise pytest.UsageError(f"{self._request.node.nodeid}: comm.{what}({arg}=...) needs "
                                    f"{'a peer other than the hub' if arg == 'peers' else 'two devices or more'}, "
                                    f"each once; got {devs!r}")
        return devs

    # -- collectives ------------------------------------------------------------------------------
    def collective(self, op: str, group: "ProcessGroup", size: Optional[SizeLike] = None, *, dtype: str = "float32",
                   in_place: Optional[bool] = None, kind: Optional[str] = None) -> Measurement:
        """Time ``op`` over ``group`` at ``size`` bytes (S as nccl-tests defines it) and check its result.

        ``kind`` (default: the group's own, ``group.kind``) runs the op over the job's groups of that kind
        (launched mode, several nodes; the test is skipped with the reason where the job has none): every
        group at once, each rank in its own.  Each group's measurement is recorded -- its ``world_size`` is the
        group's size, an intra-node group's names its node (``info["node"]``, ``info["host"]``), an inter-node
        group's its local rank (``info["group"]``) -- and the slowest of them (lowest busbw) is returned, for
        the test's own assertions."""
        n, dtype, ip = self._collective_args(op, group, size, dtype, in_place)
        kwargs = {"op": op, "size_bytes": n, "dtype": dtype, "in_place": ip,
                  "min_time_s": self._state.settings.min_time_s, "tail_time_s": self._state.settings.tail_time_s}
        if kind is not None and kind != group.kind:
            group = self._group_of_kind(group, kind)
        if group.kind != "world":
            return self._subgroup_collective(op, group, kwargs, n, dtype)

        def run() -> Measurement:
            (m,) = self._collective_once(op, group, kwargs, n, dtype)
            return m

        def fresh() -> Measurement:
            group.restart()  # new ranks: the next run starts a new process group
            return run()

        def fold(i: int) -> Measurement:  # no single ops: the tail verdict reads the first run and re-measures
            (m,) = self._collective_once(op, self._state.pools.fold_group(group, i), dict(kwargs, tail_time_s=0.0),
                                         n, dtype)
            return m

        def with_env(env: Mapping[str, Optional[str]]) -> Measurement:  # a group of new processes
            pool = self._state.pools.new_pool(group.world_size, env)
            try:
                g = ProcessGroup(pool, group.backend, group.timeout_s, f"{group.label} (cause test)")
                (m,) = self._collective_once(op, g, dict(kwargs, tail_time_s=0.0), n, dtype)
                return m
            finally:
                pool.close()

        if not group.restartable:  # launched mode: the job's process group lives as long as the session
            def in_job_with_env(env: Mapping[str, Optional[str]]) -> Measurement:  # every rank, a new group
                with self._state.groups.group_with_env(group, env) as g:  # type: ignore[attr-defined]
                    (m,) = self._collective_once(op, g, dict(kwargs, tail_time_s=0.0), n, dtype)
                    return m

            return self._record(run(), None, run, "",
                                "in the same process group: the job's process group (launched mode) cannot be "
                                "restarted", with_env=in_job_with_env)
        return self._record(run(), fresh, run, "in a new process group", "in the same process group", fold,
                            with_env)

    def _collective_args(self, op: str, group: "ProcessGroup", size: Optional[SizeLike], dtype: str,
                         in_place: Optional[bool]) -> tuple[int, str, bool]:
        """A collective's arguments, checked: its size in bytes, its element type and whether in place."""
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
        return n, dtype, ip

    def _group_of_kind(self, group: ProcessGroup, kind: str) -> ProcessGroup:
        """The job's groups of ``kind``, for a test that was given ``group`` (skipped where there are none)."""
        state = self._state
        why = state.groups.group_problem(kind)
        if why:
            pytest.skip(why)
        return state.groups.group(state.devices.default_world(), group.timeout_s, group.label, kind=kind)

    def _subgroup_collective(self, op: str, group: ProcessGroup, kwargs: dict[str, object], n: int,
                             dtype: str) -> Measurement:
        """Every group of ``group.kind`` at once: one record per group, the slowest returned.  A re-measure of
        one group's record measures every group again (every rank must take part) and keeps that group's."""
        ms = self._collective_once(op, group, kwargs, n, dtype)
        how = ("in the same process groups: the job's process groups (launched mode) cannot be restarted; every "
               "group of the kind measured again")
        for i, m in enumerate(ms):
            def again(i: int = i) -> Measurement:
                return self._collective_once(op, group, kwargs, n, dtype)[i]

            self._record(m, None, again, "", how)
        return min(ms, key=lambda m: m.gbps)

    def _collective_once(self, op: str, group: ProcessGroup, kwargs: dict[str, object], n: int,
                         dtype: str) -> "list[Measurement]":
        """One measurement of the group's world, or one per group of its kind (the groups' order)."""
        from ..ops.collective_results import WrongResult
        from ..ops.collectives import to_measurement

        results = group.run("pytest_gpucomm.ops.collectives:bench", kwargs, label=self._request.node.nodeid)
        subgroups = getattr(group.executor, "subgroups", ()) if group.kind != "world" else ()
        try:
            if not subgroups:
                return [to_measurement(results, op=op, backend=group.backend, dtype=dtype, requested_bytes=n)]
            out = []
            for g in subgroups:
                mine = [results[r] for r in g.ranks]  # ordered by group rank
                try:
                    m = to_measurement(mine, op=op, backend=group.backend, dtype=dtype, requested_bytes=n)
                except WrongResult as e:
                    raise WrongResult(f"{g.label} ({g.kind} group of global ranks "
                                      f"{', '.join(map(str, g.ranks))}): {e}", e.bad) from None
                m.info.update(g.info())
                m.devices = tuple(f"rank{r}" for r in g.ranks)  # global ranks: which ranks of the job these are
                ranks = m.info.get("ranks")
                if ranks:  # the straggler data names the job's ranks too, not the group's
                    ranks["rank"] = list(g.ranks)
                    ranks["straggler"] = [g.ranks[i] for i in ranks["straggler"]]
                out.append(m)
            return out
        except WrongResult as e:
            failure = str(e)
        pytest.fail(failure, pytrace=False)  # outside the except block: no chained traceback

    # -- the inter-node pair test -------------------------------------------------------------------
    def node_pairs(self, group: ProcessGroup, pattern: str = "ring", size: Optional[SizeLike] = None, *,
                   dtype: str = "float32") -> Measurement:
        """The inter-node pair test (launched mode, two nodes or more; skipped with the reason elsewhere):
        local rank k of one node sends ``size`` bytes to local rank k of another, every k at once, over a
        ``"ring"`` of the nodes (every link at once) or ``"pairwise"`` (every pair of nodes in turn, both ways
        at once; jobs of at most 4 nodes).  One record per node pair ("node 0 (h0) -> node 1 (h1)"), figure:
        S / t per GPU pair one way (busbw factor 1; see :mod:`.ops.nodes`); returns the slowest pair's."""
        from ..ops.nodes import WrongPairs, phase_kwargs, to_measurements
        from ..env.topology import PAIR_PATTERNS, node_pair_phases, node_pair_problem

        nodeid = self._request.node.nodeid
        if pattern not in PAIR_PATTERNS:
            raise pytest.UsageError(f"{nodeid}: comm.node_pairs(pattern={pattern!r}): known patterns: "
                                    f"{', '.join(PAIR_PATTERNS)}")
        dtype = DTYPE_ALIASES.get(str(dtype).lower(), dtype)
        if dtype not in DTYPES:
            raise pytest.UsageError(f"{nodeid}: unknown dtype {dtype!r} for node_pairs; known: {', '.join(DTYPES)}")
        if not isinstance(group, ProcessGroup):
            raise pytest.UsageError(f"{nodeid}: comm.node_pairs() needs the process_group fixture, got {group!r}")
        state = self._state
        if state.launched is None or not state.groups.multi_node:
            here = (f"this {state.launch.launcher} job has 1" if state.launch is not None
                    else "this session runs a rank pool on one host")
            pytest.skip(f"the inter-node pair test needs a job launched on more than one node (torchrun, srun, "
                        f"mpirun); {here}")
        if group.kind != "world":
            raise pytest.UsageError(f"{nodeid}: comm.node_pairs() runs over the job's whole world; got a "
                                    f"{group.kind!r} process group")
        layout = state.launched.layout(state.devices.info)
        why = node_pair_problem(layout, pattern)
        if why:
            pytest.skip(why)
        n = self._size(size, "node_pairs")
        phases = node_pair_phases(layout, pattern)
        kwargs = {"phases": phase_kwargs(phases), "size_bytes": n, "dtype": dtype,
                  "min_time_s": state.settings.min_time_s}

        def where(r: int) -> str:
            host = layout.hosts[r] if r < len(layout.hosts) else ""
            return f"rank {r} (node {layout.nodes[r]}{', ' + host if host else ''}, local rank {layout.local_ranks[r]})"

        def run() -> list[Measurement]:
            results = group.run("pytest_gpucomm.ops.nodes:exchange", kwargs, label=nodeid)
            try:
                return to_measurements(results, phases, backend=group.backend, dtype=dtype, size_bytes=n,
                                       pattern=pattern, where=where)
            except WrongPairs as e:
                failure = str(e)
            pytest.fail(failure, pytrace=False)

        ms = run()
        how = ("in the same process group: the job's process group (launched mode) cannot be restarted; every node "
               "pair measured again")
        for i, m in enumerate(ms):
            def again(i: int = i) -> Measurement:
                return run()[i]

            self._record(m, None, again, "", how)
        return min(ms, key=lambda m: m.gbps)

    # -- training-step patterns ----------------------------------------------------------------------
    def training(self, pattern: str, group: ProcessGroup, model: str, *, scale: Optional[int] = None) -> Measurement:
        """Time the training-step ``pattern`` (``"dp_grad_sync"``, ``"moe_all_to_all"``, ``"tp_layer"``,
        ``"pp_send_recv"``, ``"overlap_dp_tp"``) of the model shape ``model`` (a name of
        :data:`.ops.patterns.MODELS`) over the whole world of ``group``, then its single iterations one by one
        (``info["tail"]``), and check its results (see :mod:`.ops.patterns`).  ``scale`` divides the element
        counts; default 1 on GPU, :data:`.ops.patterns.CPU_SCALE` on gloo.  The measurement's
        ``info["step"]`` gives the communication time per training step, ``info["step_label"]`` the pattern
        and shape in words.

        Tensor-parallel groups: pairs of neighbouring ranks, or in a job launched on several nodes the ranks
        of each node; pipeline stages: one rank each, or one node each (local rank k sends to local rank k of
        the next node).  A world the pattern cannot run on skips the test with the reason."""
        from ..ops.patterns import CPU_SCALE, MODELS, PATTERNS, WrongResult, plan, to_measurement

        nodeid = self._request.node.nodeid
        if pattern not in PATTERNS:
            raise pytest.UsageError(f"{nodeid}: unknown training pattern {pattern!r}; known: {', '.join(PATTERNS)}")
        if model not in MODELS:
            raise pytest.UsageError(f"{nodeid}: comm.{pattern}(model={model!r}): known model shapes: "
                                    f"{', '.join(MODELS)}")
        shape = MODELS[model]
        if (pattern in ("dp_grad_sync", "overlap_dp_tp") and shape.params <= 0) or (pattern == "moe_all_to_all"
                                                                                    and not shape.moe):
            raise pytest.UsageError(f"{nodeid}: comm.{pattern}(model={model!r}): the {model} shape has no "
                                    f"{'experts' if pattern == 'moe_all_to_all' else 'data-parallel gradient'}")
        if not isinstance(group, ProcessGroup):
            raise pytest.UsageError(f"{nodeid}: comm.{pattern}() needs the process_group fixture, got {group!r}")
        if group.kind != "world":
            raise pytest.UsageError(f"{nodeid}: comm.{pattern}() runs over the job's whole world; got a "
                                    f"{group.kind!r} process group")
        if scale is None:
            scale = CPU_SCALE if group.backend == "gloo" else 1
        state = self._state
        tp_groups = stages = None
        try:
            if state.launched is not None and state.groups.multi_node:
                layout = state.launched.layout(state.devices.info)
                stages = [list(layout.ranks_of(node)) for node in layout.node_ids]
                if pattern in ("tp_layer", "overlap_dp_tp"):
                    tp_groups = [list(g.ranks) for g in layout.groups("intra-node")]
            p = plan(pattern, shape, group.world_size, scale, tp_groups=tp_groups, stages=stages)
        except ValueError as e:
            if isinstance(scale, int) and not isinstance(scale, bool) and scale >= 1:
                pytest.skip(f"{pattern} of {model}: {e}")
            raise pytest.UsageError(f"{nodeid}: comm.{pattern}(scale={scale!r}): {e}") from None
        kwargs = {"pattern": pattern, "spec": p.spec, "min_time_s": state.settings.min_time_s}

        def run() -> Measurement:
            results = group.run("pytest_gpucomm.ops.patterns:run_pattern", kwargs, label=nodeid)
            try:
                return to_measurement(results, p, backend=group.backend)
            except WrongResult as e:
                failure = str(e)
            pytest.fail(failure, pytrace=False)

        def fresh() -> Measurement:
            group.restart()
            return run()

        if not group.restartable:
            return self._record(run(), None, run, "",
                                "in the same process group: the job's process group (launched mode) cannot be "
                                "restarted")
        return self._record(run(), fresh, run, "in a new process group", "in the same process group")

    def dp_grad_sync(self, group: ProcessGroup, model: str, **kw: Any) -> Measurement:
        """Data parallel: the model's whole bf16 gradient all-reduced in DDP's default buckets, back to back."""
        return self.training("dp_grad_sync", group, model, **kw)

    def moe_all_to_all(self, group: ProcessGroup, model: str, **kw: Any) -> Measurement:
        """Mixture of experts: one MoE layer's dispatch and combine all-to-all of skewed routed tokens."""
        return self.training("moe_all_to_all", group, model, **kw)

    def tp_layer(self, group: ProcessGroup, model: str, **kw: Any) -> Measurement:
        """Tensor parallel: one layer's all-gathers and reduce-scatters of the activation in its groups."""
        return self.training("tp_layer", group, model, **kw)

    def pp_send_recv(self, group: ProcessGroup, model: str, **kw: Any) -> Measurement:
        """Pipeline parallel: one micro-batch's activation to the next stage and its gradient back."""
        return self.training("pp_send_recv", group, model, **kw)

    def overlap_dp_tp(self, group: ProcessGroup, model: str, **kw: Any) -> Measurement:
        """Data and tensor parallel at once: the gradient sync while the layers' tensor-parallel collectives run,
        each on its own communicator; ``info["overlap"]`` gives each one's slowdown against running alone."""
        return self.training("overlap_dp_tp", group, model, **kw)


def _short_failure(text: str) -> str:
    """A failure's first line and its last (where a traceback ends: the error itself), for a line of a verdict."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "failed"
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
