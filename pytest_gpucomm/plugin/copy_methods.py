"""The ``comm`` fixture's copies from one device to another (:class:`CopyMethods`, a part of
:class:`.measurer.Comm`): between devices one way and both ways, within a device, pinned host memory to and from a
GPU, and both ways between host and device; each by the copy engines or by a copy kernel (``engine``, default:
the test's ``copy_engine``, :meth:`CopyMethods._engine`).  The all-peers patterns are :class:`.measurer.Comm`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence, Union

import pytest

from ..units import SizeLike

if TYPE_CHECKING:
    from ..measurement import Measurement
    from .state import State

__all__ = ["CopyMethods", "GpuPair", "DeviceLike", "PairLike"]


class GpuPair(NamedTuple):
    """An ordered pair of devices, e.g. ("cuda:0", "cuda:1"); its test id is "0->1"."""

    src: str
    dst: str

    @property
    def id(self) -> str:
        return f"{self.src.split(':')[-1]}->{self.dst.split(':')[-1]}"


#: a device as a test names it: its name ("cuda:1", "cpu:0") or its index
DeviceLike = Union[str, int]
#: a device pair as a test gives it: a ``gpu_pair``, (source, destination), or the source with ``dst=``
PairLike = Union[GpuPair, Sequence[DeviceLike], DeviceLike]


class CopyMethods:
    """The copies of one source to one destination; the measuring itself is :meth:`.measurer.Comm._copy`'s."""

    if TYPE_CHECKING:
        _state: State
        _request: pytest.FixtureRequest

        def _copy(self, spec: dict[str, object]) -> Measurement: ...

        def _pair(self, pair: PairLike, dst: Optional[DeviceLike]) -> GpuPair: ...

        def _dev(self, d: object) -> str: ...

        def _size(self, size: Optional[SizeLike], what: str) -> int: ...

    def _engine(self, engine: Optional[str], what: str) -> str:
        """The engine of a copy: ``engine`` ("ce" or "sm"), else the test's ``copy_engine`` parameter, else
        "sm" where --gpucomm-copy-engine is sm and "ce" otherwise."""
        if engine is None:
            callspec = getattr(self._request.node, "callspec", None)
            if callspec is not None and "copy_engine" in callspec.params:
                return str(callspec.params["copy_engine"])
            return "sm" if self._state.settings.copy_engine == "sm" else "ce"
        if engine not in ("ce", "sm"):
            raise pytest.UsageError(f"{self._request.node.nodeid}: comm.{what}(engine={engine!r}): expected 'ce' "
                                    "(the copy engines) or 'sm' (a copy kernel)")
        return engine

    def copy(self, pair: PairLike, size: Optional[SizeLike] = None, *, dst: Optional[DeviceLike] = None,
             both_ways: bool = False, engine: Optional[str] = None) -> Measurement:
        """Peer copy pair.src -> pair.dst (both directions at once with both_ways=True); src and dst may be one
        device (a copy within it).  ``engine``: "ce" (the copy engines) or "sm" (a copy kernel on the source
        GPU; op ``copy_sm``, ``copy_bidir_sm``); default: the test's ``copy_engine`` (``_engine``)."""
        from ..ops.copies import PEER, copy_spec

        p = self._pair(pair, dst)
        n = self._size(size, "copy")
        return self._copy(copy_spec(PEER, [p.src, p.dst], n, both_ways=both_ways, engine=self._engine(engine, "copy")))

    def copy_both_ways(self, pair: PairLike, size: Optional[SizeLike] = None, *,
                       engine: Optional[str] = None) -> Measurement:
        return self.copy(pair, size, both_ways=True, engine=engine)

    def host_both_ways(self, device: DeviceLike, size: Optional[SizeLike] = None, *,
                       engine: Optional[str] = None) -> Measurement:
        """Host memory -> device and device -> host memory at once (pinned host memory on a GPU; two threads
        on host buffers in the CPU variant), counted per direction (:func:`.ops.copies.measure_host_both_ways`);
        op ``host_bidir``, by a copy kernel ``host_bidir_sm``."""
        from ..ops.copies import BOTH, HOST_DEVICE, copy_spec

        d, n = self._dev(device), self._size(size, "host_both_ways")
        return self._copy(copy_spec(HOST_DEVICE, [d], n, direction=BOTH, engine=self._engine(engine, "host_both_ways")))

    def host_to_device(self, device: DeviceLike, size: Optional[SizeLike] = None, *,
                       engine: Optional[str] = None) -> Measurement:
        """Pinned host memory -> device (``engine`` as :meth:`copy`; op ``h2d``, ``h2d_sm``)."""
        from ..ops.copies import HOST_DEVICE, copy_spec

        d, n = self._dev(device), self._size(size, "host_to_device")
        return self._copy(copy_spec(HOST_DEVICE, [d], n, direction="h2d",
                                    engine=self._engine(engine, "host_to_device")))

    def device_to_host(self, device: DeviceLike, size: Optional[SizeLike] = None, *,
                       engine: Optional[str] = None) -> Measurement:
        """Device -> pinned host memory (``engine`` as :meth:`copy`; op ``d2h``, ``d2h_sm``)."""
        from ..ops.copies import HOST_DEVICE, copy_spec

        d, n = self._dev(device), self._size(size, "device_to_host")
        return self._copy(copy_spec(HOST_DEVICE, [d], n, direction="d2h",
                                    engine=self._engine(engine, "device_to_host")))
