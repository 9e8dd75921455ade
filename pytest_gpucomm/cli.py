"""The ``gpucomm`` command (also ``python -m pytest_gpucomm``): saved reports and baseline files, outside a
pytest run and without a GPU.

::

    gpucomm show REPORT [--baseline B] [--matrix-size SIZE]   the table, verdicts, copy matrices and curves
    gpucomm compare BASELINE REPORT [--json OUT]  the gate on a saved report (and its matrices, curves);
                                                  exit 1 on a regression
    gpucomm plot REPORT [--baseline B] -o DIR     the plots (PNG, or --format svg)
    gpucomm html REPORT [--baseline B] -o FILE    one self-contained HTML page: verdicts, matrices, curves, plots
    gpucomm baselines list | show NAME | prune NAME ... | merge A B -o C    keep baseline files by hand
    gpucomm env [--baseline B]                    this machine's fingerprint, and what changed since B

REPORT is a file written by ``pytest --gpucomm-json=REPORT``.  BASELINE / B is a baseline NAME (looked up in
``--baseline-dir``, default ``$GPUCOMM_BASELINE_DIR`` or ``./baselines``, as ``--gpu-baseline-dir``), the
path of a baseline file, or the path of another report (taken as a one-run baseline: two reports compared).

``compare`` is the plugin's gate (:mod:`pytest_gpucomm.gate.regate`): the run's settings from the report (its
tolerance, alpha, strictness, tail tolerance; ``--tolerance`` etc. override them), the re-measures the run
made replayed from the report; against the baseline the run used, it gives the run's verdicts.

**Exit codes**: 0 done (``compare``: no verdict fails); 1 ``compare`` found a failing verdict (REGRESSION,
TAIL, FLOOR; NEW / NOT GATED with ``--strict``) or a regression at a level; 2 bad input or
usage: a missing or unreadable file, a report of another format or a newer version, an unknown baseline
name, a bad option, matplotlib missing for ``plot`` (the message names the extra); the message starts with
``gpucomm: error:`` and names the value and the file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, TextIO

from .vocab import DEFAULT_BASELINE_DIR

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CommandError(Exception):
    """Bad input: printed as ``gpucomm: error: <message>``, exit status 2."""


def _baseline_dirs(args: argparse.Namespace) -> list[Path]:
    d = getattr(args, "baseline_dir", None) or os.environ.get("GPUCOMM_BASELINE_DIR") or DEFAULT_BASELINE_DIR
    return [Path(d)]


def _load_report(path: str) -> dict[str, Any]:
    from .report.saved import load_report

    return load_report(path)


def _load_reference(spec: str, args: argparse.Namespace, report: Optional[Mapping[str, Any]] = None) -> Any:
    from .report.saved import load_reference

    model = ((report or {}).get("fingerprint") or {}).get("model") if spec.strip() == "auto" else None
    return load_reference(spec, search_dirs=_baseline_dirs(args), detected_model=model)


def _records(report: Mapping[str, Any], verdicts: Optional[Sequence[Any]] = None, where: str = "") -> list[Any]:
    """The report's rows as the plugin's records (``state.Record``), with the verdicts given (``Verdict``s,
    one per row) or those the run recorded; ``where`` is the report's file, for the messages."""
    from .report.saved import measurements_of
    from .measurement import Record
    from .vocab import Status

    out = []
    for i, (row, (test, m)) in enumerate(zip(report["rows"], measurements_of(report))):
        if verdicts is not None:
            v = verdicts[i]
            baseline, status = v.to_dict(), v.status
            if str(row.get("status")) == Status.FAILED.value:
                status = Status.FAILED
        else:
            baseline = row.get("baseline")
            try:
                status = Status(row.get("status", Status.MEASURED.value))
            except ValueError:
                raise CommandError(f"{where}: invalid report: at $.rows[{i}].status ({test}): "
                                   f"unknown status {row.get('status')!r}") from None
        out.append(Record(nodeid=test, measurement=m, checks=list(row.get("checks") or []), status=status,
                          baseline=baseline))
    return out


