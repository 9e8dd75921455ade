"""The readers of other tools' files (pytest_gpucomm.foreign): real files of nccl-tests 2.19.6 and nvbandwidth v0.8
(tests/data/foreign), and damaged, truncated, huge, wrong-version and hostile copies of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_gpucomm import foreign
from pytest_gpucomm.foreign import ForeignError, is_foreign, read_foreign, report_of
from pytest_gpucomm.foreign.nccl_tests import nccl_version_text
from pytest_gpucomm.gate.cases import CaseRecord
MiB, GiB = 1 << 20, 1 << 30

DATA = Path(__file__).parent / "data" / "foreign"
SENDRECV_ITER = DATA / "nccl-tests-sendrecv_iter.json"
BROADCAST = DATA / "nccl-tests-broadcast.json"
ALL_REDUCE = DATA / "nccl-tests-all_reduce.json"
NVB = DATA / "nvbandwidth-b1024.json"


def doc_of(path: Path) -> dict:
    return json.loads(path.read_text())


def written(tmp_path: Path, doc: object, name: str = "their.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_nccl_tests_per_iteration_file_gives_each_iterations_time_as_a_sample():
    run = read_foreign(SENDRECV_ITER)
    raw = doc_of(SENDRECV_ITER)["results"][0]
    first = run.cases[0]
    assert (run.tool, run.per_iteration, run.version) == ("nccl-tests", True, "JSON format 3")
    assert first.test_id == "nccl-tests::sendrecv_perf[float-sum-1KiB-out-of-place]"
    assert first.measurement.samples_s == pytest.approx([t * 1e-6 for t in raw["out_of_place_per_iter"]["times_us"]])
    assert first.measurement.n == 50 and first.measurement.op == "send_recv"
    assert first.measurement.info["source"] == "nccl-tests"
    assert first.measurement.info["source_version"] == "JSON format 3"


def test_nccl_tests_iterations_its_own_statistics_skip_are_left_out_of_the_samples(tmp_path):
    doc = doc_of(SENDRECV_ITER)
    doc["results"][0]["out_of_place_per_iter"]["skipped_iterations"] = 3
    times = doc["results"][0]["out_of_place_per_iter"]["times_us"]
    m = read_foreign(written(tmp_path, doc)).cases[0].measurement
    assert m.samples_s == pytest.approx([t * 1e-6 for t in times[3:]])


def test_nccl_tests_summary_file_gives_one_sample_per_case_the_mean_time():
    run = read_foreign(BROADCAST)
    raw = doc_of(BROADCAST)["results"]
    assert run.per_iteration is False and len(run.cases) == 2 * len(raw)
    for case, row in zip(run.cases[::2], raw):
        assert case.measurement.samples_s == [pytest.approx(row["out_of_place"]["time"] * 1e-6)]
        assert case.measurement.info["batch"] == row["actual_iterations"]


def test_nccl_tests_size_and_busbw_are_theirs_under_our_op_definitions():
    """Their size column is our size_bytes and their busbw our formula's: the figures agree to their rounding."""
    for path in (BROADCAST, ALL_REDUCE):
        run = read_foreign(path)
        for case, row in zip(run.cases[::2], doc_of(path)["results"]):
            m = case.measurement
            assert m.size_bytes == row["size"] and m.world_size == 1 and m.dtype == "float32"
            assert m.busbw_gbps == pytest.approx(row["out_of_place"]["bus_bw"], rel=1e-4, abs=1e-9)
    assert read_foreign(ALL_REDUCE).cases[-1].measurement.gbps == 0  # all_reduce on one rank moves nothing


def test_nccl_tests_fingerprint_keeps_the_libraries_and_the_recorded_variables_never_a_secret(tmp_path):
    doc = doc_of(BROADCAST)
    doc["env"] += ["HF_TOKEN=hf_secret", "NCCL_ALGO=Ring", "PATH=/usr/bin", "OMP_NUM_THREADS=4",
                   "NCCL_NET_PLUGIN_AUTH=x"]
    env = read_foreign(written(tmp_path, doc)).env
    assert env["comm_library"] == "NCCL 2.28.9" and env["model"] == "NVIDIA H100 80GB HBM3"
    assert env["hosts"] == ["vm"] and env["date"] == "2026-12-07T03:28:02"
    assert env["env"] == {"CUDA_HOME": "/usr/local/cuda", "CUDA_VERSION": "13.0.2", "NCCL_ALGO": "Ring",
                          "NCCL_VERSION": "2.28.3-1", "OMP_NUM_THREADS": "4"}
    assert "hf_secret" not in json.dumps(env) and "/usr/bin" not in json.dumps(env)


