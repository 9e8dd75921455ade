"""Tests of pytest_gpucomm.gate.store: the baseline file format, saving, loading, resolving, writing."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import pytest

from pytest_gpucomm.files.atomic import temp_file_pattern, write_atomic
from pytest_gpucomm.gate import store
from pytest_gpucomm.env.fingerprint import diff_fingerprints
from pytest_gpucomm.gate.cases import CaseRecord, case_key
from pytest_gpucomm.gate.names import BaselineNotFound, baseline_name_for_model, resolve_baseline
from pytest_gpucomm.gate.schema import JSON_SCHEMA, MAX_NESTING, SCHEMA_ID, SCHEMA_VERSION, BaselineError
from pytest_gpucomm.gate.store import (
    MAX_BASELINE_BYTES,
    dumps_document,
    load_baseline,
    new_document,
    save_run,
    write_document,
)


def rec(size=1 << 20, op="all_reduce", samples=(100.0, 101.0, 99.5), test_id="tests/test_comm.py::test_ar"):
    return CaseRecord(
        test_id=test_id,
        op=op,
        size_bytes=size,
        world_size=2,
        samples_gbps=list(samples),
        dtype="float32",
        devices=["cuda:0", "cuda:1"],
        summary={"median_gbps": 100.0, "p50_us": 10.5, "p99_us": 12.0, "cv": 0.01, "n": len(samples)},
    )


def save(path, run_id, records, *, fingerprint=None, max_runs=5, name="h200"):
    save_run(
        path,
        name=name,
        run_id=run_id,
        date=f"2024-06-07T10:00:00+00:00#{run_id}",
        fingerprint=fingerprint or {"driver": "550.54", "date": run_id},
        cases={r.key: r for r in records},
        max_runs=max_runs,
    )


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# --- save / load ----------------------------------------------------------------------------------


def test_round_trip_save_then_load(tmp_path):
    p = tmp_path / "h200.json"
    a, b = rec(), rec(size=1 << 24, samples=[170.0, 171.5])
    save(p, "run1", [a, b], fingerprint={"driver": "550.54", "gpus": [{"name": "NVIDIA H200"}]})
    base = load_baseline(p)
    assert base.name == "h200" and base.source == "measured" and base.max_runs == 5 and base.path == p
    assert set(base.cases) == {a.key, b.key}
    entry = base.cases[b.key]
    assert entry.runs_gbps == [[170.0, 171.5]]
    assert (entry.op, entry.size_bytes, entry.world_size, entry.dtype) == ("all_reduce", 1 << 24, 2, "float32")
    assert entry.devices == ["cuda:0", "cuda:1"] and entry.test_id == a.test_id and entry.floor_gbps is None
    assert entry.runs[0].summary["p99_us"] == 12.0 and entry.runs[0].run_id == "run1"
    assert base.latest_fingerprint() == {"driver": "550.54", "gpus": [{"name": "NVIDIA H200"}]}
    assert [r.run_id for r in base.runs] == ["run1"]
    doc = json.loads(p.read_text())
    assert doc["schema"] == SCHEMA_ID and doc["schema_version"] == SCHEMA_VERSION
    jsonschema.Draft202012Validator(JSON_SCHEMA).validate(doc)  # the documented schema, samples included


def test_save_keeps_cases_not_run_this_time(tmp_path):
    p = tmp_path / "h200.json"
    a, b = rec(), rec(size=4096)
    save(p, "run1", [a, b])
    save(p, "run2", [a])
    base = load_baseline(p)
    assert len(base.cases[a.key].runs) == 2
    assert [r.run_id for r in base.cases[b.key].runs] == ["run1"]
    assert [r.run_id for r in base.runs] == ["run1", "run2"]


def test_max_runs_drops_the_oldest_run_and_unreferenced_run_records(tmp_path):
    p = tmp_path / "h200.json"
    a = rec()
    for i in range(4):
        save(p, f"run{i}", [rec(samples=[100.0 + i])], max_runs=3)
    base = load_baseline(p)
    assert [r.run_id for r in base.cases[a.key].runs] == ["run1", "run2", "run3"]
    assert base.cases[a.key].runs_gbps == [[101.0], [102.0], [103.0]]
    assert [r.run_id for r in base.runs] == ["run1", "run2", "run3"]  # run0 no longer referenced


def test_same_run_id_replaces_that_run_instead_of_adding_one(tmp_path):
    p = tmp_path / "h200.json"
    save(p, "run1", [rec(samples=[1.0])])
    save(p, "run1", [rec(samples=[2.0])])
    base = load_baseline(p)
    assert base.cases[rec().key].runs_gbps == [[2.0]] and len(base.runs) == 1


def test_published_case_keeps_floor_when_it_gains_measured_runs(tmp_path):
    p = tmp_path / "h200.json"
    a = rec()
    doc = {
        "schema": SCHEMA_ID, "schema_version": 1, "name": "h200", "source": "published",
        "source_detail": "vendor datasheet, table 3", "max_runs": 5, "runs": [],
        "cases": {a.key: {"test_id": a.test_id, "op": "all_reduce", "size_bytes": a.size_bytes, "world_size": 2,
                          "dtype": "float32", "devices": [], "runs": [], "floor_gbps": 44.0}},
    }
    p.write_text(json.dumps(doc))
    base = load_baseline(p)
    assert base.source == "published" and base.cases[a.key].floor_only and base.latest_fingerprint() is None
    save(p, "run1", [a])
    base = load_baseline(p)
    entry = base.cases[a.key]
    assert entry.floor_gbps == 44.0 and entry.has_runs and not entry.floor_only
    assert base.source == "measured"
    assert base.source_detail.startswith("vendor datasheet, table 3 Measured runs added from")


def test_case_without_runs_and_without_floor_is_invalid(tmp_path):
    p = tmp_path / "x.json"
    a = rec()
    doc = {"schema": SCHEMA_ID, "schema_version": 1, "name": "x", "source": "published", "max_runs": 5, "runs": [],
           "cases": {a.key: {"test_id": "t", "op": "all_reduce", "size_bytes": 1, "world_size": 2, "runs": []}}}
    p.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match="floor_gbps"):
        load_baseline(p)


# --- atomicity and concurrency --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["replace", "write"])
def test_atomic_write_crash_leaves_old_file_intact_and_no_temp_files(tmp_path, monkeypatch, where):
    p = tmp_path / "h200.json"
    save(p, "run1", [rec()])
    before = p.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("simulated crash")

    if where == "replace":
        monkeypatch.setattr(os, "replace", boom)
    else:  # the temporary file is written, then its fsync fails
        monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="simulated crash"):
        save(p, "run2", [rec(size=8)])
    assert p.read_bytes() == before
    assert leftovers(tmp_path) == []
    monkeypatch.undo()
    assert [r.run_id for r in load_baseline(p).runs] == ["run1"]


def test_crash_during_temp_file_write_leaves_old_file(tmp_path, monkeypatch):
    p = tmp_path / "h200.json"
    save(p, "run1", [rec()])
    before = p.read_bytes()
    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()
            return False

        def write(self, text):
            self.f.write(text[: len(text) // 2])
            raise OSError("disk full")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: HalfWriter(real_fdopen(fd, *a, **k)))
    with pytest.raises(OSError, match="disk full"):
        save(p, "run2", [rec(size=8)])
    assert p.read_bytes() == before and leftovers(tmp_path) == []


def _saver(path: str, worker: int, n_runs: int) -> None:
    for i in range(n_runs):
        r = rec(size=1000 + worker, samples=[float(100 + i)])
        save_run(Path(path), name="h200", run_id=f"w{worker}-r{i}", date="2024-06-07", fingerprint={"w": worker},
                 cases={r.key: r}, max_runs=10)


def test_two_concurrent_savers_lose_nothing(tmp_path):
    p = tmp_path / "h200.json"
    ctx = multiprocessing.get_context("spawn" if os.name == "nt" else "fork")
    procs = [ctx.Process(target=_saver, args=(str(p), w, 8)) for w in (1, 2)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(60)
        assert pr.exitcode == 0
    base = load_baseline(p)
    for w in (1, 2):
        entry = base.cases[rec(size=1000 + w).key]
        assert [r.run_id for r in entry.runs] == [f"w{w}-r{i}" for i in range(8)]
    assert len(base.runs) == 16
    assert leftovers(tmp_path) == []


# --- bad files ------------------------------------------------------------------------------------


def _valid_text(tmp_path) -> str:
    p = tmp_path / "seed.json"
    save(p, "run1", [rec()])
    return p.read_text()


def _bad_files(tmp_path):
    good = json.loads(_valid_text(tmp_path))
    missing = json.loads(json.dumps(good))
    del next(iter(missing["cases"].values()))["runs"][0]["samples_gbps"]
    ill_typed = json.loads(json.dumps(good))
    next(iter(ill_typed["cases"].values()))["size_bytes"] = "1MB"
    newer = dict(good, schema_version=SCHEMA_VERSION + 1)
    return {
        "corrupt": ('{"schema": "pytest-gpucomm-baseline",\n "name": h200}', r"invalid JSON at line 2 column 10"),
        "truncated": (_valid_text(tmp_path)[:200], r"truncated"),
        "empty": ("", r"empty"),
        "wrong_schema": (json.dumps(dict(good, schema="something-else")),
                         r"not a pytest-gpucomm baseline.*something-else"),
        "missing_field": (json.dumps(missing), r"at \$\.cases\[.*\]\.runs\[0\]: 'samples_gbps' is missing"),
        "ill_typed": (json.dumps(ill_typed), r"at \$\.cases\[.*\]\.size_bytes: '1MB' is not of type 'integer'"),
        "newer_version": (json.dumps(newer), rf"schema_version {SCHEMA_VERSION + 1}.*upgrade pytest-gpucomm"),
        "not_object": ("[1, 2]", r"top level is a list"),
    }


@pytest.mark.parametrize(
    "kind", ["corrupt", "truncated", "empty", "wrong_schema", "missing_field", "ill_typed", "newer_version",
             "not_object"]
)
def test_bad_file_raises_baseline_error_naming_file_and_problem_and_save_leaves_it_unchanged(tmp_path, kind):
    text, pattern = _bad_files(tmp_path)[kind]
    p = tmp_path / "h200.json"
    p.write_text(text)
    with pytest.raises(BaselineError, match=pattern) as info:
        load_baseline(p)
    assert str(p) in str(info.value)
    with pytest.raises(BaselineError, match=pattern):
        save(p, "run2", [rec()])
    assert p.read_text() == text
    assert leftovers(tmp_path) == []


def test_a_file_read_again_unchanged_is_not_checked_again_and_a_changed_or_invalid_one_is(tmp_path, monkeypatch):
    checked = []
    real = store.check_document
    monkeypatch.setattr(store, "check_document", lambda path, doc: checked.append(Path(path).name) or real(path, doc))
    p = tmp_path / "h200.json"
    save(p, "run1", [rec(samples=(100.0, 101.0, 99.25))])  # samples of no other test: a text this process never read
    checked.clear()
    first = store.read_document(p)
    again = store.read_document(p)
    assert again == first and again is not first and checked == ["h200.json"]
    copy = tmp_path / "copy.json"
    copy.write_bytes(p.read_bytes())  # the same bytes under another name: read as valid without a check
    assert store.read_document(copy) == first and checked == ["h200.json"]
    p.write_text(p.read_text().replace("101.0", "101.5"))
    assert store.load_baseline(p).cases[rec().key].runs_gbps == [[100.0, 101.5, 99.25]]
    assert checked == ["h200.json", "h200.json"]
    p.write_text(p.read_text().replace("101.5", "-101.5"))
    for _ in range(2):
        with pytest.raises(BaselineError, match=r"h200\.json"):
            store.read_document(p)
    assert checked == ["h200.json"] * 4


def test_missing_file_says_it_does_not_exist(tmp_path):
    p = tmp_path / "nope.json"
    with pytest.raises(BaselineError, match=r"nope\.json: baseline file does not exist"):
        load_baseline(p)


def test_save_refuses_bad_samples(tmp_path):
    p = tmp_path / "h200.json"
    with pytest.raises(ValueError, match="positive finite"):
        save(p, "run1", [rec(samples=[1.0, -2.0])])
    assert not p.exists()


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "0", "-2.5", '"45"', "true", "null"])
def test_a_sample_that_is_not_a_positive_finite_number_names_the_file_and_the_place(tmp_path, bad):
    text = _valid_text(tmp_path)
    first = json.dumps(json.loads(text)["cases"][next(iter(json.loads(text)["cases"]))]["runs"][0]["samples_gbps"])
    p = tmp_path / "h200.json"
    p.write_text(text.replace(first, "[45.0, " + bad + "]", 1))
    with pytest.raises(BaselineError, match=r"h200\.json: invalid baseline: at \$\.cases\[.*\]\.runs\[0\]"
                                            r"\.samples_gbps\[1\]: .* is not a positive finite number"):
        load_baseline(p)


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_or_an_infinity_in_a_fingerprint_is_refused_naming_the_place_and_the_file_is_not_saved_over(
        tmp_path, bad):
    doc = json.loads(_valid_text(tmp_path))
    doc["runs"][0]["fingerprint"]["clock"] = "@@"
    p = tmp_path / "h200.json"
    text = json.dumps(doc).replace('"@@"', bad)
    p.write_text(text)
    with pytest.raises(BaselineError, match=r"h200\.json: invalid baseline: at \$\.runs\[0\]\.fingerprint\.clock: "
                                            r"(nan|inf|-inf) is not a finite number"):
        load_baseline(p)
    with pytest.raises(BaselineError):  # found by the store's properties test: it loaded, and saving then failed
        save(p, "run2", [rec()])
    assert p.read_text() == text


# --- resolving names ------------------------------------------------------------------------------


def _dirs(tmp_path):
    d1, d2 = tmp_path / "local", tmp_path / "shipped"
    d1.mkdir()
    d2.mkdir()
    (d2 / "h200.json").write_text("{}")
    (d2 / "mi300x.json").write_text("{}")
    (d1 / "h200.json").write_text("{}")
    (d1 / "a100.json").write_text("{}")
    return d1, d2


def test_resolve_name_takes_first_directory_that_has_it(tmp_path):
    d1, d2 = _dirs(tmp_path)
    assert resolve_baseline("h200", search_dirs=[d1, d2], detected_model=None) == d1 / "h200.json"
    assert resolve_baseline("mi300x", search_dirs=[d1, d2], detected_model=None) == d2 / "mi300x.json"


def test_resolve_path_returns_that_file_even_if_missing(tmp_path):
    d1, d2 = _dirs(tmp_path)
    target = tmp_path / "new" / "mine.json"
    assert resolve_baseline(str(target), search_dirs=[d1], detected_model=None) == target
    assert resolve_baseline("mine.json", search_dirs=[d1], detected_model=None) == Path("mine.json")


def test_resolve_auto_uses_detected_model(tmp_path):
    d1, d2 = _dirs(tmp_path)
    got = resolve_baseline("auto", search_dirs=[d1, d2], detected_model="AMD Instinct MI300X")
    assert got == d2 / "mi300x.json"
    with pytest.raises(BaselineError, match="no GPU model was detected"):
        resolve_baseline("auto", search_dirs=[d1, d2], detected_model=None)
    with pytest.raises(BaselineError, match="'Matrox G200'.*not one this plugin knows"):
        resolve_baseline("auto", search_dirs=[d1, d2], detected_model="Matrox G200")
    with pytest.raises(BaselineNotFound, match="no baseline named 'h100'.*auto") as e:
        resolve_baseline("auto", search_dirs=[d1, d2], detected_model="NVIDIA H100 80GB HBM3")
    # the way forward: the command that records one, and where its runs go (issue 43)
    assert (f"record one for this machine: add --gpu-baseline-save to this command and run it 4 times or more, on "
            f"2 boots or days or more (each is a session of the baseline); the runs go to {d1}/h100.json, which auto "
            "takes from then on") in str(e.value)


def test_resolve_unknown_name_lists_available(tmp_path):
    d1, d2 = _dirs(tmp_path)
    with pytest.raises(BaselineNotFound, match=r"no baseline named 'b200'.*available baselines: a100, h200, mi300x"):
        resolve_baseline("b200", search_dirs=[d1, d2], detected_model=None)
    assert issubclass(BaselineNotFound, BaselineError)
    # for a first save: a new name lands in the first directory
    assert resolve_baseline("b200", search_dirs=[d1, d2], detected_model=None, must_exist=False) == d1 / "b200.json"
    with pytest.raises(BaselineError, match="invalid baseline name"):
        resolve_baseline("h 200", search_dirs=[d1], detected_model=None)


@pytest.mark.parametrize(
    "model, name",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI250X", "mi250x"),
        ("AMD Instinct MI250X/MI250", "mi250x"),
        ("AMD Instinct MI250", "mi250"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA L40S", "l40s"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("Matrox G200", None),
        ("", None),
        ("cpu", None),
    ],
)
def test_baseline_name_for_model_table(model, name):
    assert baseline_name_for_model(model) == name


def test_case_key_is_stable_and_distinguishes_cases():
    k = case_key("tests/t.py::test_ar[16MiB]", "all_reduce", 16 << 20, "float32", 2)
    assert k == "tests/t.py::test_ar[16MiB]|all_reduce|16777216B|float32|ws2"
    assert case_key("t", "copy", 8, None, 1) == "t|copy|8B|-|ws1"
    assert len({case_key("t", "all_reduce", 8, d, w) for d in ("float32", "bfloat16") for w in (2, 4)}) == 4
    with pytest.raises(ValueError):
        case_key("t", "copy", -1, None, 1)


def test_saving_measured_runs_into_a_published_baseline_relabels_it_and_keeps_the_floors(tmp_path):
    import shutil

    src = Path(__file__).resolve().parents[1] / "baselines" / "mi300x.json"
    path = tmp_path / "mi300x.json"
    shutil.copy(src, path)
    before = load_baseline(path)
    key, entry = next(iter(before.cases.items()))
    rec = CaseRecord(test_id=entry.test_id, op=entry.op, size_bytes=entry.size_bytes, world_size=entry.world_size,
                     dtype=entry.dtype, samples_gbps=[45.0, 46.0, 47.0])
    save_run(path, name="mi300x", run_id="r1", date="2026-11-29T00:00:00+00:00", fingerprint={"model": "MI300X"},
             cases={rec.key: rec})
    after = load_baseline(path)
    assert after.source == "measured" and "Measured runs added" in after.source_detail
    assert after.cases[key].has_runs and not after.cases[key].floor_only
    assert sum(c.floor_only for c in after.cases.values()) == len(before.cases) - 1


# --- whole documents (new_document / dumps_document / write_document) ----------------------------


def test_a_written_new_document_loads_back_as_an_empty_measured_baseline(tmp_path):
    p = tmp_path / "sub" / "fresh.json"
    write_document(p, new_document("fresh", 3))
    base = load_baseline(p)
    assert (base.name, base.source, base.max_runs, base.runs, base.cases) == ("fresh", "measured", 3, [], {})
    assert p.read_text(encoding="utf-8") == dumps_document(new_document("fresh", 3))


def test_dumps_document_keeps_each_samples_list_on_one_line(tmp_path):
    p = tmp_path / "h200.json"
    save(p, "run1", [rec(samples=[100.0, 101.5, 99.0])])
    text = p.read_text(encoding="utf-8")
    assert '"samples_gbps": [100.0, 101.5, 99.0]' in text
    assert dumps_document(json.loads(text)) == text


def test_write_document_refuses_an_invalid_document_and_keeps_the_old_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("keep me", encoding="utf-8")
    doc = new_document("x")
    a = rec()
    doc["cases"][a.key] = {"test_id": a.test_id, "op": a.op, "size_bytes": a.size_bytes, "world_size": 2,
                           "runs": [], "floor_gbps": -1.0}
    with pytest.raises(BaselineError, match=rf"^{p}: refusing to write an invalid baseline: .*floor_gbps"):
        write_document(p, doc)
    assert p.read_text(encoding="utf-8") == "keep me" and leftovers(tmp_path) == []


# --- hostile files: FIFOs, devices, huge and deeply nested files (each read is bounded) -------------

REPO = Path(__file__).resolve().parents[1]
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def _isolated(code: str, *args: str, timeout: float = 60.0) -> str:
    """Run ``code`` in a fresh interpreter on this checkout: a regression that blocks or reads forever is
    killed at ``timeout`` and fails the test instead of hanging (or exhausting) the suite."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                              env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout:g} s: it blocks or reads without end")
    assert done.returncode == 0, done.stderr
    return done.stdout


