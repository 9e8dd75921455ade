"""``gpucomm plot REPORT [--baseline B] -o DIR [--format svg] [--force]``: the plots of a saved report.

DIR is made if missing.  The command writes one file per figure (``plots.file_names``) and touches nothing
else in DIR: where a file of one of those names is there already, it is refused (exit 2, naming the files)
unless ``--force`` is given, which replaces those files and leaves every other file of DIR as it is (the
command says how many it replaced, and how many other plots of the format DIR holds: an earlier run's, which
it does not delete).  A file it would write that is one of its inputs is refused even with ``--force``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from .common import (EXIT_OK, CommandError, add_baseline_dir, add_force, inputs_of, load_report_and_baseline,
                     not_an_input, report_parser)
from .story import drawn_story

if TYPE_CHECKING:
    from .common import Input, Subcommands

__all__ = ["add_parser", "run"]


def add_parser(sub: "Subcommands") -> None:
    p = report_parser(sub, "plot", "draw the plots of a saved report",
                      "draw against this baseline (NAME, file or report)")
    p.add_argument("-o", "--output", metavar="DIR", required=True,
                   help="the folder to write into (made if missing; other files in it are left alone)")
    p.add_argument("--format", choices=("png", "svg"), default="png", help="file format (default png)")
    add_force(p, "a plot file of DIR")
    add_baseline_dir(p)
    p.set_defaults(func=run)


def _check_folder(args: argparse.Namespace, inputs: list["Input"]) -> None:
    folder = Path(args.output)
    if os.path.lexists(folder) and not folder.is_dir():
        not_an_input(args.output, "-o", inputs)
        raise CommandError(f"-o {args.output}: is a file, not a folder")


def _checked_files(args: argparse.Namespace, names: list[str], inputs: list["Input"]) -> list[Path]:
    """The files of ``names`` in the folder that exist already (CommandError unless --force), after checking
    that none is an input."""
    targets = [Path(args.output) / name for name in names]
    for path in targets:
        not_an_input(path, "-o", inputs)
    there = [path for path in targets if os.path.lexists(path)]
    if there and not args.force:
        listed = ", ".join(p.name for p in there[:3]) + (f" and {len(there) - 3} more" if len(there) > 3 else "")
        raise CommandError(f"-o {args.output}: {len(there)} of the {len(targets)} files this command writes exist "
                           f"already ({listed}): give --force to replace them (other files in the folder are left "
                           "alone), or write to another folder")
    for path in there:
        if path.is_dir():
            raise CommandError(f"-o {args.output}: {path} is a folder, not a plot file: not replaced")
    return there


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..report.plots import all_figures, file_names, save_all

    from ..report.drawn import fitted_reference, stored_figures

    doc, ref = load_report_and_baseline(args)
    inputs = inputs_of(args, ref)
    _check_folder(args, inputs)
    fitted = fitted_reference(ref, doc) if ref is not None else None
    stored = stored_figures(doc) if fitted is None else None
    figs = all_figures(doc, fitted.figures if fitted is not None else stored)
    names = file_names(figs, args.format)
    replaced = _checked_files(args, names, inputs)
    paths = save_all(figs, args.output, args.format, replace=args.force)
    from ..text import command_width, fit

    story = [f"gpucomm plot: {drawn_story(doc, fitted, stored)}", *(fitted.lines if fitted is not None else [])]
    out.write("\n".join(fit(story, command_width())) + "\n")
    out.write(f"wrote {len(paths)} plots to {args.output}"
              + (f"; replaced {len(replaced)} files that were there (--force)" if replaced else "") + "\n")
    for p in paths:
        out.write(f"  {p}\n")
    others = sorted(p.name for p in Path(args.output).glob(f"*.{args.format}") if p.name not in names)
    if others:
        out.write(f"{args.output} also holds {len(others)} other .{args.format} files this command did not write "
                  f"(left as they were): {', '.join(others[:3])}{' ...' if len(others) > 3 else ''}\n")
    return EXIT_OK
