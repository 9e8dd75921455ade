"""Stragglers and outlier nodes, named, from the measurements of one run -- no baseline needed.

Two sources:

* a collective's ranks (``Measurement.info["ranks"]``, written by
  :func:`~pytest_gpucomm.ops.collectives.to_measurement` from what
  :func:`~pytest_gpucomm.ops.collectives.iteration_stats` found on the ranks): per iteration, the rank the
  others waited for (the one that arrived last); per rank, the medians of its own time, of its *lag* (how
  much later than the first rank it arrived) and of its wait, and how often it arrived last.
  :func:`case_ranks` turns them into the case's slowest rank (the one that arrived last most often, and in
  how many iterations), the ranks' medians, their spread, and the ranks that stand out;
* measurements made once per node of the same case (node-local groups and copies: ``info["node"]`` and
  ``info["host"]``): :func:`node_outliers` names a node whose figure stands out from the other nodes'.

The rule is the same for both, a robust outlier rule: the modified z-score of Iglewicz and Hoaglin,
``0.6745 (x - median) / MAD``, above 3.5 (:func:`modified_z`), with the median and the MAD (median absolute
deviation) taken over the ranks (or nodes) of the same case, so that one or a few bad ones do not move
what "normal" is.  It needs at least :data:`MIN_COMPARED` values: with two, the median lies halfway
between them and neither stands out, so a case measured on two nodes gets no per-node verdict (the gate,
against a baseline, judges each node's figure).  It names the minority that differs: if most nodes are
slow, the fast one is "normal" by nothing here.

The MAD has a floor, :data:`MAD_FLOOR` of the median (of the iteration time, or of the nodes' figure):
ranks that are alike give a MAD of almost nothing (a clock's resolution), and dividing by it would make a
microsecond of noise an "outlier".  With the floor, a rank is named only when it arrived later than the
others' median by more than 3.5 / 0.6745 x 2% ~ 10% of an iteration (a node when its figure is ~10% off
the nodes' median): less than that is within what runs of the same hardware differ by, and costs a job
little.

A rank held up where its own clock does not run (between two timed iterations: a sleep, a stop, another
process on its core) is late only in some iterations, so neither the count nor the medians above see it.
The sums do: each rank's share of the iterations' time spent waiting for the last rank
(``info["ranks"]["wait_share"]``, and ``op_wait_share`` for the single ops timed one by one,
:func:`~pytest_gpucomm.ops.across_ranks.iteration_stats`) grows on the ranks that wait for it, not on it.
A rank is *waited for* when the median share of the other ranks exceeds its own by :data:`WAITED_FOR` or more
in either phase (:attr:`RankFigures.waited_for`), which held for no rank of the healthy jobs the threshold was
calibrated on (docs/launched-jobs.md, "A straggler outside the timed loop").

The waits cancel where a rank is held up *inside* an op, after its part of the op is done: the others finish
that op and wait in the next, while its own time of the op grows as much as theirs (a stop, another process on
its core).  Where the ranks noted when they began each op, each rank's *late share* says how much later than
the first rank it began them, summed, on clocks aligned across the ranks
(``info["ranks"]["late_share"]``, ``op_late_share``; :func:`~pytest_gpucomm.ops.across_ranks.late_total`).  A
rank is waited for too when its late share exceeds the median of the others' by :data:`LATE_FOR` or more
(:func:`excess_lates`), in either phase.  A rank held up before its part of an op is done delays every rank's op
alike: no rank began late, and no rank is named for that stop.

Only slow is named: a rank with a *large* lag, a node with a *low* figure (one-sided); a rank that arrived
first or a node that is faster than the others holds no one up.

Pure: no torch, no pytest.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..measurement import Measurement
from ..units import describe_duration, format_size

__all__ = ["Z_SCALE", "Z_LIMIT", "MAD_FLOOR", "MIN_COMPARED", "CLEAR_MAJORITY", "CHANCE_P", "MIN_LAG",
           "NOTABLE_SPREAD", "WAITED_FOR", "LATE_FOR", "LATE_ACROSS_FOR", "MIN_CASES_ACROSS", "modified_z",
           "chance_of_at_least", "excess_waits", "excess_lates", "RankFigures", "CaseRanks", "case_ranks",
           "late_across", "late_across_named", "NodeFigure", "node_outliers", "OutlierNode", "find_outliers", "fmt_s"]

Z_SCALE = 0.6745  # makes the MAD of a normal distribution an estimate of its standard deviation
Z_LIMIT = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
MAD_FLOOR = 0.02  # the MAD is at least this fraction of the median (see the module docstring)
MIN_COMPARED = 3  # values needed before one can stand out from the others
#: a case's slowest rank is "clear" when it arrived last in at least this fraction of the iterations (with
#: ranks alike, each would be last in about 1/world of them)
CLEAR_MAJORITY = 2 / 3
#: ... and only when so many iterations are unlikely by chance with ranks alike: the binomial chance of
#: at least that count, each rank last with probability 1/world, is at most this (on 2 ranks, 8 of 12 has a
#: chance of 0.19 and is not clear; 10 of 10 has 0.001)
CHANCE_P = 0.001
#: ... and only when the others wait for it long enough to matter: its median lag is at least this fraction
#: of the iteration time (the ranks of one host arrive microseconds apart)
MIN_LAG = 0.05
#: a spread of the ranks' median own times of at least this fraction of the iteration time is notable
NOTABLE_SPREAD = 0.25
#: a rank is waited for when the other ranks' median share of the iterations' time spent waiting for the last
#: rank exceeds its own by at least this (in the timed samples or in the single ops); above the largest excess of
#: every healthy job measured, jobs of more ranks than cores included (docs/launched-jobs.md, "A straggler outside
#: the timed loop")
WAITED_FOR = 0.5
#: a rank is waited for, too, when its share of the iterations' time by which it began its ops later than the first
#: rank (summed) exceeds the other ranks' median share by at least this (in the timed samples or in the single ops);
#: above the largest excess of every healthy job measured (docs/launched-jobs.md, "A straggler outside the timed
#: loop")
LATE_FOR = 0.8
#: a node is named, too, when its ranks' excess late share (:func:`excess_lates`, timed samples), averaged over the
#: run's cases over two nodes or more that have it (at least :data:`MIN_CASES_ACROSS`), is at least this and at least
#: Z_LIMIT standard errors of that mean: a rank held up a little in every case (another process on its core) is late
#: by a share of every case that no one case shows beyond the noise.  Between the healthy jobs measured (at most
#: 0.020, 17 jobs) and the jobs with a CPU hog on one rank's core (0.032 to 0.063, 12 jobs): docs/launched-jobs.md,
#: "A straggler outside the timed loop", and benchmarks/data/stragglers_cpu.json
LATE_ACROSS_FOR = 0.03
MIN_CASES_ACROSS = 8


def excess_waits(shares: Sequence[float]) -> list[float]:
    """Per rank, how much more of the iterations' time the other ranks spent waiting than it did: the median
    of the others' ``shares`` minus its own (0 for a group of one)."""
    if len(shares) < 2:
        return [0.0] * len(shares)
    values = list(shares)
    return [statistics.median(values[:i] + values[i + 1:]) - x for i, x in enumerate(values)]


