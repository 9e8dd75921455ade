"""All peers at once and many devices: the copy patterns (one-to-all, all-to-one, every pair at once),
``--gpucomm-pairs``, ``GPUCOMM_CPU_DEVICES`` and the suite-time benchmark.

The acceptance tests run the CPU variants on 8 logical host devices (``GPUCOMM_CPU_DEVICES=8``), the
device count of an MI300X or H200 node, with a short measuring time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucomm.plugin.measurer import GpuPair
from pytest_gpucomm.gate.cases import case_key
from pytest_gpucomm.gate.verdicts import case_group
from pytest_gpucomm.measurement import Measurement
from pytest_gpucomm.ops import copies, copy_timing, node_copies
from pytest_gpucomm.plugin.parametrize import pair_choice, select_links, select_pairs
from pytest_gpucomm.ops.timing import TimingSettings
from pytest_gpucomm.vocab import AUTO_ALL_PAIRS_MAX_DEVICES, PAIR_CHOICES
from scripts import load_script

FAST = ["--gpucomm-device=cpu", "--gpucomm-min-time=0.002", "--gpucomm-tail-time=0.006", "-p", "no:cacheprovider"]
ROOT = Path(__file__).resolve().parents[1]


def _devs(n: int) -> list[str]:
    return [f"cuda:{i}" for i in range(n)]


def _index_pairs(pairs: list[GpuPair]) -> list[tuple[int, int]]:
    return [(int(p.src.split(":")[1]), int(p.dst.split(":")[1])) for p in pairs]


# -- which pairs: --gpucomm-pairs -------------------------------------------------------------------

@pytest.mark.parametrize("how, pairs, links", [("all", 56, 28), ("neighbours", 16, 8), ("from0", 14, 7)])
def test_each_pair_choice_has_its_count_of_pairs_and_links_on_8_devices(how, pairs, links):
    assert len(select_pairs(_devs(8), how)) == pairs
    assert len(select_links(_devs(8), how)) == links


def test_every_pair_is_each_ordered_pair_once_source_major():
    got = _index_pairs(select_pairs(_devs(4), "all"))
    assert got == [(i, j) for i in range(4) for j in range(4) if i != j]


def test_neighbours_are_the_ring_both_ways():
    got = set(_index_pairs(select_pairs(_devs(8), "neighbours")))
    assert got == {(i, (i + 1) % 8) for i in range(8)} | {((i + 1) % 8, i) for i in range(8)}


def test_from0_is_device_0_with_each_other_both_ways():
    got = set(_index_pairs(select_pairs(_devs(8), "from0")))
    assert got == {(0, j) for j in range(1, 8)} | {(j, 0) for j in range(1, 8)}


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
@pytest.mark.parametrize("how", PAIR_CHOICES)
def test_a_choice_keeps_the_order_of_every_pair_and_its_links_are_its_pairs_unordered(n, how):
    every = select_pairs(_devs(n), "all")
    chosen = select_pairs(_devs(n), how)
    assert chosen == [p for p in every if p in chosen]
    assert len(set(chosen)) == len(chosen)
    links = {tuple(sorted(p, key=lambda d: int(d.split(":")[1]))) for p in chosen}
    assert set(select_links(_devs(n), how)) == {GpuPair(*link) for link in links}
    assert all(int(a.split(":")[1]) < int(b.split(":")[1]) for a, b in select_links(_devs(n), how))


def test_on_2_devices_every_choice_is_the_two_pairs_and_on_3_the_neighbours_are_every_pair():
    for how in PAIR_CHOICES:
        assert _index_pairs(select_pairs(_devs(2), how)) == [(0, 1), (1, 0)]
        assert _index_pairs(select_links(_devs(2), how)) == [(0, 1)]
    assert select_pairs(_devs(3), "neighbours") == select_pairs(_devs(3), "all")


def test_the_default_is_every_pair_up_to_the_limit_and_the_neighbours_above():
    assert [pair_choice(None, n) for n in (2, AUTO_ALL_PAIRS_MAX_DEVICES, AUTO_ALL_PAIRS_MAX_DEVICES + 1, 8)] == \
        ["all", "all", "neighbours", "neighbours"]
    assert pair_choice("all", 8) == "all" and pair_choice("from0", 2) == "from0"
    with pytest.raises(ValueError, match="unknown pair selection 'ring'"):
        pair_choice("ring", 8)


PAIR_TESTS = """
def test_pair(gpu_pair, comm):
    pass

