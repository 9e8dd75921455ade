"""Acceptance tests of --gpucomm-engine (issue 48 item 2) on CPU: the nccl-tests and nvbandwidth stand-ins of
tests/data/standin (which print and write what the real tools do, from runs recorded on one H100) run as the
engine of a pytest session, with GPUCOMM_DEVICE=cpu and GPUCOMM_ENGINE_STANDIN=1.

Their files are read by ``pytest_gpucomm.foreign`` (issue 48 item 1), as on a GPU machine.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from simulated_copies import CONFTEST as SIMULATED_COPIES

STANDIN = Path(__file__).resolve().parent / "data" / "standin"
FAST = ["--gpucomm-device=cpu", "--gpucomm-min-time=0.002", "-p", "no:cacheprovider"]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (process groups)")


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-ins found: the nccl-tests folder given by GPUCOMM_NCCL_TESTS, nvbandwidth on PATH."""
    monkeypatch.setenv("GPUCOMM_ENGINE_STANDIN", "1")
    monkeypatch.setenv("GPUCOMM_NCCL_TESTS", str(STANDIN))
    monkeypatch.setenv("PATH", f"{STANDIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("GPUCOMM_STANDIN_FAULT", "GPUCOMM_STANDIN_SLOWER", "GPUCOMM_STANDIN_RUN", "GPUCOMM_ENGINE"):
        monkeypatch.delenv(name, raising=False)
    return STANDIN


ALL_REDUCE = """
from pytest_gpucomm import sizes

@sizes("1KiB", "4KiB", "16KiB")
def test_all_reduce(process_group, size, comm):
    comm.all_reduce(process_group, size)
"""

COPIES = """
from pytest_gpucomm import sizes

@sizes("1MiB")
def test_copy(gpu_pair, size, comm):
    comm.copy(gpu_pair, size)
"""


def test_the_nccl_tests_engine_runs_one_sweep_for_every_size_and_keeps_its_command_line(pytester, standin):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    out = pytester.path / "report.json"
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests", f"--gpucomm-json={out}", "-v")
    result.assert_outcomes(passed=3)
    line = (f"{standin}/all_reduce_perf -b 1024 -e 16384 -f 4 -g 2 -d float -n 20 -w 5 -c 1 -I 1 -J "
            f"*/all_reduce_perf-g2-float32-1024-16384-0.json")
    result.stdout.fnmatch_lines(["*test_all_reduce[[]1KiB-nccl-tests[]] PASSED*",
                                 f"gpucomm engine: {line} (*s, exit 0)",
                                 "gpucomm engine: 1 program run(s) took * s in all"])
    rows = json.loads(out.read_text())["rows"]
    assert [r["test"] for r in rows] == [f"test_engine.py::test_all_reduce[{s}-nccl-tests]"
                                         for s in ("1KiB", "4KiB", "16KiB")]
    info = rows[0]["info"]
    assert (info["source"], info["source_version"]) == ("nccl-tests", "2.19.6")  # the version its output printed
    assert info["tool_cases"] == 6 and info["command"].startswith(str(standin))
    assert info["in_place"] is True and rows[0]["n"] == 20  # the per-iteration times of -I 1 are the samples


def test_the_default_engine_keeps_the_test_ids_and_both_engines_name_theirs(pytester, standin):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    plain = pytester.runpytest(*FAST, "--collect-only", "-q")
    plain.stdout.fnmatch_lines(["test_engine.py::test_all_reduce[[]1KiB[]]",
                                "test_engine.py::test_all_reduce[[]4KiB[]]"])
    both = pytester.runpytest(*FAST, "--collect-only", "-q", "--gpucomm-engine=both")
    both.stdout.fnmatch_lines(["test_engine.py::test_all_reduce[[]1KiB-torch[]]",
                               "test_engine.py::test_all_reduce[[]1KiB-nccl-tests[]]",
                               "test_engine.py::test_all_reduce[[]4KiB-torch[]]"])


def test_an_unknown_engine_is_a_usage_error_naming_the_value_and_where_it_came_from(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    monkeypatch.setenv("GPUCOMM_ENGINE", "nccl")
    result = pytester.runpytest(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid --gpucomm-engine 'nccl' (from the GPUCOMM_ENGINE environment variable): "
                                 "expected torch, nccl-tests, both*"])


def test_a_missing_binary_skips_its_cases_naming_the_binary_and_where_it_looked(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    empty = pytester.mkdir("empty")
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests", f"--gpucomm-nccl-tests={empty}", "-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines([f"SKIPPED [[]3[]] *: all_reduce_perf: {empty}/all_reduce_perf is not found "
                                 "(--gpucomm-nccl-tests)"])


def test_on_the_cpu_variants_the_nccl_tests_engine_skips_with_nothing_to_run(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    monkeypatch.delenv("GPUCOMM_ENGINE_STANDIN")
    result = pytester.runpytest(*FAST, "--gpucomm-engine=both", "-rs")
    result.assert_outcomes(passed=3, skipped=3)
    result.stdout.fnmatch_lines(["SKIPPED [[]3[]] *: the nccl-tests engine runs NVIDIA's nccl-tests and nvbandwidth "
                                 "on GPUs; this session measures the CPU variants (--gpucomm-device=cpu): nothing of "
                                 "theirs to run"])


def test_a_binary_that_hangs_is_ended_at_the_session_timeout_with_its_children(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    pidfile = pytester.path / "pids"
    monkeypatch.setenv("GPUCOMM_STANDIN_FAULT", "hang")
    monkeypatch.setenv("GPUCOMM_STANDIN_PIDFILE", str(pidfile))
    start = time.monotonic()
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests", "--gpucomm-timeout=2")
    assert time.monotonic() - start < 30  # one sweep hung, once: the other sizes' cases reuse its failure
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*test_all_reduce[[]1KiB-nccl-tests[]]: all_reduce_perf did not finish within the "
                                 "session's --gpucomm-timeout of 2 s and was ended",
                                 "  command: */all_reduce_perf -b 1024 -e 16384 *"])
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2
    for pid in pids:  # the binary and the child it started: none left running
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_binary_that_exits_non_zero_fails_its_cases_with_its_last_lines(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    monkeypatch.setenv("GPUCOMM_STANDIN_FAULT", "exit1")
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*test_all_reduce[[]4KiB-nccl-tests[]]: all_reduce_perf exited with status 1",
                                 "  command: */all_reduce_perf *", "  its last lines:",
                                 "    standin: NCCL WARN Cuda failure 'out of memory'"])


def test_a_binary_reporting_wrong_values_fails_the_case_naming_how_many(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    monkeypatch.setenv("GPUCOMM_STANDIN_FAULT", "wrong")
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*test_all_reduce[[]16KiB-nccl-tests[]]: all_reduce_perf reported 3 wrong values at "
                                 "16 KiB in place (#wrong)"])


