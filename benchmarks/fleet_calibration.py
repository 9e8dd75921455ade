"""The fleet rule (``gate.fleet``, ``gpucomm fleet``) calibrated on fleets drawn from real runs (issue 46, item 5).

    PYTHONPATH=. python benchmarks/fleet_calibration.py [--quick] [--out benchmarks/data/fleet_calibration.json]

Fleets are drawn by ``fleet_reports.py`` from the runs of each machine shape in the shipped baselines and judged
against that baseline file (``judge_fleet``, the command's own judging, without the file reading):

* A/A: fleets of 1,000 healthy nodes: the nodes named (per-node against the baseline, against the peers, and
  both together: the expected number of false nodes per fleet; target <= 0.1) and fleet verdicts failed;
* one node 15 % slower than its peers in one class (each class in turn): the share of fleets of 16, 64 and 256
  nodes that name it (target >= 90 %), and the other nodes named in them;
* a 10 % drop of every case up to 1 MiB on every node: the share of fleets whose verdict fails, by size.

Seeds are fixed: the same command gives the same figures.  ``--quick``: fewer fleets (a smoke run).
"""

from __future__ import annotations

import argparse
import json
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
FULL = {"h200x2": (6, 24, 12), "h200x1": (40, 48, 24), "h100": (40, 48, 24)}
QUICK = {"h200x2": (1, 4, 2), "h200x1": (2, 6, 3), "h100": (2, 6, 3)}
SIZES = (16, 64, 256)
DROP_SIZES = (4, 8, 16, 64, 256)


def _aa(src: fr.Source, baseline: Any, fleets: int, rng: np.random.Generator) -> dict[str, Any]:
    peers, base, both, fleet_failed = [], [], [], 0
    for _ in range(fleets):
        res = judge_fleet(fr.node_inputs(src, fr.draw_fleet(src, 1000, rng)), baseline)
        peers.append(sum(bool(v.peers) for v in res.nodes))
        base.append(sum(bool(v.baseline) for v in res.nodes))
        both.append(len(res.drain))
        fleet_failed += res.fleet_failed
    return {"fleets": fleets, "nodes": 1000, "false_nodes_per_fleet": float(np.mean(both)),
            "false_nodes_peers": float(np.mean(peers)), "false_nodes_baseline": float(np.mean(base)),
            "false_nodes_total": int(sum(both)), "fleet_verdicts_failed": fleet_failed}


def _slow(src: fr.Source, baseline: Any, fleets: int, rng: np.random.Generator) -> dict[str, Any]:
    classes = sorted({fr.klass(c) for c in src.cases})
    out: dict[str, Any] = {}
    for n in SIZES:
        named, by_peers, others = 0, 0, 0
        per_class: dict[str, list[int]] = {c: [0, 0] for c in classes}
        for f in range(fleets):
            k = classes[f % len(classes)]
            target = int(rng.integers(n))
            res = judge_fleet(fr.node_inputs(src, fr.draw_fleet(src, n, rng, slow={target: (k, 0.85)})), baseline)
            v = res.nodes[target]
            named += v.failed
            by_peers += any(x.check == "peers" for x in v.peers)
            others += sum(w.failed for i, w in enumerate(res.nodes) if i != target)
            per_class[k][0] += v.failed
            per_class[k][1] += 1
        out[str(n)] = {"fleets": fleets, "named": named / fleets, "named_by_peers": by_peers / fleets,
                       "other_nodes_named": others,
                       "per_class": {c: f"{a}/{b}" for c, (a, b) in per_class.items()}}
    return out


def _drop(src: fr.Source, baseline: Any, fleets: int, rng: np.random.Generator) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in DROP_SIZES:
        failed = 0
        for _ in range(fleets):
            try:
                res = judge_fleet(fr.node_inputs(src, fr.draw_fleet(src, n, rng, drop=("small", 0.9))), baseline)
            except ValueError:
                continue
            failed += res.fleet_failed
        out[str(n)] = {"fleets": fleets, "fleet_failed": failed / fleets}
    return out


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(fr.ROOT / "benchmarks/data/fleet_calibration.json"))
    ap.add_argument("--sources", default="h200x2,h200x1,h100")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    doc: dict[str, Any] = {"command": "PYTHONPATH=. python benchmarks/fleet_calibration.py", "sources": {}}
    for i, name in enumerate(args.sources.split(",")):
        t = time.time()
        rng = np.random.default_rng(46 + i)
        src = fr.load_source(name)
        baseline = load_baseline(Path(fr.SOURCES[name][0]))
        aa_n, slow_n, drop_n = plan[name]
        got = {"fitted": fr.fitted(src), "aa": _aa(src, baseline, aa_n, rng),
               "slow_node": _slow(src, baseline, slow_n, rng), "fleet_drop": _drop(src, baseline, drop_n, rng)}
        got["seconds"] = round(time.time() - t, 1)
        doc["sources"][name] = got
        a = got["aa"]
        print(f"{name}: {got['fitted']['cases']} cases, {got['fitted']['sessions']} sessions, "
              f"{got['fitted']['runs']} runs ({got['seconds']} s)")
        for c, f in got["fitted"]["classes"].items():
            print(f"  fitted {c}: {f['cases']} cases, sd of session means {f['session_sd_pct']}%, "
                  f"of runs in a session {f['run_sd_pct']}%")
        print(f"  A/A {a['fleets']} fleets of 1000: {a['false_nodes_per_fleet']:.3f} false nodes per fleet "
              f"(peers {a['false_nodes_peers']:.3f}, baseline {a['false_nodes_baseline']:.3f}); "
              f"{a['fleet_verdicts_failed']} fleet verdicts failed")
        for n, s in got["slow_node"].items():
            print(f"  a node 15% slow in one class, {n} nodes: named in {s['named']:.0%} of {s['fleets']} fleets "
                  f"(by its peers {s['named_by_peers']:.0%}); {s['other_nodes_named']} other nodes named")
        print("  a 10% drop of every case <= 1 MiB: fleet verdict failed in "
              + ", ".join(f"{d['fleet_failed']:.0%} at {n}" for n, d in got["fleet_drop"].items()))
    if not args.quick:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
