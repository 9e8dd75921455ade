"""Hostile input and faults (CPU): errors before the work, nothing lost at the end, nothing left behind."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAST = ["--gpucomm-min-time=0.002", "-p", "no:cacheprovider"]

COPY_TEST = """
def test_copy(gpu_pair, comm):
    comm.copy(gpu_pair, "4KiB")
"""


# -- empty values and numbers past their range: usage errors before any test --------------------------

@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--gpu-baseline="], {}, "invalid --gpu-baseline '' (from the command line): the value is empty*"),
        (["--gpu-baseline=", "--gpu-baseline-strict"], {}, "invalid --gpu-baseline '' *empty*"),
        ([], {"GPUCOMM_BASELINE": ""}, "invalid --gpu-baseline '' (from the GPUCOMM_BASELINE environment variable)*"),
        (["--gpucomm-json= "], {}, "invalid --gpucomm-json ' ' (from the command line): the value is empty*"),
        ([], {"GPUCOMM_BENCHMARK_JSON": ""}, "invalid --gpucomm-benchmark-json '' *empty*"),
        (["--gpu-baseline-dir="], {}, "invalid --gpu-baseline-dir '' *empty*"),
        (["--gpucomm-min-time=1e300"], {}, "invalid --gpucomm-min-time '1e300' *at most 3600*"),
        (["--gpucomm-timeout=1e12"], {}, "invalid --gpucomm-timeout '1e12' *at most 604800*"),
        (["--gpu-baseline-runs=100000000000"], {}, "invalid --gpu-baseline-runs '100000000000' *from 1 to 1000*"),
        (["--gpucomm-max-size=1e30"], {}, "invalid size '1e30' *above the largest size, 1 TiB*"),
    ],
)
def test_empty_and_out_of_range_settings_are_usage_errors(pytester, monkeypatch, args, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*" + message])


def test_a_sweep_of_absurdly_many_sizes_is_refused_at_once(pytester):
    sweep = """
        from pytest_gpucomm import sizes

        @sizes(start="1KiB", stop="1GiB", factor={factor})
        def test_a(size):
            pass
        """
    pytester.makepyfile(sweep.format(factor=2))  # 21 sizes: what a run of an ordinary sweep costs here
    t0 = time.monotonic()
    pytester.runpytest("--collect-only", *FAST).assert_outcomes()
    ordinary_s = time.monotonic() - t0
    pytester.makepyfile(sweep.format(factor=1.0000001))
    t0 = time.monotonic()
    result = pytester.runpytest(*FAST)
    # refused from the count alone: it used to spend most of a minute making the sizes
    assert time.monotonic() - t0 < 20 * ordinary_s + 2, ordinary_s
    result.stdout.fnmatch_lines(["*@sizes(start='1KiB', stop='1GiB', factor=1.0000001) would make 138,629,443 sizes; "
                                 "at most 1000 (raise the factor)*"])


def test_a_huge_rank_timeout_is_an_error_naming_the_test(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.rank_timeout(1e300)
        def test_a(process_group):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_a_huge_rank_timeout_is_an_error_naming_the_test.py::test_a: "
                                 "@rank_timeout(1e+300): at most 604800 seconds*"])


# -- ambiguity: two markers of one kind on one test ----------------------------------------------------

def test_two_bandwidth_markers_on_one_test_are_an_error_naming_both(pytester):
    pytester.makepyfile(
        test_two="""
        from pytest_gpucomm import bandwidth

        @bandwidth(min_gbps=1)
        @bandwidth(min_gbps=1000)
        def test_a(gpu_pair, comm):
            comm.copy(gpu_pair, "4KiB")
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*test_two.py::test_a*has two @bandwidth markers (@bandwidth(min_gbps=1*) and "
                                 "@bandwidth(min_gbps=1*)); give one*"])


