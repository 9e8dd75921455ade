"""gate/cause.py: which environment variable made a case slower (issue 29), on made-up re-measures; each
re-measure judged by its interval against the baseline and against the slowed run (issue 45, item 5)."""

from __future__ import annotations

import math

import numpy as np

from pytest_gpucomm.env.fingerprint import ABSENT, diff_fingerprints
from pytest_gpucomm.gate.cause import (BACK, NO, PARTLY, EnvChange, Remeasured, Yardstick, env_changes, find_cause,
                                       likely_first, yardstick)
from pytest_gpucomm.gate.decision import fit_case, prediction, run_location
from pytest_gpucomm.vocab import DEFAULT_TOLERANCE

TOL = DEFAULT_TOLERANCE
#: a run's spread about the baseline and within a session (log sd): the small collectives' (DESIGN.md)
SD = 0.02
SLOWED = 0.55


def _stick(slowed=SLOWED, sd=SD):
    """A yardstick of a case whose one run moves by ``sd`` about the baseline and about the slowed run."""
    return Yardstick(slowed=slowed, tolerance=TOL, baseline2=sd * sd, slowed2=2 * sd * sd)


def _lab(slow_when, slow=SLOWED, back=1.01, noise=None):
    """A re-measurer of a case that is ``slow`` x of the baseline while ``slow_when(env)`` holds, else ``back``
    (times ``noise()`` where given); ``env`` is today's environment with the restored variables applied.  Keeps
    what it was asked."""
    today = {"OMP_NUM_THREADS": "1", "NCCL_PROTO": "Simple", "FOO": "x"}
    asked = []

    def remeasure(restore):
        asked.append(dict(restore))
        env = dict(today)
        for k, v in restore.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return Remeasured((slow if slow_when(env) else back) * (noise() if noise else 1.0))

    return remeasure, asked


THREE = [EnvChange("OMP_NUM_THREADS", "2", "1"), EnvChange("NCCL_PROTO", None, "Simple"), EnvChange("FOO", "y", "x")]


def _any_of_three(env):
    """Slow while any of THREE has today's value."""
    return any(env.get(c.name) == c.now for c in THREE)


def test_the_variables_of_a_fingerprint_diff_are_the_changes_and_nothing_else():
    old = {"driver": "1", "env": {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "Ring"}}
    new = {"driver": "2", "env": {"OMP_NUM_THREADS": "1", "NCCL_PROTO": "Simple"}}
    assert env_changes(diff_fingerprints(old, new), absent=ABSENT) == [
        EnvChange("NCCL_ALGO", "Ring", None), EnvChange("NCCL_PROTO", None, "Simple"),
        EnvChange("OMP_NUM_THREADS", "2", "1")]


def test_one_changed_variable_is_restored_alone_and_named_with_the_figures_that_decided():
    remeasure, asked = _lab(lambda env: env.get("OMP_NUM_THREADS") == "1")
    r = find_cause([EnvChange("OMP_NUM_THREADS", "2", "1")], remeasure, _stick())
    assert asked == [{"OMP_NUM_THREADS": "2"}] and r.cause == ("OMP_NUM_THREADS",)
    j = r.attempts[0].judged
    assert j is not None and j.outcome == BACK
    assert r.text() == (f"cause: OMP_NUM_THREADS=1 (restored to 2: {j.ratio:.3g}x [{j.low:.3g}, {j.high:.3g}] 95% PI "
                        f"of the baseline, not shown below the {TOL:.0%} tolerance limit {1 - TOL:.3g}x; "
                        f"{j.vs_slowed:.3g}x [{j.vs_low:.3g}, {j.vs_high:.3g}] of the slowed run's {SLOWED:.3g}x)")


def test_a_noisy_remeasure_just_below_the_limit_still_names_its_cause():
    """The case of issue 45: restoring moved a case from 0.55x to 0.94x; a hard limit of 1 - tolerance on that
    one figure denied the cause, its interval reaches the limit."""
    near = 1.0 - TOL - 0.01
    r = find_cause([EnvChange("OMP_NUM_THREADS", "2", "1")], lambda env: Remeasured(near), _stick())
    assert near < 1.0 - TOL  # what the hard limit read as "not back"
    assert r.cause == ("OMP_NUM_THREADS",) and r.text().startswith("cause: OMP_NUM_THREADS=1 (restored to 2: ")


def test_a_restoration_shown_faster_than_the_slowed_run_but_below_the_limit_is_a_cause_in_part():
    part = math.sqrt(SLOWED * (1.0 - TOL))  # halfway (in log) between the slowed run and the limit
    r = find_cause([EnvChange("OMP_NUM_THREADS", "2", "1")], lambda env: Remeasured(part), _stick(sd=SD / 4))
    assert r.attempts[0].outcome == PARTLY and r.cause == () and r.partly == ("OMP_NUM_THREADS",)
    assert r.text().startswith("cause in part: OMP_NUM_THREADS=1 (restored to 2: ")
    assert f"still below the {TOL:.0%} tolerance limit" in r.text()


def test_a_restoration_not_shown_faster_than_the_slowed_run_brings_nothing_back():
    within = SLOWED * math.exp(SD)  # one sd of a run above the slowed run
    r = find_cause([EnvChange("OMP_NUM_THREADS", "2", "1")], lambda env: Remeasured(within), _stick())
    assert r.attempts[0].outcome == NO and r.cause == () and r.partly == ()
    assert r.text().startswith(f"no restoration of the environment brings it back from {SLOWED:.3g}x of the "
                               "baseline (tried: OMP_NUM_THREADS restored to 2: ")
    j = r.attempts[0].judged
    assert j is not None and j.vs_low <= 1.0 < j.vs_high
    assert r.text().endswith(f"{j.vs_slowed:.3g}x [{j.vs_low:.3g}, {j.vs_high:.3g}] of the slowed run's: not shown "
                             "faster)")


