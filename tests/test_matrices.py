"""The copy matrices (pytest_gpucomm.analysis.matrices): which matrices the rows make, their cells, the size the text
prints, the baseline's figure of a cell, and the text itself; then the section in a real CPU run's terminal
summary and in ``gpucomm show``."""

from __future__ import annotations

import io
import json

import pytest

from pytest_gpucomm.cli import main
from pytest_gpucomm.gate.cases import case_key
from pytest_gpucomm.analysis.matrices import (ALL_ONE_WAY, MAX_COLUMNS, Cell, copy_matrices, matrix_lines,
                                              report_matrix_lines, RATIO_NOTE)

GIB, MIB = 1 << 30, 1 << 20


def _row(test, op, src, dst, size, gbps, **info):
    return {"test": f"suites/test_copies.py::{test}[{size}-{src}-{dst}]", "op": op, "kind": "copy",
            "devices": [src, dst], "size_bytes": size, "gbps": gbps, "world_size": 1, "dtype": None, "info": info}


def _peer_rows(n, sizes=(MIB, GIB), gbps=lambda a, b, s: 100.0 * (a + 1) + b):
    return [_row("test_peer_copy", "copy", f"cuda:{a}", f"cuda:{b}", s, gbps(a, b, s))
            for s in sizes for a in range(n) for b in range(n) if a != b]


def _baseline(rows, factor=1.0, skip=()):
    cases = {}
    for r in rows:
        if (r["devices"][0], r["devices"][1]) in skip:
            continue
        key = case_key(r["test"], r["op"], r["size_bytes"], r["dtype"], 1, "")
        cases[key] = {"runs": [{"summary": {"median_gbps": r["gbps"] * factor * m}} for m in (0.98, 1.0, 1.03)]}
    return {"schema": "pytest-gpucomm-baseline", "name": "b", "cases": cases}


def test_a_peer_copy_test_makes_one_matrix_with_every_pair_in_natural_device_order():
    (m,) = copy_matrices(_peer_rows(11))
    assert m.sources == m.destinations == [f"cuda:{i}" for i in range(11)]  # cuda:10 after cuda:2
    assert m.sizes == [MIB, GIB] and len(m.cells[GIB]) == 110
    assert m.cells[GIB][("cuda:3", "cuda:10")] == Cell(410.0, None, False)


def test_the_patterns_and_collectives_make_no_matrix():
    rows = _peer_rows(2) + [
        {**_row("test_copy_all_pairs", "copy_all_pairs", "cuda:0", "cuda:1", MIB, 5.0),
         "devices": ["cuda:0", "cuda:1", "cuda:2"]},
        {**_row("test_collective", "all_reduce", "cuda:0", "cuda:1", MIB, 5.0), "kind": "collective"}]
    assert [m.op for m in copy_matrices(rows)] == ["copy"]


def test_one_way_copies_of_several_tests_make_a_first_matrix_with_the_host_as_a_row_and_a_column():
    rows = _peer_rows(2) + [_row("test_host_to_device", "h2d", "host", "cuda:1", GIB, 55.0),
                            _row("test_device_to_host", "d2h", "cuda:0", "host", GIB, 50.0)]
    first, *rest = copy_matrices(rows)
    assert (first.op, first.test) == (ALL_ONE_WAY, "all one-way copies")
    assert first.sources == ["cuda:0", "cuda:1", "host"] and first.destinations == ["cuda:0", "cuda:1", "host"]
    assert first.cells[GIB][("host", "cuda:1")].now == 55.0 and first.cells[GIB][("cuda:1", "cuda:0")].now == 200.0
    assert first.title == "all one-way copies: peer, host to device and device to host"
    assert [m.op for m in rest] == ["copy", "h2d", "d2h"]


def test_each_node_of_a_job_has_its_own_matrices():
    rows = [dict(r, info={"node": node, "host": f"h{node}"}) for node in (0, 1) for r in _peer_rows(2)]
    assert [m.title for m in copy_matrices(rows)] == ["suites/test_copies.py::test_peer_copy: copy (node 0 (h0))",
                                                      "suites/test_copies.py::test_peer_copy: copy (node 1 (h1))"]


