"""The session's reports: the one place that reads the pytest session's state for them.

At the session's end the run is judged at the gate's levels (:func:`session_levels`), the baseline file is
read as it was before this run saves into it (:func:`baseline_document`), the curves are made
(:func:`curves_of`), and :func:`write_reports` saves the run into the baseline; then the run's report
document is made, once (:func:`session_report`: ``report.document.ReportDocument.of_run`` of the records,
the settings, the fingerprint, the baseline section, the job's shape and the curves, kept in the config's
stash), and every view renders it: the JSON report, the plots, the pytest-benchmark export
(:func:`write_reports`) and the terminal summary (:func:`summary_lines`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import pytest

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures
    from ..gate.levels import RunLevels
    from ..report.document import ReportDocument
    from .state import State

__all__ = ["SessionReport", "NOT_WRITTEN_KEY", "baseline_document", "baseline_extra", "baseline_figures", "curves_of",
           "session_levels", "session_report", "run_document", "summary_lines", "write_reports"]


@dataclass(frozen=True)
class SessionReport:
    """The run's report document, and the figures of the baseline file it was judged against (as the file was
    before this run saved into it; None without one): what every view of the session renders."""

    document: "ReportDocument"
    baseline: Optional["BaselineFigures"]


REPORT_KEY = pytest.StashKey[SessionReport]()
#: the outputs that could not be written at the session's end (:func:`write_reports`), each as "what"
NOT_WRITTEN_KEY = pytest.StashKey[list[str]]()
FIGURES_KEY = pytest.StashKey[Optional["BaselineFigures"]]()


def baseline_document(state: "State") -> Optional[dict[str, object]]:
    """The baseline file's document as this session judged against it (read before this run saves into it),
    or None without one: the gate's, or in a pytest-xdist controller the file the workers named."""
    b = state.gate.baseline if state.settings.baseline and state.gate.loaded else None
    if b is not None:
        return b.doc
    path = state.from_workers.baseline_path if state.settings.baseline else None
    if path and Path(path).is_file():
        from ..gate.store import read_document

        return read_document(Path(path))
    return None


def baseline_figures(state: "State") -> Optional["BaselineFigures"]:
    """The figures of ``state.baseline_doc`` (``analysis.baseline_figures``), made once; None without it."""
    stash = state.config.stash
    if FIGURES_KEY not in stash:
        from ..analysis.baseline_figures import BaselineFigures

        stash[FIGURES_KEY] = BaselineFigures.of(state.baseline_doc) if state.baseline_doc is not None else None
    return stash[FIGURES_KEY]


def curves_of(state: "State") -> tuple[list[dict[str, object]], list[str]]:
    """The "curves" section of the run (``curves.curve_report``: each sweep's model, compared with the
    baseline's curve where the baseline has the sweep), and a note where it cannot be made."""
    from ..analysis.curves import curve_report
    from ..analysis.sweeps import sweeps

    try:
        figures = baseline_figures(state)
        return curve_report(sweeps(state.records), list(figures.sweeps.values()) if figures is not None else None), []
    except Exception as e:  # the curves explain, the verdicts decide: a curve that cannot be made is a note
        return [], [f"gpucomm: no curves section: {type(e).__name__}: {e}"]


def baseline_extra(state: "State") -> Optional[dict[str, object]]:
    """The "baseline" section of the JSON report: the file, the number of gated comparisons, what changed
    in the environment, the baseline's common spread per group (or what the xdist workers said of all
    that), the run at the gate's levels, the coverage, how many are gated at each level
    (``report.run.gated_counts``: the one count every view prints), and the figures of the baseline the views
    draw (``report.drawn``: the runs the verdicts used, so that a later page shows what the run saw)."""
    extra = state.from_workers.baseline
    if not extra and state.settings.baseline and state.gate.loaded:
        from ..gate import ABSENT

        gate = state.gate
        extra = {
            "path": str(gate.path),
            "comparisons": gate.n_comparisons,
            "environment_diff": [[k, None if a is ABSENT else a, None if b is ABSENT else b]
                                 for k, a, b in gate.env_diff],
            "common": gate.commons(),
        }
    if not extra:
        return extra
    from ..report.run import gated_counts

    from ..report.drawn import DRAWN_KEY, drawn_document

    levels = state.levels.to_dict() if state.levels is not None else None
    figures = baseline_figures(state)  # the runs the gate judged against: this machine's shape only
    drawn = drawn_document(figures.document if figures is not None else None,
                           [(r.baseline or {}).get("case") for r in state.records])
    return {**extra, "levels": levels, "coverage": state.coverage.to_dict() if state.coverage is not None else None,
            "gated": gated_counts([r.baseline for r in state.records], levels).to_dict(),
            **({DRAWN_KEY: drawn} if drawn is not None else {})}


