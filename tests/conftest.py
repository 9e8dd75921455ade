# Modules with compiled parts must be imported before pytester takes its sys.modules snapshot: pytester's
# in-process runs remove the modules imported during a run, and torch, numpy and scipy cannot be imported a
# second time in one process.  The gate's decision and store bring in numpy, scipy and jsonschema.
import torch  # noqa: F401

import pytest_gpucomm.gate.decision  # noqa: F401
import pytest_gpucomm.gate.store  # noqa: F401

pytest_plugins = ["pytester"]
