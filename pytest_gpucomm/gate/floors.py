"""A published case: one that has only a floor (a figure from a vendor's or a paper's table) and no measured
run, checked against floor x (1 - tolerance) after the same re-measures as a measured case (the last
paragraph of :data:`pytest_gpucomm.gate.decision.DECISION_RULE`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from ..vocab import DEFAULT_MAX_REMEASURES, DEFAULT_TOLERANCE, Status
from .decision import RunLocation, check_tolerance

__all__ = ["FloorCheck", "check_floor"]


@dataclass(frozen=True)
class FloorCheck:
    """The verdict on a case that only has a published floor (no measured baseline runs)."""

    status: Status  # FLOOR_OK | FLOOR
    current_median_gbps: float
    floor_gbps: float
    ratio: float  # current median / floor (pooled over the re-measures)
    tolerance: float
    runs_now: int
    reason: str

    @property
    def failed(self) -> bool:
        return self.status is Status.FLOOR


def check_floor(first: RunLocation, floor_gbps: float,
                measure_again: Optional[Callable[[], tuple[RunLocation, bool]]] = None,
                *, tolerance: float = DEFAULT_TOLERANCE, max_remeasures: int = DEFAULT_MAX_REMEASURES) -> FloorCheck:
    """A case with a published floor: FLOOR when the median bandwidth is below floor * (1 - t),
    after the same re-measures as a measured case (pooled: the mean of the runs' log medians)."""
    tolerance = check_tolerance(tolerance)
    floor = float(floor_gbps)
    if not math.isfinite(floor) or floor <= 0:
        raise ValueError(f"floor_gbps must be a positive number, got {floor_gbps!r}")
    limit = math.log(floor * (1.0 - tolerance))
    runs = [first]
    while measure_again is not None and len(runs) <= max_remeasures and sum(r.loc for r in runs) / len(runs) < limit:
        runs.append(measure_again()[0])
    loc = sum(r.loc for r in runs) / len(runs)
    med = math.exp(loc)
    ratio = med / floor
    where = (f"{ratio - 1:+.1%} from the published floor {floor:.4g} GB/s" if ratio < 1 else
             f"{ratio - 1:.1%} above the published floor {floor:.4g} GB/s")
    of = f"median {med:.4g} GB/s" + (f" (mean of {len(runs)} runs)" if len(runs) > 1 else "")
    if loc < limit:
        status = Status.FLOOR
        reason = f"{of} is {where}, beyond the {tolerance:.0%} tolerance"
    else:
        status = Status.FLOOR_OK
        reason = f"{of} is {where}" + (f", within the {tolerance:.0%} tolerance" if ratio < 1 else "")
    return FloorCheck(status=status, current_median_gbps=med, floor_gbps=floor, ratio=ratio, tolerance=tolerance,
                      runs_now=len(runs), reason=reason)