def test_several_are_restored_alone_with_the_libraries_own_first_until_one_brings_it_back():
    remeasure, asked = _lab(lambda env: env.get("OMP_NUM_THREADS") == "1")
    r = find_cause(THREE, remeasure, _stick())
    assert asked == [{"NCCL_PROTO": None}, {"OMP_NUM_THREADS": "2"}]
    assert r.cause == ("OMP_NUM_THREADS",) and r.text().startswith("cause: OMP_NUM_THREADS=1 (restored to 2")


def test_three_variables_that_slow_it_each_are_found_by_their_union_after_each_alone():
    remeasure, asked = _lab(_any_of_three)
    r = find_cause(THREE, remeasure, _stick())
    assert asked == [{"NCCL_PROTO": None}, {"OMP_NUM_THREADS": "2"}, {"FOO": "y"},
                     {"OMP_NUM_THREADS": "2", "NCCL_PROTO": None, "FOO": "y"}]
    assert [a.outcome for a in r.attempts] == [NO, NO, NO, BACK]
    assert r.cause == ("OMP_NUM_THREADS", "NCCL_PROTO", "FOO")
    assert r.text().startswith("cause: these together: OMP_NUM_THREADS=1, NCCL_PROTO=Simple, FOO=x (all restored: ")


def test_with_noisy_remeasures_the_union_of_three_is_named_every_time():
    """Issue 45: with three variables changed the test said "no restoration brings it back" in 2 of 4 runs.
    Re-measures that scatter by a run's spread about 0.94x (all restored) and 0.55x (any one left): the union
    is named, as the cause or in part, on every seed."""
    near = 1.0 - TOL - 0.01
    for seed in range(50):
        rng = np.random.default_rng(seed)
        remeasure, _ = _lab(_any_of_three, back=near, noise=lambda rng=rng: math.exp(rng.normal(0.0, SD)))
        r = find_cause(THREE, remeasure, _stick())
        assert set(r.cause or r.partly) == {c.name for c in THREE}, (seed, r.text())


def test_more_variables_than_the_budget_keep_the_last_remeasure_for_the_union_and_say_what_was_not_tried():
    changes = [EnvChange(f"V{i}", "0", "1") for i in range(5)]
    remeasure, asked = _lab(lambda env: True)
    env_of = {c.name: c for c in changes}

    def with_five(restore):  # the five are not in _lab's today: slow whatever is restored, unless all are
        return remeasure({}) if len(restore) < len(env_of) else Remeasured(1.0)

    r = find_cause(changes, with_five, _stick(), budget=4)
    assert [a.restored for a in r.attempts] == [("V0",), ("V1",), ("V2",), tuple(env_of)]
    assert r.untried == ("V3", "V4") and r.cause == tuple(env_of)
    assert r.text().endswith("; not tried alone: V3, V4 (the budget of 4 re-measures)")


def test_when_no_restoration_helps_it_says_so_after_each_alone_and_the_union():
    remeasure, asked = _lab(lambda env: True)  # the driver, say: no variable brings it back
    r = find_cause(THREE[:2], remeasure, _stick())
    assert len(asked) == 3 and r.cause == () and r.partly == ()
    assert r.text().startswith("no restoration of the environment brings it back")
    assert "; all 2 restored: " in r.text()


def test_a_remeasure_that_fails_is_named_and_counts():
    def broken(restore):
        raise RuntimeError("rank 1 died")

    r = find_cause([EnvChange("NCCL_PROTO", None, "Simple")], broken, _stick())
    assert r.text() == (f"no restoration of the environment brings it back from {SLOWED:.3g}x of the baseline "
                        "(tried: NCCL_PROTO unset again: RuntimeError: rank 1 died)")


def test_no_change_or_no_budget_skips_the_test_saying_why():
    assert find_cause([], lambda e: 1.0, _stick()).text() == "cause test not run: the environment is the baseline's"
    assert find_cause([EnvChange("A", "1", "2")], lambda e: 1.0, _stick(), budget=0).text() == \
        "cause test not run: no re-measures allowed (budget 0)"


def test_the_libraries_own_variables_come_first():
    names = [c.name for c in likely_first([EnvChange(n, None, "1") for n in ("ZED", "OMP_NUM_THREADS", "NCCL_ALGO")])]
    assert names == ["NCCL_ALGO", "OMP_NUM_THREADS", "ZED"]


def test_the_yardstick_of_a_case_is_its_models_prediction_of_one_run_and_its_run_spread_within_a_session():
    from pytest_gpucomm.gate.decision import NO_PRIOR

    rng = np.random.default_rng(3)
    runs = [run_location(100.0 * np.exp(rng.normal(s, SD / 4, 50) + rng.normal(0, SD)))
            for s in (0.0, SD) for _ in range(3)]
    model = fit_case(runs, ["a"] * 3 + ["b"] * 3)
    y = yardstick(model, NO_PRIOR, SLOWED, TOL, runs_pooled=2)
    sp = prediction(model, NO_PRIOR, 1, 0.0)
    assert y.baseline2 == sp.sd ** 2 and y.slowed == SLOWED and y.tolerance == TOL
    assert y.slowed2 == sp.run_sd ** 2 + (sp.run_sd ** 2 + model.mean_se2) / 2
    assert 0 < y.slowed2 < y.baseline2 * 2
    assert y.to_dict()["source"] == "the case's baseline model"
