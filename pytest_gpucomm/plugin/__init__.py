"""pytest hooks of pytest-gpucomm.  Each hook delegates to the module that serves it:

options and their resolution (:mod:`.settings`), markers and thresholds (:mod:`.markers`), sweeps and
device parametrization (:mod:`.parametrize`), the fixtures (:mod:`.fixtures`, whose objects are
:mod:`.measurer`'s ``Comm`` and :mod:`.group`'s ``ProcessGroup``), the session state and the gate's verdicts
(:mod:`.state`, driving :mod:`pytest_gpucomm.gate`), the session's reports (:mod:`.reporting`, rendered by
:mod:`pytest_gpucomm.report`), the files checked before the run (:mod:`.outputs`), launched mode
(:mod:`.launched`) and the pytest-html hook (:mod:`.html_plots`).

This folder is the only part of the package that imports pytest (``tests/test_layers.py`` pins it).

Loading this module imports neither torch, numpy nor scipy, and touches no GPU: that happens only when a
test uses a gpucomm fixture or marker (``benchmarks/plugin_import.py`` measures what loading costs).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Generator, Optional

import pytest

from .fixtures import comm, gpu, gpu_hub, gpu_link, gpu_pair, gpucomm_state, gpus, group_kind, process_group, size  # noqa: F401  (fixtures)
from .markers import MARKER_LINES, MarkerError, check_thresholds, marks_of, uses_gpucomm
from .settings import add_options, read_settings
from .state import STATE_KEY, State, state_of
from ..units import plural


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt: pytest stops as on Ctrl-C, and the rank workers, their temporary
    folders and the reports are dealt with as after Ctrl-C."""


_HANDLER_PID = 0  # the process that installed the handler: a forked child gets the default action back


def _on_sigterm(signum: int, frame: Any) -> None:
    if os.getpid() != _HANDLER_PID:  # a child forked from pytest: SIGTERM ends it, as it would without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise Terminated(f"gpucomm: stopped by signal {signal.Signals(signum).name}")


_SIGTERM_KEY = pytest.StashKey[Any]()


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not _is_xdist_worker(config) and getattr(config.option, "dist", "no") not in ("no", None)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    settings = read_settings(config)
    launch, launch_error = _resolve_launch(settings.launch)
    if launch is not None and _is_xdist_controller(config):  # its workers collect: refuse it here, not there
        from .launched import XDIST_REFUSAL

        raise pytest.UsageError(f"gpucomm: refused in launched mode ({launch.launcher}), where every rank must run "
                                f"the same tests in the same order:\n  {XDIST_REFUSAL}")
    if "GPUCOMM_COPY_ENGINE" in os.environ:  # read where a GPU copy is set up: a bad value is said here, at once
        from ..ops.engines import EngineError, engine_choice

        try:
            engine_choice(os.environ)
        except EngineError as e:
            raise pytest.UsageError(f"invalid environment: {e}") from None
    if "GPUCOMM_RANK_START" in os.environ:  # read when a pool starts: a bad value is said here, at once
        from ..ranks.spawn import rank_start

        try:
            rank_start()
        except ValueError as e:
            raise pytest.UsageError(f"invalid environment: {e}") from None
    if settings.baseline_save and not settings.baseline:
        raise pytest.UsageError("--gpu-baseline-save needs --gpu-baseline=NAME|PATH|auto to know where to save")
    if _is_xdist_controller(config) and settings.baseline_save and not settings.allow_xdist:
        raise pytest.UsageError(
            "--gpu-baseline-save under pytest-xdist (-n): the workers would measure side by side and slow each "
            "other, and the baseline would keep those figures; record without -n, or pass --gpucomm-allow-xdist "
            "where each worker has devices of its own"
        )
    speaks = launch is None or launch.is_first  # in launched mode only global rank 0 writes the reports
    if speaks and not _is_xdist_worker(config) and not config.getoption("help"):
        from .outputs import check_output_path  # the controller writes the reports: check before any test runs

        for path, option in ((settings.json_path, "--gpucomm-json"),
                             (settings.benchmark_json, "--gpucomm-benchmark-json")):
            if path:
                check_output_path(path, option)
        if settings.plots_dir:
            _check_plots(config, settings.plots_dir)
            if getattr(config.option, "htmlpath", None):  # pytest-html: the plots go into its report too
                from .html_plots import PytestHtmlPlots

                config.pluginmanager.register(PytestHtmlPlots(lambda: config.stash[STATE_KEY].plot_paths),
                                              "gpucomm-html-plots")
    config.stash[STATE_KEY] = state = State(config, settings)
    state.set_launch(launch)
    state.launch_error = launch_error
    if settings.baseline_save or _is_xdist_controller(config):  # who needs to know which tests finished
        config.pluginmanager.register(_Progress(state), f"gpucomm-progress-{id(state)}")
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        global _HANDLER_PID
        _HANDLER_PID = os.getpid()
        config.stash[_SIGTERM_KEY] = signal.signal(signal.SIGTERM, _on_sigterm)


