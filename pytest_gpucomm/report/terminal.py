"""The terminal's view of a report document: the "gpucomm results" section a pytest session ends with, and
the sections ``gpucomm show`` and ``compare`` print of a saved report (the copy matrices, the curves).

It renders a document (:class:`~.document.ReportDocument`) and, where the document is compared with a
baseline file, that file's figures (``analysis.baseline_figures.BaselineFigures``); the session adds the
lines that are not the run's report and that its header did not print: the hardware and the gate's header
where this process did not print them (a pytest-xdist controller), the notes of what the session wrote.

Every renderer takes the ``width`` to fit (``text``): the table is laid out to it
(``report.table``), a text line is wrapped at spaces (never inside a figure), a curve is one short line.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from ..units import describe_duration, format_size
from .document import ReportDocument
from ..units import format_gbps, format_ratio
from .run import (CURVE_LIMIT, counts_line, gated_of, level_lines, sensitivity_lines, straggler_lines,
                  table_lines)
from ..text import DEFAULT_WIDTH, fit

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures

__all__ = ["summary_lines", "matrix_section", "curve_section", "curve_lines", "curve_entries", "curve_cells",
           "curve_line", "CURVES_HEADING"]

#: the heading of the curves section of the terminal summary and of ``gpucomm show``
CURVES_HEADING = ("gpucomm curves (floor: the median time at the smallest size; 90%: the size reaching 90 % of the "
                  "peak; fit: latency + size / bandwidth, where one line fits the sweep; vs baseline: today's "
                  "first runs / the baseline's medians, not the verdicts' ratio, which pools the re-measures):")


def matrix_section(doc: ReportDocument, baseline: Optional["BaselineFigures"] = None, *,
                   sizes: Optional[Iterable[int]] = None, limit: Optional[int] = None,
                   width: int = DEFAULT_WIDTH) -> list[str]:
    """The copy matrices of the document's rows (``matrices.report_matrix_lines``), against ``baseline``
    when given, else against the figures the rows' verdicts were judged against; each matrix in slices of
    the destinations that fit ``width``, its headings wrapped."""
    from ..analysis.matrices import report_matrix_lines

    lines = report_matrix_lines(doc, baseline, sizes=sizes, limit=limit, width=width)
    return [out for line in lines for out in (fit([line], width) if not line.startswith("    ") else [line])]


def curve_entries(doc: ReportDocument, baseline: Optional["BaselineFigures"] = None) -> Sequence[Mapping[str, object]]:
    """The curves section's entries (``curves.curve_report``): against ``baseline`` when given, else the
    document's own (or computed from its rows, for a report written before it had the section)."""
    from ..analysis.curves import curve_report

    if baseline is None and doc.curves is not None:
        return [c.data for c in doc.curves]
    return curve_report(doc.sweeps, list(baseline.sweeps.values()) if baseline is not None else None)


