"""pytest-xdist: the workers measure, the controller reports.

Each side is a plugin object registered at configure (:func:`register`): a worker (:class:`XdistWorker`) saves
its cases into the baseline and hands its records to the controller as a :class:`WorkerOutput`; the
controller (:class:`XdistController`) gathers them (:class:`WorkerReports`), orders the rows as the tests
finished, writes the reports and prints the table of every worker's rows.  GPUs are not measured in a worker
unless allowed (``devices.xdist_refusal``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import pytest

from ..measurement import Record
from ..vocab import Status
from .settings import Settings

if TYPE_CHECKING:
    from .state import State

__all__ = ["WorkerOutput", "WorkerReports", "XdistController", "XdistWorker", "check_controller", "register",
           "worker_id"]

#: the key of ``config.workeroutput`` under which a worker hands its output to the controller
OUTPUT_KEY = "gpucomm"


def worker_id(config: pytest.Config) -> Optional[str]:
    """The pytest-xdist worker's id (``gw0``) in a worker, else None."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else str(workerinput.get("workerid", "worker"))


def is_controller(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist controller (``-n``/``--dist``), whose workers run the tests."""
    return worker_id(config) is None and getattr(config.option, "dist", "no") not in ("no", None)


def check_controller(settings: Settings) -> None:
    """A recording run under pytest-xdist is refused unless allowed: a usage error saying why."""
    if settings.baseline_save and not settings.allow_xdist:
        raise pytest.UsageError(
            "--gpu-baseline-save under pytest-xdist (-n): the workers would measure side by side and slow each "
            "other, and the baseline would keep those figures; record without -n, or pass --gpucomm-allow-xdist "
            "where each worker has devices of its own"
        )


@dataclass
class WorkerOutput:
    """What a worker sends the controller at its end (as plain JSON values: execnet carries no other
    types)."""

    records: list[Record] = field(default_factory=list)
    fingerprint: Optional[dict[str, Any]] = None
    headline: Optional[str] = None  # the hardware line of the summary
    notes: list[str] = field(default_factory=list)
    baseline: Optional[dict[str, Any]] = None  # the JSON report's "baseline" section, as the worker saw it
    baseline_path: Optional[str] = None  # the baseline file the worker judged against
    gate_header: list[str] = field(default_factory=list)  # the gate's header lines, but the first

    def to_json(self) -> dict[str, Any]:
        data = {
            "records": [{"nodeid": r.nodeid, "measurement": r.measurement.to_dict(with_samples=True),
                         "checks": r.checks, "status": str(r.status), "baseline": r.baseline} for r in self.records],
            "fingerprint": self.fingerprint, "headline": self.headline, "notes": self.notes,
            "baseline": self.baseline, "baseline_path": self.baseline_path, "gate_header": self.gate_header,
        }
        return dict(json.loads(json.dumps(data)))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "WorkerOutput":
        from ..measurement import Measurement

        records = [Record(nodeid=r["nodeid"], measurement=Measurement.from_dict(r["measurement"]),
                          checks=list(r["checks"]), status=Status(r["status"]), baseline=r["baseline"])
                   for r in data.get("records", [])]
        return cls(records=records, fingerprint=data.get("fingerprint"), headline=data.get("headline"),
                   notes=list(data.get("notes", [])), baseline=data.get("baseline"),
                   baseline_path=data.get("baseline_path"), gate_header=list(data.get("gate_header") or []))


@dataclass
class WorkerReports:
    """What the controller gathered from its workers: of each, the first worker's that had one, and how many
    workers measured."""

    fingerprint: Optional[dict[str, object]] = None
    headline: Optional[str] = None
    baseline: Optional[dict[str, Any]] = None
    baseline_path: Optional[str] = None
    gate_header: list[str] = field(default_factory=list)
    workers: int = 0

    def add(self, output: WorkerOutput) -> None:
        self.fingerprint = self.fingerprint or output.fingerprint
        self.headline = self.headline or output.headline
        self.baseline = self.baseline or output.baseline
        self.baseline_path = self.baseline_path or output.baseline_path
        self.gate_header = self.gate_header or output.gate_header
        self.workers += 1 if output.records else 0


def worker_output(state: "State") -> WorkerOutput:
    """This worker's output: its records, fingerprint, notes and what the gate said."""
    from .reporting import baseline_extra

    measured = bool(state.records)
    gate = state.judging.gate if state.settings.baseline else None
    return WorkerOutput(
        records=list(state.records),
        fingerprint=state.fingerprint if measured else None,
        headline=state.headline() if measured else None,
        notes=list(state.notes),
        baseline=baseline_extra(state) if measured else None,
        baseline_path=str(gate.path) if gate is not None and gate.path is not None else None,
        gate_header=gate.header_lines()[1:] if gate is not None and gate.loaded else [],
    )


class XdistWorker:
    """A pytest-xdist worker: hands its output to the controller once the session's end has saved its cases."""

    def __init__(self, state: "State") -> None:
        self.state = state

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """After the plugin's own (``tryfirst``), which saved this worker's cases into the baseline; before
        pytest-xdist sends the output (its hook wraps every other)."""
        session.config.workeroutput[OUTPUT_KEY] = worker_output(self.state).to_json()  # type: ignore[attr-defined]


class XdistController:
    """A pytest-xdist controller: takes each worker's output as it finishes, and orders the rows as the tests
    finished (not by worker) before the reports are written."""

    def __init__(self, state: "State") -> None:
        self.state = state

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """A worker finished: take its records for the table and reports."""
        data = getattr(node, "workeroutput", {}).get(OUTPUT_KEY)
        if data:
            self.add(WorkerOutput.from_json(data))

    def add(self, output: WorkerOutput) -> None:
        state = self.state
        state.records += output.records
        if state.from_workers.fingerprint is None and output.fingerprint:  # the run's, as the workers saw it
            state.devices.fingerprint = dict(output.fingerprint)
        state.from_workers.add(output)
        state.notes += output.notes

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before the plugin's own (also ``tryfirst``, registered earlier): the rows in the order the tests
        finished."""
        order = self.state.progress.report_order
        self.state.records.sort(key=lambda r: order.get(r.nodeid, len(order)))


def register(config: pytest.Config, state: "State") -> None:
    """Register this process's side of pytest-xdist, if any; the controller also follows the tests' progress
    (the order of the rows)."""
    if state.worker is not None:
        config.pluginmanager.register(XdistWorker(state), "gpucomm-xdist-worker")
    elif is_controller(config):
        config.pluginmanager.register(XdistController(state), "gpucomm-xdist-controller")
