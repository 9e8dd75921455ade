"""A fleet of nodes judged together from their separate reports (``gpucomm fleet``, issue 46 item 2).

Pure statistics on each node's run locations (the median of its per-iteration log bandwidth, as the gate's,
``decision.run_location``); nothing here reads a file or knows pytest (``cli.fleet`` reads the reports
through ``report.saved``).  The rule is :data:`FLEET_RULE`; its calibration on fleets drawn from the real
runs is ``benchmarks/fleet_calibration.py`` (docs/fleet.md).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..units import format_size
from ..vocab import DEFAULT_ALPHA, DEFAULT_TOLERANCE, case_key
from .decision import MIN_SPREAD, RunLocation, run_location, t_quantile
from .levels import MIN_BAND_CASES, MIN_CLASS_CASES, Member, member

if TYPE_CHECKING:
    from ..measurement import Measurement
    from .store import Baseline

__all__ = ["FLEET_RULE", "MIN_PEER_NODES", "MIN_CASE_SHARE", "PEER_SHARES", "NodeInput", "node_input", "Excluded",
           "admit", "Finding", "NodeVerdict", "FleetShift", "FleetResult", "FleetError", "judge_fleet",
           "biweight_scale", "group_means", "peer_findings", "BIWEIGHT_EFFICIENCY"]

FLEET_RULE = """\
How a fleet is judged (gpucomm fleet)
-------------------------------------

Each node's report gives, per case, its run location (the median of its log bandwidth).  Reports of
another hardware shape (kind, model, count of devices) than most of the fleet's, or holding fewer than
MIN_CASE_SHARE (90 %) of the fleet's cases (another suite), are left out and named, as are missing or
damaged files.  Three checks, each at the tolerance (a verdict needs its whole bound beyond it):

