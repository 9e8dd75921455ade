"""Tests of pytest_gpucomm.gate.decision: the run-level rule of DECISION_RULE, one step per section.

The simulated benchmark: true bandwidth 100 GB/s; a run's location is the median of its log samples
(30 samples, 1 % apart); each baseline session has its own offset and each run within it another.  A
"steady" baseline has 8 sessions of 3 runs, about 0.5 % apart (the spread of a well-behaved GPU box).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np
import pytest

from pytest_gpucomm.gate.decision import (
    DECISION_RULE,
    NO_PRIOR,
    CaseModel,
    Comparison,
    FloorCheck,
    Prior,
    RunLocation,
    Shift,
    check_floor,
    compare,
    corrected_alpha,
    fit_case,
    fit_prior,
    judge,
    prediction,
    run_location,
    suite_shift,
)
from pytest_gpucomm.summary import summarize

TRUE_GBPS = 100.0
LOG_TRUE = math.log(TRUE_GBPS)


def sim_run(rng: np.random.Generator, level: float, n: int = 30, within_sd: float = 0.01) -> RunLocation:
    """One run of ``n`` samples around ``level`` GB/s."""
    return run_location(np.exp(math.log(level) + rng.normal(0.0, within_sd, n)))


def sim_baseline(rng: np.random.Generator, sessions: int = 8, runs: int = 3, session_sd: float = 0.004,
                 run_sd: float = 0.003) -> CaseModel:
    """A case's model from ``sessions`` x ``runs`` simulated baseline runs."""
    locs, labels = [], []
    for s in range(sessions):
        so = rng.normal(0.0, session_sd)
        for _ in range(runs):
            locs.append(sim_run(rng, TRUE_GBPS * math.exp(so + rng.normal(0.0, run_sd))))
            labels.append(f"host-boot{s}-2026-01-0{s % 9 + 1}")
    return fit_case(locs, labels)


def at(ratio: float, se2: float = 1e-6) -> RunLocation:
    """A run exactly ``ratio`` times the true bandwidth."""
    return RunLocation(LOG_TRUE + math.log(ratio), se2, 30)


# a deterministic steady baseline: 4 sessions x 3 runs, offsets within +-0.6 %
STEADY_OFFSETS = [(-0.004, -0.002, -0.003), (0.001, 0.003, 0.002), (0.004, 0.006, 0.005), (-0.001, 0.0, -0.002)]
STEADY = fit_case([at(math.exp(x)) for sess in STEADY_OFFSETS for x in sess],
                  [f"s{i}" for i, sess in enumerate(STEADY_OFFSETS) for _ in sess])


class Again:
    """A re-measure callable that returns the given runs in turn and counts its calls."""

    def __init__(self, *ratios: float, fresh: bool = True) -> None:
        self.ratios, self.fresh, self.calls = list(ratios), fresh, 0

    def __call__(self) -> tuple[RunLocation, bool]:
        r = self.ratios[min(self.calls, len(self.ratios) - 1)]
        self.calls += 1
        return at(r), self.fresh


def test_summarize_basic():
    s = summarize([1.0, 2.0, 3.0])
    assert s.n == 3 and s.median_s == 2.0 and s.min_s == 1.0 and s.max_s == 3.0


def test_the_rule_is_in_the_module_docstring():
    import pytest_gpucomm.gate.decision as decision

    assert DECISION_RULE in (decision.__doc__ or "")


# --- 0. the run's location ----------------------------------------------------------------------------


def test_run_location_is_the_median_of_log_bandwidth():
    r = run_location([1.0, 2.0, 3.0, 4.0, 100.0])
    assert r.loc == pytest.approx(math.log(3.0)) and r.gbps == pytest.approx(3.0) and r.n == 5
    assert run_location([7.0]) == RunLocation(math.log(7.0), 0.0, 1)


def test_autocorrelated_samples_give_a_run_a_larger_variance_than_the_same_samples_shuffled():
    rng = np.random.default_rng(1)
    x = np.zeros(400)
    for i in range(1, x.size):  # AR(1), rho 0.8: neighbouring iterations drift together
        x[i] = 0.8 * x[i - 1] + rng.normal(0.0, 0.01)
    drifting = np.exp(LOG_TRUE + x)
    shuffled = rng.permutation(drifting)
    a, b = run_location(drifting), run_location(shuffled)
    assert a.loc == pytest.approx(b.loc)  # same samples, same median
    assert a.se2 > 4.0 * b.se2


