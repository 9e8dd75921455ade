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

Host memory to and from each GPU at once (nvbandwidth's host_to_device_bidirectional_memcpy_ce and its
device_to_host twin in one test), from 1 MiB to 1 GiB, counted per direction: one direction's bytes over the
span of both; each row's info adds each direction's own figure as nvbandwidth counts it.

--gpucomm-copy-engine=sm makes the pair, host<->device and both-ways host copies with a copy kernel on the GPU's
own cores instead of the copy engines (nvbandwidth's *_memcpy_sm; ops copy_sm, ..., ids ending in -sm), =both
runs each of them once with each; the patterns stay copy-engine copies.

Without a GPU, the pair tests, the both-ways host copies and the patterns copy between host buffers (the CPU
variant, over 2 logical devices, or GPUCOMM_CPU_DEVICES of them: 8 gives the tests of an 8-GPU node; host to
and from a logical device is two threads at once; an "sm" copy is the cores' element-wise kernel instead of
memcpy) and the one-way host<->device tests are skipped with the reason.
"""

from pytest_gpucomm import gpus, sizes

SWEEP = sizes(start="4KiB", stop="1GiB", factor=4)
#: both ways between host and GPU from 1 MiB, as nvbandwidth compares them: 6 sizes instead of 10 keep the cost on
#: 8 GPUs to 48 cases (about 22 s at the shipped baseline's 0.45 s a copy case)
HOST_BOTH_WAYS_SWEEP = sizes(start="1MiB", stop="1GiB", factor=4)


@SWEEP
def test_peer_copy(gpu_pair, size, comm, copy_engine):
    comm.copy(gpu_pair, size, engine=copy_engine)


@SWEEP
def test_peer_copy_both_ways(gpu_link, size, comm, copy_engine):
    comm.copy_both_ways(gpu_link, size, engine=copy_engine)


@SWEEP
def test_host_to_device(gpu, size, comm, copy_engine):
    comm.host_to_device(gpu, size, engine=copy_engine)


@SWEEP
def test_device_to_host(gpu, size, comm, copy_engine):
    comm.device_to_host(gpu, size, engine=copy_engine)


@HOST_BOTH_WAYS_SWEEP
def test_host_both_ways(host_link, size, comm, copy_engine):
    comm.host_both_ways(host_link, size, engine=copy_engine)


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
