"""Why a case got slower: the likely causes a verdict names, and the cause test of the environment.

:func:`likely_causes` lists, for a verdict, each change of a GPU or link since the baseline that can slow its case
(:mod:`pytest_gpucomm.env.device_state`) and a device that throttled while the case was measured
(:mod:`pytest_gpucomm.ops.clocks`).

The cause test finds which environment variable made a case slower.

When a case fails as REGRESSION and the run's environment differs from the baseline's (the ``env`` part of the
fingerprint, :mod:`pytest_gpucomm.env.variables`), the case is measured again in a fresh process (a copy) or a
fresh process group (a collective) with the differing variables set back to the baseline's values, and the
verdict says which one brought it back: ``cause: OMP_NUM_THREADS=1 (restored to 2: 1.01x of the baseline)``.
This never changes a verdict; it explains it.

The search, within a budget of :data:`DEFAULT_BUDGET` re-measures per case:

1. one variable differs: it alone is restored (one re-measure);
2. several differ: all of them are restored at once first.  If that does not bring the case back, no
   restoration of the environment will (the cause lies in what the environment does not hold: the driver,
   a library, the hardware) and the search stops after one re-measure.  If it does, each variable is restored
   alone, in the order of :func:`likely_first` (the collective libraries' own variables first), until one
   brings the case back or the budget is spent; where none does alone, the cause is the variables together.

"Back" means the re-measured ratio to the baseline is at least ``1 - tolerance``: the case would not have
been a regression by its median.  Each re-measure is one more process start; the budget bounds what the
test costs (about 3.5 s per copy process on an H200, a pool start per collective).  Pure logic: how to
measure with an environment is the caller's (:class:`Remeasurer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from ..env.device_state import DeviceChange
    from ..measurement import Measurement

__all__ = ["DEFAULT_BUDGET", "EnvChange", "Attempt", "CauseResult", "env_changes", "likely_first", "find_cause",
           "likely_causes"]

#: re-measures the cause test may make per case
DEFAULT_BUDGET = 4

#: name prefixes tried first when several variables differ (the communication libraries' own settings)
_FIRST = ("NCCL_", "RCCL_", "TORCH_NCCL_", "UCX_", "FI_", "NVSHMEM_", "GLOO_", "HSA_", "HIP_", "CUDA_", "OMP_")


@dataclass(frozen=True)
class EnvChange:
    """A variable whose value today differs from the baseline's; None: not set on that side."""

    name: str
    baseline: Optional[str]
    now: Optional[str]

    def now_text(self) -> str:
        return f"{self.name}={self.now}" if self.now is not None else f"{self.name} unset"

    def restored_text(self) -> str:
        return f"restored to {self.baseline}" if self.baseline is not None else "unset again"


@dataclass(frozen=True)
class Attempt:
    """One re-measure: the variables restored and the ratio to the baseline it gave (None: it failed)."""

    restored: tuple[str, ...]
    ratio: Optional[float]
    error: Optional[str] = None


@dataclass(frozen=True)
class CauseResult:
    """What the cause test found for one case."""

    changes: tuple[EnvChange, ...]
    attempts: tuple[Attempt, ...] = ()
    cause: tuple[str, ...] = ()  # the variables whose restoration brought it back; () when none did
    budget: int = DEFAULT_BUDGET
    skipped: Optional[str] = None  # why the test did not run

    def text(self) -> str:
        """One line for the verdict: the cause, or that none was found and what was tried."""
        if self.skipped:
            return f"cause test not run: {self.skipped}"
        by_name = {c.name: c for c in self.changes}
        back = next((a for a in self.attempts if a.restored == self.cause), None) if self.cause else None
        if back is not None and back.ratio is not None:
            if len(self.cause) == 1:
                c = by_name[self.cause[0]]
                return f"cause: {c.now_text()} ({c.restored_text()}: {back.ratio:.2f}x of the baseline)"
            names = ", ".join(by_name[n].now_text() for n in self.cause)
            return f"cause: these together: {names} (all restored: {back.ratio:.2f}x of the baseline)"
        tried = "; ".join(_attempt_text(a, by_name) for a in self.attempts) or "nothing"
        return f"no restoration of the environment brings it back (tried: {tried})"

    def to_dict(self) -> dict[str, object]:
        return {"changes": [[c.name, c.baseline, c.now] for c in self.changes],
                "attempts": [{"restored": list(a.restored), "ratio": a.ratio, "error": a.error}
                             for a in self.attempts],
                "cause": list(self.cause), "budget": self.budget, "skipped": self.skipped, "text": self.text()}


