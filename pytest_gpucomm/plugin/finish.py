"""The session's end: which tests finished (:class:`Progress`), the run judged at the gate's levels, the
reports and the baseline written (:func:`finish_session`, through :mod:`.reporting`), what fails the session
outside its tests (:func:`session_failures`), and the terminal summary (:func:`write_summary`), which counts
those failures in pytest's own final line.

Order: pytest's terminal reporter wraps ``pytest_sessionfinish``; the other
implementations (:func:`finish_session` among them) run first, then ``pytest_terminal_summary``
(:func:`write_summary`), then pytest's final line from its reporter's ``stats``.

Who writes what: the process that speaks (always with the rank pool, global rank 0 of a launched job)
writes the reports and the baseline and judges the levels; a pytest-xdist worker saves its cases into the
baseline and hands its records to the controller (:mod:`.xdist`), which writes the reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import pytest

from ..units import plural

if TYPE_CHECKING:
    from ..report.run import Coverage, Judgement
    from .state import State

__all__ = ["Progress", "finish_session", "SessionFailure", "FAILURES_KEY", "JUDGEMENT_KEY", "session_failures",
           "count_in_final_line", "not_judged_key", "write_summary", "terminal_width"]


class Progress:
    """Which tests finished, and in what order: a recording run saves only when every collected test ran,
    and a pytest-xdist controller orders the workers' rows by it.  A plugin object, registered at configure
    where it is needed (a recording run, a pytest-xdist controller)."""

    def __init__(self) -> None:
        self.report_order: dict[str, int] = {}  # test id -> the order its call phase finished in
        self.finished_tests: set[str] = set()  # test ids that ran to their end (set up, called, torn down)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.report_order.setdefault(report.nodeid, len(self.report_order))

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, Optional[int], str]) -> None:
        self.finished_tests.add(nodeid)

    def ran_every_test(self, session: pytest.Session) -> bool:
        """Whether the session ran every test it collected to its end (not stopped by -x, --maxfail,
        pytest.exit or an interrupt)."""
        collected = int(getattr(session, "testscollected", 0) or 0)
        if collected:
            return len(self.finished_tests) >= collected
        return not (session.shouldstop or session.shouldfail)


def finish_session(state: "State", session: pytest.Session, exitstatus: int) -> None:
    """Stop the ranks, judge the run at the gate's levels, save the baseline and write the reports, before the
    terminal summary is printed.  An output that cannot be written is named in the summary and makes the exit
    status non-zero, as a regression at the levels and too few cases judged do (:func:`session_failures`:
    each is said in the summary and counted in pytest's final line)."""
    state.notes += state.engines.lines()  # every program the engines ran: its command line and its time
    state.close()
    writes = state.speaks and state.worker is None  # the reports, the levels: not a worker's, not a quiet rank's
    if state.records and state.settings.baseline and writes:
        from ..report.run import apply_levels
        from .reporting import session_levels

        try:
            state.levels = session_levels(state)
        except Exception as e:  # the baseline changed under the run: the cases' verdicts stand
            state.notes.append(f"gpucomm: the levels were not judged: {e}")
        if not state.settings.baseline_save:
            apply_levels(state.records, state.levels)
            state.notes += state.judging.causes.explain_levels(state.gate, state.records, state.levels)
    if state.records and state.settings.baseline and writes and not state.settings.baseline_save:
        from ..report.run import coverage

        state.coverage = coverage(state.records)
    if state.records and writes:  # before the run is saved into the baseline
        from .reporting import baseline_document, curves_of

        try:
            state.baseline_doc = baseline_document(state)
        except Exception as e:  # the file changed under the run: the verdicts stand, the curves go without it
            state.notes.append(f"gpucomm: the baseline's curves are left out: {e}")
        state.curves, notes = curves_of(state)
        state.notes += notes
    if state.records and state.speaks:
        from .reporting import write_reports

        finished = exitstatus != pytest.ExitCode.INTERRUPTED and state.progress.ran_every_test(session)
        write_reports(state, finished=finished, is_worker=state.worker is not None)
    failures = session_failures(state)
    state.notes += [f"gpucomm: FAILED: {f.why}" for f in failures]
    session.config.stash[FAILURES_KEY] = failures
    if state.records and writes and not state.settings.baseline_save:
        from ..report.run import judgement
        from .reporting import session_report

        judged = judgement(session_report(state).document)
        session.config.stash[JUDGEMENT_KEY] = judged
        _junit_judgement(session.config, judged, state.coverage)
    if failures and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@dataclass(frozen=True)
class SessionFailure:
    """What fails the session outside its tests (its exit status 1 though every test passed): a regression at
    the gate's levels, too few cases judged (--gpu-min-judged), an output not written.  ``word``: what pytest's
    final line counts it as (``3 gpucomm level regressions``: :func:`count_in_final_line`); ``why``: the
    line that says why, with its figures."""

    count: int
    word: str
    why: str


#: the session's failures outside its tests (:func:`session_failures`), set at the session's end
FAILURES_KEY = pytest.StashKey[list[SessionFailure]]()
#: what the run's report says first (``report.run.judgement`` of the session's document), set at the session's end
#: where this process wrote the reports of a run that was not a recording run
JUDGEMENT_KEY = pytest.StashKey["Judgement"]()


def session_failures(state: "State") -> list[SessionFailure]:
    """The conditions outside the tests that fail the session (see :class:`SessionFailure`), each with its
    count and why."""
    out = []
    failed = state.levels.failed if state.levels is not None and not state.settings.baseline_save else []
    if failed:
        n = len(failed)
        out.append(SessionFailure(n, f"gpucomm level regression{'s' if n != 1 else ''}",
                                  f"{plural(n, 'regression')} at the gate's levels (the 'gpucomm REGRESSION' lines "
                                  f"above): the exit status is 1 though their cases' tests may pass"))
    cov, need = state.coverage, state.settings.min_judged
    if (cov is not None and cov.total > 0 and cov.share < need and not state.settings.baseline_save
            and state.worker is None):
        n = cov.total - cov.judged
        out.append(SessionFailure(n, f"gpucomm case{'s' if n != 1 else ''} not judged",
                                  f"{cov.judged} of {cov.total} cases judged, fewer than --gpu-min-judged={need:g} "
                                  f"of them ({cov.why()})"))
    if state.write_failed:
        from .reporting import NOT_WRITTEN_KEY

        n = max(1, len(state.config.stash.get(NOT_WRITTEN_KEY, [])))
        out.append(SessionFailure(n, f"gpucomm output{'s' if n != 1 else ''} not written",
                                  f"{plural(n, 'output')} not written (the 'gpucomm: ERROR' lines above)"))
    return out


def count_in_final_line(terminalreporter: pytest.TerminalReporter, failures: list[SessionFailure]) -> None:
    """Each failure outside the tests counted in pytest's final line (``1 failed, 7 passed, 3 gpucomm level
    regressions in 2.10s``): pytest counts every key of its reporter's ``stats``, a key it does not know
    included (its final line is then yellow where no test failed)."""
    for f in failures:
        terminalreporter.stats.setdefault(f.word, []).extend([f] * f.count)


def _junit_judgement(config: pytest.Config, judged: "Judgement", cov: Optional["Coverage"]) -> None:
    """What the run's report says first as properties of the JUnit test suite (``--junitxml``):
    ``gpucomm.verdict`` (``Judgement.text``: ``not judged: no baseline: ...``, ``passed: ...``, ``failed:
    ...``), ``gpucomm.judged``, ``gpucomm.cases`` (of the cases measured against a baseline; every case where
    there was none), ``gpucomm.not_judged`` ("yes" where no baseline judged the run or fewer than half its
    cases were judged)."""
    for plugin in config.pluginmanager.get_plugins():  # pytest's LogXML, where --junitxml is given
        add = getattr(plugin, "add_global_property", None)
        if callable(add) and hasattr(plugin, "logfile"):
            add("gpucomm.verdict", judged.text())
            add("gpucomm.judged", str(cov.judged if cov is not None else judged.judged))
            add("gpucomm.cases", str(cov.total if cov is not None else judged.cases))
            add("gpucomm.not_judged", "yes" if judged.not_judged or (cov is not None and cov.loud) else "no")


@dataclass(frozen=True)
class NotJudged:
    """An entry of pytest's stats that counts a case not judged in its final line (it fails nothing)."""

    word: str


def not_judged_key(judged: Optional["Judgement"], failures: list[SessionFailure]) -> Optional[tuple[str, int]]:
    """The word and count pytest's final line adds where the run was not judged (``9 passed, 9 gpucomm cases not
    judged (no baseline)``, yellow, not green; the exit status stays): None where it was judged, or where a
    failure of --gpu-min-judged counts the cases already."""
    if judged is None or not judged.not_judged or any("not judged" in f.word for f in failures):
        return None
    n = judged.cases - judged.judged
    word = f"gpucomm case{'s' if n != 1 else ''} not judged"
    return word + (" (no baseline)" if judged.why == "no baseline" else ""), n


def last_line(state: "State") -> Optional[str]:
    """The session's very last line, after pytest's own, where the run was not judged (no baseline, or fewer
    than half the cases measured against one judged: a pass must not read as a verdict); None otherwise."""
    if not state.speaks or state.worker is not None:
        return None
    cov = state.coverage
    if cov is not None and cov.loud:
        return cov.last_line(state.settings.baseline or "")
    judged = state.config.stash.get(JUDGEMENT_KEY, None)
    if judged is None or not judged.not_judged:
        return None
    return f"gpucomm: NOT JUDGED: {judged.text().split(': ', 1)[1]}"


def write_summary(terminalreporter: pytest.TerminalReporter, state: "State") -> None:
    """The "gpucomm results" section, where this process speaks and measured; the session's failures outside
    its tests counted in pytest's final line (:func:`count_in_final_line`)."""
    failures = terminalreporter.config.stash.get(FAILURES_KEY, [])
    count_in_final_line(terminalreporter, failures)
    key = not_judged_key(terminalreporter.config.stash.get(JUDGEMENT_KEY, None), failures)
    if key is not None:  # pytest counts the entries of a key of its reporter's stats
        entry = NotJudged(key[0])  # an object, as other plugins read the stats' entries (their __dict__)
        terminalreporter.stats.setdefault(key[0], []).extend([entry] * key[1])
    if not state.records or not state.speaks:
        return
    from .reporting import summary_lines

    config = terminalreporter.config
    terminalreporter.write_sep("=", "gpucomm results")
    for line in summary_lines(state, terminal_width(config), full=(config.getoption("verbose") or 0) >= 1):
        terminalreporter.write_line(line)


def terminal_width(config: pytest.Config) -> int:
    """The width the plugin's lines fit: pytest's own (``COLUMNS``, or its terminal's) where it is known,
    ``text.DEFAULT_WIDTH`` where it is not (the output is a file or a pipe)."""
    from ..text import clamp_width, known_width

    return clamp_width(config.get_terminal_writer().fullwidth if known_width() is not None else None)
