"""The session's start, as the generic hooks hand it over: the settings read and checked, the launcher
found, the :class:`~.state.State` made and the modes registered as plugins (launched mode, the pytest-xdist
controller or worker, :func:`open_session`); a launched rank's supervisor and log (:func:`start_rank`); the
collected tests seen by the gate (:func:`collected`) and the lines the report shows of them
(:func:`collection_lines`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

import pytest

from .markers import uses_gpucomm
from .settings import given, origin, read_launch_options, read_settings
from .state import STATE_KEY, State
from .xdist import check_controller, is_controller, worker_id

if TYPE_CHECKING:
    from ..env.launch import Launch

__all__ = ["open_session", "resolve_launch", "start_rank", "collected", "collection_lines", "ENV_TEXTS", "ENV_FLAGS",
           "check_flags_and_texts"]


def open_session(config: pytest.Config) -> State:
    """Read and check the settings (a usage error names the bad value), check the outputs this process will
    write, then make the session's state (``config.stash[STATE_KEY]``) and register its modes."""
    settings = read_settings(config)
    launch, launch_error = resolve_launch(settings.launch)
    controller, worker = is_controller(config), worker_id(config)
    if launch is not None and controller:  # its workers collect: refuse it here, not there
        from .launched.mode import refuse_xdist

        refuse_xdist(launch)
    _check_environment()
    if settings.baseline_save and not settings.baseline:
        raise pytest.UsageError("--gpu-baseline-save needs --gpu-baseline=NAME|PATH|auto to know where to save")
    if settings.strict and not settings.baseline:
        raise pytest.UsageError("--gpu-baseline-strict needs --gpu-baseline=NAME|PATH|auto: without a baseline "
                                "nothing is gated, so nothing could fail as new or not gated")
    if controller:
        check_controller(settings)
    writes = (launch is None or launch.is_first) and worker is None and not config.getoption("help")
    if writes:  # the reports are written by this process: check them before any test runs
        from .outputs import check_outputs

        check_outputs(config, settings)
    config.stash[STATE_KEY] = state = State(config, settings, launch, worker, launch_error)
    if settings.device == "gpu" and not config.getoption("help"):  # no GPU: one line now, not a collection error
        value, where = given(config, "--gpucomm-device")
        state.devices.check_gpu(value or "gpu", where)
    if writes and settings.plots_dir and getattr(config.option, "htmlpath", None):
        from .html_plots import PytestHtmlPlots  # pytest-html: the page, with the plots, goes into its report too
        from .reporting import run_document

        config.pluginmanager.register(PytestHtmlPlots(lambda: state.plot_paths, lambda: run_document(state)),
                                      "gpucomm-html-plots")
    _register_modes(config, state)
    return state


def _register_modes(config: pytest.Config, state: State) -> None:
    """The modes as plugins, each with its own hooks: launched mode (every rank runs pytest), the
    pytest-xdist controller or worker; and who follows which tests finished."""
    if state.launch is not None:  # the rank pool imports nothing of launched mode
        from .launched.mode import LaunchedMode

        config.pluginmanager.register(LaunchedMode(config, state), "gpucomm-launched")
    from .xdist import register

    register(config, state)
    if state.settings.copy_engine != "ce" or state.settings.engine != "torch":
        from .parametrize import EngineIds

        config.pluginmanager.register(EngineIds(state.settings.copy_engine, state.engines),
                                      f"gpucomm-engine-ids-{id(state)}")
    if state.settings.baseline_save or is_controller(config):
        config.pluginmanager.register(state.progress, f"gpucomm-progress-{id(state)}")


#: the environment variables of pytest-gpucomm that are no option's (those are read with their option,
#: ``settings``): each read where its work starts, checked here at once -- set but empty is an error, as an
#: option's empty value is (``checks.not_empty``), and a yes/no one takes the words of ``checks.flag``
ENV_TEXTS = ("GPUCOMM_BASELINE_SESSION", "GPUCOMM_RANK_START", "GPUCOMM_COPY_CALL", "GPUCOMM_HIP_LIBRARY",
             "GPUCOMM_CPU_DEVICES")