def test_nccls_version_code_reads_as_its_version():
    assert [nccl_version_text(c) for c in (22809, 22901, 21903, 2704)] == ["2.28.9", "2.29.1", "2.19.3", "2.7.4"]


def test_nvbandwidth_figures_become_one_buffer_time_under_our_copy_ops():
    run = read_foreign(NVB, nvbandwidth_size=GiB)
    by_name = {c.measurement.info["source_case"]: c for c in run.cases}
    raw = {t["name"]: float(t["bandwidth_matrix"][0][0]) for t in doc_of(NVB)["nvbandwidth"]["testcases"]}
    assert (run.tool, run.version, run.per_iteration, len(run.cases)) == ("nvbandwidth", "v0.8", False, 9)
    h2d = by_name["host_to_device_memcpy_sm"]
    assert h2d.test_id == "nvbandwidth::host_to_device_memcpy_sm[1GiB-cuda:0]"
    assert (h2d.measurement.op, h2d.measurement.devices, h2d.measurement.n) == ("h2d_sm", ("host", "cuda:0"), 1)
    assert by_name["device_to_host_memcpy_ce"].measurement.op == "d2h"
    assert by_name["device_local_copy"].measurement.devices == ("cuda:0", "cuda:0")
    assert "reverse copy runs" in by_name["host_to_device_bidirectional_memcpy_ce"].measurement.info["source_note"]
    for name, case in by_name.items():
        assert case.measurement.gbps == pytest.approx(raw[name])
    assert run.env["driver"] == "580.159.04" and run.env["runtime"] == "CUDA 13.0" and run.env["host"] == "vm"


def test_nvbandwidth_buffer_size_is_the_callers_else_nvbandwidths_default_512mib():
    assert read_foreign(NVB).cases[0].measurement.size_bytes == 512 * MiB
    assert read_foreign(NVB, nvbandwidth_size=GiB).cases[0].measurement.size_bytes == GiB


def test_cases_of_another_tool_are_keyed_apart_from_ours():
    m = read_foreign(NVB).cases[0].measurement
    theirs = CaseRecord.from_measurement(m, read_foreign(NVB).cases[0].test_id).key
    ours = CaseRecord.from_measurement(m, "suites/test_copies.py::test_host_device[512MiB-h2d]").key
    assert theirs != ours and theirs.startswith("nvbandwidth::")


def test_is_foreign_tells_their_documents_from_ours_and_anything_else():
    assert is_foreign(doc_of(BROADCAST)) and is_foreign(doc_of(NVB))
    assert not any(is_foreign(d) for d in ({"format": "pytest-gpucomm-report", "version": 2, "rows": []},
                                           {"schema": "pytest-gpucomm-baseline"}, [], "x", None))


def test_the_report_of_a_run_reads_back_as_a_report_with_the_tool_said():
    from pytest_gpucomm.report.document import ReportDocument

    doc = ReportDocument.from_json(report_of(read_foreign(SENDRECV_ITER)), "x")
    assert doc.rows[0].test == "nccl-tests::sendrecv_perf[float-sum-1KiB-out-of-place]"
    assert doc.extra["foreign"]["tool"] == "nccl-tests" and doc.extra["foreign"]["per_iteration"] is True
    assert foreign.describe_foreign(doc.extra["foreign"], "f.json").startswith("the nccl-tests file f.json (")


