"""How the gate's procedure behaves on a baseline file's own runs: false alarms, detection, sensitivity.

    python -m pytest_gpucomm.gate.calibration baselines/h200.json [--drops 3,5,7,10,20] [--sim-suites 40]
                                                                  [--table] [--json PATH]

A file of several machines (``gate.machines``: kind, model, GPU count and links; the shipped ``h200.json`` holds
2 x H200 and 1 x H200 runs) is calibrated one machine at a time, on that machine's runs only: the plugin judges
a run against the runs of its own machine's shape (``machines.MATCH_RULE``), so the file's other machines'
runs never widen its spreads.  Runs are grouped into *sessions* by the file's ``session`` labels (runs without
one: runs less than ``--session-gap-min`` minutes apart share a session).  Then, with the plugin's own procedure
(``decision.judge`` per case: the run-level prediction bound at its share of alpha, Bonferroni over the
judged cases, re-measures of a flagged case pooled; ``levels.judge_run`` for the run's class offsets, op
bands and case residuals):

* **leave-one-session-out (LOSO) A/A**: each run of a held-out session is judged against a baseline made
  of the other sessions' runs, with the other runs of its session, in order, as its re-measures (each drew
  a new process state, as the plugin's do).  A suite (one run) with a REGRESSION at any level is a false
  alarm; the count per level is given.
* **detection**: the held-out runs' bandwidth scaled down, (a) every case by each of ``--drops`` (3, 5,
  7, 10, 20 %): the suites that fail, and the share of gated cases called REGRESSION; (b) one op band at a
  time by 10 % (every band of every suite); (c) one case at a time by 10 % (every case, on every
  ``--per-case-every``-th suite): the share caught by a verdict or a level that covers it.
* **sensitivity**: per level, the share gated (a drop of twice the tolerance caught 99 % of the time) and
  the median smallest drop caught; the cases gated by neither their own verdict nor their residual.
* **fitted simulation**: per case, the session, run and within-run spreads of ``decision.fit_case`` on all
  the file's runs, and per group the spread of the common offset of a run; suites drawn from that model
  (the file's sessions and runs, and a new session of 1 + max re-measures runs) give the same rates over
  ``--sim-suites`` suites.
* ``--table``: the trade-off of alpha and the number of re-measures (LOSO and simulation), and a
  projection of the not-gated share for baselines of more sessions drawn from the fitted model.

Only the decision is exercised, not the measurement: what it says holds for runs like the file's.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, TypedDict

from ..vocab import DEFAULT_ALPHA, DEFAULT_FOLDS, DEFAULT_MAX_REMEASURES, DEFAULT_TOLERANCE, MAX_FOLDS
from .decision import (CASE_ALPHA_SHARE, CaseModel, Comparison, Prior, RunLocation, class_scatter, corrected_alpha,
                       detectable_drop, fit_case, fit_op_priors, fit_prior, judge, prediction, prior_class,
                       run_location)
from .levels import (FOLDED_CLASSES, LEVEL_SHARES, SMALL_BYTES, LevelFit, Member, RunLevels, fit_levels, judge_run,
                     member, run_offsets)
from .prior import CorpusPrior, corpus_of_files, say
from .reasons import decision_word
from .verdicts import case_group, case_kind

if TYPE_CHECKING:
    from .machines import Shape
    from .store import Baseline

#: a case of a suite to judge: its key, its model and prior, its runs (the first, then its re-measures), its group
Judged = tuple[str, CaseModel, Prior, list[RunLocation], str]

__all__ = ["Case", "Counts", "load_cases", "machines_of", "sessions_of", "loso", "fit_model", "simulate", "main"]

#: drops (fractions) at which detection is reported by default
DEFAULT_DROPS = (0.03, 0.05, 0.07, 0.10, 0.20)
#: the trade-off table's alphas and re-measure counts
TABLE_ALPHAS = (0.01, 0.05, 0.2)
TABLE_REMEASURES = (1, 2, 4)


@dataclass(frozen=True)
class Case:
    """One measured case of the file: its group ("copy" or "collective"), prior class, and each run's
    location (``decision.RunLocation``) by run id."""

    key: str
    group: str
    klass: str
    runs: dict[str, RunLocation]
    member: Optional[Member] = None  # its class and band for the levels


def machines_of(path: Path) -> list[tuple["Shape", int]]:
    """The machines (``machines.Shape``) of a baseline file's runs and how many runs each has, the most runs
    first; runs whose fingerprint has no kind are left out (they count for every machine, as in the plugin)."""
    from .store import load_baseline

    return _machines(load_baseline(path))


def load_cases(path: Path,
               machine: Optional["Shape"] = None) -> tuple[list[Case], dict[str, str], dict[str, Optional[str]]]:
    """The measured cases of a baseline file, the date of each run id and its session label (or None);
    ``machine`` (a ``machines.Shape``): that machine's runs only, and those with no known machine, as the
    plugin judges a run of that machine (``machines.MATCH_RULE``)."""
    from .store import load_baseline

    return _cases(load_baseline(path), path, machine)


def _machines(b: "Baseline") -> list[tuple["Shape", int]]:
    """:func:`machines_of` of a loaded baseline ``b``."""
    from .machines import Shape

    counts: dict["Shape", int] = {}
    for r in b.runs:
        shape = Shape.of(r.fingerprint)
        if shape is not None:
            counts[shape] = counts.get(shape, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].describe()))


def _cases(b: "Baseline", path: Path,
           machine: Optional["Shape"]) -> tuple[list[Case], dict[str, str], dict[str, Optional[str]]]:
    """:func:`load_cases` of a loaded baseline ``b`` (read from ``path``, which its messages name)."""
    from .machines import Shape

    runs = [r for r in b.runs if machine is None or Shape.of(r.fingerprint) in (machine, None)]
    kept = {r.run_id for r in runs}
    dates = {r.run_id: r.date for r in runs}
    labels = {r.run_id: r.session for r in runs}
    cases = []
    for key, e in b.cases.items():
        mine = [r for r in e.runs if r.run_id in kept]
        if not mine:
            continue  # floor-only, or not measured on this machine: nothing to calibrate on
        g = case_group(e.op)
        cases.append(Case(key, g, prior_class(g == "collective", e.size_bytes),
                          {r.run_id: run_location(r.samples_gbps, f"{path}: {key} run {r.run_id}") for r in mine},
                          member(key, test_id=e.test_id, op=e.op, kind=case_kind(e.op), size_bytes=e.size_bytes,
                                 dtype=e.dtype, world_size=e.world_size, devices=e.devices, layout=e.layout)))
    return cases, dates, labels


def sessions_of(dates: dict[str, str], gap_min: float,
                labels: Optional[dict[str, Optional[str]]] = None) -> dict[str, int]:
    """Session number of each run id, in time order: by the run's label where it has one, else runs less
    than ``gap_min`` minutes after the previous unlabelled one share its session."""
    labels = labels or {}
    order = sorted(dates, key=lambda r: _dt.datetime.fromisoformat(dates[r]))
    out: dict[str, int] = {}
    seen: dict[str, int] = {}
    last: Optional[_dt.datetime] = None
    n = -1
    gap_session = -1
    for run in order:
        label = labels.get(run)
        if label:
            if label not in seen:
                n += 1
                seen[label] = n
            out[run] = seen[label]
            continue
        t = _dt.datetime.fromisoformat(dates[run])
        if last is None or (t - last).total_seconds() > gap_min * 60:
            n += 1
            gap_session = n
        out[run] = gap_session
        last = t
    return out


def models_of(cases: list[Case], runs_of: dict[str, list[str]], session: dict[str, int],
            corpus: Optional[CorpusPrior] = None) -> dict[str, tuple[CaseModel, Prior]]:
    """Per case (with runs in ``runs_of``), its model and its class's prior, as the gate fits them; a case of
    one session takes the ``corpus`` prior (``prior.CorpusPrior``) of its class where that is trusted."""
    fitted = {}
    for c in cases:
        ids = [r for r in runs_of.get(c.key, []) if r in c.runs]
        if ids:
            fitted[c.key] = (fit_case([c.runs[r] for r in ids], [str(session[r]) for r in ids]), c.klass)
    priors = {k: fit_prior(m for m, kk in fitted.values() if kk == k) for k in {kk for _, kk in fitted.values()}}
    op_of = {c.key: c.member.op if c.member is not None else "" for c in cases}
    own = fit_op_priors(fitted, op_of)  # a case of one session: its class's and op's, as the gate's (baseline_fit)
    out = {key: (m, priors[k] if m.sessions >= 2 else own[(k, op_of[key])]) for key, (m, k) in fitted.items()}
    if corpus is not None:
        of = {c.key: c.member for c in cases if c.member is not None}
        for key, (m, _) in out.items():
            mem = of.get(key)
            p = corpus.prior_for(mem.klass, m.sessions, mem.op) if mem is not None else None
            if p is not None:
                out[key] = (m, p)
    return out


def _shifted(loc: RunLocation, d: float) -> RunLocation:
    return RunLocation(loc.loc + math.log(1.0 - d), loc.se2, loc.n) if d else loc


def _judge(first: RunLocation, again: Sequence[RunLocation], model: CaseModel, prior: Prior, d: float, *, m: int,
           tolerance: float, alpha: float, max_remeasures: int, folds: int = 1,
           class_spread: float = 0.0) -> Comparison:
    """The verdict on ``first`` and the next ``folds - 1`` runs of ``again`` pooled (the case's folds), with
    the rest of ``again`` as its re-measures, every run scaled down by ``d``."""
    pre = [_shifted(r, d) for r in again[:folds - 1]]
    later = again[folds - 1:]
    it: Iterator[RunLocation] = iter(later)

    def measure_again() -> tuple[RunLocation, bool]:
        return _shifted(next(it), d), True

    return judge(_shifted(first, d), model, prior, measure_again if len(later) else None, tolerance=tolerance,
                 alpha=alpha, n_comparisons=m, max_remeasures=min(max_remeasures, len(later)),
                 folds=pre, class_spread=class_spread).comparison


class Counts(TypedDict):
    """What :func:`judge_suite` counts over the suites of a calibration, and :func:`rates` reads: a pair is
    [caught or gated, judged]; a drop's counts are by the drop."""

    suites: int
    false_alarm_suites: int
    level_false_alarms: dict[str, int]
    judged: int
    not_gated: int
    aa_statuses: dict[str, int]
    caught_gated: dict[float, list[int]]
    caught_all: dict[float, list[int]]
    uniform: dict[float, list[int]]
    detectable: list[float]
    level_detectable: dict[str, list[float]]
    level_gated: dict[str, list[int]]
    one_band: list[int]
    one_case: list[int]
    class_drop: dict[str, dict[float, list[int]]]


def new_counts(drops: Sequence[float]) -> Counts:
    return {"suites": 0, "false_alarm_suites": 0, "level_false_alarms": {k: 0 for k in LEVELS}, "judged": 0,
            "not_gated": 0, "aa_statuses": {}, "caught_gated": {d: [0, 0] for d in drops},
            "caught_all": {d: [0, 0] for d in drops}, "uniform": {d: [0, 0] for d in drops}, "detectable": [],
            "level_detectable": {k: [] for k in ("class", "band", "case")},
            "level_gated": {k: [0, 0] for k in ("class", "band", "case")}, "one_band": [0, 0], "one_case": [0, 0],
            "class_drop": {}}


#: the class-drop check: every case of one small class (``levels.case_class``, up to 1 MiB) slowed by each of
#: these, one class at a time (the latency change an NCCL or driver upgrade brings to the small messages)
CLASS_DROPS = (0.05, 0.07, 0.10)


#: the levels as calibration counts them: the cases' own verdicts ("case", at their tests), then the end's
LEVELS = ("case", "class", "band", "residual")


def judge_suite(counts: Counts, judged: list[Judged], fit: LevelFit,
           drops: Sequence[float], *, tolerance: float, alpha: float, max_remeasures: int,
           per_case: bool = False, folds: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """Judge one suite (one current run of every case, with its re-measures) as the plugin does: each case
    at its share of alpha, then the run at the levels (``fit``: ``levels.fit_levels`` over these cases).
    A/A; a uniform drop of every case at each of ``drops``; a 10 % drop of each op band in turn and, with
    ``per_case``, of each case in turn (caught: a verdict or a failing level covers it)."""
    kw = dict(m=max(1, len(judged)), tolerance=tolerance, alpha=alpha * LEVEL_SHARES["case"],
              max_remeasures=max_remeasures)

    def run(drop_of: Callable[..., float]) -> tuple[dict[str, Comparison], RunLevels]:
        out, dev, var = {}, {}, {}
        seen: dict[str, list[float]] = {}  # per class, the first runs' log ratios so far (the plugin's Floors.cases)
        for key, model, prior, runs, _ in judged:
            klass = fit.members[key].klass if key in fit.members else ""
            c = _judge(runs[0], runs[1:], model, prior, drop_of(key), folds=(folds or {}).get(key, 1),
                       class_spread=class_scatter(seen.get(klass, [])), **kw)  # type: ignore[arg-type]
            seen.setdefault(klass, []).append(runs[0].loc + math.log(1.0 - drop_of(key)) - model.center)
            out[key], dev[key], var[key] = c, math.log(c.ratio), c.spread.sd ** 2
        floors = {k: c.spread.runs_now for k, c in out.items()}
        return out, judge_run(dev, fit, var, tolerance=tolerance, alpha=alpha, folds=folds, floors=floors,
                              runs={k: c.runs_now for k, c in out.items()})

    def caught(out: dict[str, Comparison], lv: RunLevels, keys: Sequence[str]) -> bool:
        covered = lv.failed_keys()
        return any(out[k].failed or k in covered for k in keys)

    out, lv = run(lambda k: 0.0)
    statuses: dict[str, int] = {}
    for c in out.values():
        word = decision_word(c.status)  # the tables count the decision's lower-case words
        statuses[word] = statuses.get(word, 0) + 1
        counts["aa_statuses"][word] = counts["aa_statuses"].get(word, 0) + 1
        counts["detectable"].append(c.detectable_drop)
    fails = {"case": statuses.get("regression", 0) > 0, "class": any(v.failed for v in lv.classes),
             "band": any(v.failed for v in lv.bands), "residual": any(v.failed for v in lv.cases)}
    for k, f in fails.items():
        counts["level_false_alarms"][k] += f
    residual = {v.keys[0]: v for v in lv.cases}
    gated = {k: c.gated or (k in residual and residual[k].gated) for k, c in out.items()}
    counts["not_gated"] += sum(not g for g in gated.values())
    for level, vs in (("class", lv.classes), ("band", lv.bands), ("case", lv.cases)):
        vs = [v for v in vs if v.status != "not judged"]
        counts["level_detectable"][level] += [v.detectable_drop for v in vs]
        counts["level_gated"][level][0] += sum(v.gated for v in vs)
        counts["level_gated"][level][1] += len(vs)
    for d in drops:
        o2, l2 = run(lambda k, d=d: d)
        counts["uniform"][d][0] += any(c.failed for c in o2.values()) or bool(l2.failed)
        counts["uniform"][d][1] += 1
        for k, c in o2.items():
            counts["caught_all"][d][0] += c.failed
            counts["caught_all"][d][1] += 1
            if gated[k]:
                counts["caught_gated"][d][0] += c.failed or k in l2.failed_keys()
                counts["caught_gated"][d][1] += 1
    for v in lv.bands:
        keys = set(v.keys)
        o2, l2 = run(lambda k, keys=keys: 0.10 if k in keys else 0.0)
        counts["one_band"][0] += caught(o2, l2, v.keys)
        counts["one_band"][1] += 1
    _class_drops(counts, run, [k for k in out if k in fit.members], fit.members)
    if per_case:
        for key in out:
            o2, l2 = run(lambda k, key=key: 0.10 if k == key else 0.0)
            counts["one_case"][0] += caught(o2, l2, [key])
            counts["one_case"][1] += 1
    counts["suites"] += 1
    counts["judged"] += len(judged)
    counts["false_alarm_suites"] += any(fails.values())
    return {"cases": len(judged), "statuses": statuses, "false_alarm": any(fails.values()),
            "false_levels": [k for k, f in fails.items() if f],
            "not_gated": sorted(k for k, g in gated.items() if not g)}


def _class_drops(counts: Counts, run: Callable[..., tuple[dict[str, Comparison], RunLevels]], keys: Sequence[str],
                 members: Mapping[str, Member]) -> None:
    """The class-drop check of one suite (``run``: the suite judged with a drop per case key): every case of one
    small class slowed by each of CLASS_DROPS, one class at a time; caught where the suite fails (a case's
    verdict or a level)."""
    small: dict[str, set[str]] = {}
    for k in keys:
        if members[k].size_bytes <= SMALL_BYTES:
            small.setdefault(members[k].klass, set()).add(k)
    for klass, ks in sorted(small.items()):
        for d in CLASS_DROPS:
            out, lv = run(lambda k, ks=ks, d=d: d if k in ks else 0.0)
            pair = counts["class_drop"].setdefault(klass, {}).setdefault(d, [0, 0])
            pair[0] += any(c.failed for c in out.values()) or bool(lv.failed)
            pair[1] += 1


def fit_levels_of(cases: list[Case], runs_of: dict[str, list[str]], models: dict[str, tuple[CaseModel, Prior]],
                  session_of: dict[str, int], corpus: Optional[CorpusPrior] = None) -> LevelFit:
    """The levels' models (``levels.fit_levels``) over the runs in ``runs_of`` of the cases in ``models``; the
    ``corpus`` prior gives the residuals' session part of a baseline of one session."""
    cs = [c for c in cases if c.key in models and c.member is not None]
    return fit_levels({c.key: {r: c.runs[r].loc for r in runs_of[c.key]} for c in cs},
                      {c.key: models[c.key][0].center for c in cs},
                      {c.key: c.member for c in cs if c.member is not None},
                      {r: str(s) for r, s in session_of.items()},
                      corpus.residual_sessions() if corpus is not None else None)


def rates(counts: Counts) -> dict[str, Any]:
    import numpy as np

    def share(pair: list[int]) -> Optional[float]:
        return pair[0] / pair[1] if pair[1] else None

    def spread(v: list[float]) -> Optional[dict[str, float]]:
        return ({"median": float(np.median(v)), "p90": float(np.percentile(v, 90)), "max": float(np.max(v))}
                if v else None)

    return {
        "suites": counts["suites"],
        "false_alarm_suites": counts["false_alarm_suites"],
        "level_false_alarm_suites": dict(counts["level_false_alarms"]),
        "case_judgements": counts["judged"],
        "aa_statuses": counts["aa_statuses"],
        "not_gated_share": counts["not_gated"] / counts["judged"] if counts["judged"] else None,
        "detectable_drop": spread(counts["detectable"]),
        "level_detectable_drop": {k: spread(v) for k, v in counts["level_detectable"].items()},
        "level_gated_share": {k: share(v) for k, v in counts["level_gated"].items()},
        "detection_gated": {f"{d:.0%}": share(v) for d, v in counts["caught_gated"].items()},
        "detection_all": {f"{d:.0%}": share(v) for d, v in counts["caught_all"].items()},
        "uniform_detection": {f"{d:.0%}": share(v) for d, v in counts["uniform"].items()},
        "one_band_10pct": share(counts["one_band"]), "one_case_10pct": share(counts["one_case"]),
        "one_band_judged": counts["one_band"][1], "one_case_judged": counts["one_case"][1],
        "class_drop": {klass: {f"{d:.0%}": share(v) for d, v in sorted(by.items())}
                       for klass, by in sorted(counts["class_drop"].items())},
    }


def loso(cases: list[Case], session: dict[str, int], drops: Sequence[float], *, tolerance: float = DEFAULT_TOLERANCE,
         alpha: float = DEFAULT_ALPHA, max_remeasures: int = DEFAULT_MAX_REMEASURES,
         per_case_every: int = 0, folds: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """Leave-one-session-out A/A, detection and sensitivity, from the file's own runs; a 10 % drop of each
    case in turn on every ``per_case_every``-th suite (0: none; each costs a suite per case).  ``folds``: per
    class (``levels.case_class``), the runs a case of it is measured in before its verdict (the held-out
    session's next runs; a case of a session with fewer runs has as many as it has)."""
    order = {r: i for i, r in enumerate(sorted(session, key=lambda r: (session[r], r)))}
    sessions = sorted(set(session.values()))
    counts = new_counts(drops)
    suites: list[dict[str, Any]] = []
    klass_of = {c.key: c.member.klass for c in cases if c.member is not None}
    for s in sessions:
        train = {c.key: [r for r in c.runs if session[r] != s] for c in cases}
        models = models_of(cases, train, session)
        fit = fit_levels_of(cases, train, models, session)
        held = sorted({r for c in cases for r in c.runs if session[r] == s}, key=order.__getitem__)
        for i, run in enumerate(held):
            rest = held[i + 1:] + held[:i]  # the session's other runs, the next ones first
            judged = [(c.key, *models[c.key], [c.runs[run]] + [c.runs[r] for r in rest if r in c.runs], c.group)
                      for c in cases if run in c.runs and c.key in models]
            if judged:
                k_of = {key: min(len(runs), (folds or {}).get(klass_of.get(key, ""), 1))
                        for key, _, _, runs, _ in judged}
                suites.append({"session": s, "run": run, **judge_suite(
                    counts, judged, fit, drops, tolerance=tolerance, alpha=alpha, max_remeasures=max_remeasures,
                    per_case=per_case_every > 0 and len(suites) % per_case_every == 0, folds=k_of)})
    return {"sessions": len(sessions), **rates(counts), "per_suite": suites}


def fit_model(cases: list[Case], session: dict[str, int]) -> dict[str, Any]:
    """The simulation's figures, fitted to the file: per case the session, run and within-run spreads of
    ``decision.fit_case`` on every run, and per group the spread of a run's common offset."""
    import numpy as np

    models = models_of(cases, {c.key: list(c.runs) for c in cases}, session)
    per_case = {}
    for c in cases:
        model, prior = models[c.key]
        sp = prediction(model, prior, 1, model.mean_se2)
        per_case[c.key] = {"center": model.center, "session_sd": sp.session_sd, "run_sd": sp.run_sd,
                           "within_se": math.sqrt(model.mean_se2), "group": c.group}
    common = {}
    for g in {c.group for c in cases}:
        cs = [c for c in cases if c.group == g]
        offs = list(run_offsets([{r: x.loc for r, x in c.runs.items()} for c in cs],
                                [models[c.key][0].center for c in cs]).values())
        common[g] = float(np.std(offs, ddof=1)) if len(offs) > 1 else 0.0
    return {"cases": per_case, "common_sd": common}


def simulate(cases: list[Case], session: dict[str, int], model: dict[str, Any], *, suites: int, drops: Sequence[float],
             tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
             max_remeasures: int = DEFAULT_MAX_REMEASURES, seed: int = 1,
             folds: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """Suites drawn from the fitted model with the file's sessions and runs for the baseline and a new
    session of the most ``folds`` (per class, as :func:`loso`) + ``max_remeasures`` runs.  A run's location
    is the case's centre + the group's common offset of the run + the case's session offset + its run offset
    + its within-run error; the common part is taken out of the case's run spread (what is left, at least 0)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    counts = new_counts(drops)
    pc, common = model["cases"], model["common_sd"]
    run_ids = sorted(session, key=lambda r: (session[r], r))
    new_runs = [f"new{i}" for i in range(max([1, *(folds or {}).values()]) + max_remeasures)]
    k_of = {c.key: (folds or {}).get(c.member.klass, 1) for c in cases if c.member is not None}
    sess_of = {**session, **{r: -1 for r in new_runs}}
    for _ in range(suites):
        offs = {(g, r): float(rng.normal(0.0, common[g])) for g in common for r in run_ids + new_runs}
        sims = []
        for c in cases:
            f = pc[c.key]
            idio = math.sqrt(max(f["run_sd"] ** 2 - common[c.group] ** 2, 0.0))
            s_off = {s: float(rng.normal(0.0, f["session_sd"])) for s in set(sess_of.values())}
            runs = {}
            for r in [x for x in run_ids if x in c.runs] + new_runs:
                loc = (f["center"] + offs[(c.group, r)] + s_off[sess_of[r]] + float(rng.normal(0.0, idio))
                       + float(rng.normal(0.0, f["within_se"])))
                runs[r] = RunLocation(loc, f["within_se"] ** 2, 50)
            sims.append(Case(c.key, c.group, c.klass, runs, c.member))
        train = {c.key: [r for r in c.runs if not r.startswith("new")] for c in sims}
        models = models_of(sims, train, sess_of)
        fit = fit_levels_of(sims, train, models, sess_of)
        judged = [(c.key, *models[c.key], [c.runs[r] for r in new_runs], c.group) for c in sims]
        judge_suite(counts, judged, fit, drops, tolerance=tolerance, alpha=alpha, max_remeasures=max_remeasures,
               folds=k_of)
    return rates(counts)


def projection(cases: list[Case], model: dict[str, Any], sessions: Sequence[int], *, runs_per_session: int = 4,
               tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
               max_remeasures: int = DEFAULT_MAX_REMEASURES, seed: int = 1) -> dict[int, dict[str, float]]:
    """How the share of cases not gated and the smallest detectable drop would fall with more baseline
    sessions: baselines of ``s`` sessions x ``runs_per_session`` runs drawn from the fitted model."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    level = corrected_alpha(alpha * CASE_ALPHA_SHARE, len(cases), max(1, max_remeasures))
    for n_s in sessions:
        runs_of = {f"p{i}-{j}": i for i in range(n_s) for j in range(runs_per_session)}
        sims = []
        for c in cases:
            f = model["cases"][c.key]
            s_off = [float(rng.normal(0.0, f["session_sd"])) for _ in range(n_s)]
            sims.append(Case(c.key, c.group, c.klass, {
                r: RunLocation(f["center"] + s_off[i] + float(rng.normal(0.0, f["run_sd"]))
                               + float(rng.normal(0.0, f["within_se"])), f["within_se"] ** 2, 50)
                for r, i in runs_of.items()}, c.member))
        models = models_of(sims, {c.key: list(c.runs) for c in sims}, runs_of)
        drops = []
        for c in sims:
            mod, prior = models[c.key]
            drops.append(detectable_drop(mod, prior, tolerance=tolerance, level=level, k=1 + max_remeasures))
        out[n_s] = {"not_gated_share": float(np.mean([x > 2 * tolerance for x in drops])),
                    "detectable_drop_median": float(np.median(drops))}
    return out


def _parse_drops(text: str) -> tuple[float, ...]:
    try:
        drops = tuple(float(x) / 100 for x in text.split(",") if x.strip())
    except ValueError:
        drops = ()
    if not drops or any(not 0 < d < 1 for d in drops):
        raise argparse.ArgumentTypeError(f"--drops {text!r}: expected percentages between 0 and 100, e.g. 3,5,10")
    return drops


def pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1%}"


def report_lines(name: str, r: dict[str, Any]) -> list[str]:
    det = r["detectable_drop"] or {}
    lev = r["level_detectable_drop"]
    gated = r["level_gated_share"]
    lines = [
        f"{name}: {r['false_alarm_suites']} of {r['suites']} suites with a false REGRESSION at any level ("
        + ", ".join(f"{k} {n}" for k, n in r["level_false_alarm_suites"].items()) + f"; {r['case_judgements']} case "
        "judgements: " + ", ".join(f"{n} {k}" for k, n in sorted(r["aa_statuses"].items())) + ")",
        f"  cases not gated (by their own verdict or their residual): {pct(r['not_gated_share'])}; the cases' own "
        f"smallest drop caught: median {pct(det.get('median'))}, 90th pct {pct(det.get('p90'))}, max "
        f"{pct(det.get('max'))}",
        "  gated at each level, and the median smallest drop caught: " + "; ".join(
            f"{k} {pct(gated[k])}, {pct((lev[k] or {}).get('median'))}" for k in ("class", "band", "case")),
        "  suites failing a uniform drop of every case: "
        + ", ".join(f"{k} {pct(v)}" for k, v in r["uniform_detection"].items()),
        f"  a 10% drop of one op band caught: {pct(r['one_band_10pct'])} of {r['one_band_judged']}; of one case: "
        f"{pct(r['one_case_10pct'])} of {r['one_case_judged']}",
        "  cases called REGRESSION by their own verdict at a uniform drop, of the gated cases: "
        + ", ".join(f"{k} {pct(v)}" for k, v in r["detection_gated"].items()),
    ]
    for klass, by in r.get("class_drop", {}).items():
        lines.append(f"  suites failing when every case of {klass} drops: "
                     + ", ".join(f"{k} {pct(v)}" for k, v in by.items()))
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pytest_gpucomm.gate.calibration",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline", type=Path, nargs="+",
                   help="a baseline file (baselines/NAME.json); with --corpus, every file of the corpus")
    p.add_argument("--corpus", action="store_true",
                   help="check the corpus prior leave-one-machine-out (gate.calibration_corpus) on the files' GPU "
                        "machines, instead of one file's sessions")
    p.add_argument("--drops", type=_parse_drops, default=DEFAULT_DROPS, metavar="PCT[,PCT]",
                   help="drops, in percent, at which detection is reported. Default: 3,5,7,10,20.")
    p.add_argument("--session-gap-min", type=float, default=10.0, metavar="MINUTES",
                   help="for runs without a session label: runs further apart than this start a new session. "
                        "Default: 10.")
    p.add_argument("--sim-suites", type=int, default=40, metavar="N",
                   help="suites drawn from the fitted model (0: no simulation). Default: 40.")
    p.add_argument("--seed", type=int, default=1, help="seed of the simulation. Default: 1.")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="Default: the plugin's, 0.05.")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="Default: the plugin's, 0.01.")
    p.add_argument("--remeasures", type=int, default=DEFAULT_MAX_REMEASURES,
                   help=f"re-measures of a flagged case. Default: the plugin's, {DEFAULT_MAX_REMEASURES}.")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS, metavar="K",
                   help=f"runs a case of the folded classes ({', '.join(FOLDED_CLASSES)}) is measured in before "
                        f"its verdict (the held-out session's next runs). Default: the plugin's, {DEFAULT_FOLDS}.")
    p.add_argument("--per-case-every", type=int, default=3, metavar="N",
                   help="a 10%% drop of each case in turn on every N-th held-out suite (0: none; each such suite "
                        "costs one judgement per case). Default: 3.")
    p.add_argument("--table", action="store_true",
                   help="also the trade-off of alpha (0.01, 0.05, 0.2) and re-measures (1, 2, 4)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results here")
    args = p.parse_args(argv)
    if args.sim_suites < 0:
        p.error(f"--sim-suites {args.sim_suites}: expected 0 or more")
    if not (args.session_gap_min > 0):
        p.error(f"--session-gap-min {args.session_gap_min}: expected a positive number of minutes")
    if not 0 < args.tolerance < 1:
        p.error(f"--tolerance {args.tolerance}: expected a fraction such as 0.05")
    if not 0 < args.alpha < 1:
        p.error(f"--alpha {args.alpha}: expected a level in (0, 1) such as 0.01")
    if args.remeasures < 0:
        p.error(f"--remeasures {args.remeasures}: expected 0 or more")
    if not 1 <= args.folds <= MAX_FOLDS:
        p.error(f"--folds {args.folds}: expected a whole number from 1 to {MAX_FOLDS}")
    if args.per_case_every < 0:
        p.error(f"--per-case-every {args.per_case_every}: expected 0 or more")
    from .schema import BaselineError

    if args.corpus:
        return _corpus(args)
    if len(args.baseline) != 1:
        p.error(f"expected one baseline file (or --corpus with several), got {len(args.baseline)}")
    args.baseline = args.baseline[0]

    try:
        from .store import load_baseline

        b = load_baseline(args.baseline)  # read once, split by machine here
        machines = _machines(b)
        loaded = [(m, _cases(b, args.baseline, m)) for m, _ in machines] if len(machines) > 1 else \
            [(machines[0][0] if machines else None, _cases(b, args.baseline, None))]
    except BaselineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not any(cases for _, (cases, _, _) in loaded):
        print(f"error: {args.baseline}: no case has measured runs: nothing to calibrate on", file=sys.stderr)
        return 2
    docs = []
    for machine, (cases, dates, labels) in loaded:
        if len(loaded) > 1 and machine is not None:
            say(f"machine {machine.describe()}: its runs only, as the plugin judges a run of it")
        docs.append({"machine": machine.describe() if machine is not None else None,
                     **_calibrate(args, cases, dates, labels)})
    if args.json:
        doc = docs[0] if len(docs) == 1 else {"baseline": str(args.baseline), "machines": docs}
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


