"""Where a host->device copy's run-to-run spread comes from (issue 43, item 5): our copy, raw runtime copies and
nvbandwidth at the same sizes, interleaved, each in a process of its own, over several rounds.

    python benchmarks/h2d_modes.py --sizes 1MiB,4MiB --rounds 6 [--nvbandwidth PATH] [--out DIR]

Per round, in an order that rotates from round to round:

- **ours**: ``pytest suites/test_copies.py`` at those sizes (host->device, and device->host with ``--both``),
  a new process: its median and, from its raw samples, the spread within the run;
- **raw**: ``python -m pytest_gpucomm.compare.raw_copies`` on that report's rows, a new process (cupy's
  ``cudaMemcpyAsync`` from pinned memory, batched behind a spin kernel, median of 30 batches);
- **nvbandwidth** (with ``--nvbandwidth``): ``host_to_device_memcpy_ce -b <MiB> -i 5`` per size, a new process.

A spread between processes that all three show is the machine's; one that only ours shows is ours.  Prints a
table of every round and each source's median, minimum, maximum and spread (sd of the log figure) per size;
``--out`` keeps the reports and a JSON of every figure.  Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_gpucomm.units import format_size, parse_size  # noqa: E402


def ours(out: Path, tag: str, sizes: list[int], both: bool) -> tuple[Path, dict[tuple[str, int], dict]]:
    report = out / f"ours-{tag}.json"
    names = " or ".join(f"[{format_size(s).replace(' ', '')}-" for s in sizes)
    ops = "host_to_device or device_to_host" if both else "host_to_device"
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "suites" / "test_copies.py"), "-q", "-p", "no:cacheprovider",
           "--gpucomm-device=gpu", f"--gpucomm-json={report}", "-k", f"({ops})"]
    proc = subprocess.run(cmd + [f"--gpucomm-max-size={max(sizes)}"], capture_output=True, text=True, cwd=ROOT)
    if not report.exists():
        raise SystemExit(f"ours: no report ({names}): {proc.stdout[-500:]}{proc.stderr[-500:]}")
    got = {}
    for row in json.loads(report.read_text())["rows"]:
        if row["size_bytes"] in sizes:
            logs = [math.log(row["bytes_per_iter"] / s / 1e9) for s in row["samples_s"]]
            q = statistics.quantiles(logs, n=4)
            got[(row["op"], row["size_bytes"])] = {"gbps": row["gbps"], "iqr_sd": (q[2] - q[0]) / 1.349,
                                                   "n": len(logs), "min": math.exp(min(logs)),
                                                   "max": math.exp(max(logs))}
    return report, got


def raw(report: Path, sizes: list[int]) -> dict[tuple[str, int], dict]:
    cmd = [sys.executable, "-m", "pytest_gpucomm.compare.raw_copies", "--ours-json", str(report),
           "--sizes", ",".join(str(s) for s in sizes), "--target-from", "1TiB"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    got = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0] in ("h2d", "d2h") and parts[2].isdigit():
            got[(parts[0], int(parts[2]))] = {"gbps": float(parts[4])}
    if not got:
        print(f"raw: nothing measured: {proc.stdout[-300:]}{proc.stderr[-300:]}", file=sys.stderr)
    return got


def nvbandwidth(binary: str, sizes: list[int], both: bool) -> dict[tuple[str, int], dict]:
    got = {}
    tests = [("h2d", "host_to_device_memcpy_ce")] + ([("d2h", "device_to_host_memcpy_ce")] if both else [])
    for size in sizes:
        mib = max(1, size >> 20)
        for op, test in tests:
            proc = subprocess.run([binary, "-t", test, "-b", str(mib), "-i", "5", "-j"], capture_output=True,
                                  text=True)
            try:
                case = json.loads(proc.stdout)["nvbandwidth"]["testcases"][0]
                got[(op, mib << 20)] = {"gbps": float(case["sum"])}
            except (ValueError, KeyError, IndexError, TypeError):
                print(f"nvbandwidth {test} -b {mib}: {proc.stdout[-300:]}{proc.stderr[-300:]}", file=sys.stderr)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1MiB,4MiB")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--both", action="store_true", help="device->host too")
    ap.add_argument("--nvbandwidth", default=None, help="an nvbandwidth binary")
    ap.add_argument("--out", default=None, help="folder for the reports and the figures (default: a temporary one)")
    args = ap.parse_args(argv)
    sizes = [parse_size(s, "--sizes") for s in args.sizes.split(",")]
    out = Path(args.out or tempfile.mkdtemp(prefix="h2d-modes-"))
    out.mkdir(parents=True, exist_ok=True)
    sources = ["ours", "raw"] + (["nvbandwidth"] if args.nvbandwidth else [])
    rounds: list[dict[str, dict]] = []
    for i in range(args.rounds):
        order = sources[i % len(sources):] + sources[:i % len(sources)]
        figures: dict[str, dict] = {}
        report = None
        for src in order:
            if src == "ours":
                report, figures["ours"] = ours(out, str(i), sizes, args.both)
            elif src == "raw":
                if report is None:  # raw reads the rows of a report: measure after ours this round
                    continue
                figures["raw"] = raw(report, sizes)
            else:
                figures["nvbandwidth"] = nvbandwidth(args.nvbandwidth, sizes, args.both)
        if "raw" not in figures and report is not None:
            figures["raw"] = raw(report, sizes)
        rounds.append(figures)
        print(f"round {i + 1} ({' '.join(order)}): " + "; ".join(
            f"{src} " + " ".join(f"{op} {format_size(s).replace(' ', '')} {v['gbps']:.1f}"
                                 + (f" (iqr {v['iqr_sd']:.1%})" if "iqr_sd" in v else "")
                                 for (op, s), v in sorted(figs.items()))
            for src, figs in sorted(figures.items())), flush=True)
    keys = sorted({k for r in rounds for figs in r.values() for k in figs})
    print(f"{'source':<12} {'op':<4} {'size':>6} {'median':>7} {'min':>6} {'max':>6} {'sd(log)':>8}  runs")
    for src in sources:
        for key in keys:
            vals = [r[src][key]["gbps"] for r in rounds if key in r.get(src, {})]
            if not vals:
                continue
            sd = statistics.stdev(math.log(v) for v in vals) if len(vals) > 1 else float("nan")
            print(f"{src:<12} {key[0]:<4} {format_size(key[1]).replace(' ', ''):>6} {statistics.median(vals):>7.2f} "
                  f"{min(vals):>6.2f} {max(vals):>6.2f} {sd:>8.1%}  {len(vals)}")
    (out / "h2d_modes.json").write_text(json.dumps(
        [{src: {f"{op} {s}": v for (op, s), v in figs.items()} for src, figs in r.items()} for r in rounds], indent=1))
    print(f"reports and figures in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
