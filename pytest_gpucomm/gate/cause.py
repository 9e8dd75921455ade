"""Why a case got slower: the likely causes a verdict names, and the cause test of the environment.

:func:`likely_causes` lists, for a verdict, each change of a GPU or link since the baseline that can slow its case
(:mod:`pytest_gpucomm.env.device_state`) and a device that throttled while the case was measured
(:mod:`pytest_gpucomm.ops.clocks`).

The cause test finds which environment variable made a case slower.

When a case fails as REGRESSION and the run's environment differs from the baseline's (the ``env`` part of the
fingerprint, :mod:`pytest_gpucomm.env.variables`), the case is measured again in a fresh process (a copy) or a
fresh process group (a collective) with some of the differing variables set back to the baseline's values, and
the verdict says which brought it back: ``cause: OMP_NUM_THREADS=1 (restored to 2: 0.99x [0.95, 1.03] 95% PI of
the baseline, ...)``.  This never changes a verdict; it explains it.

In a job across nodes the variables are each node's (``nodes.N.env.NAME``; :func:`case_env_changes` picks a
case's), and the line names the node whose variables were set back: ``cause (node 1, vm-b): NCCL_ALGO=Ring ...``.

**A restoration is judged by the evidence** (:class:`Yardstick`): the re-measure's ratio to the baseline with
its 95 % prediction interval (the spread the case's baseline model gives one new run, ``decision.prediction``,
plus the re-measure's own samples' error), and its ratio to the slowed run (the verdict's) with the interval of
a difference of two runs of one session (the model's run-to-run spread, and the slowed run's own).  It:

* **brings it back** when it is shown faster than the slowed run (that interval's low end above 1) and not
  shown below the tolerance limit (the baseline interval's high end at ``1 - tolerance`` or above);
* brings it back **in part** when it is shown faster than the slowed run but still below the limit;
* does **not** when it is not shown faster than the slowed run.

One noisy re-measure near the limit (0.94x of the baseline, from 0.55x) therefore names its cause; a hard
limit on the one figure denied it.

The search, within a budget of :data:`~pytest_gpucomm.vocab.DEFAULT_CAUSE_BUDGET` re-measures per case:

1. one variable differs: it alone is restored (one re-measure);
2. several differ: each alone, in the order of :func:`likely_first` (the collective libraries' own variables
   first), until one brings the case back; then, if none did, all of them at once (their union).  The last
   re-measure of the budget is kept for the union, so with more variables than the budget allows the ones
   left are not tried, and the line says which.  Where the union does not bring it back either, no
   restoration of the environment does (the cause lies in what the environment does not hold: the driver,
   a library, the hardware).

Each re-measure is one more process start; the budget bounds what the test costs (about 3.5 s per copy
process on an H200, a pool start per collective).  Pure logic: how to measure with an environment is the
caller's (:data:`Remeasurer`), the spreads of a case are its model's (:func:`yardstick`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ..vocab import DEFAULT_CAUSE_BUDGET

if TYPE_CHECKING:
    from ..env.device_state import DeviceChange
    from ..measurement import Measurement
    from .decision import CaseModel, Prior

__all__ = ["EnvChange", "Remeasured", "Yardstick", "yardstick", "Restoration", "Attempt",
           "CauseResult", "env_changes", "case_env_changes", "likely_first", "find_cause", "level_cause_line",
           "untested_levels_line", "saved_cause_line", "likely_causes"]

#: name prefixes tried first when several variables differ (the communication libraries' own settings)
_FIRST = ("NCCL_", "RCCL_", "TORCH_NCCL_", "UCX_", "FI_", "NVSHMEM_", "GLOO_", "HSA_", "HIP_", "CUDA_", "OMP_")

#: the words of a restoration's outcome
BACK, PARTLY, NO = "back", "partly", "no"


@dataclass(frozen=True)
class EnvChange:
    """A variable whose value today differs from the baseline's; None: not set on that side.  In a job across
    nodes, ``node`` is the node whose value it is (``nodes.N.env.NAME`` of the fingerprint; its ``host``), None
    for the run's own or every node's; ``peers``: ``baseline`` is the value every other node of the job has
    today (node N differs from them), not the baseline's."""

    name: str
    baseline: Optional[str]
    now: Optional[str]
    node: Optional[int] = None
    host: str = ""
    peers: bool = False

    def now_text(self) -> str:
        return f"{self.name}={self.now}" if self.now is not None else f"{self.name} unset"

    def restored_text(self) -> str:
        if self.peers:
            return (f"set to {self.baseline} as on the other nodes" if self.baseline is not None
                    else "unset as on the other nodes")
        return f"restored to {self.baseline}" if self.baseline is not None else "unset again"

    @property
    def where(self) -> str:
        """``node 1, vm-b`` (``node 1`` without a host); "" for a change of the run's own or every node's."""
        if self.node is None:
            return ""
        return f"node {self.node}, {self.host}" if self.host else f"node {self.node}"