def test_the_text_prints_the_largest_size_at_which_the_most_pairs_were_measured():
    rows = _peer_rows(3, sizes=(MIB,)) + _peer_rows(3, sizes=(GIB,))[:2]  # 1 GiB measured on 2 pairs only
    (m,) = copy_matrices(rows)
    assert m.fullest_size() == MIB
    assert "copy at 1 MiB (1,048,576 bytes):" in "\n".join(matrix_lines([m]))
    assert copy_matrices(_peer_rows(3))[0].fullest_size() == GIB


def test_the_baselines_figure_of_a_cell_is_the_median_of_its_runs_and_the_ratio_is_today_over_it():
    rows = _peer_rows(3)
    (m,) = copy_matrices(rows, _baseline(rows, factor=2.0, skip={("cuda:2", "cuda:0")}))
    now, base, floor, judged = m.cells[GIB][("cuda:0", "cuda:1")]
    assert base == pytest.approx(now * 2.0) and not floor and judged is None
    assert m.ratio(GIB, "cuda:0", "cuda:1") == pytest.approx(0.5)
    assert m.cells[GIB][("cuda:2", "cuda:0")] == Cell(300.0, None, False) and m.ratio(GIB, "cuda:2", "cuda:0") is None
    text = matrix_lines([m])
    ratio = text[text.index(f"  {RATIO_NOTE}:") + 1:]
    assert ratio[0].split() == ["cuda:0", "cuda:1", "cuda:2"]
    assert ratio[1].split() == ["cuda:0", "-", "0.50x", "0.50x"]
    assert ratio[3].split() == ["cuda:2", "new", "0.50x", "-"]  # the baseline lacks 2 -> 0


def test_the_text_has_a_row_per_source_and_a_column_per_destination_with_dashes_where_not_measured():
    rows = [r for r in _peer_rows(3) if (r["devices"][0], r["devices"][1]) != ("cuda:1", "cuda:2")]
    lines = matrix_lines(copy_matrices(rows))
    assert lines[0] == ("gpucomm copy matrices (GB/s, GB = 1e9 bytes; source rows, destination columns; -: not "
                        "measured; at the largest size where the most pairs were measured):")
    assert lines[1] == "  suites/test_copies.py::test_peer_copy: copy at 1 GiB (1,073,741,824 bytes):"
    assert [line.split() for line in lines[2:6]] == [["cuda:0", "cuda:1", "cuda:2"], ["cuda:0", "-", "101", "102"],
                                                     ["cuda:1", "200", "-", "-"], ["cuda:2", "300", "301", "-"]]
    assert "today / baseline" not in "\n".join(lines)


def test_without_a_baseline_document_the_ratio_is_against_the_figure_each_rows_verdict_was_judged_against():
    rows = _peer_rows(2, sizes=(GIB,))
    rows[0]["baseline"] = {"status": "ok", "baseline_gbps": rows[0]["gbps"] * 4}
    rows[1]["baseline"] = {"status": "new", "baseline_gbps": None}
    text = matrix_lines(copy_matrices(rows))
    ratio = text[text.index(f"  {RATIO_NOTE}:") + 1:]
    assert [line.split() for line in ratio] == [["cuda:0", "cuda:1"], ["cuda:0", "-", "0.25x"], ["cuda:1", "new", "-"]]
    # not compared at all: no ratio matrix
    assert f"  {RATIO_NOTE}:" not in matrix_lines(copy_matrices(_peer_rows(2, sizes=(GIB,))))


