"""How the default suites grow with the GPU count: test counts, CPU wall time, and a per-case cost model.

    python benchmarks/suite_time_vs_gpus.py [--devices 2,4,8] [--pairs auto,all,neighbours,from0]
        [--run suites/test_copies.py] [--max-size 64KiB] [--min-time 0.005]
        [--junitxml H200.xml ...] [--per-case-s SUITE=SECONDS ...] [--from-baseline baselines/h200.json]
        [--budget-s 300] [--json OUT.json]

For each device count N (the CPU variants' logical devices, ``GPUCOMM_CPU_DEVICES=N``) and each
``--gpucomm-pairs`` choice (``auto``: the plugin's default for N):

* **counts**: the tests the suites (``--count``: copies, collectives, training traffic) run as on N GPUs,
  per test function: collected on CPU with the GPU sweep (``--gpucomm-max-size=1GiB``); a test that the
  CPU variant collects once and skips for want of a GPU (id ``no-gpu``: host<->device) counts N times, one
  whose ``@gpus(n)`` asks for more than N devices (the all-peers patterns on 2) counts 0;
* **CPU run**: the wall time of ``pytest --run`` (default the copy suite) on N logical CPU devices at a small
  ``--max-size`` and ``--min-time``: how the plugin's own cost (collection, set-up, one case after another)
  grows with N, whatever the hardware;
* **model**: the GPU suite time = sum over test functions of (count at N) x (seconds per case).  The
  seconds per case come, per test function, from JUnit XML files of a GPU run (``--junitxml``: pytest's
  ``--junitxml`` of ``pytest suites/`` on the H200: the mean duration of the function's tests that ran; one
  whose tests were all skipped costs their mean, about 0), else per suite file from ``--per-case-s
  SUITE=SECONDS`` (``copies=0.33``; SUITE a file name without ``test_`` and ``.py``), else from
  ``--from-baseline`` (default ``baselines/h200.json``): a baseline run records when it started measuring
  (its fingerprint's date: the gate loads the baseline once collection is done) and when it was saved (its
  date), so a run that holds one suite's cases alone gives that suite's seconds per case (the median over
  such runs).  A suite with no cost is left out of the model and named.  The model's total is compared
  with ``--budget-s`` (5 minutes: what the default suites may take on 8 GPUs).

``--json`` keeps every figure.  Runs nothing on a GPU: it measures the plugin on CPU and takes the GPU cost
per case from a GPU run's files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
COUNT_SUITES = ("suites/test_copies.py", "suites/test_collectives.py", "suites/test_training_traffic.py")
PAIR_CHOICES = ("auto", "all", "neighbours", "from0")
#: the GPU sweep's largest size: the counts are those of a GPU run (the CPU default stops at 16 MiB)
GPU_MAX_SIZE = "1GiB"


def suite_of(nodeid: str) -> str:
    """``suites/test_copies.py::test_peer_copy[4KiB-0->1]`` -> ``copies``."""
    name = Path(nodeid.split("::", 1)[0]).name
    return name.removeprefix("test_").removesuffix(".py")


def function_of(nodeid: str) -> str:
    """``suites/test_copies.py::test_peer_copy[4KiB-0->1]`` -> ``copies::test_peer_copy``."""
    return f"{suite_of(nodeid)}::{nodeid.split('::')[-1].split('[', 1)[0]}"


def _pytest(args: Sequence[str], n_devices: int, timeout_s: float,
            script: Optional[tuple[str, str]] = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """pytest on ``n_devices`` logical CPU devices, in a subprocess (``script``: python code and its first
    argument, run instead of ``python -m pytest``, with the pytest arguments after it)."""
    env = dict(os.environ, GPUCOMM_CPU_DEVICES=str(n_devices), PYTHONPATH=os.pathsep.join(
        [str(ROOT), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]))
    head = ["-c", *script] if script else ["-m", "pytest"]
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, *head, "-p", "no:cacheprovider", "--gpucomm-device=cpu", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    return out, time.monotonic() - t0


def _pairs_args(pairs: str) -> list[str]:
    return [] if pairs == "auto" else [f"--gpucomm-pairs={pairs}"]


#: collects in a subprocess and writes [nodeid, the test's @gpus(n) or None] per collected test
_COLLECT = """
import json, sys
import pytest
from pytest_gpucomm.plugin.markers import read_gpus

