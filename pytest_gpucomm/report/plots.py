"""Plots of a saved JSON report against a baseline file: the bandwidth curve of each sweep, the matrix of the
copies' device pairs, and the small messages' latency distribution.

matplotlib is an optional extra (``pip install pytest-gpucomm[plots]``), imported only when a plot is
drawn; without it every drawing function raises :class:`PlotsUnavailable`, whose message names the extra.
The figures are ``matplotlib.figure.Figure`` objects made without ``pyplot`` (no GUI backend, no global
state: safe in a pytest run, a notebook or a headless CI job); :func:`save_all` writes them as PNG or SVG.

**Inputs**: ``report`` is the run's report document (``document.ReportDocument``, or a JSON report's
document, read: ``format`` "pytest-gpucomm-report", its rows with samples, verdicts under ``row["baseline"]``,
the single-op record under ``row["info"]["tail"]``, the run's ``fingerprint``), so the plots can be drawn
outside pytest; ``baseline`` is the figures of the baseline file it is drawn against
(``analysis.baseline_figures.BaselineFigures``, or the file's document: ``gate.store``'s schema) or None.  A
report of another format or a newer version, or a baseline that is not one, is a ValueError naming what
was found.

**The figures** (each function returns a list, one figure per sweep, copy test or small-message case; the
figure's label, ``fig.get_label()``, is the file name :func:`save_all` gives it):

* :func:`sweep_figures`: per sweep (``curves.sweeps``), the table's figure (busbw for a
  collective, algbw for a copy) against the size on log axes: today's median, its spread (the 10th to 90th
  percentile of the per-iteration figures, as ``curves.SweepPoint`` keeps it), the baseline's median (over
  its runs of their medians) with its run-to-run band (the lowest to highest run median,
  ``BaselineFigures.sweeps``), the rows whose verdict is one of :data:`MARKED_STATUSES` as a marker at
  their size, and the 80 % and 90 % sizes of today's curve (``curves.curve_model``; dashed where
  interpolated between measured sizes, dotted where measured; the baseline's in grey).  With a baseline a
  lower panel shows today / baseline per size (the verdict's ratio where the size was judged, as the table's
  and the matrices'), with the report's tolerance as a band around 1.
* :func:`copy_matrix_figures`: per copy test (the test function, op and node), a source x destination
  matrix of GB/s at a few sizes (the smallest, the middle one and the largest measured; the colour scale
  from 0 to the fastest pair, so a pair's shade is its share of the fastest), and, with a baseline, of
  today / baseline (the verdict's ratio where the case was judged, else today's figure over the median of
  the baseline's runs' medians: ``matrices.Cell.ratio``) on a diverging colour scale
  symmetric around 1.0 (red slower, blue faster); rows and columns are the devices seen, a pair not
  measured is left blank.  Where the report has one-way copies of more than one test (peer copies, host to
  device, device to host), a first figure puts them all in one matrix, the host a row and a column like a
  device (``matrix-all_one-way_copies-...``): the one slow link among all of them shows at a glance.
* :func:`latency_figures`: per collective sweep with single-op records, at its smallest size (or the sizes
  asked for), the share of single ops at or above a latency (log-log, the tail reads at the right):
  today's from ``info["tail"]["hist"]`` against the baseline's runs -- their tail sketches
  (``runs[i]["tail"]``: the median and the ratios at 0.9 ... 0.999) where the baseline keeps them, else its
  per-iteration (batch) times, drawn with today's batch times for a like-for-like look.

Titles name the hardware (the report's fingerprint), the run's date and the baseline (its name and runs).
Every text that comes from data (a test id, a device, the fingerprint's model or host, a baseline's name) is
drawn as written, never read as mathtext or TeX: a ``$`` in a host name is a dollar sign.
Artists carry a ``gid`` (``today``, ``today-spread``, ``baseline``, ``baseline-band``, ``marked-<STATUS>``,
``crossing-0.8``, ...) so that callers and tests can find them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, TypedDict, Union

import numpy as np

from ..analysis.baseline_figures import BaselineFigures, CaseFigures, as_figures
from ..analysis.curve_fit import curve_model
from ..analysis.sweeps import Sweep, sweep_key
from ..analysis.matrices import copy_matrices
from ..gate.shipped import install_command
from ..units import GB, describe_duration, format_gbps, format_ratio, format_size, plural
from .document import ReportDocument, Row, as_document

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

    from ..sketches import Histogram, TailSketch

    from ..analysis.curve_fit import CrossingSize

#: what the views take as the report: its document, or a JSON report's
ReportLike = Union[ReportDocument, Mapping[str, object]]
#: ... and as the baseline: its figures, a baseline file's document, or None
BaselineLike = Union[BaselineFigures, Mapping[str, object], None]

__all__ = [
    "PlotsUnavailable",
    "EXTRA",
    "MARKED_STATUSES",
    "FORMATS",
    "sweep_figures",
    "sweep_figure_label",
    "latency_figure_label",
    "copy_matrix_figures",
    "ratio_scale",
    "title_lines",
    "latency_figures",
    "all_figures",
    "file_names",
    "save_all",
    "hardware_line",
    "context_line",
]

#: how to install what the plots need, as pytest-gpucomm was installed (from a wheel, a checkout, an index)
EXTRA = install_command("plots")
#: the verdicts a sweep plot marks at their size (the gate's regressions, tail and floor failures, a missed
#: threshold)
MARKED_STATUSES = ("REGRESSION", "TAIL", "FLOOR", "FAIL")
#: the file formats save_all writes
FORMATS = ("png", "svg")

_TODAY, _BASE, _MARK = "tab:blue", "tab:orange", "tab:red"
#: the text properties of every text drawn from data (a test id, a device, the fingerprint's model or host, a
#: baseline's name): drawn as it is, never as mathtext or TeX -- a ``$x^$`` in a host name would otherwise fail
#: the figure, and a ``$x^2$`` be drawn as a formula (matplotlib >= 3.5: ``Text.set_parse_math``)
class _Literal(TypedDict):
    parse_math: bool
    usetex: bool


_LITERAL: _Literal = {"parse_math": False, "usetex": False}


class PlotsUnavailable(ImportError):
    """matplotlib is not installed: the message names the extra that brings it."""


def _mpl() -> "type[Figure]":
    """``matplotlib.figure.Figure``, or PlotsUnavailable naming the extra."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PlotsUnavailable(f"the gpucomm plots need matplotlib, which cannot be imported ({e}): "
                               f"install the plots extra, {EXTRA}") from None
    return Figure


