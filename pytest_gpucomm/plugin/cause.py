"""The session's cause tests: why a case that failed as REGRESSION got slower, when the environment changed.

For the first ``--gpucomm-cause`` regressions of the session (default ``vocab.DEFAULT_CAUSE_CASES``) while the
recorded environment differs from the baseline's (``Gate.env_diff``), the search of :mod:`pytest_gpucomm.gate.cause`
measures a case again in a fresh process (a copy) or a fresh process group (a collective) with the differing
variables set back (``Record.with_env``), each re-measure judged by its interval against the baseline and against
the slowed run (``gate.cause.Yardstick``, from the case's baseline model: ``Gate.case_model``), and the verdict
gains a line: the variable that brought it back (or did in part), or that none did.  The verdict itself does
not change; the JSON report keeps the result in the verdict's ``cause`` with the line it added (``line``), which
``gpucomm compare`` and the views print again.  Two moments:

* at a test, a case whose own verdict is REGRESSION (:meth:`CauseTests.explain`);
* at the session's end, each level that failed (a class offset, an op band, a case residual: a change of the
  environment most often moves a whole class, and then no case alone fails) and that no case it covers
  explained already: its most slowed case is tested, and the level's line and every covered case's message
  gain the cause (:meth:`CauseTests.explain_levels`).

In a job across nodes the variables are each node's (``gate.cause.case_env_changes``): a node's copy (its row
names the node: ``info["node"]``) is tested on that node's, measured again on that node alone; a job-wide case on
every node's, set back on every rank.  The line names the node where the variables are one node's.

A recording run (``--gpu-baseline-save``) makes no cause tests: its verdicts do not fail.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from ..vocab import Status

if TYPE_CHECKING:
    from ..gate import Gate
    from ..gate.cause import CauseResult, EnvChange, Yardstick
    from ..gate.levels import RunLevels
    from ..measurement import Record

__all__ = ["CauseTests"]


class CauseTests:
    """The session's budget of cause tests and how each is run.

    Of the session's settings: ``cause_cases`` (--gpucomm-cause, the budget), ``baseline_save``
    (--gpu-baseline-save: a recording run tests no cause) and ``tolerance`` (the gate's, a cause test's
    yardstick)."""

    def __init__(self, cause_cases: int, baseline_save: bool, tolerance: float) -> None:
        self.cause_cases = cause_cases
        self.baseline_save = baseline_save
        self.tolerance = tolerance
        self.left = cause_cases
        self.ran = 0

    def explain(self, gate: "Gate", record: "Record", verdict: dict[str, Any]) -> Optional["CauseResult"]:
        """The cause test of ``record`` whose verdict (``Verdict.to_dict``) is ``verdict``, when it is due
        (a REGRESSION, a changed environment, a way to measure with it, budget left); its line is added to
        the verdict's message and the result kept in ``verdict["cause"]``.  None when no test was due."""
        from ..gate.cause import CauseResult, Remeasured, find_cause

        if verdict.get("status") != Status.REGRESSION.value or self.baseline_save:
            return None
        changes = _changes(gate, record)
        if not changes or record.with_env is None:
            return None
        if self.left <= 0:
            result = CauseResult(changes=tuple(changes), skipped=(
                f"the session's {self.cause_cases} cause tests were used (--gpucomm-cause)"))
        else:
            from ..gate.decision import run_location

            self.left -= 1
            self.ran += 1
            base = float(verdict.get("baseline_gbps") or math.nan)
            measure, nodeid = record.with_env, record.nodeid

            def remeasured(env: Mapping[str, Optional[str]]) -> Remeasured:
                loc = run_location(measure(env).samples_gbps, f"{nodeid}: the cause test's re-measure")
                return Remeasured(loc.gbps / base, loc.se2)

            result = find_cause(changes, remeasured, _yardstick(gate, verdict, self.tolerance))
        line = result.text()
        verdict["cause"] = dict(result.to_dict(), line=line)
        verdict["message"] = f"{verdict.get('message', '')}\n  {line}"
        return result

    def explain_levels(self, gate: "Gate", records: Sequence["Record"], levels: Optional["RunLevels"]) -> list[str]:
        """The cause of each failing level (class offsets first, then bands, then case residuals) that no case it
        covers has explained: its most slowed case measured as :meth:`explain` does, within the budget.  Each
        covered case's message gains the line; returns one summary line per level tested."""
        from ..gate.cause import level_cause_line, untested_levels_line

        if levels is None or self.baseline_save:
            return []
        by_key = {str(r.baseline["case"]): r for r in records if r.baseline and r.baseline.get("case")}
        order = {"class": 0, "band": 1, "case": 2}
        lines, untested = [], 0
        for level in sorted(levels.failed, key=lambda v: order.get(v.level, 3)):
            covered = [by_key[k] for k in level.keys if k in by_key]
            if not covered or any(_explained(r) for r in covered):
                continue
            tried = [r for r in covered if r.with_env is not None and r.baseline is not None]
            if not tried:
                continue
            worst = min(tried, key=lambda r: float((r.baseline or {}).get("ratio") or 1.0))
            verdict = dict(worst.baseline or {}, status=Status.REGRESSION.value)
            result = self.explain(gate, worst, verdict)
            if result is None:
                continue
            text = result.text()
            node = (getattr(worst.measurement, "info", None) or {}).get("node")
            on = f"{worst.nodeid}, node {node}" if isinstance(node, int) else worst.nodeid  # a node's row of a job
            line = f"{text} (the {level.level_name} {level.name}, tested on {on})"
            for r in covered:
                if r.baseline is None:
                    continue
                r.baseline["cause"] = dict(result.to_dict(), level=level.name, level_name=level.level_name,
                                           measured=worst.nodeid, line=line)
                r.baseline["message"] = f"{r.baseline.get('message', '')}\n  {line}"
            if result.skipped:
                untested += 1
            else:
                lines.append(level_cause_line(level.level_name, level.name, text))
        if untested:
            lines.append(untested_levels_line(untested, f"the session's {self.cause_cases} cause tests were "
                                                        "used (--gpucomm-cause)"))
        return lines


