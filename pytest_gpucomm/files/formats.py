"""The format versions of the two files users keep: the JSON report (``--gpucomm-json``) and the baseline
file (``baselines/<name>.json``).  Every earlier layout that was ever written is read, upgraded on read to
today's; a newer version is refused, naming both versions.  Standard library only.

**The rule from now on.**  A change to what a stored word means -- a status word, a key's unit or meaning, a
field a reader needs -- bumps the version here (:data:`REPORT_VERSION`, :data:`BASELINE_VERSION`) and adds
one step to :data:`REPORT_STEPS` / :data:`BASELINE_STEPS` that turns the previous version into the new one,
with a stored sample of the previous version in ``tests/data/formats/`` (written by the code of that time).
An optional field that readers may ignore needs no new version.  The steps write the stored words
literally (``"not gated"``, not ``Status.NOT_GATED``): the words of a version never change, whatever the
vocabulary says later.

**Version 1, in several layouts.**  Until version 2 every report said ``"version": 1`` and every baseline
``"schema_version": 1``, while their meaning changed (git history of ``report/run.py`` (was ``report.py``),
``gate/verdicts.py`` (was ``gate.py``), ``vocab.py``, ``gate/store.py`` (was ``baseline.py``)).  The label
cannot tell these layouts apart, so the step from 1 reads each one's content.  "From A until B": written by
the commits that hold A and not B.  Reports::

    layout      from .. until    what differs from today's, and what the step does
    1-plain     08e7154 8ccb4e8  no gate: no verdicts, no tolerance or alpha in "settings"; nothing to do
    1-noisy     8ccb4e8 543271f  a verdict may say "noisy" (row "status" and "baseline.status") -> "not
                                 gated"; "baseline.remeasured" is true/false (one re-measure at most) -> 1/0,
                                 today's count; its "p_value", "run_spread" and "ci95" (a Moses interval) are
                                 the decision of that time, kept as they are (no reader reads them)
    1-medians   543271f 3c15d8c  re-measures kept as their medians only ("remeasures": median_gbps, fresh,
                                 how): gpucomm compare cannot replay them and says so (kept as they are); no
                                 "curves" section (the readers compute it from the rows); no "strict" in
                                 "settings": set true where a verdict says "NEW" or "NOT GATED" (words only
                                 --gpu-baseline-strict wrote), else left out (the readers' default: not
                                 strict).  Added in the range: "stragglers", "outliers" (0870ae7), the tail
                                 verdict "baseline.tail" (38fd895)
    1-curves    3c15d8c 366d54d  the curves section, re-measures kept whole, "strict"; nothing to do
    1-levels    366d54d 6d51e18  the gate's levels ("baseline.levels"); nothing to do
    1-folds     6d51e18 (v2)     the folds ("folds", "baseline.fold_runs"): today's layout, labelled 1

``noisy`` (from 8ccb4e8 until 543271f; ``gate.py`` and ``stats.DECISION_RULE`` step 5 of that time) was the
verdict of a case that was neither a regression nor an improvement while "the baseline's own spread (the
larger of s and s_obs) is too wide to hold the tolerance ... No verdict is guessed; record more baseline runs
on a steadier machine, or raise the tolerance"; it passed, also under ``--gpu-baseline-strict`` (which then
turned only ``new`` into ``NEW``). 543271f replaced it by ``not gated``: "neither, and this baseline cannot
catch a drop of twice the tolerance", which passes, and fails as ``NOT GATED`` only with strict. Both words
say the same -- not shown to regress, and the baseline too spread to hold the tolerance, fixed by more
baseline runs or a wider tolerance -- so ``noisy`` reads as ``not gated``: never ``ok`` (that claims a gated
case) and never ``NOT GATED`` (a noisy case never failed a test). The word was never written again.

Baseline files::

    layout            from .. until    what differs from today's, and what the step does
    1-unlabelled      2710a6f 543271f  no "session" on the runs: each run reads as a session of its own (as
                                       today's reader takes any run without one); nothing to do
    1-published-runs  8ccb4e8 0e18a1f  a "published" file that --gpu-baseline-save added measured runs to
                                       kept "source": "published"; from 0e18a1f every writer relabels it
                                       (merge_run, gpucomm baselines merge): "published" means no measured
                                       run.  -> "measured", and source_detail says from when, as a save of
                                       today's writes it
    1-sessions        543271f 38fd895  "session" labels; a job across nodes' "node", "host", "layout"
                                       (43cdb4c); nothing to do
    1-tails           38fd895 (v2)     a run's single-op sketch "tail": today's layout, labelled 1

A baseline upgraded on read is written back as version 2 by the next save to it (``store.save_runs`` and
``store.update_document`` write the document as read, whole and atomically).  The stored samples of every
layout, and the commands that made them, are in ``tests/data/formats/``.
"""

from __future__ import annotations

from typing import Callable, Mapping

__all__ = ["REPORT_FORMAT", "REPORT_VERSION", "BASELINE_SCHEMA", "BASELINE_VERSION", "REPORT_STEPS",
           "BASELINE_STEPS", "FormatError", "upgrade_report", "upgrade_baseline"]

#: the ``format`` of the JSON report and its ``version`` written today
REPORT_FORMAT = "pytest-gpucomm-report"
REPORT_VERSION = 2
#: the ``schema`` of a baseline file and its ``schema_version`` written today
BASELINE_SCHEMA = "pytest-gpucomm-baseline"
BASELINE_VERSION = 2