# -- the inputs ----------------------------------------------------------------------------------------


def _verdict_statuses(row: Row) -> list[str]:
    """The row's statuses among MARKED_STATUSES (its own and the gate's verdict's), in that order."""
    found = {row.status}
    if row.verdict is not None:
        found.add(row.verdict.status)
    return [s for s in MARKED_STATUSES if s in found]


def _baseline_case(baseline: Optional[BaselineFigures], doc: ReportDocument, row: Row) -> Optional[CaseFigures]:
    if baseline is None:
        return None
    m = row.measurement
    return baseline.case(row.test, m.op, m.size_bytes, m.dtype, m.world_size, doc.layout)


# -- titles --------------------------------------------------------------------------------------------


def hardware_line(fingerprint: Optional[Mapping[str, Any]]) -> str:
    """The hardware of a fingerprint in one line: ``2 x NVIDIA H200, nccl 2.28.9, driver 570.1, host h0``;
    on CPU ``CPU AMD EPYC, 2 cores, gloo, host vm``."""
    fp = fingerprint or {}
    if not fp:
        return "hardware not recorded"
    if fp.get("kind") == "gpu":
        head = f"{fp.get('count', '?')} x {fp.get('model', '?')}"
        parts = [head, str(fp.get("comm_library", "")), f"driver {fp.get('driver', '?')}"]
    else:
        parts = [f"CPU {fp.get('cpu') or fp.get('model', '?')}", f"{fp.get('cpu_cores', '?')} cores",
                 str(fp.get("comm_library", ""))]
    if fp.get("host"):
        parts.append(f"host {fp['host']}")
    return ", ".join(p for p in parts if p)


