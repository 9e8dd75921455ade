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
    FALLBACK_SESSION_SPREAD,
    MIN_SPREAD,
    NO_PRIOR,
    CaseModel,
    Comparison,
    Prior,
    RunLocation,
    compare,
    corrected_alpha,
    fit_case,
    fit_prior,
    judge,
    prediction,
    run_location,
)
from pytest_gpucomm.gate.floors import FloorCheck, check_floor
from pytest_gpucomm.gate.levels import Common, common_spread
from pytest_gpucomm.gate.reasons import comparison_reason
from pytest_gpucomm.summary import summarize
from pytest_gpucomm.vocab import Status

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
    assert (m.sessions, m.runs, m.within_df) == (2, 4, 2)
    means = [(math.log(1.00) + math.log(1.02)) / 2, (math.log(0.90) + math.log(0.92)) / 2]
    assert m.center == pytest.approx(LOG_TRUE + sum(means) / 2)
    assert m.between2 == pytest.approx(np.var(means, ddof=1))
    assert m.inv_n == pytest.approx(0.5)
    d_a, d_b = math.log(1.02 / 1.00), math.log(0.92 / 0.90)
    assert m.within2 == pytest.approx((2 * (d_a / 2) ** 2 + 2 * (d_b / 2) ** 2) / 2)


def test_runs_without_a_session_label_are_sessions_of_their_own():
    m = fit_case([at(1.0), at(1.01), at(0.99)], [None, None, None])
    assert (m.sessions, m.within_df) == (3, 0) and math.isnan(m.within2)


def test_a_one_session_baseline_assumes_the_session_spread_it_cannot_measure():
    # three runs of one session that agree to 0.01 %: they say nothing of how far another session moves
    m = fit_case([at(1.0), at(1.0001), at(0.9999)], ["same"] * 3)
    assert (m.sessions, m.runs, m.within_df) == (1, 3, 2) and math.isnan(m.between2)
    for k in (1, 3):  # the new session's offset and the baseline session's, each assumed 0.5 %
        assert prediction(m, NO_PRIOR, k, 1e-6).sd >= math.sqrt(2) * FALLBACK_SESSION_SPREAD
    assert prediction(m, NO_PRIOR, 1, 1e-6).session_sd == FALLBACK_SESSION_SPREAD
    # the class's prior, where there is one, stands in for the assumption
    assert prediction(m, Prior(0.02**2, 10.0), 1, 1e-6).session_sd == pytest.approx(0.02)
    # so a 6 % drop, which the same 3 runs taken for 3 sessions call a regression, is not one
    assert compare([at(0.94)], fit_case([at(1.0), at(1.0001), at(0.9999)], [None] * 3), max_runs=1).failed
    assert not compare([at(0.94)], m, max_runs=1).failed
    single = fit_case([at(1.0)], ["only"])
    assert single.sessions == 1 and math.isnan(single.between2) and math.isnan(single.within2)
    assert prediction(single, NO_PRIOR, 1, 1e-6).run_sd > 0  # the run spread is assumed too


# --- 2. the prior: moderation of the session spread -----------------------------------------------------


def _session_only_model(rng: np.random.Generator, sd: float, sessions: int = 6) -> CaseModel:
    return fit_case([at(math.exp(x)) for x in rng.normal(0.0, sd, sessions)], [None] * sessions)


def test_fit_prior_recovers_a_common_variance_with_large_weight_for_homogeneous_cases():
    rng = np.random.default_rng(2)
    prior = fit_prior([_session_only_model(rng, 0.01) for _ in range(60)])
    assert prior.df > 30  # inf when the spread of s_b is all sampling error
    assert math.sqrt(prior.s2) == pytest.approx(0.01, rel=0.15)


def test_fit_prior_gives_little_weight_when_the_cases_differ():
    rng = np.random.default_rng(3)
    models = [_session_only_model(rng, sd) for sd in np.exp(rng.normal(math.log(0.01), 1.2, 60))]
    prior = fit_prior(models)
    assert 0 < prior.df < 5


def test_fit_prior_needs_three_cases():
    rng = np.random.default_rng(4)
    prior = fit_prior([_session_only_model(rng, 0.01) for _ in range(2)])
    assert prior == NO_PRIOR == Prior(0.0, 0.0)
    assert fit_prior([]).df == 0


