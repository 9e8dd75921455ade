"""Reports: the terminal table and summary, the JSON report, the pytest-benchmark export, JUnit properties."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

from ..files.atomic import write_atomic
from .saved import REPORT_FORMAT, REPORT_VERSION
from ..measurement import Record
from ..units import format_size, plural
from ..vocab import Status

__all__ = ["table_rows", "render_table", "json_document", "straggler_lines", "stragglers_of", "write_json",
           "benchmark_document", "gate_columns", "junit_properties", "tail_cell", "tail_counts", "CURVE_LIMIT",
           "live_text", "LIVE_KEY", "sensitivity_lines", "level_lines", "apply_levels"]

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


def _short(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1] if "::" in nodeid else nodeid


def fmt_gbps(x: float) -> str:
    """Enough digits to compare small figures too: 329.4, 12.35, 0.0123."""
    if x >= 100:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def fmt_us(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.2f}"


def table_rows(records: Iterable[Record]) -> list[list[Any]]:
    rows = []
    for r in records:
        m = r.measurement
        rows.append(
            [
                _short(r.nodeid),
                m.op,
                m.where,
                m.size_bytes,
                format_size(m.size_bytes),
                fmt_gbps(m.gbps),
                fmt_us(m.p50_us),
                fmt_us(m.p99_us),
                f"{m.cv * 100:.1f}",
                m.n,
            ]
        )
    return rows


TAIL_HEADER = "1-op tail"


def tail_cell(m: Any) -> str:
    """The compact tail column of a measurement with single ops: their p99 and jitter (p99 / p50), e.g.
    ``p99 24.1us 1.31x``; "" for one without (a copy)."""
    tail = m.info.get("tail") if isinstance(m.info, dict) else None
    if not isinstance(tail, dict) or tail.get("p99_us") is None:
        return ""
    p99 = float(tail["p99_us"])
    when = f"{p99 / 1e3:.3g}ms" if p99 >= 1e3 else f"{p99:.3g}us"
    jitter = tail.get("jitter")
    return f"p99 {when}" + (f" {float(jitter):.2f}x" if jitter is not None else "")


def render_table(records: list[Record], extra_headers: Optional[list[str]] = None,
                 extra: Optional[list[list[Any]]] = None) -> str:
    """The table; a column of the single ops' tail (:func:`tail_cell`) where some measurement has one."""
    from tabulate import tabulate

    rows = table_rows(records)
    headers = list(HEADERS)
    cells = [tail_cell(r.measurement) for r in records]
    if any(cells):
        headers.append(TAIL_HEADER)
        rows = [row + [c] for row, c in zip(rows, cells)]
    if extra_headers and extra:
        headers += extra_headers
        rows = [r + e for r, e in zip(rows, extra)]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True, stralign="right")


GATE_HEADERS = ["baseline GB/s", "ratio", "status"]


def gate_columns(records: Iterable[Record]) -> list[list[Any]]:
    out = []
    for r in records:
        b = r.baseline or {}
        base = b.get("baseline_gbps")
        ratio = b.get("ratio")
        out.append([fmt_gbps(base) if base else "-", f"{ratio:.3f}" if ratio else "-", r.status])
    return out


LEGEND = (
    "GB/s: median busbw for collectives, algbw for copies (GB = 1e9 bytes; a both-ways copy counts the bytes of "
    "both directions); p50/p99: per-iteration latency; CV: coefficient of variation of the per-iteration times; "
    "n: samples; 1-op tail (collectives): p99 of the single ops, each timed on its own (the slowest rank's time), "
    "and their jitter p99/p50."
)


def stragglers_of(records: list[Record]) -> tuple[list[Any], list[Any], list[str]]:
    """The stragglers of each record (``stragglers.CaseRanks`` or None) and the run's outlier nodes
    (``stragglers.OutlierNode``), and a note when the ranks' data of some measurement could not be read."""
    from ..analysis.stragglers import find_outliers

    try:
        per_case, nodes = find_outliers([(r.nodeid, r.measurement) for r in records])
    except ValueError as e:
        return [None] * len(records), [], [f"gpucomm: no slowest ranks or outlier nodes: {e}"]
    return per_case, nodes, []