def test_a_published_floor_is_the_baseline_of_a_case_without_runs_marked_with_a_star():
    rows = _peer_rows(2, sizes=(GIB,))
    doc = _baseline(rows)
    key = next(k for k in doc["cases"] if "[1073741824-cuda:1-cuda:0]" in k)
    doc["cases"][key] = {"runs": [], "floor_gbps": 100.0}
    text = matrix_lines(copy_matrices(rows, doc))
    ratio = text[text.index(f"  {RATIO_NOTE}:") + 1:]
    assert ratio[2].split() == ["cuda:1", "2.00x*", "-"]
    assert text[-1] == "  *: against the published floor of a case with no measured run"
    # the same from a report's verdict on the floor
    rows[1]["baseline"] = {"status": "floor-ok", "baseline_gbps": 100.0}
    assert "2.00x*" in "\n".join(matrix_lines(copy_matrices(rows)))


def test_a_test_with_two_rows_of_one_pair_and_size_makes_no_matrix_and_says_so():
    rows = _peer_rows(2, sizes=(GIB,))
    rows.append(dict(rows[0], test=rows[0]["test"].replace("[", "[pageable-"), gbps=1.0))
    (m,) = copy_matrices(rows)
    assert m.ambiguous
    assert matrix_lines([m]) == [matrix_lines(copy_matrices(_peer_rows(2)))[0],
                                 "  suites/test_copies.py::test_peer_copy: copy: no matrix: the test has several rows "
                                 "of one pair and size (other parameters)"]


def test_the_figure_is_the_tables_from_the_samples_and_a_row_without_one_is_a_line_not_a_traceback():
    row = _row("test_peer_copy", "copy", "cuda:0", "cuda:1", MIB, 999.0)
    row.update(samples_s=[MIB / 5e9] * 3, bytes_per_iter=MIB, busbw_factor=1.0)
    assert copy_matrices([row])[0].cells[MIB][("cuda:0", "cuda:1")].now == pytest.approx(5.0)
    broken = dict(_row("test_peer_copy", "copy", "cuda:0", "cuda:1", MIB, 1.0))
    del broken["gbps"]
    assert report_matrix_lines({"rows": [broken, *_peer_rows(2)]}) == [
        f"gpucomm: no copy matrices: ValueError: {broken['test']}: no GB/s figure (KeyError: 'gbps')"]


def test_a_one_way_matrix_names_only_the_copies_it_holds():
    rows = [_row("test_host_to_device", "h2d", "host", "cuda:0", GIB, 55.0),
            _row("test_device_to_host", "d2h", "cuda:0", "host", GIB, 50.0)]
    assert copy_matrices(rows)[0].title == "all one-way copies: host to device and device to host"


def test_a_wide_matrix_is_printed_in_slices_of_destinations():
    lines = matrix_lines(copy_matrices(_peer_rows(MAX_COLUMNS + 3, sizes=(GIB,))))
    heads = [line.split() for line in lines if line.split() and all(c.startswith("cuda:") for c in line.split())]
    assert heads == [[f"cuda:{i}" for i in range(MAX_COLUMNS)],
                     [f"cuda:{i}" for i in range(MAX_COLUMNS, MAX_COLUMNS + 3)]]


def test_a_single_cell_matrix_and_the_one_way_tests_the_first_matrix_holds_are_left_out_of_the_text():
    assert matrix_lines(copy_matrices([_row("test_host_to_device", "h2d", "host", "cuda:0", GIB, 55.0)])) == []
    rows = _peer_rows(2) + [_row("test_host_to_device", "h2d", "host", "cuda:0", GIB, 55.0),
                            _row("test_peer_copy_both_ways", "copy_bidir", "cuda:0", "cuda:1", GIB, 9.0),
                            _row("test_peer_copy_both_ways", "copy_bidir", "cuda:1", "cuda:0", GIB, 9.0)]
    titles = [line for line in matrix_lines(copy_matrices(rows)) if line.startswith("  ") and line.endswith("bytes):")]
    assert [t.split(" at ")[0].strip() for t in titles] == [
        "all one-way copies: peer and host to device",
        "suites/test_copies.py::test_peer_copy_both_ways: both-ways copy"]


