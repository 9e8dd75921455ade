"""The bandwidth curve of a sweep: latency floor, peak, the sizes where the curve reaches a share of its
peak, and a fitted latency-bandwidth model; and today's curve compared with the baseline's.

Pure numbers (numpy; scipy when a model is fitted); no torch, no pytest.  The report's "curves" section
(terminal and JSON), ``gpucomm show`` / ``compare`` / ``html`` and the plots call it (:func:`curve_report`).

**A sweep** (:class:`Sweep`) is one op, on one device pair or world, one dtype, one form (in place or not),
measured at several sizes: a :class:`SweepPoint` per size holds the median time and the figure the table
shows at that size (busbw for collectives, algbw for copies: ``Measurement.gbps``).  :func:`sweeps` groups
measurements (or the report's records, or ``(test id, measurement)`` pairs) into sweeps;
:func:`sweeps_from_report` does it for a saved JSON report and :func:`sweeps_from_baseline` for a baseline
file's cases (a point per size: the median over the baseline's runs of their median time and figure, with
the lowest and highest run median as its band).

**The measured figures** (:class:`CurveModel`, from :func:`curve_model`):

* the latency floor: the median time at the smallest size, and that size;
* the peak: the largest median figure, and its size.  When it is at the largest size and the curve still
  rises there -- the slope of log figure over log size between the two largest sizes above
  ``STILL_RISING`` (0.035, a rise of 5 % over a factor of 4) -- the curve is *still rising*: its peak lies
  beyond the sweep, and the sizes below are not given (a share of a peak not seen is no figure).  On a
  latency-bandwidth curve that slope is below 1 - share of the asymptote, so a flatter end means the
  largest size is within 3.5 % of the asymptote; on H200 the figures of the two largest sizes move by at
  most 3 % from run to run, less than that rise;
* the half-peak size and the smallest sizes at which the curve reaches 80 % and 90 % of its peak:
  interpolated linearly in log size and log figure between the two measured sizes around the crossing,
  and marked ``interpolated`` (rounded to 3 significant digits: the interpolation error is larger).  None,
  with a reason, when the sweep starts above that share already.

  How far off the interpolation is (:func:`interpolation_error`): a latency-bandwidth curve is concave in
  log-log, so the chord lies below it and the interpolated size is never below the true one.  Sampled by
  factors of 4 (the suites' sweeps) it is at most 12.9 % above it for the half-peak size, 20.8 % for 80 %
  and 23.5 % for 90 % (the worst over where the sizes fall); by factors of 2, 3.1 %, 4.9 % and 5.5 %.

**The fitted model** t(S) = a + S / B (latency a, bandwidth B; the "alpha-beta" or Hockney model, whose
half-performance size is n_half = a B), fitted to the median times with ``scipy.optimize.least_squares``
on relative residuals, t_model / t - 1, with the soft-L1 loss at scale ``FIT_LOSS_SCALE`` (5 %), a >= 0 and
1 / B >= 0: a size off the line by much more than 5 % weighs like its absolute residual, not its square.
B is given in the units of the table's figure (busbw for a collective: B x busbw / algbw).  The fit's
quality: the median and largest absolute relative residual, and R^2 of log t.  The model says it cannot
tell (``reason``, no latency and no bandwidth) when

* the sweep has fewer than ``MIN_FIT_SIZES`` (3) sizes: a line through two sizes fits them exactly and
  says nothing of whether the curve is a line;
* the median absolute relative residual is above ``MAX_MEDIAN_RESIDUAL`` (5 %, the gate's default
  tolerance: a model that misses the typical size by more than the gate forgives describes the curve
  less well than the gate judges it) or the largest above ``MAX_RESIDUAL`` (15 %): one latency and one
  bandwidth do not describe the medians -- a protocol or algorithm that changes with the size (NCCL's LL /
  LL128 / Simple) bends the curve, or the medians are noisy;
* and it gives each parameter only where the sweep sees it: the bandwidth where the largest size's time is
  at least half transfer (S / B >= a: the sweep reaches past n_half), the latency where the smallest
  size's time is at least half latency (the sweep starts below n_half); else that one is None and the
  reason says which regime the sweep does not reach.

The model's peak efficiency, measured peak / B, is a diagnostic: well below 1 the largest sizes have not
reached the asymptote or the curve bends down at the end; above 1 the curve climbs past the line.

**Comparison** (:func:`compare_curves`): today's sweep against the baseline's, on the sizes both have (the
others are named): the peak ratio (today / baseline, below 1 = slower), the latency floor ratio (time,
today / baseline, above 1 = slower), the 80 % / 90 % sizes of each and the worst size's figure ratio, in
one line: ``all_reduce in place, 2 ranks (nccl), float32: peak 0.99x, latency floor 1.38x, 80 % point ...,
90 % point 16 MiB (16,777,216 bytes) -> 64 MiB (67,108,864 bytes), worst size 1KiB 0.72x``.  The per-size
verdicts stay the rule that fails tests; the comparison explains them.

**Real runs** (the thresholds).  ``baselines/h200.json`` (2 x H200, NCCL 2.28.9, 16 runs of each case in
5 sessions; each run taken alone as a sweep): the seven copy sweeps (peer copies both ways, the both-ways
copy, host to each device and back; 4 KiB to 1 GiB by 4) fit the model with median residuals 0.5-2.1 %
and largest 0.9-8.4 % (peer copy 0 -> 1 over the runs' medians: latency 2.36 us, bandwidth 392.5 GB/s,
n_half 925 KB; measured peak 395.9 GB/s, 90 % point 14 MB).  The nine NCCL collective sweeps (seven ops,
all_gather and reduce_scatter in both forms; 1 KiB to 1 GiB by 4) miss it systematically -- over the
runs' medians the model is too fast between 1 and 16 MiB (by up to 18-44 %) and too slow at both ends --
with median residuals 3.2-9.4 % and largest 16.7-45.8 %.  15 % separates the two: the model fits all 112
copy runs and says it cannot tell for all 144 collective runs (``tests/test_curves.py`` checks it).
all_reduce, all_gather and reduce_scatter still rise at 1 GiB on H200 (slopes 0.058-0.073, 0.028-0.048
and 0.086-0.106: all_gather's straddle the threshold); broadcast, reduce, all_to_all and send_recv level
off (0.012-0.031), their 90 % points at 53-147 MB.

CPU example (gloo, 2 ranks, this project's 2-core runner shared with other jobs): ``pytest
suites/test_collectives.py -k all_reduce --gpucomm-min-time=0.2 --gpucomm-json=ar.json``, then ``python -c
"import json; from pytest_gpucomm.analysis.curves import curve_model, sweeps_from_report; [print(curve_model(s).text())
for s in sweeps_from_report(json.load(open('ar.json')))]"``.  Three runs (1 KiB to 16 MiB by 4; one at
``--gpucomm-min-time=0.1``) gave latency floors of 416-497 us at 1 KiB and peaks of 1.0-1.5 GB/s busbw, at
1, 4 and 16 MiB (per-iteration CV 16-578 % on the loaded runner); the model could not tell in any of them
(median residuals 7.9-11.9 %, largest 30-85 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..units import GB, describe_duration, describe_size, format_size, size_token

__all__ = [
    "SweepPoint",
    "Sweep",
    "CrossingSize",
    "LatencyBandwidthFit",
    "CurveModel",
    "CurveComparison",
    "curve_model",
    "fit_latency_bandwidth",
    "compare_curves",
    "sweeps",
    "sweeps_from_report",
    "sweeps_from_baseline",
    "sweep_id",
    "curve_report",
    "curve_lines",
    "CURVES_HEADING",
    "interpolation_error",
    "STILL_RISING",
    "SHARES",
    "MIN_FIT_SIZES",
    "FIT_LOSS_SCALE",
    "MAX_MEDIAN_RESIDUAL",
    "MAX_RESIDUAL",
    "form_of_id",
]

#: the slope of log figure over log size between the two largest sizes above which a peak at the largest
#: size is called still rising (0.035: a rise of 5 % over a factor of 4 in size)
STILL_RISING = 0.035
#: the shares of the peak whose sizes a curve model gives
SHARES = (0.5, 0.8, 0.9)
#: fewer sizes than this and the latency-bandwidth model cannot be checked against the curve
MIN_FIT_SIZES = 3
#: the soft-L1 loss's scale on relative residuals
FIT_LOSS_SCALE = 0.05
#: the fit is poor above this median absolute relative residual (the gate's default tolerance) ...
MAX_MEDIAN_RESIDUAL = 0.05
#: ... or above this largest one (between the H200 copies' worst, 8.4 %, and the NCCL collectives' best,
#: 16.7 %, single runs: see the module doc)
MAX_RESIDUAL = 0.15


def _pct(x: float, digits: int = 0) -> str:
    return f"{x * 100:.{digits}f} %"


def _fmt_gbps(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else (f"{x:.2f}" if x >= 1 else f"{x:.3g}")


def _round3(x: float) -> int:
    """``x`` rounded to 3 significant digits, as a whole number of bytes (at least 1)."""
    if x < 1:
        return 1
    digits = int(math.floor(math.log10(x))) - 2
    return max(1, int(round(x, -digits))) if digits > 0 else int(round(x))


# -- the data ------------------------------------------------------------------------------------------


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

    def to_dict(self) -> dict[str, Any]:
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

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "where": self.where, "world_size": self.world_size, "dtype": self.dtype,
                "form": self.form, "figure": self.figure, "label": self.label,
                "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_measurements(cls, measurements: Sequence[Any], *, source: str = "", key: tuple[Any, ...] = ()) -> "Sweep":
        """The sweep of ``measurements`` (``measurement.Measurement``, duck-typed), one per size, all of one
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


