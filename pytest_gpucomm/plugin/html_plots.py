"""The pytest-html hook: the run's gpucomm page -- its headline, failing cases, tables and plots -- inside
pytest-html's report.

pytest-html calls ``pytest_html_results_summary`` from its own ``pytest_sessionfinish``, marked
``trylast``, just before it writes the report; the gpucomm plugin's ``pytest_sessionfinish`` is ``tryfirst``
and writes the reports (and the plots) there, so the files exist when the hook asks for them.  The HTML
itself is :func:`pytest_gpucomm.report.html.plots_fragment`'s: the sections of ``gpucomm html``'s page, of
the run's document, with the plot files as its plots.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Iterable, Optional

import pytest

from ..report.html import PLOTS_HEADING, plots_fragment

if TYPE_CHECKING:
    from ..report.document import ReportDocument

__all__ = ["PytestHtmlPlots"]


class PytestHtmlPlots:
    """A plugin object putting a run's page into pytest-html's report.

    ``plot_files`` is called when pytest-html builds its summary, at the end of the session, and returns
    the image files written for this run (the ``--gpucomm-plots`` directory's PNG or SVG files, in the
    order to show); ``report`` (when given) the run's document (None where there is none), whose page the
    summary then holds, the files as its plots.  Register it only where pytest-html is active: the hook is
    optional (pluggy accepts it without pytest-html's hook specs), but nothing calls it then."""

    HEADING = PLOTS_HEADING

    def __init__(self, plot_files: Callable[[], Iterable["str | os.PathLike[str]"]],
                 report: "Optional[Callable[[], Optional[ReportDocument]]]" = None) -> None:
        self._plot_files = plot_files
        self._report = report

    def fragment(self) -> str:
        """The HTML added to pytest-html's summary (see :func:`plots_fragment`)."""
        return plots_fragment(self._plot_files(), self._report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str],
                                    session: pytest.Session) -> None:
        summary.append(self.fragment())