def test_the_limit_keeps_the_first_matrices_and_counts_the_rest():
    rows = [dict(r, info={"node": node}) for node in range(5) for r in _peer_rows(2)]
    lines = matrix_lines(copy_matrices(rows), limit=2)
    assert sum(line.endswith("bytes):") for line in lines) == 2
    assert lines[-1] == "  ... and 3 more (gpucomm show REPORT prints every one)"


def test_asked_sizes_print_each_one_the_matrix_has():
    lines = matrix_lines(copy_matrices(_peer_rows(2)), sizes=[MIB, GIB, 4096])
    assert [line.split(" at ")[1] for line in lines if line.endswith("bytes):")] == [
        "1 MiB (1,048,576 bytes):", "1 GiB (1,073,741,824 bytes):"]
    assert lines[0].endswith("; at the sizes asked):")
    assert matrix_lines(copy_matrices(_peer_rows(2)), sizes=[4096]) == []


SUITE = """
from pytest_gpucomm import sizes

@sizes(65536)
def test_pair(gpu_pair, size, comm):
    comm.copy(gpu_pair, size)
"""


def test_a_run_on_3_devices_prints_the_peer_copy_matrix_and_gpucomm_show_prints_it_from_the_report(
        pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_CPU_DEVICES", "3")
    pytester.makepyfile(test_m=SUITE)
    result = pytester.runpytest_subprocess("--gpucomm-device=cpu", "--gpucomm-min-time=0.002", "-p", "no:cacheprovider",
                                           "--gpucomm-json=r.json")
    assert result.ret == 0
    out = result.stdout.str().splitlines()
    head = out.index("  test_m.py::test_pair: copy at 64 KiB (65,536 bytes):")
    report = json.loads((pytester.path / "r.json").read_text())
    gbps = {(r["devices"][0], r["devices"][1]): r["gbps"] for r in report["rows"]}
    assert out[head + 1].split() == ["cpu:0", "cpu:1", "cpu:2"]
    for i, line in enumerate(out[head + 2:head + 5]):
        cells = line.split()
        assert cells[0] == f"cpu:{i}" and cells[1 + i] == "-"
        for k in set(range(3)) - {i}:
            assert float(cells[1 + k]) == pytest.approx(gbps[(f"cpu:{i}", f"cpu:{k}")], rel=1e-3)
    buf = io.StringIO()
    assert main(["show", str(pytester.path / "r.json")], out=buf) == 0
    shown = buf.getvalue().splitlines()
    at = shown.index("  test_m.py::test_pair: copy at 64 KiB (65,536 bytes):")
    assert shown[at:at + 5] == out[head:head + 5]


def test_gpucomm_show_prints_the_matrices_at_the_sizes_asked_and_says_when_there_is_none(tmp_path, capsys):
    from pytest_gpucomm.report.saved import REPORT_FORMAT, REPORT_VERSION

    rows = _peer_rows(2)
    for r in rows:
        r.update(samples_s=[r["size_bytes"] / (r["gbps"] * 1e9)] * 3, bytes_per_iter=r["size_bytes"], busbw_factor=1.0)
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"format": REPORT_FORMAT, "version": REPORT_VERSION, "rows": rows}))
    buf = io.StringIO()
    assert main(["show", str(path), "--no-curves", "--matrix-size", "1MiB", "--matrix-size", "1GiB"], out=buf) == 0
    heads = [line for line in buf.getvalue().splitlines() if line.endswith("bytes):")]
    assert [h.split(" at ")[1] for h in heads] == ["1 MiB (1,048,576 bytes):", "1 GiB (1,073,741,824 bytes):"]
    buf = io.StringIO()
    assert main(["show", str(path), "--no-curves", "--matrix-size", "8KiB"], out=buf) == 0
    assert buf.getvalue().splitlines()[-1] == ("gpucomm copy matrices: none at 8 KiB (--matrix-size); the report's "
                                               "copies were measured at 1 MiB, 1 GiB")
    assert main(["show", str(path), "--matrix-size", "16XB"], out=io.StringIO()) == 2
    assert "invalid size '16XB' (from --matrix-size): unknown unit 'XB'" in capsys.readouterr().err
