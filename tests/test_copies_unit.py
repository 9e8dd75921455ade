"""The choice of copy engine and the copy benchmark's row selection (pure code; the GPU path is
verified on a GPU, see the issue notes)."""

from __future__ import annotations

import json
import types

import pytest
import torch

from pytest_gpucomm.compare import raw_copies as bench
from pytest_gpucomm.ops import copies


@pytest.fixture
def fresh_driver():
    copies.driver.cache_clear()
    yield
    copies.driver.cache_clear()


@pytest.mark.parametrize("cuda,hip", [(None, None), ("13.0", "7.0"), (None, "7.0")])
def test_copies_use_torch_copy_without_a_cuda_build_of_torch(monkeypatch, fresh_driver, cuda, hip):
    monkeypatch.setattr(torch, "version", types.SimpleNamespace(cuda=cuda, hip=hip))
    monkeypatch.setattr(copies.ctypes, "CDLL", lambda name: pytest.fail("must not load the CUDA driver"))
    assert copies.driver() is None


def test_copies_use_torch_copy_when_the_cuda_driver_does_not_load(monkeypatch, fresh_driver):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(torch, "version", types.SimpleNamespace(cuda="13.0", hip=None))
    monkeypatch.setattr(copies.ctypes, "CDLL", missing)
    assert copies.driver() is None


class _FakeLib:
    def __init__(self, name_rc):
        self.cuMemcpyAsync = lambda *a: 0
        self.cuGetErrorName = lambda rc, out: name_rc


def test_copies_use_the_cuda_driver_when_it_loads(monkeypatch, fresh_driver):
    monkeypatch.setattr(torch, "version", types.SimpleNamespace(cuda="13.0", hip=None))
    monkeypatch.setattr(copies.ctypes, "CDLL", lambda name: _FakeLib(0) if name == "libcuda.so.1" else None)
    d = copies.driver()
    assert d is not None and d.memcpy(1, 2, 3, None) == 0
    assert copies.driver() is d  # loaded once


def test_driver_error_without_a_name_gives_the_code():
    assert copies._Driver(_FakeLib(1)).error_name(700) == "CUresult 700"


def _report(tmp_path, rows):
    p = tmp_path / "copies.json"
    p.write_text(json.dumps({"rows": rows}))
    return p


def _row(op, devices, size, gbps=1.0):
    return {"op": op, "devices": devices, "size_bytes": size, "gbps": gbps}


def test_copy_benchmark_compares_gpu_copy_rows_only(tmp_path):
    rows = [
        _row("copy", ["cpu:0", "cpu:1"], 4096),
        _row("copy", ["cuda:0", "cuda:1"], 4096),
        _row("h2d", ["host", "cuda:0"], 4096),
        _row("all_reduce", ["cuda:0", "cuda:1"], 4096),
        _row("copy_bidir", ["cuda:0", "cuda:1"], 1024),
    ]
    got = bench.ours_rows(_report(tmp_path, rows), None)
    assert [(r["op"], r["size_bytes"]) for r in got] == [("copy", 4096), ("copy_bidir", 1024), ("h2d", 4096)]


def test_copy_benchmark_keeps_the_sizes_asked_for(tmp_path):
    rows = [_row("copy", ["cuda:0", "cuda:1"], s) for s in (4096, 65536, 1 << 30)]
    got = bench.ours_rows(_report(tmp_path, rows), {65536, 1 << 30})
    assert [r["size_bytes"] for r in got] == [65536, 1 << 30]


def test_copy_benchmark_without_gpu_rows_exits_2(tmp_path, capsys):
    p = _report(tmp_path, [_row("copy", ["cpu:0", "cpu:1"], 4096)])
    assert bench.main(["--ours-json", str(p)]) == 2
    assert "no GPU copy rows" in capsys.readouterr().err


def test_copy_benchmark_names_a_bad_size():
    with pytest.raises(Exception, match="16XB"):
        bench.main(["--ours-json", "x.json", "--sizes", "16XB"])


def test_gpu_copies_batch_at_least_a_millisecond():
    from pytest_gpucomm.timing import TimingSettings

    assert copies._gpu_batches(TimingSettings(min_time_s=0.5)).target_batch_s == copies.GPU_BATCH_S
    assert copies._gpu_batches(TimingSettings(min_time_s=0.5)).min_time_s == 0.5
    assert copies._gpu_batches(TimingSettings(target_batch_s=5e-3)).target_batch_s == 5e-3


def test_buffer_pool_reuses_a_buffer_for_the_same_user_and_size():
    pool = copies.BufferPool()
    a = pool.get("cpu", "pinned_h2d", 64, user="cuda:0")
    b = pool.get("cpu", "pinned_h2d", 32, user="cuda:0")
    assert b.data_ptr() == a.data_ptr() and b.numel() == 32


def test_buffer_pool_gives_another_gpu_a_fresh_host_buffer():
    pool = copies.BufferPool()
    a = pool.get("cpu", "pinned_h2d", 64, user="cuda:0")
    keep = a.clone()
    a.zero_()
    b = pool.get("cpu", "pinned_h2d", 64, user="cuda:1")
    assert torch.equal(b, keep)  # allocated and filled with the pattern again, not the zeroed one


def test_buffer_pool_grows_a_buffer_that_is_too_small():
    pool = copies.BufferPool()
    pool.get("cpu", "a_src", 16)
    assert pool.get("cpu", "a_src", 4096).numel() == 4096
