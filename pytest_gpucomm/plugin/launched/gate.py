"""Launched mode's gate: global rank 0 reads the baseline and judges, and every other rank follows its
messages, re-measuring when it says so (every rank measures again together) and taking its verdicts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Optional

import pytest

from ...measurement import Record
from ...vocab import Status
from ..devices import Devices
from ..judging import Judging
from ..settings import Settings
from .agreement import agree_to_judge
from .exchange import JobExchange
from .job import LaunchedSession

if TYPE_CHECKING:
    from ...measurement import Measurement, Remeasure

__all__ = ["JobJudging"]


class JobJudging(Judging):
    """The session's gate in a launched job (:class:`~..judging.Judging` on global rank 0; ``speaks``: this
    is rank 0).  Before the job is joined (no gpucomm test collected), as the rank pool's."""

    def __init__(self, config: pytest.Config, settings: Settings, devices: Devices, session: LaunchedSession,
                 speaks: bool) -> None:
        super().__init__(config, settings, devices)
        self.session = session
        self.speaks = speaks
        #: on a rank other than 0: the gate runs on rank 0 and this rank follows its decisions
        self.follows = False

    @property
    def gates(self) -> bool:
        """Whether each test's records are judged: the baseline is loaded here, or rank 0 judges and this
        rank follows."""
        return self.gate.loaded or self.follows

    def load(self, nodeids: set[str]) -> None:
        """Read the baseline on global rank 0 only, which tells every rank whether it could (a missing or
        corrupt baseline stops every rank with rank 0's message); the others follow it."""
        if not self.session.started:
            return super().load(nodeids)
        problem = None
        if self.speaks:
            try:
                super().load(nodeids)
            except pytest.UsageError as e:
                problem = str(e)
        problem = self.session.channel.broadcast(problem)
        if problem:
            raise pytest.UsageError(problem if self.speaks
                                    else f"{problem} (on global rank 0, which reads the baseline)")
        self.follows = not self.speaks

    def agree_to_judge(self, ok: bool, n_records: int) -> bool:
        """Every rank enters the gate or none (:func:`.agreement.agree_to_judge`)."""
        if not (self.gates and self.session.started):
            return ok
        return agree_to_judge(self.session.channel, ok, n_records)

    def judge(self, records: list[Record], tolerance: Optional[float],
              tail_tolerance: Optional[float] = None) -> list[str]:
        """The gate runs on global rank 0, which sends every rank each re-measure before it makes it (every
        rank measures again together) and then the verdicts; the others follow."""
        if not self.session.started:
            return super().judge(records, tolerance, tail_tolerance)
        channel = self.session.channel
        if not self.speaks:
            return _follow(channel, records)

        def leading(i: int, redo: Callable[[], "Remeasure"]) -> Callable[[], "Remeasure"]:
            def again() -> "Remeasure":
                channel.broadcast(("redo", i))
                return redo()
            return again

        def leading_env(i: int, with_env: Callable[[Mapping[str, Optional[str]]], "Measurement"]
                        ) -> Callable[[Mapping[str, Optional[str]]], "Measurement"]:
            def again(env: Mapping[str, Optional[str]]) -> "Measurement":  # every rank sets them back together
                channel.broadcast(("env", i, dict(env)))
                return with_env(env)
            return again

        for i, r in enumerate(records):
            if r.with_env is not None:
                r.with_env = leading_env(i, r.with_env)
        try:
            failures = self.judge_with(records, tolerance,
                                       [None if r.redo is None else leading(i, r.redo) for i, r in enumerate(records)],
                                       tail_tolerance)
        except BaseException as e:
            channel.broadcast(("error", f"{type(e).__name__}: {e}"))
            raise
        channel.broadcast(("done", [(r.baseline, str(r.status)) for r in records], failures))
        return failures


def _follow(channel: JobExchange, records: list[Record]) -> list[str]:
    """A rank other than 0: re-measure when rank 0 says, then take its verdicts."""
    own: Optional[BaseException] = None  # a re-measure that failed here: raised once rank 0 has spoken
    while True:
        message = channel.broadcast()
        if message[0] in ("redo", "env"):
            try:
                record = records[message[1]]
                if message[0] == "redo":
                    record.redo()
                elif record.with_env is not None:
                    record.with_env(message[2])
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # pytest.fail's too; on every rank alike (a task's error is every
                own = own or e          # rank's): rank 0's "error" comes next, read here, not by the next
            continue                    # exchange
        if own is not None:
            raise own
        if message[0] == "error":
            pytest.fail(f"gpucomm: the gate failed on global rank 0: {message[1]}", pytrace=False)
        for r, (baseline, status) in zip(records, message[1]):
            r.baseline, r.status = baseline, Status(status)
        return list(message[2])
