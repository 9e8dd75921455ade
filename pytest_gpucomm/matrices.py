"""Copy matrices: each copy test's GB/s per (source, destination) pair, today and against the baseline.

A node's copy figures read best as a matrix, source rows and destination columns, as nvbandwidth prints
them: on 8 GPUs the 56 ordered pairs of the peer copy are one 8 x 8 table, and the one slow link is the
one low cell.  This module makes those matrices from the JSON report's rows (or from the rows of a run in
progress) and renders them as text: the terminal summary prints them after the results table, ``gpucomm
show`` prints them from a saved report, and :func:`pytest_gpucomm.plots.copy_matrix_figures` draws the same
cells.

**Which matrices.**  One per copy test function, op and node (a multi-node job has a matrix per node),
from the copies between two devices (``devices`` = [source, destination]; the all-peers patterns have
one figure for many pairs and make none).  Where the rows hold one-way copies of more than one test (peer
copies, host to device, device to host), a first matrix puts them all together, the host a row and a
column like a device: on a GPU node that one matrix shows every link of the node.  The text keeps that
one and leaves out the one-way tests it already holds.

**Which size.**  A matrix holds every size measured; the text prints one: the largest size at which the
most pairs were measured (the peak figures, where links differ most, and no column left blank because
one test swept fewer sizes).  ``sizes=`` asks for others.

**The baseline's figure** of a cell is the median over the baseline case's runs of each run's median GB/s
(what the plots and ``curves.sweeps_from_baseline`` take), found by the case key the gate uses
(``gate.store.case_key``, with the report's layout across nodes).  A cell the baseline lacks has no
ratio.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from .units import format_size

__all__ = ["ONE_WAY_OPS", "ALL_ONE_WAY", "MATRIX_LIMIT", "CopyMatrix", "copy_matrices", "matrix_lines",
           "baseline_gbps", "node_label", "natural_key"]

#: the one-way copies that the all-copies matrix puts together (peer, host to device, device to host)
ONE_WAY_OPS = ("copy", "h2d", "d2h")
#: the op name of the matrix of every one-way copy
ALL_ONE_WAY = "one-way"
#: how many matrices the terminal summary prints (``gpucomm show`` prints every one)
MATRIX_LIMIT = 6
#: a matrix wider than this many columns is printed in slices of this many destinations
MAX_COLUMNS = 9


def natural_key(name: str) -> list[Any]:
    """Sort key that puts ``cuda:2`` before ``cuda:10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _info(row: Mapping[str, Any]) -> Mapping[str, Any]:
    info = row.get("info")
    return info if isinstance(info, Mapping) else {}


def node_label(row: Mapping[str, Any]) -> str:
    """The node a row was measured on (``"node 1 (hostB)"``), "" on one host."""
    from .measurement import Measurement

    return Measurement(op=str(row.get("op", "")), size_bytes=1, samples_s=[1.0], devices=(),
                       info=dict(_info(row))).node_label


def _run_median(run: Mapping[str, Any]) -> Optional[float]:
    summary = run.get("summary") or {}
    if summary.get("median_gbps"):
        return float(summary["median_gbps"])
    samples = run.get("samples_gbps") or []
    return float(statistics.median(samples)) if samples else None


def baseline_gbps(baseline: Optional[Mapping[str, Any]], row: Mapping[str, Any], layout: str = "") -> Optional[float]:
    """The baseline's figure of ``row``'s case: the median over its runs of their median GB/s; None without a
    baseline or where it lacks the case."""
    if baseline is None:
        return None
    from .gate.store import case_key

    key = case_key(str(row.get("test", "")), str(row["op"]), int(row["size_bytes"]), row.get("dtype"),
                   int(row.get("world_size", 1)), layout)
    case = (baseline.get("cases") or {}).get(key)
    if not isinstance(case, Mapping):
        return None
    medians = [m for m in (_run_median(r) for r in case.get("runs", [])) if m]
    return float(statistics.median(medians)) if medians else None


@dataclass
class CopyMatrix:
    """The cells of one copy test (or of every one-way copy: ``op`` :data:`ALL_ONE_WAY`) on one node.

    ``cells[size][(source, destination)]`` is (today's GB/s, the baseline's GB/s or None); ``sources`` and
    ``destinations`` are every device seen, in natural order."""

    test: str
    op: str
    node: str
    sources: list[str] = field(default_factory=list)
    destinations: list[str] = field(default_factory=list)
    cells: dict[int, dict[tuple[str, str], tuple[float, Optional[float]]]] = field(default_factory=dict)

    @property
    def sizes(self) -> list[int]:
        return sorted(self.cells)

    @property
    def title(self) -> str:
        kind = ("both-ways copy" if self.op == "copy_bidir" else
                "peer, host to device and device to host" if self.op == ALL_ONE_WAY else self.op)
        return f"{self.test or self.op}: {kind}" + (f" ({self.node})" if self.node else "")

    def fullest_size(self) -> int:
        """The largest size at which the most pairs were measured."""
        return max(self.cells, key=lambda s: (len(self.cells[s]), s))

    def ratio(self, size: int, source: str, destination: str) -> Optional[float]:
        """Today / the baseline for a cell; None where either is missing."""
        now, base = self.cells.get(size, {}).get((source, destination), (None, None))
        return now / base if now is not None and base else None