_LOAD = """
import sys, time
from pytest_gpucomm.gate.schema import BaselineError
from pytest_gpucomm.gate.store import load_baseline
t = time.monotonic()
try:
    load_baseline(sys.argv[1])
except BaselineError as e:
    print(f"BaselineError: {e}")
print(f"seconds: {time.monotonic() - t:.3f}")
"""


def _load_isolated(path: Path) -> tuple[str, float]:
    out = _isolated(_LOAD, str(path)).splitlines()
    return "\n".join(out[:-1]), float(out[-1].split()[1])


@needs_fifo
def test_a_fifo_as_the_baseline_path_is_refused_at_once_without_blocking(tmp_path):
    p = tmp_path / "h200.json"
    os.mkfifo(p)
    message, seconds = _load_isolated(p)
    assert message == f"BaselineError: {p}: is a FIFO, not a regular file: not a baseline file"
    assert seconds < 5


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
@pytest.mark.parametrize("how", ["device", "link"])
def test_dev_zero_as_the_baseline_is_refused_at_once_instead_of_read_without_end(tmp_path, how):
    p = Path("/dev/zero")
    if how == "link":
        p = tmp_path / "h200.json"
        p.symlink_to("/dev/zero")
    message, seconds = _load_isolated(p)
    assert message == f"BaselineError: {p}: is a character device, not a regular file: not a baseline file"
    assert seconds < 5


