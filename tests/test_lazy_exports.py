"""The names the packages import on first use (``pytest_gpucomm``, ``.ranks``, ``.gate``) are those of the
submodule ``sys.modules`` holds now, not of an earlier import of it: pytester's in-process runs drop the
modules a run imported and keep the packages, and a class kept from the first run is not the one the next
run's code (and pickle, by name) uses."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest_gpucomm

PACKAGE_ROOT = Path(pytest_gpucomm.__file__).resolve().parent.parent

# (package, name, its submodule); the submodules dropped in between, as pytester drops them
LAZY = [
    ("pytest_gpucomm", "Measurement", "pytest_gpucomm.measurement"),
    ("pytest_gpucomm", "Remeasure", "pytest_gpucomm.measurement"),
    ("pytest_gpucomm.ranks", "RankPool", "pytest_gpucomm.ranks.pool"),
    ("pytest_gpucomm.ranks", "RankError", "pytest_gpucomm.ranks.errors"),
    ("pytest_gpucomm.gate", "Baseline", "pytest_gpucomm.gate.store"),
]


def test_a_lazy_name_is_taken_from_its_submodule_as_sys_modules_holds_it_after_a_reimport():
    code = (
        "import importlib, json, sys\n"
        f"lazy = {LAZY!r}\n"
        "first = [getattr(importlib.import_module(p), n) for p, n, _ in lazy]\n"
        "for m in [m for m in sys.modules if m.startswith(('pytest_gpucomm.ranks.', 'pytest_gpucomm.gate.store',\n"
        "                                                  'pytest_gpucomm.measurement'))]:\n"
        "    del sys.modules[m]\n"
        "again = [getattr(importlib.import_module(p), n) for p, n, _ in lazy]\n"
        "print(json.dumps([[f'{p}.{n}', a is not b, a is getattr(sys.modules.get(m), n, None)]\n"
        "                  for (p, n, m), a, b in zip(lazy, again, first)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    # each name is a new object (its module was imported again) and that of the module in sys.modules now
    assert seen == [[f"{p}.{n}", True, True] for p, n, _ in LAZY], seen



@dataclass
class Ready:  # the same name and fields as the protocol's Ready, another class (picklable: module level)
    rank: int


def test_a_start_up_message_of_an_unknown_class_fails_its_rank_at_once_naming_the_class():
    """What the stale classes above looked like to a pool: a Ready of another import of the protocol module.
    The handshake now fails that rank with the class's name instead of waiting out the start timeout."""
    from multiprocessing import Pipe

    from pytest_gpucomm.ranks.spawn import _Handshake

    ours, theirs = Pipe()
    hs = _Handshake([], listener=None, authkey=b"", world_size=2, backend="gloo", device="cpu", label="t")
    theirs.send(Ready(rank=1))
    hs._receive(ours)
    assert hs.ready == set() and set(hs.init_errors) == {1}
    assert hs.init_errors[1].startswith(
        "rank 1 sent a start-up message of a class this controller does not know: test_lazy_exports.Ready "
        "(expected pytest_gpucomm.ranks.protocol.Hello, Ready or InitError")