@dataclass(frozen=True)
class Remeasured:
    """One re-measure as the decision reads it: its median's ratio to the baseline's centre and that median's
    own variance from its samples (log bandwidth; ``decision.RunLocation.se2``, 0 where not known)."""

    ratio: float
    se2: float = 0.0


@dataclass(frozen=True)
class Restoration:
    """A re-measure judged (:meth:`Yardstick.judge`): its ratio to the baseline and to the slowed run, each
    with its 95 % interval, and the outcome (``BACK``, ``PARTLY`` or ``NO``)."""

    ratio: float
    low: float
    high: float
    vs_slowed: float
    vs_low: float
    vs_high: float
    outcome: str

    def text(self, slowed: float, tolerance: float) -> str:
        """E.g. ``0.94x [0.90, 0.98] 95% PI of the baseline, not shown below the 5% tolerance limit 0.95x;
        1.71x [1.63, 1.80] of the slowed run's 0.55x``."""
        limit = 1.0 - tolerance
        where = (f"still below the {tolerance:.0%} tolerance limit {limit:.3g}x" if self.high < limit
                 else f"not shown below the {tolerance:.0%} tolerance limit {limit:.3g}x")
        faster = "" if self.vs_low > 1.0 else ", not shown faster than"
        return (f"{self.ratio:.3g}x [{self.low:.3g}, {self.high:.3g}] 95% PI of the baseline, {where}; "
                f"{self.vs_slowed:.3g}x [{self.vs_low:.3g}, {self.vs_high:.3g}]{faster} of the slowed run's "
                f"{slowed:.3g}x")


@dataclass(frozen=True)
class Yardstick:
    """What a restoration is judged against: the slowed run (its ratio to the baseline), the tolerance, and
    two variances of log bandwidth beyond a re-measure's own samples' error: of one new run about the baseline's
    centre (``baseline2``) and about the slowed run (``slowed2``: two runs of one session); ``quantile`` the
    two-sided 95 % one of their degrees of freedom.  ``source`` says where the spreads come from."""

    slowed: float
    tolerance: float
    baseline2: float
    slowed2: float
    quantile: float = 1.96
    source: str = "the case's baseline model"

    def judge(self, r: Remeasured) -> Restoration:
        """The outcome of one re-measure (the module doc's three cases)."""
        from .decision import bounded_exp as _exp  # imported by the verdict that asked for the cause test

        d = math.log(r.ratio) if r.ratio > 0 else -math.inf
        sd_b = math.sqrt(max(self.baseline2 + r.se2, 0.0))
        sd_s = math.sqrt(max(self.slowed2 + r.se2, 0.0))
        q = self.quantile
        ds = d - math.log(self.slowed)
        vs_low, vs_high = _exp(ds - q * sd_s), _exp(ds + q * sd_s)
        high = _exp(d + q * sd_b)
        outcome = NO if not vs_low > 1.0 else PARTLY if high < 1.0 - self.tolerance else BACK
        return Restoration(ratio=r.ratio, low=_exp(d - q * sd_b), high=high, vs_slowed=_exp(ds), vs_low=vs_low,
                           vs_high=vs_high, outcome=outcome)

    def to_dict(self) -> dict[str, object]:
        return {"slowed": self.slowed, "tolerance": self.tolerance, "baseline_sd": math.sqrt(self.baseline2),
                "slowed_sd": math.sqrt(self.slowed2), "quantile": self.quantile, "source": self.source}