@needs_fifo
def test_a_fifo_swapped_in_after_the_type_check_cannot_block_the_read(tmp_path, monkeypatch):
    p = tmp_path / "h200.json"
    p.write_text(_valid_text(tmp_path))
    regular = os.stat(p)
    p.unlink()
    os.mkfifo(p)
    real_stat = os.stat
    # the check sees the regular file that was there; the open then meets the FIFO that replaced it
    monkeypatch.setattr(os, "stat", lambda q, *a, **k: regular if str(q) == str(p) else real_stat(q, *a, **k))
    outcome: list = []

    def load() -> None:
        try:
            load_baseline(p)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            outcome.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # a regression: release the blocked open (a writer appears), then fail
        os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail("opening a FIFO swapped in after the check blocked")
    assert len(outcome) == 1 and isinstance(outcome[0], BaselineError)
    assert str(outcome[0]) == f"{p}: is a FIFO, not a regular file: not a baseline file"


@needs_fifo
def test_save_run_onto_a_fifo_is_refused_at_once_and_leaves_it(tmp_path):
    p = tmp_path / "h200.json"
    os.mkfifo(p)
    code = """
import sys
from pytest_gpucomm.gate.cases import CaseRecord
from pytest_gpucomm.gate.schema import BaselineError
from pytest_gpucomm.gate.store import save_run
r = CaseRecord(test_id="t", op="all_reduce", size_bytes=8, world_size=2, samples_gbps=[1.0])
try:
    save_run(sys.argv[1], name="h200", run_id="r1", date="d", fingerprint={}, cases={r.key: r})
except BaselineError as e:
    print(e)
"""
    assert _isolated(code, str(p)).strip() == f"{p}: is a FIFO, not a regular file: not a baseline file"
    assert p.is_fifo() and leftovers(tmp_path) == []


