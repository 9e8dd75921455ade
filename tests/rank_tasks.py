"""Task functions run on rank processes by tests/test_ranks.py.

Each takes a :class:`pytest_gpucomm.ranks.context.RankContext` first and returns
something picklable. Imported by module name ``rank_tasks`` (tests/ is on
sys.path under pytest's default rootdir-relative import mode).
"""

from __future__ import annotations

import os
import time
from typing import Any

from pytest_gpucomm.ranks.context import RankContext


def whoami(ctx: RankContext) -> dict[str, Any]:
    """Identity of the rank plus its pid."""
    return {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "local_rank": ctx.local_rank,
        "backend": ctx.backend,
        "device": ctx.device,
        "pid": os.getpid(),
    }


def allreduce_sum(ctx: RankContext, scale: float = 1.0) -> list[float]:
    """all_reduce(SUM) of a tensor [rank+1, 10*(rank+1)] * scale."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([ctx.rank + 1.0, 10.0 * (ctx.rank + 1)], device=ctx.device) * scale
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().tolist()


def raise_on_rank(ctx: RankContext, bad_rank: int = 1, collective_after: bool = False) -> int:
    """Raise on ``bad_rank``; the others optionally enter a collective afterwards."""
    if ctx.rank == bad_rank:
        raise ValueError(f"deliberate failure on rank {ctx.rank}")
    if collective_after:
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(1))
    return ctx.rank


def sleep_forever_on_rank(ctx: RankContext, bad_rank: int = 1) -> int:
    """``bad_rank`` never returns; the others return at once."""
    if ctx.rank == bad_rank:
        while True:
            time.sleep(3600)
    return ctx.rank


def lonely_collective(ctx: RankContext, lonely_rank: int = 0) -> int:
    """Only ``lonely_rank`` enters an all_reduce, which therefore never completes."""
    if ctx.rank == lonely_rank:
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(1))
    return ctx.rank


def exit_on_rank(ctx: RankContext, bad_rank: int = 1, code: int = 3) -> int:
    """``bad_rank`` dies with os._exit(code); the others wait in a collective."""
    if ctx.rank == bad_rank:
        os._exit(code)
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))
    return ctx.rank


def unpicklable_result(ctx: RankContext) -> Any:
    """Returns something that cannot be pickled."""
    return lambda: ctx.rank


def kill_self_on_rank(ctx: RankContext, bad_rank: int = 1) -> int:
    """``bad_rank`` SIGKILLs itself; the others return."""
    if ctx.rank == bad_rank:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    return ctx.rank


def getenv(ctx: RankContext, names: list[str]) -> dict[str, str | None]:
    """Values of the given environment variables on this rank."""
    return {name: os.environ.get(name) for name in names}


_children: list[Any] = []  # keeps the Popen objects of start_sleeper alive (no warnings)


def start_sleeper(ctx: RankContext, seconds: int = 1000) -> dict[str, Any]:
    """Start a ``sleep`` child left running after the task returns; its pid and start time."""
    import subprocess

    from proc_helpers import process_start_time

    child = subprocess.Popen(["sleep", str(seconds)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _children.append(child)
    return {"rank": ctx.rank, "pid": child.pid, "start": process_start_time(child.pid)}


def start_sleeper_then_exit_on_rank(ctx: RankContext, bad_rank: int = 1,
                                    marker_dir: str = "") -> int:
    """Every rank starts a ``sleep`` child (pid+start time written to ``marker_dir``);
    ``bad_rank`` then dies with os._exit(3), the others wait in a collective."""
    import json

    info = start_sleeper(ctx)
    path = os.path.join(marker_dir, f"rank{ctx.rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)
    return exit_on_rank(ctx, bad_rank=bad_rank, code=3)


def iteration_stats_of(ctx: RankContext, samples_by_rank: list[list[float]],
                       entries_by_rank: list[list[float] | None] | None = None, batch: int = 1) -> Any:
    """``ops.across_ranks.iteration_stats`` of this rank's entry of ``samples_by_rank`` (hand-made times), and of
    ``entries_by_rank`` (when each op began, on the rank's own clock) where given."""
    import torch
    import torch.distributed as dist

    from pytest_gpucomm.ops.across_ranks import iteration_stats

    entries = entries_by_rank[ctx.rank] if entries_by_rank is not None else None
    return tuple(iteration_stats(torch, dist, samples_by_rank[ctx.rank], ctx.rank, ctx.world_size, ctx.device,
                                 entries=entries, batch=batch))


def bench_in_subgroups(ctx: RankContext, groups: list[list[int]], kwargs: dict[str, Any]) -> Any:
    """Make every group of ``groups`` (every rank, in order, as launched mode does), then run the collectives'
    bench over this rank's own group, with ``ctx`` made the group's (rank and size within it)."""
    import dataclasses

    import torch.distributed as dist

    from pytest_gpucomm.ops.collectives import bench

    mine, handle = None, None
    for g in groups:
        h = dist.new_group(g, backend="gloo")
        if ctx.rank in g:
            mine, handle = g, h
    assert mine is not None
    sub = dataclasses.replace(ctx, rank=mine.index(ctx.rank), world_size=len(mine), group=handle,
                              group_kind="sub", group_ranks=tuple(mine))
    try:
        return bench(sub, **kwargs)
    finally:
        dist.barrier()  # every group done before this rank leaves its own
        dist.destroy_process_group(handle)


def start_session_sleepers(ctx: RankContext, seconds: int = 301) -> list[dict[str, Any]]:
    """Start two ``sleep`` processes outside the rank's process group and leave them running: a child in a
    session of its own, and a daemon-like grandchild (``setsid sh -c 'sleep &'``, its parent exits at once);
    the pid and start time of each."""
    import subprocess

    from proc_helpers import process_start_time

    child = subprocess.Popen(["sleep", str(seconds)], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _children.append(child)
    shell = subprocess.run(["sh", "-c", f"sleep {int(seconds)} >/dev/null 2>&1 </dev/null & echo $!"],
                           start_new_session=True, capture_output=True, text=True, check=True)
    grandchild = int(shell.stdout.split()[0])
    return [{"rank": ctx.rank, "pid": p, "start": process_start_time(p)} for p in (child.pid, grandchild)]


def start_session_sleepers_then_hang(ctx: RankContext, marker_dir: str) -> int:
    """:func:`start_session_sleepers` (written to ``marker_dir``/rank<N>.json), then sleep until killed."""
    import json
    import time

    info = start_session_sleepers(ctx)
    path = os.path.join(marker_dir, f"rank{ctx.rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)
    time.sleep(3600)
    return 0
