"""gate/cause.py: which environment variable made a case slower (issue 29), on made-up re-measures."""

from __future__ import annotations

from pytest_gpucomm.env.fingerprint import ABSENT, diff_fingerprints
from pytest_gpucomm.gate.cause import EnvChange, env_changes, find_cause, likely_first


def _lab(slow_when):
    """A re-measurer of a case that is 0.7x of the baseline while ``slow_when(env)`` holds, else 1.01x;
    ``env`` is today's environment with the restored variables applied.  Keeps what it was asked."""
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
        return 0.7 if slow_when(env) else 1.01

    return remeasure, asked


def test_the_variables_of_a_fingerprint_diff_are_the_changes_and_nothing_else():
    old = {"driver": "1", "env": {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "Ring"}}
    new = {"driver": "2", "env": {"OMP_NUM_THREADS": "1", "NCCL_PROTO": "Simple"}}
    assert env_changes(diff_fingerprints(old, new), absent=ABSENT) == [
        EnvChange("NCCL_ALGO", "Ring", None), EnvChange("NCCL_PROTO", None, "Simple"),
        EnvChange("OMP_NUM_THREADS", "2", "1")]


def test_one_changed_variable_is_restored_alone_and_named_as_the_cause():
    remeasure, asked = _lab(lambda env: env.get("OMP_NUM_THREADS") == "1")
    r = find_cause([EnvChange("OMP_NUM_THREADS", "2", "1")], remeasure, tolerance=0.05)
    assert asked == [{"OMP_NUM_THREADS": "2"}]
    assert r.text() == "cause: OMP_NUM_THREADS=1 (restored to 2: 1.01x of the baseline)"


def test_several_are_restored_together_first_then_alone_with_the_libraries_own_first():
    remeasure, asked = _lab(lambda env: env.get("OMP_NUM_THREADS") == "1")
    changes = [EnvChange("OMP_NUM_THREADS", "2", "1"), EnvChange("NCCL_PROTO", None, "Simple"),
               EnvChange("FOO", "y", "x")]
    r = find_cause(changes, remeasure, tolerance=0.05)
    assert asked == [{"OMP_NUM_THREADS": "2", "NCCL_PROTO": None, "FOO": "y"}, {"NCCL_PROTO": None},
                     {"OMP_NUM_THREADS": "2"}]
    assert r.cause == ("OMP_NUM_THREADS",) and r.text().startswith("cause: OMP_NUM_THREADS=1 (restored to 2")


def test_when_restoring_everything_does_not_help_it_says_so_after_one_remeasure():
    remeasure, asked = _lab(lambda env: True)  # the driver, say: no variable brings it back
    r = find_cause([EnvChange("OMP_NUM_THREADS", "2", "1"), EnvChange("NCCL_PROTO", None, "Simple")], remeasure,
                   tolerance=0.05)
    assert len(asked) == 1 and r.cause == ()
    assert r.text() == "no restoration of the environment brings it back (tried: all 2: 0.70x)"


def test_a_cause_of_two_variables_together_is_named_as_such_within_the_budget():
    remeasure, asked = _lab(lambda env: env.get("OMP_NUM_THREADS") == "1" or env.get("NCCL_PROTO") == "Simple")
    changes = [EnvChange("OMP_NUM_THREADS", "2", "1"), EnvChange("NCCL_PROTO", None, "Simple"),
               EnvChange("FOO", "y", "x")]
    r = find_cause(changes, remeasure, tolerance=0.05, budget=3)
    assert len(asked) == 3  # all at once, then two alone: the budget
    assert r.text() == ("cause: these together: OMP_NUM_THREADS=1, NCCL_PROTO=Simple, FOO=x (all restored: 1.01x "
                        "of the baseline)")


def test_a_remeasure_that_fails_is_named_and_counts():
    def broken(restore):
        raise RuntimeError("rank 1 died")

    r = find_cause([EnvChange("NCCL_PROTO", None, "Simple")], broken, tolerance=0.05)
    assert r.text() == "no restoration of the environment brings it back (tried: NCCL_PROTO unset again: " \
                       "RuntimeError: rank 1 died)"


def test_no_change_or_no_budget_skips_the_test_saying_why():
    assert find_cause([], lambda e: 1.0, 0.05).text() == "cause test not run: the environment is the baseline's"
    assert find_cause([EnvChange("A", "1", "2")], lambda e: 1.0, 0.05, budget=0).text() == \
        "cause test not run: no re-measures allowed (budget 0)"


def test_the_libraries_own_variables_come_first():
    names = [c.name for c in likely_first([EnvChange(n, None, "1") for n in ("ZED", "OMP_NUM_THREADS", "NCCL_ALGO")])]
    assert names == ["NCCL_ALGO", "OMP_NUM_THREADS", "ZED"]