def test_nvbandwidth_waived_and_latency_tests_are_left_out_and_said(tmp_path):
    doc = doc_of(NVB)
    cases = doc["nvbandwidth"]["testcases"]
    cases.append({"name": "device_to_device_memcpy_read_ce", "status": "Waived"})
    cases.append({**copy.deepcopy(cases[0]), "name": "host_device_latency_sm"})
    run = read_foreign(written(tmp_path, doc))
    assert len(run.cases) == 9
    assert [n.split(":")[0] for n in run.notes] == ["device_to_device_memcpy_read_ce", "host_device_latency_sm"]


def _set(path: tuple, value: object):
    def change(doc: dict) -> None:
        at = doc
        for key in path[:-1]:
            at = at[key]
        at[path[-1]] = value
    return change


#: (what, the file's doc, a change, the field named, words of the message)
HOSTILE = [
    ("nccl version", BROADCAST, _set(("version",), 7), "version", "JSON format 7"),
    ("nccl time string", BROADCAST, _set(("results", 3, "out_of_place", "time"), "12"), "results[3].out_of_place.time",
     "not a number of microseconds"),
    ("nccl time nan", BROADCAST, _set(("results", 3, "in_place", "time"), "nan"), "results[3].in_place.time",
     "'nan' is not a number"),
    ("nccl time negative", BROADCAST, _set(("results", 0, "out_of_place", "time"), -3.0),
     "results[0].out_of_place.time", "-3.0 microseconds is not a positive finite figure"),
    ("nccl time zero", BROADCAST, _set(("results", 0, "out_of_place", "time"), 0), "results[0].out_of_place.time",
     "0 microseconds is not a positive"),
    ("nccl per-iteration zero", SENDRECV_ITER, _set(("results", 1, "in_place_per_iter", "times_us", 4), 0.0),
     "results[1].in_place_per_iter.times_us[4]", "not a positive finite figure"),
    ("nccl skips all", SENDRECV_ITER, _set(("results", 0, "in_place_per_iter", "skipped_iterations"), 50),
     "results[0].in_place_per_iter.skipped_iterations", "50 of 50 iterations: leaves no sample"),
    ("nccl nwrong nan", BROADCAST, _set(("results", 1, "out_of_place", "nwrong"), float("nan")),
     "results[1].out_of_place.nwrong", "nan is not a whole number"),
    ("nccl size infinite", BROADCAST, _set(("results", 1, "size"), float("inf")), "results[1].size",
     "inf is not a whole number"),
    ("nccl wrong result", BROADCAST, _set(("results", 2, "out_of_place", "nwrong"), 5.0),
     "results[2].out_of_place.nwrong", "5 wrong elements at 16KiB (broadcast_perf): a wrong result is a failure"),
    ("nccl markup redop", BROADCAST, _set(("results", 0, "redop"), "<script>"), "results[0].redop",
     "'<script>' is no reduction name"),
    ("nccl unknown binary", BROADCAST, _set(("args", 0), "/x/<b>evil_perf"), "args[0]", "is no nccl-tests perf binary"),
    ("nccl cpu time", BROADCAST, lambda d: d["results"][0]["out_of_place"].update(cpu_time=d["results"][0][
        "out_of_place"].pop("time")), "results[0].out_of_place.cpu_time", "CPU time (nccl-tests -C 1)"),
    ("nccl type", BROADCAST, _set(("results", 0, "type"), 3), "results[0].type", "a number, not a string"),
    ("nccl results", BROADCAST, _set(("results",), {}), "results", "a JSON object, not a list"),
    ("nccl no devices", BROADCAST, _set(("config", "devices"), []), "config.devices", "empty"),
    ("nvb version", NVB, _set(("nvbandwidth", "version"), "v9.9"), "nvbandwidth.version", "'v9.9': this pytest"),
    ("nvb error", NVB, _set(("nvbandwidth", "error"), "cuInit failed"), "nvbandwidth.error", "cuInit failed"),
    ("nvb failed test", NVB, _set(("nvbandwidth", "testcases", 2, "status"), "Error"),
     "nvbandwidth.testcases[2].status",
     "a test that did not pass is a failure"),
    ("nvb figure", NVB, _set(("nvbandwidth", "testcases", 1, "bandwidth_matrix", 0, 0), "fast"),
     "nvbandwidth.testcases[1].bandwidth_matrix[0][0]", "'fast' is not a bandwidth"),
    ("nvb figure nan", NVB, _set(("nvbandwidth", "testcases", 1, "bandwidth_matrix", 0, 0), "nan"),
     "nvbandwidth.testcases[1].bandwidth_matrix[0][0]", "is not a bandwidth"),
    ("nvb figure negative", NVB, _set(("nvbandwidth", "testcases", 1, "bandwidth_matrix", 0, 0), "-5"),
     "nvbandwidth.testcases[1].bandwidth_matrix[0][0]", "-5.0 GB/s is not a positive finite figure"),
    ("nvb markup name", NVB, _set(("nvbandwidth", "testcases", 0, "name"), "<img src=x>"),
     "nvbandwidth.testcases[0].name", "is no nvbandwidth test name"),
]


