"""How long a rank pool takes to start, its ranks forked from a zygote or each a new process.

    python benchmarks/rank_start.py [--device cpu|cuda] [--worlds 1,2,4] [--repeats 5] [--json out.json]

For each world size and way (``exec``: ``python -m pytest_gpucomm.ranks.worker`` per rank; ``fork``: forks of
one :class:`~pytest_gpucomm.ranks.spawn.Zygote`), starts a pool ``--repeats`` times, runs one all_reduce on it
(so that the process group works) and closes it; prints the median wall time from start to the all_reduce's
answer, and the CPU time its ranks used by then (``/proc/<pid>/stat``).  The zygote's own start (its imports) is timed
once, apart: a session pays it once, while its first pool's ranks would pay theirs each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_gpucomm.ranks.pool import RankPool  # noqa: E402
from pytest_gpucomm.ranks.spawn import Zygote  # noqa: E402

def _cpu_s(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (/proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_start(world: int, backend: str, device: str, zygote: Zygote | None) -> tuple[float, float]:
    """(wall seconds from the pool's start to its first all_reduce's answer, CPU seconds its ranks used)."""
    t0 = time.perf_counter()
    with RankPool(world, backend=backend, device=device, start_timeout_s=120, zygote=zygote) as pool:
        out = pool.run("rank_start:all_reduce_one", {}, timeout_s=120)
        wall = time.perf_counter() - t0
        cpu = sum(_cpu_s(pid) for pid in pool.pids)
    assert out == [float(world)] * world, out
    return wall, cpu


def all_reduce_one(ctx) -> float:  # type: ignore[no-untyped-def]
    import torch
    import torch.distributed as dist

    x = torch.ones(1, device=ctx.device)
    dist.all_reduce(x)
    return float(x.item())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--worlds", default="1,2,4")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    backend = "nccl" if args.device == "cuda" else "gloo"
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # this module, for the task
    worlds = [int(w) for w in args.worlds.split(",")]
    rows = []
    zygote = Zygote({}, backend)
    t0 = time.perf_counter()
    zygote.launch()
    one_start(1, backend, args.device, zygote)  # waits for its imports
    zygote_s = time.perf_counter() - t0
    print(f"zygote start and a first 1-rank pool: {zygote_s:.2f} s ({args.device}, {backend})")
    try:
        for world in worlds:
            for way in ("exec", "fork"):
                z = zygote if way == "fork" else None
                runs = [one_start(world, backend, args.device, z) for _ in range(args.repeats)]
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                rows.append({"world": world, "way": way, "median_wall_s": wall, "median_child_cpu_s": cpu,
                             "runs": len(runs)})
                print(f"world {world}  {way:4}  start + one all_reduce: median {wall:6.3f} s wall, "
                      f"{cpu:6.2f} s CPU in the ranks ({len(runs)} starts)")
    finally:
        zygote.close()
    if zygote.failed:
        print(f"the zygote failed: {zygote.failed}")
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "zygote_first_s": zygote_s, "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