def excess_lates(shares: Sequence[float]) -> list[float]:
    """Per rank, how much more of the iterations' time it began its ops after the first rank than the other ranks
    did: its own ``shares`` entry minus the median of the others' (0 for a group of one)."""
    return [-x for x in excess_waits(shares)]


def chance_of_at_least(k: int, n: int, p: float) -> float:
    """The binomial chance of ``k`` or more successes in ``n`` trials of probability ``p``, for any ``n``:
    scipy's binomial tail (the regularized incomplete beta function), not a sum of ``comb(n, i) p^i ...``
    terms, whose binomial coefficients overflow a float from about 1,030 trials."""
    from scipy.special import bdtrc  # P(X > j), X ~ Binomial(n, p)

    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return float(bdtrc(k - 1, n, p))


def modified_z(values: Sequence[float], floor: float = 0.0) -> list[float]:
    """``0.6745 (x - median) / max(MAD, floor)`` of each value; where that scale is 0 (every value but a
    minority equal, and no floor), 0 for a value equal to the median and +-inf for another."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    scale = max(mad, floor)
    if scale <= 0:
        return [0.0 if v == med else math.copysign(math.inf, v - med) for v in values]
    return [Z_SCALE * (v - med) / scale for v in values]


fmt_s = describe_duration  # a duration for a human: 20.1 ms, 153 us, 1.20 s


def _node_label(node: int, host: str) -> str:
    return f"node {node}" + (f" ({host})" if host else "")


@dataclass(frozen=True)
class RankFigures:
    """One rank's figures in one case (medians over the iterations) and its modified z-score (lag)."""

    rank: int
    node: int
    host: str
    device: str
    own_median_s: float  # its own time of an iteration
    lag_median_s: float  # how much later than the first rank it arrived
    wait_median_s: float  # how long it waited for the last rank
    straggled: int  # iterations in which it arrived last
    z: float  # modified z-score of its lag among the case's ranks (0 with fewer than MIN_COMPARED ranks)
    #: how much more of the iterations' time the others waited than it did (:func:`excess_waits`): in the
    #: timed samples, and in the single ops (None where the data has no such share)
    excess_wait: Optional[float] = None
    op_excess_wait: Optional[float] = None
    #: how much more of the iterations' time it began its ops after the first rank than the others did
    #: (:func:`excess_lates`): in the timed samples, and in the single ops (None where the starts were not noted)
    excess_late: Optional[float] = None
    op_excess_late: Optional[float] = None

    def _over(self) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
        phases = ("timed samples' time", "single ops' time")
        waits = [(x, what) for x, what in zip((self.excess_wait, self.op_excess_wait), phases)
                 if x is not None and x >= WAITED_FOR]
        lates = [(x, what) for x, what in zip((self.excess_late, self.op_excess_late), phases)
                 if x is not None and x >= LATE_FOR]
        return waits, lates

    @property
    def waited_for(self) -> bool:
        """The others waited for it, summed over the iterations: its excess wait at least WAITED_FOR, or its
        excess late share at least LATE_FOR, in the timed samples or in the single ops."""
        waits, lates = self._over()
        return bool(waits or lates)

    def waited_text(self) -> str:
        """``the others waited 59% of the timed samples' time for it, beyond its own wait (summed)``, ``it began
        its ops 23% of the timed samples' time later than the others did (summed)``, or both, joined by ``;``"""
        waits, lates = self._over()
        texts = []
        if waits:
            texts.append(f"the others waited {' and '.join(f'{x:.0%} of the {w}' for x, w in waits)} for it, "
                         "beyond its own wait (summed)")
        if lates:
            texts.append(f"it began its ops {' and '.join(f'{x:.0%} of the {w}' for x, w in lates)} later than the "
                         "others did (summed)")
        return "; ".join(texts)

    def label(self, with_node: bool) -> str:
        where = ", ".join(x for x in ((f"node {self.node}" if with_node else ""), self.host, self.device) if x)
        return f"rank {self.rank}" + (f" ({where})" if where else "")

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "rank": self.rank, "node": self.node, "host": self.host, "device": self.device,
            "own_median_s": self.own_median_s, "lag_median_s": self.lag_median_s,
            "wait_median_s": self.wait_median_s, "straggled": self.straggled, "z": _finite(self.z)}
        if self.has_shares:  # a report of before the wait shares reads back as it was written
            out.update(excess_wait=self.excess_wait, op_excess_wait=self.op_excess_wait, waited_for=self.waited_for)
        if self.excess_late is not None or self.op_excess_late is not None:
            out.update(excess_late=self.excess_late, op_excess_late=self.op_excess_late)
        return out

    @property
    def has_shares(self) -> bool:
        """Its data has the ranks' wait shares (:func:`excess_waits`)."""
        return any(x is not None for x in (self.excess_wait, self.op_excess_wait, self.excess_late,
                                            self.op_excess_late))

    @property
    def most_over(self) -> float:
        """Its largest figure over its threshold (excess / threshold), for the order of the ranks waited for."""
        pairs = ((self.excess_wait, WAITED_FOR), (self.op_excess_wait, WAITED_FOR), (self.excess_late, LATE_FOR),
                 (self.op_excess_late, LATE_FOR))
        return max((x / t for x, t in pairs if x is not None), default=0.0)


