"""Other tools' result files read as runs of the same kind as ours: NVIDIA nccl-tests (and AMD's rccl-tests fork)
JSON written with ``-J FILE`` (with or without ``-I 1`` per-iteration times), and nvbandwidth JSON written with
``-j`` (docs/other-tools.md).

* :func:`read_foreign` reads one file (refused by its size before it is read, as every saved file is), tells
  which tool wrote it and gives a :class:`ForeignRun`: the tool, its version, the file, one
  :class:`ForeignCase` per figure (a test id of the tool's own, ``nccl-tests::...`` or ``nvbandwidth::...``,
  never one of ours, and a :class:`~pytest_gpucomm.measurement.Measurement` under our op names and size
  rules), and the environment that goes into the run's fingerprint;
* :func:`is_foreign` tells a parsed document of those tools from anything else, cheaply;
* :func:`report_of` makes the JSON report of a run, which ``gpucomm compare``, ``show``, ``html`` and
  ``baselines add`` read as they read one of ours (``report.saved``).

Every problem is a :class:`ForeignError` (a ValueError) whose message names the file and the field.  Standard
library and the package's own pure modules: no torch, no pytest, no numpy.
"""

from __future__ import annotations

from .run import (MAX_FOREIGN_BYTES, NVBANDWIDTH_DEFAULT_SIZE, ForeignCase, ForeignError, ForeignRun, foreign_of,
                  is_foreign, read_foreign)
from .report import FOREIGN_KEY, describe_foreign, report_of

__all__ = ["ForeignError", "ForeignRun", "ForeignCase", "read_foreign", "is_foreign", "foreign_of", "report_of",
           "describe_foreign", "FOREIGN_KEY", "MAX_FOREIGN_BYTES", "NVBANDWIDTH_DEFAULT_SIZE"]
