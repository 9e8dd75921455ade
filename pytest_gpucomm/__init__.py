"""pytest-gpucomm: GPU communication benchmarks as pytest tests, gated against per-hardware baselines.

    from pytest_gpucomm import bandwidth

    @bandwidth(min_gbps=40, size="16MB")
    def test_peer_copy(gpu_pair, comm):
        comm.copy(gpu_pair)

Importing this package is cheap: torch is imported only when a measurement runs.
"""

from __future__ import annotations

import pytest

from .measurement import Measurement
from .units import SizeError, format_size, parse_size

__all__ = [
    "bandwidth",
    "latency",
    "sizes",
    "gpus",
    "world",
    "rank_timeout",
    "Measurement",
    "parse_size",
    "format_size",
    "SizeError",
    "settings_of",
    "__version__",
]

__version__ = "0.1.0"

#: ``@bandwidth(min_gbps=40, size="16MB")``: the median GB/s (busbw for collectives) must reach min_gbps.
bandwidth = pytest.mark.bandwidth
#: ``@latency(max_us=25, size="8KB", percentile=99)``: the latency percentile must stay under max_us.
latency = pytest.mark.latency
#: ``@sizes("4KB", "1MB")`` or ``@sizes(start="4KiB", stop="1GiB", factor=4)``: a sweep over sizes.
sizes = pytest.mark.sizes
#: ``@gpus(2)``: the test needs two devices, else it is skipped with the reason.
gpus = pytest.mark.gpus
#: ``@world(4)``: the process_group fixture of this test has four ranks.
world = pytest.mark.world
#: ``@rank_timeout(30)``: the test's work on the ranks fails as hung after 30 seconds.
rank_timeout = pytest.mark.rank_timeout


def settings_of(config: pytest.Config):  # -> pytest_gpucomm.settings.Settings
    """The gpucomm settings of a pytest session (options, environment and ini resolved)."""
    from .session import STATE_KEY

    return config.stash[STATE_KEY].settings
