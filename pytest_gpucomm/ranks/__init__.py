"""Pools of torch.distributed rank processes that run benchmark tasks.

Public API (imported lazily, so ``python -m pytest_gpucomm.ranks.worker`` stays light):

* :class:`RankPool` -- :mod:`.pool` (the run loop; processes are started by :mod:`.spawn`,
  failure messages written by :mod:`.report`, messages to and from the workers are the
  dataclasses of :mod:`.protocol`)
* :class:`RankContext`, :func:`load_task` -- :mod:`.context`
* :class:`RankFailure`, :class:`RankError`, :class:`RankTimeout`,
  :class:`RankCrash`, :class:`RankStartError` -- :mod:`.errors`
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RankPool": "pool",
    "RankContext": "context",
    "load_task": "context",
    "RankFailure": "errors",
    "RankError": "errors",
    "RankTimeout": "errors",
    "RankCrash": "errors",
    "RankStartError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