def test_fit_prior_with_a_tiny_excess_spread_takes_one_common_variance_instead_of_failing():
    # three cases of 3 sessions whose log variances spread just a hair (5e-9) more than chance: the
    # equation for the prior's weight has no root below 1e8; the prior is one common variance (df inf)
    from scipy.special import polygamma

    a = math.sqrt(float(polygamma(1, 1.0)) + 5e-9)  # the log variances' sample variance is a^2
    models = [CaseModel(center=0.0, sessions=3, runs=3, between2=math.exp(x), within2=float("nan"), within_df=0,
                        mean_se2=0.0, inv_n=1.0) for x in (-a, 0.0, a)]
    prior = fit_prior(models)
    assert math.isinf(prior.df) and 0 < prior.s2 < math.inf


def test_moderation_only_ever_raises_the_session_spread():
    m = fit_case([at(1.0), at(1.04), at(0.96)], [None] * 3)  # observed session-mean sd 4 %
    observed = math.sqrt(m.between2)
    unmoderated = prediction(m, NO_PRIOR, 1, 1e-6)
    assert unmoderated.session_sd == pytest.approx(observed)  # one run per session: it holds the runs' spread
    low = prediction(m, Prior(0.005**2, math.inf), 1, 1e-6)
    assert low.session_sd == pytest.approx(observed) and low.sd == pytest.approx(unmoderated.sd)
    high = prediction(m, Prior(0.08**2, 10.0), 1, 1e-6)
    assert high.session_sd > observed and high.sd > unmoderated.sd
    assert high.df > unmoderated.df  # the prior's weight adds to the 2 degrees of freedom of 3 sessions


def test_prediction_of_two_sessions_of_two_runs_matches_the_hand_computed_variance_and_df():
    # sessions a: offsets 0 and +2 %, b: -3 % and -1 %; every run's own variance 1e-5
    m = fit_case([RunLocation(LOG_TRUE + x, 1e-5, 30) for x in (0.0, 0.02, -0.03, -0.01)], ["a", "a", "b", "b"])
    # means +1 % and -2 %: s_b^2 = 0.03^2 / 2; s_w^2 = (4 * 0.01^2) / 2; s_s^2 = s_b^2 - s_w^2 / 2
    b2, w2, u2 = 4.5e-4, 2e-4, 1e-5
    assert (m.between2, m.within2, m.within_df, m.inv_n, m.mean_se2) == pytest.approx((b2, w2, 2, 0.5, u2))
    sess2 = b2 - w2 / 2
    for k, se2_now in ((1, 2e-5), (2, 2e-5), (3, 4e-5)):
        sp = prediction(m, NO_PRIOR, k, se2_now)
        v = sess2 + (w2 - u2 + se2_now) / k + b2 / 2  # V(k) = s_s^2 + (s_w^2 - u^2 + u_now^2) / k + s_b^2 / S
        # Satterthwaite over s_b^2 (1 df: 2 sessions) and s_w^2 (2 df), V written as their combination
        df = v**2 / ((1.5 * b2) ** 2 / 1 + ((1 / k - 0.5) * w2) ** 2 / 2)
        assert sp.sd == pytest.approx(math.sqrt(v)) and sp.df == pytest.approx(df), k
        assert sp.session_sd == pytest.approx(math.sqrt(sess2)) and sp.run_sd == pytest.approx(math.sqrt(w2 - u2))
    assert prediction(m, NO_PRIOR, 1, 2e-5).sd == pytest.approx(math.sqrt(7.85e-4))
    assert prediction(m, NO_PRIOR, 1, 2e-5).df == pytest.approx(1.3378, abs=1e-4)