def session_levels(state: "State") -> Optional["RunLevels"]:
    """The run judged at the three levels (gate.levels), from the verdicts of every record; None when nothing
    was compared with measured runs.  A pytest-xdist controller, which did not read the baseline, reads it
    here from the path the workers judged against."""
    verdicts = [r.baseline for r in state.records if r.baseline and r.baseline.get("log_ratio") is not None]
    if not verdicts:
        return None
    gate = state.gate
    if gate.baseline is None and state.from_workers.baseline_path:
        from ..gate.store import load_baseline

        path = Path(state.from_workers.baseline_path)
        gate.use(path, load_baseline(path), state.from_workers.fingerprint or {},
                 {r.nodeid for r in state.records})
    if gate.baseline is None:
        return None
    from ..gate.run_levels import judge_levels

    return judge_levels(gate.fitted(), verdicts, gate.settings)


def session_report(state: "State") -> SessionReport:
    """The run's report document (see the module doc), made at the first call and kept in the stash: the
    session's records, verdicts and levels are final by then (after :func:`write_reports` saved the run)."""
    stash = state.config.stash
    if REPORT_KEY not in stash:
        from ..report.document import ReportDocument

        doc = ReportDocument.of_run(state.records, settings=state.settings.to_dict(), fingerprint=state.fingerprint,
                                    baseline=baseline_extra(state), launch=_launch_dict(state), curves=state.curves)
        stash[REPORT_KEY] = SessionReport(doc, baseline_figures(state))
    return stash[REPORT_KEY]


def _replaces(path: str) -> str:
    """What the note of a report written to ``path`` adds when it replaces a file: a run writes its reports
    where it is told, every run (a CI job's reports/gpucomm.json), and says so rather than asking --force."""
    return " (replacing the file that was there)" if os.path.lexists(path) else ""


def run_document(state: "State") -> Optional["ReportDocument"]:
    """The run's document (:func:`session_report`), None where the run measured nothing: what pytest-html's
    summary renders."""
    return session_report(state).document if state.records else None


def _launch_dict(state: "State") -> Optional[dict[str, object]]:
    shape = state.launch_extra()
    return shape.to_dict() if shape is not None else None


def summary_lines(state: "State", width: int = 120, full: bool = False) -> list[str]:
    """The "gpucomm results" section of the terminal summary (``report.terminal.summary_lines`` of the
    session's document, fitted to ``width``; ``full``: every column of the table), with the session's own
    lines: the hardware and the gate's header where the session's header did not print them (a pytest-xdist
    controller prints its workers'), the notes.  Nothing the header printed is printed again."""
    from ..report.terminal import summary_lines as render

    report = session_report(state)
    # a pytest-xdist controller's header has neither the hardware nor the baseline: its workers' are printed
    header = list(state.from_workers.gate_header) if report.document.gated else []
    notes: list[str] = []
    workers = state.from_workers.workers
    if workers > 1:
        notes.append(f"gpucomm: {workers} pytest-xdist workers measured side by side: their measurements may have "
                     "slowed each other (compare with a run without -n)")
    lines = render(report.document, report.baseline, headline=state.from_workers.headline, gate_header=header,
                   notes=notes + state.notes, width=width, full=full)
    if state.coverage is None:
        return lines
    from ..text import fit

    # the section's first line says how much of the run the gate could judge
    return fit([state.coverage.headline(state.settings.baseline or "")], width) + lines


