"""A small CPU suite (a copy sweep and an all_reduce sweep of three sizes each) whose saved report and
baseline the tests of the plots, the HTML page and the gpucomm command draw, render and gate."""

SMALL_SUITE = """
from pytest_gpucomm import sizes

@sizes("4KiB", "16KiB", "64KiB")
def test_copy(gpu_pair, size, comm):
    comm.copy(gpu_pair, size)

@sizes("1KiB", "4KiB", "16KiB")
def test_ar(comm, process_group, size):
    comm.collective("all_reduce", process_group, size)
"""