def _table_lines(records: list[Any]) -> list[str]:
    from .report.run import GATE_HEADERS, LEGEND, gate_columns, render_table

    gated = any(r.baseline is not None for r in records)
    table = render_table(records, GATE_HEADERS if gated else None, gate_columns(records) if gated else None)
    return table.splitlines() + [LEGEND]


def _counts_line(records: list[Any]) -> str:
    from collections import Counter

    from .report.run import tail_counts

    counts = Counter(str(r.status.value if hasattr(r.status, "value") else r.status) for r in records)
    return "gpucomm verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + tail_counts(records)


def _curve_lines(report: Mapping[str, Any], baseline_doc: Optional[Mapping[str, Any]]) -> list[str]:
    """The curves section: against ``baseline_doc`` when given, else the report's own section (or computed
    from its rows for a report written before it had one)."""
    from .analysis.curves import curve_lines, curve_report, sweeps_from_baseline, sweeps_from_report

    if baseline_doc is None and isinstance(report.get("curves"), list):
        entries = report["curves"]
    else:
        entries = curve_report(sweeps_from_report(report),
                               sweeps_from_baseline(baseline_doc) if baseline_doc is not None else None)
    return curve_lines(entries)


def _matrix_lines(report: Mapping[str, Any], baseline_doc: Optional[Mapping[str, Any]],
                  sizes: Optional[Sequence[str]] = None) -> list[str]:
    """Every copy matrix of the report (``matrices.report_matrix_lines``), against ``baseline_doc`` when given,
    else against the figures the run's verdicts were judged against; at ``sizes`` (``--matrix-size``) when
    given."""
    from .analysis.matrices import report_matrix_lines
    from .units import parse_size

    asked = None
    if sizes:
        try:
            asked = [parse_size(v, "--matrix-size") for v in sizes]
        except ValueError as e:
            raise CommandError(str(e)) from None
    lines = report_matrix_lines(report, baseline_doc, sizes=asked)
    if asked and not lines:
        from .units import format_size

        measured = sorted({int(r["size_bytes"]) for r in report["rows"] if r.get("kind") == "copy"})
        lines = [f"gpucomm copy matrices: none at {', '.join(format_size(s) for s in asked)} (--matrix-size); the "
                 f"report's copies were measured at {', '.join(format_size(s) for s in measured) or 'no size'}"]
    return lines


def _hardware_line(report: Mapping[str, Any]) -> str:
    from .report.plots import context_line

    return "hardware: " + context_line(report)


