"""Collection: which tests a gpucomm test becomes.

``@sizes`` becomes one test per size (sizes above ``--gpucomm-max-size`` are left out), ``gpu_pair`` one
test per ordered pair of devices, ``gpu_link`` one per unordered pair, ``gpu`` one per GPU.  Where nothing
is left, the test is collected once and skipped with the reason.

In launched mode the devices are those of the node that this rank sees (every rank of a job must see as
many, or the ranks collect different tests and stop, saying so); the copies between them are measured on
every node at once (:meth:`pytest_gpucomm.comm.Comm.copy`).

``group_kind`` becomes one test per group kind (world, intra-node, inter-node) only in a launched job of
several nodes; elsewhere it is not parametrized, so that a test's ids (and the baselines keyed by them)
stay as they are without it.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import pytest

from .comm import GpuPair
from .markers import MarkerError, closest_mark, read_sizes, size_id
from .state import State
from .units import describe_size

__all__ = ["parametrize"]


def _param_or_skip(metafunc: pytest.Metafunc, name: str, values: list[Any], ids: list[str], reason: str,
                   empty_id: str) -> None:
    if values:
        metafunc.parametrize(name, values, ids=ids, indirect=True)
    else:
        metafunc.parametrize(name, [pytest.param(None, marks=pytest.mark.skip(reason=reason))], ids=[empty_id],
                             indirect=True)


def launched_pairs_reason(count: int, visible: Optional[str]) -> str:
    """Launched mode on GPU: why a rank that sees fewer than 2 GPUs (``count``; ``visible`` is its
    CUDA_VISIBLE_DEVICES, None when unset) has no GPU pair to measure."""
    shown = "unset" if visible is None else repr(visible)
    return (f"needs 2 GPUs of this node visible to each rank, found {count} (CUDA_VISIBLE_DEVICES {shown}): in "
            "launched mode a node's peer copies are measured by one of its ranks, which must see the node's GPUs; "
            "give every rank every GPU of its node (torchrun does; with srun, --gpus-per-node without "
            "--gpus-per-task or --gpu-bind)")


def _too_few_pairs(state: State) -> str:
    if state.launch is not None and state.info.kind == "gpu":
        return launched_pairs_reason(state.info.count, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return state.too_few(2)


def parametrize(metafunc: pytest.Metafunc, state: State) -> None:
    """Parametrize ``group_kind`` (launched, several nodes), ``size``, ``gpu_pair``, ``gpu_link`` and ``gpu`` of
    one test function."""
    where = metafunc.definition.nodeid
    if "group_kind" in metafunc.fixturenames and state.multi_node:
        from .topology import GROUP_KINDS

        metafunc.parametrize("group_kind", list(GROUP_KINDS), ids=list(GROUP_KINDS), indirect=True)
    try:
        mark = closest_mark(metafunc.definition, "sizes")
    except MarkerError as e:
        raise pytest.Collector.CollectError(str(e)) from None
    if mark is not None:
        try:
            sizes = read_sizes(mark, where)
        except MarkerError as e:
            raise pytest.Collector.CollectError(str(e)) from None
        if "size" not in metafunc.fixturenames:
            raise pytest.Collector.CollectError(f"{where}: @sizes needs the test to take a 'size' argument")
        cap = state.max_size
        kept = [s for s in sizes if s <= cap]
        _param_or_skip(metafunc, "size", kept, [size_id(s) for s in kept],
                       f"every size of @sizes is above --gpucomm-max-size {describe_size(cap)}", "no-size")
    if "gpu_pair" in metafunc.fixturenames:
        devs = state.devices()
        pairs = [GpuPair(a, b) for a in devs for b in devs if a != b]
        _param_or_skip(metafunc, "gpu_pair", pairs, [p.id for p in pairs], _too_few_pairs(state), "no-pair")
    if "gpu_link" in metafunc.fixturenames:
        devs = state.devices()
        links = [GpuPair(a, b) for i, a in enumerate(devs) for b in devs[i + 1:]]
        _param_or_skip(metafunc, "gpu_link", links, [p.id.replace("->", "<->") for p in links], _too_few_pairs(state),
                       "no-pair")
    if "gpu" in metafunc.fixturenames:
        gpus = state.devices() if state.info.kind == "gpu" else []
        _param_or_skip(metafunc, "gpu", gpus, [f"gpu{d.split(':')[-1]}" for d in gpus],
                       "needs a GPU (host<->device copies); none is used: running the CPU variants", "no-gpu")
