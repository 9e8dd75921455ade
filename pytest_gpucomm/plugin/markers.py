"""The gpucomm markers: their signatures, validation and the size sweep.

    @bandwidth(min_gbps=40, size="16MB", tolerance=0.05)   # median GB/s (busbw for collectives) >= min_gbps
    @bandwidth(tail_tolerance=2.0)                          # the TAIL verdict's tolerance for this test
    @latency(max_us=25, size="8KB", percentile=99)          # latency percentile <= max_us (single ops of a
                                                            # collective; per iteration for a copy)
    @sizes("4KB", "1MB", "16MB")                            # a sweep over a list ...
    @sizes(start="4KiB", stop="1GiB", factor=4)             # ... or a geometric range
    @gpus(2)                                                # needs 2 devices, else skipped with the reason
    @world(4)                                               # the process_group fixture gets 4 ranks

Every marker is validated; a bad one is an error that names the test and the keyword.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Sequence, TypeVar

import pytest

from .. import checks
from ..checks import CheckError, Origin
from ..units import SizeError, describe_size, format_gbps, parse_size, size_token
from ..vocab import (
    DEFAULT_TAIL_TOLERANCE,
    DEFAULT_TOLERANCE,
    FIXTURE_NAMES,
    MARKER_NAMES,
    MAX_SWEEP_SIZES,
    MAX_TIMEOUT_S,
    Status,
)

if TYPE_CHECKING:
    from ..measurement import Measurement, Record

__all__ = [
    "MarkerError",
    "closest_mark",
    "Marks",
    "MARKS_KEY",
    "marks_of",
    "uses_gpucomm",
    "check_thresholds",
    "latency_percentile_us",
    "MARKER_LINES",
    "BandwidthSpec",
    "LatencySpec",
    "read_bandwidth",
    "read_latency",
    "read_sizes",
    "SweepSize",
    "read_gpus",
    "read_world",
    "read_rank_timeout",
    "size_id",
]

_MARKER_HELP = {
    "bandwidth": "bandwidth(min_gbps=None, size=None, tolerance=None, tail_tolerance=None): the measured median "
    "bandwidth in GB/s (busbw for collectives) must be at least min_gbps; size is the default message size of the "
    f"test's measurements; tolerance overrides the baseline tolerance (default {DEFAULT_TOLERANCE:g}) for this test, "
    f"tail_tolerance the tail verdict's (default {DEFAULT_TAIL_TOLERANCE:g}).",
    "latency": "latency(max_us=None, size=None, percentile=50): the given percentile of latency in microseconds must "
    "be at most max_us (percentile=99 for tail latency): of the single ops, each timed on its own, where the "
    "measurement has them (collectives), else of the per-iteration samples.",
    "sizes": "sizes(*sizes, start=None, stop=None, factor=2): parametrize the test's 'size' argument (bytes) over a "
    "list of sizes or a geometric range start..stop; sizes above --gpucomm-max-size are left out.",
    "gpus": "gpus(n): the test needs n devices (GPUs, or logical host devices in CPU mode); with fewer it is skipped.",
    "world": "world(n): the process_group fixture of this test has n ranks (default: every visible GPU, 2 on CPU).",
    "rank_timeout": "rank_timeout(seconds): the test fails as hung when its work on the ranks takes longer than this "
    "(overrides --gpucomm-timeout for this test).",
    "engines": "engines(*names): the engines this test runs on with --gpucomm-engine (torch, nccl-tests); on the "
    "others it is skipped, saying so. Default: every engine of the session.",
}
#: the ``markers`` ini lines, one per name of vocab.MARKER_NAMES
MARKER_LINES = [_MARKER_HELP[name] for name in MARKER_NAMES]

T = TypeVar("T")


# pytest.UsageError is @final in pytest's stubs, but a subclass is how a marker's error is a usage error
# (exit code 4, no traceback) and still a type of its own that callers and tests can tell apart
class MarkerError(pytest.UsageError):  # type: ignore[misc]
    """A marker with a bad argument; the message names the test and the keyword."""


def _marks_of(obj: object, name: str) -> list[pytest.Mark]:
    """The ``@name`` marks written on ``obj`` itself (its ``pytestmark``, not its base classes')."""
    raw = vars(obj).get("pytestmark", []) if isinstance(obj, type) else getattr(obj, "pytestmark", [])
    marks: Sequence[Any] = raw if isinstance(raw, (list, tuple)) else [raw]  # Marks or MarkDecorators
    return [getattr(m, "mark", m) for m in marks if getattr(getattr(m, "mark", m), "name", None) == name]


def _direct_marks(owner: object, name: str) -> list[pytest.Mark]:
    """The ``@name`` marks a node itself gives: a test's parametrize marks (which override its decorators),
    else its decorators; a class's own (a base class's are overridden); a module's ``pytestmark``."""
    callspec = getattr(owner, "callspec", None)
    params = [m for m in getattr(callspec, "marks", ()) if m.name == name]
    if params:
        return params
    obj = getattr(owner, "function", None) or getattr(owner, "obj", None)
    return _marks_of(obj, name) if obj is not None else []


def closest_mark(node: pytest.Item, name: str) -> Optional[pytest.Mark]:
    """The test's ``@name`` marker: the closest one (a parametrize mark over the function's decorator over
    its class's over a base class's over its module's).  Two of them written on the same function, class,
    module or parameter are a MarkerError: which one was meant is unclear."""
    for owner, mark in node.iter_markers_with_node(name):
        direct = _direct_marks(owner, name)
        if len(direct) > 1:
            raise MarkerError(
                f"{node.nodeid}: {owner.nodeid or owner.name} has two @{name} markers ({_show(direct[0])} and "
                f"{_show(direct[1])}); give one"
            )
        return direct[0] if direct else mark
    return None


def _show(mark: pytest.Mark) -> str:
    args = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
    return f"@{mark.name}({', '.join(args)})"


def _call(sig: Callable[..., dict[str, T]], mark: pytest.Mark, where: str) -> dict[str, T]:
    try:
        return sig(*mark.args, **mark.kwargs)
    except TypeError as e:
        msg = str(e).split(")", 1)[-1].strip() if ")" in str(e) else str(e)
        raise MarkerError(f"{where}: invalid @{mark.name} marker: {msg}") from None


def _checked(check: Callable[..., T], mark: str, key: str, value: object, where: str, **kw: Any) -> T:
    """A marker argument through its range check (``checks``); out of range, a MarkerError naming the test."""
    try:
        return check(Origin.marker(where, mark, key, value), **kw)
    except CheckError as e:
        raise MarkerError(str(e)) from None


def _number(value: object, mark: str, key: str, where: str, *, positive: bool = False) -> float:
    return _checked(checks.number, mark, key, value, where, positive=positive)


def _size(value: Any, mark: str, key: str, where: str) -> int:
    try:
        return parse_size(value, f"{where} @{mark}({key}=...)")
    except SizeError as e:
        raise MarkerError(str(e)) from None


@dataclass(frozen=True)
class BandwidthSpec:
    min_gbps: Optional[float]
    size: Optional[int]
    tolerance: Optional[float]
    tail_tolerance: Optional[float] = None


@dataclass(frozen=True)
class LatencySpec:
    max_us: Optional[float]
    size: Optional[int]
    percentile: float


def _bandwidth_sig(min_gbps: object = None, size: object = None, tolerance: object = None,
                   tail_tolerance: object = None) -> dict[str, object]:
    return {"min_gbps": min_gbps, "size": size, "tolerance": tolerance, "tail_tolerance": tail_tolerance}


def _latency_sig(max_us: object = None, size: object = None, percentile: object = 50) -> dict[str, object]:
    return {"max_us": max_us, "size": size, "percentile": percentile}


def read_bandwidth(item: pytest.Item) -> Optional[BandwidthSpec]:
    mark = closest_mark(item, "bandwidth")
    if mark is None:
        return None
    where = item.nodeid
    kw = _call(_bandwidth_sig, mark, where)
    min_gbps = None if kw["min_gbps"] is None else _number(kw["min_gbps"], "bandwidth", "min_gbps", where)
    size = None if kw["size"] is None else _size(kw["size"], "bandwidth", "size", where)
    tol = None if kw["tolerance"] is None else _checked(checks.tolerance, "bandwidth", "tolerance",
                                                         kw["tolerance"], where)
    tail = None if kw["tail_tolerance"] is None else _checked(checks.tail_tolerance, "bandwidth", "tail_tolerance",
                                                                kw["tail_tolerance"], where)
    return BandwidthSpec(min_gbps, size, tol, tail)


def read_latency(item: pytest.Item) -> Optional[LatencySpec]:
    mark = closest_mark(item, "latency")
    if mark is None:
        return None
    where = item.nodeid
    kw = _call(_latency_sig, mark, where)
    max_us = None if kw["max_us"] is None else _number(kw["max_us"], "latency", "max_us", where, positive=True)
    size = None if kw["size"] is None else _size(kw["size"], "latency", "size", where)
    pct = _checked(checks.percentile, "latency", "percentile", kw["percentile"], where)
    return LatencySpec(max_us, size, pct)


def _sizes_sig(*sizes: Any, start: Any = None, stop: Any = None, factor: Any = 2) -> dict[str, Any]:
    return {"sizes": sizes, "start": start, "stop": stop, "factor": factor}


def read_sizes(mark: pytest.Mark, where: str) -> list[int]:
    """The sizes of a @sizes marker, in bytes, in order, without duplicates."""
    kw = _call(_sizes_sig, mark, where)
    listed, start, stop = kw["sizes"], kw["start"], kw["stop"]
    if listed and (start is not None or stop is not None):
        raise MarkerError(f"{where}: invalid @sizes marker: give either a list of sizes or start=/stop=, not both")
    if len(listed) > MAX_SWEEP_SIZES:
        raise MarkerError(f"{where}: @sizes lists {len(listed):,} sizes; at most {MAX_SWEEP_SIZES}")
    if listed:
        out = [_size(v, "sizes", f"#{i}", where) for i, v in enumerate(listed)]
    else:
        if start is None or stop is None:
            raise MarkerError(f"{where}: invalid @sizes marker: give a list of sizes, or both start= and stop=")
        lo = _size(start, "sizes", "start", where)
        hi = _size(stop, "sizes", "stop", where)
        f = _number(kw["factor"], "sizes", "factor", where)
        if f <= 1:
            raise MarkerError(f"{where}: @sizes(factor={kw['factor']!r}): factor must be greater than 1")
        if hi < lo:
            raise MarkerError(f"{where}: invalid @sizes marker: stop {hi} bytes is smaller than start {lo} bytes")
        count = int(math.floor(math.log(hi / lo) / math.log(f) + 1e-9)) + 1
        if count > MAX_SWEEP_SIZES:
            raise MarkerError(
                f"{where}: @sizes(start={start!r}, stop={stop!r}, factor={kw['factor']!r}) would make {count:,} "
                f"sizes; at most {MAX_SWEEP_SIZES} (raise the factor)"
            )
        out, s = [], float(lo)
        while s <= hi * (1 + 1e-12):
            out.append(int(round(s)))
            s *= f
    return list(dict.fromkeys(out))  # in order, each size once


@dataclass(frozen=True)
class SweepSize:
    """A size of a test's @sizes sweep, parsed once at collection (:func:`read_sizes`): the value of its
    ``size`` parameter, which the ``size`` fixture and ``comm`` read without parsing it again (a size a test
    parametrizes itself is parsed where it is measured)."""

    nbytes: int


def _count_sig(n: object) -> dict[str, object]:
    return {"n": n}


def _count(item: pytest.Item, name: str) -> Optional[int]:
    mark = closest_mark(item, name)
    if mark is None:
        return None
    n = _call(_count_sig, mark, item.nodeid)["n"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise MarkerError(f"{item.nodeid}: @{name}({n!r}): expected a positive whole number")
    return n


def _seconds_sig(seconds: object) -> dict[str, object]:
    return {"seconds": seconds}


def read_rank_timeout(item: pytest.Item) -> Optional[float]:
    mark = closest_mark(item, "rank_timeout")
    if mark is None:
        return None
    v = _call(_seconds_sig, mark, item.nodeid)["seconds"]
    x = _number(v, "rank_timeout", "seconds", item.nodeid, positive=True)
    if x > MAX_TIMEOUT_S:
        raise MarkerError(f"{item.nodeid}: @rank_timeout({v!r}): at most {MAX_TIMEOUT_S:g} seconds")
    return x


def read_gpus(item: pytest.Item) -> Optional[int]:
    return _count(item, "gpus")


def read_world(item: pytest.Item) -> Optional[int]:
    return _count(item, "world")


def size_id(nbytes: int) -> str:
    """Test id of a size: '4KiB', '1.5MB', '512B'; the byte count where no short form is exact ('4097B'),
    so that two sizes never share an id."""
    return size_token(nbytes)


@dataclass(frozen=True)
class Marks:
    """The gpucomm markers of one test, read and checked once (``marks_of``)."""

    bandwidth: Optional[BandwidthSpec]
    latency: Optional[LatencySpec]
    gpus: Optional[int]
    world: Optional[int]
    rank_timeout_s: Optional[float]


MARKS_KEY = pytest.StashKey[Marks]()


def marks_of(item: pytest.Item) -> Marks:
    """The test's markers, parsed on first use and kept in ``item.stash``; a bad one raises MarkerError."""
    marks = item.stash.get(MARKS_KEY, None)
    if marks is None:
        marks = Marks(read_bandwidth(item), read_latency(item), read_gpus(item), read_world(item),
                      read_rank_timeout(item))
        item.stash[MARKS_KEY] = marks
    return marks


_USES_KEY = pytest.StashKey[bool]()


def uses_gpucomm(item: pytest.Item) -> bool:
    """Whether the test uses a gpucomm fixture or marker (worked out once, kept in ``item.stash``)."""
    uses = item.stash.get(_USES_KEY, None)
    if uses is None:
        uses = not FIXTURE_NAMES.isdisjoint(getattr(item, "fixturenames", ())) or any(
            item.get_closest_marker(m) for m in MARKER_NAMES)
        item.stash[_USES_KEY] = uses
    return uses


#: the single-op figures of ``info["tail"]`` that are exact percentiles: percentile -> key
_TAIL_FIGURES: dict[float, Literal["p50_us", "p99_us", "p999_us", "max_us"]] = {
    50.0: "p50_us", 99.0: "p99_us", 99.9: "p999_us", 100.0: "max_us"}


def latency_percentile_us(m: "Measurement", percentile: float) -> tuple[float, str]:
    """The latency percentile that @latency checks, in microseconds, and what it is of: the single ops' (each
    timed on its own: ``info["tail"]``) where the measurement has them -- the exact figure at 50, 99, 99.9
    and 100, else from their histogram (within 0.25 %) --, else the per-iteration samples' (a small message's
    sample is the mean of a batch, which hides a slow op)."""
    tail = m.info.get("tail") if isinstance(getattr(m, "info", None), dict) else None
    if isinstance(tail, dict) and tail.get("n"):
        of = f"over {int(tail['n']):,} single ops"
        key = _TAIL_FIGURES.get(float(percentile))
        exact = tail.get(key) if key is not None else None
        if exact is not None:
            return float(exact), of
        if isinstance(tail.get("hist"), dict):
            from ..sketches import Histogram

            return Histogram.from_dict(tail["hist"], "info['tail']['hist']").quantile(percentile / 100) * 1e6, of
    return m.latency_us(percentile), f"per iteration ({m.n} samples)"


def check_thresholds(marks: Marks, records: "list[Record]") -> list[str]:
    """Check each measurement against the test's @bandwidth / @latency thresholds; note the result on the
    record (``checks``, ``status``) and return the failure messages."""
    failures: list[str] = []
    bw, lat = marks.bandwidth, marks.latency
    for r in records:
        m = r.measurement
        failed = False
        what = f"{m.op} on {m.where} at {describe_size(m.size_bytes)}"
        label = "busbw" if m.kind == "collective" else "algbw"
        if bw is not None and bw.min_gbps is not None:
            ok = m.gbps >= bw.min_gbps
            r.checks.append(f"bandwidth >= {bw.min_gbps:g} GB/s: {'ok' if ok else 'FAIL'} ({format_gbps(m.gbps)} GB/s)")
            if not ok:
                failed = True
                failures.append(
                    f"bandwidth below threshold: {what}: measured {format_gbps(m.gbps)} GB/s ({label}, median of {m.n} "
                    f"samples), required >= {bw.min_gbps:g} GB/s"
                )
        if lat is not None and lat.max_us is not None:
            got, of = latency_percentile_us(m, lat.percentile)
            ok = got <= lat.max_us
            r.checks.append(f"p{lat.percentile:g} latency <= {lat.max_us:g} us: "
                            f"{'ok' if ok else 'FAIL'} ({got:.2f} us)")
            if not ok:
                failed = True
                failures.append(
                    f"latency above threshold: {what}: measured p{lat.percentile:g} {got:.2f} us {of}, "
                    f"required <= {lat.max_us:g} us"
                )
        r.status = Status.FAILED if failed else (Status.OK if r.checks else Status.MEASURED)
    return failures
