"""Acceptance tests of the plugin on CPU: options, markers, validation, skips, sweeps, table, JSON."""

import json

import pytest

from conftest import NO_GPU_ENV
from pytest_gpucomm.vocab import MAX_CPU_DEVICES

FAST = ["--gpucomm-min-time=0.002", "-p", "no:cacheprovider"]


def test_options_are_listed_in_the_gpucomm_group(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*GPU communication benchmarks (pytest-gpucomm)*",
            "*--gpu-baseline=NAME|PATH|auto*",
            "*--gpucomm-device=auto|gpu|cpu*",
            "*--gpucomm-min-time=SECONDS*",
            "*--gpucomm-json=PATH*",
        ]
    )


def test_markers_are_registered_with_their_signatures(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.bandwidth(min_gbps=None, size=None, tolerance=None, tail_tolerance=None)*",
            "*@pytest.mark.latency(max_us=None, size=None, percentile=50)*",
            "*@pytest.mark.sizes(*sizes, start=None, stop=None, factor=2)*",
            "*@pytest.mark.gpus(n)*",
        ]
    )


def test_loading_the_plugin_imports_no_torch_numpy_or_scipy(pytester):
    pytester.makepyfile(
        """
        import sys
        def test_plain():
            heavy = [m for m in ("torch", "numpy", "scipy", "jsonschema", "filelock") if m in sys.modules]
            assert heavy == []
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "gpucomm hardware" not in result.stdout.str()


def test_header_names_the_settings_and_the_hardware(pytester):
    pytester.makepyfile(
        """
        def test_copy(gpu_pair, comm):
            comm.copy(gpu_pair, "4KiB")
        """
    )
    result = pytester.runpytest("--gpucomm-device=cpu", *FAST)
    result.stdout.fnmatch_lines(
        [
            "gpucomm settings: device=cpu, min-time=0.002s, timeout=300s, dtype=float32, baseline=none",
            "gpucomm hardware: no GPU used: CPU *, * cores; 2 logical host devices; gloo; torch *",
            # the largest size in effect, and where it came from (the default depends on the device kind)
            "gpucomm max-size: 16 MiB (the default on CPU): @sizes above it are skipped (--gpucomm-max-size)",
        ]
    )
    result.stdout.no_fnmatch_line("*max-size=default*")
    result.assert_outcomes(passed=2)
    result = pytester.runpytest("--gpucomm-device=cpu", "--gpucomm-max-size=1MiB", *FAST)
    result.stdout.fnmatch_lines(["gpucomm max-size: 1 MiB (from the command line): @sizes above it are skipped *"])


def test_gpu_pair_runs_every_ordered_pair_with_readable_ids(pytester):
    pytester.makepyfile(
        """
        def test_copy(gpu_pair, comm):
            comm.copy(gpu_pair, 4096)
        """
    )
    result = pytester.runpytest("--collect-only", "-q", *FAST)
    result.stdout.fnmatch_lines(["*test_copy[[]0->1[]]", "*test_copy[[]1->0[]]"])


@pytest.mark.parametrize(
    "args, env, ini, message",
    [
        (["--gpucomm-min-time=abc"], {}, "", "invalid --gpucomm-min-time 'abc' (from the command line)*"),
        ([], {"GPUCOMM_MIN_TIME": "-1"}, "", "invalid --gpucomm-min-time '-1' (from the GPUCOMM_MIN_TIME environment "
                                             "variable)*"),
        ([], {}, "gpucomm_min_time = soon", "invalid --gpucomm-min-time 'soon' (from the ini key "
                                            "gpucomm_min_time in *tox.ini)*"),
        (["--gpucomm-max-size=16XB"], {}, "", "invalid size '16XB' (from --gpucomm-max-size from the command line)*"),
        (["--gpucomm-device=tpu"], {}, "", "invalid --gpucomm-device 'tpu' (from the command line)*"),
        (["--gpucomm-timeout=0"], {}, "", "invalid --gpucomm-timeout '0' (from the command line)*positive*"),
        # the tolerance's range is the decision's: 0 is refused at the start, not at the first judged test
        (["--gpu-tolerance=0"], {}, "", "invalid --gpu-tolerance '0' (from the command line): expected a fraction in "
                                        "(0, 1), e.g. 0.05"),
        ([], {"GPUCOMM_TOLERANCE": "1"}, "", "invalid --gpu-tolerance '1' (from the GPUCOMM_TOLERANCE environment "
                                             "variable)*"),
        ([], {}, "gpucomm_alpha = 0", "invalid --gpu-alpha '0' (from the ini key gpucomm_alpha in *tox.ini): "
                                      "expected a number above 0 and below 1*"),
        # the pairs of the pair tests, and the CPU variants' device count
        (["--gpucomm-pairs=ring"], {}, "", "invalid --gpucomm-pairs 'ring' (from the command line): expected all, "
                                           "neighbours, from0 or auto"),
        ([], {"GPUCOMM_PAIRS": "some"}, "", "invalid --gpucomm-pairs 'some' (from the GPUCOMM_PAIRS environment "
                                            "variable)*"),
        ([], {}, "gpucomm_pairs = 0", "invalid --gpucomm-pairs '0' (from the ini key gpucomm_pairs in *tox.ini)*"),
        ([], {"GPUCOMM_CPU_DEVICES": "1"}, "", "invalid GPUCOMM_CPU_DEVICES '1' (from the GPUCOMM_CPU_DEVICES "
                                               "environment variable): *a whole number from 2 to 64*"),
        ([], {"GPUCOMM_CPU_DEVICES": str(MAX_CPU_DEVICES + 1)}, "", "invalid GPUCOMM_CPU_DEVICES '65'*"),
        ([], {"GPUCOMM_CPU_DEVICES": "eight"}, "", "invalid GPUCOMM_CPU_DEVICES 'eight'*"),
    ],
)
def test_bad_option_values_are_usage_errors_naming_value_and_origin(pytester, monkeypatch, args, env, ini, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*" + message])


def test_command_line_beats_environment_beats_ini(pytester, monkeypatch):
    pytester.makeini("[pytest]\ngpucomm_min_time = 3\n")
    monkeypatch.setenv("GPUCOMM_MIN_TIME", "2")
    pytester.makepyfile("def test_a(): pass")
    pytester.runpytest().stdout.fnmatch_lines(["*min-time=2s*"])
    pytester.runpytest("--gpucomm-min-time=1").stdout.fnmatch_lines(["*min-time=1s*"])
    monkeypatch.delenv("GPUCOMM_MIN_TIME")
    pytester.runpytest().stdout.fnmatch_lines(["*min-time=3s*"])


@pytest.mark.parametrize(
    "marker, message",
    [
        ("bandwidth(min_gbs=1)", "*test_bad.py::test_a: invalid @bandwidth marker: "
                                 "*unexpected keyword argument 'min_gbs'*"),
        ("bandwidth(min_gbps=-1)", "*test_bad.py::test_a: @bandwidth(min_gbps=-1): "
                                   "min_gbps must be a non-negative finite number*"),
        ("bandwidth(min_gbps='fast')", "*test_bad.py::test_a: @bandwidth(min_gbps='fast'): "
                                       "min_gbps must be a number, got str*"),
        ("bandwidth(min_gbps=1, size='16XB')", "*invalid size '16XB' (from test_bad.py::test_a "
                                               "@bandwidth(size=...))*unknown unit*"),
        ("bandwidth(min_gbps=1, size='0')", "*invalid size '0' (from test_bad.py::test_a @bandwidth(size=...))*"),
        ("latency(max_us=-3)", "*test_bad.py::test_a: @latency(max_us=-3): max_us must be a positive finite number*"),
        ("latency(max_us=3, percentile=101)", "*test_bad.py::test_a: @latency(percentile=101): "
                                              "percentile must be within 0..100*"),
        ("latency(max_us=3, pct=99)", "*test_bad.py::test_a: invalid @latency marker: "
                                      "*unexpected keyword argument 'pct'*"),
        ("gpus('two')", "*test_bad.py::test_a: @gpus('two'): expected a positive whole number*"),
        # the decision's range, checked at collection instead of raising at the first judged test
        ("bandwidth(tolerance=0)", "*test_bad.py::test_a: @bandwidth(tolerance=0): tolerance must be a fraction in "
                                   "(0, 1), e.g. 0.05*"),
        ("bandwidth(tolerance=1.5)", "*test_bad.py::test_a: @bandwidth(tolerance=1.5): tolerance must be a fraction "
                                     "in (0, 1)*"),
    ],
)
def test_bad_markers_are_errors_naming_the_test_and_the_keyword(pytester, marker, message):
    pytester.makepyfile(
        test_bad=f"""
        import pytest
        @pytest.mark.{marker}
        def test_a(comm):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_sizes_marker_parametrizes_over_a_list_and_a_range(pytester):
    pytester.makepyfile(
        """
        import pytest
        from pytest_gpucomm import sizes

        @sizes("512", "1.5KiB", "1MB")
        def test_list(size):
            pass

        @sizes(start="4KiB", stop="64KiB", factor=4)
        def test_range(size):
            assert size in (4096, 16384, 65536)
        """
    )
    result = pytester.runpytest("-v", *FAST)
    result.stdout.fnmatch_lines(
        [
            "*test_list[[]512B[]] PASSED*",
            "*test_list[[]1.5KiB[]] PASSED*",
            "*test_list[[]1MB[]] PASSED*",
            "*test_range[[]4KiB[]] PASSED*",
            "*test_range[[]16KiB[]] PASSED*",
            "*test_range[[]64KiB[]] PASSED*",
        ]
    )
    result.assert_outcomes(passed=6)


def test_sizes_above_max_size_are_collected_and_skipped_with_the_reason(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import sizes

        @sizes("4KiB", "1MiB", "1GiB")
        def test_a(size):
            pass

        @sizes("1GiB")
        def test_b(size):
            pass
        """
    )
    result = pytester.runpytest("-rs", "-v", "--gpucomm-max-size=1MiB", *FAST)
    result.assert_outcomes(passed=2, skipped=2)
    # the size asked for is a test of its own, skipped: the run says it was not measured, and why
    result.stdout.fnmatch_lines(["*test_a[[]1GiB[]] SKIPPED (above --gpucomm-max-size 1 MiB (from the command line))*",
                                 "*test_b[[]1GiB[]] SKIPPED*"])
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: above --gpucomm-max-size 1 MiB (from the command line)"] * 2)


@pytest.mark.parametrize(
    "marker, message",
    [
        ("sizes('4KB', '16XB')", "*invalid size '16XB' (from test_sweep.py::test_a @sizes(#1=...))*"),
        ("sizes(start='4KB')", "*test_sweep.py::test_a: invalid @sizes marker: "
                               "give a list of sizes, or both start= and stop=*"),
        ("sizes(start='4KB', stop='1MB', factor=1)", "*@sizes(factor=1): factor must be greater than 1*"),
        ("sizes(start='1MB', stop='4KB')", "*stop 4000 bytes is smaller than start 1000000 bytes*"),
    ],
)
def test_bad_sizes_marker_is_a_collection_error_naming_the_test(pytester, marker, message):
    pytester.makepyfile(
        test_sweep=f"""
        import pytest
        @pytest.mark.{marker}
        def test_a(size):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_sizes_without_a_size_argument_is_an_error(pytester):
    pytester.makepyfile(
        test_sweep="""
        from pytest_gpucomm import sizes
        @sizes("4KB")
        def test_a():
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_sweep.py::test_a: @sizes needs the test to take a 'size' argument*"])


def test_too_few_devices_skips_with_needed_and_found(pytester):
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.gpus(4)
        def test_needs_four(comm):
            pass

        def test_h2d(gpu, comm):
            comm.host_to_device(gpu, 4096)
        """
    )
    result = pytester.runpytest("-rs", *FAST)
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*needs 4 devices, found 2 logical host devices (no GPU: CPU variant)*",
            "*needs a GPU (host<->device copies); none is used*",
        ]
    )


