"""Pools of torch.distributed rank processes that run benchmark tasks.

Public API (imported lazily, so ``python -m pytest_gpucomm.ranks.worker`` stays light):

* :class:`RankPool` -- :mod:`.pool` (the run loop; processes are started by :mod:`.spawn`,
  stopped and reaped by :mod:`.processes`, failure messages written by :mod:`.report`,
  messages to and from the workers are the dataclasses of :mod:`.protocol`)
* :class:`InProcessExecutor` -- :mod:`.inprocess` (launched mode: the task runs in this
  pytest process, one rank of a job started by torchrun, srun or mpirun)
* :class:`RankContext`, :func:`load_task` -- :mod:`.context`
* :class:`RankFailure`, :class:`RankError`, :class:`RankTimeout`,
  :class:`RankCrash`, :class:`RankStartError` -- :mod:`.errors`
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "RankPool": "pool",
    "InProcessExecutor": "inprocess",
    "RankContext": "context",
    "load_task": "context",
    "RankFailure": "errors",
    "RankError": "errors",
    "RankTimeout": "errors",
    "RankCrash": "errors",
    "RankStartError": "errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
