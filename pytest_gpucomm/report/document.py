"""The report document: one run's rows with their verdicts, the run at the gate's levels, the curves, the
stragglers, the fingerprint and the settings, typed.  Every view renders it and nothing else.

It is made once per run -- at the end of a pytest session from the session's records
(:meth:`ReportDocument.of_run`, called by ``plugin.reporting``), by ``gpucomm compare`` from a saved report
judged again (:meth:`ReportDocument.rejudged`), or read back from a saved JSON report
(:meth:`ReportDocument.from_json`, :meth:`ReportDocument.load`) -- and rendered by the terminal summary
(:mod:`.terminal`), the JSON file and the pytest-benchmark export (:mod:`.exports`), the plots
(:mod:`.plots`), the HTML page (:mod:`.html`) and the ``gpucomm`` subcommands (:mod:`pytest_gpucomm.cli`).
A view that compares with a baseline file takes that file's figures as a second input
(``analysis.baseline_figures.BaselineFigures``, made once from the file).

**The JSON report** is :meth:`ReportDocument.to_json`: ``format`` and ``version``, ``verdict`` (what the run
says first, derived from the rows and the levels: ``report.run.Judgement``; "not judged" where no row has a
baseline's verdict or fewer than half the cases were judged), ``settings``,
``fingerprint``, ``rows`` (per row its test id, the measurement with its samples -- ``Measurement.to_dict``
--, ``status``, ``checks``, the gate's verdict under ``baseline`` and a collective's ranks under
``stragglers``), ``outliers`` (the outlier nodes), then where the run has them ``baseline`` (the file judged
against, the comparisons, the environment diff, the common spreads, the levels), ``launch`` (the job of a
launched run), ``curves``, and ``compared`` (``gpucomm compare --json``).  A key this version does not
know is kept, and written back after these.

**Round trip.**  ``ReportDocument.from_json(doc.to_json()) == doc``: a row keeps the measurement (its
samples and info; the figures are derived from them), the sections the gate writes are kept as the JSON
values they are (:func:`plain`: tuples as lists, every NaN the one NaN object ``json`` reads, so that the same
JSON compares equal), and the stragglers are derived from the rows' ranks on both sides.

No pytest, no torch: the measurement's statistics import numpy when first computed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from ..measurement import Measurement, Record
from ..vocab import Status
from .saved import REPORT_FORMAT, REPORT_VERSION, ReportError, check_report

if TYPE_CHECKING:
    from ..analysis.curve_fit import CrossingSize
    from ..analysis.stragglers import CaseRanks, OutlierNode
    from ..analysis.sweeps import Sweep
    from ..gate.levels import RunLevels

__all__ = ["ReportDocument", "Row", "RowVerdict", "BaselineSection", "Levels", "CurveEntry", "plain", "rows_of",
           "as_document"]

#: the top-level keys :meth:`ReportDocument.to_json` writes from its fields, in their order
_KNOWN = ("format", "version", "verdict", "settings", "fingerprint", "rows", "outliers", "baseline", "launch", "curves",
          "compared")
#: the keys of a row :meth:`Row.to_json` writes beyond the measurement's
_ROW_KEYS = ("test", "status", "checks", "baseline", "stragglers")
_MEASUREMENT_KEYS = ("op", "kind", "size_bytes", "bytes_per_iter", "devices", "world_size", "dtype", "busbw_factor",
                     "n", "median_us", "algbw_gbps", "busbw_gbps", "gbps", "p50_us", "p99_us", "cv", "info",
                     "samples_s")


#: the one NaN object ``json`` reads every NaN as
_JSON_NAN = json.loads("NaN")


def plain(value: object) -> Any:
    """``value`` as JSON reads it back, copied without writing it out: tuples as lists, an enum as its value,
    a mapping's keys as JSON writes them, every NaN the one NaN object of ``json`` (a NaN is not equal to
    another NaN object: the same JSON then compares equal).  TypeError for what JSON cannot hold."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)  # an enum of strings as its value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _JSON_NAN if math.isnan(value) else float(value)
    if isinstance(value, Mapping):
        return {_plain_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _plain_key(key: object) -> str:
    """A mapping's key as JSON writes it (``json.dumps``: a string, or a number, true, false, null as text)."""
    if isinstance(key, str):
        return str.__str__(key)
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return "NaN" if math.isnan(key) else {math.inf: "Infinity", -math.inf: "-Infinity"}.get(key, repr(float(key)))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _number(value: object) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# -- the sections the gate writes --------------------------------------------------------------------------


@dataclass(frozen=True)
class RowVerdict:
    """The gate's verdict on a row as the report keeps it (``gate.Verdict.to_dict``: the row's ``baseline``),
    read through typed properties; ``data`` is written back as it is."""

    data: Mapping[str, Any]

    @property
    def status(self) -> str:
        return str(self.data.get("status", ""))

    @property
    def message(self) -> str:
        return str(self.data.get("message") or "")

    @property
    def baseline_gbps(self) -> Optional[float]:
        """The baseline's figure the row was judged against (None where it had none)."""
        return _number(self.data.get("baseline_gbps"))

    @property
    def ratio(self) -> Optional[float]:
        return _number(self.data.get("ratio"))

    @property
    def runs(self) -> int:
        """How many of today's runs the verdict's ratio pools (the first, its folds and re-measures): 1 where the
        verdict says none."""
        listed = self.data.get("runs_gbps")
        if isinstance(listed, list) and listed:
            return len(listed)
        for key, extra in (("runs_pooled", 0), ("remeasured", 1)):
            n = self.data.get(key)
            if isinstance(n, int) and not isinstance(n, bool) and n + extra >= 1:
                return n + extra
        return 1

    def ratio_text(self) -> str:
        """The verdict's ratio as the tables print it: ``0.342``, ``0.342 (2 runs)`` where it pools several of
        today's runs (the table's GB/s is the first run's), "-" where it has none."""
        from ..units import format_ratio

        ratio = self.ratio
        if not ratio:
            return "-"
        return format_ratio(ratio) + (f" ({self.runs} runs)" if self.runs > 1 else "")

    @property
    def case(self) -> Optional[str]:
        """The baseline's case key (``gate.store.case_key``), None where the verdict has none."""
        case = self.data.get("case")
        return str(case) if case else None

    @property
    def detectable_drop(self) -> Optional[float]:
        return _number(self.data.get("detectable_drop"))

    @property
    def gated(self) -> bool:
        return bool(self.data.get("gated"))

    @property
    def tail(self) -> Mapping[str, Any]:
        """The tail verdict (``status``, ``tolerance``, ...), {} where none was made."""
        tail = self.data.get("tail")
        return tail if isinstance(tail, Mapping) else {}

    @property
    def tail_status(self) -> Optional[str]:
        status = self.tail.get("status")
        return None if status is None else str(status)

    def reruns(self, key: str) -> list[Mapping[str, Any]]:
        """The recorded re-measures (``key`` "remeasures") or folds' runs ("fold_runs"), each with its
        measurement."""
        return [a for a in self.data.get(key) or [] if isinstance(a, Mapping)]


@dataclass(frozen=True)
class Levels:
    """The run judged at the gate's levels (``gate.levels.RunLevels.to_dict``): the class offsets, the op
    bands and the case residuals, each verdict with its ``text``."""

    data: Mapping[str, Any]

    def texts(self, every: Sequence[str] = ()) -> list[str]:
        """The verdicts' texts: every verdict of the groups in ``every`` ("classes", "bands", "cases"), and of
        the others those that are regressions."""
        return [str(v["text"]) for group in ("classes", "bands", "cases") for v in self.data.get(group) or []
                if isinstance(v, Mapping) and v.get("text") and (group in every or v.get("status") == "regression")]

    def run_levels(self) -> "RunLevels":
        """The ``gate.levels.RunLevels`` these were written from, for the text of :func:`report.run.level_lines`
        (each verdict with its assumed spread, so that it is gated as it was; a report written before the
        verdicts kept their reason has a verdict "not judged" come back without it)."""
        from ..gate.levels import LevelVerdict, RunLevels

        def verdict(v: Mapping[str, Any]) -> LevelVerdict:
            return LevelVerdict(level=str(v["level"]), name=str(v["name"]), keys=tuple(v.get("cases") or ()),
                                status=str(v["status"]), ratio=float(v["ratio"]), upper_bound=float(v["upper_bound"]),
                                lower_bound=float(v["lower_bound"]), alpha=float(v["alpha"]),
                                quantile=float(v["quantile"]), df=float(v["df"]), sd=float(v["sd"]),
                                detectable_drop=float(v["detectable_drop"]), tolerance=float(v["tolerance"]),
                                why=str(v.get("why") or ""), assumed=bool(v.get("assumed")),
                                node=None if v.get("node") is None else int(v["node"]), host=str(v.get("host") or ""))

        def verdicts(group: str) -> list[LevelVerdict]:
            return [verdict(v) for v in self.data.get(group) or []]

        return RunLevels(classes=verdicts("classes"), bands=verdicts("bands"), cases=verdicts("cases"),
                         alpha=float(self.data.get("alpha", math.nan)), shares=dict(self.data.get("shares") or {}))


@dataclass(frozen=True)
class BaselineSection:
    """The report's ``baseline`` section: the file judged against, the number of gated comparisons, what
    changed in the environment since the baseline was recorded, its common spread per group, the run at the
    gate's levels; ``data`` is written back as it is."""

    data: Mapping[str, Any]

    @property
    def path(self) -> Optional[str]:
        path = self.data.get("path")
        return str(path) if path else None

    @property
    def comparisons(self) -> Any:
        return self.data.get("comparisons", "?")

    @property
    def environment_diff(self) -> Optional[list[tuple[str, Any, Any]]]:
        """(key, baseline's value, this run's value) per change, None for a value absent; None where the
        section has no diff (the run was not compared with a recorded fingerprint)."""
        if "environment_diff" not in self.data:
            return None
        out = []
        for item in self.data.get("environment_diff") or []:
            key, old, new = (list(item) + [None, None])[:3] if isinstance(item, (list, tuple)) else (item, None, None)
            out.append((str(key), old, new))
        return out

    @property
    def levels(self) -> Optional[Levels]:
        levels = self.data.get("levels")
        return Levels(levels) if isinstance(levels, Mapping) else None


@dataclass(frozen=True)
class CurveEntry:
    """One sweep of the report's ``curves`` section (``analysis.curves.curve_report``): its model's text and
    figures, and its comparison with the baseline's curve where there was one."""

    data: Mapping[str, Any]

    @property
    def label(self) -> str:
        return str(self.data.get("label") or self.data.get("sweep") or "")

    @property
    def text(self) -> str:
        """The model's two lines."""
        return str(self.data["model"]["text"])

    @property
    def sweep(self) -> str:
        """The sweep's test id without its size (``Sweep.key[0]``), or its label where it has no test id."""
        return str(self.data.get("sweep") or "")

    def crossings(self) -> "Optional[tuple[CrossingSize, ...]]":
        """The model's 80 %, 90 % ... points as ``analysis.curve_fit.CrossingSize`` (what ``curve_model``
        made of the sweep), None where the entry does not hold them readably (a damaged report)."""
        try:
            return tuple(_crossing(c) for c in self.data["model"]["crossings"])
        except (KeyError, TypeError, ValueError, IndexError):
            return None

    @property
    def comparison_text(self) -> Optional[str]:
        c = self.data.get("comparison")
        return str(c.get("text_short") or c.get("text")) if isinstance(c, Mapping) and c else None


def _crossing(c: Mapping[str, Any]) -> "CrossingSize":
    """A crossing of a curves entry's model (``CrossingSize.to_dict``) read back."""
    from ..analysis.curve_fit import CrossingSize

    between = c.get("between")
    return CrossingSize(share=float(c["share"]), size_bytes=None if c["size_bytes"] is None else int(c["size_bytes"]),
                        interpolated=bool(c["interpolated"]),
                        between=(int(between[0]), int(between[1])) if between else None,
                        reason=str(c.get("reason") or ""))


# -- the rows ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One measurement of the run: the test that made it, the measurement (its samples; the figures derive
    from them), its status (a ``vocab.Status`` value, or a word a saved report holds), the threshold checks,
    the gate's verdict, and a collective's ranks (``analysis.stragglers.CaseRanks``, None for a copy or where
    the ranks' data could not be read).  ``extra``: keys of a saved row this version does not write, kept."""

    test: str
    measurement: Measurement
    status: str = Status.MEASURED.value
    checks: tuple[str, ...] = ()
    verdict: Optional[RowVerdict] = None
    ranks: Optional["CaseRanks"] = None
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """Whether the row's status fails its test (``vocab.Status.failed``; a word not known does not)."""
        try:
            return Status(self.status).failed
        except ValueError:
            return False

    def to_json(self) -> dict[str, object]:
        """The row of the JSON report."""
        out: dict[str, object] = {"test": self.test, **self.measurement.to_dict(with_samples=True),
                               "status": self.status, "checks": list(self.checks)}
        if self.verdict is not None:
            out["baseline"] = self.verdict.data
        if self.ranks is not None:
            out["stragglers"] = self.ranks.to_dict()
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "", index: int = 0) -> "Row":
        """The row of a report's ``rows[index]`` (without its ranks: the document derives them); ReportError
        naming the row where its measurement cannot be read back."""
        try:
            m = Measurement.from_dict(dict(data))
        except (KeyError, TypeError, ValueError) as e:
            at = f"{where}: " if where else ""
            raise ReportError(f"{at}invalid report: rows[{index}] ({data.get('test')}): cannot read its measurement "
                              f"back ({type(e).__name__}: {e})") from None
        verdict = data.get("baseline")
        return cls(test=str(data["test"]), measurement=m, status=str(data.get("status", Status.MEASURED.value)),
                   checks=tuple(str(c) for c in data.get("checks") or ()),
                   verdict=RowVerdict(verdict) if isinstance(verdict, Mapping) else None,
                   extra={k: v for k, v in data.items() if k not in _ROW_KEYS and k not in _MEASUREMENT_KEYS})

    @classmethod
    def of_record(cls, record: Record) -> "Row":
        """A session's record as a row, as the JSON report reads it back (:func:`plain`; the measurement's
        numbers as ``Measurement.from_dict`` makes them), copied: the session may add to the record after."""
        m = record.measurement
        measurement = replace(m, size_bytes=int(m.size_bytes), bytes_per_iter=int(m.bytes_per_iter),
                              busbw_factor=float(m.busbw_factor), world_size=int(m.world_size), info=plain(m.info))
        verdict = None if record.baseline is None else RowVerdict(plain(record.baseline))
        return cls(test=record.nodeid, measurement=measurement, status=plain(record.status),
                   checks=tuple(str(c) for c in record.checks), verdict=verdict)


