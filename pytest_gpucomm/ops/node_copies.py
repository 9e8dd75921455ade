"""Copies in launched mode (one pytest process per rank): node-local, measured on every node at once.  One rank
of each node measures the copy between that node's devices (:func:`measuring_local_rank`), the ranks exchange
their outcomes, and :func:`node_measurements` makes one measurement per node of them (or the failure naming
the ranks that raised)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..measurement import Measurement
from .copy_timing import device_index
from .engines import CopyError

__all__ = ["measuring_local_rank", "node_measurements"]


def measuring_local_rank(spec: Mapping[str, Any], local_world_size: int) -> int:
    """Which local rank of each node measures the copy ``spec`` (see ``copy_spec``) in launched mode.

    On GPU, the local rank whose GPU is the copy's first device: the source of a peer copy, the lower
    device of a both-ways copy, the GPU of a host<->device copy, the first device of a pattern.  Where a
    node has more GPUs than ranks, the device's index modulo the node's ranks (with one rank per node, that
    rank measures every copy).
    Host buffers (the CPU variant, ``cpu:0`` and ``cpu:1``): local rank 0."""
    if local_world_size < 1:
        raise ValueError(f"a node has at least one rank, got local_world_size={local_world_size!r}")
    first = str(spec["devices"][0])
    if not first.startswith("cuda"):
        return 0
    return device_index(first) % local_world_size


def node_measurements(outcomes: Sequence[tuple[int, bool, Any]], hosts: Sequence[str], label: str,
                      only_node: Optional[int] = None) -> list[Measurement]:
    """One measurement per node, ordered by node, from every rank's outcome of a launched copy.

    ``outcomes[r]`` is rank r's ``(node, ok, payload)``: ``(node, True, None)`` from a rank that did not
    measure, ``(node, True, Measurement.to_dict(with_samples=True))`` from the rank that did, and
    ``(node, False, traceback text)`` from a rank whose copy raised.  ``hosts[r]`` is rank r's host (may
    be empty).  Every node must have exactly one measurement; with ``only_node`` (a re-measure of one
    node's copy), that node one and the others none.

    Raises:
        RankError: the copy raised on some rank; the message names each (rank, host, node) with its
            traceback.
        CopyError: a node has no measurement, or more than one (the ranks disagree on who measures).
    """
    from ..ranks import report

    def where(r: int) -> str:
        host = hosts[r] if r < len(hosts) and hosts[r] else "?"
        return f"rank {r} on {host}, node {outcomes[r][0]}"

    errors = {r: f"({where(r)})\n{payload}" for r, (_, ok, payload) in enumerate(outcomes) if not ok}
    if errors:
        finished = [r for r in range(len(outcomes)) if r not in errors]
        raise report.task_error(label, len(outcomes), errors, finished)
    per_node: dict[int, list[int]] = {}
    for r, (node, _, payload) in enumerate(outcomes):
        per_node.setdefault(int(node), [])
        if payload is not None:
            per_node[int(node)].append(r)
    wrong = {node: ranks for node, ranks in per_node.items()
             if len(ranks) != (1 if only_node is None or node == only_node else 0)}
    if wrong:
        said = "; ".join(f"node {node}: {len(ranks)} measurements" + (f" (ranks {ranks})" if ranks else "")
                         for node, ranks in sorted(wrong.items()))
        what = "every node measures" if only_node is None else f"node {only_node} alone re-measures"
        raise CopyError(f"{label}: {what} a launched copy once, on one rank; {said}")
    if only_node is not None and only_node not in per_node:
        raise CopyError(f"{label}: node {only_node} has no rank in this job (nodes {sorted(per_node)})")
    return [Measurement.from_dict(outcomes[ranks[0]][2]) for _, ranks in sorted(per_node.items()) if ranks]

