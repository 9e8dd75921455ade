"""The fleet rule (``gate.fleet``, ``gpucomm fleet``) calibrated on fleets drawn from real runs (issue 46, item 5).

    PYTHONPATH=. python benchmarks/fleet_calibration.py [--quick] [--out benchmarks/data/fleet_calibration.json]

Fleets are drawn by ``fleet_reports.py`` from the runs of each machine shape in the shipped baselines and judged
against that baseline file (``judge_fleet``, the command's own judging, without the file reading):

* A/A: fleets of 1,000 healthy nodes: the nodes named (per-node against the baseline, against the peers, and
  both together: the expected number of false nodes per fleet; target <= 0.1) and fleet verdicts failed;
* one node 15 % slower than its peers in one class (each class in turn): the share of fleets of 16, 64 and 256
  nodes that name it (target >= 90 %), and the other nodes named in them;
* a 10 % drop of every case up to 1 MiB on every node: the share of fleets whose verdict fails, by size.

Seeds are fixed per fleet: the same command gives the same figures, in any number of processes (``--jobs``).
``--quick``: a few fleets of each kind (a smoke run, nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet_reports as fr  # noqa: E402

from pytest_gpucomm.gate.fleet import judge_fleet  # noqa: E402
from pytest_gpucomm.gate.store import load_baseline  # noqa: E402

#: fleets per check and source: (A/A fleets of 1,000, slow-node fleets per size, drop fleets per size)
FULL = {"h200x2": (4, 12, 6), "h200x1": (20, 24, 12), "h100": (20, 24, 12)}
QUICK = {"h200x2": (1, 4, 2), "h200x1": (2, 6, 3), "h100": (2, 6, 3)}
SIZES = (16, 64, 256)
DROP_SIZES = (4, 8, 16, 64, 256)
_LOADED: dict[str, Any] = {}


def _source(name: str) -> tuple[fr.Source, Any]:
    if name not in _LOADED:
        _LOADED[name] = (fr.load_source(name), load_baseline(fr.ROOT / fr.SOURCES[name][0]))
    return _LOADED[name]


def _one(task: tuple[str, str, int, int]) -> dict[str, Any]:
    """One fleet: (source, check, nodes, index) -> what it found; its seed is made of the four."""
    name, check, n, f = task
    src, baseline = _source(name)
    rng = np.random.default_rng([46, list(fr.SOURCES).index(name), ["aa", "slow", "drop"].index(check), n, f])
    if check == "aa":
        res = judge_fleet(fr.node_inputs(src, fr.draw_fleet(src, n, rng)), baseline)
        return {"peers": sum(bool(v.peers) for v in res.nodes), "baseline": sum(bool(v.baseline) for v in res.nodes),
                "both": len(res.drain), "fleet": res.fleet_failed,
                "named": [v.lines()[0] for v in res.drain]}
    if check == "slow":
        classes = sorted({fr.klass(c) for c in src.cases})
        k = classes[f % len(classes)]
        target = int(rng.integers(n))
        res = judge_fleet(fr.node_inputs(src, fr.draw_fleet(src, n, rng, slow={target: (k, 0.85)})), baseline)
        v = res.nodes[target]
        return {"class": k, "named": v.failed, "by_peers": bool(v.peers),
                "others": sum(w.failed for i, w in enumerate(res.nodes) if i != target)}
    res = judge_fleet(fr.node_inputs(src, fr.draw_fleet(src, n, rng, drop=("small", 0.9))), baseline)
    return {"fleet": res.fleet_failed}


def _tasks(name: str, plan: tuple[int, int, int]) -> list[tuple[str, str, int, int]]:
    aa, slow, drop = plan
    return ([(name, "aa", 1000, f) for f in range(aa)] + [(name, "slow", n, f) for n in SIZES for f in range(slow)]
            + [(name, "drop", n, f) for n in DROP_SIZES for f in range(drop)])


def _summary(name: str, got: list[tuple[tuple[str, str, int, int], dict[str, Any]]]) -> dict[str, Any]:
    aa = [r for t, r in got if t[1] == "aa"]
    out: dict[str, Any] = {"fitted": fr.fitted(_source(name)[0])}
    out["aa"] = {"fleets": len(aa), "nodes": 1000, "false_nodes_per_fleet": float(np.mean([r["both"] for r in aa])),
                 "false_nodes_peers": float(np.mean([r["peers"] for r in aa])),
                 "false_nodes_baseline": float(np.mean([r["baseline"] for r in aa])),
                 "false_nodes_total": int(sum(r["both"] for r in aa)),
                 "fleet_verdicts_failed": int(sum(r["fleet"] for r in aa)),
                 "false_named": [line for r in aa for line in r["named"]][:20]}
    out["slow_node"] = {}
    for n in SIZES:
        rs = [r for t, r in got if t[1] == "slow" and t[2] == n]
        per: dict[str, list[int]] = {}
        for r in rs:
            per.setdefault(r["class"], []).append(int(r["named"]))
        out["slow_node"][str(n)] = {"fleets": len(rs), "named": float(np.mean([r["named"] for r in rs])),
                                    "named_by_peers": float(np.mean([r["by_peers"] for r in rs])),
                                    "other_nodes_named": int(sum(r["others"] for r in rs)),
                                    "per_class": {c: f"{sum(v)}/{len(v)}" for c, v in sorted(per.items())}}
    out["fleet_drop"] = {str(n): {"fleets": len(rs), "fleet_failed": float(np.mean([r["fleet"] for r in rs]))}
                         for n in DROP_SIZES for rs in [[r for t, r in got if t[1] == "drop" and t[2] == n]]}
    return out


def _print(name: str, got: dict[str, Any]) -> None:
    f, a = got["fitted"], got["aa"]
    print(f"{name}: {f['cases']} cases, {f['sessions']} sessions, {f['runs']} runs")
    for c, x in f["classes"].items():
        print(f"  fitted {c}: {x['cases']} cases, sd of session means {x['session_sd_pct']}%, "
              f"of runs in a session {x['run_sd_pct']}%")
    print(f"  A/A {a['fleets']} fleets of 1000: {a['false_nodes_per_fleet']:.3f} false nodes per fleet "
          f"(peers {a['false_nodes_peers']:.3f}, baseline {a['false_nodes_baseline']:.3f}); "
          f"{a['fleet_verdicts_failed']} fleet verdicts failed")
    for n, s in got["slow_node"].items():
        print(f"  a node 15% slow in one class, {n} nodes: named in {s['named']:.1%} of {s['fleets']} fleets "
              f"(by its peers {s['named_by_peers']:.1%}); {s['other_nodes_named']} other nodes named")
    print("  a 10% drop of every case <= 1 MiB: fleet verdict failed in "
          + ", ".join(f"{d['fleet_failed']:.0%} at {n}" for n, d in got["fleet_drop"].items()))


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few fleets of each kind (nothing written)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    ap.add_argument("--out", default=str(fr.ROOT / "benchmarks/data/fleet_calibration.json"))
    ap.add_argument("--sources", default="h200x2,h200x1,h100")
    ap.add_argument("--more", type=int, default=1, help="this many times the fleets of each kind (default: 1)")
    args = ap.parse_args(argv)
    plan = {k: tuple(args.more * x for x in v) for k, v in (QUICK if args.quick else FULL).items()}
    names = args.sources.split(",")
    tasks = [t for name in names for t in _tasks(name, plan[name])]
    t0 = time.time()
    if args.jobs > 1:
        from multiprocessing import Pool

        with Pool(args.jobs) as pool:
            results = pool.map(_one, tasks, chunksize=1)
    else:
        results = [_one(t) for t in tasks]
    doc: dict[str, Any] = {"command": "PYTHONPATH=. python benchmarks/fleet_calibration.py", "plan": plan,
                           "seconds": round(time.time() - t0), "sources": {}}
    for name in names:
        doc["sources"][name] = _summary(name, [(t, r) for t, r in zip(tasks, results) if t[0] == name])
        _print(name, doc["sources"][name])
    if not args.quick:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
