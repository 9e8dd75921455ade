#!/usr/bin/env python3
"""A stand-in for an nccl-tests perf binary (``all_reduce_perf``, ... are links to this file), for the tests of
``--gpucomm-engine`` on a machine without a GPU.

It prints what nccl-tests 2.19.6 prints and writes its JSON (``-J FILE``, with the ``*_per_iter`` blocks under
``-I 1``), from the run recorded on one H100 (``recorded/all_reduce_iter.json``: ``all_reduce_perf -g 1 -b 1K
-e 1G -f 4 -I 1``): each size asked takes the times of the recorded size nearest below it (the smallest for
a smaller one), scaled by the size asked over it, and its 20 per-iteration times drawn from that size's, so
a run's figures move a little from run to run as a real one's do.  It honours -b/-e/-f (K/M/G suffixes as
nccl-tests reads them), -g (the world: counts, busbw factors, the device lines), -d, -n, -I and -J.

The environment steers it: ``GPUCOMM_STANDIN_RUN`` seeds the draw (default 0), ``GPUCOMM_STANDIN_SLOWER``
multiplies every time (a regression), ``GPUCOMM_STANDIN_FAULT`` is ``hang`` (prints its header, starts a
child that sleeps, writes the child's pid to ``GPUCOMM_STANDIN_PIDFILE`` and sleeps), ``exit1`` (prints an
NCCL warning and exits 1) or ``wrong`` (#wrong 3 at every size, exit status 7 as nccl-tests).  Standard
library only.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDED = HERE / "recorded" / "all_reduce_iter.json"
#: busbw factor of each binary's op for n ranks (nccl-tests doc/PERFORMANCE.md)
FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}
#: the ops whose count is per rank (the size is the whole buffer)
PER_RANK = {"all_gather", "reduce_scatter", "alltoall"}
TYPES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int32": 4, "int8": 1}


def size_arg(text: str) -> int:
    """nccl-tests' parsesize: a number with an optional K, M or G (powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def parse(argv: list[str]) -> dict[str, object]:
    opts: dict[str, object] = {"b": 32 * 1024 * 1024, "e": 32 * 1024 * 1024, "f": 2, "g": 1, "d": "float",
                               "n": 20, "w": 1, "I": 0, "J": None, "c": 1}
    i = 0
    while i < len(argv):
        flag = argv[i].lstrip("-")
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if flag in ("b", "e"):
            opts[flag] = size_arg(value)
        elif flag in ("f", "g", "n", "w", "I", "c"):
            opts[flag] = int(value)
        elif flag in ("d", "J"):
            opts[flag] = value
        i += 2
    return opts


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s = s * factor if factor > 1 else s + 1
    return out


def timings(size: int, rows: list[dict], placement: str, rng: random.Random, n: int, scale: float) -> list[float]:
    """``n`` per-iteration times (us) of ``size`` from the recorded row nearest below it, scaled by size."""
    below = [r for r in rows if r["size"] <= size] or [rows[0]]
    row = max(below, key=lambda r: r["size"])
    times = row[f"{placement}_per_iter"]["times_us"]
    k = max(1.0, size / row["size"]) * scale * (1 + rng.gauss(0, 0.01))
    return [rng.choice(times) * k * (1 + rng.gauss(0, 0.005)) for _ in range(n)]


