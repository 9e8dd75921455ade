"""Copy engines: the GPU runtime's own asynchronous copy call, one design for CUDA and HIP.

A GPU copy (``ops.copies``) is one call of the platform's asynchronous copy on a stream, issued in
batches behind a spin kernel, its status checked and a failure named by the platform's own error names.
What differs between CUDA and HIP is only the table below (:class:`EntryPoints`): the library, the copy
call and its C signature, the "kind" argument HIP takes and CUDA does not, and the error-name call, which
CUDA answers through an out-parameter and HIP as its return value.  :class:`Engine` is the one piece of
code that binds a table to a loaded library and issues, checks and names the calls.

The tables, and where each signature comes from:

- CUDA (``libcuda.so.1``, the driver API, as nvbandwidth issues its copies):
  ``CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)`` and
  ``CUresult cuGetErrorName(CUresult error, const char **pStr)`` (cuda.h).  With unified addressing one
  call serves peer, host->device and device->host copies.
- HIP (``libamdhip64.so``): ``hipError_t hipMemcpyAsync(void* dst, const void* src, size_t sizeBytes,
  hipMemcpyKind kind, hipStream_t stream)`` and ``const char* hipGetErrorName(hipError_t hip_error)``
  (ROCm/HIP include/hip/hip_runtime_api.h, commit c5e11fc, 2024-10-16; ``hipMemcpyKind`` in
  include/hip/driver_types.h: HostToHost 0, HostToDevice 1, DeviceToHost 2, DeviceToDevice 3).  The kind
  is named from where the two buffers are; a copy between two GPUs is DeviceToDevice, as the header's
  note on peer copies describes (the stream of the source GPU, peer access enabled from it).
  ``hipMemcpyPeerAsync`` is not used: it needs the device ids as well and is a second call doing what
  ``hipMemcpyAsync`` does with peer access on.  (TransferBench's DMA executor issues ``hipMemcpyAsync``
  too, with ``hipMemcpyDefault``: ROCm/TransferBench src/TransferBench.cpp, commit 788840d; the explicit
  kind says what each copy is.)

Peer access is enabled, on both platforms, by torch: a one-byte ``dst.copy_(src)`` between the two GPUs
before timing, which calls ``at::cuda::get_p2p_access(src, dst)`` (aten/src/ATen/cuda/PeerToPeerAccess.cpp:
``cudaDeviceEnablePeerAccess`` from the source device, hipified to ``hipDeviceEnablePeerAccess`` on ROCm).
That is the device whose stream issues the copies, and torch records it, so torch's own later copies do
not enable it a second time; the engine needs no peer-access entry point of its own.

The libraries are loaded with ``ctypes``: no new dependency, and the two calls need nothing more
(``hip-python`` would be an extra package on every ROCm machine, for the same two calls).

Which engine (read at every copy set-up, so a process can switch; a table and library are loaded once):

- ``GPUCOMM_COPY_CALL`` = ``auto`` (unset: the same), ``cuda``, ``hip`` or ``torch`` (called
  ``GPUCOMM_COPY_ENGINE`` before that name went to ``--gpucomm-copy-engine=ce|sm|both``: copy engines or
  copy kernels, :mod:`.sm_copy`; an old value there is a usage error naming the new variable).  ``auto`` takes HIP
  on a ROCm build of torch (``torch.version.hip``) and CUDA on a CUDA build; where that library does not
  load it falls back to torch's ``dst.copy_(src, non_blocking=True)`` and says why in
  ``info["engine_note"]``.  ``cuda`` and ``hip`` insist: the engine asked for loads or the copy fails
  with the reason.  ``cuda`` needs a CUDA build of torch (torch's streams are the driver's).  ``hip`` on a
  CUDA build of torch needs ``GPUCOMM_HIP_LIBRARY``: a library that forwards the HIP calls to the CUDA
  driver, as the test shim does (tests/hipshim); a real HIP runtime knows nothing of CUDA streams.
  ``torch`` always takes torch's ``copy_`` (which on CUDA puts a barrier between the two GPUs' streams in
  front of every peer copy: slower below about 64 MiB, see ``ops.copies``).
- ``GPUCOMM_HIP_LIBRARY`` = the path of ``libamdhip64.so``, read when the HIP engine is chosen: for a
  ROCm install outside the loader's path.  Without it, the ``libamdhip64`` already mapped into this
  process is taken, else ``libamdhip64.so`` through the dynamic loader: torch's ROCm wheels carry their
  own copy (up to ROCm 7.2 bundled into torch/lib, pytorch/pytorch#191688; in TheRock's wheels
  ``libamdhip64.so.7`` under ``_rocm_sdk_core``, with no unversioned name, ROCm/pytorch#3334), and a
  second HIP runtime loaded beside it would not know torch's streams.  A path that does not load, or
  lacks an entry point, is an error naming the path and the variable, under ``auto`` too.

An empty variable is an error, as an empty option is; so is an unknown engine name.  The variables are
read where a GPU copy is set up, so a bad value fails each GPU copy with the message (CPU runs never
read them).

``info["engine"]`` of a copy names the engine: ``cuMemcpyAsync`` (the text reports recorded before the
HIP engine already carry), ``hipMemcpyAsync``, or ``torch copy_``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from ..measurement import MeasurementInfo

__all__ = ["CopyError", "EngineError", "EntryPoints", "Function", "CUDA", "HIP", "TABLES", "ENGINE_TORCH",
           "ENV_CALL", "ENV_HIP_LIBRARY", "CHOICES", "Engine", "Selection", "select", "current",
           "forget", "torch_platform", "COPY_ENGINES", "CE", "SM", "copy_engine_choice",
           "copy_engine_of"]

#: which call issues a copy-engine copy (the variable was ``GPUCOMM_COPY_ENGINE`` until issue 48)
ENV_CALL = "GPUCOMM_COPY_CALL"
ENV_HIP_LIBRARY = "GPUCOMM_HIP_LIBRARY"
CHOICES = ("auto", "cuda", "hip", "torch")
#: ``info["engine"]`` of the fallback: torch's own copy
ENGINE_TORCH = "torch copy_"


class CopyError(RuntimeError):
    """A copy failed, or its data came out wrong."""


class EngineError(CopyError):
    """The copy engine asked for cannot be used: a bad variable, a library that does not load."""


@dataclasses.dataclass(frozen=True)
class Function:
    """One C entry point: its name and its ctypes signature."""

    name: str
    argtypes: tuple[object, ...]
    restype: object


@dataclasses.dataclass(frozen=True)
class EntryPoints:
    """What one platform's copy engine calls (see the module docstring for the sources)."""

    platform: str  # "cuda" or "hip": the value of GPUCOMM_COPY_CALL that asks for it
    label: str  # info["engine"]
    library: str  # loaded by name when no other is given
    memcpy: Function  # (dst, src, bytes, [kind,] stream) -> status, 0 is success
    error_name: Function
    #: the error name comes back through an out-parameter (CUDA: status f(code, const char**)) instead
    #: of as the return value (HIP: const char* f(code))
    name_by_out_param: bool
    status_type: str  # how an error without a name is printed: "<status_type> <code>"
    #: the memcpy's kind argument by (source on a GPU, destination on a GPU); empty: it takes none
    kinds: Mapping[tuple[bool, bool], int]

    @property
    def functions(self) -> tuple[Function, ...]:
        return (self.memcpy, self.error_name)