def test_prediction_of_one_session_matches_the_hand_computed_variance_and_df():
    m = fit_case([RunLocation(LOG_TRUE + x, 1e-5, 30) for x in (0.0, 0.01, -0.01)], ["s"] * 3)
    w2, u2, s2 = 1e-4, 1e-5, FALLBACK_SESSION_SPREAD**2  # s_w^2 = 2 * 0.01^2 / 2, on 2 df; s_s^2 assumed, 4 df
    sp = prediction(m, NO_PRIOR, 1, 1e-5)
    v = 2 * s2 + (w2 - u2 + 1e-5) / 1 + w2 / 3  # both sessions' offsets, the new run, the baseline's mean of 3
    df = v**2 / ((2 * s2) ** 2 / 4 + ((1 + 1 / 3) * w2) ** 2 / 2)
    assert sp.sd == pytest.approx(math.sqrt(v)) and sp.df == pytest.approx(df)
    assert (v, df) == pytest.approx((1.8333e-4, 3.533), abs=1e-3 * df)
    single = fit_case([RunLocation(LOG_TRUE, 1e-5, 30)], ["s"])  # one run: s_w^2 assumed (1 %), 4 df
    sp = prediction(single, NO_PRIOR, 1, 1e-5)
    w2 = 0.01**2 + u2  # the assumed run spread on top of the run's own variance
    v = 2 * s2 + (w2 - u2 + 1e-5) + w2
    assert sp.sd == pytest.approx(math.sqrt(v)) and v == pytest.approx(2.7e-4)
    # only the assumed run spread is uncertain (4 df); the run's own variance u^2 is measured from its samples
    assert sp.df == pytest.approx(v**2 / ((2 * s2) ** 2 / 4 + (2 * (w2 - u2)) ** 2 / 4))


def test_a_one_run_baseline_whose_samples_spread_widely_keeps_its_degrees_of_freedom_and_catches_a_large_drop():
    # a first recording on a loaded machine: 10 samples with a CV near 100 % (u^2 about 0.1, sd 30 %)
    wide = run_location(np.exp(LOG_TRUE + np.random.default_rng(3).normal(0.0, 1.0, 10)))
    model = fit_case([wide], ["s"])
    assert model.mean_se2 > 0.05
    quiet = 1e-4  # today's run: a narrow spread of samples
    sp = prediction(model, NO_PRIOR, 1, quiet)
    assert sp.df > 30  # the measured own error dominates; counted as the assumed spread's 4 df it gave 1
    c = compare([RunLocation(wide.loc - math.log(1e6), quiet, 10)], model)
    # a million times slower (it was "not gated", quantile 318)
    assert c.status is Status.REGRESSION, comparison_reason(c)


def test_the_prediction_spread_is_never_below_the_minimum():
    same = fit_case([RunLocation(LOG_TRUE, 0.0, 30)] * 4, ["a", "a", "b", "b"])  # identical runs: no spread
    assert prediction(same, NO_PRIOR, 1, 0.0).sd == MIN_SPREAD


# --- 3-4. prediction and verdict --------------------------------------------------------------------------


def test_a_20_percent_drop_on_a_steady_baseline_is_a_regression():
    rng = np.random.default_rng(5)
    for _ in range(20):
        c = compare([sim_run(rng, 80.0)], sim_baseline(rng), n_comparisons=100)
        assert isinstance(c, Comparison) and c.status is Status.REGRESSION and c.failed
        assert c.bounds_text in comparison_reason(c) and "95% PI" not in comparison_reason(c) and c.upper_bound < 0.95


def test_a_3_percent_drift_is_never_a_regression():
    regressions = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        model = sim_baseline(rng)

        def again(rng: np.random.Generator = rng) -> tuple[RunLocation, bool]:
            return sim_run(rng, 97.0 * math.exp(rng.normal(0.0, 0.004))), True

        j = judge(sim_run(rng, 97.0 * math.exp(rng.normal(0.0, 0.004))), model, NO_PRIOR, again,
                  n_comparisons=100)
        regressions += j.comparison.status is Status.REGRESSION
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
        caught += j.comparison.status is Status.REGRESSION
    assert caught >= 99


def test_a_baseline_with_5_percent_run_to_run_spread_is_not_gated_and_still_catches_a_large_drop():
    rng = np.random.default_rng(6)
    model = sim_baseline(rng, sessions=4, session_sd=0.05, run_sd=0.03)
    c = compare([sim_run(rng, 100.0)], model)
    assert c.status is Status.NOT_GATED and not c.gated and not c.failed and c.detectable_drop > 0.10
    why = comparison_reason(c)
    assert f"{c.detectable_drop:.1%} or more" in why and "record more baseline runs" in why
    for factor in (0.97, 0.9, 0.8, 0.7):  # no verdict passes a drop in silence: "not gated" says so
        assert compare([sim_run(rng, 100.0 * factor)], model).status in (Status.NOT_GATED, Status.REGRESSION)
    assert compare([sim_run(rng, 40.0)], model).status is Status.REGRESSION


