"""What gpucomm keeps for one pytest session (``config.stash[STATE_KEY]``): a small :class:`State` that
composes the parts, each of one concern, and holds what the session measured and gathers at its end.

The parts: the devices and the policy on them (:class:`~.devices.Devices`), the rank pools
(:class:`~.pools.RankPools`) and the ``process_group`` fixture's groups (the pools, or a launched job's), the
gate's re-measures (:class:`~.remeasures.Remeasures`), the gate (:class:`~.judging.Judging`), which tests
finished (:class:`~.finish.Progress`) and what pytest-xdist workers sent (:class:`~.xdist.WorkerReports`).
The modes (launched, xdist controller or worker) are plugins registered at configure (:mod:`.session`) that
put their own parts in.

Nothing heavy happens on construction: the hardware is detected, torch imported and rank pools started
only when a test first uses a gpucomm fixture or marker.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Optional

import pytest

from ..measurement import Record
from .devices import Devices
from .engines import Engines, EngineSettings
from .finish import Progress, terminal_width
from .judging import Judging
from .pools import Groups, RankPools
from .remeasures import Remeasures
from .settings import Settings
from .xdist import WorkerReports

if TYPE_CHECKING:
    from pathlib import Path

    from ..gate.levels import RunLevels
    from ..report.run import Coverage
    from ..env.launch import Launch
    from ..gate import Gate
    from ..measurement import Measurement
    from ..ops.copies import BufferPool
    from .launched.job import LaunchedSession, LaunchShape

__all__ = ["Record", "State", "STATE_KEY", "state_of", "say_live"]


class State:
    """Everything gpucomm keeps for one pytest session (in ``config.stash[STATE_KEY]``).

    ``launch`` is this rank's place in a launched job (pytest started once per rank by torchrun, srun or
    mpirun; None with the rank pool), and ``launched`` the session's side of that job, set by the launched
    mode.  ``speaks``: whether this process prints the gpucomm table and writes the reports and the
    baseline (always with the rank pool, only global rank 0 in launched mode).  ``worker``: the
    pytest-xdist worker's id in a worker, else None."""

    def __init__(self, config: pytest.Config, settings: Settings, launch: Optional["Launch"] = None,
                 worker: Optional[str] = None, launch_error: Optional[str] = None) -> None:
        self.config = config
        self.settings = settings
        self.launch = launch
        self.launched: Optional["LaunchedSession"] = None
        #: why the launcher's variables could not be read (--gpucomm-launch=auto): an error only once a
        #: gpucomm test is collected, so that runs without gpucomm tests are left alone
        self.launch_error = launch_error
        self.worker = worker
        self.speaks = launch is None or launch.is_first
        self.devices = Devices(settings.device, settings.env_names, settings.max_size, settings.allow_xdist,
                               launch, worker)
        self.pools = RankPools(settings.timeout_s, self.devices, forks=launch is None)
        self.groups: Groups = self.pools
        self.remeasures = Remeasures(self.devices, self.pools, remeasure_after_s=settings.remeasure_after_s,
                                     baseline_save=settings.baseline_save, timeout_s=settings.timeout_s,
                                     timing=settings.timing, say=self.say_now)
        self.judging = Judging(config, settings, self.devices)
        self.engines = Engines(EngineSettings.of(settings), self.devices, launched=launch is not None,
                               width=lambda: terminal_width(config))
        self.judging.engine_line = lambda r: self.engines.counterpart_line(r, self.records, self.gate)
        self.progress = Progress()
        self.from_workers = WorkerReports()  # under pytest-xdist, in the controller: what the workers sent
        self.records: list[Record] = []
        self.notes: list[str] = []  # lines for the end of the terminal summary
        self.write_failed = False  # an output (report, baseline) could not be written at the end
        self.levels: Optional["RunLevels"] = None  # the run judged at the levels, set at the session's end
        self.coverage: Optional["Coverage"] = None  # how many cases the gate judged, set at the session's end
        self.curves: list[dict[str, object]] = []  # the "curves" section (curves.curve_report), set at its end
        #: the baseline file's document as judged against (before this run saved into it), set at its end
        self.baseline_doc: Optional[dict[str, object]] = None
        self.plot_paths: list[Path] = []  # the plots drawn at its end (--gpucomm-plots)
        self._buffers: Optional["BufferPool"] = None

    def say_now(self, line: str) -> None:
        """A line on the terminal now, in the middle of a test, where this process speaks (:func:`say_live`)."""
        if self.speaks:
            say_live(self.config, line)

    @property
    def gate(self) -> "Gate":
        """The regression gate of the session (inactive without --gpu-baseline)."""
        return self.judging.gate

    @property
    def fingerprint(self) -> dict[str, object]:
        """The run's fingerprint (of this process's devices, or of the pytest-xdist workers that measured)."""
        return self.devices.fingerprint

    def headline(self) -> Optional[str]:
        """The hardware line of the summary: of this process, or of the xdist workers that measured."""
        if self.devices.detected:
            return self.devices.info.headline()
        return self.from_workers.headline

    @property
    def layout(self) -> str:
        """A job across nodes: "<nodes>x<ranks per node>", part of the baseline's case keys; else ""."""
        la = self.launch
        return f"{la.n_nodes}x{la.local_world_size}" if la is not None and la.n_nodes > 1 else ""

    def launch_extra(self) -> Optional["LaunchShape"]:
        """The job's shape for the JSON report (launched mode), else None."""
        return self.launched.shape(self.layout) if self.launched is not None else None

    @property
    def buffers(self) -> "BufferPool":
        """This process's copy buffers, made at the first copy and cleared at the session's end."""
        if self._buffers is None:
            from ..ops.copies import BufferPool

            self._buffers = BufferPool()
        return self._buffers

    @property
    def fresh_remeasures(self) -> int:
        """The gate's re-measures made in a new process or process group so far."""
        return self.remeasures.count

    def copy_in_new_process(self, spec: dict[str, object], label: str = "") -> "Measurement":
        """Measure the copy ``spec`` in a new process (:meth:`.remeasures.Remeasures.copy_in_new_process`)."""
        return self.remeasures.copy_in_new_process(spec, label)

    def close(self) -> None:
        """Stop the rank pools and free the copy buffers (a launched job's groups are left by its mode)."""
        self.pools.close()
        self.engines.close()
        if self._buffers is not None:
            self._buffers.clear()


STATE_KEY = pytest.StashKey[State]()


def state_of(config: pytest.Config) -> State:
    """The gpucomm state of a pytest session."""
    return config.stash[STATE_KEY]


def say_live(config: pytest.Config, line: str, bold: bool = False) -> None:
    """``line`` on the terminal now, fitted to its width, in yellow: in the middle of a test, past pytest's
    capture of the test's output, as its live logging is (written under the capture, it would show only if the
    test failed); after pytest's last line, below it."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    from ..text import fit

    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        if getattr(config.get_terminal_writer(), "width_of_current_line", 0):  # after -q's progress dots
            reporter.write("\n")
        for text in fit([line], terminal_width(config)):
            reporter.write_line(text, bold=bold, yellow=True)
