"""Statistics of one measurement's per-iteration times: median, percentiles, spread.

numpy is imported when a summary is first computed, not when this module is imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Summary", "summarize", "percentile"]


@dataclass(frozen=True)
class Summary:
    """Statistics of a list of per-iteration times (seconds)."""

    n: int
    mean_s: float
    median_s: float
    min_s: float
    max_s: float
    p50_s: float
    p99_s: float
    stdev_s: float
    cv: float  # coefficient of variation of the times: stdev / mean (0.02 = 2 %)


def summarize(samples_s: Sequence[float]) -> Summary:
    """Summarize per-iteration times.  Raises ValueError on an empty list or a non-positive time."""
    import numpy as np

    arr = np.asarray(samples_s, dtype=float)
    if arr.size == 0:
        raise ValueError("no samples to summarize")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"samples must be positive finite times, got min={arr.min()!r}")
    mean = float(arr.mean())
    stdev = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return Summary(
        n=int(arr.size),
        mean_s=mean,
        median_s=float(np.median(arr)),
        min_s=float(arr.min()),
        max_s=float(arr.max()),
        p50_s=float(np.percentile(arr, 50)),
        p99_s=float(np.percentile(arr, 99)),
        stdev_s=stdev,
        cv=stdev / mean if mean > 0 and not math.isnan(stdev) else 0.0,
    )


def percentile(samples_s: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of the samples, linear interpolation (numpy's default)."""
    import numpy as np

    return float(np.percentile(np.asarray(samples_s, dtype=float), q))
