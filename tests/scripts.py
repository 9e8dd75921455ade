"""A script of ``benchmarks/`` (or another file that is not a package's module) loaded as a module, for the tests
of its pure functions.  Imported by module name (tests/ is on sys.path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional

#: the repository's root
ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path, name: Optional[str] = None) -> ModuleType:
    """The file at ``path`` (relative paths from the repository's root) run as a module named ``name`` (default:
    the file's stem), registered in ``sys.modules`` under that name: a dataclass looks its module up while it
    is made."""
    path = path if path.is_absolute() else ROOT / path
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python file that can be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