def _check_plots(config: pytest.Config, folder: str) -> None:
    """--gpucomm-plots, before any test runs: matplotlib must import (else a usage error naming the extra) and
    the folder must be one that can be made; with pytest-html active, the plots also go into its report."""
    from .settings import origin

    where = origin(config, "--gpucomm-plots")
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        from ..report.plots import EXTRA

        raise pytest.UsageError(f"--gpucomm-plots={folder} (from {where}): the plots need matplotlib, which cannot be "
                                f"imported ({e}): install the plots extra, {EXTRA}") from None
    from .outputs import check_output_folder

    check_output_folder(os.path.abspath(folder), f"--gpucomm-plots={folder} (from {where})")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """--gpucomm-rank-log in launched mode: a rank other than global rank 0 sends its output (from here on,
    the report header included) to DIR/rank-<R>.log; rank 0 checks that DIR can be made."""
    if config.option.help or config.option.version:
        return None
    if not (config.getoption("gpucomm_rank_log") or os.environ.get("GPUCOMM_RANK_LOG")
            or config.getini("gpucomm_rank_log")):
        return None  # the usual run: the options are read (and checked) in pytest_configure
    settings = read_settings(config)
    if not settings.rank_log:
        return None
    launch, _ = _resolve_launch(settings.launch)
    if launch is None:
        return None
    from .settings import origin

    where = origin(config, "--gpucomm-rank-log")
    if launch.is_first:
        try:
            os.makedirs(settings.rank_log, exist_ok=True)
        except OSError as e:
            raise pytest.UsageError(f"invalid --gpucomm-rank-log {settings.rank_log!r} (from {where}): cannot "
                                    f"create the folder: {e.strerror or e}") from None
        return None
    from .launched import redirect_output

    redirect_output(config, settings.rank_log, launch.rank, where)
    return None