def _number(value: Any) -> Optional[float]:
    """A figure of a saved report's curves, None where it is not a positive finite number (a hand-edited or
    damaged report: what cannot be read is left out, as what is not known is)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def _size(value: object) -> str:
    x = _number(value)
    return format_size(int(x)) if x is not None else ""


def curve_cells(entry: Mapping[str, Any]) -> dict[str, str]:
    """What is known of one sweep's curve (an entry of the curves section), by column: "sweep", "floor",
    "peak", "90%", "fit", "vs baseline"; "" where it is not known (a peak still rising has no 90 % point, a
    sweep that one latency and one bandwidth do not describe has no fit) or cannot be read."""
    entry = entry if isinstance(entry, Mapping) else {}
    model: Mapping[str, Any] = entry["model"] if isinstance(entry.get("model"), Mapping) else {}
    cells = {"sweep": str(entry.get("label") or entry.get("sweep") or ""), "floor": "", "peak": "", "90%": "",
             "fit": "", "vs baseline": ""}
    floor, peak = _number(model.get("latency_floor_s")), _number(model.get("peak_gbps"))
    if floor is not None:
        cells["floor"] = " at ".join(filter(None, [describe_duration(floor), _size(model.get("latency_floor_size"))]))
    if peak is not None:
        cells["peak"] = (" at ".join(filter(None, [f"{format_gbps(peak)} GB/s", _size(model.get("peak_size"))]))
                         + (", still rising" if model.get("still_rising") is True else ""))
    crossings = model.get("crossings")
    for c in crossings if isinstance(crossings, list) else []:
        if isinstance(c, Mapping) and _number(c.get("share")) == 0.9:
            cells["90%"] = _size(c.get("size_bytes"))
    fit_: Mapping[str, Any] = model["fit"] if isinstance(model.get("fit"), Mapping) else {}
    lat, bw = _number(fit_.get("latency_s")), _number(fit_.get("bandwidth_gbps"))
    if lat is not None and bw is not None:
        cells["fit"] = f"{describe_duration(lat)} + size / {format_gbps(bw)} GB/s"
    elif lat is not None:
        cells["fit"] = f"latency {describe_duration(lat)}"
    elif bw is not None:
        cells["fit"] = f"bandwidth {format_gbps(bw)} GB/s"
    c = entry.get("comparison")
    if isinstance(c, Mapping) and c:
        listed: list[object] = c["ratios"] if isinstance(c.get("ratios"), list) else []
        ratios = [(_number(r[0]), _number(r[1])) for r in listed if isinstance(r, list) and len(r) == 2]
        known = [(s, r) for s, r in ratios if s is not None and r is not None]
        parts = [f"{name} {format_ratio(x, 2)}x" for name, x in (("peak", _number(c.get("peak_ratio"))),
                                                     ("floor", _number(c.get("latency_ratio")))) if x is not None]
        if known:
            size, ratio = min(known, key=lambda sr: sr[1])
            parts.append(f"worst {format_size(int(size))} {format_ratio(ratio, 2)}x")
        cells["vs baseline"] = ", ".join(parts) or "no size in common"
    return cells


def curve_line(entry: Mapping[str, object]) -> str:
    """One sweep's curve in one line: ``copy, cuda:0->cuda:1: floor 2.4 us, peak 395.9 GB/s at 1 GiB, 90% at 14
    MB, fit 2.36 us + size / 392.5 GB/s; vs baseline: peak 0.99x, floor 1.01x, worst 4 KiB 0.97x`` (the floor
    is at the sweep's smallest size: the heading says so)."""
    cells = curve_cells(entry)
    floor = cells["floor"].split(" at ")[0]
    parts = [f"floor {floor}"] if floor else []
    parts += [f"peak {cells['peak']}"] if cells["peak"] else []
    parts += [f"90% at {cells['90%']}"] if cells["90%"] else []
    parts += [f"fit {cells['fit']}"] if cells["fit"] else []
    line = f"{cells['sweep']}: " + ", ".join(parts)
    return line + (f"; vs baseline: {cells['vs baseline']}" if cells["vs baseline"] else "")


def curve_section(doc: ReportDocument, baseline: Optional["BaselineFigures"] = None, *,
                  limit: Optional[int] = None, width: int = DEFAULT_WIDTH) -> list[str]:
    """The curves section of the document (:func:`curve_entries`, :func:`curve_lines`)."""
    return curve_lines(curve_entries(doc, baseline), limit=limit, width=width)


def curve_lines(entries: Sequence[Mapping[str, object]], *, limit: Optional[int] = None,
                width: int = DEFAULT_WIDTH) -> list[str]:
    """The curves section of ``entries``: a heading, then a line per sweep (:func:`curve_line`, wrapped to
    ``width``), at most ``limit`` sweeps (the rest counted); [] where there is no sweep."""
    if not entries:
        return []
    shown = entries[:limit] if limit else entries
    lines = [CURVES_HEADING] + [f"  {curve_line(e)}" for e in shown]
    if len(shown) < len(entries):
        lines.append(f"  ... and {len(entries) - len(shown)} more sweeps (the JSON report's \"curves\" has every one)")
    return fit(lines, width)


def summary_lines(doc: ReportDocument, baseline: Optional["BaselineFigures"] = None, *,
                  headline: Optional[str] = None, gate_header: Sequence[str] = (),
                  notes: Sequence[str] = (), width: int = DEFAULT_WIDTH, full: bool = False) -> list[str]:
    """The "gpucomm results" section of a session, fitted to ``width``: the hardware (``headline``, where the
    session's header did not name it), the table (compact, or with ``full`` every column) and its legend,
    the copy matrices (against ``baseline``, the file the run was judged against), the curves, the
    stragglers; where the rows were judged the verdicts' counts, the gate's header (``gate_header``, where
    the session's header did not print it), what the gate can catch and the run at the levels; then
    ``notes``."""
    from ..analysis.matrices import MATRIX_LIMIT

    lines = fit([f"hardware: {headline}"], width) if headline else []
    lines += table_lines(doc.rows, width, full=full)
    lines += matrix_section(doc, baseline, limit=MATRIX_LIMIT, width=width)
    lines += curve_section(doc, limit=CURVE_LIMIT, width=width)
    lines += straggler_lines(doc, width=width)
    if doc.gated:
        judged = [r for r in doc.rows if r.verdict is not None]
        lines += fit([counts_line(doc.rows), *gate_header], width)
        lines += sensitivity_lines([r.verdict for r in judged if r.verdict is not None], [r.test for r in judged],
                                   gated=gated_of(doc), width=width)
        levels = doc.levels
        lines += level_lines(levels.run_levels() if levels is not None else None, doc.test_of_case(), width=width)
    return lines + fit(notes, width)
