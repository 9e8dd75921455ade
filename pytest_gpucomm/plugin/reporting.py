"""The session's reports: gathers the session's state (records, gate, baseline, curves, levels) into the
documents of :mod:`pytest_gpucomm.report` and writes them at the session's end.

The rendering itself (tables, the JSON document, the pytest-benchmark export) is ``report.run``'s and reads
records only; this module is where the plugin's ``State`` meets it.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..report.run import (CURVE_LIMIT, GATE_HEADERS, LEGEND, benchmark_document, gate_columns,
                          json_document, level_lines, render_table, sensitivity_lines, straggler_lines,
                          tail_counts, write_json)

if TYPE_CHECKING:
    from .state import State

__all__ = ["baseline_document", "baseline_extra", "curves_of", "gate_summary_lines", "matrices_of",
           "report_document", "session_levels", "summary_lines", "write_reports"]


def baseline_document(state: "State") -> Optional[dict[str, Any]]:
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


def curves_of(state: "State") -> tuple[list[dict[str, Any]], list[str]]:
    """The "curves" section of the run (``curves.curve_report``: each sweep's model, compared with the
    baseline's curve where the baseline has the sweep: ``state.baseline_doc``), and a note where it cannot be
    made."""
    from ..analysis.curves import curve_report, sweeps, sweeps_from_baseline

    try:
        now = sweeps(state.records)
        doc = state.baseline_doc
        return curve_report(now, sweeps_from_baseline(doc) if doc is not None else None), []
    except Exception as e:  # the curves explain, the verdicts decide: a curve that cannot be made is a note
        return [], [f"gpucomm: no curves section: {type(e).__name__}: {e}"]


def matrices_of(state: "State") -> list[str]:
    """The "copy matrices" section of the run (``matrices.matrix_lines``, against ``state.baseline_doc``), or
    a note where it cannot be made: the matrices explain, the verdicts decide."""
    from ..analysis.matrices import MATRIX_LIMIT, copy_matrices, matrix_lines

    try:
        rows = [{"test": r.nodeid, **r.measurement.to_dict(), **({"baseline": r.baseline} if r.baseline else {})}
                for r in state.records if r.measurement.kind == "copy"]
        return matrix_lines(copy_matrices(rows, state.baseline_doc, layout=state.layout), limit=MATRIX_LIMIT)
    except Exception as e:
        return [f"gpucomm: no copy matrices: {type(e).__name__}: {e}"]


def report_document(state: "State") -> dict[str, Any]:
    """The run's JSON report (:func:`json_document` with the baseline, launch and curves sections): what
    --gpucomm-json writes and the plots are drawn from."""
    section = baseline_extra(state)
    extra: dict[str, Any] = {"baseline": section} if section else {}
    launch = state.launch_extra()
    if launch:
        extra["launch"] = launch.to_dict()
    extra["curves"] = state.curves
    return json_document(state.records, settings=state.settings.to_dict(), fingerprint=state.fingerprint,
                         extra=extra)


def summary_lines(state: "State") -> list[str]:
    """The "gpucomm results" section of the terminal summary: hardware, table, legend, verdicts, notes."""
    lines = []
    headline = state.headline()
    if headline:
        lines.append(f"hardware: {headline}")
    gated = any(r.baseline is not None for r in state.records)
    table = render_table(state.records, GATE_HEADERS if gated else None,
                         gate_columns(state.records) if gated else None)
    lines += table.splitlines()
    lines.append(LEGEND)
    lines += matrices_of(state)
    from ..analysis.curves import curve_lines

    lines += curve_lines(state.curves, limit=CURVE_LIMIT)
    lines += straggler_lines(state.records)
    if gated:
        counts = Counter(str(r.status) for r in state.records)
        lines.append("gpucomm verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                     + tail_counts(state.records))
        if state.from_workers.gate_header:
            lines += state.from_workers.gate_header
        elif state.settings.baseline and state.gate.loaded:
            lines += state.gate.header_lines()[1:]
        lines += gate_summary_lines(state)
    workers = state.from_workers.workers
    if workers > 1:
        lines.append(f"gpucomm: {workers} pytest-xdist workers measured side by side: their measurements may have "
                     "slowed each other (compare with a run without -n)")
    return lines + state.notes


def gate_summary_lines(state: "State") -> list[str]:
    """What the gate can catch (per case, the smallest drop it catches; the cases not gated and their fix)
    and the run at the gate's levels."""
    lines = sensitivity_lines([r.baseline for r in state.records if r.baseline], [r.nodeid for r in state.records
                                                                                  if r.baseline])
    return lines + level_lines(state.levels, {str(r.baseline["case"]): r.nodeid for r in state.records
                                             if r.baseline and r.baseline.get("case")})


def baseline_extra(state: "State") -> Optional[dict[str, Any]]:
    """The "baseline" section of the JSON report: the file, the number of gated comparisons, what changed
    in the environment, the baseline's common spread per group (or what the xdist workers said of all
    that), and the run at the gate's levels."""
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
    return {**extra, "levels": state.levels.to_dict() if state.levels is not None else None}


def session_levels(state: "State") -> Any:
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
    return gate.levels(verdicts)


def write_reports(state: "State", *, finished: bool = True, is_worker: bool = False) -> None:
    """At the end of the session: save the run into the baseline (--gpu-baseline-save; a run that did not
    finish only with --gpu-baseline-save-partial), write the JSON report and the pytest-benchmark export
    (not in a pytest-xdist worker: the controller writes them with every worker's rows).  Each adds a line
    to ``state.notes``; one that cannot be written says so there and sets ``state.write_failed``, and the
    others are still written."""
    from ..env.hardware import now_iso

    s = state.settings
    date = now_iso()
    if s.baseline_save and not state.gate.loaded and state.from_workers.baseline_path:
        state.gate.adopt(Path(state.from_workers.baseline_path))  # the workers measured; the controller saves

    def attempt(what: str, write: Any) -> None:
        try:
            write()
        except Exception as e:  # any failure: say what was not written, keep the rest
            state.write_failed = True
            state.notes.append(f"gpucomm: ERROR: {what} was NOT written: {e}")

    if s.baseline_save and state.gate.loaded and not is_worker:
        if finished or s.baseline_save_partial:
            def save() -> None:
                # a figure of 0 (a collective of one rank, @world(1): busbw 0) is nothing to gate; the baseline
                # file accepts positive figures only, so those are left out, and said so
                keep = [r for r in state.records if math.isfinite(r.measurement.gbps) and r.measurement.gbps > 0]
                zero = len(state.records) - len(keep)
                if zero:
                    state.notes.append(f"gpucomm: {zero} of this run's {len(state.records)} measurements are not saved "
                                       f"to {state.gate.path}: their figure is 0 GB/s (a collective of one rank has "
                                       "busbw 0), nothing to gate")
                if not keep:
                    return
                path, n = state.gate.save(keep, state.fingerprint, date)
                state.notes.append(f"gpucomm: saved {n} cases of this run (id {state.gate.run_id}) to {path}"
                                   + ("" if finished
                                      else " (an unfinished run, saved with --gpu-baseline-save-partial)"))

            attempt(f"the baseline {state.gate.path}", save)
        else:
            state.notes.append(
                f"gpucomm: the run did not finish, so its {len(state.records)} measurements were NOT saved to "
                f"{state.gate.path} (--gpu-baseline-save-partial saves an unfinished run)"
            )
    if is_worker:
        return
    made: list[dict[str, Any]] = []

    def document() -> dict[str, Any]:  # the JSON report and the plots draw from one document, made once
        if not made:
            made.append(report_document(state))
        return made[0]

    if s.json_path:
        json_path = s.json_path  # a str here, also in the closure

        def json_report() -> None:
            write_json(json_path, document())
            state.notes.append(f"gpucomm: wrote {len(state.records)} measurements to {json_path}")

        attempt(f"the JSON report {s.json_path}", json_report)
    if s.plots_dir:
        plots_dir = s.plots_dir

        def plots() -> None:
            from ..report.plots import all_figures, save_all

            state.plot_paths = save_all(all_figures(document(), state.baseline_doc), plots_dir,
                                        s.plots_format)
            state.notes.append(f"gpucomm: drew {len(state.plot_paths)} plots into {plots_dir}"
                               + ("" if state.baseline_doc is None else " (against the baseline as it was before "
                                  "this run)"))

        attempt(f"the plots in {s.plots_dir}", plots)
    if s.benchmark_json:
        benchmark_json = s.benchmark_json

        def benchmark_report() -> None:
            write_json(benchmark_json, benchmark_document(state.records, state.fingerprint, date))
            state.notes.append(f"gpucomm: wrote the pytest-benchmark export to {benchmark_json}")

        attempt(f"the pytest-benchmark export {s.benchmark_json}", benchmark_report)

