"""Side-by-side comparisons of pytest-gpucomm's figures with other tools on the same machine.

* :mod:`pytest_gpucomm.compare.nccl_tests`: collectives against NVIDIA nccl-tests
  (``python -m pytest_gpucomm.compare.nccl_tests --help``), whose output :mod:`.nccl_output` reads;
* :mod:`pytest_gpucomm.compare.raw_copies`: peer and host copies against raw CUDA runtime copies
  (``python -m pytest_gpucomm.compare.raw_copies --help``).

Importing them imports no torch (the raw copies import cupy and torch when they run).
"""
