"""The run judged as a whole, at three levels: the class offset, the op band, the case residual.

Pure statistics on the cases' log deviations from their baseline centres, like :mod:`.decision` (whose
models, priors and bounds this reuses); nothing here reads a file or knows pytest.  The rule is
:data:`LEVELS_RULE`, also part of ``decision.DECISION_RULE``'s text in the README.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from ..analysis.curves import form_of_id, sweep_id
from ..units import format_size, plural
from ..vocab import DEFAULT_ALPHA, DEFAULT_TOLERANCE
from .decision import (CASE_ALPHA_SHARE, DECISION_RULE, DETECTION_POWER, DF_NORMAL, FALLBACK_DF, FALLBACK_RUN_SPREAD,
                       FALLBACK_SESSION_SPREAD, GATED_DROP_FACTOR, MIN_SPREAD, NO_PRIOR, CaseModel, Prior,
                       RunLocation, bounded_exp, check_tolerance, fit_case, fit_prior, prediction, prior_of_variances,
                       t_quantile)

__all__ = ["LEVELS_RULE", "LEVEL_SHARES", "SMALL_CLASS_WEIGHT", "FOLDED_CLASSES", "MIN_STEADY_RUNS", "STEADY_NAME",
           "Common", "weighted_median", "run_offsets", "steadiness",
           "common_spread", "class_model", "common_of", "class_priors", "borrowed_class_priors",
           "Member", "member", "case_class", "residuals", "Residual",
           "fit_residual", "residual_spread", "within_share", "LevelFit", "fit_levels", "LevelVerdict", "RunLevels",
           "own_verdict", "judge_run"]

LEVELS_RULE = DECISION_RULE[DECISION_RULE.index("6. The levels"):DECISION_RULE.index("A published case")]

#: the share of alpha of each level: the cases' own verdicts (at their tests), the class offsets, the op
#: bands and the cases' residuals (both at the end of the session)
LEVEL_SHARES = {"case": CASE_ALPHA_SHARE, "class": 0.4, "band": 0.25, "residual": 0.25}
#: the weight of a small class (up to 1 MiB) in the class offsets' share of alpha, against 1 for a large one: a
#: large class's offset moves by 0.3 % between runs and catches a 7 % drop at any level, a small one's by 0.6-1.8 %
#: (2 x H200), where every part of alpha counts (Bonferroni with weights: the shares still add up to the level's)
SMALL_CLASS_WEIGHT = 3.0
#: sizes up to this are the small class (and band)
SMALL_BYTES = 1 << 20
#: the fewest cases of a band that is judged as one
MIN_BAND_CASES = 3
#: the fewest cases of a class whose offset is judged
MIN_CLASS_CASES = 5
#: the fewest baseline runs of every case of a small class from which its steady offset is weighted
MIN_STEADY_RUNS = 3
#: how a small class's second verdict, on its steady offset, is named after the class
STEADY_NAME = "weighted by steadiness"
#: the fewest cases outside a band from which its class's offset is estimated (fewer: no offset removed)
MIN_REFERENCE_CASES = 3

#: the classes whose cases are measured in several process groups (``--gpucomm-folds``) and judged on them
#: pooled: where the 2 x H200 runs show the residuals' run-to-run spread within a session (97 % of it for
#: collectives up to 1 MiB; host<->device copies up to 1 MiB: 17 %, their spread lies between machines and
#: boots, which folds do not reach; the other classes are gated without them)
FOLDED_CLASSES = ("collectives <= 1 MiB",)

_KIND_LABEL = {"collective": "collectives", "peer": "copies between GPUs", "host": "host<->device copies"}


def _small(members: Mapping[str, "Member"], keys: Iterable[str]) -> bool:
    """Whether the cases ``keys`` are all of the small size (up to SMALL_BYTES): a small class."""
    return all(members[k].size_bytes <= SMALL_BYTES for k in keys)


def case_class(kind: str, size_bytes: int) -> str:
    """The class of a case: its kind ("collective", "peer" or "host") and whether it is up to 1 MiB."""
    return f"{_KIND_LABEL.get(kind, kind)} {'<=' if size_bytes <= SMALL_BYTES else '>'} 1 MiB"


# ------------------------------------------------------------------------------------------------
# the common offset of a run (the class offsets of step 6)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Common:
    """How far a group's common offset moves between the baseline's runs (DECISION_RULE step 6): the
    prediction spread of a new run's offset, from the runs' offsets grouped by session like a case's."""

    sd: float
    df: float
    runs: int
    sessions: int
    assumed: str = ""  # which part of it is assumed ("session", "run", ...: ``decision.Spread.assumed``)


def weighted_median(values: Sequence[float], weights: Optional[Sequence[float]] = None) -> float:
    """The median of ``values``, each counted with its weight (all 1 without ``weights``: ``np.median``): the
    value where the weights below and above it are each at most half, the mean of the two where they are
    exactly half."""
    if weights is None:
        return float(np.median(values))
    x = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order]
    below = np.cumsum(w) / w.sum()
    i = int(np.searchsorted(below, 0.5 - 1e-12))
    if abs(below[i] - 0.5) <= 1e-12 and i + 1 < len(x):
        return float((x[i] + x[i + 1]) / 2.0)
    return float(x[i])