def _save_baseline(state: "State", finished: bool, date: str) -> None:
    """Save the run into the baseline (see :func:`write_reports`)."""
    # a figure of 0 (a collective of one rank, @world(1): busbw 0) is nothing to gate; the baseline file
    # accepts positive figures only, so those are left out, and said so
    keep = [r for r in state.records if math.isfinite(r.measurement.gbps) and r.measurement.gbps > 0]
    zero = len(state.records) - len(keep)
    if zero:
        state.notes.append(f"gpucomm: {zero} of this run's {len(state.records)} measurements are not saved "
                           f"to {state.gate.path}: their figure is 0 GB/s (a collective of one rank has "
                           "busbw 0), nothing to gate")
    if not keep:
        return
    from ..gate.recording import save_records

    gate = state.gate
    if gate.path is None:
        raise RuntimeError("no baseline file was resolved to save into (Gate.load was not called)")
    n = save_records(gate.path, keep, state.fingerprint, date, layout=gate.layout, run_id=gate.run_id,
                     name=gate.baseline.name if gate.baseline is not None else gate.path.stem,
                     max_runs=gate.settings.max_runs, shipped_dir=gate.settings.shipped_dir)
    state.notes.append(f"gpucomm: saved {n} cases of this run (id {gate.run_id}) to {gate.path}"
                       + ("" if finished else " (an unfinished run, saved with --gpu-baseline-save-partial)"))


def write_reports(state: "State", *, finished: bool = True, is_worker: bool = False) -> None:
    """At the end of the session: save the run into the baseline (--gpu-baseline-save; a run that did not
    finish only with --gpu-baseline-save-partial), then write the views of the run's document: the JSON
    report, the plots and the pytest-benchmark export (not in a pytest-xdist worker: the controller writes
    them with every worker's rows).  Each adds a line to ``state.notes``; one that cannot be written says so
    there and sets ``state.write_failed``, and the others are still written."""
    from ..env.hardware import now_iso

    s = state.settings
    date = now_iso()
    if s.baseline_save and not state.gate.loaded and state.from_workers.baseline_path:
        state.gate.adopt(Path(state.from_workers.baseline_path))  # the workers measured; the controller saves

    def attempt(what: str, write: Callable[[], None]) -> None:
        try:
            write()
        except Exception as e:  # any failure: say what was not written, keep the rest
            state.write_failed = True
            state.config.stash.setdefault(NOT_WRITTEN_KEY, []).append(what)
            state.notes.append(f"gpucomm: ERROR: {what} was NOT written: {e}")

    if s.baseline_save and state.gate.loaded and not is_worker:
        if finished or s.baseline_save_partial:
            attempt(f"the baseline {state.gate.path}", lambda: _save_baseline(state, finished, date))
        else:
            state.notes.append(
                f"gpucomm: the run did not finish, so its {len(state.records)} measurements were NOT saved to "
                f"{state.gate.path} (--gpu-baseline-save-partial saves an unfinished run)"
            )
    if is_worker:
        return
    if s.json_path:
        json_path = s.json_path  # a str here, also in the closure

        def json_report() -> None:
            from ..report.exports import write_json

            doc = session_report(state).document
            replaced = _replaces(json_path)
            write_json(json_path, doc)
            state.notes.append(f"gpucomm: wrote {len(doc.rows)} measurements to {json_path}{replaced}")

        attempt(f"the JSON report {s.json_path}", json_report)
    if s.plots_dir:
        plots_dir = s.plots_dir

        def plots() -> None:
            from ..report.plots import all_figures, save_all

            report = session_report(state)
            state.plot_paths = save_all(all_figures(report.document, report.baseline), plots_dir, s.plots_format)
            state.notes.append(f"gpucomm: drew {len(state.plot_paths)} plots into {plots_dir}"
                               + ("" if report.baseline is None else " (against the baseline as it was before "
                                  "this run)"))

        attempt(f"the plots in {s.plots_dir}", plots)
    if s.benchmark_json:
        benchmark_json = s.benchmark_json

        def benchmark_report() -> None:
            from ..report.exports import benchmark_document, write_json

            replaced = _replaces(benchmark_json)
            write_json(benchmark_json, benchmark_document(session_report(state).document, date))
            state.notes.append(f"gpucomm: wrote the pytest-benchmark export to {benchmark_json}{replaced}")

        attempt(f"the pytest-benchmark export {s.benchmark_json}", benchmark_report)
