"""The result of one measurement: what was measured and its raw per-iteration samples; of the gate's
re-measure of one (:class:`Remeasure`); and what a session keeps of each (:class:`Record`: the
measurement, what was checked of it, its verdict, and how to measure it again).

``Measurement.info`` is declared by :class:`MeasurementInfo`: every key a measurement may carry, with its type,
and the nested records it holds (``ranks``: :class:`RanksInfo`, ``tail``: :class:`TailInfo` with its
:class:`HistogramDict`, ``overlap``: :class:`OverlapInfo`).  It is a ``TypedDict(total=False)``, not a
dataclass, on purpose: ``info`` is written as it is into the JSON report and the rows a baseline is made of, and
read back as plain JSON by the gate, the reports, ``gpucomm show|compare`` and the comparison tools, with
``info.get("tail")`` and ``"node" in info`` at about 140 places across the package; a TypedDict is a dict at
run time, so the JSON stays byte for byte what it was, ``isinstance(m.info, dict)`` and every such call site
keep working unchanged (also the ones other layers add), a report written by an older version (or with a key
this one does not know) still reads, and mypy checks each key's type where it is written.  A dataclass would
need ``to_dict``/``from_dict`` on every boundary and dict-style access kept for each of those call sites."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping, Optional, Sequence, TypedDict, cast

from . import summary as _summary
from .summary import Summary
from .units import GB, describe_size, format_gbps
from .vocab import Status

__all__ = ["Measurement", "MeasurementInfo", "RanksInfo", "TailInfo", "HistogramDict", "OverlapInfo", "Record",
           "Remeasure", "copy_where", "both_ways_op", "node_label_of"]


class HistogramDict(TypedDict):
    """A sparse histogram of single-op times as JSON (:meth:`pytest_gpucomm.sketches.Histogram.to_dict`):
    bin i holds times in [origin_s x ratio^i, origin_s x ratio^(i+1)); ``bins`` are [i, count], ascending."""

    ratio: float
    origin_s: float
    bins: list[list[int]]


class TailInfo(TypedDict, total=False):
    """``info["tail"]``: a case's single operations, each timed on its own (the slowest rank's time of each op):
    their figures in microseconds (``p999_us`` None below 1,000 ops; ``jitter`` = p99 / p50), each rank's own
    p50 and p99, the timer (its step and the overhead of an empty interval: the largest over the ranks), the
    time budget, and the histogram the tail rule counts (:func:`pytest_gpucomm.ops.collective_results.tail_info`)."""

    n: int
    p50_us: float
    p99_us: float
    p999_us: Optional[float]
    max_us: float
    jitter: float
    own_p50_us: list[float]
    own_p99_us: list[float]
    timer: str
    resolution_us: float
    overhead_us: float
    budget_s: float
    hist: HistogramDict


#: ``info["ranks"]``: a collective's ranks as columns (:func:`pytest_gpucomm.ops.collective_results.ranks_info`),
#: each a list in the group's rank order, one entry per rank -- ``rank``, ``node`` (int), ``host``, ``device``
#: (str), ``own_median_s``, ``lag_median_s``, ``wait_median_s`` (float), ``straggled`` (int) -- and
#: ``straggler``, one entry per iteration: the rank that arrived last.  Columns, read by name
#: (:mod:`pytest_gpucomm.analysis.stragglers`), so a mapping of lists rather than a TypedDict.
RanksInfo = dict[str, list[Any]]


class OverlapInfo(TypedDict, total=False):
    """``info["overlap"]`` of the overlap pattern: each part's median time per iteration alone and overlapped (the
    slowest rank's), and the slowdowns overlapped / alone (None where a part took no time alone)."""

    dp_alone_s: float
    tp_alone_s: float
    dp_overlapped_s: float
    tp_overlapped_s: float
    dp_slowdown: Optional[float]
    tp_slowdown: Optional[float]


