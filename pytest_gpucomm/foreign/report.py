"""A run of another tool as our JSON report (:func:`report_of`), which every reader of a saved report reads as
one of ours, and the words that say what the file was (:func:`describe_foreign`)."""

from __future__ import annotations

from typing import Any, Mapping

from ..files.formats import REPORT_FORMAT, REPORT_VERSION
from .model import ForeignRun

__all__ = ["FOREIGN_KEY", "report_of", "describe_foreign"]

#: the report's top-level key that says which tool's file it was made of (kept by ``ReportDocument.extra``)
FOREIGN_KEY = "foreign"


def report_of(run: ForeignRun) -> dict[str, Any]:
    """The JSON report of ``run``: its fingerprint the run's environment, a row per case (status measured: the
    tool's own checks passed, or the file was refused), and under :data:`FOREIGN_KEY` the tool, its version,
    the file, whether its samples are per-iteration times, and what was left out."""
    fingerprint = dict(run.env)
    if run.date:
        fingerprint.setdefault("date", run.date)
    rows = [{"test": c.test_id, **c.measurement.to_dict(), "status": "measured", "checks": []} for c in run.cases]
    return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "settings": None, "fingerprint": fingerprint,
            "rows": rows, FOREIGN_KEY: {"tool": run.tool, "version": run.version, "path": run.path,
                                        "per_iteration": run.per_iteration, "notes": list(run.notes)}}


def describe_foreign(foreign: Mapping[str, Any], path: str = "") -> str:
    """What a report made of another tool's file (its :data:`FOREIGN_KEY` section) is, for a header: ``the
    nccl-tests file PATH (nccl-tests JSON format 3; per-iteration times (-I 1) as the samples)``, or for a
    summary ``(...; nccl-tests summary: one figure per case, judged with the baseline's run spread)``; what
    the reader left out of it is counted."""
    tool, version = foreign.get("tool", "?"), foreign.get("version", "?")
    how = ("per-iteration times (-I 1) as the samples" if foreign.get("per_iteration")
           else f"{tool} summary: one figure per case, judged with the baseline's run spread")
    notes = foreign.get("notes") or []
    left = f"; {len(notes)} of its tests left out: {'; '.join(map(str, notes))}" if notes else ""
    return f"the {tool} file{' ' + path if path else ''} ({tool} {version}; {how}{left})"
