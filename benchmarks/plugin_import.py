#!/usr/bin/env python3
"""What loading pytest-gpucomm costs a pytest run that uses none of it.

Times ``pytest`` on an empty project (one plain test) with the plugin loaded and with ``-p no:gpucomm``,
in fresh processes, one of each in turn, and prints the median of the paired differences (each run with
the plugin minus the run without it next to it: a busy machine slows both of a pair).  The target is a
difference under 50 ms; the exit status is 1 when it is missed.  It also prints what importing the plugin
module itself takes (``python -X importtime``, the package's modules only) and which heavy modules (torch,
numpy, scipy, jsonschema, filelock, tabulate) loading the plugin imported: there should be none.

    python benchmarks/plugin_import.py [--runs 31] [--target-ms 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("torch", "numpy", "scipy", "jsonschema", "filelock", "tabulate")

PROBE = """
import json, sys
import pytest_gpucomm.plugin  # noqa: F401
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def _import_ms() -> float:
    """Cumulative import time of pytest_gpucomm.plugin after pytest is imported (its own modules only)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pytest; import pytest_gpucomm.plugin"],
                       check=True, capture_output=True, text=True)
    for line in p.stderr.splitlines():
        parts = [x.strip() for x in line.split("|")]
        if len(parts) == 3 and parts[2] == "pytest_gpucomm.plugin":
            return int(parts[1]) / 1e3
    return float("nan")


def _time_run(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=31, help="runs of each variant (default: 31)")
    p.add_argument("--target-ms", type=float, default=50.0, help="largest acceptable difference (default: 50)")
    args = p.parse_args(argv)
    if args.runs < 3:
        p.error(f"--runs {args.runs}: need at least 3 runs of each variant")
    heavy = json.loads(subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY)], check=True,
                                      capture_output=True, text=True).stdout)
    with tempfile.TemporaryDirectory(prefix="gpucomm-import-") as d:
        cwd = Path(d)
        (cwd / "test_plain.py").write_text("def test_plain():\n    pass\n")
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plain.py"]
        _time_run(base, cwd)  # warm the file cache once
        with_plugin, without = [], []
        for _ in range(args.runs):
            with_plugin.append(_time_run(base, cwd))
            without.append(_time_run(base + ["-p", "no:gpucomm"], cwd))
    med_with, med_without = statistics.median(with_plugin), statistics.median(without)
    diff_ms = statistics.median(a - b for a, b in zip(with_plugin, without)) * 1e3
    import_ms = statistics.median(_import_ms() for _ in range(5))
    print(f"pytest on an empty project, median of {args.runs} runs each:")
    print(f"  with pytest-gpucomm:  {med_with * 1e3:7.1f} ms")
    print(f"  with -p no:gpucomm:   {med_without * 1e3:7.1f} ms")
    print(f"  difference:           {diff_ms:7.1f} ms, median of the paired differences "
          f"(target < {args.target_ms:g} ms)")
    print(f"  importing pytest_gpucomm.plugin after pytest: {import_ms:.1f} ms (python -X importtime, median of 5)")
    print(f"  heavy modules imported by loading the plugin: {', '.join(heavy) if heavy else 'none'}")
    ok = diff_ms < args.target_ms and not heavy
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