def rows_of(items: Iterable["Row | Record"]) -> list[Row]:
    """Rows, or a session's records as rows (:meth:`Row.of_record`)."""
    return [x if isinstance(x, Row) else Row.of_record(x) for x in items]


def _with_stragglers(rows: Sequence[Row]) -> tuple[tuple[Row, ...], tuple["OutlierNode", ...], str]:
    """The rows with their ranks (``stragglers.find_outliers``), the run's outlier nodes, and a note where the
    ranks' data of some measurement cannot be read: the stragglers explain, the verdicts decide."""
    from ..analysis.stragglers import find_outliers

    try:
        per_case, nodes = find_outliers([(r.test, r.measurement) for r in rows])
    except Exception as e:  # a row's ranks' data malformed (a saved report's): a note, no stragglers
        return tuple(replace(r, ranks=None) for r in rows), (), f"gpucomm: no slowest ranks or outlier nodes: {e}"
    return tuple(replace(r, ranks=c) for r, c in zip(rows, per_case)), tuple(nodes), ""


# -- the document -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportDocument:
    """One run's report (see the module doc).  ``rows`` carry the verdicts; ``outliers`` and
    ``straggler_note`` derive from the rows' ranks; the other fields are the report's sections, None where
    the run has none."""

    rows: tuple[Row, ...]
    settings: Optional[Mapping[str, object]] = None
    fingerprint: Optional[Mapping[str, Any]] = None
    baseline: Optional[BaselineSection] = None
    launch: Optional[Mapping[str, object]] = None
    curves: Optional[tuple[CurveEntry, ...]] = None
    compared: Optional[Mapping[str, Any]] = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    version: int = REPORT_VERSION
    outliers: tuple["OutlierNode", ...] = ()
    straggler_note: str = ""

    # -- made ------------------------------------------------------------------------------------------

    @classmethod
    def of_run(cls, rows: Iterable["Row | Record"], *, settings: Optional[Mapping[str, Any]] = None,
               fingerprint: Optional[Mapping[str, Any]] = None, baseline: Optional[Mapping[str, Any]] = None,
               launch: Optional[Mapping[str, Any]] = None,
               curves: Optional[Sequence[Mapping[str, Any]]] = None) -> "ReportDocument":
        """The document of a run's rows (or a session's records) and sections: ``baseline`` the "baseline"
        section (none where empty), ``launch`` the job's shape, ``curves`` the curves section
        (``curves.curve_report``); the stragglers are found in the rows' ranks."""
        ranked, nodes, note = _with_stragglers(rows_of(rows))
        return cls(rows=ranked, settings=plain(settings), fingerprint=plain(fingerprint),
                   baseline=BaselineSection(plain(baseline)) if baseline else None,
                   launch=plain(launch) if launch else None,
                   curves=None if curves is None else tuple(CurveEntry(c) for c in plain(list(curves))),
                   outliers=nodes, straggler_note=note)

    @classmethod
    def from_json(cls, data: object, where: str = "") -> "ReportDocument":
        """The document of a saved report's JSON (checked: ``saved.check_report``); ReportError naming
        ``where`` (the file) and what is wrong."""
        data = check_report(data, where)
        rows = [Row.from_json(r, where, i) for i, r in enumerate(data["rows"])]
        ranked, nodes, note = _with_stragglers(rows)
        baseline, curves = data.get("baseline"), data.get("curves")
        return cls(rows=ranked, settings=data.get("settings"), fingerprint=data.get("fingerprint"),
                   baseline=BaselineSection(baseline) if isinstance(baseline, Mapping) else None,
                   launch=data.get("launch") if isinstance(data.get("launch"), Mapping) else None,
                   curves=tuple(CurveEntry(c) for c in curves) if isinstance(curves, list) else None,
                   compared=data.get("compared") if isinstance(data.get("compared"), Mapping) else None,
                   extra={k: v for k, v in data.items() if k not in _KNOWN}, version=int(data["version"]),
                   outliers=nodes, straggler_note=note)

    @classmethod
    def load(cls, path: "str | os.PathLike[str]", nvbandwidth_size: Optional[int] = None) -> "ReportDocument":
        """A saved JSON report (``saved.read_json``: the file's problems are ReportErrors naming it), or a file of
        nccl-tests, rccl-tests or nvbandwidth as its report (``saved.as_report_json``)."""
        from .saved import as_report_json, read_json

        return cls.from_json(as_report_json(read_json(path, "report"), path, nvbandwidth_size), str(path))

    def rejudged(self, verdicts: Sequence[Mapping[str, Any]], compared: Mapping[str, Any]) -> "ReportDocument":
        """The same run with new verdicts (one per row, ``gate.Verdict.to_dict``: ``gpucomm compare``), each
        row's status the verdict's (a row that failed a threshold in the run stays FAIL), and the
        ``compared`` section saying against what."""
        rows = tuple(replace(r, verdict=RowVerdict(plain(v)),
                             status=Status.FAILED.value if r.status == Status.FAILED.value else str(v["status"]))
                     for r, v in zip(self.rows, verdicts))
        return replace(self, rows=rows, compared=plain(compared))

    # -- written ---------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        """The JSON report (see the module doc)."""
        from .run import judgement

        doc: dict[str, Any] = {"format": REPORT_FORMAT, "version": self.version,
                               "verdict": judgement(self).to_dict(), "settings": self.settings,
                               "fingerprint": self.fingerprint, "rows": [r.to_json() for r in self.rows],
                               "outliers": [n.to_dict() for n in self.outliers]}
        for key, value in (("baseline", self.baseline.data if self.baseline is not None else None),
                           ("launch", self.launch), ("curves", [c.data for c in self.curves]
                                                     if self.curves is not None else None),
                           ("compared", self.compared)):
            if value is not None:
                doc[key] = value
        return {**doc, **self.extra}

    # -- read ------------------------------------------------------------------------------------------

    @property
    def gated(self) -> bool:
        """Whether some row was judged against a baseline."""
        return any(r.verdict is not None for r in self.rows)

    @property
    def levels(self) -> Optional[Levels]:
        """The run at the gate's levels: ``gpucomm compare``'s where it judged the report again, else the
        run's."""
        if self.compared is not None and isinstance(self.compared.get("levels"), Mapping):
            return Levels(self.compared["levels"])
        return self.baseline.levels if self.baseline is not None else None

    @property
    def layout(self) -> str:
        """The job's layout across nodes (part of the baseline's case keys), "" on one host."""
        return str((self.launch or {}).get("layout") or "")

    @property
    def date(self) -> str:
        return str((self.fingerprint or {}).get("date") or self.extra.get("date") or "")

    @property
    def tolerance(self) -> object:
        """The run's --gpu-tolerance (None where the report does not say)."""
        return (self.settings or {}).get("tolerance")

    @cached_property
    def sweeps(self) -> list["Sweep"]:
        """The rows' sweeps (``analysis.sweeps.sweeps``), made once for every view of the document that draws
        or names them (the plots, the page's labels, the curves of a report that has no curves section)."""
        from ..analysis.sweeps import sweeps

        return sweeps([(r.test, r.measurement) for r in self.rows])

    def crossings(self, sweep: "Sweep") -> "tuple[CrossingSize, ...]":
        """The 80 %, 90 % ... points of one of :attr:`sweeps`: those of its model in the curves section,
        which ``analysis.curves`` made of the same rows; worked out here only where the section lacks it."""
        entries = [c for c in self.curves or () if (c.sweep, c.label) == (sweep.key[0] or sweep.label, sweep.label)]
        found = entries[0].crossings() if len(entries) == 1 else None
        if found is not None:
            return found
        from ..analysis.curve_fit import curve_model

        return curve_model(sweep).crossings

    def test_of_case(self) -> dict[Optional[str], str]:
        """Each judged case key -> the test of its row."""
        return {r.verdict.case: r.test for r in self.rows if r.verdict is not None}


def as_document(report: object, where: str = "") -> ReportDocument:
    """``report`` as a document: a document, or a report's JSON read (:meth:`ReportDocument.from_json`)."""
    return report if isinstance(report, ReportDocument) else ReportDocument.from_json(report, where)
