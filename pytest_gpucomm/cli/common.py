"""What the ``gpucomm`` subcommands share: the error that exits 2, reading a saved report into its document
and what it is compared with, the baseline folder, and the sections ``show`` and ``compare`` both print."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..vocab import DEFAULT_BASELINE_DIR

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures
    from ..report.document import ReportDocument
    from ..report.saved import Reference

__all__ = ["CommandError", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "report_parser", "add_baseline_dir",
           "baseline_dirs", "load_document", "load_report_and_baseline", "load_reference", "hardware_line",
           "matrix_lines", "checked_statuses"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """Bad input: printed as ``gpucomm: error: <message>``, exit status 2."""


def report_parser(sub: Any, name: str, help: str, baseline_help: str,
                  report_help: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser of a subcommand that reads one report (REPORT) and may take a baseline (``--baseline B``);
    the caller adds its own options, then :func:`add_baseline_dir`."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.add_argument("report", metavar="REPORT", help=report_help)
    p.add_argument("--baseline", metavar="B", help=baseline_help)
    return p


def add_baseline_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline-dir", metavar="DIR",
                   help="where baseline NAMEs are looked up (default: $GPUCOMM_BASELINE_DIR, else ./baselines)")


def baseline_dirs(args: argparse.Namespace) -> list[Path]:
    d = getattr(args, "baseline_dir", None) or os.environ.get("GPUCOMM_BASELINE_DIR") or DEFAULT_BASELINE_DIR
    return [Path(d)]


def load_document(path: str) -> "ReportDocument":
    """The saved report ``path`` as its document (``ReportDocument.load``)."""
    from ..report.document import ReportDocument

    return ReportDocument.load(path)


def load_report_and_baseline(args: argparse.Namespace) -> tuple["ReportDocument", Optional["Reference"]]:
    """The document of ``args.report`` and, with ``--baseline``, what it names (:func:`load_reference`)."""
    doc = load_document(args.report)
    return doc, load_reference(args.baseline, args, doc) if args.baseline else None


def load_reference(spec: str, args: argparse.Namespace, doc: Optional["ReportDocument"] = None) -> "Reference":
    """What ``spec`` names (a baseline NAME, ``auto``, a baseline file or another report:
    ``saved.load_reference``), ``auto`` taken for the hardware of ``doc``."""
    from ..report.saved import load_reference as load

    model = (doc.fingerprint or {}).get("model") if doc is not None and spec.strip() == "auto" else None
    return load(spec, search_dirs=baseline_dirs(args), detected_model=model)


def checked_statuses(doc: "ReportDocument", where: str) -> None:
    """CommandError naming the row whose status is no word of ``vocab.Status``."""
    from ..vocab import Status

    for i, row in enumerate(doc.rows):
        try:
            Status(row.status)
        except ValueError:
            raise CommandError(f"{where}: invalid report: at $.rows[{i}].status ({row.test}): "
                               f"unknown status {row.status!r}") from None


def hardware_line(doc: "ReportDocument") -> str:
    from ..report.plots import context_line

    return "hardware: " + context_line(doc)


def matrix_lines(doc: "ReportDocument", baseline: Optional["BaselineFigures"],
                 sizes: Optional[Sequence[str]] = None, width: int = 120) -> list[str]:
    """Every copy matrix of the document (``terminal.matrix_section``, fitted to ``width``), against
    ``baseline`` when given, else against the figures the run's verdicts were judged against; at ``sizes``
    (``--matrix-size``) when given."""
    from ..report.terminal import matrix_section
    from ..units import format_size, parse_size

    asked = None
    if sizes:
        try:
            asked = [parse_size(v, "--matrix-size") for v in sizes]
        except ValueError as e:
            raise CommandError(str(e)) from None
    lines = matrix_section(doc, baseline, sizes=asked, width=width)
    if asked and not lines:
        measured = sorted({r.measurement.size_bytes for r in doc.rows if r.measurement.kind == "copy"})
        from ..report.text import fit

        at = ", ".join(format_size(s) for s in measured) or "no size"
        lines = fit([f"gpucomm copy matrices: none at {', '.join(format_size(s) for s in asked)} (--matrix-size); "
                     f"the report's copies were measured at {at}"], width)
    return lines