class FormatError(ValueError):
    """A document of a version this pytest-gpucomm cannot read (the callers pass their own error class)."""


def _at(where: str) -> str:
    return f"{where}: " if where else ""


# -- reports ---------------------------------------------------------------------------------------------


def _report_1_to_2(doc: dict[str, object]) -> dict[str, object]:
    """Version 1, any layout (see the module doc) -> 2."""
    rows = doc.get("rows")
    if isinstance(rows, list):
        doc["rows"] = rows = [_row_1_to_2(r) if isinstance(r, Mapping) else r for r in rows]
        settings = doc.get("settings")
        words = {v.get("status") for r in rows if isinstance(r, Mapping)
                 for v in (r, r.get("baseline")) if isinstance(v, Mapping)}
        if isinstance(settings, Mapping) and "strict" not in settings and words & {"NEW", "NOT GATED"}:
            doc["settings"] = {**settings, "strict": True}
    doc["version"] = 2
    return doc


def _row_1_to_2(row: Mapping[str, object]) -> Mapping[str, object]:
    verdict = row.get("baseline")
    changed_verdict = isinstance(verdict, Mapping) and (
        verdict.get("status") == "noisy" or isinstance(verdict.get("remeasured"), bool))
    if row.get("status") != "noisy" and not changed_verdict:
        return row
    out = dict(row)
    if out.get("status") == "noisy":
        out["status"] = "not gated"
    if changed_verdict:
        assert isinstance(verdict, Mapping)
        v = out["baseline"] = dict(verdict)
        if v.get("status") == "noisy":
            v["status"] = "not gated"
        if isinstance(v.get("remeasured"), bool):
            v["remeasured"] = int(v["remeasured"])
    return out


#: version -> the step that turns a report of that version into the next version's
REPORT_STEPS: dict[int, Callable[[dict[str, object]], dict[str, object]]] = {1: _report_1_to_2}


def upgrade_report(doc: Mapping[str, object], where: str = "",
                   error: Callable[[str], Exception] = FormatError) -> dict[str, object]:
    """A report (its ``format`` checked by the caller) in today's layout: a copy of ``doc`` upgraded step by
    step from its ``version`` (``doc`` itself is not changed; the copy shares what no step changed).
    ``error(message)``, the message naming ``where`` (the file), for a version that is not a whole number
    >= 1 or is newer than :data:`REPORT_VERSION`.  Anything else malformed is left for the caller's checks."""
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise error(f"{_at(where)}invalid report version {version!r}: a whole number >= 1 is expected")
    if version > REPORT_VERSION:
        raise error(f"{_at(where)}report version {version} is newer than this pytest-gpucomm reads "
                    f"({REPORT_VERSION}): upgrade pytest-gpucomm")
    out = dict(doc)
    for v in range(version, REPORT_VERSION):
        out = REPORT_STEPS[v](out)
    return out


# -- baseline files --------------------------------------------------------------------------------------


def _baseline_1_to_2(doc: dict[str, object]) -> dict[str, object]:
    """Version 1, any layout (see the module doc) -> 2."""
    cases, runs = doc.get("cases"), doc.get("runs")
    measured = isinstance(cases, Mapping) and any(isinstance(c, Mapping) and isinstance(c.get("runs"), list)
                                                  and c["runs"] for c in cases.values())
    if doc.get("source") == "published" and measured:
        first = runs[0].get("date") if isinstance(runs, list) and runs and isinstance(runs[0], Mapping) else None
        detail = doc.get("source_detail")
        doc["source"] = "measured"
        doc["source_detail"] = ((detail if isinstance(detail, str) else "")
                                + f" Measured runs added from {first or 'an unknown date'} on; published floors "
                                "are kept for the cases that have no measured run.").strip()
    doc["schema_version"] = 2
    return doc


#: version -> the step that turns a baseline document of that version into the next version's
BASELINE_STEPS: dict[int, Callable[[dict[str, object]], dict[str, object]]] = {1: _baseline_1_to_2}


def upgrade_baseline(doc: Mapping[str, object], where: str = "",
                     error: Callable[[str], Exception] = FormatError) -> dict[str, object]:
    """A baseline document (its ``schema`` checked by the caller) in today's layout: a copy of ``doc``
    upgraded step by step from its ``schema_version`` (``doc`` itself is not changed).  ``error(message)``,
    naming ``where`` (the file), for a version newer than :data:`BASELINE_VERSION`.  A version that is not a
    whole number >= 1 is left as it is, for the schema to name (``2.0`` is a whole number, as to the schema)."""
    label = doc.get("schema_version")
    version = (label if isinstance(label, int) and not isinstance(label, bool)
               else int(label) if isinstance(label, float) and label.is_integer() else None)
    if version is not None and version > BASELINE_VERSION:
        raise error(f"{_at(where)}baseline schema_version {label} is newer than this pytest-gpucomm reads "
                    f"({BASELINE_VERSION}): upgrade pytest-gpucomm")
    out = dict(doc)
    if version is not None and version >= 1:  # else the schema names what is wrong with the label
        for v in range(version, BASELINE_VERSION):
            out = BASELINE_STEPS[v](out)
    return out
