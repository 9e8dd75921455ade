"""The gate's re-measures of flagged cases: in a fresh process state while the session has fresh re-measures
left (``vocab.MAX_FRESH_REMEASURES``, copies and collectives together), else in the current one; a copy's
fresh re-measure runs in a new process of its own.  None starts sooner than ``--gpu-remeasure-after`` seconds
after the session's first flagged run (the session waits once at most)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from .. import vocab
from .devices import Devices
from .pools import RankPools

if TYPE_CHECKING:
    from ..measurement import Measurement, Remeasure
    from ..ops.timing import TimingSettings

__all__ = ["Remeasures"]


class Remeasures:
    """The session's re-measures; ``count`` is how many were made fresh.

    Of the session's settings: ``remeasure_after_s`` (--gpu-remeasure-after), ``baseline_save``
    (--gpu-baseline-save: a recording run never waits), ``timeout_s`` (a fresh copy's process group's) and
    ``timing`` (``Settings.timing``: the timing settings of a fresh copy's measurement)."""

    def __init__(self, devices: Devices, pools: RankPools, *, remeasure_after_s: float, baseline_save: bool,
                 timeout_s: float, timing: Callable[[], "TimingSettings"],
                 say: Callable[[str], None] = lambda line: None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.remeasure_after_s = remeasure_after_s
        self.baseline_save = baseline_save
        self.timeout_s = timeout_s
        self.timing = timing
        self.devices = devices
        self.pools = pools
        self.count = 0  # the gate's re-measures made in a new process or process group
        self.say = say  # a line for the terminal, while the session waits
        self.clock = clock
        self.sleep = sleep
        self.first_flagged: Optional[float] = None  # when the session's first re-measure was asked for

    def remeasure(self, fresh: Optional[Callable[[], "Measurement"]], same: Callable[[], "Measurement"],
                  fresh_how: str, same_how: str, nodeid: str = "") -> "Remeasure":
        """One re-measure of a flagged case, once :meth:`wait` has let it: by ``fresh`` (in a new process or
        process group) for the first ``vocab.MAX_FRESH_REMEASURES`` of the session, copies and collectives
        together, else by ``same`` (in the current state): each fresh one costs a process start, and a change
        that slowed every case would otherwise pay one per case.  Without ``fresh`` (a state that cannot be
        made anew) always by ``same``.  ``fresh_how`` / ``same_how`` say where it was measured (and why not
        fresh), and the re-measure's ``how`` says how long it waited."""
        from ..measurement import Remeasure

        waited = self.wait(nodeid)
        later = f", {waited:.0f} s later (--gpu-remeasure-after)" if waited >= 0.5 else ""
        limit = vocab.MAX_FRESH_REMEASURES  # read at each call (tests lower it)
        if fresh is None:
            return Remeasure(same(), fresh=False, how=same_how + later)
        if self.count < limit:
            self.count += 1  # counted when started: a failed start cost a process start too
            return Remeasure(fresh(), fresh=True, how=fresh_how + later)
        return Remeasure(same(), fresh=False,
                         how=f"{same_how}{later}: the session's {limit} fresh re-measures were used up")

    def wait(self, nodeid: str = "") -> float:
        """Before a re-measure: sleep until ``--gpu-remeasure-after`` seconds have passed since the session's
        first re-measure was asked for (the first flagged run), saying so on the terminal; the seconds slept
        (0 once they have passed).  A slow state of the host that outlasts the wait is measured as it is.  A
        recording run (--gpu-baseline-save), whose verdicts fail nothing, never waits."""
        if self.baseline_save:
            return 0.0
        now = self.clock()
        if self.first_flagged is None:
            self.first_flagged = now
        wait_s = self.first_flagged + self.remeasure_after_s - now
        if wait_s <= 0:
            return 0.0
        self.say(f"gpucomm: {nodeid or 'a case'} ran below the tolerance; measuring it again in {wait_s:.0f} s "
                 f"(--gpu-remeasure-after), so that a slow state of a minute or two does not decide")
        self.sleep(wait_s)
        return wait_s

    def copy_in_new_process(self, spec: dict[str, Any], label: str = "",
                            env: Optional[Mapping[str, Optional[str]]] = None) -> "Measurement":
        """Measure the copy ``spec`` (``ops.copies.copy_spec``) in a new process -- new streams, buffers and
        timing state -- started for it as a one-rank pool (the session's backend, device type and worker
        environment, changed by ``env``: the cause test's) and closed right after.  Its rank 0 selects device
        0, and the copy addresses its devices by index, so a copy between any two devices works.  A failing,
        hanging or dying process fails the test as a failing rank of a collective does (with its traceback,
        stack or exit code)."""
        import dataclasses

        from .group import ProcessGroup
        from ..measurement import Measurement

        pool = self.pools.new_pool(1, env)
        what = f"{label}: fresh re-measure of {spec['copy']} copy {'->'.join(spec['devices'])}"
        try:
            kwargs = dict(spec, timing=dataclasses.asdict(self.timing()))
            (result,) = ProcessGroup(pool, self.devices.info.backend, self.timeout_s, what).run(
                "pytest_gpucomm.ops.copies:bench_copy", kwargs, label=what)
        finally:
            pool.close()
        return Measurement.from_dict(result)
