"""The HIP copy engine against a real C library: the hip shim (tests/hipshim/hipshim.c), which exports the
HIP entry points the engine uses and forwards them to the CUDA driver.

Where a C compiler exists (CI, this machine): the shim builds, exports exactly the HIP table's entry
points, and the engine's calls go through it with HIP's signatures -- to a fake CUDA driver
(tests/hipshim/fakecuda.c, a host memcpy) that the shim loads through ``HIPSHIM_CUDA_LIBRARY``: bytes
are copied, a driver error comes back named, an unknown copy kind is refused, a missing driver is named.

Where a CUDA GPU and libcuda also exist: the copies measured with the HIP engine through the shim must
be within 3 % of the CUDA engine's at every size from 64 KiB to 1 GiB (medians, the engines alternating:
benchmarks/hip_shim_vs_cuda.py measures, the same function the lead's script runs), and the shipped copy
suite run with ``GPUCOMM_COPY_CALL=hip`` reports ``hipMemcpyAsync`` in every row.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpucomm.ops import engines
from pytest_gpucomm.ops.engines import HIP, CopyError, select
from scripts import load_script

ROOT = Path(__file__).resolve().parent.parent


build = load_script(ROOT / "tests" / "hipshim" / "build.py", "gpucomm_hipshim_build")

needs_cc = pytest.mark.skipif(build.compiler() is None, reason="no C compiler (cc, gcc or $CC) to build the hip shim")


def _cuda_why_not() -> str:
    """Why the GPU comparison cannot run here, or "" when it can."""
    if build.compiler() is None:
        return "no C compiler (cc, gcc or $CC) to build the hip shim"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"no CUDA driver: libcuda.so.1 does not load ({e})"
    import torch

    if not getattr(torch.version, "cuda", None) or not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    return ""


def _hip_engine(shim: Path):
    """The HIP engine, bound to ``shim`` as GPUCOMM_HIP_LIBRARY names it on a CUDA build of torch."""
    sel = select({engines.ENV_CALL: "hip", engines.ENV_HIP_LIBRARY: str(shim)}, "cuda")
    assert sel.engine is not None and sel.engine.table is HIP and sel.engine.library == str(shim)
    return sel.engine


@pytest.fixture(scope="module")
def fake_driver_shim(tmp_path_factory):
    """A shim of its own (a separate file: a separately loaded library) forwarding to the fake driver."""
    if build.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or $CC) to build the hip shim")
    out = tmp_path_factory.mktemp("hipshim-fake")
    fake = build.build_fake_cuda(out)
    shim = build.build_shim(out)
    saved = os.environ.get("HIPSHIM_CUDA_LIBRARY")
    os.environ["HIPSHIM_CUDA_LIBRARY"] = str(fake)  # read by the shim at its first call
    try:
        engine = _hip_engine(shim)
        engine.error_name(0)  # the first call: the shim loads the fake driver now
    finally:
        if saved is None:
            os.environ.pop("HIPSHIM_CUDA_LIBRARY")
        else:
            os.environ["HIPSHIM_CUDA_LIBRARY"] = saved
    return engine


@needs_cc
def test_shim_exports_exactly_the_entry_points_of_the_hip_table(tmp_path):
    shim = build.build_shim(tmp_path)
    wanted = {f.name for f in HIP.functions}
    lib = ctypes.CDLL(str(shim))
    for name in wanted:
        assert getattr(lib, name) is not None
    try:
        exported = build.exported_functions(shim)
    except build.BuildError as e:
        pytest.skip(f"cannot list the exports: {e}")
    assert {n for n in exported if n.startswith("hip")} == wanted


@needs_cc
def test_shim_build_failure_gives_the_compilers_message(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("this is not C;\n")
    with pytest.raises(build.BuildError, match="(?s)failed with exit status 1:.*bad.c:1:1: error"):
        build.build(bad, tmp_path, "libbad.so")


def test_hip_engine_copies_the_bytes_through_the_shim(fake_driver_shim):
    src = (ctypes.c_ubyte * 4096)(*[(7 * i + 3) & 0xFF for i in range(4096)])
    dst = (ctypes.c_ubyte * 4096)()
    call = fake_driver_shim.call(ctypes.addressof(dst), ctypes.addressof(src), 4096, 0, False, False)
    fake_driver_shim.copy(call, 3, "h2h test")
    assert bytes(dst) == bytes(src)


def test_hip_engine_names_a_driver_error_that_comes_through_the_shim(fake_driver_shim):
    src, dst = (ctypes.c_ubyte * 16)(), (ctypes.c_ubyte * 16)()
    call = fake_driver_shim.call(ctypes.addressof(dst), ctypes.addressof(src), 16, 0xBAD, True, True)
    with pytest.raises(CopyError, match="^copy x: hipMemcpyAsync failed with CUDA_ERROR_ILLEGAL_ADDRESS$"):
        fake_driver_shim.copy(call, 2, "copy x")


def test_shim_refuses_a_copy_kind_hip_does_not_have(fake_driver_shim):
    src, dst = (ctypes.c_ubyte * 16)(), (ctypes.c_ubyte * 16)()
    call = (ctypes.addressof(dst), ctypes.addressof(src), 16, 9, 0)  # hipMemcpyKind 9
    with pytest.raises(CopyError, match="hipMemcpyAsync failed with CUDA_ERROR_INVALID_VALUE"):
        fake_driver_shim.copy(call, 1, "kind 9")


@needs_cc
def test_shim_without_a_cuda_driver_says_not_initialized(tmp_path, monkeypatch):
    shim = build.build_shim(tmp_path)  # a library of its own: its first call reads the variable below
    monkeypatch.setenv("HIPSHIM_CUDA_LIBRARY", str(tmp_path / "no-such-libcuda.so"))
    engine = _hip_engine(shim)
    src, dst = (ctypes.c_ubyte * 16)(), (ctypes.c_ubyte * 16)()
    call = engine.call(ctypes.addressof(dst), ctypes.addressof(src), 16, 0, False, False)
    with pytest.raises(CopyError, match="hipMemcpyAsync failed with hipErrorNotInitialized"):
        engine.copy(call, 1, "no driver")


# -- on a CUDA GPU --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_shim(tmp_path_factory):
    why = _cuda_why_not()
    if why:
        pytest.skip(f"the HIP engine through the shim needs a CUDA GPU: {why}")
    return build.build_shim(tmp_path_factory.mktemp("hipshim-gpu"))


@pytest.mark.gpu
@pytest.mark.slow  # 7 rounds of both engines over 24 sizes: about two minutes on one H200
def test_hip_engine_through_the_shim_measures_what_the_cuda_engine_measures(gpu_shim):
    bench = load_script(ROOT / "benchmarks" / "hip_shim_vs_cuda.py", "gpucomm_hip_shim_vs_cuda")
    rows = bench.compare(gpu_shim, bench.SIZES, min_time_s=0.1)
    assert {r["size_bytes"] for r in rows} == set(bench.SIZES)
    failed = [r for r in rows if bench.verdict(r) == "FAIL"]
    if failed:
        # measured again, as the gate measures a flagged case again: the slow tier's other workers share the host, and
        # a burst of their memory traffic tipped one row on an H100 (h2d 64 MiB at 0.967, its engines' rounds
        # spreading 1.7 %) while the rest agreed; an engine that differs fails the second time too
        again = {(r["copy"], r["size_bytes"]): r
                 for r in bench.compare(gpu_shim, sorted({r["size_bytes"] for r in failed}), min_time_s=0.1)}
        failed = [r for r in failed if bench.verdict(again[(r["copy"], r["size_bytes"])]) == "FAIL"]
    off = "\n".join(bench.line(r) for r in failed)
    assert not off, f"hip/cuda outside 1 +- 3 % beyond the engines' own noise, twice:\n{bench.HEADER}\n{off}"
    # a NOISY row is one the machine cannot resolve (both engines' rounds spread more than 3 %); most rows must be
    # resolved, or the check says nothing
    noisy = [r for r in rows if bench.verdict(r) == "NOISY"]
    assert len(noisy) <= len(rows) // 4, "\n".join(bench.line(r) for r in noisy)


@pytest.mark.gpu
def test_copy_suite_reports_the_hip_engine_when_asked_for_it(gpu_shim, tmp_path):
    out = tmp_path / "hip.json"
    env = {**os.environ, engines.ENV_CALL: "hip", engines.ENV_HIP_LIBRARY: str(gpu_shim)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "suites" / "test_copies.py"), "-q", "-p", "no:cacheprovider",
         "-k", "64KiB or 1MiB", f"--gpucomm-json={out}", "--gpucomm-min-time=0.02"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    rows = [r for r in json.loads(out.read_text())["rows"] if r["kind"] == "copy"]
    assert rows and {r["info"]["engine"] for r in rows} == {"hipMemcpyAsync"}


# -- the comparison's own logic (benchmarks/hip_shim_vs_cuda.py), with stand-in measurements -------------

@pytest.fixture
def bench(monkeypatch):
    import torch

    module = load_script(ROOT / "benchmarks" / "hip_shim_vs_cuda.py", "gpucomm_hip_shim_vs_cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv(engines.ENV_CALL, raising=False)
    monkeypatch.delenv(engines.ENV_HIP_LIBRARY, raising=False)
    return module


def _stand_in(figures, seen, label=None):
    """A copy's measure function: records the engine and library the variables select, and answers the
    next figure of that engine, named as that engine (or as ``label``)."""
    import types

    def measure(size, settings, pool):
        engine = os.environ[engines.ENV_CALL]
        seen.append((engine, os.environ.get(engines.ENV_HIP_LIBRARY), size))
        info = {"engine": label or engines.TABLES[engine].label, "engine_note": "libamdhip64.so not loaded"}
        return types.SimpleNamespace(gbps=figures[engine].pop(0), info=info)

    return measure


def test_comparison_alternates_the_engines_and_takes_the_median_of_the_rounds_paired_ratios(bench, monkeypatch):
    seen = []
    figures = {"cuda": [100.0, 90.0, 101.0], "hip": [99.0, 120.0, 100.0]}
    monkeypatch.setattr(bench, "copies", lambda n: [("copy x", _stand_in(figures, seen))])
    rows = bench.compare(Path("/tmp/libhipshim.so"), [65536], rounds=3)
    assert [e for e, _, _ in seen] == ["cuda", "hip", "hip", "cuda", "cuda", "hip"]
    assert {lib for e, lib, _ in seen if e == "hip"} == {"/tmp/libhipshim.so"}
    assert {lib for e, lib, _ in seen if e == "cuda"} == {None}
    (row,) = rows
    assert (row["cuda_gbps"], row["hip_gbps"]) == (100.0, 100.0)
    # the rounds' pairs: 99/100, 120/90, 100/101; their median, not the medians' ratio
    assert (row["paired_ratios"] == pytest.approx([0.99, 120 / 90, 100 / 101])
            and row["ratio"] == pytest.approx(100 / 101))
    assert engines.ENV_CALL not in os.environ and engines.ENV_HIP_LIBRARY not in os.environ  # put back


def test_comparison_stops_when_a_copy_ran_with_another_engine(bench, monkeypatch):
    figures = {"cuda": [1.0], "hip": [1.0]}
    monkeypatch.setattr(bench, "copies", lambda n: [("copy x", _stand_in(figures, [], label="torch copy_"))])
    with pytest.raises(RuntimeError, match="asked for the cuda engine, but the copy ran with 'torch copy_' "
                                           r"\(libamdhip64.so not loaded\)"):
        bench.compare(Path("/tmp/libhipshim.so"), [65536], rounds=1)


def test_comparison_target_is_three_percent_from_64_kib(bench):
    def row(size, ratio):
        return {"copy": "copy x", "size_bytes": size, "cuda_gbps": 100.0, "hip_gbps": 100.0 * ratio, "ratio": ratio}

    assert bench.within(row(65536, 0.971)) and bench.within(row(1 << 30, 1.029))
    assert not bench.within(row(65536, 0.969)) and not bench.within(row(1 << 20, 1.031))
    assert bench.within(row(16384, 0.5)) is None  # below 64 KiB: shown, not checked
    assert bench.line(row(1 << 20, 1.031)).split()[-3:] == ["1.031", "0.0%", "FAIL"]


def test_a_row_outside_the_target_is_noisy_when_an_engines_own_rounds_spread_more_than_it(bench):
    steady = {"copy": "h2d x", "size_bytes": 1 << 20, "cuda_gbps": 50.0, "hip_gbps": 47.0, "ratio": 0.94,
              "cuda_rounds_gbps": [50.0, 50.2, 49.9, 50.1, 50.0], "hip_rounds_gbps": [47.0, 47.1, 46.9, 47.0, 47.2]}
    assert bench.noise(steady) < 0.01 and bench.verdict(steady) == "FAIL"  # the engines differ
    noisy = dict(steady, cuda_rounds_gbps=[36.3, 33.4, 32.9, 27.5, 27.3, 34.0, 32.2])  # one H200's h2d, 256 KiB
    assert bench.noise(noisy) == pytest.approx((33.7 - 29.85) / 32.9, rel=1e-6)
    assert bench.verdict(noisy) == "NOISY" and bench.line(noisy).endswith("NOISY")
    assert bench.verdict(dict(noisy, ratio=0.99)) == "PASS" and bench.verdict(dict(noisy, size_bytes=1024)) is None


@pytest.mark.parametrize("args,said", [(["--sizes", "16XB"], "invalid size '16XB' (from --sizes)"),
                                       (["--rounds", "0"], "--rounds must be at least 1, got 0")])
def test_comparison_script_names_a_bad_argument_and_exits_2(bench, capsys, args, said):
    assert bench.main(args) == 2
    assert said in capsys.readouterr().err
