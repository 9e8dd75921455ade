"""pytest hooks of pytest-gpucomm.  Each hook is a few lines that delegate to the module that serves it:

options and their resolution (:mod:`.settings`), markers and thresholds (:mod:`.markers`), sweeps and
device parametrization (:mod:`.parametrize`), the fixtures (:mod:`.fixtures`, whose objects are
:mod:`.measurer`'s ``Comm`` and :mod:`.group`'s ``ProcessGroup``), the session's start (:mod:`.session`) and
its state (:mod:`.state`, composing the devices (:mod:`.devices`), the rank pools (:mod:`.pools`), the
re-measures (:mod:`.remeasures`) and the gate (:mod:`.judging`, driving :mod:`pytest_gpucomm.gate`)), the
session's end (:mod:`.finish`) and reports (:mod:`.reporting`, rendered by :mod:`pytest_gpucomm.report`),
the files checked before the run (:mod:`.outputs`), SIGTERM (:mod:`.sigterm`), the pytest-html hook
(:mod:`.html_plots`) and the shipped suites' test ids (:mod:`.suites`).

The modes are plugins of their own, registered at configure with their own hooks, as pytest-xdist's are:
launched mode (:mod:`.launched`: torchrun, srun or mpirun started every rank's pytest) and the pytest-xdist
controller and worker (:mod:`.xdist`).  The hooks here carry no branch for either.

This folder is the only part of the package that imports pytest (``tests/test_layers.py`` pins it).

Loading this module imports neither torch, numpy nor scipy, and touches no GPU: that happens only when a
test uses a gpucomm fixture or marker (``benchmarks/plugin_import.py`` measures what loading costs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator, Optional

import pytest

from .fixtures import (comm, copy_engine, gpu, gpu_hub, gpu_link, gpu_pair, gpucomm_engine,  # noqa: F401
                       gpucomm_state, gpus, group_kind, host_link, process_group, size)  # (fixtures)
from .devices import check_requirements
from .finish import finish_session, last_line, terminal_width, write_summary
from .judging import check_test, live_status
from .markers import MARKER_LINES, uses_gpucomm
from .session import collected, collection_lines, open_session, start_rank
from .settings import add_options
from .sigterm import install, restore
from .state import STATE_KEY, say_live, state_of


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Launched mode, before anything is printed: the rank's supervising parent forked, and a rank other than
    global rank 0 sends its output (from here on, the report header included) to its rank log."""
    start_rank(config)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The markers, the settings and the session's state, the modes registered (before pytest's own plugins
    configure: launched mode keeps --junitxml to global rank 0), SIGTERM as Ctrl-C."""
    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    open_session(config)
    install(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is not None:
        state.close()
        _say_last(config, last_line(state))
    restore(config)


def _say_last(config: pytest.Config, line: Optional[str]) -> None:
    """A line after pytest's own last line (its counts): where the gate judged fewer than half the cases, the
    run must not end on a bare "passed"."""
    if line:
        say_live(config, line, bold=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from ..text import fit

    return fit([state_of(config).settings.describe()], terminal_width(config))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    collected(session, state_of(session.config))


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    return collection_lines(state_of(config), items)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Optional[pytest.Module]:
    """A file of the shipped suites has the same test ids wherever it is collected from (:mod:`.suites`)."""
    from .suites import suite_module

    return suite_module(module_path, parent)


#: what the plugin parametrizes at collection (parametrize.py); a test with none of them is left alone
_PARAMETRIZED = frozenset({"size", "gpu_pair", "gpu_link", "gpu_hub", "gpu", "group_kind", "host_link", "copy_engine",
                           "gpucomm_engine"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The plugin's parameters; the engines' come last (``parametrize.EngineIds``, registered where the session
    has other engines than the defaults)."""
    if _PARAMETRIZED.isdisjoint(metafunc.fixturenames) and metafunc.definition.get_closest_marker("sizes") is None:
        return  # every test of every project passes here: import nothing for the ones we leave alone
    from .parametrize import parametrize

    parametrize(metafunc, state_of(metafunc.config))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Check the markers (once, kept in item.stash) and the requirements before any fixture runs."""
    if uses_gpucomm(item):
        check_requirements(item, state_of(item.config).devices)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """After the test body: its thresholds, then the gate's verdicts, then its JUnit properties
    (:func:`.judging.check_test`)."""
    state = state_of(item.config)
    before = len(state.records)
    error: Optional[BaseException] = None
    try:
        result = yield
    except BaseException as e:  # re-raised below, once the ranks of a launched job know whether to judge
        error, result = e, None
    check_test(item, state, before, ok=error is None)
    if error is not None:
        raise error
    return result


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Optional[tuple[str, str, Any]]:
    return live_status(report, config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    write_summary(terminalreporter, state_of(config))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the ranks, save the baseline and write the reports before the terminal summary is printed
    (:func:`.finish.finish_session`); the modes' own hooks come before (the xdist controller orders the rows)
    or after (an xdist worker hands its records over, a launched job agrees on the exit status)."""
    finish_session(state_of(session.config), session, exitstatus)
