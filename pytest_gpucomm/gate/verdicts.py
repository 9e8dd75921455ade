"""The gate of one pytest session: load the baseline, judge every measurement against it, save the run.

Per measured case with a baseline entry the verdict (a :class:`pytest_gpucomm.vocab.Status`) is one of

* ``ok``         -- no significant change beyond the tolerance;
* ``REGRESSION`` -- significantly slower AND slower than the tolerance (re-measured once first); fails;
* ``improved``   -- significantly faster beyond the tolerance; passes and is reported;
* ``noisy``      -- the baseline's own run-to-run spread is too wide to hold the tolerance; passes;
* ``new``        -- no entry in the baseline; passes, or ``NEW`` and fails with ``--gpu-baseline-strict``;
* ``floor-ok`` / ``FLOOR`` -- a published case: the median must reach the published floor.

The statistics are in :mod:`pytest_gpucomm.gate.decision` (the rule is ``decision.DECISION_RULE``), the
file in :mod:`pytest_gpucomm.gate.store`.  Both are imported on first use, not here: building a
:class:`Gate` (every pytest run with the plugin installed does) imports neither numpy, scipy, jsonschema
nor filelock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import pytest

from ..units import describe_size
from ..vocab import DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_MAX_RUNS, DEFAULT_TOLERANCE, Status

if TYPE_CHECKING:
    from ..measurement import Measurement
    from .store import Baseline

__all__ = ["GateSettings", "Gate", "Verdict", "verdict_status"]

#: the decision's words -> the verdict's Status: (compared with measured runs, checked against a floor)
_STATUS_OF = {
    False: {"ok": Status.OK, "regression": Status.REGRESSION, "improved": Status.IMPROVED, "noisy": Status.NOISY},
    True: {"ok": Status.FLOOR_OK, "regression": Status.FLOOR},
}


def verdict_status(decision_status: str, *, floor: bool = False) -> Status:
    """The :class:`Status` of a decision's status word: ``Comparison.status`` ("ok", "regression",
    "improved", "noisy"), or with ``floor=True`` ``FloorCheck.status`` ("ok", "regression")."""
    try:
        return _STATUS_OF[floor][decision_status]
    except KeyError:
        what = "a floor check" if floor else "a comparison"
        raise ValueError(f"{decision_status!r} is not a status of {what}") from None


@dataclass(frozen=True)
class GateSettings:
    """What the gate needs from the options: ``spec`` is the ``--gpu-baseline`` value (NAME | PATH |
    auto; None: no baseline, the gate is off), ``save`` is ``--gpu-baseline-save``."""

    spec: Optional[str]
    save: bool = False
    search_dirs: tuple[Path, ...] = ()
    max_runs: int = DEFAULT_MAX_RUNS
    tolerance: float = DEFAULT_TOLERANCE
    alpha: float = DEFAULT_ALPHA
    strict: bool = False
    confidence: float = DEFAULT_CONFIDENCE


@dataclass
class Verdict:
    """The gate's judgement of one measurement; ``to_dict`` is what the JSON report stores."""

    status: Status
    baseline_gbps: Optional[float] = None
    ratio: Optional[float] = None
    ci: Optional[tuple[float, float]] = None
    p_value: Optional[float] = None
    message: str = ""
    remeasured: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # a value such as "ok" is accepted, an unknown word is not

    @property
    def failed(self) -> bool:
        return self.status.failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
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
        self.baseline: Optional[Baseline] = None  # None also when the file does not exist yet (saving)
        self.n_comparisons = 1
        self.env_diff: list[tuple[str, Any, Any]] = []
        self.run_id = uuid.uuid4().hex[:12]  # under pytest-xdist only the controller saves: one run

    def adopt(self, path: Path) -> None:
        """Save into ``path``, a baseline resolved elsewhere (by the pytest-xdist workers)."""
        self.path = Path(path)

    @property
    def active(self) -> bool:
        """A baseline was asked for (``--gpu-baseline``)."""
        return self.settings.spec is not None

    @property
    def loaded(self) -> bool:
        """The baseline file was resolved (it may not exist yet when this run saves it)."""
        return self.path is not None

    # -- set-up, after collection ------------------------------------------------------------------
    def load(self, detected_model: Optional[str], fingerprint: dict[str, Any], nodeids: set[str]) -> None:
        """Resolve and read the baseline; errors become usage errors that name the file."""
        from .fingerprint import VOLATILE_KEYS, diff_fingerprints
        from .store import BaselineError, load_baseline, resolve_baseline

        spec = self.settings.spec
        if spec is None:
            raise RuntimeError("Gate.load: no baseline was asked for (GateSettings.spec is None)")
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
        """The lines about the baseline for the session header (none when the gate is off)."""
        from .fingerprint import format_fingerprint_diff

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
        """The verdict on one measurement of test ``nodeid``; ``tolerance`` overrides the session's (the
        @bandwidth marker's), ``remeasure`` measures the case again when it looks like a regression."""
        from .decision import Comparison, check_floor, compare, confirm
        from .fingerprint import format_fingerprint_diff
        from .store import case_key

        if self.baseline is None:
            return Verdict(Status.NEW, message="no baseline yet")
        key = case_key(nodeid, m.op, m.size_bytes, m.dtype, m.world_size)
        entry = self.baseline.cases.get(key)
        if entry is None:
            return Verdict(Status.NEW_STRICT if self.settings.strict else Status.NEW,
                           message=f"no entry for {key} in {self.path}")
        tol = self.settings.tolerance if tolerance is None else tolerance
        if entry.floor_only:
            fc = check_floor(m.samples_gbps, entry.floor_gbps)
            v = Verdict(verdict_status(fc.status, floor=True), baseline_gbps=entry.floor_gbps,
                        ratio=fc.ratio, message=fc.reason)
            if fc.failed:
                v.message = (f"below the published floor: {self._what(m)}: measured {fc.current_median_gbps:.2f} GB/s "
                             f"(median of {fc.n_current} samples), published floor {fc.floor_gbps:g} GB/s "
                             f"({fc.ratio:.3f}x); source: {self.baseline.source_detail}")
            return v

        def decide(measurement: Measurement) -> Comparison:
            return compare(measurement.samples_gbps, entry.runs_gbps, tolerance=tol, alpha=self.settings.alpha,
                           n_comparisons=self.n_comparisons, confidence=self.settings.confidence)

        c, m, remeasured = confirm(decide, m, remeasure)
        v = Verdict(verdict_status(c.status), baseline_gbps=c.baseline_median_gbps, ratio=c.ratio,
                    ci=(c.ci_low, c.ci_high), p_value=c.p_value, remeasured=remeasured,
                    details={"alpha": c.alpha, "tolerance": c.tolerance, "run_spread": c.run_spread,
                             "baseline_runs": len(entry.runs)})
        if v.status is Status.REGRESSION:
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
        """Add this run's measurements (records with ``.measurement`` and ``.nodeid``) to the baseline
        file; returns the file and the number of cases saved."""
        from .store import BaselineError, CaseRecord, save_run

        if self.path is None:
            raise RuntimeError("Gate.save: no baseline file was resolved (call Gate.load first)")
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
