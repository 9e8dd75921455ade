"""Saved files read outside a pytest run: a JSON report (``--gpucomm-json``), and what a report is compared
with -- a baseline file (NAME or PATH, as ``--gpu-baseline`` takes it) or another report.

Used by the ``gpucomm`` command (:mod:`pytest_gpucomm.cli`), the plots and the HTML page: the one reader of a
saved report, so that every command gives one answer on a file (a status no pytest-gpucomm writes, such as
``noisy`` in a report of version 2, is refused here, by ``show``, ``compare``, ``plot`` and ``html`` alike).
A file compared with (a baseline or a report taken as one) is held to the baseline's limit,
``gate.store.MAX_BASELINE_BYTES`` (256 MiB), and refused by its size before it is read; a report read as
itself may hold :data:`MAX_REPORT_BYTES`.  Every problem is
a :class:`ReportError` (a ValueError) that names the file and what was found, as the plugin's errors do:
a missing file, a file that is not JSON or is cut short, a document of another format, a report of a newer
version than this pytest-gpucomm reads.  A baseline file is read by :mod:`pytest_gpucomm.gate.store` (its
schema, its checks, its errors: ``BaselineError``, also a ValueError-like exception caught by the command).

No torch, no pytest: numpy through the measurement, jsonschema and filelock through the store.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from ..measurement import Measurement
    from ..analysis.baseline_figures import BaselineFigures
    from .document import ReportDocument
    from ..gate.cases import CaseRecord

# the ``format`` and the ``version`` of the JSON report written today; every earlier version is upgraded on read
from ..files.formats import REPORT_FORMAT, REPORT_VERSION, upgrade_report

__all__ = [
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "MAX_REPORT_BYTES",
    "ReportError",
    "check_report",
    "read_json",
    "load_report",
    "Reference",
    "load_reference",
    "report_as_baseline",
    "measurements_of",
    "looks_like_path",
    "as_report_json",
]

#: a report larger than this is refused (a full 8-GPU run with samples is a few MB)
MAX_REPORT_BYTES = 512 * 1024 * 1024


class ReportError(ValueError):
    """A saved file that cannot be used: the message names the file and what is wrong with it."""


def check_report(doc: Any, where: str = "") -> Mapping[str, Any]:
    """``doc`` in today's layout (upgraded from its version: ``files.formats.upgrade_report``) if it is a report
    this pytest-gpucomm reads, else ReportError naming ``where`` (a file)."""
    at = f"{where}: " if where else ""
    if not isinstance(doc, Mapping):
        raise ReportError(f"{at}not a pytest-gpucomm report: a {type(doc).__name__}, not a JSON object")
    fmt = doc.get("format")
    if fmt != REPORT_FORMAT:
        found = (f"schema {doc.get('schema')!r} (a baseline file?)" if "schema" in doc and "format" not in doc
                 else f"format {fmt!r}")
        raise ReportError(f"{at}not a pytest-gpucomm report: {found} (a report says format {REPORT_FORMAT!r})")
    doc = upgrade_report(doc, where, ReportError)
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise ReportError(f"{at}not a pytest-gpucomm report: no list of rows (rows: {type(rows).__name__})")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or not isinstance(row.get("test"), str):
            raise ReportError(f"{at}invalid report: rows[{i}] is not a measurement row (no test id)")
    from ..files.jsontext import json_path

    bad, plain = _scan_figures(doc)
    if bad:
        raise ReportError(f"{at}invalid report: at {bad[0]}{_row_of(doc, bad[1])}: {bad[2]!r} is not a finite number")
    validator = _report_validator(samples_checked=plain)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        row = _row_of(doc, list(err.absolute_path))
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        what = err.message.replace("is a required property", "is missing (a required field)")
        raise ReportError(f"{at}invalid report: at {json_path(err.absolute_path)}{row}: {what}{more}")
    _check_statuses(doc, at)
    return doc


def _check_statuses(doc: Mapping[str, Any], at: str) -> None:
    """ReportError naming the first row whose status, or whose verdict's status, is no word of
    ``vocab.Status``: every reader (``gpucomm show``, ``compare``, ``plot``, ``html``) refuses such a report
    alike, here, instead of one refusing it and the others drawing a status they do not know.  A report of
    version 1 holding ``noisy`` reads as ``not gated`` (``files.formats``), before this check."""
    from ..vocab import Status

    known = {s.value for s in Status}
    for i, row in enumerate(doc["rows"]):
        verdict = row.get("baseline")
        for where, status in ((f"$.rows[{i}].status", row.get("status", Status.MEASURED.value)),
                              (f"$.rows[{i}].baseline.status",
                               verdict.get("status") if isinstance(verdict, Mapping) else None)):
            if status is not None and status not in known:
                raise ReportError(f"{at}invalid report: at {where} ({row['test']}): unknown status {status!r} "
                                  "(not a status pytest-gpucomm writes)")


#: the fields a measurement is computed from, wherever one is (a row, a re-measure, a fold): a NaN or an
#: infinity there is refused (elsewhere a verdict may say nan: not known)
_FIGURES = ("samples_s", "busbw_factor")


def _scan_figures(doc: Any) -> tuple[Optional[tuple[str, list[Any], float]], bool]:
    """One walk over ``doc``'s figures: (the JSON path, path parts and value of the first NaN or infinity among
    them, or None; whether every ``samples_s`` list holds plain positive numbers: ints or floats, no booleans).
    Both at C speed where a list is plain (a report holds tens of thousands of samples: checked one by one by
    jsonschema they were 90 % of reading it, ``gpucomm fleet`` reads a thousand); where one is not, the schema
    checks its samples one by one and names the first bad one."""
    from ..files.jsontext import first_non_finite, json_path

    plain = True
    stack: list[tuple[Any, list[Any]]] = [(doc, [])]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                if k in _FIGURES:
                    if _plain_finite(v):  # the common case
                        plain = plain and not (k == "samples_s" and v and min(v) <= 0)
                        continue
                    bad = first_non_finite(v)
                    if bad:
                        return (json_path([*where, k]) + bad[0][1:], [*where, k], bad[1]), False
                    plain = plain and k != "samples_s"
                elif isinstance(v, (dict, list)):
                    stack.append((v, [*where, k]))
        elif isinstance(value, list):
            stack.extend((v, [*where, i]) for i, v in enumerate(value) if isinstance(v, (dict, list)))
    return None, plain


def _plain_finite(v: Any) -> bool:
    """``v`` is a finite plain number (an int or a float, no boolean) or a list of them."""
    if type(v) in (int, float):
        return math.isfinite(v)
    return isinstance(v, list) and set(map(type, v)) <= {int, float} and all(map(math.isfinite, v))


def _without_sample_items(schema: Any) -> Any:
    """``schema`` with the per-sample check of every ``samples_s`` dropped (the list's own type and length kept)."""
    if isinstance(schema, list):
        return [_without_sample_items(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "properties" and isinstance(v, dict):
            out[k] = {name: ({kk: vv for kk, vv in sub.items() if kk != "items"} if name == "samples_s"
                             else _without_sample_items(sub)) for name, sub in v.items()}
        else:
            out[k] = _without_sample_items(v)
    return out


def _row_of(doc: Mapping[str, Any], parts: list[Any]) -> str:
    """`` (test id)`` for a path into a row, else ""."""
    if len(parts) > 1 and parts[0] == "rows" and isinstance(parts[1], int):
        return f" ({doc['rows'][parts[1]].get('test')})"
    return ""


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [{"type": "null"}, schema]}


#: a measurement (``Measurement.to_dict``): a row, a re-measure, a fold's run
_MEASUREMENT: dict[str, Any] = {
    "type": "object",
    "required": ["op", "size_bytes", "bytes_per_iter", "devices", "world_size", "busbw_factor", "samples_s"],
    "properties": {
        "op": {"type": "string"},
        "kind": {"enum": ["copy", "collective"]},
        "size_bytes": {"type": "integer", "minimum": 0},
        "bytes_per_iter": {"type": "integer", "minimum": 0},
        "devices": {"type": "array", "items": {"type": "string"}},
        "world_size": {"type": "integer", "minimum": 1},
        "dtype": {"anyOf": [{"type": "null"}, {"type": "string"}]},
        "busbw_factor": {"type": "number", "minimum": 0},
        "samples_s": {"type": "array", "minItems": 1, "items": {"type": "number", "exclusiveMinimum": 0}},
        "info": {"anyOf": [{"type": "null"}, {"type": "object"}]},
    },
}
#: the re-measures and the folds' runs a verdict recorded, each with its measurement
_RERUNS = {"type": "array", "items": {"type": "object", "properties": {
    "measurement": _MEASUREMENT, "fresh": {"type": "boolean"}, "how": {"type": "string"}}}}
_TEXTS = {"type": "object", "properties": {"text": {"type": "string"}, "text_short": {"type": "string"},
                                           "status": {"type": "string"}}}
#: what the readers of a saved report use of it (the rows as measurements, the verdicts, the curves, the
#: levels, the environment diff, the fingerprint): each field's type and range, so that a malformed field is
#: named with its JSON path instead of failing a renderer.  A field the readers do not use is not checked.
REPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "version", "rows"],
    "properties": {
        "settings": _nullable({"type": "object", "properties": {
            "tolerance": _nullable({"type": "number", "minimum": 0, "exclusiveMaximum": 1}),
            "alpha": _nullable({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
            "tail_tolerance": _nullable({"type": "number", "minimum": 0, "exclusiveMaximum": 99}),
            "strict": _nullable({"type": "boolean"})}}),
        "fingerprint": _nullable({"type": "object", "properties": {
            "model": _nullable({"type": "string"}), "date": _nullable({"type": "string"})}}),
        "launch": _nullable({"type": "object", "properties": {"layout": _nullable({"type": "string"})}}),
        "outliers": {"type": "array", "items": {"type": "object"}},
        "curves": {"type": "array", "items": {
            "type": "object", "required": ["model"],
            "properties": {"model": {**_TEXTS, "required": ["text"]}, "comparison": _nullable(_TEXTS)}}},
        "baseline": _nullable({"type": "object", "properties": {
            "path": _nullable({"type": "string"}),
            "environment_diff": {"type": "array", "items": {"type": "array", "minItems": 3, "maxItems": 3,
                                                            "prefixItems": [{"type": "string"}]}},
            "levels": _nullable({"type": "object", "properties": {
                g: {"type": "array", "items": _TEXTS} for g in ("classes", "bands", "cases")}}),
        }}),
        "rows": {"type": "array", "items": {
            "type": "object",
            "required": ["test", *_MEASUREMENT["required"]],
            "properties": {
                **_MEASUREMENT["properties"],
                "test": {"type": "string"},
                "status": {"type": "string"},
                "checks": _nullable({"type": "array", "items": {"type": "string"}}),
                "baseline": _nullable({"type": "object", "properties": {
                    "baseline_gbps": _nullable({"type": "number"}), "ratio": _nullable({"type": "number"}),
                    "status": {"type": "string"}, "message": {"type": "string"},
                    "tolerance": _nullable({"type": "number", "minimum": 0, "exclusiveMaximum": 1}),
                    "remeasures": _nullable(_RERUNS), "fold_runs": _nullable(_RERUNS),
                    "tail": _nullable({"type": "object", "properties": {
                        "status": {"type": "string"},
                        "tolerance": _nullable({"type": "number", "minimum": 0, "exclusiveMaximum": 99})}})}}),
            },
        }},
    },
}


def _report_validator(samples_checked: bool = False) -> Any:
    """The report schema's validator; ``samples_checked``: every sample was found a positive number already
    (``_scan_figures``), so the schema leaves them out."""
    import jsonschema

    if samples_checked not in _VALIDATORS:
        schema = _without_sample_items(REPORT_SCHEMA) if samples_checked else REPORT_SCHEMA
        _VALIDATORS[samples_checked] = jsonschema.Draft202012Validator(schema)
    return _VALIDATORS[samples_checked]


_VALIDATORS: dict[bool, Any] = {}


def read_json(path: "str | os.PathLike[str]", what: str = "report", limit: int = MAX_REPORT_BYTES,
              limit_name: str = "pytest_gpucomm.report.saved.MAX_REPORT_BYTES") -> Any:
    """The parsed JSON of ``path``; ReportError naming the file when it is missing, a directory, a FIFO, a
    socket or a device, larger than ``limit`` bytes (refused by its size, before it is read; ``limit_name``
    names the limit), not UTF-8, empty, cut short or not JSON (``files.reading``, ``files.jsontext``).
    ``what`` names the file's role in the messages."""
    from ..files.reading import read_regular_file

    p = Path(path)
    raw = read_regular_file(p, what=what, limit=limit, limit_name=limit_name, error=ReportError)
    from ..files.jsontext import parse_json_bytes

    return parse_json_bytes(raw, p, what, ReportError)


def as_report_json(doc: Any, path: "str | os.PathLike[str]", nvbandwidth_size: Optional[int] = None) -> Any:
    """``doc``, the parsed JSON of ``path``, as a report: a file of nccl-tests, rccl-tests or nvbandwidth
    (``foreign.is_foreign``) becomes the report of its run (``foreign.report_of``: its own test ids, its
    environment as the fingerprint; ``nvbandwidth_size`` the buffer size its JSON does not hold), a
    ReportError naming the file and the field where it cannot be taken as evidence; anything else is returned
    as it is."""
    from ..foreign import ForeignError, foreign_of, is_foreign, report_of

    if not is_foreign(doc):
        return doc
    try:
        return report_of(foreign_of(doc, path, nvbandwidth_size=nvbandwidth_size))
    except ForeignError as e:
        raise ReportError(str(e)) from None


def load_report(path: "str | os.PathLike[str]") -> dict[str, Any]:
    """A saved JSON report, checked and in today's layout (:func:`check_report`): one of ours only (``gpucomm
    fleet`` and the comparison tools read our reports; ``show``, ``compare`` and ``html`` read other tools'
    files too, through ``ReportDocument.load`` and :func:`load_reference`)."""
    return dict(check_report(read_json(path, "report"), str(path)))


def looks_like_path(spec: str) -> bool:
    """Whether a baseline spec names a file (a path separator, or ``.json`` at the end) rather than a NAME:
    the same rule as ``--gpu-baseline`` (``gate.store.resolve_baseline``)."""
    return os.sep in spec or "/" in spec or bool(os.altsep and os.altsep in spec) or spec.endswith(".json")


@dataclass(frozen=True)
class Reference:
    """What a report is compared with: ``doc`` is always a baseline document (``gate.store``'s schema; a
    report given as the reference is turned into a one-run baseline, :func:`report_as_baseline`), ``kind``
    says which it was ("baseline" or "report"), ``report`` is that report's own document."""

    kind: str
    path: Path
    doc: dict[str, Any]
    report: Optional["ReportDocument"] = None

    @property
    def figures(self) -> "BaselineFigures":
        """What the views draw of the baseline (``analysis.baseline_figures``)."""
        from ..analysis.baseline_figures import BaselineFigures

        return BaselineFigures.of(self.doc)

    @property
    def name(self) -> str:
        return str(self.doc.get("name") or self.path.stem)

    def describe(self) -> str:
        if self.kind == "report":
            left = self.doc.get("source_detail")
            what = "the report"
            foreign = self.report.extra.get("foreign") if self.report is not None else None
            if isinstance(foreign, Mapping):
                from ..foreign import describe_foreign

                return (f"{describe_foreign(foreign, str(self.path))}, taken as a one-run baseline"
                        + (f" ({left})" if left else ""))
            return f"{what} {self.path} (taken as a one-run baseline" + (f"; {left})" if left else ")")
        return f"the baseline {self.name} ({self.path})"


def load_reference(spec: str, *, search_dirs: Sequence["str | os.PathLike[str]"] = (),
                   detected_model: Optional[str] = None, nvbandwidth_size: Optional[int] = None) -> Reference:
    """Resolve ``spec`` -- a baseline NAME (looked up in ``search_dirs``, as ``--gpu-baseline``), ``auto`` (the
    name for ``detected_model``), or the path of a baseline file or of a saved report -- and read it.
    A file of nccl-tests, rccl-tests or nvbandwidth is taken as a report (:func:`as_report_json`).
    Raises ReportError or ``gate.store.BaselineError`` (both name the value and the file)."""
    from ..gate.names import resolve_baseline
    from ..gate.store import MAX_BASELINE_BYTES, MAX_BASELINE_NAME, check_document, read_document

    spec = (spec or "").strip()
    if looks_like_path(spec):
        path = Path(spec).expanduser()
        # read once, and held to a baseline's limit whichever it is: a report compared with is taken as a
        # baseline, and a file larger than a baseline may be is refused by its size before it is read
        doc = read_json(path, "baseline or report", limit=MAX_BASELINE_BYTES, limit_name=MAX_BASELINE_NAME)
        doc = as_report_json(doc, path, nvbandwidth_size)  # a file of nccl-tests or nvbandwidth: its report
        if isinstance(doc, Mapping) and "format" in doc and "schema" not in doc:
            from .document import ReportDocument

            report = ReportDocument.from_json(doc, str(path))
            return Reference("report", path, report_as_baseline(report, path.stem, str(path)), report)
        return Reference("baseline", path, check_document(path, doc))
    path = resolve_baseline(spec, search_dirs=[Path(d) for d in search_dirs], detected_model=detected_model)
    return Reference("baseline", path, read_document(path))


def measurements_of(report: Mapping[str, Any], where: str = "") -> list[tuple[str, "Measurement"]]:
    """``(test id, Measurement)`` per row of a checked report; ReportError naming the row that cannot be
    read back (``document.Row.from_json``)."""
    from .document import Row

    return [(r.test, r.measurement) for r in (Row.from_json(row, where, i) for i, row in enumerate(report["rows"]))]


def report_as_baseline(report: "ReportDocument", name: str, where: str = "") -> dict[str, Any]:
    """A baseline document holding one run: the report's rows, as ``--gpu-baseline-save`` would have saved
    them (``gate.store.CaseRecord.from_measurement``, the same keys; a node's rows of a job across nodes each
    in a run of their own is not reproduced: a second row of a key goes into a ``-partK`` run).  Validated as
    a baseline file is; ReportError when it cannot be."""
    from ..gate.cases import CaseRecord
    from ..gate.schema import SCHEMA_VALIDATOR, check_tails
    from ..gate.store import merge_run, new_document

    rows = [(r.test, r.measurement) for r in report.rows]
    layout = report.layout
    date = report.date
    fingerprint = dict(report.fingerprint or {})
    doc = new_document(name)
    parts: list[dict[str, CaseRecord]] = []
    zero = 0
    for test_id, m in rows:
        if not (math.isfinite(m.gbps) and m.gbps > 0):
            zero += 1  # a figure of 0 (a collective of one rank: busbw 0) is nothing to compare with
            continue
        rec = CaseRecord.from_measurement(m, test_id, layout)
        part = 0
        while part < len(parts) and rec.key in parts[part]:
            part += 1
        if part == len(parts):
            parts.append({})
        parts[part][rec.key] = rec
    for k, cases in enumerate(parts):
        try:
            doc = merge_run(doc, run_id=f"report-{name}" + (f"-part{k}" if k else ""), date=date or "unknown",
                            fingerprint=fingerprint, cases=cases, max_runs=doc["max_runs"])
        except ValueError as e:
            raise ReportError(f"{where or name}: cannot take the report as a baseline: {e}") from None
    if zero and zero == len(rows):
        raise ReportError(f"{where or name}: cannot take the report as a baseline: every one of its {zero} rows has a "
                          "figure of 0 GB/s (a collective of one rank has busbw 0), nothing to compare with")
    if zero:
        doc["source_detail"] = (f"{zero} of the report's {len(rows)} rows left out: their figure is 0 GB/s (a "
                                "collective of one rank has busbw 0), nothing to compare with")
    errors = list(SCHEMA_VALIDATOR.iter_errors(doc))
    if errors:
        raise ReportError(f"{where or name}: cannot take the report as a baseline: {errors[0].message}")
    check_tails(Path(where or name), doc)
    return doc
