"""One self-contained HTML page of a saved JSON report (``gpucomm html REPORT [--baseline B] -o FILE``), and
the plots of a run inside pytest-html's report.

**Why one file.**  CI keeps a job's outputs as artifacts and shows each file on its own: a page that
linked to images, stylesheets or scripts beside it would open broken, or not at all, once downloaded or
viewed in the artifact browser.  So the page holds everything it shows: the stylesheet in a ``<style>``
element, the plots as ``data:image/png;base64`` URIs, no script (nothing to run, nothing a browser's
policy for local files can block), nothing fetched from the network.  It is also well-formed XML (every
element closed, only XML's five escapes), so a test or a script can read it with ``xml.etree``.

**What the page holds** (:func:`html_page`, its sections in :mod:`.html_parts`), from the report's document
and, where given, the figures of the baseline file it is compared with (``saved.load_reference(...).figures``),
answering first whether the run passed:

* a header: the title, and the hardware, the run's date and the baseline (``plots.context_line``, the
  second line of every plot's title, so the page and its figures name the same run; the file ``gpucomm
  compare`` judged against where the report is its output);
* the headline: FAILED, PASSED or a grey NOT JUDGED in one word and why (``run.judgement``, the JSON's
  ``verdict``: how many cases failed, how many regressions at the levels; no baseline, or fewer than half the
  cases judged, with the command that records one), a coloured chip per status with its count (failing first),
  the counts line (as the terminal's ``gpucomm verdicts:``), every class, band or case that failed at its level
  first, then the other class offsets -- the run's common shift per class -- (``gpucomm compare``'s levels
  where it judged the report again), and whether the environment changed;
* the failing cases, each with its verdict's first line (what, where, how much), the detail below it and
  its plots (its sweep's, its single ops' latency);
* the results: a table of every row, grouped by sweep (a heading row per sweep: op, devices or world,
  dtype, test), with its size, GB/s, p50 / p99 us, the single ops' tail, the baseline's GB/s, the ratio, the
  status (coloured: red where it fails the test, green where it passed the gate, grey where nothing was
  judged) and the verdict (its first line, the detail folded under it).  With ``--baseline B`` the baseline's
  figure and the ratio are B's (today / its figure), the statuses the run's;
* the copy matrices as tables (GB/s, and today / baseline beside it, a cell below 1 - the run's tolerance
  marked) and the curves as a table (``terminal.curve_cells``: floor, peak, 90 % point, fit, against the baseline);
* the environment: what changed in the fingerprint since the baseline was recorded (the report's
  ``baseline.environment_diff``, as the gate saw it during the run), where the run was gated;
* the other plots (``plots.all_figures``), inline in a grid, each with its label as ``alt`` text and caption,
  drawn against ``--baseline B`` (its runs of the report's machine shape: ``drawn.fitted_reference``), else
  against the baseline the report stores (``drawn.stored_figures``: the runs its verdicts used).
Each table sits in a box that scrolls sideways where it is wider than the page (``div.scroll``).
  Without matplotlib the page is still written, with a note naming the extra that brings it (``plots.EXTRA``).

The figures are written at ``PLOT_DPI`` (90, against the 150 of ``plots.save_all``'s files): a figure
8 inches wide is then 720 pixels, legible at a browser's width with its 7-point legends, and 40-66 KB
(the figures of a CPU run of two sweeps), so a page of many figures stays a few MB.

**pytest-html** (:func:`plots_fragment`, which the plugin object
:class:`pytest_gpucomm.plugin.html_plots.PytestHtmlPlots` hands to pytest-html): the same sections as the page
(:func:`page_body`), the run's document rendered with the PNG (or SVG) files it wrote with
``--gpucomm-plots=DIR`` as its plots, in pytest-html's report, under a heading, through its
``pytest_html_results_summary`` hook (the stylesheet scoped to the fragment's ``gpucomm`` class).
pytest-html calls that hook from its own ``pytest_sessionfinish``, marked ``trylast``, just before it writes
the report; the gpucomm plugin's ``pytest_sessionfinish`` is ``tryfirst`` and writes the reports (and the
plots) there, so the files exist when the hook asks for them.  A plot written later
(``pytest_terminal_summary``, ``pytest_unconfigure``) would miss the report.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from ..analysis.baseline_figures import BaselineFigures, as_figures
from .document import ReportDocument, as_document
from .html_parts import (Image, curves_section, environment_section, esc, failing_cases, figures_section, headline,
                         img, matrices_section, results_table, status_class, verdict_counts)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = [
    "PLOT_DPI",
    "html_page",
    "page_body",
    "write_html",
    "status_class",
    "counts_line",
    "PLOTS_HEADING",
    "RESULTS_HEADING",
    "plots_fragment",
    "file_images",
]

#: the resolution of the inline PNG figures (see the module doc)
PLOT_DPI = 90

#: the image types the pytest-html hook inlines, by file suffix
_MIME = {".png": "image/png", ".svg": "image/svg+xml"}

#: the page's stylesheet, every rule under the ``gpucomm`` class (the page's body, the pytest-html fragment)
_STYLE = """
.gpucomm { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 15px;
  line-height: 1.45; color: #1d1d1d; max-width: 1500px; }
.gpucomm h1 { font-size: 1.6em; margin: 0 0 0.2em 0; }
.gpucomm h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.gpucomm h3 { font-size: 1.05em; margin: 0.8em 0 0.3em 0; }
.gpucomm p.context { color: #555; margin-top: 0; }
.gpucomm .headline { padding: 0.7em 1.1em; border-radius: 6px; margin: 1em 0; }
.gpucomm .headline.failed { background: #fdecec; border-left: 8px solid #c62828; }
.gpucomm .headline.passed { background: #e9f6ea; border-left: 8px solid #2e7d32; }
.gpucomm .headline p.verdict { font-size: 1.2em; margin: 0.2em 0; }
.gpucomm .headline .word { font-size: 1.5em; font-weight: bold; margin-right: 0.4em; }
.gpucomm .headline.failed .word { color: #b71c1c; }
.gpucomm .headline.passed .word { color: #1b5e20; }
.gpucomm .headline.not-judged { background: #eeeeee; border-left: 8px solid #757575; }
.gpucomm .headline.not-judged .word { color: #424242; }
.gpucomm .headline p.record { margin: 0.2em 0; color: #333; }
.gpucomm ul.chips { list-style: none; padding: 0; margin: 0.4em 0; display: flex; flex-wrap: wrap; gap: 0.4em; }
.gpucomm .chip { padding: 0.1em 0.7em; border-radius: 1em; font-weight: 600; }
.gpucomm .status-fail.chip, .gpucomm span.status-fail { background: #f8d0d0; color: #8b0000; }
.gpucomm .status-pass.chip { background: #d4efd4; color: #155d15; }
.gpucomm .status-info.chip { background: #e6e6e6; color: #444; }
.gpucomm p.counts { color: #444; margin: 0.3em 0; }
.gpucomm ul.levels { margin: 0.3em 0; padding-left: 1.2em; }
.gpucomm div.scroll { max-width: 100%; overflow-x: auto; }
.gpucomm table { border-collapse: collapse; font-size: 0.93em; margin: 0.4em 0 0.8em 0; }
.gpucomm th, .gpucomm td { border: 1px solid #ddd; padding: 0.25em 0.6em; vertical-align: top; }
.gpucomm th { background: #f2f2f2; text-align: left; white-space: nowrap; }
.gpucomm tr.sweep th { background: #e8eef7; font-weight: 600; }
.gpucomm td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.gpucomm td.test { font-family: ui-monospace, monospace; font-size: 0.9em; white-space: nowrap; }
.gpucomm td.message { font-size: 0.9em; color: #444; min-width: 14em; max-width: 26em; }
.gpucomm td.message summary { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.gpucomm td.message div.detail, .gpucomm p.message-detail { white-space: pre-wrap; }
.gpucomm summary { cursor: pointer; }
.gpucomm tr.status-fail td.status { background: #f8d0d0; color: #8b0000; font-weight: bold; }
.gpucomm tr.status-pass td.status { background: #d4efd4; color: #155d15; }
.gpucomm tr.status-info td.status { background: #eeeeee; color: #555; }
.gpucomm tr.status-fail { background: #fff3f3; }
.gpucomm table.matrix { display: inline-table; margin-right: 1.5em; }
.gpucomm table.matrix caption { text-align: left; color: #555; }
.gpucomm td.low { background: #f8d0d0; color: #8b0000; font-weight: bold; }
.gpucomm td.empty { color: #aaa; }
.gpucomm article.case { border: 1px solid #e5b5b5; border-radius: 6px; padding: 0.4em 1em; margin: 0.8em 0; }
.gpucomm span.status { padding: 0.05em 0.5em; border-radius: 4px; margin-right: 0.4em; }
.gpucomm span.test { font-family: ui-monospace, monospace; }
.gpucomm p.message-head { font-weight: 600; margin: 0.3em 0; }
.gpucomm p.message-detail { font-size: 0.9em; color: #444; margin: 0.3em 0; }
.gpucomm p.note { color: #7a5200; background: #fff6e0; padding: 0.4em; }
.gpucomm div.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(540px, 100%), 1fr));
  gap: 1em; }
.gpucomm figure { margin: 0.5em 0; min-width: 0; }
.gpucomm figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
.gpucomm figcaption { font-size: 0.8em; color: #555; }
"""


def counts_line(report: "ReportDocument | Mapping[str, object]") -> str:
    """``9 rows; verdicts: 1 REGRESSION, 8 not gated; tails tested on 3 cases: 0 TAIL`` (statuses in the
    terminal's order, the tail counts from ``report.tail_counts``)."""
    return verdict_counts(as_document(report))


def _figure_png(fig: "Figure", dpi: int = PLOT_DPI) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def drawn_images(doc: ReportDocument, figures: Optional[BaselineFigures]) -> tuple[list[Image], str]:
    """The document's plots (``plots.all_figures``) as PNG images, or [] and why none is drawn."""
    from . import plots

    try:
        figs = plots.all_figures(doc, figures)
    except plots.PlotsUnavailable as e:
        return [], f"The plots are not drawn: {e}. Install the plots extra to have them: {plots.EXTRA}"
    return [Image(str(f.get_label() or "figure"), "image/png", _figure_png(f)) for f in figs], ""


def file_images(plot_files: Iterable["str | os.PathLike[str]"]) -> tuple[list[Image], list[str]]:
    """The image files a run wrote (``--gpucomm-plots``), each labelled by its file name's stem (the figure's
    label: ``plots.save_all``), and a note per file that cannot be read or is not an image this page shows."""
    images, notes = [], []
    for p in [Path(x) for x in plot_files or []]:
        mime = _MIME.get(p.suffix.lower())
        if mime is None:
            notes.append(f"{p}: not an image this report shows (PNG or SVG)")
            continue
        try:
            images.append(Image(p.stem, mime, p.read_bytes()))
        except OSError as e:
            notes.append(f"{p}: cannot be read: {e.strerror or e}")
    return images, notes


# -- the page ------------------------------------------------------------------------------------------


def page_body(doc: ReportDocument, figures: Optional[BaselineFigures], images: list[Image], *,
              unavailable: str = "", notes: Iterable[str] = (), with_plots: bool = True) -> list[str]:
    """The page's sections (see the module doc), in order, compared with ``figures`` (None: with what the
    run judged against), with ``images`` as its plots (``unavailable``: why there are none; ``notes``: a plot
    that cannot be shown)."""
    from .terminal import curve_entries

    shown: set[str] = set()
    parts = [*headline(doc, figures), *failing_cases(doc, images, shown), *results_table(doc, figures),
             *matrices_section(doc, figures), *curves_section(curve_entries(doc, figures), figures is not None),
             *environment_section(doc, figures)]
    if with_plots:
        parts += figures_section(images, shown, unavailable=unavailable, notes=list(notes))
    return parts


def html_page(report: "ReportDocument | Mapping[str, object]",
              baseline: "BaselineFigures | Mapping[str, object] | None" = None, *, title: Optional[str] = None,
              with_plots: bool = True) -> str:
    """The self-contained HTML page of ``report`` (a report document, or a JSON report's document), against
    ``baseline`` (a baseline file's figures or document, or None): see the module doc for what it holds.
    ``title``: the page's title (default "pytest-gpucomm report"); ``with_plots=False`` leaves the plots
    out.

    Raises ``saved.ReportError`` for a document that is not a report this pytest-gpucomm reads or a row
    that cannot be read back, ValueError for a ``baseline`` that is not a baseline document."""
    from ..vocab import __version__
    from .plots import context_line

    from .drawn import stored_figures

    doc, figures = as_document(report), as_figures(baseline)
    title = title or "pytest-gpucomm report"
    drawn = figures if figures is not None else stored_figures(doc)  # the baseline that judged the run
    images, unavailable = drawn_images(doc, drawn) if with_plots else ([], "")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8"/>',
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
        '<meta name="generator" content="pytest-gpucomm"/>',
        f"<title>{esc(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        '<body class="gpucomm">',
        "<header>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="context">{esc(context_line(doc, drawn))}</p>',
        "</header>",
        *page_body(doc, figures, images, unavailable=unavailable, with_plots=with_plots),
        f'<footer><p class="context">written by pytest-gpucomm {esc(__version__)}</p></footer>',
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def write_html(path: "str | os.PathLike[str]", report: "ReportDocument | Mapping[str, object]",
               baseline: "BaselineFigures | Mapping[str, object] | None" = None, *, replace: bool = True,
               **kw: Any) -> Path:
    """Write :func:`html_page` to ``path`` atomically (``atomic.write_atomic``: readers see the old page or
    the new one; ``replace=False``: never over an existing file); returns the path."""
    from ..files.atomic import write_atomic

    target = Path(path)
    write_atomic(target, html_page(report, baseline, **kw), replace=replace)
    return target


# -- pytest-html ---------------------------------------------------------------------------------------

#: the heading of the plots in pytest-html's summary, and of the run's page there
PLOTS_HEADING = "gpucomm plots"
RESULTS_HEADING = "gpucomm results"


def plots_fragment(plot_files: Iterable["str | os.PathLike[str]"],
                   report: Optional[Callable[[], Optional[ReportDocument]]] = None) -> str:
    """The HTML added to pytest-html's summary (:class:`pytest_gpucomm.plugin.html_plots.PytestHtmlPlots`):
    with ``report`` (the run's document), the page's sections (:func:`page_body`, as ``gpucomm html`` makes
    them of the run's JSON report) with the image files as its plots (drawn against the baseline the run was
    judged against); without, a heading and each image inline (base64) with its file name as ``alt`` text
    and caption.  A note for a file that cannot be read or is of another type."""
    images, notes = file_images(plot_files)
    doc = report() if report is not None else None
    if doc is not None:
        body = page_body(doc, None, images, notes=notes)
        return "\n".join([f'<div class="gpucomm"><style>{_STYLE}</style><h2>{esc(RESULTS_HEADING)}</h2>', *body,
                          "</div>"])
    parts = [f'<div class="gpucomm-plots"><h2>{esc(PLOTS_HEADING)}</h2>']
    if not images and not notes:
        parts.append("<p>No plot was written in this run (the terminal summary says why).</p>")
    parts += [f"<p>{esc(n)}</p>" for n in notes]
    for i in images:
        parts.append(f'<figure>{img(i.data, i.mime, i.label, "max-width: 100%; height: auto")}'
                     f"<figcaption>{esc(i.label)}</figcaption></figure>")
    parts.append("</div>")
    return "".join(parts)
