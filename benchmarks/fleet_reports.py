"""Fleets of node reports drawn from real runs (issue 46, item 5): the generator of ``fleet_calibration.py``,
``fleet_scale.py`` and tests/test_fleet.py.

A source is the runs of one machine shape in a shipped baseline file: ``h200x2`` (baselines/h200.json, the
runs on 2 x H200: 169 cases, 5 sessions, 19 runs), ``h200x1`` (the same file's one-H200 runs: 20 cases, 4
sessions) and ``h100`` (baselines/h100.json: 20 cases, 4 sessions of one H100, 14 runs).  Per case the real
runs give a centre (the mean of the session means), each session's deviation from it and each run's deviation
from its session's mean.  A node is drawn as:

* a session part: a new session's deviation vector, a random Gaussian combination of the real sessions'
  deviations (sum of z_s (d_s - mean d) / sqrt(S - 1), z_s ~ N(0, 1)): across cases it has exactly the
  covariance the real sessions show (their spread, and how the cases of a class move together);
* a run part: the deviation of one real run from its session's mean (resampled whole: all its cases);
* its samples: that real run's samples of each case, rescaled to the node's location (their spread, tails and
  count are the real run's).

A fleet shares one draw of the baseline centre's own error (the same combination / sqrt(S)): the baseline's
centre is itself an estimate from S sessions, and every node of a fleet is judged against the same one.
``fitted(source)`` returns the figures the draw is fitted to (they are printed by fleet_calibration.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"h200x2": ("baselines/h200.json", 2), "h200x1": ("baselines/h200.json", 1),
           "h100": ("baselines/h100.json", 1)}
SMALL_BYTES = 1 << 20


@dataclass
class Source:
    name: str
    path: Path
    fingerprint: dict[str, Any]
    cases: list[dict[str, Any]]  # key, test_id, op, size_bytes, world_size, dtype, devices
    centre: np.ndarray  # per case
    session_dev: np.ndarray  # sessions x cases (nan where a session lacks the case)
    run_dev: list[np.ndarray]  # per real run: its deviation from its session mean (nan where it lacks the case)
    run_samples: list[list[Optional[list[float]]]]  # per real run, per case: its samples (GB/s) or None
    run_loc: list[np.ndarray]
    run_se2: list[np.ndarray]  # per real run, per case: its location's own variance (decision.run_location)
    sessions: list[str]


def load_source(name: str) -> Source:
    """The runs of one machine shape (SOURCES) as per-case centres, session and run deviations."""
    rel, count = SOURCES[name]
    doc = json.loads((ROOT / rel).read_text())
    runs = [r for r in doc["runs"] if int(r["fingerprint"].get("count") or 1) == count]
    ids = [r["run_id"] for r in runs]
    session = {r["run_id"]: r.get("session") or r["run_id"] for r in runs}
    sessions = sorted(set(session.values()))
    cases = []
    for key, c in doc["cases"].items():
        mine = {x["run_id"]: x["samples_gbps"] for x in c["runs"] if x["run_id"] in session}
        if len({session[r] for r in mine}) >= 2:
            cases.append(dict(key=key, test_id=c["test_id"], op=c["op"], size_bytes=c["size_bytes"],
                              world_size=c["world_size"], dtype=c.get("dtype"), devices=c["devices"], runs=mine))
    from pytest_gpucomm.gate.decision import run_location

    loc = np.full((len(ids), len(cases)), np.nan)
    se2 = np.full((len(ids), len(cases)), np.nan)
    samples: list[list[Optional[list[float]]]] = [[None] * len(cases) for _ in ids]
    for j, c in enumerate(cases):
        for i, rid in enumerate(ids):
            if rid in c["runs"]:
                rl = run_location(c["runs"][rid])
                loc[i, j], se2[i, j] = rl.loc, rl.se2
                samples[i][j] = c["runs"][rid]
    sess_mean = np.full((len(sessions), len(cases)), np.nan)
    for s_i, s in enumerate(sessions):
        rows = [i for i, rid in enumerate(ids) if session[rid] == s]
        have = np.isfinite(loc[rows]).any(axis=0)
        sess_mean[s_i, have] = np.nanmean(loc[rows][:, have], axis=0)
    centre = np.nanmean(sess_mean, axis=0)
    run_dev = [loc[i] - sess_mean[sessions.index(session[rid])] for i, rid in enumerate(ids)]
    for c in cases:
        del c["runs"]
    fp = dict(runs[-1]["fingerprint"])
    return Source(name, ROOT / rel, fp, cases, centre, sess_mean - centre, run_dev, samples, list(loc), list(se2),
                  sessions)


def fitted(src: Source) -> dict[str, Any]:
    """The figures the draw reproduces, per class (kind and size): the median over its cases of the sd of the
    session means and of the runs about their session mean, in % of bandwidth."""
    out: dict[str, Any] = {"sessions": len(src.sessions), "runs": len(src.run_dev), "cases": len(src.cases)}
    sess_sd = np.sqrt(np.nansum(src.session_dev ** 2, axis=0) / np.maximum(
        np.sum(np.isfinite(src.session_dev), axis=0) - 1, 1))
    run = np.array(src.run_dev)
    run_sd = np.sqrt(np.nanmean(run ** 2, axis=0))
    by: dict[str, list[int]] = {}
    for j, c in enumerate(src.cases):
        by.setdefault(klass(c), []).append(j)
    out["classes"] = {k: {"cases": len(ix), "session_sd_pct": round(float(np.median(sess_sd[ix])) * 100, 3),
                          "run_sd_pct": round(float(np.nanmedian(run_sd[ix])) * 100, 3)}
                      for k, ix in sorted(by.items())}
    return out


def klass(case: dict[str, Any]) -> str:
    from pytest_gpucomm.gate.levels import case_class
    from pytest_gpucomm.ops.specs import op_kind

    return case_class(op_kind(case["op"]), case["size_bytes"])


def _combination(dev: np.ndarray, z: np.ndarray) -> np.ndarray:
    """sum_s z_s d_s / sqrt(S_c - 1) per case over the sessions that hold it (d_s centred per case)."""
    have = np.isfinite(dev)
    d = np.where(have, dev, 0.0)
    n = have.sum(axis=0)
    return np.asarray((z @ d) / np.sqrt(np.maximum(n - 1, 1)))


def draw_fleet(src: Source, n: int, rng: np.random.Generator, *, slow: Optional[dict[int, tuple[str, float]]] = None,
               drop: Optional[tuple[str, float]] = None) -> list[np.ndarray]:
    """``n`` nodes' per-case location shifts over the real run each is built on: a list of (run index, shift)
    packed as arrays [run, shift per case].  ``slow``: node index -> (class, ratio) planted on that node;
    ``drop``: ("small", ratio) on every case up to 1 MiB of every node (or a class name)."""
    s = len(src.sessions)
    common = _combination(src.session_dev, rng.standard_normal(s)) / math.sqrt(s)
    classes = [klass(c) for c in src.cases]
    out = []
    full = [i for i, loc in enumerate(src.run_loc) if np.isfinite(loc).all()]  # runs of every case
    for i in range(n):
        r = full[int(rng.integers(len(full)))]
        target = src.centre + common + _combination(src.session_dev, rng.standard_normal(s)) + src.run_dev[r]
        shift = target - src.run_loc[r]
        if slow and i in slow:
            k, ratio = slow[i]
            shift = shift + np.array([math.log(ratio) if c == k else 0.0 for c in classes])
        if drop is not None:
            k, ratio = drop
            hit = [(c["size_bytes"] <= SMALL_BYTES) if k == "small" else (kl == k) for c, kl in zip(src.cases, classes)]
            shift = shift + np.where(hit, math.log(ratio), 0.0)
        out.append(np.concatenate([[r], shift]))
    return out


def node_inputs(src: Source, drawn: Sequence[np.ndarray]) -> list[Any]:
    """The drawn nodes as ``gate.fleet.NodeInput`` (no file written: the calibration's fast path).  The run's
    locations are the real run's, shifted; a case the real run lacks is missing on that node."""
    from pytest_gpucomm.gate.decision import RunLocation
    from pytest_gpucomm.gate.fleet import NodeInput
    from pytest_gpucomm.gate.levels import member
    from pytest_gpucomm.ops.specs import op_kind

    members = {c["key"]: member(c["key"], test_id=c["test_id"], op=c["op"], kind=op_kind(c["op"]),
                                size_bytes=c["size_bytes"], dtype=c["dtype"], world_size=c["world_size"],
                                devices=c["devices"]) for c in src.cases}
    shape = f"{src.fingerprint.get('count')} x {src.fingerprint.get('model')}"
    out = []
    for i, d in enumerate(drawn):
        r = int(d[0])
        locs = {c["key"]: RunLocation(float(src.run_loc[r][j] + d[1 + j]), float(src.run_se2[r][j]), 100)
                for j, c in enumerate(src.cases) if math.isfinite(src.run_loc[r][j])}
        out.append(NodeInput(f"node{i:04d}", f"<drawn {i}>", f"node{i:04d}", shape, locs,
                             {k: members[k] for k in locs}))
    return out


def report(src: Source, d: np.ndarray, host: str) -> dict[str, Any]:
    """One drawn node as a JSON report (``pytest --gpucomm-json``'s format): each case's samples are its real
    run's, rescaled by the node's shift."""
    from pytest_gpucomm.files.formats import REPORT_FORMAT, REPORT_VERSION
    from pytest_gpucomm.ops.specs import op_group

    r = int(d[0])
    rows = []
    for j, c in enumerate(src.cases):
        samples = src.run_samples[r][j]
        if samples is None:
            continue
        k = math.exp(-float(d[1 + j]))
        size = int(c["size_bytes"])
        rows.append({"test": c["test_id"], "op": c["op"], "kind": op_group(c["op"]), "size_bytes": size,
                     "bytes_per_iter": size, "busbw_factor": 1.0, "devices": list(c["devices"]),
                     "world_size": int(c["world_size"]), "dtype": c["dtype"], "status": "measured",
                     "samples_s": [round(size / 1e9 / g * k, 12) for g in samples]})
    fp = dict(src.fingerprint, host=host)
    return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "settings": {}, "fingerprint": fp, "rows": rows}


def write_fleet(src: Source, drawn: Sequence[np.ndarray], folder: Path) -> list[Path]:
    """Each drawn node's report as ``folder/<host>.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, d in enumerate(drawn):
        p = folder / f"node{i:04d}.json"
        p.write_text(json.dumps(report(src, d, f"node{i:04d}")))
        paths.append(p)
    return paths