def _changes(gate: "Gate", record: "Record") -> list["EnvChange"]:
    """The variables the cause test of ``record`` may set back (``gate.cause.case_env_changes``): in a job across
    nodes, a node-local case's (a copy measured on node N: ``info["node"]``) are node N's, set back on that node
    alone; a job-wide case's are every node's, set back on every rank."""
    from ..gate.cause import case_env_changes

    node = (getattr(record.measurement, "info", None) or {}).get("node")
    baseline = gate.baseline_fingerprint if gate.baseline is not None else None
    return case_env_changes(baseline, gate.fingerprint, node if isinstance(node, int) else None)


def _yardstick(gate: "Gate", verdict: Mapping[str, Any], tolerance: float) -> "Yardstick":
    """What the cause test of the case of ``verdict`` judges its re-measures against (``gate.cause.Yardstick``):
    the spreads of the case's baseline model (``Gate.case_model``), else the verdict's own prediction spread
    (one run's: its sd over the runs it pooled, times their number), else none beyond the samples'."""
    from ..gate.cause import Yardstick, yardstick

    tol = float(verdict.get("tolerance") or tolerance)
    slowed = float(verdict.get("ratio") or 1.0 - tol)
    k = int(verdict.get("runs_pooled") or 1)
    key = verdict.get("case")
    fitted = gate.case_model(str(key)) if key else None
    if fitted is not None:
        return yardstick(fitted[0], fitted[1], slowed, tol, k)
    sd = verdict.get("prediction_sd")
    if isinstance(sd, (int, float)) and math.isfinite(sd):
        one = float(sd) ** 2 * k
        return Yardstick(slowed, tol, one, one * (1.0 + 1.0 / k), source="the verdict's prediction spread")
    return Yardstick(slowed, tol, 0.0, 0.0, source="the re-measure's samples")


def _explained(r: "Record") -> bool:
    cause = (r.baseline or {}).get("cause")
    return isinstance(cause, Mapping) and not cause.get("skipped")