def _finite(x: float) -> Optional[float]:
    return x if math.isfinite(x) else None  # JSON has no infinity


@dataclass(frozen=True)
class CaseRanks:
    """What a collective's ranks say of one case: see :func:`case_ranks`."""

    n: int  # iterations
    iteration_s: float  # the median time of an iteration (the slowest rank's)
    ranks: tuple[RankFigures, ...]
    slowest: RankFigures  # the rank that arrived last in the most iterations (ties: the first listed)
    outliers: tuple[RankFigures, ...]  # ranks whose lag stands out (modified z-score > Z_LIMIT)
    n_nodes: int  # nodes the case's ranks ran on
    #: ranks the others waited for, summed over the iterations (:attr:`RankFigures.waited_for`), most first
    waited_for: tuple[RankFigures, ...] = ()

    @property
    def spread_s(self) -> float:
        """Longest minus shortest median own time of the ranks.  The rank with the longest own time arrived
        first and waited; the one with the shortest arrived last and did not: the spread is how long, in a
        typical iteration, the first rank waits for the last -- the part of the iteration's time that is
        waiting rather than communicating (0 when the ranks arrive together)."""
        owns = [r.own_median_s for r in self.ranks]
        return max(owns) - min(owns)

    @property
    def spread_fraction(self) -> float:
        return self.spread_s / self.iteration_s if self.iteration_s > 0 else 0.0

    @property
    def clear(self) -> bool:
        """One rank arrived last in a clear majority (CLEAR_MAJORITY) of the iterations, more often than
        chance would make it (CHANCE_P), and the others waited for it a MIN_LAG share of the iteration."""
        k, n, world = self.slowest.straggled, self.n, len(self.ranks)
        return (world >= 2 and n > 0 and k >= CLEAR_MAJORITY * n and chance_of_at_least(k, n, 1 / world) <= CHANCE_P
                and self.slowest.lag_median_s >= MIN_LAG * self.iteration_s)

    @property
    def notable(self) -> bool:
        """The ranks' spread is at least NOTABLE_SPREAD of the iteration time."""
        return self.spread_fraction >= NOTABLE_SPREAD

    @property
    def listed(self) -> bool:
        """Whether the report's "slowest ranks" section lists the case: a clear slowest rank, a notable
        spread, a rank that stands out, or a rank the others waited for."""
        return self.clear or self.notable or bool(self.outliers) or bool(self.waited_for)

    @property
    def median_lag_s(self) -> float:
        return statistics.median(r.lag_median_s for r in self.ranks)

    def text(self) -> str:
        """One line: the slowest rank, how often and by how much it was last, the ranks' medians and
        spread, the outliers."""
        nodes = self.n_nodes > 1
        s = self.slowest
        owns = [r.own_median_s for r in self.ranks]
        out = (f"{s.label(nodes)} arrived last in {s.straggled} of {self.n} iterations, "
               f"{fmt_s(s.lag_median_s)} after the first rank (median); the ranks' median times "
               f"{fmt_s(min(owns))} to {fmt_s(max(owns))} (spread {fmt_s(self.spread_s)}, "
               f"{self.spread_fraction:.0%} of the iteration's {fmt_s(self.iteration_s)})")
        if self.outliers:
            out += "; stands out: " + ", ".join(r.label(nodes) for r in self.outliers)
        for r in self.waited_for:
            out += f"; waited for: {r.label(nodes)}: {r.waited_text()}"
        return out

    def to_dict(self) -> dict[str, object]:
        """The JSON report's per-row summary (the per-rank data itself is in the row's info["ranks"])."""
        return {"n": self.n, "iteration_median_s": self.iteration_s, "slowest": self.slowest.to_dict(),
                "spread_s": self.spread_s, "spread_fraction": self.spread_fraction, "clear": self.clear,
                "notable": self.notable, "listed": self.listed, "n_nodes": self.n_nodes,
                "median_lag_s": self.median_lag_s, "outlier_ranks": [r.to_dict() for r in self.outliers],
                **({"waited_for": [r.to_dict() for r in self.waited_for]}
                   if any(r.has_shares for r in self.ranks) else {})}


