"""What a command that renders a saved report says first (issue 47: one story per report): whose verdicts
it shows -- the run's stored verdicts (``show``, ``html``, ``plot``), or a judgement made now against a file
(``compare``, or a report that ``compare --json`` wrote) -- with what they say (``report.run.judgement``), and
which baseline it draws: the one stored with the report (the runs the verdicts used), the one given with
``--baseline`` fitted to the report's machine (``report.drawn.fitted_reference``), or none."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures
    from ..report.document import ReportDocument
    from ..report.drawn import FittedReference

__all__ = ["verdicts_story", "drawn_story"]


def verdicts_story(doc: "ReportDocument") -> str:
    """``the run's stored verdicts (failed: 20 failing cases of 20)``, or for a report ``gpucomm compare --json``
    wrote, ``the verdicts gpucomm compare made against baselines/h200.json (passed: ...)``."""
    from ..report.run import judgement, verdicts_source

    return f"{verdicts_source(doc)} ({judgement(doc).text()})"


def drawn_story(doc: "ReportDocument", fitted: Optional["FittedReference"],
                stored: Optional["BaselineFigures"]) -> str:
    """:func:`verdicts_story`, then the baseline drawn: ``--baseline``'s runs of the report's machine shape, the
    one stored with the report (as the run saw it), or none."""
    from ..units import plural

    head = verdicts_story(doc)
    if fitted is not None:
        return (f"{head}; drawn against {fitted.ref.describe()}, its {plural(fitted.figures.n_runs, 'run')} of "
                "this machine's shape (a comparison made now; the statuses stay the report's)")
    if stored is not None:
        return (f"{head}; drawn against the baseline {stored.name} as the run saw it ("
                f"{plural(stored.n_runs, 'run')} of this machine's shape, stored with the report)")
    return f"{head}; no baseline drawn (the report stores none: give --baseline B to draw one)"
