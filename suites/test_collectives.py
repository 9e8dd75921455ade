"""Collectives over a process group of every visible GPU (gloo ranks on CPU), over a sweep of sizes.

busbw and algbw as nccl-tests defines them; each result is checked after timing.  all_gather and
reduce_scatter run out of place and in place; all_reduce, broadcast and reduce exist only in place in
torch.distributed; all_to_all and send/recv only out of place.  --gpucomm-dtype picks the element types
(float32 by default; bfloat16, float16 on request).

In a job launched on several nodes each case runs over three group kinds, named in the test id
(``test_collective[float32-intra-node-4KiB-all_reduce-inplace]``): the whole world, each node's ranks
(every node at once: one row per node) and one rank per node (local rank k of every node, every k at once:
one row per local rank, the path through the NICs).  On one host the ids are as without kinds.
"""

import pytest

from pytest_gpucomm import settings_of, sizes
from pytest_gpucomm.ops.collectives import OPS

SWEEP = sizes(start="1KiB", stop="1GiB", factor=4)

#: every op in every form torch.distributed has for it: (op, in_place)
CASES = [(op, form == "in_place") for op, spec in OPS.items() for form in spec.forms]


def pytest_generate_tests(metafunc):
    if "dtype" in metafunc.fixturenames:
        metafunc.parametrize("dtype", settings_of(metafunc.config).dtypes)


@pytest.mark.parametrize(
    "op, in_place", CASES, ids=[f"{op}-{'in' if ip else 'out'}place" for op, ip in CASES]
)
@SWEEP
def test_collective(op, in_place, dtype, group_kind, process_group, size, comm):
    comm.collective(op, process_group, size, dtype=dtype, in_place=in_place)
