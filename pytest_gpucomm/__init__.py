"""pytest-gpucomm: GPU communication benchmarks as pytest tests, gated against per-hardware baselines.

    from pytest_gpucomm import bandwidth

    @bandwidth(min_gbps=40, size="16MB")
    def test_peer_copy(gpu_pair, comm):
        comm.copy(gpu_pair)

Importing this package is cheap: torch is imported only when a measurement runs, and pytest, numpy and
scipy only when a name that needs them is used (the rank workers import nothing of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .units import SizeError, format_size, parse_size
from .vocab import __version__  # defined in the vocabulary, below the layers that print it

__all__ = [
    "bandwidth",
    "latency",
    "sizes",
    "gpus",
    "world",
    "rank_timeout",
    "engines",
    "Measurement",
    "Remeasure",
    "parse_size",
    "format_size",
    "SizeError",
    "settings_of",
    "__version__",
]

#: the markers, as ``pytest.mark.<name>`` (resolved on first use, see ``__getattr__``):
#: ``@bandwidth(min_gbps=40, size="16MB")``: the median GB/s (busbw for collectives) must reach min_gbps;
#: ``@latency(max_us=25, size="8KB", percentile=99)``: the latency percentile must stay under max_us;
#: ``@sizes("4KB", "1MB")`` or ``@sizes(start="4KiB", stop="1GiB", factor=4)``: a sweep over sizes;
#: ``@gpus(2)``: the test needs two devices, else it is skipped with the reason;
#: ``@world(4)``: the process_group fixture of this test has four ranks;
#: ``@rank_timeout(30)``: the test's work on the ranks fails as hung after 30 seconds;
#: ``@engines("torch")``: the test runs on these engines of --gpucomm-engine only.
from .vocab import MARKER_NAMES as _MARKS  # noqa: E402


def __getattr__(name: str) -> Any:
    if name in _MARKS:
        import pytest

        value = globals()[name] = getattr(pytest.mark, name)  # pytest's own: kept
        return value
    # Looked up in .measurement on every use, never kept here: as in ._lazy, a class kept in this package
    # would outlive a re-import of its module (pytester's in-process runs drop the modules a run imported).
    if name == "Measurement":
        from .measurement import Measurement

        return Measurement
    if name == "Remeasure":
        from .measurement import Remeasure

        return Remeasure
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    import pytest

    from .measurement import Measurement, Remeasure  # noqa: F401

    from .plugin.settings import Settings


def settings_of(config: "pytest.Config") -> "Settings":
    """The gpucomm settings of a pytest session (options, environment and ini resolved)."""
    from .plugin.state import state_of

    return state_of(config).settings
