"""``python -m pytest_gpucomm``: the ``gpucomm`` command (:mod:`pytest_gpucomm.cli`)."""

import sys

from .cli import main

sys.exit(main())
