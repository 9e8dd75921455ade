"""The ``gpucomm`` command (also ``python -m pytest_gpucomm``): saved reports and baseline files, outside a
pytest run and without a GPU.

::

    gpucomm show REPORT [--baseline B] [--matrix-size SIZE]   the table, verdicts, copy matrices and curves
    gpucomm compare BASELINE REPORT [--json OUT [--force]]    the gate on a saved report (and its matrices,
                                                              curves); exit 1 on a regression
    gpucomm plot REPORT [--baseline B] -o DIR [--force]       the plots (PNG, or --format svg)
    gpucomm html REPORT [--baseline B] -o FILE [--force]      one self-contained HTML page: verdicts,
                                                              matrices, curves, plots
    gpucomm baselines list | show NAME | prune NAME ... | merge A B -o C    keep baseline files by hand
    gpucomm env [--baseline B]                                this machine's fingerprint, and what changed
                                                              since B
    gpucomm fleet REPORT... [--baseline B] [--drain OUT]      many nodes' reports judged together; exit 1
                  [--json OUT] [--junitxml OUT]               on a node to drain or a slower fleet

REPORT is a file written by ``pytest --gpucomm-json=REPORT``.  BASELINE / B is a baseline NAME (looked up in
``--baseline-dir``, default ``$GPUCOMM_BASELINE_DIR`` or ``./baselines``, as ``--gpu-baseline-dir``), the
path of a baseline file, or the path of another report (taken as a one-run baseline: two reports compared).

``compare`` is the plugin's gate (:mod:`pytest_gpucomm.cli.regate`): the run's settings from the report (its
tolerance, alpha, strictness, tail tolerance; ``--tolerance`` etc. override them), the re-measures the run
made replayed from the report; against the baseline the run used, it gives the run's verdicts.

**Outputs** (``common.checked_output``): a command never writes onto one of the files it reads (the report,
the baseline or the report taken as one), whatever the spelling (``./x``, a symlink, a hard link), not even
with ``--force``; an existing ``--json OUT`` or ``-o FILE`` is replaced only with ``--force``, and the command
then says so (``wrote OUT (replaced the file that was there: --force)``); otherwise exit 2, naming the file and
``--force``.  ``plot -o DIR`` makes DIR if missing and writes one file per figure: where one of those files
exists it is refused, naming them, unless ``--force``, which replaces those files and no other (the other files
of DIR, an earlier report's plots among them, stay, and the command counts them).  Every file is written
atomically (``files.atomic``), and a file another process creates while the command runs is not replaced
without ``--force``.  ``baselines prune`` and ``merge -o A|B`` change a baseline in place by design (under its
lock); ``merge -o C`` refuses a C that exists and is neither A nor B.

**Exit codes**: 0 done (``compare``: no verdict fails); 1 ``compare`` found a failing verdict (REGRESSION,
TAIL, FLOOR; NEW / NOT GATED with ``--strict``) or a regression at a level; 2 bad input or
usage: a missing or unreadable file, a report of another format or a newer version, an unknown baseline
name, a bad option, an output that exists (without ``--force``) or is an input, matplotlib missing for
``plot`` (the message names the extra); the message starts with
``gpucomm: error:`` and names the value and the file.

Each subcommand is a module of this package (:mod:`.show`, :mod:`.compare`, :mod:`.plot`, :mod:`.html`,
:mod:`.baselines`, :mod:`.env`) that adds its parser and runs it; what they share is in :mod:`.common`.
A saved report is read into its document (``report.document.ReportDocument``) and rendered by the same
views as the run's (``report.run``, ``report.terminal``, ``report.plots``, ``report.html``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence, TextIO

from . import baselines, compare, env, fleet, html, plot, show
from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError, check_environment, error_text

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpucomm", description="Saved pytest-gpucomm reports and baseline files, without a GPU.",
        epilog="Exit codes: 0 done; 1 compare found a failing verdict; 2 bad input or usage.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in (show, compare, fleet, plot, html, baselines, env):
        command.add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None, out: Optional[TextIO] = None) -> int:
    """Run the command; returns the exit code (see the module doc)."""
    out = out or sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse printed the usage error (2) or the help (0)
        return int(e.code or 0)
    from ..gate.schema import BaselineError
    from ..report.plots import PlotsUnavailable
    from ..report.saved import ReportError

    func: Callable[..., int] = args.func
    try:
        check_environment()
        return func(args, out=out)
    except BrokenPipeError:  # `gpucomm show ... | head`: the reader went away; an OSError, so caught first
        return EXIT_OK
    except (CommandError, ReportError, BaselineError, PlotsUnavailable, ValueError, OSError) as e:
        print(f"gpucomm: error: {error_text(e, args)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
