"""The shipped suites' test ids: one id per test wherever the suites are collected from.

In a checkout ``pytest suites/`` names a test ``suites/test_copies.py::test_peer_copy[...]`` (its path under
the rootdir), and the shipped baselines key their cases by those ids.  Installed, ``pytest --pyargs
pytest_gpucomm.suites`` collects the same files from ``site-packages/pytest_gpucomm/suites``, outside the
rootdir, which pytest would name ``test_copies.py::...``: so every module of the shipped suites' folder
(``gate.shipped.shipped_folder("suites")``) is given the checkout's id, ``suites/<file>``, and a run of the
installed suites is judged against the shipped baselines' cases (and against the user's own baselines, recorded
either way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

__all__ = ["suite_module"]


def suite_module(module_path: Path, parent: pytest.Collector) -> Optional[pytest.Module]:
    """The module of a file of the shipped suites, with the id ``suites/<file>``; None for any other file
    (pytest makes it as usual)."""
    from ..gate.shipped import shipped_folder

    folder = shipped_folder("suites")
    if folder is None or module_path.parent != folder and module_path.parent.resolve() != folder:
        return None
    return pytest.Module.from_parent(parent, path=module_path, nodeid=f"suites/{module_path.name}")