def _date(doc: ReportDocument) -> str:
    date = str((doc.fingerprint or {}).get("date", ""))
    m = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)", date)
    return f"{m.group(1)} {m.group(2)} UTC" if m and date.endswith("+00:00") else (
        f"{m.group(1)} {m.group(2)}" if m else (date or "date not recorded"))


def _baseline_name(doc: ReportDocument, baseline: Optional[BaselineFigures]) -> str:
    if baseline is not None:
        runs = baseline.n_runs
        return f"baseline {baseline.name} ({runs} run{'' if runs == 1 else 's'})"
    against = (doc.compared or {}).get("against")
    if against:
        return f"baseline {Path(str(against)).stem} (judged by gpucomm compare; its file not drawn)"
    path = doc.baseline.path if doc.baseline is not None else None
    if path:
        return f"baseline {Path(path).stem} (judged in the run; its file not drawn)"
    return "no baseline"


def context_line(report: ReportLike, baseline: BaselineLike = None) -> str:
    """The second line of every title: the hardware, the date and the baseline."""
    doc, figures = as_document(report), as_figures(baseline)
    return f"{hardware_line(doc.fingerprint)}; {_date(doc)}; {_baseline_name(doc, figures)}"


#: the title's font size (points), and the width of one of its characters at most, in ems (DejaVu Sans, the
#: default font: its widest common letters, "m" and "W", are under 0.9 em; the average near 0.55)
TITLE_POINTS, _CHAR_EM = 9, 0.62


def title_lines(text: str, width_in: float, points: float = TITLE_POINTS) -> list[str]:
    """``text`` wrapped at words to fit a figure ``width_in`` inches wide at ``points``: a title is never cut
    at the figure's edge."""
    import textwrap

    chars = max(20, int(width_in * 72 / (points * _CHAR_EM)))
    return [w for line in text.split("\n") for w in (textwrap.wrap(line, chars) or [""])]


def title(fig: "Figure", first: str, context: str) -> None:
    """The figure's title: ``first`` (what it draws) over the context line (:func:`context_line`), each wrapped
    to the figure's width (:func:`title_lines`)."""
    fig.suptitle("\n".join(title_lines(f"{first}\n{context}", float(fig.get_figwidth()))), fontsize=TITLE_POINTS,
                 **_LITERAL)


# -- helpers -------------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    """A safe file name part: ``suites/test_copies.py::test_peer_copy[0->1]`` -> ``test_peer_copy_0-to-1``."""
    text = text.rsplit("::", 1)[-1].replace("<->", "-and-").replace("->", "-to-")
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")
    return (s or "figure")[:120]


def _size_axis(ax: "Axes", sizes: Sequence[int]) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(s) for s in sizes))
    if len(ticks) > 12:  # every other size when there are many
        ticks = ticks[::2]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([format_size(s) for s in ticks], rotation=45, ha="right", fontsize=8)