@needs_fifo
def test_resolving_and_listing_baselines_never_open_a_fifo_in_the_folder(tmp_path):
    d = tmp_path / "baselines"
    d.mkdir()
    save(d / "a100.json", "r1", [rec()])
    os.mkfifo(d / "h200.json")
    code = """
import sys
from pathlib import Path
from pytest_gpucomm.gate.names import available_baselines, resolve_baseline
from pytest_gpucomm.gate.schema import BaselineError
d = Path(sys.argv[1])
print(available_baselines([d]))
print(resolve_baseline("a100", search_dirs=[d], detected_model=None))
print(resolve_baseline("h200", search_dirs=[d], detected_model=None, must_exist=False))
try:
    resolve_baseline("h200", search_dirs=[d], detected_model=None)
except BaselineError as e:
    print(e)
"""
    out = _isolated(code, str(d)).splitlines()
    assert out[0] == "['a100']"
    assert out[1] == str(d / "a100.json") and out[2] == str(d / "h200.json")
    assert "no baseline named 'h200'" in out[3] and "available baselines: a100" in out[3]


def test_the_size_limit_is_256_mib_and_named_in_the_message(tmp_path, monkeypatch):
    assert MAX_BASELINE_BYTES == 256 * 1024 * 1024
    p = tmp_path / "h200.json"
    with open(p, "wb") as f:  # sparse: takes no disk space, and is never read
        f.truncate(MAX_BASELINE_BYTES + 1)
    opened: list[str] = []
    real_open = os.open

    def watched_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", watched_open)
    with pytest.raises(BaselineError) as info:
        load_baseline(p)
    assert str(p) not in opened  # refused from its size alone: never opened, so never read
    assert str(info.value) == (
        f"{p}: is larger than 256 MiB ({MAX_BASELINE_BYTES + 1} bytes), the most a baseline file may hold "
        "(pytest_gpucomm.gate.store.MAX_BASELINE_BYTES): not a baseline file"
    )