def _form_of(m: Any) -> str:
    in_place = (m.info or {}).get("in_place")
    return "" if in_place is None else ("in place" if in_place else "out of place")


def _measurement_head(m: Any) -> tuple[Any, ...]:
    return (m.op, m.where, int(m.world_size), m.dtype, _form_of(m), m.kind)


def _point_of(m: Any) -> SweepPoint:
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


def _as_pair(item: Any) -> tuple[str, Any]:
    if isinstance(item, tuple) and len(item) == 2:
        return str(item[0]), item[1]
    if hasattr(item, "measurement"):  # a state.Record
        return str(getattr(item, "nodeid", "")), item.measurement
    return "", item


def sweeps(items: Iterable[Any], *, min_sizes: int = 2) -> list[Sweep]:
    """Group measurements into sweeps, in the order each sweep first appears, each ordered by size.

    ``items``: ``Measurement``, ``(test id, Measurement)`` pairs, or records with ``.nodeid`` and
    ``.measurement`` (the report's).  Measurements of one test (its id without the size parameter, see
    :func:`sweep_id`), op, place (devices or world, node), world size, dtype and form make a sweep.  A
    training-step pattern (a measurement with ``info["step_comm_s"]``) is not a sweep over sizes and is
    left out, as is a measurement whose figure is 0 (the busbw of a collective on one rank, where nothing
    crosses a bus: nccl-tests reports 0 too) and a group of fewer than ``min_sizes`` sizes.  A size
    measured twice in one group is a ValueError naming the size and both tests."""
    groups: dict[tuple[Any, ...], list[tuple[str, Any]]] = {}
    for item in items:
        test_id, m = _as_pair(item)
        if "step_comm_s" in (m.info or {}):
            continue
        if float(m.gbps) == 0.0:  # busbw of a collective on one rank: nothing crosses a bus, no curve
            continue
        sid = sweep_id(test_id, int(m.size_bytes), (m.info or {}).get("requested_bytes")) if test_id else ""
        key = (sid, m.op, tuple(m.devices), int(m.world_size), m.dtype, m.node_label, "" if sid else _form_of(m))
        groups.setdefault(key, []).append((test_id, m))
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


