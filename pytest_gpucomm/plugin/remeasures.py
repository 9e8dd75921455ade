"""The gate's re-measures of flagged cases: in a fresh process state while the session has fresh re-measures
left (``vocab.MAX_FRESH_REMEASURES``, copies and collectives together), else in the current one; a copy's
fresh re-measure runs in a new process of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from .. import vocab
from .devices import Devices
from .pools import RankPools
from .settings import Settings

if TYPE_CHECKING:
    from ..measurement import Measurement, Remeasure

__all__ = ["Remeasures"]


class Remeasures:
    """The session's re-measures; ``count`` is how many were made fresh."""

    def __init__(self, settings: Settings, devices: Devices, pools: RankPools) -> None:
        self.settings = settings
        self.devices = devices
        self.pools = pools
        self.count = 0  # the gate's re-measures made in a new process or process group

    def remeasure(self, fresh: Callable[[], "Measurement"], same: Callable[[], "Measurement"], fresh_how: str,
                  same_how: str) -> "Remeasure":
        """One re-measure of a flagged case: by ``fresh`` (in a new process or process group) for the first
        ``vocab.MAX_FRESH_REMEASURES`` of the session, copies and collectives together, else by ``same``
        (in the current state): each fresh one costs a process start, and a change that slowed every case
        would otherwise pay one per case.  ``fresh_how`` / ``same_how`` say where it was measured."""
        from ..measurement import Remeasure

        limit = vocab.MAX_FRESH_REMEASURES  # read at each call (tests lower it)
        if self.count < limit:
            self.count += 1  # counted when started: a failed start cost a process start too
            return Remeasure(fresh(), fresh=True, how=fresh_how)
        return Remeasure(same(), fresh=False,
                         how=f"{same_how}: the session's {limit} fresh re-measures were used up")

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
            kwargs = dict(spec, timing=dataclasses.asdict(self.settings.timing()))
            (result,) = ProcessGroup(pool, self.devices.info.backend, self.settings.timeout_s, what).run(
                "pytest_gpucomm.ops.copies:bench_copy", kwargs, label=what)
        finally:
            pool.close()
        return Measurement.from_dict(result)
