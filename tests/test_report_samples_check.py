"""The report reader's check of the samples (report.saved.check_report): done at C speed where every sample is a
plain positive finite number, by the schema one item at a time where one is not, so that the message still names
the first bad sample and what is wrong with it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_gpucomm.report.saved import ReportError, check_report

REPORT = Path(__file__).parent / "data" / "formats" / "report_2.json"


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(REPORT.read_text())


@pytest.mark.parametrize("bad, says", [(0.0, "less than or equal to the minimum of 0"),
                                       (-1e-6, "less than or equal to the minimum of 0"),
                                       (True, "is not of type 'number'"), ("1e-6", "is not of type 'number'")])
def test_a_bad_sample_among_plain_ones_is_named_with_its_path_and_what_is_wrong(report, bad, says):
    doc = copy.deepcopy(report)
    doc["rows"][1]["samples_s"][2] = bad
    with pytest.raises(ReportError) as e:
        check_report(doc, "r.json")
    assert "at $.rows[1].samples_s[2]" in str(e.value) and says in str(e.value), str(e.value)


def test_a_report_of_plain_positive_samples_passes_and_ints_count_as_numbers(report):
    doc = copy.deepcopy(report)
    doc["rows"][0]["samples_s"] = [1, 2, 3]
    assert check_report(doc, "r.json")["rows"][0]["samples_s"] == [1, 2, 3]
