"""The tail rule: has a case's tail of single-operation latencies grown against its baseline?

Pure statistics (numpy, scipy); no torch.

The rule, per case:

1. **Reference levels.**  Each baseline run (a :class:`TailSketch`, as the store keeps it) gives its median
   (p50) and its quantiles as ratios to it.  At the baseline's p99 -- and, where every side has at least
   5,000 ops (:data:`FAR_MIN_EXPECTED` = 5 expected above it), also at its p99.9 -- the reference ratio is
   the median over the runs of that quantile / p50.  A ratio, not an absolute time: today's threshold is
   today's p50 x the ratio, so a pure shift of the median (every op 3 % slower) moves the threshold with it
   and is never called a heavier tail; the median verdict judges the median, this rule the shape.
2. **The baseline's share** above the reference: per run, the share of its ops above ratio x its p50
   (``TailSketch.share_above``, interpolated between the sketched levels; about 1 % at the p99), and their
   geometric mean over the m runs.
3. **H0: today's share <= (1 + tolerance) x the baseline's share** (``DEFAULT_TAIL_TOLERANCE`` 0.5: up to
   1.5 x the baseline's share of slow ops is tolerated).  Under H0 today's count k of n ops above the
   threshold is binomial with a rate that moves from run to run: log(rate) = log((1 + tolerance) x share)
   + rate_sd x T, with rate_sd^2 = s^2 / today_runs + (s^2 + mean binomial variance of the baseline's log
   shares) / m -- today's own run-to-run draw, and the baseline's estimation error (its runs' run-to-run
   spread and their binomial error) -- and T of unit sd, Student's t with :data:`MIX_DF` = 20 degrees of
   freedom (a normal fitted the recorded CPU runs' sd but not their far tails: in the CPU-fitted
   simulation the slow share switches regimes from run to run, and a normal mixing failed 2 % of no-change
   suites; with 10 degrees of freedom the mixing was so heavy that on a first H200 fit (one session) a
   share of slow ops 14 x the baseline's at the p99.9 was caught in only 72 % of cases, 97 % with 20; with
   20, 0 of 300 no-change suites failed on each of the CPU and assumed narrow models, and 0 of 300 on the
   final H200 model (two sessions) against 3 and against 8 baseline runs).  The p-value, P(K >= k), is
   the binomial tail averaged over T on a fine grid (:func:`mixture_sf`), times the number of levels
   tested (Bonferroni, 1 or 2).
4. **s**, the run-to-run sd of the log share of slow ops, is :func:`fit_spread` over the baseline's cases
   with at least 2 runs: per case, the variance of its runs' log shares above its reference less their
   binomial part, pooled over the cases (weights runs - 1), then moderated towards
   :data:`DEFAULT_SHARE_SPREAD` with a prior weight of :data:`SPREAD_PRIOR_DF` = 4 degrees of freedom (a
   baseline of 20 cases x 3 runs, 40 df, weighs 10 times the default).  The same s serves both levels:
   the far level's own estimate (``TailSpread.sd_far``, kept for the record) rests on about 10 ops per
   run and is noisy, and the recorded runs show no difference (pooled 0.90 at the p99, 0.73 at the p99.9).
5. **TAIL** when the p-value is below alpha / (m x looks), the Bonferroni correction over the session's
   gated cases and looks, as the median verdict's (``decision.corrected_alpha``).

Calibration (``benchmarks/tail_noise.py``: per run a new process group, the single ops' histograms kept;
``--fit`` fits the noise model).  Real runs so far: this project's 2-core CPU runner, shared with other
jobs, gloo world 2, 4 sessions (``benchmarks/data/tail_noise_cpu_1..4.json``, 5 runs x all_reduce,
all_gather x 4 KiB, 64 KiB, 1 MiB each): the run-to-run sd of the log share above the p99 ratio was 0.44,
0.97, 1.17 and 0.85 per session, 0.90 pooled (96 df); the median drifted 8-64 % (sd of log p50 per
session; 18 % the median case); 8 % of the ops were about 11 x slower than the median (the runner's
scheduling).  ``DEFAULT_SHARE_SPREAD`` = 0.9 is that pooled figure: it applies only where the baseline has
no case with 2 runs; no GPU run is recorded yet (the H200 runs of ``tail_noise.py`` will give the device
figure, and the default should then be the device's).

Simulations (``tests/test_tails.py``; suites of 20 cases, baselines of 3 runs as sketches, s fitted over
the suite's baseline): with no change, 0 of 100 suites failed on an assumed device-like noise (body 4 %,
1.5 % of ops 1.5 x slower, that share moving by 0.2 from run to run; 10,000 ops per run) and 0 of 100 on the
CPU-fitted noise (2,000 ops).  A baseline recorded in a quiet session against a noisier today (the share's
s 0.44 -> 1.5 on the CPU-fitted noise, 0.1 -> 0.4 on the device-like) failed 0 of 100 suites at tolerance 0
as at 0.5.  The default tolerance 0.5 is therefore not needed by these simulations: it is a margin, chosen,
for what they do not model (the share of slow ops moving between sessions by more than the runs of one
session show: the CPU sessions' s ranged over 0.44-1.17), at little cost in power (below).

What it needs of n and of the baseline: a tail of 2 % of the ops 3 x slower (more than doubling the share of
slow ops; the median moves by under 5 %) is judged through the p99.9 level (the share above it goes from about
0.1 % to 2 %), which needs 5,000 single ops today.  On the assumed narrow model it is caught in all 200
simulated cases at 10,000 ops against 3 baseline runs.  On the model fitted to one H200 (two sessions:
``tests/test_tails.py``, H200) the share of slow ops moves more from run to run (0.56 at the p99, 0.34 at the
p99.9, sd of log), and the baseline's own error weighs: at 10,000 ops it is caught in 26 % of the cases against
3 baseline runs, 94.5 % against 5 and 98.5 % against 8 -- record 8 runs or more, in several sessions, for the
tail verdict to see a tail of that size.  The default single-op time (3 x ``--gpucomm-min-time``, 0.3 s) gave
one H200 about 7,000-10,000 single ops of a small collective (2,300-3,600 in 0.1 s: torch.distributed and
the event pair cost about 30 us of host time per op); below 5,000 ops only the p99 is judged, where a 3 x
share is within the run-to-run spread plus the baseline's error, and it is caught in none of 200 at 2,000.
A tail that only doubles the share of a near slow mode (1.5 % -> 3 % of ops 1.5 x slower) moves the
p99-level share by 2 x, inside that spread: it is not reliably caught.

Today's samples may be given raw or as a :class:`~pytest_gpucomm.sketches.Histogram`: a sparse histogram of
the times in bins 0.5 % wide (the compact form a measurement carries in ``info["tail"]["hist"]``); counting the
iterations above a threshold from it is exact except within the threshold's own bin, which is not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from ..vocab import DEFAULT_ALPHA
from ..sketches import Histogram, TailSketch, positive_times

__all__ = [
    "DEFAULT_TAIL_TOLERANCE",
    "EXPECTED_SHARE",
    "baseline_ratio",
    "TailSpread",
    "DEFAULT_SHARE_SPREAD",
    "SPREAD_PRIOR_DF",
    "BaselineRun",
    "TAIL_LEVELS",
    "FAR_MIN_EXPECTED",
    "fit_spread",
    "mixture_sf",
    "TailTest",
    "MIN_TICKS",
    "tail_test",
]

#: the share of the baseline's iterations above its p99
EXPECTED_SHARE = 0.01
#: the excess share of slow ops tolerated, relative to the baseline's share above the same reference (0.5:
#: today's share may be up to 1.5 x the baseline's, about 1.5 % above its p99 scaled to today's median)
DEFAULT_TAIL_TOLERANCE = 0.5



#: a baseline run as the rule takes it
BaselineRun = Union[TailSketch, Histogram, tuple[float, float]]
#: the baseline's percentiles at which the rule counts today's slow ops (each a reference ratio to the median)
TAIL_LEVELS = (0.99, 0.999)
#: a level is tested only where its threshold lies at least this many clock steps above the median
MIN_TICKS = 8
#: a level above the p99 is judged only with runs (baseline and today) that expect this many ops above it
#: (the p99.9: 5,000 ops); below it the share's log is too coarse for the lognormal-binomial model
FAR_MIN_EXPECTED = 5


@dataclass(frozen=True)
class _Run:
    """A baseline run as the rule reads it: its median, its number of ops (None: unknown), and what it says
    of its tail (a sketch, a histogram, or (p50, p99))."""

    p50_s: float
    n: Optional[int]
    source: Union[TailSketch, Histogram, tuple[float, float]]

    def ratio(self, q: float) -> Optional[float]:
        """Its q-quantile over its median; None where it has too few ops (or, as (p50, p99), only the p99)."""
        src = self.source
        if isinstance(src, TailSketch):
            return src.ratios.get(q)
        if isinstance(src, Histogram):
            return max(1.0, src.quantile(q) / self.p50_s) if src.n * (1 - q) >= 1 else None
        return src[1] / src[0] if q == 0.99 else None

    def share_above(self, ratio: float) -> float:
        src = self.source
        if isinstance(src, TailSketch):
            return src.share_above(ratio)
        if isinstance(src, Histogram):
            return max(src.count_above(self.p50_s * ratio), 0.5) / src.n
        return EXPECTED_SHARE  # (p50, p99): only its p99 is known; the share above the reference taken as 1 %


def _read_runs(runs: Sequence[BaselineRun], where: str = "baseline") -> list[_Run]:
    out = []
    for j, run in enumerate(runs):
        if isinstance(run, TailSketch):
            r = _Run(run.p50_s, run.n, run)
        elif isinstance(run, Histogram):
            if run.n == 0:
                raise ValueError(f"{where} run {j}: an empty histogram")
            r = _Run(run.quantile(0.5), run.n, run)
        else:
            try:
                p50, p99 = (float(x) for x in run)
            except (TypeError, ValueError):
                raise ValueError(f"{where} run {j}: expected a TailSketch, a Histogram or (p50, p99) seconds, "
                                 f"got {run!r}") from None
            if not (p50 > 0 and p99 >= p50 and math.isfinite(p99)):
                raise ValueError(f"{where} run {j}: need 0 < p50 <= p99, got p50={p50!r}, p99={p99!r}")
            r = _Run(p50, None, (p50, p99))
        out.append(r)
    if not any(r.ratio(0.99) is not None for r in out):
        raise ValueError(f"{where} has no run with tail figures (a p99: at least 100 single ops)")
    return out


def _level(runs: Sequence[_Run], q: float) -> Optional[tuple[float, list[float], list[float]]]:
    """At the baseline's q-quantile: its reference ratio (the median over the runs that resolve it of their
    q-quantile / p50), and per such run the log of its share of ops above that ratio and that log's binomial
    variance ((1 - p) / (n p), delta method; 0 where n is unknown).  None where no run resolves q."""
    have = [(r, r.ratio(q)) for r in runs if q <= TAIL_LEVELS[0] or (r.n or 0) * (1 - q) >= FAR_MIN_EXPECTED]
    have = [(r, x) for r, x in have if x is not None]
    if not have:
        return None
    ref = float(np.median([x for _, x in have]))
    logs, binom = [], []
    for r, _ in have:
        share = max(r.share_above(ref), 0.5 / r.n if r.n else 1e-9)
        logs.append(math.log(share))
        binom.append((1 - share) / (r.n * share) if r.n else 0.0)
    return ref, logs, binom


def baseline_ratio(runs: Sequence[BaselineRun], q: float = 0.99) -> float:
    """The baseline's tail shape: the median over its runs of p99 / p50 (``q``: another quantile), each run a
    :class:`TailSketch`, a :class:`Histogram` or (p50, p99) seconds; runs too short for it are left out."""
    lv = _level(_read_runs(runs), q)
    if lv is None:
        raise ValueError(f"the baseline has no run with a {q:g}-quantile")
    return lv[0]


@dataclass(frozen=True)
class TailSpread:
    """How much the share of slow ops moves from run to run: ``sd`` of its log above the baseline's p99, as
    the rule uses it (the measured figure moderated towards :data:`DEFAULT_SHARE_SPREAD`), from ``cases``
    cases of the baseline with at least 2 runs giving ``df`` degrees of freedom (0: none measured, the
    default assumed); ``measured_sd`` the cases' own pooled figure (None without any), ``prior_df`` the
    default's weight; ``sd_far`` / ``df_far`` the same above the baseline's p99.9 (None: ``sd``)."""

    sd: float
    df: float = 0.0
    cases: int = 0
    measured_sd: Optional[float] = None
    prior_df: float = 0.0
    sd_far: Optional[float] = None
    df_far: float = 0.0

    def at(self, q: float) -> float:
        """The sd the rule uses at the baseline's q-quantile: ``sd`` at every level (``sd_far`` is kept for the
        record: the far level's own estimate is noisy -- about 10 ops per run above a p99.9 -- and the
        recorded runs show no difference between the levels; see the module's doc)."""
        return self.sd


