"""Where the run-to-run spread of a collective lives: repeats in one process group vs new process groups.

    python benchmarks/run_noise.py [--ops all_reduce,all_gather] [--sizes 4KiB,64KiB,1MiB,256MiB] [--repeats 8]

For each case: ``--repeats`` measurements in ONE process group (each allocates new buffers and graphs, as a
test does), then ``--repeats`` measurements each in a NEW process group (new ranks, new communicator).
Prints the spread (sd of log median bandwidth, in %) of the repeats in each mode, and the mean within-run
standard error of the median.  If the new-group spread is much larger than the same-group spread, the
run-to-run noise is drawn at process-group start, and only new groups (the gate's re-measures) average it.
Uses the GPUs when there are at least two, else gloo on CPU.  ``--json PATH`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="all_reduce,all_gather")
    p.add_argument("--sizes", default="4KiB,64KiB,1MiB,256MiB")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--min-time", type=float, default=0.1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.repeats < 2:
        p.error(f"--repeats {args.repeats}: need at least 2")

    from pytest_gpucomm.gate.decision import run_location
    from pytest_gpucomm.group import ProcessGroup
    from pytest_gpucomm.hardware import detect
    from pytest_gpucomm.ops.collectives import to_measurement, worker_env
    from pytest_gpucomm.ranks import RankPool
    from pytest_gpucomm.units import parse_size

    info = detect("auto")
    world = 2 if (info.kind != "gpu" or info.count >= 2) else 1
    backend = info.backend

    def pool() -> RankPool:
        return RankPool(world, backend=backend, device=info.torch_device_type, env=worker_env(backend))

    def measure(group: ProcessGroup, op: str, n: int) -> tuple[float, float]:
        res = group.run("pytest_gpucomm.ops.collectives:bench",
                        {"op": op, "size_bytes": n, "dtype": "float32", "min_time_s": args.min_time})
        m = to_measurement(res, op=op, backend=backend, dtype="float32", requested_bytes=n)
        r = run_location(m.samples_gbps)
        return r.loc, r.se2

    cases = [(op, s) for op in args.ops.split(",") for s in args.sizes.split(",")]
    same: dict[str, list[tuple[float, float]]] = {f"{op} {s}": [] for op, s in cases}
    fresh: dict[str, list[tuple[float, float]]] = {f"{op} {s}": [] for op, s in cases}
    t0 = time.monotonic()
    with pool() as ex:
        g = ProcessGroup(ex, backend, 300.0)
        for _ in range(args.repeats):
            for op, s in cases:
                same[f"{op} {s}"].append(measure(g, op, parse_size(s)))
    t_same = time.monotonic() - t0
    t0 = time.monotonic()
    for _ in range(args.repeats):
        with pool() as ex:
            g = ProcessGroup(ex, backend, 300.0)
            for op, s in cases:
                fresh[f"{op} {s}"].append(measure(g, op, parse_size(s)))
    t_fresh = time.monotonic() - t0
    print(f"{info.headline()}; world {world} ({backend}); {args.repeats} repeats; same group {t_same:.1f} s, "
          f"new groups {t_fresh:.1f} s")
    print(f"{'case':<22} {'same group sd':>14} {'new groups sd':>14} {'within-run se':>14}")
    out = {}
    for key in same:
        sd_same = statistics.stdev(x for x, _ in same[key])
        sd_fresh = statistics.stdev(x for x, _ in fresh[key])
        se = math.sqrt(statistics.mean(v for _, v in same[key] + fresh[key]))
        out[key] = {"same_group_sd": sd_same, "new_group_sd": sd_fresh, "within_se": se,
                    "same": same[key], "fresh": fresh[key]}
        print(f"{key:<22} {sd_same:>13.2%} {sd_fresh:>13.2%} {se:>13.2%}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