def run_offsets(case_runs: Sequence[dict[str, float]], centers: Sequence[float],
                weights: Optional[Sequence[float]] = None) -> dict[str, float]:
    """Per baseline run id, the common offset of a group: the median over the group's cases of the run's
    location less the case's centre (with ``weights``, one per case: their weighted median, the steady offset).
    ``case_runs``: per case, run id -> location."""
    devs: dict[str, list[float]] = {}
    ws: dict[str, list[float]] = {}
    for i, (runs, c) in enumerate(zip(case_runs, centers)):
        for rid, loc in runs.items():
            devs.setdefault(rid, []).append(loc - c)
            ws.setdefault(rid, []).append(1.0 if weights is None else float(weights[i]))
    return {rid: weighted_median(v, None if weights is None else ws[rid]) for rid, v in devs.items()}


def steadiness(case_runs: Sequence[dict[str, float]], centers: Sequence[float]) -> Optional[list[float]]:
    """Per case of a class, its weight in the class's steady offset: the inverse of the variance of its runs'
    deviations from its centre over the baseline's runs (sessions and runs together: how far a case moves
    between the baseline's boots and processes), never above 1 / MIN_SPREAD^2; None where a case has fewer than
    MIN_STEADY_RUNS runs (its variance is not measured: no steady offset)."""
    out = []
    for runs, c in zip(case_runs, centers):
        if len(runs) < MIN_STEADY_RUNS:
            return None
        d = np.asarray(list(runs.values()), dtype=float) - c
        out.append(1.0 / max(float(np.var(d, ddof=1)), MIN_SPREAD ** 2))
    return out


def class_model(case_runs: Sequence[dict[str, float]], centers: Sequence[float],
                session_of: Mapping[str, Optional[str]], weights: Optional[Sequence[float]] = None
                ) -> Optional[CaseModel]:
    """The baseline runs' common offsets (``run_offsets``, with ``weights``: the steady offsets) of a group
    fitted as one case (``fit_case``, by session); None without a run."""
    offsets = run_offsets(case_runs, centers, weights)
    if not offsets:
        return None
    ids = sorted(offsets)
    return fit_case([RunLocation(offsets[r], 0.0, 1) for r in ids], [session_of.get(r) for r in ids])


def common_of(model: CaseModel, prior: Prior = NO_PRIOR, k: int = 1) -> Common:
    """The prediction spread of the mean offset of ``k`` new runs (a class's folds) of one new session, from
    its :func:`class_model` and the prior of its size (``fit_levels``), as a case's (``prediction``)."""
    sp = prediction(model, prior, max(int(k), 1), 0.0)
    return Common(sd=sp.sd, df=sp.df, runs=model.runs, sessions=model.sessions, assumed=sp.assumed)


def class_priors(models: Mapping[str, CaseModel], small: Mapping[str, bool]) -> dict[str, Prior]:
    """Per class, the prior of its offset's session spread: the Smyth prior (``decision.fit_prior``) fitted to
    the offsets of the classes of its size (``small``: up to 1 MiB or not) that have runs in two sessions or
    more, the class's own included; no prior (df 0) where fewer than 3 classes of its size have.  A class's
    offset is then judged on the degrees of freedom of its size's classes together, not on its own few
    sessions, and never on a spread below what its own runs show (``decision.prediction``, step 3)."""
    fitted = {flag: fit_prior(m for c, m in models.items() if small.get(c, False) is flag) for flag in (True, False)}
    return {c: fitted[small.get(c, False)] for c in models}


def borrowed_class_priors(source: Mapping[str, CaseModel]) -> dict[str, Prior]:
    """Per class, the prior a baseline of one session borrows for its class offset from another file of the
    same hardware (``source``: that file's :func:`class_model` per class, over the cases measured now): its
    session part (the variance of its session means less the runs' share) on its sessions' degrees of freedom,
    and its run part; classes of one session in ``source`` too give none."""
    out = {}
    for c, m in source.items():
        if m.sessions >= 2:
            sp = prediction(m, NO_PRIOR, 1, 0.0)
            out[c] = Prior(max(sp.session_sd ** 2, MIN_SPREAD ** 2), float(m.sessions - 1), run_s2=sp.run_sd ** 2,
                           run_df=float(max(m.within_df, 1)))
    return out


def common_spread(case_runs: Sequence[dict[str, float]], centers: Sequence[float],
                  session_of: dict[str, Optional[str]]) -> Optional[Common]:
    """The baseline runs' common offsets (``run_offsets``) fitted as one case (``fit_case`` and
    ``prediction`` for one new run).  None without a run."""
    model = class_model(case_runs, centers, session_of)
    return None if model is None else common_of(model)


@dataclass(frozen=True)
class Member:
    """Where a case sits: its class, its band (key and readable name without the sizes) and its size."""

    key: str
    klass: str
    band: str
    band_name: str
    size_bytes: int
    op: str = ""


def member(key: str, *, test_id: str, op: str, kind: str, size_bytes: int, dtype: Optional[str], world_size: int,
           devices: Sequence[str], layout: str = "") -> Member:
    """The :class:`Member` of the case ``key``; ``kind`` is "collective", "peer" or "host"."""
    klass = case_class(kind, size_bytes)
    small = size_bytes <= SMALL_BYTES
    sweep = sweep_id(test_id, size_bytes)
    band = "|".join([sweep, op, dtype or "-", f"ws{world_size}", ",".join(map(str, devices)), layout,
                     "small" if small else "large"])
    form = form_of_id(test_id)
    where = plural(world_size, "rank") if kind == "collective" else "->".join(map(str, devices))
    name = ", ".join(x for x in (f"{op} {form}".strip(), dtype if kind == "collective" else "", where,
                                 layout and f"layout {layout}") if x)
    return Member(key, klass, band, name, int(size_bytes), op)