def test_a_20_percent_gain_is_improved_and_symmetric_to_a_drop():
    rng = np.random.default_rng(7)
    model = sim_baseline(rng)
    c = compare([sim_run(rng, 120.0)], model, n_comparisons=100)
    assert c.status is Status.IMPROVED and not c.failed and "consider recording a new baseline" in comparison_reason(c)
    assert c.lower_bound > 1.05
    up, down = compare([at(1.2)], STEADY), compare([at(1 / 1.2)], STEADY)
    assert (up.status, down.status) == (Status.IMPROVED, Status.REGRESSION)
    assert up.upper_bound / up.ratio == pytest.approx(down.ratio / down.lower_bound)  # the same width each way


def test_the_interval_brackets_the_ratio_and_the_deciding_bounds():
    c = compare([at(0.97)], STEADY, n_comparisons=10)
    assert c.lower_bound < c.ci_low < c.ratio < c.ci_high < c.upper_bound  # 1 - alpha/m is wider than 95 %
    assert c.ci_low < 0.97 < c.ci_high


def test_bonferroni_a_larger_n_comparisons_widens_the_bound():
    one = compare([at(0.93)], STEADY, n_comparisons=1, max_runs=1)
    many = compare([at(0.93)], STEADY, n_comparisons=1000, max_runs=1)
    assert many.alpha == pytest.approx(0.01 / 1000) and one.alpha == pytest.approx(0.01)
    assert many.upper_bound > one.upper_bound and many.lower_bound < one.lower_bound
    assert many.detectable_drop > one.detectable_drop
    assert corrected_alpha(0.01, 200) == pytest.approx(5e-5)


def test_each_pooled_look_after_the_first_spends_its_share_of_alpha():
    assert corrected_alpha(0.01, 10, 2) == pytest.approx(0.01 / 20)
    assert compare([at(1.0)], STEADY, n_comparisons=10).alpha == pytest.approx(0.01 / 10)  # default: 1 re-measure
    assert compare([at(1.0)], STEADY, n_comparisons=10, max_runs=3).alpha == pytest.approx(0.01 / 20)
    assert compare([at(1.0)], STEADY, n_comparisons=10, max_runs=4).alpha == pytest.approx(0.01 / 30)
    assert compare([at(1.0)], STEADY, n_comparisons=10, max_runs=1).alpha == pytest.approx(0.01 / 10)
    # judge spends looks only where it can measure again
    assert judge(at(1.0), STEADY, NO_PRIOR, None, n_comparisons=10).comparison.alpha == pytest.approx(0.01 / 10)
    assert judge(at(1.0), STEADY, NO_PRIOR, Again(1.0), n_comparisons=10,
                 max_remeasures=3).comparison.alpha == pytest.approx(0.01 / 30)


@pytest.mark.parametrize("args, match", [((float("nan"), 10), "alpha must be in .*nan"),
                                         ((0.01, float("nan")), "n_comparisons must be a whole number.*nan"),
                                         ((0.01, 10, float("nan")), "looks must be a whole number.*nan"),
                                         ((0.01, 10, 1.5), "looks must be a whole number >= 1, got 1.5"),
                                         ((0.01, 10, 0), "looks.*got 0")])
def test_corrected_alpha_refuses_nan_and_non_whole_counts_naming_them(args, match):
    with pytest.raises(ValueError, match=match):
        corrected_alpha(*args)


# --- 5. re-measures -------------------------------------------------------------------------------------


def test_judge_does_not_measure_again_a_first_run_above_the_limit():
    for ratio in (1.0, 0.97, 1.3):
        again = Again(1.0)
        j = judge(at(ratio), STEADY, NO_PRIOR, again)
        assert again.calls == 0 and j.remeasured == 0 and j.comparison.runs_now == 1


def test_judge_measures_a_flagged_first_run_again_and_pools_the_runs():
    again = Again(0.5)
    j = judge(at(0.5), STEADY, NO_PRIOR, again)
    assert j.comparison.status is Status.REGRESSION  # already past its bound, still measured once more
    assert again.calls == 1 and j.remeasured == 1 and j.comparison.runs_now == 2


def test_a_glitch_then_normal_re_measures_is_not_a_regression():
    again = Again(1.0, 1.0)
    j = judge(at(0.90), STEADY, NO_PRIOR, again, max_remeasures=2)
    assert compare([at(0.90)], STEADY).status is Status.REGRESSION  # the first run alone would fail
    # not a regression; and with today's runs 10 % apart this run could not catch a drop of 10 %: not gated
    assert j.comparison.status is Status.NOT_GATED and again.calls == 2 and j.comparison.runs_now == 3
    assert j.comparison.spread.floor == "runs_now"
    assert j.comparison.ratio == pytest.approx((0.90 * 1.0 * 1.0) ** (1 / 3), rel=1e-2)


