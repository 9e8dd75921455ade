"""What the plugin says of the device's state on a real GPU (issue 29): the NVML reading in the fingerprint, the
clocks and throttle reasons of a measurement with and without a heavy kernel beside it, and the cause test on an
environment variable that changes a figure.

    python benchmarks/device_state_check.py [--var OMP_NUM_THREADS=1] [--out DIR]

1. **Fingerprint**: one short run of the host<->device copies writes its JSON report; the ``nvidia`` part of
   its fingerprint (PCIe, NVLink, VBIOS, ECC, modes, power limit, clocks, affinity) and the header's link
   findings are printed.
2. **Throttling**: the same copies measured while another process runs bf16 matrix products back to back
   (the GPU's power cap engages); each row's ``info["clocks"]`` says whether its device was throttled and why.
   The GPU's settings are left as they are: no power cap, clock lock or reset is touched.
3. **Cause**: a baseline of the small host<->device copies recorded in two sessions with ``--var`` set, then a
   run without it (``--gpucomm-env`` adds the variable to the recorded environment where it is not a
   communication variable); the REGRESSION rows' cause lines are printed.

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
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="device-state-"))
    out.mkdir(parents=True, exist_ok=True)
    name, _, value = args.var.partition("=")
    base_env = {k: v for k, v in os.environ.items() if k != name and not k.startswith("GPUCOMM_")}
    small = ["-k", "host_to_device or device_to_host", "--gpucomm-max-size=1MiB"]

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

    baseline = out / "cause.json"
    for session in ("s1", "s2"):
        for _ in range(2):
            pytest_run(out, f"record-{session}", *small, f"--gpu-baseline={baseline}", "--gpu-baseline-save",
                       env={**base_env, name: value, "GPUCOMM_BASELINE_SESSION": f"cause-{session}"})
    doc = pytest_run(out, "cause", *small, f"--gpu-baseline={baseline}", f"--gpucomm-env={name}", env=base_env)
    for row in doc.get("rows") or []:
        b = row.get("baseline") or {}
        cause = (b.get("cause") or {}).get("text", "")
        print(f"  {row['test'].split('::')[-1]:42} {row['status']:10} ratio {b.get('ratio') or 0:.3f} {cause}")
    print("\n".join(line for line in (out / "cause.log").read_text().splitlines() if "cause" in line))
    print(f"reports and logs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