def test_a_function_marker_overrides_its_class_marker(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import bandwidth

        @bandwidth(min_gbps=1e9)
        class TestCopies:
            @bandwidth(min_gbps=1e-9)
            def test_a(self, gpu_pair, comm):
                comm.copy(gpu_pair, "4KiB")
        """
    )
    pytester.runpytest(*FAST).assert_outcomes(passed=2)


def test_two_sizes_markers_on_one_test_are_a_collection_error(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import sizes

        @sizes("4KiB")
        @sizes("8KiB")
        def test_a(size):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    result.stdout.fnmatch_lines(["*has two @sizes markers*give one*"])
    assert result.ret != 0


# -- outputs: checked at the start; a write that fails at the end keeps the summary and fails the run ---

@pytest.mark.parametrize("option", ["--gpucomm-json", "--gpucomm-benchmark-json"])
def test_a_report_path_that_is_a_directory_stops_before_any_test(pytester, option):
    pytester.mkdir("out")
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest(f"{option}=out", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option}=out (from the command line): is a directory, not a file to write*"])
    assert "passed" not in result.stdout.str()


def test_a_report_under_a_file_stops_before_any_test(pytester):
    pytester.makefile(".txt", notadir="x")
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest("--gpucomm-json=notadir.txt/report.json", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpucomm-json=notadir.txt/report.json (from the command line): cannot write "
                                 "there: Not a directory*"])


@pytest.mark.parametrize("option, origin", [
    ("--gpucomm-json", " (from the command line)"),
    ("--gpucomm-benchmark-json", " (from the command line)"),
    ("--junitxml", ""),
    ("--gpucomm-plots", " (from the command line)"),
])
def test_an_output_path_where_no_file_can_be_created_stops_before_any_test_naming_the_option_and_the_path(
        pytester, option, origin):
    """Before: ``--gpucomm-json=/proc/gpucomm.json`` ran the tests, then said the report was NOT written (exit
    1); /proc's folder looks writable to root (os.access), but no file can be made there: a file is created
    and removed where each output goes, before any test runs."""
    if option == "--gpucomm-plots":
        pytest.importorskip("matplotlib")
    path = "/proc/gpucomm-out" + ("" if option == "--gpucomm-plots" else ".json")
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest(f"{option}={path}", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    message = f"ERROR: {option}={path}{origin}: cannot write there: No such file or directory"
    assert result.stderr.lines[0].startswith(message), result.stderr.lines
    assert "passed" not in result.stdout.str() and "test_copy" not in result.stdout.str()


def test_an_output_in_a_folder_that_is_not_there_yet_is_checked_in_the_nearest_folder_and_nothing_is_left(pytester):
    pytester.makepyfile(COPY_TEST)
    pytester.runpytest("--gpucomm-json=new/deeper/r.json", "--junitxml=j.xml", *FAST).assert_outcomes(passed=2)
    assert (pytester.path / "new" / "deeper" / "r.json").is_file()
    assert not [p for p in pytester.path.rglob(".gpucomm-probe-*")]


def test_a_plots_folder_under_a_file_stops_before_any_test_naming_the_file(pytester):
    pytest.importorskip("matplotlib")
    pytester.makefile(".txt", notadir="x")
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest("--gpucomm-plots=notadir.txt/figs", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpucomm-plots=notadir.txt/figs (from the command line): *notadir.txt' is not a "
                                 "directory*"])
    assert "passed" not in result.stdout.str()


def test_a_baseline_path_that_is_a_directory_stops_a_recording_run_before_any_test(pytester):
    pytester.mkdir("base.json")
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest("--gpu-baseline=base.json", "--gpu-baseline-save", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-baseline=base.json: base.json: is a directory, not a baseline file*"])
    assert "test_copy" not in result.stdout.str()


def test_a_report_that_cannot_be_written_at_the_end_keeps_the_table_and_fails_the_run(pytester):
    pytester.makeconftest(
        """
        import os, pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_sessionfinish(session):
            os.mkdir("report.json")  # the path was fine at the start; now it is taken by a folder
        """
    )
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest("--gpucomm-json=report.json", *FAST)
    result.stdout.fnmatch_lines(["*gpucomm results*", "copy, cpu:0->cpu:1 (test_copy*", "*4 KiB*",
                                 "gpucomm: ERROR: the JSON report report.json was NOT written: *",
                                 "gpucomm: FAILED: 1 output not written (the 'gpucomm: ERROR' lines above)",
                                 # what fails the session, counted in pytest's own final line
                                 # (and the cases no baseline judged, which fail nothing)
                                 "*= 2 passed, *1 gpucomm output not written, 2 gpucomm cases not judged (no "
                                 "baseline) in *"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# -- interrupted recordings are not saved unless asked -------------------------------------------------

INTERRUPTING = """
import pytest

def test_copy(gpu_pair, comm):
    comm.copy(gpu_pair, "4KiB")

def test_stop():
    raise KeyboardInterrupt
"""


@pytest.mark.slow
def test_an_interrupted_recording_run_saves_nothing(pytester):
    pytester.makepyfile(INTERRUPTING)
    # in this process (a process of its own imports torch again): the KeyboardInterrupt is the test's own, which
    # pytest ends the run with, as it would in a process of its own; no_reraise_ctrlc keeps it out of this session
    result = pytester.runpytest_inprocess("--gpu-baseline=base.json", "--gpu-baseline-save", *FAST,
                                          no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["gpucomm: the run did not finish, so its 2 measurements were NOT saved to "
                                 "base.json (--gpu-baseline-save-partial saves an unfinished run)"])
    assert not (pytester.path / "base.json").exists()


def test_a_recording_run_stopped_by_maxfail_saves_nothing(pytester):
    pytester.makepyfile(COPY_TEST + "\ndef test_z_fail():\n    assert False\n\ndef test_zz_never_run():\n    pass\n")
    result = pytester.runpytest("--gpu-baseline=base.json", "--gpu-baseline-save", "-x", *FAST)
    result.stdout.fnmatch_lines(["*the run did not finish*NOT saved*"])
    assert not (pytester.path / "base.json").exists()


@pytest.mark.slow
def test_an_interrupted_recording_run_saves_its_cases_when_asked(pytester):
    pytester.makepyfile(INTERRUPTING)
    result = pytester.runpytest_inprocess("--gpu-baseline=base.json", "--gpu-baseline-save",
                                          "--gpu-baseline-save-partial", *FAST, no_reraise_ctrlc=True)  # as above
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*saved 2 cases of this run*(an unfinished run, saved with "
                                 "--gpu-baseline-save-partial)*"])
    assert len(json.loads((pytester.path / "base.json").read_text())["cases"]) == 2


# -- SIGTERM: an orderly stop, as Ctrl-C --------------------------------------------------------------

def _gpucomm_dirs() -> set[str]:
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("gpucomm-")}


@pytest.mark.slow
def test_sigterm_stops_the_run_like_ctrl_c_and_leaves_no_worker_or_folder(pytester):
    started = pytester.path / "started"
    pytester.makepyfile(
        f"""
        import time
        from pathlib import Path

        def test_hold(process_group):
            process_group.executor.start()
            Path({str(started)!r}).write_text(",".join(str(p) for p in process_group.executor.pids))
            time.sleep(120)
        """
    )
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s"], cwd=pytester.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert started.exists(), proc.communicate(timeout=30)[0]
        pids = [int(p) for p in started.read_text().split(",")]
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "stopped by signal SIGTERM" in out
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    # only this run's folders (gpucomm-<its pid>-...): other test processes on the machine make their own
    assert not {d for d in _gpucomm_dirs() if d.startswith(f"gpucomm-{proc.pid}-")}


# -- pytest-xdist: the controller reports every worker's rows ------------------------------------------

@pytest.mark.slow
def test_under_xdist_the_json_report_and_the_table_hold_every_workers_rows(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        from pytest_gpucomm import sizes

        @sizes("4KiB", "8KiB", "16KiB")
        def test_copy(gpu_pair, size, comm):
            comm.copy(gpu_pair, size)
        """
    )
    # the controller in this process (a process of its own imports torch again); the workers are processes of
    # their own, as under any -n
    result = pytester.runpytest_inprocess("-n", "2", "--gpucomm-json=report.json", *FAST)
    result.assert_outcomes(passed=6)
    rows = json.loads((pytester.path / "report.json").read_text())["rows"]
    assert len(rows) == 6
    assert {(r["size_bytes"], tuple(r["devices"])) for r in rows} == {
        (s, d) for s in (4096, 8192, 16384) for d in (("cpu:0", "cpu:1"), ("cpu:1", "cpu:0"))}
    out = result.stdout.str()
    assert "gpucomm results" in out and "copy, cpu:0->cpu:1 (test_copy[0->1])" in out.splitlines()
    result.stdout.fnmatch_lines(["hardware: no GPU used: CPU*", "gpucomm: wrote 6 measurements to report.json"])


