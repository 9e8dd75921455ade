"""Runs of the same configuration judged against each other on this machine (issue 43): no false REGRESSION,
and a slowdown injected into one op is caught.

    python benchmarks/aa_cpu.py [--suite suites/test_copies.py] [--runs 2] [--slowdown 0.30] [--hogs 2]
                                [--out DIR]

On a machine without a GPU (the CPU variants: host copies, gloo), in order:

1. one run recorded as the baseline (``--gpu-baseline=<DIR>/cpu.json --gpu-baseline-save``, its JSON report
   ``A.json``): a baseline of one run, whose spread the gate cannot know (no file of this hardware, no prior);
2. ``--runs`` unchanged runs gated against it live (its fresh re-measures in new processes), each also judged
   offline as a one-run A/B (``gpucomm compare A.json B<i>.json``): the REGRESSION verdicts and exit statuses;
3. one run with every copy of the op ``copy`` (test_peer_copy: host memory, one way) ``--slowdown`` slower, the
   slowdown injected in every process of the run (the pytest process and the pools its re-measures start) by a
   ``sitecustomize`` that scales the host copy's timed duration: which of its cases fail, and the exit status.

``--hogs N`` runs N busy loops beside every run (a loaded host, as CI's 2 cores under pytest-xdist).  Prints a
table; the reports stay in ``--out``.  Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SITECUSTOMIZE = """
import os
_f = os.environ.get("GPUCOMM_BENCH_SLOWDOWN")
if _f:
    import pytest_gpucomm.ops.copy_timing as _ct

    _scale = 1.0 / (1.0 - float(_f))
    _sample = _ct.HostCopy.sample

    def _slow(self, batch):
        timed = _sample(self, batch)
        if len(self.pairs) != 1:  # both ways: left alone; one way (the op "copy"): slowed
            return timed
        dt = timed() * _scale
        return lambda: dt

    _ct.HostCopy.sample = _slow
"""


def pytest_run(out: Path, name: str, args: list[str], env: dict[str, str]) -> tuple[int, dict]:
    report = out / f"{name}.json"
    cmd = [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "--gpucomm-device=cpu",
           f"--gpucomm-json={report}"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    doc = json.loads(report.read_text()) if report.exists() else {}
    statuses = collections.Counter(str(r.get("status")) for r in doc.get("rows") or [])
    print(f"== {name}: exit {proc.returncode} in {time.time() - t0:.0f} s; "
          + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())), flush=True)
    return proc.returncode, doc


def compare(a: Path, b: Path) -> tuple[int, int]:
    proc = subprocess.run([sys.executable, "-m", "pytest_gpucomm", "compare", str(a), str(b), "--no-curves"],
                          capture_output=True, text=True, cwd=ROOT)
    failed = sum(1 for line in proc.stdout.splitlines() if line.startswith("FAILED "))
    return proc.returncode, failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="suites/", help="what pytest runs (default: every shipped suite)")
    ap.add_argument("--runs", type=int, default=2, help="unchanged runs gated against the baseline (default 2)")
    ap.add_argument("--slowdown", type=float, default=0.30, help="the injected slowdown of the op copy (default 0.30)")
    ap.add_argument("--hogs", type=int, default=0, help="busy loops beside every run (default 0)")
    ap.add_argument("--out", default=None, help="folder for the baseline, reports and logs (default: a temporary one)")
    args = ap.parse_args(argv)
    if not 0 < args.slowdown < 1:
        ap.error(f"--slowdown {args.slowdown}: expected a fraction in (0, 1), e.g. 0.30")
    out = Path(args.out or tempfile.mkdtemp(prefix="aa-cpu-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "site").mkdir(exist_ok=True)
    (out / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCOMM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(out / "site"), *filter(None, [env.get("PYTHONPATH")])])
    baseline = out / "cpu.json"
    base_args = [args.suite, f"--gpu-baseline={baseline}"]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        pytest_run(out, "A", [*base_args, "--gpu-baseline-save"], env)
        rows = []
        for i in range(1, args.runs + 1):
            code, doc = pytest_run(out, f"B{i}", base_args, env)
            live = sum(1 for r in doc.get("rows") or [] if r.get("status") == "REGRESSION")
            off_code, off = compare(out / "A.json", out / f"B{i}.json")
            rows.append((f"B{i}", code, live, off_code, off))
        code, doc = pytest_run(out, "slow", base_args, {**env, "GPUCOMM_BENCH_SLOWDOWN": str(args.slowdown)})
    finally:
        for h in hogs:
            h.kill()
    slowed = [r for r in doc.get("rows") or [] if r.get("op") == "copy"]
    caught = [r for r in slowed if r.get("status") == "REGRESSION"]
    others = [r for r in doc.get("rows") or [] if r.get("op") != "copy" and r.get("status") == "REGRESSION"]
    print(f"{'run':<6} {'exit':>4} {'REGRESSION live':>15} {'compare exit':>12} {'REGRESSION offline':>18}")
    for name, c, live, oc, off in rows:
        print(f"{name:<6} {c:>4} {live:>15} {oc:>12} {off:>18}")
    print(f"copy {args.slowdown:.0%} slower: exit {code}; {len(caught)} of {len(slowed)} of its cases REGRESSION "
          f"({', '.join(r['test'].split('[')[-1].rstrip(']') for r in caught) or 'none'}); "
          f"{len(others)} other cases REGRESSION")
    print(f"reports and logs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