CUDA = EntryPoints(
    platform="cuda",
    label="cuMemcpyAsync",
    library="libcuda.so.1",
    memcpy=Function("cuMemcpyAsync", (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p),
                    ctypes.c_int),
    error_name=Function("cuGetErrorName", (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)), ctypes.c_int),
    name_by_out_param=True,
    status_type="CUresult",
    kinds={},
)

HIP_MEMCPY_HOST_TO_HOST, HIP_MEMCPY_HOST_TO_DEVICE, HIP_MEMCPY_DEVICE_TO_HOST, HIP_MEMCPY_DEVICE_TO_DEVICE = 0, 1, 2, 3

HIP = EntryPoints(
    platform="hip",
    label="hipMemcpyAsync",
    library="libamdhip64.so",
    memcpy=Function("hipMemcpyAsync",
                    (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p),
                    ctypes.c_int),
    error_name=Function("hipGetErrorName", (ctypes.c_int,), ctypes.c_char_p),
    name_by_out_param=False,
    status_type="hipError_t",
    kinds={(False, False): HIP_MEMCPY_HOST_TO_HOST, (False, True): HIP_MEMCPY_HOST_TO_DEVICE,
           (True, False): HIP_MEMCPY_DEVICE_TO_HOST, (True, True): HIP_MEMCPY_DEVICE_TO_DEVICE},
)

TABLES: dict[str, EntryPoints] = {t.platform: t for t in (CUDA, HIP)}