def test_a_file_just_above_the_size_limit_is_refused_and_one_at_the_limit_loads(tmp_path, monkeypatch):
    p = tmp_path / "h200.json"
    text = _valid_text(tmp_path)
    p.write_text(text)
    size = len(text.encode())
    monkeypatch.setattr(store, "MAX_BASELINE_BYTES", size)
    assert load_baseline(p).name == "h200"
    monkeypatch.setattr(store, "MAX_BASELINE_BYTES", size - 1)
    with pytest.raises(BaselineError, match=rf"^{p}: is larger than {size - 1} bytes \({size} bytes\)"):
        load_baseline(p)
    with pytest.raises(BaselineError, match="is larger than"):
        save(p, "run2", [rec()])
    assert p.read_text() == text


def test_a_file_that_grows_past_the_limit_while_it_is_read_is_refused(tmp_path, monkeypatch):
    p = tmp_path / "h200.json"
    text = _valid_text(tmp_path)
    p.write_text(text)
    monkeypatch.setattr(store, "MAX_BASELINE_BYTES", len(text) + 10)
    real_fstat = os.fstat

    def fstat(fd):  # the file looked small when opened; then much more arrives
        st = real_fstat(fd)
        with open(p, "a") as f:
            f.write(" " * 100)
        return st

    monkeypatch.setattr(os, "fstat", fstat)
    with pytest.raises(BaselineError, match=rf"^{p}: is larger than {len(text) + 10} bytes, the most"):
        load_baseline(p)


