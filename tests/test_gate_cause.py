"""gate/cause.py: which environment variable made a case slower (issue 29), on made-up re-measures; each
re-measure judged by its interval against the baseline and against the slowed run (issue 45, item 5)."""

from __future__ import annotations

import math

import numpy as np

from pytest_gpucomm.env.fingerprint import ABSENT, diff_fingerprints
from pytest_gpucomm.gate.cause import (BACK, NO, PARTLY, EnvChange, Remeasured, Yardstick, case_env_changes,
                                       env_changes, find_cause, level_cause_line, likely_first, yardstick)
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


# -- a job across nodes (issue 46, item 1): each node's variables, under "nodes" in the job's fingerprint ----------

def _job(*envs, hosts=None, own=None):
    """A job's fingerprint: every node's env (node -> that node's fingerprint, with its host) and the run's own
    (rank 0's: node 0's unless ``own``)."""
    hosts = hosts or [f"vm-{'abcdefgh'[k]}" for k in range(len(envs))]
    return {"env": dict(own if own is not None else envs[0]),
            "nodes": {str(k): {"host": hosts[k], "env": dict(e)} for k, e in enumerate(envs)}}


def test_a_variable_changed_on_one_node_is_that_nodes_change_in_a_fingerprint_diff():
    old = _job({"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "2"})
    new = _job({"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "Ring"})
    assert env_changes(diff_fingerprints(old, new), absent=ABSENT) == [EnvChange("NCCL_ALGO", None, "Ring", node=1)]
    new["env"]["OMP_NUM_THREADS"] = new["nodes"]["0"]["env"]["OMP_NUM_THREADS"] = "1"  # on node 0: rank 0's too
    assert env_changes(diff_fingerprints(old, new), absent=ABSENT) == [
        EnvChange("OMP_NUM_THREADS", "2", "1"), EnvChange("OMP_NUM_THREADS", "2", "1", node=0),
        EnvChange("NCCL_ALGO", None, "Ring", node=1)]


def test_a_node_local_case_is_tested_on_its_own_nodes_changes_only():
    old = _job({"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "2"})
    new = _job({"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "Ring"})
    assert case_env_changes(old, new, node=1) == [EnvChange("NCCL_ALGO", None, "Ring", node=1, host="vm-b")]
    assert case_env_changes(old, new, node=0) == []  # node 0 is as it was


def test_a_node_that_differs_from_its_peers_is_tested_on_their_value_where_the_baseline_holds_no_node():
    """A baseline recorded without each node's fingerprint: node 2 against the baseline's own env, and against
    its peers today; where the baseline holds the node, a value it kept is no cause."""
    new = _job({"NCCL_PROTO": "Simple", "X": "1"}, {"NCCL_PROTO": "Simple", "X": "1"}, {"NCCL_PROTO": "LL"})
    assert case_env_changes({"env": {"NCCL_PROTO": "LL"}}, new, node=2) == [
        EnvChange("NCCL_PROTO", "Simple", "LL", node=2, host="vm-c", peers=True),
        EnvChange("X", "1", None, node=2, host="vm-c", peers=True)]
    assert case_env_changes({"env": {"NCCL_PROTO": "Simple"}}, new, node=2) == [  # changed since: not twice
        EnvChange("NCCL_PROTO", "Simple", "LL", node=2, host="vm-c"),
        EnvChange("X", "1", None, node=2, host="vm-c", peers=True)]
    old = _job(*[{"NCCL_PROTO": "LL"}] * 3)
    assert case_env_changes(old, new, node=2) == []  # node 2 kept its value; its peers moved
    assert case_env_changes(old, new, node=0) == [EnvChange("NCCL_PROTO", "LL", "Simple", node=0, host="vm-a"),
                                                  EnvChange("X", None, "1", node=0, host="vm-a")]


def test_a_job_wide_case_is_tested_on_every_nodes_changes_named_with_the_one_node_that_changed():
    old = _job({"A": "1", "B": "1", "C": "1"}, {"A": "1", "B": "1", "C": "2"})
    new = _job({"A": "1", "B": "0", "C": "3"}, {"A": "5", "B": "0", "C": "3"})
    assert case_env_changes(old, new) == [
        EnvChange("A", "1", "5", node=1, host="vm-b"),  # node 1 alone: set back on every rank, A=1 as node 0's
        EnvChange("B", "1", "0")]  # every node: not one node's; C, whose baseline value was not one, left out
    # a baseline whose nodes do not hold the variable: the run's own env says it changed
    old = _job({"A": "1"}, {"A": "1"}, own={"A": "1", "S": "1"})
    assert case_env_changes(old, _job({"A": "1"}, {"A": "1"})) == [EnvChange("S", "1", None)]


def test_a_run_of_one_machine_is_tested_on_its_own_environment_as_before():
    old = {"env": {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "Ring"}}
    new = {"env": {"OMP_NUM_THREADS": "1", "NCCL_PROTO": "Simple"}}
    assert case_env_changes(old, new) == env_changes(diff_fingerprints(old, new), absent=ABSENT)
    assert case_env_changes(old, new, node=3) == case_env_changes(old, new)  # no nodes in the fingerprint


def test_the_cause_line_of_a_node_names_the_node_and_its_host():
    change = EnvChange("NCCL_ALGO", None, "Ring", node=1, host="vm-b")
    remeasure, _ = _lab(lambda env: True)
    r = find_cause([change], lambda env: Remeasured(1.0) if env == {"NCCL_ALGO": None} else remeasure(env), _stick())
    assert r.where == "node 1, vm-b" and r.to_dict()["where"] == "node 1, vm-b"
    assert r.text().startswith("cause (node 1, vm-b): NCCL_ALGO=Ring (unset again: 1x [")
    assert level_cause_line("case residual", "copy, 1 MiB", r.text()).startswith(
        "gpucomm cause of the REGRESSION (case residual) copy, 1 MiB (node 1, vm-b): NCCL_ALGO=Ring (unset again: ")
    none = find_cause([change], lambda env: Remeasured(SLOWED), _stick())
    assert none.text().startswith("no restoration of the environment (node 1, vm-b) brings it back from ")
    peer = EnvChange("NCCL_PROTO", "Simple", "LL", node=2, host="vm-c", peers=True)
    assert find_cause([peer], lambda env: Remeasured(1.0), _stick()).text().startswith(
        "cause (node 2, vm-c): NCCL_PROTO=LL (set to Simple as on the other nodes: 1x [")
    assert find_cause([EnvChange("B", "1", "0")], lambda env: Remeasured(1.0), _stick()).text().startswith(
        "cause: B=0 (restored to 1: ")  # every node's change: no node named


def test_a_nodes_changes_since_the_baseline_are_tried_before_its_differences_from_its_peers():
    changes = [EnvChange("NCCL_PROTO", "Simple", "LL", node=2, peers=True), EnvChange("ZED", "1", "2", node=2)]
    assert [c.name for c in likely_first(changes)] == ["ZED", "NCCL_PROTO"]
