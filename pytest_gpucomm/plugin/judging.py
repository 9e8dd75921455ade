"""Each test judged: its thresholds (:mod:`.markers`), then the gate's verdicts against the baseline, then what
its reports keep of them (JUnit properties, the ``-v`` line).

:class:`Judging` is the session's side of the gate (:class:`pytest_gpucomm.gate.Gate`): it reads the baseline
once the tests are collected and judges each test's records; launched mode judges on global rank 0 and the
other ranks follow (:class:`~.launched.gate.JobJudging`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import pytest

from ..measurement import Record
from ..vocab import Status
from .cause import CauseTests
from .devices import Devices
from .markers import check_thresholds, marks_of
from .settings import Settings

if TYPE_CHECKING:
    from ..gate import Gate
    from ..measurement import Remeasure
    from .state import State

__all__ = ["Judging", "check_test", "live_status"]


class Judging:
    """The session's gate: the baseline read once the tests are collected, and each test's records judged."""

    def __init__(self, config: pytest.Config, settings: Settings, devices: Devices) -> None:
        self.config = config
        self.settings = settings
        self.devices = devices
        self._gate: Optional["Gate"] = None
        #: why a REGRESSION got slower, where the environment changed
        self.causes = CauseTests(settings.cause_cases, settings.baseline_save, settings.tolerance)
        #: with both engines, the line saying how the other engine's figure of a REGRESSION's case stands
        self.engine_line: Optional[Callable[[Record], Optional[str]]] = None

    @property
    def gate(self) -> "Gate":
        """The regression gate of the session (inactive without --gpu-baseline), made at first use."""
        if self._gate is None:
            from ..gate import Gate, GateSettings
            from ..gate.prior import prior_path
            from ..gate.shipped import default_baseline_dir, shipped_folder

            s = self.settings
            base_dir = (Path(s.baseline_dir) if s.baseline_dir
                        else default_baseline_dir(self.config.rootpath, self.config.invocation_params.dir))
            self._gate = Gate(GateSettings(
                spec=s.baseline, save=s.baseline_save, search_dirs=(base_dir,),
                shipped_dir=shipped_folder("baselines"), prior_path=prior_path(s.prior), nodes=s.baseline_nodes,
                **s.judging(),
            ))
        return self._gate

    @property
    def gates(self) -> bool:
        """Whether each test's records are judged (the baseline is loaded)."""
        return self.gate.loaded

    def load(self, nodeids: set[str]) -> None:
        """Read the baseline for the collected tests ``nodeids``; a baseline that cannot be read is a usage
        error of the session."""
        from ..gate import GateUsageError

        info = self.devices.info
        try:
            self.gate.load(info.model if info.kind == "gpu" else None, self.devices.fingerprint, nodeids)
        except GateUsageError as e:
            raise pytest.UsageError(str(e)) from None

    def check_save_paths(self) -> None:
        """--gpu-baseline-save: the baseline and its lock must be writable, before any test runs."""
        if self.settings.baseline_save and self.gate.path is not None:
            from .outputs import check_output_path

            check_output_path(self.gate.path, "--gpu-baseline-save: the baseline")
            check_output_path(f"{self.gate.path}.lock", "--gpu-baseline-save: the baseline's lock")

    def agree_to_judge(self, ok: bool, n_records: int) -> bool:
        """Whether the gate judges a test whose body finished (``ok``) with ``n_records`` measurements: when
        it finished (a launched job's ranks agree on it first)."""
        return ok

    def judge(self, records: list[Record], tolerance: Optional[float],
              tail_tolerance: Optional[float] = None) -> list[str]:
        """The baseline verdict on each record; returns the failure messages.  The gate may re-measure a
        flagged case through ``Record.redo`` (each call a new :class:`Remeasure`); the record keeps its
        first measurement, the gate reports the re-measures.  A recording run (--gpu-baseline-save)
        reports its verdicts but does not fail.  ``tail_tolerance`` overrides the session's for the tail
        verdict."""
        return self.judge_with(records, tolerance, [r.redo for r in records], tail_tolerance)

    def judge_with(self, records: list[Record], tolerance: Optional[float],
                   redos: list[Optional[Callable[[], "Remeasure"]]],
                   tail_tolerance: Optional[float] = None) -> list[str]:
        """:meth:`judge`, each record re-measured by its own of ``redos``."""
        failures = []
        for r, redo in zip(records, redos):
            v = self.gate.judge(r.nodeid, r.measurement, tolerance, redo, tail_tolerance, r.fold)
            r.baseline = v.to_dict()
            self.causes.explain(self.gate, r, r.baseline)  # adds its line to the message
            if v.status is Status.REGRESSION and self.engine_line is not None:
                line = self.engine_line(r)
                if line:
                    r.baseline["message"] = f"{r.baseline['message']}\n  {line}"
            if r.status is not Status.FAILED:
                r.status = v.status
            if v.failed and not self.settings.baseline_save:
                failures.append(str(r.baseline["message"]))
        return failures


def check_test(item: pytest.Item, state: "State", before: int, ok: bool) -> None:
    """After a test's body (``ok``: it raised nothing), the records it made (``state.records`` from
    ``before`` on): its thresholds, then the gate's verdicts, then its JUnit properties and its ``-v``
    line; the test fails with every failure's message.  Launched mode with a baseline: the ranks first agree
    whether the gate judges it (:meth:`Judging.agree_to_judge`), also when the body failed."""
    records = [r for r in state.records[before:] if r.nodeid == item.nodeid]
    judge = state.judging.agree_to_judge(ok, len(records))
    if not ok or not records:
        return
    from ..report.run import LIVE_KEY, junit_properties, live_text

    marks = marks_of(item)
    gates = state.judging.gates
    failures = check_thresholds(marks, records)
    if gates and judge:
        bw = marks.bandwidth
        failures += state.judging.judge(records, bw.tolerance if bw else None, bw.tail_tolerance if bw else None)
    item.user_properties.extend(junit_properties(records, gates))
    item.user_properties.append((LIVE_KEY, live_text(records, gates)))
    if failures:  # each line wrapped to the terminal's width (the JSON report keeps the message's own lines)
        from ..text import fit
        from .finish import terminal_width

        pytest.fail("\n".join(fit(failures, terminal_width(item.config))), pytrace=False)


def live_status(report: pytest.TestReport, config: pytest.Config) -> Optional[tuple[str, str, object]]:
    """Under -v, a gpucomm test's line shows its figures and verdicts as it finishes:
    ``PASSED 395.8 GB/s 1.00x ok`` (the property the call phase left, :func:`report.run.live_text`)."""
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
