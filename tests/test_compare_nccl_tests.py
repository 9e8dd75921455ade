"""Unit tests for pytest_gpucomm.compare.nccl_tests (pure parsing / matching logic only)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_gpucomm.compare import nccl_tests as cmp
from pytest_gpucomm.ops.collectives import OPS

KIB, MIB, GIB = 1024, 1024**2, 1024**3

# Hand-written in the layout printed by nccl-tests 2.19 (src/util.cu writeResultHeader /
# writeBenchmarkLinePreamble / writeBenchmarkLineBody / writeResultFooter):
# "%12li  %12li  %8s  %6s  %6s" + 2 x "  %7s  %6s  %6s  %6g|N/A".  In the strings a line that ends in a
# backslash goes on in the next (nccl-tests prints one line), and "\x20" is the space nccl-tests leaves at a line's end.
ALL_REDUCE_OUT = """\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 1024 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 \
agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1372 on         vm device  0 [0000:00:06] NVIDIA H200
#  Rank  1 Group  0 Pid   1372 on         vm device  1 [0000:00:07] NVIDIA H200
#
#                                                              out-of-place                       in-place         \x20
#       size         count      type   redop    root     time   algbw   busbw  #wrong\
     time   algbw   busbw  #wrong\x20
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        \
     (us)  (GB/s)  (GB/s)        \x20
        1024           256     float     sum      -1    23.40    0.04    0.04       0    21.17    0.05    0.05       0
        2048           512     float     sum      -1    18.92    0.11    0.11       0    21.08    0.10    0.10       0
vm:1372:1380 [1] NCCL INFO Channel 00/24 : 0 1
       65536         16384     float     sum      -1    23.69    2.77    2.77       0    20.51    3.19    3.19       0
   268435456      67108864     float     sum      -1   895.63  299.72  299.72       0   894.79  300.00  300.00       0
  1073741824     268435456     float     sum      -1  3262.51  329.12  329.12       0  3269.78  328.38  328.38       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 114.155\x20
#
# Collective test concluded: all_reduce_perf
#
"""

# -c 0 -G 10: #wrong is N/A on both sides; size = full output buffer, count = per-rank count.
ALL_GATHER_OUT = """\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_gather_perf
# nThread 1 nGpus 2 minBytes 1024 maxBytes 1048576 step: 4(factor) warmup iters: 1 iters: 20 \
agg iters: 1 validation: 0 graph: 10 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1527 on         vm device  0 [0000:00:06] NVIDIA H200
#  Rank  1 Group  0 Pid   1527 on         vm device  1 [0000:00:07] NVIDIA H200
#
#                                                              out-of-place                       in-place         \x20
#       size         count      type   redop    root     time   algbw   busbw  #wrong\
     time   algbw   busbw  #wrong\x20
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        \
     (us)  (GB/s)  (GB/s)        \x20
        1024           128     float    none      -1     5.66    0.18    0.09    N/A     5.64    0.18    0.09    N/A
  1073741824     134217728     float    none      -1  1.9e+03  547.84  273.92    N/A  1843.77  582.36  291.18    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 12.3326\x20
#
# Collective test concluded: all_gather_perf
#
"""

# alltoall: in-place is never validated, so its #wrong is N/A even with -c 1.
ALLTOALL_ROWS = """\
        1024           128     float    none      -1    20.55    0.05    0.02       0    19.32    0.05    0.03    N/A
