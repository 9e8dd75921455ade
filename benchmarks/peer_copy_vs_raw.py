"""Our copy figures against raw CUDA runtime copies: ``python -m pytest_gpucomm.compare.raw_copies``."""
import sys

from pytest_gpucomm.compare.raw_copies import main

sys.exit(main())
