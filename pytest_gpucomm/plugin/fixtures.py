"""gpucomm fixtures: ``gpus``, ``gpu``, ``gpu_pair``, ``gpu_link``, ``gpu_hub``, ``host_link``, ``copy_engine``,
``size``, ``group_kind``, ``comm``, ``process_group``, ``gpucomm_engine``.

``gpu_pair``, ``gpu_link``, ``gpu_hub``, ``host_link``, ``copy_engine``, ``gpu``, ``size`` and ``group_kind`` are
parametrized at collection
(:mod:`.parametrize`); the fixtures hand the parameter to the test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .markers import SweepSize, marks_of
from .state import State, state_of

if TYPE_CHECKING:
    from .measurer import Comm, GpuPair
    from .group import ProcessGroup

__all__ = ["gpucomm_state", "gpus", "gpu", "gpu_pair", "gpu_link", "gpu_hub", "host_link", "copy_engine", "size",
           "group_kind", "comm", "process_group", "gpucomm_engine"]


@pytest.fixture(scope="session")
def gpucomm_state(pytestconfig: pytest.Config) -> State:
    """The gpucomm session state (settings, detected hardware, records)."""
    return state_of(pytestconfig)


@pytest.fixture(scope="session")
def gpus(gpucomm_state: State) -> list[str]:
    """The devices measured on: ["cuda:0", "cuda:1", ...], or the logical host devices ["cpu:0", "cpu:1"]."""
    return gpucomm_state.devices.names()


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
def gpu_hub(request: pytest.FixtureRequest) -> str:
    """One device ("cuda:0", or "cpu:0" in the CPU variant) as the hub of an all-peers copy pattern
    (``comm.copy_one_to_all``, ``comm.copy_all_to_one``); the test runs once per device, with ids like "hub0".
    Every device, whatever --gpucomm-pairs chooses for the pair tests."""
    return _param(request, "gpu_hub")


@pytest.fixture
def host_link(request: pytest.FixtureRequest) -> str:
    """One device ("cuda:0", or "cpu:0" in the CPU variant) that the host copies to and from at once
    (``comm.host_both_ways``); the test runs once per device, with ids like "host<->0"."""
    return _param(request, "host_link")


@pytest.fixture
def copy_engine(request: pytest.FixtureRequest) -> str:
    """What makes the test's copies: "ce" (the copy engines) or "sm" (a copy kernel), from
    --gpucomm-copy-engine; with "both" the test runs once with each (ids "ce" and "sm"), with "sm" once (id
    "sm"), with the default "ce" once and its id is as without this fixture."""
    return str(getattr(request, "param", "ce"))


@pytest.fixture
def size(request: pytest.FixtureRequest) -> int:
    """The message size in bytes, from the test's @sizes sweep."""
    value = _param(request, "size")
    return value.nbytes if isinstance(value, SweepSize) else value


@pytest.fixture
def group_kind(request: pytest.FixtureRequest) -> str:
    """The kind of process group the test's ``process_group`` is: in a launched job of several nodes the
    test runs once per kind, ``"world"``, ``"intra-node"`` (each node's ranks, every node at once) and
    ``"inter-node"`` (local rank k of every node, every k at once), with the kind in its id; elsewhere it is
    ``"world"`` and the test and its id are as without it."""
    return str(getattr(request, "param", "world"))


def _param(request: pytest.FixtureRequest, name: str) -> Any:
    if not hasattr(request, "param"):
        hint = "@pytest.mark.sizes(...)" if name == "size" else "the gpucomm plugin's parametrization"
        raise pytest.UsageError(f"{request.node.nodeid}: fixture {name!r} has no value: it is set by {hint}")
    return request.param


@pytest.fixture
def gpucomm_engine(gpucomm_state: State, request: pytest.FixtureRequest) -> str:
    """What runs this case's measurements: "torch", or "nccl-tests" (its binaries and nvbandwidth), from
    --gpucomm-engine (one test per engine, the engine ending its id, where it is not torch alone; see
    :mod:`.engines`).  Skipped, with the reason, where the engine cannot run the case here."""
    engine = str(getattr(request, "param", "torch"))
    why = gpucomm_state.engines.unavailable(engine, request.node)
    if why:
        pytest.skip(why)
    return engine


@pytest.fixture
def comm(gpucomm_state: State, request: pytest.FixtureRequest, gpucomm_engine: str) -> "Comm":
    """Runs measurements (copies, collectives) and returns Measurement objects (see plugin.measurer.Comm),
    on the case's engine (``gpucomm_engine``)."""
    from .measurer import Comm

    if gpucomm_engine != "torch":
        from .tool_comm import ToolComm

        return ToolComm(gpucomm_state, request)
    return Comm(gpucomm_state, request)


@pytest.fixture
def process_group(gpucomm_state: State, request: pytest.FixtureRequest) -> "ProcessGroup":
    """A world of ranks (NCCL/RCCL on GPUs, gloo on CPU): one worker process per rank, started once per
    world size and session.  The size comes from @world(n); default: every visible GPU (2 on CPU).

    Where that default is one rank (one GPU, or a launched job of one process) the test is skipped: a
    collective of one rank moves nothing between devices (its busbw is 0, and NCCL's in-place ops on one rank
    do nothing at all), so there is nothing to measure or gate; ``@world(1)`` still asks for one rank.

    A test that also takes ``group_kind`` gets the groups of that kind (launched mode, several nodes); the
    test is skipped, with the reason, where the job has none (a node of one rank, for ``"intra-node"``;
    nodes with different local ranks, for ``"inter-node"``)."""
    marks = marks_of(request.node)  # checked in pytest_runtest_setup, before any fixture
    world = marks.world or gpucomm_state.devices.default_world()
    if marks.world is None and world < 2:
        pytest.skip(gpucomm_state.devices.one_rank_reason())
    kind = str(request.getfixturevalue("group_kind")) if "group_kind" in request.fixturenames else "world"
    engine = str(request.getfixturevalue("gpucomm_engine")) if "gpucomm_engine" in request.fixturenames else "torch"
    if engine != "torch":  # another engine's binary is one process over the world's GPUs: no ranks to start
        from .engines import ToolWorld
        from .group import ProcessGroup

        problem = gpucomm_state.devices.world_problem(world)
        if problem:
            raise pytest.UsageError(problem)
        return ProcessGroup(ToolWorld(world, engine), engine, gpucomm_state.settings.timeout_s, request.node.nodeid)
    why = gpucomm_state.groups.group_problem(kind)
    if why:
        pytest.skip(why)
    return gpucomm_state.groups.group(world, marks.rank_timeout_s, label=request.node.nodeid, kind=kind)