#: the run-to-run sd of the log share of slow ops assumed where the baseline measures none, and its weight
#: in degrees of freedom against a baseline's measured figure (see the module's doc for both)
DEFAULT_SHARE_SPREAD = 0.9
SPREAD_PRIOR_DF = 4.0


def _pooled_var(cases: Sequence[list[_Run]], q: float) -> tuple[float, float, int]:
    num = df = 0.0
    used = 0
    for runs in cases:
        lv = _level([r for r in runs if r.n is not None], q)
        if lv is None or len(lv[1]) < 2:
            continue
        _, logs, binom = lv
        num += (len(logs) - 1) * (float(np.var(logs, ddof=1)) - float(np.mean(binom)))
        df += len(logs) - 1
        used += 1
    return (max(0.0, num / df) if df else math.nan), df, used


def fit_spread(cases: Iterable[Sequence[BaselineRun]], *, prior_sd: float = DEFAULT_SHARE_SPREAD,
               prior_df: float = SPREAD_PRIOR_DF) -> TailSpread:
    """The run-to-run spread of the share of slow ops, pooled over the cases of a baseline (each a sequence
    of its runs: :class:`TailSketch`, or :class:`Histogram`; (p50, p99) runs, which know no share, are left
    out).

    Per case with at least 2 runs: the reference ratio (:func:`baseline_ratio`), each run's share of ops above
    it (``TailSketch.share_above``), and the variance of the log shares over the runs less their mean binomial
    variance ((1 - p) / (n p)): the run-to-run part.  Pooled over the cases weighted by runs - 1 (a case's
    negative estimate kept, so that the pool is unbiased; the pool clipped at 0), then moderated:
    sd^2 = (prior_df x prior_sd^2 + df x pooled) / (prior_df + df).  The same at the p99.9 (``sd_far``)."""
    if not (prior_sd >= 0 and math.isfinite(prior_sd)) or not (prior_df >= 0 and math.isfinite(prior_df)):
        raise ValueError(f"fit_spread: need prior_sd >= 0 and prior_df >= 0, got {prior_sd!r}, {prior_df!r}")
    read = []
    for i, case in enumerate(cases):
        try:
            read.append(_read_runs(list(case), f"fit_spread: case {i}:"))
        except ValueError as e:
            raise ValueError(str(e)) from None

    def moderated(v: float, df: float) -> float:
        if df == 0:
            return prior_sd
        return math.sqrt((prior_df * prior_sd ** 2 + df * v) / (prior_df + df))

    v, df, used = _pooled_var(read, 0.99)
    v_far, df_far, _ = _pooled_var(read, 0.999)
    return TailSpread(moderated(v, df), df, used, math.sqrt(v) if df else None, prior_df,
                      moderated(v_far, df_far), df_far)