def _corpus(args: argparse.Namespace) -> int:
    """``--corpus``: the prior checked leave-one-machine-out (``calibration_corpus``), printed and, with --json,
    written."""
    from .calibration_corpus import leave_one_machine_out, machine_lines
    from .schema import BaselineError

    try:
        machines = corpus_of_files(args.baseline)
    except BaselineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if len(machines) < 2:
        print(f"error: {', '.join(map(str, args.baseline))}: {len(machines)} GPU machine(s): leaving one out needs "
              "two or more", file=sys.stderr)
        return 2
    r = leave_one_machine_out(machines, args.drops, tolerance=args.tolerance, alpha=args.alpha,
                              max_remeasures=args.remeasures, per_case_every=args.per_case_every,
                              folds={c: args.folds for c in FOLDED_CLASSES})
    for name, x in r.items():
        for line in machine_lines(name, x):
            say(line)
    if args.json:
        brief = {name: {k: ({kk: vv for kk, vv in v.items() if kk != "per_suite"} if isinstance(v, dict) else v)
                        for k, v in x.items()} for name, x in r.items()}
        args.json.write_text(json.dumps({"corpus": [str(b) for b in args.baseline], "machines": brief}, indent=1,
                                        default=str) + "\n", encoding="utf-8")
    return 0