def _nested_fingerprint(levels: int) -> dict:
    fp: dict = {"driver": "550.54"}
    for _ in range(levels - 1):
        fp = {"k": fp}
    return fp


def _with_fingerprint(tmp_path, fp: dict) -> str:
    doc = json.loads(_valid_text(tmp_path))
    doc["runs"][0]["fingerprint"] = fp
    return json.dumps(doc)


@pytest.mark.parametrize("kind", ["array_100000_deep", "fingerprint_5000_deep", "one_level_too_deep"])
def test_deeply_nested_json_is_refused_naming_the_file_and_the_limit(tmp_path, kind):
    assert MAX_NESTING == 64
    if kind == "array_100000_deep":
        text = "[" * 100_000 + "]" * 100_000
    elif kind == "fingerprint_5000_deep":
        text = '{"k": ' * 4999 + '{"driver": "550.54"}' + "}" * 4999
        text = _with_fingerprint(tmp_path, {}).replace('"fingerprint": {}', f'"fingerprint": {text}', 1)
    else:  # $ > runs > [0] > fingerprint: 4 levels, so a fingerprint of 61 reaches 65
        text = _with_fingerprint(tmp_path, _nested_fingerprint(MAX_NESTING - 3 + 1))
    p = tmp_path / "h200.json"
    p.write_text(text)
    with pytest.raises(BaselineError) as info:
        load_baseline(p)
    assert str(info.value) == (
        f"{p}: the JSON is nested deeper than 64 levels, the most a baseline file may use: not a baseline file"
    )
    with pytest.raises(BaselineError, match="nested deeper than 64 levels"):
        save(p, "run2", [rec()])
    assert p.read_text() == text


