"""``gpucomm show REPORT [--baseline B] [--matrix-size SIZE] [--no-curves]``: the table, the verdicts, the
run at the levels, the copy matrices and the curves of a saved report."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from .common import (EXIT_OK, add_baseline_dir, checked_statuses, hardware_line, load_report_and_baseline,
                     matrix_lines, report_parser)

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = report_parser(sub, "show", "the table, verdicts, copy matrices and curves of a saved JSON report",
                      "compare the copy matrices and curves with this baseline (NAME, file or report)",
                      "a JSON report (pytest --gpucomm-json=REPORT)")
    p.add_argument("--no-curves", action="store_true", help="leave out the curves section")
    p.add_argument("--matrix-size", metavar="SIZE", action="append",
                   help="print the copy matrices at SIZE (e.g. 4KiB; repeat for several; default: the largest size "
                        "where the most pairs were measured)")
    add_baseline_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..report.run import counts_line, table_lines
    from ..report.terminal import curve_section

    doc, ref = load_report_and_baseline(args)
    figures = ref.figures if ref is not None else None
    checked_statuses(doc, args.report)
    lines = [f"report: {args.report}", hardware_line(doc)] + table_lines(doc.rows)
    if doc.gated:
        lines.append(counts_line(doc.rows))
    section = doc.baseline
    if section is not None and section.path:
        lines.append(f"judged in the run against {section.path} ({section.comparisons} comparisons)")
    diff = section.environment_diff if section is not None else None
    if diff:
        from ..env.fingerprint import ABSENT, format_fingerprint_diff

        lines.append("environment changed since the baseline: " + format_fingerprint_diff(
            [(k, ABSENT if a is None else a, ABSENT if b is None else b) for k, a, b in diff]))
    levels = section.levels if section is not None else None
    lines += [f"gpucomm {t}" for t in (levels.texts() if levels is not None else [])]
    lines += matrix_lines(doc, figures, args.matrix_size)
    if not args.no_curves:
        lines += curve_section(doc, figures)
    out.write("\n".join(lines) + "\n")
    return EXIT_OK