_RANK_FIELDS = ("rank", "node", "host", "device", "own_median_s", "lag_median_s", "wait_median_s", "straggled")


def case_ranks(m: Measurement) -> Optional[CaseRanks]:
    """The ranks' figures of a collective's measurement (from ``m.info["ranks"]``), or None when it has
    none (a copy, or a measurement of before this data was kept).

    The slowest rank is the one that arrived last in the most iterations (ties: the first in the group's
    order).  A rank stands out when its median lag has a modified z-score above Z_LIMIT among the case's
    ranks, with the MAD at least MAD_FLOOR of the median iteration time; with fewer than MIN_COMPARED ranks
    none does.  Raises ValueError naming the field when the data is malformed (its lists of unequal length,
    a straggler id that is not one of the ranks)."""
    data = m.info.get("ranks")
    if not data:
        return None
    where = f"info['ranks'] of the {m.op} measurement at {format_size(m.size_bytes)}"
    missing = [k for k in _RANK_FIELDS + ("straggler",) if k not in data]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    world = len(data["rank"])
    bad = [k for k in _RANK_FIELDS if len(data[k]) != world]
    if bad or world == 0:
        raise ValueError(f"{where}: {', '.join(bad) or 'rank'} must list one value per rank ({world} ranks)")
    unknown = sorted(set(data["straggler"]) - set(data["rank"]))
    if unknown:
        raise ValueError(f"{where}: straggler ids {unknown[:5]} are not among its ranks")
    n = len(data["straggler"])
    iteration = statistics.median(m.samples_s) if m.samples_s else 0.0
    lags = [float(x) for x in data["lag_median_s"]]
    zs = modified_z(lags, MAD_FLOOR * iteration) if world >= MIN_COMPARED else [0.0] * world
    excess: dict[str, list[Optional[float]]] = {}
    for key, fn in (("wait_share", excess_waits), ("op_wait_share", excess_waits), ("late_share", excess_lates),
                    ("op_late_share", excess_lates)):  # absent from the data of before them
        shares = data.get(key)
        if shares is not None and len(shares) != world:
            raise ValueError(f"{where}: {key} must list one value per rank ({world} ranks)")
        excess[key] = list(fn([float(x) for x in shares])) if shares else [None] * world
    ranks = tuple(
        RankFigures(rank=int(data["rank"][i]), node=int(data["node"][i]), host=str(data["host"][i]),
                    device=str(data["device"][i]), own_median_s=float(data["own_median_s"][i]),
                    lag_median_s=lags[i], wait_median_s=float(data["wait_median_s"][i]),
                    straggled=int(data["straggled"][i]), z=zs[i], excess_wait=excess["wait_share"][i],
                    op_excess_wait=excess["op_wait_share"][i], excess_late=excess["late_share"][i],
                    op_excess_late=excess["op_late_share"][i])
        for i in range(world))
    slowest = max(ranks, key=lambda r: r.straggled)  # max keeps the first of equals
    outliers = tuple(r for r in ranks if r.z > Z_LIMIT)
    waited = tuple(sorted((r for r in ranks if r.waited_for), key=lambda r: -r.most_over))
    return CaseRanks(n=n, iteration_s=iteration, ranks=ranks, slowest=slowest, outliers=outliers,
                     n_nodes=len({r.node for r in ranks}), waited_for=waited)


