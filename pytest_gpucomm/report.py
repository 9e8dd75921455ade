"""Reports: the terminal table and summary, the JSON report, the pytest-benchmark export, JUnit properties."""

from __future__ import annotations


import json
import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Protocol, Sequence

from .atomic import write_atomic
from .saved import REPORT_FORMAT, REPORT_VERSION
from .measurement import Record
from .units import format_size, plural
from .vocab import Status

if TYPE_CHECKING:
    from .state import State

__all__ = ["table_rows", "render_table", "json_document", "straggler_lines", "stragglers_of", "write_json",
           "benchmark_document", "gate_columns", "baseline_extra",
           "junit_properties", "summary_lines", "write_reports", "tail_cell", "tail_counts", "curves_of",
           "baseline_document", "CURVE_LIMIT", "live_text", "LIVE_KEY", "report_document", "matrices_of"]

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
    from .stragglers import find_outliers

    try:
        per_case, nodes = find_outliers([(r.nodeid, r.measurement) for r in records])
    except ValueError as e:
        return [None] * len(records), [], [f"gpucomm: no slowest ranks or outlier nodes: {e}"]
    return per_case, nodes, []


def straggler_lines(records: list[Record], limit: int = 10) -> list[str]:
    """The "slowest ranks" and "outlier nodes" sections of the terminal summary (each only when it has a
    case to list; see ``stragglers``)."""
    from .stragglers import CHANCE_P, CLEAR_MAJORITY, MAD_FLOOR, MIN_LAG, NOTABLE_SPREAD, Z_LIMIT

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


def baseline_document(state: "State") -> Optional[dict[str, Any]]:
    """The baseline file's document as this session judged against it (read before this run saves into it),
    or None without one: the gate's, or in a pytest-xdist controller the file the workers named."""
    b = state.gate.baseline if state.settings.baseline and state.gate.loaded else None
    if b is not None:
        return b.doc
    path = state.from_workers.get("baseline_path") if state.settings.baseline else None
    if path and Path(path).is_file():
        from .gate.store import read_document

        return read_document(Path(path))
    return None


def curves_of(state: "State") -> tuple[list[dict[str, Any]], list[str]]:
    """The "curves" section of the run (``curves.curve_report``: each sweep's model, compared with the
    baseline's curve where the baseline has the sweep: ``state.baseline_doc``), and a note where it cannot be
    made."""
    from .curves import curve_report, sweeps, sweeps_from_baseline

    try:
        now = sweeps(state.records)
        doc = state.baseline_doc
        return curve_report(now, sweeps_from_baseline(doc) if doc is not None else None), []
    except Exception as e:  # the curves explain, the verdicts decide: a curve that cannot be made is a note
        return [], [f"gpucomm: no curves section: {type(e).__name__}: {e}"]


def matrices_of(state: "State") -> list[str]:
    """The "copy matrices" section of the run (``matrices.matrix_lines``, against ``state.baseline_doc``), or
    a note where it cannot be made: the matrices explain, the verdicts decide."""
    from .matrices import MATRIX_LIMIT, copy_matrices, matrix_lines

    try:
        rows = [{"test": r.nodeid, **r.measurement.to_dict(), **({"baseline": r.baseline} if r.baseline else {})}
                for r in state.records if r.measurement.kind == "copy"]
        return matrix_lines(copy_matrices(rows, state.baseline_doc, layout=state.layout), limit=MATRIX_LIMIT)
    except Exception as e:
        return [f"gpucomm: no copy matrices: {type(e).__name__}: {e}"]


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


def report_document(state: "State") -> dict[str, Any]:
    """The run's JSON report (:func:`json_document` with the baseline, launch and curves sections): what
    --gpucomm-json writes and the plots are drawn from."""
    section = baseline_extra(state)
    extra: dict[str, Any] = {"baseline": section} if section else {}
    launch = state.launch_extra()
    if launch:
        extra["launch"] = launch
    extra["curves"] = state.curves
    return json_document(state.records, settings=state.settings.to_dict(), fingerprint=state.fingerprint,
                         extra=extra)


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