class Engine:
    """A table of entry points bound to a loaded library: issues copies, checks them, names failures."""

    def __init__(self, table: EntryPoints, lib: object, library: str, where: str = "") -> None:
        """``library`` is what was loaded (a name or a path); ``where`` says where it came from (the
        variable that named it), for error messages."""
        self.table = table
        self.library = library
        self.label = table.label
        bound = []
        for fn in table.functions:
            try:
                f = getattr(lib, fn.name)
            except AttributeError:
                raise EngineError(f"the {table.platform} copy engine: {library}{where} has no entry point "
                                  f"{fn.name}") from None
            f.argtypes = list(fn.argtypes)
            f.restype = fn.restype
            bound.append(f)
        self._memcpy, self._name = bound

    def call(self, dst_ptr: int, src_ptr: int, nbytes: int, stream_handle: int, src_on_gpu: bool,
             dst_on_gpu: bool) -> tuple[object, ...]:
        """The memcpy's arguments for one copy of ``nbytes`` on the stream ``stream_handle``."""
        if self.table.kinds:
            return (dst_ptr, src_ptr, nbytes, self.table.kinds[(src_on_gpu, dst_on_gpu)], stream_handle)
        return (dst_ptr, src_ptr, nbytes, stream_handle)

    def copy(self, call: Sequence[object], batch: int, what: str) -> None:
        """Issue the copy ``call`` (from :meth:`call`) ``batch`` times; a non-zero status raises
        :class:`CopyError` naming the call and the error."""
        memcpy = self._memcpy
        for _ in range(batch):
            rc = memcpy(*call)
            if rc:
                raise CopyError(f"{what}: {self.table.memcpy.name} failed with {self.error_name(rc)}")

    def error_name(self, rc: int) -> str:
        """The platform's name of the status ``rc`` (``CUDA_ERROR_...``, ``hipError...``), or
        ``"<status type> <rc>"`` where it has none."""
        if self.table.name_by_out_param:
            out = ctypes.c_char_p()
            if self._name(rc, ctypes.byref(out)) == 0 and out.value:
                return out.value.decode(errors="replace")
        else:
            name = self._name(rc)
            if name:
                return name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        return f"{self.table.status_type} {rc}"


@dataclasses.dataclass(frozen=True)
class Selection:
    """The engine chosen for GPU copies: ``engine`` None means torch's ``copy_``; ``note`` says why
    where that was not what was asked for (auto fell back), else it is empty."""

    engine: Optional[Engine]
    note: str = ""

    @property
    def label(self) -> str:
        return self.engine.label if self.engine is not None else ENGINE_TORCH

    def info(self) -> MeasurementInfo:
        """The measurement's ``info`` entries: ``engine``, and ``engine_note`` where there is one."""
        return {"engine": self.label, **({"engine_note": self.note} if self.note else {})}


def torch_platform(version: object) -> Optional[str]:
    """``"hip"`` for a ROCm build of torch (``torch.version``), ``"cuda"`` for a CUDA build, else None."""
    if getattr(version, "hip", None):
        return "hip"
    if getattr(version, "cuda", None):
        return "cuda"
    return None


def _load_library(path: str) -> object:
    return ctypes.CDLL(path)


