"""The executor of launched mode: the task runs here, in this pytest process, which is one rank of the job.

:class:`InProcessExecutor` has the interface of :class:`~pytest_gpucomm.ranks.pool.RankPool` that
:class:`~pytest_gpucomm.plugin.group.ProcessGroup` uses (``world_size``, ``run(task, kwargs, timeout_s=, label=)``,
``close()``): ``run`` calls ``function(ctx, **kwargs)`` on this rank -- every rank of the job does the same
in its own pytest process -- and then gathers every rank's outcome through the session's deadline-aware
exchange (:meth:`pytest_gpucomm.plugin.launched.JobExchange.exchange`), so that every rank returns the
per-rank results ordered by rank, or raises the same :class:`~.errors.RankError` naming the ranks that
raised (with their host and traceback).

``timeout_s`` bounds the task and the exchange together, from the moment the task starts on this rank: a
rank that has not arrived by then is named by the others (:class:`~pytest_gpucomm.plugin.launched.JobBroken`,
with its host and device; the session then ends), and its own watchdog ends it a grace period later, with
the stacks of its threads.

With a sub-group kind (``ctx.group`` set: one group per node, or one per local rank), every rank runs the
task in its own group at once, and ``run`` returns every rank of the job's result, ordered by global rank;
``subgroups`` lists the groups (:class:`~pytest_gpucomm.env.topology.SubGroup`), so that the caller can take
each group's results apart.

Imports torch only when a task runs.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Mapping, Optional, Sequence

from pytest_gpucomm.ranks import report
from pytest_gpucomm.ranks.context import RankContext, load_task

__all__ = ["InProcessExecutor"]


class InProcessExecutor:
    """Runs tasks on this rank of a launched job; see the module docstring.

    Args:
        ctx: this rank's context (its rank, world size, local rank, backend, device, host).
        session: the :class:`~pytest_gpucomm.plugin.launched.JobExchange` whose ``exchange`` gathers the
            outcomes (with a deadline) and whose ``watch`` / ``watchdog`` bound a hung task.
        hosts: the host of every rank, ordered by rank, for failure messages (may be empty).
        job_size: the ranks of the job, whose outcomes are gathered (default: ``ctx.world_size``; larger when
            ``ctx`` is a sub-group's).
        subgroups: the groups of ``ctx.group_kind`` that run at once (empty: the job's world is the group).

    ``world_size`` is the size of this rank's group (``ctx.world_size``).
    """

    #: a launched job's process group is the job's: it cannot be torn down and started again in-process
    restartable = False

    def __init__(self, ctx: RankContext, session: Any, hosts: tuple[str, ...] = (),
                 job_size: Optional[int] = None, subgroups: Sequence[Any] = ()) -> None:
        self.ctx = ctx
        self.session = session
        self.hosts = hosts
        self.world_size = ctx.world_size
        self.job_size = job_size or ctx.world_size
        self.kind = ctx.group_kind
        self.subgroups = tuple(subgroups)
        self.backend = ctx.backend
        self._tasks: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"InProcessExecutor(rank={self.ctx.rank}, world_size={self.world_size}, backend={self.backend!r})"

    def _where(self, rank: int) -> str:
        return f"{rank} on {self.hosts[rank]}" if rank < len(self.hosts) else str(rank)

    @staticmethod
    def describe(task: str, label: str) -> str:
        """``task M:F of test T`` from the task and the label ProcessGroup gives (``T (task M:F)`` or ``T``)."""
        suffix = f" (task {task})"
        test = label[:-len(suffix)] if label.endswith(suffix) else ("" if label in ("", task) else label)
        return f"task {task}" + (f" of test {test}" if test else "")

    def run(self, task: str, kwargs: Mapping[str, Any] | None = None, *, timeout_s: float,
            label: str = "") -> list[Any]:
        """Run ``task`` here; return every rank of the job's result, ordered by global rank.

        Raises:
            RankError: the task raised on some rank (on every rank alike, with each failing rank's traceback).
            JobBroken: some rank did not finish the task and the exchange within ``timeout_s`` (named, with
                its host and device), or the session was already broken (the task is not run).
        """
        what = self.describe(task, label)
        deadline = time.monotonic() + timeout_s
        session = self.session
        if session.broken is not None:  # a broken job's communicators may hang: run nothing on them
            from pytest_gpucomm.ranks.errors import JobBroken

            raise JobBroken(session.broken, ranks=(), label=label or task, timeout_s=timeout_s)
        session.watch(deadline, what, timeout_s, task=True)
        try:
            try:
                fn = self._tasks.get(task)
                if fn is None:
                    fn = self._tasks[task] = load_task(task)
                outcome: tuple[bool, Any] = (True, fn(self.ctx, **dict(kwargs or {})))
            except Exception:  # a KeyboardInterrupt or SystemExit stops this rank; the launcher stops the rest
                outcome = (False, traceback.format_exc())
            gathered = session.exchange(outcome, what=what, timeout_s=timeout_s, deadline=deadline)
        finally:
            session.watchdog.disarm()
        errors = {r: f"(rank {self._where(r)})\n{payload}" for r, (ok, payload) in enumerate(gathered) if not ok}
        if errors:
            finished = [r for r in range(self.job_size) if r not in errors]
            raise report.task_error(label or task, self.job_size, errors, finished)
        return [payload for _, payload in gathered]

    def close(self) -> None:
        """Nothing to stop: the job's process groups live as long as the session (see ``launched``)."""
