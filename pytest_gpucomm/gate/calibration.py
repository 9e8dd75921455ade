"""How the gate's decision behaves on a baseline file's own runs: false alarms and detection.

    python -m pytest_gpucomm.gate.calibration baselines/h200.json [--drops 3,5,7,10,20] [--sim-suites 40]

Runs of the file are grouped into *sessions* (occasions: runs recorded less than ``--session-gap-min``
minutes apart belong to one).  Then, for the procedure the plugin runs today (``decision.compare`` against
the baseline runs, alpha corrected over the gated cases, and a flagged case judged again on a second
measurement that decides):

* **leave-one-session-out A/A**: each run of a held-out session is judged, case by case, against the runs
  of the other sessions, with the next run of the same session as the re-measure (a run with none has no
  re-measure).  A suite (one run) with any REGRESSION is a false alarm; the cases called noisy are counted.
* **detection**: the same, with the held-out runs' bandwidth scaled down by each drop (3, 5, 7, 10, 20 %):
  the share of the gated cases (not noisy, with another session to compare with) called REGRESSION.
* **fitted simulation**: per case, the within-run spread of log bandwidth, the spread of run locations
  within a session and between sessions, and per session the offset shared by all cases of a group
  (copies, collectives), estimated from the file (the fitted figures are printed); suites drawn from that
  model, with the file's run structure, give the same two rates over as many suites as asked for.

Only the decision is exercised, not the measurement: what it says holds for runs like the file's.
``--json PATH`` writes every figure (per suite, the fitted model) as JSON.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..ops.collectives import OPS
from ..vocab import DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_TOLERANCE

__all__ = ["Case", "load_cases", "sessions_of", "judge_case", "aa_and_detection", "fit", "simulate", "main"]

#: drops (fractions) at which detection is reported by default
DEFAULT_DROPS = (0.03, 0.05, 0.07, 0.10, 0.20)


@dataclass(frozen=True)
class Case:
    """One case of the file: its group ("copy" or "collective") and its runs' samples (GB/s) by run id."""

    key: str
    group: str
    runs: dict[str, list[float]]


def load_cases(path: Path) -> tuple[list[Case], dict[str, str]]:
    """The measured cases of a baseline file, and the date of each run id."""
    from .store import load_baseline

    b = load_baseline(path)
    dates = {r.run_id: r.date for r in b.runs}
    cases = []
    for key, e in b.cases.items():
        if not e.runs:
            continue  # floor-only: nothing to calibrate on
        group = "collective" if e.op in OPS else "copy"
        cases.append(Case(key, group, {r.run_id: list(r.samples_gbps) for r in e.runs}))
    return cases, dates


def sessions_of(dates: dict[str, str], gap_min: float) -> dict[str, int]:
    """Session number of each run id: runs less than ``gap_min`` minutes after the previous one (in time
    order) belong to its session."""
    order = sorted(dates, key=lambda r: _dt.datetime.fromisoformat(dates[r]))
    out: dict[str, int] = {}
    last: Optional[_dt.datetime] = None
    s = -1
    for run in order:
        t = _dt.datetime.fromisoformat(dates[run])
        if last is None or (t - last).total_seconds() > gap_min * 60:
            s += 1
        out[run] = s
        last = t
    return out


Decide = Callable[[Sequence[float], list[list[float]], int], Any]  # -> decision.Comparison


def default_decide(tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
                   confidence: float = DEFAULT_CONFIDENCE) -> Decide:
    """The plugin's decision on one measurement: ``decision.compare``."""
    from .decision import compare

    def decide(current: Sequence[float], baseline_runs: list[list[float]], m: int) -> Any:
        return compare(current, baseline_runs, tolerance=tolerance, alpha=alpha, n_comparisons=m,
                       confidence=confidence)

    return decide


def judge_case(decide: Decide, first: Sequence[float], again: Optional[Sequence[float]],
               baseline_runs: list[list[float]], m: int) -> str:
    """The gate's procedure (``decision.confirm``, as ``Gate.judge`` runs it): a regression is measured
    again (``again``) and the second measurement decides; without one the first stands."""
    from .decision import confirm

    c, _, _ = confirm(lambda samples: decide(samples, baseline_runs, m), first,
                      (lambda: again) if again is not None else None)
    return str(c.status)


