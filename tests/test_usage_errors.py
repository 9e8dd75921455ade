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


# -- issue 49: one reading of each value: one set of yes/no words, and empty is an error everywhere -------

@pytest.mark.parametrize("env, message", [
    ({"GPUCOMM_SUPERVISE": "maybe"}, "invalid GPUCOMM_SUPERVISE 'maybe' (from the GPUCOMM_SUPERVISE environment "
                                     "variable): expected 1/0, true/false, yes/no or on/off (any case)"),
    ({"GPUCOMM_ALLOW_XDIST": "maybe"}, "invalid GPUCOMM_ALLOW_XDIST 'maybe' (from the GPUCOMM_ALLOW_XDIST "
                                       "environment variable): expected 1/0, true/false, yes/no or on/off (any case)"),
    ({"GPUCOMM_ALLOW_XDIST": ""}, "invalid GPUCOMM_ALLOW_XDIST '' (from the GPUCOMM_ALLOW_XDIST environment "
                                  "variable): the value is empty; give one, or unset GPUCOMM_ALLOW_XDIST for its "
                                  "default"),
    ({"GPUCOMM_SUPERVISE": " "}, "invalid GPUCOMM_SUPERVISE ' ' (from the GPUCOMM_SUPERVISE environment variable): "
                                 "the value is empty*"),
    ({"GPUCOMM_BASELINE_SESSION": ""}, "invalid GPUCOMM_BASELINE_SESSION '' (from the GPUCOMM_BASELINE_SESSION "
                                       "environment variable): the value is empty*"),
    ({"GPUCOMM_RANK_START": ""}, "invalid GPUCOMM_RANK_START '' (*): the value is empty*"),
])
def test_a_gpucomm_variable_that_is_empty_or_no_yes_no_word_is_a_usage_error_before_any_test(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str) -> None:
    """Before: GPUCOMM_SUPERVISE=maybe was taken as on, an empty GPUCOMM_ALLOW_XDIST as off, an empty
    GPUCOMM_BASELINE_SESSION or GPUCOMM_RANK_START as unset, while an empty GPUCOMM_JSON was an error."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pytester.makepyfile(PLAIN)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: " + message])


@pytest.mark.parametrize("word", ["YES", "On", "true", "1"])
def test_a_yes_no_variable_takes_any_of_the_words_in_any_case(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch, word: str) -> None:
    monkeypatch.setenv("GPUCOMM_ALLOW_XDIST", word)
    monkeypatch.setenv("GPUCOMM_SUPERVISE", word.lower().replace("yes", "no"))
    pytester.makepyfile(PLAIN)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_help_says_the_empty_rule_and_the_yes_no_words(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["GPU communication benchmarks (pytest-gpucomm): command line > environment > ini; "
                                 "an empty value is an error, not unset:",
                                 "*GPUCOMM_ALLOW_XDIST=1 (1/0, true/false, yes/no or on/off)*"])


def test_gpucomm_refuses_an_empty_baseline_dir_variable_as_the_plugin_does(monkeypatch, capsys) -> None:
    """Before: an empty GPUCOMM_BASELINE_DIR was ./baselines for gpucomm and an error for pytest."""
    from pytest_gpucomm import cli

    monkeypatch.setenv("GPUCOMM_BASELINE_DIR", "")
    assert cli.main(["baselines", "list"]) == 2
    assert capsys.readouterr().err == ("gpucomm: error: invalid GPUCOMM_BASELINE_DIR '' (from the GPUCOMM_BASELINE_DIR "
                                       "environment variable): the value is empty; give one, or unset "
                                       "GPUCOMM_BASELINE_DIR for its default\n")


def test_a_bad_supervise_word_stops_a_launched_rank_before_its_supervising_parent_is_forked(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank of a launched job reads GPUCOMM_SUPERVISE before the session's settings (pytest_cmdline_main):
    the word is checked there too, a usage error and not an INTERNALERROR.  srun's variables of rank 0 of 2;
    nothing is started."""
    for k, v in dict(SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="1",
                     SLURM_NODEID="0", SLURM_STEP_NODELIST="node[1-2]", SLURM_STEP_ID="0", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT="1", GPUCOMM_SUPERVISE="maybe").items():
        monkeypatch.setenv(k, v)
    pytester.makepyfile(PLAIN)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["ERROR: invalid GPUCOMM_SUPERVISE 'maybe' (from the GPUCOMM_SUPERVISE environment "
                                 "variable): expected 1/0, true/false, yes/no or on/off (any case)"])
