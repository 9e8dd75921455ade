"""``gpucomm fleet REPORT... [--baseline B] [--json OUT] [--junitxml OUT] [--drain OUT] [--force]``: many nodes'
reports of the same suites judged together (``gate.fleet``, FLEET_RULE): each node against the baseline at a
level scaled to the number of nodes, each node against its peers, and the fleet as a whole against the
baseline.  A REPORT is a file, a folder (its ``*.json``) or a glob pattern (a shared folder of one report per
node).  A report that is missing, damaged (the safe reader, ``report.saved.load_report``, refuses it) or of
another hardware shape or test set is named and left out, never averaged in.  Exit 0: a healthy fleet; 1: a node
to drain or the fleet slower than the baseline; 2: a usage error (no report left, fewer than
``MIN_PEER_NODES`` without a baseline, a pattern or folder that names no file, an output that exists)."""

from __future__ import annotations

import argparse
import glob
import os
from pathlib import Path
from typing import Any, TextIO

from .. import checks
from ..checks import CheckError, Origin
from .common import (EXIT_FAILED, EXIT_OK, CommandError, Input, add_baseline_dir, add_force, checked_output,
                     load_reference)

__all__ = ["add_parser", "run", "expand_reports", "read_node", "PARALLEL_FROM"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("fleet", help="many nodes' reports judged together; exit 1 on a node to drain",
                       epilog="Exit codes: 0 a healthy fleet; 1 a node to drain or the fleet slower than the "
                              "baseline; 2 bad input or usage.")
    p.add_argument("reports", metavar="REPORT", nargs="+",
                   help="a node's JSON report, a folder of them (*.json) or a glob pattern (quoted)")
    p.add_argument("--baseline", metavar="B", help="a baseline NAME or file: each node and the fleet against it "
                                                   "(default: none, the nodes against their peers only)")
    p.add_argument("--alpha", type=float, help="the fleet's level, split over its nodes (default: 0.01)")
    p.add_argument("--tolerance", type=float, help="the smallest slowdown named (default: 0.05)")
    p.add_argument("--json", metavar="OUT", help="write every node's verdict and the fleet's shifts to OUT")
    p.add_argument("--drain", metavar="OUT", help="write the nodes to drain, with their reasons, to OUT (JSON)")
    p.add_argument("--junitxml", metavar="OUT", help="write a JUnit XML file, one test case per node, to OUT")
    add_force(p, "an output file")
    add_baseline_dir(p)
    p.set_defaults(func=run)


def expand_reports(given: list[str]) -> list[Path]:
    """Each REPORT as files: a folder -> its ``*.json`` (sorted), a pattern -> its matches (sorted), else the
    path as given (a missing file is kept: it is named and left out).  CommandError where a folder or a pattern
    names no file."""
    out: list[Path] = []
    for g in given:
        if os.path.isdir(g):
            found = sorted(Path(g).glob("*.json"))
            if not found:
                raise CommandError(f"REPORT {g}: a folder holding no *.json report")
            out += found
        elif glob.has_magic(g):
            found = sorted(Path(p) for p in glob.glob(g))
            if not found:
                raise CommandError(f"REPORT {g}: the pattern matches no file")
            out += found
        else:
            out.append(Path(g))
    seen: set[Path] = set()
    return [p for p in out if not (p.resolve() in seen or seen.add(p.resolve()))]  # type: ignore[func-returns-value]


#: from this many reports on, they are read by a pool of processes (one per core, at most 8): the safe reader's
#: check of a report of the full suite (every sample against the schema) takes about 0.15 s on one core
PARALLEL_FROM = 32


def read_node(path: Path, name: str) -> Any:
    """The report ``path`` as a ``NodeInput``, or an ``Excluded`` naming why it cannot be read (the safe reader,
    ``report.saved.load_report``, refused it)."""
    from ..gate.fleet import Excluded, node_input
    from ..report.saved import ReportError, load_report, measurements_of

    try:
        doc = load_report(path)
        pairs = measurements_of(doc, str(path))
        layout = str(((doc.get("launch") or {}).get("layout")) or "")
        return node_input(name, str(path), dict(doc.get("fingerprint") or {}), layout, pairs)
    except (ReportError, ValueError) as e:
        return Excluded(name, str(path), str(e).replace(f"{path}: ", "", 1))


def _read(paths: list[Path]) -> tuple[list[Any], list[Any]]:
    """Each report as a ``NodeInput`` or an ``Excluded`` (:func:`read_node`), in the order given; a node is named
    by its file's stem (its path where two files share a stem)."""
    from ..gate.fleet import Excluded

    stems = [p.stem for p in paths]
    names = [stem if stems.count(stem) == 1 else str(p) for p, stem in zip(paths, stems)]
    workers = min(os.cpu_count() or 1, 8)
    if len(paths) >= PARALLEL_FROM and workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            got = list(pool.map(read_node, paths, names, chunksize=8))
    else:
        got = [read_node(p, n) for p, n in zip(paths, names)]
    return [g for g in got if not isinstance(g, Excluded)], [g for g in got if isinstance(g, Excluded)]


def _checked(args: argparse.Namespace) -> None:
    for option, check in (("--tolerance", checks.tolerance), ("--alpha", checks.alpha)):
        value = getattr(args, option[2:])
        if value is not None:
            try:
                check(Origin.argument(option, value))
            except CheckError as e:
                raise CommandError(str(e)) from None


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..gate.fleet import FleetError, judge_fleet
    from ..gate.fleet_outputs import drain_document, dumps, junit_xml, result_document, text_lines
    from ..gate.store import to_baseline
    from ..files.atomic import write_atomic
    from ..text import command_width, fit
    from ..vocab import DEFAULT_ALPHA, DEFAULT_TOLERANCE

    _checked(args)
    paths = expand_reports(args.reports)
    ref = load_reference(args.baseline, args) if args.baseline else None
    inputs: list[Input] = [("a report", str(p)) for p in paths]
    if ref is not None:
        inputs.append(("the baseline", str(ref.path)))
    outputs = [(opt, checked_output(v, opt, inputs, args.force)) for opt, v in
               (("--json", args.json), ("--drain", args.drain), ("--junitxml", args.junitxml)) if v]
    nodes, left = _read(paths)
    baseline = to_baseline(ref.path, ref.doc) if ref is not None else None
    try:
        r = judge_fleet(nodes, baseline, alpha=args.alpha if args.alpha is not None else DEFAULT_ALPHA,
                        tolerance=args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE, excluded=left)
    except FleetError as e:
        raise CommandError(str(e)) from None
    width = min(command_width(), 120)
    against = ref.describe() if ref is not None else "no baseline (each node against its peers)"
    lines = [f"gpucomm fleet: {len(paths)} reports, {len(r.nodes)} nodes judged, against {against}"]
    lines += text_lines(r)
    texts = {"--json": lambda: dumps(result_document(r)), "--drain": lambda: dumps(drain_document(r)),
             "--junitxml": lambda: junit_xml(r)}
    for opt, o in outputs:
        write_atomic(o.path, texts[opt](), replace=o.replace)
        lines.append(f"wrote {opt[2:]} to {o.wrote()}")
    out.write("\n".join(fit(lines, width)) + "\n")
    return EXIT_FAILED if r.failed else EXIT_OK


