"""Collection: which tests a gpucomm test becomes.

``@sizes`` becomes one test per size, ``gpu_pair`` one test per ordered pair of devices, ``gpu_link`` one per
unordered pair, ``gpu`` one per GPU, ``gpu_hub`` one per device (the hub of the all-peers copy patterns, CPU
variant included).  Where nothing is left, the test is collected once and skipped with the reason.

A size above ``--gpucomm-max-size`` (:func:`max_size_text`: the option, else the default for the device
kind) is collected and skipped with the reason, as a test that needs more GPUs is: the user asked for the
size, so the run says that it was not measured and why (``-rs`` lists them, one line per test function),
and a test has the same ids on every machine, whatever size it can measure.

Which pairs ``gpu_pair`` and ``gpu_link`` run over is ``--gpucomm-pairs`` (:func:`select_pairs`): every
ordered pair (n x (n - 1)), each device's ring neighbours (i -> i+1 mod n and back: 2n, for n > 2), or device
0's (0 -> j and j -> 0: 2(n - 1)); a link is an unordered pair of which an ordered pair is chosen.  Without
the option every pair up to ``vocab.AUTO_ALL_PAIRS_MAX_DEVICES`` devices and the neighbours above
(:func:`pair_choice`): the pair tests grow as n^2, and on 8 devices every pair makes the copy suite alone
longer than the 5 minutes the default suites may take (``benchmarks/suite_time_vs_gpus.py``).  On 2 devices
the three choices are the same two pairs.  A test's id is that of its pair whichever the choice, so a
baseline recorded with every pair gates a run of the neighbours.

In launched mode the devices are those of the node that this rank sees (every rank of a job must see as
many, or the ranks collect different tests and stop, saying so); the copies between them are measured on
every node at once (:meth:`pytest_gpucomm.plugin.measurer.Comm.copy`).

``host_link`` becomes one test per device, the logical host devices of the CPU variant included (ids
"host<->0"): the host's copies to and from that device at once.  ``copy_engine`` is parametrized only where
``--gpucomm-copy-engine`` is ``sm`` (one test, id "sm") or ``both`` (ids "ce" and "sm"): with the default the
test and its id are as without it, so that the baselines recorded before the option still match.

``group_kind`` becomes one test per group kind (world, intra-node, inter-node) only in a launched job of
several nodes; elsewhere it is not parametrized, so that a test's ids (and the baselines keyed by them)
stay as they are without it.
"""

from __future__ import annotations

import os
from typing import Any, Generator, Optional, Sequence

import pytest

from .measurer import GpuPair
from .markers import MarkerError, SweepSize, closest_mark, read_sizes, size_id
from .engines import Engines
from .state import State
from ..units import format_size, plural
from ..vocab import AUTO_ALL_PAIRS_MAX_DEVICES, PAIR_CHOICES

__all__ = ["parametrize", "pair_choice", "select_pairs", "select_links", "pairs_lines", "max_size_text",
           "max_size_lines"]


def pair_choice(setting: Optional[str], n_devices: int) -> str:
    """The pair selection in force: ``setting`` (``--gpucomm-pairs``; None when not given), else "all" up to
    ``AUTO_ALL_PAIRS_MAX_DEVICES`` devices and "neighbours" above."""
    if setting is not None:
        if setting not in PAIR_CHOICES:
            raise ValueError(f"unknown pair selection {setting!r}; known: {', '.join(PAIR_CHOICES)}")
        return setting
    return "all" if n_devices <= AUTO_ALL_PAIRS_MAX_DEVICES else "neighbours"


def _chosen(n: int, how: str) -> set[tuple[int, int]]:
    """The ordered index pairs (i, j) of ``how`` among ``n`` devices."""
    if how == "all":
        return {(i, j) for i in range(n) for j in range(n) if i != j}
    if how == "neighbours":
        ring = {(i, (i + 1) % n) for i in range(n)}
        return {p for i, j in ring for p in ((i, j), (j, i)) if i != j}
    if how == "from0":
        return {p for j in range(1, n) for p in ((0, j), (j, 0))}
    raise ValueError(f"unknown pair selection {how!r}; known: {', '.join(PAIR_CHOICES)}")


def select_pairs(devices: Sequence[str], how: str) -> list[GpuPair]:
    """The ordered pairs of ``devices`` that ``how`` (one of ``vocab.PAIR_CHOICES``) chooses, in the order of
    every pair (source-major), so that the tests of a choice run in the order they run with "all"."""
    chosen = _chosen(len(devices), how)
    return [GpuPair(a, b) for i, a in enumerate(devices) for j, b in enumerate(devices) if (i, j) in chosen]


def select_links(devices: Sequence[str], how: str) -> list[GpuPair]:
    """The unordered pairs (lower index first) of which ``how`` chooses an ordered pair."""
    chosen = _chosen(len(devices), how)
    return [GpuPair(a, devices[j]) for i, a in enumerate(devices) for j in range(i + 1, len(devices))
            if (i, j) in chosen or (j, i) in chosen]