# --- 1. the baseline model: runs grouped by session ----------------------------------------------------


def test_runs_of_one_session_are_one_sessions_evidence():
    runs = [at(1.00), at(1.02), at(0.90), at(0.92)]
    m = fit_case(runs, ["a", "a", "b", "b"])
    assert (m.sessions, m.runs, m.within_df, m.one_session) == (2, 4, 2, False)
    means = [(math.log(1.00) + math.log(1.02)) / 2, (math.log(0.90) + math.log(0.92)) / 2]
    assert m.center == pytest.approx(LOG_TRUE + sum(means) / 2)
    assert m.between2 == pytest.approx(np.var(means, ddof=1))
    assert m.inv_n == pytest.approx(0.5)
    d_a, d_b = math.log(1.02 / 1.00), math.log(0.92 / 0.90)
    assert m.within2 == pytest.approx((2 * (d_a / 2) ** 2 + 2 * (d_b / 2) ** 2) / 2)


def test_runs_without_a_session_label_are_sessions_of_their_own():
    m = fit_case([at(1.0), at(1.01), at(0.99)], [None, None, None])
    assert (m.sessions, m.one_session, m.within_df) == (3, False, 0) and math.isnan(m.within2)


def test_runs_all_of_one_session_stand_for_sessions():
    m = fit_case([at(1.0), at(1.01), at(0.99)], ["same"] * 3)
    assert m.one_session and m.sessions == 3 and m.between2 > 0 and math.isnan(m.within2)
    single = fit_case([at(1.0)], ["only"])
    assert single.sessions == 1 and not single.one_session and math.isnan(single.between2)


# --- 2. the prior: moderation of the session spread -----------------------------------------------------


def _session_only_model(rng: np.random.Generator, sd: float, sessions: int = 6) -> CaseModel:
    return fit_case([at(math.exp(x)) for x in rng.normal(0.0, sd, sessions)], [None] * sessions)


def test_fit_prior_recovers_a_common_variance_with_large_weight_for_homogeneous_cases():
    rng = np.random.default_rng(2)
    prior = fit_prior([_session_only_model(rng, 0.01) for _ in range(60)])
    assert prior.cases == 60 and prior.df > 30  # inf when the spread of s_b is all sampling error
    assert math.sqrt(prior.s2) == pytest.approx(0.01, rel=0.15)


def test_fit_prior_gives_little_weight_when_the_cases_differ():
    rng = np.random.default_rng(3)
    models = [_session_only_model(rng, sd) for sd in np.exp(rng.normal(math.log(0.01), 1.2, 60))]
    prior = fit_prior(models)
    assert 0 < prior.df < 5


def test_fit_prior_needs_three_cases():
    rng = np.random.default_rng(4)
    prior = fit_prior([_session_only_model(rng, 0.01) for _ in range(2)])
    assert prior.df == 0 and prior.cases == 2
    assert fit_prior([]).df == 0


def test_moderation_only_ever_raises_the_session_spread():
    m = fit_case([at(1.0), at(1.04), at(0.96)], [None] * 3)  # observed session-mean sd 4 %
    observed = math.sqrt(m.between2)
    low = prediction(m, Prior(0.005**2, math.inf, 50), 1, 1e-6)
    assert low.between_sd == pytest.approx(observed) and not low.moderated
    high = prediction(m, Prior(0.08**2, 10.0, 50), 1, 1e-6)
    assert high.between_sd > observed and high.moderated
    assert high.sd > prediction(m, NO_PRIOR, 1, 1e-6).sd


# --- 3-4. prediction and verdict --------------------------------------------------------------------------


def test_a_20_percent_drop_on_a_steady_baseline_is_a_regression():
    rng = np.random.default_rng(5)
    for _ in range(20):
        c = compare([sim_run(rng, 80.0)], sim_baseline(rng), n_comparisons=100)
        assert isinstance(c, Comparison) and c.status == "regression" and c.failed
        assert c.ratio_text in c.reason and "95% PI" in c.reason and c.upper_bound < 0.95