"""

# -I 1 adds i_min i_max i_p99 i_cv% per placement; -S 1 appends a timestamp.
PER_ITER_TS_ROW = (
    "        4096          1024     float     sum      -1    20.95    0.20    0.20       0"
    "    19.00    21.00    22.00     3.10    18.16    0.23    0.23       0"
    "    17.00    19.00    20.00     2.00  2026-07-10 12:00:01\n"
)


def test_parse_all_reduce_rows_and_columns():
    rows = cmp.parse_nccl_tests_output(ALL_REDUCE_OUT)
    assert len(rows) == 10  # 5 data rows x (out-of-place, in-place); NCCL INFO line ignored
    oop = [r for r in rows if not r["in_place"]]
    ip = [r for r in rows if r["in_place"]]
    assert [r["size_bytes"] for r in oop] == [1024, 2048, 65536, 256 * MIB, GIB]
    first = oop[0]
    assert first == {
        "op": "all_reduce", "size_bytes": 1024, "count": 256, "type": "float", "dtype": "float32",
        "redop": "sum", "root": -1, "in_place": False, "time_us": 23.40, "algbw": 0.04,
        "busbw": 0.04, "wrong": 0,
    }
    assert ip[-1]["time_us"] == pytest.approx(3269.78)
    assert ip[-1]["busbw"] == pytest.approx(328.38)


def test_parse_na_wrong_and_exponent_and_op_override():
    rows = cmp.parse_nccl_tests_output(ALL_GATHER_OUT)
    assert {r["op"] for r in rows} == {"all_gather"}
    assert all(r["wrong"] is None for r in rows)
    big = [r for r in rows if r["size_bytes"] == GIB and not r["in_place"]][0]
    assert big["count"] == GIB // 4 // 2  # per-rank element count, size is the full output
    assert big["time_us"] == pytest.approx(1900.0)  # "%.1e" when %7.2f overflows
    rows = cmp.parse_nccl_tests_output(ALLTOALL_ROWS, op="alltoall")
    assert [(r["op"], r["in_place"], r["wrong"]) for r in rows] == [
        ("all_to_all", False, 0), ("all_to_all", True, None)]


def test_parse_per_iteration_and_timestamp_layout():
    rows = cmp.parse_nccl_tests_output(PER_ITER_TS_ROW, op="all_reduce_perf")
    assert len(rows) == 2
    oop, ip = rows
    assert (oop["time_us"], oop["busbw"]) == (20.95, 0.20)
    assert (ip["in_place"], ip["time_us"], ip["busbw"]) == (True, 18.16, 0.23)


def test_parse_ignores_garbage_and_errors():
    text = ("vm: Test NCCL failure common.cu:1234 'unhandled cuda error'\n"
            " .. vm pid 1: Test failure common.cu:567\n\n"
            "#  Rank  0 Group  0 Pid   1 on vm device  0 [0000:00:06] NVIDIA H200\n")
    assert cmp.parse_nccl_tests_output(text) == []


def test_parse_summary():
    s = cmp.parse_nccl_tests_summary(ALL_REDUCE_OUT)
    assert s["op"] == "all_reduce" and s["program"] == "all_reduce_perf"
    assert s["avg_busbw"] == pytest.approx(114.155)
    assert s["out_of_bounds"] == 0
    assert (s["nccl_headers"], s["nccl_library"]) == (22809, 22809)
    assert (s["ngpus"], s["iters"], s["warmup_iters"], s["graph"], s["ranks"]) == (2, 20, 5, 0, 2)
    assert cmp.parse_nccl_tests_summary(ALL_GATHER_OUT)["graph"] == 10


@pytest.mark.parametrize("name,expected", [
    ("alltoall_perf", "all_to_all"), ("sendrecv", "send_recv"), ("all_reduce_perf_mpi", "all_reduce"),
    ("/x/build/reduce_scatter_perf", "reduce_scatter"), ("AllGather", "all_gather"),
    ("broadcast", "broadcast"), ("reduce_perf", "reduce"),
])
def test_normalize_op(name, expected):
    assert cmp.normalize_op(name) == expected


def test_parse_size_and_human():
    assert cmp.parse_size("1K") == 1024
    assert cmp.parse_size("1G") == GIB
    assert cmp.parse_size("256MiB") == 256 * MIB
    assert cmp.parse_size("4096") == 4096
    assert cmp.parse_size("1MB") == 1_000_000  # decimal, as in the rest of pytest-gpucomm
    assert cmp.human_size(GIB) == "1 GiB" and cmp.human_size(1536) == "1.5 KiB"
    with pytest.raises(ValueError):
        cmp.parse_size("1X")


def _ours_report():
    def row(op, size, median_us, busbw, in_place=False, dtype="float32", world=2, kind="collective"):
        return {"test": f"test_{op}[{size}]", "op": op, "kind": kind, "size_bytes": size, "world_size": world,
                "bytes_per_iter": size, "devices": [f"cuda:{i}" for i in range(world)], "busbw_factor": 1.0,
                "samples_s": [median_us * 1e-6], "dtype": dtype,
                "median_us": median_us, "busbw_gbps": busbw, "algbw_gbps": busbw,
                "info": {"in_place": in_place}}
    return {"format": "pytest-gpucomm-report", "version": 1, "rows": [
        row("all_reduce", 1024, 30.0, 0.03),             # time ratio 30/23.4 = 1.28 -> PASS
        row("all_reduce", 2048, 30.0, 0.07),             # 30/18.92 = 1.59 -> FAIL
        row("all_reduce", 2048, 10.0, 0.2, in_place=True),
        row("all_reduce", 256 * MIB, 900.0, 295.0),      # 295/299.72 = 0.984 -> PASS
        row("all_reduce", GIB, 3400.0, 315.0),           # 315/329.12 = 0.957 -> FAIL
        row("all_reduce", 4 * KIB, 20.0, 0.2),           # only ours -> MISSING theirs
        row("all_reduce", 1024, 30.0, 0.03, world=8),    # other world size: filtered out
        row("peer_copy", 1024, 1.0, 1.0, kind="copy"),    # not a collective: filtered out
        row("all_reduce", 1024, 99.0, 0.01, dtype="bfloat16"),  # no bf16 on nccl-tests side
    ]}


def test_normalize_ours_filters():
    ours = cmp.normalize_ours(_ours_report(), world_size=2)
    assert len(ours) == 7
    assert all(r["op"] == "all_reduce" for r in ours)
    assert sum(r["in_place"] for r in ours) == 1
    assert cmp.normalize_ours(_ours_report(), world_size=8)[0]["world_size"] == 8


def test_match_rows_ratios_and_targets():
    theirs = cmp.parse_nccl_tests_output(ALL_REDUCE_OUT)
    ours = cmp.normalize_ours(_ours_report(), world_size=2)
    m = {(r["size_bytes"], r["dtype"]): r for r in cmp.match_rows(ours, theirs, in_place=False)}

    r = m[(1024, "float32")]
    assert r["time_ratio"] == pytest.approx(30.0 / 23.40)
    assert r["busbw_ratio"] == pytest.approx(0.03 / 0.04)  # reported, but no busbw target here
    assert (r["target"], r["status"]) == ("time", "PASS")
    assert (m[(2048, "float32")]["target"], m[(2048, "float32")]["status"]) == ("time", "FAIL")
    assert m[(65536, "float32")]["status"] == "MISSING ours"  # 64 KiB is a target size
    r = m[(256 * MIB, "float32")]
    assert r["busbw_ratio"] == pytest.approx(295.0 / 299.72)
    assert r["time_ratio"] == pytest.approx(900.0 / 895.63)
    assert (r["target"], r["status"]) == ("busbw", "PASS")
    assert m[(GIB, "float32")]["status"] == "FAIL"
    assert m[(4 * KIB, "float32")]["status"] == "MISSING theirs"
    assert m[(1024, "bfloat16")]["status"] == "MISSING theirs"
    assert [r["size_bytes"] for r in cmp.match_rows(ours, theirs, in_place=False)] == sorted(
        r["size_bytes"] for r in cmp.match_rows(ours, theirs, in_place=False))

    s = cmp.summarize(list(m.values()))
    assert (s["pass"], s["fail"], s["compared"]) == (2, 2, 4)
    assert (s["missing_ours"], s["missing_theirs"], s["missing_target_rows"]) == (1, 2, 3)
    assert cmp.exit_code(list(m.values())) == 1


def test_match_rows_in_place_uses_in_place_rows():
    theirs = cmp.parse_nccl_tests_output(ALL_REDUCE_OUT)
    ours = cmp.normalize_ours(_ours_report(), world_size=2)
    m = {r["size_bytes"]: r for r in cmp.match_rows(ours, theirs, in_place=True)}
    assert m[2048]["theirs_time_us"] == pytest.approx(21.08)
    assert m[2048]["time_ratio"] == pytest.approx(10.0 / 21.08)
    assert m[2048]["status"] == "PASS"
    assert m[GIB]["status"] == "MISSING ours"


def test_op_name_mapping_in_match():
    theirs = cmp.parse_nccl_tests_output(ALLTOALL_ROWS, op="alltoall_perf")
    ours = cmp.normalize_ours({"rows": [{
        "op": "all_to_all", "kind": "collective", "size_bytes": 1024, "world_size": 2,
        "dtype": "torch.float32", "median_us": 20.0, "busbw_gbps": 0.02, "algbw_gbps": 0.05,
        "info": {"in_place": False}}]}, world_size=2)
    (row,) = cmp.match_rows(ours, theirs)
    assert (row["op"], row["status"]) == ("all_to_all", "PASS")
    assert row["busbw_ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize("size,busbw_ratio,time_ratio,expected", [
    (256 * MIB, 0.97, None, "PASS"),
    (256 * MIB, 0.9699, 0.5, "FAIL"),
    (GIB, None, 1.0, "FAIL"),          # theirs busbw 0 / missing ratio cannot pass
    (KIB, None, 1.5, "PASS"),
    (64 * KIB, 2.0, 1.5001, "FAIL"),
    (128 * KIB, 0.1, 10.0, "-"),       # no target at this size
    (512, 0.1, 10.0, "-"),
])
def test_evaluate_target(size, busbw_ratio, time_ratio, expected):
    assert cmp.evaluate_target(size, busbw_ratio, time_ratio) == expected


def test_zero_busbw_ratio_is_none():
    ours = [{"op": "all_reduce", "size_bytes": GIB, "dtype": "float32", "in_place": False,
             "time_us": 1.0, "busbw": 1.0}]
    theirs = [dict(ours[0], busbw=0.0)]
    (row,) = cmp.match_rows(ours, theirs)
    assert row["busbw_ratio"] is None and row["status"] == "FAIL"


def test_on_one_rank_where_both_busbw_are_zero_the_busbw_target_is_judged_on_algbw():
    ours = [{"op": "all_reduce", "size_bytes": GIB, "dtype": "float32", "in_place": True,
             "time_us": 1.0, "algbw": 97.0, "busbw": 0.0}]
    (row,) = cmp.match_rows(ours, [dict(ours[0], algbw=100.0)])
    assert row["busbw_ratio"] == pytest.approx(0.97) and row["ratio_of"] == "algbw" and row["status"] == "PASS"
    (row,) = cmp.match_rows(ours, [dict(ours[0], algbw=101.0)])
    assert row["status"] == "FAIL"
    table = cmp.format_table([row]).splitlines()
    assert "0.960*" in table[2] and table[-1] == cmp.ALGBW_NOTE
    assert cmp.ALGBW_NOTE not in cmp.format_table(cmp.match_rows([dict(ours[0], busbw=1.0)],
                                                                 [dict(ours[0], busbw=1.0)]))


def test_a_report_of_other_rank_counts_than_gpus_is_an_error_naming_both(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "all_reduce_perf.txt").write_text(ALL_REDUCE_OUT)
    report = tmp_path / "ours.json"
    two_ranks = [r for r in _ours_report()["rows"] if r["world_size"] == 2 and r["kind"] == "collective"]
    report.write_text(json.dumps({"format": "pytest-gpucomm-report", "version": 1, "rows": two_ranks}))
    assert cmp.main(["--theirs-raw", str(raw), "--ours-json", str(report), "--gpus", "8"]) == 2
    assert f"{report}: its collectives ran on 2 rank(s), and --gpus 8 compares 8-rank rows" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["0", "-2", "eight"])
def test_gpus_must_be_a_whole_number_of_one_or_more(bad, capsys):
    with pytest.raises(SystemExit) as e:
        cmp.main(["--theirs-raw", ".", "--ours-json", "x.json", "--gpus", bad])
    assert e.value.code == 2 and f"--gpus {bad!r}: expected a whole number of 1 or more" in capsys.readouterr().err


def test_exit_codes():
    assert cmp.exit_code([]) == 2
    ok = [{"status": "PASS", "target": "time"}, {"status": "-", "target": None},
          {"status": "MISSING ours", "target": "busbw"}]
    assert cmp.exit_code(ok) == 0
    assert cmp.exit_code(ok, fail_on_missing=True) == 1


def test_format_table_contains_columns():
    theirs = cmp.parse_nccl_tests_output(ALL_REDUCE_OUT)
    ours = cmp.normalize_ours(_ours_report(), world_size=2)
    table = cmp.format_table(cmp.match_rows(ours, theirs))
    for word in ("busbw ratio", "time ratio", "PASS", "FAIL", "MISSING theirs", "1 GiB", "256 MiB"):
        assert word in table
    rows = [line.split() for line in table.splitlines() if line.startswith("all_reduce")]
    assert rows and all(r[1] in ("in", "out") for r in rows)  # the placement tells twin rows apart


def test_main_offline_end_to_end(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "all_reduce_perf.txt").write_text(ALL_REDUCE_OUT)
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps(_ours_report()))
    out = tmp_path / "cmp.json"
    rc = cmp.main(["--theirs-raw", str(raw), "--ours-json", str(ours), "--out", str(out)])
    assert rc == 1
    payload = json.loads(out.read_text())
    assert payload["summary"]["fail"] == 2 and payload["exit_code"] == 1
    assert "all_reduce" in capsys.readouterr().out
    # only passing rows compared -> exit 0
    rc = cmp.main(["--theirs-raw", str(raw), "--ours-json", str(ours), "--min-size", "256M",
                   "--max-size", "256M"])
    assert rc == 0


def test_match_rows_by_default_compares_each_of_our_rows_with_the_same_placement():
    theirs = [
        {"op": "all_reduce", "size_bytes": GIB, "dtype": "float32", "in_place": False, "time_us": 1.0, "busbw": 300.0},
        {"op": "all_reduce", "size_bytes": GIB, "dtype": "float32", "in_place": True, "time_us": 1.0, "busbw": 320.0},
    ]
    ours = [{"op": "all_reduce", "size_bytes": GIB, "dtype": "float32", "in_place": True, "time_us": 1.0,
             "busbw": 320.0}]
    (row,) = cmp.match_rows(ours, theirs)
    assert row["in_place"] is True
    assert row["busbw_ratio"] == pytest.approx(1.0)


def test_run_ours_uses_the_first_gpus_and_the_nccl_tests_dtype(tmp_path):
    args = cmp.build_parser().parse_args(["--nccl-tests-bin", "x", "--run-ours", "--gpus", "2", "--nccl-dtype", "half"])
    cmd, env = cmp.ours_command(args, tmp_path / "o.json", {"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["PATH"] == "/bin"
    assert "--gpucomm-dtype=float16" in cmd and str(tmp_path / "o.json") in cmd
    _, env = cmp.ours_command(args, tmp_path / "o.json", {"CUDA_VISIBLE_DEVICES": "3, 5,7"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3,5"


@pytest.mark.parametrize("op", list(OPS))
def test_every_op_is_compared_with_its_nccl_tests_binary_under_any_spelling(op):
    binary = OPS[op].nccl_tests
    assert cmp.NCCL_TESTS_BINARIES[binary] == op
    stem = binary[: -len("_perf")]
    for name in (op, op.replace("_", ""), binary, stem, f"/build/{binary}", f"{binary}_mpi", op.upper()):
        assert cmp.normalize_op(name) == op, name
    assert op in cmp.build_parser().parse_args(["--theirs-raw", "x", "--ours-json", "y"]).ops.split(",")


def test_raw_text_of_every_op_is_read_back(tmp_path):
    for spec in OPS.values():
        (tmp_path / f"{spec.nccl_tests}.txt").write_text(ALLTOALL_ROWS)
    rows, meta = cmp.load_theirs_raw(tmp_path, set(OPS))
    assert sorted({r["op"] for r in rows}) == sorted(OPS)
    assert set(meta) == {spec.nccl_tests for spec in OPS.values()}


@pytest.mark.parametrize("module", ["pytest_gpucomm.compare.nccl_tests", "pytest_gpucomm.compare.raw_copies"])
def test_comparisons_run_as_modules(module):
    p = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "--ours-json" in p.stdout
