"""Copy matrices: each copy test's GB/s per (source, destination) pair, today and against the baseline.

A node's copy figures read best as a matrix, source rows and destination columns, as nvbandwidth prints
them: on 8 GPUs the 56 ordered pairs of the peer copy are one 8 x 8 table, and the one slow link is the
one low cell.  This module makes those matrices from the JSON report's rows (or from the rows of a run in
progress) and renders them as text: the terminal summary prints them after the results table, ``gpucomm
show`` and ``gpucomm compare`` print them from a saved report, the HTML page holds the same text, and
:func:`pytest_gpucomm.report.plots.copy_matrix_figures` draws the same cells.

**Which matrices.**  One per copy test function, op and node (a multi-node job has a matrix per node),
from the copies between two devices (``devices`` = [source, destination]; the all-peers patterns have
one figure for many pairs and make none).  Where the rows hold one-way copies of more than one test (peer
copies, host to device, device to host), a first matrix puts them all together, the host a row and a
column like a device: on a GPU node that one matrix shows every link of the node.  The text keeps that
one and leaves out the one-way tests it already holds (the plots draw both), and leaves out a matrix of
one cell.  A test with two rows of one pair and size (a parameter other than the size and the pair) makes
no matrix: the text says so.

**Which size.**  A matrix holds every size measured; the text prints one: the largest size at which the
most pairs were measured (the peak figures, where links differ most, and no column left blank because
one test swept fewer sizes).  ``sizes=`` asks for others.

**Today's figure** is the table's: computed from the row's samples where it has them.  **The baseline's
figure** of a cell (:func:`cell_baseline`): with a baseline file, the median over the case's runs of each
run's median GB/s (``baseline_figures.BaselineFigures``: what the plots and ``curves.sweeps_from_baseline``
take), found by the case key the gate uses (``vocab.case_key``, with the report's layout across
nodes), or the case's published floor where it has no measured run (marked "*"); without one, the figure
the row's verdict was judged against (a saved report's ``row["baseline"]["baseline_gbps"]``), so ``gpucomm
show REPORT`` gives the run's ratios without the baseline file.  A cell the baseline lacks reads "new".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Protocol, Sequence, Union

from ..measurement import Measurement, node_label_of
from ..units import format_ratio, format_size
from .baseline_figures import BaselineFigures, as_figures

__all__ = ["ONE_WAY_OPS", "ALL_ONE_WAY", "MATRIX_LIMIT", "MATRIX_NOTE", "Cell", "CopyMatrix", "Pair", "ReportRow",
           "copy_matrices", "copy_pairs", "matrix_lines", "report_matrix_lines", "cell_baseline", "layout_of",
           "node_label", "natural_key", "shown_matrices", "figure_text", "ratio_text",
           "verdict_ratio", "RATIO_NOTE"]

#: the one-way copies that the all-copies matrix puts together, and their names in its title
ONE_WAY_NAMES = {"copy": "peer", "h2d": "host to device", "d2h": "device to host"}
ONE_WAY_OPS = tuple(ONE_WAY_NAMES)
#: the verdicts of a case judged against a published floor
FLOOR_STATUSES = ("FLOOR", "floor-ok")
#: what every matrix's numbers are, said once in the section's first line (and the HTML page's)
MATRIX_NOTE = "GB/s, GB = 1e9 bytes; source rows, destination columns; -: not measured"
#: what the matrices' "today / baseline" cells are, said under each
RATIO_NOTE = ("today / baseline (the verdict's ratio where the case was judged, today's runs pooled, as the table's; "
              "else today's figure over the baseline's)")
#: the op name of the matrix of every one-way copy
ALL_ONE_WAY = "one-way"
#: how many matrices the terminal summary prints (``gpucomm show`` prints every one)
MATRIX_LIMIT = 6
#: a matrix wider than this many columns is printed in slices of this many destinations
MAX_COLUMNS = 9


def natural_key(name: str) -> list[Union[int, str]]:
    """Sort key that puts ``cuda:2`` before ``cuda:10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _info(row: Mapping[str, object]) -> Mapping[str, object]:
    info = row.get("info")
    return info if isinstance(info, Mapping) else {}


def node_label(row: Mapping[str, object]) -> str:
    """The node a report row was measured on (``"node 1 (hostB)"``), "" on one host."""
    return node_label_of(_info(row))


