"""A case of a baseline: its key (:func:`~pytest_gpucomm.vocab.case_key`: test, op, size, dtype, world and
layout, a word of the package root that the analysis shares), the key of its measurement on one node of a job
(:func:`node_key`: what the gate judges a node's copies and groups under), and its record in the run being saved
(:class:`CaseRecord`, made from a measurement), which :func:`pytest_gpucomm.gate.store.save_run` merges into the
file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from ..vocab import case_key

if TYPE_CHECKING:
    from ..measurement import Measurement

__all__ = ["case_key", "node_key", "split_node_key", "CaseRecord"]

_NODE_PART = re.compile(r"\|node([0-9]+)$")


def node_key(key: str, node: Optional[int]) -> str:
    """The key under which the gate judges case ``key`` as measured on ``node`` of a job across nodes (a
    node-local copy, an intra-node group: ``info["node"]``): ``<case key>|node<N>``, so that each node's verdict,
    model and levels stay that node's; ``key`` itself where ``node`` is None (one host, or the whole job).  The
    baseline file keeps the case key alone: a node's runs are told apart by their ``node``."""
    return key if node is None else f"{key}|node{int(node)}"


def split_node_key(key: str) -> tuple[str, Optional[int]]:
    """(case key, node) of a key :func:`node_key` made; (``key``, None) for a key without a node."""
    m = _NODE_PART.search(key)
    return (key, None) if m is None else (key[:m.start()], int(m.group(1)))


@dataclass
class CaseRecord:
    """One case's result in the run being saved: metadata, raw samples (GB/s) and a summary."""

    test_id: str
    op: str
    size_bytes: int
    world_size: int
    samples_gbps: Sequence[float]
    dtype: Optional[str] = None
    devices: Sequence[str] = ()
    summary: Mapping[str, object] = field(default_factory=dict)
    layout: str = ""  # "<nodes>x<ranks per node>" of a job across nodes (case_key), "" on one host
    tail: Optional[Mapping[str, object]] = None  # the single ops' TailSketch.to_dict(), where it has single ops

    @property
    def key(self) -> str:
        return case_key(self.test_id, self.op, self.size_bytes, self.dtype, self.world_size, self.layout)

    @classmethod
    def from_measurement(cls, measurement: "Measurement", test_id: str, layout: str = "") -> "CaseRecord":
        """Build from a measurement (read by its attributes: any object with them will do); a measurement
        with single ops (``info["tail"]``) keeps their :class:`~pytest_gpucomm.sketches.TailSketch`."""
        samples = [float(v) for v in measurement.samples_gbps]
        tail = None
        info = getattr(measurement, "info", None) or {}
        if isinstance(info.get("tail"), dict) and info["tail"].get("hist"):
            from ..sketches import TailSketch

            tail = TailSketch.from_info(info["tail"], f"{test_id}: info['tail']").to_dict()
        summary = {
            "median_gbps": float(measurement.gbps),
            "p50_us": float(measurement.p50_us),
            "p99_us": float(measurement.summary.p99_s * 1e6),
            "cv": float(measurement.summary.cv),
            "n": int(measurement.summary.n),
        }
        return cls(
            test_id=test_id,
            op=measurement.op,
            size_bytes=int(measurement.size_bytes),
            world_size=int(measurement.world_size),
            samples_gbps=samples,
            dtype=measurement.dtype,
            devices=tuple(measurement.devices),
            summary=summary,
            layout=layout,
            tail=tail,
        )