1. Each node against the stored baseline: the gate's own models (fit_baseline, fit_levels; fitted once for
   all nodes), its case verdict (one run, no re-measure) and its levels (class offset, op band, case
   residual), at alpha / N for N nodes (Bonferroni over the nodes on top of the gate's per-session alpha).
2. Each node against its peers, with no baseline needed: per case the fleet's median; per class, band
   and case a node's mean deviation from those medians; the nodes' centre (median) and spread (biweight
   scale, about 87 % efficient, counted as 0.87 (N - 1) degrees of freedom; at least 0.3 %).  A node is
   slower when exp(d + q * s * sqrt(1 + pi / (2 N))) < 1 - tolerance, q the Student t quantile at
   alpha / N, split 1/2, 1/4, 1/4 over the classes, bands and cases (Bonferroni within each level).
   Needs MIN_PEER_NODES (8) nodes.
3. The fleet against the baseline: per class and band, the shift is the median of the nodes' mean
   deviations from the baseline's centres.  Its variance is the nodes' scatter, pi / (2 N) * s^2, plus
   the baseline centre's own error, the variance of the baseline's session means of that offset over
   its S sessions, divided by S: common to every node, N nodes never shrink it.  Degrees of freedom by
   Satterthwaite's rule; level alpha over the groups judged.  A group of a baseline of one session is
   not gated (its centre's error is unknown).
"""

#: the fewest nodes from which the peers' centre and spread are estimated (fewer: no peer verdict)
MIN_PEER_NODES = 8
#: a report holding fewer of the fleet's cases than this share is of another suite or test set: left out
MIN_CASE_SHARE = 0.9
#: the share of a node's peer alpha of the class, band and case checks
PEER_SHARES = {"class": 0.5, "band": 0.25, "case": 0.25}
#: the further findings a node's message lists after its first line (the rest: in the JSON)
MORE_LINES = 3
#: the biweight scale's efficiency at the normal: its estimate counts as this share of N - 1 degrees of freedom
BIWEIGHT_EFFICIENCY = 0.87


class FleetError(ValueError):
    """Too few usable reports, or a baseline that shares no case with the fleet: a usage error (exit 2)."""


@dataclass(frozen=True)
class NodeInput:
    """One node's report reduced to what the fleet needs: per case key its run location and the case's
    :class:`~pytest_gpucomm.gate.levels.Member` (class, band)."""

    name: str
    where: str
    host: str
    shape: str
    locs: dict[str, RunLocation]
    members: dict[str, Member]
    skipped: int = 0  # rows without a usable measurement (no positive samples: a world of one, a failed test)


def _shape(fingerprint: Mapping[str, object]) -> str:
    count = fingerprint.get("count")
    model = fingerprint.get("model") or fingerprint.get("kind") or "unknown hardware"
    return f"{count} x {model}" if count else str(model)


def node_input(name: str, where: str, fingerprint: Mapping[str, object], layout: str,
               pairs: Iterable[tuple[str, "Measurement"]]) -> NodeInput:
    """A node from a checked report's ``(test id, Measurement)`` pairs (``report.saved.measurements_of``)."""
    from ..ops.specs import op_kind

    locs: dict[str, RunLocation] = {}
    members: dict[str, Member] = {}
    skipped = 0
    for test, m in pairs:
        samples = m.samples_gbps if m.samples_s else []
        if not samples or not all(s > 0 and math.isfinite(s) for s in samples):
            skipped += 1
            continue
        key = case_key(test, m.op, m.size_bytes, m.dtype, m.world_size, layout)
        locs[key] = run_location(samples, f"{where}: {test}")
        members[key] = member(key, test_id=test, op=m.op, kind=op_kind(m.op), size_bytes=m.size_bytes,
                              dtype=m.dtype, world_size=m.world_size, devices=list(m.devices), layout=layout)
    return NodeInput(name, where, str(fingerprint.get("host") or ""), _shape(fingerprint), locs, members, skipped)


@dataclass(frozen=True)
class Excluded:
    """A report left out of the fleet: which (its name and file) and why."""

    name: str
    where: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.name, "report": self.where, "reason": self.reason}


def admit(nodes: Sequence[NodeInput]) -> tuple[list[NodeInput], list[Excluded]]:
    """The nodes of the fleet's shape (the most common) and test set (at least MIN_CASE_SHARE of the cases
    that half the nodes hold), and those left out with the reason."""
    if not nodes:
        return [], []
    shapes = Counter(n.shape for n in nodes)
    shape, count = shapes.most_common(1)[0]
    out: list[Excluded] = []
    kept = []
    for n in nodes:
        if n.shape != shape:
            out.append(Excluded(n.name, n.where, f"another hardware shape: {n.shape}; the fleet's is {shape} "
                                                 f"({count} of {len(nodes)} reports)"))
        else:
            kept.append(n)
    held = Counter(k for n in kept for k in n.locs)
    fleet_cases = {k for k, c in held.items() if 2 * c >= len(kept)}
    admitted = []
    for n in kept:
        have = len(fleet_cases & n.locs.keys())
        if not fleet_cases or have < MIN_CASE_SHARE * len(fleet_cases):
            out.append(Excluded(n.name, n.where, f"another suite or test set: it holds {have} of the fleet's "
                                                 f"{len(fleet_cases)} cases (at least {MIN_CASE_SHARE:.0%} needed)"))
        else:
            admitted.append(n)
    return admitted, out


@dataclass(frozen=True)
class Finding:
    """One check that found a node (or the fleet) slower: ``check`` "peers", "baseline" or "fleet", the
    ``level`` ("class", "band", "case"), the group's readable ``name``, the ratio and its bound."""

    check: str
    level: str
    name: str
    ratio: float
    bound: float
    keys: tuple[str, ...] = ()

    def text(self) -> str:
        against = {"peers": "its peers", "baseline": "the baseline", "fleet": "the baseline"}[self.check]
        return f"{self.name} {(1.0 - self.ratio) * 100:.1f}% slower than {against} (bound {self.bound:.2f}x)"

    def to_dict(self) -> dict[str, object]:
        return {"check": self.check, "level": self.level, "name": self.name, "ratio": self.ratio,
                "bound": self.bound, "cases": len(self.keys)}


@dataclass
class NodeVerdict:
    """A node's findings: against its peers and against the baseline; ``baseline_ratio``: per class its ratio
    to the baseline (for the message)."""

    node: NodeInput
    peers: list[Finding] = field(default_factory=list)
    baseline: list[Finding] = field(default_factory=list)
    baseline_ratio: dict[str, float] = field(default_factory=dict)
    cases: int = 0

    @property
    def failed(self) -> bool:
        return bool(self.peers or self.baseline)

    @property
    def status(self) -> str:
        return ("slow and regressed" if self.peers and self.baseline else "slower than its peers" if self.peers
                else "regressed" if self.baseline else "healthy")

    def lines(self) -> list[str]:
        """The first line says what, where and how much; one line per further finding."""
        found = self.peers + self.baseline
        if not found:
            return [f"node {self.node.name}: healthy ({self.cases} cases)"]
        first = found[0]
        head = f"node {self.node.name}: {first.text()}"
        more = self.baseline_ratio.get(first.name)
        if first.check == "peers" and more is not None and more < 1.0:
            head += f", and {(1.0 - more) * 100:.1f}% slower than the baseline"
        more_lines = [f"  also: {f.text()}" for f in found[1:1 + MORE_LINES]]
        if len(found) > 1 + MORE_LINES:
            more_lines.append(f"  and {len(found) - 1 - MORE_LINES} more findings (in the --json file)")
        return [head] + more_lines

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node.name, "report": self.node.where, "host": self.node.host,
                "status": self.status, "cases": self.cases, "skipped_rows": self.node.skipped,
                "peers": [f.to_dict() for f in self.peers], "baseline": [f.to_dict() for f in self.baseline],
                "message": "\n".join(self.lines())}