@dataclass(frozen=True)
class TailTest:
    """The tail rule's result for one case (see the module's doc); the figures are those of the reference
    level (``quantile``: the baseline's p99 or p99.9) with the smallest p-value."""

    tail: bool  # today's share of ops above the threshold is significantly above the allowed share
    n: int
    exceed: int  # today's iterations above the threshold
    threshold_s: float  # today's p50 x the baseline's p99 / p50 (or p99.9 / p50)
    baseline_ratio: float
    today_p50_s: float
    allowed_share: float  # the baseline's share above its reference ratio x (1 + tolerance)
    p_value: float  # Bonferroni-corrected over the levels tested
    level: float  # the per-case level (Bonferroni over the cases and looks)
    baseline_share: float = EXPECTED_SHARE  # the baseline's share above the reference (geometric mean of its runs)
    quantile: float = 0.99  # the baseline's percentile whose ratio made the threshold
    rate_sd: float = 0.0  # the sd of today's log share under the null: run to run and the baseline's error
    levels: int = 1  # reference levels tested (0: none resolved by the clock, see ``unresolved``)
    unresolved: str = ""  # why no level was tested

    @property
    def share(self) -> float:
        return self.exceed / self.n if self.n else 0.0

    def text(self) -> str:
        if not self.levels:
            return f"tail not judged: {self.unresolved}"
        pct = f"p{self.quantile * 100:g}"
        return (f"{self.exceed} of {self.n} iterations ({self.share:.2%}) slower than the baseline's {pct} scaled "
                f"to today's median ({self.threshold_s * 1e6:.2f} us = {self.baseline_ratio:.2f} x p50 "
                f"{self.today_p50_s * 1e6:.2f} us); baseline {self.baseline_share:.2%}, {self.allowed_share:.2%} "
                f"allowed (run-to-run sd {self.rate_sd:.2f} in log), p = {self.p_value:.2g} (level {self.level:.2g})")