def _plain_log_labels(axis: "Axis") -> None:
    """Plain numbers on a log axis ("1.25", "100"), not "1.25 x 10^0": a latency axis often spans less
    than a decade, where matplotlib labels the minor ticks in scientific notation."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter())


def _pick_sizes(sizes: Sequence[int]) -> list[int]:
    """The smallest, the middle and the largest of ``sizes`` (fewer when there are fewer)."""
    s = sorted(set(sizes))
    return sorted({s[0], s[len(s) // 2], s[-1]})


# -- per sweep -----------------------------------------------------------------------------------------


def sweep_figures(report: ReportLike, baseline: BaselineLike = None) -> list["Figure"]:
    """A figure per sweep of ``report`` (see the module doc), against ``baseline`` where it has the sweep."""
    Figure = _mpl()
    doc, figures = as_document(report), as_figures(baseline)
    base = figures.sweeps if figures is not None else {}
    marks: dict[tuple[Any, ...], list[tuple[int, float, str]]] = {}
    judged: dict[tuple[Any, ...], dict[int, float]] = {}  # per sweep and size, the verdict's ratio
    for row in doc.rows:
        m = row.measurement
        for status in _verdict_statuses(row):
            marks.setdefault(sweep_key(row.test, m), []).append((int(m.size_bytes), float(m.gbps), status))
        ratio = row.verdict.ratio if row.verdict is not None else None
        if ratio is not None and math.isfinite(ratio) and ratio > 0:
            judged.setdefault(sweep_key(row.test, m), {})[int(m.size_bytes)] = ratio
    tolerance = doc.tolerance
    context = context_line(doc, figures)
    figs = []
    for sweep in doc.sweeps:
        b = base.get(sweep.key[:5])
        fig = Figure(figsize=(8, 6.5 if b is not None else 5), layout="constrained")
        if b is not None:
            ax, rax = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
        else:
            ax, rax = fig.subplots(1, 1), None
        _draw_sweep(ax, sweep, doc.crossings(sweep), b, marks.get(sweep.key, []))
        if rax is not None and b is not None:
            _draw_ratio(rax, sweep, b, tolerance, judged.get(sweep.key, {}))
        _size_axis(rax if rax is not None else ax, sweep.sizes + (b.sizes if b is not None else []))
        if rax is not None:
            ax.tick_params(labelbottom=False)
        title(fig, sweep.label, context)
        fig.set_label(sweep_figure_label(sweep))
        figs.append(fig)
    return figs


def sweep_figure_label(sweep: Sweep) -> str:
    """The label (and file name) of a sweep's figure: ``sweep-test_copy_0-to-1``."""
    return f"sweep-{_slug(sweep.key[0])}" if sweep.key[0] else f"sweep-{_slug(sweep.label)}"


def latency_figure_label(test: str, op: str) -> str:
    """The label (and file name) of a row's single-op latency figure: ``latency-test_ar_4KiB``."""
    return f"latency-{_slug(test or op)}"