def residuals(dev: Mapping[str, float], members: Mapping[str, Member], weights: Optional[Mapping[str, float]] = None
              ) -> tuple[dict[str, float], dict[str, tuple[float, int]], dict[str, tuple[float, int]]]:
    """For the cases of one run (``dev``: case key -> log deviation from its centre; keys without a member
    are left out): each case's residual, each band's (mean residual, cases) and each class's (offset,
    cases), as LEVELS_RULE says."""
    by_class: dict[str, list[str]] = {}
    for k in dev:
        if k in members:
            by_class.setdefault(members[k].klass, []).append(k)
    res: dict[str, float] = {}
    bands: dict[str, tuple[float, int]] = {}
    offsets: dict[str, tuple[float, int]] = {}
    for klass, keys in by_class.items():
        offsets[klass] = (float(np.median([dev[k] for k in keys])), len(keys))
        by_band: dict[str, list[str]] = {}
        for k in keys:
            by_band.setdefault(members[k].band, []).append(k)
        for b, bk in by_band.items():
            others = [dev[k] for k in keys if members[k].band != b]
            off = float(np.median(others)) if len(others) >= MIN_REFERENCE_CASES else 0.0
            for k in bk:
                res[k] = dev[k] - off
            w = [weights.get(k, 0.0) if weights else 1.0 for k in bk]
            if not sum(w) > 0:
                w = [1.0] * len(bk)
            bands[b] = (float(np.average([res[k] for k in bk], weights=w)), len(bk))
    return res, bands, offsets


@dataclass(frozen=True)
class Residual:
    """What the baseline's runs say of one band's or case's residual: its centre (the mean of the session
    means), its spread over the runs (about the centre, every run one draw) with its degrees of freedom, the
    runs and sessions it comes from, and the sums of squares within sessions (about each session's mean)
    and in all (about the mean of the runs), from which the class's within-session share is pooled."""

    center: float
    s2: float
    df: float
    runs: int
    sessions: int
    ss_within: float = 0.0
    ss_total: float = 0.0


def fit_residual(values: Sequence[float], sessions: Sequence[Optional[str]]) -> Residual:
    """A :class:`Residual` from the baseline runs' values and the session of each (None: its own)."""
    labels = [s if s is not None else f"\0run{i}" for i, s in enumerate(sessions)]
    by: dict[str, list[float]] = {}
    for x, s in zip(values, labels):
        by.setdefault(s, []).append(float(x))
    center = float(np.mean([np.mean(v) for v in by.values()]))
    n = len(values)
    s2 = float(np.var(values, ddof=1)) if n >= 2 else math.nan
    ss_within = float(sum(np.sum((np.asarray(v) - np.mean(v)) ** 2) for v in by.values()))
    ss_total = float(np.sum((np.asarray(values, dtype=float) - np.mean(values)) ** 2)) if n else 0.0
    return Residual(center, s2, float(n - 1), n, len(by), ss_within, ss_total)


def within_share(fitted: Iterable[Residual]) -> float:
    """The share of the residuals' run-to-run variance that lies within sessions, pooled over ``fitted``
    (a class's cases or bands): the within-session sum of squares over its degrees of freedom, against the
    runs' variance, at most 1.  This is the part that pooling k runs of one session (a case's folds) divides
    by k; the rest is drawn once per session.  0 where no session has two runs."""
    fitted = list(fitted)
    df_w = sum(r.runs - r.sessions for r in fitted)
    df_t = sum(r.runs - 1 for r in fitted)
    ss_w = sum(r.ss_within for r in fitted)
    ss_t = sum(r.ss_total for r in fitted)
    if df_w <= 0 or df_t <= 0 or not ss_t > 0:
        return 0.0
    return min(1.0, (ss_w / df_w) / (ss_t / df_t))


def residual_spread(r: Residual, prior: Prior, k: int = 1, within: float = 0.0) -> tuple[float, float]:
    """The sd and degrees of freedom of a new run's residual about the centre: the runs' variance shrunk
    towards the class's prior (Smyth 2004: (d0 s0^2 + d s^2) / (d0 + d), both ways), plus the centre's own
    error (that variance over the sessions).  A residual of ``k`` runs pooled (a case's folds) has the
    ``within`` share of that variance (:func:`within_share`) divided by k."""
    if math.isinf(prior.df):
        s2, df = prior.s2, DF_NORMAL
    elif prior.df > 0 and r.df > 0:
        s2, df = (prior.df * prior.s2 + r.df * r.s2) / (prior.df + r.df), prior.df + r.df
    elif r.df > 0:
        s2, df = r.s2, r.df
    else:
        s2, df = max(prior.s2, MIN_SPREAD ** 2), max(prior.df, 1.0)
    f = min(max(float(within), 0.0), 1.0) if k > 1 else 0.0
    v = max(s2 * ((1.0 - f + f / k) + 1.0 / max(r.sessions, 1)), MIN_SPREAD ** 2)
    return math.sqrt(v), min(df, DF_NORMAL)