def _resolve_launch(choice: str) -> tuple[Any, Optional[str]]:
    """(this rank's Launch or None for the rank pool, a deferred error).  A launcher named by
    --gpucomm-launch must be readable now; with ``auto`` an unreadable launcher's environment is an error
    only once a gpucomm test is collected (runs without gpucomm tests are left alone)."""
    from ..env.launch import LaunchError, resolve

    try:
        return resolve(choice, os.environ), None
    except LaunchError as e:
        message = f"invalid launcher environment (--gpucomm-launch={choice}): {e}"
        if choice != "auto":
            raise pytest.UsageError(message) from None
        return None, message + " (--gpucomm-launch=pool ignores the launcher)"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Launched mode: only global rank 0 writes --junitxml (the other ranks' reports would be the same
    tests, written over each other's file)."""
    state = session.config.stash.get(STATE_KEY, None)
    if state is None or state.speaks:
        return
    from _pytest.junitxml import xml_key

    xml = session.config.stash.get(xml_key, None)
    if xml is not None:
        del session.config.stash[xml_key]
        session.config.pluginmanager.unregister(xml)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is not None:
        # launched mode: close() waits for every rank, so that no rank exits before rank 0 has printed and
        # written everything (torchrun stops the other ranks as soon as one exits with a failure)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        state.close()
    previous = config.stash.get(_SIGTERM_KEY, None)
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = state_of(config)
    lines = [state.settings.describe()]
    if state.launch is not None:
        lines.append(f"gpucomm launch: {state.launch.describe()}")
        if state.settings.rank_log and state.launch.world_size > 1:
            lines.append(f"gpucomm rank logs: ranks 1-{state.launch.world_size - 1} write their output to "
                         f"{os.path.join(state.settings.rank_log, 'rank-<R>.log')}")
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    state = state_of(session.config)
    used = any(uses_gpucomm(i) for i in session.items)
    if used:
        _join_launched_job(session, state)
    if state.settings.baseline and used:
        state.load_gate({i.nodeid for i in session.items})
        if state.settings.baseline_save and state.gate.path is not None and not _is_xdist_worker(session.config) \
                and state.speaks:
            from .outputs import check_output_path

            check_output_path(state.gate.path, "--gpu-baseline-save: the baseline")
            check_output_path(f"{state.gate.path}.lock", "--gpu-baseline-save: the baseline's lock")


def _join_launched_job(session: pytest.Session, state: State) -> None:
    """Launched mode, once gpucomm tests are collected: refuse the options that make ranks diverge, join the
    job's process groups, and check that every rank collected the same tests (else a usage error)."""
    if state.launch_error:
        raise pytest.UsageError(state.launch_error)
    if state.launched is None:
        return
    from .launched import diverging_options

    refused = diverging_options(session.config)
    if refused:
        raise pytest.UsageError(
            f"gpucomm: refused in launched mode ({state.launch.launcher if state.launch else ''}), where every "
            "rank must run the same tests in the same order:\n  " + "\n  ".join(refused))
    from .launched import JobBroken

    try:
        state.launched.start(state.info)
        state.launched.agree_on_collection([i.nodeid for i in session.items])
        state.join_job()
    except JobBroken as e:  # a rank hung or gone: no test can run; the session ends failed (exit status 1)
        session.shouldfail = str(e)
        raise session.Failed(str(e)) from None


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    if not any(uses_gpucomm(i) for i in items) or not state_of(config).speaks:
        return []
    from ..env.hardware import device_summary_lines
    from .parametrize import pairs_lines

    state = state_of(config)
    return (device_summary_lines(state.info) + pairs_lines(state) + state.node_lines()
            + (state.gate.header_lines() if state.settings.baseline else []))


#: what the plugin parametrizes at collection (parametrize.py); a test with none of them is left alone
_PARAMETRIZED = frozenset({"size", "gpu_pair", "gpu_link", "gpu_hub", "gpu", "group_kind"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if _PARAMETRIZED.isdisjoint(metafunc.fixturenames) and metafunc.definition.get_closest_marker("sizes") is None:
        return  # every test of every project passes here: import nothing for the ones we leave alone
    from .parametrize import parametrize

    parametrize(metafunc, state_of(metafunc.config))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Check the markers (once, kept in item.stash) and the requirements before any fixture runs."""
    if not uses_gpucomm(item):
        return
    try:
        marks = marks_of(item)
    except MarkerError as e:
        problem = str(e)
    else:
        problem = ""
    if problem:
        pytest.fail(problem, pytrace=False)  # outside the except block: no chained traceback
    state = state_of(item.config)
    refusal = state.refusal()
    if refusal:
        pytest.fail(refusal, pytrace=False)
    if marks.gpus is not None and marks.gpus > state.info.count:
        pytest.skip(state.too_few(marks.gpus))
    if marks.world is not None and "process_group" in getattr(item, "fixturenames", ()):
        unavailable = state.world_problem(marks.world)
        if unavailable:
            pytest.skip(unavailable)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """After the test body: its thresholds, then the gate's verdicts, then its JUnit properties.

    Launched mode with a baseline: the gate runs on rank 0 and every rank follows its messages, so every
    rank must enter it or none: the ranks first agree that every body finished with the same number of
    measurements (a body that failed on one rank only, say an assertion on that node's copy, would
    otherwise leave the ranks exchanging different messages); if not, no rank judges this test, and the
    failing rank's failure is the job's (the outcome agreement)."""
    state = state_of(item.config)
    before = len(state.records)
    error: Optional[BaseException] = None
    try:
        result = yield
    except BaseException as e:  # re-raised below, once the ranks know whether to judge
        error, result = e, None
    records = [r for r in state.records[before:] if r.nodeid == item.nodeid]
    judge = error is None
    if state.gates and state.launched is not None and state.launched.started:
        every = state.launched.allgather((error is None, len(records)),
                                         what="the test body (to know whether the gate judges it)")
        judge = all(ok for ok, _ in every) and len({n for _, n in every}) == 1
    if error is not None:
        raise error
    if not records:
        return result
    from ..report.run import LIVE_KEY, junit_properties, live_text

    marks = marks_of(item)
    failures = check_thresholds(marks, records)
    if state.gates and judge:
        bw = marks.bandwidth
        failures += state.judge(records, bw.tolerance if bw else None, bw.tail_tolerance if bw else None)
    item.user_properties.extend(junit_properties(records, state.gates))
    item.user_properties.append((LIVE_KEY, live_text(records, state.gates)))
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Launched mode: each phase's outcome is the job's (a failure or a skip on one rank is every rank's)."""
    report = yield
    launched = state_of(item.config).launched
    if launched is not None and launched.started and isinstance(report, pytest.TestReport):
        launched.agree_on_outcome(report)
        if launched.broken is not None:  # a rank hung or gone: no further test can run on the job's groups
            item.session.shouldfail = launched.broken
    return report


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Optional[tuple[str, str, Any]]:
    """Under -v, a gpucomm test's line shows its figures and verdicts as it finishes:
    ``PASSED 395.8 GB/s 1.00x ok`` (the property the call phase left, :func:`report.live_text`)."""
    if report.when != "call" or hasattr(report, "wasxfail") or (config.getoption("verbose") or 0) < 1:
        return None
    live = next((v for k, v in getattr(report, "user_properties", ()) if k == "gpucomm.live"), None)
    if not live:
        return None
    if report.passed:
        return "passed", ".", (f"PASSED {live}", {"green": True})
    if report.failed:
        return "failed", "F", (f"FAILED {live}", {"red": True})
    return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = state_of(config)
    if not state.speaks:  # a quiet rank of a launched job: only why its exit status is the job's
        for line in state.launch_notes:
            terminalreporter.write_line(line)
    if not state.records or not state.speaks:
        return
    from .reporting import summary_lines

    terminalreporter.write_sep("=", "gpucomm results")
    for line in summary_lines(state):
        terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the ranks, save the baseline and write the reports before the terminal summary is printed.

    A pytest-xdist worker saves its cases into the baseline and hands its records to the controller, which
    writes the reports and prints the table of every worker's rows.  An output that cannot be written is
    named in the summary and makes the exit status non-zero.  In launched mode every rank leaves the job's
    process groups here, after agreeing on the exit status (every rank exits with the same code), and only
    global rank 0 writes the reports and the baseline and judges the run at the gate's levels."""
    config = session.config
    state = state_of(config)
    launched = state.launched if state.launched is not None and state.launched.started else None
    if launched is None:
        state.close()
    worker = _is_xdist_worker(config)
    if _is_xdist_controller(config):  # the workers' rows in the order the tests finished, not by worker
        state.records.sort(key=lambda r: state.report_order.get(r.nodeid, len(state.report_order)))
    if state.records and state.settings.baseline and not worker and state.speaks:
        from ..report.run import apply_levels
        from .reporting import session_levels

        try:
            state.levels = session_levels(state)
        except Exception as e:  # the baseline changed under the run: the cases' verdicts stand
            state.notes.append(f"gpucomm: the levels were not judged: {e}")
        if not state.settings.baseline_save:
            apply_levels(state.records, state.levels)
    if state.records and state.speaks and not worker:  # before the run is saved into the baseline
        from .reporting import baseline_document, curves_of

        try:
            state.baseline_doc = baseline_document(state)
        except Exception as e:  # the file changed under the run: the verdicts stand, the curves go without it
            state.notes.append(f"gpucomm: the baseline's curves are left out: {e}")
        state.curves, notes = curves_of(state)
        state.notes += notes
    if state.records and state.speaks:
        from .reporting import write_reports

        finished = exitstatus != pytest.ExitCode.INTERRUPTED and state.ran_every_test(session)
        write_reports(state, finished=finished, is_worker=worker)
    if worker:
        config.workeroutput["gpucomm"] = state.worker_output()  # type: ignore[attr-defined]
    failed_levels = (state.levels.failed if state.levels is not None and not state.settings.baseline_save else [])
    if failed_levels:
        state.notes.append(f"gpucomm: FAILED: {plural(len(failed_levels), 'regression')} at the levels (the "
                           "'gpucomm REGRESSION' lines above)")
    if (state.write_failed or failed_levels) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if launched is not None:  # the job's groups are left in pytest_unconfigure, once rank 0 printed its summary
        agreed, notes = launched.agree_on_exit_status(int(session.exitstatus))
        state.launch_notes += notes
        if agreed != session.exitstatus:
            session.exitstatus = agreed


class _Progress:
    """Which tests finished, and in what order: a recording run saves only when every collected test ran,
    and a pytest-xdist controller orders the workers' rows by it."""

    def __init__(self, state: State) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.state.report_order.setdefault(report.nodeid, len(self.state.report_order))

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.state.finished_tests.add(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, in the controller: a worker finished; take its records for the table and reports."""
    data = getattr(node, "workeroutput", {}).get("gpucomm")
    if data:
        state_of(node.config).add_worker_output(data)