def copy_matrices(rows: Iterable[Mapping[str, Any]], baseline: Optional[Mapping[str, Any]] = None, *,
                  layout: str = "") -> list[CopyMatrix]:
    """The matrices of the copy rows among ``rows`` (JSON report rows: ``test``, ``op``, ``kind``, ``devices``,
    ``size_bytes``, ``gbps``, ``world_size``, ``dtype``, ``info``), with each cell's baseline figure from
    ``baseline`` (a baseline file's document; ``layout`` the report's, for a job across nodes).  The
    all-one-way-copies matrix comes first, then one per (test function, op, node) in the rows' order."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    one_way: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        devices = row.get("devices") or []
        if row.get("kind") != "copy" or len(devices) != 2:
            continue
        node = node_label(row)
        groups.setdefault((str(row.get("test", "")).split("[", 1)[0], str(row["op"]), node), []).append(row)
        if row["op"] in ONE_WAY_OPS:
            one_way.setdefault(node, []).append(row)
    for node, node_rows in one_way.items():
        tests = {str(r.get("test", "")).split("[", 1)[0] for r in node_rows}
        pairs = [(str(r["devices"][0]), str(r["devices"][1]), int(r["size_bytes"])) for r in node_rows]
        if len(tests) > 1 and len(pairs) == len(set(pairs)):
            groups = {("all one-way copies", ALL_ONE_WAY, node): node_rows, **groups}
    out = []
    for (test, op, node), group in groups.items():
        m = CopyMatrix(test=test, op=op, node=node,
                       sources=sorted({str(r["devices"][0]) for r in group}, key=natural_key),
                       destinations=sorted({str(r["devices"][1]) for r in group}, key=natural_key))
        for r in group:
            cell = (str(r["devices"][0]), str(r["devices"][1]))
            m.cells.setdefault(int(r["size_bytes"]), {})[cell] = (float(r["gbps"]), baseline_gbps(baseline, r, layout))
        out.append(m)
    return out


def _fmt_gbps(v: float) -> str:
    return f"{v:.4g}" if v < 1000 else f"{v:.0f}"


def matrix_lines(matrices: Sequence[CopyMatrix], *, sizes: Optional[Iterable[int]] = None,
                 limit: Optional[int] = None) -> list[str]:
    """The "copy matrices" section: per matrix, GB/s at its fullest size (or at each of ``sizes`` it has),
    source rows and destination columns ("-": not measured), and with a baseline "today / baseline" under
    it.  A matrix of a single cell is left out (its row says it all).  ``limit``: at most that many
    matrices, then a count of the rest."""
    shown = [m for m in matrices
             if len(m.sources) * len(m.destinations) > 1 and max(len(c) for c in m.cells.values()) > 1]
    if any(m.op == ALL_ONE_WAY for m in shown):
        held = {m.node for m in shown if m.op == ALL_ONE_WAY}
        shown = [m for m in shown if m.op == ALL_ONE_WAY or m.op not in ONE_WAY_OPS or m.node not in held]
    if not shown:
        return []
    asked = sorted({int(s) for s in sizes}) if sizes is not None else None
    lines = ["gpucomm copy matrices (GB/s, GB = 1e9 bytes, at the largest size where the most pairs were "
             "measured; source rows, destination columns; -: not measured; with a baseline, today / baseline "
             "below):"]
    for m in shown[:limit] if limit is not None else shown:
        for size in ([s for s in asked if s in m.cells] if asked is not None else [m.fullest_size()]):
            lines.append(f"  {m.title} at {format_size(size)} ({size:,} bytes):")
            lines += _grid(m, size, lambda now, base: _fmt_gbps(now))
            if any(base for _, base in m.cells[size].values()):
                lines.append("  today / baseline:")
                lines += _grid(m, size, lambda now, base: f"{now / base:.2f}x" if base else "new")
    if limit is not None and len(shown) > limit:
        lines.append(f"  ... and {len(shown) - limit} more (gpucomm show REPORT prints every one)")
    return lines


def _grid(m: CopyMatrix, size: int, cell: Any) -> list[str]:
    cells = m.cells[size]
    text = {k: cell(now, base) for k, (now, base) in cells.items()}
    width = max([len(t) for t in text.values()] + [len(d) for d in m.destinations] + [3])
    label = max(len(s) for s in m.sources)
    out = []
    for lo in range(0, len(m.destinations), MAX_COLUMNS):
        cols = m.destinations[lo:lo + MAX_COLUMNS]
        out.append("    " + " " * label + "".join(f"  {d:>{width}}" for d in cols))
        for s in m.sources:
            out.append(f"    {s:<{label}}" + "".join(f"  {text.get((s, d), '-'):>{width}}" for d in cols))
    return out
