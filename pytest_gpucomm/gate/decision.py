"""The regression decision: pure statistics on run-level locations of log bandwidth.

Nothing here imports torch or touches a device, and nothing here knows about files or pytest; every
function takes plain numbers and returns numbers.  A comparison's status is a
:class:`pytest_gpucomm.vocab.Status` (``OK``, ``REGRESSION``, ``IMPROVED``, ``NOT_GATED``), the one the
verdict and the report carry; the words that explain it are made from its numbers in
:mod:`pytest_gpucomm.gate.reasons`.  The class offsets of step 6 (the runs' common offset) are in
:mod:`pytest_gpucomm.gate.levels`, a published floor's check in :mod:`pytest_gpucomm.gate.floors`.  This module
imports numpy and scipy: import it only when judging.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Sequence

import numpy as np
from scipy import optimize as _opt
from scipy import special as _special
from scipy import stats as _sstats

from .. import checks
from ..vocab import DEFAULT_ALPHA, DEFAULT_MAX_REMEASURES, DEFAULT_TOLERANCE, Status

__all__ = [
    "RunLocation",
    "run_location",
    "CaseModel",
    "fit_case",
    "Prior",
    "fit_prior",
    "fit_op_priors",
    "prior_of_variances",
    "prior_class",
    "Spread",
    "prediction",
    "Comparison",
    "compare",
    "judge",
    "detectable_drop",
    "corrected_alpha",
    "class_scatter",
    "Floors",
    "DECISION_RULE",
    "DETECTION_POWER",
    "GATED_DROP_FACTOR",
]

DECISION_RULE = """\
How a benchmark is judged against its baseline
----------------------------------------------

The unit is the run: a pytest session that measures a case gives one location, the median of its
per-iteration log bandwidth, with its own uncertainty (pi/2 * (IQR/1.349)^2 / n_eff, n_eff the number of
samples deflated for their lag-1 autocorrelation).  The samples of one run are not independent draws of
the hardware: runs of the same case differ about ten times more than their samples' spread predicts.
All statistics work on log bandwidth, so a shift is a ratio.

1. The baseline, per case.  Its runs are grouped by session (the occasion they were recorded on: one
   host boot on one day); runs of one session count as one session's evidence.  The centre is the mean
   of the session means.  Two spreads are measured: s_w, the spread of runs within a session (pooled),
   and s_b, the spread of the session means.  The session's own part is s_s^2 = s_b^2 - s_w^2 * mean(1/n_s).
