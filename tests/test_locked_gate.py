"""A locked gate (--gpucomm-lock, GPUCOMM_LOCK=1; issue 47, item 1): the repository under test cannot loosen the
gate's settings through its pytest configuration (addopts, the gpucomm_* ini keys), PYTEST_ADDOPTS or the
GPUCOMM_* variables, and the header says that the settings are locked and what was set aside."""

from __future__ import annotations

import json

import pytest

# loaded before any in-process run (pytester drops the modules a run imports; see tests/test_gate_plugin.py)
from pytest_gpucomm.gate import decision, store  # noqa: F401

from test_gate_plugin import FAST, TEST_FILE, _save_simulated_runs

PLAIN = "def test_a():\n    pass\n"

LOOSENING_INI = "[pytest]\naddopts = --gpu-tolerance=0.9\ngpucomm_tolerance = 0.5\ngpucomm_alpha = 1e-9\n"


def test_a_pytest_ini_in_the_working_folder_cannot_loosen_a_locked_gate(pytester, monkeypatch):
    pytester.makepyfile(TEST_FILE)
    _save_simulated_runs(pytester, monkeypatch, n=8, sessions=True)  # 8 sessions: a 20 % drop is caught
    ini = pytester.makefile(".ini", pytest=LOOSENING_INI)  # pytest.ini
    monkeypatch.setenv("SIM_RUN", "7")
    monkeypatch.setenv("SIM_SLOWER", str(1.0 / 0.8))  # every case 20 % slower
    loosened = pytester.runpytest("--gpu-baseline=cpu", *FAST)
    loosened.stdout.fnmatch_lines(["gpucomm settings: *tolerance=0.9,*"])
    loosened.assert_outcomes(passed=2)  # unlocked, the file's addopts turns a 20 % drop into a pass
    # a locked run takes no GPUCOMM_* variable, GPUCOMM_DEVICE=cpu of the test environment neither: on a machine
    # with a GPU it would measure the GPU and refuse the CPU baseline, so the device is given on the command line
    # (and the re-measures at once, as GPUCOMM_REMEASURE_AFTER=0 of tests/conftest.py gives the unlocked runs)
    locked = pytester.runpytest("--gpu-baseline=cpu", "--gpucomm-lock", "--gpucomm-device=cpu",
                                "--gpu-remeasure-after=0", "--gpucomm-json=report.json", *FAST)
    locked.stdout.fnmatch_lines([
        "gpucomm settings: *tolerance=0.05, tail-tolerance=*, alpha=0.01,*",
        "gpucomm locked (--gpucomm-lock on the command line): every gpucomm option from the command line or its*",
    ])
    text = " ".join(locked.stdout.str().split())  # the header line is wrapped to the terminal
    for ignored in (f"--gpu-tolerance=0.9 (addopts in {ini})", f"gpucomm_tolerance = 0.5 (the ini key in {ini})",
                    f"gpucomm_alpha = 1e-9 (the ini key in {ini})"):
        assert ignored in text, text
    locked.assert_outcomes(failed=2)
    locked.stdout.fnmatch_lines(["REGRESSION: copy on *", "  beyond the 5% tolerance of baseline cpu: *"])
    assert locked.ret == pytest.ExitCode.TESTS_FAILED
    settings = json.loads((pytester.path / "report.json").read_text())["settings"]
    assert settings["locked"] is True and settings["tolerance"] == 0.05 and settings["alpha"] == 0.01


@pytest.mark.parametrize("name, text", [
    ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "--gpu-tolerance=0.9"\ngpucomm_tolerance = "0.5"\n'),
    ("tox.ini", "[pytest]\naddopts = --gpu-tolerance=0.9\ngpucomm_tolerance = 0.5\n"),
    ("setup.cfg", "[tool:pytest]\naddopts = --gpu-tolerance=0.9\ngpucomm_tolerance = 0.5\n"),
], ids=["pyproject", "tox", "setup.cfg"])
def test_no_pytest_configuration_file_changes_the_tolerance_of_a_locked_run(pytester, name, text):
    path = pytester.path / name
    path.write_text(text)
    pytester.makepyfile(PLAIN)
    unlocked = pytester.runpytest("--gpu-baseline=cpu", "-p", "no:cacheprovider")
    unlocked.stdout.fnmatch_lines(["gpucomm settings: *tolerance=0.9,*"])  # the file is read: the check can fail
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpucomm-lock", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["gpucomm settings: *tolerance=0.05,*", "gpucomm locked (--gpucomm-lock on the*"])
    assert f"--gpu-tolerance=0.9 (addopts in {path})" in " ".join(result.stdout.str().split())
    assert result.ret == 0


def test_gpucomm_lock_in_the_environment_sets_aside_pytest_addopts_and_the_gpucomm_variables(pytester, monkeypatch):
    pytester.makepyfile(PLAIN)
    monkeypatch.setenv("PYTEST_ADDOPTS", "--gpu-alpha=0.5 --gpu-baseline-dir=elsewhere")
    monkeypatch.setenv("GPUCOMM_TOLERANCE", "0.9")
    monkeypatch.setenv("GPUCOMM_LOCK", "1")
    result = pytester.runpytest("--gpu-baseline=cpu", "--gpu-tolerance=0.1", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "gpucomm settings: *baseline=cpu, tolerance=0.1, tail-tolerance=*, alpha=0.01,*",  # the command line's own
        "gpucomm locked (the GPUCOMM_LOCK environment variable): *",
    ])
    text = " ".join(result.stdout.str().split())
    for ignored in ("--gpu-alpha=0.5 (PYTEST_ADDOPTS)", "--gpu-baseline-dir=elsewhere (PYTEST_ADDOPTS)",
                    "GPUCOMM_TOLERANCE=0.9 (the environment)"):
        assert ignored in text, text
    assert result.ret == 0


def test_a_locked_run_with_nothing_to_set_aside_says_so_and_an_unlocked_run_prints_no_lock_line(pytester,
                                                                                               monkeypatch):
    monkeypatch.delenv("GPUCOMM_DEVICE", raising=False)  # tests/conftest.py sets these
    monkeypatch.delenv("GPUCOMM_REMEASURE_AFTER", raising=False)
    pytester.makepyfile(PLAIN)
    result = pytester.runpytest("--gpucomm-lock", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["gpucomm locked (--gpucomm-lock on the command line): * nothing was set elsewhere"])
    pytester.runpytest("-p", "no:cacheprovider").stdout.no_fnmatch_line("*gpucomm locked*")


def test_a_strict_flag_from_addopts_is_set_aside_by_the_lock_like_any_other(pytester):
    # a flag read only from the command line: addopts cannot switch strictness (or saving) on or off
    pytester.makefile(".ini", pytest="[pytest]\naddopts = --gpu-baseline-strict --gpu-baseline-save\n")
    pytester.makepyfile(PLAIN)
    result = pytester.runpytest("--gpucomm-lock", "-p", "no:cacheprovider")
    text = " ".join(result.stdout.str().split())
    assert "--gpu-baseline-save (addopts in" in text and "--gpu-baseline-strict (addopts in" in text, text
    assert result.ret == 0  # unlocked, strict (and save) without a baseline is a usage error
