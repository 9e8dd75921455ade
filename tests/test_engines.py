"""The copy engines (pytest_gpucomm.ops.engines): the table of entry points per platform, the calls an
engine makes with them, error naming, and which engine the variables and torch's build select.

The libraries are fakes at the ctypes boundary: objects whose named functions record their calls and
answer with the status codes a test sets.  The same engine code against a real C library (the hip shim)
is tests/test_hip_shim.py.
"""

from __future__ import annotations

import ctypes
import types

import pytest
import torch

from pytest_gpucomm.ops import copies, engines
from pytest_gpucomm.ops.engines import CUDA, HIP, CopyError, Engine, EngineError, select

ENGINE, LIBRARY = engines.ENV_CALL, engines.ENV_HIP_LIBRARY


class FakeFunction:
    """A C function: records its calls, returns ``answers`` in turn (the last one from then on)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []
        self.argtypes = self.restype = None

    def __call__(self, *args):
        self.calls.append(args)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class FakeLib:
    """A loaded library with the entry points of ``table``: the copy answers the ``status`` codes in
    turn, the error-name call knows ``names``; the ``missing`` entry points are absent."""

    def __init__(self, table, status=(0,), names=None, missing=()):
        self.memcpy = FakeFunction(status)
        fns = {table.memcpy.name: self.memcpy,
               table.error_name.name: (_CudaName if table.name_by_out_param else _HipName)(names or {})}
        for name, fn in fns.items():
            if name not in missing:
                setattr(self, name, fn)


class _CudaName(FakeFunction):
    """cuGetErrorName: CUDA_SUCCESS and the name through the out-parameter for a known code, else an error."""

    def __init__(self, names):
        super().__init__([0])
        self.names = names

    def __call__(self, rc, out):
        self.calls.append((rc, out))
        if rc not in self.names:
            return 1  # CUDA_ERROR_INVALID_VALUE: no name for this code
        out._obj.value = self.names[rc].encode()
        return 0


class _HipName(FakeFunction):
    """hipGetErrorName: the name as the return value (bytes, as ctypes gives a c_char_p), or NULL."""

    def __init__(self, names):
        super().__init__([None])
        self.names = names

    def __call__(self, rc):
        self.calls.append((rc,))
        return self.names[rc].encode() if rc in self.names else None


class Loader:
    """ctypes.CDLL's stand-in: records the names it was asked for; ``libs`` maps a name to a library,
    any other name fails as the dynamic loader does."""

    def __init__(self, libs):
        self.libs = libs
        self.asked = []

    def __call__(self, name):
        self.asked.append(name)
        if name not in self.libs:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return self.libs[name]


def no_hip_loaded():
    return None


# -- the tables -----------------------------------------------------------------------------------------

def test_cuda_table_is_the_driver_copy_the_reports_already_name():
    assert CUDA.library == "libcuda.so.1"
    assert CUDA.label == "cuMemcpyAsync"  # info["engine"] of every report recorded before the HIP engine
    assert [f.name for f in CUDA.functions] == ["cuMemcpyAsync", "cuGetErrorName"]
    assert CUDA.memcpy.argtypes == (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)
    assert CUDA.error_name.argtypes == (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
    assert CUDA.name_by_out_param and not CUDA.kinds


def test_hip_table_has_hips_signatures_and_copy_kinds():
    assert HIP.library == "libamdhip64.so" and HIP.label == "hipMemcpyAsync"
    assert [f.name for f in HIP.functions] == ["hipMemcpyAsync", "hipGetErrorName"]
    # hipMemcpyAsync(void* dst, const void* src, size_t sizeBytes, hipMemcpyKind kind, hipStream_t stream)
    assert HIP.memcpy.argtypes == (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.c_void_p)
    # const char* hipGetErrorName(hipError_t)
    assert HIP.error_name.argtypes == (ctypes.c_int,) and HIP.error_name.restype is ctypes.c_char_p
    # hipMemcpyKind (include/hip/driver_types.h): HostToHost 0, HostToDevice 1, DeviceToHost 2, DeviceToDevice 3
    assert dict(HIP.kinds) == {(False, False): 0, (False, True): 1, (True, False): 2, (True, True): 3}


@pytest.mark.parametrize("table", [CUDA, HIP], ids=["cuda", "hip"])
def test_engine_binds_each_entry_point_with_its_tables_signature(table):
    lib = FakeLib(table)
    Engine(table, lib, table.library)
    for fn in table.functions:
        bound = getattr(lib, fn.name)
        assert tuple(bound.argtypes) == fn.argtypes and bound.restype is fn.restype


@pytest.mark.parametrize("table", [CUDA, HIP], ids=["cuda", "hip"])
def test_engine_without_an_entry_point_names_it_and_the_library(table):
    lib = FakeLib(table, missing=(table.error_name.name,))
    with pytest.raises(EngineError, match=f"/x/lib.so \\(from {LIBRARY}\\) has no entry point "
                                          f"{table.error_name.name}"):
        Engine(table, lib, "/x/lib.so", f" (from {LIBRARY})")


# -- the calls ------------------------------------------------------------------------------------------

def test_cuda_engine_issues_the_batch_with_four_arguments():
    lib = FakeLib(CUDA)
    eng = Engine(CUDA, lib, CUDA.library)
    call = eng.call(0x1000, 0x2000, 65536, 0x77, True, True)
    assert call == (0x1000, 0x2000, 65536, 0x77)
    eng.copy(call, 5, "copy cuda:0->cuda:1")
    assert lib.cuMemcpyAsync.calls == [call] * 5


@pytest.mark.parametrize("src_gpu,dst_gpu,kind", [(True, True, 3), (False, True, 1), (True, False, 2)],
                         ids=["peer-DeviceToDevice", "h2d-HostToDevice", "d2h-DeviceToHost"])
def test_hip_engine_passes_the_kind_of_each_copy(src_gpu, dst_gpu, kind):
    lib = FakeLib(HIP)
    eng = Engine(HIP, lib, HIP.library)
    call = eng.call(0x1000, 0x2000, 65536, 0x77, src_gpu, dst_gpu)
    assert call == (0x1000, 0x2000, 65536, kind, 0x77)
    eng.copy(call, 3, "a copy")
    assert lib.hipMemcpyAsync.calls == [call] * 3


@pytest.mark.parametrize("table,name", [(CUDA, "CUDA_ERROR_ILLEGAL_ADDRESS"), (HIP, "hipErrorIllegalAddress")],
                         ids=["cuda", "hip"])
def test_a_failing_copy_raises_copy_error_naming_the_call_and_the_error(table, name):
    lib = FakeLib(table, status=(0, 0, 700, 0), names={700: name})
    eng = Engine(table, lib, table.library)
    call = eng.call(1, 2, 3, 4, True, True)
    with pytest.raises(CopyError, match=f"^copy cuda:0->cuda:1 \\(3 bytes\\): {table.memcpy.name} failed with "
                                        f"{name}$"):
        eng.copy(call, 10, "copy cuda:0->cuda:1 (3 bytes)")
    assert len(lib.memcpy.calls) == 3  # stopped at the failing call


@pytest.mark.parametrize("table,unnamed", [(CUDA, "CUresult 999"), (HIP, "hipError_t 999")], ids=["cuda", "hip"])
def test_an_error_without_a_name_gives_its_status_type_and_code(table, unnamed):
    eng = Engine(table, FakeLib(table, names={700: "known"}), table.library)
    assert eng.error_name(700) == "known"
    assert eng.error_name(999) == unnamed


def test_copy_error_is_the_one_copies_raise():
    assert copies.CopyError is engines.CopyError and issubclass(EngineError, CopyError)


# -- the selection --------------------------------------------------------------------------------------

def _libs():
    return {"libcuda.so.1": FakeLib(CUDA), "libamdhip64.so": FakeLib(HIP)}


@pytest.mark.parametrize("platform,table", [("hip", HIP), ("cuda", CUDA)])
@pytest.mark.parametrize("environ", [{}, {ENGINE: "auto"}, {ENGINE: " Auto "}], ids=["unset", "auto", "Auto"])
def test_auto_takes_the_engine_of_torchs_build(platform, table, environ):
    load = Loader(_libs())
    sel = select(environ, platform, load, no_hip_loaded)
    assert sel.engine is not None and sel.engine.table is table
    assert load.asked == [table.library]
    assert sel.info() == {"engine": table.label}


def test_auto_on_rocm_takes_the_hip_runtime_torch_already_loaded():
    torch_lib = "/venv/lib/python3.12/site-packages/torch/lib/libamdhip64.so"
    load = Loader({torch_lib: FakeLib(HIP)})
    sel = select({}, "hip", load, lambda: torch_lib)
    assert sel.engine.library == torch_lib and load.asked == [torch_lib]


@pytest.mark.parametrize("platform", ["hip", "cuda"])
def test_auto_falls_back_to_torch_copy_and_says_why_when_the_library_does_not_load(platform):
    sel = select({}, platform, Loader({}), no_hip_loaded)
    assert sel.engine is None and sel.label == engines.ENGINE_TORCH
    lib = engines.TABLES[platform].library
    assert f"cannot load {lib}" in sel.note and sel.info() == {"engine": "torch copy_", "engine_note": sel.note}


def test_auto_without_a_gpu_build_of_torch_uses_torch_copy():
    load = Loader(_libs())
    assert select({}, None, load, no_hip_loaded).engine is None and load.asked == []


@pytest.mark.parametrize("platform", ["hip", "cuda", None])
def test_torch_engine_loads_no_library(platform):
    load = Loader(_libs())
    sel = select({ENGINE: "torch"}, platform, load, no_hip_loaded)
    assert sel.engine is None and sel.info() == {"engine": "torch copy_"} and load.asked == []


@pytest.mark.parametrize("choice", ["cuda", "hip"])
def test_an_engine_asked_for_that_does_not_load_is_an_error_naming_the_library(choice):
    lib = engines.TABLES[choice].library
    with pytest.raises(EngineError, match=f"the {choice} copy engine: cannot load {lib}: {lib}: cannot open"):
        select({ENGINE: choice}, choice, Loader({}), no_hip_loaded)


def test_cuda_engine_on_a_rocm_build_of_torch_is_an_error():
    with pytest.raises(EngineError, match=f"{ENGINE}=cuda needs a CUDA build of torch; this one is a ROCm build"):
        select({ENGINE: "cuda"}, "hip", Loader(_libs()), no_hip_loaded)


@pytest.mark.parametrize("choice", ["cuda", "hip"])
def test_an_engine_asked_for_without_a_gpu_build_of_torch_is_an_error(choice):
    with pytest.raises(EngineError, match=f"{ENGINE}={choice}: this torch is not a CUDA or ROCm build"):
        select({ENGINE: choice}, None, Loader(_libs()), no_hip_loaded)


def test_hip_engine_on_a_cuda_build_of_torch_needs_a_hip_library():
    load = Loader(_libs())
    with pytest.raises(EngineError, match=f"{ENGINE}=hip on a CUDA build of torch needs {LIBRARY}"):
        select({ENGINE: "hip"}, "cuda", load, no_hip_loaded)
    assert load.asked == []  # not a real HIP runtime: it would not know torch's CUDA streams


def test_hip_engine_on_a_cuda_build_takes_the_forwarding_library_it_is_given():
    load = Loader({"/tmp/libhipshim.so": FakeLib(HIP)})
    sel = select({ENGINE: "hip", LIBRARY: "/tmp/libhipshim.so"}, "cuda", load, no_hip_loaded)
    assert sel.engine.table is HIP and sel.engine.library == "/tmp/libhipshim.so"
    assert sel.info() == {"engine": "hipMemcpyAsync"}


@pytest.mark.parametrize("environ", [{}, {ENGINE: "hip"}], ids=["auto", "hip"])
def test_the_hip_library_variable_is_taken_before_the_runtime_already_loaded(environ):
    load = Loader({"/opt/rocm-7.1/lib/libamdhip64.so": FakeLib(HIP)})
    sel = select({**environ, LIBRARY: " /opt/rocm-7.1/lib/libamdhip64.so "}, "hip", load,
                 lambda: "/torch/lib/libamdhip64.so")
    assert sel.engine.library == "/opt/rocm-7.1/lib/libamdhip64.so" and load.asked == [sel.engine.library]


@pytest.mark.parametrize("environ", [{}, {ENGINE: "hip"}], ids=["auto", "hip"])
def test_a_hip_library_that_does_not_load_is_an_error_naming_it_and_the_variable(environ):
    """Even under auto: a path given by hand that does not load is a mistake to fix, not a fallback."""
    with pytest.raises(EngineError, match=f"cannot load /nowhere/libamdhip64.so \\(from {LIBRARY}\\): "
                                          f"/nowhere/libamdhip64.so: cannot open shared object file"):
        select({**environ, LIBRARY: "/nowhere/libamdhip64.so"}, "hip", Loader({}), no_hip_loaded)


def test_a_hip_library_without_the_entry_points_is_an_error_naming_it_and_the_variable():
    load = Loader({"/usr/lib/libz.so": FakeLib(HIP, missing=("hipMemcpyAsync",))})
    with pytest.raises(EngineError, match=f"/usr/lib/libz.so \\(from {LIBRARY}\\) has no entry point hipMemcpyAsync"):
        select({LIBRARY: "/usr/lib/libz.so"}, "hip", load, no_hip_loaded)


def test_the_hip_library_variable_is_not_read_when_the_cuda_engine_is_chosen():
    load = Loader(_libs())
    sel = select({LIBRARY: "/nowhere/libamdhip64.so"}, "cuda", load, no_hip_loaded)
    assert sel.engine.table is CUDA and load.asked == ["libcuda.so.1"]


@pytest.mark.parametrize("value,said", [("cudaa", "is 'cudaa'"), ("", "is empty"), ("  ", "is empty"),
                                        ("nccl", "is 'nccl'")])
def test_a_bad_engine_value_is_an_error_naming_the_variable_and_the_choices(value, said):
    with pytest.raises(EngineError, match=f"^{ENGINE} {said}: the call of the GPU copy engine must be one of auto, "
                                          f"cuda, hip, torch \\(unset: auto\\)$"):
        select({ENGINE: value}, "cuda", Loader(_libs()), no_hip_loaded)


def test_an_empty_hip_library_is_an_error_naming_the_variable():
    with pytest.raises(EngineError, match=f"^{LIBRARY} is empty"):
        select({LIBRARY: " "}, "hip", Loader(_libs()), no_hip_loaded)


def test_torch_platform_reads_torchs_build():
    assert engines.torch_platform(types.SimpleNamespace(cuda="12.4", hip=None)) == "cuda"
    assert engines.torch_platform(types.SimpleNamespace(cuda=None, hip="6.2.4")) == "hip"
    assert engines.torch_platform(types.SimpleNamespace(cuda=None, hip=None)) is None
    assert engines.torch_platform(types.SimpleNamespace()) is None


def test_the_hip_runtime_in_this_process_is_found_in_the_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 11 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f0000002000-7f0000003000 r--p 00000000 08:01 12 /venv/torch/lib/libamdhip64.so.7\n"
        "7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0  [stack]\n")
    assert engines._hip_in_process(str(maps)) == "/venv/torch/lib/libamdhip64.so.7"
    maps.write_text("7f0000000000-7f0000001000 r-xp 00000000 08:01 11 /usr/lib/libc.so.6\n")
    assert engines._hip_in_process(str(maps)) is None
    assert engines._hip_in_process(str(tmp_path / "absent")) is None


# -- current(): this process's variables and torch ------------------------------------------------------

@pytest.fixture
def fresh_engines():
    engines.forget()
    yield
    engines.forget()


def test_current_follows_the_variables_and_loads_once_per_set_of_values(monkeypatch, fresh_engines):
    load = Loader({"libcuda.so.1": FakeLib(CUDA), "/tmp/libhipshim.so": FakeLib(HIP)})
    monkeypatch.setattr(engines, "_load_library", load)
    monkeypatch.setattr(torch, "version", types.SimpleNamespace(cuda="13.0", hip=None))
    monkeypatch.delenv(ENGINE, raising=False)
    monkeypatch.delenv(LIBRARY, raising=False)
    first = engines.current()
    assert first.engine.table is CUDA and engines.current() is first
    monkeypatch.setenv(ENGINE, "hip")
    monkeypatch.setenv(LIBRARY, "/tmp/libhipshim.so")
    assert engines.current().engine.table is HIP
    monkeypatch.delenv(ENGINE)
    monkeypatch.delenv(LIBRARY)
    assert engines.current() is first
    assert load.asked == ["libcuda.so.1", "/tmp/libhipshim.so"]


def test_current_raises_a_bad_value_at_every_call(monkeypatch, fresh_engines):
    monkeypatch.setattr(torch, "version", types.SimpleNamespace(cuda="13.0", hip=None))
    monkeypatch.setenv(ENGINE, "fast")
    for _ in range(2):
        with pytest.raises(EngineError, match=f"{ENGINE} is 'fast'"):
            engines.current()


def test_current_on_a_cpu_build_of_torch_loads_nothing(monkeypatch, fresh_engines):
    monkeypatch.setattr(engines, "_load_library", lambda name: pytest.fail(f"must not load {name}"))
    monkeypatch.setattr(torch, "version", types.SimpleNamespace(cuda=None, hip=None))
    monkeypatch.delenv(ENGINE, raising=False)
    assert engines.current().engine is None


def test_a_bad_engine_variable_is_a_usage_error_before_any_test_runs(pytester, monkeypatch):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv("GPUCOMM_COPY_CALL", "cudda")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 4  # pytest's usage error
    result.stderr.fnmatch_lines(["*invalid environment: GPUCOMM_COPY_CALL is 'cudda': the call of the GPU copy "
                                 "engine must be one of auto, cuda, hip, torch*"])
    monkeypatch.setenv("GPUCOMM_COPY_CALL", "torch")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == 0
