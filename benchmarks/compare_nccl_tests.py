"""Compare pytest-gpucomm collective results with nccl-tests: ``python -m pytest_gpucomm.compare.nccl_tests``."""
import sys

from pytest_gpucomm.compare.nccl_tests import main

sys.exit(main())