def late_across_named(mean: float, k: int, se: float) -> bool:
    """Whether a node's mean excess late share over ``k`` cases, with standard error ``se``, names it: over
    MIN_CASES_ACROSS cases or more, at least LATE_ACROSS_FOR and at least Z_LIMIT standard errors."""
    return k >= MIN_CASES_ACROSS and mean >= LATE_ACROSS_FOR and mean >= Z_LIMIT * se


def late_across(per_case: Sequence[Optional[CaseRanks]]) -> dict[tuple[int, str], tuple[float, int, float]]:
    """Per node (``(node, host)``): the mean over the cases of the mean excess late share
    (:attr:`RankFigures.excess_late`, timed samples) of its ranks in the case, the number of cases, and the
    standard error of that mean (the cases' standard deviation over the root of their number; inf for one case),
    over the cases whose ranks ran on two nodes or more and have the figure."""
    sums: dict[tuple[int, str], list[float]] = {}
    for cr in per_case:
        if cr is None or cr.n_nodes < 2:
            continue
        mine: dict[tuple[int, str], list[float]] = {}
        for r in cr.ranks:
            if r.excess_late is not None:
                mine.setdefault((r.node, r.host), []).append(r.excess_late)
        for key, xs in mine.items():
            sums.setdefault(key, []).append(statistics.fmean(xs))
    return {key: (statistics.fmean(xs), len(xs), statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.inf)
            for key, xs in sums.items()}


