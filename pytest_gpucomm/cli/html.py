"""``gpucomm html REPORT [--baseline B] -o FILE [--force] [--no-plots]``: one self-contained HTML page of a
saved report (``report.html``), never written onto the report or the baseline it reads, over an existing file
only with ``--force`` (``common.checked_output``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from .common import (EXIT_OK, add_baseline_dir, add_force, checked_output, inputs_of, load_report_and_baseline,
                     report_parser)
from .story import drawn_story

if TYPE_CHECKING:
    from .common import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(sub: "Subcommands") -> None:
    p = report_parser(sub, "html", "one self-contained HTML page of a saved report",
                      "draw and compare against this baseline (NAME, file or report)")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="the HTML file to write (a new file)")
    add_force(p, "the -o file")
    p.add_argument("--no-plots", action="store_true", help="leave the plots out (no matplotlib needed)")
    add_baseline_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..report.html import write_html

    from ..report.drawn import fitted_reference, stored_figures

    doc, ref = load_report_and_baseline(args)
    page = checked_output(args.output, "-o", inputs_of(args, ref), args.force)
    fitted = fitted_reference(ref, doc) if ref is not None else None
    from ..text import command_width, fit

    story = [f"gpucomm html: {drawn_story(doc, fitted, stored_figures(doc) if fitted is None else None)}",
             *(fitted.lines if fitted is not None else [])]
    out.write("\n".join(fit(story, command_width())) + "\n")
    write_html(page.path, doc, fitted.figures if fitted is not None else None, replace=page.replace,
               with_plots=not args.no_plots)
    out.write(f"wrote {page.wrote()}\n")
    return EXIT_OK
