"""The ``process_group`` fixture's object: a world of ranks that runs tasks."""

from __future__ import annotations

from typing import Any, Optional

import pytest

__all__ = ["ProcessGroup"]


class ProcessGroup:
    """A world of ranks that runs tasks.

    ``run("module:function", kwargs)`` calls ``function(ctx, **kwargs)`` on every rank and returns the
    per-rank results, ordered by rank.  The ranks are worker processes shared by every test of the
    session with the same world size; a failing, hanging or crashing rank fails the test with that
    rank's traceback or stack, and the workers are restarted for the next test.
    """

    def __init__(self, executor: Any, backend: str, timeout_s: float, label: str = "") -> None:
        self.executor = executor  # ranks.RankPool
        self.backend = backend
        self.timeout_s = timeout_s
        self.label = label  # the test id, named in failure messages

    @property
    def world_size(self) -> int:
        return int(self.executor.world_size)

    def run(self, task: str, kwargs: Optional[dict[str, Any]] = None, *, timeout_s: Optional[float] = None,
            label: str = "") -> list[Any]:
        """Run ``task`` on every rank; a rank that raises, hangs or dies fails the test."""
        from .ranks import RankFailure

        if not label:
            label = f"{self.label} (task {task})" if self.label else task
        try:
            return list(self.executor.run(task, kwargs or {}, timeout_s=timeout_s or self.timeout_s, label=label))
        except RankFailure as e:
            failure = str(e)
        pytest.fail(failure, pytrace=False)  # outside the except block: no chained traceback

    def restart(self) -> None:
        """Stop the ranks; the next run() starts them again with a new process group."""
        self.executor.close()

    def __repr__(self) -> str:
        return f"ProcessGroup(world_size={self.world_size}, backend={self.backend!r})"