def layout_of(report: Mapping[str, Any]) -> str:
    """The job's layout across nodes of a report's JSON (part of the baseline's case keys), "" on one host."""
    launch = report.get("launch")
    return str((launch or {}).get("layout") or "") if isinstance(launch, Mapping) else ""


class Cell(NamedTuple):
    """One pair at one size: today's GB/s (the first run's, as the table's), the baseline's (None where it lacks
    the case), whether that is a published floor (a case with no measured run) rather than measured runs, and
    the ratio the row's verdict decided on (None where the row was not judged against a figure)."""

    now: float
    base: Optional[float] = None
    floor: bool = False
    verdict_ratio: Optional[float] = None

    @property
    def ratio(self) -> Optional[float]:
        """Today / the baseline: the verdict's ratio (today's runs pooled, as the table and the plots give it)
        where the row has one, else today's figure over the baseline's."""
        if self.verdict_ratio is not None:
            return self.verdict_ratio
        return self.now / self.base if self.base else None


class ReportRow(Protocol):
    """A report document's row (``report.document.Row``), as the matrices read it."""

    @property
    def test(self) -> str: ...

    @property
    def measurement(self) -> Measurement: ...

    @property
    def verdict(self) -> Any: ...  # its ``data``: the verdict's JSON (``row["baseline"]``), or None


class Pair(NamedTuple):
    """A copy between two devices at one size, as the matrices read a row: today's figure and the verdict the
    row was judged by (``row["baseline"]``, None where it was not)."""

    test: str
    op: str
    source: str
    destination: str
    size_bytes: int
    dtype: Optional[str]
    world_size: int
    node: str
    now: float
    verdict: Optional[Mapping[str, Any]]


