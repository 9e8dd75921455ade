"""The baseline the views draw: the one that judged the run, of this machine's shape only (issue 47).

**Stored with the report.**  A run judged against a baseline keeps, in its JSON report
(``baseline.drawn``, :func:`drawn_document`), the figures the plots and the page need of each case it measured:
per run of the baseline that the verdicts used (the gate's runs of this machine's shape:
``gate.machines.fit_machine``), its id, session and summary (median GB/s, p50 / p99 us) and its single-op
tail sketch; not the runs' per-iteration figures nor their fingerprints (a few KB a case, not the file).  A
later ``gpucomm html REPORT`` or ``gpucomm plot REPORT`` draws that (:func:`stored_figures`), not the file as
it has grown since, so the page shows what the run saw.

**Given on the command line.**  ``gpucomm plot --baseline B`` and ``gpucomm html --baseline B`` take B's runs
of the report's machine shape only, by the gate's own rule (:func:`fitted_reference`,
``gate.machines.MATCH_RULE``): the shipped ``h200.json`` drawn for a one-H200 report is its 1-GPU runs, not
its 2-GPU ones, as ``gpucomm compare`` judges it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures
    from .document import ReportDocument
    from .saved import Reference

__all__ = ["DRAWN_KEY", "drawn_document", "stored_figures", "fitted_reference", "FittedReference"]

#: the key of the report's ``baseline`` section that holds the figures drawn
DRAWN_KEY = "drawn"
#: the run summary's keys kept (``sweeps.sweeps_from_baseline``, ``baseline_figures.CaseFigures`` read them)
_SUMMARY_KEYS = ("median_gbps", "p50_us", "p99_us", "n")


def drawn_document(baseline_doc: Optional[Mapping[str, Any]], case_keys: Sequence[Optional[str]]
                   ) -> Optional[dict[str, Any]]:
    """The part of a baseline document (the gate's, fitted to this machine) that the views draw of the cases
    ``case_keys`` (the rows' verdicts' ``case``): see the module doc.  None without a document or a case."""
    if not isinstance(baseline_doc, Mapping) or not isinstance(baseline_doc.get("cases"), Mapping):
        return None
    wanted = {k for k in case_keys if k}
    cases: dict[str, Any] = {}
    used: set[str] = set()
    for key, case in baseline_doc["cases"].items():
        if key not in wanted or not isinstance(case, Mapping):
            continue
        runs = []
        for r in case.get("runs") or []:
            if not isinstance(r, Mapping):
                continue
            found = r.get("summary")
            summary: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            run = {"run_id": r.get("run_id"), "summary": {k: summary[k] for k in _SUMMARY_KEYS if k in summary}}
            if isinstance(r.get("tail"), Mapping):
                run["tail"] = r["tail"]
            runs.append(run)
            used.add(str(r.get("run_id")))
        cases[str(key)] = {**{k: v for k, v in case.items() if k != "runs"}, "runs": runs}
    if not cases:
        return None
    runs = [{k: r.get(k) for k in ("run_id", "date", "session") if k in r}
            for r in baseline_doc.get("runs") or [] if isinstance(r, Mapping) and str(r.get("run_id")) in used]
    return {"schema": baseline_doc.get("schema"), "name": baseline_doc.get("name"), "runs": runs, "cases": cases}


def stored_figures(doc: "ReportDocument") -> Optional["BaselineFigures"]:
    """The figures of the baseline that judged the run, as the report stores them (``baseline.drawn``); None
    where it holds none (a run without a baseline, a report of an earlier version) or they cannot be read, and
    for a report ``gpucomm compare --json`` wrote: its verdicts were made against another file, which it does
    not store (its page says "its file not drawn")."""
    from ..analysis.baseline_figures import BaselineFigures

    if doc.compared is not None:
        return None
    stored = doc.baseline.data.get(DRAWN_KEY) if doc.baseline is not None else None
    if not isinstance(stored, Mapping):
        return None
    try:
        return BaselineFigures.of(stored)
    except ValueError:
        return None


class FittedReference:
    """A reference (``saved.Reference``) fitted to the report's machine: ``figures`` of its runs of that shape
    only (all of them where nothing tells the shapes apart), ``lines`` what the gate's header says of the
    fit (the runs set aside, or a warning where no run is of this shape)."""

    def __init__(self, ref: "Reference", figures: "BaselineFigures", lines: list[str]) -> None:
        self.ref, self.figures, self.lines = ref, figures, lines


def fitted_reference(ref: "Reference", doc: "ReportDocument") -> FittedReference:
    """``ref`` fitted to the machine of ``doc`` (its fingerprint) by ``gate.machines.fit_machine``, as the gate
    and ``gpucomm compare`` take it.  A report taken as the baseline is one run: kept as it is.  Raises
    ``gate.machines.MachineMismatch`` (a file of the other kind: CPU against GPU)."""
    from ..analysis.baseline_figures import BaselineFigures
    from ..gate.machines import fit_machine
    from ..gate.store import to_baseline

    if ref.kind != "baseline":
        return FittedReference(ref, ref.figures, [])
    fit = fit_machine(to_baseline(ref.path, ref.doc), doc.fingerprint)
    fitted = fit.baseline.doc if fit.baseline.doc is not None else ref.doc
    return FittedReference(ref, BaselineFigures.of(fitted), fit.header_lines())
