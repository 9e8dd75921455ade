"""Copies by kernel (SM copies) and both-ways host copies (issue 48, items 3 and 4): the option
--gpucomm-copy-engine, its ids, ops and rows, the CPU variants, the verification of an SM copy, and the pure parts
of the kernel's set-up and of benchmarks/sm_copies.py.  The kernel itself runs on a GPU only (the last test)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from pytest_gpucomm.ops import copies, copy_timing, engines, sm_copy
from pytest_gpucomm.ops.specs import HOST_KIND, PEER_KIND, op_kind
from pytest_gpucomm.ops.timing import TimingSettings
from scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--gpucomm-device=cpu", "--gpucomm-min-time=0.002", "-p", "no:cacheprovider", "-p", "no:randomly"]
QUICK = TimingSettings(min_time_s=0.002)

COPY_TESTS = """
    def test_pair(gpu_pair, comm, copy_engine):
        comm.copy(gpu_pair, "4KiB", engine=copy_engine)

    def test_host(host_link, comm, copy_engine):
        comm.host_both_ways(host_link, "4KiB", engine=copy_engine)

    def test_plain(gpu_pair, comm):
        comm.copy(gpu_pair, "4KiB")
"""


def _bench():
    return load_script(Path("benchmarks/sm_copies.py"), "sm_copies_bench")


# -- the option ---------------------------------------------------------------------------------------------

def test_the_copy_engine_choice_takes_ce_sm_and_both_in_any_case():
    assert [engines.copy_engine_choice(v, "x") for v in ("ce", " SM ", "Both")] == ["ce", "sm", "both"]


def test_a_bad_copy_engine_names_the_value_and_where_it_came_from():
    with pytest.raises(ValueError, match=r"invalid --gpucomm-copy-engine 'dma' \(from the command line\): "
                                         r"expected ce, sm, both"):
        engines.copy_engine_choice("dma", "the command line")


def test_an_old_copy_call_in_gpucomm_copy_engine_is_a_usage_error_that_names_gpucomm_copy_call(pytester,
                                                                                                 monkeypatch):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv("GPUCOMM_COPY_ENGINE", "cuda")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines([
        "ERROR: invalid --gpucomm-copy-engine 'cuda' (from the GPUCOMM_COPY_ENGINE environment variable): "
        "expected ce, sm, both",
        "'cuda' is a copy call: GPUCOMM_COPY_CALL chooses it since GPUCOMM_COPY_ENGINE became this option's;",
        "set GPUCOMM_COPY_CALL=cuda",
    ])
    assert all(len(line) <= 120 for line in result.stderr.lines)


def test_by_default_copy_tests_keep_their_ids_and_are_copy_engine_copies(pytester):
    pytester.makepyfile(COPY_TESTS)
    out = pytester.path / "r.json"
    result = pytester.runpytest(*FAST, f"--gpucomm-json={out}", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*test_pair[[]0->1] PASSED*", "*test_host[[]host<->1] PASSED*"])
    result.stdout.no_fnmatch_line("*-ce]*")
    result.stdout.no_fnmatch_line("*copy-engine=*")
    assert sorted({r["op"] for r in json.loads(out.read_text())["rows"]}) == ["copy", "host_bidir"]


def test_copy_engine_both_runs_each_copy_test_once_per_engine_with_the_engine_in_its_id(pytester):
    pytester.makepyfile(COPY_TESTS)
    out = pytester.path / "r.json"
    result = pytester.runpytest(*FAST, "--gpucomm-copy-engine=both", f"--gpucomm-json={out}", "-v")
    result.assert_outcomes(passed=10)  # 2 pairs x 2 engines, 2 devices x 2 engines, and 2 plain pairs
    result.stdout.fnmatch_lines(["gpucomm settings: *copy-engine=both*", "*test_pair[[]0->1-ce] PASSED*",
                                 "*test_pair[[]0->1-sm] PASSED*", "*test_host[[]host<->0-sm] PASSED*",
                                 "*test_plain[[]0->1] PASSED*"])
    rows = json.loads(out.read_text())["rows"]
    by_test = {r["test"]: r for r in rows}
    assert by_test["test_copy_engine_both_runs_each_copy_test_once_per_engine_with_the_engine_in_its_id.py::"
                   "test_pair[0->1-sm]"]["op"] == "copy_sm"
    sm_rows = [r for r in rows if r["op"].endswith("_sm")]
    assert sorted({r["op"] for r in sm_rows}) == ["copy_sm", "host_bidir_sm"]
    assert all(r["info"]["engine"] == sm_copy.HOST_KERNEL for r in sm_rows)
    # the test that takes no copy_engine stays a copy-engine copy under "both"
    assert {r["op"] for r in rows if "test_plain" in r["test"]} == {"copy"}


def test_copy_engine_sm_from_the_ini_file_makes_every_engine_test_an_sm_copy_with_the_id_sm(pytester):
    pytester.makeini("[pytest]\ngpucomm_copy_engine = sm\n")
    pytester.makepyfile(COPY_TESTS)
    out = pytester.path / "r.json"
    result = pytester.runpytest(*FAST, f"--gpucomm-json={out}", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*test_pair[[]1->0-sm] PASSED*"])
    result.stdout.no_fnmatch_line("*-ce]*")
    # a test without the copy_engine fixture follows the option too
    assert {r["op"] for r in json.loads(out.read_text())["rows"]} == {"copy_sm", "host_bidir_sm"}


def test_a_bad_copy_engine_in_the_ini_file_is_a_usage_error_naming_the_ini_key(pytester):
    pytester.makeini("[pytest]\ngpucomm_copy_engine = sideways\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: invalid --gpucomm-copy-engine 'sideways' (from the ini key "
                                 "gpucomm_copy_engine in *): expected ce, sm, both"])


def test_a_locked_gate_ignores_the_copy_engine_of_the_environment_and_says_so(pytester, monkeypatch):
    pytester.makepyfile(COPY_TESTS)
    monkeypatch.setenv("GPUCOMM_COPY_ENGINE", "sm")
    result = pytester.runpytest(*FAST, "--gpucomm-lock", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*ignored: *GPUCOMM_COPY_ENGINE=sm (the environment)*"])
    result.stdout.no_fnmatch_line("*-sm]*")


def test_an_engine_a_test_passes_that_is_neither_ce_nor_sm_is_a_usage_error_naming_it(pytester):
    pytester.makepyfile("def test_it(gpu_pair, comm):\n    comm.copy(gpu_pair, '4KiB', engine='dma')\n")
    result = pytester.runpytest(*FAST)
    result.stdout.fnmatch_lines(["*comm.copy(engine='dma'): expected 'ce' (the copy engines) or 'sm' (a copy "
                                 "kernel)*"])


# -- ops, specs, measurements on host buffers ---------------------------------------------------------------------

def test_sm_copies_and_both_way_host_copies_are_ops_of_their_own_with_their_kinds():
    assert [copies.sm_op(op, "sm") for op in ("copy", "copy_bidir", "h2d", "d2h", "host_bidir")] == \
        ["copy_sm", "copy_bidir_sm", "h2d_sm", "d2h_sm", "host_bidir_sm"]
    assert copies.sm_op("h2d", "ce") == "h2d"
    assert {op: op_kind(op) for op in ("copy_sm", "copy_bidir_sm")} == {"copy_sm": PEER_KIND,
                                                                       "copy_bidir_sm": PEER_KIND}
    assert {op_kind(op) for op in ("h2d_sm", "d2h_sm", "host_bidir", "host_bidir_sm")} == {HOST_KIND}


def test_a_copy_spec_names_its_engine_and_refuses_an_unknown_one_or_an_sm_pattern():
    assert copies.copy_spec("peer", ["cpu:0", "cpu:1"], 8)["engine"] == "ce"
    assert copies.copy_spec("host_device", ["cuda:0"], 8, direction="both", engine="sm")["engine"] == "sm"
    with pytest.raises(ValueError, match=r"a peer copy: the copy engine must be 'ce' or 'sm', got 'dma'"):
        copies.copy_spec("peer", ["cpu:0", "cpu:1"], 8, engine="dma")
    with pytest.raises(ValueError, match="the all_pairs pattern is made by the copy engines only"):
        copies.copy_spec("all_pairs", ["cpu:0", "cpu:1"], 8, engine="sm")


def test_a_both_ways_host_copy_on_host_buffers_counts_per_direction_and_gives_each_directions_figure():
    m = copies.measure_host_both_ways("cpu:1", 65536, QUICK, copies.BufferPool())
    assert (m.op, m.devices, m.size_bytes, m.bytes_per_iter) == ("host_bidir", ("host", "cpu:1"), 65536, 65536)
    assert m.info["accounting"] == copies.HOST_BOTH_WAYS_ACCOUNTING
    # each direction's own time ends no later than the span of both: its figure is at least the gated one's
    # share (medians of the same samples, so compared with a margin for the medians' own order)
    assert m.info["h2d_gbps"] > 0 and m.info["d2h_gbps"] > 0
    assert max(m.info["h2d_gbps"], m.info["d2h_gbps"]) >= 0.9 * m.algbw_gbps


def test_an_sm_copy_on_host_buffers_is_the_cores_elementwise_kernel_and_is_verified():
    m = copies.measure_copy("cpu:0", "cpu:1", 4099, QUICK, copies.BufferPool(), engine="sm")
    assert (m.op, m.info["engine"]) == ("copy_sm", sm_copy.HOST_KERNEL)
    a = torch.arange(300, dtype=torch.int64).to(torch.uint8)
    b = torch.zeros_like(a)
    sm_copy.host_kernel_copy(a, b)
    assert torch.equal(a, b)


def test_a_wrong_sm_copy_fails_its_measurement_naming_the_op_and_the_wrong_bytes(monkeypatch):
    def half(src, dst):  # copies the first half only: fast and wrong
        dst[: src.numel() // 2] = src[: src.numel() // 2]

    monkeypatch.setattr(copy_timing, "host_kernel_copy", half)
    with pytest.raises(copies.CopyError, match=r"copy_bidir_sm cpu:0->cpu:1 \(65536 bytes\): the copied data is "
                                               r"wrong in \d+ of \d+ checked bytes"):
        copies.measure_copy("cpu:0", "cpu:1", 65536, QUICK, copies.BufferPool(), both_ways=True, engine="sm")


def test_the_fresh_remeasure_of_an_sm_copy_measures_an_sm_copy():
    spec = copies.copy_spec("host_device", ["cpu:0"], 8192, direction="both", engine="sm")
    d = copies.bench_copy(None, **spec, timing={"min_time_s": 0.002})
    assert d["op"] == "host_bidir_sm" and d["devices"] == ["host", "cpu:0"]


# -- the kernel's set-up (pure) ---------------------------------------------------------------------------------

def test_the_kernel_grid_is_programs_per_sm_times_the_sms_but_no_more_than_the_chunks():
    cfg = sm_copy.KernelConfig(programs_per_sm=2, block=4096)
    assert sm_copy.programs_for(cfg, 132, 1 << 28) == 264
    assert sm_copy.programs_for(cfg, 132, 4096 * 10 + 1) == 11
    assert sm_copy.programs_for(cfg, 132, 1) == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"block": 3000}, "block must be a power of 2 of at least 16, got 3000"),
    ({"programs_per_sm": 0}, "programs_per_sm must be an integer of at least 1, got 0"),
    ({"warps": 3}, "warps must be 1, 2, 4, 8, 16 or 32, got 3"),
    ({"bidir_layout": "warps"}, "bidir_layout must be one of programs, alternate, paired, got 'warps'"),
])
def test_a_bad_kernel_shape_is_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        sm_copy.KernelConfig(**kwargs)


def test_a_byte_buffer_is_copied_as_words_where_its_size_allows():
    assert sm_copy.element_view(torch.empty(4096, dtype=torch.uint8)).dtype == torch.int32
    assert sm_copy.element_view(torch.empty(4099, dtype=torch.uint8)).dtype == torch.uint8


def test_without_triton_an_sm_copy_on_a_gpu_fails_saying_it_needs_triton(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    sm_copy._kernels.cache_clear()
    try:
        with pytest.raises(engines.CopyError, match="SM copies on a GPU need Triton .*: import triton failed"):
            sm_copy._kernels()
    finally:
        sm_copy._kernels.cache_clear()


# -- benchmarks/sm_copies.py (pure parts) -----------------------------------------------------------------------

NVBANDWIDTH_FILE = Path(__file__).parent / "data" / "foreign" / "nvbandwidth-b1024.json"


def test_the_benchmark_reads_nvbandwidth_through_the_plugin_s_reader_and_names_a_bad_figure(tmp_path):
    bench = _bench()
    doc = json.loads(NVBANDWIDTH_FILE.read_text())
    (tmp_path / "b1024.json").write_text(json.dumps(doc))
    figures = bench.recorded_nvbandwidth(tmp_path, 1024)
    expected = {tc["name"]: float(tc["bandwidth_matrix"][0][0]) for tc in doc["nvbandwidth"]["testcases"]}
    assert figures == pytest.approx(expected, rel=1e-9)
    doc["nvbandwidth"]["testcases"][8]["bandwidth_matrix"][0][0] = "x"
    (tmp_path / "b1.json").write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match=r"b1.json: nvbandwidth.testcases\[8\].bandwidth_matrix\[0\]\[0\]: 'x' "
                                         "is not a bandwidth"):
        bench.recorded_nvbandwidth(tmp_path, 1)
    (tmp_path / "b4.json").write_text('{"version": 1}')
    with pytest.raises(SystemExit, match="b4.json: not a file of nccl-tests"):
        bench.recorded_nvbandwidth(tmp_path, 4)


def test_the_benchmark_flags_a_ratio_under_0_97_and_pairs_each_direction_of_both_ways():
    bench = _bench()
    ours = {("h2d_sm", 64): {"gbps": 50.0, "info": {}},
            ("host_bidir", 64): {"gbps": 48.0, "info": {"h2d_gbps": 49.0, "d2h_gbps": 40.0}}}
    theirs = {64: {"host_to_device_memcpy_sm": 51.4, "host_to_device_bidirectional_memcpy_ce": 48.8,
                   "device_to_host_bidirectional_memcpy_ce": 50.3}}
    rows = bench.compare(ours, theirs)
    got = {(r["op"], r["how"]): (round(r["ratio"], 3), r["low"]) for r in rows}
    assert got == {("h2d_sm", "gbps"): (0.973, False), ("host_bidir", "h2d_gbps"): (1.004, False),
                   ("host_bidir", "d2h_gbps"): (0.795, True)}
    assert all(len(line) <= 120 for line in bench.table(rows, "t"))


def test_the_benchmark_prints_a_copy_by_kernel_within_a_gpu_beside_the_copy_engine_s_but_does_not_hold_it():
    bench = _bench()
    ours = {("copy_sm", 256): {"gbps": 1400.0, "info": {}}, ("copy", 256): {"gbps": 1400.0, "info": {}}}
    rows = bench.compare(ours, {256: {"device_local_copy": 1500.0}})
    got = {r["op"]: (round(r["ratio"], 3), r["gated"], r["low"]) for r in rows}
    assert got == {"copy": (0.933, True, True), "copy_sm": (0.933, False, False)}
    lines = bench.table(rows, "t")
    assert lines[-1].endswith("(not held)") and all(len(line) <= 120 for line in lines)


def test_the_benchmark_names_a_bad_size():
    bench = _bench()
    assert bench.parse_sizes("1, 64") == [1, 64]
    with pytest.raises(ValueError, match=r"--sizes '1,0.5': '0.5' is not a whole number of MiB"):
        bench.parse_sizes("1,0.5")


# -- on a GPU ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("size", [4096 + 3, 1 << 20])
def test_sm_copies_on_a_gpu_are_verified_at_word_and_odd_sizes(size):
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs Triton")
    pool = copies.BufferPool()
    for m in (copies.measure_host_device("cuda:0", size, "h2d", QUICK, pool, "sm"),
              copies.measure_host_device("cuda:0", size, "d2h", QUICK, pool, "sm"),
              copies.measure_host_both_ways("cuda:0", size, QUICK, pool, "sm"),
              copies.measure_copy("cuda:0", "cuda:0", size, QUICK, pool, engine="sm"),
              copies.measure_copy("cuda:0", "cuda:0", size, QUICK, pool, both_ways=True, engine="sm")):
        assert m.info["engine"] == sm_copy.KERNEL_LABEL and m.algbw_gbps > 0
    pool.clear()
