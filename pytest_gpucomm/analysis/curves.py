"""The bandwidth curves of a run: per sweep, its curve (:mod:`.curve_fit`: latency floor, peak, the sizes
reaching a share of the peak, a fitted latency-bandwidth model), today's curve compared with the baseline's,
and the report's "curves" section.

Pure numbers (numpy; scipy when a model is fitted); no torch, no pytest.  The report's "curves" section
(terminal and JSON), ``gpucomm show`` / ``compare`` / ``html`` and the plots call it (:func:`curve_report`);
its text is ``report.terminal``'s.
The sweeps (one op measured at several sizes, a point per size) are :mod:`.sweeps`'; this module also gives
their names and the curve's, so that ``pytest_gpucomm.analysis.curves`` is the one place to import them from.

**Comparison** (:func:`compare_curves`): today's sweep against the baseline's, on the sizes both have (the
others are named): the peak ratio (today / baseline, below 1 = slower), the latency floor ratio (time,
today / baseline, above 1 = slower), the 80 % / 90 % sizes of each and the worst size's figure ratio, in
one line: ``all_reduce in place, 2 ranks (nccl), float32: peak 0.99x, latency floor 1.38x, 80 % point ...,
90 % point 16 MiB (16,777,216 bytes) -> 64 MiB (67,108,864 bytes), worst size 1KiB 0.72x``.  The per-size
verdicts stay the rule that fails tests; the comparison explains them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..units import format_size, size_token
from .curve_fit import (FIT_LOSS_SCALE, MAX_MEDIAN_RESIDUAL, MAX_RESIDUAL, MIN_FIT_SIZES, SHARES, STILL_RISING,
                        CrossingSize, CurveModel, LatencyBandwidthFit, curve_model, fit_latency_bandwidth,
                        interpolation_error, percent)
from .sweeps import Sweep, SweepPoint, form_of_id, sweep_id, sweeps, sweeps_from_baseline, sweeps_from_report

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
    "interpolation_error",
    "STILL_RISING",
    "SHARES",
    "MIN_FIT_SIZES",
    "FIT_LOSS_SCALE",
    "MAX_MEDIAN_RESIDUAL",
    "MAX_RESIDUAL",
    "form_of_id",
]


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
            parts.append(f"{percent(share)} point {_size_or_why(a)} -> {_size_or_why(b)}")
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
        entry: dict[str, object] = {"sweep": s.key[0] or s.label, "label": s.label, "model": model, "comparison": None}
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