#: the mixing distribution of the log rate: Student's t with this many degrees of freedom, scaled to the
#: rate's sd (heavier tails than the normal's: see the module's doc); None: normal
MIX_DF: Optional[float] = 20.0
#: the grid of the mixture's integral, in units of the rate's sd (step 0.02; the integrand, a binomial tail
#: probability, steps from 0 to 1 over about 0.1 sd at n = 10,000); the points whose weight is below 1e-13
#: are left out (together they weigh less than 1e-9: far below any level the rule tests at)
_Z = np.arange(-40.0, 40.0 + 1e-9, 0.02)
_GRIDS: dict[Optional[float], tuple[np.ndarray, np.ndarray]] = {}


def _grid(df: Optional[float]) -> tuple[np.ndarray, np.ndarray]:
    """The points and weights of the mixing distribution of unit sd: Student's t with ``df`` or normal."""
    g = _GRIDS.get(df)
    if g is None:
        from scipy.stats import norm, t

        if df is None:
            w = norm.pdf(_Z)
        else:  # a t scaled to unit sd
            scale = math.sqrt((df - 2) / df)
            w = t.pdf(_Z / scale, df) / scale
        w = w / w.sum()
        keep = w > 1e-13
        g = _GRIDS[df] = (_Z[keep], w[keep])
    return g


