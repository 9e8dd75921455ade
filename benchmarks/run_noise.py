"""Where the run-to-run spread lives, and which controls cut it.

Collectives (the default):

    python benchmarks/run_noise.py [--ops all_reduce,all_gather] [--sizes 4KiB,64KiB,1MiB,256MiB] [--repeats 8]

For each case: ``--repeats`` measurements in ONE process group (each allocates new buffers and graphs, as a
test does), then ``--repeats`` measurements each in a NEW process group (new ranks, new communicator).
Prints the spread (sd of log median bandwidth, in %) of the repeats in each mode, and the mean within-run
standard error of the median.  If the new-group spread is much larger than the same-group spread, the
run-to-run noise is drawn at process-group start, and only new groups (the gate's re-measures) average it.
Uses the GPUs when there are at least two, else gloo on CPU.

Host<->device copies (a GPU is needed):

    python benchmarks/run_noise.py --copies h2d,d2h [--sizes 4KiB,64KiB,1MiB,64MiB] [--repeats 6]
                                   [--processes 4] [--controls none,affinity,warmup,both]

Per control, ``--processes`` processes of their own each measure every case ``--repeats`` times with the
same buffers ("within a group") and ``--repeats`` times with new buffers and streams each time ("between
groups"); the spread between processes is that of the processes' means.  Controls: ``none`` (as the
suites measure), ``affinity`` (the process pinned to the CPUs local to the GPU, from
/sys/bus/pci/devices/<bus id>/local_cpulist), ``warmup`` (0.2 s of warm-up per case instead of 0.01 s, for
clocks to settle), ``both``.  ``--json PATH`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path


CONTROLS = ("none", "affinity", "warmup", "both")


def _local_cpus(device_index: int) -> set[int]:
    """The CPUs local to the GPU (its PCI device's local_cpulist), or every CPU this process may use."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        addr = f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
        try:
            text = Path(f"/sys/bus/pci/devices/{addr}/local_cpulist").read_text().strip()
            cpus: set[int] = set()
            for part in text.split(","):
                a, _, b = part.partition("-")
                cpus.update(range(int(a), int(b or a) + 1))
            return cpus & os.sched_getaffinity(0) or os.sched_getaffinity(0)
        except (OSError, ValueError):
            pass
    return os.sched_getaffinity(0)


def _copy_child(args: argparse.Namespace) -> int:
    """One process of the copies mode: prints {case: {"same": [...], "groups": [...]}} as JSON."""
    import dataclasses

    from pytest_gpucomm.gate.decision import run_location
    from pytest_gpucomm.ops.copies import BufferPool, measure_host_device
    from pytest_gpucomm.ops.timing import TimingSettings
    from pytest_gpucomm.units import parse_size

    settings = TimingSettings(min_time_s=args.min_time)
    if args.control in ("affinity", "both"):
        os.sched_setaffinity(0, _local_cpus(0))
    if args.control in ("warmup", "both"):
        settings = dataclasses.replace(settings, warmup_min_s=0.2, max_warmup_iters=100_000)
    out: dict[str, dict[str, list[float]]] = {}
    pool = BufferPool()
    for mode in ("same", "groups"):
        for _ in range(args.repeats):
            if mode == "groups":
                pool = BufferPool()
            for d in args.copies.split(","):
                for s in args.sizes.split(","):
                    m = measure_host_device("cuda:0", parse_size(s), d, settings, pool)
                    out.setdefault(f"{d} {s}", {"same": [], "groups": []})[mode].append(
                        run_location(m.samples_gbps).loc)
    print(json.dumps(out))
    return 0


def _copies(args: argparse.Namespace) -> int:
    import subprocess

    controls = [c for c in args.controls.split(",") if c]
    bad = [c for c in controls if c not in CONTROLS]
    if bad:
        raise SystemExit(f"--controls {args.controls!r}: unknown {', '.join(bad)}; choose from {', '.join(CONTROLS)}")
    doc: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'control':<9} {'case':<12} {'within a group':>15} {'between groups':>15} {'between processes':>18}")
    for c in controls:
        t0 = time.monotonic()
        procs = []
        for _ in range(args.processes):
            cmd = [sys.executable, __file__, "--child", "--control", c, "--copies", args.copies, "--sizes", args.sizes,
                   "--repeats", str(args.repeats), "--min-time", str(args.min_time)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise SystemExit(f"control {c}: a process failed (exit {r.returncode}): {r.stderr[-2000:]}")
            procs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        for case in procs[0]:
            same = [p[case]["same"] for p in procs]
            groups = [p[case]["groups"] for p in procs]
            within = math.sqrt(statistics.mean(statistics.variance(x) for x in same))
            between_g = math.sqrt(statistics.mean(statistics.variance(x) for x in groups))
            between_p = statistics.stdev(statistics.mean(x) for x in same) if len(same) > 1 else float("nan")
            doc.setdefault(c, {})[case] = {"within_group_sd": within, "between_groups_sd": between_g,
                                           "between_processes_sd": between_p, "same": same, "groups": groups}
            print(f"{c:<9} {case:<12} {within:>14.2%} {between_g:>14.2%} {between_p:>17.2%}")
        print(f"{c}: {args.processes} processes in {time.monotonic() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="all_reduce,all_gather")
    p.add_argument("--sizes", default=None, help="default: 4KiB,64KiB,1MiB,256MiB (copies: 4KiB,64KiB,1MiB,64MiB)")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--min-time", type=float, default=0.1)
    p.add_argument("--copies", default=None, help="h2d,d2h: the host<->device copies mode (a GPU is needed)")
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--controls", default=",".join(CONTROLS))
    p.add_argument("--control", default="none", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.repeats < 2:
        p.error(f"--repeats {args.repeats}: need at least 2")
    if args.copies is not None:
        if args.sizes is None:
            args.sizes = "4KiB,64KiB,1MiB,64MiB"
        if args.processes < 2:
            p.error(f"--processes {args.processes}: need at least 2")
        return _copy_child(args) if args.child else _copies(args)
    if args.sizes is None:
        args.sizes = "4KiB,64KiB,1MiB,256MiB"

    from pytest_gpucomm.gate.decision import run_location
    from pytest_gpucomm.plugin.group import ProcessGroup
    from pytest_gpucomm.env.hardware import detect
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