def yardstick(model: "CaseModel", prior: "Prior", slowed: float, tolerance: float, runs_pooled: int = 1
              ) -> Yardstick:
    """The yardstick of a case from its baseline ``model`` and class ``prior`` (``decision.prediction`` for one
    new run), the slowed run's ratio ``slowed`` and how many runs it pooled: about the baseline, the prediction
    spread of one run; about the slowed run, one run's spread within a session (the model's run-to-run part;
    with one run per session known only inside the session spread, that) for the re-measure and for the slowed
    run's mean of ``runs_pooled`` runs (each with the baseline runs' own samples' error)."""
    from .decision import prediction, t_quantile

    sp = prediction(model, prior, 1, 0.0)
    run2 = sp.session_sd ** 2 if model.sessions >= 2 and not math.isfinite(model.within2) else sp.run_sd ** 2
    k = max(int(runs_pooled), 1)
    return Yardstick(slowed=slowed, tolerance=tolerance, baseline2=sp.sd ** 2,
                     slowed2=run2 + (run2 + model.mean_se2) / k, quantile=t_quantile(0.975, sp.df))


@dataclass(frozen=True)
class Attempt:
    """One re-measure: the variables restored and how it was judged (None: it failed, ``error`` says why)."""

    restored: tuple[str, ...]
    judged: Optional[Restoration]
    error: Optional[str] = None

    @property
    def ratio(self) -> Optional[float]:
        return self.judged.ratio if self.judged is not None else None

    @property
    def outcome(self) -> str:
        return self.judged.outcome if self.judged is not None else NO


@dataclass(frozen=True)
class CauseResult:
    """What the cause test found for one case."""

    changes: tuple[EnvChange, ...]
    attempts: tuple[Attempt, ...] = ()
    cause: tuple[str, ...] = ()  # the variables whose restoration brought it back; () when none did
    budget: int = DEFAULT_CAUSE_BUDGET
    skipped: Optional[str] = None  # why the test did not run
    yardstick: Optional[Yardstick] = None
    partly: tuple[str, ...] = ()  # where none brought it back: the restoration that brought it back in part
    untried: tuple[str, ...] = ()  # the variables not restored alone: the budget ran out

    def _found(self) -> tuple[Optional[Attempt], str]:
        """The attempt that names the cause and its word ("cause", "cause in part"), or None."""
        for names, word in ((self.cause, "cause"), (self.partly, "cause in part")):
            hit = next((a for a in self.attempts if names and a.restored == names and a.judged), None)
            if hit is not None:
                return hit, word
        return None, ""

    def text(self) -> str:
        """One line for the verdict: the cause with the figures that decided it, or that none was found and
        what was tried (and what the budget left untried)."""
        if self.skipped:
            return f"cause test not run: {self.skipped}"
        by_name = {c.name: c for c in self.changes}
        y = self.yardstick
        hit, word = self._found()
        untried = (f"; not tried alone: {', '.join(self.untried)} (the budget of {self.budget} re-measures)"
                   if self.untried else "")
        if hit is not None and hit.judged is not None and y is not None:
            figures = hit.judged.text(y.slowed, y.tolerance)
            where = _where(by_name[n] for n in hit.restored)
            if len(hit.restored) == 1:
                c = by_name[hit.restored[0]]
                return f"{word}{where}: {c.now_text()} ({c.restored_text()}: {figures}){untried}"
            names = ", ".join(by_name[n].now_text() for n in hit.restored)
            return f"{word}{where}: these together: {names} (all restored: {figures}){untried}"
        tried = "; ".join(_attempt_text(a, by_name, y) for a in self.attempts) or "nothing"
        slowed = f" from {y.slowed:.3g}x of the baseline" if y is not None else ""
        return (f"no restoration of the environment{_where(self.changes)} brings it back{slowed} (tried: {tried})"
                f"{untried}")

    @property
    def where(self) -> str:
        """The node whose variables the test set back (``node 1, vm-b``), where they are one node's; else ""."""
        return _where(self.changes)[2:-1]

    def to_dict(self) -> dict[str, object]:
        return {"changes": [[c.name, c.baseline, c.now] for c in self.changes],
                "change_nodes": [{"node": c.node, "host": c.host, "peers": c.peers} for c in self.changes],
                "where": self.where,
                "attempts": [{"restored": list(a.restored), "ratio": a.ratio, "error": a.error,
                              **({"ci95": [a.judged.low, a.judged.high], "vs_slowed": a.judged.vs_slowed,
                                  "vs_slowed_ci95": [a.judged.vs_low, a.judged.vs_high], "outcome": a.outcome}
                                 if a.judged is not None else {})}
                             for a in self.attempts],
                "cause": list(self.cause), "partly": list(self.partly), "untried": list(self.untried),
                "budget": self.budget, "skipped": self.skipped,
                "yardstick": self.yardstick.to_dict() if self.yardstick is not None else None, "text": self.text()}