def mixture_sf(k: int, n: int, log_rate: float, rate_sd: float, mix_df: Optional[float] = None) -> float:
    """P(K >= k) for K binomial(n, rate), log(rate) = ``log_rate`` + ``rate_sd`` x T with T of unit sd:
    Student's t with ``mix_df`` (> 2) degrees of freedom, or normal (None)."""
    from scipy.special import bdtrc  # bdtrc(k - 1, n, p) = P(binomial(n, p) >= k)

    if k <= 0:
        return 1.0
    if rate_sd <= 0:
        return float(bdtrc(k - 1, n, min(1.0, math.exp(log_rate))))
    if mix_df is not None and not mix_df > 2:
        raise ValueError(f"mix_df must be above 2 (a finite sd), got {mix_df!r}")
    z, w = _grid(mix_df)
    rates = np.minimum(1.0, np.exp(log_rate + rate_sd * z))
    return float(min(1.0, np.dot(w, bdtrc(k - 1, n, rates))))


def tail_test(baseline: Sequence[BaselineRun], today: Union[Histogram, Sequence[float]], *,
              tolerance: float = DEFAULT_TAIL_TOLERANCE, alpha: float = DEFAULT_ALPHA, n_comparisons: int = 1,
              looks: int = 1, today_p50_s: Optional[float] = None, spread: Optional[TailSpread] = None,
              today_runs: int = 1, resolution_s: float = 0.0) -> TailTest:
    """The tail rule for one case (see the module's doc): ``baseline`` is its runs (:class:`TailSketch`, as the
    store keeps them; a run's :class:`Histogram`; or (p50, p99) seconds, whose share above the reference is
    taken as 1 % without error, and which give no p99.9); ``today`` the single-operation times (raw, or a
    :class:`Histogram`; ``today_runs`` runs pooled in it, e.g. re-measures merged); ``today_p50_s`` today's
    exact median where ``today`` is a histogram (else taken from it); ``spread`` the run-to-run spread
    (:func:`fit_spread` over the baseline's cases; None: fitted to this case's runs alone); ``resolution_s``
    the step of today's clock: a level whose threshold lies fewer than ``MIN_TICKS`` steps above today's
    median is not tested (the share above it is set by the clock's step, not by the times: a 1.3 us op timed
    in 32 ns steps has its p99 one step above its median).  TAIL when the p-value, corrected over the
    reference levels tested, is below alpha / (n_comparisons x looks); no level tested: never TAIL."""
    from .decision import corrected_alpha

    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (
            tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"tail_tolerance must be a number >= 0 (today's share of slow ops may be up to (1 + "
                         f"tolerance) x the baseline's), got {tolerance!r}")
    if isinstance(today_runs, bool) or not isinstance(today_runs, int) or today_runs < 1:
        raise ValueError(f"today_runs must be a whole number >= 1, got {today_runs!r}")
    level = corrected_alpha(alpha, n_comparisons, looks)
    runs = _read_runs(baseline)
    if spread is None:
        spread = fit_spread([baseline])
    elif not isinstance(spread, TailSpread) or not (spread.sd >= 0 and math.isfinite(spread.sd)):
        raise ValueError(f"spread must be a TailSpread with sd >= 0, got {spread!r}")
    if isinstance(today, Histogram):
        n = today.n
        if n == 0:
            raise ValueError("today's single-operation times: no samples")
        p50 = today_p50_s if today_p50_s is not None else today.quantile(0.5)
    else:
        a = positive_times(today, "today's single-operation times")
        n = int(a.size)
        p50 = float(np.median(a)) if today_p50_s is None else today_p50_s
    if not (isinstance(p50, (int, float)) and p50 > 0 and math.isfinite(p50)):
        raise ValueError(f"today_p50_s must be positive finite seconds, got {p50!r}")
    if isinstance(resolution_s, bool) or not isinstance(resolution_s, (int, float)) or not (
            resolution_s >= 0 and math.isfinite(resolution_s)):
        raise ValueError(f"resolution_s must be seconds >= 0, got {resolution_s!r}")
    tested = []
    unresolved = ""
    for q in TAIL_LEVELS:
        lv = _level(runs, q)
        if lv is None or (q > TAIL_LEVELS[0] and n * (1 - q) < FAR_MIN_EXPECTED):
            continue  # the baseline does not resolve it, or today has too few ops to expect enough above it
        ratio, logs, binom = lv
        threshold = p50 * ratio
        if threshold - p50 < MIN_TICKS * resolution_s:
            unresolved = (f"the baseline's p{q * 100:g} is {(threshold - p50) * 1e9:.0f} ns above today's median, "
                          f"fewer than {MIN_TICKS} steps of the clock ({resolution_s * 1e9:.0f} ns)")
            continue
        k = today.count_above(threshold) if isinstance(today, Histogram) else int(np.count_nonzero(a > threshold))
        s2 = spread.at(q) ** 2
        # today's log rate: the baseline's (estimated from its m runs: run to run and binomial error) plus
        # today's own run-to-run draw (of today_runs runs pooled)
        rate_sd = math.sqrt(s2 / today_runs + (s2 + float(np.mean(binom))) / len(logs))
        base_share = math.exp(float(np.mean(logs)))
        allowed = min(1.0, base_share * (1 + tolerance))
        p = mixture_sf(k, n, math.log(allowed), rate_sd, MIX_DF)
        tested.append((p, q, k, threshold, ratio, allowed, base_share, rate_sd))
    if not tested:
        return TailTest(tail=False, n=n, exceed=0, threshold_s=p50, baseline_ratio=1.0, today_p50_s=p50,
                        allowed_share=1.0, p_value=1.0, level=level, levels=0,
                        unresolved=unresolved or "no reference level resolved")
    p, q, k, threshold, ratio, allowed, base_share, rate_sd = min(tested)
    p = min(1.0, p * len(tested))
    return TailTest(tail=p < level, n=n, exceed=k, threshold_s=threshold, baseline_ratio=ratio, today_p50_s=p50,
                    allowed_share=allowed, p_value=p, level=level, baseline_share=base_share, quantile=q,
                    rate_sd=rate_sd, levels=len(tested))