ENV_FLAGS = ("GPUCOMM_ALLOW_XDIST", "GPUCOMM_SUPERVISE")


def check_flags_and_texts() -> None:
    """Every variable of :data:`ENV_TEXTS` and :data:`ENV_FLAGS` that is set: a usage error naming it where it
    is empty, or where a yes/no one is neither (``GPUCOMM_SUPERVISE=maybe``)."""
    from ..checks import CheckError, env_flag, env_text

    try:
        for name in ENV_TEXTS:
            env_text(name)
        for name in ENV_FLAGS:
            env_flag(name, False)
    except CheckError as e:
        raise pytest.UsageError(str(e)) from None


def _check_environment() -> None:
    """The environment variables read later, where a measurement starts, checked at once."""
    check_flags_and_texts()
    if "GPUCOMM_COPY_CALL" in os.environ:  # read where a GPU copy is set up
        from ..ops.engines import EngineError, engine_choice

        try:
            engine_choice(os.environ)
        except EngineError as e:
            raise pytest.UsageError(f"invalid environment: {e}") from None
    if "GPUCOMM_RANK_START" in os.environ:  # read when a pool starts
        from ..ranks.spawn import rank_start

        try:
            rank_start()
        except ValueError as e:
            raise pytest.UsageError(f"invalid environment: {e}") from None


def resolve_launch(choice: str) -> tuple[Optional["Launch"], Optional[str]]:
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


#: pytest sessions started in this process: only the first forks a rank's supervisor or, by default, sends a
#: rank's output to its log (pytester's in-process runs are sessions in the test's process)
_SESSIONS = [0]


def start_rank(config: pytest.Config) -> None:
    """A rank of a launched job, before anything is printed: fork its supervising parent
    (:mod:`.launched.supervise`), then, on a rank other than global rank 0, send its output (from here on,
    the report header included) to its rank log (:mod:`.launched.logs`)."""
    _SESSIONS[0] += 1
    if config.option.help or config.option.version:
        return
    choice, rank_log = read_launch_options(config)
    launch, _ = resolve_launch(choice)
    if launch is None:
        return
    check_flags_and_texts()  # GPUCOMM_SUPERVISE is read now
    from .launched.logs import start_logs
    from .launched.supervise import supervise

    first = _SESSIONS[0] == 1
    supervise(launch.world_size, first)
    start_logs(config, launch, rank_log, origin(config, "--gpucomm-rank-log"), first)


def collected(session: pytest.Session, state: State) -> None:
    """Once the tests are collected, if a gpucomm test is among them: a launcher's environment that could
    not be read is an error now; the baseline is read, and where this run saves into it, its file checked."""
    if not any(uses_gpucomm(i) for i in session.items):
        return
    if state.launch_error:
        raise pytest.UsageError(state.launch_error)
    if state.settings.baseline:
        state.judging.load({i.nodeid for i in session.items})
        if state.speaks and state.worker is None:
            state.judging.check_save_paths()


def collection_lines(state: State, items: list[pytest.Item]) -> list[str]:
    """The report's lines after collection, where gpucomm tests were collected: the devices, the pairs, a
    launched job's nodes and the baseline."""
    if not any(uses_gpucomm(i) for i in items) or not state.speaks:
        return []
    from ..env.hardware import device_summary_lines
    from ..text import fit
    from .finish import terminal_width
    from .parametrize import max_size_lines, pairs_lines

    return fit(device_summary_lines(state.devices.info) + max_size_lines(state) + pairs_lines(state)
               + (state.launched.node_lines() if state.launched is not None else [])
               + (state.judging.gate.header_lines() if state.settings.baseline else []), terminal_width(state.config))

