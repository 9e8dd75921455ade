"""One boot's share of a reference baseline (issue 43): gate runs against what is recorded so far, then new
recording runs, and the copy-engine figures of nvbandwidth beside them.

    python benchmarks/corpus_boot.py --name h100 --aa 2 --record 3 --out DIR [--nvbandwidth PATH]

Each machine boot is a session of the baseline (its runs share a label: host, boot and day), so a corpus
recorded over several boots runs this once per boot.  In order:

1. ``--aa N`` A/A runs: ``pytest suites/ --gpu-baseline=FILE`` against the runs recorded on earlier boots
   (skipped where the file does not exist yet), each writing its JSON report to DIR (``aa-<i>.json``), so that
   they can be judged again offline (``gpucomm compare FILE DIR/aa-1.json``);
2. ``--record N`` recording runs, ``--gpu-baseline-save`` into FILE (``rec-<i>.json`` in DIR);
3. with ``--nvbandwidth``, that binary's host->device and device->host copy-engine tests at 1 GiB (``-b 1024
   -i 5 -j``), the JSON kept as ``nvbandwidth.json``.

FILE is ``<--baseline-dir>/<--name>.json`` (default ``baselines/``).  Prints one line per run: exit status,
the verdict counts, and the host<->device figures at 1 MiB, 4 MiB and 1 GiB.  Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN = {"1MiB": 1 << 20, "4MiB": 4 << 20, "1GiB": 1 << 30}


def pytest_run(out: Path, name: str, baseline: Path, *args: str) -> dict:
    report = out / f"{name}.json"
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "suites"), "-q", "-p", "no:cacheprovider",
           f"--gpu-baseline={baseline}", f"--gpucomm-json={report}", *args]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    doc = json.loads(report.read_text()) if report.exists() else {}
    rows = doc.get("rows") or []
    counts = collections.Counter(str(r.get("status")) for r in rows)
    figures = " ".join(f"{r['op']} {label} {r['gbps']:.2f}" for label, size in SHOWN.items()
                       for r in rows if r.get("size_bytes") == size and r.get("op") in ("h2d", "d2h"))
    print(f"== {name}: exit {proc.returncode} in {time.time() - t0:.0f} s; "
          + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {figures}", flush=True)
    if proc.returncode not in (0, 1):
        print("\n".join(proc.stdout.splitlines()[-15:]))
    return doc


def nvbandwidth(binary: str, out: Path) -> None:
    cmd = [binary, "-t", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "-b", "1024", "-i", "5", "-j"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    (out / "nvbandwidth.json").write_text(proc.stdout)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        print(f"== nvbandwidth: exit {proc.returncode}, no JSON: {proc.stderr.strip()[-300:]}")
        return
    for test in doc.get("nvbandwidth", {}).get("testcases", []):
        print(f"== nvbandwidth {test.get('name')}: {test.get('status')} sum {test.get('sum')} GB/s "
              f"{json.dumps(test.get('bandwidth_matrix'))}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="the baseline's name (its file: <dir>/<name>.json)")
    ap.add_argument("--baseline-dir", default=str(ROOT / "baselines"))
    ap.add_argument("--aa", type=int, default=2, help="gate runs against the file before recording (default 2)")
    ap.add_argument("--record", type=int, default=3, help="recording runs (default 3)")
    ap.add_argument("--nvbandwidth", default=None, help="an nvbandwidth binary, run after the recordings")
    ap.add_argument("--out", required=True, help="folder for the reports and logs")
    ap.add_argument("--device", default="gpu", choices=("gpu", "cpu"), help="--gpucomm-device (default gpu)")
    ap.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    baseline = Path(args.baseline_dir) / f"{args.name}.json"
    extra = [f"--gpucomm-device={args.device}", *args.pytest_args]
    print(f"boot: {os.environ.get('GPUCOMM_BASELINE_SESSION') or 'host, boot and day'}; baseline {baseline} "
          f"({'exists' if baseline.exists() else 'new'})", flush=True)
    if baseline.exists():
        for i in range(1, args.aa + 1):
            pytest_run(out, f"aa-{i}", baseline, *extra)
    for i in range(1, args.record + 1):
        pytest_run(out, f"rec-{i}", baseline, "--gpu-baseline-save", *extra)
    if args.nvbandwidth:
        nvbandwidth(args.nvbandwidth, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
