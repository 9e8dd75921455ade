"""The results table of the terminal: one op's sweep together, in size order, laid out to fit the width.

**Grouped by sweep** (:func:`sweep_groups`): the rows of one test function's sweep of one op on one device
pair or world, dtype and form (``analysis.sweeps.sweep_key``) are together, by size, under a heading that
names the sweep and its test (``all_reduce in place, 2 ranks (nccl), float32 (test_collective[float32-
all_reduce-inplace])``); the sweeps come in the order the run first measured them.  A run measures a suite's
sizes in the outer loop, so the rows of one op would otherwise be spread over the whole table.

**Compact** (:func:`compact_table`): a row is a size and its figures; the columns that do not fit the width
are left out, the least needed first (:data:`DROP_ORDER`: the samples, the CV, the p99, the single ops'
tail, the p50, the baseline's figure), and a line says which.  Size, GB/s, ratio and status always stay.
The full table (every column, each row with its test id: :func:`full_table`) is printed with ``-v``; the JSON
report has every figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from ..units import format_size
from .document import Row, rows_of
from ..units import format_gbps
from .run import fmt_us, tail_cell

__all__ = ["COMPACT_COLUMNS", "DROP_ORDER", "sweep_groups", "group_heading", "compact_table", "full_table",
           "short_test"]


def short_test(nodeid: str) -> str:
    """The test id without its file: ``test_copy[4KiB-0->1]``."""
    return nodeid.split("::", 1)[-1] if "::" in nodeid else nodeid


@dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[Row], str]
    left: bool = False


def _base(r: Row) -> str:
    base = r.verdict.baseline_gbps if r.verdict is not None else None
    return format_gbps(base) if base else "-"


def _ratio(r: Row) -> str:
    return r.verdict.ratio_text() if r.verdict is not None else "-"


def _throttled(r: Row) -> bool:
    from ..env.clocks import throttle_text

    return throttle_text(r.measurement.info) is not None


def _tail(r: Row) -> str:
    return tail_cell(r.measurement)


#: the compact table's columns, in their order
COMPACT_COLUMNS: dict[str, _Column] = {
    "size": _Column("size", lambda r: format_size(r.measurement.size_bytes)),
    "GB/s": _Column("GB/s", lambda r: format_gbps(r.measurement.gbps) + ("*" if _throttled(r) else "")),
    "p50 us": _Column("p50 us", lambda r: fmt_us(r.measurement.p50_us)),
    "p99 us": _Column("p99 us", lambda r: fmt_us(r.measurement.p99_us)),
    "CV%": _Column("CV%", lambda r: f"{r.measurement.cv * 100:.1f}"),
    "n": _Column("n", lambda r: str(r.measurement.n)),
    "1-op tail": _Column("1-op tail", _tail),
    "base GB/s": _Column("base GB/s", _base),
    "ratio": _Column("ratio", _ratio),
    "status": _Column("status", lambda r: r.status, left=True),
}
#: the columns left out, in this order, until the table fits the width
DROP_ORDER = ("n", "CV%", "p99 us", "1-op tail", "p50 us", "base GB/s")
_GAP = "  "
_INDENT = "  "


def _label(row: Row) -> str:
    m = row.measurement
    in_place = (m.info or {}).get("in_place") if isinstance(m.info, dict) else None
    form = "" if in_place is None else (" in place" if in_place else " out of place")
    dtype = f", {m.dtype}" if m.dtype and m.kind == "collective" else ""
    return f"{m.op}{form}, {m.where}{dtype}"


def group_heading(rows: Sequence[Row]) -> str:
    """A group's heading: the sweep's op, form, devices or world and dtype, and its test id without the size
    (``all_reduce in place, 2 ranks (gloo), float32 (test_ar)``); the figures of another tool's file
    (``pytest_gpucomm.foreign``) name the tool and its version first (``(nvbandwidth v0.8:
    host_to_device_memcpy_ce[cuda:0])``)."""
    from ..analysis.sweeps import sweep_key

    first = rows[0]
    sid = sweep_key(first.test, first.measurement)[0] or first.test
    info = first.measurement.info
    source = f"{info['source']} {info.get('source_version', '')}: " if info.get("source") else ""
    return f"{_label(first)} ({source}{short_test(sid)})"


def sweep_groups(items: Iterable["Row"]) -> list[list[Row]]:
    """The rows grouped by sweep (``analysis.sweeps.sweep_key``), the groups in the order each first
    appears, each by size (rows of one size in their order)."""
    from ..analysis.sweeps import sweep_key

    groups: dict[tuple[object, ...], list[Row]] = {}
    for r in rows_of(items):
        groups.setdefault(sweep_key(r.test, r.measurement), []).append(r)
    return [sorted(g, key=lambda r: r.measurement.size_bytes) for g in groups.values()]


def _layout(names: Sequence[str], cells: Sequence[Sequence[str]]) -> tuple[list[int], int]:
    widths = [max([len(n)] + [len(row[i]) for row in cells]) for i, n in enumerate(names)]
    return widths, len(_INDENT) + sum(widths) + len(_GAP) * (len(widths) - 1)


def _line(values: Sequence[str], widths: Sequence[int], left: Sequence[bool]) -> str:
    parts = [v.ljust(w) if lf else v.rjust(w) for v, w, lf in zip(values, widths, left)]
    return (_INDENT + _GAP.join(parts)).rstrip()


def compact_table(items: Iterable["Row"], width: int) -> list[str]:
    """The compact table (see the module doc) of ``items``, at most ``width`` columns wide where the kept
    columns allow it; the gate's columns where some row was judged, the tail's where some row has one."""
    from ..text import fit

    rows = rows_of(items)
    if not rows:
        return []
    groups = sweep_groups(rows)
    gated = any(r.verdict is not None for r in rows)
    names = [n for n in COMPACT_COLUMNS
             if (gated or n not in ("base GB/s", "ratio", "status"))
             and (n != "1-op tail" or any(_tail(r) for r in rows))]
    cells = {id(r): {n: COMPACT_COLUMNS[n].cell(r) for n in names} for r in rows}
    left_out: list[str] = []
    for candidate in (None, *DROP_ORDER):
        if candidate in names:
            names.remove(candidate)
            left_out.append(candidate)
        widths, total = _layout(names, [[cells[id(r)][n] for n in names] for r in rows])
        if total <= width:
            break
    align = [COMPACT_COLUMNS[n].left for n in names]
    lines = [_line(names, widths, align), _INDENT + _GAP.join("-" * w for w in widths)]
    for g in groups:
        lines += fit([group_heading(g)], width)
        lines += [_line([cells[id(r)][n] for n in names], widths, align) for r in g]
    if left_out:
        lines += fit([f"(left out at {width} columns: {', '.join(left_out)}; -v prints the full table, the JSON "
                      "report has every figure)"], width)
    if any(_throttled(r) for r in rows):
        lines += fit(["* measured while its device throttled (a power cap, heat, a hardware slowdown): a lower clock, "
                      "not the link, may explain the figure; the verdict and info['clocks'] in the JSON say which"],
                     width)
    return lines


def full_table(items: Iterable["Row"], extra_headers: Optional[list[str]] = None,
               extra: Optional[list[list[object]]] = None) -> list[str]:
    """The full table (``run.render_table``: every column, each row with its test id), its rows in the
    order of :func:`sweep_groups`."""
    from .run import GATE_HEADERS, gate_columns, render_table

    rows = [r for g in sweep_groups(items) for r in g]
    gated = any(r.verdict is not None for r in rows)
    if gated and extra_headers is None:
        extra_headers, extra = GATE_HEADERS, gate_columns(rows)
    return render_table(rows, extra_headers, extra).splitlines()