def test_a_glitch_pooled_with_one_normal_re_measure_is_not_a_regression():
    # a copy run 32 % slow in one process and normal in the next (seen on one H100: a device->host 256 MiB run of
    # 37.5 GB/s among runs of 55.1-55.3): their mean is 18 % below, but the two runs disagree by as much
    judged = judge(at(0.68), STEADY, NO_PRIOR, Again(1.0), max_remeasures=1)
    assert judged.comparison.ratio < 0.85 and judged.comparison.status is not Status.REGRESSION
    assert compare([at(0.68), at(1.0)], STEADY, fresh=[True]).spread.floor == "runs_now"


def test_two_runs_that_agree_are_still_judged_on_the_baseline_spread():
    c = compare([at(0.80), at(0.80)], STEADY, fresh=[True])
    assert c.status is Status.REGRESSION and c.spread.floor == ""


def test_judge_stops_at_max_remeasures():
    for limit in (0, 1):
        again = Again(1.0, 1.0)
        j = judge(at(0.90), STEADY, NO_PRIOR, again, max_remeasures=limit)
        assert again.calls == limit and j.remeasured == limit
    with pytest.raises(ValueError, match="max_remeasures must be >= 0, got -1"):
        judge(at(1.0), STEADY, NO_PRIOR, None, max_remeasures=-1)


def test_a_cases_folds_are_pooled_at_the_first_look_and_spend_no_look_of_alpha():
    """Folds (the case measured in other process groups before its verdict) are runs of their own: the first
    look pools them; only the re-measures after it are looks that may decide."""
    j = judge(at(1.0), STEADY, NO_PRIOR, Again(1.0), n_comparisons=10, folds=[at(1.0), at(1.0)])
    assert j.comparison.runs_now == 3 and j.remeasured == 0 and j.folds == 3
    assert j.comparison.alpha == pytest.approx(0.01 / 10)  # one re-measure allowed: one look, as without folds
    one = judge(at(1.0), STEADY, NO_PRIOR, None, n_comparisons=10)  # the same level, no folds
    assert j.comparison.spread.sd < one.comparison.spread.sd  # the run part of the spread divided by 3
    # (not always a smaller bound: with the run part divided, the session part's fewer df weigh more)
    again = Again(0.9)
    flagged = judge(at(0.9), STEADY, NO_PRIOR, again, folds=[at(0.9)])
    assert again.calls == 1 and flagged.remeasured == 1 and flagged.comparison.runs_now == 3  # still measured again
    assert flagged.comparison.ratio == pytest.approx(0.9, rel=1e-3)


def test_compare_refuses_a_fold_count_that_is_not_a_whole_number_of_at_least_one():
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match=f"folds must be a whole number >= 1, got {bad!r}"):
            compare([at(1.0)], STEADY, folds=bad)


def test_a_re_measure_without_a_new_process_state_is_merged_into_the_run_it_repeats():
    again = Again(1.0, fresh=False)
    j = judge(at(0.90), STEADY, NO_PRIOR, again, max_remeasures=1)
    assert again.calls == 1 and j.remeasured == 1 and len(j.runs) == 2
    assert j.comparison.runs_now == 1  # k unchanged
    assert j.comparison.ratio == pytest.approx(math.sqrt(0.90), rel=1e-2)
    fresh = judge(at(0.90), STEADY, NO_PRIOR, Again(1.0), max_remeasures=1)
    assert fresh.comparison.runs_now == 2 and fresh.remeasured == 1


