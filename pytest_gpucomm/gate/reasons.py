"""The words of the decision: what a :class:`~pytest_gpucomm.gate.decision.Comparison` says about its case.

The statistics (:mod:`pytest_gpucomm.gate.decision`) return numbers and a
:class:`~pytest_gpucomm.vocab.Status`; this module is the one place that turns them into the reason a verdict
gives (:func:`comparison_reason`), so that the wording can change without touching the rule, and the rule
without touching the wording.  The texts are pinned by the tests and the verdicts' messages: change them
here only on purpose.
"""

from __future__ import annotations

from ..units import plural
from ..vocab import Status
from .decision import DETECTION_POWER, GATED_DROP_FACTOR, Comparison

__all__ = ["comparison_reason", "decision_word", "FLOOR_WORDS"]

#: what each floor of :class:`~pytest_gpucomm.gate.decision.Floors` is, in a verdict's words
FLOOR_WORDS = {"runs_now": "today's runs of the case disagree", "samples": "the spread of a run's samples",
               "cases": "how far this run's cases of its class scatter"}

#: the decision's own lower-case word for each status a comparison gives (the calibration's tables count them)
_WORDS = {Status.OK: "ok", Status.REGRESSION: "regression", Status.IMPROVED: "improved",
          Status.NOT_GATED: "not gated"}


def decision_word(status: Status) -> str:
    """The decision's word for a comparison's status: "ok", "regression", "improved" or "not gated"."""
    return _WORDS[status]


def _bound(c: Comparison) -> str:
    """The ratio and the bounds that decide (:attr:`Comparison.bounds_text`), with their quantile and degrees
    of freedom: ``bandwidth is 0.97x of the baseline, bounds [0.94, 1.01] at level 0.0005 a side (quantile
    3.29, 40 df)``."""
    return (f"bandwidth is {c.ratio:.3g}x of the baseline, {c.bounds_text} (quantile {c.quantile:.2f}, "
            f"{c.spread.df:.0f} df)")


def _baseline(c: Comparison) -> str:
    return f"{plural(c.baseline_runs, 'baseline run')} in {plural(c.baseline_sessions, 'session')}"


def _not_gated(c: Comparison) -> str:
    """Neither a regression nor an improvement, and the case cannot catch a drop of twice the tolerance: its
    spread is assumed (with one run of today as the only evidence of a drop, step 5a), or too wide.  A case
    held back by step 5a prints its ratio, not its bounds: they are below the tolerance and do not decide."""
    sp, tol = c.spread, f"{c.tolerance:.0%}"
    est = f"{_bound(c)}: not shown beyond the {tol} tolerance, but"
    if sp.assumed and c.beyond:
        return (f"bandwidth is {c.ratio:.3g}x of the baseline, but not judged: with its {sp.assumed} spread assumed, "
                "one run of today is no evidence, whatever its bounds (a second run in a new process state would "
                "have to agree; none was measured)")
    if sp.assumed:
        return (f"{est} not judged: with {_baseline(c)} and no prior for its class, its {sp.assumed} spread is "
                "assumed, not measured"
                + (f" (raised to what the runs show: {FLOOR_WORDS[sp.floor]})" if sp.floor else "")
                + "; record runs in more sessions (other boots or days)")
    return (f"{est} with {_baseline(c)} this case only catches drops of {c.detectable_drop:.1%} or more "
            f"({DETECTION_POWER:.0%} of the time; a drop of {GATED_DROP_FACTOR * c.tolerance:.0%} could pass)"
            + (f", its spread raised to what the runs show ({FLOOR_WORDS[sp.floor]})" if sp.floor else "")
            + "; record more baseline runs in more sessions, or raise the tolerance")


def comparison_reason(c: Comparison) -> str:
    """Why ``c`` has its status, in one sentence with the figures that decided it (DECISION_RULE step 4): the
    ratio beside the bounds that decide, never another interval."""
    if c.status is Status.REGRESSION:
        return (f"bandwidth is {c.ratio:.3g}x of the baseline, {c.bounds_text} (alpha over cases and looks; quantile "
                f"{c.quantile:.2f}, {c.spread.df:.0f} df; {plural(c.runs_now, 'independent run')} now, "
                f"{_baseline(c)}): even its upper bound is below the {c.tolerance:.0%} tolerance limit "
                f"{1.0 - c.tolerance:.3g}x")
    if c.status is Status.IMPROVED:
        return (f"{_bound(c)}: even its lower bound is above {1.0 + c.tolerance:.3g}x; consider recording a new "
                "baseline")
    if c.status is Status.NOT_GATED:
        return _not_gated(c)
    return (f"{_bound(c)}: not shown beyond the {c.tolerance:.0%} tolerance (catches drops of "
            f"{c.detectable_drop:.1%} or more)")