def test_link(gpu_link, comm):
    pass
"""


def _collected(result, name: str) -> int:
    return sum(1 for line in result.stdout.lines if f"::{name}[" in line)


@pytest.mark.parametrize("how, pairs, links", [("all", 56, 28), ("neighbours", 16, 8), ("from0", 14, 7),
                                               ("neighbors", 16, 8), ("auto", 16, 8)])
def test_pairs_option_collects_its_pair_tests_on_8_logical_devices(pytester, monkeypatch, how, pairs, links):
    monkeypatch.setenv("GPUCOMM_CPU_DEVICES", "8")
    pytester.makepyfile(PAIR_TESTS)
    result = pytester.runpytest("--collect-only", "-q", f"--gpucomm-pairs={how}", *FAST)
    assert (_collected(result, "test_pair"), _collected(result, "test_link")) == (pairs, links)


def test_without_the_option_8_devices_run_the_neighbours_and_the_header_says_so(pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_CPU_DEVICES", "8")
    pytester.makepyfile(PAIR_TESTS)
    result = pytester.runpytest("--collect-only", "-q", *FAST)
    assert (_collected(result, "test_pair"), _collected(result, "test_link")) == (16, 8)
    result.stdout.fnmatch_lines([
        "gpucomm hardware: no GPU used: * 8 logical host devices; *",
        "gpucomm pairs: neighbours (the default above 4 devices; --gpucomm-pairs=all for every pair): "
        "16 of 56 ordered pairs, 8 of 28 links",
    ])


def test_on_2_devices_no_pairs_line_is_printed_and_the_pair_tests_are_as_before(pytester):
    pytester.makepyfile(PAIR_TESTS)
    result = pytester.runpytest("--collect-only", "-q", "--gpucomm-pairs=neighbours", *FAST)
    assert "gpucomm pairs" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*test_pair[[]0->1[]]", "*test_pair[[]1->0[]]", "*test_link[[]0<->1[]]"])


def test_pairs_from_the_environment_and_the_ini_and_the_command_line_first(pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_CPU_DEVICES", "8")
    pytester.makepyfile(PAIR_TESTS)
    pytester.makeini("[pytest]\ngpucomm_pairs = from0\n")
    assert _collected(pytester.runpytest("--collect-only", "-q", *FAST), "test_pair") == 14
    monkeypatch.setenv("GPUCOMM_PAIRS", "all")
    assert _collected(pytester.runpytest("--collect-only", "-q", *FAST), "test_pair") == 56
    result = pytester.runpytest("--collect-only", "-q", "--gpucomm-pairs=neighbours", *FAST)
    assert _collected(result, "test_pair") == 16
    result = pytester.runpytest("--collect-only", "--gpucomm-pairs=from0", *FAST)
    result.stdout.fnmatch_lines(["gpucomm settings: *pairs=from0*",
                                 "gpucomm pairs: from0 (--gpucomm-pairs from the command line): 14 of 56 "
                                 "ordered pairs, "
                                 "7 of 28 links"])


@pytest.mark.slow
def test_8_logical_devices_give_8_rank_collectives_by_default(pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_CPU_DEVICES", "8")
    pytester.makepyfile(
        """
        def test_world(gpus, process_group, comm):
            assert gpus == [f"cpu:{i}" for i in range(8)]
            assert comm.all_reduce(process_group, 4096).world_size == 8
        """
    )
    pytester.runpytest(*FAST).assert_outcomes(passed=1)


# -- the patterns ------------------------------------------------------------------------------------

def test_each_pattern_is_its_pairs():
    d = ["cuda:0", "cuda:1", "cuda:2"]
    assert copies.pattern_pairs("one_to_all", d) == [("cuda:0", "cuda:1"), ("cuda:0", "cuda:2")]
    assert copies.pattern_pairs("all_to_one", d) == [("cuda:0", "cuda:2"), ("cuda:1", "cuda:2")]
    assert copies.pattern_pairs("all_pairs", d) == [(a, b) for a in d for b in d if a != b]


@pytest.mark.parametrize("copy, devices", [("all_pairs", ["cpu:0"]), ("one_to_all", ["cpu:0", "cpu:0"]),
                                           ("all_to_one", [])])
def test_a_pattern_needs_two_distinct_devices(copy, devices):
    with pytest.raises(ValueError, match=f"the {copy} pattern needs at least two distinct devices"):
        copies.copy_spec(copy, devices, 4096)


def test_a_pattern_has_no_direction():
    with pytest.raises(ValueError, match="the all_pairs pattern has no both_ways or direction, got True and ''"):
        copies.copy_spec("all_pairs", ["cpu:0", "cpu:1"], 4096, both_ways=True)


def test_an_unknown_copy_kind_names_every_known_one():
    with pytest.raises(ValueError, match="'peer', 'host_device', 'one_to_all', 'all_to_one', 'all_pairs'.*'star'"):
        copies.copy_spec("star", ["cpu:0", "cpu:1"], 4096)


def test_in_launched_mode_the_patterns_first_device_chooses_the_measuring_rank():
    spec = copies.copy_spec("all_to_one", ["cuda:3", "cuda:1", "cuda:0"], 4096)
    assert node_copies.measuring_local_rank(spec, 8) == 3
    assert node_copies.measuring_local_rank(copies.copy_spec("all_pairs", ["cpu:1", "cpu:0"], 8), 2) == 0


@pytest.mark.parametrize("op, devices, where", [
    ("copy_one_to_all", ("cuda:0", "cuda:1", "cuda:2"), "cuda:0->2 peers"),
    ("copy_all_to_one", ("cuda:1", "cuda:0"), "1 peer->cuda:0"),
    ("copy_all_pairs", tuple(f"cuda:{i}" for i in range(8)), "every pair of 8 devices"),
    ("copy_bidir", ("cuda:0", "cuda:1"), "cuda:0<->cuda:1"),
])
def test_a_patterns_devices_are_said_shortly(op, devices, where):
    assert Measurement(op=op, size_bytes=8, samples_s=[1.0], devices=devices).where == where


def test_patterns_are_copies_for_the_gates_common_shift():
    assert {case_group(op) for op in copies.PATTERN_OPS.values()} == {"copy"}


def test_a_host_pattern_measures_the_aggregate_and_each_link_and_checks_the_data():
    pool = copies.BufferPool()
    m = copies.measure_pattern("all_pairs", ["cpu:0", "cpu:1", "cpu:2"], 65536,
                               TimingSettings(min_time_s=0.002, warmup_min_s=0.001), pool)
    assert (m.op, m.devices, m.size_bytes, m.bytes_per_iter) == \
        ("copy_all_pairs", ("cpu:0", "cpu:1", "cpu:2"), 65536, 6 * 65536)
    assert m.info["links"] == 6 and set(m.info["link_gbps"]) == {"0->1", "0->2", "1->0", "1->2", "2->0", "2->1"}
    assert m.info["per_link_gbps"] == pytest.approx(m.gbps / 6)
    # a sample lasts until the last pair ends: no pair's own bandwidth is below its share of the aggregate
    assert min(m.info["link_gbps"].values()) >= m.info["per_link_gbps"] * 0.999
    assert m.info["link_gbps"][m.info["slowest_link"]] == min(m.info["link_gbps"].values())


def test_a_host_pattern_copy_that_raises_in_its_thread_raises_in_the_caller():
    import torch

    src, dst = torch.zeros(16, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)
    with pytest.raises(RuntimeError):
        copy_timing.HostPattern([(src, dst)]).sample(1)


def test_host_pattern_buffers_beyond_the_hosts_share_fail_with_the_reason(monkeypatch):
    monkeypatch.setattr(copies, "_host_memory_bytes", lambda: 1 << 30)
    with pytest.raises(copies.CopyError, match=r"copy_all_pairs every pair of 8 devices \(67108864 bytes\): its 56 "
                                               r"copies need 7\.0 GiB of host buffers, more than 25% of this host's "
                                               r"1\.0 GiB; lower --gpucomm-max-size or GPUCOMM_CPU_DEVICES"):
        copies.measure_pattern("all_pairs", [f"cpu:{i}" for i in range(8)], 64 << 20, TimingSettings(),
                               copies.BufferPool())


PATTERN_TESTS = """
from pytest_gpucomm import sizes