# -- the subcommands -------------------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    report = _load_report(args.report)
    ref = _load_reference(args.baseline, args, report) if args.baseline else None
    records = _records(report, where=args.report)
    lines = [f"report: {args.report}", _hardware_line(report)] + _table_lines(records)
    if any(r.baseline is not None for r in records):
        lines.append(_counts_line(records))
    judged = report.get("baseline")
    section = judged if isinstance(judged, Mapping) else {}
    if section.get("path"):
        lines.append(f"judged in the run against {section['path']} ({section.get('comparisons', '?')} comparisons)")
    diff = section.get("environment_diff")
    if diff:
        from .env.fingerprint import ABSENT, format_fingerprint_diff

        lines.append("environment changed since the baseline: " + format_fingerprint_diff(
            [(k, ABSENT if a is None else a, ABSENT if b is None else b) for k, a, b in diff]))
    from .report.saved import level_texts

    lines += [f"gpucomm {t}" for t in level_texts(report)]
    lines += _matrix_lines(report, ref.doc if ref is not None else None, args.matrix_size)
    if not args.no_curves:
        lines += _curve_lines(report, ref.doc if ref is not None else None)
    out.write("\n".join(lines) + "\n")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    from .gate.regate import regate

    report = _load_report(args.report)
    ref = _load_reference(args.baseline, args, report)
    if args.tolerance is not None and not 0 <= args.tolerance < 1:
        raise CommandError(f"invalid --tolerance {args.tolerance!r}: expected a fraction in [0, 1), e.g. 0.05")
    if args.alpha is not None and not 0 < args.alpha < 1:
        raise CommandError(f"invalid --alpha {args.alpha!r}: expected a number above 0 and below 1")
    if args.tail_tolerance is not None and args.tail_tolerance < 0:
        raise CommandError(f"invalid --tail-tolerance {args.tail_tolerance!r}: expected a number >= 0")
    g = regate(report, ref, tolerance=args.tolerance, alpha=args.alpha, strict=True if args.strict else None,
               tail_tolerance=args.tail_tolerance, where=args.report, search_dirs=tuple(_baseline_dirs(args)))
    records = _records(report, [r.verdict for r in g.rows])
    lines = [f"gpucomm compare: the report {args.report} against {ref.describe()}", _hardware_line(report)]
    lines += g.header
    lines += _table_lines(records)
    lines.append(_counts_line(records))
    changed = [r for r in g.rows if r.run_status is not None and r.run_status != r.verdict.status.value]
    if changed:
        lines.append(f"{len(changed)} verdicts differ from the run's (another baseline, other settings, or a "
                     "re-measure the report does not hold):")
        lines += [f"  {r.test}: run {r.run_status} -> now {r.verdict.status.value}" for r in changed[:20]]
    failed = [r for r in g.rows if r.verdict.failed]
    for r in failed:
        lines.append(f"FAILED {r.test}: {r.verdict.message}")
    from .report.run import level_lines, sensitivity_lines

    lines += sensitivity_lines([r.verdict.to_dict() for r in g.rows])
    lines += level_lines(g.levels, {r.verdict.details.get("case"): r.test for r in g.rows})
    lines.append("gpucomm compare: offline: no case is measured again; the report's own re-measures are replayed")
    lines += g.notes and ["notes:"] + [f"  {n}" for n in g.notes]
    lines += _matrix_lines(report, ref.doc)
    if not args.no_curves:
        lines += _curve_lines(report, ref.doc)
    if args.json:
        from .report.run import write_json

        doc = dict(report)
        doc["rows"] = [{**row, "baseline": r.verdict.to_dict(),
                        "status": "FAILED" if str(row.get("status")) == "FAILED" else r.verdict.status.value}
                       for row, r in zip(report["rows"], g.rows)]
        doc["compared"] = {"report": str(args.report), "against": str(ref.path), "kind": ref.kind,
                           "settings": g.settings, "levels": g.levels.to_dict() if g.levels is not None else None}
        write_json(args.json, doc)
        lines.append(f"wrote the verdicts to {args.json}")
    lines.append("gpucomm compare: " + ("FAILED" if g.failed else "passed")
                 + f" ({len(failed)} failing verdicts of {len(g.rows)} rows"
                 + (f", {len(g.levels.failed)} regressions at the levels" if g.levels is not None else "") + ")")
    out.write("\n".join(lines) + "\n")
    return EXIT_FAILED if g.failed else EXIT_OK


def cmd_plot(args: argparse.Namespace, out: TextIO) -> int:
    from .report.plots import all_figures, save_all

    report = _load_report(args.report)
    ref = _load_reference(args.baseline, args, report) if args.baseline else None
    paths = save_all(all_figures(report, ref.doc if ref is not None else None), args.output, args.format)
    out.write(f"wrote {len(paths)} plots to {args.output}" + (f" (against {ref.describe()})" if ref else "") + "\n")
    for p in paths:
        out.write(f"  {p}\n")
    return EXIT_OK


def cmd_html(args: argparse.Namespace, out: TextIO) -> int:
    from .report.html import write_html

    report = _load_report(args.report)
    ref = _load_reference(args.baseline, args, report) if args.baseline else None
    path = write_html(args.output, report, ref.doc if ref is not None else None, with_plots=not args.no_plots)
    out.write(f"wrote {path}\n")
    return EXIT_OK


