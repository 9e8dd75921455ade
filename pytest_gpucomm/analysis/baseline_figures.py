"""What the views draw of a baseline file: its name and runs, each case's figure, its single-op sketches and
per-iteration figures, and its sweeps -- read from the file's document once, in one place.

The copy matrices (``matrices.cell_baseline``), the plots (the sweeps' band, the matrices' ratios, the
latency figures) and the curves' comparison (``curves.sweeps_from_baseline``) all ask a
:class:`BaselineFigures` instead of reaching into the document on their own.  A case is found by the key the
gate uses (``vocab.case_key``, with the report's layout across nodes).

**A case's figure** (:attr:`CaseFigures.median_gbps`): the median over its runs of each run's median GB/s
(the run's summary, else the median of its per-iteration figures), as the plots and
``curves.sweeps_from_baseline`` take it; a case with no measured run has its published floor instead
(:attr:`CaseFigures.floor_gbps`).

Pure: no torch, no pytest; numpy for the sweeps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping, Optional

from ..vocab import case_key

if TYPE_CHECKING:
    from .curves import Sweep

__all__ = ["BASELINE_SCHEMA", "BaselineFigures", "CaseFigures", "as_figures"]

#: the ``schema`` of a baseline file (``gate.store``)
BASELINE_SCHEMA = "pytest-gpucomm-baseline"


def _run_median(run: Mapping[str, Any]) -> Optional[float]:
    summary = run.get("summary") or {}
    if summary.get("median_gbps"):
        return float(summary["median_gbps"])
    samples = run.get("samples_gbps") or []
    return float(statistics.median(samples)) if samples else None


@dataclass(frozen=True)
class CaseFigures:
    """One case of a baseline file: ``median_gbps`` the median of its runs' medians (None without a measured
    run), ``floor_gbps`` its published floor (None without one), ``tails`` each run's single-op tail sketch
    that has one (``(run id, sketch as saved)``), ``samples_gbps`` each run's per-iteration figures."""

    median_gbps: Optional[float]
    floor_gbps: Optional[float]
    tails: tuple[tuple[str, Mapping[str, object]], ...]
    samples_gbps: tuple[tuple[float, ...], ...]

    @classmethod
    def of(cls, case: Mapping[str, Any]) -> "CaseFigures":
        runs = [r for r in case.get("runs") or [] if isinstance(r, Mapping)]
        medians = [m for m in (_run_median(r) for r in runs) if m]
        floor = case.get("floor_gbps")
        return cls(median_gbps=float(statistics.median(medians)) if medians else None,
                   floor_gbps=float(floor) if isinstance(floor, (int, float)) and floor > 0 else None,
                   tails=tuple((str(r.get("run_id", i)), r["tail"]) for i, r in enumerate(runs)
                               if isinstance(r.get("tail"), Mapping)),
                   samples_gbps=tuple(tuple(float(g) for g in r["samples_gbps"]) for r in runs
                                      if r.get("samples_gbps")))


@dataclass(frozen=True, eq=False)
class BaselineFigures:
    """A baseline file's figures, for the views (see the module doc): made by :meth:`of` from the file's
    document, which it checks is a baseline's."""

    name: str
    n_runs: int
    document: Mapping[str, Any]

    @classmethod
    def of(cls, baseline: object) -> "BaselineFigures":
        """The figures of a baseline document; ValueError naming what was found where it is not one (a
        report given as the baseline, another format, no cases)."""
        if not isinstance(baseline, Mapping):
            raise ValueError(f"not a pytest-gpucomm baseline: a {type(baseline).__name__}, not a JSON object")
        if baseline.get("schema") != BASELINE_SCHEMA:
            found = (f"format {baseline.get('format')!r}" if "format" in baseline and "schema" not in baseline
                     else f"schema {baseline.get('schema')!r}")
            raise ValueError(f"not a pytest-gpucomm baseline: {found} (a baseline says schema {BASELINE_SCHEMA!r})")
        if not isinstance(baseline.get("cases"), Mapping):
            raise ValueError(f"baseline {baseline.get('name', '?')!r}: no cases")
        return cls(name=str(baseline.get("name", "?")), n_runs=len(baseline.get("runs") or []), document=baseline)

    def case(self, test: str, op: str, size_bytes: int, dtype: Optional[str], world_size: int,
             layout: str = "") -> Optional[CaseFigures]:
        """The case of a measurement (by the gate's key, ``vocab.case_key``), None where the baseline
        lacks it."""
        case = (self.document.get("cases") or {}).get(case_key(test, op, int(size_bytes), dtype, int(world_size),
                                                               layout))
        return CaseFigures.of(case) if isinstance(case, Mapping) else None

    def cell(self, test: str, op: str, size_bytes: int, dtype: Optional[str], world_size: int,
             layout: str = "") -> tuple[Optional[float], bool]:
        """(the baseline's figure of a case, whether it is a published floor): its runs' figure, else its
        floor; (None, False) where the baseline lacks the case or has neither."""
        case = self.case(test, op, size_bytes, dtype, world_size, layout)
        if case is None:
            return None, False
        if case.median_gbps is not None:
            return case.median_gbps, False
        return (case.floor_gbps, True) if case.floor_gbps is not None else (None, False)

    @cached_property
    def sweeps(self) -> dict[tuple[object, ...], "Sweep"]:
        """The baseline's sweeps (``curves.sweeps_from_baseline``) by the first five parts of their key (test id
        without the size, op, devices, world size, dtype): the part a report's sweep shares with it."""
        from .curves import sweeps_from_baseline

        return {s.key[:5]: s for s in sweeps_from_baseline(self.document)}


def as_figures(baseline: "BaselineFigures | Mapping[str, object] | None") -> Optional[BaselineFigures]:
    """``baseline`` as figures: None, figures, or a baseline document read (:meth:`BaselineFigures.of`)."""
    if baseline is None or isinstance(baseline, BaselineFigures):
        return baseline
    return BaselineFigures.of(baseline)