@dataclass
class LevelFit:
    """The baseline's residuals fitted for a run of the cases ``members`` (the cases measured now: the
    residuals of the baseline's runs are taken over the same cases, so they are comparable)."""

    members: dict[str, Member]
    bands: dict[str, tuple[Residual, Prior]]
    cases: dict[str, tuple[Residual, Prior]]
    weights: dict[str, float] = field(default_factory=dict)
    within: dict[str, float] = field(default_factory=dict)  # per class: the residuals' within-session share
    #: per (class, op), where the baseline is of one session: the residuals' part drawn once per session,
    #: (variance, degrees of freedom), from the corpus prior (gate.prior), for the ops it was fitted on; an op
    #: missing here has it assumed
    sessions: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    #: per class, its offset's model over the baseline's runs (:func:`class_model`) and its prior (the classes of
    #: its size together, :func:`class_priors`; a baseline of one session: borrowed, :func:`borrowed_class_priors`)
    class_models: dict[str, tuple[CaseModel, Prior]] = field(default_factory=dict)
    #: per small class whose cases all have MIN_STEADY_RUNS baseline runs: its cases' weights (:func:`steadiness`),
    #: its steady offset's model over the baseline's runs and its prior (the small classes' steady offsets together)
    steady: dict[str, tuple[dict[str, float], CaseModel, Prior]] = field(default_factory=dict)

    @property
    def classes(self) -> dict[str, Common]:
        """Per class, the spread of a new run's offset (one run, no folds) from :attr:`class_models`."""
        return {c: common_of(m, p) for c, (m, p) in self.class_models.items()}


def fit_levels(runs: Mapping[str, Mapping[str, float]], centers: Mapping[str, float],
               members: Mapping[str, Member], session_of: Mapping[str, Optional[str]],
               sessions: Optional[Mapping[tuple[str, str], tuple[float, float]]] = None,
               borrowed: Optional[Mapping[str, Prior]] = None) -> LevelFit:
    """The level models from the baseline's runs: ``runs``: case key -> run id -> location, ``centers``:
    case key -> its centre (``decision.fit_case``), over the cases of ``members`` only; ``sessions``: per
    (class, op) the residuals' session part for a baseline of one session (``LevelFit.sessions``); ``borrowed``: per
    class the prior of its offset where the baseline is of one session (:func:`borrowed_class_priors`)."""
    keys = [k for k in members if k in runs and k in centers]
    members = {k: members[k] for k in keys}
    per_run: dict[str, dict[str, float]] = {}
    for k in keys:
        for rid, loc in runs[k].items():
            per_run.setdefault(rid, {})[k] = loc - centers[k]
    case_res: dict[str, dict[str, float]] = {}
    for rid, dev in per_run.items():
        for k, r in residuals(dev, members)[0].items():
            case_res.setdefault(k, {})[rid] = r

    def models(series: Mapping[str, Mapping[str, float]], klass_of: Mapping[str, str]
               ) -> dict[str, tuple[Residual, Prior]]:
        fitted = {}
        for name, by_run in series.items():
            ids = sorted(by_run)
            fitted[name] = fit_residual([by_run[r] for r in ids], [session_of.get(r) for r in ids])
        priors = {c: prior_of_variances((m.s2, m.df) for n, m in fitted.items() if klass_of[n] == c and m.df > 0)
                  for c in set(klass_of.values())}
        return {n: (m, priors.get(klass_of[n], NO_PRIOR)) for n, m in fitted.items()}

    cases = models(case_res, {k: members[k].klass for k in keys})
    # a band's mean weighs each case by its inverse residual variance (a precise case counts for more)
    weights = {k: 1.0 / residual_spread(*cases[k])[0] ** 2 for k in cases}
    band_res: dict[str, dict[str, float]] = {}
    for rid, dev in per_run.items():
        for b, (r, n) in residuals(dev, members, weights)[1].items():
            if n >= MIN_BAND_CASES:
                band_res.setdefault(b, {})[rid] = r
    band_class = {members[k].band: members[k].klass for k in keys}
    offset_models: dict[str, CaseModel] = {}
    small: dict[str, bool] = {}
    for c in sorted({m.klass for m in members.values()}):
        ck = [k for k in keys if members[k].klass == c]
        small[c] = _small(members, ck)
        m = class_model([dict(runs[k]) for k in ck], [centers[k] for k in ck], session_of)
        if m is not None:
            offset_models[c] = m
    priors = class_priors(offset_models, small)
    class_fits = {c: (m, (borrowed or {}).get(c, priors[c]) if m.sessions < 2 else priors[c])
                  for c, m in offset_models.items()}
    steady_w: dict[str, dict[str, float]] = {}
    steady_models: dict[str, CaseModel] = {}
    for c in sorted(c for c in offset_models if small[c]):
        ck = [k for k in keys if members[k].klass == c]
        w = steadiness([dict(runs[k]) for k in ck], [centers[k] for k in ck])
        m = None if w is None else class_model([dict(runs[k]) for k in ck], [centers[k] for k in ck], session_of, w)
        if w is not None and m is not None and m.sessions >= 2:
            steady_w[c], steady_models[c] = dict(zip(ck, w)), m
    steady_priors = class_priors(steady_models, {c: True for c in steady_models})
    steady = {c: (steady_w[c], m, steady_priors[c]) for c, m in steady_models.items()}
    within = {c: within_share(r for k, (r, _) in cases.items() if members[k].klass == c)
              for c in sorted({m.klass for m in members.values()})}
    return LevelFit(members=members,
                    bands=models(band_res, band_class), cases=cases, weights=weights, within=within,
                    sessions=dict(sessions or {}), class_models=class_fits, steady=steady)