def _attempt_text(a: Attempt, by_name: Mapping[str, EnvChange]) -> str:
    what = ("all " + str(len(a.restored)) if len(a.restored) > 1 and len(a.restored) == len(by_name)
            else ", ".join(f"{n} {by_name[n].restored_text()}" for n in a.restored))
    return f"{what}: {a.ratio:.2f}x" if a.ratio is not None else f"{what}: {a.error or 'failed'}"


def env_changes(diff: Sequence[tuple[str, object, object]], absent: object = None) -> list[EnvChange]:
    """The environment variables among the differences of two fingerprints (``env.NAME`` keys of
    :func:`pytest_gpucomm.env.fingerprint.diff_fingerprints`; ``absent`` stands for a missing side)."""
    out = []
    for key, old, new in diff:
        if not key.startswith("env.") or key.count(".") != 1:
            continue
        out.append(EnvChange(key[4:], None if old is absent else str(old), None if new is absent else str(new)))
    return out


def likely_first(changes: Sequence[EnvChange]) -> list[EnvChange]:
    """The order in which single variables are tried: the communication libraries' settings first."""
    def rank(c: EnvChange) -> tuple[int, str]:
        return next((i for i, p in enumerate(_FIRST) if c.name.startswith(p)), len(_FIRST)), c.name

    return sorted(changes, key=rank)


#: measures the case with these variables set back to the baseline's values (a name mapped to None is
#: unset), in a fresh process or process group; returns the ratio of the measurement to the baseline
Remeasurer = Callable[[Mapping[str, Optional[str]]], float]


def find_cause(changes: Sequence[EnvChange], remeasure: Remeasurer, tolerance: float,
               budget: int = DEFAULT_BUDGET) -> CauseResult:
    """Run the search of the module docstring.  A re-measure that raises is an attempt that failed, named
    with its error; it counts against the budget."""
    changes = tuple(changes)
    if not changes:
        return CauseResult(changes=(), skipped="the environment is the baseline's", budget=budget)
    if budget < 1:
        return CauseResult(changes=changes, skipped="no re-measures allowed (budget 0)", budget=budget)
    attempts: list[Attempt] = []
    back_at = 1.0 - tolerance

    def attempt(restore: Sequence[EnvChange]) -> Optional[float]:
        env = {c.name: c.baseline for c in restore}
        try:
            ratio: Optional[float] = float(remeasure(env))
            attempts.append(Attempt(tuple(c.name for c in restore), ratio))
        except Exception as e:  # noqa: BLE001 - a failed re-measure is reported, never fatal
            ratio = None
            attempts.append(Attempt(tuple(c.name for c in restore), None, f"{type(e).__name__}: {e}"))
        return ratio

    def result(cause: Sequence[EnvChange] = ()) -> CauseResult:
        return CauseResult(changes=changes, attempts=tuple(attempts), cause=tuple(c.name for c in cause),
                           budget=budget)

    if len(changes) == 1:
        r = attempt(changes)
        return result(changes if r is not None and r >= back_at else ())
    r = attempt(changes)
    if r is None or r < back_at:
        return result()
    for c in likely_first(changes):
        if len(attempts) >= budget:
            break
        r = attempt([c])
        if r is not None and r >= back_at:
            return result([c])
    return result(changes)


def likely_causes(changes: Sequence["DeviceChange"], m: Measurement, measured: Sequence[Measurement],
                  fingerprint: Optional[Mapping[str, object]] = None) -> list[str]:
    """The lines a verdict adds for the case measured as ``m`` (and again as ``measured``): each of the device
    ``changes`` (``env.device_state.DeviceChange``) that can slow it, a host<->device copy's PCIe link that ran
    below what today's ``fingerprint`` says it can, and the first run that throttled."""
    from ..env.clocks import ClockSummary, throttle_text
    from ..env.device_state import affects, pcie_under_load

    lines = [f"{c.text}: a likely cause" for c in changes if affects(c, m.op, m.devices, m.kind)]
    if getattr(m, "op", None) in ("h2d", "d2h"):
        clocks = (getattr(m, "info", None) or {}).get("clocks") or []
        for c in clocks if isinstance(clocks, list) else []:
            s = ClockSummary.from_dict(c) if isinstance(c, dict) else None
            slow = pcie_under_load(fingerprint, s.device, s.pcie) if s is not None else None
            if slow:
                lines.append(f"{slow}: a likely cause")
    for x in measured:
        text = throttle_text(getattr(x, "info", None))
        if text:
            lines.append(f"measured while {text}: a likely cause")
            break
    return lines
