"""The tail verdict of one case: has its tail of single operations grown against its baseline runs' sketches
(:func:`judge_tail`, the rule of :mod:`pytest_gpucomm.gate.tails`), with today's re-measures pooled as the
median verdict pools them; the figures the verdict and its message give (:func:`figures_now`,
:func:`figures_baseline`).  The session's
:class:`~pytest_gpucomm.gate.verdicts.Gate` calls it after the median verdict."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from ..units import describe_us, plural
from ..vocab import Status
from ..sketches import Histogram, TailSketch
from .tails import TailTest, tail_test

if TYPE_CHECKING:
    from ..measurement import Measurement
    from .decision import RunLocation
    from .store import CaseEntry
    from .tails import TailSpread

__all__ = ["judge_tail", "figures_now", "figures_baseline"]


def figures_now(info: Mapping[str, Any], merged: Optional[Histogram]) -> dict[str, Any]:
    """Today's single-op figures (us): the measurement's own, or those of its runs' pooled histogram."""
    if merged is None:
        return {k: info.get(k) for k in ("n", "p50_us", "p99_us", "p999_us", "max_us", "jitter")}
    q: dict[str, Optional[float]] = {k: merged.quantile(p) * 1e6
                                     for k, p in (("p50_us", 0.5), ("p99_us", 0.99), ("max_us", 1.0))}
    q["p999_us"] = merged.quantile(0.999) * 1e6 if merged.n >= 1000 else None
    p50, p99 = merged.quantile(0.5) * 1e6, merged.quantile(0.99) * 1e6
    return {"n": merged.n, **q, "jitter": p99 / p50}


def figures_baseline(sketches: list[TailSketch]) -> dict[str, Any]:
    """The baseline's single-op figures (us): per figure the median over the runs that resolve it."""
    import statistics

    def med(values: list[float]) -> Optional[float]:
        return statistics.median(values) * 1e6 if values else None

    return {"p50_us": med([s.p50_s for s in sketches]),
            "p99_us": med([s.ratios[0.99] * s.p50_s for s in sketches if 0.99 in s.ratios]),
            "p999_us": med([s.ratios[0.999] * s.p50_s for s in sketches if 0.999 in s.ratios]),
            "max_us": med([s.max_ratio * s.p50_s for s in sketches]), "runs": len(sketches),
            "n": [s.n for s in sketches]}



class _TodayRuns:
    """Today's runs of a case's single ops, each a histogram (the first, then the re-measures that keep one),
    tested against the baseline's sketches by ``gate.tails.tail_test`` at the case's level."""

    def __init__(self, nodeid: str, sketches: list[TailSketch], info: Mapping[str, Any], test: "_TailRule") -> None:
        self.nodeid, self.sketches, self.rule = nodeid, sketches, test
        self.steps = [float(info.get("resolution_us") or 0.0) * 1e-6]
        self.hists: list[Histogram] = [Histogram.from_dict(info["hist"], f"{nodeid}: info['tail']['hist']")]
        self.first = self.rule(sketches, self.hists[0], today_p50_s=float(info["p50_us"]) * 1e-6,
                               resolution_s=self.steps[0])
        self.used = 0  # the re-measures read so far

    def pool(self, again_ms: list["Measurement"]) -> TailTest:
        """The test of every run so far pooled: the first and the re-measures in ``again_ms`` that keep single
        ops (their mean rate: ``today_runs``)."""
        for k, x in enumerate(again_ms[self.used:], self.used + 1):
            h = _hist_of(x, f"{self.nodeid}: re-measure {k}: info['tail']['hist']")
            if h is not None:
                self.hists.append(h)
                self.steps.append(float(x.info["tail"].get("resolution_us") or 0.0) * 1e-6)
        self.used = len(again_ms)
        # the runs pooled are each a run of their own: today's rate is their mean (today_runs)
        if len(self.hists) > 1:
            return self.rule(self.sketches, Histogram.merged(self.hists), today_runs=len(self.hists),
                             resolution_s=max(self.steps))
        return self.first

    def unconfirmed(self, allowed_share: float) -> list[int]:
        """The re-measures (1, 2, ...) whose own share is within ``allowed_share``."""
        return [k for k, h in enumerate(self.hists[1:], 1)
                if self.rule(self.sketches, h, resolution_s=self.steps[k]).share <= allowed_share]


class _TailRule:
    """``gate.tails.tail_test`` at a case's tolerance, level and baseline spread."""

    def __init__(self, *, tolerance: float, alpha: float, n_comparisons: int, looks: int,
                 spread: "TailSpread") -> None:
        self.tolerance, self.alpha, self.n_comparisons, self.looks = tolerance, alpha, n_comparisons, looks
        self.spread = spread

    def __call__(self, sketches: list[TailSketch], today: Histogram, *, today_p50_s: Optional[float] = None,
                 today_runs: int = 1, resolution_s: float = 0.0) -> TailTest:
        return tail_test(sketches, today, tolerance=self.tolerance, alpha=self.alpha,
                         n_comparisons=self.n_comparisons, looks=self.looks, spread=self.spread,
                         today_p50_s=today_p50_s, today_runs=today_runs, resolution_s=resolution_s)


def _hist_of(x: "Measurement", where: str) -> Optional[Histogram]:
    """A measurement's histogram of single ops, or None where it keeps none."""
    t = x.info.get("tail") if isinstance(getattr(x, "info", None), dict) else None
    return Histogram.from_dict(t["hist"], where) if isinstance(t, dict) and t.get("hist") else None


