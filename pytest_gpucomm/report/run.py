"""The text of a run's rows, shared by the terminal summary, ``gpucomm show`` / ``compare`` and the HTML page:
the table with its tail and gate columns, the verdicts' counts, what the gate can catch, the run at the
levels, the stragglers; and what a test leaves as it finishes (its figures on its line under ``-v``, its
JUnit properties), before the run's document exists.

Each renders rows of the report document (:class:`~.document.Row`); a session's records are taken as rows
(:func:`~.document.rows_of`).  :func:`apply_levels` is the one function here that changes what it is given:
the session's records after the run was judged at the gate's levels.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from ..measurement import Measurement, Record
from ..units import format_gbps, format_ratio, format_size, plural
from ..vocab import Status
from .document import ReportDocument, Row, RowVerdict, rows_of
from ..text import DEFAULT_WIDTH, fit

if TYPE_CHECKING:
    from ..gate.levels import RunLevels

__all__ = ["HEADERS", "GATE_HEADERS", "LEGEND", "CURVE_LIMIT", "LIVE_KEY", "fmt_us", "table_rows",
           "render_table", "gate_columns", "table_lines", "tail_cell", "tail_counts", "counts_line",
           "GatedCounts", "gated_counts", "gated_of", "sensitivity_lines", "level_lines", "Coverage", "coverage",
           "JUDGED", "RECORD", "Judgement", "judgement", "verdicts_source", "straggler_lines", "live_text",
           "junit_properties",
           "apply_levels", "json_document",
           "cause_lines"]

HEADERS = [
    "test",
    "op",
    "devices / world",
    "size (bytes)",
    "size",
    "GB/s",
    "p50 us",
    "p99 us",
    "CV%",
    "n",
]
GATE_HEADERS = ["baseline GB/s", "ratio", "status"]
TAIL_HEADER = "1-op tail"
LEGEND = (
    "GB/s: median busbw for collectives, algbw for copies (GB = 1e9 bytes; a both-ways copy counts both "
    "directions); p50/p99: per-iteration time; CV: coefficient of variation of the iteration times; n: samples; "
    "1-op tail: p99 of the single ops, each timed on its own (the slowest rank's), and their p99/p50; ratio: "
    "the verdict's, today / baseline, where \"(2 runs)\" says it pools the first run (the GB/s shown) with its "
    "re-measures or folds, as the matrices and plots give it."
)
#: the sweeps the terminal's curves section shows (the JSON report has every one)
CURVE_LIMIT = 30
#: the JUnit / user property that carries a test's figures and verdicts to its line under -v
LIVE_KEY = "gpucomm.live"


def _short(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1] if "::" in nodeid else nodeid




def fmt_us(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.2f}"


# -- the table -------------------------------------------------------------------------------------------


def table_rows(items: Iterable["Row | Record"]) -> list[list[Any]]:
    """The full table's cells of each row; a GB/s measured while its device throttled is marked ``*``."""
    from ..env.clocks import throttle_text

    out = []
    for r in rows_of(items):
        m = r.measurement
        out.append([_short(r.test), m.op, m.where, m.size_bytes, format_size(m.size_bytes),
                    format_gbps(m.gbps) + ("*" if throttle_text(m.info) else ""),
                    fmt_us(m.p50_us), fmt_us(m.p99_us), f"{m.cv * 100:.1f}", m.n])
    return out


def tail_cell(m: Measurement) -> str:
    """The compact tail column of a measurement with single ops: their p99 and jitter (p99 / p50), e.g.
    ``p99 24.1us 1.31x``; "" for one without (a copy)."""
    tail = m.info.get("tail") if isinstance(m.info, dict) else None
    if not isinstance(tail, dict) or tail.get("p99_us") is None:
        return ""
    p99 = float(tail["p99_us"])
    when = f"{p99 / 1e3:.3g}ms" if p99 >= 1e3 else f"{p99:.3g}us"
    jitter = tail.get("jitter")
    return f"p99 {when}" + (f" {float(jitter):.2f}x" if jitter is not None else "")


