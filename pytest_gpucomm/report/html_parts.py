"""The sections of the HTML page (:mod:`.html`), in the order the page shows them: the headline (passed or
failed, the counts per verdict, how many are gated at each level, the class offsets and what failed at the
levels), the failing cases with their plots, the results table grouped by sweep, the copy matrices and the
curves as tables, the environment, the other plots.

Each section renders the report's document, the baseline file's figures where the page is compared with one
(``--baseline B``), and the page's images (:class:`Image`: drawn from the document, or the files a run
wrote); every text that comes from the data is escaped (:func:`esc`).
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from .document import ReportDocument, Row

if TYPE_CHECKING:
    from ..analysis.baseline_figures import BaselineFigures
    from ..analysis.matrices import CopyMatrix

__all__ = ["Image", "HEADERS", "CURVE_HEADERS", "esc", "img", "status_class", "verdict_counts", "unrepeated",
           "headline", "report_tolerance", "environment_diff",
           "failing_cases", "results_table", "matrices_section", "curves_section", "environment_section",
           "figures_section", "case_labels"]

#: the statuses that pass (green); the failing ones are ``vocab.Status.failed`` (red), the rest grey
_PASSING = frozenset({"ok", "floor-ok", "improved"})
#: the results table's columns (a sweep's op, devices or world and dtype head its rows)
HEADERS = ("test", "size", "GB/s", "p50 us", "p99 us", "1-op tail", "baseline GB/s", "ratio", "status", "verdict")
#: the curves table's columns (``terminal.curve_cells``)
CURVE_HEADERS = ("sweep", "floor", "peak", "90%", "fit", "vs baseline")


@dataclass(frozen=True)
class Image:
    """A plot as the page shows it: its label (the figure's, ``plots``' file name), type and bytes."""

    label: str
    mime: str
    data: bytes


def esc(value: object) -> str:
    """Escaped text for an element's content or an attribute (quotes too)."""
    return html.escape(str(value), quote=True)


def img(data: bytes, mime: str, alt: str, style: str = "") -> str:
    b64 = base64.b64encode(data).decode("ascii")
    css = f' style="{esc(style)}"' if style else ""
    return f'<img src="data:{mime};base64,{b64}" alt="{esc(alt)}"{css}/>'


def status_class(status: object) -> str:
    """The colour class of a status: "fail" (red) where it fails the test (``vocab.Status.failed``: FAIL,
    REGRESSION, TAIL, FLOOR, and NEW / NOT GATED under --gpu-baseline-strict), "pass" (green) for ok,
    floor-ok and improved, "info" (grey) for the rest (new, not gated, measured, a status not known)."""
    from ..vocab import Status

    text = str(status)
    try:
        if Status(text).failed:
            return "fail"
    except ValueError:
        return "info"
    return "pass" if text in _PASSING else "info"


def _figure(image: Image) -> str:
    return f"<figure>{img(image.data, image.mime, image.label)}<figcaption>{esc(image.label)}</figcaption></figure>"


# -- the headline ------------------------------------------------------------------------------------------