def test_a_3_percent_drift_is_never_a_regression():
    regressions = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        model = sim_baseline(rng)

        def again(rng: np.random.Generator = rng) -> tuple[RunLocation, bool]:
            return sim_run(rng, 97.0 * math.exp(rng.normal(0.0, 0.004))), True

        j = judge(sim_run(rng, 97.0 * math.exp(rng.normal(0.0, 0.004))), model, NO_PRIOR, again,
                  n_comparisons=100)
        regressions += j.comparison.status == "regression"
    assert regressions == 0


def test_a_10_percent_drop_is_caught_on_a_steady_baseline():
    caught = 0
    for seed in range(100):
        rng = np.random.default_rng(1000 + seed)
        model = sim_baseline(rng)

        def again(rng: np.random.Generator = rng) -> tuple[RunLocation, bool]:
            return sim_run(rng, 90.0 * math.exp(rng.normal(0.0, 0.004))), True

        j = judge(sim_run(rng, 90.0 * math.exp(rng.normal(0.0, 0.004))), model, NO_PRIOR, again)
        assert j.comparison.gated and j.comparison.detectable_drop < 0.10
        caught += j.comparison.status == "regression"
    assert caught >= 99


def test_a_baseline_with_5_percent_run_to_run_spread_is_not_gated_and_still_catches_a_large_drop():
    rng = np.random.default_rng(6)
    model = sim_baseline(rng, sessions=4, session_sd=0.05, run_sd=0.03)
    c = compare([sim_run(rng, 100.0)], model)
    assert c.status == "not gated" and not c.gated and not c.failed and c.detectable_drop > 0.10
    assert f"{c.detectable_drop:.1%} or more" in c.reason and "record more baseline runs" in c.reason
    for factor in (0.97, 0.9, 0.8, 0.7):  # no verdict passes a drop in silence: "not gated" says so
        assert compare([sim_run(rng, 100.0 * factor)], model).status in ("not gated", "regression")
    assert compare([sim_run(rng, 40.0)], model).status == "regression"


def test_a_20_percent_gain_is_improved_and_symmetric_to_a_drop():
    rng = np.random.default_rng(7)
    model = sim_baseline(rng)
    c = compare([sim_run(rng, 120.0)], model, n_comparisons=100)
    assert c.status == "improved" and not c.failed and "consider recording a new baseline" in c.reason
    assert c.lower_bound > 1.05
    up, down = compare([at(1.2)], STEADY), compare([at(1 / 1.2)], STEADY)
    assert (up.status, down.status) == ("improved", "regression")
    assert up.upper_bound / up.ratio == pytest.approx(down.ratio / down.lower_bound)  # the same width each way


def test_the_interval_brackets_the_ratio_and_the_deciding_bounds():
    c = compare([at(0.97)], STEADY, n_comparisons=10)
    assert c.lower_bound < c.ci_low < c.ratio < c.ci_high < c.upper_bound  # 1 - alpha/m is wider than 95 %
    assert c.ci_low < 0.97 < c.ci_high


def test_bonferroni_a_larger_n_comparisons_widens_the_bound():
    one = compare([at(0.93)], STEADY, n_comparisons=1)
    many = compare([at(0.93)], STEADY, n_comparisons=1000)
    assert many.alpha == pytest.approx(0.01 / 1000) and one.alpha == pytest.approx(0.01)
    assert many.upper_bound > one.upper_bound and many.lower_bound < one.lower_bound
    assert many.detectable_drop > one.detectable_drop
    assert corrected_alpha(0.01, 200) == pytest.approx(5e-5)


# --- 5. re-measures -------------------------------------------------------------------------------------


def test_judge_does_not_measure_again_a_first_run_above_the_limit():
    for ratio in (1.0, 0.97, 1.3):
        again = Again(1.0)
        j = judge(at(ratio), STEADY, NO_PRIOR, again)
        assert again.calls == 0 and j.remeasured == 0 and j.comparison.runs_now == 1


