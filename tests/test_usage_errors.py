"""Settings that used to pass silently or end in INTERNALERROR are usage errors naming what is wrong (issue 27):
an empty ini value, --gpu-baseline-strict without a baseline, an unknown MPLBACKEND with --gpucomm-plots; and the
markers' help quotes the defaults the gate uses."""

from __future__ import annotations

import pytest

from pytest_gpucomm.vocab import DEFAULT_TAIL_TOLERANCE, DEFAULT_TOLERANCE

PLAIN = "def test_a():\n    pass\n"


@pytest.mark.parametrize("ini", ["[pytest]\ngpucomm_baseline =\n", "[pytest]\ngpucomm_baseline = \n"])
def test_an_empty_baseline_in_the_ini_file_is_a_usage_error_naming_the_file(pytester: pytest.Pytester,
                                                                            ini: str) -> None:
    path = pytester.makeini(ini)
    pytester.makepyfile(PLAIN)
    result = pytester.runpytest("--gpu-baseline-strict", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()  # it was an ungated run exiting 0
    result.stderr.fnmatch_lines([f"*invalid --gpu-baseline '*' (from the ini key gpucomm_baseline in {path}): the "
                                 "value is empty*"])


def test_an_empty_value_in_pyproject_is_as_empty_as_one_on_the_command_line(pytester: pytest.Pytester) -> None:
    path = pytester.makepyprojecttoml('[tool.pytest.ini_options]\ngpucomm_json = ""\n')
    pytester.makepyfile(PLAIN)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*invalid --gpucomm-json '' (from the ini key gpucomm_json in {path}): the value is "
                                 "empty*"])


def test_strict_without_a_baseline_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLAIN)
    result = pytester.runpytest("--gpu-baseline-strict", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # it exited 0 without a word
    result.stderr.fnmatch_lines(["*--gpu-baseline-strict needs --gpu-baseline=NAME|PATH|auto*"])


def test_the_markers_help_quotes_the_default_tolerances(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    text = result.stdout.str()
    assert (f"tolerance overrides the baseline tolerance (default {DEFAULT_TOLERANCE:g}) for this test, tail_tolerance "
            f"the tail verdict's (default {DEFAULT_TAIL_TOLERANCE:g})") in " ".join(text.split()), text  # it said 1.0


def test_an_unknown_mplbackend_with_plots_is_a_usage_error_naming_it(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MPLBACKEND", "nosuch")
    pytester.makepyfile(PLAIN)
    # a process of its own: matplotlib reads MPLBACKEND once, when first imported
    result = pytester.runpytest_subprocess(f"--gpucomm-plots={pytester.path / 'plots'}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stderr.str()  # it was INTERNALERROR
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()
    result.stderr.fnmatch_lines(["*invalid environment: MPLBACKEND='nosuch' (read by matplotlib for --gpucomm-plots=*"
                                 "set it to a backend matplotlib knows*"])