@dataclass(frozen=True)
class LevelVerdict:
    """One class, band or case judged at its level."""

    level: str  # "class" | "band" | "case"
    name: str
    keys: tuple[str, ...]  # the cases it covers
    status: str  # "ok" | "regression" | "improved" | "not gated" | "not judged"
    ratio: float  # the class's offset, or the band's or case's bandwidth over its class's (1 = no change)
    upper_bound: float
    lower_bound: float
    alpha: float  # the per-test level after the correction
    quantile: float  # the Student t (or normal) quantile of the bound that decides
    df: float
    sd: float
    detectable_drop: float
    tolerance: float
    why: str = ""  # "not judged": why not
    assumed: bool = False  # its spread between sessions is assumed (a baseline of one session, no prior): not gated
    node: Optional[int] = None  # a job across nodes: the node whose cases it covers (None: no node's, one host)
    host: str = ""  # that node's host

    @property
    def where(self) -> str:
        """`` on node 1 (vm-b)`` for a level of one node's cases, "" for any other."""
        if self.node is None:
            return ""
        return f" on node {self.node}" + (f" ({self.host})" if self.host else "")

    @property
    def failed(self) -> bool:
        return self.status == "regression"

    @property
    def gated(self) -> bool:
        return (self.status != "not judged" and not self.assumed
                and self.detectable_drop <= GATED_DROP_FACTOR * self.tolerance)

    @property
    def level_name(self) -> str:
        return {"class": "class offset", "band": "op band", "case": "case residual"}[self.level]

    def headline(self) -> str:
        """What, where and how much: ``REGRESSION (op band) all_reduce in place, ..., 1 KiB-1 MiB: 9.8% slower
        than its class (6 sizes)``."""
        word = {"regression": "REGRESSION", "improved": "improved", "ok": "ok", "not gated": "not gated",
                "not judged": "not judged"}[self.status]
        if self.status == "not judged":
            return f"{word} ({self.level_name}) {self.name}{self.where}: {self.why}"
        change = 1.0 - self.ratio
        of = "" if self.level == "class" else " than its class"
        what = {"class": f"{len(self.keys)} cases", "band": f"{len(self.keys)} sizes", "case": "this case"}[self.level]
        how = "slower" if change > 0 else "faster"
        return f"{word} ({self.level_name}) {self.name}{self.where}: {abs(change):.1%} {how}{of} ({what})"

    def detail(self) -> str:
        """The bound that decided, its level and quantile, against the tolerance; what this level catches."""
        if self.status == "not judged":
            return self.why
        limit = 1.0 - self.tolerance
        if self.status == "improved":
            return (f"lower bound {self.lower_bound:.3g}x at level {self.alpha:.2g} (quantile {self.quantile:.2f}, "
                    f"{self.df:.0f} df) is above {1 + self.tolerance:.3g}x")
        bound = (f"upper bound {self.upper_bound:.3g}x at level {self.alpha:.2g} (quantile {self.quantile:.2f}, "
                 f"{self.df:.0f} df)")
        if self.status == "regression":
            return f"{bound} is below the {self.tolerance:.0%} tolerance limit {limit:.3g}x"
        if self.assumed:
            return (f"{bound}: not shown beyond the {self.tolerance:.0%} tolerance; not gated: with a baseline of one "
                    "session and no prior for its class, its spread between sessions is assumed")
        caught = f"catches drops of {self.detectable_drop:.1%} or more ({DETECTION_POWER:.0%} of the time)"
        return f"{bound}: not shown beyond the {self.tolerance:.0%} tolerance; " + (
            caught if self.status == "ok" else f"only {caught}: a drop of "
            f"{GATED_DROP_FACTOR * self.tolerance:.0%} could pass")

    def text(self) -> str:
        """One line: the headline and the detail (a level not judged: its headline, which holds why)."""
        if self.status == "not judged":
            return self.headline()
        return f"{self.headline()}; {self.detail()}"

    def to_dict(self) -> dict[str, object]:
        return {"level": self.level, "name": self.name, "cases": list(self.keys), "status": self.status,
                "ratio": self.ratio, "upper_bound": self.upper_bound, "lower_bound": self.lower_bound,
                "alpha": self.alpha, "quantile": self.quantile, "df": self.df, "sd": self.sd,
                "detectable_drop": self.detectable_drop, "tolerance": self.tolerance, "gated": self.gated,
                "assumed": self.assumed, "why": self.why, "text": self.text(),
                **({"node": self.node, "host": self.host} if self.node is not None else {})}


def own_verdict(status: str, message: str) -> str:
    """A case's own verdict under a level's that decided its row, labelled as the case's own: ``the case's
    own verdict (not gated): ...``, its message's further lines indented under it."""
    return f"the case's own verdict ({status}): " + message.replace("\n", "\n  ")


