"""Property-based tests (hypothesis) of the baseline loader: whatever a baseline file holds, loading it
either succeeds or raises BaselineError naming the file; and what save_run writes loads back unchanged."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pytest_gpucomm.gate.cases import CaseRecord  # noqa: E402
from pytest_gpucomm.gate.schema import BaselineError  # noqa: E402
from pytest_gpucomm.gate.store import load_baseline, save_run  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and +-Infinity too: Python's json module writes and reads them
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def _record(size: int = 1 << 20, samples: Any = (100.0, 101.0, 99.5)) -> CaseRecord:
    return CaseRecord(test_id="tests/test_comm.py::test_ar", op="all_reduce", size_bytes=size, world_size=2,
                      samples_gbps=list(samples), dtype="float32", devices=["cuda:0", "cuda:1"],
                      summary={"median_gbps": 100.0, "p50_us": 10.5, "p99_us": 12.0, "cv": 0.01, "n": 3})


def _save(path: Path, run_id: str, records: list) -> None:
    save_run(path, name="h200", run_id=run_id, date="2024-06-07T10:00:00+00:00",
             fingerprint={"driver": "550.54", "gpus": [{"name": "NVIDIA H200"}]}, cases={r.key: r for r in records})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("props")


@pytest.fixture(scope="module")
def valid_doc(workdir) -> dict:
    p = workdir / "seed.json"
    _save(p, "run1", [_record(), _record(size=8, samples=[5.0, 6.0])])
    doc = json.loads(p.read_text())
    doc["cases"]["published|all_gather|64B|-|ws2"] = {"test_id": "t", "op": "all_gather", "size_bytes": 64,
                                                      "world_size": 2, "runs": [], "floor_gbps": 3.5}
    return doc


def _load_or_baseline_error(path: Path) -> None:
    """The property: load_baseline returns, or raises BaselineError whose message names the file."""
    try:
        load_baseline(path)
    except BaselineError as e:
        assert str(path) in str(e), str(e)


def _places(obj: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (the path of each value under the top level)."""
    out: list[tuple] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append(at + (k,))
        out.extend(_places(v, at + (k,)))
    return out


@SETTINGS
@given(raw=st.binary(max_size=2000))
def test_any_bytes_load_or_raise_baseline_error_naming_the_file(workdir, raw):
    p = workdir / "bytes.json"
    p.write_bytes(raw)
    _load_or_baseline_error(p)


@SETTINGS
@given(value=json_values)
def test_any_json_value_loads_or_raises_baseline_error_naming_the_file(workdir, value):
    p = workdir / "value.json"
    p.write_text(json.dumps(value))
    _load_or_baseline_error(p)


@SETTINGS
@given(data=st.data(), value=json_values, delete=st.booleans())
def test_a_valid_baseline_with_one_field_replaced_loads_or_raises_baseline_error_and_saving_stays_safe(
    valid_doc, data, value, delete
):
    doc = json.loads(json.dumps(valid_doc))
    place = data.draw(st.sampled_from(_places(doc)), label="place")
    parent = doc
    for k in place[:-1]:
        parent = parent[k]
    if delete:
        del parent[place[-1]]
    else:
        parent[place[-1]] = value
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "h200.json"
        text = json.dumps(doc)
        p.write_text(text)
        try:
            load_baseline(p)
        except BaselineError as e:
            assert str(p) in str(e), str(e)
            with pytest.raises(BaselineError):  # a file that does not load is never saved over
                _save(p, "run2", [_record()])
            assert p.read_text() == text
        else:  # a file that loads takes another run, and still loads
            _save(p, "run2", [_record(size=8, samples=[7.0])])
            assert "run2" in [r.run_id for r in load_baseline(p).runs]


@SETTINGS
@given(data=st.data())
def test_a_valid_baseline_cut_short_or_with_one_character_changed_loads_or_raises_baseline_error(
    workdir, valid_doc, data
):
    text = json.dumps(valid_doc, indent=2)
    i = data.draw(st.integers(0, len(text) - 1), label="at")
    if data.draw(st.booleans(), label="cut"):
        text = text[:i]
    else:
        text = text[:i] + data.draw(st.characters(), label="char") + text[i + 1:]
    p = workdir / "mutated.json"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    _load_or_baseline_error(p)


positive_finite = st.floats(min_value=0.0, exclude_min=True, allow_nan=False, allow_infinity=False)


@SETTINGS
@given(runs=st.lists(st.lists(positive_finite, min_size=1, max_size=40), min_size=1, max_size=4))
def test_samples_saved_by_save_run_load_back_the_same(runs):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "h200.json"
        for i, samples in enumerate(runs):
            _save(p, f"run{i}", [_record(samples=samples)])
        entry = load_baseline(p).cases[_record().key]
    assert entry.runs_gbps == [list(s) for s in runs]
    assert all(math.isfinite(v) and v > 0 for s in entry.runs_gbps for v in s)