class MeasurementInfo(TypedDict, total=False):
    """Every key of ``Measurement.info``, by who writes it (see the module's doc for why a TypedDict)."""

    # how it was timed (every measurement)
    timer: str  # "device events", "host clock"
    batch: int  # iterations per timed sample
    clocks: list[dict[str, Any]]  # per device read: ops.clocks.ClockSummary.to_dict() of the timed samples
    # a collective, a node pair or a training pattern (ops.collectives, ops.nodes, ops.patterns)
    backend: str  # "nccl", "gloo", ...
    in_place: bool  # the form the ranks ran
    graph: bool  # the samples replayed a CUDA/HIP graph
    graph_error: str  # why graph capture failed
    registered: bool  # the buffers were registered with the communicator
    register_note: str  # why they were not
    requested_bytes: int  # the size asked for, where whole elements (or the world) rounded it
    ranks: RanksInfo
    tail: TailInfo
    # a copy (ops.copies)
    engine: str  # the copy call used ("cuMemcpyAsync", "hipMemcpyAsync", "torch copy_"), or the copy kernel
    copy_kernel: str  # a copy by kernel (ops.sm_copy): Triton's version and the kernel's shape
    accounting: str  # how a both-ways host copy counts (per direction)
    h2d_gbps: float  # a both-ways host copy: host->device's own figure while device->host copies
    d2h_gbps: float  # and device->host's own figure while host->device copies
    engine_note: str  # why, after a fallback
    peer_access: bool
    no_peer_access: list[str]  # the links of a pattern without peer access ("0->1")
    pinned: bool  # host<->device: the host buffer is pinned
    links: int  # all peers at once: the pairs copying together
    per_link_gbps: float
    link_gbps: dict[str, float]  # each link's own bandwidth, "0->1": GB/s
    slowest_link: str
    link_timer: str  # what the per-link figures time
    pid: int  # the process that measured (a fresh re-measure's)
    # a case run by another tool's binary (--gpucomm-engine; compare.tool_engine; the tool is ``source`` below)
    command: str  # the exact command line that measured it (shell quoting)
    tool_seconds: float  # the wall time of that command, which measured tool_cases cases at once
    tool_cases: int
    # launched mode: where it was measured (plugin.measurer; env.topology's Group.info and NodePair.info)
    node: int
    host: str
    rank: int  # the global rank that measured a node-local copy
    group_kind: str  # "intra-node", "inter-node"
    group: str  # an inter-node group, in words ("local rank 1 across 2 nodes")
    local_rank: int
    pair: str  # the inter-node pair test's node pair, in words ("node 0 (h0) -> node 1 (h1)")
    nodes: list[int]
    hosts: list[str]
    both_ways: bool
    # a training pattern (ops.patterns): its plan, shape and per-step figures
    pattern: str  # the pattern; for the inter-node pair test, its pairing ("ring")
    model: str
    scale: int
    buckets: int
    params: float
    bucket_bytes: int
    first_bucket_bytes: int
    gradient: str
    experts: int
    top_k: int
    tokens_per_rank: int
    moe_layers: int
    zipf: float
    seed: int
    expert_imbalance: float
    rank_imbalance: float
    imbalance: str
    tp: int
    tp_groups: list[list[int]]
    layers: int
    overlap_layers: int
    activation_bytes: int
    dp_bytes: int
    tp_bytes: int
    stages: int
    micro_batches: int
    iteration: str  # one iteration, in words
    per_step: int  # iterations per training step
    step_comm_s: float  # the communication time of a training step
    step_label: str  # the pattern and shape in words
    step: str  # the step's time in words
    overlap: OverlapInfo
    # another tool's figure (pytest_gpucomm.foreign): the tool, its version, its own name of the test, and a note
    source: str  # "nccl-tests", "rccl-tests", "nvbandwidth"
    source_version: str  # "v0.8"; nccl-tests' JSON holds its format only: "JSON format 3"
    source_case: str  # the tool's binary or test ("all_reduce_perf", "host_to_device_memcpy_sm")
    source_note: str  # what the figure is where it is not what the op says


def copy_where(op: str, devices: Sequence[str]) -> str:
    """A copy's devices, said shortly: "cuda:0->cuda:1", "cuda:0<->cuda:1" (both ways), and for the all-peers
    patterns (``ops.copies.PATTERN_OPS``) "cuda:0->7 peers", "7 peers->cuda:0", "every pair of 8 devices"."""
    peers = f"{len(devices) - 1} peer{'' if len(devices) == 2 else 's'}"
    if op == "copy_one_to_all":
        return f"{devices[0]}->{peers}"
    if op == "copy_all_to_one":
        return f"{peers}->{devices[-1]}"
    if op == "copy_all_pairs":
        return f"every pair of {len(devices)} devices"
    return ("<->" if both_ways_op(op) else "->").join(devices)