@dataclass
class RunLevels:
    """A run judged at the three levels."""

    classes: list[LevelVerdict]
    bands: list[LevelVerdict]
    cases: list[LevelVerdict]
    alpha: float
    shares: dict[str, float]

    @property
    def all(self) -> list[LevelVerdict]:
        return [*self.classes, *self.bands, *self.cases]

    def on_node(self, node: int, host: str) -> "RunLevels":
        """These levels as those of one node of a job (each verdict names it: ``LevelVerdict.where``)."""
        def named(vs: list[LevelVerdict]) -> list[LevelVerdict]:
            return [dataclasses.replace(v, node=int(node), host=host) for v in vs]

        return RunLevels(classes=named(self.classes), bands=named(self.bands), cases=named(self.cases),
                         alpha=self.alpha, shares=dict(self.shares))

    @property
    def failed(self) -> list[LevelVerdict]:
        return [v for v in self.all if v.failed]

    def failed_keys(self) -> dict[str, list[LevelVerdict]]:
        """Case key -> the failing verdicts that cover it."""
        out: dict[str, list[LevelVerdict]] = {}
        for v in self.failed:
            for k in v.keys:
                out.setdefault(k, []).append(v)
        return out

    def update(self, key: Optional[str], status: str, message: str) -> tuple[str, str, dict[str, object]]:
        """A case's verdict after the levels: (status, message, details to add).  A failing level that covers
        the case makes it "REGRESSION": the message then opens with the level's headline, says the level's
        own evidence below it (its bound against the limit), and gives the case's own verdict last, labelled
        as such (it may say the case alone catches no such drop: the level does).  A case whose own verdict
        is "not gated" but whose residual is gated becomes "ok", its message the residual's bound first."""
        failing = [v for v in self.failed if key in v.keys]
        mine = next((v for v in self.cases if v.keys == (key,)), None)
        extra: dict[str, object] = {}
        if mine is not None:
            extra["residual"] = mine.to_dict()
        if failing:
            extra["levels"] = [v.to_dict() for v in failing]
            if status != "REGRESSION":
                message = "\n".join(["; ".join(v.headline() for v in failing),
                                      *(f"  {v.level_name}: {v.detail()}" for v in failing),
                                      f"  {own_verdict(status, message)}"])
            return "REGRESSION", message, extra
        if status == "not gated" and mine is not None and mine.gated:
            return "ok", f"gated by its residual: {mine.detail()}; {own_verdict(status, message)}", extra
        return status, message, extra

    def gated_count(self, level: str) -> tuple[int, int]:
        """(gated, judged) at one level ("class", "band" or "case": the case residuals): the verdicts judged
        and, of them, those gated (:attr:`LevelVerdict.gated`).  The one count of a level that the summary,
        the JSON report (``to_dict``'s "gated") and the HTML page print."""
        judged = [v for v in {"class": self.classes, "band": self.bands, "case": self.cases}[level]
                  if v.status != "not judged"]
        return sum(v.gated for v in judged), len(judged)

    def summary(self) -> list[str]:
        """Per level: how many are judged and gated (:meth:`gated_count`), the median smallest drop caught, how
        many failed."""
        lines = []
        for level, vs, one, many in (("class", self.classes, "class offset", "class offsets"),
                                     ("band", self.bands, "op band", "op bands"),
                                     ("case", self.cases, "case residual", "case residuals")):
            judged = [v for v in vs if v.status != "not judged"]
            if not judged:
                continue
            gated, _ = self.gated_count(level)
            drops = sorted(v.detectable_drop for v in judged)
            failed = sum(v.failed for v in judged)
            lo, hi = min(v.alpha for v in judged), max(v.alpha for v in judged)
            at = f"level {lo:.2g} each" if f"{lo:.2g}" == f"{hi:.2g}" else f"levels {lo:.2g}-{hi:.2g}"
            lines.append(f"{len(judged)} {one if len(judged) == 1 else many}: {gated} gated, "
                         f"median smallest drop caught {drops[len(drops) // 2]:.1%}, {at}"
                         + (f", {failed} REGRESSION" if failed else ""))
        return lines

    def to_dict(self) -> dict[str, object]:
        gated = {level: dict(zip(("gated", "judged"), self.gated_count(level))) for level in ("class", "band", "case")}
        return {"alpha": self.alpha, "shares": dict(self.shares), "gated": gated,
                "classes": [v.to_dict() for v in self.classes], "bands": [v.to_dict() for v in self.bands],
                "cases": [v.to_dict() for v in self.cases]}


def _bounds(level: str, name: str, keys: Sequence[str], d: float, sd: float, df: float, *, tolerance: float,
            alpha: float, assumed: bool = False, runs: int = 2) -> LevelVerdict:
    """The verdict on a log change ``d`` whose null spread is ``sd`` (``df`` degrees of freedom) at ``alpha``;
    ``assumed``: part of that spread is assumed, not measured (never "ok": "not gated" at best; and with fewer
    than 2 fresh ``runs`` of today behind it, no regression either: decision step 5a)."""
    q = t_quantile(1.0 - alpha, df)
    upper, lower = bounded_exp(d + q * sd), bounded_exp(d - q * sd)
    drop = 1.0 - (1.0 - tolerance) * bounded_exp(-(q + t_quantile(DETECTION_POWER, DF_NORMAL)) * sd)
    status = "regression" if upper < 1.0 - tolerance else ("improved" if lower > 1.0 + tolerance else "ok")
    if status == "ok" and (assumed or drop > GATED_DROP_FACTOR * tolerance):
        status = "not gated"
    if status == "regression" and assumed and runs < 2:
        status = "not gated"
    return LevelVerdict(level, name, tuple(keys), status, math.exp(d), upper, lower, alpha, q, df, sd, drop,
                        tolerance, assumed=assumed)


def _with_sessions(sd: float, df: float, session: Optional[tuple[float, float]]) -> tuple[float, float, bool]:
    """A residual's spread fitted on the runs of one session, with the part drawn once per session added for
    the baseline's session and today's: from ``session`` (a prior's variance and degrees of freedom), else
    assumed (FALLBACK_SESSION_SPREAD, FALLBACK_DF); (sd, df by Satterthwaite, assumed)."""
    s2, sdf = session if session is not None else (FALLBACK_SESSION_SPREAD ** 2, FALLBACK_DF)
    v = sd * sd + 2.0 * s2
    denom = (sd * sd) ** 2 / max(df, 1.0) + ((2.0 * s2) ** 2 / sdf if math.isfinite(sdf) and sdf > 0 else 0.0)
    return math.sqrt(v), min(v * v / denom if denom > 0 else DF_NORMAL, DF_NORMAL), session is None