def test_a_file_nested_exactly_to_the_limit_loads(tmp_path):
    p = tmp_path / "h200.json"
    fp = _nested_fingerprint(MAX_NESTING - 3)
    p.write_text(_with_fingerprint(tmp_path, fp))
    assert load_baseline(p).latest_fingerprint() == fp


def test_save_and_write_document_refuse_to_write_json_nested_too_deep(tmp_path):
    p = tmp_path / "h200.json"
    with pytest.raises(ValueError, match="fingerprint is nested deeper than 61 levels"):
        save(p, "run1", [rec()], fingerprint=_nested_fingerprint(MAX_NESTING - 2))
    save(p, "run1", [rec()], fingerprint=_nested_fingerprint(MAX_NESTING - 3))
    doc = new_document("x")
    doc["extra"] = _nested_fingerprint(MAX_NESTING)
    with pytest.raises(BaselineError, match=rf"^{tmp_path / 'x.json'}: refusing to write an invalid baseline: it is "
                                            "nested deeper than 64 levels"):
        write_document(tmp_path / "x.json", doc)
    assert not (tmp_path / "x.json").exists() and leftovers(tmp_path) == []


def test_diff_fingerprints_handles_fingerprints_nested_5000_deep():
    old, new = _nested_fingerprint(5000), _nested_fingerprint(5000)
    leaf = new
    while "k" in leaf:
        leaf = leaf["k"]
    leaf["driver"] = "560.35"
    (key, a, b), = diff_fingerprints(old, new)
    assert key == "k." * 4999 + "driver" and (a, b) == ("550.54", "560.35")


