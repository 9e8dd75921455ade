"""The shipped published baseline (baselines/mi300x.json), its generator, and the floor check end to end."""

import json
from pathlib import Path

import pytest

from pytest_gpucomm.gate import SCHEMA_ID, case_key, load_baseline

# The gate imports numpy, scipy, jsonschema and filelock on first use.  pytester's in-process runs drop the
# modules imported during a run, and some extension modules cannot be loaded twice in one process, so
# load them here, before any run (as conftest.py does for torch): the file then also passes on its own.
from pytest_gpucomm.gate import decision, store  # noqa: F401
from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "baselines" / "mi300x.json"
GENERATOR = ROOT / "benchmarks" / "make_published.py"
FAST = ["--gpucomm-min-time=0.002", "-p", "no:cacheprovider"]

MiB = 1024**2
GiB = 1024**3

# The documented figures (GB/s), independent of the generator's own constants.
HEALTH_COPY = 44.0  # MI300X peer copy per pair, rocm-bandwidth-test health check
TORCH_COPY_16MIB = 40.0  # PyTorch copy_ ~40 GB/s from ~8 MB messages
ALL_REDUCE_BUSBW = 314.0  # RCCL all_reduce busbw on 8 GPUs, health check
# AMD's validation-suite health check: TransferBench p2p, 43.9 GB/s each way while a pair copies both ways;
# the both-ways test counts the two directions
BOTH_WAYS = 2 * 43.9
CVS_HEALTH = "https://rocm.docs.amd.com/projects/cvs/en/latest/reference/configuration-files/health.html"


def expected_cases():
    """case key -> (floor, source id), built from the suites' node ids on 8 GPUs (GPUs 0..7)."""
    out = {}
    for size_id, nbytes, floor, source in [("16MiB", 16 * MiB, TORCH_COPY_16MIB, "torch-copy"),
                                           ("64MiB", 64 * MiB, HEALTH_COPY, "rbt-health"),
                                           ("256MiB", 256 * MiB, HEALTH_COPY, "rbt-health"),
                                           ("1GiB", GiB, HEALTH_COPY, "rbt-health")]:
        for src in range(8):
            for dst in range(8):
                if src != dst:
                    nodeid = f"suites/test_copies.py::test_peer_copy[{size_id}-{src}->{dst}]"
                    out[case_key(nodeid, "copy", nbytes, None, 1)] = (floor, source)
    for size_id, nbytes in [("256MiB", 256 * MiB), ("1GiB", GiB)]:
        for a in range(8):
            for b in range(a + 1, 8):
                nodeid = f"suites/test_copies.py::test_peer_copy_both_ways[{size_id}-{a}<->{b}]"
                out[case_key(nodeid, "copy_bidir", nbytes, None, 1)] = (BOTH_WAYS, "transferbench-bidir")
    nodeid = "suites/test_collectives.py::test_collective[float32-1GiB-all_reduce-inplace]"
    out[case_key(nodeid, "all_reduce", GiB, "float32", 8)] = (ALL_REDUCE_BUSBW, "rccl-health")
    return out


def _generator():
    return load_script(GENERATOR, "make_published")


def test_shipped_mi300x_loads_and_is_published():
    b = load_baseline(SHIPPED)
    assert b.name == "mi300x"
    assert b.source == "published"
    assert b.runs == []
    assert "--gpu-baseline-save" in b.source_detail
    for figure in ("44 GB/s", "314 GB/s", "40 GB/s", "50 GB/s", "rocm-bandwidth-test", "43.9 GB/s",
                   "2 x 43.9 = 87.8 GB/s", CVS_HEALTH):
        assert figure in b.source_detail
    doc = json.loads(SHIPPED.read_text(encoding="utf-8"))
    assert doc["schema"] == SCHEMA_ID
    assert doc["runs"] == []


def test_every_shipped_case_is_floor_only():
    b = load_baseline(SHIPPED)
    assert b.cases
    for key, c in b.cases.items():
        assert c.floor_only, key
        assert c.runs == []
        assert c.floor_gbps is not None and c.floor_gbps > 0


