"""Which tool wrote a file, and its run: :func:`read_foreign` (a file), :func:`foreign_of` (a parsed document),
:func:`is_foreign` (a cheap test on a parsed document)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

from . import nccl_tests, nvbandwidth
from .model import ForeignCase, ForeignError, ForeignRun

__all__ = ["MAX_FOREIGN_BYTES", "NVBANDWIDTH_DEFAULT_SIZE", "ForeignError", "ForeignRun", "ForeignCase",
           "read_foreign", "foreign_of", "is_foreign"]

#: a file of another tool larger than this is refused by its size, before it is read (nccl-tests -I 1 over
#: 1 KiB..16 GiB at 1,000 iterations on 8 ranks is about 10 MB)
MAX_FOREIGN_BYTES = 64 * 1024 * 1024
NVBANDWIDTH_DEFAULT_SIZE = nvbandwidth.DEFAULT_SIZE


def is_foreign(doc: Any) -> bool:
    """Whether a parsed JSON document is nccl-tests' (or rccl-tests') or nvbandwidth's, by its top-level keys."""
    return isinstance(doc, Mapping) and (nccl_tests.looks_like(doc) or nvbandwidth.looks_like(doc))


def foreign_of(doc: Any, path: "str | os.PathLike[str]", *, nvbandwidth_size: Optional[int] = None,
               version: Optional[str] = None) -> ForeignRun:
    """The run of a parsed document of the file ``path`` (:func:`is_foreign`'s tools; ForeignError otherwise).
    ``nvbandwidth_size``: the buffer size of an nvbandwidth run (its JSON does not hold it; default its own
    512 MiB); ``version``: nccl-tests' version where the caller knows it (its JSON holds only its format)."""
    where = str(path)
    if isinstance(doc, Mapping) and nvbandwidth.looks_like(doc):
        return nvbandwidth.read(doc, where, nvbandwidth_size)
    if isinstance(doc, Mapping) and nccl_tests.looks_like(doc):
        return nccl_tests.read(doc, where, version)
    raise ForeignError(f"{where}: not a file of nccl-tests (-J), rccl-tests or nvbandwidth (-j): "
                       + ("its top-level keys are " + ", ".join(repr(k) for k in list(doc)[:8])
                          if isinstance(doc, Mapping) else f"a JSON {type(doc).__name__}, not an object"))


def read_foreign(path: "str | os.PathLike[str]", *, nvbandwidth_size: Optional[int] = None,
                 version: Optional[str] = None) -> ForeignRun:
    """The run of the file ``path``: refused by its size (:data:`MAX_FOREIGN_BYTES`) before it is read, then
    parsed and read by the tool that wrote it (:func:`foreign_of`)."""
    from ..files.jsontext import parse_json_bytes
    from ..files.reading import read_regular_file

    raw = read_regular_file(Path(path), what="result file", limit=MAX_FOREIGN_BYTES,
                            limit_name="pytest_gpucomm.foreign.MAX_FOREIGN_BYTES", error=ForeignError)
    doc = parse_json_bytes(raw, Path(path), "result file", ForeignError)
    return foreign_of(doc, path, nvbandwidth_size=nvbandwidth_size, version=version)
