"""Launched mode as a plugin: registered at configure when torchrun, srun or mpirun started this pytest
process as one rank of a job (every rank runs pytest, the same tests in the same order).

:class:`LaunchedMode` puts the job's parts into the session's state -- the job (:class:`~.job.LaunchedSession`),
its process groups (:class:`~.job.JobGroups`), the gate on rank 0 that the others follow
(:class:`~.gate.JobJudging`) -- and has its own hooks: the header lines, joining the job once any test is
collected (its control group alone where no gpucomm test is), each test's outcome and the exit status
agreed by every rank (:mod:`.agreement`), the notes on the exit status, and leaving the job at the end.  Only
global rank 0 speaks: it prints the table and writes the reports, the baseline and --junitxml; the others
write to their rank logs (:mod:`.logs`).

:func:`diverging_options` names the options that would make the ranks run different tests.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, Generator

import pytest

from ...env.launch import Launch
from ...ranks.errors import JobBroken
from ..markers import uses_gpucomm
from .agreement import agree_on_collection, agree_on_exit_status, agree_on_outcome
from .gate import JobJudging
from .job import JobGroups, LaunchedSession
from .exchange import GRACE_S
from .logs import header_lines, rank_log
from .supervise import deadline, meeting, why_unsupervised

if TYPE_CHECKING:
    from ..state import State

__all__ = ["LaunchedMode", "XDIST_REFUSAL", "diverging_options", "refuse_xdist"]

XDIST_REFUSAL = ("-n/--dist (pytest-xdist): a rank's tests would run in worker processes that are not ranks of "
                 "the job")


def refuse_xdist(launch: Launch) -> None:
    """A pytest-xdist controller in launched mode: a usage error (its workers would not be ranks)."""
    raise pytest.UsageError(f"gpucomm: refused in launched mode ({launch.launcher}), where every rank must run "
                            f"the same tests in the same order:\n  {XDIST_REFUSAL}")


def diverging_options(config: pytest.Config) -> list[str]:
    """The given options that would make the ranks of a launched job run different tests, each with why."""
    out = []
    maxfail = int(config.getoption("maxfail", 0) or 0)
    if maxfail:
        out.append(f"-x/--maxfail={maxfail}: a rank that stops after its failures leaves the other ranks waiting "
                   "for it in the next test's collectives")
    for dest, flag in (("lf", "--lf/--last-failed"), ("failedfirst", "--ff/--failed-first"),
                       ("newfirst", "--nf/--new-first"), ("stepwise", "--sw/--stepwise")):
        if config.getoption(dest, False):
            out.append(f"{flag}: each rank selects or orders the tests from its own cache, so the ranks may run "
                       "different tests, or the same ones in another order")
    numprocesses = config.getoption("numprocesses", None)
    dist = config.getoption("dist", "no")
    if numprocesses or dist not in ("no", None):
        out.append(XDIST_REFUSAL)
    return out


class LaunchedMode:
    """Launched mode's hooks; see the module docstring.  Made at configure, before pytest's own junitxml
    plugin reads --junitxml (the generic configure hook is ``tryfirst``): a rank other than global rank 0
    writes none (the ranks' reports would be the same tests, written over each other's file)."""

    def __init__(self, config: pytest.Config, state: "State") -> None:
        assert state.launch is not None
        self.state = state
        self.launch = state.launch
        self.session = LaunchedSession(self.launch, state.settings.timeout_s)
        #: why this rank's exit status is the job's, printed at the end of its output (on rank 0 only where the
        #: job's differs from its own)
        self.notes: list[str] = []
        state.launched = self.session
        state.groups = JobGroups(self.session, state.devices, state.settings)
        state.judging = JobJudging(config, state.settings, state.devices, self.session, state.speaks)
        if not state.speaks:
            config.option.xmlpath = None
        #: why this rank ends without joining the job, where it knows (a usage error, a collection error)
        self.usage_error = ""
        self.collect_errors: list[pytest.CollectReport] = []
        #: whether this rank tells the others when it ends without joining: not where every rank ends alike
        #: before the meeting (an option refused), nor where a conftest made its own process group
        self.departs = True

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Tell this rank's supervising parent where the ranks meet: should the rank end before it comes there,
        the parent tells the others (:mod:`.arrival`)."""
        if self.session.meets:
            m = self.session.meeting()
            deadline(self.session.timeout_s, 2 * m.timeout_s + GRACE_S,
                     "collecting its tests (--gpucomm-timeout)")
            meeting(m.to_json())

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from ...text import fit
        from ..finish import terminal_width

        lines = [f"gpucomm launch: {self.launch.describe()}", *header_lines(config, self.launch)]
        why = why_unsupervised()
        if why:
            lines.append(f"gpucomm rank deaths: no supervising parent ({why}): a rank that dies is named without "
                         "how it ended, and only by the ranks on its machine")
        return fit(lines, terminal_width(config))

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Once any test is collected (before the gate reads the baseline: the generic hook, also ``tryfirst``,
        registered earlier): refuse the options that make ranks diverge, join the job -- its process groups
        where gpucomm tests are collected, else its control group alone, so that every test's outcome is
        agreed whatever fixtures it uses --, check that every rank collected the same tests (else a usage
        error), and read every node's fingerprint where gpucomm tests are collected."""
        if not session.items:
            return
        measures = any(uses_gpucomm(i) for i in session.items)
        refused = diverging_options(session.config)
        if refused:
            self.departs = False  # the same options on every rank: none waits for another
            raise pytest.UsageError(
                f"gpucomm: refused in launched mode ({self.launch.launcher}), where every "
                "rank must run the same tests in the same order:\n  " + "\n  ".join(refused))
        if not measures and _foreign_group():
            self.departs = False
            self.notes.append(
                "gpucomm: launched mode: a torch.distributed process group made by a conftest or another plugin "
                "exists, so the ranks did not agree on each test's outcome: each rank's own is its own")
            return
        try:
            self.session.start(self.state.devices.info if measures else None)
            agree_on_collection(self.session.channel, [i.nodeid for i in session.items])
            if measures:
                self._join_nodes()
        except JobBroken as e:  # a rank hung or gone: no test can run; the session ends failed (exit status 1)
            self._broken_at_start(session, str(e), getattr(e, "summary", ""))
            raise session.Failed(str(e)) from None
        except pytest.UsageError as e:  # this rank's own (its GPU missing): the others learn it at the end
            self.usage_error = str(e)
            raise

    @staticmethod
    def _say(config: pytest.Config) -> Callable[[str], None]:
        """A line for the user now, wrapped to the terminal (pytest's reporter, else stderr)."""
        from ...text import fit
        from ..finish import terminal_width

        def say(line: str) -> None:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            for part in fit([line], terminal_width(config)):
                if reporter is not None:
                    reporter.write_line(part)
                else:
                    print(part, file=sys.stderr, flush=True)

        return say

    def _broken_at_start(self, session: pytest.Session, message: str, summary: str) -> None:
        """The job could not start: the whole message among the notes at the end of the output, wrapped to the
        terminal, and its ``summary`` (``gpucomm: rank 1 (hostB) ended before it joined the job``; else the
        message's first clause) on pytest's last line."""
        from ...text import fit
        from ..finish import terminal_width

        width = terminal_width(session.config)
        self.notes += fit([message], width)
        first = summary or message.split("; ")[0]
        session.shouldfail = first if len(first) <= width - 4 else first[:width - 7] + "..."

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(report)

    def _why_not_joined(self, session: pytest.Session) -> str:
        """How this rank's session ended before it joined the job, for the other ranks, with its log."""
        errors = self.collect_errors
        if self.usage_error:
            how = "a usage error: " + " ".join(self.usage_error.split())
        elif errors:
            crash = getattr(errors[0].longrepr, "reprcrash", None)
            text = getattr(crash, "message", None) or (str(errors[0].longrepr).strip().splitlines() or [""])[-1]
            what = " ".join(str(text).split())
            what = what if len(what) <= 160 else what[:157] + "..."
            how = (f"{len(errors)} error{'s' if len(errors) > 1 else ''} during collection "
                   f"({errors[0].nodeid or '.'}: {what})")
        elif int(session.exitstatus) == int(pytest.ExitCode.INTERRUPTED):
            how = "its session was interrupted"
        elif not session.items:
            how = "it collected no tests"
        else:
            status = int(session.exitstatus)
            names = {int(c): c.name.lower().replace("_", " ") for c in pytest.ExitCode}
            how = f"its session ended with exit status {status}" + (f" ({names[status]})" if status in names else "")
        log = rank_log(session.config, self.launch)
        return how + (f"; its output: {log}" if log else "")

    def _join_nodes(self) -> None:
        """Read every node's fingerprint (on the node's local rank 0; across nodes the run's fingerprint holds
        them under ``nodes``, so that the change since the baseline names the node), and key the gate's cases
        by the job's layout."""
        state = self.state
        nodes = self.session.join(lambda: state.devices.fingerprint)
        state.judging.gate.layout = state.layout
        if state.layout:  # the run's fingerprint holds every node's: a change on any node is named
            state.devices.fingerprint = dict(state.devices.fingerprint,
                                             nodes={str(n): fp for n, (_, fp) in nodes.items()})

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, object, object]:
        """Each phase's outcome is the job's (a failure or a skip on one rank is every rank's): where this
        rank's outcome of a test becomes the job's (:func:`.agreement.agree_on_outcome`)."""
        report = yield
        if self.session.started and isinstance(report, pytest.TestReport):
            channel = self.session.channel
            agree_on_outcome(channel, report)
            if channel.broken is not None:  # a rank hung or gone: no further test can run on the job's groups
                item.session.shouldfail = channel.broken
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """After the generic hook (``tryfirst``), which wrote the reports on rank 0: every rank exits with the
        job's exit status (the first rank's in rank order that is not 0).  The job's groups are left in
        :meth:`pytest_unconfigure`, once rank 0 printed its summary."""
        if not self.session.started:
            departs = self.departs and not _foreign_group()  # else the others would wait for this rank in vain
            self.session.depart(self._why_not_joined(session) if departs else None, say=self._say(session.config))
            return
        agreed, notes = agree_on_exit_status(self.session.channel, int(session.exitstatus))
        if agreed != session.exitstatus or not self.state.speaks:
            self.notes += notes
        if agreed != session.exitstatus:
            session.exitstatus = agreed

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Why this rank's exit status is the job's (on rank 0 where it is another rank's), and what the mode
        could not do."""
        for line in self.notes:
            terminalreporter.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Leave the job: close() waits for every rank, so that no rank exits before rank 0 has printed and
        written everything (torchrun stops the other ranks as soon as one exits with a failure)."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.session.close()


def _foreign_group() -> bool:
    """Whether a torch.distributed process group that gpucomm did not make exists in this process."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and bool(getattr(dist, "is_available", lambda: False)()) and dist.is_initialized()
