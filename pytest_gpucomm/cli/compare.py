"""``gpucomm compare BASELINE REPORT [--json OUT [--force]]``: the gate on a saved report (``cli.regate``),
which makes the report's document again with its new verdicts (``ReportDocument.rejudged``); that document is
printed as ``show`` prints one (fitted to the terminal's width; ``-v``: the table with every column), with what
changed since the run and the cause tests the run saved (each verdict keeps its row's ``cause`` and line,
marked as the run's: nothing is measured again), and written with ``--json`` (never onto the report or the
baseline it read; over an existing file only with ``--force``: ``common.checked_output``).  Exit 1 on a failing
verdict or a regression at a level."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Mapping, TextIO

from .. import checks
from ..units import plural
from ..checks import CheckError, Origin
from .common import (EXIT_FAILED, EXIT_OK, CommandError, add_baseline_dir, add_force, add_nvbandwidth_size,
                     baseline_dirs, checked_output, hardware_line, inputs_of, load_document, load_reference,
                     matrix_lines, report_words, row_source)

if TYPE_CHECKING:
    from .regate import Regated
    from ..report.document import ReportDocument
    from ..report.saved import Reference

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="the gate on a saved report; exit 1 on a regression")
    p.add_argument("baseline", metavar="BASELINE", help="a baseline NAME, a baseline file, or another report")
    p.add_argument("report", metavar="REPORT", help="a JSON report (pytest --gpucomm-json=REPORT)")
    p.add_argument("--tolerance", type=float, help="override the run's --gpu-tolerance (every row)")
    p.add_argument("--tail-tolerance", type=float, help="override the run's --gpu-tail-tolerance (every row)")
    p.add_argument("--alpha", type=float, help="override the run's --gpu-alpha")
    p.add_argument("--strict", action="store_true", help="NEW and NOT GATED fail, as --gpu-baseline-strict")
    p.add_argument("--json", metavar="OUT", help="write the report with these verdicts to OUT (a new file)")
    add_force(p, "the --json file")
    p.add_argument("--no-curves", action="store_true", help="leave out the curves section")
    p.add_argument("-v", "--verbose", action="store_true", help="the table with every column, each row its test id")
    add_nvbandwidth_size(p)
    add_baseline_dir(p)
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    """The overriding values in their ranges (``checks``, the plugin's own), before any file is read."""
    for option, check in (("--tolerance", checks.tolerance), ("--tail-tolerance", checks.tail_tolerance),
                          ("--alpha", checks.alpha)):
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None:
            try:
                check(Origin.argument(option, value))
            except CheckError as e:
                raise CommandError(str(e)) from None


def _inputs(args: argparse.Namespace, ref: "Reference", doc: "ReportDocument") -> list[tuple[str, Any]]:
    """What compare reads: the report, the baseline, and the baseline file of the report's hardware in the
    baseline folder, where cases of one session borrow their spreads from (``Gate._find_spreads``)."""
    from ..gate.names import baseline_name_for_model

    found = inputs_of(args, ref)
    name = baseline_name_for_model(str((doc.fingerprint or {}).get("model") or ""))
    if name:
        found += [("the baseline of the report's hardware that the gate may borrow spreads from", path)
                  for path in (d / f"{name}.json" for d in baseline_dirs(args)) if path.is_file()]
    return found


#: what a cause line that ``compare`` keeps from the run says after it: the run measured it, compare does not
FROM_RUN = "(the run's cause test; not measured again)"


def _keep_causes(doc: "ReportDocument", g: "Regated") -> None:
    """Each new verdict keeps the cause test the run saved in its row (``verdict["cause"]``) and the line it
    added to the message, a test that ran marked :data:`FROM_RUN`: offline, no case is measured again."""
    from ..gate.cause import saved_cause_line

    for was, row in zip(doc.rows, g.rows):
        cause = was.verdict.data.get("cause") if was.verdict is not None else None
        line = saved_cause_line(was.verdict.data) if was.verdict is not None else None
        if isinstance(cause, Mapping) and line:
            kept = line if cause.get("skipped") else f"{line} {FROM_RUN}"
            row.verdict.details["cause"] = dict(cause, line=kept)
            row.verdict.message = f"{row.verdict.message}\n  {kept}"


def _engine_lines(g: "Regated") -> None:
    """With both engines in the report, each REGRESSION of one engine's case says how the same case on the other
    engine stands against its own baseline (its verdict's ratio now), as the live run's message does."""
    from ..compare.tool_engine import counterpart_words, engine_of_test, twin_test_id
    from ..vocab import Status

    by_test = {r.test: r for r in g.rows}
    tolerance = float(g.settings.get("tolerance") or 0.0)
    for row in g.rows:
        twin_id, engine = twin_test_id(row.test), engine_of_test(row.test)
        twin = by_test.get(twin_id) if twin_id else None
        if row.verdict.status is not Status.REGRESSION or twin is None or engine is None or twin.verdict.ratio is None:
            continue
        line = counterpart_words(engine, row.measurement, twin.measurement, twin.verdict.ratio,
                                 float(row.verdict.details.get("tolerance") or tolerance))
        row.verdict.message = f"{row.verdict.message}\n  {line}"


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .regate import regate
    from ..report.run import (RECORD, cause_lines, counts_line, gated_counts, gated_of, judgement, level_lines,
                              sensitivity_lines, table_lines)
    from ..report.terminal import curve_section
    from ..text import command_width, fit
    from ..vocab import Status

    _check(args)
    doc = load_document(args.report, args)
    ref = load_reference(args.baseline, args, doc)
    json_out = checked_output(args.json, "--json", _inputs(args, ref, doc), args.force) if args.json else None
    g = regate(doc.to_json(), ref, tolerance=args.tolerance, alpha=args.alpha, strict=True if args.strict else None,
               tail_tolerance=args.tail_tolerance, where=args.report, search_dirs=tuple(baseline_dirs(args)))
    _keep_causes(doc, g)
    _engine_lines(g)
    verdicts = [r.verdict.to_dict() for r in g.rows]
    levels_json = g.levels.to_dict() if g.levels is not None else None
    new = doc.rejudged(verdicts, {
        "report": str(args.report), "against": str(ref.path), "kind": ref.kind, "settings": g.settings,
        "levels": levels_json, "gated": gated_counts(verdicts, levels_json).to_dict()})
    figures = ref.figures
    width = command_width()
    # the first line says whose verdicts these are: a judgement made now, not the run's stored ones (cli.story)
    text = [f"gpucomm compare: a judgement made now of {report_words(doc, args.report)} against {ref.describe()}, "
            "not the run's stored verdicts", hardware_line(new), *g.header]
    lines = fit(text, width) + table_lines(new.rows, width, full=args.verbose)
    text = [counts_line(new.rows)]
    judged = [(test, was.verdict.data.get("status") if was.verdict is not None and was.verdict.data else None, v)
              for was, (test, v) in zip(doc.rows, ((r.test, r.verdict) for r in new.rows)) if v is not None]
    changed = [(test, was, v) for test, was, v in judged if was is not None and was != v.status]
    if changed:
        text.append(f"{len(changed)} verdicts differ from the run's (another baseline, other settings, or a "
                    "re-measure the report does not hold):")
        text += [f"  {test}: run {was} -> now {v.status}" for test, was, v in changed[:20]]
    failed = [(test, v) for test, _, v in judged if Status(v.status).failed]
    source = {r.test: row_source(r.measurement.info) for r in new.rows}
    for test, v in failed:  # the test, then its message's lines (the first says what, where and how much)
        text += [f"FAILED {test}{source.get(test, '')}:"] + [f"  {line}" for line in v.message.splitlines()]
    lines += fit(text, width)
    lines += sensitivity_lines([r.verdict for r in new.rows if r.verdict is not None], gated=gated_of(new),
                               width=width)
    levels = new.levels.run_levels() if new.levels is not None else None
    lines += level_lines(levels, new.test_of_case(), width=width)
    lines += cause_lines(new.rows, skip=[test for test, _ in failed], width=width)
    text = ["gpucomm compare: offline: no case is measured again; the report's own re-measures are replayed"]
    text += g.notes and ["notes:"] + [f"  {n}" for n in g.notes]
    lines += fit(text, width) + matrix_lines(new, figures, width=width)
    if not args.no_curves:
        lines += curve_section(new, figures, width=width)
    if json_out is not None:
        from ..report.exports import write_json

        write_json(json_out.path, new, replace=json_out.replace)
        lines.append(f"wrote the verdicts to {json_out.wrote()}")
    # the last line's word is the report's judgement, as every view gives it (report.run.judgement): "passed" only
    # where at least half the cases were judged, else NOT JUDGED with what to record
    verdict = judgement(new)
    word = "FAILED" if g.failed else ("NOT JUDGED" if verdict.not_judged else "passed")
    unjudged = ""
    if word == "NOT JUDGED":  # how many were judged, and what to record (a report taken as a baseline is one run)
        record = (f"record a baseline in several sessions ({RECORD}) and compare with it" if ref.kind == "report"
                  else verdict.record)
        unjudged = f"; {verdict.judged} of {plural(verdict.cases, 'case')} judged; {record}"
    lines += fit([f"gpucomm compare: {word} ({len(failed)} failing verdicts of {len(new.rows)} rows"
                  + (f", {len(levels.failed)} regressions at the levels" if levels is not None else "") + ")"
                  + unjudged], width)
    out.write("\n".join(lines) + "\n")
    return EXIT_FAILED if g.failed else EXIT_OK