def both_ways_op(op: str) -> bool:
    """Whether the copy ``op`` copies both ways at once: ``copy_bidir``, ``host_bidir`` and their copy-kernel
    ``_sm`` forms."""
    return op in ("copy_bidir", "copy_bidir_sm", "host_bidir", "host_bidir_sm")


def node_label_of(info: Mapping[str, object]) -> str:
    """Where a measurement's ``info`` says it was measured (:attr:`Measurement.node_label`): its ``pair`` or
    ``group`` as written, else "node N (host)" of its ``node`` (and ``host``), else ""."""
    if "pair" in info:
        return str(info["pair"])
    if "group" in info:
        return str(info["group"])
    if "node" not in info:
        return ""
    host = info.get("host", "")
    return f"node {info['node']}" + (f" ({host})" if host else "")


@dataclass(init=False)
class Measurement:
    """One operation at one size, timed over many iterations.

    ``size_bytes`` is the message size S of the op as nccl-tests defines it (for a copy: the bytes of
    one transfer in one direction; for all_gather/reduce_scatter/all_to_all: the full buffer).
    ``bytes_per_iter`` is what algbw divides by the time: S for every op except the both-ways copy between
    devices (``copy_bidir``), which counts the bytes of both directions; the both-ways host copy
    (``host_bidir``) counts one direction's, as nvbandwidth's both-ways host figures do.  ``busbw_factor``
    turns algbw into busbw (1 for copies and point-to-point ops).  ``info`` (:class:`MeasurementInfo`) may be
    given as any mapping (a report row's, read back): a dict is kept as it is (its maker may add to it after),
    another mapping copied.
    """

    op: str
    size_bytes: int
    samples_s: list[float]
    devices: tuple[str, ...]
    bytes_per_iter: int = 0
    busbw_factor: float = 1.0
    world_size: int = 1
    dtype: Optional[str] = None
    kind: str = "copy"  # "copy" or "collective"
    info: MeasurementInfo = field(default_factory=lambda: MeasurementInfo())

    def __init__(self, op: str, size_bytes: int, samples_s: Sequence[float], devices: Sequence[str],
                 bytes_per_iter: int = 0, busbw_factor: float = 1.0, world_size: int = 1, dtype: Optional[str] = None,
                 kind: str = "copy", info: Optional[Mapping[str, Any]] = None) -> None:
        self.op, self.size_bytes, self.bytes_per_iter, self.busbw_factor = op, size_bytes, bytes_per_iter, busbw_factor
        self.world_size, self.dtype, self.kind = world_size, dtype, kind
        self.info = cast(MeasurementInfo, info if isinstance(info, dict) else dict(info or {}))
        if not self.bytes_per_iter:
            self.bytes_per_iter = self.size_bytes
        self.samples_s = [float(s) for s in samples_s]
        self.devices = tuple(devices)

    # -- statistics, derived from the raw samples on demand ------------------------------------------
    @cached_property
    def summary(self) -> Summary:
        return _summary.summarize(self.samples_s)

    @property
    def n(self) -> int:
        return self.summary.n

    @property
    def median_s(self) -> float:
        return self.summary.median_s

    @property
    def algbw_gbps(self) -> float:
        """Algorithm bandwidth at the median time: bytes_per_iter / t, GB = 1e9 bytes."""
        return self.bytes_per_iter / self.summary.median_s / GB

    @property
    def busbw_gbps(self) -> float:
        return self.algbw_gbps * self.busbw_factor

    @property
    def gbps(self) -> float:
        """The figure thresholds and baselines use: busbw for collectives, algbw for copies."""
        return self.busbw_gbps

    @property
    def samples_gbps(self) -> list[float]:
        """Per-iteration bandwidth (busbw), the quantity the baseline decision works on."""
        k = self.bytes_per_iter * self.busbw_factor / GB
        return [k / s for s in self.samples_s]

    @property
    def p50_us(self) -> float:
        return self.summary.p50_s * 1e6

    @property
    def p99_us(self) -> float:
        return self.summary.p99_s * 1e6

    @property
    def cv(self) -> float:
        return self.summary.cv

    def latency_us(self, percentile: float = 50.0) -> float:
        return _summary.percentile(self.samples_s, percentile) * 1e6

    @property
    def where(self) -> str:
        """Devices of a copy ("cuda:0->cuda:1"; of an all-peers pattern "cuda:0->7 peers", "7 peers->cuda:0",
        "every pair of 8 devices") or the world of a collective ("2 ranks (nccl)"); in launched
        mode a measurement of one node's devices or group names the node first ("node 1 (gpu-a17):
        cuda:0->cuda:1"), from ``info["node"]`` and ``info["host"]``."""
        if self.kind == "collective":
            backend = self.info.get("backend", "")
            here = f"{self.world_size} ranks" + (f" ({backend})" if backend else "")
        else:
            here = copy_where(self.op, self.devices)
        return f"{self.node_label}: {here}" if self.node_label else here

    @property
    def node_label(self) -> str:
        """"node N (host)" for a measurement of one node (launched mode); the node pair of the inter-node pair
        test (``info["pair"]``: "node 0 (h0) -> node 1 (h1)") or the inter-node group of a collective
        (``info["group"]``: "local rank 1 across 2 nodes"); else "" (:func:`node_label_of` its ``info``)."""
        return node_label_of(self.info)

    def describe(self) -> str:
        return (
            f"{self.op} on {self.where}, size {describe_size(self.size_bytes)}: "
            f"{format_gbps(self.gbps)} GB/s median over {self.n} samples (CV {self.cv * 100:.1f}%)"
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Measurement":
        """The measurement of a ``to_dict()`` with samples (as a pytest-xdist worker sends it)."""
        return cls(op=d["op"], size_bytes=int(d["size_bytes"]), samples_s=list(d["samples_s"]),
                   devices=tuple(d["devices"]), bytes_per_iter=int(d["bytes_per_iter"]),
                   busbw_factor=float(d["busbw_factor"]), world_size=int(d["world_size"]), dtype=d.get("dtype"),
                   kind=d.get("kind", "copy"), info=dict(d.get("info") or {}))

    def to_dict(self, with_samples: bool = True) -> dict[str, object]:
        d: dict[str, object] = {
            "op": self.op,
            "kind": self.kind,
            "size_bytes": self.size_bytes,
            "bytes_per_iter": self.bytes_per_iter,
            "devices": list(self.devices),
            "world_size": self.world_size,
            "dtype": self.dtype,
            "busbw_factor": self.busbw_factor,
            "n": self.n,
            "median_us": self.median_s * 1e6,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "gbps": self.gbps,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "cv": self.cv,
            "info": self.info,
        }
        if with_samples:
            d["samples_s"] = list(self.samples_s)
        return d


@dataclass(frozen=True)
class Remeasure:
    """The gate's re-measure of a flagged case: the new measurement, and where it was made.

    ``fresh`` is True when it was measured in a new process state -- a collective in a new process
    group, a copy in a new process with new streams and buffers -- so that a condition fixed when the
    first state was set up (an algorithm, a buffer placement) does not decide the verdict twice.  It is
    False once the session's ``MAX_FRESH_REMEASURES`` are used up; ``how`` says where it was measured
    and, when not fresh, why ("in a new process", "in the same process group: the session's 24 fresh
    re-measures were used up").
    """

    measurement: Measurement
    fresh: bool
    how: str


@dataclass
class Record:
    """One measurement made by one test, with what was checked of it."""

    nodeid: str
    measurement: "Measurement"
    checks: list[str] = field(default_factory=list)  # human lines: "bandwidth >= 40 GB/s: ok"
    status: Status = Status.MEASURED
    baseline: Optional[dict[str, Any]] = None  # the gate's verdict, as in the JSON report
    #: the same measurement again, in a fresh process state while the session has fresh re-measures left
    #: (the gate's re-measure; each call is a new one)
    redo: Optional[Callable[[], "Remeasure"]] = None
    #: the same measurement in the session's i-th other process group (``fold(i)``, i >= 1), which the gate
    #: asks for before judging a case of a folded class (``--gpucomm-folds``); None: it cannot be had
    fold: Optional[Callable[[int], "Measurement"]] = None
    #: the same measurement in a fresh process (group) whose environment has these variables set (a name mapped
    #: to None: unset): the cause test's (:mod:`pytest_gpucomm.gate.cause`); None: it cannot be had
    with_env: Optional[Callable[[Mapping[str, Optional[str]]], "Measurement"]] = None
