"""The tail rule: has a case's tail of single-operation latencies grown against its baseline?

Pure statistics (numpy, scipy); no torch.  Not yet wired into the gate's verdicts.

The rule, per case:

1. **The baseline's tail shape.**  Each baseline run gives the median (p50) and the 99th percentile (p99)
   of its single-operation times; the reference shape is the median over the runs of p99 / p50 (one run:
   its own ratio).  A ratio, not an absolute p99: the tail is judged relative to the median.
2. **Today's threshold** is today's p50 x that ratio: the baseline's p99, scaled by today's median over
   the baseline's median.  A pure shift of the median (every iteration 3 % slower) moves the threshold
   with it, so it is never called a heavier tail -- a plain "slower than the baseline's p99" would be,
   because when the distribution is narrow a 3 % shift puts many iterations above the old p99.  The
   median verdict judges the median; this rule judges the shape.
3. **Exceedances.**  Of today's n iterations, k are slower than the threshold.  Without a change the
   expected share is 1 %.  The share allowed is 1 % x (1 + ``tail_tolerance``) (default 1.0: 2 %): the
   baseline's p99 is itself an estimate (from a run of 2,000 iterations the share above it varies by
   about +-22 % relative, one standard deviation), today's p50 is one too, and the weight of the tail
   moves from run to run (by about 20 % relative, one standard deviation, on this project's loaded CPU
   runner); the tolerance absorbs that.  With 0.5 the simulated suites below failed falsely 3.7 % of the
   time; with 1.0, 1.0 %.
4. **Test.**  The exact one-sided binomial test (``scipy.stats.binomtest``) of k out of n against the
   allowed share: TAIL when its p-value is below the per-case level alpha / (m x looks) -- the Bonferroni
   correction over the session's gated cases, as the median verdict's (``decision.corrected_alpha``).

What it needs of n (simulations of ``tests/test_tails.py``: suites of 20 cases, baselines of 3 runs of
2,000 iterations, a narrow body (4 % spread) with 1.5 % of iterations 1.2-2 x slower and that share moving
by 20 % from run to run): with the default tolerance, a tail that doubles the share of slow iterations
(2 % of iterations 3 x slower) is caught in 97 % of cases with 10,000 iterations per case, 73 % with
4,000, 41 % with 2,000; without a change 1.0 % of suites fail at 10,000 iterations.  The rule is exact for
any n, but with few iterations it simply cannot call a tail.

Today's samples may be given raw or as a :class:`Histogram`: a sparse histogram of the times in bins
0.5 % wide (the compact form a measurement carries in ``info["tail"]["hist"]``); counting the iterations
above a threshold from it is exact except within the threshold's own bin, which is not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from ..vocab import DEFAULT_ALPHA

__all__ = [
    "DEFAULT_TAIL_TOLERANCE",
    "EXPECTED_SHARE",
    "BIN_RATIO",
    "TailFigures",
    "SKETCH_LEVELS",
    "TailSketch",
    "tail_figures",
    "Histogram",
    "baseline_ratio",
    "TailSpread",
    "DEFAULT_SHARE_SPREAD",
    "fit_spread",
    "TailTest",
    "tail_test",
]

#: the share of the baseline's iterations above its p99
EXPECTED_SHARE = 0.01
#: the excess share of exceedances allowed, relative: 1.0 allows 2 % above the scaled baseline p99
DEFAULT_TAIL_TOLERANCE = 1.0
#: histogram bins: each 0.5 % wider than the one before
BIN_RATIO = 1.005
_LOG_BIN = math.log(BIN_RATIO)
_BIN_ORIGIN_S = 1e-9  # bin 0 starts at 1 ns


@dataclass(frozen=True)
class TailFigures:
    """p50, p99, p99.9 (None below 1,000 iterations: fewer than one expected above it), max and jitter
    (p99 / p50) of ``n`` single-operation times, in seconds."""

    n: int
    p50_s: float
    p99_s: float
    p999_s: Optional[float]
    max_s: float

    @property
    def jitter(self) -> float:
        return self.p99_s / self.p50_s if self.p50_s > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "p50_us": self.p50_s * 1e6, "p99_us": self.p99_s * 1e6,
                "p999_us": None if self.p999_s is None else self.p999_s * 1e6, "max_us": self.max_s * 1e6,
                "jitter": self.jitter}


def _positive(samples: Any, what: str) -> np.ndarray:
    a = np.asarray(samples, dtype=float).ravel()
    if a.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        bad = a[~(np.isfinite(a) & (a > 0))][0]
        raise ValueError(f"{what}: the times must be positive finite seconds, got {bad!r}")
    return a


def tail_figures(samples_s: Sequence[float], what: str = "single-operation times") -> TailFigures:
    """The tail figures of single-operation times (seconds); percentiles interpolate linearly."""
    a = _positive(samples_s, what)
    p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
    return TailFigures(n=int(a.size), p50_s=float(p50), p99_s=float(p99),
                       p999_s=float(p999) if a.size >= 1000 else None, max_s=float(a.max()))


class Histogram:
    """A sparse histogram of times: bin i holds times in [1 ns x BIN_RATIO^i, 1 ns x BIN_RATIO^(i+1))."""

    def __init__(self, counts: dict[int, int]) -> None:
        if any(int(c) < 0 for c in counts.values()):
            raise ValueError(f"histogram counts must not be negative, got {min(counts.values())!r}")
        self.counts = {int(i): int(c) for i, c in counts.items() if int(c) > 0}

    @classmethod
    def from_samples(cls, samples_s: Sequence[float]) -> "Histogram":
        a = _positive(samples_s, "histogram")
        idx = np.floor(np.log(a / _BIN_ORIGIN_S) / _LOG_BIN).astype(np.int64)
        u, c = np.unique(idx, return_counts=True)
        return cls(dict(zip(u.tolist(), c.tolist())))

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    @classmethod
    def merged(cls, hists: Sequence["Histogram"]) -> "Histogram":
        """One histogram of the times of several (a case measured again: its runs pooled)."""
        counts: dict[int, int] = {}
        for h in hists:
            for i, c in h.counts.items():
                counts[i] = counts.get(i, 0) + c
        return cls(counts)

    @staticmethod
    def lower_edge(i: int) -> float:
        return _BIN_ORIGIN_S * BIN_RATIO ** i

    def count_above(self, threshold_s: float) -> int:
        """Times in bins wholly above ``threshold_s`` (the bin that holds it is not counted)."""
        return sum(c for i, c in self.counts.items() if self.lower_edge(i) > threshold_s)

    def quantile(self, q: float) -> float:
        """The q-quantile (0..1), as the geometric middle of its bin (within 0.25 %)."""
        if not self.counts:
            raise ValueError("empty histogram")
        target, seen = q * self.n, 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen >= target:
                return self.lower_edge(i) * math.sqrt(BIN_RATIO)
        return self.lower_edge(max(self.counts)) * math.sqrt(BIN_RATIO)

    def to_dict(self) -> dict[str, Any]:
        """Compact JSON: {"ratio": 1.005, "origin_s": 1e-9, "bins": [[i, count], ...]} (ascending)."""
        return {"ratio": BIN_RATIO, "origin_s": _BIN_ORIGIN_S, "bins": [[i, self.counts[i]] for i in sorted(self.counts)]}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "histogram") -> "Histogram":
        if d.get("ratio") != BIN_RATIO or d.get("origin_s") != _BIN_ORIGIN_S:
            raise ValueError(f"{where}: bins of ratio {d.get('ratio')!r} from {d.get('origin_s')!r} s; this "
                             f"version reads {BIN_RATIO} from {_BIN_ORIGIN_S}")
        return cls({int(i): int(c) for i, c in d.get("bins", [])})


#: the levels a :class:`TailSketch` keeps, as ratios to its median
SKETCH_LEVELS = (0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999)


@dataclass(frozen=True)
class TailSketch:
    """What a baseline run keeps of a case's single-operation times (the store's ``runs[i]["tail"]``): the
    number of single ops ``n``, their median ``p50_s`` and, per level of :data:`SKETCH_LEVELS` that ``n``
    resolves (at least one op above it), the quantile as a ratio to the median (``ratios``), and the slowest
    op's ratio (``max_ratio``).  A few numbers per run, instead of every time or the whole histogram."""

    n: int
    p50_s: float
    ratios: dict[float, float]
    max_ratio: float

    @classmethod
    def from_histogram(cls, hist: Histogram, p50_s: Optional[float] = None) -> "TailSketch":
        n = hist.n
        if n == 0:
            raise ValueError("an empty histogram has no tail sketch")
        p50 = hist.quantile(0.5) if p50_s is None else float(p50_s)
        ratios = {q: max(1.0, hist.quantile(q) / p50) for q in SKETCH_LEVELS if n * (1 - q) >= 1}
        return cls(n=n, p50_s=p50, ratios=ratios, max_ratio=max(1.0, hist.quantile(1.0) / p50))

    @classmethod
    def from_samples(cls, samples_s: Sequence[float]) -> "TailSketch":
        a = _positive(samples_s, "tail sketch")
        return cls.from_histogram(Histogram.from_samples(a), float(np.median(a)))

    @classmethod
    def from_info(cls, tail: dict[str, Any], where: str = "info['tail']") -> "TailSketch":
        """From a measurement's ``info["tail"]`` (its histogram and exact median)."""
        try:
            return cls.from_histogram(Histogram.from_dict(tail["hist"], where), float(tail["p50_us"]) * 1e-6)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: not a tail record ({e!r})") from None

    @property
    def p99_s(self) -> Optional[float]:
        r = self.ratios.get(0.99)
        return None if r is None else r * self.p50_s

    def share_above(self, ratio: float) -> float:
        """The share of this run's ops slower than ``ratio`` x its median, interpolated between the sketched
        levels (log share linear in log ratio); beyond the slowest op: half an op."""
        pts = sorted((r, 1 - q) for q, r in self.ratios.items())
        floor = 0.5 / self.n
        if not pts:
            return 0.5 if ratio <= 1.0 else floor
        if ratio <= pts[0][0]:
            return pts[0][1]
        if ratio >= self.max_ratio:
            return floor
        pts.append((self.max_ratio, floor))
        for (r0, s0), (r1, s1) in zip(pts, pts[1:]):
            if r0 <= ratio <= r1:
                if r1 <= r0:
                    return s1
                t = (math.log(ratio) - math.log(r0)) / (math.log(r1) - math.log(r0))
                return float(math.exp(math.log(s0) + t * (math.log(max(s1, floor)) - math.log(s0))))
        return floor

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "p50_us": self.p50_s * 1e6,
                "ratios": {f"{q:g}": round(r, 6) for q, r in sorted(self.ratios.items())},
                "max_ratio": round(self.max_ratio, 6)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "tail sketch") -> "TailSketch":
        try:
            n, p50 = int(d["n"]), float(d["p50_us"]) * 1e-6
            ratios = {float(q): float(r) for q, r in d["ratios"].items()}
            mx = float(d["max_ratio"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{where}: not a tail sketch ({e!r})") from None
        if n < 1 or not (p50 > 0 and math.isfinite(p50)) or any(not (1.0 <= r <= mx) for r in ratios.values()):
            raise ValueError(f"{where}: need n >= 1, p50_us > 0 and 1 <= each ratio <= max_ratio, got {d!r}")
        return cls(n=n, p50_s=p50, ratios=ratios, max_ratio=mx)


def _as_pair(run: Union["TailSketch", tuple[float, float]]) -> tuple[float, Optional[float]]:
    if isinstance(run, TailSketch):
        return run.p50_s, run.p99_s
    return float(run[0]), float(run[1])


def baseline_ratio(runs: Sequence[Union["TailSketch", tuple[float, float]]]) -> float:
    """The baseline's tail shape: the median over its runs of p99 / p50, each run a :class:`TailSketch` or
    (p50, p99); runs too short for a p99 (fewer than 100 ops) are left out."""
    ratios = []
    for j, run in enumerate(runs):
        p50, p99 = _as_pair(run)
        if p99 is None:
            continue
        if not (p50 > 0 and p99 >= p50 and math.isfinite(p99)):
            raise ValueError(f"baseline run {j}: need 0 < p50 <= p99, got p50={p50!r}, p99={p99!r}")
        ratios.append(p99 / p50)
    if not ratios:
        raise ValueError("the baseline has no run with tail figures")
    return float(np.median(ratios))


@dataclass(frozen=True)
class TailSpread:
    """How much the share of slow ops moves from run to run, over the baseline's cases: ``sd`` of the log
    share, with ``df`` degrees of freedom from ``cases`` cases (0: none measured, the default assumed)."""

    sd: float
    df: float = 0.0
    cases: int = 0


#: the run-to-run spread of the log share of slow ops assumed where the baseline measures none
DEFAULT_SHARE_SPREAD = 0.2


def fit_spread(cases: Iterable[Sequence["TailSketch"]]) -> TailSpread:
    """The run-to-run spread of the share of slow ops, pooled over the cases of a baseline (each a
    sequence of its runs' sketches).  (Placeholder: the assumed default until the fit lands.)"""
    return TailSpread(DEFAULT_SHARE_SPREAD)


@dataclass(frozen=True)
class TailTest:
    """The tail rule's result for one case (see the module's doc)."""

    tail: bool  # the exceedance share is significantly above the allowed share
    n: int
    exceed: int  # today's iterations above the threshold
    threshold_s: float  # today's p50 x the baseline's p99 / p50
    baseline_ratio: float
    today_p50_s: float
    allowed_share: float  # EXPECTED_SHARE x (1 + tolerance)
    p_value: float
    level: float  # the per-case level (Bonferroni)

    @property
    def share(self) -> float:
        return self.exceed / self.n if self.n else 0.0

    def text(self) -> str:
        return (f"{self.exceed} of {self.n} iterations ({self.share:.2%}) slower than the baseline's p99 scaled to "
                f"today's median ({self.threshold_s * 1e6:.2f} us = {self.baseline_ratio:.2f} x p50 "
                f"{self.today_p50_s * 1e6:.2f} us); {self.allowed_share:.2%} allowed, p = {self.p_value:.2g} "
                f"(level {self.level:.2g})")


def tail_test(baseline: Sequence[Union[TailSketch, tuple[float, float]]], today: Union[Histogram, Sequence[float]], *,
              tolerance: float = DEFAULT_TAIL_TOLERANCE, alpha: float = DEFAULT_ALPHA, n_comparisons: int = 1,
              looks: int = 1, today_p50_s: Optional[float] = None, spread: Optional[TailSpread] = None) -> TailTest:
    """The tail rule for one case: ``baseline`` is (p50, p99) per baseline run, in seconds; ``today`` the
    single-operation times (raw, or a :class:`Histogram`); ``today_p50_s`` today's exact median where
    ``today`` is a histogram (else taken from it).  TAIL at level alpha / (n_comparisons x looks)."""
    from scipy.stats import binomtest

    from .decision import corrected_alpha

    if not (tolerance >= 0 and math.isfinite(tolerance)) or EXPECTED_SHARE * (1 + tolerance) >= 1:
        raise ValueError(f"tail_tolerance must be a number >= 0 (a share of {EXPECTED_SHARE:.0%} x (1 + tolerance) "
                         f"below 1), got {tolerance!r}")
    level = corrected_alpha(alpha, n_comparisons, looks)
    ratio = baseline_ratio(baseline)
    if isinstance(today, Histogram):
        n = today.n
        p50 = today_p50_s if today_p50_s is not None else today.quantile(0.5)
    else:
        a = _positive(today, "today's single-operation times")
        n = int(a.size)
        p50 = float(np.median(a)) if today_p50_s is None else today_p50_s
    if n == 0:
        raise ValueError("today's single-operation times: no samples")
    threshold = p50 * ratio
    k = today.count_above(threshold) if isinstance(today, Histogram) else int(np.count_nonzero(a > threshold))
    allowed = EXPECTED_SHARE * (1 + tolerance)
    p = float(binomtest(k, n, allowed, alternative="greater").pvalue)
    return TailTest(tail=p < level, n=n, exceed=k, threshold_s=threshold, baseline_ratio=ratio, today_p50_s=p50,
                    allowed_share=allowed, p_value=p, level=level)