def main(argv: list[str]) -> int:
    program = Path(argv[0]).name
    op = program[:-len("_perf")]
    o = parse(argv[1:])
    world, dtype, iters = int(o["g"]), str(o["d"]), int(o["n"])
    recorded = json.loads(RECORDED.read_text())
    rows = recorded["results"]
    fault = os.environ.get("GPUCOMM_STANDIN_FAULT", "")
    seed = f"{os.environ.get('GPUCOMM_STANDIN_RUN', '0')}-{program}-{world}-{dtype}"
    rng = random.Random(seed)
    scale = float(os.environ.get("GPUCOMM_STANDIN_SLOWER", "1"))
    out = sys.stdout
    if o["J"]:
        print(f"# Writing JSON output to {o['J']}", file=out)
    print("# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809", file=out)
    print(f"# Collective test starting: {program}", file=out)
    print(f"# nThread 1 nGpus {world} minBytes {o['b']} maxBytes {o['e']} step: {o['f']}(factor) warmup iters: "
          f"{o['w']} iters: {iters} agg iters: 1 validation: {o['c']} graph: 0 unalign: 0", file=out)
    print("#\n# Using devices", file=out)
    for r in range(world):
        print(f"#  Rank {r:2d} Group  0 Pid {os.getpid():6d} on    standin device {r:2d} [0000:00:0{r}] "
              "Stand-in GPU", file=out)
    out.flush()
    if fault == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        pidfile = os.environ.get("GPUCOMM_STANDIN_PIDFILE")
        if pidfile:
            Path(pidfile).write_text(f"{os.getpid()} {child.pid}\n")
        time.sleep(3600)
    if fault == "exit1":
        print("standin: NCCL WARN Cuda failure 'out of memory'", file=out)
        print(f"standin: Test NCCL failure common.cu:1179 'unhandled cuda error' .. {program} pid {os.getpid()}",
              file=out)
        return 1
    wrong = 3 if fault == "wrong" else 0
    results = []
    per_iter = bool(o["I"])
    width = TYPES.get(dtype, 4)
    for size in sizes(int(o["b"]), int(o["e"]), int(o["f"])):
        count = size // width // (world if op in PER_RANK else 1)
        entry: dict[str, object] = {"size": size, "count": count, "type": dtype, "redop": "sum", "root": "    -1"}
        cols = []
        for placement in ("out_of_place", "in_place"):
            t = timings(size, rows, placement, rng, iters, scale)
            mean = sum(t) / len(t)
            alg = size / mean / 1e3
            bus = alg * FACTORS[op](world)
            entry[placement] = {"time": mean, "alg_bw": alg, "bus_bw": bus, "nwrong": float(wrong)}
            s = sorted(t)
            sd = (sum((x - mean) ** 2 for x in t) / len(t)) ** 0.5
            if per_iter:
                entry[f"{placement}_per_iter"] = {
                    "skipped_iterations": 0, "min_us": s[0], "max_us": s[-1], "avg_us": mean,
                    "p50_us": s[len(s) // 2], "p95_us": s[int(0.95 * (len(s) - 1))], "p99_us": s[-1],
                    "stdev_us": sd, "cv_pct": 100 * sd / mean, "times_us": t}
            cols.append(f"{mean:8.2f} {alg:7.2f} {bus:7.2f} {wrong:7d}")
            if per_iter:
                cols.append(f"{s[0]:8.2f} {s[-1]:8.2f} {s[-1]:8.2f} {100 * sd / mean:8.2f}")
        entry["actual_iterations"] = iters
        entry["experiment_name"] = ""
        results.append(entry)
        print(f"{size:12d} {count:13d} {dtype:>9s} {'sum':>7s} {-1:7d} " + " ".join(cols), file=out)
    print(f"# Out of bounds values : {wrong} {'FAILED' if wrong else 'OK'}", file=out)
    print("# Avg bus bandwidth    : 0 \n#\n# Collective test concluded: " + program + "\n#", file=out)
    if o["J"]:
        doc = {"version": recorded["version"], "start_time": time.strftime("%Y-%m-%d %H:%M:%S"), "args": argv,
               "env": [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "CUDA_"))],
               "nccl_version": recorded["nccl_version"],
               "config": dict(recorded["config"], ngpus=world, minimum_bytes=o["b"], maximum_bytes=o["e"],
                              step_factor=o["f"], iterations=iters, per_iter_timing="true" if per_iter else "false",
                              devices=[dict(recorded["config"]["devices"][0], rank=r, device=r, hostname="standin")
                                       for r in range(world)]),
               "results": results, "out_of_bounds": {"count": wrong, "okay": "false" if wrong else "true"},
               "average_bus_bandwidth": {"bandwidth": 0.0, "okay": "unchecked"}, "errors": [""],
               "end_time": time.strftime("%Y-%m-%d %H:%M:%S")}
        Path(str(o["J"])).write_text(json.dumps(doc, indent=1))
    return 7 if wrong else 0  # testNumResults, as nccl-tests' main returns on wrong values


if __name__ == "__main__":
    sys.exit(main(sys.argv))