def _where(changes: Iterable[EnvChange]) -> str:
    """`` (node 1, vm-b)`` where every one of ``changes`` is that node's; else ""."""
    places = {c.where for c in changes}
    return f" ({places.pop()})" if len(places) == 1 and "" not in places else ""


def _attempt_text(a: Attempt, by_name: Mapping[str, EnvChange], y: Optional[Yardstick]) -> str:
    what = ("all " + str(len(a.restored)) + " restored" if len(a.restored) > 1 and len(a.restored) == len(by_name)
            else ", ".join(f"{n} {by_name[n].restored_text()}" for n in a.restored))
    if a.judged is None:
        return f"{what}: {a.error or 'failed'}"
    if y is None:
        return f"{what}: {a.judged.ratio:.3g}x"
    j = a.judged
    said = {NO: "not shown faster", PARTLY: "faster, still below the limit", BACK: "back"}[j.outcome]
    return f"{what}: {j.ratio:.3g}x [{j.low:.3g}, {j.high:.3g}] of the baseline, {j.vs_slowed:.3g}x [{j.vs_low:.3g}, " \
           f"{j.vs_high:.3g}] of the slowed run's: {said}"


def level_cause_line(level_name: str, level: str, text: str) -> str:
    """The summary's line of a failing level's cause test: ``gpucomm cause of the REGRESSION (case residual)
    NAME: ...`` (``text``: :meth:`CauseResult.text`, its ``cause: `` left out), or ``... NAME (node 1, vm-b):
    ...`` where the cause is one node's."""
    if text.startswith("cause ("):
        return f"gpucomm cause of the REGRESSION ({level_name}) {level} {text[len('cause '):]}"
    found = text[len("cause: "):] if text.startswith("cause: ") else text
    return f"gpucomm cause of the REGRESSION ({level_name}) {level}: {found}"


def untested_levels_line(n: int, why: str) -> str:
    """The summary's line of the ``n`` failing levels whose cause was not tested, and ``why``."""
    return f"gpucomm: {n} more regression{'s' if n > 1 else ''} at the levels not tested for a cause: {why}"


def saved_cause_line(verdict: Mapping[str, object]) -> Optional[str]:
    """The line the cause test added to a saved verdict's message (``verdict["cause"]["line"]``, else its
    ``text``), for the views of a report; None where the verdict holds no cause test."""
    cause = verdict.get("cause")
    if not isinstance(cause, Mapping):
        return None
    line = cause.get("line") or cause.get("text")
    return str(line) if line else None


def env_changes(diff: Sequence[tuple[str, object, object]], absent: object = None) -> list[EnvChange]:
    """The environment variables among the differences of two fingerprints
    (:func:`pytest_gpucomm.env.fingerprint.diff_fingerprints`; ``absent`` stands for a missing side): the run's
    own (``env.NAME`` keys) and, in a job across nodes, each node's (``nodes.N.env.NAME``: node N's)."""
    out = []
    for key, old, new in diff:
        parts = key.split(".")
        if len(parts) == 2 and parts[0] == "env":
            node: Optional[int] = None
        elif len(parts) == 4 and parts[0] == "nodes" and parts[1].isdigit() and parts[2] == "env":
            node = int(parts[1])
        else:
            continue
        out.append(EnvChange(parts[-1], None if old is absent else str(old), None if new is absent else str(new),
                             node=node))
    return out