def _calibrate(args: argparse.Namespace, cases: list[Case], dates: dict[str, str],
               labels: dict[str, Optional[str]]) -> dict[str, Any]:
    """Everything ``main`` prints for one machine's runs (``cases``), and its JSON document."""
    session = sessions_of(dates, args.session_gap_min, labels)
    n_sessions = len(set(session.values()))
    folds = {c: args.folds for c in FOLDED_CLASSES}
    kw = dict(tolerance=args.tolerance, alpha=args.alpha, max_remeasures=args.remeasures, folds=folds)
    say(f"{args.baseline}: {len(cases)} measured cases, {len(dates)} runs in {n_sessions} sessions "
        f"({sum(1 for r in dates if labels.get(r))} runs labelled; tolerance {args.tolerance:.0%}, alpha "
        f"{args.alpha:g}, up to {args.remeasures} re-measures, {args.folds} folds)")
    model = fit_model(cases, session)
    import numpy as np

    fitted = {}
    for what in ("session_sd", "run_sd", "within_se"):
        for g in sorted(model["common_sd"]):
            v = [f[what] for f in model["cases"].values() if f["group"] == g]
            fitted[f"{g} {what}"] = {"median": float(np.median(v)), "p90": float(np.percentile(v, 90))}
    say("fitted spreads of log bandwidth (median / 90th percentile over cases): "
        + "; ".join(f"{k} {v['median']:.2%} / {v['p90']:.2%}" for k, v in fitted.items())
        + "; common offset of a run: " + ", ".join(f"{g} {v:.2%}" for g, v in sorted(model["common_sd"].items())))
    doc: dict[str, Any] = {"baseline": str(args.baseline), "cases": len(cases), "runs": len(dates),
                           "sessions": n_sessions, **{k: v for k, v in kw.items() if k != "folds"},
                           "folds": args.folds, "folded_classes": list(FOLDED_CLASSES), "fitted": fitted,
                           "common_sd": model["common_sd"]}
    if n_sessions < 2:
        say("leave-one-session-out: needs runs from at least 2 sessions; none judged")
        real = None
    else:
        real = loso(cases, session, args.drops, per_case_every=args.per_case_every, **kw)
        for line in report_lines("leave-one-session-out", real):
            say(line)
    doc["leave_one_session_out"] = real
    sim = None
    if args.sim_suites:
        sim = simulate(cases, session, model, suites=args.sim_suites, drops=args.drops, seed=args.seed, **kw)
        for line in report_lines(f"fitted simulation ({args.sim_suites} suites)", sim):
            say(line)
    doc["simulation"] = sim
    if args.table:
        rows = []
        say("trade-off (LOSO | simulation): alpha, re-measures -> suites with a false REGRESSION, not gated, "
            "3% drift called, 10% drop caught (gated cases | all cases)")
        for a in TABLE_ALPHAS:
            for k in TABLE_REMEASURES:
                kw2 = dict(tolerance=args.tolerance, alpha=a, max_remeasures=k, folds=folds)
                drops = (0.03, 0.10)
                lr = loso(cases, session, drops, **kw2) if n_sessions >= 2 else None
                sr = (simulate(cases, session, model, suites=args.sim_suites, drops=drops, seed=args.seed, **kw2)
                      if args.sim_suites else None)
                briefs = [_brief(x) if x else None for x in (lr, sr)]
                rows.append({"alpha": a, "remeasures": k, "loso": briefs[0], "simulation": briefs[1]})
                say(f"  alpha {a:<5g} re-measures {k}: " + " | ".join(
                    "-" if x is None else (f"FA {x['false_alarm_suites']}/{x['suites']}, "
                                           f"not gated {pct(x['not_gated'])}, "
                                           f"3% {pct(x['drift3_all'])}, 10% {pct(x['drop10_gated'])} | "
                                           f"{pct(x['drop10_all'])}")
                    for x in briefs))
        doc["table"] = rows
        proj = projection(cases, model, (n_sessions, 8, 12, 20), tolerance=args.tolerance, alpha=args.alpha,
                          max_remeasures=args.remeasures)
        say("projection (baselines of N sessions x 4 runs drawn from the fitted model): "
            + "; ".join(f"{n} sessions: not gated {pct(v['not_gated_share'])}, median smallest drop caught "
                        f"{pct(v['detectable_drop_median'])}" for n, v in proj.items()))
        doc["projection"] = {str(n): v for n, v in proj.items()}
    return doc


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    return {"false_alarm_suites": r["false_alarm_suites"], "suites": r["suites"], "not_gated": r["not_gated_share"],
            "drift3_all": r["detection_all"].get("3%"), "drop10_gated": r["detection_gated"].get("10%"),
            "drop10_all": r["detection_all"].get("10%")}


if __name__ == "__main__":
    sys.exit(main())