@pytest.mark.parametrize("what,source,change,field,words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_file_is_refused_naming_the_file_and_the_field(tmp_path, what, source, change, field, words):
    doc = doc_of(source)
    change(doc)
    path = written(tmp_path, doc)
    with pytest.raises(ForeignError) as e:
        read_foreign(path)
    assert str(e.value).startswith(f"{path}: {field}: ")
    assert words in str(e.value)


@pytest.mark.parametrize("text,words", [("", "empty"), ('{"version": 3, "args": [', "cut short"),
                                        ("{version: 3}", "invalid JSON"), ("[1, 2]", "a JSON list, not an object")])
def test_damaged_or_truncated_or_other_json_is_refused_naming_the_file(tmp_path, text, words):
    path = tmp_path / "their.json"
    path.write_text(text)
    with pytest.raises(ForeignError) as e:
        read_foreign(path)
    assert str(path) in str(e.value) and words in str(e.value)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr("pytest_gpucomm.foreign.run.MAX_FOREIGN_BYTES", 1000)
    path = tmp_path / "huge.json"
    path.write_text(" " * 1001)
    with pytest.raises(ForeignError, match=r"huge\.json.*MAX_FOREIGN_BYTES"):
        read_foreign(path)


def _two_gpu_doc(testcases: list) -> dict:
    doc = doc_of(NVB)
    body = doc["nvbandwidth"]
    body["GPU Device list"] = [body["GPU Device list"][0], body["GPU Device list"][0].replace("0:", "1:", 1)]
    body["testcases"] = testcases
    return doc


def _tc(name: str, description: str, matrix: list) -> dict:
    return {"name": name, "status": "Passed", "bandwidth_description": description, "bandwidth_matrix": matrix}


def test_nvbandwidth_copies_between_gpus_take_their_direction_from_the_test_name_not_the_arrows(tmp_path):
    # nvbandwidth v0.8: a write test copies row -> column but prints "GPU(row) <- GPU(column)", a read test
    # copies column -> row and prints "->"; device_local_copy is one row, its column the GPU
    m = [["N/A", "10"], ["300", "N/A"]]
    run = read_foreign(written(tmp_path, _two_gpu_doc([
        _tc("device_to_device_memcpy_write_ce", "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)", m),
        _tc("device_to_device_memcpy_read_ce", "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", m),
        _tc("device_local_copy", "memcpy local GPU(column) bandwidth (GB/s)", [["1400", "1500"]])])))
    figures = {(c.measurement.info["source_case"], c.measurement.devices): round(c.measurement.gbps)
               for c in run.cases}
    assert figures[("device_to_device_memcpy_write_ce", ("cuda:0", "cuda:1"))] == 10
    assert figures[("device_to_device_memcpy_read_ce", ("cuda:1", "cuda:0"))] == 10
    assert figures[("device_local_copy", ("cuda:1", "cuda:1"))] == 1500


def test_an_nvbandwidth_matrix_of_the_wrong_shape_is_refused_naming_the_test(tmp_path):
    doc = _two_gpu_doc([_tc("host_to_device_memcpy_ce", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                            [["50", "50"], ["50", "50"]])])
    with pytest.raises(ForeignError, match=r"bandwidth_matrix.*host_to_device_memcpy_ce on 2 GPU\(s\) has 1 row"):
        read_foreign(written(tmp_path, doc))