def test_the_copies_run_nvbandwidth_once_per_buffer_size_and_skip_what_it_cannot_measure(pytester, standin):
    pytester.makepyfile(test_engine="""
        from pytest_gpucomm import sizes

        @sizes("4KiB", "1MiB")
        def test_copy(gpu_pair, size, comm):
            comm.copy(gpu_pair, size)

        def test_pattern(comm):
            comm.copy_all_pairs(size="1MiB")
    """)
    out = pytester.path / "report.json"
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests", f"--gpucomm-json={out}", "-rs")
    result.assert_outcomes(passed=2, skipped=3)
    result.stdout.fnmatch_lines([
        f"gpucomm engine: {standin}/nvbandwidth -j -b 1 -t host_to_device_memcpy_ce device_to_host_memcpy_ce "
        "device_to_device_memcpy_write_ce host_to_device_memcpy_sm device_to_host_memcpy_sm "
        "device_to_device_memcpy_write_sm device_local_copy (*s, exit 0)",
        "gpucomm engine: 1 program run(s) took * s in all",
        "SKIPPED [[]2[]] *: nvbandwidth copies whole MiB buffers (-b MiB); 4 KiB is not one",
        "SKIPPED [[]1[]] *: comm.copy_all_pairs() has no counterpart in nccl-tests or nvbandwidth: torch engine only"])
    rows = json.loads(out.read_text())["rows"]
    assert [r["test"] for r in rows] == ["test_engine.py::test_copy[1MiB-0->1-nccl-tests]",
                                         "test_engine.py::test_copy[1MiB-1->0-nccl-tests]"]
    assert 390 < rows[0]["gbps"] < 400 and rows[0]["size_bytes"] == 1 << 20  # the stand-in's peer figure