def judge_tail(nodeid: str, entry: "CaseEntry", m: "Measurement", again_ms: list["Measurement"],
               again: Optional[Callable[[], tuple["RunLocation", bool]]], *, tolerance: float, looks: int, alpha: float,
               n_comparisons: int, max_remeasures: int, spread: Callable[[], "TailSpread"], baseline_name: str
               ) -> Optional[tuple[dict[str, Any], str]]:
    """The tail verdict of a case (``gate.tails.tail_test``) and the TAIL message's text (how much, a newline,
    then the detail), or None where
    today's measurement has no single ops.  ``again_ms``: the re-measures made so far (the median
    verdict's), which a flagged first run pools, and to which ``again`` (None: no more re-measures, as
    when the median already failed) adds more, at most ``max_remeasures`` in all, while the pooled share is still
    above the allowed one.  ``alpha`` (the case's share), ``n_comparisons`` and ``looks`` set the level as the
    median verdict's; ``spread`` gives the baseline's run-to-run spread of the share of slow ops (fitted on first
    use); ``baseline_name`` names the baseline in the text."""
    info = getattr(m, "info", None)
    info = info.get("tail") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not info.get("hist"):
        return None
    sketches = [r.tail for r in entry.runs if r.tail is not None and r.tail.p99_s is not None]
    if not sketches:
        return ({"status": "untested", "why": "no baseline run of this case keeps single-op figures (recorded "
                 "without them, or with fewer than 100 single ops); record runs with --gpu-baseline-save"}, "")
    rule = _TailRule(tolerance=tolerance, alpha=alpha, n_comparisons=n_comparisons, looks=looks, spread=spread())
    runs = _TodayRuns(nodeid, sketches, info, rule)
    first = t = runs.first
    if first.share > first.allowed_share:  # flagged: never TAIL on one run where it can be measured again
        t = runs.pool(again_ms)
        while (again is not None and len(again_ms) < max_remeasures and t.share > t.allowed_share
               and (len(runs.hists) == 1 or not t.tail)):
            again()
            t = runs.pool(again_ms)
    if not first.levels:
        return ({"status": "untested", "why": first.unresolved, "text": first.text()}, "")
    # a heavier tail must show in the re-measures too: pooled with a glitch, a normal re-measure would
    # still carry the glitch's share (a one-off never fails alone)
    unconfirmed = runs.unconfirmed(t.allowed_share)
    if t.tail and unconfirmed:
        t = dataclasses.replace(t, tail=False)
    runs_now = len(runs.hists)
    now = figures_now(info, Histogram.merged(runs.hists) if runs_now > 1 else None)
    base = figures_baseline(sketches)
    d = _verdict(t, first, now, base, tolerance, runs_now, len(sketches), unconfirmed)
    return d, _message(t, first, now, base, tolerance, runs_now, len(sketches), baseline_name)


def _verdict(t: TailTest, first: TailTest, now: dict[str, Any], base: dict[str, Any], tolerance: float,
             runs_now: int, baseline_runs: int, unconfirmed: list[int]) -> dict[str, Any]:
    """The tail verdict as the report keeps it (``details["tail"]``)."""
    d: dict[str, Any] = {
        "status": Status.TAIL.value if t.tail else Status.OK.value,
        "now": now, "baseline": base, "n": t.n, "exceed": t.exceed, "share": t.share,
        "allowed_share": t.allowed_share, "baseline_share": t.baseline_share, "quantile": t.quantile,
        "rate_sd": t.rate_sd, "threshold_us": t.threshold_s * 1e6, "baseline_ratio": t.baseline_ratio,
        "p_value": t.p_value, "level": t.level, "tolerance": tolerance, "runs_pooled": runs_now,
        "baseline_runs": baseline_runs, "text": t.text(),
    }
    if runs_now > 1:
        d["first"] = {"n": first.n, "exceed": first.exceed, "share": first.share, "p_value": first.p_value}
        d["unconfirmed"] = unconfirmed  # the re-measures (1, 2, ...) within the allowed share
        if unconfirmed:
            d["text"] += (f"; the first run's share was not confirmed: re-measure "
                          f"{', '.join(map(str, unconfirmed))} within the allowed share")
    return d


def _message(t: TailTest, first: TailTest, now: dict[str, Any], base: dict[str, Any], tolerance: float,
             runs_now: int, baseline_runs: int, baseline_name: str) -> str:
    """The TAIL message's text: the first line says how much (about 100 characters with the op, where and size
    before it); the detail after the newline."""
    text = (
        f"p99 {describe_us(now['p99_us'])} vs {describe_us(base['p99_us'])}, {t.share:.2%} of ops slow "
        f"({t.allowed_share:.2%} allowed)\n"
        f"in baseline {baseline_name}: "
        f"p50 {describe_us(base['p50_us'])} (now {describe_us(now['p50_us'])}), "
        f"p99.9 {describe_us(base['p999_us'])} (now {describe_us(now['p999_us'])}), "
        f"max {describe_us(base['max_us'])} (now {describe_us(now['max_us'])}), median over "
        f"{plural(baseline_runs, 'baseline run')}; {t.share:.2%} of {t.n:,} single ops slower than the baseline's "
        f"p{t.quantile * 100:g} scaled to today's median "
        f"({describe_us(t.threshold_s * 1e6)} = {t.baseline_ratio:.2f} x p50), "
        f"baseline {t.baseline_share:.2%}, {t.allowed_share:.2%} allowed (tail tolerance {tolerance:g}), "
        f"p = {t.p_value:.2g} (level {t.level:.2g})"
    )
    if runs_now > 1:
        text += (f"; {plural(runs_now, 'run')} pooled (the first alone: {first.share:.1%} of {first.n:,}, "
                 f"p = {first.p_value:.2g})")
    return text
