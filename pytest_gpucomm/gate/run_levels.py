"""The run judged as a whole at the gate's three levels (``levels.LEVELS_RULE``: each class's offset, each op
band's and each case's residual after it), from the cases' verdicts and the fitted baseline
(:class:`~.baseline_fit.FittedBaseline`) alone: what the session's end (``plugin.reporting``) and ``gpucomm
compare`` (``cli.regate``) ask once every case has its verdict.

In a job across nodes each node's cases are judged as a run of their own, each node's share of alpha its share
of the cases judged (``verdicts``' module doc).  numpy and scipy: imported on first use, through
:mod:`.levels`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ..checks import Judging
    from .baseline_fit import FittedBaseline
    from .decision import Prior
    from .levels import Member, RunLevels

__all__ = ["judge_levels"]


def judge_levels(fitted: "FittedBaseline", verdicts: list[dict[str, Any]],
                 settings: "Judging") -> Optional["RunLevels"]:
    """The run judged at the three levels (``gate.levels.judge_run``) against ``fitted``, from the verdicts'
    dicts (``Verdict.to_dict``, also those an xdist worker sent): their cases, log ratios (the runs each pooled)
    and prediction spreads, at the ``settings``' alpha and tolerance; None where no verdict compared with
    measured runs.  In a job across nodes each node's cases are judged as a run of their own
    (:func:`_node_levels`)."""
    from .cases import split_node_key

    models = fitted.models
    dev: dict[str, float] = {}
    var: dict[str, float] = {}
    folds: dict[str, int] = {}
    floors: dict[str, float] = {}
    runs: dict[str, int] = {}
    hosts: dict[int, str] = {}
    for v in verdicts:
        key = v.get("case") if v else None
        if isinstance(key, str) and key not in models:  # a node's key of a report judged elsewhere
            plain, node = split_node_key(key)
            if node is not None and plain in fitted.baseline.cases:
                fitted.node_case(plain, node)
        if key in models and v.get("log_ratio") is not None:
            dev[key] = float(v["log_ratio"])
            var[key] = float(v.get("prediction_sd") or 0.0) ** 2
            folds[key] = int(v.get("folds") or 1)
            floors[key] = float(v.get("runs_now_var") or 0.0)
            runs[key] = int(v.get("runs_pooled") or 1)
            if v.get("node") is not None:
                hosts[int(v["node"])] = str(v.get("host") or "")
    if not dev:
        return None
    by_node: dict[Optional[int], list[str]] = {}
    for key in dev:
        by_node.setdefault(split_node_key(key)[1], []).append(key)
    parts = [_node_levels(fitted, settings, node, keys, dev, var, folds, floors, runs, len(keys) / len(dev), hosts)
             for node, keys in sorted(by_node.items(), key=lambda kv: -1 if kv[0] is None else kv[0])]
    if len(parts) == 1:
        return parts[0]
    from .levels import RunLevels

    return RunLevels(classes=[v for p in parts for v in p.classes], bands=[v for p in parts for v in p.bands],
                     cases=[v for p in parts for v in p.cases], alpha=settings.alpha, shares=dict(parts[0].shares))


def _node_levels(fitted: "FittedBaseline", settings: "Judging", node: Optional[int], keys: list[str],
                 dev: dict[str, float], var: dict[str, float], folds: dict[str, int], floors: dict[str, float],
                 runs: dict[str, int], share: float, hosts: dict[int, str]) -> "RunLevels":
    """The levels of one node's cases ``keys`` (node None: the cases of no node, a run on one host or a
    job's whole-world groups), at ``share`` of the session's alpha (the node's share of the cases judged:
    Bonferroni over the nodes, each case residual at the level it has in one run of every node's cases);
    each level verdict names its node."""
    from .cases import split_node_key
    from ..ops.specs import op_kind
    from .levels import fit_levels, judge_run, member

    baseline = fitted.baseline
    members = {}
    for key in keys:
        e = baseline.cases[split_node_key(key)[0]]
        members[key] = member(key, test_id=e.test_id, op=e.op, kind=op_kind(e.op), size_bytes=e.size_bytes,
                              dtype=e.dtype, world_size=e.world_size, devices=e.devices, layout=e.layout)
    session_of = {r.run_id: r.session for r in baseline.runs}
    fit = fit_levels(fitted.locs, {k: m.center for k, (m, _) in fitted.models.items()}, members, session_of,
                     fitted.corpus.residual_sessions() if fitted.corpus is not None else None,
                     _borrowed_class_priors(fitted, members))
    levels = judge_run({k: dev[k] for k in keys}, fit, var, tolerance=settings.tolerance,
                       alpha=settings.alpha * share, folds=folds, floors=floors, runs=runs)
    if node is None:
        return levels
    return levels.on_node(node, hosts.get(node, ""))


def _borrowed_class_priors(fitted: "FittedBaseline", members: dict[str, "Member"]) -> dict[str, "Prior"]:
    """Where the cases borrow their spreads from a file of the same hardware (``Gate.use_spreads_of``), the class
    offsets borrow theirs from it too: per class, its offset's session and run spread over that file's runs
    of the cases measured now (``levels.borrowed_class_priors``); {} without such a file."""
    src, fit = fitted.spread_source, fitted.source_fit()
    if src is None or fit is None:
        return {}
    from .cases import split_node_key
    from .levels import MIN_CLASS_CASES, borrowed_class_priors, class_model

    session_of = {r.run_id: r.session for r in src.runs}
    models = {}
    for klass in sorted({m.klass for m in members.values()}):  # a node's cases: that case of the source's
        keys = [p for k, m in members.items() for p in [split_node_key(k)[0]]
                if m.klass == klass and p in fit.locs and p in fit.models]
        model = class_model([fit.locs[k] for k in keys], [fit.models[k][0].center for k in keys], session_of)
        if model is not None and len(keys) >= MIN_CLASS_CASES:
            models[klass] = model
    return borrowed_class_priors(models)