def sweeps_from_report(doc: Mapping[str, Any], *, min_sizes: int = 2) -> list[Sweep]:
    """The sweeps of a JSON report (``report.json_document``: its rows, with samples)."""
    from ..measurement import Measurement

    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise ValueError(f"not a pytest-gpucomm report: no list of rows (format {doc.get('format')!r})")
    return sweeps([(str(r.get("test", "")), Measurement.from_dict(r)) for r in rows], min_sizes=min_sizes)


def form_of_id(test_id: str) -> str:
    """"in place" / "out of place" where the test id's parameters say so (``inplace`` / ``outplace``, as
    ``suites/test_collectives.py`` names its cases), else ""."""
    params = test_id[:-1].split("[", 1)[1].split("-") if test_id.endswith("]") and "[" in test_id else []
    return "in place" if "inplace" in params else ("out of place" if "outplace" in params else "")


def sweeps_from_baseline(doc: Mapping[str, Any], *, min_sizes: int = 2) -> list[Sweep]:
    """The sweeps of a baseline file (``gate.store`` schema): a point per case, its median time the median
    over the runs of their p50, its figure the median over the runs of their median figure, its band the
    lowest and highest run median.  Keys match :func:`sweeps`' for the same tests (the node label is ""):
    a collective is a case with world size above 1 or devices named ``rank*``; its form (in the label only)
    comes from an ``inplace`` / ``outplace`` parameter of the test id."""
    cases = doc.get("cases")
    if not isinstance(cases, Mapping):
        raise ValueError(f"not a pytest-gpucomm baseline: no cases (schema {doc.get('schema')!r})")
    groups: dict[tuple[Any, ...], list[tuple[str, SweepPoint]]] = {}
    heads: dict[tuple[Any, ...], dict[str, Any]] = {}
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
                 ("<->" if case["op"] == "copy_bidir" else "->").join(devices))
        heads[key] = {"op": case["op"], "where": where, "world_size": world, "dtype": case.get("dtype"),
                      "figure": "busbw" if collective else "algbw", "form": form_of_id(sid)}
    out = []
    for key, members in groups.items():
        if len(members) < min_sizes:
            continue
        source = f"baseline {doc.get('name', '')}: {key[0]}".replace("  ", " ")
        out.append(Sweep(points=tuple(p for _, p in members), key=key, source=source, **heads[key]))
    return out


