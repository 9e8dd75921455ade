"""The sweeps of a run or of a baseline file: one op measured at several sizes, a point per size.

**A sweep** (:class:`Sweep`) is one op, on one device pair or world, one dtype, one form (in place or not),
measured at several sizes: a :class:`SweepPoint` per size holds the median time and the figure the table
shows at that size (busbw for collectives, algbw for copies: ``Measurement.gbps``).  :func:`sweeps` groups
measurements (or the report's records, or ``(test id, measurement)`` pairs) into sweeps;
:func:`sweeps_from_report` does it for a saved JSON report and :func:`sweeps_from_baseline` for a baseline
file's cases (a point per size: the median over the baseline's runs of their median time and figure, with
the lowest and highest run median as its band).

A sweep's curve -- its latency floor, peak, the sizes reaching a share of the peak, the fitted
latency-bandwidth model -- is :mod:`.curve_fit`'s; today's curve against the baseline's, and the report's
"curves" section, are :mod:`.curves`'.

Pure numbers (numpy); no torch, no pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..measurement import Measurement, both_ways_op
from ..units import GB, describe_duration, describe_size, size_token

__all__ = ["SweepKey", "SweepPoint", "Sweep", "sweeps", "sweeps_from_report", "sweeps_from_baseline", "sweep_id",
           "sweep_key", "form_of_id"]

#: the key of a sweep (:func:`sweep_key`): the test id without its size, op, devices, world size, dtype, node
#: label, and the form where there is no test id
SweepKey = tuple[str, str, tuple[str, ...], int, Optional[str], str, str]


@dataclass(frozen=True)
class SweepPoint:
    """One size of a sweep: the median time and the table's figure at it (GB/s, GB = 1e9 bytes).

    ``lo_gbps`` / ``hi_gbps``: the figure's spread where known -- for a measurement the 10th and 90th
    percentile of its per-iteration figures, for a baseline the lowest and highest of its runs' medians.
    ``n``: the samples (a measurement) or runs (a baseline) behind the median.
    """

    size_bytes: int
    median_s: float
    gbps: float
    n: int = 0
    lo_gbps: Optional[float] = None
    hi_gbps: Optional[float] = None

    def to_dict(self) -> dict[str, object]:
        return {"size_bytes": self.size_bytes, "median_s": self.median_s, "gbps": self.gbps, "n": self.n,
                "lo_gbps": self.lo_gbps, "hi_gbps": self.hi_gbps}


def _check_point(p: SweepPoint, where: str) -> None:
    origin = f" in {where}" if where else ""
    if isinstance(p.size_bytes, bool) or not isinstance(p.size_bytes, (int, np.integer)) or p.size_bytes <= 0:
        raise ValueError(f"invalid size {p.size_bytes!r}{origin}: a size must be a positive whole number of bytes")
    for name, value in (("median time", p.median_s), ("figure (GB/s)", p.gbps)):
        if not isinstance(value, (int, float, np.floating)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"invalid {name} {value!r} at size {describe_size(int(p.size_bytes))}{origin}: "
                             "it must be a positive finite number")


@dataclass(frozen=True)
class Sweep:
    """One op on one device pair or world, one dtype, one form, over sizes (``points``, by size).

    ``figure``: "busbw" (a collective) or "algbw" (a copy).  ``key`` identifies the sweep across runs (the
    test id without its size, op, devices, world size, dtype, node): :func:`compare_curves` callers match
    today's sweeps to the baseline's by it.  ``source`` says where the data came from, for messages.
    Raises ValueError on a non-positive size, time or figure, or a size given twice, naming the value."""

    op: str
    where: str
    points: tuple[SweepPoint, ...]
    world_size: int = 1
    dtype: Optional[str] = None
    form: str = ""  # "in place", "out of place" or "" (not a collective, or not known)
    figure: str = "algbw"
    key: tuple[Any, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        where = self.source or self.label
        pts = tuple(self.points)
        for p in pts:
            _check_point(p, where)
        pts = tuple(sorted(pts, key=lambda p: p.size_bytes))
        for a, b in zip(pts, pts[1:]):
            if a.size_bytes == b.size_bytes:
                raise ValueError(f"size {describe_size(int(a.size_bytes))} given twice in {where}: a sweep has "
                                 f"one point per size (medians {describe_duration(a.median_s)} and "
                                 f"{describe_duration(b.median_s)})")
        if not pts:
            raise ValueError(f"no sizes in {where}: a sweep needs at least one measured size")
        object.__setattr__(self, "points", pts)
        if not self.key:
            object.__setattr__(self, "key", ("", self.op, self.where, self.world_size, self.dtype, self.form))

    @property
    def label(self) -> str:
        """``all_gather out of place, 2 ranks (gloo), float32``."""
        head = self.op + (f" {self.form}" if self.form else "")
        return f"{head}, {self.where}" + (f", {self.dtype}" if self.dtype else "")

    @property
    def sizes(self) -> list[int]:
        return [p.size_bytes for p in self.points]

    def __len__(self) -> int:
        return len(self.points)

    def only(self, sizes: Iterable[int]) -> "Sweep":
        """The same sweep restricted to ``sizes``."""
        keep = set(sizes)
        return Sweep(op=self.op, where=self.where, points=tuple(p for p in self.points if p.size_bytes in keep),
                     world_size=self.world_size, dtype=self.dtype, form=self.form, figure=self.figure,
                     key=self.key, source=self.source)

    @property
    def figure_per_rate(self) -> float:
        """The table's figure (GB/s) per size / time (GB/s): the busbw factor times bytes per iteration /
        size (1 for a copy one way, 2 both ways, 2 (n-1) / n for all_reduce on n ranks); the median over
        the points (an even number of samples makes the median figure and the median time not exactly
        reciprocal)."""
        return float(np.median([p.gbps * p.median_s * GB / p.size_bytes for p in self.points]))

    def to_dict(self) -> dict[str, object]:
        return {"op": self.op, "where": self.where, "world_size": self.world_size, "dtype": self.dtype,
                "form": self.form, "figure": self.figure, "label": self.label,
                "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_measurements(cls, measurements: Sequence[Measurement], *, source: str = "",
                          key: tuple[Any, ...] = ()) -> "Sweep":
        """The sweep of ``measurements``, one per size, all of one
        op, place, world, dtype and form (ValueError naming the first that differs)."""
        if not measurements:
            raise ValueError(f"no measurements for a sweep{f' ({source})' if source else ''}")
        first = measurements[0]
        head = _measurement_head(first)
        for m in measurements[1:]:
            if _measurement_head(m) != head:
                raise ValueError(f"measurement {m.op} on {m.where} at {describe_size(int(m.size_bytes))} is not of the "
                                 f"sweep of {first.op} on {first.where}{f' ({source})' if source else ''}: a sweep is "
                                 "one op, place, world size, dtype and form")
        return cls(op=first.op, where=first.where, points=tuple(_point_of(m) for m in measurements),
                   world_size=int(first.world_size), dtype=first.dtype, form=_form_of(first),
                   figure="busbw" if first.kind == "collective" else "algbw", key=key, source=source)


def _form_of(m: Measurement) -> str:
    in_place = (m.info or {}).get("in_place")
    return "" if in_place is None else ("in place" if in_place else "out of place")


def _measurement_head(m: Measurement) -> tuple[object, ...]:
    return (m.op, m.where, int(m.world_size), m.dtype, _form_of(m), m.kind)


def _point_of(m: Measurement) -> SweepPoint:
    figures = np.asarray(m.samples_gbps, dtype=float)
    lo, hi = (float(np.percentile(figures, 10)), float(np.percentile(figures, 90))) if figures.size else (None, None)
    return SweepPoint(size_bytes=int(m.size_bytes), median_s=float(m.median_s), gbps=float(m.gbps), n=int(m.n),
                      lo_gbps=lo, hi_gbps=hi)


def sweep_id(test_id: str, size_bytes: int, requested_bytes: Optional[int] = None) -> str:
    """The test id without its size parameter: ``suites/test_collectives.py::test_collective[float32-1KiB-
    all_reduce-inplace]`` -> ``...::test_collective[float32-all_reduce-inplace]``.  The size parameter is
    the part of the id (between dashes) that reads as the size (``size_token``: the requested size where
    the op rounded it to whole elements); an id without one is returned whole (its test is then a sweep of
    its own)."""
    if not test_id.endswith("]") or "[" not in test_id:
        return test_id
    head, params = test_id[:-1].split("[", 1)
    parts = params.split("-")
    for size in (requested_bytes, size_bytes):
        if size:
            token = size_token(int(size))
            if token in parts:
                parts.remove(token)
                return f"{head}[{'-'.join(parts)}]" if parts else head
    return test_id


def sweep_key(test_id: str, m: Measurement) -> SweepKey:
    """The key of the sweep a measurement of test ``test_id`` belongs to: the test id without its size
    (:func:`sweep_id`), op, devices, world size, dtype, node, and the form where there is no test id."""
    sid = sweep_id(test_id, int(m.size_bytes), (m.info or {}).get("requested_bytes")) if test_id else ""
    return (sid, m.op, tuple(m.devices), int(m.world_size), m.dtype, m.node_label, "" if sid else _form_of(m))


def _as_pair(item: Any) -> tuple[str, Measurement]:
    if isinstance(item, tuple) and len(item) == 2:
        return str(item[0]), item[1]
    if hasattr(item, "measurement"):  # a state.Record
        return str(getattr(item, "nodeid", "")), item.measurement
    return "", item


def sweeps(items: Iterable[object], *, min_sizes: int = 2) -> list[Sweep]:
    """Group measurements into sweeps, in the order each sweep first appears, each ordered by size.

    ``items``: ``Measurement``, ``(test id, Measurement)`` pairs, or records with ``.nodeid`` and
    ``.measurement`` (the report's).  Measurements of one test (its id without the size parameter, see
    :func:`sweep_id`), op, place (devices or world, node), world size, dtype and form make a sweep.  A
    training-step pattern (a measurement with ``info["step_comm_s"]``) is not a sweep over sizes and is
    left out, as is a measurement whose figure is 0 (the busbw of a collective on one rank, where nothing
    crosses a bus: nccl-tests reports 0 too) and a group of fewer than ``min_sizes`` sizes.  A size
    measured twice in one group is a ValueError naming the size and both tests."""
    groups: dict[SweepKey, list[tuple[str, Measurement]]] = {}
    for item in items:
        test_id, m = _as_pair(item)
        if "step_comm_s" in (m.info or {}):
            continue
        if float(m.gbps) == 0.0:  # busbw of a collective on one rank: nothing crosses a bus, no curve
            continue
        groups.setdefault(sweep_key(test_id, m), []).append((test_id, m))
    out = []
    for key, members in groups.items():
        seen: dict[int, str] = {}
        for test_id, m in members:
            size = int(m.size_bytes)
            if size in seen:
                raise ValueError(f"size {describe_size(size)} measured twice in the sweep of {m.op} on {m.where}: "
                                 f"{seen[size] or 'a measurement'} and {test_id or 'a measurement'}")
            seen[size] = test_id
        if len(members) < min_sizes:
            continue
        out.append(Sweep.from_measurements([m for _, m in members], key=key,
                                           source=key[0] or f"{members[0][1].op} on {members[0][1].where}"))
    return out


def sweeps_from_report(doc: Mapping[str, object], *, min_sizes: int = 2) -> list[Sweep]:
    """The sweeps of a JSON report (``report.json_document``: its rows, with samples)."""
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise ValueError(f"not a pytest-gpucomm report: no list of rows (format {doc.get('format')!r})")
    return sweeps([(str(r.get("test", "")), Measurement.from_dict(r)) for r in rows], min_sizes=min_sizes)


def form_of_id(test_id: str) -> str:
    """"in place" / "out of place" where the test id's parameters say so (``inplace`` / ``outplace``, as
    ``suites/test_collectives.py`` names its cases), else ""."""
    params = test_id[:-1].split("[", 1)[1].split("-") if test_id.endswith("]") and "[" in test_id else []
    return "in place" if "inplace" in params else ("out of place" if "outplace" in params else "")


def sweeps_from_baseline(doc: Mapping[str, object], *, min_sizes: int = 2) -> list[Sweep]:
    """The sweeps of a baseline file (``gate.store`` schema): a point per case, its median time the median
    over the runs of their p50, its figure the median over the runs of their median figure, its band the
    lowest and highest run median.  Keys match :func:`sweeps`' for the same tests (the node label is ""):
    a collective is a case with world size above 1 or devices named ``rank*``; its form (in the label only)
    comes from an ``inplace`` / ``outplace`` parameter of the test id."""
    cases = doc.get("cases")
    if not isinstance(cases, Mapping):
        raise ValueError(f"not a pytest-gpucomm baseline: no cases (schema {doc.get('schema')!r})")
    groups: dict[SweepKey, list[tuple[str, SweepPoint]]] = {}
    heads: dict[SweepKey, dict[str, Any]] = {}
    for name, case in cases.items():
        runs = [r.get("summary") or {} for r in case.get("runs", [])]
        runs = [r for r in runs if r.get("median_gbps") and r.get("p50_us")]
        if not runs:
            continue
        size = int(case["size_bytes"])
        devices = tuple(case.get("devices") or ())
        world = int(case.get("world_size", 1))
        sid = sweep_id(str(case.get("test_id", name)), size)
        key = (sid, case["op"], devices, world, case.get("dtype"), "", "")
        g = [float(r["median_gbps"]) for r in runs]
        point = SweepPoint(size_bytes=size, median_s=float(np.median([float(r["p50_us"]) for r in runs])) * 1e-6,
                           gbps=float(np.median(g)), n=len(runs), lo_gbps=min(g), hi_gbps=max(g))
        groups.setdefault(key, []).append((str(name), point))
        collective = world > 1 or any(d.startswith("rank") for d in devices)
        where = (f"{world} ranks" if collective else
                 ("<->" if both_ways_op(str(case["op"])) else "->").join(devices))
        heads[key] = {"op": case["op"], "where": where, "world_size": world, "dtype": case.get("dtype"),
                      "figure": "busbw" if collective else "algbw", "form": form_of_id(sid)}
    out = []
    for key, members in groups.items():
        if len(members) < min_sizes:
            continue
        source = f"baseline {doc.get('name', '')}: {key[0]}".replace("  ", " ")
        out.append(Sweep(points=tuple(p for _, p in members), key=key, source=source, **heads[key]))
    return out