@pytest.mark.slow
def test_an_unchanged_run_under_xdist_against_a_baseline_of_one_session_prints_every_workers_verdicts_and_passes(
        pytester):
    # issue 49 item 7: an A/A run under -n 2 failed cases that did not change.  Two workers sharing 2 cores slow
    # each other, and a baseline of one session says nothing of how far such runs wander: with no prior for the
    # machine its cases are not judged (the evidence floor of issue 43), at the default tolerance.  A case flagged
    # there is measured again after --gpu-remeasure-after, as by default (the tests' environment sets 0): at once,
    # the other worker's copy still ran beside it on CI's 2 loaded cores, and both runs agreed on a 4 KiB copy
    # at half its speed (2.73 and 2.95 against 5.50 GB/s), a false REGRESSION; 10 s later that worker is done
    pytest.importorskip("xdist")
    # The recording and the controller of the run under -n 2 run in this process (a run in a process of its own
    # imports torch again); the run's two workers are processes of their own.  The controller prints the verdicts of
    # both workers' cases.
    pytester.makepyfile(COPY_TEST)
    assert pytester.runpytest_inprocess("--gpu-baseline=base.json", "--gpu-baseline-save", *FAST).ret == 0
    result = pytester.runpytest_inprocess("-n", "2", "--gpu-baseline=base.json", "--gpu-remeasure-after=10", *FAST)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["gpucomm baseline WARNING: 2 cases of one session *"])
    assert "REGRESSION" not in result.stdout.str()
    result.assert_outcomes(passed=2)
    verdicts = [ln for ln in result.stdout.lines if ln.startswith("gpucomm verdicts:")]
    assert verdicts and sum(int(part.split()[0]) for part in verdicts[0].split(":", 1)[1].split(",")) == 2