def test_shipped_keys_match_the_suites_node_ids_and_floors_are_the_documented_figures():
    b = load_baseline(SHIPPED)
    expected = expected_cases()
    # 56 ordered pairs one way at 4 sizes, 28 pairs both ways at 2 sizes, all_reduce on 8 ranks
    assert len(expected) == 56 * 4 + 28 * 2 + 1
    assert set(b.cases) == set(expected)
    for key, c in b.cases.items():
        assert c.floor_gbps == pytest.approx(expected[key][0]), key
        # each entry's own fields give back its key
        assert case_key(c.test_id, c.op, c.size_bytes, c.dtype, c.world_size) == key
    both = [c for c in b.cases.values() if c.op == "copy_bidir"]
    assert {tuple(c.devices) for c in both} == {(f"cuda:{a}", f"cuda:{b}") for a in range(8) for b in range(a + 1, 8)}
    [ar] = [c for c in b.cases.values() if c.world_size == 8]
    assert ar.devices == [f"rank{r}" for r in range(8)]


def test_every_floor_cites_its_published_source():
    """Each case names the figure its floor comes from (floor_source), and source_detail says what and where
    that figure is: no floor without a source, no source named that the file does not explain."""
    doc = json.loads(SHIPPED.read_text(encoding="utf-8"))
    expected = expected_cases()
    detail = doc["source_detail"]
    sources = {c.get("floor_source") for c in doc["cases"].values()}
    assert sources == {"torch-copy", "rbt-health", "transferbench-bidir", "rccl-health"}
    for key, c in doc["cases"].items():
        assert c["floor_source"] == expected[key][1], key
        assert f"[{c['floor_source']}]" in detail, key
    # the figure each source gives is written next to its id
    for source, figure in [("torch-copy", "40 GB/s"), ("rbt-health", "44 GB/s"), ("rccl-health", "314 GB/s"),
                           ("transferbench-bidir", "87.8 GB/s")]:
        start = detail.index(f"[{source}]")
        end = min([detail.index(f"[{s}]") for s in sources if detail.index(f"[{s}]") > start] + [len(detail)])
        assert figure in detail[start:end], source
    # and the generator refuses a floor without a known source
    gen = _generator()
    with pytest.raises(ValueError, match=r"unknown source 'made-up'"):
        gen._case("t[0->1]", "copy", 1, None, 1, ["cuda:0", "cuda:1"], 1.0, "made-up")


def test_a_floor_source_survives_a_measured_save(tmp_path):
    """floor_source is a field the schema leaves open: a later --gpu-baseline-save keeps it."""
    from pytest_gpucomm.gate import CaseRecord, save_run

    path = tmp_path / "mi300x.json"
    path.write_text(SHIPPED.read_text(encoding="utf-8"), encoding="utf-8")
    nodeid = "suites/test_copies.py::test_peer_copy[1GiB-0->1]"
    key = case_key(nodeid, "copy", GiB, None, 1)
    rec = CaseRecord(test_id=nodeid, op="copy", size_bytes=GiB, world_size=1, dtype=None,
                     devices=["cuda:0", "cuda:1"], samples_gbps=[48.0, 48.5, 47.9], summary={})
    save_run(path, name="mi300x", run_id="r1", date="2026-01-01T00:00:00+00:00", fingerprint={}, cases={key: rec})
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["cases"][key]["floor_source"] == "rbt-health" and doc["cases"][key]["floor_gbps"] == HEALTH_COPY
    assert load_baseline(path).cases[key].runs


def test_shipped_node_ids_are_the_ones_the_suites_collect(pytester):
    """The copy ids of the shipped file, restricted to the 2 CPU devices, are collected by the suites."""
    suites = pytester.mkdir("suites")
    for name in ("test_copies.py", "test_collectives.py"):
        (suites / name).write_text((ROOT / "suites" / name).read_text(encoding="utf-8"), encoding="utf-8")
    result = pytester.runpytest("suites", "--collect-only", "-q", "--gpucomm-max-size=1GiB", *FAST)
    collected = {line.strip() for line in result.stdout.lines if "::" in line}
    b = load_baseline(SHIPPED)
    on_two = {c.test_id for c in b.cases.values()
              if c.op in ("copy", "copy_bidir") and c.test_id.endswith(("-0->1]", "-1->0]", "-0<->1]"))}
    assert len(on_two) == 8 + 2
    assert on_two <= collected
    assert "suites/test_collectives.py::test_collective[float32-1GiB-all_reduce-inplace]" in collected


