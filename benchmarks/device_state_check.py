"""What the plugin says of the device's state on a real GPU (issue 29): the NVML reading in the fingerprint, the
clocks and throttle reasons of a measurement with and without a heavy kernel beside it, and the cause test on an
environment variable that changes a figure.

    python benchmarks/device_state_check.py [--var OMP_NUM_THREADS=1] [--out DIR]
    python benchmarks/device_state_check.py --cause-only --try CUDA_LAUNCH_BLOCKING=1 --try OMP_NUM_THREADS=1

1. **Fingerprint**: one short run of the host<->device copies writes its JSON report; the ``nvidia`` part of
   its fingerprint (PCIe, NVLink, VBIOS, ECC, modes, power limit, clocks, affinity) and the header's link
   findings are printed.
2. **Throttling**: the same copies measured while another process runs bf16 matrix products back to back
   (the GPU's power cap engages); each row's ``info["clocks"]`` says whether its device was throttled and why.
   The GPU's settings are left as they are: no power cap, clock lock or reset is touched.
3. **Cause**: a baseline of the small host<->device copies recorded in two sessions with ``--var`` set, then a
   run without it (``--gpucomm-env`` adds the variable to the recorded environment where it is not a
   communication variable); the REGRESSION rows' cause lines are printed.  With ``--try NAME=VALUE`` (more
   than once), the candidates are measured first, each set against none set, and the one that moves the
   small copies most is used, in the direction that makes today's run the slower: recorded with it where it
   speeds them, set today where it slows them.  ``--cause-only`` leaves out parts 1 and 2.

Everything runs ``python -m pytest`` on the shipped copy suite in subprocesses; nothing here imports torch but
the heavy-kernel process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = """
import time, torch
x = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(__import__("sys").argv[1])
while time.time() < end:
    for _ in range(4):
        y = x @ x
    torch.cuda.synchronize()