def _draw_sweep(ax: "Axes", sweep: Sweep, crossings: Sequence["CrossingSize"], base: Optional[Sweep],
                marks: list[tuple[int, float, str]]) -> None:
    """Today's curve (its crossings as the document's curves section has them) against the baseline's."""
    x = np.array(sweep.sizes, dtype=float)
    y = np.array([p.gbps for p in sweep.points])
    lo = np.array([p.lo_gbps if p.lo_gbps is not None else p.gbps for p in sweep.points])
    hi = np.array([p.hi_gbps if p.hi_gbps is not None else p.gbps for p in sweep.points])
    ax.fill_between(x, lo, hi, color=_TODAY, alpha=0.2, lw=0, label="today: p10-p90 of iterations", gid="today-spread")
    ax.plot(x, y, "o-", color=_TODAY, ms=4, label="today: median", gid="today")
    if base is not None:
        bx = np.array(base.sizes, dtype=float)
        by = np.array([p.gbps for p in base.points])
        blo = np.array([p.lo_gbps if p.lo_gbps is not None else p.gbps for p in base.points])
        bhi = np.array([p.hi_gbps if p.hi_gbps is not None else p.gbps for p in base.points])
        n_runs = max(p.n for p in base.points)
        ax.fill_between(bx, blo, bhi, color=_BASE, alpha=0.25, lw=0,
                        label=f"baseline: lowest-highest run median ({plural(n_runs, 'run')})", gid="baseline-band")
        ax.plot(bx, by, "s--", color=_BASE, ms=3, label="baseline: median of the runs' medians", gid="baseline")
    for status in MARKED_STATUSES:
        pts = [(s, g) for s, g, st in marks if st == status]
        if pts:
            ax.scatter([s for s, _ in pts], [g for _, g in pts], marker="X", s=90, color=_MARK, zorder=5,
                       edgecolors="black", linewidths=0.5, label=status, gid=f"marked-{status}")
    _draw_crossings(ax, crossings, _TODAY, "today", "")
    if base is not None:
        _draw_crossings(ax, curve_model(base).crossings, "grey", "baseline", "baseline-")
    ax.set_yscale("log")
    ax.set_ylabel(f"{sweep.figure} (GB/s, GB = 1e9 B)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def _draw_crossings(ax: "Axes", crossings: Sequence["CrossingSize"], color: str, who: str, gid_prefix: str) -> None:
    notes: dict[str, list[str]] = {}
    for share in (0.8, 0.9):
        c = next(c for c in crossings if abs(c.share - share) < 1e-9)
        if c.size_bytes is None:
            notes.setdefault(c.reason, []).append(f"{share:.0%}")
            continue
        how = "interpolated" if c.interpolated else "measured"
        ax.axvline(c.size_bytes, color=color, lw=1, ls="--" if c.interpolated else ":",
                   alpha=0.8 if who == "today" else 0.5,
                   label=f"{who}: {share:.0%} of peak at {format_size(c.size_bytes)} ({how})",
                   gid=f"{gid_prefix}crossing-{share:g}")
    if notes and who == "today":
        text = "\n".join(f"{' and '.join(shares)} of peak: {why}" for why, shares in notes.items())
        ax.text(0.99, 0.02, text, transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
                color="dimgrey", wrap=True, gid="crossing-notes", **_LITERAL)


def _draw_ratio(ax: "Axes", sweep: Sweep, base: Sweep, tolerance: object, judged: Mapping[int, float]) -> None:
    """Today / baseline per size: the verdict's ratio where the size was judged (``judged``: today's runs
    pooled, as the table and the matrices give it), else today's figure over the baseline's."""
    bmap = {p.size_bytes: p.gbps for p in base.points}
    common = [p for p in sweep.points if p.size_bytes in bmap]
    x = [p.size_bytes for p in common]
    r = [judged.get(p.size_bytes, p.gbps / bmap[p.size_bytes]) for p in common]
    if isinstance(tolerance, (int, float)) and 0 < tolerance < 1:
        ax.axhspan(1 - tolerance, 1 + tolerance, color="grey", alpha=0.15, lw=0,
                   label=f"tolerance {tolerance:.0%}", gid="tolerance")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.plot(x, r, "o-", color=_TODAY, ms=3, label="today / baseline (the verdict's ratio where judged)", gid="ratio")
    ax.set_ylabel("today / baseline")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")


# -- copies --------------------------------------------------------------------------------------------


def copy_matrix_figures(report: ReportLike, baseline: BaselineLike = None, *,
                        sizes: Optional[Iterable[int]] = None) -> list["Figure"]:
    """A figure per copy test (test function, op, node) of ``report``: source x destination GB/s at
    ``sizes`` (default: the smallest, middle and largest measured), and, with ``baseline``, today / the
    baseline's figure (the median of its runs' medians) per cell; a pair not measured (or not in the
    baseline) is blank.  Each matrix is an ``AxesImage`` whose array holds the cells (NaN masked) in the
    order of the axes' tick labels; every ratio panel of the report has one colour scale (:func:`ratio_scale`)."""
    Figure = _mpl()
    doc, figures = as_document(report), as_figures(baseline)
    asked = sorted({int(s) for s in sizes}) if sizes is not None else None
    context = context_line(doc, figures)
    shown = []
    for m in copy_matrices(doc.rows, figures, layout=doc.layout):
        if m.ambiguous:  # several rows of one pair and size: no matrix shows them (matrices' module doc)
            continue
        chosen = [s for s in asked if s in m.cells] if asked is not None else _pick_sizes(m.sizes)
        if chosen:
            shown.append((m, chosen))
    half = ratio_scale([c.ratio for m, chosen in shown for size in chosen for c in m.cells[size].values()
                        if c.ratio is not None and not c.floor], doc.tolerance)
    figs = []
    for m, chosen in shown:
        test, op, node = m.test, m.op, m.node
        src, dst = m.sources, m.destinations
        with_ratio = figures is not None
        ncols = len(chosen)
        fig = Figure(figsize=(max(4.0, 1.2 + 0.45 * len(dst)) * ncols,
                              (max(3.0, 1.2 + 0.45 * len(src))) * (2 if with_ratio else 1) + 0.8),
                     layout="constrained")
        axes = np.array(fig.subplots(2 if with_ratio else 1, ncols, squeeze=False))
        for j, size in enumerate(chosen):
            gb = np.full((len(src), len(dst)), np.nan)
            ratio = np.full((len(src), len(dst)), np.nan)
            for (a, b), cell in m.cells[size].items():
                i, k = src.index(a), dst.index(b)
                gb[i, k] = cell.now
                if cell.ratio is not None and not cell.floor:  # the measured runs' figure, as the curves
                    ratio[i, k] = cell.ratio
            top = float(np.nanmax(gb)) if np.isfinite(gb).any() else 1.0
            _matrix(axes[0, j], gb, src, dst, f"{format_size(size)}: GB/s", "viridis", 0.0, top,
                    f"gbps-{size}", format_gbps)
            if with_ratio:  # one mapping of ratio to colour in every panel of the report (ratio_scale)
                _matrix(axes[1, j], ratio, src, dst, f"{format_size(size)}: today / baseline", "RdBu",
                        1.0 - half, 1.0 + half, f"ratio-{size}", lambda v: f"{format_ratio(v, 2)}x")
        title(fig, f"{m.title}, source (rows) x destination (columns)", context)
        fig.set_label(f"matrix-{_slug(test or op)}-{_slug(op)}" + (f"-{_slug(node)}" if node else ""))
        figs.append(fig)
    return figs


def ratio_scale(ratios: Iterable[float], tolerance: object = None) -> float:
    """The half-width of the one colour scale of every today / baseline panel of a report: 1 +- it maps to
    the darkest blue and red, so one ratio has one colour in every panel.  The largest distance from 1 among
    the panels' ``ratios`` (those drawn), at least the run's tolerance (``vocab.DEFAULT_TOLERANCE`` where
    ``tolerance`` is not a fraction), at most 1 (a ratio of 0 is the darkest red)."""
    from ..vocab import DEFAULT_TOLERANCE

    tol = float(tolerance) if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool) and \
        0 < tolerance < 1 else DEFAULT_TOLERANCE
    spread = max((abs(r - 1.0) for r in ratios if math.isfinite(r)), default=0.0)
    return min(1.0, max(tol, spread))