def render_table(items: Iterable["Row | Record"], extra_headers: Optional[list[str]] = None,
                 extra: Optional[list[list[Any]]] = None) -> str:
    """The table; a column of the single ops' tail (:func:`tail_cell`) where some measurement has one."""
    from tabulate import tabulate

    rows = rows_of(items)
    cells = table_rows(rows)
    headers = list(HEADERS)
    tails = [tail_cell(r.measurement) for r in rows]
    if any(tails):
        headers.append(TAIL_HEADER)
        cells = [row + [c] for row, c in zip(cells, tails)]
    if extra_headers and extra:
        headers += extra_headers
        cells = [r + e for r, e in zip(cells, extra)]
    return tabulate(cells, headers=headers, tablefmt="simple", disable_numparse=True, stralign="right")


def gate_columns(items: Iterable["Row | Record"]) -> list[list[Any]]:
    """Per row: the baseline's figure, the ratio and the status."""
    out = []
    for r in rows_of(items):
        base = r.verdict.baseline_gbps if r.verdict is not None else None
        out.append([format_gbps(base) if base else "-", r.verdict.ratio_text() if r.verdict is not None else "-",
                    r.status])
    return out


def table_lines(rows: Sequence[Row], width: int = DEFAULT_WIDTH, *, full: bool = False) -> list[str]:
    """The table grouped by sweep (``report.table``): compact, fitted to ``width``, or with ``full`` every
    column (the gate's where some row was judged); then its legend."""
    from .table import compact_table, full_table

    table = full_table(rows) if full else compact_table(rows, width)
    return table + fit([LEGEND], width)


# -- the verdicts ----------------------------------------------------------------------------------------


def tail_counts(items: Iterable["Row | Record"]) -> str:
    """The tail verdicts for the verdicts' line: "; tails tested on 12 cases: 1 TAIL" (a TAIL under a REGRESSION
    counted too), "" where no tail was tested."""
    tails = [r.verdict.tail_status if r.verdict is not None else None for r in rows_of(items)]
    tested = [t for t in tails if t in (Status.OK.value, Status.TAIL.value)]
    if not tested:
        return ""
    heavier = sum(1 for t in tested if t == Status.TAIL.value)
    return f"; tails tested on {plural(len(tested), 'case')}: {heavier} TAIL"


def counts_line(rows: Sequence[Row]) -> str:
    """``gpucomm verdicts: 1 REGRESSION, 8 ok; tails tested on 3 cases: 0 TAIL``."""
    counts = Counter(r.status for r in rows)
    return "gpucomm verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + tail_counts(rows)


#: the verdicts that judged their case: it is gated (ok), or the evidence decided (a failure, an improvement)
JUDGED = frozenset({Status.OK.value, Status.REGRESSION.value, Status.IMPROVED.value, Status.TAIL.value,
                    Status.FLOOR.value, Status.FLOOR_OK.value})


@dataclass(frozen=True)
class Coverage:
    """How many of a run's cases measured against a baseline the gate could judge (a verdict in
    :data:`JUDGED`), and why not the others: not gated with their spread between sessions assumed (a baseline of
    one session, no prior for their class), not gated with a measured spread too wide for the tolerance, or new
    (no entry in the baseline)."""

    judged: int
    total: int
    assumed: int
    wide: int
    new: int

    @property
    def share(self) -> float:
        return self.judged / self.total if self.total else 1.0

    @property
    def loud(self) -> bool:
        """Fewer than half judged: the run cannot read as passed."""
        return self.total > 0 and 2 * self.judged < self.total

    def why(self) -> str:
        parts = [f"{n} {what}" for n, what in (
            (self.assumed, "not gated, their spread between sessions assumed (a baseline of one session and no "
                           "prior for their class)"),
            (self.wide, "not gated, their spread too wide for the tolerance"),
            (self.new, "new, not in the baseline")) if n]
        return "; ".join(parts)

    def fix(self, name: str) -> str:
        """What to record (``name``: the baseline as --gpu-baseline names it)."""
        steps = []
        if self.assumed or self.wide:
            steps.append(f"record runs on other boots or days (pytest ... --gpu-baseline={name} --gpu-baseline-save, "
                         "4 runs a session)")
        if self.wide:
            steps.append("or raise --gpu-tolerance")
        if self.new:
            steps.append(f"record the new cases (--gpu-baseline={name} --gpu-baseline-save)")
        return "; ".join(steps)

    def headline(self, name: str) -> str:
        """The summary's first line: ``gpucomm gate: judged 18 of 20 cases against baseline h200 (2 not gated,
        ...)``, or, where fewer than half were, ``gpucomm gate: NOT JUDGED: only 0 of 20 cases ...``."""
        if self.loud:
            return (f"gpucomm gate: NOT JUDGED: only {self.judged} of {self.total} cases could be judged against "
                    f"baseline {name} ({self.why()}): a pass says nothing of the others; {self.fix(name)}")
        rest = f" ({self.why()})" if self.why() else ""
        return f"gpucomm gate: judged {self.judged} of {self.total} cases against baseline {name}{rest}"

    def last_line(self, name: str) -> str:
        """The session's last line where fewer than half were judged."""
        return (f"gpucomm: NOT JUDGED: {self.judged} of {self.total} cases judged against baseline {name}; "
                f"{self.fix(name)}")

    def to_dict(self) -> dict[str, Any]:
        return {"judged": self.judged, "cases": self.total, "share": self.share, "not_gated_assumed": self.assumed,
                "not_gated_wide": self.wide, "new": self.new, "fewer_than_half": self.loud}