"""


def pytest_run(out: Path, name: str, *args: str, env: dict[str, str]) -> dict:
    report = out / f"{name}.json"
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "suites" / "test_copies.py"), "-q", "-p", "no:cacheprovider",
           "-p", "no:randomly", "--gpucomm-device=gpu", f"--gpucomm-json={report}", *args]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=out)
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    print(f"== {name}: exit {proc.returncode} in {time.time() - t0:.0f} s")
    return json.loads(report.read_text()) if report.exists() else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--var", default="OMP_NUM_THREADS=1", help="NAME=VALUE the baseline is recorded with")
    ap.add_argument("--out", default=None, help="folder for the reports and logs (default: a temporary one)")
    ap.add_argument("--try", dest="candidates", action="append", default=[], metavar="NAME=VALUE",
                    help="a candidate variable for the cause test (more than once): the one that moves the small "
                         "copies most is used")
    ap.add_argument("--cause-only", action="store_true", help="only the cause test (part 3)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="device-state-"))
    out.mkdir(parents=True, exist_ok=True)
    names = {v.partition("=")[0] for v in [args.var, *args.candidates]}
    base_env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith("GPUCOMM_")}
    small = ["-k", "host_to_device or device_to_host", "--gpucomm-max-size=1MiB"]
    if not args.cause_only:
        state(out, base_env)
    var, today = args.var, False
    if args.candidates:
        var, today = pick(out, small, base_env, args.candidates)
    cause(out, small, base_env, var, today)
    print(f"reports and logs in {out}")
    return 0


def speeds(doc: dict) -> dict[str, float]:
    return {row["test"].split("::")[-1]: float(row.get("busbw_gbps") or 0) for row in doc.get("rows") or []}


def pick(out: Path, small: list[str], base_env: dict[str, str], candidates: list[str]) -> tuple[str, bool]:
    """Each candidate set against none set: the one whose median ratio over the small copies is furthest from
    1, and whether it is to be set today (it slows them) rather than in the baseline (it speeds them)."""
    import statistics

    none = speeds(pytest_run(out, "try-none", *small, env=base_env))
    best, best_move, slows = candidates[0], 0.0, False
    for i, cand in enumerate(candidates):
        name, _, value = cand.partition("=")
        got = speeds(pytest_run(out, f"try-{i}", *small, env={**base_env, name: value}))
        ratios = [got[k] / none[k] for k in got if none.get(k)]
        med = statistics.median(ratios) if ratios else 1.0
        print(f"  {cand:40} set / unset: median {med:.3f}, "
              + " ".join(f"{k.split('[')[0][5:]}[{k.split('[')[1].split('-')[0]}] {r:.2f}"
                         for k, r in zip(got, ratios)))
        move = abs(med - 1)
        if move > best_move:
            best, best_move, slows = cand, move, med < 1
    print(f"cause test with {best} ({'set today' if slows else 'in the baseline'})")
    return best, slows


def state(out: Path, base_env: dict[str, str]) -> None:
    """Parts 1 and 2: the fingerprint's NVML reading, and the clocks beside a heavy kernel and alone."""

    doc = pytest_run(out, "fingerprint", "-k", "host_to_device", "--gpucomm-max-size=4KiB", env=base_env)
    nvidia = (doc.get("fingerprint") or {}).get("nvidia") or {}
    print("fingerprint nvidia source:", nvidia.get("source"), nvidia.get("sources"))
    for g in nvidia.get("gpus") or []:
        print(json.dumps(g, sort_keys=True))
    print("topology:", nvidia.get("topology"))
    log = (out / "fingerprint.log").read_text()
    print("header link lines:", [line for line in log.splitlines() if "WARNING" in line or "peer access" in line])

    heavy = subprocess.Popen([sys.executable, "-c", HEAVY, "60"], env=base_env)
    time.sleep(5)
    try:
        doc = pytest_run(out, "throttled", "-k", "host_to_device", "--gpucomm-max-size=64MiB", env=base_env)
    finally:
        heavy.terminate()
        heavy.wait()
    calm = pytest_run(out, "calm", "-k", "host_to_device", "--gpucomm-max-size=64MiB", env=base_env)
    for label, d in (("beside a heavy kernel", doc), ("alone", calm)):
        print(f"-- clocks {label}:")
        for row in d.get("rows") or []:
            for c in (row.get("info") or {}).get("clocks") or []:
                print(f"  {row['test'].split('::')[-1]:42} {row['busbw_gbps'] if 'busbw_gbps' in row else ''} "
                      f"sm {c.get('sm_mhz')} reasons {c.get('reasons')} throttled {c.get('throttled_share')}")



def cause(out: Path, small: list[str], base_env: dict[str, str], var: str, today: bool) -> None:
    """Part 3: a baseline recorded in two sessions, then a run that differs from it by ``var`` (set in the
    baseline, or set ``today``), with the cause test's lines."""
    name, _, value = var.partition("=")
    recorded, now = (base_env, {**base_env, name: value}) if today else ({**base_env, name: value}, base_env)
    baseline = out / "cause-baseline.json"  # not the report of the run named "cause" (cause.json)
    for session in ("s1", "s2"):
        for _ in range(2):
            pytest_run(out, f"record-{session}", *small, f"--gpu-baseline={baseline}", "--gpu-baseline-save",
                       f"--gpucomm-env={name}", env={**recorded, "GPUCOMM_BASELINE_SESSION": f"cause-{session}"})
    doc = pytest_run(out, "cause", *small, f"--gpu-baseline={baseline}", f"--gpucomm-env={name}", env=now)
    for row in doc.get("rows") or []:
        b = row.get("baseline") or {}
        cause = (b.get("cause") or {}).get("text", "")
        print(f"  {row['test'].split('::')[-1]:42} {row['status']:10} ratio {b.get('ratio') or 0:.3f} {cause}")
    print("\n".join(line for line in (out / "cause.log").read_text().splitlines() if "cause" in line))


if __name__ == "__main__":
    raise SystemExit(main())