# -- the model -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossingSize:
    """The smallest size at which the curve reaches ``share`` of its peak, or None with a ``reason``."""

    share: float
    size_bytes: Optional[int]
    interpolated: bool = False
    between: Optional[tuple[int, int]] = None  # the measured sizes around it
    reason: str = ""

    def text(self) -> str:
        if self.size_bytes is None:
            return f"{_pct(self.share)} point: {self.reason}"
        note = (f" (interpolated between {size_token(self.between[0])} and {size_token(self.between[1])})"
                if self.interpolated and self.between else " (measured)")
        return f"{_pct(self.share)} point {describe_size(self.size_bytes)}{note}"

    def to_dict(self) -> dict[str, Any]:
        return {"share": self.share, "size_bytes": self.size_bytes, "interpolated": self.interpolated,
                "between": list(self.between) if self.between else None, "reason": self.reason or None}


@dataclass(frozen=True)
class LatencyBandwidthFit:
    """t(S) = latency_s + S / B fitted to a sweep's medians; ``bandwidth_gbps`` is B in the table figure's
    units.  A figure the fit cannot give is None, and ``reason`` says why (a poor fit gives neither)."""

    latency_s: Optional[float]
    bandwidth_gbps: Optional[float]
    n_half_bytes: Optional[int]  # a B: the size at which the model reaches half its bandwidth
    median_residual: Optional[float]  # |t_model / t - 1|, median over the sizes
    max_residual: Optional[float]
    r2_log: Optional[float]  # R^2 of log t
    sizes: int
    reason: str = ""
    # the raw fit, kept even when not given (diagnostics): seconds and bytes per second
    fit_latency_s: Optional[float] = None
    fit_bytes_per_s: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.latency_s is not None and self.bandwidth_gbps is not None

    def text(self) -> str:
        if self.median_residual is None or self.max_residual is None:
            return f"latency-bandwidth model: cannot tell ({self.reason})"
        quality = (f"median residual {_pct(self.median_residual, 1)}, max {_pct(self.max_residual, 1)}, "
                   f"R^2 {self.r2_log:.4f} in log time, {self.sizes} sizes")
        if self.latency_s is None and self.bandwidth_gbps is None:
            if self.reason.startswith("poor fit"):
                return f"latency-bandwidth model: cannot tell ({self.reason}; R^2 {self.r2_log:.4f} in log time)"
            return f"latency-bandwidth model: cannot tell ({self.reason}; {quality})"
        lat = describe_duration(self.latency_s) if self.latency_s is not None else "?"
        bw = f"{_fmt_gbps(self.bandwidth_gbps)} GB/s" if self.bandwidth_gbps is not None else "?"
        half = f", n_half {describe_size(self.n_half_bytes)}" if self.n_half_bytes else ""
        why = f"; {self.reason}" if self.reason else ""
        return f"latency-bandwidth model: latency {lat}, bandwidth {bw}{half} ({quality}{why})"

    def to_dict(self) -> dict[str, Any]:
        return {"latency_s": self.latency_s, "bandwidth_gbps": self.bandwidth_gbps, "n_half_bytes": self.n_half_bytes,
                "median_residual": self.median_residual, "max_residual": self.max_residual, "r2_log": self.r2_log,
                "sizes": self.sizes, "reason": self.reason or None, "fit_latency_s": self.fit_latency_s,
                "fit_bytes_per_s": self.fit_bytes_per_s}