@dataclass(frozen=True)
class FleetShift:
    """The fleet's shift of a class or band against the baseline: the ratio, its 95 % interval, the bound at
    the level, the status ("REGRESSION", "IMPROVED", "OK", "NOT GATED") and why not gated."""

    level: str
    name: str
    ratio: float
    ci: tuple[float, float]
    bound: float
    status: str
    nodes: int
    note: str = ""

    def line(self) -> str:
        gated = f"; {self.note}" if self.note else ""
        return (f"fleet: {self.name}: {self.ratio:.3f}x the baseline (95% {self.ci[0]:.3f}-{self.ci[1]:.3f}, "
                f"{self.nodes} nodes): {self.status}{gated}")

    def to_dict(self) -> dict[str, object]:
        return {"level": self.level, "name": self.name, "ratio": self.ratio, "ci": list(self.ci),
                "bound": self.bound, "status": self.status, "nodes": self.nodes, "note": self.note}


@dataclass
class FleetResult:
    nodes: list[NodeVerdict]
    excluded: list[Excluded]
    shifts: list[FleetShift]
    alpha: float
    tolerance: float
    baseline: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def fleet_failed(self) -> bool:
        return any(s.status == "REGRESSION" for s in self.shifts)

    @property
    def drain(self) -> list[NodeVerdict]:
        return [v for v in self.nodes if v.failed]

    @property
    def failed(self) -> bool:
        return self.fleet_failed or bool(self.drain)


# -- statistics --------------------------------------------------------------------------------------------------


def biweight_scale(x: np.ndarray, c: float = 9.0) -> float:
    """Tukey's biweight midvariance's square root of the finite values of ``x`` (robust, ~87 % efficient)."""
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("nan")
    m = float(np.median(x))
    mad = float(np.median(np.abs(x - m)))
    if mad == 0.0:
        return 0.0
    u = (x - m) / (c * mad)
    w = np.abs(u) < 1.0
    num = np.sum(((x - m) ** 2 * (1 - u ** 2) ** 4)[w])
    den = np.sum(((1 - u ** 2) * (1 - 5 * u ** 2))[w])
    return float(math.sqrt(x.size * num) / abs(den)) if den != 0 else float("nan")


def _groups(keys: Sequence[str], members: Mapping[str, Member]) -> list[tuple[str, str, list[int]]]:
    """(level, readable name, column indices) of every class (>= MIN_CLASS_CASES cases), band (>=
    MIN_BAND_CASES) and case."""
    by_class: dict[str, list[int]] = {}
    by_band: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        by_class.setdefault(members[k].klass, []).append(i)
        by_band.setdefault(members[k].band, []).append(i)
    out = [("class", c, ix) for c, ix in sorted(by_class.items()) if len(ix) >= MIN_CLASS_CASES]
    for ix in by_band.values():
        if len(ix) >= MIN_BAND_CASES:
            sizes = sorted(members[keys[i]].size_bytes for i in ix)
            out.append(("band", f"{members[keys[ix[0]]].band_name}, {format_size(sizes[0])}-"
                                f"{format_size(sizes[-1])}", ix))
    for i, k in enumerate(keys):
        out.append(("case", f"{members[k].band_name}, {format_size(members[k].size_bytes)}", [i]))
    return out