def verdict_counts(doc: ReportDocument) -> str:
    """``9 rows; verdicts: 1 REGRESSION, 8 not gated; tails tested on 3 cases: 0 TAIL`` (statuses in the
    terminal's order, the tail counts from ``report.run.tail_counts``)."""
    from collections import Counter

    from ..units import plural
    from .run import tail_counts

    counts = Counter(r.status for r in doc.rows)
    return (f"{plural(len(doc.rows), 'row')}; verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            + tail_counts(doc.rows))


def unrepeated(text: str) -> str:
    """``text`` with a "; "-separated part said twice kept once: the stored text of a level not judged in a report
    written before ``levels.LevelVerdict.text`` said its reason once (``2 cases, fewer than 5; 2 cases, fewer than
    5``); today's reports need nothing of it."""
    parts: list[str] = []
    for part in text.split("; "):
        if part not in parts:
            parts.append(part)
    return "; ".join(parts)


def headline(doc: ReportDocument, figures: Optional["BaselineFigures"] = None) -> list[str]:
    """Passed, failed or not judged, and why, first (``run.judgement``: the word the JSON report's ``verdict``
    and the terminal's last lines give): the word and a sentence (grey "NOT JUDGED" with what to record where
    no baseline judged the run or fewer than half its cases), a chip per status with its count, the counts
    line, how many are gated at each level (``run.gated_of``), what failed at the levels first, then the class
    offsets (the run's common shift per class) that did not (the run's levels, or ``gpucomm compare``'s where
    it judged the report again), and whether the environment changed since the baseline."""
    from collections import Counter

    from .run import judgement

    j = judgement(doc)
    word = j.word.upper()
    css = {"failed": "failed", "passed": "passed"}.get(j.word, "not-judged")
    why = j.text().split(": ", 1)[1]
    if j.not_judged and j.record:
        why = why[:-len(j.record) - 2]
    out = [f'<section id="headline" class="headline {css}" data-verdict="{esc(j.word)}">',
           f'<p class="verdict"><span class="word">{esc(word)}</span> {esc(why)}</p>']
    if j.not_judged:
        out.append(f'<p class="record">Not judged: a pass here says nothing. {esc(j.record[0].upper() + j.record[1:])}'
                   "</p>" if j.record else "")
    out.append('<ul class="chips">')
    for status, n in sorted(Counter(r.status for r in doc.rows).items(), key=lambda x: (status_class(x[0]) != "fail",
                                                                                        x[0])):
        out.append(f'<li class="chip status-{status_class(status)}">{esc(n)} {esc(status)}</li>')
    from .run import verdicts_source

    out += ["</ul>", f'<p class="counts">{esc(verdict_counts(doc))}</p>',
            f'<p class="counts source">Shown: {esc(verdicts_source(doc))}.</p>']
    if doc.gated:  # the one count of gated per level, as the terminal summary and the JSON report give it
        from .run import gated_of

        out.append(f'<p class="counts gated">{esc(gated_of(doc).text())}</p>')
    levels = doc.levels
    failed = levels.texts() if levels is not None else []
    texts = failed + [t for t in (levels.texts(every=("classes",)) if levels is not None else []) if t not in failed]
    if texts:
        out.append('<ul class="levels">' + "".join(f"<li>{esc(unrepeated(t))}</li>" for t in texts) + "</ul>")
    diff, _ = environment_diff(doc, figures)
    if diff:
        out.append(f'<p class="note">The environment changed since the baseline was recorded: '
                   f'{esc(", ".join(k for k, _, _ in diff))} (see Environment).</p>')
    return [x for x in out if x] + ["</section>"]


# -- the failing cases -------------------------------------------------------------------------------------


def case_labels(doc: ReportDocument) -> dict[str, list[str]]:
    """Each row's test -> the labels of its plots: its sweep's and its single-op latency figure's
    (``plots.sweep_figure_label``, ``plots.latency_figure_label``)."""
    from ..analysis.sweeps import sweep_key
    from .plots import latency_figure_label, sweep_figure_label

    of_sweep = {s.key: sweep_figure_label(s) for s in doc.sweeps}
    out: dict[str, list[str]] = {}
    for r in doc.rows:
        labels = out.setdefault(r.test, [])
        label = of_sweep.get(sweep_key(r.test, r.measurement))
        labels += [x for x in (label, latency_figure_label(r.test, r.measurement.op)) if x and x not in labels]
    return out


def _message_lines(row: Row) -> list[str]:
    lines = row.verdict.message.splitlines() if row.verdict is not None and row.verdict.message else []
    return lines + list(row.checks)


def failing_cases(doc: ReportDocument, images: Sequence[Image], shown: set[str], limit: int = 30) -> list[str]:
    """Each failing row (at most ``limit``): its status and test, its verdict's first line (what, where and
    how much) and the detail below it, and its plots not shown yet (their labels are added to ``shown``)."""
    failing = [r for r in doc.rows if r.failed]
    if not failing:
        return []
    by_label = {i.label: i for i in images}
    labels = case_labels(doc)
    out = ['<section id="failing">', f"<h2>Failing cases ({len(failing)})</h2>"]
    for r in failing[:limit]:
        first, *rest = _message_lines(r) or [""]
        out += [f'<article class="case" data-status="{esc(r.status)}">',
                f'<h3><span class="status status-fail">{esc(r.status)}</span> <span class="test">{esc(r.test)}</span>'
                "</h3>", f'<p class="message-head">{esc(first)}</p>']
        if rest:
            out.append(f'<p class="message-detail">{esc(chr(10).join(x.strip() for x in rest))}</p>')
        mine = [by_label[x] for x in labels.get(r.test, []) if x in by_label and x not in shown]
        shown.update(i.label for i in mine)
        if mine:
            out.append('<div class="figures">' + "".join(_figure(i) for i in mine) + "</div>")
        out.append("</article>")
    if len(failing) > limit:
        out.append(f'<p class="note">... and {len(failing) - limit} more failing cases (the results table below has '
                   "every one).</p>")
    return out + ["</section>"]


# -- the results table -------------------------------------------------------------------------------------


def _baseline_cells(doc: ReportDocument, row: Row, figures: Optional["BaselineFigures"]) -> tuple[str, str]:
    """The row's baseline figure and ratio: the figure against ``figures`` where the page is compared with a
    baseline file (``*``: its published floor), else the one the run's verdict was judged against; the ratio
    the verdict's (``RowVerdict.ratio_text``: as the terminal's table, the matrices and the plots give it),
    today's figure over the file's where the row has no verdict."""
    from ..units import format_gbps, format_ratio

    m = row.measurement
    ratio = row.verdict.ratio_text() if row.verdict is not None else "-"
    if figures is not None:
        base, floor = figures.cell(row.test, m.op, m.size_bytes, m.dtype, m.world_size, doc.layout)
        if not base:
            return "-", ratio
        return format_gbps(base) + ("*" if floor else ""), ratio if ratio != "-" else format_ratio(m.gbps / base)
    base_gbps = row.verdict.baseline_gbps if row.verdict is not None else None
    return (format_gbps(base_gbps) if base_gbps else "-"), ratio


#: a verdict longer than this is folded: its start shows, the whole message opens under it
_SUMMARY = 90


def _verdict_cell(lines: Sequence[str]) -> str:
    """The verdict: a short one whole; a longer one folded (``<details>``), its first line (cut at a word,
    with "...", beyond :data:`_SUMMARY` characters) showing and the whole message under it."""
    if len(lines) <= 1 and len(lines[0] if lines else "") <= _SUMMARY:
        return f'<td class="message">{esc(lines[0] if lines else "")}</td>'
    first = lines[0]
    if len(first) > _SUMMARY:
        cut = first[:_SUMMARY]
        first = (cut[:cut.rfind(" ")] if cut.rfind(" ") > _SUMMARY // 2 else cut) + " ..."
    whole = "\n".join(x.strip() for x in lines)
    return (f'<td class="message"><details><summary>{esc(first)}</summary>'
            f'<div class="detail">{esc(whole)}</div></details></td>')


def results_table(doc: ReportDocument, figures: Optional["BaselineFigures"]) -> list[str]:
    """Every row, grouped by sweep (``table.sweep_groups``, a heading row per sweep), coloured by status, in a
    box of its own that scrolls sideways where the table is wider than the page (``div.scroll``)."""
    from ..units import format_size
    from ..units import format_gbps
    from .run import fmt_us, tail_cell
    from .table import group_heading, short_test, sweep_groups

    against = (f"baseline GB/s: {figures.name}'s (*: a published floor); ratio: the verdict's (today's runs pooled, "
               "\"(2 runs)\" where it pools several), else today / that figure; the statuses are the run's verdicts"
               if figures is not None else "")
    out = ['<section id="results">', "<h2>Results</h2>"]
    if against:
        out.append(f'<p class="note">{esc(against)}</p>')
    out += ['<div class="scroll">', '<table id="verdicts-table">',
            "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in HEADERS) + "</tr></thead>"]
    for group in sweep_groups(doc.rows):
        out.append(f'<tbody><tr class="sweep"><th colspan="{len(HEADERS)}">{esc(group_heading(group))}</th></tr>')
        for row in group:
            m, status = row.measurement, row.status
            base, ratio = _baseline_cells(doc, row, figures)
            lines = _message_lines(row)
            cells = [f'<td class="test" title="{esc(row.test)}">{esc(short_test(row.test))}</td>',
                     f'<td class="num" title="{esc(f"{m.size_bytes:,} bytes")}">{esc(format_size(m.size_bytes))}</td>',
                     *(f'<td class="num">{esc(v)}</td>' for v in (format_gbps(m.gbps), fmt_us(m.p50_us),
                                                               fmt_us(m.p99_us), tail_cell(m), base, ratio)),
                     f'<td class="status" title="{esc(chr(10).join(lines))}">{esc(status)}</td>', _verdict_cell(lines)]
            out.append(f'<tr class="status-{status_class(status)}" data-status="{esc(status)}">' + "".join(cells)
                       + "</tr>")
        out.append("</tbody>")
    return out + ["</table>", "</div>", "</section>"]


# -- the copy matrices and the curves ----------------------------------------------------------------------


def report_tolerance(doc: ReportDocument) -> float:
    """The run's --gpu-tolerance (``vocab.DEFAULT_TOLERANCE`` where the report does not say one readably): a
    ratio below 1 - it is marked, as the gate calls a drop beyond it a regression."""
    from ..vocab import DEFAULT_TOLERANCE

    value = doc.tolerance
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1:
        return float(value)
    return DEFAULT_TOLERANCE


def _matrix_table(m: "CopyMatrix", size: int, ratios: bool, tolerance: float = 0.05) -> str:
    from ..analysis.matrices import RATIO_NOTE, figure_text, ratio_text

    head = "<tr><th></th>" + "".join(f"<th>{esc(d)}</th>" for d in m.destinations) + "</tr>"
    rows = []
    for s in m.sources:
        cells = []
        for d in m.destinations:
            c = m.cells[size].get((s, d))
            if c is None:
                cells.append('<td class="num empty">-</td>')
                continue
            low = ratios and c.ratio is not None and c.ratio < 1.0 - tolerance
            cells.append(f'<td class="num{" low" if low else ""}">{esc(ratio_text(c) if ratios else figure_text(c))}'
                         "</td>")
        rows.append(f"<tr><th>{esc(s)}</th>" + "".join(cells) + "</tr>")
    kind = f"{RATIO_NOTE}; below {1.0 - tolerance:.2f}x marked (the run's {tolerance:.0%} tolerance)" if ratios \
        else "GB/s"
    return (f'<table class="matrix"><caption>{esc(kind)}</caption><thead>{head}</thead><tbody>{"".join(rows)}'
            "</tbody></table>")


def matrices_section(doc: ReportDocument, figures: Optional["BaselineFigures"]) -> list[str]:
    """Each copy matrix (``matrices.shown_matrices``) at its fullest size as a table, source rows and
    destination columns, and today / the baseline beside it where compared (below 1 - the run's tolerance
    marked: :func:`report_tolerance`); nothing
    where the report has none."""
    from ..analysis.matrices import MATRIX_NOTE, copy_matrices, shown_matrices
    from ..units import describe_size

    try:
        shown = shown_matrices(copy_matrices(doc.rows, figures, layout=doc.layout))
    except ValueError as e:
        return ['<section id="matrices">', "<h2>Copy matrices</h2>", f'<p class="note">No copy matrices: {esc(e)}</p>',
                "</section>"]
    if not shown:
        return []
    tolerance = report_tolerance(doc)
    out = ['<section id="matrices">', "<h2>Copy matrices</h2>", f"<p>{esc(MATRIX_NOTE)}; at the largest size where "
           "the most pairs were measured.</p>"]
    for m in shown:
        if m.ambiguous:
            out.append(f'<p class="note">{esc(m.title)}: no matrix: the test has several rows of one pair and size '
                       "(other parameters)</p>")
            continue
        size = m.fullest_size()
        tables = _matrix_table(m, size, False) + (_matrix_table(m, size, True, tolerance) if m.compared else "")
        out += [f'<div class="matrix-pair"><h3>{esc(f"{m.title} at {describe_size(size)}")}</h3>',
                f'<div class="scroll">{tables}</div>', "</div>"]
    return out + ["</section>"]


def curves_section(entries: Sequence[Mapping[str, object]], compared: bool) -> list[str]:
    """A row per sweep (``terminal.curve_cells``): what is known of its curve, and against the baseline's
    where there is one (``compared``: the page has a baseline, so a sweep it lacks says so)."""
    from .terminal import curve_cells

    out = ['<section id="curves">', "<h2>Curves</h2>"]
    if not entries:
        out.append('<p class="note">No sweep: no test measured one op at two sizes or more.</p>')
        return out + ["</section>"]
    out += ["<p>floor: the median time at the smallest size; 90%: the size reaching 90 % of the peak; fit: latency "
            "+ size / bandwidth, where one line fits the sweep; vs baseline: today's first runs / the baseline's "
            "medians (not the verdicts' ratio, which pools the re-measures: the table's). The per-size verdicts "
            "decide; the curves explain them.</p>", '<div class="scroll">', '<table id="curves-table">',
            "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in CURVE_HEADERS) + "</tr></thead>", "<tbody>"]
    for e in entries:
        cells = curve_cells(e)
        if compared and not cells["vs baseline"]:
            cells["vs baseline"] = "not in the baseline"
        out.append("<tr>" + "".join(f'<td class="{"name" if h == "sweep" else "num"}">{esc(cells[h])}</td>'
                                    for h in CURVE_HEADERS) + "</tr>")
    return out + ["</tbody></table>", "</div>", "</section>"]


# -- the environment and the plots -------------------------------------------------------------------------


def environment_diff(doc: ReportDocument, figures: Optional["BaselineFigures"] = None
                     ) -> tuple[Optional[list[tuple[str, object, object]]], str]:
    """What changed in the environment since the baseline, and against what: with ``figures`` (``--baseline B``,
    fitted to the report's machine shape: ``drawn.fitted_reference``) whose runs keep their fingerprints, B's
    latest run of this machine's shape against the report's, as the gate and ``gpucomm compare`` diff them (the
    host and the volatile keys left out); else the diff the run's gate recorded (``baseline.environment_diff``).
    (None, "") where neither is known."""
    from ..env.fingerprint import ABSENT, VOLATILE_KEYS, diff_fingerprints, latest_of_source

    runs = [r for r in (figures.document.get("runs") or []) if isinstance(r, Mapping)] if figures else []
    # the newest run of the report's own source (ours, or the tool whose file it is), as the gate takes it
    prints = [r["fingerprint"] for r in runs if isinstance(r.get("fingerprint"), Mapping)]
    i = latest_of_source(prints, doc.fingerprint or None)
    latest = prints[i] if i is not None else None
    if isinstance(latest, Mapping) and doc.fingerprint:

        now = [(k, None if a is ABSENT else a, None if b is ABSENT else b) for k, a, b in
               diff_fingerprints(latest, doc.fingerprint, ignore=VOLATILE_KEYS | {"host"})]
        return now, (f"against the latest run of this machine's shape in {figures.name if figures else '?'}, as "
                      "gpucomm compare judges it now")
    diff = doc.baseline.environment_diff if doc.baseline is not None else None
    return diff, "as the run's gate recorded it (the baseline's latest run then)" if diff is not None else ""


def environment_section(doc: ReportDocument, figures: Optional["BaselineFigures"] = None) -> list[str]:
    """The environment's changes since the baseline (:func:`environment_diff`), saying against what."""
    diff, against = environment_diff(doc, figures)
    if diff is None:
        return []
    out = ['<section id="environment">', "<h2>Environment</h2>"]
    if not diff:
        out.append(f"<p>Same as when the baseline was recorded ({esc(against)}).</p>")
        return out + ["</section>"]
    out.append(f"<p>What changed since the baseline was recorded ({esc(against)}):</p>")
    out.append('<div class="scroll"><table id="environment-table"><thead><tr><th>key</th><th>baseline</th>'
               '<th>this run</th></tr>'
               "</thead><tbody>")
    for key, old, new in diff:
        show = ["(absent)" if v is None else v for v in (old, new)]
        out.append(f"<tr><td>{esc(key)}</td><td>{esc(show[0])}</td><td>{esc(show[1])}</td></tr>")
    out.append("</tbody></table></div>")
    return out + ["</section>"]


def figures_section(images: Sequence[Image], shown: set[str], *, unavailable: str = "",
                    notes: Sequence[str] = ()) -> list[str]:
    """The plots not shown with a failing case, in a grid; ``unavailable``: why none is drawn (no
    matplotlib); ``notes``: a plot that cannot be shown."""
    out = ['<section id="plots">', "<h2>Plots</h2>"]
    if unavailable:
        out.append(f'<p class="note" id="plots-unavailable">{esc(unavailable)}</p>')
    out += [f'<p class="note">{esc(n)}</p>' for n in notes]
    rest = [i for i in images if i.label not in shown]
    if not images and not unavailable and not notes:
        out.append('<p class="note">No figure: the report has no sweep, no copy between two devices and no '
                   "single-op record.</p>")
    if rest:
        out.append('<div class="figures">' + "".join(_figure(i) for i in rest) + "</div>")
    elif images:
        out.append("<p>Every plot is shown with its failing case above.</p>")
    return out + ["</section>"]
