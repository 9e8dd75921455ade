"""The wait before a flagged case's re-measure (``--gpu-remeasure-after``): the session's first flagged case
is measured again no sooner than that many seconds after it was flagged, so that a slow state of the host
that ends within them (one H200's small host->device copies, slow for about two minutes of a fresh boot) is
not a regression, while one that outlasts them still is.  The session waits once at most.

The waits are checked on a fake clock; the verdicts on the simulated copy sweep (tests/simulated_copies.py)
whose slowed case is slow only for ``SIM_SLOW_FOR`` seconds of real time after the run's first measurement,
its re-measures fresh (``SIM_FRESH_HERE``) as a copy's on a GPU are.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from simulated_copies import SLOW_CASE, record_baseline, run_pytest, write_files

from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.ops.timing import TimingSettings
from pytest_gpucomm.plugin.remeasures import Remeasures


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _remeasures(after_s: float, clock: FakeClock, said: list[str], saving: bool = False) -> Remeasures:
    return Remeasures(None, None, remeasure_after_s=after_s, baseline_save=saving, timeout_s=60.0,  # type: ignore[arg-type]
                      timing=TimingSettings, say=said.append, clock=clock, sleep=clock.sleep)


def _m() -> Measurement:
    return Measurement(op="copy", size_bytes=4096, samples_s=[1e-5] * 10, devices=("cpu:0", "cpu:1"))


def test_the_sessions_first_remeasure_waits_the_whole_time_a_later_one_what_is_left_then_none():
    clock, said = FakeClock(), []
    r = _remeasures(120.0, clock, said)
    first = r.remeasure(_m, _m, "in a new process", "in the same process", "t.py::a")
    assert clock.slept == [120.0]
    assert first.fresh and first.how == "in a new process, 120 s later (--gpu-remeasure-after)"
    assert said == ["gpucomm: t.py::a ran below the tolerance; measuring it again in 120 s (--gpu-remeasure-after), "
                    "so that a slow state of a minute or two does not decide"]
    clock.now += 30.0  # a second flagged case, 30 s after the wait ended: measured again at once
    second = r.remeasure(_m, _m, "in a new process", "in the same process", "t.py::b")
    assert clock.slept == [120.0] and second.how == "in a new process" and len(said) == 1


def test_a_remeasure_asked_for_during_the_wait_waits_only_for_what_is_left_of_it():
    clock, said = FakeClock(), []
    r = _remeasures(120.0, clock, said)
    assert r.wait("t.py::a") == 120.0
    r.first_flagged = clock.now - 50.0  # as if the first flag were 50 s ago
    assert r.wait("t.py::b") == pytest.approx(70.0) and clock.slept == [120.0, pytest.approx(70.0)]


def test_with_zero_seconds_nothing_waits_and_the_remeasure_says_nothing_of_it():
    clock, said = FakeClock(), []
    r = _remeasures(0.0, clock, said)
    again = r.remeasure(None, _m, "", "in the same process: a launched job's copy", "t.py::a")
    assert clock.slept == [] and said == [] and again.how == "in the same process: a launched job's copy"
    assert not again.fresh


def test_a_recording_run_never_waits_its_verdicts_failing_nothing():
    clock, said = FakeClock(), []
    r = _remeasures(120.0, clock, said, saving=True)
    again = r.remeasure(_m, _m, "in a new process", "in the same process", "t.py::a")
    assert clock.slept == [] and said == [] and again.how == "in a new process"


def test_a_remeasure_without_a_fresh_state_waits_too_and_says_so_after_where():
    clock, said = FakeClock(), []
    r = _remeasures(5.0, clock, said)
    again = r.remeasure(None, _m, "", "in the same process group", "t.py::a")
    assert clock.slept == [5.0] and again.how == "in the same process group, 5 s later (--gpu-remeasure-after)"


@pytest.mark.parametrize("value, message", [
    ("-1", "invalid --gpu-remeasure-after '-1' (from the command line)"),
    ("soon", "invalid --gpu-remeasure-after 'soon' (from the command line)"),
    ("1e9", "invalid --gpu-remeasure-after '1e9' (from the command line)"),
])
def test_a_bad_wait_is_a_usage_error_naming_the_value_and_where_it_came_from(pytester, value, message):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", f"--gpu-remeasure-after={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


# -- on the simulated sweep -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("waits")
    write_files(folder)
    record_baseline(folder)
    return folder


def _gated(folder, after: str, slow_for: str, name: str):
    env = {"GPUCOMM_REMEASURE_AFTER": after, "SIM_SLOW_FOR": slow_for, "SIM_FRESH_HERE": "1"}
    t0 = time.monotonic()
    proc = run_pytest(folder, "--gpu-baseline=cpu", f"--gpucomm-json={name}.json", sim_run=5, slow=True,
                      extra_env=env)
    rows = json.loads((folder / f"{name}.json").read_text())["rows"]
    (row,) = [r for r in rows if SLOW_CASE in r["test"]]
    return proc, row, time.monotonic() - t0


def test_a_slow_state_that_ends_within_the_wait_fails_nothing_where_a_remeasure_at_once_was_a_regression(recorded):
    at_once, row, _ = _gated(recorded, "0", "2", "at-once")
    assert at_once.returncode == 1, at_once.stdout
    assert row["status"] == "REGRESSION"  # the case measured again while still slow: the failure before
    spaced, row, took = _gated(recorded, "4", "2", "spaced")
    assert spaced.returncode == 0, spaced.stdout
    assert row["status"] != "REGRESSION" and took >= 4.0
    (again,) = row["baseline"]["remeasures"]
    assert again["how"].endswith("s later (--gpu-remeasure-after)")
    assert "ran below the tolerance; measuring it again in" in spaced.stdout


def test_a_slow_state_that_outlasts_the_wait_is_a_regression_saying_how_long_it_waited(recorded):
    proc, row, took = _gated(recorded, "1", "inf", "outlasts")
    assert proc.returncode == 1 and row["status"] == "REGRESSION" and took >= 1.0
    (again,) = row["baseline"]["remeasures"]
    assert again["how"] == "in a new process, 1 s later (--gpu-remeasure-after)" and again["fresh"]
    assert "measured again: " in proc.stdout and "1 s later (--gpu-remeasure-after)" in proc.stdout


class _Capture:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def global_and_fixture_disabled(self):
        import contextlib

        @contextlib.contextmanager
        def off():
            self.log.append("capture off")
            yield
            self.log.append("capture on")
        return off()


def test_the_line_of_the_wait_is_written_past_the_tests_capture_so_that_a_passing_test_shows_it_too():
    from pytest_gpucomm.plugin.state import say_live

    log: list[str] = []
    reporter = SimpleNamespace(write_line=lambda text, **kw: log.append(text))
    plugins = {"terminalreporter": reporter, "capturemanager": _Capture(log)}
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=plugins.get),
                             get_terminal_writer=lambda: SimpleNamespace(fullwidth=120))
    say_live(config, "gpucomm: t.py::a ran below the tolerance; measuring it again in 120 s")  # type: ignore[arg-type]
    assert log == ["capture off", "gpucomm: t.py::a ran below the tolerance; measuring it again in 120 s",
                   "capture on"]