def fit_latency_bandwidth(sweep: Sweep) -> LatencyBandwidthFit:
    """Fit t = a + S / B to the sweep's median times (see the module doc for the loss and the rules)."""
    n = len(sweep)
    if n < MIN_FIT_SIZES:
        return LatencyBandwidthFit(None, None, None, None, None, None, n,
                                   reason=f"{n} size{'' if n == 1 else 's'} only: a line through fewer than "
                                          f"{MIN_FIT_SIZES} sizes fits them exactly and says nothing of the curve")
    from scipy.optimize import least_squares

    s = np.array(sweep.sizes, dtype=float)
    t = np.array([p.median_s for p in sweep.points], dtype=float)
    # scaled parameters: a in units of the smallest time, c = 1/B in units of the largest time per size
    ta, tc = t[0], t[-1] / s[-1]

    def resid(x: np.ndarray) -> np.ndarray:
        return (x[0] * ta + x[1] * tc * s) / t - 1.0

    # start from the plain least-squares line on relative residuals (linear in a and 1/B), kept in bounds
    design = np.column_stack([ta / t, tc * s / t])
    x0 = np.clip(np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0], 1e-6, None)
    best = least_squares(resid, x0, bounds=([0.0, 0.0], [np.inf, np.inf]), loss="soft_l1", f_scale=FIT_LOSS_SCALE,
                         xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=1000)
    a, c = float(best.x[0] * ta), float(best.x[1] * tc)
    model = a + c * s
    rel = np.abs(model / t - 1.0)
    logt = np.log(t)
    ss_tot = float(np.sum((logt - logt.mean()) ** 2))
    r2 = 1.0 - float(np.sum((logt - np.log(np.maximum(model, 1e-300))) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    med, mx = float(np.median(rel)), float(rel.max())
    raw_bw = 1.0 / c if c > 0 else None
    base: dict[str, Any] = dict(median_residual=med, max_residual=mx, r2_log=r2, sizes=n, fit_latency_s=a,
                                fit_bytes_per_s=raw_bw)
    if med > MAX_MEDIAN_RESIDUAL or mx > MAX_RESIDUAL:
        worst = int(np.argmax(rel))
        misses = []
        if med > MAX_MEDIAN_RESIDUAL:
            misses.append(f"median residual {_pct(med, 1)} > {_pct(MAX_MEDIAN_RESIDUAL)}")
        if mx > MAX_RESIDUAL:
            misses.append(f"largest {_pct(mx, 1)} > {_pct(MAX_RESIDUAL)}, at {describe_size(int(s[worst]))}")
        return LatencyBandwidthFit(None, None, None, **base,
                                   reason=f"poor fit: one latency and one bandwidth do not describe the medians "
                                          f"({', '.join(misses)})")
    reasons = []
    latency: Optional[float] = a
    bandwidth: Optional[float] = None if raw_bw is None else raw_bw * sweep.figure_per_rate / GB
    if c * s[-1] < a or raw_bw is None:
        share = c * s[-1] / (a + c * s[-1])
        reasons.append(f"no bandwidth: the sweep does not reach the bandwidth-bound sizes (at the largest, "
                       f"{describe_size(int(s[-1]))}, transfer is {_pct(share)} of the model's time, under half)")
        bandwidth = None
    if a < c * s[0]:
        share = a / (a + c * s[0])
        reasons.append(f"no latency: the sweep does not reach the latency-bound sizes (at the smallest, "
                       f"{describe_size(int(s[0]))}, latency is {_pct(share)} of the model's time, under half)")
        latency = None
    n_half = int(round(a * raw_bw)) if (latency is not None and bandwidth is not None and raw_bw) else None
    return LatencyBandwidthFit(latency, bandwidth, n_half if n_half and n_half > 0 else None, **base,
                               reason="; ".join(reasons))


@dataclass(frozen=True)
class CurveModel:
    """The figures of one sweep's curve (see the module doc)."""

    sweep: Sweep
    latency_floor_s: float
    latency_floor_size: int
    peak_gbps: float
    peak_size: int
    still_rising: bool
    last_rise: Optional[float]  # the figure's rise from the second largest to the largest size (0.09 = 9 %)
    last_slope: Optional[float]  # the slope of log figure over log size there
    crossings: tuple[CrossingSize, ...]
    fit: LatencyBandwidthFit

    def crossing(self, share: float) -> CrossingSize:
        for c in self.crossings:
            if abs(c.share - share) < 1e-9:
                return c
        raise KeyError(f"no crossing at share {share!r} (the model has {[c.share for c in self.crossings]})")

    @property
    def half_peak(self) -> CrossingSize:
        return self.crossing(0.5)

    @property
    def peak_efficiency(self) -> Optional[float]:
        """The measured peak over the model's bandwidth (None without a bandwidth)."""
        b = self.fit.bandwidth_gbps
        return self.peak_gbps / b if b else None

    def text(self) -> str:
        """The curve in two lines: the measured figures, then the model."""
        peak = f"peak {_fmt_gbps(self.peak_gbps)} GB/s {self.sweep.figure} at {describe_size(self.peak_size)}"
        if self.still_rising and self.last_rise is not None:
            peak += f", the largest size, still rising (+{_pct(self.last_rise)} over the size before)"
            shares = (", ".join(_pct(c.share) for c in self.crossings)
                      + " points: not known, the peak lies beyond the sweep")
        else:
            shares = "; ".join(c.text() for c in self.crossings)
        first = (f"{self.sweep.label}: latency floor {describe_duration(self.latency_floor_s)} at "
                 f"{describe_size(self.latency_floor_size)}; {peak}; {shares}")
        eff = self.peak_efficiency
        second = "  " + self.fit.text() + (f"; measured peak {_pct(eff)} of the model's bandwidth" if eff else "")
        return first + "\n" + second

    def to_dict(self) -> dict[str, Any]:
        """Keys: ``sweep`` (op, where, world_size, dtype, form, figure, label, points), ``latency_floor_s``,
        ``latency_floor_size``, ``peak_gbps``, ``peak_size``, ``still_rising``, ``last_rise``, ``last_slope``,
        ``crossings`` (share, size_bytes, interpolated, between, reason), ``fit`` (latency_s, bandwidth_gbps,
        n_half_bytes, median_residual, max_residual, r2_log, sizes, reason, fit_latency_s, fit_bytes_per_s),
        ``peak_efficiency``, ``text``."""
        return {"sweep": self.sweep.to_dict(), "latency_floor_s": self.latency_floor_s,
                "latency_floor_size": self.latency_floor_size, "peak_gbps": self.peak_gbps,
                "peak_size": self.peak_size, "still_rising": self.still_rising, "last_rise": self.last_rise,
                "last_slope": self.last_slope, "crossings": [c.to_dict() for c in self.crossings],
                "fit": self.fit.to_dict(), "peak_efficiency": self.peak_efficiency, "text": self.text()}


def _crossing(share: float, sizes: np.ndarray, g: np.ndarray, peak: float, rising: Optional[str]) -> CrossingSize:
    if rising:
        return CrossingSize(share, None, reason=f"not known: {rising}")
    target = share * peak
    i = int(np.argmax(g >= target))  # g reaches the peak somewhere, so some size reaches the target
    if i == 0:
        if g[0] == target:
            return CrossingSize(share, int(sizes[0]))
        return CrossingSize(share, None, reason=f"the sweep starts above it (at {describe_size(int(sizes[0]))}: "
                                                f"{_pct(g[0] / peak)} of the peak)")
    if g[i] == target:
        return CrossingSize(share, int(sizes[i]))
    ls0, ls1, lg0, lg1 = math.log(sizes[i - 1]), math.log(sizes[i]), math.log(g[i - 1]), math.log(g[i])
    ls = ls0 + (math.log(target) - lg0) / (lg1 - lg0) * (ls1 - ls0)
    size = min(max(_round3(math.exp(ls)), int(sizes[i - 1])), int(sizes[i]))
    return CrossingSize(share, size, interpolated=True, between=(int(sizes[i - 1]), int(sizes[i])))


def curve_model(sweep: Sweep, shares: Sequence[float] = SHARES) -> CurveModel:
    """The :class:`CurveModel` of a sweep."""
    for share in shares:
        if not 0 < share < 1:
            raise ValueError(f"invalid share of the peak {share!r}: it must be between 0 and 1")
    sizes = np.array(sweep.sizes, dtype=float)
    g = np.array([p.gbps for p in sweep.points], dtype=float)
    ipeak = int(np.argmax(g))
    last_rise = float(g[-1] / g[-2] - 1.0) if len(g) >= 2 else None
    last_slope = float(math.log(g[-1] / g[-2]) / math.log(sizes[-1] / sizes[-2])) if len(g) >= 2 else None
    still_rising = ipeak == len(g) - 1 and (last_slope is None or last_slope > STILL_RISING)
    rising = None
    if still_rising:
        rising = ("one size only: no curve" if last_rise is None else
                  f"the curve is still rising at the largest size (+{_pct(last_rise)} over the size before), so its "
                  "peak lies beyond the sweep")
    crossings = tuple(_crossing(share, sizes, g, float(g[ipeak]), rising) for share in sorted(shares))
    return CurveModel(sweep=sweep, latency_floor_s=sweep.points[0].median_s, latency_floor_size=sweep.sizes[0],
                      peak_gbps=float(g[ipeak]), peak_size=int(sizes[ipeak]), still_rising=still_rising,
                      last_rise=last_rise, last_slope=last_slope, crossings=crossings,
                      fit=fit_latency_bandwidth(sweep))


def interpolation_error(share: float, factor: float, steps: int = 4000) -> float:
    """How far above the true size the interpolated size of ``share`` of the peak can be, on an exact
    latency-bandwidth curve sampled every ``factor`` in size (0.235 = 23.5 %): the worst over where the
    sizes fall (``steps`` positions over one step).  It is never below: the curve is concave in log-log."""
    if not 0 < share < 1 or factor <= 1:
        raise ValueError(f"invalid share {share!r} or size factor {factor!r}: need 0 < share < 1 and factor > 1")
    xt = share / (1 - share)  # size / n_half where x / (1 + x) = share
    x0 = xt * float(factor) ** -((np.arange(steps) + 1) / steps)  # x0 < xt <= x1 = x0 factor
    x1 = x0 * factor
    g0, g1 = x0 / (1 + x0), x1 / (1 + x1)
    lx = np.log(x0) + (math.log(share) - np.log(g0)) / (np.log(g1) - np.log(g0)) * math.log(factor)
    return float(math.exp(float(np.max(lx - math.log(xt)))) - 1.0)


# -- the comparison ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CurveComparison:
    """Today's curve against the baseline's, on the sizes both have (``now`` / ``baseline``: the models of
    those sizes).  ``peak_ratio``: today's peak figure / the baseline's (below 1 = slower);
    ``latency_ratio``: today's latency floor time / the baseline's (above 1 = slower); ``ratios``: today's
    figure / the baseline's at each common size; ``now_only`` / ``baseline_only``: the sizes left out."""

    now: CurveModel
    baseline: CurveModel
    peak_ratio: float
    latency_ratio: float
    ratios: tuple[tuple[int, float], ...]
    now_only: tuple[int, ...]
    baseline_only: tuple[int, ...]

    @property
    def worst(self) -> tuple[int, float]:
        """(size, ratio) of the size whose figure fell most."""
        return min(self.ratios, key=lambda sr: sr[1])

    def text(self, with_label: bool = True) -> str:
        parts = [f"peak {self.peak_ratio:.2f}x", f"latency floor {self.latency_ratio:.2f}x"]
        for share in (0.8, 0.9):
            a, b = self.baseline.crossing(share), self.now.crossing(share)
            if a.size_bytes is None and b.size_bytes is None:
                continue
            parts.append(f"{_pct(share)} point {_size_or_why(a)} -> {_size_or_why(b)}")
        size, ratio = self.worst
        parts.append(f"worst size {size_token(size)} {ratio:.2f}x")
        line = (f"{self.now.sweep.label}: " if with_label else "") + ", ".join(parts)
        left = []
        if self.now_only:
            left.append("only today: " + ", ".join(size_token(s) for s in self.now_only))
        if self.baseline_only:
            left.append("only in the baseline: " + ", ".join(size_token(s) for s in self.baseline_only))
        if left:
            line += f" (on the {len(self.ratios)} sizes both have; {'; '.join(left)})"
        return line

    def to_dict(self) -> dict[str, Any]:
        """Keys: ``label``, ``peak_ratio``, ``latency_ratio``, ``ratios`` ([size_bytes, ratio]), ``now_only``,
        ``baseline_only``, ``crossings`` ({share: [baseline size or None, today's size or None]}), ``text``."""
        return {"label": self.now.sweep.label, "peak_ratio": self.peak_ratio, "latency_ratio": self.latency_ratio,
                "ratios": [[s, r] for s, r in self.ratios], "now_only": list(self.now_only),
                "baseline_only": list(self.baseline_only),
                "crossings": {f"{c.share:g}": [self.baseline.crossing(c.share).size_bytes, c.size_bytes]
                              for c in self.now.crossings},
                "text": self.text()}


def _size_or_why(c: CrossingSize) -> str:
    if c.size_bytes is not None:
        return format_size(c.size_bytes)
    return "? (still rising)" if c.reason.startswith("not known") else "? (below the sweep)"


def compare_curves(now: Sweep, baseline: Sweep) -> CurveComparison:
    """Today's sweep against the baseline's on the sizes both have (ValueError when they share none)."""
    common = sorted(set(now.sizes) & set(baseline.sizes))
    if not common:
        raise ValueError(f"no size in common between today's {now.label} ({', '.join(map(size_token, now.sizes))}) "
                         f"and the baseline's ({', '.join(map(size_token, baseline.sizes))})")
    a, b = now.only(common), baseline.only(common)
    ma, mb = curve_model(a), curve_model(b)
    ratios = tuple((pa.size_bytes, pa.gbps / pb.gbps) for pa, pb in zip(a.points, b.points))
    return CurveComparison(now=ma, baseline=mb, peak_ratio=ma.peak_gbps / mb.peak_gbps,
                           latency_ratio=ma.latency_floor_s / mb.latency_floor_s, ratios=ratios,
                           now_only=tuple(s for s in now.sizes if s not in set(common)),
                           baseline_only=tuple(s for s in baseline.sizes if s not in set(common)))


# -- the report's section ------------------------------------------------------------------------------

#: the heading of the curves section of the terminal summary and of ``gpucomm show``
CURVES_HEADING = ("gpucomm curves (per sweep of 2 sizes or more: latency floor = the median time at the smallest "
                  "size; peak; the sizes reaching 50/80/90 % of the peak; the fit time = latency + size / "
                  "bandwidth; and against the baseline's curve where it has the sweep: today / baseline. The "
                  "per-size verdicts decide; these explain them):")


def curve_report(now: Sequence[Sweep], baseline: Optional[Sequence[Sweep]] = None) -> list[dict[str, Any]]:
    """The "curves" section of a report: per sweep of ``now`` (in its order), its model and, where
    ``baseline`` has the same sweep (matched by ``key[:5]``: test id without size, op, devices, world size,
    dtype), the comparison with it.  Each entry: ``sweep`` (the test id without its size, or the label),
    ``label``, ``model`` (``CurveModel.to_dict`` less the points, which the rows hold), ``comparison``
    (``CurveComparison.to_dict``, or ``{"text": why not}`` when the sweeps share no size, or None without a
    baseline sweep)."""
    base = {s.key[:5]: s for s in (baseline or [])}
    out = []
    for s in now:
        model = curve_model(s).to_dict()
        model["sweep"] = {k: v for k, v in model["sweep"].items() if k != "points"}
        entry: dict[str, Any] = {"sweep": s.key[0] or s.label, "label": s.label, "model": model, "comparison": None}
        b = base.get(s.key[:5])
        if b is not None:
            try:
                c = compare_curves(s, b)
            except ValueError as e:
                entry["comparison"] = {"text": f"not compared with the baseline: {e}"}
            else:
                entry["comparison"] = {**c.to_dict(), "text_short": c.text(with_label=False)}
        out.append(entry)
    return out


def curve_lines(entries: Sequence[Mapping[str, Any]], limit: Optional[int] = None) -> list[str]:
    """The curves section as text: a heading, then per sweep its model's lines and its comparison with the
    baseline (``  vs baseline: peak 0.99x, ...``); at most ``limit`` sweeps (the rest counted)."""
    if not entries:
        return []
    lines = [CURVES_HEADING]
    shown = list(entries)[:limit] if limit else list(entries)
    for e in shown:
        lines += [("    " if i else "  ") + line.strip() for i, line in enumerate(str(e["model"]["text"]).splitlines())]
        c = e.get("comparison")
        if c:
            lines.append("    vs baseline: " + str(c.get("text_short") or c.get("text")))
    if len(shown) < len(entries):
        lines.append(f"  ... and {len(entries) - len(shown)} more sweeps (the JSON report's \"curves\" has every one)")
    return lines
