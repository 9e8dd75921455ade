"""The status type that every table, report and JUnit property prints."""

import json

from pytest_gpucomm.vocab import Status


def test_a_status_prints_and_serialises_as_its_word():
    assert f"{Status.REGRESSION}" == "REGRESSION" and str(Status.FLOOR_OK) == "floor-ok"
    assert json.dumps({"status": Status.NOT_GATED}) == '{"status": "not gated"}'
    assert json.dumps({"status": Status.NOT_GATED_STRICT}) == '{"status": "NOT GATED"}'
    assert Status("improved") is Status.IMPROVED and Status.OK == "ok"


def test_only_missed_thresholds_regressions_tails_strict_new_strict_not_gated_and_floors_fail():
    assert {s for s in Status if s.failed} == {Status.FAILED, Status.REGRESSION, Status.TAIL, Status.NEW_STRICT,
                                               Status.NOT_GATED_STRICT, Status.FLOOR}