@dataclass(frozen=True)
class NodeFigure:
    """One node's figure (GB/s) in a case measured once per node, and its modified z-score there."""

    node: int
    host: str
    gbps: float
    z: float
    nodes_median_gbps: float


def node_outliers(measurements: Sequence[Measurement]) -> list[NodeFigure]:
    """The nodes whose figure (``gbps``) is low against the other nodes' in measurements of one case made
    once per node (each with ``info["node"]``): modified z-score below -Z_LIMIT, the MAD at least MAD_FLOOR
    of the nodes' median.  None with fewer than MIN_COMPARED nodes (see the module docstring)."""
    if len(measurements) < MIN_COMPARED:
        return []
    values = [m.gbps for m in measurements]
    med = statistics.median(values)
    zs = modified_z(values, MAD_FLOOR * med)
    return [NodeFigure(node=int(m.info["node"]), host=str(m.info.get("host", "")), gbps=v, z=z,
                       nodes_median_gbps=med)
            for m, v, z in zip(measurements, values, zs) if z < -Z_LIMIT]


@dataclass
class OutlierNode:
    """A node named as an outlier in one or more cases: by its ranks' lag in a collective over several
    nodes, or by its own figure against the other nodes'."""

    node: int
    host: str
    ranks: set[int] = field(default_factory=set)
    cases: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return _node_label(self.node, self.host)

    def text(self, limit: int = 3) -> str:
        ranks = (f"rank{'s' if len(self.ranks) > 1 else ''} {', '.join(str(r) for r in sorted(self.ranks))}; "
                 if self.ranks else "")
        whys = [c["why"] for c in self.cases[:limit]]
        more = f"; and {len(self.cases) - limit} more cases" if len(self.cases) > limit else ""
        return f"{self.label}: {ranks}{'; '.join(whys)}{more}"

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node, "host": self.host, "ranks": sorted(self.ranks), "cases": self.cases}


#: a measured case as the stragglers group its ranks: the test's label, op, kind, size, dtype and devices
CaseKey = tuple[str, str, str, int, Optional[str], tuple[str, ...]]


def _case_key(label: str, m: Measurement) -> CaseKey:
    return (label, m.op, m.kind, m.size_bytes, m.dtype, m.devices)