# -- the parser ------------------------------------------------------------------------------------------


def _add_baseline_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline-dir", metavar="DIR",
                   help="where baseline NAMEs are looked up (default: $GPUCOMM_BASELINE_DIR, else ./baselines)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpucomm", description="Saved pytest-gpucomm reports and baseline files, without a GPU.",
        epilog="Exit codes: 0 done; 1 compare found a failing verdict; 2 bad input or usage.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("show", help="the table, verdicts, copy matrices and curves of a saved JSON report")
    p.add_argument("report", metavar="REPORT", help="a JSON report (pytest --gpucomm-json=REPORT)")
    p.add_argument("--baseline", metavar="B",
                   help="compare the copy matrices and curves with this baseline (NAME, file or report)")
    p.add_argument("--no-curves", action="store_true", help="leave out the curves section")
    p.add_argument("--matrix-size", metavar="SIZE", action="append",
                   help="print the copy matrices at SIZE (e.g. 4KiB; repeat for several; default: the largest size "
                        "where the most pairs were measured)")
    _add_baseline_dir(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("compare", help="the gate on a saved report; exit 1 on a regression")
    p.add_argument("baseline", metavar="BASELINE", help="a baseline NAME, a baseline file, or another report")
    p.add_argument("report", metavar="REPORT", help="a JSON report (pytest --gpucomm-json=REPORT)")
    p.add_argument("--tolerance", type=float, help="override the run's --gpu-tolerance (every row)")
    p.add_argument("--tail-tolerance", type=float, help="override the run's --gpu-tail-tolerance (every row)")
    p.add_argument("--alpha", type=float, help="override the run's --gpu-alpha")
    p.add_argument("--strict", action="store_true", help="NEW and NOT GATED fail, as --gpu-baseline-strict")
    p.add_argument("--json", metavar="OUT", help="write the report with these verdicts to OUT")
    p.add_argument("--no-curves", action="store_true", help="leave out the curves section")
    _add_baseline_dir(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("plot", help="draw the plots of a saved report")
    p.add_argument("report", metavar="REPORT")
    p.add_argument("--baseline", metavar="B", help="draw against this baseline (NAME, file or report)")
    p.add_argument("-o", "--output", metavar="DIR", required=True, help="the folder to write into (created)")
    p.add_argument("--format", choices=("png", "svg"), default="png", help="file format (default png)")
    _add_baseline_dir(p)
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("html", help="one self-contained HTML page of a saved report")
    p.add_argument("report", metavar="REPORT")
    p.add_argument("--baseline", metavar="B", help="draw and compare against this baseline (NAME, file or report)")
    p.add_argument("-o", "--output", metavar="FILE", required=True, help="the HTML file to write")
    p.add_argument("--no-plots", action="store_true", help="leave the plots out (no matplotlib needed)")
    _add_baseline_dir(p)
    p.set_defaults(func=cmd_html)

    try:
        from .gate import keep
    except ImportError:  # pragma: no cover - keep.py is part of the package
        keep = None  # type: ignore[assignment]
    if keep is not None:
        keep.add_baselines_parser(sub)
        keep.add_env_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None, out: Optional[TextIO] = None) -> int:
    """Run the command; returns the exit code (see the module doc)."""
    out = out or sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse printed the usage error (2) or the help (0)
        return int(e.code or 0)
    from .gate.schema import BaselineError
    from .report.plots import PlotsUnavailable
    from .report.saved import ReportError

    func: Callable[..., int] = args.func
    try:
        if getattr(func, "__module__", "") == __name__:
            return func(args, out)
        return func(args, out=out)
    except (CommandError, ReportError, BaselineError, PlotsUnavailable, ValueError, OSError) as e:
        text = str(e) if not isinstance(e, OSError) or not e.filename else f"{e.filename}: {e.strerror or e}"
        print(f"gpucomm: error: {text}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # pragma: no cover - `gpucomm show ... | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