def test_generator_reproduces_the_shipped_file(tmp_path):
    out = tmp_path / "mi300x.json"
    assert _generator().main(["-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == SHIPPED.read_text(encoding="utf-8")
    assert not [p for p in tmp_path.iterdir() if p.name != "mi300x.json"]  # no temporary file left


def test_generator_leaves_an_existing_file_alone_when_the_document_is_invalid(tmp_path, monkeypatch, capsys):
    gen = _generator()
    out = tmp_path / "mi300x.json"
    out.write_text("keep me", encoding="utf-8")
    monkeypatch.setattr(gen, "COPY_FLOORS", [("16MiB", 16 * MiB, -1.0, "torch-copy")])  # a floor must be > 0
    assert gen.main(["-o", str(out)]) == 1
    assert f"{out}: refusing to write an invalid baseline" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["mi300x.json"]


def _published(path: Path, floor: float) -> Path:
    nodeid = "test_f.py::test_copy[0->1]"
    doc = {
        "schema": SCHEMA_ID,
        "schema_version": 1,
        "name": "tiny",
        "source": "published",
        "source_detail": "tiny test figure",
        "max_runs": 5,
        "runs": [],
        "cases": {
            case_key(nodeid, "copy", 4096, None, 1): {
                "test_id": nodeid, "op": "copy", "size_bytes": 4096, "world_size": 1, "dtype": None,
                "runs": [], "floor_gbps": floor,
            }
        },
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    load_baseline(path)  # the test's own input is valid
    return path


TEST_F = "def test_copy(gpu_pair, comm):\n    comm.copy(gpu_pair, 4096)\n"


def test_a_copy_below_the_published_floor_fails(pytester):
    pytester.makepyfile(test_f=TEST_F)
    base = _published(pytester.path / "tiny.json", 1e9)
    report = pytester.path / "gpucomm.json"
    result = pytester.runpytest(f"--gpu-baseline={base}", "test_f.py::test_copy[0->1]", f"--gpucomm-json={report}",
                                *FAST)
    result.assert_outcomes(failed=1)
    [row] = json.loads(report.read_text(encoding="utf-8"))["rows"]
    assert row["baseline"]["remeasured"] == len(row["baseline"]["remeasures"]) == 1  # the runs pooled, less one
    # measured again (a first run below floor * (1 - tolerance) is), then judged on the pooled runs
    result.stdout.fnmatch_lines(["*below the published floor*(mean of 2 runs) is *% from the published floor "
                                 "1e+09 GB/s, beyond the 5% tolerance*"])
    result.stdout.fnmatch_lines(["FLOOR: copy on cpu:0->cpu:1 at 4 KiB: 100.0% below the published floor 1e+09 GB/s"])
    result.stdout.fnmatch_lines(["copy, cpu:0->cpu:1 (test_copy[[]0->1[]])", "*4 KiB*FLOOR",
                                 "gpucomm verdicts: 1 FLOOR"])


def test_a_copy_above_the_published_floor_passes_as_floor_ok(pytester):
    pytester.makepyfile(test_f=TEST_F)
    base = _published(pytester.path / "tiny.json", 1e-9)
    result = pytester.runpytest(f"--gpu-baseline={base}", "test_f.py::test_copy[0->1]", *FAST)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["copy, cpu:0->cpu:1 (test_copy[[]0->1[]])", "*4 KiB*floor-ok",
                                 "gpucomm verdicts: 1 floor-ok"])
    result.stdout.no_fnmatch_line("*below the published floor*")


def test_floor_only_cases_spend_no_alpha(pytester):
    """Only cases with measured runs are tested, so only they count in the Bonferroni correction."""
    pytester.makepyfile(test_f=TEST_F)
    base = _published(pytester.path / "tiny.json", 1e-9)
    doc = json.loads(base.read_text(encoding="utf-8"))
    measured = "test_f.py::test_copy[1->0]"
    doc["runs"] = [{"run_id": "r1", "date": "2026-01-01T00:00:00+00:00", "fingerprint": {}}]
    doc["cases"][case_key(measured, "copy", 4096, None, 1)] = {
        "test_id": measured, "op": "copy", "size_bytes": 4096, "world_size": 1, "dtype": None,
        "runs": [{"run_id": "r1", "samples_gbps": [1e-6] * 20}],
    }
    base.write_text(json.dumps(doc), encoding="utf-8")
    result = pytester.runpytest(f"--gpu-baseline={base}", *FAST)
    result.stdout.fnmatch_lines(["gpucomm baseline: *tiny.json (*2 cases*); 1 gated comparisons, alpha 0.01*"])
