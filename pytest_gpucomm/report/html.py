"""One self-contained HTML page of a saved JSON report (``gpucomm html REPORT [--baseline B] -o FILE``), and
the plots of a run inside pytest-html's report.

**Why one file.**  CI keeps a job's outputs as artifacts and shows each file on its own: a page that
linked to images, stylesheets or scripts beside it would open broken, or not at all, once downloaded or
viewed in the artifact browser.  So the page holds everything it shows: the stylesheet in a ``<style>``
element, the plots as ``data:image/png;base64`` URIs, no script (nothing to run, nothing a browser's
policy for local files can block), nothing fetched from the network.  It is also well-formed XML (every
element closed, only XML's five escapes), so a test or a script can read it with ``xml.etree``.

**What the page holds** (:func:`html_page`), from the report's document and, where given, the figures of
the baseline file it is compared with (``saved.load_reference(...).figures``):

* a header: the title, and the hardware, the run's date and the baseline (``plots.context_line``, the
  second line of every plot's title, so the page and its figures name the same run);
* the verdicts: a line of counts per status (as the terminal's ``gpucomm verdicts:`` line, with its tail
  counts), the run at the gate's levels where the report has them, and a table with one row per report
  row: test id, op, devices or world, size, GB/s, p50 / p99 us, the single ops' tail (``report.tail_cell``),
  the baseline's GB/s, the ratio, the status, and the verdict's message (also the status cell's tooltip).
  A row is coloured by its status (:func:`status_class`): red where it fails the test, green where it
  passed a threshold or the gate, grey where nothing was judged (new, not gated, measured);
* the copy matrices: each copy test's GB/s per (source, destination), and today / baseline per cell
  (``matrices.matrix_lines``, as the terminal prints them);
* the curves: per sweep (``curves.sweeps``) the curve model's two lines, and, with a
  baseline, the comparison with the baseline's curve of the same sweep (``curves.compare_curves``).  The
  per-size verdicts are the rule that fails tests; the curves explain them;
* the environment: what changed in the fingerprint since the baseline was recorded (the report's
  ``baseline.environment_diff``, as the gate saw it during the run), where the run was gated;
* the plots (``plots.all_figures``), inline, each with its label as ``alt`` text and caption.  Without
  matplotlib the page is still written, with a note naming the extra that brings it (``plots.EXTRA``).

The figures are written at ``PLOT_DPI`` (90, against the 150 of ``plots.save_all``'s files): a figure
8 inches wide is then 720 pixels, legible at a browser's width with its 7-point legends, and 40-66 KB
(the figures of a CPU run of two sweeps), so a page of many figures stays a few MB.

**pytest-html** (:func:`plots_fragment`, which the plugin object
:class:`pytest_gpucomm.plugin.html_plots.PytestHtmlPlots` hands to pytest-html): adds the PNG (or SVG) files a run wrote
with ``--gpucomm-plots=DIR`` to pytest-html's report, inline, under a heading, through its
``pytest_html_results_summary`` hook.  pytest-html calls that hook from its own ``pytest_sessionfinish``,
marked ``trylast``, just before it writes the report; the gpucomm plugin's ``pytest_sessionfinish`` is
``tryfirst`` and writes the reports (and the plots) there, so the files exist when the hook asks for them.
A plot written later (``pytest_terminal_summary``, ``pytest_unconfigure``) would miss the report.
"""

from __future__ import annotations

import base64
import html
import io
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from ..analysis.baseline_figures import BaselineFigures, as_figures
from .document import ReportDocument, Row, as_document

__all__ = [
    "PLOT_DPI",
    "html_page",
    "write_html",
    "status_class",
    "counts_line",
    "PLOTS_HEADING",
    "plots_fragment",
]

#: the resolution of the inline PNG figures (see the module doc)
PLOT_DPI = 90

#: the image types the pytest-html hook inlines, by file suffix
_MIME = {".png": "image/png", ".svg": "image/svg+xml"}

