"""The curve of one sweep: latency floor, peak, the sizes where the curve reaches a share of its peak, and a
fitted latency-bandwidth model.

Pure numbers (numpy; scipy when a model is fitted); no torch, no pytest.  The sweeps are :mod:`.sweeps`';
today's curve against the baseline's, and the report's "curves" section, are :mod:`.curves`'.

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
from typing import Any, Optional, Sequence

import numpy as np

from ..units import GB, describe_duration, describe_size, format_gbps, size_token
from .sweeps import Sweep

__all__ = ["CrossingSize", "LatencyBandwidthFit", "CurveModel", "curve_model", "fit_latency_bandwidth",
           "interpolation_error", "percent", "STILL_RISING", "SHARES", "MIN_FIT_SIZES", "FIT_LOSS_SCALE",
           "MAX_MEDIAN_RESIDUAL", "MAX_RESIDUAL"]

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


def percent(x: float, digits: int = 0) -> str:
    return f"{x * 100:.{digits}f} %"


def _round3(x: float) -> int:
    """``x`` rounded to 3 significant digits, as a whole number of bytes (at least 1)."""
    if x < 1:
        return 1
    digits = int(math.floor(math.log10(x))) - 2
    return max(1, int(round(x, -digits))) if digits > 0 else int(round(x))


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
            return f"{percent(self.share)} point: {self.reason}"
        note = (f" (interpolated between {size_token(self.between[0])} and {size_token(self.between[1])})"
                if self.interpolated and self.between else " (measured)")
        return f"{percent(self.share)} point {describe_size(self.size_bytes)}{note}"

    def to_dict(self) -> dict[str, object]:
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
        quality = (f"median residual {percent(self.median_residual, 1)}, max {percent(self.max_residual, 1)}, "
                   f"R^2 {self.r2_log:.4f} in log time, {self.sizes} sizes")
        if self.latency_s is None and self.bandwidth_gbps is None:
            if self.reason.startswith("poor fit"):
                return f"latency-bandwidth model: cannot tell ({self.reason}; R^2 {self.r2_log:.4f} in log time)"
            return f"latency-bandwidth model: cannot tell ({self.reason}; {quality})"
        lat = describe_duration(self.latency_s) if self.latency_s is not None else "?"
        bw = f"{format_gbps(self.bandwidth_gbps)} GB/s" if self.bandwidth_gbps is not None else "?"
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
            misses.append(f"median residual {percent(med, 1)} > {percent(MAX_MEDIAN_RESIDUAL)}")
        if mx > MAX_RESIDUAL:
            misses.append(f"largest {percent(mx, 1)} > {percent(MAX_RESIDUAL)}, at {describe_size(int(s[worst]))}")
        return LatencyBandwidthFit(None, None, None, **base,
                                   reason=f"poor fit: one latency and one bandwidth do not describe the medians "
                                          f"({', '.join(misses)})")
    reasons = []
    latency: Optional[float] = a
    bandwidth: Optional[float] = None if raw_bw is None else raw_bw * sweep.figure_per_rate / GB
    if c * s[-1] < a or raw_bw is None:
        share = c * s[-1] / (a + c * s[-1])
        reasons.append(f"no bandwidth: the sweep does not reach the bandwidth-bound sizes (at the largest, "
                       f"{describe_size(int(s[-1]))}, transfer is {percent(share)} of the model's time, under half)")
        bandwidth = None
    if a < c * s[0]:
        share = a / (a + c * s[0])
        reasons.append(f"no latency: the sweep does not reach the latency-bound sizes (at the smallest, "
                       f"{describe_size(int(s[0]))}, latency is {percent(share)} of the model's time, under half)")
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
        peak = f"peak {format_gbps(self.peak_gbps)} GB/s {self.sweep.figure} at {describe_size(self.peak_size)}"
        if self.still_rising and self.last_rise is not None:
            peak += f", the largest size, still rising (+{percent(self.last_rise)} over the size before)"
            shares = (", ".join(percent(c.share) for c in self.crossings)
                      + " points: not known, the peak lies beyond the sweep")
        else:
            shares = "; ".join(c.text() for c in self.crossings)
        first = (f"{self.sweep.label}: latency floor {describe_duration(self.latency_floor_s)} at "
                 f"{describe_size(self.latency_floor_size)}; {peak}; {shares}")
        eff = self.peak_efficiency
        second = "  " + self.fit.text() + (f"; measured peak {percent(eff)} of the model's bandwidth" if eff else "")
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
                                                f"{percent(g[0] / peak)} of the peak)")
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
                  f"the curve is still rising at the largest size (+{percent(last_rise)} over the size before), so its "
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