def aa_and_detection(cases: list[Case], session: dict[str, int], drops: Sequence[float],
                     decide: Decide) -> dict[str, Any]:
    """Leave-one-session-out A/A and detection at each drop, from the file's own runs."""
    sessions = sorted(set(session.values()))
    order = {r: i for i, r in enumerate(session)}
    suites: list[dict[str, Any]] = []
    caught = {d: [0, 0] for d in drops}  # drop -> [regressions, gated cases]
    for s in sessions:
        held_runs = sorted({r for c in cases for r in c.runs if session[r] == s}, key=order.__getitem__)
        for i, run in enumerate(held_runs):
            again_run = held_runs[i + 1] if i + 1 < len(held_runs) else None
            judged = [c for c in cases if run in c.runs and any(session[r] != s for r in c.runs)]
            if not judged:
                continue  # nothing of this run can be held against another session
            m = max(1, len(judged))
            statuses: dict[str, int] = {}
            for c in judged:
                base = [v for r, v in c.runs.items() if session[r] != s]
                again = c.runs.get(again_run) if again_run else None
                st = judge_case(decide, c.runs[run], again, base, m)
                statuses[st] = statuses.get(st, 0) + 1
                if st == "noisy":
                    continue
                for d in drops:
                    scaled = [x * (1 - d) for x in c.runs[run]]
                    scaled_again = [x * (1 - d) for x in again] if again is not None else None
                    caught[d][1] += 1
                    caught[d][0] += judge_case(decide, scaled, scaled_again, base, m) == "regression"
            groups = dict(Counter(c.group for c in judged))
            suites.append({"session": s, "run": run, "cases": len(judged), "groups": groups, "statuses": statuses,
                           "false_alarm": statuses.get("regression", 0) > 0})
    return {
        "sessions": len(sessions),
        "suites": suites,
        "false_alarm_suites": sum(x["false_alarm"] for x in suites),
        "detection": {f"{d:.0%}": (caught[d][0] / caught[d][1] if caught[d][1] else None) for d in drops},
        "detection_counts": {f"{d:.0%}": caught[d] for d in drops},
    }


@dataclass(frozen=True)
class CaseFit:
    """Spreads of one case's log bandwidth: within a run (robust), of run locations within a session, of
    session locations beyond what their runs explain."""

    within: float
    run: float
    session: float
    n: int


def _robust_sd(x: Any) -> float:
    import numpy as np

    q1, q3 = np.percentile(x, [25, 75])
    return float((q3 - q1) / 1.349)


def fit(cases: list[Case], session: dict[str, int]) -> dict[str, Any]:
    """The model's figures, estimated from the file (method of moments on log run medians, after removing
    each session's offset shared by the cases of a group)."""
    import numpy as np

    # per session and group, the common offset: median over cases of (session mean - case mean) of log medians
    loc = {c.key: {r: float(np.median(np.log(v))) for r, v in c.runs.items()} for c in cases}
    case_mean = {key: float(np.mean(list(runs.values()))) for key, runs in loc.items()}
    offsets: dict[tuple[str, int], float] = {}
    for g in sorted({c.group for c in cases}):
        for s in sorted(set(session.values())):
            devs = []
            for c in cases:
                if c.group != g:
                    continue
                runs_s = [loc[c.key][r] for r in c.runs if session[r] == s]
                if runs_s and len(c.runs) > len(runs_s):
                    devs.append(float(np.mean(runs_s)) - case_mean[c.key])
            if devs:
                offsets[(g, s)] = float(np.median(devs))
    fits: dict[str, CaseFit] = {}
    for c in cases:
        within = float(np.median([_robust_sd(np.log(v)) for v in c.runs.values()]))
        n = int(np.median([len(v) for v in c.runs.values()]))
        by_s: dict[int, list[float]] = {}
        for r in c.runs:
            by_s.setdefault(session[r], []).append(loc[c.key][r] - offsets.get((c.group, session[r]), 0.0))
        resid = [x - float(np.mean(v)) for v in by_s.values() for x in v]
        dof = sum(len(v) - 1 for v in by_s.values())
        run_sd = math.sqrt(sum(x * x for x in resid) / dof) if dof > 0 else 0.0
        means = [float(np.mean(v)) for v in by_s.values()]
        if len(means) > 1:
            var_s = float(np.var(means, ddof=1)) - run_sd ** 2 * float(np.mean([1 / len(v) for v in by_s.values()]))
            sess_sd = math.sqrt(max(var_s, 0.0))
        else:
            sess_sd = 0.0
        fits[c.key] = CaseFit(within, run_sd, sess_sd, n)
    common = {g: [v for (gg, _), v in offsets.items() if gg == g] for g in {c.group for c in cases}}
    return {
        "cases": fits,
        "offsets": {f"{g} session {s}": v for (g, s), v in offsets.items()},
        "common_sd": {g: (float(np.std(v, ddof=1)) if len(v) > 1 else 0.0) for g, v in common.items()},
    }


