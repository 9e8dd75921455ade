"""gpucomm fixtures: ``gpus``, ``gpu``, ``gpu_pair``, ``gpu_link``, ``size``, ``comm``, ``process_group``.

``gpu_pair``, ``gpu_link``, ``gpu`` and ``size`` are parametrized at collection (:mod:`.parametrize`);
the fixtures hand the parameter to the test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .markers import marks_of
from .state import State, state_of

if TYPE_CHECKING:
    from .comm import Comm, GpuPair
    from .group import ProcessGroup

__all__ = ["gpucomm_state", "gpus", "gpu", "gpu_pair", "gpu_link", "size", "comm", "process_group"]


@pytest.fixture(scope="session")
def gpucomm_state(pytestconfig: pytest.Config) -> State:
    """The gpucomm session state (settings, detected hardware, records)."""
    return state_of(pytestconfig)


@pytest.fixture(scope="session")
def gpus(gpucomm_state: State) -> list[str]:
    """The devices measured on: ["cuda:0", "cuda:1", ...], or the logical host devices ["cpu:0", "cpu:1"]."""
    return gpucomm_state.devices()


@pytest.fixture
def gpu(request: pytest.FixtureRequest) -> str:
    """One GPU ("cuda:0"); the test runs once per visible GPU."""
    return _param(request, "gpu")


@pytest.fixture
def gpu_pair(request: pytest.FixtureRequest) -> "GpuPair":
    """An ordered pair of devices (src, dst); the test runs once per pair, with ids like "0->1"."""
    return _param(request, "gpu_pair")


@pytest.fixture
def gpu_link(request: pytest.FixtureRequest) -> "GpuPair":
    """An unordered pair of devices (lower index first), for both-ways tests; ids like "0<->1"."""
    return _param(request, "gpu_link")


@pytest.fixture
def size(request: pytest.FixtureRequest) -> int:
    """The message size in bytes, from the test's @sizes sweep."""
    return _param(request, "size")


def _param(request: pytest.FixtureRequest, name: str) -> Any:
    if not hasattr(request, "param"):
        hint = "@pytest.mark.sizes(...)" if name == "size" else "the gpucomm plugin's parametrization"
        raise pytest.UsageError(f"{request.node.nodeid}: fixture {name!r} has no value: it is set by {hint}")
    return request.param


@pytest.fixture
def comm(gpucomm_state: State, request: pytest.FixtureRequest) -> "Comm":
    """Runs measurements (copies, collectives) and returns Measurement objects; see pytest_gpucomm.comm.Comm."""
    from .comm import Comm

    return Comm(gpucomm_state, request)


@pytest.fixture
def process_group(gpucomm_state: State, request: pytest.FixtureRequest) -> "ProcessGroup":
    """A world of ranks (NCCL/RCCL on GPUs, gloo on CPU): one worker process per rank, started once per
    world size and session.  The size comes from @world(n); default: every visible GPU (2 on CPU)."""
    marks = marks_of(request.node)  # checked in pytest_runtest_setup, before any fixture
    world = marks.world or gpucomm_state.default_world()
    return gpucomm_state.group(world, marks.rank_timeout_s, label=request.node.nodeid)
