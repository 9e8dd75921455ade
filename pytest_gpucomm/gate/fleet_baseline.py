"""The fleet against a stored baseline (``gate.fleet``, FLEET_RULE steps 1 and 3): the baseline fitted once
(the gate's ``fit_baseline`` and ``fit_levels``), each node judged by the gate's case and level rules at a level
scaled to the number of nodes, and the fleet's shift of each class and band with the baseline's own error."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

import numpy as np

from ..ops.specs import op_kind
from ..units import format_size
from .decision import CASE_ALPHA_SHARE, prediction, t_quantile
from .fleet import BIWEIGHT_EFFICIENCY, Finding, FleetShift, biweight_scale, group_means
from .levels import LevelFit, Member, fit_levels, judge_run, member

if TYPE_CHECKING:
    from .store import Baseline

__all__ = ["BaselineModel", "fit_for_fleet", "node_findings", "fleet_shifts"]


@dataclass
class BaselineModel:
    """What the fleet needs of the baseline, fitted once: the cases shared with the fleet (``keys``), their
    centres, per case the gate's prediction sd and df of one run (``sd``, ``df``), the level fit, and per
    baseline run its locations (for the centre's own error at the fleet level) and session."""

    keys: list[str]
    centre: np.ndarray
    sd: np.ndarray
    df: np.ndarray
    levels: LevelFit
    members: dict[str, Member]
    locs: dict[str, dict[str, float]]
    session_of: dict[str, Optional[str]]
    sessions: int


def fit_for_fleet(baseline: "Baseline", keys: Sequence[str], se2_now: Mapping[str, float]) -> BaselineModel:
    """The baseline's models of the fleet's cases ``keys`` that it holds runs of; ``se2_now``: per case the
    nodes' typical own variance of one run (their median), the gate's u_now^2."""
    from .baseline_fit import fit_baseline

    fit = fit_baseline(baseline, baseline.path)
    common = [k for k in keys if k in fit.models]
    sds, dfs = [], []
    for k in common:
        model, prior = fit.models[k]
        sp = prediction(model, prior, 1, float(se2_now.get(k, 0.0)))
        sds.append(sp.sd)
        dfs.append(sp.df)
    members = {}
    for k in common:
        e = baseline.cases[k]
        members[k] = member(k, test_id=e.test_id, op=e.op, kind=op_kind(e.op), size_bytes=e.size_bytes,
                            dtype=e.dtype, world_size=e.world_size, devices=e.devices, layout=e.layout)
    session_of = {r.run_id: r.session for r in baseline.runs}
    centres = {k: fit.models[k][0].center for k in common}
    levels = fit_levels(fit.locs, centres, members, session_of)
    sessions = len({s if s is not None else r for r, s in session_of.items()})
    return BaselineModel(common, np.array([centres[k] for k in common]), np.array(sds), np.array(dfs), levels,
                         members, {k: fit.locs[k] for k in common}, session_of, sessions)


def node_findings(dev: np.ndarray, bm: BaselineModel, *, alpha_node: float, tolerance: float
                  ) -> tuple[list[list[Finding]], list[dict[str, float]]]:
    """Per node (row of ``dev``: its log deviations from the centres, nan where missing) its findings against
    the baseline (the gate's case verdict of one run and its levels at ``alpha_node``), and per node its ratio
    to the baseline per class (for the messages)."""
    limit = math.log(1.0 - tolerance)
    n_cases = max(1, len(bm.keys))
    q = np.array([t_quantile(1.0 - alpha_node * CASE_ALPHA_SHARE / n_cases, df) for df in bm.df])
    var = {k: float(s) ** 2 for k, s in zip(bm.keys, bm.sd)}
    found: list[list[Finding]] = []
    ratios: list[dict[str, float]] = []
    for row in dev:
        ok = np.isfinite(row)
        mine: list[Finding] = []
        upper = row + q * bm.sd
        d = {k: float(v) for k, v, o in zip(bm.keys, row, ok) if o}
        levels = judge_run(d, bm.levels, var, tolerance=tolerance, alpha=alpha_node)
        for v in levels.failed:
            mine.append(Finding("baseline", v.level, v.name, v.ratio, v.upper_bound, v.keys))
        for i in np.nonzero(ok & (upper < limit))[0]:
            m = bm.members[bm.keys[i]]
            mine.append(Finding("baseline", "case", f"{m.band_name}, {format_size(m.size_bytes)}",
                                math.exp(row[i]), math.exp(upper[i]), (bm.keys[i],)))
        found.append(mine)
        by_class: dict[str, list[float]] = {}
        for k, x in d.items():
            by_class.setdefault(bm.members[k].klass, []).append(x)
        ratios.append({c: math.exp(float(np.mean(xs))) for c, xs in by_class.items()})
    return found, ratios


def _centre_error(bm: BaselineModel, ix: Sequence[int]) -> tuple[float, float]:
    """The variance of the baseline's centre of the mean offset over the cases ``ix`` (the variance of its
    session means over the S sessions, / S) and its degrees of freedom S - 1; (nan, 0) below 2 sessions."""
    keys = [bm.keys[i] for i in ix]
    runs = sorted({r for k in keys for r in bm.locs[k]})
    by_session: dict[str, list[float]] = {}
    for r in runs:
        have = [bm.locs[k][r] - bm.centre[i] for k, i in zip(keys, ix) if r in bm.locs[k]]
        if len(have) >= 0.8 * len(keys):
            by_session.setdefault(bm.session_of.get(r) or r, []).append(float(np.mean(have)))
    means = [float(np.mean(v)) for v in by_session.values()]
    if len(means) < 2:
        return float("nan"), 0.0
    return float(np.var(means, ddof=1)) / len(means), float(len(means) - 1)


def fleet_shifts(dev: np.ndarray, bm: BaselineModel, groups: Sequence[tuple[str, str, list[int]]], *,
                 alpha: float, tolerance: float) -> list[FleetShift]:
    """The fleet's shift of each class and band against the baseline (FLEET_RULE step 3)."""
    judged = [g for g in groups if g[0] in ("class", "band")]
    out = []
    for level, name, ix in judged:
        y = group_means(dev, ix) if len(ix) > 1 else dev[:, ix[0]]
        y = y[np.isfinite(y)]
        n = y.size
        if n == 0:
            continue
        d = float(np.median(y))
        s = biweight_scale(y) if n >= 2 else float("nan")
        v_nodes = math.pi / (2 * n) * s * s if math.isfinite(s) else float("nan")
        df_nodes = BIWEIGHT_EFFICIENCY * (n - 1)
        v_base, df_base = _centre_error(bm, ix)
        if not (math.isfinite(v_base) and math.isfinite(v_nodes)) or df_nodes < 1:
            why = ("the baseline holds one session of these cases: its centre's error is unknown"
                   if not math.isfinite(v_base) else "too few nodes to measure their scatter")
            out.append(FleetShift(level, name, math.exp(d), (float("nan"), float("nan")), float("nan"),
                                  "NOT GATED", n, why))
            continue
        var = v_nodes + v_base
        df = var * var / (v_nodes ** 2 / df_nodes + v_base ** 2 / df_base) if var > 0 else df_base
        sd = math.sqrt(var)
        q = t_quantile(1.0 - alpha / len(judged), df)
        z95 = t_quantile(0.975, df)
        upper, lower = math.exp(d + q * sd), math.exp(d - q * sd)
        status = "REGRESSION" if upper < 1 - tolerance else "IMPROVED" if lower > 1 + tolerance else "OK"
        out.append(FleetShift(level, name, math.exp(d), (math.exp(d - z95 * sd), math.exp(d + z95 * sd)),
                              upper, status, n))
    return out