@pytest.mark.parametrize(
    "number, pattern",
    [
        ("1" * 5000, r"invalid JSON: .*digits"),  # more digits than Python converts to an int
        ("1" + "0" * 400, r"samples_gbps\[1\]: 1000*0 is not a positive finite number"),  # too large for a float
    ],
)
def test_numbers_python_cannot_hold_are_baseline_errors_naming_the_file(tmp_path, number, pattern):
    text = _valid_text(tmp_path)
    first = json.dumps(json.loads(text)["cases"][next(iter(json.loads(text)["cases"]))]["runs"][0]["samples_gbps"])
    p = tmp_path / "h200.json"
    p.write_text(text.replace(first, f"[45.0, {number}]", 1))
    with pytest.raises(BaselineError, match=pattern) as info:
        load_baseline(p)
    assert str(info.value).startswith(f"{p}: ")


# --- temporary files of killed savers ---------------------------------------------------------------


def test_save_removes_stale_temp_files_of_that_baseline_and_nothing_else(tmp_path):
    p = tmp_path / "h200.json"
    save(p, "run1", [rec()])
    stale = [tmp_path / ".h200.json.k3x_9a0q.tmp", tmp_path / ".h200.json.abcdefgh.tmp"]
    for f in stale:  # what a saver killed mid-write leaves
        f.write_text(p.read_text()[:100])
    keep = [
        ".other.json.x.tmp",  # another file's
        ".other.json.abcdefgh.tmp",  # another baseline's
        ".h200.json.abcdefg.tmp",  # not the pattern: 7 characters
        ".h200.json.ABCDEFGH.tmp",  # not the pattern: upper case
        ".h200.json.abcdefgh.tmp.bak",
        "h200.json.abcdefgh.tmp",  # no leading dot
        ".h200.jsonXabcdefgh.tmp",
    ]
    for name in keep:
        (tmp_path / name).write_text("x")
    os.mkdir(tmp_path / ".h200.json.dir_dir_.tmp")  # only regular files are removed
    (tmp_path / ".h200.json.linklink.tmp").symlink_to(tmp_path / ".other.json.x.tmp")
    assert all(temp_file_pattern(p).match(f.name) for f in stale)
    save(p, "run2", [rec()])
    assert not any(f.exists() for f in stale)
    assert all((tmp_path / name).read_text() == "x" for name in keep)
    assert (tmp_path / ".h200.json.dir_dir_.tmp").is_dir() and (tmp_path / ".h200.json.linklink.tmp").is_symlink()
    assert [r.run_id for r in load_baseline(p).runs] == ["run1", "run2"]


def test_write_atomic_names_its_temp_files_as_the_stale_file_pattern_expects(tmp_path, monkeypatch):
    p = tmp_path / "h200.json"
    seen: list[str] = []
    write_atomic(p, "{}", lambda tmp: seen.append(tmp.name))
    assert len(seen) == 1 and temp_file_pattern(p).match(seen[0]) and leftovers(tmp_path) == []


@pytest.mark.skipif(os.name == "nt", reason="the liveness lock is POSIX flock")
def test_save_keeps_the_temp_file_of_a_live_writer_of_the_same_file(tmp_path):
    p = tmp_path / "h200.json"
    save(p, "run1", [rec()])
    seen: list[bool] = []

    def check(tmp: Path) -> None:  # while write_atomic (as write_document does) holds its temp file
        save(p, "run2", [rec(size=8)])
        seen.append(tmp.exists())

    write_atomic(tmp_path / "h200.json", p.read_text(), check)
    assert seen == [True] and leftovers(tmp_path) == []


def test_a_run_whose_fingerprint_holds_an_infinity_is_refused_before_writing_and_the_file_stays(tmp_path):
    p = tmp_path / "h200.json"
    save(p, "run1", [rec()])
    text = p.read_text()
    with pytest.raises(BaselineError, match=r"refusing to write: .*h200\.json: invalid baseline: at "
                                            r"\$\.runs\[1\]\.fingerprint\.clock: inf is not a finite number"):
        save(p, "run2", [rec()], fingerprint={"clock": float("inf")})
    assert p.read_text() == text