def summary_lines(state: "State") -> list[str]:
    """The "gpucomm results" section of the terminal summary: hardware, table, legend, verdicts, notes."""
    lines = []
    headline = state.headline()
    if headline:
        lines.append(f"hardware: {headline}")
    gated = any(r.baseline is not None for r in state.records)
    table = render_table(state.records, GATE_HEADERS if gated else None,
                         gate_columns(state.records) if gated else None)
    lines += table.splitlines()
    lines.append(LEGEND)
    lines += matrices_of(state)
    from .curves import curve_lines

    lines += curve_lines(state.curves, limit=CURVE_LIMIT)
    lines += straggler_lines(state.records)
    if gated:
        counts = Counter(str(r.status) for r in state.records)
        lines.append("gpucomm verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                     + tail_counts(state.records))
        if state.from_workers.get("gate_header"):
            lines += state.from_workers["gate_header"]
        elif state.settings.baseline and state.gate.loaded:
            lines += state.gate.header_lines()[1:]
        lines += gate_summary_lines(state)
    workers = state.from_workers.get("workers", 0)
    if workers > 1:
        lines.append(f"gpucomm: {workers} pytest-xdist workers measured side by side: their measurements may have "
                     "slowed each other (compare with a run without -n)")
    return lines + state.notes


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


def gate_summary_lines(state: "State") -> list[str]:
    """What the gate can catch (per case, the smallest drop it catches; the cases not gated and their fix)
    and the run at the gate's levels."""
    lines = sensitivity_lines([r.baseline for r in state.records if r.baseline], [r.nodeid for r in state.records
                                                                                  if r.baseline])
    return lines + level_lines(state.levels, {str(r.baseline["case"]): r.nodeid for r in state.records
                                             if r.baseline and r.baseline.get("case")})


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


def baseline_extra(state: "State") -> Optional[dict[str, Any]]:
    """The "baseline" section of the JSON report: the file, the number of gated comparisons, what changed
    in the environment, the baseline's common spread per group (or what the xdist workers said of all
    that), and the run at the gate's levels."""
    extra = state.from_workers.get("baseline")
    if not extra and state.settings.baseline and state.gate.loaded:
        from .gate import ABSENT

        gate = state.gate
        extra = {
            "path": str(gate.path),
            "comparisons": gate.n_comparisons,
            "environment_diff": [[k, None if a is ABSENT else a, None if b is ABSENT else b]
                                 for k, a, b in gate.env_diff],
            "common": gate.commons(),
        }
    if not extra:
        return extra
    return {**extra, "levels": state.levels.to_dict() if state.levels is not None else None}


def session_levels(state: "State") -> Any:
    """The run judged at the three levels (gate.levels), from the verdicts of every record; None when nothing
    was compared with measured runs.  A pytest-xdist controller, which did not read the baseline, reads it
    here from the path the workers judged against."""
    verdicts = [r.baseline for r in state.records if r.baseline and r.baseline.get("log_ratio") is not None]
    if not verdicts:
        return None
    gate = state.gate
    if gate.baseline is None and state.from_workers.get("baseline_path"):
        from .gate.store import load_baseline

        path = Path(state.from_workers["baseline_path"])
        gate.use(path, load_baseline(path), state.from_workers.get("fingerprint") or {},
                 {r.nodeid for r in state.records})
    return gate.levels(verdicts)


def write_reports(state: "State", *, finished: bool = True, is_worker: bool = False) -> None:
    """At the end of the session: save the run into the baseline (--gpu-baseline-save; a run that did not
    finish only with --gpu-baseline-save-partial), write the JSON report and the pytest-benchmark export
    (not in a pytest-xdist worker: the controller writes them with every worker's rows).  Each adds a line
    to ``state.notes``; one that cannot be written says so there and sets ``state.write_failed``, and the
    others are still written."""
    from .hardware import now_iso

    s = state.settings
    date = now_iso()
    if s.baseline_save and not state.gate.loaded and state.from_workers.get("baseline_path"):
        state.gate.adopt(Path(state.from_workers["baseline_path"]))  # the workers measured; the controller saves

    def attempt(what: str, write: Any) -> None:
        try:
            write()
        except Exception as e:  # any failure: say what was not written, keep the rest
            state.write_failed = True
            state.notes.append(f"gpucomm: ERROR: {what} was NOT written: {e}")

    if s.baseline_save and state.gate.loaded and not is_worker:
        if finished or s.baseline_save_partial:
            def save() -> None:
                # a figure of 0 (a collective of one rank, @world(1): busbw 0) is nothing to gate; the baseline
                # file accepts positive figures only, so those are left out, and said so
                keep = [r for r in state.records if math.isfinite(r.measurement.gbps) and r.measurement.gbps > 0]
                zero = len(state.records) - len(keep)
                if zero:
                    state.notes.append(f"gpucomm: {zero} of this run's {len(state.records)} measurements are not saved "
                                       f"to {state.gate.path}: their figure is 0 GB/s (a collective of one rank has "
                                       "busbw 0), nothing to gate")
                if not keep:
                    return
                path, n = state.gate.save(keep, state.fingerprint, date)
                state.notes.append(f"gpucomm: saved {n} cases of this run (id {state.gate.run_id}) to {path}"
                                   + ("" if finished
                                      else " (an unfinished run, saved with --gpu-baseline-save-partial)"))

            attempt(f"the baseline {state.gate.path}", save)
        else:
            state.notes.append(
                f"gpucomm: the run did not finish, so its {len(state.records)} measurements were NOT saved to "
                f"{state.gate.path} (--gpu-baseline-save-partial saves an unfinished run)"
            )
    if is_worker:
        return
    made: list[dict[str, Any]] = []

    def document() -> dict[str, Any]:  # the JSON report and the plots draw from one document, made once
        if not made:
            made.append(report_document(state))
        return made[0]

    if s.json_path:
        json_path = s.json_path  # a str here, also in the closure

        def json_report() -> None:
            write_json(json_path, document())
            state.notes.append(f"gpucomm: wrote {len(state.records)} measurements to {json_path}")

        attempt(f"the JSON report {s.json_path}", json_report)
    if s.plots_dir:
        plots_dir = s.plots_dir

        def plots() -> None:
            from .plots import all_figures, save_all

            state.plot_paths = save_all(all_figures(document(), state.baseline_doc), plots_dir,
                                        s.plots_format)
            state.notes.append(f"gpucomm: drew {len(state.plot_paths)} plots into {plots_dir}"
                               + ("" if state.baseline_doc is None else " (against the baseline as it was before "
                                  "this run)"))

        attempt(f"the plots in {s.plots_dir}", plots)
    if s.benchmark_json:
        benchmark_json = s.benchmark_json

        def benchmark_report() -> None:
            write_json(benchmark_json, benchmark_document(state.records, state.fingerprint, date))
            state.notes.append(f"gpucomm: wrote the pytest-benchmark export to {benchmark_json}")

        attempt(f"the pytest-benchmark export {s.benchmark_json}", benchmark_report)