def pairs_lines(state: State) -> list[str]:
    """The header line saying which pairs the pair tests run over, where the choice leaves some out (none
    with every pair, as on 2 devices: their output stays as it was)."""
    devs = state.devices.names()
    how = pair_choice(state.settings.pairs, len(devs))
    every = len(devs) * (len(devs) - 1)
    kept = len(select_pairs(devs, how))
    if kept == every:
        return []
    if state.settings.pairs is not None:
        from .settings import origin

        why = f"--gpucomm-pairs from {origin(state.config, '--gpucomm-pairs')}"
    else:
        why = f"the default above {AUTO_ALL_PAIRS_MAX_DEVICES} devices; --gpucomm-pairs=all for every pair"
    return [f"gpucomm pairs: {how} ({why}): {kept} of {plural(every, 'ordered pair')}, "
            f"{len(select_links(devs, how))} of {plural(every // 2, 'link')}"]


def max_size_text(state: State) -> str:
    """The largest size measured and where it came from: ``16 MiB (the default on CPU)``, ``1 MiB (from the
    command line)``."""
    if state.settings.max_size is not None:
        from .settings import origin

        return f"{format_size(state.settings.max_size)} (from {origin(state.config, '--gpucomm-max-size')})"
    kind = "GPU" if state.devices.info.kind == "gpu" else "CPU"
    return f"{format_size(state.devices.max_size)} (the default on {kind})"


def max_size_lines(state: State) -> list[str]:
    """The header's line of the largest size measured (:func:`max_size_text`)."""
    return [f"gpucomm max-size: {max_size_text(state)}: @sizes above it are skipped (--gpucomm-max-size)"]


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
    if state.launch is not None and state.devices.info.kind == "gpu":
        return launched_pairs_reason(state.devices.info.count, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return state.devices.too_few(2)


def parametrize(metafunc: pytest.Metafunc, state: State) -> None:
    """Parametrize ``group_kind`` (launched, several nodes), ``size``, ``gpu_pair``, ``gpu_link``, ``gpu_hub``,
    ``host_link``, ``copy_engine`` (sm or both) and ``gpu`` of one test function."""
    where = metafunc.definition.nodeid
    if "group_kind" in metafunc.fixturenames and state.groups.multi_node:
        from ..env.topology import GROUP_KINDS

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
        cap = state.devices.max_size
        if state.settings.engines != ("torch",):  # the nccl-tests sweeps cover every size collected
            state.engines.sizes.update(s for s in sizes if s <= cap)
        above = pytest.mark.skip(reason=f"above --gpucomm-max-size {max_size_text(state)}")
        metafunc.parametrize("size", [SweepSize(s) if s <= cap else pytest.param(SweepSize(s), marks=above)
                                      for s in sizes],
                             ids=[size_id(s) for s in sizes], indirect=True)
    if "gpu_pair" in metafunc.fixturenames:
        devs = state.devices.names()
        pairs = select_pairs(devs, pair_choice(state.settings.pairs, len(devs)))
        _param_or_skip(metafunc, "gpu_pair", pairs, [p.id for p in pairs], _too_few_pairs(state), "no-pair")
    if "gpu_link" in metafunc.fixturenames:
        devs = state.devices.names()
        links = select_links(devs, pair_choice(state.settings.pairs, len(devs)))
        _param_or_skip(metafunc, "gpu_link", links, [p.id.replace("->", "<->") for p in links], _too_few_pairs(state),
                       "no-pair")
    if "gpu_hub" in metafunc.fixturenames:
        devs = state.devices.names()
        hubs = devs if len(devs) >= 2 else []
        _param_or_skip(metafunc, "gpu_hub", hubs, [f"hub{d.split(':')[-1]}" for d in hubs], _too_few_pairs(state),
                       "no-hub")
    if "host_link" in metafunc.fixturenames:
        devs = state.devices.names()
        metafunc.parametrize("host_link", devs, ids=[f"host<->{d.split(':')[-1]}" for d in devs], indirect=True)
    if "gpu" in metafunc.fixturenames:
        gpus = state.devices.names() if state.devices.info.kind == "gpu" else []
        _param_or_skip(metafunc, "gpu", gpus, [f"gpu{d.split(':')[-1]}" for d in gpus],
                       "needs a GPU (host<->device copies); none is used: running the CPU variants", "no-gpu")


class EngineIds:
    """A plugin of sessions with other engines than the defaults (``--gpucomm-copy-engine``, ``--gpucomm-engine``):
    its hook wraps every other ``pytest_generate_tests``, so the engines' parameters come after all the others
    (the test's own ``@pytest.mark.parametrize`` and its module's hook too) and their ids end the test's id.
    ``copy_engine``: the session's --gpucomm-copy-engine; ``engines``: the session's engines (``State.engines``)."""

    def __init__(self, copy_engine: str, engines: Engines) -> None:
        self.copy_engine = copy_engine
        self.engines = engines

    @pytest.hookimpl(wrapper=True)
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> Generator[None, Any, Any]:
        result = yield
        parametrize_engines(metafunc, self.copy_engine, self.engines)
        return result


def parametrize_engines(metafunc: pytest.Metafunc, copy_engine: str, engines: Engines) -> None:
    """The copy engine (``copy_engine``: --gpucomm-copy-engine), then the engine of the comm cases
    (``engines``): the last parts of a test's id ("[1MiB-0->1-sm]", "[1MiB-nccl-tests]"), after the test's own
    ``@pytest.mark.parametrize`` ids too (the hook that calls this runs after pytest's own), so
    ``vocab.default_engine_id`` keys a default engine's case as without them."""
    if "copy_engine" in metafunc.fixturenames and copy_engine != "ce":
        copies = ["ce", "sm"] if copy_engine == "both" else ["sm"]
        metafunc.parametrize("copy_engine", copies, ids=copies, indirect=True)
    engines.parametrize(metafunc)