def case_env_changes(baseline: Optional[Mapping[str, Any]], today: Optional[Mapping[str, Any]],
                     node: Optional[int] = None) -> list[EnvChange]:
    """The variables that may have slowed a case: what the cause test sets back, from the baseline's newest
    fingerprint and today's (their ``env``; in a job across nodes, each node's under ``nodes``, with its ``host``).

    * A run of one machine (today's fingerprint holds no nodes): every variable changed since the baseline.
    * Node ``node``'s node-local case (a copy between its devices) in a job: its variables changed since the
      baseline (against the baseline's same node).  Where the baseline holds no such node (recorded without
      each node's fingerprint), against the baseline's own ``env``, then each variable in which the node differs
      today from every other node while they agree (``peers``: set to their value).  Where the baseline holds
      the node, a value it kept is no cause, whatever its peers have.
    * A job-wide case (``node`` None) in a job: each variable changed since the baseline on any node whose
      baseline value was one value on every node: set back to it on every rank, the job's environment is the
      baseline's again (on the nodes that did not change it, that is their value today).  Named with its node
      where one node changed it.  A variable whose baseline value differed between the nodes is not tried:
      one value for every rank would not restore the baseline's job.  And each variable of the run's own
      ``env`` (rank 0's) changed since the baseline's own where no node's changed (a baseline whose nodes do not
      hold it).
    """
    now_nodes, then_nodes = _node_envs(today), _node_envs(baseline)
    then_own = _env_of(baseline)
    if not now_nodes:
        return [EnvChange(n, b, v) for n, b, v in _env_diff(then_own, _env_of(today))]

    def then(k: int) -> dict[str, str]:
        return then_nodes[k][1] if k in then_nodes else then_own

    if node is not None:
        host, mine = now_nodes.get(node, ("", {}))
        out = [EnvChange(n, b, v, node=node, host=host) for n, b, v in _env_diff(then(node), mine)]
        others = [k for k in now_nodes if k != node]
        if node in then_nodes or not others:  # the baseline says what this node had: a value it kept is no cause
            return out
        changed = {c.name for c in out}
        for name in sorted({name for k in now_nodes for name in now_nodes[k][1]} - changed):
            values = {now_nodes[k][1].get(name) for k in others}
            if len(values) == 1 and mine.get(name) not in values:
                out.append(EnvChange(name, values.pop(), mine.get(name), node=node, host=host, peers=True))
        return out
    out, seen = [], set()
    for name in sorted({name for k in now_nodes for name in (*now_nodes[k][1], *then(k))}):
        was = {then(k).get(name) for k in now_nodes}
        moved = [k for k in sorted(now_nodes) if then(k).get(name) != now_nodes[k][1].get(name)]
        seen.update([name] if moved else [])
        if not moved or len(was) != 1:
            continue
        one = moved[0] if len(moved) == 1 else None
        out.append(EnvChange(name, was.pop(), now_nodes[moved[0]][1].get(name), node=one,
                             host=now_nodes[moved[0]][0] if one is not None else ""))
    # the run's own (rank 0's) where no node's says otherwise: a baseline whose nodes do not hold the variable
    own = [EnvChange(n, b, v) for n, b, v in _env_diff(then_own, _env_of(today)) if n not in seen]
    return sorted(out + own, key=lambda c: c.name)


def _env_of(fingerprint: Optional[Mapping[str, Any]]) -> dict[str, str]:
    """A fingerprint's ``env`` (name -> value as text); {} where it has none."""
    env = (fingerprint or {}).get("env")
    return {str(k): str(v) for k, v in env.items() if v is not None} if isinstance(env, Mapping) else {}


def _node_envs(fingerprint: Optional[Mapping[str, Any]]) -> dict[int, tuple[str, dict[str, str]]]:
    """A job's fingerprint's nodes (``nodes``: node -> that node's fingerprint): node -> (host, env)."""
    nodes = (fingerprint or {}).get("nodes")
    if not isinstance(nodes, Mapping):
        return {}
    return {int(k): (str(fp.get("host") or ""), _env_of(fp)) for k, fp in nodes.items()
            if str(k).isdigit() and isinstance(fp, Mapping)}


def _env_diff(old: Mapping[str, str], new: Mapping[str, str]) -> list[tuple[str, Optional[str], Optional[str]]]:
    """(name, old value, new value) of each variable whose value differs, None where not set; by name."""
    return [(n, old.get(n), new.get(n)) for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n)]