def _pseudo(level: str, name: str, keys: Sequence[str], x: float, fitted: Optional[tuple[Residual, Prior]], *,
            tolerance: float, alpha: float, k: int = 1, within: float = 0.0,
            session: Optional[tuple[float, float]] = None, floor: float = 0.0, runs: int = 2) -> LevelVerdict:
    """A band's or a case's residual (of ``k`` runs pooled) against the baseline runs' residuals (shrunk
    spread); where those runs are of one session, with the part drawn once per session from ``session`` (the
    corpus prior's), else assumed; never below ``floor`` (the variance today's runs of it show)."""
    if fitted is None or fitted[0].runs < 2:
        return LevelVerdict(level, name, tuple(keys), "not judged", math.exp(x), math.nan, math.nan, alpha,
                            math.nan, math.nan, math.nan, math.nan, tolerance,
                            why="fewer than 2 baseline runs have its residual")
    r, prior = fitted
    sd, df = residual_spread(r, prior, k, within)
    assumed = False
    if r.sessions == 1:
        sd, df, assumed = _with_sessions(sd, df, session)
    return _bounds(level, name, keys, x - r.center, max(sd, math.sqrt(max(floor, 0.0))), df, tolerance=tolerance,
                   alpha=alpha, assumed=assumed, runs=runs)


def _collapsed_reference(level: str, name: str, keys: Sequence[str], x: float, reference: float,
                         tolerance: float, alpha: float) -> Optional[LevelVerdict]:
    """A band's or case's residual is its change less its class's (``reference``: the log offset of the other
    cases of its class, against which it is taken).  Where that reference has itself dropped beyond the
    tolerance, the residual would call a case that is slower than its baseline "faster than its class": it
    is not used, and the verdict says why (the class offset and the cases' own verdicts judge such a run)."""
    ratio = math.exp(reference)
    if ratio >= 1.0 - tolerance:
        return None
    why = (f"its reference, the other cases of its class, is {1.0 - ratio:.1%} slower itself (beyond the "
           f"{tolerance:.0%} tolerance): a residual against it is not used")
    return LevelVerdict(level, name, tuple(keys), "not judged", math.exp(x), math.nan, math.nan, alpha, math.nan,
                        math.nan, math.nan, math.nan, tolerance, why=why)


def _class_verdict(name: str, keys: Sequence[str], offset: float, fitted: Optional[tuple[CaseModel, Prior]],
                   case_var: float, *, tolerance: float, alpha: float, k: int = 1, runs: int = 2,
                   own_var: Optional[float] = None) -> LevelVerdict:
    """A class's offset (of ``k`` runs pooled: its cases' folds) against the spread of the baseline runs'
    offsets, moderated by the prior of its size's classes (decision step 6, per class)."""
    if len(keys) < MIN_CLASS_CASES:
        return LevelVerdict("class", name, tuple(keys), "not judged", math.exp(offset), math.nan, math.nan, alpha,
                            math.nan, math.nan, math.nan, math.nan, tolerance,
                            why=f"{plural(len(keys), 'case')}, fewer than {MIN_CLASS_CASES}")
    if fitted is None:
        c2, df, assumed = FALLBACK_SESSION_SPREAD ** 2 + FALLBACK_RUN_SPREAD ** 2, FALLBACK_DF, True
    else:
        common = common_of(fitted[0], fitted[1], k)
        # one baseline session and nothing borrowed: how far the offset moves between sessions is assumed
        c2, df, assumed = common.sd ** 2, common.df, bool(common.assumed)
    sd = math.sqrt(c2 + ((math.pi / 2.0) * case_var / len(keys) if own_var is None else own_var))
    return _bounds("class", name, keys, offset, sd, df, tolerance=tolerance, alpha=alpha, assumed=assumed, runs=runs)


def _steady_verdict(klass: str, keys: Sequence[str], dev: Mapping[str, float],
                    fitted: tuple[dict[str, float], CaseModel, Prior], case_var: Mapping[str, float], *,
                    tolerance: float, alpha: float, k: int, runs: int) -> LevelVerdict:
    """A small class's steady offset (``LevelFit.steady``): its cases' log ratios ``dev``, weighted median by their
    steadiness, against the baseline runs' steady offsets; the cases' own spread adds (pi/2) sum(w^2 V) / sum(w)^2."""
    weights, model, prior = fitted
    w = np.array([weights[key] for key in keys])
    own = float((w * w * np.array([case_var.get(key, 0.0) for key in keys])).sum() / w.sum() ** 2)
    return _class_verdict(f"{klass}, {STEADY_NAME}", keys, weighted_median([dev[key] for key in keys], list(w)),
                          (model, prior), 0.0, tolerance=tolerance, alpha=alpha, k=k, runs=runs,
                          own_var=(math.pi / 2.0) * own)


def _size_range(sizes: Iterable[int]) -> str:
    s = sorted(sizes)
    return format_size(s[0]) if s[0] == s[-1] else f"{format_size(s[0])}-{format_size(s[-1])}"


