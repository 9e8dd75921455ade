"""What is kept of single-operation times: their figures (:class:`TailFigures`: p50, p99, p99.9, max,
jitter), the sparse histogram a measurement carries in ``info["tail"]["hist"]`` (:class:`Histogram`, bins
0.5 % wide), and the few numbers a baseline run keeps of them (:class:`TailSketch`: the median and the
quantiles as ratios to it).  The tail rule that reads them is :mod:`pytest_gpucomm.gate.tails`.

Shared words, at the package root: the ranks make the histograms and figures (``ops``), the gate judges them,
the reports draw them.  Pure numbers (numpy); no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
    from .measurement import HistogramDict, TailInfo

__all__ = ["BIN_RATIO", "TailFigures", "tail_figures", "positive_times", "Histogram", "SKETCH_LEVELS", "TailSketch"]

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

    def to_dict(self) -> TailInfo:
        return {"n": self.n, "p50_us": self.p50_s * 1e6, "p99_us": self.p99_s * 1e6,
                "p999_us": None if self.p999_s is None else self.p999_s * 1e6, "max_us": self.max_s * 1e6,
                "jitter": self.jitter}


def positive_times(samples: Any, what: str) -> np.ndarray:
    a = np.asarray(samples, dtype=float).ravel()
    if a.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        bad = a[~(np.isfinite(a) & (a > 0))][0]
        raise ValueError(f"{what}: the times must be positive finite seconds, got {bad!r}")
    return a


def tail_figures(samples_s: Sequence[float], what: str = "single-operation times") -> TailFigures:
    """The tail figures of single-operation times (seconds); percentiles interpolate linearly."""
    a = positive_times(samples_s, what)
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
        a = positive_times(samples_s, "histogram")
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
        return float(self.quantiles([q])[0])

    def quantiles(self, qs: Sequence[float]) -> np.ndarray:
        """The q-quantiles of :meth:`quantile`, several at once (one pass)."""
        if not self.counts:
            raise ValueError("empty histogram")
        keys = np.array(sorted(self.counts), dtype=np.int64)
        cum = np.cumsum([self.counts[i] for i in keys.tolist()])
        at = np.minimum(np.searchsorted(cum, np.asarray(qs, dtype=float) * cum[-1], side="left"), keys.size - 1)
        return _BIN_ORIGIN_S * BIN_RATIO ** keys[at].astype(float) * math.sqrt(BIN_RATIO)

    def to_dict(self) -> HistogramDict:
        """Compact JSON: {"ratio": 1.005, "origin_s": 1e-9, "bins": [[i, count], ...]} (ascending)."""
        return {"ratio": BIN_RATIO, "origin_s": _BIN_ORIGIN_S,
                "bins": [[i, self.counts[i]] for i in sorted(self.counts)]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "histogram") -> "Histogram":
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
        levels = [q for q in SKETCH_LEVELS if n * (1 - q) >= 1]
        qs = hist.quantiles([0.5, 1.0] + levels).tolist()
        p50 = qs[0] if p50_s is None else float(p50_s)
        ratios = {q: max(1.0, x / p50) for q, x in zip(levels, qs[2:])}
        return cls(n=n, p50_s=p50, ratios=ratios, max_ratio=max(1.0, qs[1] / p50))

    @classmethod
    def from_samples(cls, samples_s: Sequence[float]) -> "TailSketch":
        """The sketch of :meth:`from_histogram` of the samples' histogram with their exact median, from one
        partial sort (a sort of every sample took about 10 x as long at 10,000 of them): the q-quantile's bin is
        the bin of the sample of rank ceil(q n); the median is that of :func:`numpy.median`."""
        a = positive_times(samples_s, "tail sketch")
        n = a.size
        levels = [q for q in SKETCH_LEVELS if n * (1 - q) >= 1]
        qs = np.array([1.0] + levels)
        at = np.clip(np.ceil(qs * n).astype(np.int64) - 1, 0, n - 1)
        mid = [(n - 1) // 2, n // 2]  # one rank for an odd n, the two middle ones for an even n
        a = np.partition(a, np.unique(np.concatenate([at, mid])))
        p50 = float(np.mean(a[mid[0]:mid[1] + 1]))
        bins = np.floor(np.log(a[at] / _BIN_ORIGIN_S) / _LOG_BIN)
        x = (_BIN_ORIGIN_S * BIN_RATIO ** bins * math.sqrt(BIN_RATIO)).tolist()
        return cls(n=n, p50_s=p50, ratios={q: max(1.0, v / p50) for q, v in zip(levels, x[1:])},
                   max_ratio=max(1.0, x[0] / p50))

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
