"""What the gate fits of a baseline once per session (:class:`~pytest_gpucomm.gate.verdicts.Gate`): each measured
case's model and its class's prior (DECISION_RULE steps 1-2, :mod:`.decision`), borrowing the session and run
spreads of a file of the same hardware for the cases recorded in one session only; each case's run locations
and, per group, how far the runs' common offset moves (step 6, :mod:`.levels`); and the run-to-run spread of
the share of slow single ops (the tail rule, :mod:`.tails`); all of it held in one :class:`FittedBaseline`,
which every verdict, the levels and the cause tests read.  numpy and scipy: imported on first use."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional

from ..ops.specs import op_group, op_kind
from .decision import (FALLBACK_DF, CaseModel, Prior, fit_case, fit_op_priors, fit_prior, prediction, prior_class,
                       run_location)
from .levels import case_class, common_spread
from .tails import TailSpread, fit_spread

if TYPE_CHECKING:
    from .prior import CorpusPrior
    from .store import Baseline

__all__ = ["BaselineFit", "FittedBaseline", "fit_baseline", "by_node", "borrowed_priors", "fit_tail_spread"]


@dataclass(frozen=True)
class BaselineFit:
    """:func:`fit_baseline`'s result: per case key its model and prior, its run locations by run id, per
    group (``"collective"``, ``"copy"``) the common offset's spread (``levels.Common`` as a dict), and per case of
    one session where its spreads come from (``lent``: ``"file"``, the file of the same hardware; ``"corpus"``,
    the corpus prior; ``"baseline"``, this baseline's own cases of its class and op in several sessions; a case
    missing there has them assumed)."""

    models: dict[str, tuple[CaseModel, Prior]]
    locs: dict[str, dict[str, float]]
    commons: dict[str, dict[str, object]]
    lent: dict[str, str] = field(default_factory=dict)


def fit_baseline(baseline: "Baseline", path: Optional[Path], spread_source: Optional["Baseline"] = None,
                 corpus: Optional["CorpusPrior"] = None) -> BaselineFit:
    """Every measured case's model and its class's prior (DECISION_RULE steps 1-2; the one-session cases' from
    ``spread_source``, :func:`borrowed_priors`, else from the ``corpus`` prior of their level class where it is
    trusted and covers their op, else from this baseline's cases of their class and op in several sessions,
    never another op's: ``BaselineFit.lent``), each case's run locations, and per group the spread of the runs'
    common offset; ``path`` names the file in errors."""
    session_of = {r.run_id: r.session for r in baseline.runs}
    fitted: dict[str, tuple[CaseModel, str]] = {}
    locs: dict[str, dict[str, dict[str, float]]] = {}
    centers: dict[str, list[float]] = {}
    for key, e in baseline.cases.items():
        if not e.runs:
            continue
        runs = [run_location(r.samples_gbps, f"{path}: case {key!r}, run {r.run_id}") for r in e.runs]
        model = fit_case(runs, [session_of.get(r.run_id) for r in e.runs])
        group = op_group(e.op)
        fitted[key] = (model, prior_class(group == "collective", e.size_bytes))
        locs.setdefault(group, {})[key] = {r.run_id: x.loc for r, x in zip(e.runs, runs)}
        centers.setdefault(group, []).append(model.center)
    priors = {c: fit_prior(m for m, cc in fitted.values() if cc == c) for c in {cc for _, cc in fitted.values()}}
    op_of = {key: e.op for key, e in baseline.cases.items()}
    borrowed = borrowed_priors(fitted, spread_source, op_of)
    lent = dict.fromkeys(borrowed, "file")
    own = fit_op_priors(fitted, op_of)
    for key, (m, c) in fitted.items():
        if m.sessions != 1 or key in borrowed:
            continue
        e = baseline.cases[key]
        p = corpus.prior_for(case_class(op_kind(e.op), e.size_bytes), 1, e.op) if corpus is not None else None
        if p is None:  # this baseline's cases of the class and op in several sessions
            p, source = own[(c, e.op)], "baseline"
        else:
            source = "corpus"
        borrowed[key] = p
        if p.df > 0:
            lent[key] = source
    commons: dict[str, dict[str, object]] = {}
    for g, v in locs.items():
        common = common_spread(list(v.values()), centers[g], session_of)
        if common is not None:
            commons[g] = dataclasses.asdict(common)
    return BaselineFit(models={key: (m, borrowed.get(key, priors[c])) for key, (m, c) in fitted.items()},
                       locs={key: runs for v in locs.values() for key, runs in v.items()}, commons=commons,
                       lent=lent)


def by_node(baseline: "Baseline") -> "Baseline":
    """``baseline`` with each case's runs of one node of a job (``RunRecord.node``) split off as a case of its
    own, keyed ``cases.node_key(key, N)``: each node judged against its own runs (``--gpu-baseline-nodes=own``);
    the job's whole-world runs (node None) stay under the case's key.  A baseline without a run of one node is
    returned as it is (one host: the same fit as ever)."""
    from .cases import node_key

    node_of = {r.run_id: r.node for r in baseline.runs if r.node is not None}
    if not node_of:
        return baseline
    cases = {}
    for key, e in baseline.cases.items():
        if not e.runs:
            cases[key] = e
        parts: dict[Optional[int], list] = {}
        for r in e.runs:
            parts.setdefault(node_of.get(r.run_id), []).append(r)
        for node, runs in parts.items():
            cases[node_key(key, node)] = dataclasses.replace(e, runs=runs)
    return dataclasses.replace(baseline, cases=cases)


def borrowed_priors(fitted: dict[str, tuple[CaseModel, str]], src: Optional["Baseline"],
                    ops: Mapping[str, str]) -> dict[str, Prior]:
    """The priors of the one-session cases of ``fitted`` (case key -> its model and prior class; ``ops``: case key
    -> its op), from the spread source ``src`` (``Gate.use_spreads_of``: a file of the same hardware with runs in
    several sessions): the same case's session and run spreads, else the median of its class's cases of the same
    op (another op's are not lent: the both-ways host copies move far more between boots than the one-way ones,
    ``prior.ClassPrior``); {} without a source."""
    one = [k for k, (m, _) in fitted.items() if m.sessions == 1]
    if src is None or not one:
        return {}
    session_of = {r.run_id: r.session for r in src.runs}
    models: dict[str, tuple[CaseModel, str]] = {}
    src_op: dict[str, str] = {}
    for key, e in src.cases.items():
        if e.runs:
            runs = [run_location(r.samples_gbps, f"{src.path}: case {key!r}") for r in e.runs]
            models[key] = (fit_case(runs, [session_of.get(r.run_id) for r in e.runs]),
                           prior_class(op_group(e.op) == "collective", e.size_bytes))
            src_op[key] = e.op
    priors = {c: fit_prior(m for m, cc in models.values() if cc == c) for c in {cc for _, cc in models.values()}}
    figures: dict[str, tuple[float, float, float, float]] = {}
    for key, (m, c) in models.items():
        if m.sessions >= 2:
            sp = prediction(m, priors[c], 1, m.mean_se2)
            df_b = m.sessions - 1 + (priors[c].df if math.isfinite(priors[c].df) else 1000.0)
            figures[key] = (sp.session_sd ** 2, df_b, sp.run_sd ** 2, float(max(m.within_df, 1)))
    out: dict[str, Prior] = {}
    for key in one:
        if key in figures:
            s2, d, r2, rd = figures[key]
        else:
            same = [figures[k] for k, (_, c) in models.items()
                    if c == fitted[key][1] and src_op[k] == ops.get(key) and k in figures]
            if not same:
                continue
            s2, r2 = sorted(f[0] for f in same)[len(same) // 2], sorted(f[2] for f in same)[len(same) // 2]
            d = rd = FALLBACK_DF
        out[key] = Prior(s2, d, run_s2=r2, run_df=rd)
    return out


def fit_tail_spread(baseline: "Baseline") -> TailSpread:
    """The run-to-run spread of the share of slow ops, fitted over every case's sketches."""
    # runs of fewer than 100 single ops keep a sketch without a p99: the rule reads none of them
    cases = [[r.tail for r in e.runs if r.tail is not None and r.tail.p99_s is not None]
             for e in baseline.cases.values()]
    return fit_spread([c for c in cases if c])


class FittedBaseline:
    """The baseline as the gate judges against it, fitted once (:class:`~pytest_gpucomm.gate.verdicts.Gate`
    makes it at its first need, again only where the spreads' source or the corpus prior changes): with
    ``nodes`` "own" each node's runs of a case a case of their own (``view``, :func:`by_node`), else the
    baseline itself; each case's model and its class's prior (``models``), its runs' locations (``locs``), per
    group the common offset's spread (``commons``: :func:`fit_baseline`); for a node with no runs of its own the
    runs of every node pooled (:meth:`node_case`); the tail rule's spread (:meth:`tail_spread`).  ``path`` names
    the file in errors."""

    def __init__(self, baseline: "Baseline", path: Optional[Path], nodes: str,
                 spread_source: Optional["Baseline"] = None, corpus: Optional["CorpusPrior"] = None) -> None:
        self.baseline, self.path, self.nodes = baseline, path, nodes
        self.spread_source, self.corpus = spread_source, corpus
        self.view = by_node(baseline) if nodes == "own" else baseline
        fit = self._fit(self.view)
        self.models, self.locs, self.commons, self.lent = fit.models, fit.locs, fit.commons, fit.lent
        #: the nodes judged against the pooled runs of every node although the mode is "own" (none of their own)
        self.pooled_nodes: set[int] = set()
        #: own mode: every node's runs pooled, (models, locations), fitted for a node with no runs of its own
        self._pooled: Optional[tuple[dict[str, tuple[CaseModel, Prior]], dict[str, dict[str, float]]]] = None
        self._tail_spread: Optional[TailSpread] = None
        self._source_fit: Optional[BaselineFit] = None

    def _fit(self, baseline: "Baseline") -> BaselineFit:
        """``baseline`` fitted with the spreads' source, else the corpus prior (which the levels read for the
        residuals' session part in any case: :attr:`corpus`)."""
        corpus = self.corpus if self.spread_source is None else None
        return fit_baseline(baseline, self.path, self.spread_source, corpus)

    def node_case(self, key: str, node: Optional[int]) -> str:
        """The key a measurement of case ``key`` on ``node`` is judged under (``cases.node_key``; ``key`` itself
        where node is None), its model there: the node's own runs ("own"), else, and for a node with no runs of
        its own (:attr:`pooled_nodes`), the runs of every node pooled."""
        from .cases import node_key

        nkey = node_key(key, node)
        if nkey in self.models:
            return nkey
        if self._pooled is None:
            if self.nodes == "pooled" or self.view is self.baseline:
                self._pooled = (dict(self.models), dict(self.locs))
            else:
                fit = self._fit(self.baseline)
                self._pooled = (fit.models, fit.locs)
        pooled_models, pooled_locs = self._pooled
        if key in pooled_models:
            self.models[nkey], self.locs[nkey] = pooled_models[key], pooled_locs[key]
            if self.nodes == "own" and node is not None:
                self.pooled_nodes.add(int(node))
        return nkey

    def source_fit(self) -> Optional[BaselineFit]:
        """The spreads' source (:attr:`spread_source`) fitted on its own, once (the class offsets' borrowed priors
        read it for every node's levels); None without one."""
        if self._source_fit is None and self.spread_source is not None:
            self._source_fit = fit_baseline(self.spread_source, self.spread_source.path)
        return self._source_fit

    def tail_spread(self) -> TailSpread:
        """The run-to-run spread of the share of slow ops, fitted once over every case's sketches."""
        if self._tail_spread is None:
            self._tail_spread = fit_tail_spread(self.baseline)
        return self._tail_spread