2. Moderation, only where the data are too few.  With few sessions s_b is itself uncertain, so it is
   moderated towards the typical s_b of the baseline's cases of the same class (copies or collectives,
   up to 1 MiB or above), with the weight d0 that the spread of s_b across those cases supports (the
   empirical-Bayes estimator of Smyth, 2004).  The moderated value is never used below the observed one.
   With one session, s_s comes from that prior, else it is assumed (FALLBACK_SESSION_SPREAD, 0.5 %, worth
   4 degrees of freedom; about the median case's on 2 x H200); with one run, s_w is assumed too (1 %).
   A baseline of one session (a report taken as a baseline, a first recording) borrows both spreads,
   with their degrees of freedom, from the baseline file of the same hardware where one is found
   (baselines/<model>.json: the same case's, else the median of its class's cases of its op), and says so;
   else, on a GPU, from the corpus prior (gate.prior: Smyth's prior of the session and run parts over every
   case of its level class on every machine the project holds runs of, trusted from 2 machines, for the ops 2
   machines hold; the machines' own disagreement is in its degrees of freedom).  A class or op the prior does
   not cover keeps them assumed: 5a.
3. Prediction.  A new session's mean of k independent runs differs from the centre by a variance
   V(k) = s_s^2 + (s_w^2 - u^2 + u_now^2) / k + s_b^2 / S   (u^2: the baseline runs' own uncertainty,
   u_now^2: the new runs'; S sessions), at least MIN_SPREAD^2 (0.3 %).  Its degrees of freedom combine
   those of s_b (S - 1 + d0) and of s_w (runs less sessions) by Satterthwaite's rule (Student t).
3a. Floors (Floors): V(k) is never below the variance of today's fresh runs over k where they disagree
   beyond what the model allows a run (above the 99.9th percentile of chi-square: a glitch); where a spread is
   assumed, the run spread is never below the spread of a run's samples (the baseline runs' median, today's
   largest), and V never below how far the run's cases of the same class scatter about their median log
   ratio (1.4826 MAD, squared; from 5 cases: those judged before it in a live run, all in gpucomm compare).
   A floor adds no degrees of freedom.
4. Verdict, at tolerance t (default 5 %), with the multiple-comparison correction on the bound that
   decides: q = t-quantile at 1 - a, a = alpha * CASE_ALPHA_SHARE (0.1) / (m * looks): m the gated cases of the
   session, looks the pooled comparisons that may decide a regression (one per re-measure), alpha 0.01.
   * "regression": ratio * exp(q * sqrt(V(k))) < 1 - t: even the upper bound of the ratio is below
     the tolerance limit.  By Bonferroni, when no case truly dropped by more than the tolerance, the
     chance that any case of the session is called a regression is at most alpha * CASE_ALPHA_SHARE.
   * "improved": symmetric, ratio * exp(-q sqrt(V(k))) > 1 + t.
   * "not gated": neither, and this baseline cannot catch a drop of twice the tolerance (10 %) with 99 %
     probability: the smallest such drop, D = 1 - (1 - t) exp(-(q + z_0.99) sqrt(V(k_max))), is larger
     (q at V(k_max)'s degrees of freedom; k_max = 1 + the re-measures, assumed to draw new processes).
     The verdict says D and the fix: more baseline runs over more sessions, or a larger tolerance.
   * "ok": otherwise.
5. Re-measure.  A first run whose ratio is below 1 - t is measured again in a new process state (a new
   process group, a new process for copies), and the runs are pooled (k = 2).  With more re-measures
   allowed (DEFAULT_MAX_REMEASURES is 1), another follows while the pooled ratio is still below 1 - t and
   not yet decided.  A re-measure that could not draw a new state is merged into the run it repeats (k
   unchanged).  Folds: a case of a folded class (gate.levels.FOLDED_CLASSES: collectives up to 1 MiB) is
   measured before its verdict in K process groups of its own (--gpucomm-folds, DEFAULT_FOLDS 4; the
   session's group and K - 1 kept beside it), and its first look pools them (k = K); the folds spend no look
   of alpha (only the re-measures after them may decide).
5a. No verdict without evidence.  Where the baseline cannot tell a case's spread (one session and no prior
   for its class: the session or run spread assumed), the case is never "ok" (at best "not gated"), fails
   only where its fresh runs of today agree (never on one run alone), and its spread is never taken below
   what the runs show (step 3a, Floors: the spread of a run's samples, the scatter of the run's cases of its
   class).  Today's fresh runs of any case (its first, folds and re-measures) are a floor too where they
   disagree beyond what the model allows (step 3a), so that a glitch pooled with a normal re-measure is not a
   regression.
6. The levels, at the end of the session: the run judged as a whole, at three levels, each at its share of
   alpha (gate.levels.LEVEL_SHARES: 0.1 for the cases' own verdicts at their tests, steps 4-5, and their
   tails; 0.4 for the class offsets, 0.25 for the op bands, 0.25 for the case residuals; Bonferroni within
   a level, where a class up to 1 MiB weighs SMALL_CLASS_WEIGHT (3) against a larger one's 1), so that a
   run without a drop beyond the tolerance fails at any level with probability at most alpha.
   * Classes: copies between GPUs, host<->device copies and collectives, each up to 1 MiB and above (where
     the 2 x H200 runs show a common offset per run: 36-44 % of a small case's run-to-run variance).
   * The class offset of a run: the median over the class's cases of their log ratio (each case's runs
     pooled).  Each baseline run's offset (the median of its deviations from the cases' centres) is fitted
     like a case's runs (steps 1 and 3, by session) to give the spread of a new run's offset, its session
     spread moderated towards the prior of the classes of its size (up to 1 MiB, or above: Smyth's, fitted
     to those classes' offsets, never below its own; from 3 such classes); a class whose cases are measured
     in K folds has its runs' part divided by K; the cases' own spread adds (pi/2) * median(V_i) / n.
     Judged from MIN_CLASS_CASES (5) cases.
   * A class up to 1 MiB is judged a second time by its steady offset, each of its two verdicts at half its
     weight: the median of its cases' log ratios weighted by the inverse of each case's variance over the
     baseline's runs (how far the case moved between boots and processes; the sizes that a boot's fixed
     cost per message moves least count most), fitted from the baseline runs' own steady offsets as above,
     its prior the small classes' steady offsets together; the cases' own spread adds (pi/2) * sum(w_i^2
     V_i) / (sum w_i)^2.  Only where every case of the class has MIN_STEADY_RUNS (3) baseline runs and the
     class 2 sessions.
   * The op band: the cases of one sweep (one test, op, dtype, world and devices) within one class (sizes
     up to 1 MiB, or above), at least MIN_BAND_CASES (3).  A case's residual is its log ratio less its
     class's offset estimated from the run's cases of the class outside its band (their median, so that a
     band that dropped does not move its own reference; fewer than 3 such cases: nothing is removed).  A
     band's residual is the mean of its cases', each weighted by its inverse residual variance.
   * A band's and a case's residual are judged like a case against the same residuals of the baseline's
     runs (taken over the cases measured now), every run one draw: its variance over the runs, shrunk
     towards its class's prior both ways (Smyth 2004: (d0 s0^2 + d s^2) / (d0 + d), with d0 + d degrees of
     freedom), times (1 + 1/S) for the centre's own error.  A case measured in K folds has the share of that
     variance that lies within sessions (pooled over its class's cases from the baseline runs' sums of
     squares: 97 % for small collectives on 2 x H200) divided by K; a band, by its cases' fewest folds.
   * A baseline of one session: a band's and a case's residual add twice the part drawn once per session (the
     baseline's session and today's), from the corpus prior's residual spread of its class (gate.prior), else
     assumed; a class offset's session and run parts are borrowed from the file of the same hardware that
     lends the cases theirs (its offset over that file's runs of the cases measured now), else assumed.  What
     is assumed is never "ok", and fails only on cases of two fresh runs of today (step 5a).  A case's
     residual, and a band's (its cases' weighed as its mean), is never judged tighter than its runs of today
     show (step 3a).
   * Where a band's or a case's reference (the offset of the other cases of its class) is itself below 1 -
     tolerance, its residual is not used: "not judged", saying so (it would call a case slower than its
     baseline "faster than its class"); the class offset and the cases' own verdicts judge such a run.
   The tolerance applies at each level to what that level measures: a class offset beyond it (every case of
   the class slower), a band or a case slower than its class by more than it.  A drop that a class shares
   is judged once, by the class's test, not by each of its cases.  "Gated" at a level: a drop of twice the
   tolerance (10 %) of that class, band or case fails the run with probability at least DETECTION_POWER
   (99 %).  A regression at any level fails the run and marks the rows of the cases it covers.
A published case with only a floor is checked against floor * (1 - t), with the same re-measure; the
verdict says how far the median is from the floor.
"""

__doc__ = (__doc__ or "") + "\n" + DECISION_RULE  # the final rule, also for help() and the README

#: probability with which the "smallest detectable drop" is caught
DETECTION_POWER = 0.99
#: a case is gated when it catches a drop of this many tolerances with DETECTION_POWER
GATED_DROP_FACTOR = 2.0
#: spreads assumed where a baseline cannot measure them, each worth FALLBACK_DF degrees of freedom: the
#: session-to-session spread when every run comes from one session, and the run-to-run spread when there is
#: a single run.  From the shipped 2 x H200 file (python -m pytest_gpucomm.gate.calibration): the median
#: case's session spread is 0.34 % (collectives) and 0.53 % (copies), its run spread 1.79 % and 0.49 %.
FALLBACK_SESSION_SPREAD = 0.005
FALLBACK_RUN_SPREAD = 0.01
FALLBACK_DF = 4.0
#: the prediction spread is never taken below this: in leave-one-session-out on the shipped 2 x H200 file, a
#: held-out session's large host<->device copies sat 0.4-0.6 % from the centre of 4 sessions that spread less
#: than 0.1 % (a floor of 0.1 % called a uniform 5 % drop a regression there)
MIN_SPREAD = 0.003
#: the share of alpha spent on the per-case bounds at the cases' tests (and their tails); the rest goes to the
#: levels judged at the end of the session (gate.levels.LEVEL_SHARES)
CASE_ALPHA_SHARE = 0.1
#: degrees of freedom treated as infinite (normal quantiles)
DF_NORMAL = 1000.0
_Z95 = 1.959963984540054


# ------------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunLocation:
    """One run of one case: the median of its log bandwidth, that median's variance, its number of samples and
    the spread of its samples (the robust sd of their log bandwidth, IQR / 1.349; 0 where not known)."""

    loc: float
    se2: float
    n: int
    sd: float = 0.0

    @property
    def gbps(self) -> float:
        return math.exp(self.loc)


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
    i = int(np.flatnonzero(bad)[0])
    raise ValueError(
        f"{what}: bandwidth samples must be positive finite numbers; "
        f"{int(bad.sum())} are not, the first at index {i}: {float(arr[i])!r}"
    )


def run_location(samples_gbps: Sequence[float], what: str = "samples") -> RunLocation:
    """The run's location (median log bandwidth) and its variance from the run's own samples."""
    x = np.log(_as_positive(samples_gbps, what))
    n = int(x.size)
    loc = float(np.median(x))
    if n < 2:
        return RunLocation(loc, 0.0, n)
    q1, q3 = np.percentile(x, [25, 75])
    sd = float(q3 - q1) / 1.349
    rho = 0.0
    if n > 3:
        c = x - x.mean()
        denom = float(c @ c)
        if denom > 0:
            rho = min(max(float(c[1:] @ c[:-1]) / denom, 0.0), 0.9)
    n_eff = max(n * (1.0 - rho) / (1.0 + rho), 1.0)
    return RunLocation(loc, (math.pi / 2.0) * sd * sd / n_eff, n, sd)


def _pooled(runs: Sequence[RunLocation]) -> RunLocation:
    """Runs measured without a new process state in between: one run."""
    k = len(runs)
    return RunLocation(sum(r.loc for r in runs) / k, sum(r.se2 for r in runs) / (k * k), sum(r.n for r in runs),
                       max(r.sd for r in runs))


# ------------------------------------------------------------------------------------------------
# the baseline model of one case
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaseModel:
    """What a case's baseline runs say (DECISION_RULE steps 1-2), in log bandwidth."""

    center: float
    sessions: int
    runs: int
    between2: float  # observed variance of the session means; nan below 2 sessions
    within2: float  # pooled variance of runs within a session; nan when no session has 2 runs
    within_df: int
    mean_se2: float  # the baseline runs' own variance (u^2): their median
    inv_n: float  # mean over sessions of 1 / runs in it
    sample2: float = 0.0  # the spread of the baseline runs' samples (RunLocation.sd squared): their median

    @property
    def center_gbps(self) -> float:
        return math.exp(self.center)


def fit_case(runs: Sequence[RunLocation], sessions: Sequence[Optional[str]]) -> CaseModel:
    """The case's model from its baseline runs and the session of each (None: a session of its own)."""
    if len(runs) == 0:
        raise ValueError("baseline: no baseline runs to compare with")
    if len(sessions) != len(runs):
        raise ValueError(f"fit_case: {len(runs)} runs but {len(sessions)} session labels")
    labels = [s if s is not None else f"\0run{i}" for i, s in enumerate(sessions)]
    by: dict[str, list[float]] = {}
    for r, s in zip(runs, labels):
        by.setdefault(s, []).append(r.loc)
    means = [sum(v) / len(v) for v in by.values()]
    s_count = len(means)
    center = sum(means) / s_count
    between2 = float(np.var(means, ddof=1)) if s_count >= 2 else float("nan")
    within_df = sum(len(v) - 1 for v in by.values())
    ss = sum(sum((x - m) ** 2 for x in v) for v, m in zip(by.values(), means))
    within2 = ss / within_df if within_df > 0 else float("nan")
    # the runs' own error: the median, so that one run with a wide spread of samples cannot inflate it
    return CaseModel(center=center, sessions=s_count, runs=len(runs), between2=between2, within2=within2,
                     within_df=within_df, mean_se2=float(np.median([r.se2 for r in runs])),
                     inv_n=sum(1.0 / len(v) for v in by.values()) / s_count,
                     sample2=float(np.median([r.sd * r.sd for r in runs])))


@dataclass(frozen=True)
class Prior:
    """The typical session-mean variance of a class of cases (``s2``) and its weight in degrees of
    freedom (``df``; 0: no moderation, inf: every case has the same variance)."""

    s2: float
    df: float
    #: for a baseline of one session: the run-to-run spread (variance) and its degrees of freedom taken from
    #: another file of the same hardware (``Gate.use_spreads_of``) instead of FALLBACK_RUN_SPREAD
    run_s2: Optional[float] = None
    run_df: float = 0.0


NO_PRIOR = Prior(0.0, 0.0)


def prior_class(op_is_collective: bool, size_bytes: int) -> str:
    """The class a case borrows its prior from: copies or collectives, up to 1 MiB or above."""
    return f"{'collective' if op_is_collective else 'copy'} {'<=1MiB' if size_bytes <= (1 << 20) else '>1MiB'}"


def fit_prior(models: Iterable[CaseModel]) -> Prior:
    """Empirical-Bayes prior of the session-mean variance over cases (Smyth 2004, moment estimator on
    log variances).  Fewer than 3 cases with a measured variance: no prior (df 0)."""
    return prior_of_variances((m.between2, m.sessions - 1) for m in models if m.sessions >= 2)


def fit_op_priors(fitted: Mapping[str, tuple[CaseModel, str]],
                  op_of: Mapping[str, str]) -> dict[tuple[str, str], Prior]:
    """Per (prior class, op), :func:`fit_prior` over the cases of ``fitted`` (case key -> its model and prior
    class; ``op_of``: case key -> its op): the prior a one-session case takes from the baseline's own cases of its
    class and op in several sessions, never another op's."""
    groups: dict[tuple[str, str], list[CaseModel]] = {}
    for key, (m, c) in fitted.items():
        groups.setdefault((c, op_of.get(key, "")), []).append(m)
    return {g: fit_prior(ms) for g, ms in groups.items()}


def prior_of_variances(estimates: Iterable[tuple[float, float]]) -> Prior:
    """The empirical-Bayes prior (Smyth 2004) of variances estimated with the given degrees of freedom,
    ``(variance, df)`` pairs; those not above 0 are left out.  Fewer than 3: no prior (df 0)."""
    pts = [(float(v), float(d)) for v, d in estimates if v > 0 and d > 0]
    if len(pts) < 3:
        return NO_PRIOR
    s2 = np.array([p[0] for p in pts])
    d = np.array([p[1] for p in pts], dtype=float)
    e = np.log(s2) - _special.digamma(d / 2.0) + np.log(d / 2.0)
    e_mean = float(e.mean())
    excess = float(((e - e_mean) ** 2).sum() / (len(e) - 1) - _special.polygamma(1, d / 2.0).mean())
    if excess <= float(_special.polygamma(1, 1e8)):  # no spread beyond chance: one common variance
        return Prior(math.exp(e_mean), math.inf)
    half = _opt.brentq(lambda h: float(_special.polygamma(1, h)) - excess, 1e-8, 1e8)
    return Prior(math.exp(e_mean + float(_special.digamma(half)) - math.log(half)), 2.0 * half)


@dataclass(frozen=True)
class Floors:
    """Spreads the runs themselves show (DECISION_RULE step 3a), each a variance of log bandwidth: never is a
    spread assumed tighter than these.

    ``runs_now``: the variance of today's fresh runs of the case about their mean (its first run, folds and
    re-measures), a floor of the prediction variance of their mean times k where it lies beyond what the model
    allows a run (a glitch: :func:`_runs_now_limit`), whatever the baseline says;
    ``samples``: the spread of one run's samples (the baseline runs' median, or today's largest), a floor of an
    assumed run-to-run spread; ``cases``: how far the cases of the case's class judged so far in this run
    scatter about their median log ratio (a robust variance), a floor of the prediction variance where the
    session or run spread is assumed."""

    runs_now: float = 0.0
    samples: float = 0.0
    cases: float = 0.0


NO_FLOORS = Floors()


def _runs_now_limit(k: int) -> float:
    """How many times a run's variance the variance of k runs may be before they count as disagreeing: the 99.9th
    percentile of chi-square over its degrees of freedom (10.8 for two runs), so that runs that differ as the
    model says runs do never raise the spread (a floor of one degree of freedom would cost power every second
    time), while a glitch does (decision step 3a)."""
    return float(_sstats.chi2.ppf(0.999, k - 1)) / (k - 1)


@dataclass(frozen=True)
class Spread:
    """The prediction spread of a new session's mean of ``k`` runs (DECISION_RULE step 3): its sd and degrees
    of freedom, the session and run parts, which of them are assumed (``assumed``: "", "session", "run" or
    "session and run") and which observed floor raised it (``floor``: "" or a :class:`Floors` field)."""

    sd: float
    df: float
    session_sd: float
    run_sd: float
    assumed: str = ""
    floor: str = ""
    #: the variance of today's mean that its runs show beyond the model's: their disagreement where it is a glitch
    #: (Floors.runs_now / k), or their samples' spread beyond the baseline runs' (se2_now - u^2) / k, the larger;
    #: a floor of the case's residual and band at the levels, which read the baseline's spreads only
    runs_now: float = 0.0


def prediction(model: CaseModel, prior: Prior, k: int, se2_now: float, floors: Floors = NO_FLOORS) -> Spread:
    """V(k) and its degrees of freedom (Satterthwaite) for the mean of ``k`` independent new runs whose own
    mean variance is ``se2_now``; never below the spreads the runs show (``floors``, step 3a)."""
    if k < 1:
        raise ValueError(f"prediction: k must be >= 1, got {k}")
    s_n, u2, inv_n = model.sessions, model.mean_se2, model.inv_n
    se2_now = max(se2_now, 0.0)
    known_w = math.isfinite(model.within2)
    terms: list[tuple[float, float, float]] = []  # (coefficient, estimated variance, its degrees of freedom)
    assumed: list[str] = []
    floor = ""
    if s_n >= 2:
        b2 = model.between2
        if prior.df > 0:
            mod = prior.s2 if math.isinf(prior.df) else (prior.df * prior.s2 + (s_n - 1) * b2) / (prior.df + s_n - 1)
        else:
            mod = b2
        used = max(b2, mod)  # never below the observed spread
        df_b = s_n - 1 + prior.df
        if known_w:
            w2 = model.within2
            sess2 = used - w2 * inv_n
            if sess2 > 0:
                terms = [(1.0 + 1.0 / s_n, used, df_b), (1.0 / k - inv_n, w2, model.within_df)]
            else:
                sess2 = 0.0
                terms = [(1.0 / s_n, used, df_b), (1.0 / k, w2, model.within_df)]
            run_x2 = max(w2 - u2, 0.0)
            v = sess2 + (run_x2 + se2_now) / k + used / s_n
        else:  # one run per session: the session-mean spread holds the runs' spread too
            sess2, run_x2 = used, 0.0
            terms = [(1.0 + 1.0 / s_n, used, df_b)]
            v = used * (1.0 + 1.0 / s_n) + max(se2_now - u2, 0.0) / k
    else:  # one session: its spread from a prior (the class's, another file's, the corpus'), else assumed
        if prior.df > 0:
            sess2, df_s = prior.s2, prior.df
        else:
            sess2, df_s = FALLBACK_SESSION_SPREAD**2, FALLBACK_DF
            assumed.append("session")
        if known_w and prior.run_s2 is not None and prior.run_df > 0:
            # the session's runs, moderated towards the prior's run spread, never below what they show
            d0 = prior.run_df if math.isfinite(prior.run_df) else DF_NORMAL
            mod = (d0 * (prior.run_s2 + u2) + model.within_df * model.within2) / (d0 + model.within_df)
            w2, df_w = max(model.within2, mod), float(model.within_df) + d0
        elif known_w:
            w2, df_w = model.within2, float(model.within_df)
        elif prior.run_s2 is not None:
            w2, df_w = prior.run_s2 + u2, max(prior.run_df, 1.0)
        else:
            w2, df_w = FALLBACK_RUN_SPREAD**2 + u2, FALLBACK_DF
            assumed.append("run")
            if floors.samples > w2 - u2:  # a run's median is not assumed steadier than its samples
                w2, floor = floors.samples + u2, "samples"
        run_x2 = max(w2 - u2, 0.0)
        # the new session's offset and the baseline session's, the runs' spread now and in the baseline's mean
        v = 2.0 * sess2 + (run_x2 + se2_now) / k + w2 * inv_n
        # the degrees of freedom: where the run spread is assumed or borrowed, only that part is uncertain; the
        # baseline runs' own error u^2 is measured from their samples (counting it as 4 df made a run with
        # widely spread samples, u^2 >> the assumed spread, a t with 1 df: quantile 318, nothing caught)
        terms = [(2.0, sess2, df_s), (1.0 / k + inv_n, w2 if known_w else run_x2, df_w)]
    v = max(v, MIN_SPREAD**2)
    denom = sum((c * x) ** 2 / d for c, x, d in terms if d > 0 and math.isfinite(d))
    df_v = v * v / denom if denom > 0 else DF_NORMAL  # the model's degrees of freedom: a floor adds none
    if assumed and floors.cases > v:
        v, floor = floors.cases, "cases"
    # today's runs disagree beyond what the model allows a run (their variance above its 99.9th percentile: a
    # glitch, or a state the baseline never saw): their mean is not predicted tighter than they show
    per_run = (sess2 if s_n >= 2 and not known_w else run_x2) + se2_now  # one run's variance in a session
    glitch = floors.runs_now > 0 and k > 1 and floors.runs_now > per_run * _runs_now_limit(k)
    if glitch and floors.runs_now / k > v:
        v, floor = floors.runs_now / k, "runs_now"
    return Spread(sd=math.sqrt(v), df=min(float(df_v), DF_NORMAL), session_sd=math.sqrt(sess2),
                  run_sd=math.sqrt(run_x2), assumed=" and ".join(assumed), floor=floor,
                  runs_now=max(floors.runs_now / k if glitch else 0.0, max(se2_now - u2, 0.0) / k))


#: the fewest cases of a class judged so far whose scatter is a floor (Floors.cases)
MIN_SCATTER_CASES = 5


def class_scatter(log_ratios: Sequence[float]) -> float:
    """How far a run's cases of one class scatter about their median log ratio: the square of 1.4826 times
    their median absolute deviation (a robust variance, blind to a minority of cases that moved); 0 below
    MIN_SCATTER_CASES cases (``Floors.cases``)."""
    if len(log_ratios) < MIN_SCATTER_CASES:
        return 0.0
    x = np.asarray(log_ratios, dtype=float)
    return float((1.4826 * np.median(np.abs(x - np.median(x)))) ** 2)


@functools.lru_cache(maxsize=1 << 16)
def t_quantile(p: float, df: float) -> float:
    """Student t quantile (normal from DF_NORMAL degrees of freedom up, at least 1 degree of freedom); cached:
    a fleet's nodes (``gate.fleet``) ask for the same quantiles at every node."""
    return float(_sstats.norm.ppf(p)) if df >= DF_NORMAL else float(_sstats.t.ppf(p, max(df, 1.0)))


def bounded_exp(x: float) -> float:
    return math.exp(min(max(x, -700.0), 700.0))


def corrected_alpha(alpha: float, n_comparisons: int, looks: int = 1) -> float:
    """Per-case level: Bonferroni over ``n_comparisons`` gated cases and the ``looks`` at each that may
    decide a regression (one per re-measure), alpha / (m * looks)."""
    alpha = float(alpha)
    if not (0.0 < alpha < 1.0):  # also refuses nan
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    for name, v in (("n_comparisons", n_comparisons), ("looks", looks)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    return alpha / (int(n_comparisons) * int(looks))


def check_tolerance(tolerance: float) -> float:
    """The tolerance, in its range (``checks.tolerance``, which the options and markers check too)."""
    return checks.tolerance(checks.Origin.keyword("tolerance", tolerance))


def detectable_drop(model: CaseModel, prior: Prior, *, tolerance: float, level: float, k: int,
                    se2_now: Optional[float] = None, power: float = DETECTION_POWER,
                    floors: Floors = NO_FLOORS) -> float:
    """The smallest drop (a fraction: 0.08 = 8 %) that the bound at per-case level ``level`` (alpha / m) on
    the mean of ``k`` runs catches with probability ``power``."""
    sp = prediction(model, prior, k, model.mean_se2 if se2_now is None else se2_now, floors)
    q = t_quantile(1.0 - level, sp.df)
    return 1.0 - (1.0 - tolerance) * bounded_exp(-(q + float(_sstats.norm.ppf(power))) * sp.sd)


@dataclass(frozen=True)
class Comparison:
    """The verdict on one case against its baseline; see DECISION_RULE.  Numbers only: the words that explain
    it are :func:`pytest_gpucomm.gate.reasons.comparison_reason`'s.

    ``ratio`` and the bounds are current/baseline bandwidth (0.86 = 14 % slower); ``lower_bound``/
    ``upper_bound`` the bounds at 1 - alpha/m that decide (the interval the messages print, :attr:`bounds_text`),
    ``quantile`` the t quantile at 1 - alpha/m that gave them; ``ci_low``/``ci_high`` the two-sided 95 %
    prediction interval, kept as data (the JSON's ``ci95``) and never printed beside a verdict: it is much
    narrower than the bounds that decide, and a 95 % interval below the tolerance beside "ok" read as a
    contradiction.
    """

    status: Status  # OK | REGRESSION | IMPROVED | NOT_GATED
    ratio: float
    ci_low: float
    ci_high: float
    lower_bound: float
    upper_bound: float
    alpha: float  # per-case level after the Bonferroni correction
    quantile: float  # the t quantile at 1 - alpha, with the spread's degrees of freedom
    current_median_gbps: float
    baseline_median_gbps: float
    tolerance: float
    detectable_drop: float  # smallest drop caught with DETECTION_POWER, with every re-measure
    runs_now: int  # independent runs pooled (1 + fresh re-measures)
    spread: Spread
    baseline_runs: int
    baseline_sessions: int

    @property
    def failed(self) -> bool:
        return self.status is Status.REGRESSION

    @property
    def gated(self) -> bool:
        return self.detectable_drop <= GATED_DROP_FACTOR * self.tolerance and not self.spread.assumed

    @property
    def beyond(self) -> bool:
        """Even the upper bound is below the tolerance limit: a regression, unless step 5a holds it back (one
        run of today with an assumed spread)."""
        return self.upper_bound < 1.0 - self.tolerance

    @property
    def bounds_text(self) -> str:
        """The interval that decides, which the messages print beside the ratio: ``bounds [0.80, 0.93] at level
        0.0005 a side``: the lower and upper bound, each at the per-case level alpha/m (the status is theirs
        against the tolerance: :func:`_status`)."""
        return f"bounds [{self.lower_bound:.3g}, {self.upper_bound:.3g}] at level {self.alpha:.2g} a side"


def _pooled_runs(now: Sequence[RunLocation], fresh: Optional[Sequence[bool]]) -> list[RunLocation]:
    """``now`` with each run that drew no new process state (``fresh[i]`` False for ``now[i + 1]``) merged
    into the run before it."""
    flags = [True] * (len(now) - 1) if fresh is None else [bool(f) for f in fresh]
    if len(flags) != len(now) - 1:
        raise ValueError(f"compare: {len(now)} runs need {len(now) - 1} fresh flags, got {len(flags)}")
    groups: list[list[RunLocation]] = [[now[0]]]
    for r, f in zip(now[1:], flags):
        if f:
            groups.append([r])
        else:
            groups[-1].append(r)
    return [_pooled(g) if len(g) > 1 else g[0] for g in groups]


def _status(upper: float, lower: float, tolerance: float, spread: Spread, drop: float) -> Status:
    """DECISION_RULE step 4: the verdict of the bounds at the tolerance, and whether the case is gated."""
    if upper < 1.0 - tolerance:
        return Status.REGRESSION
    if lower > 1.0 + tolerance:
        return Status.IMPROVED
    if spread.assumed or drop > GATED_DROP_FACTOR * tolerance:
        return Status.NOT_GATED
    return Status.OK


def compare(now: Sequence[RunLocation], model: CaseModel, prior: Prior = NO_PRIOR, *,
            fresh: Optional[Sequence[bool]] = None, tolerance: float = DEFAULT_TOLERANCE,
            alpha: float = DEFAULT_ALPHA, n_comparisons: int = 1,
            max_runs: int = 1 + DEFAULT_MAX_REMEASURES, folds: int = 1, class_spread: float = 0.0) -> Comparison:
    """Judge this session's runs of a case (``now``: the first run, its folds and its re-measures) against
    the case's baseline model.  ``fresh[i]`` says whether run i + 1 (``now[i + 1]``) drew a new process
    state (default: all did); one that did not is merged into the run before it.  ``folds``: the runs
    measured before the first look (the first and the folds, DECISION_RULE step 5).  ``max_runs``: the runs
    the procedure may pool (folds + re-measures); each pooled look after the first may decide, so the level
    is alpha / (n_comparisons * (max_runs - folds)), or alpha / n_comparisons without re-measures.
    ``class_spread``: how far the run's cases of the case's class scatter (``Floors.cases``)."""
    tolerance = check_tolerance(tolerance)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 1:
        raise ValueError(f"folds must be a whole number >= 1, got {folds!r}")
    alpha_c = corrected_alpha(alpha, n_comparisons, max(1, max_runs - folds))
    if not now:
        raise ValueError("compare: no current run")
    runs = _pooled_runs(now, fresh)
    k = len(runs)
    loc = sum(r.loc for r in runs) / k
    se2_now = sum(r.se2 for r in runs) / k
    floors = Floors(runs_now=float(np.var([r.loc for r in runs], ddof=1)) if k > 1 else 0.0,
                    samples=max([model.sample2, *(r.sd * r.sd for r in runs)]), cases=max(float(class_spread), 0.0))
    sp = prediction(model, prior, k, se2_now, floors)
    q = t_quantile(1.0 - alpha_c, sp.df)
    z95 = t_quantile(0.975, sp.df)
    d = loc - model.center
    upper, lower = bounded_exp(d + q * sp.sd), bounded_exp(d - q * sp.sd)
    # the runs to come are not seen yet: the smallest drop caught takes today's spread as it stands
    drop = detectable_drop(model, prior, tolerance=tolerance, level=alpha_c, k=max(k, max_runs), se2_now=se2_now,
                           floors=floors)
    return Comparison(status=_status(upper, lower, tolerance, sp, drop), ratio=math.exp(d),
                      ci_low=bounded_exp(d - z95 * sp.sd), ci_high=bounded_exp(d + z95 * sp.sd), lower_bound=lower,
                      upper_bound=upper, alpha=alpha_c, quantile=q, current_median_gbps=math.exp(loc),
                      baseline_median_gbps=model.center_gbps, tolerance=tolerance, detectable_drop=drop, runs_now=k,
                      spread=sp, baseline_runs=model.runs, baseline_sessions=model.sessions)


@dataclass
class Judged:
    """The gate's procedure on one case (DECISION_RULE step 5): the comparison that decides and the runs
    it pooled."""

    comparison: Comparison
    runs: list[RunLocation] = field(default_factory=list)
    folds: int = 1  # the runs before the first look (the first and its folds)

    @property
    def remeasured(self) -> int:
        return len(self.runs) - self.folds


def judge(first: RunLocation, model: CaseModel, prior: Prior,
          measure_again: Optional[Callable[[], tuple[RunLocation, bool]]], *,
          tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA, n_comparisons: int = 1,
          max_remeasures: int = DEFAULT_MAX_REMEASURES, folds: Sequence[RunLocation] = (),
          class_spread: float = 0.0) -> Judged:
    """Compare ``first`` pooled with its ``folds`` (the case measured again in new process states before the
    verdict, each a run of its own: DECISION_RULE step 5); when the ratio is below 1 - tolerance (even if
    already a regression), and then while the pooled ratio is below 1 - tolerance and not yet a regression,
    measure again (``measure_again`` returns the run and whether it drew a new process state), at most
    ``max_remeasures`` times, and compare the pooled runs."""
    if max_remeasures < 0:
        raise ValueError(f"max_remeasures must be >= 0, got {max_remeasures}")
    k0 = 1 + len(folds)
    max_runs = k0 + (max_remeasures if measure_again is not None else 0)
    runs: list[RunLocation] = [first, *folds]
    fresh: list[bool] = [True] * len(folds)

    def look() -> Comparison:
        return compare(runs, model, prior, fresh=fresh, tolerance=tolerance, alpha=alpha,
                       n_comparisons=n_comparisons, folds=k0, max_runs=max_runs, class_spread=class_spread)

    c = look()
    # a flagged first look is always measured again (a one-off glitch must not fail alone); after that, only
    # while the pooled runs are still below the limit and not yet a regression
    while (measure_again is not None and len(fresh) - len(folds) < max_remeasures and c.ratio < 1.0 - c.tolerance
           and (len(fresh) == len(folds) or c.status is not Status.REGRESSION)):
        again, is_fresh = measure_again()
        runs.append(again)
        fresh.append(bool(is_fresh))
        c = look()
    if c.failed and c.spread.assumed and c.runs_now < 2:
        # nothing says how far a run of this case moves (its spread is assumed) and no second run of today
        # agrees: a first run alone is no evidence (step 5a)
        c = dataclasses.replace(c, status=Status.NOT_GATED)
    return Judged(c, runs, k0)
