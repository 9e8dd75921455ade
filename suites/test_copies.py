"""Peer-to-peer and host<->device copy bandwidth, over a sweep of sizes; and all peers at once.

Every ordered GPU pair one way, every pair both ways at once (the figure counts the bytes of both
directions over the span of both), and pinned host memory to and from every GPU, from 4 KiB to 1 GiB.
Above 4 GPUs the pair tests run over each GPU's ring neighbours unless --gpucomm-pairs=all says every pair
(on 8 GPUs every pair alone would take the copy suite past the 5 minutes a default run may take).

All peers at once, as nvbandwidth's one_to_all / all_to_one tests and TransferBench: each GPU writing to
every other at once, every other writing to it at once, and every ordered pair at once -- what the pair
tests cannot show (on an MI300X, all 7 xGMI links of a GPU busy together).  The figure is the aggregate:
the bytes of every copy over the span from their common start to the end of the last; each row's info has
the per-link figure (aggregate / links) and each link's own bandwidth.  They need 3 devices: on 2, one to
all and all to one are the one-way pair copies and every pair at once is the both-ways copy, measured
already (and a 2-GPU run, its baseline included, stays as it was).

Without a GPU, the pair tests and the patterns copy between host buffers (the CPU variant, over 2 logical
devices, or GPUCOMM_CPU_DEVICES of them: 8 gives the tests of an 8-GPU node) and the host<->device tests are
skipped with the reason.
"""

from pytest_gpucomm import gpus, sizes

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


@gpus(3)
@SWEEP
def test_copy_one_to_all(gpu_hub, size, comm):
    comm.copy_one_to_all(gpu_hub, size)


@gpus(3)
@SWEEP
def test_copy_all_to_one(gpu_hub, size, comm):
    comm.copy_all_to_one(gpu_hub, size)


@gpus(3)
@SWEEP
def test_copy_all_pairs(gpus, size, comm):
    comm.copy_all_pairs(size)