def _hip_in_process(maps: str = "/proc/self/maps") -> Optional[str]:
    """The path of the ``libamdhip64`` already mapped into this process (torch's), or None."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and os.path.basename(fields[5]).startswith("libamdhip64.so"):
            return fields[5]
    return None


def engine_choice(environ: Mapping[str, str]) -> str:
    raw = environ.get(ENV_CALL)
    if raw is None:
        return "auto"
    value = raw.strip().lower()
    if value not in CHOICES:
        said = "is empty" if not value else f"is {raw!r}"
        raise EngineError(f"{ENV_CALL} {said}: the call of the GPU copy engine must be one of {', '.join(CHOICES)} "
                          f"(unset: auto)")
    return value


def _hip_library(environ: Mapping[str, str]) -> Optional[str]:
    raw = environ.get(ENV_HIP_LIBRARY)
    if raw is None:
        return None
    if not raw.strip():
        raise EngineError(f"{ENV_HIP_LIBRARY} is empty: give the path of libamdhip64.so, or unset it")
    return raw.strip()


def select(environ: Mapping[str, str], platform: Optional[str],
           load: Optional[Callable[[str], object]] = None,
           loaded_hip: Optional[Callable[[], Optional[str]]] = None) -> Selection:
    """The copy engine for these variables (``environ``) and this build of torch (``platform``, see
    :func:`torch_platform`); ``load`` opens a library by name or path (default ``ctypes.CDLL``),
    ``loaded_hip`` finds a HIP runtime already in this process (default: in /proc/self/maps).  Raises
    :class:`EngineError` for a bad variable or an engine asked for by name that cannot be used."""
    load = load or _load_library
    loaded_hip = loaded_hip or _hip_in_process
    choice = engine_choice(environ)
    if choice == "torch":
        return Selection(None)
    if choice == "auto":
        if platform is None:
            return Selection(None, "torch is not a CUDA or ROCm build")
        table = TABLES[platform]
    else:
        table = TABLES[choice]
        if platform is None:
            raise EngineError(f"{ENV_CALL}={choice}: this torch is not a CUDA or ROCm build")
        if choice == "cuda" and platform != "cuda":
            raise EngineError(f"{ENV_CALL}=cuda needs a CUDA build of torch; this one is a ROCm build "
                              f"(its streams are HIP streams)")
    if table is HIP:
        library = _hip_library(environ)
        if library is not None:
            return Selection(_open(table, library, load, f" (from {ENV_HIP_LIBRARY})"))
        if platform != "hip":
            raise EngineError(f"{ENV_CALL}=hip on a CUDA build of torch needs {ENV_HIP_LIBRARY}: a library "
                              f"that forwards the HIP calls to the CUDA driver (see tests/hipshim)")
        name = loaded_hip() or table.library
    else:
        name = table.library
    try:
        return Selection(_open(table, name, load, ""))
    except EngineError as e:
        if choice == "auto":
            return Selection(None, f"{e}; torch copy_ instead")
        raise


def _open(table: EntryPoints, library: str, load: Callable[[str], object], where: str) -> Engine:
    try:
        lib = load(library)
    except OSError as e:
        raise EngineError(f"the {table.platform} copy engine: cannot load {library}{where}: {e}") from None
    return Engine(table, lib, library, where)


@functools.lru_cache(maxsize=None)
def _cached(choice: Optional[str], hip_library: Optional[str], platform: Optional[str]) -> Selection:
    environ = {k: v for k, v in ((ENV_CALL, choice), (ENV_HIP_LIBRARY, hip_library)) if v is not None}
    return select(environ, platform)


def current() -> Selection:
    """The copy engine for this process's environment and torch, loaded once per set of values (a
    bad value raises :class:`EngineError` at every call, so every copy that would use it fails with
    the reason)."""
    import torch

    return _cached(os.environ.get(ENV_CALL), os.environ.get(ENV_HIP_LIBRARY), torch_platform(torch.version))


def forget() -> None:
    """Drop the loaded engines: the next :func:`current` selects and loads afresh (for tests)."""
    _cached.cache_clear()


# -- which engines copy: the copy engines (ce), the GPU's own cores through a copy kernel (sm), or both -------

#: ``--gpucomm-copy-engine`` (env ``GPUCOMM_COPY_ENGINE``): ``ce`` the copy engines (the call above), ``sm`` a
#: copy kernel (:mod:`.sm_copy`), ``both`` each copy test once with each
COPY_ENGINES = ("ce", "sm", "both")
#: the engine of one copy: the copy engines, or a kernel on the streaming multiprocessors
CE, SM = "ce", "sm"


def copy_engine_choice(value: str, where: str) -> str:
    """``value`` of ``--gpucomm-copy-engine`` (lower-cased, stripped) checked: one of :data:`COPY_ENGINES`.
    ValueError naming the value and ``where`` it came from; an old value of ``GPUCOMM_COPY_ENGINE`` (a copy
    call, :data:`CHOICES`) says that the call is ``GPUCOMM_COPY_CALL`` now."""
    v = value.strip().lower()
    if v in COPY_ENGINES:
        return v
    said = f"invalid --gpucomm-copy-engine {value!r} (from {where}): expected {', '.join(COPY_ENGINES)}"
    if v in CHOICES:
        raise ValueError(f"{said}\n{v!r} is a copy call: {ENV_CALL} chooses it since GPUCOMM_COPY_ENGINE became "
                         f"this option's;\nset {ENV_CALL}={v}")
    raise ValueError(said)


def copy_engine_of(engine: object, where: str) -> str:
    """The engine of one copy, ``ce`` or ``sm``; ValueError naming ``engine`` and ``where`` otherwise."""
    if engine in (CE, SM):
        return str(engine)
    raise ValueError(f"{where}: the copy engine must be {CE!r} or {SM!r}, got {engine!r}")