def _record_both(pytester, monkeypatch, runs=3):
    pytester.makeconftest(SIMULATED_COPIES)
    for run in range(runs):
        monkeypatch.setenv("SIM_RUN", str(run))
        monkeypatch.setenv("GPUCOMM_STANDIN_RUN", str(run))
        monkeypatch.setenv("GPUCOMM_BASELINE_SESSION", f"sim-session-{run}")
        result = pytester.runpytest(*FAST, "--gpucomm-engine=both", "--gpu-baseline=cpu", "--gpu-baseline-save")
        assert result.ret == 0, result.stdout.str()
    monkeypatch.delenv("GPUCOMM_BASELINE_SESSION")
    monkeypatch.setenv("SIM_RUN", str(runs))
    monkeypatch.setenv("GPUCOMM_STANDIN_RUN", str(runs))


def test_with_both_engines_a_torch_regression_says_that_nvbandwidth_held_live_and_in_compare(pytester, standin,
                                                                                             monkeypatch):
    import io

    from pytest_gpucomm import cli

    pytester.makepyfile(test_engine=COPIES)
    _record_both(pytester, monkeypatch)
    monkeypatch.setenv("SIM_SLOW_CASE", "1MiB-0->1-torch")
    monkeypatch.setenv("SIM_SLOWER", "2")
    report = pytester.path / "run.json"
    result = pytester.runpytest(*FAST, "--gpucomm-engine=both", "--gpu-baseline=cpu", f"--gpucomm-json={report}")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["REGRESSION: copy on cpu:0->cpu:1 at 1 MiB: *% drop, *",
                                 "  nvbandwidth holds 1.00x: the slowdown is in torch's copy path"])
    out = io.StringIO()  # offline, the same line from the nvbandwidth case's verdict in the report
    assert cli.main(["compare", str(pytester.path / "baselines" / "cpu.json"), str(report)], out=out) == 1
    lines = out.getvalue().splitlines()
    at = lines.index("FAILED test_engine.py::test_copy[1MiB-0->1-torch]:")
    assert any(line.strip().startswith("nvbandwidth holds 1.0") and "the slowdown is in torch's copy path" in line
               for line in lines[at:at + 8]), lines[at:at + 8]


def test_with_both_engines_a_regression_of_the_other_tool_says_that_torch_held(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=COPIES)
    _record_both(pytester, monkeypatch)
    monkeypatch.setenv("GPUCOMM_STANDIN_SLOWER", "2")
    result = pytester.runpytest(*FAST, "--gpucomm-engine=both", "--gpu-baseline=cpu")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["REGRESSION: copy on cpu:0->cpu:1 at 1 MiB: 5?.?% drop, *",
                                 "  torch holds ?.??x: the slowdown is in nvbandwidth's own run, not what both "
                                 "engines share"])