class Collected:
    items = []

    def pytest_collection_finish(self, session):
        self.items = [[item.nodeid, read_gpus(item)] for item in session.items]

c = Collected()
rc = pytest.main(sys.argv[2:], plugins=[c])
with open(sys.argv[1], "w") as f:
    json.dump(c.items, f)
sys.exit(rc)
"""


def count_tests(suites: Sequence[str], n_devices: int, pairs: str) -> Counter[str]:
    """Tests per function (``suite::test_name``) that ``suites`` run as on ``n_devices`` GPUs: a test whose
    ``@gpus(n)`` asks for more devices counts 0 (it is skipped), one that the CPU variant collects once for
    want of a GPU (id ``no-gpu``) ``n_devices`` times."""
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "items.json"
        out, _ = _pytest(["--collect-only", "-q", f"--gpucomm-max-size={GPU_MAX_SIZE}", *_pairs_args(pairs), *suites],
                         n_devices, timeout_s=300, script=(_COLLECT, str(listing)))
        if out.returncode != 0 or not listing.exists():
            raise RuntimeError(f"collecting {' '.join(suites)} on {n_devices} devices failed (exit {out.returncode}):"
                               f"\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
        items = json.loads(listing.read_text())
    counts: Counter[str] = Counter()
    for nodeid, needs in items:
        counts[function_of(nodeid)] += 0 if needs is not None and needs > n_devices else (
            n_devices if "no-gpu" in nodeid else 1)
    return counts


def run_suite(suite: str, n_devices: int, pairs: str, max_size: str, min_time: float) -> dict[str, Any]:
    """Run ``suite`` on ``n_devices`` logical CPU devices: wall seconds and the outcomes (from JUnit XML)."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "run.xml"
        out, wall = _pytest(["-q", f"--gpucomm-max-size={max_size}", f"--gpucomm-min-time={min_time}",
                             f"--gpucomm-tail-time={3 * min_time}", f"--junitxml={xml}", *_pairs_args(pairs), suite],
                            n_devices, timeout_s=3600)
        if out.returncode not in (0, 1) or not xml.exists():
            raise RuntimeError(f"running {suite} on {n_devices} devices failed (exit {out.returncode}):\n"
                               f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
        cases = junit_cases(xml)
    outcome = Counter(c["outcome"] for c in cases)
    return {"wall_s": wall, "tests": len(cases), "passed": outcome["passed"], "failed": outcome["failed"],
            "skipped": outcome["skipped"], "test_s": sum(c["time_s"] for c in cases)}


def junit_cases(path: Path) -> list[dict[str, Any]]:
    """Every testcase of a JUnit XML file: nodeid-like name, seconds, outcome."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise SystemExit(f"{path}: not a readable JUnit XML file ({e})") from None
    cases = []
    for tc in root.iter("testcase"):
        cls, name = tc.get("classname", ""), tc.get("name", "")
        module = cls.replace(".", "/") + ".py"
        outcome = ("skipped" if tc.find("skipped") is not None else
                   "failed" if tc.find("failure") is not None or tc.find("error") is not None else "passed")
        cases.append({"nodeid": f"{module}::{name}", "time_s": float(tc.get("time", 0) or 0), "outcome": outcome})
    return cases


def junit_costs(paths: Sequence[Path]) -> dict[str, float]:
    """Seconds per case of each test function (``suite::test_name``) in JUnit XML files of a GPU run: the mean
    over its tests that ran, or over all of them where every one was skipped."""
    ran: dict[str, list[float]] = {}
    skipped: dict[str, list[float]] = {}
    for path in paths:
        for c in junit_cases(path):
            (skipped if c["outcome"] == "skipped" else ran).setdefault(function_of(c["nodeid"]), []).append(c["time_s"])
    return {f: statistics.mean(ran.get(f) or skipped[f]) for f in {*ran, *skipped}}


def baseline_costs(path: Path) -> dict[str, dict[str, Any]]:
    """Seconds per case per suite from a baseline file's run records: each run that holds one suite's cases
    alone gives (date - fingerprint date) / cases; the median over such runs (see the module docstring)."""
    try:
        doc = json.loads(path.read_text())
        runs, cases = doc["runs"], doc["cases"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a readable baseline file ({type(e).__name__}: {e})") from None
    per_run: dict[str, Counter[str]] = {}
    for entry in cases.values():
        for r in entry.get("runs", []):
            per_run.setdefault(r["run_id"], Counter())[suite_of(entry["test_id"])] += 1
    seconds: dict[str, list[float]] = {}
    for run in runs:
        suites = per_run.get(run.get("run_id"), Counter())
        try:
            start = dt.datetime.fromisoformat(run["fingerprint"]["date"])
            end = dt.datetime.fromisoformat(run["date"])
        except (KeyError, TypeError, ValueError):
            continue
        if len(suites) == 1 and end > start:
            (suite, n), = suites.items()
            seconds.setdefault(suite, []).append((end - start).total_seconds() / n)
    return {s: {"per_case_s": statistics.median(v), "runs": len(v), "source": str(path)} for s, v in seconds.items()}


def parse_per_case(items: Sequence[str]) -> dict[str, float]:
    out = {}
    for item in items:
        suite, _, value = item.partition("=")
        try:
            out[suite.strip()] = float(value)
        except ValueError:
            raise SystemExit(f"--per-case-s {item!r}: expected SUITE=SECONDS, e.g. copies=0.33") from None
        if not out[suite.strip()] >= 0:
            raise SystemExit(f"--per-case-s {item!r}: the seconds must be a number >= 0")
    return out


def model(counts: Counter[str], by_function: dict[str, float], by_suite: dict[str, float]) -> dict[str, Any]:
    """The modelled GPU time: sum of count x seconds per case, per function (``by_function``) or suite
    (``by_suite``); the functions with no cost are listed and left out."""
    total, parts, unknown = 0.0, {}, []
    for f, n in sorted(counts.items()):
        cost = by_function.get(f, by_suite.get(f.split("::")[0]))
        if cost is None:
            unknown.append(f)
            continue
        parts[f] = {"count": n, "per_case_s": cost, "s": n * cost}
        total += n * cost
    return {"total_s": total, "parts": parts, "unknown": unknown}


def _unknown(functions: Sequence[str]) -> str:
    """The functions without a cost, by suite: "training_traffic (5 functions): give --per-case-s"."""
    suites = Counter(f.split("::")[0] for f in functions)
    return "; ".join(f"{s} ({n} function{'' if n == 1 else 's'}) with no cost: give --per-case-s {s}=SECONDS or "
                     "--junitxml" for s, n in suites.items())


def effective_pairs(pairs: str, n_devices: int) -> str:
    from pytest_gpucomm.plugin.parametrize import pair_choice

    return pair_choice(None if pairs == "auto" else pairs, n_devices)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", default="2,4,8", help="device counts N, comma-separated. Default: 2,4,8.")
    p.add_argument("--pairs", default=",".join(PAIR_CHOICES),
                   help=f"--gpucomm-pairs choices, comma-separated, of {', '.join(PAIR_CHOICES)}. Default: all four.")
    p.add_argument("--count", action="append", default=None, metavar="SUITE",
                   help=f"suite files to count (repeatable). Default: {', '.join(COUNT_SUITES)}.")
    p.add_argument("--run", action="append", default=None, metavar="SUITE",
                   help="suite files to run on CPU and time (repeatable; 'none' runs nothing). "
                        "Default: suites/test_copies.py.")
    p.add_argument("--max-size", default="64KiB", help="--gpucomm-max-size of the CPU runs. Default: 64KiB.")
    p.add_argument("--min-time", type=float, default=0.005, help="--gpucomm-min-time of the CPU runs. Default: 0.005.")
    p.add_argument("--junitxml", action="append", type=Path, default=[],
                   help="JUnit XML of a GPU run (pytest --junitxml); the per-function cost. Repeatable.")
    p.add_argument("--per-case-s", action="append", default=[], metavar="SUITE=SECONDS",
                   help="seconds per case of a suite (copies, collectives, training_traffic). Repeatable.")
    p.add_argument("--from-baseline", type=Path, default=ROOT / "baselines" / "h200.json",
                   help="baseline file whose single-suite runs give a suite's seconds per case where nothing "
                        "else does; 'none' for none. Default: baselines/h200.json.")
    p.add_argument("--budget-s", type=float, default=300.0, help="the time the default suites may take. Default: 300.")
    p.add_argument("--json", type=Path, default=None, help="write every figure to this file.")
    args = p.parse_args(argv)
    try:
        devices = [int(x) for x in args.devices.split(",")]
    except ValueError:
        p.error(f"--devices {args.devices!r}: expected whole numbers, e.g. 2,4,8")
    choices = [c.strip() for c in args.pairs.split(",")]
    bad = [c for c in choices if c not in PAIR_CHOICES]
    if bad:
        p.error(f"--pairs {args.pairs!r}: unknown {', '.join(bad)}; known: {', '.join(PAIR_CHOICES)}")
    count_suites = args.count or list(COUNT_SUITES)
    run_suites = [] if args.run == ["none"] else (args.run or ["suites/test_copies.py"])

    by_function = junit_costs(args.junitxml) if args.junitxml else {}
    from_baseline = ({} if str(args.from_baseline) == "none" or not args.from_baseline.exists()
                     else baseline_costs(args.from_baseline))
    by_suite = {s: c["per_case_s"] for s, c in from_baseline.items()}
    by_suite.update(parse_per_case(args.per_case_s))
    print("seconds per case: " + ", ".join(
        [f"{f} {c:.3f} (JUnit)" for f, c in sorted(by_function.items())]
        + [f"{s} {c:.3f} ("
           + ('--per-case-s' if s in parse_per_case(args.per_case_s)
              else 'baseline runs, ' + str(from_baseline[s]['runs']))
           + ")"
           for s, c in sorted(by_suite.items())]) if by_function or by_suite else "seconds per case: none given")

    rows = []
    for n in devices:
        for choice in choices:
            counts = count_tests(count_suites, n, choice)
            by_suite_count = {s: 0 for s in map(suite_of, count_suites)}
            for f, c in counts.items():
                by_suite_count[f.split("::")[0]] = by_suite_count.get(f.split("::")[0], 0) + c
            row: dict[str, Any] = {"devices": n, "pairs": choice, "in_force": effective_pairs(choice, n),
                                   "counts": dict(counts), "tests": sum(counts.values()), "by_suite": by_suite_count}
            for suite in run_suites:
                row.setdefault("cpu_runs", {})[suite] = run_suite(suite, n, choice, args.max_size, args.min_time)
            row["model"] = model(counts, by_function, by_suite)
            rows.append(row)
            m, runs = row["model"], row.get("cpu_runs", {})
            ran = "; ".join(f"{suite_of(s)} on CPU: {r['tests']} tests ({r['passed']} passed, {r['skipped']} skipped, "
                            f"{r['failed']} failed) in {r['wall_s']:.1f} s" for s, r in runs.items())
            pair_tests = counts.get("copies::test_peer_copy", 0)
            print(f"N={n} pairs={choice} ({row['in_force']}): {row['tests']} tests "
                  f"({', '.join(f'{s} {c}' for s, c in row['by_suite'].items())}; test_peer_copy {pair_tests})"
                  + (f"; {ran}" if ran else "")
                  + (f"; model {m['total_s']:.0f} s" + (f" (without {_unknown(m['unknown'])})" if m["unknown"] else "")
                     + (f" {'<=' if m['total_s'] <= args.budget_s else '>'} {args.budget_s:g} s" if m["parts"] else "")
                     if m["parts"] else ""))
    if args.json:
        args.json.write_text(json.dumps({"per_case_s": {"by_function": by_function, "by_suite": by_suite,
                                                        "from_baseline": from_baseline},
                                         "settings": {"max_size": args.max_size, "min_time_s": args.min_time,
                                                      "budget_s": args.budget_s},
                                         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