def _figure(row: Mapping[str, Any]) -> float:
    """Today's GB/s of a row, as the table computes it: from its samples where the row has them."""
    test = row.get("test", "?")
    try:
        if "samples_s" in row:
            return float(Measurement.from_dict(dict(row)).gbps)
        return float(row["gbps"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{test}: no GB/s figure ({type(e).__name__}: {e})") from None


def copy_pairs(rows: Iterable["Mapping[str, Any] | ReportRow"]) -> list[Pair]:
    """The copies between two devices among ``rows``: a report's JSON rows (``test``, ``op``, ``kind``,
    ``devices``, ``size_bytes``, the samples or ``gbps``, ``world_size``, ``dtype``, ``info``, the verdict under
    ``baseline``) or a document's rows.  ValueError naming the row whose figure cannot be read."""
    out = []
    for row in rows:
        if isinstance(row, Mapping):
            devices = row.get("devices") or []
            if row.get("kind") != "copy" or len(devices) != 2:
                continue
            verdict = row.get("baseline")
            out.append(Pair(str(row.get("test", "")), str(row["op"]), str(devices[0]), str(devices[1]),
                            int(row["size_bytes"]), row.get("dtype"), int(row.get("world_size", 1)), node_label(row),
                            _figure(row), verdict if isinstance(verdict, Mapping) else None))
            continue
        m = row.measurement
        if m.kind != "copy" or len(m.devices) != 2:
            continue
        out.append(Pair(row.test, m.op, str(m.devices[0]), str(m.devices[1]), int(m.size_bytes), m.dtype,
                        int(m.world_size), m.node_label, float(m.gbps),
                        row.verdict.data if row.verdict is not None else None))
    return out


def cell_baseline(baseline: Optional[BaselineFigures], pair: Pair, layout: str = "") -> tuple[Optional[float], bool]:
    """(the baseline's figure of ``pair``, whether it is a published floor).  With a baseline file's figures:
    its runs' figure, else the case's floor (``BaselineFigures.cell``).  Without: the figure the row's verdict
    was judged against (``row["baseline"]["baseline_gbps"]``: what a saved report carries)."""
    if baseline is not None:
        return baseline.cell(pair.test, pair.op, pair.size_bytes, pair.dtype, pair.world_size, layout)
    verdict = pair.verdict
    if verdict is None:
        return None, False
    figure = verdict.get("baseline_gbps")
    if not isinstance(figure, (int, float)) or not figure > 0:
        return None, False
    return float(figure), str(verdict.get("status")) in FLOOR_STATUSES


@dataclass
class CopyMatrix:
    """The cells of one copy test (or of every one-way copy: ``op`` :data:`ALL_ONE_WAY`) on one node.

    ``cells[size][(source, destination)]`` is a :class:`Cell`; ``sources`` and ``destinations`` are every
    device seen, in natural order; ``ops`` the copy ops it holds; ``compared`` whether the rows were compared
    with a baseline (a document given, or verdicts in the rows); ``ambiguous`` where the test has rows of the
    same pair and size (other parameters): no matrix can show them."""

    test: str
    op: str
    node: str
    sources: list[str] = field(default_factory=list)
    destinations: list[str] = field(default_factory=list)
    cells: dict[int, dict[tuple[str, str], Cell]] = field(default_factory=dict)
    ops: list[str] = field(default_factory=list)
    compared: bool = False
    ambiguous: bool = False

    @property
    def sizes(self) -> list[int]:
        return sorted(self.cells)

    @property
    def title(self) -> str:
        if self.op == ALL_ONE_WAY:
            names = [name for op, name in ONE_WAY_NAMES.items() if op in self.ops]
            kind = " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
        else:
            kind = "both-ways copy" if self.op == "copy_bidir" else self.op
        return f"{self.test or self.op}: {kind}" + (f" ({self.node})" if self.node else "")

    def fullest_size(self) -> int:
        """The largest size at which the most pairs were measured."""
        return max(self.cells, key=lambda s: (len(self.cells[s]), s))

    def ratio(self, size: int, source: str, destination: str) -> Optional[float]:
        """Today / the baseline for a cell; None where either is missing."""
        cell = self.cells.get(size, {}).get((source, destination))
        return cell.ratio if cell is not None else None


def copy_matrices(rows: Iterable["Mapping[str, object] | ReportRow"],
                  baseline: "BaselineFigures | Mapping[str, object] | None" = None, *,
                  layout: str = "") -> list[CopyMatrix]:
    """The matrices of the copy rows among ``rows`` (:func:`copy_pairs`), each cell's baseline figure from
    ``baseline`` (a baseline file's figures, or its document) or else from the row's verdict
    (:func:`cell_baseline`; ``layout`` the report's, for a job across nodes).  The all-one-way-copies matrix
    comes first, then one per (test function, op, node) in the rows' order.  ValueError naming the row whose
    figure cannot be read."""
    figures = as_figures(baseline)
    groups: dict[tuple[str, str, str], list[Pair]] = {}
    one_way: dict[str, list[Pair]] = {}
    for p in copy_pairs(rows):
        groups.setdefault((p.test.split("[", 1)[0], p.op, p.node), []).append(p)
        if p.op in ONE_WAY_OPS:
            one_way.setdefault(p.node, []).append(p)
    for node, node_pairs in one_way.items():
        tests = {p.test.split("[", 1)[0] for p in node_pairs}
        seen = [(p.source, p.destination, p.size_bytes) for p in node_pairs]
        if len(tests) > 1 and len(seen) == len(set(seen)):
            groups = {("all one-way copies", ALL_ONE_WAY, node): node_pairs, **groups}
    out = []
    for (test, op, node), group in groups.items():
        m = CopyMatrix(test=test, op=op, node=node,
                       sources=sorted({p.source for p in group}, key=natural_key),
                       destinations=sorted({p.destination for p in group}, key=natural_key),
                       ops=sorted({p.op for p in group}),
                       compared=figures is not None or any(p.verdict is not None for p in group))
        for p in group:
            at, pair = m.cells.setdefault(p.size_bytes, {}), (p.source, p.destination)
            if pair in at:
                m.ambiguous = True
            at[pair] = Cell(p.now, *cell_baseline(figures, p, layout), verdict_ratio(p.verdict))
        out.append(m)
    return out


def verdict_ratio(verdict: Optional[Mapping[str, Any]]) -> Optional[float]:
    """The ratio a row's verdict decided on (``row["baseline"]["ratio"]``: today's runs pooled over the
    baseline's), None where it has none (not judged, new, or a figure that is not a positive number)."""
    ratio = verdict.get("ratio") if verdict is not None else None
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
        return None
    return float(ratio)


def figure_text(cell: Cell) -> str:
    """A cell's GB/s as the matrices print it: four significant digits, whole numbers from 1000 on."""
    return f"{cell.now:.4g}" if cell.now < 1000 else f"{cell.now:.0f}"


def ratio_text(cell: Cell) -> str:
    """A cell's today / baseline: ``0.97x``, ``0.97x*`` against a published floor, "new" without a baseline."""
    return "new" if cell.ratio is None else f"{format_ratio(cell.ratio, 2)}x" + ("*" if cell.floor else "")


def shown_matrices(matrices: Sequence[CopyMatrix]) -> list[CopyMatrix]:
    """The matrices worth showing: not of a single cell (its row says it all), and not a one-way test's own
    where the matrix of every one-way copy of its node holds it."""
    shown = [m for m in matrices
             if len(m.sources) * len(m.destinations) > 1 and max(len(c) for c in m.cells.values()) > 1]
    if any(m.op == ALL_ONE_WAY for m in shown):
        held = {m.node for m in shown if m.op == ALL_ONE_WAY}
        shown = [m for m in shown if m.op == ALL_ONE_WAY or m.op not in ONE_WAY_OPS or m.node not in held]
    return shown


def matrix_lines(matrices: Sequence[CopyMatrix], *, sizes: Optional[Iterable[int]] = None,
                 limit: Optional[int] = None, width: Optional[int] = None) -> list[str]:
    """The "copy matrices" section: per matrix, GB/s at its fullest size (or at each of ``sizes`` it has),
    source rows and destination columns ("-": not measured), and where the rows were compared with a baseline
    "today / baseline" under it ("new" where the baseline lacks the case, a "*" where the figure is a
    published floor).  The matrices of :func:`shown_matrices`; a test with several rows of one pair and size
    gets a line saying so instead.  ``limit``: at most that many matrices, then a count of the rest.
    ``width``: a matrix is printed in slices of as many destinations as fit it (at most ``MAX_COLUMNS``).
    [] where there is nothing to show."""
    shown = shown_matrices(matrices)
    asked = sorted({int(s) for s in sizes}) if sizes is not None else None
    body: list[str] = []
    floors = False
    for m in shown[:limit] if limit is not None else shown:
        if m.ambiguous:
            body.append(f"  {m.title}: no matrix: the test has several rows of one pair and size (other parameters)")
            continue
        for size in ([s for s in asked if s in m.cells] if asked is not None else [m.fullest_size()]):
            body.append(f"  {m.title} at {format_size(size)} ({size:,} bytes):")
            body += _grid(m, size, figure_text, width)
            if m.compared:
                body.append(f"  {RATIO_NOTE}:")
                body += _grid(m, size, ratio_text, width)
                floors = floors or any(c.floor for c in m.cells[size].values())
    if not body:
        return []
    at = "at the sizes asked" if asked is not None else "at the largest size where the most pairs were measured"
    lines = [f"gpucomm copy matrices ({MATRIX_NOTE}; {at}):", *body]
    if floors:
        lines.append("  *: against the published floor of a case with no measured run")
    if limit is not None and len(shown) > limit:
        lines.append(f"  ... and {len(shown) - limit} more (gpucomm show REPORT prints every one)")
    return lines


def report_matrix_lines(report: Any, baseline: "BaselineFigures | Mapping[str, object] | None" = None, *,
                        sizes: Optional[Iterable[int]] = None, limit: Optional[int] = None,
                        width: Optional[int] = None) -> list[str]:
    """:func:`matrix_lines` of a report's rows -- its JSON, or a document (``rows``, ``layout``) -- against
    ``baseline`` (else the rows' own verdicts); a report whose matrices cannot be made gets one line saying
    why: the matrices explain, the verdicts decide."""
    try:
        rows, layout = (report["rows"], layout_of(report)) if isinstance(report, Mapping) else (report.rows,
                                                                                               report.layout)
        return matrix_lines(copy_matrices(rows, baseline, layout=layout), sizes=sizes, limit=limit, width=width)
    except (KeyError, TypeError, ValueError) as e:
        return [f"gpucomm: no copy matrices: {type(e).__name__}: {e}"]


def _grid(m: CopyMatrix, size: int, cell: Callable[[Cell], str], line_width: Optional[int] = None) -> list[str]:
    text = {k: cell(c) for k, c in m.cells[size].items()}
    width = max([len(t) for t in text.values()] + [len(d) for d in m.destinations] + [3])
    label = max(len(s) for s in m.sources)
    per = MAX_COLUMNS if line_width is None else max(1, min(MAX_COLUMNS, (line_width - 4 - label) // (width + 2)))
    out = []
    for lo in range(0, len(m.destinations), per):
        cols = m.destinations[lo:lo + per]
        out.append("    " + " " * label + "".join(f"  {d:>{width}}" for d in cols))
        for s in m.sources:
            out.append(f"    {s:<{label}}" + "".join(f"  {text.get((s, d), '-'):>{width}}" for d in cols))
    return out