#: the statuses that pass (green); the failing ones are ``vocab.Status.failed`` (red), the rest grey
_PASSING = frozenset({"ok", "floor-ok", "improved"})

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1em; margin-bottom: 0.2em; }
p.context { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.5em; vertical-align: top; }
th { background: #f2f2f2; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.test { font-family: monospace; word-break: break-all; max-width: 28em; }
td.message { white-space: pre-wrap; font-size: 0.9em; color: #444; max-width: 40em; }
tr.status-fail td.status { background: #f8d0d0; color: #8b0000; font-weight: bold; }
tr.status-pass td.status { background: #d4efd4; color: #155d15; }
tr.status-info td.status { background: #eeeeee; color: #555; }
tr.status-fail { background: #fff3f3; }
pre.matrix { font-size: 0.85em; }
pre.curve, p.comparison { margin: 0.2em 0 0.6em 0; white-space: pre-wrap; font-size: 0.85em; }
p.note { color: #7a5200; background: #fff6e0; padding: 0.4em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.8em; color: #555; }
"""


def _e(value: Any) -> str:
    """Escaped text for an element's content or an attribute (quotes too)."""
    return html.escape(str(value), quote=True)


def status_class(status: Any) -> str:
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


def _img(data: bytes, mime: str, alt: str, style: str = "") -> str:
    b64 = base64.b64encode(data).decode("ascii")
    css = f' style="{_e(style)}"' if style else ""
    return f'<img src="data:{mime};base64,{b64}" alt="{_e(alt)}"{css}/>'


def _figure_png(fig: Any, dpi: int = PLOT_DPI) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


# -- the page's parts ----------------------------------------------------------------------------------


_HEADERS = ("test", "op", "devices / world", "size", "GB/s", "p50 us", "p99 us", "1-op tail", "baseline GB/s",
            "ratio", "status", "verdict")


def _message(row: Row) -> str:
    """The verdict's message and the threshold checks of a row, one per line."""
    lines = [row.verdict.message] if row.verdict is not None and row.verdict.message else []
    return "\n".join(lines + list(row.checks))


def _table(doc: ReportDocument) -> list[str]:
    from .run import fmt_gbps, fmt_us, tail_cell
    from ..units import format_size

    out = ['<table id="verdicts-table">', "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in _HEADERS)
           + "</tr></thead>", "<tbody>"]
    for row in doc.rows:
        m, status = row.measurement, row.status
        base = row.verdict.baseline_gbps if row.verdict is not None else None
        ratio = row.verdict.ratio if row.verdict is not None else None
        message = _message(row)
        cells = [
            f'<td class="test">{_e(row.test)}</td>',
            f"<td>{_e(m.op)}</td>",
            f"<td>{_e(m.where)}</td>",
            f'<td class="num" title="{_e(f"{m.size_bytes:,} bytes")}">{_e(format_size(m.size_bytes))}</td>',
            f'<td class="num">{_e(fmt_gbps(m.gbps))}</td>',
            f'<td class="num">{_e(fmt_us(m.p50_us))}</td>',
            f'<td class="num">{_e(fmt_us(m.p99_us))}</td>',
            f'<td class="num">{_e(tail_cell(m))}</td>',
            f'<td class="num">{_e(fmt_gbps(base) if base else "-")}</td>',
            f'<td class="num">{_e(f"{ratio:.3f}" if ratio else "-")}</td>',
            f'<td class="status" title="{_e(message)}">{_e(status)}</td>',
            f'<td class="message">{_e(message)}</td>',
        ]
        out.append(f'<tr class="status-{status_class(status)}" data-status="{_e(status)}">' + "".join(cells)
                   + "</tr>")
    out += ["</tbody>", "</table>"]
    return out


def counts_line(report: "ReportDocument | Mapping[str, Any]") -> str:
    """``verdicts: 1 REGRESSION, 8 not gated; tails tested on 3 cases: 0 TAIL`` (statuses in the terminal's
    order, the tail counts from ``report.tail_counts``)."""
    from .run import tail_counts
    from ..units import plural

    rows = as_document(report).rows
    counts = Counter(r.status for r in rows)
    return (f"{plural(len(rows), 'row')}; verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            + tail_counts(rows))


def _curves(doc: ReportDocument, baseline: Optional[BaselineFigures]) -> list[str]:
    from ..analysis.curve_fit import curve_model
    from ..analysis.curves import compare_curves
    from ..analysis.sweeps import sweeps

    out = ['<section id="curves">', "<h2>Curves</h2>"]
    found = sweeps([(r.test, r.measurement) for r in doc.rows])
    if not found:
        out.append('<p class="note">No sweep: no test measured one op at two sizes or more.</p>')
        return out + ["</section>"]
    # the baseline's sweeps carry neither a node label nor a form in their key (curves.sweeps_from_baseline),
    # so they are matched on the rest of it, as the plots match them
    base = baseline.sweeps if baseline is not None else {}
    for sweep in found:
        out.append('<div class="sweep">')
        out.append(f"<h3>{_e(sweep.label)}</h3>")
        out.append(f'<pre class="curve">{_e(curve_model(sweep).text())}</pre>')
        if baseline is not None:
            b = base.get(sweep.key[:5])
            if b is None:
                line = "not in the baseline: no curve to compare with"
            else:
                try:
                    line = "against the baseline: " + compare_curves(sweep, b).text()
                except ValueError as e:
                    line = f"not compared with the baseline: {e}"
            out.append(f'<p class="comparison">{_e(line)}</p>')
        out.append("</div>")
    return out + ["</section>"]


def _matrices(doc: ReportDocument, baseline: Optional[BaselineFigures]) -> list[str]:
    """The copy matrices as ``gpucomm show`` prints them (``terminal.matrix_section``, every one), in a
    ``<pre>``; nothing where the report has none."""
    from ..analysis.matrices import MATRIX_NOTE
    from .terminal import matrix_section

    lines = matrix_section(doc, baseline, width=1 << 30)  # as "gpucomm show" prints them, unwrapped
    if not lines:
        return []
    return ['<section id="matrices">', "<h2>Copy matrices</h2>", f"<p>{_e(MATRIX_NOTE)}</p>",
            f'<pre class="matrix">{_e(chr(10).join(lines))}</pre>', "</section>"]


def _environment(doc: ReportDocument) -> list[str]:
    diff = doc.baseline.environment_diff if doc.baseline is not None else None
    if diff is None:
        return []
    out = ['<section id="environment">', "<h2>Environment</h2>"]
    if not diff:
        out.append("<p>Same as when the baseline was recorded (its latest run's fingerprint).</p>")
        return out + ["</section>"]
    out.append("<p>What changed since the baseline was recorded (its latest run's fingerprint against this "
               "run's):</p>")
    out.append('<table id="environment-table"><thead><tr><th>key</th><th>baseline</th><th>this run</th></tr>'
               "</thead><tbody>")
    for key, old, new in diff:
        show = ["(absent)" if v is None else v for v in (old, new)]
        out.append(f"<tr><td>{_e(key)}</td><td>{_e(show[0])}</td><td>{_e(show[1])}</td></tr>")
    out.append("</tbody></table>")
    return out + ["</section>"]


def _levels(doc: ReportDocument) -> list[str]:
    """The run at the gate's levels: each class offset, and every band or case residual that failed."""
    levels = doc.baseline.levels if doc.baseline is not None else None
    texts = levels.texts(every=("classes",)) if levels is not None else []
    if not texts:
        return []
    return ['<ul class="levels">'] + [f"<li>{_e(t)}</li>" for t in texts] + ["</ul>"]


def _plots(doc: ReportDocument, baseline: Optional[BaselineFigures]) -> list[str]:
    from . import plots

    out = ['<section id="plots">', "<h2>Plots</h2>"]
    try:
        figs = plots.all_figures(doc, baseline)
    except plots.PlotsUnavailable as e:
        out.append(f'<p class="note" id="plots-unavailable">The plots are not drawn: {_e(e)}. Install the plots '
                   f"extra to have them: {_e(plots.EXTRA)}</p>")
        return out + ["</section>"]
    if not figs:
        out.append('<p class="note">No figure: the report has no sweep, no copy between two devices and no '
                   "single-op record.</p>")
    for fig in figs:
        label = str(fig.get_label() or "figure")
        out.append('<figure>' + _img(_figure_png(fig), "image/png", label)
                   + f"<figcaption>{_e(label)}</figcaption></figure>")
    return out + ["</section>"]


# -- the page ------------------------------------------------------------------------------------------


def html_page(report: "ReportDocument | Mapping[str, Any]",
              baseline: "BaselineFigures | Mapping[str, Any] | None" = None, *, title: Optional[str] = None,
              with_plots: bool = True) -> str:
    """The self-contained HTML page of ``report`` (a report document, or a JSON report's document), against
    ``baseline`` (a baseline file's figures or document, or None): see the module doc for what it holds.
    ``title``: the page's title (default "pytest-gpucomm report"); ``with_plots=False`` leaves the plots
    section out.

    Raises ``saved.ReportError`` for a document that is not a report this pytest-gpucomm reads or a row
    that cannot be read back, ValueError for a ``baseline`` that is not a baseline document."""
    from .. import __version__
    from .plots import context_line

    doc, figures = as_document(report), as_figures(baseline)
    title = title or "pytest-gpucomm report"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8"/>',
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
        '<meta name="generator" content="pytest-gpucomm"/>',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="context">{_e(context_line(doc, figures))}</p>',
        "</header>",
        '<section id="verdicts">',
        "<h2>Verdicts</h2>",
        f'<p class="counts">{_e(counts_line(doc))}</p>',
        *_levels(doc),
        *_table(doc),
        "</section>",
        *_matrices(doc, figures),
        *_curves(doc, figures),
        *_environment(doc),
        *(_plots(doc, figures) if with_plots else []),
        f'<footer><p class="context">written by pytest-gpucomm {_e(__version__)}</p></footer>',
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def write_html(path: "str | os.PathLike[str]", report: "ReportDocument | Mapping[str, Any]",
               baseline: "BaselineFigures | Mapping[str, Any] | None" = None, **kw: Any) -> Path:
    """Write :func:`html_page` to ``path`` atomically (``atomic.write_atomic``: readers see the old page or
    the new one); returns the path."""
    from ..files.atomic import write_atomic

    target = Path(path)
    write_atomic(target, html_page(report, baseline, **kw))
    return target


# -- pytest-html ---------------------------------------------------------------------------------------

#: the heading of the plots in pytest-html's summary
PLOTS_HEADING = "gpucomm plots"


def plots_fragment(plot_files: Iterable["str | os.PathLike[str]"]) -> str:
    """The HTML added to pytest-html's summary (:class:`pytest_gpucomm.plugin.html_plots.PytestHtmlPlots`): a
    heading, then each image inline (base64) with its file name as ``alt`` text and caption; a note for a file
    that cannot be read or is of another type."""
    files = [Path(p) for p in plot_files or []]
    parts = [f'<div class="gpucomm-plots"><h2>{_e(PLOTS_HEADING)}</h2>']
    if not files:
        parts.append("<p>No plot was written in this run (the terminal summary says why).</p>")
    for p in files:
        mime = _MIME.get(p.suffix.lower())
        if mime is None:
            parts.append(f"<p>{_e(p)}: not an image this report shows (PNG or SVG)</p>")
            continue
        try:
            data = p.read_bytes()
        except OSError as e:
            parts.append(f"<p>{_e(p)}: cannot be read: {_e(e.strerror or e)}</p>")
            continue
        parts.append(f'<figure>{_img(data, mime, p.stem, "max-width: 100%; height: auto")}'
                     f'<figcaption>{_e(p.name)}</figcaption></figure>')
    parts.append("</div>")
    return "".join(parts)
