"""Issue 49, item 5: one reading of each value.  A yes/no setting takes the same words wherever it is given
(``checks.flag``), and an empty value is an error for every option, environment variable and ini key
(``checks.not_empty``), never "unset" for some and "off" for others."""

from __future__ import annotations

import pytest

from pytest_gpucomm import checks
from pytest_gpucomm.checks import CheckError, Origin


@pytest.mark.parametrize("word, value", [
    *[(w, True) for w in ("1", "true", "yes", "on", "TRUE", "Yes", "On", " on ")],
    *[(w, False) for w in ("0", "false", "no", "off", "FALSE", "No", "OFF", "\t0\n")],
])
def test_a_yes_no_setting_reads_the_four_pairs_of_words_in_any_case(word, value):
    assert checks.flag(Origin.option("--x", word, "the command line")) is value
    assert checks.env_flag("GPUCOMM_X", not value, {"GPUCOMM_X": word}) is value


@pytest.mark.parametrize("word", ["maybe", "2", "y", "n", "enabled", "-1", "tru"])
def test_any_other_word_for_a_yes_no_variable_is_refused_naming_the_value_and_the_variable(word):
    """Before: ``GPUCOMM_SUPERVISE=maybe`` was taken as on, ``GPUCOMM_ALLOW_XDIST=maybe`` refused."""
    with pytest.raises(CheckError) as info:
        checks.env_flag("GPUCOMM_SUPERVISE", True, {"GPUCOMM_SUPERVISE": word})
    assert str(info.value) == (f"invalid GPUCOMM_SUPERVISE {word!r} (from the GPUCOMM_SUPERVISE environment "
                               "variable): expected 1/0, true/false, yes/no or on/off (any case)")


@pytest.mark.parametrize("default", [True, False])
def test_an_unset_yes_no_variable_takes_its_default_and_an_empty_one_is_refused(default):
    assert checks.env_flag("GPUCOMM_X", default, {}) is default
    for empty in ("", "  "):
        with pytest.raises(CheckError, match=r"^invalid GPUCOMM_X '\s*' \(from the GPUCOMM_X environment variable\): "
                                             r"the value is empty; give one, or unset GPUCOMM_X for its default$"):
            checks.env_flag("GPUCOMM_X", default, {"GPUCOMM_X": empty})


def test_an_empty_text_is_an_error_for_a_variable_and_an_option_alike_each_saying_how_to_leave_it_out():
    assert checks.env_text("GPUCOMM_X", {}) is None
    assert checks.env_text("GPUCOMM_X", {"GPUCOMM_X": " a "}) == " a "
    with pytest.raises(CheckError, match="unset GPUCOMM_X for its default"):
        checks.env_text("GPUCOMM_X", {"GPUCOMM_X": ""})
    with pytest.raises(CheckError) as info:
        checks.not_empty(Origin.option("--gpu-baseline", "", "the ini key gpucomm_baseline in /x/pytest.ini"))
    assert str(info.value) == ("invalid --gpu-baseline '' (from the ini key gpucomm_baseline in /x/pytest.ini): the "
                               "value is empty; give one, or leave the option out for its default")