def test_bandwidth_threshold_failure_gives_op_size_measured_required_and_units(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import bandwidth

        @bandwidth(min_gbps=1e9, size="64KiB")
        def test_too_slow(gpu_pair, comm):
            comm.copy(gpu_pair)

        @bandwidth(min_gbps=0.0001, size="64KiB")
        def test_fast_enough(gpu_pair, comm):
            comm.copy(gpu_pair)
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(failed=2, passed=2)
    result.stdout.fnmatch_lines(
        [
            "*bandwidth below threshold: copy on cpu:0->cpu:1 at 64 KiB (65,536 bytes): measured * GB/s "
            "(algbw, median of * samples), required >= 1e+09 GB/s*",
        ]
    )


def test_latency_threshold_checks_the_requested_percentile(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import latency

        @latency(max_us=0.0001, size="4KiB", percentile=99)
        def test_tail(gpu_pair, comm):
            comm.copy(gpu_pair)

        @latency(max_us=1e9, size="4KiB")
        def test_median(gpu_pair, comm):
            comm.copy(gpu_pair)
        """
    )
    result = pytester.runpytest("test_latency_threshold_checks_the_requested_percentile.py::test_tail[0->1]",
                                "test_latency_threshold_checks_the_requested_percentile.py::test_median[0->1]", *FAST)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        ["*latency above threshold: copy on cpu:0->cpu:1 at 4 KiB (4,096 bytes): measured p99 * us per iteration*"
         "required <= 0.0001 us*"]
    )


def test_plain_assertions_on_a_measurement_work(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import Measurement, sizes

        @sizes("16KiB")
        def test_custom(gpu_pair, size, comm):
            m = comm.copy_both_ways(gpu_pair)
            assert isinstance(m, Measurement)
            assert m.size_bytes == size and m.bytes_per_iter == 2 * size
            assert m.op == "copy_bidir" and m.n >= 10 and m.gbps > 0
            assert len(m.samples_s) == m.n and m.p99_us >= m.p50_us > 0 and m.cv >= 0
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=2)


def test_a_measurement_without_a_size_is_an_error_that_says_how_to_give_one(pytester):
    pytester.makepyfile(
        """
        def test_nosize(gpu_pair, comm):
            comm.copy(gpu_pair)
        """
    )
    result = pytester.runpytest(
        "test_a_measurement_without_a_size_is_an_error_that_says_how_to_give_one.py::test_nosize[0->1]", *FAST)
    result.stdout.fnmatch_lines(["*comm.copy() has no size: pass size=, parametrize with @sizes*"])
    result.assert_outcomes(failed=1)


def test_summary_table_lists_every_measurement(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import sizes

        @sizes("4KiB", "64KiB")
        def test_copy(gpu_pair, size, comm):
            comm.copy(gpu_pair, size)
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=4)
    # compact: one sweep's sizes together under its heading (op, devices, test), a size per row
    result.stdout.fnmatch_lines(
        [
            "*= gpucomm results =*",
            "    size*GB/s*p50 us*p99 us*CV%*n",
            "copy, cpu:0->cpu:1 (test_copy[[]0->1[]])",
            "   4 KiB*",
            "  64 KiB*",
            "copy, cpu:1->cpu:0 (test_copy[[]1->0[]])",
            "   4 KiB*",
            "  64 KiB*",
            "GB/s: median busbw for collectives, algbw for copies*",
        ]
    )
    # -v: the full table, every column, each row with its test id (in the same order)
    result = pytester.runpytest(*FAST, "-v")
    result.stdout.fnmatch_lines(
        [
            "*= gpucomm results =*",
            "*test*op*devices / world*size (bytes)*size*GB/s*p50 us*p99 us*CV%*n",
            "*test_copy[[]4KiB-0->1[]]*copy*cpu:0->cpu:1*4096*4 KiB*",
            "*test_copy[[]64KiB-0->1[]]*copy*cpu:0->cpu:1*65536*64 KiB*",
            "*test_copy[[]4KiB-1->0[]]*copy*cpu:1->cpu:0*4096*4 KiB*",
            "*test_copy[[]64KiB-1->0[]]*copy*cpu:1->cpu:0*65536*64 KiB*",
            "GB/s: median busbw for collectives, algbw for copies*",
        ]
    )


def test_json_report_holds_the_rows_and_raw_samples(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import sizes

        @sizes("4KiB")
        def test_copy(gpu_pair, size, comm):
            comm.copy(gpu_pair, size)
        """
    )
    out = pytester.path / "out" / "report.json"
    result = pytester.runpytest(f"--gpucomm-json={out}", *FAST)
    result.assert_outcomes(passed=2)
    doc = json.loads(out.read_text())
    assert doc["format"] == "pytest-gpucomm-report"
    assert doc["fingerprint"]["kind"] == "cpu"
    assert len(doc["rows"]) == 2
    row = doc["rows"][0]
    assert row["test"].endswith("test_copy[4KiB-0->1]")
    assert row["op"] == "copy" and row["size_bytes"] == 4096
    assert len(row["samples_s"]) == row["n"] >= 10
    assert row["gbps"] > 0 and row["p99_us"] >= row["p50_us"]


def test_junit_xml_carries_the_figures_as_properties(pytester):
    pytester.makepyfile(
        """
        def test_copy(gpu_pair, comm):
            comm.copy(gpu_pair, 4096)
        """
    )
    xml = pytester.path / "junit.xml"
    pytester.runpytest(f"--junitxml={xml}", "test_junit_xml_carries_the_figures_as_properties.py::test_copy[0->1]",
                       *FAST).assert_outcomes(passed=1)
    text = xml.read_text()
    assert 'name="gpucomm.copy.4096.gbps"' in text
    assert 'name="gpucomm.copy.4096.p99_us"' in text


def test_auto_on_a_machine_without_a_gpu_runs_the_cpu_variants(pytester, monkeypatch):
    pytester.makepyfile(
        """
        def test_copy(gpu_pair, comm):
            comm.copy(gpu_pair, "4KiB")
        """
    )
    monkeypatch.delenv("GPUCOMM_DEVICE")
    for name, value in NO_GPU_ENV.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest_subprocess(*FAST)
    result.stdout.fnmatch_lines(["gpucomm settings: device=auto, *",
                                 "gpucomm hardware: no GPU used: CPU *, * cores; "
                                 "2 logical host devices; gloo; torch *"])
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("args, value, origin", [
    (["--gpucomm-device=gpu"], "gpu", "the command line"),
    ([], "cuda", "the GPUCOMM_DEVICE environment variable"),
], ids=["option", "environment"])
def test_forcing_gpu_on_a_machine_without_one_stops_at_the_start_in_one_line_naming_the_value(
        pytester, monkeypatch, args, value, origin):
    pytester.makepyfile(
        """
        def test_copy(gpu_pair, comm):
            comm.copy(gpu_pair, 4096)
        """
    )
    for name, env_value in NO_GPU_ENV.items():  # a machine without one, whatever this one has
        monkeypatch.setenv(name, env_value)
    monkeypatch.setenv("GPUCOMM_DEVICE", value)
    result = pytester.runpytest_subprocess(*args, *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # it was a collection error (2) with ~100 lines of traceback
    output = result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([f"ERROR: invalid --gpucomm-device '{value}' (from {origin}): torch * sees no GPU",
                                 "  install a torch built for your GPU, or measure the CPU variants with "
                                 "--gpucomm-device=cpu"])
    assert "Traceback" not in output and "collected" not in output and len(output.strip().splitlines()) == 2, output


FAKE_GPU_CONFTEST = """
import pytest_gpucomm.env.hardware as hw

def _fake_detect(requested="auto"):
    return hw.DeviceInfo(kind="gpu", count=2, vendor="NVIDIA", model="NVIDIA H200", runtime="CUDA 13.0",
                         driver="580", torch="2.x", comm_library="NCCL 2.28.9")

hw.detect = _fake_detect  # every xdist worker imports this conftest: each believes it has 2 GPUs
"""


def test_gpu_measurements_under_xdist_fail_with_the_reason(pytester):
    pytest.importorskip("xdist")
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    pytester.makepyfile(
        """
        def test_pair(gpu_pair):
            pass

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*refusing to measure GPUs in pytest-xdist worker gw*they would measure each "
                                 "other's traffic*--gpucomm-allow-xdist*"])


@pytest.mark.parametrize("allow", [["--gpucomm-allow-xdist"], ["GPUCOMM_ALLOW_XDIST=1"]], ids=["option", "env"])
@pytest.mark.slow
def test_gpu_measurements_under_xdist_run_when_allowed(pytester, monkeypatch, allow):
    pytest.importorskip("xdist")
    import pytest_gpucomm.env.hardware as hw

    # the controller in this process (a process of its own imports torch again), the workers processes of their own;
    # the conftest's fake detection, which the controller takes in too, is undone when the test ends
    monkeypatch.setattr(hw, "detect", hw.detect)
    pytester.makeconftest(FAKE_GPU_CONFTEST)
    pytester.makepyfile("def test_pair(gpu_pair):\n    assert gpu_pair.src.startswith('cuda:')\n")
    args = ["-p", "no:cacheprovider", "-n", "2"]
    if allow[0].startswith("GPUCOMM"):
        monkeypatch.setenv("GPUCOMM_ALLOW_XDIST", "1")
    else:
        args += allow
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=2)


@pytest.mark.slow
def test_cpu_measurements_run_under_xdist(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        def test_copy(gpu_pair, comm):
            assert comm.copy(gpu_pair, "4KiB").gbps > 0
        """
    )
    result = pytester.runpytest_inprocess(*FAST, "-n", "2")  # the controller here, the workers processes of their own
    result.assert_outcomes(passed=2)


def test_a_bad_allow_xdist_variable_is_a_usage_error_naming_it(pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_ALLOW_XDIST", "maybe")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid GPUCOMM_ALLOW_XDIST 'maybe' (from the GPUCOMM_ALLOW_XDIST environment "
                                 "variable)*"])


def test_sizes_that_are_not_round_are_measured_and_printed(pytester):
    pytester.makepyfile(
        """
        from pytest_gpucomm import sizes

        @sizes(4097, 12345)
        def test_sweep(gpu_pair, size, comm):
            comm.copy(gpu_pair, size)

        def test_direct(gpu_pair, comm):
            comm.copy(gpu_pair, 12345)
        """
    )
    result = pytester.runpytest(*FAST, "--gpucomm-json=report.json", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.re_match_lines([r".*gpucomm results", r".*test_sweep\[4\.097KB-0->1\] .* 4097 +4\.097 KB ",
                                  r".*test_sweep\[12345B-0->1\] .* 12345 +12\.35 KB "])
    assert {r["size_bytes"] for r in json.loads((pytester.path / "report.json").read_text())["rows"]} == {4097, 12345}
