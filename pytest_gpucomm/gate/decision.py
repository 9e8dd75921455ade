"""The regression decision: pure statistics on per-iteration bandwidth samples.

Nothing here imports torch or touches a device, and nothing here knows about files or pytest; every
function takes plain sequences of floats.  The statuses are the decision's own lower-case words
("ok", "regression", "improved", "noisy"); :mod:`pytest_gpucomm.gate.verdicts` turns them into
:class:`pytest_gpucomm.vocab.Status`.  This module imports numpy and scipy: import it only when judging.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Callable, Optional, Sequence, TypeVar

import numpy as np
from scipy import stats as _sstats

from ..vocab import DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_TOLERANCE

__all__ = [
    "Comparison",
    "FloorCheck",
    "corrected_alpha",
    "compare",
    "check_floor",
    "confirm",
    "hodges_lehmann",
    "DECISION_RULE",
]

# ================================================================================================
# The regression decision: compare this run's per-iteration bandwidth with the stored baseline runs.
# ================================================================================================
#
# The rule is documented in ``DECISION_RULE`` below (it also goes into the README); the code follows it
# step by step.

DECISION_RULE = """\
How a benchmark is judged against its baseline
----------------------------------------------

Each case (an op at a size) gives per-iteration bandwidth samples.  The baseline keeps the raw samples
of the last K runs.  All statistics work on log bandwidth, so a shift is a ratio.

1. Shift estimate.  ratio = exp(Hodges-Lehmann shift) = exp(median over all pairs (i, j) of
   log(current_i) - log(baseline_j)), the baseline runs pooled.  Robust to outlier iterations.  Above
   1e6 pairs a fixed-seed subsample of 1e6 pairs is used (deterministic).
2. Significance.  One-sided Mann-Whitney U test "current is slower" (as scipy.stats.mannwhitneyu,
   alternative="less"; above 8 samples a side the same normal approximation with tie and continuity
   correction is computed in-module, identical and faster).  Level: Bonferroni, alpha / m for m gated
   comparisons in the session (suite-level alpha 0.01 by default).  Not Holm: verdicts are given test by
   test, before the other p-values exist.
3. Run-to-run spread.  Iterations of one run share that run's offset (clocks, placement, algorithm
   choice), so an iid test alone calls 1-2 % run-to-run shifts "significant".  The observed spread is
   the standard deviation of the baseline's log run medians, less the part the sampling noise of each
   median explains (pi/2 * (IQR/1.349)^2 / n per run).  It is moderated towards a prior of 1 % worth 4
   degrees of freedom:  s^2 = ((K-1) s_obs^2 + 4 * 0.01^2) / (K - 1 + 4), so one baseline run gives
   s = 1 % and many runs let the observed spread dominate.  The run-level error of the shift is
   s_r = s * sqrt(1 + sum_j w_j^2): the current run's own offset plus that of the baseline runs'
   weighted mean (w_j = n_j / N).
4. Confidence bounds.  The distribution-free (Moses) limits of the shift (order statistics of the
   pairwise differences) are widened by the run-level error: shift +/- sqrt(h^2 + (z s_r)^2), h the
   Moses half-width at the same level.  Messages show the two-sided 95 % interval (z = 1.96).  The
   verdict uses one-sided bounds at confidence c = 92.5 % by default (z = 1.44).
5. Verdict (tolerance t, default 5 %):
   * "regression": the drop is significant (p < alpha/m) AND the ratio's upper bound is below 1 - t:
     the drop is shown, run-to-run variation included, to exceed the tolerance.  A drop that is merely
     significant is not enough.
   * "improved": symmetric: significant gain (the "greater" test) AND the lower bound above 1 + t.
   * "noisy": neither, and the baseline's own spread (the larger of s and s_obs) is too wide to hold
     the tolerance: exp(-z * max(s, s_obs) * sqrt(1 + sum w^2)) < 1 - t.  No verdict is guessed; record
     more baseline runs on a steadier machine, or raise the tolerance.
   * "ok": otherwise: consistent with the baseline, or not shown to be outside the tolerance.
   A published case with only a floor (no measured runs) is checked with check_floor: "regression"
   when the median of the current samples is below the floor.