def test_at_the_tolerance_limit_the_re_measure_procedure_calls_at_most_alpha_of_cases_a_regression():
    # a true drop of exactly the tolerance; baseline and new runs drawn like the steady baseline's (sessions
    # 0.4 %, runs 0.3 % apart, each run's median with the variance of 30 samples 1 % apart), drawn directly as
    # run locations for speed.  judge may look at the pooled runs twice (2 re-measures): Bonferroni over the
    # looks keeps the false alarms within alpha.
    alpha, n, se2 = 0.05, 1000, (math.pi / 2) * 0.01**2 / 30
    alarms = 0
    for seed in range(n):
        rng = np.random.default_rng(20_000 + seed)

        def run(level: float, offset: float, rng: np.random.Generator = rng) -> RunLocation:
            return RunLocation(math.log(level) + offset + rng.normal(0.0, 0.003) + rng.normal(0.0, math.sqrt(se2)),
                               se2, 30)

        offsets = rng.normal(0.0, 0.004, 8)
        model = fit_case([run(TRUE_GBPS, o) for o in offsets for _ in range(3)],
                         [f"s{i}" for i in range(8) for _ in range(3)])
        now = rng.normal(0.0, 0.004)  # this session's own offset
        j = judge(run(95.0, now), model, NO_PRIOR, lambda now=now: (run(95.0, now), True), alpha=alpha, n_comparisons=1,
                  max_remeasures=2)
        alarms += j.comparison.status is Status.REGRESSION
    assert alarms / n <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / n)


# --- floors -------------------------------------------------------------------------------------------


def _floor_run(ratio: float) -> RunLocation:
    return RunLocation(math.log(44.0 * ratio), 1e-6, 30)


def test_3_percent_below_the_floor_passes_at_5_percent_tolerance_and_says_how_far():
    fc = check_floor(_floor_run(0.97), 44.0, tolerance=0.05)
    assert isinstance(fc, FloorCheck) and fc.status is Status.FLOOR_OK and not fc.failed and fc.runs_now == 1
    assert "-3.0% from the published floor 44 GB/s" in fc.reason and "within the 5% tolerance" in fc.reason
    above = check_floor(_floor_run(1.1), 44.0)
    assert above.status is Status.FLOOR_OK and "10.0% above the published floor 44 GB/s" in above.reason


def test_10_percent_below_the_floor_fails_after_the_re_measures():
    calls = []

    def again() -> tuple[RunLocation, bool]:
        calls.append(1)
        return _floor_run(0.90), True

    fc = check_floor(_floor_run(0.90), 44.0, again, tolerance=0.05, max_remeasures=2)
    assert fc.status is Status.FLOOR and fc.failed and len(calls) == 2 and fc.runs_now == 3
    assert "-10.0% from the published floor 44 GB/s, beyond the 5% tolerance" in fc.reason
    assert "mean of 3 runs" in fc.reason


def test_a_floor_glitch_is_measured_again_and_passes():
    runs = iter([_floor_run(1.0), _floor_run(1.0)])
    fc = check_floor(_floor_run(0.90), 44.0, lambda: (next(runs), True), tolerance=0.05, max_remeasures=2)
    assert fc.status is Status.FLOOR_OK and fc.runs_now == 3


# --- 6. the common offset of a run (the levels' class offsets: tests/test_gate_levels.py) -----------------------------


def _common(sd: float = 0.005, df: float = 19.0, runs: int = 20, sessions: int = 20) -> Common:
    return Common(sd=sd, df=df, runs=runs, sessions=sessions)


def test_the_common_spread_is_fitted_from_the_baseline_runs_offsets_by_session():
    # 3 cases, 4 runs in 2 sessions: every case moves with its run's common offset (+-1 %, +-2 % by session)
    offsets = {"r0": 0.02 + 0.01, "r1": 0.02 - 0.01, "r2": -0.02 + 0.01, "r3": -0.02 - 0.01}
    case_runs = [{r: c + o + e for r, o in offsets.items()} for c, e in ((1.0, 0.0), (2.0, 0.001), (3.0, -0.001))]
    session_of = {"r0": "a", "r1": "a", "r2": "b", "r3": "b"}
    common = common_spread(case_runs, [1.0, 2.0, 3.0], session_of)
    assert common is not None and (common.runs, common.sessions) == (4, 2)
    expected = prediction(fit_case([RunLocation(o, 0.0, 1) for o in offsets.values()], list(session_of.values())),
                          NO_PRIOR, 1, 0.0)
    assert (common.sd, common.df) == pytest.approx((expected.sd, expected.df))
    one = common_spread(case_runs, [1.0, 2.0, 3.0], {})  # no labels: every run a session of its own
    assert one is not None and (one.runs, one.sessions) == (4, 4)
    assert common_spread([], [], {}) is None


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
    ],
)
def test_bad_parameters_raise_value_error_naming_the_value(call: Callable[[], object], match: str):
    with pytest.raises(ValueError, match=match):
        call()


