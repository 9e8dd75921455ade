"""Peer-to-peer and host<->device copy bandwidth, over a sweep of sizes.

Every ordered GPU pair one way, every pair both ways at once (the figure counts the bytes of both
directions over the span of both), and pinned host memory to and from every GPU, from 4 KiB to 1 GiB.
Without a GPU, the pair tests copy between host buffers (the CPU variant) and the host<->device tests
are skipped with the reason.
"""

from pytest_gpucomm import sizes

SWEEP = sizes(start="4KiB", stop="1GiB", factor=4)


@SWEEP
def test_peer_copy(gpu_pair, size, comm):
    comm.copy(gpu_pair, size)


@SWEEP
def test_peer_copy_both_ways(gpu_link, size, comm):
    comm.copy_both_ways(gpu_link, size)


@SWEEP
def test_host_to_device(gpu, size, comm):
    comm.host_to_device(gpu, size)


@SWEEP
def test_device_to_host(gpu, size, comm):
    comm.device_to_host(gpu, size)
