"""``gpucomm plot REPORT [--baseline B] -o DIR [--format svg]``: the plots of a saved report."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from .common import EXIT_OK, add_baseline_dir, load_report_and_baseline, report_parser

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = report_parser(sub, "plot", "draw the plots of a saved report",
                      "draw against this baseline (NAME, file or report)")
    p.add_argument("-o", "--output", metavar="DIR", required=True, help="the folder to write into (created)")
    p.add_argument("--format", choices=("png", "svg"), default="png", help="file format (default png)")
    add_baseline_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..report.plots import all_figures, save_all

    doc, ref = load_report_and_baseline(args)
    paths = save_all(all_figures(doc, ref.figures if ref is not None else None), args.output, args.format)
    out.write(f"wrote {len(paths)} plots to {args.output}" + (f" (against {ref.describe()})" if ref else "") + "\n")
    for p in paths:
        out.write(f"  {p}\n")
    return EXIT_OK
