"""How the gate decides on a baseline file's own runs: ``python -m pytest_gpucomm.gate.calibration``."""
import sys

from pytest_gpucomm.gate.calibration import main

sys.exit(main())
