"""``gpucomm show REPORT [--baseline B] [--matrix-size SIZE] [--no-curves] [-v]``: the table, the verdicts, the
run at the levels, the cause tests the run saved, the copy matrices and the curves of a saved report, fitted to
the terminal's width (``text.command_width``; ``-v``: the table with every column)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from .common import (EXIT_OK, add_baseline_dir, hardware_line, load_report_and_baseline, matrix_lines,
                     report_parser, report_words)

if TYPE_CHECKING:
    from .common import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(sub: "Subcommands") -> None:
    p = report_parser(sub, "show", "the table, verdicts, copy matrices and curves of a saved JSON report",
                      "compare the copy matrices and curves with this baseline (NAME, file or report)",
                      "a JSON report (pytest --gpucomm-json=REPORT)")
    p.add_argument("--no-curves", action="store_true", help="leave out the curves section")
    p.add_argument("-v", "--verbose", action="store_true", help="the table with every column, each row its test id")
    p.add_argument("--matrix-size", metavar="SIZE", action="append",
                   help="print the copy matrices at SIZE (e.g. 4KiB; repeat for several; default: the largest size "
                        "where the most pairs were measured)")
    add_baseline_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..report.run import cause_lines, counts_line, table_lines
    from ..report.terminal import curve_section
    from ..text import command_width, fit

    from ..report.drawn import fitted_reference

    doc, ref = load_report_and_baseline(args)
    figures = fitted_reference(ref, doc).figures if ref is not None else None  # as the gate fits it to the machine
    width = command_width()
    from .story import verdicts_story

    said = verdicts_story(doc)
    report_line = str(args.report) if doc.extra.get("foreign") is None else report_words(doc, args.report)
    if ref is not None:
        said += f"; the copy matrices and curves compared with {ref.describe()}, its runs of this machine's shape"
    lines = fit([f"gpucomm show: {said}", "report: " + report_line, hardware_line(doc)], width) + table_lines(
        doc.rows, width, full=args.verbose)
    text: list[str] = []
    if doc.gated:
        text.append(counts_line(doc.rows))
    section = doc.baseline
    if section is not None and section.path:
        text.append(f"judged in the run against {section.path} ({section.comparisons} comparisons)")
    diff = section.environment_diff if section is not None else None
    if diff:
        from ..env.fingerprint import ABSENT, format_fingerprint_diff

        text.append("environment changed since the baseline: " + format_fingerprint_diff(
            [(k, ABSENT if a is None else a, ABSENT if b is None else b) for k, a, b in diff]))
    levels = section.levels if section is not None else None
    text += [f"gpucomm {t}" for t in (levels.texts() if levels is not None else [])]
    lines += fit(text, width) + cause_lines(doc.rows, width=width)
    lines += matrix_lines(doc, figures, args.matrix_size, width)
    if not args.no_curves:
        lines += curve_section(doc, figures, width=width)
    out.write("\n".join(lines) + "\n")
    return EXIT_OK