def coverage(items: Iterable["Row | Record"]) -> Optional[Coverage]:
    """The :class:`Coverage` of the rows' verdicts against a baseline; None where none has a verdict."""
    verdicts = [r.verdict for r in rows_of(items) if r.verdict is not None and r.verdict.data]
    if not verdicts:
        return None
    judged = sum(1 for v in verdicts if v.status in JUDGED)
    new = sum(1 for v in verdicts if v.status in (Status.NEW.value, Status.NEW_STRICT.value))
    not_gated = [v for v in verdicts if v.status in (Status.NOT_GATED.value, Status.NOT_GATED_STRICT.value)]
    assumed = sum(1 for v in not_gated if v.data.get("spread_assumed"))
    return Coverage(judged, len(verdicts), assumed, len(not_gated) - assumed, new)


#: how a baseline is recorded, as every line that says a run was not judged gives it
RECORD = "pytest ... --gpu-baseline=NAME --gpu-baseline-save"


@dataclass(frozen=True)
class Judgement:
    """What a run's report says first, the same in every view (the terminal's last lines, pytest's final line,
    the JSON report's ``verdict``, JUnit's ``gpucomm.verdict``, the page's headline): ``word`` "failed" (a row
    fails its test, or a regression at the levels), "not judged" (no row has a baseline's verdict, or fewer than
    half the cases measured against one were judged: :attr:`Coverage.loud`) or "passed"; ``why``: for "not
    judged", "no baseline" or "fewer than half the cases judged against baseline h200"; ``record``: what to
    record to have it judged."""

    word: str
    cases: int
    judged: int
    failing: int = 0
    level_regressions: int = 0
    why: str = ""
    record: str = ""

    @property
    def not_judged(self) -> bool:
        return self.word == "not judged"

    def text(self) -> str:
        """``not judged: no baseline: 9 cases measured, none judged; record one: pytest ... --gpu-baseline=NAME
        --gpu-baseline-save``; ``failed: 2 failing cases of 9; 1 regression at the levels``; ``passed: 9 of 9
        cases judged, none failing``."""
        if self.word == "failed":
            out = f"failed: {plural(self.failing, 'failing case')} of {self.cases}" if self.failing else "failed: "
            if self.level_regressions:
                out += ("; " if self.failing else "") + f"{plural(self.level_regressions, 'regression')} at the levels"
            return out
        if self.word == "passed":
            return f"passed: {self.judged} of {plural(self.cases, 'case')} judged, none failing"
        judged = "none judged" if not self.judged else f"{self.judged} judged"
        return (f"not judged: {self.why}: {plural(self.cases, 'case')} measured, {judged}"
                + (f"; {self.record}" if self.record else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"word": self.word, "why": self.why, "cases": self.cases, "judged": self.judged,
                "failing": self.failing, "level_regressions": self.level_regressions, "record": self.record,
                "text": self.text()}


def verdicts_source(doc: ReportDocument) -> str:
    """Whose verdicts a document holds: ``the run's stored verdicts``, or for a report ``gpucomm compare --json``
    wrote, ``the verdicts gpucomm compare made against baselines/h200.json``."""
    against = (doc.compared or {}).get("against")
    return f"the verdicts gpucomm compare made against {against}" if against else "the run's stored verdicts"


def judgement(doc: ReportDocument) -> Judgement:
    """The :class:`Judgement` of a document: of its rows' verdicts and its levels (``gpucomm compare``'s where
    it judged the report again, else the run's)."""
    levels = doc.levels
    regressions = len(levels.texts()) if levels is not None else 0
    failing = sum(1 for r in doc.rows if r.failed)
    cases = len(doc.rows)
    cov = coverage(doc.rows)
    judged = cov.judged if cov is not None else 0
    if failing or regressions:
        return Judgement("failed", cases, judged, failing, regressions)
    settings = doc.settings or {}
    name = str((doc.compared or {}).get("against") or settings.get("baseline") or "NAME")
    if cov is None:
        return Judgement("not judged", cases, 0, why="no baseline", record=f"record one: {RECORD}, then run with "
                         "--gpu-baseline=NAME")
    if cov.loud:
        return Judgement("not judged", cases, judged, why=f"fewer than half the cases judged against baseline {name}",
                         record=cov.fix(name))
    return Judgement("passed", cases, judged)


@dataclass(frozen=True)
class GatedCounts:
    """How many are gated at each level, where gated means a drop of twice the tolerance is caught 99 % of the
    time (``gate.decision.GATED_DROP_FACTOR``, ``DETECTION_POWER``).  The cases: those whose own verdict says
    what it catches, gated by their own verdict, or where it is not, by their residual (what makes a row "ok"
    rather than "not gated": ``gate.levels.RunLevels.update``); the class offsets, op bands and case residuals:
    (gated, judged) each (``RunLevels.gated_count``, as the levels' JSON holds them).  The one count of gated
    that the terminal summary, the JSON report (``baseline.gated``) and the HTML page print (:func:`gated_of`).
    """

    cases: int
    own: int
    by_residual: int
    levels: Optional[Mapping[str, tuple[int, int]]] = None  # "class", "band", "case" -> (gated, judged)

    @property
    def gated(self) -> int:
        return self.own + self.by_residual

    def text(self) -> str:
        """``gated (a drop of 2x the tolerance caught 99% of the time): 60 of 169 cases (39 by their own verdict,
        21 more by their residual); at the levels: 2 of 6 class offsets, 10 of 30 op bands, 45 of 169 case
        residuals``."""
        from ..gate.decision import DETECTION_POWER, GATED_DROP_FACTOR

        out = (f"gated (a drop of {GATED_DROP_FACTOR:g}x the tolerance caught {DETECTION_POWER:.0%} of the time): "
               f"{self.gated} of {plural(self.cases, 'case')}")
        if self.levels is None:
            return out
        out += f" ({self.own} by their own verdict, {self.by_residual} more by their residual)"
        parts = [f"{g} of {plural(n, one)}" for level, one in (("class", "class offset"), ("band", "op band"),
                                                              ("case", "case residual"))
                 for g, n in [self.levels.get(level, (0, 0))] if n]
        return out + ("; at the levels: " + ", ".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "gated": self.gated, "own": self.own, "by_residual": self.by_residual,
                "levels": None if self.levels is None else
                {k: {"gated": g, "judged": n} for k, (g, n) in self.levels.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GatedCounts":
        """The counts a JSON report holds (:meth:`to_dict`); KeyError, TypeError or ValueError where it does not
        hold them readably."""
        levels = data["levels"]
        return cls(int(data["cases"]), int(data["own"]), int(data["by_residual"]),
                   None if levels is None else {str(k): (int(v["gated"]), int(v["judged"])) for k, v in levels.items()})


def gated_counts(verdicts: Iterable[Optional[Mapping[str, Any]]], levels: Optional[Mapping[str, Any]]
                 ) -> GatedCounts:
    """The :class:`GatedCounts` of the rows' verdicts (``RowVerdict.data``, a record's ``baseline``) after the
    levels (``levels``: the levels' JSON, ``RunLevels.to_dict``; None where the run was not judged at the
    levels): a case is gated by its own verdict's ``gated``, or else by its residual's (the verdict's
    ``residual``; not a row that ``--gpu-baseline-strict`` failed as NOT GATED); a level's count is the one the
    levels hold (worked out from their verdicts for a report written before they held it)."""
    own = by_residual = cases = 0
    for data in verdicts:
        if not data or data.get("detectable_drop") is None:
            continue
        cases += 1
        residual = data.get("residual")
        if data.get("gated"):
            own += 1
        elif (levels is not None and isinstance(residual, Mapping) and residual.get("gated")
              and data.get("status") != Status.NOT_GATED_STRICT.value):
            # with --gpu-baseline-strict a case not gated failed its test before the levels: its row stays NOT
            # GATED, and the count says what the rows say
            by_residual += 1
    if levels is None:
        return GatedCounts(cases, own, by_residual)
    stored = levels.get("gated")
    counts: dict[str, tuple[int, int]] = {}
    for level, group in (("class", "classes"), ("band", "bands"), ("case", "cases")):
        if isinstance(stored, Mapping) and isinstance(stored.get(level), Mapping):
            counts[level] = (int(stored[level]["gated"]), int(stored[level]["judged"]))
            continue
        judged = [v for v in levels.get(group) or [] if isinstance(v, Mapping) and v.get("status") != "not judged"]
        counts[level] = (sum(1 for v in judged if v.get("gated")), len(judged))
    return GatedCounts(cases, own, by_residual, counts)


def gated_of(doc: ReportDocument) -> GatedCounts:
    """The document's :class:`GatedCounts`: the ones its JSON holds (``gpucomm compare``'s under ``compared``
    where it judged the report again, else the run's under ``baseline``), worked out from its rows and levels
    (:func:`gated_counts`) for a report written without them."""
    section = doc.compared if doc.compared is not None else (doc.baseline.data if doc.baseline is not None else {})
    stored = section.get("gated")
    if isinstance(stored, Mapping):
        try:
            return GatedCounts.from_dict(stored)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
    levels = doc.levels
    return gated_counts([r.verdict.data if r.verdict is not None else None for r in doc.rows],
                        levels.data if levels is not None else None)


def sensitivity_lines(verdicts: Sequence[RowVerdict], tests: Optional[Sequence[str]] = None, *,
                      gated: Optional[GatedCounts] = None, width: int = DEFAULT_WIDTH) -> list[str]:
    """What the cases can catch: how many are gated at each level (``gated``: the run's :class:`GatedCounts`,
    :func:`gated_of`; default: the verdicts' own), the smallest drop the cases' own verdicts catch; those not
    gated and the fix; wrapped to ``width``.  ``tests``: the verdicts' test ids (default: their cases)."""
    lines: list[str] = []
    names = list(tests) if tests is not None else [str(v.data.get("case", "?")) for v in verdicts]
    judged = [(n, v.data) for n, v in zip(names, verdicts) if v.data and v.data.get("detectable_drop") is not None]
    if judged:
        counts = gated if gated is not None else gated_counts([b for _, b in judged], None)
        drops = sorted(b["detectable_drop"] for _, b in judged)
        lines.append(f"gpucomm sensitivity: {counts.text()}; the smallest drop a case's own verdict catches is "
                     f"{drops[len(drops) // 2]:.1%} at the median case, {drops[-1]:.1%} at worst")
        not_gated = [(n, b) for n, b in judged if b.get("status") in (Status.NOT_GATED, Status.NOT_GATED_STRICT)]
        for n, b in not_gated[:10]:
            lines.append(f"  not gated: {n}: catches drops of {b['detectable_drop']:.1%} or more "
                         f"({plural(b.get('baseline_runs', 0), 'baseline run')} in "
                         f"{plural(b.get('baseline_sessions', 0), 'session')})")
        if len(not_gated) > 10:
            lines.append(f"  ... and {len(not_gated) - 10} more not gated (the JSON report lists every case)")
        if not_gated:
            lines.append("  fix: record more baseline runs, in more sessions (other boots or days), with "
                         "--gpu-baseline-save; or raise --gpu-tolerance")
    return fit(lines, width)


def level_lines(levels: Optional["RunLevels"], test_of: Mapping[Optional[str], str], limit: int = 10, *,
                width: int = DEFAULT_WIDTH) -> list[str]:
    """The levels' summary: per level how many are gated and the median smallest drop caught, then each
    regression (its headline; its bound below it; the tests of the cases it covers), wrapped to ``width``."""
    if levels is None:
        return []
    from ..gate.cases import split_node_key

    lines = [f"gpucomm levels: {line}" for line in levels.summary()]
    for v in levels.failed[:limit]:
        lines += [f"gpucomm {v.headline()}", f"    {v.detail()}"]
        nodes = [split_node_key(k)[1] for k in v.keys]
        tests = [test_of.get(k, k) + ("" if n is None else f" on node {n}") for k, n in zip(v.keys, nodes)]
        lines += [f"    covers {t}" for t in tests[:5]]
        if len(tests) > 5:
            lines.append(f"    ... and {len(tests) - 5} more cases (the JSON report's levels list them)")
    if len(levels.failed) > limit:
        lines.append(f"gpucomm ... and {len(levels.failed) - limit} more regressions at the levels (the JSON report)")
    return fit(lines, width)


def apply_levels(records: Iterable[Record], levels: Optional["RunLevels"]) -> None:
    """The rows' verdicts after the levels (``RunLevels.update``): a failing level makes the rows of the cases
    it covers REGRESSION (and their record's status, where it passed); a residual that gates a case makes its
    "not gated" an "ok"."""
    if levels is None:
        return
    for r in records:
        b = r.baseline
        if not b or not b.get("case"):
            continue
        status, b["message"], extra = levels.update(b["case"], str(b.get("status")), str(b.get("message", "")))
        b.update(extra)
        b["status"] = status
        if status == Status.REGRESSION.value and not Status(r.status).failed:
            r.status = Status.REGRESSION
        elif status == Status.OK.value and r.status is Status.NOT_GATED:
            r.status = Status.OK


def cause_lines(rows: Sequence[Row], *, skip: Iterable[str] = (), width: int = DEFAULT_WIDTH) -> list[str]:
    """The cause tests the run saved in its verdicts (``verdict["cause"]``, :mod:`pytest_gpucomm.gate.cause`), as
    the live run printed them: each row's own (``gpucomm TEST: cause: ...``; not for the tests in ``skip``, whose
    message is printed whole), then one line per level tested and how many levels were not."""
    from ..gate.cause import level_cause_line, saved_cause_line, untested_levels_line

    skipped = set(skip)
    own: list[str] = []
    levels: dict[str, str] = {}
    untested: dict[str, str] = {}
    for r in rows:
        cause = r.verdict.data.get("cause") if r.verdict is not None else None
        if not isinstance(cause, Mapping):
            continue
        level = cause.get("level")
        if level is None:
            line = saved_cause_line(r.verdict.data) if r.verdict is not None else None
            if line and r.test not in skipped:
                own.append(f"gpucomm {r.test}: {line}")
        elif cause.get("skipped"):
            untested.setdefault(str(level), str(cause["skipped"]))
        elif str(level) not in levels:
            levels[str(level)] = level_cause_line(str(cause.get("level_name") or "level"), str(level),
                                                  str(cause.get("text") or ""))
    lines = own + list(levels.values())
    if untested:
        lines.append(untested_levels_line(len(untested), next(iter(untested.values()))))
    return fit(lines, width)


# -- the stragglers --------------------------------------------------------------------------------------


def straggler_lines(run: "ReportDocument | Iterable[Row | Record]", limit: int = 10, *,
                    width: int = DEFAULT_WIDTH) -> list[str]:
    """The "slowest ranks" and "outlier nodes" sections of the terminal summary (each only when it has a
    case to list; see ``stragglers``), of a document (or of rows, made one), wrapped to ``width``."""
    from ..analysis.stragglers import (CHANCE_P, CLEAR_MAJORITY, LATE_FOR, MAD_FLOOR, MIN_LAG, NOTABLE_SPREAD,
                                       WAITED_FOR, Z_LIMIT)

    doc = run if isinstance(run, ReportDocument) else ReportDocument.of_run(run)
    lines: list[str] = []
    listed = [(r, r.ranks) for r in doc.rows if r.ranks is not None and r.ranks.listed]
    if listed:
        lines.append(f"gpucomm slowest ranks (one rank last in {CLEAR_MAJORITY:.0%} of the iterations or more "
                     f"(p <= {CHANCE_P:g}), the others waiting {MIN_LAG:.0%} of an iteration for it; or the ranks' "
                     f"medians {NOTABLE_SPREAD:.0%} apart; or a rank's lag standing out; or the others waiting "
                     f"{WAITED_FOR:.0%} of the time for a rank, or a rank beginning its ops {LATE_FOR:.0%} of the "
                     "time later than the others, summed):")
        for r, ranks in listed[:limit]:
            lines.append(f"  {r.test} ({r.measurement.op} {format_size(r.measurement.size_bytes)}): {ranks.text()}")
        if len(listed) > limit:
            lines.append(f"  ... and {len(listed) - limit} more (the JSON report has every case)")
    nodes = doc.outliers
    if nodes:
        lines.append(f"gpucomm outlier nodes (modified z-score 0.6745 (x - median) / MAD above {Z_LIMIT} against "
                     f"the run's other nodes and ranks; the MAD at least {MAD_FLOOR:.0%} of the iteration time for "
                     "a rank's lag, of the nodes' median for a node's figure):")
        lines += [f"  {n.text()}" for n in nodes[:limit]]
        if len(nodes) > limit:
            lines.append(f"  ... and {len(nodes) - limit} more nodes (the JSON report lists every one)")
    return fit(lines + ([doc.straggler_note] if doc.straggler_note else []), width)


# -- a test as it finishes -------------------------------------------------------------------------------


def live_text(items: Iterable["Row | Record"], gated: bool, limit: int = 2) -> str:
    """A test's figures and verdicts for its line under ``-v``: ``395.8 GB/s 1.00x ok`` per measurement
    (the first run's figure; the verdict's ratio, ``0.34x (2 runs)`` where it pools several, and the verdict
    where the gate judged it), at most ``limit`` of them and a count of the rest."""
    rows = rows_of(items)
    parts = []
    for r in rows[:limit]:
        text = f"{format_gbps(r.measurement.gbps)} GB/s"
        ratio = r.verdict.ratio if r.verdict is not None else None
        if ratio:
            runs = r.verdict.runs if r.verdict is not None else 1
            text += f" {format_ratio(ratio, 2)}x" + (f" ({runs} runs)" if runs > 1 else "")
        if gated or r.status == Status.FAILED.value:
            text += f" {r.status}"
        parts.append(text)
    if len(rows) > limit:
        parts.append(f"+{len(rows) - limit} more")
    return "; ".join(parts)


def junit_properties(items: Iterable["Row | Record"], gated: bool) -> list[tuple[str, str]]:
    """The figures and verdicts of a test's measurements as JUnit properties:
    ``gpucomm.<op>.<bytes>.gbps``, ``.p50_us``, ``.p99_us`` and, when gated, ``.status``, ``.ratio``,
    ``.baseline_gbps``."""
    props: list[tuple[str, str]] = []
    for r in rows_of(items):
        m = r.measurement
        key = f"gpucomm.{m.op}.{m.size_bytes}"
        if gated:
            v = r.verdict
            props.append((f"{key}.status", v.status if v is not None else r.status))
            if v is not None and v.ratio is not None:
                props.append((f"{key}.ratio", f"{v.ratio:.4f}"))
            if v is not None and v.baseline_gbps is not None:
                props.append((f"{key}.baseline_gbps", f"{v.baseline_gbps:.4f}"))
        props.append((f"{key}.gbps", f"{m.gbps:.4f}"))
        props.append((f"{key}.p50_us", f"{m.p50_us:.3f}"))
        props.append((f"{key}.p99_us", f"{m.p99_us:.3f}"))
    return props


def json_document(records: Iterable["Row | Record"], *, settings: Optional[Mapping[str, object]],
                  fingerprint: Optional[Mapping[str, Any]],
                  extra: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The JSON report of ``records`` (:meth:`ReportDocument.of_run`, :meth:`~ReportDocument.to_json`), with
    the ``extra`` sections ("baseline", "launch", "curves")."""
    extra = dict(extra or {})
    return ReportDocument.of_run(records, settings=settings, fingerprint=fingerprint, baseline=extra.get("baseline"),
                                 launch=extra.get("launch"), curves=extra.get("curves")).to_json()
