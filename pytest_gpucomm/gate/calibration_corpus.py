"""The corpus prior checked on machines it did not see (issue 43): leave one machine out.

    python -m pytest_gpucomm.gate.calibration --corpus baselines/h200.json baselines/h100.json [--json PATH]

For each GPU machine of the corpus files (``prior.corpus_of_files``: a file may hold several) with runs in two
sessions or more, the prior is fitted on the other machines only (``prior.fit_corpus``); then every session of
the machine in turn is taken as a **one-session baseline** (a first recording of hardware the gate has never
seen), and every run of each other session is judged against it with the plugin's own procedure
(``calibration.judge_suite``: the cases' verdicts, each with the next runs of its session as its folds and re-measures,
and the levels), as A/A and with drops made by scaling the runs.  Reported per machine: the suites with a false
REGRESSION at any level, the share of cases gated (by their own verdict or their residual), the share of copy
cases gated, what a uniform drop and a 10 % drop of one band or one case do; the same without a prior (the
assumed spreads), for comparison; and the share of copy cases gated with a prior fitted on the machine's own runs,
the very sessions it judges (every op it holds): what a prior that already knew how this machine moves would gate.
A prior of other machines that gates more than that assumes the machine steadier than its own runs show.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from ..vocab import DEFAULT_ALPHA, DEFAULT_MAX_REMEASURES, DEFAULT_TOLERANCE
from .calibration import Case, fit_levels_of, judge_suite, models_of, new_counts, pct, rates, report_lines as _lines
from .prior import CorpusPrior, fit_corpus

__all__ = ["Machines", "one_session", "leave_one_machine_out", "machine_lines"]

#: the machines of a corpus: name -> its cases and the session of each run id (``prior.corpus_of_files``)
Machines = Mapping[str, tuple[list[Case], Mapping[str, int]]]


def one_session(cases: list[Case], session: Mapping[str, int], drops: Sequence[float], *,
                corpus: Optional[CorpusPrior] = None, tolerance: float = DEFAULT_TOLERANCE,
                alpha: float = DEFAULT_ALPHA, max_remeasures: int = DEFAULT_MAX_REMEASURES, per_case_every: int = 0,
                folds: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """Each session of ``cases`` as a one-session baseline (with the ``corpus`` prior, or none), every run of
    each other session judged against it, the session's next runs as its folds and re-measures."""
    order = {r: i for i, r in enumerate(sorted(session, key=lambda r: (session[r], r)))}
    sessions = sorted(set(session.values()))
    counts = new_counts(drops)
    copies = [0, 0]
    klass_of = {c.key: c.member.klass for c in cases if c.member is not None}
    per_suite: list[dict[str, Any]] = []
    for s in sessions:
        train = {c.key: [r for r in c.runs if session[r] == s] for c in cases}
        models = models_of(cases, train, dict(session), corpus=corpus)
        fit = fit_levels_of(cases, train, models, dict(session), corpus=corpus)
        for t in sessions:
            if t == s:
                continue
            held = sorted({r for c in cases for r in c.runs if session[r] == t}, key=order.__getitem__)
            for i, run in enumerate(held):
                rest = held[i + 1:] + held[:i]
                judged = [(c.key, *models[c.key], [c.runs[run]] + [c.runs[r] for r in rest if r in c.runs],
                           c.group) for c in cases if run in c.runs and c.key in models]
                if not judged:
                    continue
                k_of = {key: min(len(runs), (folds or {}).get(klass_of.get(key, ""), 1))
                        for key, _, _, runs, _ in judged}
                one = judge_suite(counts, judged, fit, drops, tolerance=tolerance, alpha=alpha,
                             max_remeasures=max_remeasures,
                             per_case=per_case_every > 0 and len(per_suite) % per_case_every == 0, folds=k_of)
                per_suite.append({"baseline_session": s, "session": t, "run": run, **one})
                copy_keys = [key for key, *_ in judged if "copies" in klass_of.get(key, "")]
                copies[1] += len(copy_keys)
                copies[0] += len(set(copy_keys) - set(one["not_gated"]))
    out = rates(counts)
    out["copy_gated_share"] = copies[0] / copies[1] if copies[1] else None
    return {"sessions": len(sessions), **out, "per_suite": per_suite}


def leave_one_machine_out(machines: Machines, drops: Sequence[float],
                          fit: Optional[Callable[[Machines], CorpusPrior]] = None, **kw: Any) -> dict[str, Any]:
    """Per machine with runs in two sessions or more: :func:`one_session` with the prior fitted on the other
    machines (``fit``: ``prior.fit_corpus``), without a prior, and with the prior of its own runs (``own_prior``,
    every class and op it holds trusted: a prior that already knew how the machine moves, fitted on the very
    sessions it then judges)."""
    fit = fit or fit_corpus
    out = {}
    for name, (cases, session) in machines.items():
        if len(set(session.values())) < 2:
            continue
        prior = fit({n: m for n, m in machines.items() if n != name})
        own = fit_corpus({name: (cases, session)}, min_machines=1)
        out[name] = {"prior": prior.to_document(), "with_prior": one_session(cases, session, drops, corpus=prior, **kw),
                     "without_prior": one_session(cases, session, drops, corpus=None, **kw),
                     "own_prior": one_session(cases, session, drops, corpus=own, **kw)}
    return out


def machine_lines(name: str, r: dict[str, Any]) -> list[str]:
    """What the command prints for one machine."""
    w, wo = r["with_prior"], r["without_prior"]
    trusted = [c["text"] for c in r["prior"]["classes"].values() if c["trusted"]]
    lines = [f"{name}: each of its {w['sessions']} sessions as a one-session baseline, the prior fitted on "
             f"{', '.join(r['prior']['machines']) or 'no other machine'}",
             *(f"  prior {t}" for t in trusted or ["trusted for no class"])]
    lines += [f"  {line}" for line in _lines("with the prior", w)]
    lines.append(f"  copy cases gated: {pct(w['copy_gated_share'])} with the prior, {pct(wo['copy_gated_share'])} "
                 f"without; false suites without the prior: {wo['false_alarm_suites']} of {wo['suites']}")
    own = r.get("own_prior")
    if own is not None:
        lines.append(f"  with a prior of its own runs: {pct(own['copy_gated_share'])} of the copy cases gated "
                     f"(false suites {own['false_alarm_suites']} of {own['suites']})")
    return lines