def test_a_subclass_marker_overrides_its_base_class_marker(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import bandwidth

        @bandwidth(min_gbps=1e9, size="4KB")
        class Base:
            pass

        @bandwidth(min_gbps=1e-9, size="8KB")
        class TestDerived(Base):
            def test_a(self, gpu_pair, comm):
                assert comm.copy(gpu_pair).size_bytes == 8000
        """
    )
    pytester.runpytest(*FAST).assert_outcomes(passed=2)


def test_a_parameter_marker_overrides_the_functions_marker(pytester):
    pytester.makepyfile(
        """
        import pytest
        from pytest_gpucomm import bandwidth

        @bandwidth(min_gbps=1e-9)
        @pytest.mark.parametrize("x", [1, pytest.param(2, marks=bandwidth(min_gbps=1e9))])
        def test_a(x, gpu_pair, comm):
            comm.copy(gpu_pair, "4KiB")
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*bandwidth below threshold*required >= 1e+09 GB/s*"])


def test_a_size_parameter_of_the_users_own_is_read_as_a_size(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("size", ["4KB", "1.5KiB"])
        def test_a(size, gpu_pair, comm):
            assert comm.copy(gpu_pair).size_bytes in (4000, 1536)

        @pytest.mark.parametrize("size", ["16XB"])
        def test_bad(size, gpu_pair, comm):
            comm.copy(gpu_pair)
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(["*invalid size '16XB' (from *test_bad*parameter 'size')*"])


def test_recording_under_xdist_is_refused_unless_allowed(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(COPY_TEST)
    # refused by the controller before it starts a worker: in this process
    result = pytester.runpytest_inprocess("-n", "2", "--gpu-baseline=base.json", "--gpu-baseline-save", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-baseline-save under pytest-xdist (-n)*slow each other*--gpucomm-allow-xdist*"])


@pytest.mark.slow
def test_an_allowed_recording_under_xdist_is_saved_once_by_the_controller(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        from pytest_gpucomm import sizes

        @sizes("4KiB", "8KiB")
        def test_copy(gpu_pair, size, comm):
            comm.copy(gpu_pair, size)
        """
    )
    # the controller, which saves, in this process; the workers are processes of their own
    result = pytester.runpytest_inprocess("-n", "2", "--gpu-baseline=base.json", "--gpu-baseline-save",
                                          "--gpucomm-allow-xdist", *FAST)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["gpucomm: saved 4 cases of this run (id *) to base.json"])
    doc = json.loads((pytester.path / "base.json").read_text())
    assert len(doc["runs"]) == 1 and len(doc["cases"]) == 4


@pytest.mark.slow
def test_an_unfinished_recording_under_xdist_saves_nothing(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(COPY_TEST + "\ndef test_z_fail():\n    assert False\n")
    result = pytester.runpytest_inprocess("-n", "2", "-x", "--gpu-baseline=base.json", "--gpu-baseline-save",
                                          "--gpucomm-allow-xdist", *FAST)  # the controller here, as above
    assert "saved" not in result.stdout.str().replace("NOT saved", "")
    assert not (pytester.path / "base.json").exists()


def test_a_usage_error_of_a_recording_under_xdist_is_named_not_an_internal_error(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(COPY_TEST)
    result = pytester.runpytest_inprocess("-n", "2", "--gpu-baseline-save", *FAST)  # refused by the controller
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpu-baseline-save needs --gpu-baseline=NAME|PATH|auto*"])


def test_sigterm_ends_a_process_forked_from_pytest_as_without_the_plugin(pytester):
    pytester.makepyfile(
        """
        import multiprocessing as mp, time

        def test_fork():
            p = mp.get_context("fork").Process(target=time.sleep, args=(30,))
            p.start()
            time.sleep(0.2)
            p.terminate()
            p.join(10)
            assert p.exitcode == -15
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_help_works_with_a_bad_report_path_in_the_environment(pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_JSON", str(pytester.path))
    result = pytester.runpytest("--help")
    assert result.ret == 0


def test_a_bad_timeout_given_to_process_group_run_fails_the_test_naming_it(pytester):
    pytester.makepyfile(
        hostile_tasks="def whoami(ctx):\n    return ctx.rank\n",
        test_timeouts="""
        def test_bad(process_group):
            process_group.run("hostile_tasks:whoami", timeout_s=-1)

        def test_old_name_still_works(process_group):
            assert process_group.run("hostile_tasks:whoami", timeout=60) == [0, 1]
        """,
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*process_group.run(timeout_s=-1): expected a positive number of seconds*"])


@pytest.mark.slow
def test_a_recording_run_ended_by_pytest_exit_saves_nothing(pytester):
    pytester.makepyfile(
        COPY_TEST + """
import pytest

def test_z_leave():
    pytest.exit("enough", returncode=0)

def test_zz_never_run():
    pass
"""
    )
    result = pytester.runpytest_inprocess("--gpu-baseline=base.json", "--gpu-baseline-save", *FAST)  # pytest.exit
    result.stdout.fnmatch_lines(["*the run did not finish*NOT saved*"])
    assert not (pytester.path / "base.json").exists()


def test_a_recording_run_whose_last_test_fails_under_x_is_saved(pytester):
    pytester.makepyfile(COPY_TEST + "\ndef test_z_last_fails():\n    assert False\n")
    result = pytester.runpytest("--gpu-baseline=base.json", "--gpu-baseline-save", "-x", *FAST)
    result.stdout.fnmatch_lines(["*saved 2 cases of this run*"])