def straggler_lines(records: list[Record], limit: int = 10) -> list[str]:
    """The "slowest ranks" and "outlier nodes" sections of the terminal summary (each only when it has a
    case to list; see ``stragglers``)."""
    from ..analysis.stragglers import CHANCE_P, CLEAR_MAJORITY, MAD_FLOOR, MIN_LAG, NOTABLE_SPREAD, Z_LIMIT

    per_case, nodes, notes = stragglers_of(records)
    lines: list[str] = []
    listed = [(r, c) for r, c in zip(records, per_case) if c is not None and c.listed]
    if listed:
        lines.append(f"gpucomm slowest ranks (cases where one rank arrived last in at least {CLEAR_MAJORITY:.0%} of "
                     f"the iterations, beyond chance (p <= {CHANCE_P:g}), the others waiting {MIN_LAG:.0%} of the "
                     f"iteration or more for it; where the ranks' median times spread by {NOTABLE_SPREAD:.0%} of the "
                     f"iteration or more, or where a rank's lag stands out):")
        for r, c in listed[:limit]:
            lines.append(f"  {r.nodeid} ({r.measurement.op} {format_size(r.measurement.size_bytes)}): {c.text()}")
        if len(listed) > limit:
            lines.append(f"  ... and {len(listed) - limit} more (the JSON report has every case)")
    if nodes:
        lines.append(f"gpucomm outlier nodes (against the other nodes and ranks of this run: modified z-score "
                     f"0.6745 (x - median) / MAD above {Z_LIMIT}, "
                     f"the MAD at least {MAD_FLOOR:.0%} of the iteration time "
                     f"for the ranks' lag, of the nodes' median for a node's figure):")
        lines += [f"  {n.text()}" for n in nodes[:limit]]
        if len(nodes) > limit:
            lines.append(f"  ... and {len(nodes) - limit} more nodes (the JSON report lists every one)")
    return lines + notes


#: the sweeps the terminal's curves section shows (the JSON report has every one)
CURVE_LIMIT = 30


#: the JUnit / user property that carries a test's figures and verdicts to its line under -v
LIVE_KEY = "gpucomm.live"


def live_text(records: list[Record], gated: bool, limit: int = 2) -> str:
    """A test's figures and verdicts for its line under ``-v``: ``395.8 GB/s 1.00x ok`` per measurement
    (the ratio and the verdict where the gate judged it), at most ``limit`` of them and a count of the rest."""
    parts = []
    for r in records[:limit]:
        text = f"{fmt_gbps(r.measurement.gbps)} GB/s"
        b = r.baseline or {}
        if b.get("ratio"):
            text += f" {b['ratio']:.2f}x"
        if gated or r.status is Status.FAILED:
            text += f" {r.status.value if isinstance(r.status, Status) else r.status}"
        parts.append(text)
    if len(records) > limit:
        parts.append(f"+{len(records) - limit} more")
    return "; ".join(parts)


def json_document(records: list[Record], *, settings: dict[str, Any], fingerprint: Optional[dict[str, Any]],
                  extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The JSON report: a row per measurement (with, for a collective, its ranks' summary under
    "stragglers"; their compact data is in its info["ranks"]) and the run's "outliers" (nodes)."""
    per_case, nodes, _ = stragglers_of(records)
    rows = []
    for r, c in zip(records, per_case):
        row = {"test": r.nodeid, **r.measurement.to_dict(with_samples=True), "status": r.status,
               "checks": list(r.checks)}
        if r.baseline is not None:
            row["baseline"] = r.baseline
        if c is not None:
            row["stragglers"] = c.to_dict()
        rows.append(row)
    doc: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "settings": settings,
        "fingerprint": fingerprint,
        "rows": rows,
        "outliers": [n.to_dict() for n in nodes],
    }
    if extra:
        doc.update(extra)
    return doc


def write_json(path: str, doc: dict[str, Any]) -> None:
    """Write atomically: a temp file in the same folder, then rename."""
    write_atomic(Path(path), json.dumps(doc, indent=1) + "\n")


def benchmark_document(records: list[Record], fingerprint: Optional[dict[str, Any]], date: str) -> dict[str, Any]:
    """The same measurements in pytest-benchmark's JSON format, so ``pytest-benchmark compare`` reads them.

    One benchmark per measurement; its "round" times are our per-iteration seconds, and the statistics
    come from pytest-benchmark's own Stats class.  GB/s, the op and the size are in ``extra_info``.
    """
    from pytest_benchmark import __version__ as pb_version
    from pytest_benchmark.stats import Stats

    fp = fingerprint or {}
    benchmarks = []
    per_test = Counter(r.nodeid for r in records)  # a test with several rows gets a suffix
    for r in records:
        m = r.measurement
        st = Stats()
        for s in m.samples_s:
            st.update(s)
        stats = st.as_dict()
        stats["data"] = list(m.samples_s)
        stats["iterations"] = 1
        node = f"-node{m.info['node']}" if "node" in m.info else ""  # launched mode: a copy's row per node
        suffix = f"[{m.op}-{m.size_bytes}{node}]" if per_test[r.nodeid] > 1 else ""
        benchmarks.append({
            "group": m.op,
            "name": r.nodeid.split("::", 1)[-1] + suffix,
            "fullname": r.nodeid + suffix,
            "params": {"size": m.size_bytes},
            "param": str(m.size_bytes),
            "extra_info": {"gbps": m.gbps, "algbw_gbps": m.algbw_gbps, "busbw_gbps": m.busbw_gbps,
                           "size_bytes": m.size_bytes, "where": m.where, "status": r.status},
            "options": {"timer": m.info.get("timer", ""), "min_rounds": 1, "max_time": 0, "min_time": 0,
                        "warmup": True, "disable_gc": False},
            "stats": stats,
        })
    return {
        "machine_info": {"node": fp.get("host", ""), "processor": fp.get("cpu", ""), "machine": fp.get("model", ""),
                         "python_version": fp.get("python", ""), "gpucomm": fp},
        "commit_info": {},
        "benchmarks": benchmarks,
        "datetime": date,
        "version": pb_version,
    }


