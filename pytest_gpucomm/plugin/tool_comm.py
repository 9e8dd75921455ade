"""The ``comm`` fixture's object on another engine than torch (``--gpucomm-engine``, :mod:`.engines`).

The same methods as :class:`~.measurer.Comm`, with the same checks of their arguments: a collective runs its
nccl-tests binary (one process, ``-g <world>``), ``copy`` (one way), ``host_to_device`` and ``device_to_host``
run nvbandwidth; the measurements that have no counterpart in those tools (the all-peers copy patterns, the
inter-node pair test, the training patterns, both-ways copies) skip the case, saying so.  A re-measure of the
gate is a new run of the program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import pytest

from .measurer import Comm, DeviceLike, PairLike

if TYPE_CHECKING:
    from ..measurement import Measurement
    from ..units import SizeLike
    from .group import ProcessGroup

__all__ = ["ToolComm"]


class ToolComm(Comm):
    """``comm`` for a case whose engine (``self.engine``) is another tool's binaries."""

    def _tool(self, measure: Callable[[bool], "Measurement"], program: str) -> "Measurement":
        """Keep ``measure(fresh=False)``; the gate's re-measures are ``measure(fresh=True)``, a new run."""
        how = f"in a new {program} process"
        return self._record(measure(False), lambda: measure(True), lambda: measure(True), how, how)

    def _none(self, what: str) -> Any:
        pytest.skip(f"comm.{what}() has no counterpart in nccl-tests or nvbandwidth: torch engine only")

    def collective(self, op: str, group: "ProcessGroup", size: Optional["SizeLike"] = None, *,
                   dtype: str = "float32", in_place: Optional[bool] = None, kind: Optional[str] = None
                   ) -> "Measurement":
        n, dtype, ip = self._collective_args(op, group, size, dtype, in_place)
        if kind not in (None, "world"):
            self._none(f"{op}(kind={kind!r})")
        engines, nodeid, world = self._state.engines, self._request.node.nodeid, group.world_size
        return self._tool(lambda fresh: engines.collective(nodeid, op, world, dtype, ip, n, fresh), "nccl-tests")

    def _tool_copy(self, op: str, devices: list[str], n: int) -> "Measurement":
        engines, nodeid = self._state.engines, self._request.node.nodeid
        return self._tool(lambda fresh: engines.copy(nodeid, op, devices, n, fresh), "nvbandwidth")

    def copy(self, pair: PairLike, size: Optional["SizeLike"] = None, *, dst: Optional[DeviceLike] = None,
             both_ways: bool = False, engine: Optional[str] = None) -> "Measurement":
        p = self._pair(pair, dst)
        n = self._size(size, "copy")
        if both_ways:
            self._none("copy(both_ways=True)")
        return self._tool_copy(self._op("copy", engine), [p.src, p.dst], n)

    def copy_both_ways(self, pair: PairLike, size: Optional["SizeLike"] = None, *,
                       engine: Optional[str] = None) -> "Measurement":
        return self._none("copy_both_ways")

    def host_both_ways(self, device: DeviceLike, size: Optional["SizeLike"] = None, *,
                       engine: Optional[str] = None) -> "Measurement":
        return self._none("host_both_ways")

    def host_to_device(self, device: DeviceLike, size: Optional["SizeLike"] = None, *,
                       engine: Optional[str] = None) -> "Measurement":
        return self._tool_copy(self._op("h2d", engine), [self._dev(device)], self._size(size, "host_to_device"))

    def device_to_host(self, device: DeviceLike, size: Optional["SizeLike"] = None, *,
                       engine: Optional[str] = None) -> "Measurement":
        return self._tool_copy(self._op("d2h", engine), [self._dev(device)], self._size(size, "device_to_host"))

    def _op(self, op: str, engine: Optional[str]) -> str:
        """nvbandwidth's test of the copy: its copy-engine test, or with ``engine="sm"`` (the test's
        ``copy_engine``) its copy by kernel (``*_memcpy_sm``)."""
        from ..ops.copies import sm_op

        return sm_op(op, self._engine(engine, op))

    def copy_one_to_all(self, hub: DeviceLike, size: Optional["SizeLike"] = None, *,
                        peers: Optional[Sequence[DeviceLike]] = None) -> "Measurement":
        return self._none("copy_one_to_all")

    def copy_all_to_one(self, hub: DeviceLike, size: Optional["SizeLike"] = None, *,
                        peers: Optional[Sequence[DeviceLike]] = None) -> "Measurement":
        return self._none("copy_all_to_one")

    def copy_all_pairs(self, size: Optional["SizeLike"] = None, *,
                       devices: Optional[Sequence[DeviceLike]] = None) -> "Measurement":
        return self._none("copy_all_pairs")

    def node_pairs(self, group: "ProcessGroup", pattern: str = "ring", size: Optional["SizeLike"] = None, *,
                   dtype: str = "float32") -> "Measurement":
        return self._none("node_pairs")

    def training(self, pattern: str, group: "ProcessGroup", model: str, *, scale: Optional[int] = None
                 ) -> "Measurement":
        return self._none("training")