Why c = 92.5 %: with per-run offsets of 1 %, 3 % within-run noise and 30 samples a run (K = 3), the
estimated ratio of a single run has a spread of about 1.35 % that no rule can remove (mostly the
current run's own offset).  A 10 % drop and a 3 % drop then lie about 5.5 standard errors apart, and
the bound's confidence only places the threshold between them: 95 % catches 98.9 % of 10 % drops and
flags 0.10 % of 3 % drops, 92.5 % catches 99.4 % and flags 0.13 %, 97.5 % (the 95 % interval itself)
catches 97.5 % and flags 0.02 %.  compare(confidence=...) picks another point on that curve.
"""

PRIOR_RUN_SPREAD = 0.01  # assumed run-to-run relative sd when the baseline cannot tell (one run)
PRIOR_RUN_SPREAD_DF = 4.0  # weight of that prior, in degrees of freedom
MAX_PAIRS = 1_000_000  # above this many (current, baseline) pairs a fixed subsample of pairs is used
_Z_TWO_SIDED_95 = 1.959963984540054  # norm.ppf(0.975)

__doc__ = (__doc__ or "") + "\n" + DECISION_RULE  # the final rule, also for help() and the README
_PAIR_SEED = 20240607


@dataclass(frozen=True)
class Comparison:
    """The verdict on one case against its baseline; see DECISION_RULE.

    ``ratio`` and the bounds are current/baseline bandwidth (0.86 = 14 % slower).  ``ci_low``/``ci_high``
    are the two-sided 95 % interval shown in messages, ``lower_bound``/``upper_bound`` the one-sided bounds
    the verdict used (confidence 92.5 % by default); all are widened for run-to-run spread.
    """

    status: str  # "ok" | "regression" | "improved" | "noisy"
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float  # one-sided Mann-Whitney U p-value for "current is slower" (raw, uncorrected)
    alpha: float  # per-comparison level after Bonferroni correction
    current_median_gbps: float
    baseline_median_gbps: float
    run_spread: float  # moderated run-to-run sd of log bandwidth used in the bounds (DECISION_RULE step 3)
    tolerance: float
    reason: str
    lower_bound: float = float("nan")
    upper_bound: float = float("nan")
    p_value_greater: float = float("nan")  # one-sided p-value for "current is faster"
    n_current: int = 0
    n_baseline: int = 0
    baseline_runs: int = 0
    observed_run_spread: float = float("nan")  # sd of the log run medians less sampling noise; nan if 1 run

    @property
    def failed(self) -> bool:
        return self.status == "regression"

    @property
    def ratio_text(self) -> str:
        """E.g. ``0.86x [0.84, 0.88] 95% CI``."""
        return f"{self.ratio:.3g}x [{self.ci_low:.3g}, {self.ci_high:.3g}] 95% CI"


@dataclass(frozen=True)
class FloorCheck:
    """The verdict on a case that only has a published floor (no measured baseline runs)."""

    status: str  # "ok" | "regression"
    current_median_gbps: float
    floor_gbps: float
    ratio: float  # current median / floor
    n_current: int
    reason: str

    @property
    def failed(self) -> bool:
        return self.status == "regression"


def corrected_alpha(alpha: float, n_comparisons: int) -> float:
    """Per-comparison level for a suite of ``n_comparisons`` gated comparisons: Bonferroni, alpha / m.

    Bonferroni keeps the chance of any false "significant" in the session at most ``alpha``.  Holm's
    step-down would be less conservative but needs all p-values first; verdicts are given test by test.
    """
    alpha = float(alpha)
    if not (0.0 < alpha < 1.0) or math.isnan(alpha):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if isinstance(n_comparisons, bool) or int(n_comparisons) != n_comparisons or n_comparisons < 1:
        raise ValueError(f"n_comparisons must be a whole number >= 1, got {n_comparisons!r}")
    return alpha / int(n_comparisons)


def _as_positive(values: Sequence[float], what: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: expected a list of numbers ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{what}: expected a flat list of numbers, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{what}: no samples")
    if arr.min() > 0 and math.isfinite(arr.max()):
        return arr
    bad = ~np.isfinite(arr) | ~(arr > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{what}: bandwidth samples must be positive finite numbers; "
            f"{int(bad.sum())} are not, the first at index {i}: {arr[i]!r}"
        )
    return arr


def _pair_differences(x: np.ndarray, y: np.ndarray, max_pairs: int = MAX_PAIRS) -> np.ndarray:
    """All differences x_i - y_j, or a deterministic (fixed-seed) sample of ``max_pairs`` of them."""
    n1, n2 = x.size, y.size
    if n1 * n2 <= max_pairs:
        return np.subtract.outer(x, y).ravel()
    rng = np.random.default_rng(_PAIR_SEED)
    i = rng.integers(0, n1, size=max_pairs)
    j = rng.integers(0, n2, size=max_pairs)
    return x[i] - y[j]


def hodges_lehmann(x: Sequence[float], y: Sequence[float]) -> float:
    """Hodges-Lehmann two-sample shift: median of all pairwise differences x_i - y_j.

    Works on the numbers as given (``compare`` passes log bandwidth).
    """
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    if xa.size == 0 or ya.size == 0:
        raise ValueError("hodges_lehmann: both samples must be non-empty")
    return _median(_pair_differences(xa, ya))


def _mann_whitney(x: np.ndarray, ys: np.ndarray) -> tuple[float, float]:
    """One-sided Mann-Whitney U p-values (less, greater) of x against y (the pooled baseline, sorted).

    For small samples (either <= 8 values) scipy.stats.mannwhitneyu is called (exact when there are no
    ties).  Otherwise the same normal approximation scipy uses (tie correction, continuity correction
    0.5) is computed here from sorted ranks: identical results, without scipy's per-call overhead.
    """
    n1, n2 = x.size, ys.size
    if n1 <= 8 or n2 <= 8:
        p_less = float(_sstats.mannwhitneyu(x, ys, alternative="less").pvalue)
        p_greater = float(_sstats.mannwhitneyu(x, ys, alternative="greater").pvalue)
        return p_less, p_greater
    # U1 = sum over i of #(y < x_i) + 0.5 #(y == x_i)
    u1 = float(np.sum(np.searchsorted(ys, x, side="left") + np.searchsorted(ys, x, side="right"))) / 2.0
    u2 = n1 * n2 - u1
    n = n1 + n2
    pooled = np.sort(np.concatenate([x, ys]), kind="stable")
    tied = np.diff(pooled) == 0
    if tied.any():
        edges = np.flatnonzero(~tied) + 1
        t = np.diff(np.concatenate([[0], edges, [n]])).astype(float)
        tie_term = float(np.sum(t**3 - t))
    else:
        tie_term = 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:  # every value identical: no evidence either way
        return 1.0, 1.0
    sd = math.sqrt(var)
    mu = n1 * n2 / 2.0
    # P(Z >= z) = erfc(z / sqrt 2) / 2, accurate far into the tail (same as scipy.special.ndtr(-z))
    p_less = 0.5 * math.erfc((u2 - mu - 0.5) / sd / math.sqrt(2.0))
    p_greater = 0.5 * math.erfc((u1 - mu - 0.5) / sd / math.sqrt(2.0))
    return min(max(p_less, 0.0), 1.0), min(max(p_greater, 0.0), 1.0)


def _moses_positions(n1: int, n2: int, m: int, z: float) -> tuple[int, int]:
    """Positions (0-based, among ``m`` sorted pairwise differences) of the distribution-free (Moses)
    confidence limits of the HL shift: order statistics C and N+1-C of the N = n1*n2 differences,
    C = floor(N/2 - z sqrt(n1 n2 (n1+n2+1)/12)), at least 1 (with very few samples the interval is then
    simply the range of the differences, of lower confidence than asked).  For a subsample of pairs the
    same quantile positions are used."""
    n_all = n1 * n2
    c = max(math.floor(n_all / 2.0 - z * math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12.0)), 1)
    if m == n_all:
        return c - 1, n_all - c
    scale = (m - 1) / max(n_all - 1, 1)
    return int(round((c - 1) * scale)), int(round((n_all - c) * scale))


def _median(a: np.ndarray) -> float:
    """Median of a 1-d array, cheaper than np.median for the small arrays used here."""
    n = a.size
    h = n // 2
    if n % 2:
        return float(np.partition(a, h)[h])
    part = np.partition(a, [h - 1, h])
    return float(part[h - 1] + part[h]) / 2.0


def _sorted_median(a: np.ndarray) -> float:
    n = a.size
    h = n // 2
    return float(a[h]) if n % 2 else (float(a[h - 1]) + float(a[h])) / 2.0


def _sorted_quantile(a: np.ndarray, q: float) -> float:
    """Quantile of a sorted 1-d array, linear interpolation (numpy's default), without np.quantile's cost."""
    pos = q * (a.size - 1)
    i = int(pos)
    j = min(i + 1, a.size - 1)
    return float(a[i]) + (float(a[j]) - float(a[i])) * (pos - i)


def _run_spread(sorted_runs: list[np.ndarray]) -> tuple[float, float]:
    """(moderated, observed) run-to-run sd of log bandwidth (DECISION_RULE step 3), from the sorted log
    runs.  The observed one is nan for a single run."""
    k = len(sorted_runs)
    s2_obs = 0.0
    observed = float("nan")
    if k >= 2:
        meds = [_sorted_median(r) for r in sorted_runs]
        mean = sum(meds) / k
        var_meds = sum((v - mean) ** 2 for v in meds) / (k - 1)
        # sampling variance of each run's median: pi/2 sigma^2 / n, robust sigma = IQR / 1.349
        se2 = 0.0
        for r in sorted_runs:
            q1, q3 = _sorted_quantile(r, 0.25), _sorted_quantile(r, 0.75)
            se2 += (math.pi / 2.0) * ((q3 - q1) / 1.349) ** 2 / r.size
        s2_obs = max(var_meds - se2 / k, 0.0)
        observed = math.sqrt(s2_obs)
    nu = k - 1
    s2 = (nu * s2_obs + PRIOR_RUN_SPREAD_DF * PRIOR_RUN_SPREAD**2) / (nu + PRIOR_RUN_SPREAD_DF)
    return math.sqrt(s2), observed


def _fmt_p(p: float) -> str:
    return f"{p:.2g}"


def compare(
    current_gbps: Sequence[float],
    baseline_runs_gbps: Sequence[Sequence[float]],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
    n_comparisons: int = 1,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """Judge this run's bandwidth samples against the baseline runs' samples (DECISION_RULE).

    ``current_gbps``: per-iteration bandwidth of this run; ``baseline_runs_gbps``: one list per stored
    baseline run.  ``alpha`` is the suite-level level, divided by ``n_comparisons`` (Bonferroni).
    ``confidence`` is the one-sided confidence of the bounds the verdict uses (default 0.925; 0.975 makes
    the verdict use the displayed 95 % interval: fewer false alarms near the tolerance, less power).
    Raises ValueError on empty input, non-positive or non-finite samples, or bad parameters.
    """
    confidence = float(confidence)
    if not (0.5 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence!r}")
    z_v = float(NormalDist().inv_cdf(confidence))
    tolerance = float(tolerance)
    if not (0.0 < tolerance < 1.0):
        raise ValueError(f"tolerance must be a fraction in (0, 1) such as 0.05, got {tolerance!r}")
    alpha_c = corrected_alpha(alpha, n_comparisons)
    x = np.log(_as_positive(current_gbps, "current samples"))
    if isinstance(baseline_runs_gbps, (str, bytes)) or len(baseline_runs_gbps) == 0:
        raise ValueError("baseline: no baseline runs to compare with")
    runs = [np.log(_as_positive(r, f"baseline run {j}")) for j, r in enumerate(baseline_runs_gbps)]
    y = np.concatenate(runs)
    n1, n2 = x.size, y.size
    xs, ys = np.sort(x), np.sort(y)

    d = np.sort(_pair_differences(x, y))  # a full sort beats a multi-point partition here
    m = d.size
    lo90, hi90 = _moses_positions(n1, n2, m, z_v)
    lo95, hi95 = _moses_positions(n1, n2, m, _Z_TWO_SIDED_95)
    shift = _sorted_median(d)
    part = d
    h_lo90, h_hi90 = max(shift - part[lo90], 0.0), max(part[hi90] - shift, 0.0)
    h_lo95, h_hi95 = max(shift - part[lo95], 0.0), max(part[hi95] - shift, 0.0)
    p_less, p_greater = _mann_whitney(x, ys)

    sorted_runs = [np.sort(r) for r in runs]
    spread, observed = _run_spread(sorted_runs)
    run_factor = math.sqrt(1.0 + sum((r.size / n2) ** 2 for r in runs))
    s_r = spread * run_factor
    m90 = z_v * s_r
    m95 = _Z_TWO_SIDED_95 * s_r
    # "noisy" looks at the baseline's own spread: the larger of the moderated and the observed one
    noise_spread = spread if math.isnan(observed) else max(spread, observed)
    m_noise = z_v * noise_spread * run_factor
    lower = math.exp(shift - math.hypot(h_lo90, m90))
    upper = math.exp(shift + math.hypot(h_hi90, m90))
    ci_low = math.exp(shift - math.hypot(h_lo95, m95))
    ci_high = math.exp(shift + math.hypot(h_hi95, m95))
    ratio = math.exp(shift)

    lo_limit, hi_limit = 1.0 - tolerance, 1.0 + tolerance
    est = f"{ratio:.3g}x [{ci_low:.3g}, {ci_high:.3g}] 95% CI"
    tol_pct = f"{tolerance * 100:.3g}%"
    if p_less < alpha_c and upper < lo_limit:
        status = "regression"
        reason = (
            f"bandwidth is {est} of the baseline: the drop is significant (p={_fmt_p(p_less)} < "
            f"alpha={_fmt_p(alpha_c)}) and even its one-sided {confidence * 100:.3g}% upper bound {upper:.3g}x, run-to-run "
            f"spread included, is below the {tol_pct} tolerance limit {lo_limit:.3g}x"
        )
    elif p_greater < alpha_c and lower > hi_limit:
        status = "improved"
        reason = (
            f"bandwidth is {est} of the baseline: the gain is significant (p={_fmt_p(p_greater)} < "
            f"alpha={_fmt_p(alpha_c)}) and its one-sided {confidence * 100:.3g}% lower bound {lower:.3g}x is above "
            f"{hi_limit:.3g}x; consider updating the baseline"
        )
    elif math.exp(-m_noise) < lo_limit:
        status = "noisy"
        reason = (
            f"bandwidth is {est} of the baseline, but the baseline's run-to-run spread "
            f"({noise_spread * 100:.2g}% over {len(runs)} runs) "
            f"is too wide to hold a {tol_pct} tolerance; "
            f"record more baseline runs on a quieter machine or raise the tolerance"
        )
    else:
        status = "ok"
        if p_less < alpha_c and ratio < 1.0:
            why = "a drop is detectable but not shown to exceed"
        elif p_greater < alpha_c and ratio > 1.0:
            why = "a gain is detectable but not shown to exceed"
        else:
            why = "no change is shown beyond"
        reason = f"bandwidth is {est} of the baseline: {why} the {tol_pct} tolerance"
    return Comparison(
        status=status,
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        p_value=p_less,
        alpha=alpha_c,
        current_median_gbps=math.exp(_sorted_median(xs)),
        baseline_median_gbps=math.exp(_sorted_median(ys)),
        run_spread=spread,
        tolerance=tolerance,
        reason=reason,
        lower_bound=lower,
        upper_bound=upper,
        p_value_greater=p_greater,
        n_current=int(n1),
        n_baseline=int(n2),
        baseline_runs=len(runs),
        observed_run_spread=observed,
    )


M = TypeVar("M")


def confirm(decide: Callable[[M], Comparison], first: M,
            measure_again: Optional[Callable[[], M]]) -> tuple[Comparison, M, bool]:
    """The gate's procedure on one case: a measurement judged a regression is measured again, and the
    second measurement decides (a passing glitch is not a regression).  Returns (the comparison that
    decides, the measurement it judged, whether it was measured again)."""
    c = decide(first)
    if c.failed and measure_again is not None:
        again = measure_again()
        return decide(again), again, True
    return c, first, False


def check_floor(current_gbps: Sequence[float], floor_gbps: float) -> FloorCheck:
    """Check a case against a published floor: "regression" when the median bandwidth is below it."""
    arr = _as_positive(current_gbps, "current samples")
    floor = float(floor_gbps)
    if not math.isfinite(floor) or floor <= 0:
        raise ValueError(f"floor_gbps must be a positive number, got {floor_gbps!r}")
    med = float(np.median(arr))
    if med < floor:
        status = "regression"
        reason = f"median bandwidth {med:.4g} GB/s is below the published floor {floor:.4g} GB/s ({med / floor:.3g}x)"
    else:
        status = "ok"
        reason = f"median bandwidth {med:.4g} GB/s meets the published floor {floor:.4g} GB/s ({med / floor:.3g}x)"
    return FloorCheck(status=status, current_median_gbps=med, floor_gbps=floor, ratio=med / floor,
                      n_current=int(arr.size), reason=reason)