def test_fit_case_takes_any_sequence_of_labels():
    labels: Sequence[Optional[str]] = ("a", None)
    assert fit_case([at(1.0), at(1.01)], labels).sessions == 2


@pytest.mark.parametrize("op, group", [("all_reduce", "collective"), ("send_recv", "collective"),
                                       ("dp_grad_sync", "collective"), ("moe_all_to_all", "collective"),
                                       ("node_pair", "collective"), ("h2d", "copy"), ("d2h", "copy")])
def test_case_group_puts_patterns_and_node_pairs_with_the_collectives_and_copies_apart(op, group):
    from pytest_gpucomm.gate.verdicts import case_group

    assert case_group(op) == group


# -- the floors and no verdict without evidence (issue 43) ----------------------------------------------------------

ONE_RUN = fit_case([at(1.0)], ["s0"])  # a one-run baseline: both spreads assumed


def test_the_scatter_of_a_runs_cases_is_a_robust_variance_blind_to_a_minority_that_moved():
    from pytest_gpucomm.gate.decision import class_scatter

    assert class_scatter([0.01, -0.01, 0.0, 0.02]) == 0.0  # fewer than 5 cases: none
    steady = [0.01, -0.01, 0.0, 0.02, -0.02, 0.005, -0.005]
    moved = steady + [-0.36, -0.36]  # two cases 30 % slower
    assert math.sqrt(class_scatter(moved)) < 0.03  # two cases 36 % off move it from 1.5 % to 2.2 %, no further
    assert math.sqrt(class_scatter(steady)) == pytest.approx(1.4826 * 0.01, rel=1e-6)


def test_an_assumed_spread_is_raised_to_what_the_runs_show_and_a_measured_one_is_not():
    wide = RunLocation(math.log(0.9), 1e-6, 100, sd=0.08)  # its samples spread 8 %
    c = compare([wide], ONE_RUN)
    assert c.spread.assumed == "session and run" and c.spread.floor == "samples" and c.spread.run_sd >= 0.08
    assert compare([at(0.9)], ONE_RUN, class_spread=0.2 ** 2).spread.floor == "cases"
    measured = compare([RunLocation(math.log(0.9), 1e-6, 100, sd=0.08)], STEADY, class_spread=0.2 ** 2)
    assert measured.spread.assumed == "" and measured.spread.floor == ""  # the baseline knows its spread


def test_a_case_whose_spread_is_assumed_is_never_ok_and_never_fails_on_one_run():
    assert compare([at(1.0)], ONE_RUN).status is Status.NOT_GATED  # no "ok" on an assumption
    one = judge(at(0.5), ONE_RUN, NO_PRIOR, None)
    assert one.comparison.status is Status.NOT_GATED
    assert "one run of today is no evidence" in comparison_reason(one.comparison)
    two = judge(at(0.5), ONE_RUN, NO_PRIOR, Again(0.5))  # a second fresh run agrees: evidence
    assert two.comparison.status is Status.REGRESSION and two.comparison.runs_now == 2
    same_state = judge(at(0.5), ONE_RUN, NO_PRIOR, Again(0.5, fresh=False))  # merged into the first: no second run
    assert same_state.comparison.status is Status.NOT_GATED


def test_a_prior_makes_a_one_session_case_judged():
    c = compare([at(1.0)], fit_case([at(1.0), at(1.001), at(0.999)], ["s"] * 3),
                Prior(0.002 ** 2, math.inf, run_s2=0.001 ** 2, run_df=50.0))
    assert c.spread.assumed == "" and c.status is Status.OK and c.gated


def test_a_run_whose_samples_spread_far_wider_than_the_baselines_carries_that_to_the_levels():
    # seen on one H100: a device->host 256 MiB run at 0.68x with its samples spread 24 %, re-measured at 1.0x; its
    # own verdict was safe, but its residual at the levels, judged on the baseline's spreads only, failed
    wide = RunLocation(LOG_TRUE + math.log(0.68), 0.01, 100, sd=0.24)
    c = compare([wide, at(1.0)], STEADY, fresh=[True])
    assert c.status is not Status.REGRESSION and c.spread.runs_now >= 0.01 / 2
    assert compare([at(0.999), at(1.0)], STEADY, fresh=[True]).spread.runs_now == 0.0  # runs like the baseline's
