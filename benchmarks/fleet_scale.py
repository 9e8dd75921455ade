"""``gpucomm fleet`` at scale (issue 46): 1,000 generated node reports of the full suite (169 cases each, drawn
from the shipped 2 x H200 runs by ``fleet_reports.py``), judged against baselines/h200.json by the command in a
subprocess: its wall time, its CPU time (the command and its report readers together: what a quiet machine's
2 cores share) and its peak memory (the largest process's maximum resident set; the readers are one process per
core).  Target: under 60 s and 4 GB on the 2-core CI machine.

    PYTHONPATH=. python benchmarks/fleet_scale.py [--nodes 1000] [--folder DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet_reports as fr  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--folder", help="where the reports are written (default: a temporary folder, removed after)")
    ap.add_argument("--out", default=str(fr.ROOT / "benchmarks/data/fleet_scale.json"))
    args = ap.parse_args()
    src = fr.load_source("h200x2")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp) / "reports"
        t = time.time()
        slow = {7: ("copies between GPUs <= 1 MiB", 0.85)}  # one node to drain: its messages are written too
        drawn = fr.draw_fleet(src, args.nodes, np.random.default_rng(46), slow=slow)
        paths = fr.write_fleet(src, drawn, folder)
        wrote = time.time() - t
        size = sum(p.stat().st_size for p in paths)
        cmd = [sys.executable, "-m", "pytest_gpucomm", "fleet", str(folder), "--baseline",
               str(fr.ROOT / "baselines/h200.json"), "--drain", str(Path(tmp) / "drain.json"),
               "--junitxml", str(Path(tmp) / "junit.xml"), "--json", str(Path(tmp) / "fleet.json")]
        load = os.getloadavg()[0]  # other work on the machine slows the wall time, not the CPU time
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
        wall = time.time() - t
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_mb = used.ru_maxrss / 1024  # the largest process: the command, or one of its readers
        cpu_s = used.ru_utime + used.ru_stime  # the command and its readers together
        drain = json.loads((Path(tmp) / "drain.json").read_text())["drain"] if p.returncode in (0, 1) else None
    doc = {"command": "PYTHONPATH=. python benchmarks/fleet_scale.py", "nodes": args.nodes, "cases": len(src.cases),
           "reports_mb": round(size / 1e6, 1), "generate_s": round(wrote, 1), "wall_s": round(wall, 1),
           "cpu_s": round(cpu_s, 1), "peak_rss_mb_largest_process": round(peak_mb),
           "load_average_before": round(load, 2), "load_average_after": round(os.getloadavg()[0], 2),
           "exit": p.returncode, "drained": [d["node"] for d in drain or []],
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "tail": p.stdout.splitlines()[-6:]}
    print(json.dumps(doc, indent=1))
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    if p.returncode not in (0, 1):
        print(p.stderr, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
