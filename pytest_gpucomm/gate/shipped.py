"""The installed package: where the files shipped with it are, the suites (``pytest_gpucomm.suites``) and the
baselines (``pytest_gpucomm.baselines``), which the wheel builds from the repository's top-level ``suites/``
and ``baselines/``; the user's own baseline folder beside them (:func:`default_baseline_dir`); whether a file
lies inside the installed package (a save never writes there); and how to add an extra to it as it was
installed (:func:`install_command`).  Standard library only: the plugin asks for the suites' folder while it
collects any project's tests."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..vocab import DEFAULT_BASELINE_DIR

if TYPE_CHECKING:
    from importlib import metadata

__all__ = ["SHIPPED", "shipped_folder", "package_folder", "in_installed_package", "default_baseline_dir",
           "install_command"]

#: how the header and the messages name the shipped baselines
SHIPPED = "shipped with pytest-gpucomm"

_PARTS = ("suites", "baselines")


def package_folder() -> Path:
    """The folder of the ``pytest_gpucomm`` package this module is part of."""
    return Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def shipped_folder(part: str) -> Optional[Path]:
    """The folder of ``pytest_gpucomm.<part>`` ("suites" or "baselines"): in an installed wheel
    ``<site-packages>/pytest_gpucomm/<part>``; in a checkout (an editable install, or the package on
    ``PYTHONPATH``) the repository's top-level ``<part>/``, beside the package; else where the import system
    finds the package; None where there is none."""
    if part not in _PARTS:
        raise ValueError(f"no shipped part {part!r}: one of {', '.join(_PARTS)}")
    package = package_folder()
    for folder in (package / part, package.parent / part):  # the wheel's layout, then the checkout's
        if (folder / "__init__.py").is_file():
            return folder
    try:
        spec = importlib.util.find_spec(f"pytest_gpucomm.{part}")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]).resolve() if locations else None


def _inside(path: Path, folder: Optional[Path]) -> bool:
    if folder is None:
        return False
    try:
        Path(path).resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def in_installed_package(path: Path) -> bool:
    """Whether ``path`` lies inside the ``pytest_gpucomm`` package's folder: where the wheel puts the shipped
    baselines (a checkout keeps them beside the package, in the repository's ``baselines/``, which its
    maintainers record into)."""
    return _inside(path, package_folder())


def default_baseline_dir(rootdir: Path, invocation_dir: Path) -> Path:
    """The user's baseline folder when ``--gpu-baseline-dir`` is not given: ``<rootdir>/baselines``, or
    ``<invocation dir>/baselines`` where the rootdir lies in the package or its shipped suites (``pytest --pyargs
    pytest_gpucomm.suites`` with no pytest configuration of the user's: pytest takes the suites' folder as
    the rootdir, and the user's baselines are not kept inside the package)."""
    root = Path(rootdir)
    if _inside(root, package_folder()) or _inside(root, shipped_folder("suites")):
        return Path(invocation_dir) / DEFAULT_BASELINE_DIR
    return root / DEFAULT_BASELINE_DIR


def install_command(extra: str, distribution: Optional["metadata.Distribution"] = None) -> str:
    """The pip command that adds the extra ``extra`` to pytest-gpucomm as it was installed, and what the extra
    adds: from the wheel or sdist file it was installed from (``pip install '/path/x.whl[plots]'``), the
    checkout of an editable install (``pip install -e '/repo[plots]'``), else by name from the package index
    (``pip install 'pytest-gpucomm[plots]'``).  ``distribution``: an ``importlib.metadata`` distribution
    (default: the installed pytest-gpucomm's; none installed: by name)."""
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        dist = distribution if distribution is not None else metadata.distribution("pytest-gpucomm")
        direct = json.loads(dist.read_text("direct_url.json") or "null")
        adds = [r.split(";")[0].strip() for r in dist.requires or [] if f'extra == "{extra}"' in r]
    except (metadata.PackageNotFoundError, ValueError, OSError):
        direct, adds = None, []
    url = direct.get("url") if isinstance(direct, dict) else None
    command = f"pip install 'pytest-gpucomm[{extra}]'"
    if isinstance(direct, dict) and isinstance(url, str) and url.startswith("file://"):
        where = unquote(urlparse(url).path)
        editable = isinstance(direct.get("dir_info"), dict) and direct["dir_info"].get("editable")
        command = f"pip install {'-e ' if editable else ''}'{where}[{extra}]'"
    return command + (f" (it adds {', '.join(adds)})" if adds else "")
