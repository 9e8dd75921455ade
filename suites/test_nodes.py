"""The inter-node pair test, over a sweep of sizes: the GPU of local rank k on one node sends to local rank k
on another, every local rank at once, over a ring of the nodes (every link of the ring at once) and
pairwise (each pair of nodes in turn, both ways at once; jobs of at most 4 nodes).

One row per node pair ("node 0 (h0) -> node 1 (h1)"): the bandwidth of each GPU pair across the two nodes,
one way (S / t, busbw = algbw), so that a slow node or NIC shows up as the pairs it is in.  Runs in a job
launched on two nodes or more (torchrun, srun, mpirun); skipped with the reason elsewhere.
"""

import pytest

from pytest_gpucomm import sizes

SWEEP = sizes(start="4KiB", stop="1GiB", factor=4)


@pytest.mark.parametrize("pattern", ["ring", "pairwise"])
@SWEEP
def test_node_pairs(pattern, process_group, size, comm):
    comm.node_pairs(process_group, pattern, size)