def likely_first(changes: Sequence[EnvChange]) -> list[EnvChange]:
    """The order in which single variables are tried: the changes since the baseline before a node's
    differences from its peers, and among each the communication libraries' settings first."""
    def rank(c: EnvChange) -> tuple[bool, int, str]:
        return c.peers, next((i for i, p in enumerate(_FIRST) if c.name.startswith(p)), len(_FIRST)), c.name

    return sorted(changes, key=rank)


#: measures the case with these variables set back to the baseline's values (a name mapped to None is
#: unset), in a fresh process or process group; returns the re-measure (a bare ratio to the baseline: no
#: samples' error known)
Remeasurer = Callable[[Mapping[str, Optional[str]]], Union[Remeasured, float]]


def find_cause(changes: Sequence[EnvChange], remeasure: Remeasurer, judge: Yardstick,
               budget: int = DEFAULT_CAUSE_BUDGET) -> CauseResult:
    """Run the search of the module docstring, each re-measure judged by ``judge``.  A re-measure that raises is
    an attempt that failed, named with its error; it counts against the budget."""
    changes = tuple(changes)
    if not changes:
        return CauseResult(changes=(), skipped="the environment is the baseline's", budget=budget)
    if budget < 1:
        return CauseResult(changes=changes, skipped="no re-measures allowed (budget 0)", budget=budget)
    attempts: list[Attempt] = []

    def attempt(restore: Sequence[EnvChange]) -> str:
        env = {c.name: c.baseline for c in restore}
        names = tuple(c.name for c in restore)
        try:
            got = remeasure(env)
            r = got if isinstance(got, Remeasured) else Remeasured(float(got))
            attempts.append(Attempt(names, judge.judge(r)))
        except Exception as e:  # noqa: BLE001 - a failed re-measure is reported, never fatal
            attempts.append(Attempt(names, None, f"{type(e).__name__}: {e}"))
        return attempts[-1].outcome

    singles = likely_first(changes) if len(changes) > 1 else list(changes)
    room = budget if len(changes) == 1 else budget - 1  # the last re-measure is the union's
    tried = singles[:room]
    for c in tried:
        if attempt([c]) == BACK:
            return CauseResult(changes, tuple(attempts), cause=(c.name,), budget=budget, yardstick=judge)
    untried = tuple(c.name for c in singles[room:])
    if len(changes) > 1 and attempt(changes) == BACK:
        return CauseResult(changes, tuple(attempts), cause=tuple(c.name for c in changes), budget=budget,
                           yardstick=judge, untried=untried)
    partly = [a for a in attempts if a.outcome == PARTLY and a.judged is not None]
    best = max(partly, key=lambda a: a.judged.ratio if a.judged is not None else 0.0, default=None)
    return CauseResult(changes, tuple(attempts), budget=budget, yardstick=judge,
                       partly=best.restored if best is not None else (), untried=untried)


def likely_causes(changes: Sequence["DeviceChange"], m: Measurement, measured: Sequence[Measurement],
                  fingerprint: Optional[Mapping[str, object]] = None) -> list[str]:
    """The lines a verdict adds for the case measured as ``m`` (and again as ``measured``): each of the device
    ``changes`` (``env.device_state.DeviceChange``) that can slow it, a host<->device copy's PCIe link that ran
    below what today's ``fingerprint`` says it can, and the first run that throttled."""
    from ..env.clocks import ClockSummary, throttle_text
    from ..env.device_state import affects, pcie_under_load
    from ..ops.specs import HOST_KIND, op_kind

    lines = [f"{c.text}: a likely cause" for c in changes if affects(c, m.op, m.devices, m.kind)]
    if op_kind(str(getattr(m, "op", ""))) == HOST_KIND:  # a host<->device copy, either engine, one or both ways
        clocks = (getattr(m, "info", None) or {}).get("clocks") or []
        for c in clocks if isinstance(clocks, list) else []:
            s = ClockSummary.from_dict(c) if isinstance(c, dict) else None
            slow = pcie_under_load(fingerprint, s.device, s.pcie) if s is not None else None
            if slow:
                lines.append(f"{slow}: a likely cause")
    for x in measured:
        text = throttle_text(getattr(x, "info", None))
        if text:
            lines.append(f"measured while {text}: a likely cause")
            break
    return lines
