"""The copy benchmark's row selection, GPU batches and the buffer pool (pure code; the GPU path is
verified on a GPU, see the issue notes).  The choice of copy engine: tests/test_engines.py."""

from __future__ import annotations

import json

import pytest
import torch

from pytest_gpucomm.compare import raw_copies as bench
from pytest_gpucomm.ops import copies, copy_timing


def _report(tmp_path, rows):
    p = tmp_path / "copies.json"
    p.write_text(json.dumps({"format": "pytest-gpucomm-report", "version": 1, "rows": rows}))
    return p


def _row(op, devices, size, gbps=1.0):
    return {"test": f"test_copy[{op}-{size}]", "op": op, "devices": devices, "size_bytes": size, "gbps": gbps,
            "bytes_per_iter": size, "world_size": 1, "busbw_factor": 1.0, "samples_s": [size / gbps / 1e9]}


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
    from pytest_gpucomm.ops.timing import TimingSettings

    assert copy_timing.gpu_batches(TimingSettings(min_time_s=0.5)).target_batch_s == copy_timing.GPU_BATCH_S
    assert copy_timing.gpu_batches(TimingSettings(min_time_s=0.5)).min_time_s == 0.5
    assert copy_timing.gpu_batches(TimingSettings(target_batch_s=5e-3)).target_batch_s == 5e-3


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
