"""Build the hip shim (``hipshim.c``: the HIP copy engine's entry points forwarded to the CUDA driver) and
the fake CUDA driver of its CPU tests (``fakecuda.c``) with the C compiler, and list what a shared
library exports.  Used by tests/test_hip_shim.py and benchmarks/hip_shim_vs_cuda.py (which loads this file
by its path, so it imports nothing of the tests).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
SHIM_SOURCE = HERE / "hipshim.c"
FAKE_CUDA_SOURCE = HERE / "fakecuda.c"


class BuildError(RuntimeError):
    pass


def compiler() -> Optional[str]:
    """The C compiler: ``$CC`` where set, else ``cc``, else ``gcc``; None where none is found."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


def build(source: Path, out_dir: Path, name: str, cc: Optional[str] = None) -> Path:
    """Compile ``source`` into the shared library ``out_dir/name``
    (``cc -shared -fPIC -O2 -pthread -o NAME SOURCE -ldl``); raises :class:`BuildError` with the
    compiler's output."""
    cc = cc or compiler()
    if cc is None:
        raise BuildError("no C compiler: set CC or install cc")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / name
    cmd = [cc, "-shared", "-fPIC", "-O2", "-pthread", "-o", str(out), str(source), "-ldl"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed with exit status {done.returncode}:\n{done.stderr}")
    return out


def build_shim(out_dir: Path, cc: Optional[str] = None) -> Path:
    """``out_dir/libhipshim.so``, built from hipshim.c."""
    return build(SHIM_SOURCE, out_dir, "libhipshim.so", cc)


def build_fake_cuda(out_dir: Path, cc: Optional[str] = None) -> Path:
    """``out_dir/libfakecuda.so``, built from fakecuda.c."""
    return build(FAKE_CUDA_SOURCE, out_dir, "libfakecuda.so", cc)


def exported_functions(library: Path) -> set[str]:
    """The functions a shared library defines in its dynamic symbol table (``nm -D --defined-only``,
    type T); raises :class:`BuildError` where nm is missing or fails."""
    nm = shutil.which("nm")
    if nm is None:
        raise BuildError("nm is not installed")
    done = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"nm -D {library} failed: {done.stderr}")
    names = set()
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] == "T":
            names.add(fields[2])
    return names