def _matrix(ax: Any, values: np.ndarray, rows: list[str], cols: list[str], title: str, cmap_name: str,
            vmin: float, vmax: float, gid: str, fmt: Callable[[float], str]) -> None:
    import matplotlib

    cmap = matplotlib.colormaps[cmap_name].with_extremes(bad="white")
    data = np.ma.masked_invalid(values)
    im = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    im.set_gid(gid)
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right", fontsize=8, **_LITERAL)
    ax.set_yticks(range(len(rows)), rows, fontsize=8, **_LITERAL)
    ax.set_xlabel("destination", fontsize=8)
    ax.set_ylabel("source", fontsize=8)
    ax.set_title(title, fontsize=9)
    lo, hi = vmin, vmax
    for i in range(values.shape[0]):
        for k in range(values.shape[1]):
            v = values[i, k]
            if math.isfinite(v):
                dark = (v - lo) / (hi - lo) if hi > lo else 0.5
                light = (cmap_name == "viridis" and dark < 0.6) or (cmap_name != "viridis" and abs(dark - 0.5) > 0.3)
                ax.text(k, i, fmt(float(v)), ha="center", va="center", fontsize=7,
                        color="white" if light else "black")
    bar = ax.figure.colorbar(im, ax=ax, shrink=0.8)
    bar.formatter.set_useOffset(False)


