"""The regression gate: load the baseline, judge every measurement against it, save the run.

Per measured case with a baseline entry the verdict is one of

* ``ok``         -- no significant change beyond the tolerance;
* ``REGRESSION`` -- significantly slower AND slower than the tolerance (re-measured once first); fails;
* ``improved``   -- significantly faster beyond the tolerance; passes and is reported;
* ``noisy``      -- the baseline's own run-to-run spread is too wide to hold the tolerance; passes;
* ``new``        -- no entry in the baseline; passes, or fails with ``--gpu-baseline-strict``;
* ``floor``      -- a published case: the median must reach the published floor.

The statistics are in :mod:`pytest_gpucomm.stats` (the rule is ``stats.DECISION_RULE``).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from .measurement import Measurement
from .units import describe_size

__all__ = ["GateSettings", "Gate", "Verdict"]


@dataclass(frozen=True)
class GateSettings:
    spec: Optional[str]  # NAME | PATH | auto, None: no baseline
    save: bool
    search_dirs: tuple[Path, ...]
    max_runs: int
    tolerance: float
    alpha: float
    strict: bool


@dataclass
class Verdict:
    status: str  # ok | REGRESSION | improved | noisy | new | floor-ok | FLOOR
    baseline_gbps: Optional[float] = None
    ratio: Optional[float] = None
    ci: Optional[tuple[float, float]] = None
    p_value: Optional[float] = None
    message: str = ""
    remeasured: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status in ("REGRESSION", "FLOOR", "NEW")

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "baseline_gbps": self.baseline_gbps,
            "ratio": self.ratio,
            "ci95": list(self.ci) if self.ci else None,
            "p_value": self.p_value,
            "remeasured": self.remeasured,
            "message": self.message,
            **self.details,
        }


class Gate:
    """Holds the loaded baseline for the session and judges measurements."""

    def __init__(self, settings: GateSettings) -> None:
        self.settings = settings
        self.path: Optional[Path] = None
        self.baseline: Any = None  # baseline.Baseline, or None when the file does not exist yet
        self.n_comparisons = 1
        self.env_diff: list[tuple[str, Any, Any]] = []
        # pytest-xdist workers of one session share its run id, so their saves make one run of the file
        self.run_id = (os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex)[:12]

    @property
    def active(self) -> bool:
        return self.settings.spec is not None

    @property
    def loaded(self) -> bool:
        """The baseline file was resolved (it may not exist yet when this run saves it)."""
        return self.path is not None

    # -- set-up, after collection ------------------------------------------------------------------
    def load(self, detected_model: Optional[str], fingerprint: dict[str, Any], nodeids: set[str]) -> None:
        """Resolve and read the baseline; errors become usage errors that name the file."""
        from .baseline import VOLATILE_KEYS, BaselineError, diff_fingerprints, load_baseline, resolve_baseline

        spec = self.settings.spec
        assert spec is not None
        try:
            self.path = resolve_baseline(spec, search_dirs=list(self.settings.search_dirs),
                                         detected_model=detected_model, must_exist=not self.settings.save)
            if self.path.exists() or not self.settings.save:
                self.baseline = load_baseline(self.path)
        except BaselineError as e:
            raise pytest.UsageError(f"--gpu-baseline={spec}: {e}") from None
        if self.baseline is not None:
            # floor-only cases are checked against their floor, not tested: they spend no alpha
            gated = sum(1 for e in self.baseline.cases.values() if e.has_runs and e.test_id in nodeids)
            self.n_comparisons = max(1, gated)
            # another host of the same kind (a CI runner pool) is not an environment change
            self.env_diff = diff_fingerprints(self.baseline.latest_fingerprint(), fingerprint,
                                              ignore=VOLATILE_KEYS | {"host"})

    def header_lines(self) -> list[str]:
        from .baseline import format_fingerprint_diff

        if not self.active or self.path is None:
            return []
        if self.baseline is None:
            return [f"gpucomm baseline: {self.path} does not exist yet; this run will create it (--gpu-baseline-save)"]
        b = self.baseline
        last = b.runs[-1].date if b.runs else "never"
        runs = f"{len(b.runs)} run{'' if len(b.runs) == 1 else 's'}"
        most = max((len(e.runs) for e in b.cases.values()), default=0)
        if 0 < most < len(b.runs):  # runs that saved only some cases, or older runs beyond K for some
            runs += f", at most {most} per case"
        lines = [
            f"gpucomm baseline: {self.path} ({b.source}, {runs}, {len(b.cases)} cases, last recorded "
            f"{last}); {self.n_comparisons} gated comparisons, alpha {self.settings.alpha:g} (Bonferroni), "
            f"tolerance {self.settings.tolerance:.0%}"
        ]
        if b.source == "published":
            lines.append(f"gpucomm baseline source: {b.source_detail}")
        if b.runs:
            if self.env_diff:
                lines.append("gpucomm environment changed since the baseline: " + format_fingerprint_diff(self.env_diff))
            else:
                lines.append("gpucomm environment: same as when the baseline was recorded")
        return lines

    # -- the decision ------------------------------------------------------------------------------
    def judge(self, nodeid: str, m: Measurement, tolerance: Optional[float],
              remeasure: Optional[Callable[[], Measurement]]) -> Verdict:
        from .baseline import case_key, format_fingerprint_diff
        from .stats import check_floor, compare

        if self.baseline is None:
            return Verdict("new", message="no baseline yet")
        key = case_key(nodeid, m.op, m.size_bytes, m.dtype, m.world_size)
        entry = self.baseline.cases.get(key)
        if entry is None:
            return Verdict("NEW" if self.settings.strict else "new", message=f"no entry for {key} in {self.path}")
        tol = self.settings.tolerance if tolerance is None else tolerance
        if entry.floor_only:
            fc = check_floor(m.samples_gbps, entry.floor_gbps)
            v = Verdict("floor-ok" if not fc.failed else "FLOOR", baseline_gbps=entry.floor_gbps,
                        ratio=fc.ratio, message=fc.reason)
            if fc.failed:
                v.message = (f"below the published floor: {self._what(m)}: measured {fc.current_median_gbps:.2f} GB/s "
                             f"(median of {fc.n_current} samples), published floor {fc.floor_gbps:g} GB/s "
                             f"({fc.ratio:.3f}x); source: {self.baseline.source_detail}")
            return v
        def decide(measurement: Measurement) -> Any:
            return compare(measurement.samples_gbps, entry.runs_gbps, tolerance=tol, alpha=self.settings.alpha,
                           n_comparisons=self.n_comparisons)

        c = decide(m)
        remeasured = False
        if c.status == "regression" and remeasure is not None:
            m = remeasure()
            c = decide(m)  # the second measurement decides: a passing glitch is not a regression
            remeasured = True
        status = {"ok": "ok", "regression": "REGRESSION", "improved": "improved", "noisy": "noisy"}[c.status]
        v = Verdict(status, baseline_gbps=c.baseline_median_gbps, ratio=c.ratio, ci=(c.ci_low, c.ci_high),
                    p_value=c.p_value, remeasured=remeasured,
                    details={"alpha": c.alpha, "tolerance": c.tolerance, "run_spread": c.run_spread,
                             "baseline_runs": len(entry.runs)})
        if status == "REGRESSION":
            env = format_fingerprint_diff(self.env_diff) if self.env_diff else "nothing in the fingerprint"
            v.message = (
                f"REGRESSION: {self._what(m)}: {c.current_median_gbps:.2f} GB/s now vs {c.baseline_median_gbps:.2f} GB/s "
                f"in baseline {self.baseline.name} ({len(entry.runs)} runs): {c.ratio_text}, p = {c.p_value:.3g} "
                f"(one-sided Mann-Whitney U; alpha {self.settings.alpha:g} / {self.n_comparisons} comparisons = "
                f"{c.alpha:.3g}); drop {1 - c.ratio:.1%} > tolerance {c.tolerance:.0%}"
                f"{'; confirmed by a second measurement' if remeasured else ''}.\n"
                f"  changed since the baseline was recorded: {env}"
            )
        else:
            v.message = c.reason
        return v

    @staticmethod
    def _what(m: Measurement) -> str:
        return f"{m.op} on {m.where} at {describe_size(m.size_bytes)}"

    # -- saving ------------------------------------------------------------------------------------
    def save(self, records: list[Any], fingerprint: dict[str, Any], date: str) -> tuple[Path, int]:
        from .baseline import BaselineError, CaseRecord, save_run

        assert self.path is not None
        cases: dict[str, CaseRecord] = {}
        for r in records:
            cr = CaseRecord.from_measurement(r.measurement, r.nodeid)
            cases[cr.key] = cr  # the last measurement of a case wins (a re-measured one)
        name = self.baseline.name if self.baseline is not None else self.path.stem
        try:
            save_run(self.path, name=name, run_id=self.run_id, date=date, fingerprint=fingerprint, cases=cases,
                     max_runs=self.settings.max_runs)
        except BaselineError as e:
            raise pytest.UsageError(f"--gpu-baseline-save: {e}") from None
        return self.path, len(cases)