def test_the_engines_marker_keeps_a_test_off_an_engine_saying_so(pytester, standin):
    pytester.makepyfile(test_engine="""
        import pytest
        from pytest_gpucomm import sizes

        @pytest.mark.engines("torch")
        @sizes("1KiB")
        def test_all_reduce(process_group, size, comm):
            comm.all_reduce(process_group, size)
    """)
    result = pytester.runpytest(*FAST, "--gpucomm-engine=both", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: @engines(torch) keeps this test off the nccl-tests engine"])


def test_a_failed_program_s_lines_fit_the_terminal_width(pytester, standin, monkeypatch):
    pytester.makepyfile(test_engine=ALL_REDUCE)
    monkeypatch.setenv("GPUCOMM_STANDIN_FAULT", "exit1")
    monkeypatch.setenv("COLUMNS", "100")
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests")
    result.assert_outcomes(failed=3)
    # pytest's own short-summary lines ("FAILED ...") are pytest's to lay out: uncut where CI is set
    message = [line for line in result.stdout.lines
               if ("all_reduce_perf" in line or "NCCL WARN" in line) and not line.startswith("FAILED ")]
    assert message and all(len(line) <= 100 for line in message), message


def test_an_unknown_name_in_the_engines_marker_is_an_error_naming_the_test(pytester, standin):
    pytester.makepyfile(test_engine="""
        import pytest

        @pytest.mark.engines("nccl")
        def test_all_reduce(process_group, comm):
            comm.all_reduce(process_group, "1KiB")
    """)
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_engine.py::test_all_reduce: @engines: unknown engine 'nccl'; known: torch, "
                                 "nccl-tests*"])


def test_host_copies_read_nvbandwidth_s_figure_of_the_device_and_its_group_starts_no_ranks(pytester, standin):
    pytester.makepyfile(test_engine="""
        def test_h2d(gpus, comm):
            comm.host_to_device(gpus[1], "1MiB")

        def test_d2h(gpus, comm):
            comm.device_to_host(gpus[0], "1MiB")

        def test_task(process_group, comm):
            process_group.run("os:getpid")
    """)
    out = pytester.path / "report.json"
    result = pytester.runpytest(*FAST, "--gpucomm-engine=nccl-tests", f"--gpucomm-json={out}")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_task[[]nccl-tests[]] (task os:getpid): process_group.run() runs on torch's "
                                 "ranks; this case's engine is nccl-tests, which starts none *"])
    rows = {r["op"]: r for r in json.loads(out.read_text())["rows"]}
    assert 45 < rows["h2d"]["gbps"] < 51 and 48 < rows["d2h"]["gbps"] < 54  # the stand-in's -b 1 figures
    assert rows["h2d"]["devices"] == ["cpu:1"] and rows["d2h"]["info"]["source_version"] == "v0.8"


def test_a_baseline_recorded_with_the_default_engine_gates_the_torch_cases_of_both_engines(pytester, standin):
    # the torch cases of --gpucomm-engine=both are named [...-torch] but keyed as the default engine's cases
    pytester.makepyfile(test_engine=ALL_REDUCE)
    assert pytester.runpytest(*FAST, "--gpu-baseline=base.json", "--gpu-baseline-save").ret == 0
    out = pytester.path / "report.json"
    result = pytester.runpytest(*FAST, "--gpu-baseline=base.json", "--gpucomm-engine=both", f"--gpucomm-json={out}")
    result.assert_outcomes(passed=6)
    rows = {r["test"]: r for r in json.loads(out.read_text())["rows"]}
    torch_row, tool_row = rows["test_engine.py::test_all_reduce[1KiB-torch]"], rows[
        "test_engine.py::test_all_reduce[1KiB-nccl-tests]"]
    # torch's case is found in the baseline of the default engine, under the default engine's key
    assert torch_row["baseline"]["case"] == "test_engine.py::test_all_reduce[1KiB]|all_reduce|1024B|float32|ws2"
    assert torch_row["baseline"]["baseline_gbps"] > 0 and torch_row["status"] != "new"
    assert tool_row["status"] == "new"  # nccl-tests' case is keyed apart: not in this baseline