def _pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


def simulate(cases: list[Case], session: dict[str, int], model: dict[str, Any], *, suites: int,
             drops: Sequence[float], decide: Decide, seed: int = 1, max_samples: int = 100) -> dict[str, Any]:
    """Suites drawn from the fitted model with the file's run structure (its sessions and runs per session
    for the baseline; a new session with two runs, the first and the re-measure, for the current run)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    fits: dict[str, CaseFit] = model["cases"]
    common_sd: dict[str, float] = model["common_sd"]
    false_alarms = 0
    caught = {d: [0, 0] for d in drops}
    m = len(cases)
    sess_ids: list[Any] = sorted(set(session.values())) + ["new"]
    for _ in range(suites):
        # one offset per (group, session) shared by the cases of the group, for the baseline's and the new session
        shared = {(g, s): rng.normal(0.0, common_sd.get(g, 0.0)) for g in common_sd for s in sess_ids}
        any_alarm = False
        for c in cases:
            f = fits[c.key]
            n = min(f.n, max_samples)

            def run_samples(s: Any, sess_offset: float) -> np.ndarray:
                mu = shared[(c.group, s)] + sess_offset + rng.normal(0.0, f.run)
                return np.exp(mu + rng.normal(0.0, max(f.within, 1e-6), n))

            offs = {s: rng.normal(0.0, f.session) for s in sess_ids}
            base = [list(run_samples(session[r], offs[session[r]])) for r in c.runs]
            first, again = run_samples("new", offs["new"]), run_samples("new", offs["new"])
            st = judge_case(decide, list(first), list(again), base, m)
            any_alarm |= st == "regression"
            if st == "noisy":
                continue
            for d in drops:
                caught[d][1] += 1
                caught[d][0] += judge_case(decide, list(first * (1 - d)), list(again * (1 - d)), base, m) == "regression"
        false_alarms += any_alarm
    return {
        "suites": suites,
        "false_alarm_rate": false_alarms / suites if suites else None,
        "detection": {f"{d:.0%}": (caught[d][0] / caught[d][1] if caught[d][1] else None) for d in drops},
    }


def _parse_drops(text: str) -> tuple[float, ...]:
    try:
        drops = tuple(float(x) / 100 for x in text.split(",") if x.strip())
    except ValueError:
        drops = ()
    if not drops or any(not 0 < d < 1 for d in drops):
        raise argparse.ArgumentTypeError(f"--drops {text!r}: expected percentages between 0 and 100, e.g. 3,5,10")
    return drops


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pytest_gpucomm.gate.calibration",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline", type=Path, help="a baseline file (baselines/NAME.json)")
    p.add_argument("--drops", type=_parse_drops, default=DEFAULT_DROPS, metavar="PCT[,PCT]",
                   help="drops, in percent, at which detection is reported. Default: 3,5,7,10,20.")
    p.add_argument("--session-gap-min", type=float, default=10.0, metavar="MINUTES",
                   help="runs further apart than this start a new session. Default: 10.")
    p.add_argument("--sim-suites", type=int, default=40, metavar="N",
                   help="suites drawn from the fitted model (0: no simulation). Default: 40.")
    p.add_argument("--seed", type=int, default=1, help="seed of the simulation. Default: 1.")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="Default: the plugin's, 0.05.")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="Default: the plugin's, 0.01.")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results here")
    args = p.parse_args(argv)
    if args.sim_suites < 0:
        p.error(f"--sim-suites {args.sim_suites}: expected 0 or more")
    if not (args.session_gap_min > 0):
        p.error(f"--session-gap-min {args.session_gap_min}: expected a positive number of minutes")
    from .store import BaselineError

    try:
        cases, dates = load_cases(args.baseline)
    except BaselineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not cases:
        print(f"error: {args.baseline}: no case has measured runs: nothing to calibrate on", file=sys.stderr)
        return 2
    session = sessions_of(dates, args.session_gap_min)
    decide = default_decide(args.tolerance, args.alpha)
    real = aa_and_detection(cases, session, args.drops, decide)
    model = fit(cases, session)
    fits = list(model["cases"].values())
    fitted = {
        "within_run_sd": {"median": _pct([f.within for f in fits], 50), "p90": _pct([f.within for f in fits], 90)},
        "run_sd_within_session": {"median": _pct([f.run for f in fits], 50), "p90": _pct([f.run for f in fits], 90)},
        "session_sd": {"median": _pct([f.session for f in fits], 50), "p90": _pct([f.session for f in fits], 90)},
        "common_offset_sd": model["common_sd"],
        "session_offsets": model["offsets"],
    }
    sim = (simulate(cases, session, model, suites=args.sim_suites, drops=args.drops, decide=decide, seed=args.seed)
           if args.sim_suites else None)
    n_sessions = real["sessions"]
    print(f"{args.baseline}: {len(cases)} measured cases, {len(dates)} runs in {n_sessions} sessions "
          f"(runs more than {args.session_gap_min:g} min apart start a new one)")
    print("fitted spreads of log bandwidth (about the relative spread): "
          f"within a run median {fitted['within_run_sd']['median']:.2%} (90th pct {fitted['within_run_sd']['p90']:.2%}); "
          f"of runs within a session median {fitted['run_sd_within_session']['median']:.2%} "
          f"(90th pct {fitted['run_sd_within_session']['p90']:.2%}); of sessions median "
          f"{fitted['session_sd']['median']:.2%} (90th pct {fitted['session_sd']['p90']:.2%}); common offset per "
          "session: " + ", ".join(f"{g} {v:.2%}" for g, v in sorted(model["common_sd"].items())))
    if n_sessions < 2:
        print("leave-one-session-out: needs runs from at least 2 sessions; none judged")
    else:
        judged_groups: dict[str, int] = {}
        for suite in real["suites"]:
            for g, k in suite["groups"].items():
                judged_groups[g] = max(judged_groups.get(g, 0), k)
        unjudged = sorted({c.group for c in cases} - set(judged_groups))
        noisy = sum(x["statuses"].get("noisy", 0) for x in real["suites"])
        judged_cases = sum(x["cases"] for x in real["suites"])
        print(f"leave-one-session-out A/A: {real['false_alarm_suites']} of {len(real['suites'])} suites with a "
              f"false alarm ({judged_cases} case judgements, {noisy} of them noisy; cases judged per suite: "
              + ", ".join(f"{g} {k}" for g, k in sorted(judged_groups.items()))
              + (f"; not judged, recorded in one session only: {', '.join(unjudged)}" if unjudged else "")
              + "); detection (cases called REGRESSION): "
              + ", ".join(f"{k} drop {v:.1%}" if v is not None else f"{k} drop -" for k, v in real["detection"].items()))
    if sim is not None:
        print(f"fitted simulation ({sim['suites']} suites): false alarm in {sim['false_alarm_rate']:.1%} of suites; "
              "detection: " + ", ".join(f"{k} drop {v:.1%}" if v is not None else f"{k} drop -"
                                        for k, v in sim["detection"].items()))
    doc = {"baseline": str(args.baseline), "cases": len(cases), "runs": len(dates), "sessions": n_sessions,
           "tolerance": args.tolerance, "alpha": args.alpha, "fitted": fitted, "leave_one_session_out": real,
           "simulation": sim}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