def judge_run(dev: Mapping[str, float], fit: LevelFit, case_var: Mapping[str, float], *,
              tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
              shares: Optional[Mapping[str, float]] = None, folds: Optional[Mapping[str, int]] = None,
              floors: Optional[Mapping[str, float]] = None, runs: Optional[Mapping[str, int]] = None) -> RunLevels:
    """Judge a run at the three levels.  ``dev``: case key -> today's log deviation from the case's centre
    (its runs pooled, as its verdict did); ``case_var``: case key -> its verdict's prediction variance (the
    class offset's own-noise term, as in step 6); ``fit``: :func:`fit_levels` over today's cases; ``folds``:
    case key -> the runs it was measured in before its verdict (1 where missing; a band: its cases' fewest).
    The re-measures a case's verdict asked for are not counted there: they were made because the case looked
    slow.  ``floors``: case key -> the variance its runs of today show about their mean over their number
    (``decision.Floors.runs_now`` / k, where its runs disagree): a case's residual is not judged tighter, nor a
    band's (its cases' floors weighed as its mean).  ``runs``: case key -> its fresh runs of today (1 where
    missing): a level whose spread is assumed fails only on cases of 2 fresh runs or more (decision step 5a)."""
    tolerance = check_tolerance(tolerance)
    folds, floors = dict(folds or {}), dict(floors or {})
    fresh = {k: int((runs or {}).get(k, 1)) for k in dev}
    shares = dict(LEVEL_SHARES if shares is None else shares)
    dev = {k: v for k, v in dev.items() if k in fit.members}
    res, bands, offsets = residuals(dev, fit.members, fit.weights)
    by_class: dict[str, list[str]] = {}
    by_band: dict[str, list[str]] = {}
    for k in dev:
        by_class.setdefault(fit.members[k].klass, []).append(k)
        by_band.setdefault(fit.members[k].band, []).append(k)

    def weight(keys: Sequence[str]) -> float:
        return SMALL_CLASS_WEIGHT if _small(fit.members, keys) else 1.0

    # a small class with a steady offset is judged twice, by its median and by its steady offset, each at half
    # its weight (Bonferroni: the class's share of alpha unchanged)
    steady = {c: fit.steady[c] for c, ks in by_class.items()
              if c in fit.steady and len(ks) >= MIN_CLASS_CASES and all(k in fit.steady[c][0] for k in ks)}
    class_weights = sum(weight(ks) for ks in by_class.values() if len(ks) >= MIN_CLASS_CASES)

    def share(c: str, ks: Sequence[str]) -> float:
        return alpha * shares["class"] * weight(ks) / (2.0 if c in steady else 1.0) / max(1.0, class_weights)

    classes = [_class_verdict(c, ks, offsets[c][0], fit.class_models.get(c),
                              float(np.median([case_var.get(k, 0.0) for k in ks])), tolerance=tolerance,
                              alpha=share(c, ks), k=int(np.median([folds.get(k, 1) for k in ks])),
                              runs=int(np.median([fresh[k] for k in ks])))
               for c, ks in sorted(by_class.items())]
    classes += [_steady_verdict(c, by_class[c], dev, steady[c], case_var, tolerance=tolerance,
                                alpha=share(c, by_class[c]), k=int(np.median([folds.get(k, 1) for k in by_class[c]])),
                                runs=int(np.median([fresh[k] for k in by_class[c]])))
                for c in sorted(steady)]
    classes.sort(key=lambda v: v.name)
    judged_bands = {b: ks for b, ks in by_band.items() if len(ks) >= MIN_BAND_CASES and b in fit.bands}
    a_band = alpha * shares["band"] / max(1, len(judged_bands))
    band_vs = []
    for b, ks in by_band.items():
        if len(ks) < MIN_BAND_CASES:
            continue
        mem = fit.members[ks[0]]
        name = f"{mem.band_name}, {_size_range(fit.members[k].size_bytes for k in ks)}"
        w = [fit.weights.get(k, 1.0) for k in ks]
        band_floor = sum(wi * wi * floors.get(k, 0.0) for wi, k in zip(w, ks)) / sum(w) ** 2 if sum(w) > 0 else 0.0
        collapsed = _collapsed_reference("band", name, ks, bands[b][0], dev[ks[0]] - res[ks[0]], tolerance, a_band)
        if collapsed is not None:
            band_vs.append(collapsed)
            continue
        band_vs.append(_pseudo("band", name, ks, bands[b][0], fit.bands.get(b), tolerance=tolerance, alpha=a_band,
                               k=min(folds.get(k, 1) for k in ks), within=fit.within.get(mem.klass, 0.0),
                               session=fit.sessions.get((mem.klass, mem.op)), floor=band_floor,
                               runs=min(fresh[k] for k in ks)))
    judged_cases = [k for k in dev if k in fit.cases]
    a_case = alpha * shares["residual"] / max(1, len(judged_cases))
    cases = []
    for k in dev:
        mem = fit.members[k]
        name = f"{mem.band_name}, {format_size(mem.size_bytes)}"
        collapsed = _collapsed_reference("case", name, [k], res[k], dev[k] - res[k], tolerance, a_case)
        if collapsed is not None:
            cases.append(collapsed)
            continue
        cases.append(_pseudo("case", name, [k], res[k], fit.cases.get(k), tolerance=tolerance, alpha=a_case,
                             k=folds.get(k, 1), within=fit.within.get(mem.klass, 0.0),
                             session=fit.sessions.get((mem.klass, mem.op)), floor=floors.get(k, 0.0),
                             runs=fresh[k]))
    return RunLevels(classes=classes, bands=band_vs, cases=cases, alpha=alpha, shares=shares)