def test_judge_measures_a_flagged_first_run_again_and_pools_the_runs():
    again = Again(0.5)
    j = judge(at(0.5), STEADY, NO_PRIOR, again)
    assert j.comparison.status == "regression"  # already past its bound, still measured once more
    assert again.calls == 1 and j.remeasured == 1 and j.comparison.runs_now == 2


def test_a_glitch_then_normal_re_measures_is_not_a_regression():
    again = Again(1.0, 1.0)
    j = judge(at(0.90), STEADY, NO_PRIOR, again)
    assert compare([at(0.90)], STEADY).status == "regression"  # the first run alone would fail
    assert j.comparison.status == "ok" and again.calls == 2 and j.comparison.runs_now == 3
    assert j.comparison.ratio == pytest.approx((0.90 * 1.0 * 1.0) ** (1 / 3), rel=1e-2)


def test_judge_stops_at_max_remeasures():
    for limit in (0, 1):
        again = Again(1.0, 1.0)
        j = judge(at(0.90), STEADY, NO_PRIOR, again, max_remeasures=limit)
        assert again.calls == limit and j.remeasured == limit
    with pytest.raises(ValueError, match="max_remeasures must be >= 0, got -1"):
        judge(at(1.0), STEADY, NO_PRIOR, None, max_remeasures=-1)


def test_a_re_measure_without_a_new_process_state_is_merged_into_the_run_it_repeats():
    again = Again(1.0, fresh=False)
    j = judge(at(0.90), STEADY, NO_PRIOR, again, max_remeasures=1)
    assert again.calls == 1 and j.fresh == [False] and len(j.runs) == 2
    assert j.comparison.runs_now == 1  # k unchanged
    assert j.comparison.ratio == pytest.approx(math.sqrt(0.90), rel=1e-2)
    fresh = judge(at(0.90), STEADY, NO_PRIOR, Again(1.0), max_remeasures=1)
    assert fresh.comparison.runs_now == 2 and fresh.fresh == [True]


# --- floors -------------------------------------------------------------------------------------------


def _floor_run(ratio: float) -> RunLocation:
    return RunLocation(math.log(44.0 * ratio), 1e-6, 30)


def test_3_percent_below_the_floor_passes_at_5_percent_tolerance_and_says_how_far():
    fc = check_floor(_floor_run(0.97), 44.0, tolerance=0.05)
    assert isinstance(fc, FloorCheck) and fc.status == "ok" and not fc.failed and fc.runs_now == 1
    assert "-3.0% from the published floor 44 GB/s" in fc.reason and "within the 5% tolerance" in fc.reason
    above = check_floor(_floor_run(1.1), 44.0)
    assert above.status == "ok" and "10.0% above the published floor 44 GB/s" in above.reason


def test_10_percent_below_the_floor_fails_after_the_re_measures():
    calls = []

    def again() -> tuple[RunLocation, bool]:
        calls.append(1)
        return _floor_run(0.90), True

    fc = check_floor(_floor_run(0.90), 44.0, again, tolerance=0.05)
    assert fc.status == "regression" and fc.failed and len(calls) == 2 and fc.runs_now == 3
    assert "-10.0% from the published floor 44 GB/s, beyond the 5% tolerance" in fc.reason
    assert "mean of 3 runs" in fc.reason


def test_a_floor_glitch_is_measured_again_and_passes():
    runs = iter([_floor_run(1.0), _floor_run(1.0)])
    fc = check_floor(_floor_run(0.90), 44.0, lambda: (next(runs), True), tolerance=0.05)
    assert fc.status == "ok" and fc.runs_now == 3


# --- 6. the session's common shift --------------------------------------------------------------------


def _shift(rng: np.random.Generator, true_ratio: float, cases: int = 100, offset_sd: float = 0.005,
           baseline_runs: int = 20) -> Optional[Shift]:
    log_ratios = math.log(true_ratio) + rng.normal(0.0, 0.01, cases)  # each case's own noise around the shift
    return suite_shift("collective", log_ratios, rng.normal(0.0, offset_sd, baseline_runs))