def junit_properties(records: Iterable[Record], gated: bool) -> list[tuple[str, str]]:
    """The figures and verdicts of a test's measurements as JUnit properties:
    ``gpucomm.<op>.<bytes>.gbps``, ``.p50_us``, ``.p99_us`` and, when gated, ``.status``, ``.ratio``,
    ``.baseline_gbps``."""
    props: list[tuple[str, str]] = []
    for r in records:
        m = r.measurement
        key = f"gpucomm.{m.op}.{m.size_bytes}"
        if gated:
            b = r.baseline or {}
            props.append((f"{key}.status", str(r.baseline["status"] if r.baseline else r.status)))
            if b.get("ratio") is not None:
                props.append((f"{key}.ratio", f"{b['ratio']:.4f}"))
            if b.get("baseline_gbps") is not None:
                props.append((f"{key}.baseline_gbps", f"{b['baseline_gbps']:.4f}"))
        props.append((f"{key}.gbps", f"{m.gbps:.4f}"))
        props.append((f"{key}.p50_us", f"{m.p50_us:.3f}"))
        props.append((f"{key}.p99_us", f"{m.p99_us:.3f}"))
    return props


class _Judged(Protocol):
    """What :func:`tail_counts` reads of a record: a :class:`Record`, or a saved report's row as a namespace."""

    @property
    def baseline(self) -> Optional[Mapping[str, Any]]: ...


def tail_counts(records: Iterable[_Judged]) -> str:
    """The tail verdicts for the verdicts' line: "; tails tested on 12 cases: 1 TAIL" (a TAIL under a REGRESSION
    counted too), "" where no tail was tested."""
    tails = [(r.baseline or {}).get("tail") or {} for r in records]
    tested = [t for t in tails if t.get("status") in (Status.OK.value, Status.TAIL.value)]
    if not tested:
        return ""
    heavier = sum(1 for t in tested if t["status"] == Status.TAIL.value)
    return f"; tails tested on {plural(len(tested), 'case')}: {heavier} TAIL"


def sensitivity_lines(verdicts: Sequence[Mapping[str, Any]], tests: Optional[Sequence[str]] = None) -> list[str]:
    """What the cases' own verdicts can catch: per case the smallest drop it catches; those not gated and
    the fix.  ``verdicts``: the verdicts' dicts; ``tests``: their test ids (default: their cases)."""
    lines: list[str] = []
    names = list(tests) if tests is not None else [str(v.get("case", "?")) for v in verdicts]
    judged = [(n, b) for n, b in zip(names, verdicts) if b and b.get("detectable_drop") is not None]
    if judged:
        drops = sorted(b["detectable_drop"] for _, b in judged)
        gated = sum(1 for _, b in judged if b.get("gated"))
        lines.append(f"gpucomm sensitivity: {gated} of {len(judged)} cases catch a drop of twice their tolerance "
                     f"(99% of the time); the smallest drop caught is {drops[len(drops) // 2]:.1%} at the median "
                     f"case, {drops[-1]:.1%} at worst")
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
    return lines


def level_lines(levels: Any, test_of: Mapping[str, str], limit: int = 10) -> list[str]:
    """The levels' summary (gate.levels.RunLevels): per level how many are gated and the median smallest drop
    caught, then each regression (its headline; its bound below it; the tests of the cases it covers)."""
    if levels is None:
        return []
    import textwrap

    lines = [f"gpucomm levels: {line}" for line in levels.summary()]
    for v in levels.failed[:limit]:
        lines += textwrap.wrap(f"gpucomm {v.headline()}", 120, subsequent_indent="    ")
        lines += textwrap.wrap(v.detail(), 116, initial_indent="    ", subsequent_indent="    ")
        tests = [test_of.get(k, k) for k in v.keys]
        lines += [f"    covers {t}" for t in tests[:5]]
        if len(tests) > 5:
            lines.append(f"    ... and {len(tests) - 5} more cases (the JSON report's levels list them)")
    if len(levels.failed) > limit:
        lines.append(f"gpucomm ... and {len(levels.failed) - limit} more regressions at the levels (the JSON report)")
    return lines


def apply_levels(records: Iterable[Any], levels: Any) -> None:
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


