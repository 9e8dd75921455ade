"""The gate, run again on a saved JSON report: ``gpucomm compare BASELINE REPORT``.

A report made on the GPU machine can be judged elsewhere (a CI job with no GPU, a laptop), against the
baseline it was judged against in the run, another baseline file, or another report (taken as a one-run
baseline, ``saved.report_as_baseline``).  It is the same gate, not a copy of it: a :class:`~pytest_gpucomm.gate.Gate`
built with the run's settings, fed the report's measurements in its order, then the run judged at the
gate's levels (class offsets, op bands, case residuals).

**The same verdicts as the run.**  The run's settings come from the report (``settings``: tolerance,
alpha, strict, tail tolerance; each can be overridden), a test's own ``@bandwidth(tolerance=...,
tail_tolerance=...)`` from the tolerances its row's verdict recorded, the layout of a job across nodes from
the report's ``launch`` section, and the count of comparisons from the report's test ids.  Where the run
measured a flagged case again, the report keeps each re-measure whole (its samples and single ops, under
``row["baseline"]["remeasures"][i]["measurement"]``): the gate here asks for the same re-measures in the
same order and gets them back from the report, so against the same baseline it comes to the same verdict.
A re-measure the report does not hold (another baseline flags a case the run did not) cannot be made
here: that case is judged on what the report holds, its first run and the re-measures it has, and its
verdict says so (``details["offline"]``).

What the run checked beyond the gate -- a test's own thresholds (``@bandwidth(min_gbps=...)``), its
assertions -- is not re-checked: the report keeps the outcome (``row["status"]``), not the test.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from ..gate import Gate, GateSettings, Verdict
from ..gate.prior import PRIOR_FILE
from ..gate.run_levels import judge_levels
from ..measurement import Measurement, Remeasure
from ..report.saved import Reference, measurements_of
from ..vocab import DEFAULT_ALPHA, DEFAULT_TAIL_TOLERANCE, DEFAULT_TOLERANCE, MAX_FOLDS, Status

if TYPE_CHECKING:
    from ..gate.levels import RunLevels

__all__ = ["Regated", "RegatedRow", "regate", "OFFLINE_NOTE"]

#: what a verdict says when the gate wanted a re-measure that the report does not hold
OFFLINE_NOTE = ("the gate would measure this case again, and the report holds no further re-measure of it: "
                "judged on what the report holds")


@dataclass
class RegatedRow:
    test: str
    measurement: Measurement
    verdict: Verdict
    run_status: Optional[str]  # the verdict the run gave (row["baseline"]["status"]), None where it had none


@dataclass
class Regated:
    """The gate's verdicts on a saved report: per row, the run at the levels, the header lines."""

    rows: list[RegatedRow]
    levels: Optional["RunLevels"]  # None where no row was compared with measured runs
    header: list[str]
    settings: dict[str, Any]
    reference: Reference
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A verdict that fails a test (REGRESSION, TAIL, FLOOR, and with strict NEW / NOT GATED), or a
        regression at a level."""
        return any(r.verdict.failed for r in self.rows) or bool(self.levels is not None and self.levels.failed)


class _Replay:
    """The recorded re-measures of one row, handed back one by one as the gate asks for them."""

    def __init__(self, recorded: list[Mapping[str, Any]]) -> None:
        self.recorded = [a for a in recorded if isinstance(a, Mapping) and isinstance(a.get("measurement"), Mapping)]
        self.used = 0
        self.wanted_more = False

    def __call__(self) -> Remeasure:
        if self.used >= len(self.recorded):
            self.wanted_more = True
            raise _NoMoreRecorded()
        a = self.recorded[self.used]
        self.used += 1
        return Remeasure(Measurement.from_dict(dict(a["measurement"])), bool(a.get("fresh", False)),
                         str(a.get("how", "")) + " (replayed from the report)")


class _NoMoreRecorded(Exception):
    pass


def _folds_of(recorded: Mapping[str, Any]) -> Callable[[int], Optional[Measurement]]:
    """The row's recorded folds (its verdict's ``fold_runs``), handed back by number as the gate asks; None
    past the last (the gate judges on the runs the report holds)."""
    runs = [a["measurement"] for a in (recorded.get("fold_runs") or [])
            if isinstance(a, Mapping) and isinstance(a.get("measurement"), Mapping)]

    def fold(i: int) -> Optional[Measurement]:
        return Measurement.from_dict(dict(runs[i - 1])) if 1 <= i <= len(runs) else None

    return fold


def _number(settings: Mapping[str, Any], key: str, default: float) -> Any:
    v = settings.get(key)
    return default if v is None else v


def regate(report: Mapping[str, Any], reference: Reference, *, tolerance: Optional[float] = None,
           alpha: Optional[float] = None, strict: Optional[bool] = None,
           tail_tolerance: Optional[float] = None, where: str = "",
           search_dirs: tuple[Path, ...] = ()) -> Regated:
    """Judge every row of a checked ``report`` against ``reference`` (see the module doc).  ``tolerance``,
    ``alpha``, ``strict`` and ``tail_tolerance`` override the run's, for every row (a test's own tolerance
    too).  Raises ReportError / BaselineError on unreadable input."""
    from ..gate.store import to_baseline

    run = dict(report.get("settings") or {})
    gs = GateSettings(
        spec=str(reference.path), save=False, search_dirs=tuple(search_dirs),
        tolerance=float(tolerance if tolerance is not None else _number(run, "tolerance", DEFAULT_TOLERANCE)),
        alpha=float(alpha if alpha is not None else _number(run, "alpha", DEFAULT_ALPHA)),
        strict=bool(strict if strict is not None else run.get("strict", False)),
        tail_tolerance=float(tail_tolerance if tail_tolerance is not None
                             else _number(run, "tail_tolerance", DEFAULT_TAIL_TOLERANCE)),
        folds=MAX_FOLDS,  # as many as each row recorded (a report of an earlier version: none)
        prior_path=PRIOR_FILE,
    )
    gate = Gate(gs)
    gate.layout = str(((report.get("launch") or {}).get("layout")) or "")
    pairs = measurements_of(report, where)
    gate.use(reference.path, to_baseline(reference.path, reference.doc), dict(report.get("fingerprint") or {}),
             {t for t, _ in pairs})
    gate.preview(pairs)
    out: list[RegatedRow] = []
    notes: list[str] = []
    for row, (test, m) in zip(report["rows"], pairs):
        recorded = row.get("baseline") if isinstance(row.get("baseline"), Mapping) else {}
        tol = tolerance if tolerance is not None else recorded.get("tolerance")
        recorded_tail = recorded.get("tail")
        tail = recorded_tail if isinstance(recorded_tail, Mapping) else {}
        tail_tol = tail_tolerance if tail_tolerance is not None else tail.get("tolerance")
        replay = _Replay(list(recorded.get("remeasures") or []))
        fold = _folds_of(recorded)
        try:
            v = gate.judge(test, m, None if tol is None else float(tol), replay,
                           None if tail_tol is None else float(tail_tol), fold)
        except _NoMoreRecorded:
            # judged again on what the report holds: the first run and the re-measures it kept
            # (the same gate, its fitted models kept, with only as many re-measures as the report holds)
            held = _Replay(replay.recorded)
            gate.settings = dataclasses.replace(gs, max_remeasures=len(held.recorded))
            try:
                v = gate.judge(test, m, None if tol is None else float(tol), held if held.recorded else None,
                               None if tail_tol is None else float(tail_tol), fold)
            finally:
                gate.settings = gs
            v.details["offline"] = OFFLINE_NOTE
            first, sep, rest = v.message.partition("\n")  # on the verdict's line, not on a line under it
            v.message = f"{first} ({OFFLINE_NOTE})" + sep + rest
            notes.append(f"{test}: {OFFLINE_NOTE}")
        out.append(RegatedRow(test, m, v, recorded.get("status") if recorded else None))
    verdicts = [r.verdict.to_dict() for r in out]
    levels = judge_levels(gate.fitted(), verdicts, gate.settings) if gate.baseline is not None else None
    if levels is not None:  # the verdicts after the levels (RunLevels.update)
        for r in out:
            status, r.verdict.message, extra = levels.update(r.verdict.details.get("case"), r.verdict.status.value,
                                                             r.verdict.message)
            r.verdict.details.update(extra)
            r.verdict.status = Status(status)
    settings = {k: v for k, v in dataclasses.asdict(gs).items()
                if k not in ("search_dirs", "shipped_dir", "prior_path")}
    settings["prior"] = str(gs.prior_path) if gs.prior_path is not None else None
    return Regated(rows=out, levels=levels, header=gate.header_lines(), settings=settings,
                   reference=reference, notes=notes)
