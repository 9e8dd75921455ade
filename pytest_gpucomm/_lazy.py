"""Names a package exports but imports only on first use (PEP 562 module ``__getattr__``).

An export is looked up in its submodule *as ``sys.modules`` holds it now*, on every use, and never stored
in the package.  Storing it would tie the package to one import of the submodule: whatever drops the
submodule from ``sys.modules`` while the package stays -- pytester's in-process runs, which remove the
modules imported during a run -- leaves the package handing out the old class, whose module's names are
no longer the ones pickle finds by name.  In :mod:`pytest_gpucomm.ranks` that made a second pytest
session in one process wait out the pools' whole start timeout: the old spawn code compared each
worker's unpickled ``Ready`` (of the protocol module imported anew) with its own, old ``Ready`` class and
never saw a rank ready.  The look-up costs a ``sys.modules`` hit per use.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Iterable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str],
                 eager: Iterable[str] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``exports`` is taken from its submodule
    (``exports[name]``, relative to the package), imported when first asked for, on every use (not kept
    in the package: see the module docstring)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports) | set(eager))

    return __getattr__, __dir__
