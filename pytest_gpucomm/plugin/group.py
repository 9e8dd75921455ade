"""The ``process_group`` fixture's object: a world of ranks that runs tasks."""

from __future__ import annotations

import math
from typing import Any, Optional

import pytest

from ..vocab import MAX_TIMEOUT_S

__all__ = ["ProcessGroup"]


class ProcessGroup:
    """A world of ranks that runs tasks.

    ``run("module:function", kwargs)`` calls ``function(ctx, **kwargs)`` on every rank and returns the
    per-rank results, ordered by rank.  The ranks are worker processes shared by every test of the
    session with the same world size; a failing, hanging or crashing rank fails the test with that
    rank's traceback or stack, and the workers are restarted for the next test.

    In a launched job of several nodes a group of ``kind`` ``"intra-node"`` or ``"inter-node"`` runs the task
    on every rank of the job, each over its own group of that kind (``ctx.group``; ``ctx.rank`` and
    ``ctx.world_size`` within it), and ``run`` returns every rank of the job's result, ordered by global rank;
    ``world_size`` is the size of this rank's group.
    """

    def __init__(self, executor: Any, backend: str, timeout_s: float, label: str = "") -> None:
        self.executor = executor  # ranks.RankPool, or ranks.InProcessExecutor in launched mode
        self.backend = backend
        self.timeout_s = timeout_s
        self.label = label  # the test id, named in failure messages

    @property
    def world_size(self) -> int:
        return int(self.executor.world_size)

    def run(self, task: str, kwargs: Optional[dict[str, object]] = None, *, timeout_s: Optional[float] = None,
            label: str = "", timeout: Optional[float] = None) -> list[Any]:
        """Run ``task`` on every rank; a rank that raises, hangs or dies fails the test.  ``timeout_s``
        (``timeout`` is its old name) overrides the test's rank timeout."""
        from ..ranks import RankFailure

        if timeout is not None:
            if timeout_s is not None:
                pytest.fail("process_group.run(): give timeout_s, not both timeout_s and timeout", pytrace=False)
            timeout_s = timeout
        if timeout_s is not None:
            ok = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) \
                and math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S
            if not ok:
                pytest.fail(f"{self.label or task}: process_group.run(timeout_s={timeout_s!r}): expected a positive "
                            f"number of seconds, at most {MAX_TIMEOUT_S:g}", pytrace=False)
        if not label:
            label = f"{self.label} (task {task})" if self.label else task
        try:
            return list(self.executor.run(task, kwargs or {}, timeout_s=timeout_s or self.timeout_s, label=label))
        except RankFailure as e:
            failure = str(e)
        pytest.fail(failure, pytrace=False)  # outside the except block: no chained traceback

    @property
    def kind(self) -> str:
        """``"world"`` (every rank of the group), or in a launched job of several nodes ``"intra-node"`` /
        ``"inter-node"``: every rank runs the task in its own group of that kind (see :mod:`.topology`)."""
        return str(getattr(self.executor, "kind", "world"))

    @property
    def restartable(self) -> bool:
        """Whether :meth:`restart` gives new ranks (a pool does; a launched job's process group does not)."""
        return bool(getattr(self.executor, "restartable", True))

    def restart(self) -> None:
        """Stop the ranks; the next run() starts them again with a new process group."""
        self.executor.close()

    def __repr__(self) -> str:
        return f"ProcessGroup(world_size={self.world_size}, backend={self.backend!r})"