# -- small messages ------------------------------------------------------------------------------------


def _exceedance_of_hist(hist: "Histogram") -> tuple[np.ndarray, np.ndarray]:
    """Per bin (ascending): its geometric middle (s) and the share of ops in it or above."""
    from ..sketches import BIN_RATIO

    idx = sorted(hist.counts)
    counts = np.array([hist.counts[i] for i in idx], dtype=float)
    x = np.array([hist.lower_edge(i) * math.sqrt(BIN_RATIO) for i in idx])
    above = counts[::-1].cumsum()[::-1]
    return x, above / counts.sum()


def _exceedance_of_samples(samples_s: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    t = np.sort(np.asarray(samples_s, dtype=float))
    n = t.size
    return t, (n - np.arange(n)) / n


def _sketch_points(sketch: "TailSketch") -> tuple[np.ndarray, np.ndarray]:
    """A run's tail sketch as (time, share of ops at or above it): its median at 0.5, each kept level q at
    1 - q, its slowest op at 1 / n."""
    pts = [(sketch.p50_s, 0.5)] + [(sketch.p50_s * r, 1.0 - q) for q, r in sorted(sketch.ratios.items())]
    pts.append((sketch.p50_s * sketch.max_ratio, 1.0 / sketch.n))
    return np.array([p[0] for p in pts]), np.array([p[1] for p in pts])


def _tail(row: Row) -> Optional[Mapping[str, Any]]:
    """A row's single-op record (``info["tail"]``) where it has a histogram, None for a training-step pattern
    (no small message, nor a sweep)."""
    info = row.measurement.info
    tail = info.get("tail")
    return tail if isinstance(tail, Mapping) and tail.get("hist") and "step_comm_s" not in info else None


def latency_figures(report: ReportLike, baseline: BaselineLike = None, *,
                    sizes: Optional[Iterable[int]] = None) -> list["Figure"]:
    """A figure per row with a single-op record (``info["tail"]["hist"]``; not a training-step pattern's)
    at the smallest size of its sweep (or at ``sizes``): the share of single ops at or above each latency,
    today's against the baseline's (see the module doc).  Lines: ``today`` (single ops, x in microseconds),
    ``baseline-sketch`` (one per baseline run with a sketch), else ``today-batch`` and ``baseline-batch``
    (one per baseline run)."""
    Figure = _mpl()
    doc, figures = as_document(report), as_figures(baseline)
    from ..sketches import Histogram, TailSketch

    with_tail = [r for r in doc.rows if _tail(r) is not None]
    if sizes is not None:
        asked = {int(s) for s in sizes}
        chosen = [r for r in with_tail if r.measurement.size_bytes in asked]
    else:
        smallest: dict[tuple[Any, ...], Row] = {}
        for r in with_tail:
            k = sweep_key(r.test, r.measurement)
            if k not in smallest or r.measurement.size_bytes < smallest[k].measurement.size_bytes:
                smallest[k] = r
        chosen = list(smallest.values())
    context = context_line(doc, figures)
    name = figures.name if figures is not None else ""
    figs = []
    for row in chosen:
        test, m, tail = row.test, row.measurement, _tail(row) or {}
        hist = Histogram.from_dict(tail["hist"], f"report row {test}: info['tail']['hist']")
        fig = Figure(figsize=(8, 5), layout="constrained")
        ax = fig.subplots()
        x, y = _exceedance_of_hist(hist)
        ax.step(x * 1e6, y, where="pre", color=_TODAY, lw=1.5, zorder=3, gid="today",
                label=f"today: {hist.n} single ops (slowest rank per op)")
        case = _baseline_case(figures, doc, row)
        sketches = [TailSketch.from_dict(dict(sk), f"baseline {name}, case {test} size {m.size_bytes}, run {run_id}: "
                                                   "tail") for run_id, sk in (case.tails if case is not None else ())]
        if sketches:
            for i, sk in enumerate(sketches):
                sx, sy = _sketch_points(sk)
                ax.plot(sx * 1e6, sy, "o:", color=_BASE, ms=4, lw=0.8, alpha=0.7, gid="baseline-sketch",
                        label=(f"baseline: tail sketches of {plural(len(sketches), 'run')} (median, 0.9-0.999, "
                               "slowest)") if i == 0 else None)
        elif case is not None:
            # no sketch: the per-iteration (batch) times of each run, t = bytes x busbw factor / figure, with
            # today's batch times beside them
            figure_s = float(m.bytes_per_iter) * float(m.busbw_factor) / GB  # figure x time
            for i, run in enumerate(case.samples_gbps):
                bx, by = _exceedance_of_samples([figure_s / g for g in run])
                ax.step(bx * 1e6, by, where="pre", color=_BASE, lw=0.8, alpha=0.7, ls="--", gid="baseline-batch",
                        label=f"baseline: per-iteration times of {plural(len(case.samples_gbps), 'run')} (no "
                        "single-op sketch kept)" if i == 0 else None)
            tx, ty = _exceedance_of_samples(m.samples_s)
            ax.step(tx * 1e6, ty, where="pre", color=_TODAY, lw=0.8, ls="--", gid="today-batch",
                    label="today: per-iteration times")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_labels(ax.xaxis)
        ax.set_xlabel("latency (us)")
        ax.set_ylabel("share of ops at or above")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
        p = ", ".join(f"{q} {describe_duration(float(tail[f'{q}_us']) * 1e-6)}" for q in ("p50", "p99")
                      if isinstance(tail.get(f"{q}_us"), (int, float)))
        where = f"{m.world_size} ranks" if m.world_size > 1 else "->".join(m.devices)
        title(fig, f"{m.op} {format_size(m.size_bytes)}, {where}: single-op latency"
              f"{f' (today {p})' if p else ''}", context)
        fig.set_label(latency_figure_label(test, m.op))
        figs.append(fig)
    return figs


# -- all of them, and saving ---------------------------------------------------------------------------


def all_figures(report: ReportLike, baseline: BaselineLike = None) -> list["Figure"]:
    """Every figure of ``report``: the sweeps', the copy matrices' and the small messages' latency."""
    _mpl()
    doc, figures = as_document(report), as_figures(baseline)
    return sweep_figures(doc, figures) + copy_matrix_figures(doc, figures) + latency_figures(doc, figures)


def _format(fmt: str) -> str:
    fmt = str(fmt).lower().lstrip(".")
    if fmt not in FORMATS:
        raise ValueError(f"invalid plot format {fmt!r}: one of {', '.join(FORMATS)}")
    return fmt


def file_names(figs: Sequence["Figure"], fmt: str = "png") -> list[str]:
    """The file name :func:`save_all` gives each figure, in order: ``<label>.<fmt>``, the label made safe
    (letters, digits, ``._-``; at most 120 characters; a repeated name, in any case, gets ``-2``, ``-3``
    ...)."""
    fmt = _format(fmt)
    used: set[str] = set()
    names = []
    for i, fig in enumerate(figs):
        stem = _slug(str(fig.get_label() or f"figure-{i + 1}"))
        name, n = stem, 1
        while name.lower() in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name.lower())
        names.append(f"{name}.{fmt}")
    return names


def save_all(figs: Iterable["Figure"], directory: "str | Path", fmt: str = "png", *,
             replace: bool = True) -> list[Path]:
    """Write each figure to ``directory`` (made if missing) as its :func:`file_names` name, each file
    atomically (``atomic.write_atomic``; ``replace=False``: never over an existing file, FileExistsError
    naming it); returns the paths in order.  ``fmt``: "png" (150 dpi) or "svg"."""
    import io

    from ..files.atomic import write_atomic

    figs, fmt = list(figs), _format(fmt)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fig, name in zip(figs, file_names(figs, fmt)):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=150 if fmt == "png" else None)
        write_atomic(out / name, buf.getvalue(), replace=replace)
        paths.append(out / name)
    return paths