@sizes(4096, 65536)
def test_copy_one_to_all(gpu_hub, size, comm):
    comm.copy_one_to_all(gpu_hub, size)

@sizes(4096)
def test_copy_all_to_one(gpu_hub, size, comm):
    comm.copy_all_to_one(gpu_hub, size)

@sizes(4096)
def test_copy_all_pairs(gpus, size, comm):
    comm.copy_all_pairs(size)

def test_some_peers(comm):
    m = comm.copy_one_to_all("cpu:2", 4096, peers=["cpu:5", 7])
    assert m.devices == ("cpu:2", "cpu:5", "cpu:7") and m.info["links"] == 2
"""


def test_every_pattern_runs_on_8_logical_devices_with_a_row_per_hub(pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_CPU_DEVICES", "8")
    pytester.makepyfile(PATTERN_TESTS)
    result = pytester.runpytest("--gpucomm-json=rep.json", "-v", *FAST)  # -v: the full table
    result.assert_outcomes(passed=8 * 2 + 8 + 1 + 1)
    rows = json.loads((pytester.path / "rep.json").read_text())["rows"]
    by_op: dict[str, list[dict]] = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r)
    assert {op: len(rs) for op, rs in by_op.items()} == {"copy_one_to_all": 17, "copy_all_to_one": 8,
                                                         "copy_all_pairs": 1}
    hub3 = next(r for r in by_op["copy_one_to_all"] if r["test"].endswith("[4KiB-hub3]"))
    assert hub3["devices"] == ["cpu:3"] + [f"cpu:{i}" for i in range(8) if i != 3]
    assert (hub3["bytes_per_iter"] == 7 * 4096
            and set(hub3["info"]["link_gbps"]) == {f"3->{i}" for i in range(8) if i != 3})
    into5 = next(r for r in by_op["copy_all_to_one"] if r["test"].endswith("[4KiB-hub5]"))
    assert (into5["devices"][-1] == "cpu:5"
            and set(into5["info"]["link_gbps"]) == {f"{i}->5" for i in range(8) if i != 5})
    (every,) = by_op["copy_all_pairs"]
    assert every["info"]["links"] == 56 and every["bytes_per_iter"] == 56 * 4096
    for r in rows:
        assert r["info"]["per_link_gbps"] == pytest.approx(r["gbps"] / r["info"]["links"])
    result.stdout.fnmatch_lines(["*test_copy_one_to_all[[]4KiB-hub0[]]*copy_one_to_all*cpu:0->7 peers*",
                                 "*test_copy_all_pairs[[]4KiB[]]*copy_all_pairs*every pair of 8 devices*"])


def test_bad_peers_and_devices_of_a_pattern_are_usage_errors(pytester):
    pytester.makepyfile(
        """
        def test_no_peer(comm):
            comm.copy_one_to_all(0, 4096, peers=[0])

        def test_one_device(comm):
            comm.copy_all_pairs(4096, devices=["cpu:1"])

        def test_unknown_device(comm):
            comm.copy_all_to_one("cpu:9", 4096)
        """
    )
    result = pytester.runpytest(*FAST)
    out = result.stdout.str()
    for message in ["test_no_peer: comm.copy_one_to_all(peers=...) needs a peer other than the hub, each once; got []",
                    "test_one_device: comm.copy_all_pairs(devices=...) needs two devices or more, each once; "
                    "got ['cpu:1']",
                    "test_unknown_device: device 'cpu:9' is not one of the devices in use (cpu:0, cpu:1)"]:
        assert message in out
    result.assert_outcomes(failed=3)


def test_patterns_are_saved_to_a_baseline_and_gated_by_it(pytester, monkeypatch):
    monkeypatch.setenv("GPUCOMM_CPU_DEVICES", "4")
    pytester.makepyfile(PATTERN_TESTS)
    args = ["--gpu-baseline=base.json", "-k", "not some_peers", *FAST]
    pytester.runpytest("--gpu-baseline-save", *args).assert_outcomes(passed=4 * 2 + 4 + 1)
    cases = json.loads((pytester.path / "base.json").read_text())["cases"]
    key = case_key("test_patterns_are_saved_to_a_baseline_and_gated_by_it.py::test_copy_all_pairs[4KiB]",
                   "copy_all_pairs", 4096, None, 1)
    assert key in cases and cases[key]["devices"] == [f"cpu:{i}" for i in range(4)]
    assert {c["op"] for c in cases.values()} == set(copies.PATTERN_OPS.values())
    result = pytester.runpytest("--gpucomm-json=rep.json", "--gpu-tolerance=0.9", *args)
    rows = json.loads((pytester.path / "rep.json").read_text())["rows"]
    assert len(rows) == 13 and all(r["baseline"]["status"] != "new" for r in rows), result.stdout.str()


# -- the benchmark ----------------------------------------------------------------------------------

def _benchmark():
    return load_script(Path("benchmarks/suite_time_vs_gpus.py"))


@pytest.mark.slow
def test_the_suite_time_benchmark_counts_runs_and_models_8_devices(tmp_path, capsys):
    bench = _benchmark()
    junit = tmp_path / "gpu.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="suites.test_copies" name="test_peer_copy[4KiB-0-&gt;1]" time="0.5"/>'
        '<testcase classname="suites.test_copies" name="test_peer_copy[4KiB-1-&gt;0]" time="0.3"/>'
        '<testcase classname="suites.test_copies" name="test_host_to_device[4KiB-no-gpu]" time="0.01">'
        '<skipped message="needs a GPU"/></testcase>'
        '</testsuite></testsuites>')
    out, counted = tmp_path / "bench.json", tmp_path / "counted.json"
    common = ["--devices", "8", "--count", "suites/test_copies.py", "--max-size", "4KiB", "--min-time", "0.002",
              "--junitxml", str(junit), "--per-case-s", "copies=0.25", "--from-baseline", "none"]
    assert bench.main([*common, "--pairs", "all", "--json", str(out)]) == 0
    # the other choice counted only (a run of the suite on 8 logical devices per choice costs about 9 s)
    assert bench.main([*common, "--pairs", "auto", "--run", "none", "--json", str(counted)]) == 0
    rows = {r["pairs"]: r for r in json.loads(out.read_text())["rows"] + json.loads(counted.read_text())["rows"]}
    sizes = 10  # the GPU sweep, 4 KiB to 1 GiB
    every = rows["all"]["counts"]
    assert every["copies::test_peer_copy"] == 56 * sizes and every["copies::test_peer_copy_both_ways"] == 28 * sizes
    assert every["copies::test_host_to_device"] == 8 * sizes  # collected once on CPU per size, counted per GPU
    assert every["copies::test_copy_one_to_all"] == every["copies::test_copy_all_to_one"] == 8 * sizes
    assert every["copies::test_copy_all_pairs"] == sizes
    assert rows["auto"]["in_force"] == "neighbours" and rows["auto"]["counts"]["copies::test_peer_copy"] == 16 * sizes
    assert "cpu_runs" not in rows["auto"]
    for row in rows.values():
        parts = row["model"]["parts"]
        assert parts["copies::test_peer_copy"]["per_case_s"] == pytest.approx(0.4)  # the JUnit mean
        assert parts["copies::test_device_to_host"]["per_case_s"] == 0.25  # not in the JUnit file: the suite's
        assert row["model"]["total_s"] == pytest.approx(sum(p["count"] * p["per_case_s"] for p in parts.values()))
    run = rows["all"]["cpu_runs"]["suites/test_copies.py"]
    assert run["failed"] == 0 and run["wall_s"] > 0
    # the CPU run collects the CPU sweep (one size here): its pair tests are the choice's
    assert rows["all"]["cpu_runs"]["suites/test_copies.py"]["passed"] == 56 + 28 + 8 + 8 + 1
    assert "N=8 pairs=auto (neighbours)" in capsys.readouterr().out


@pytest.mark.slow
def test_on_2_devices_the_suites_patterns_are_skipped_and_the_pair_tests_are_every_pair():
    counts = _benchmark().count_tests(["suites/test_copies.py"], 2, "auto")
    assert counts["copies::test_peer_copy"] == 2 * 10 and counts["copies::test_peer_copy_both_ways"] == 10
    assert sum(counts[f"copies::test_copy_{p}"] for p in ("one_to_all", "all_to_one", "all_pairs")) == 0


def test_the_benchmark_reads_a_suites_cost_from_single_suite_baseline_runs(tmp_path):
    bench = _benchmark()
    runs = [{"run_id": "a", "date": "2026-01-01T00:00:40+00:00", "fingerprint": {"date": "2026-01-01T00:00:00+00:00"}},
            {"run_id": "b", "date": "2026-01-01T00:01:00+00:00", "fingerprint": {"date": "2026-01-01T00:00:00+00:00"}},
            {"run_id": "c", "date": "2026-01-02T00:00:30+00:00", "fingerprint": {"date": "2026-01-02T00:00:00+00:00"}}]
    cases = {f"k{i}": {"test_id": f"suites/test_copies.py::test_peer_copy[{i}]",
                       "runs": [{"run_id": "a"}, {"run_id": "c"}]} for i in range(100)}
    cases.update({f"c{i}": {"test_id": f"suites/test_collectives.py::test_collective[{i}]",
                            "runs": [{"run_id": "b"}, {"run_id": "c"}]} for i in range(30)})
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"runs": runs, "cases": cases}))
    got = bench.baseline_costs(path)
    assert got["copies"]["per_case_s"] == pytest.approx(0.4) and got["copies"]["runs"] == 1  # run c holds both
    assert got["collectives"]["per_case_s"] == pytest.approx(2.0)


def _one_cuda_gpu() -> bool:
    import torch

    return bool(getattr(torch.version, "cuda", None)) and torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _one_cuda_gpu(), reason="needs a CUDA GPU: the GPU pattern's timing is checked on the device")
def test_the_gpu_pattern_times_each_pair_on_its_own_stream_within_the_span_and_checks_every_pairs_data():
    """The GPU path of the patterns (``_CudaPattern``: one stream per pair, all behind one latch, each pair's
    own device events) on any one GPU: three device-local pairs stand in for three links, so this runs
    where no second GPU is lent; an 8-GPU node runs the same class over real links."""
    import torch

    size = 64 << 20
    pool = copies.BufferPool()
    pairs = [(pool.get("cuda:0", f"src{k}", size), pool.get("cuda:0", f"dst{k}", size)) for k in range(3)]
    streams = [(torch.cuda.Stream(device=0), None) for _ in pairs]
    timed = copy_timing.CudaPattern(pairs, streams, latch_device=0, what="3 device-local pairs at once")
    samples, plan = copies.measure(timed, copy_timing.gpu_batches(TimingSettings(min_time_s=0.05)))
    read = timed.link_times[-len(samples):]
    assert len(read) == len(samples) >= 3 and all(len(own) == 3 for _, own in read)
    for (batch, own), per_iter in zip(read, samples):
        # a pair's own time runs from its start to its end, inside the sample's span from the latch's
        # release to the last pair's end (device events: 0.5 us resolution)
        assert 0 < max(own) <= per_iter * batch * 1.001 + 1e-6
    copy_timing.verify_copies(timed, pairs, "3 device-local pairs at once")
    # a pair whose copy does not reach its destination is caught, naming the case: here the second pair's
    # copy is made to write elsewhere
    elsewhere = torch.empty_like(pairs[1][1])
    misdirected = copy_timing.CudaPattern([pairs[0], (pairs[1][0], elsewhere)], streams[:2], latch_device=0, what="x")
    with pytest.raises(copies.CopyError, match=r"^3 device-local pairs at once: the copied data is wrong in "):
        copy_timing.verify_copies(misdirected, pairs[:2], "3 device-local pairs at once")