def group_means(dev: np.ndarray, ix: list[int]) -> np.ndarray:
    """Per row of ``dev`` the mean of its finite values in columns ``ix`` (nan where none)."""
    sub = dev[:, ix]
    have = np.isfinite(sub)
    count = have.sum(axis=1)
    total = np.where(have, sub, 0.0).sum(axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def peer_findings(x: np.ndarray, groups: Sequence[tuple[str, str, list[int]]], keys: Sequence[str], *,
                  alpha_node: float, tolerance: float) -> list[list[Finding]]:
    """Per node (row of ``x``, nodes x cases, nan where missing) its findings against its peers (rule step 2)."""
    n = x.shape[0]
    out: list[list[Finding]] = [[] for _ in range(n)]
    if n < MIN_PEER_NODES:
        return out
    with warnings.catch_warnings():  # a case no node holds: its median is nan, and so are its deviations
        warnings.simplefilter("ignore", RuntimeWarning)
        centre = np.nanmedian(x, axis=0)
    dev = x - centre
    count = Counter(level for level, _, _ in groups)
    limit = math.log(1.0 - tolerance)
    for level, name, ix in groups:
        y = group_means(dev, ix) if len(ix) > 1 else dev[:, ix[0]]
        ok = np.isfinite(y)
        m = int(ok.sum())
        if m < MIN_PEER_NODES:
            continue
        mid = float(np.median(y[ok]))
        s = max(biweight_scale(y[ok]), MIN_SPREAD)
        df = BIWEIGHT_EFFICIENCY * (m - 1)
        q = t_quantile(1.0 - alpha_node * PEER_SHARES[level] / count[level], df)
        upper = (y - mid) + q * s * math.sqrt(1.0 + math.pi / (2 * m))
        for i in np.nonzero(ok & (upper < limit))[0]:
            out[i].append(Finding("peers", level, name, math.exp(y[i] - mid), math.exp(upper[i]),
                                  tuple(keys[j] for j in ix)))
    return out


def judge_fleet(inputs: Sequence[NodeInput], baseline: Optional["Baseline"] = None, *,
                alpha: float = DEFAULT_ALPHA, tolerance: float = DEFAULT_TOLERANCE,
                excluded: Sequence[Excluded] = ()) -> FleetResult:
    """The fleet's verdicts (FLEET_RULE): ``inputs`` the nodes read, ``excluded`` those already left out (a
    missing or damaged file).  FleetError (a usage error) where no node remains, or where no baseline is
    given and fewer than MIN_PEER_NODES remain, or where the baseline holds none of the fleet's cases."""
    nodes, left = admit(inputs)
    left = list(excluded) + left
    if not nodes:
        raise FleetError(f"no usable report: {len(left)} left out" + "".join(
            f"\n  {e.name} ({e.where}): {e.reason}" for e in left))
    if baseline is None and len(nodes) < MIN_PEER_NODES:
        raise FleetError(f"{len(nodes)} usable reports and no --baseline: judging nodes against their peers "
                         f"needs at least {MIN_PEER_NODES}; give more reports or a baseline")
    n = len(nodes)
    keys = sorted({k for nd in nodes for k in nd.locs})
    members = {}
    for nd in nodes:
        members.update(nd.members)
    x = np.array([[nd.locs[k].loc if k in nd.locs else np.nan for k in keys] for nd in nodes])
    alpha_node = alpha / n
    verdicts = [NodeVerdict(nd, cases=len(nd.locs)) for nd in nodes]
    peers = peer_findings(x, _groups(keys, members), keys, alpha_node=alpha_node, tolerance=tolerance)
    for v, f in zip(verdicts, peers):
        v.peers = f
    notes = [f"{n} nodes; each judged at alpha {alpha:g} / {n} = {alpha_node:.3g}, tolerance {tolerance:.0%}"]
    if n < MIN_PEER_NODES:
        notes.append(f"fewer than {MIN_PEER_NODES} nodes: no node is judged against its peers")
    shifts: list[FleetShift] = []
    name = ""
    if baseline is not None:
        from .fleet_baseline import fit_for_fleet, fleet_shifts, node_findings

        name = baseline.name
        se2 = {k: float(np.median([nd.locs[k].se2 for nd in nodes if k in nd.locs])) for k in keys}
        bm = fit_for_fleet(baseline, keys, se2)
        if not bm.keys:
            raise FleetError(f"the baseline {baseline.name} ({baseline.path}) holds none of the fleet's {len(keys)} "
                             "cases: another suite or another hardware's baseline")
        col = {k: i for i, k in enumerate(keys)}
        dev = x[:, [col[k] for k in bm.keys]] - bm.centre
        found, ratios = node_findings(dev, bm, alpha_node=alpha_node, tolerance=tolerance)
        for v, f, r in zip(verdicts, found, ratios):
            v.baseline, v.baseline_ratio = f, r
        shifts = fleet_shifts(dev, bm, _groups(bm.keys, bm.members), alpha=alpha, tolerance=tolerance)
        if len(bm.keys) < len(keys):
            notes.append(f"{len(keys) - len(bm.keys)} of the fleet's {len(keys)} cases are not in the baseline: "
                         "judged against the peers only")
    return FleetResult(verdicts, left, shifts, alpha, tolerance, name, notes)