def find_outliers(cases: Sequence[tuple[str, Measurement]]) -> tuple[list[Optional[CaseRanks]], list[OutlierNode]]:
    """For the run's measurements (``(label, measurement)``, the label naming the test): each one's
    :class:`CaseRanks` (None where it has no ranks' data), and the outlier nodes, in the order first named.

    A node is named when one of its ranks stands out, or was waited for (:attr:`RankFigures.waited_for`), in a
    collective whose ranks ran on two nodes or more (on one node, the rank is named in the case's line); when
    its ranks began their ops late across the cases (:func:`late_across`); or when its own measurement of a case
    stands out from the other nodes' (:func:`node_outliers`)."""
    per_case = [case_ranks(m) for _, m in cases]
    found: dict[int, OutlierNode] = {}

    def node(n: int, host: str) -> OutlierNode:
        entry = found.setdefault(n, OutlierNode(n, host))
        entry.host = entry.host or host
        return entry

    for (label, m), cr in zip(cases, per_case):
        if cr is None or cr.n_nodes < 2:
            continue
        for nd in sorted({(r.node, r.host) for r in cr.outliers}):
            mine = [r for r in cr.outliers if (r.node, r.host) == nd]
            entry = node(*nd)
            entry.ranks.update(r.rank for r in mine)
            lags = ", ".join(f"rank {r.rank} by {fmt_s(r.lag_median_s)}" for r in mine)
            entry.cases.append({
                "test": label, "op": m.op, "size_bytes": m.size_bytes, "by": "ranks",
                "ranks": [r.rank for r in mine], "lag_median_s": [r.lag_median_s for r in mine],
                "z": [_finite(r.z) for r in mine], "ranks_median_lag_s": cr.median_lag_s,
                "why": (f"late in {label} ({m.op} {format_size(m.size_bytes)}): {lags} after the first rank "
                        f"(median; the ranks' median lag {fmt_s(cr.median_lag_s)})"),
            })
        for r in cr.waited_for:  # held up in some iterations only (a rank that stands out is named above)
            if r in cr.outliers:
                continue
            entry = node(r.node, r.host)
            entry.ranks.add(r.rank)
            entry.cases.append({
                "test": label, "op": m.op, "size_bytes": m.size_bytes, "by": "waits", "ranks": [r.rank],
                "excess_wait": r.excess_wait, "op_excess_wait": r.op_excess_wait,
                **({"excess_late": r.excess_late, "op_excess_late": r.op_excess_late}
                   if r.excess_late is not None or r.op_excess_late is not None else {}),
                "why": f"waited for in {label} ({m.op} {format_size(m.size_bytes)}): rank {r.rank}: {r.waited_text()}",
            })
    for where, (mean, k, se) in late_across(per_case).items():
        if late_across_named(mean, k, se):
            node(*where).cases.append({
                "by": "late across cases", "cases": k, "excess_late_mean": mean, "excess_late_se": se,
                "why": (f"its ranks began their ops {mean:.0%} of the time later than the others did, on average over "
                        f"{k} cases (standard error {se:.1%}; each case's share summed over its timed ops)"),
            })
    groups: dict[CaseKey, list[tuple[str, Measurement]]] = {}
    for label, m in cases:
        if "node" in m.info:
            groups.setdefault(_case_key(label, m), []).append((label, m))
    for members in groups.values():
        for f in node_outliers([m for _, m in members]):
            label, m = members[0]
            node(f.node, f.host).cases.append({
                "test": label, "op": m.op, "size_bytes": m.size_bytes, "by": "nodes", "gbps": f.gbps,
                "nodes_median_gbps": f.nodes_median_gbps, "z": _finite(f.z), "nodes": len(members),
                "why": (f"slow in {label} ({m.op} {format_size(m.size_bytes)}): {f.gbps:.3g} GB/s against "
                        f"{f.nodes_median_gbps:.3g} GB/s, the median of {len(members)} nodes"),
            })
    return per_case, list(found.values())
