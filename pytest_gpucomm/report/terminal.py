"""The terminal's view of a report document: the "gpucomm results" section a pytest session ends with, and
the sections ``gpucomm show`` and ``compare`` print of a saved report (the copy matrices, the curves).

It renders a document (:class:`~.document.ReportDocument`) and, where the document is compared with a
baseline file, that file's figures (``analysis.baseline_figures.BaselineFigures``); the session adds the
lines that are not the run's report: the hardware as detected, the gate's header, the notes of what the
session wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from .document import ReportDocument
from .run import CURVE_LIMIT, counts_line, level_lines, sensitivity_lines, straggler_lines, table_lines

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures

__all__ = ["summary_lines", "matrix_section", "curve_section"]


def matrix_section(doc: ReportDocument, baseline: Optional["BaselineFigures"] = None, *,
                   sizes: Optional[Iterable[int]] = None, limit: Optional[int] = None) -> list[str]:
    """The copy matrices of the document's rows (``matrices.report_matrix_lines``), against ``baseline``
    when given, else against the figures the rows' verdicts were judged against."""
    from ..analysis.matrices import report_matrix_lines

    return report_matrix_lines(doc, baseline, sizes=sizes, limit=limit)


def curve_section(doc: ReportDocument, baseline: Optional["BaselineFigures"] = None, *,
                  limit: Optional[int] = None) -> list[str]:
    """The curves section: against ``baseline`` when given, else the document's own (or computed from its
    rows, for a report written before it had the section)."""
    from ..analysis.curves import curve_lines, curve_report
    from ..analysis.sweeps import sweeps

    entries: Sequence[Mapping[str, Any]]
    if baseline is None and doc.curves is not None:
        entries = [c.data for c in doc.curves]
    else:
        entries = curve_report(sweeps([(r.test, r.measurement) for r in doc.rows]),
                               list(baseline.sweeps.values()) if baseline is not None else None)
    return curve_lines(entries, limit=limit)


def summary_lines(doc: ReportDocument, baseline: Optional["BaselineFigures"] = None, *,
                  headline: Optional[str] = None, gate_header: Sequence[str] = (),
                  notes: Sequence[str] = ()) -> list[str]:
    """The "gpucomm results" section of a session: the hardware (``headline``), the table and its legend, the
    copy matrices (against ``baseline``, the file the run was judged against), the curves, the stragglers;
    where the rows were judged the verdicts' counts, the gate's header (``gate_header``), what the gate can
    catch and the run at the levels; then ``notes``."""
    from ..analysis.matrices import MATRIX_LIMIT

    lines = [f"hardware: {headline}"] if headline else []
    lines += table_lines(doc.rows)
    lines += matrix_section(doc, baseline, limit=MATRIX_LIMIT)
    lines += curve_section(doc, limit=CURVE_LIMIT)
    lines += straggler_lines(doc)
    if doc.gated:
        judged = [r for r in doc.rows if r.verdict is not None]
        lines.append(counts_line(doc.rows))
        lines += gate_header
        lines += sensitivity_lines([r.verdict for r in judged if r.verdict is not None], [r.test for r in judged])
        levels = doc.levels
        lines += level_lines(levels.run_levels() if levels is not None else None, doc.test_of_case())
    return lines + list(notes)