def test_a_common_8_percent_drop_of_100_cases_is_a_regression_and_names_the_percentage():
    sh = _shift(np.random.default_rng(8), 0.92)
    assert sh is not None and sh.status == "regression" and sh.failed and sh.cases == 100 and sh.baseline_runs == 20
    assert abs((1 - sh.ratio) - 0.08) < 0.005
    assert sh.text().startswith(f"every collective is {1 - sh.ratio:.1%} slower than the baseline (95% CI ")
    assert "REGRESSION" in sh.text()
    assert sh.ci_low <= 0.92 <= sh.ci_high


def test_a_common_3_percent_drift_is_ok_but_reported_as_slower():
    sh = _shift(np.random.default_rng(9), 0.97)
    assert sh is not None and sh.status == "ok" and not sh.failed
    assert f"{1 - sh.ratio:.1%} slower" in sh.text() and sh.text().endswith("within the tolerance")
    assert sh.ci_low <= 0.97 <= sh.ci_high


def test_the_shift_interval_contains_the_true_shift_about_95_percent_of_the_time():
    rng = np.random.default_rng(10)
    hits = 0
    for _ in range(200):
        true = math.exp(rng.normal(0.0, 0.005))  # the session's own common offset, like the baseline runs'
        log_ratios = math.log(true) + rng.normal(0.0, 0.01, 100)
        sh = suite_shift("copy", log_ratios, rng.normal(0.0, 0.005, 20))
        assert sh is not None
        hits += sh.ci_low <= 1.0 <= sh.ci_high
    assert hits >= 180


def test_a_shift_without_cases_is_none():
    assert suite_shift("copy", [], [0.0, 0.01]) is None


# --- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "samples, match",
    [
        ([], "samples: no samples"),
        ([1.0, 0.0], r"positive finite.*index 1: 0\.0"),
        ([1.0, -3.0], r"positive finite.*index 1: -3\.0"),
        ([1.0, float("nan")], "positive finite.*index 1: nan"),
        ([1.0, float("inf")], "positive finite.*index 1: inf"),
        (["fast"], "expected a list of numbers"),
        ([[1.0, 2.0]], r"flat list.*shape \(1, 2\)"),
    ],
)
def test_run_location_rejects_bad_samples_naming_the_value(samples, match):
    with pytest.raises(ValueError, match=match):
        run_location(samples)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: compare([at(1.0)], STEADY, tolerance=0.0), r"tolerance must be a fraction in \(0, 1\).*got 0\.0"),
        (lambda: compare([at(1.0)], STEADY, tolerance=1.5), r"tolerance.*got 1\.5"),
        (lambda: compare([at(1.0)], STEADY, alpha=2.0), r"alpha must be in \(0, 1\), got 2\.0"),
        (lambda: compare([at(1.0)], STEADY, alpha=float("nan")), "alpha must be in.*nan"),
        (lambda: compare([at(1.0)], STEADY, n_comparisons=0), "n_comparisons must be a whole number >= 1, got 0"),
        (lambda: compare([at(1.0)], STEADY, n_comparisons=2.5), "n_comparisons.*got 2.5"),
        (lambda: compare([at(1.0)], STEADY, n_comparisons=True), "n_comparisons.*got True"),
        (lambda: compare([], STEADY), "no current run"),
        (lambda: compare([at(1.0), at(1.0)], STEADY, fresh=[]), "2 runs need 1 fresh flags, got 0"),
        (lambda: fit_case([], []), "no baseline runs"),
        (lambda: fit_case([at(1.0)], ["a", "b"]), "1 runs but 2 session labels"),
        (lambda: prediction(STEADY, NO_PRIOR, 0, 0.0), "k must be >= 1, got 0"),
        (lambda: check_floor(at(1.0), 0.0), "floor_gbps must be a positive number, got 0.0"),
        (lambda: check_floor(at(1.0), 44.0, tolerance=1.0), r"tolerance.*got 1\.0"),
        (lambda: suite_shift("copy", [0.0], [0.0], tolerance=-0.1), r"tolerance.*got -0\.1"),
    ],
)
def test_bad_parameters_raise_value_error_naming_the_value(call: Callable[[], object], match: str):
    with pytest.raises(ValueError, match=match):
        call()


def test_fit_case_takes_any_sequence_of_labels():
    labels: Sequence[Optional[str]] = ("a", None)
    assert fit_case([at(1.0), at(1.01)], labels).sessions == 2
