"""The gate of one pytest session: load the baseline and judge every measurement against it (the run is saved into
the file by :mod:`.recording`).

Per measured case with a baseline entry the verdict (a :class:`pytest_gpucomm.vocab.Status`) is one of

* ``ok``         -- not shown to be outside the tolerance, and the case would catch a drop of twice it;
* ``REGRESSION`` -- even the upper prediction bound of the ratio is below 1 - tolerance, after the
  re-measures in new process states; fails;
* ``improved``   -- even the lower bound is above 1 + tolerance; passes and is reported;
* ``not gated``  -- neither, and with this baseline the case cannot catch a drop of twice the tolerance;
  passes, or ``NOT GATED`` and fails with ``--gpu-baseline-strict``;
* ``new``        -- no entry in the baseline; passes, or ``NEW`` and fails with ``--gpu-baseline-strict``;
* ``floor-ok`` / ``FLOOR`` -- a published case: the median must reach the published floor, less the
  tolerance, after the same re-measures;
* ``TAIL``       -- the median is not a regression, but the single ops' tail is heavier than the
  baseline's: more of them than 1 % x (1 + tail tolerance) are slower than the baseline's p99 scaled to
  today's median, by the exact binomial test of :mod:`pytest_gpucomm.gate.tails` at the same corrected
  level as the median's, after the same re-measures (today's runs pooled); fails.  A case is tested where
  its baseline runs keep single-op sketches and its measurement has single ops (the collectives).  A
  REGRESSION wins over TAIL; the verdict's ``tail`` says what the tail test found either way.

Each tail test is a comparison of its own in the multiple-comparison correction: the session's
``n_comparisons`` counts the gated medians and the tested tails, and both verdicts use the same share of
alpha and the same number of looks.

At the end of the session the run is judged as a whole against the fitted baseline
(:func:`.run_levels.judge_levels`, ``gate.levels.LEVELS_RULE``): the offset of each class (copies between GPUs,
host<->device copies, collectives; up to 1 MiB and above), each op band's and each case's residual after its
class's offset.  A regression at any level fails the
session and marks the rows of the cases it covers.

In a job across nodes each node is judged as itself (``GateSettings.nodes``, ``--gpu-baseline-nodes``): a
measurement of one node (its copies, its intra-node group: ``info["node"]``) is judged under the key
``cases.node_key(case, N)`` against the baseline's runs of node N ("own"; a node with none of its own, a new
node, against the runs of every node, said in the header), or against the runs of every node ("pooled"); and
the levels are judged per node (a class offset, band and residual of node N over node N's cases), each node's
share of alpha its share of the cases judged, so that a case residual is judged at the level it would have in
one run of every node's cases.  A job's whole-world measurements and a run on one host have no node and are
judged as before.

The statistics are in :mod:`pytest_gpucomm.gate.decision` (the rule is ``decision.DECISION_RULE``), the
file in :mod:`pytest_gpucomm.gate.store`.  Both are imported on first use, not here: building a
:class:`Gate` (every pytest run with the plugin installed does) imports neither numpy, scipy, jsonschema
nor filelock.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..checks import Judging
from ..units import describe_us, format_gbps, format_size, plural
from ..vocab import DEFAULT_MAX_REMEASURES, NODE_MODES, Status

if TYPE_CHECKING:
    from .prior import CorpusPrior
    from ..env.device_state import DeviceChange
    from ..measurement import Measurement, Remeasure
    from .decision import CaseModel, Comparison, Prior, RunLocation
    from .machines import MachineFit
    from .names import Located
    from .store import Baseline, CaseEntry
    from .tails import TailSpread
    from .baseline_fit import FittedBaseline

__all__ = ["GateSettings", "Gate", "GateUsageError", "Verdict", "case_group", "case_kind", "NODE_MODES"]



class GateUsageError(Exception):
    """A baseline the options name that cannot be read or written; the message names the option and the file.
    The plugin raises it again as a usage error of the session (the gate itself is free of pytest)."""


@dataclass(frozen=True, kw_only=True)
class GateSettings(Judging):
    """What the gate needs from the options: the values it judges with (:class:`pytest_gpucomm.checks.Judging`,
    the plugin's settings' too), and where its baseline is: ``spec`` is the ``--gpu-baseline`` value (NAME |
    PATH | auto; None: no baseline, the gate is off), ``save`` is ``--gpu-baseline-save``; a NAME is looked up
    in ``search_dirs`` (the user's), then in ``shipped_dir`` (the baselines shipped with the package)."""

    spec: Optional[str]
    save: bool = False
    search_dirs: tuple[Path, ...] = ()
    shipped_dir: Optional[Path] = None
    max_remeasures: int = DEFAULT_MAX_REMEASURES
    #: the corpus' spread prior (gate.prior) for the one-session cases no file of this hardware covers; None: none
    prior_path: Optional[Path] = None
    #: a job across nodes: each node's measurements judged against that node's runs ("own") or every node's
    #: runs pooled ("pooled", for identical nodes); ``--gpu-baseline-nodes``
    nodes: str = "own"

    def __post_init__(self) -> None:
        if self.nodes not in NODE_MODES:
            raise ValueError(f"GateSettings.nodes must be one of {', '.join(NODE_MODES)}, got {self.nodes!r}")


@dataclass
class Verdict:
    """The gate's judgement of one measurement; ``to_dict`` is what the JSON report stores."""

    status: Status
    baseline_gbps: Optional[float] = None
    ratio: Optional[float] = None
    ci: Optional[tuple[float, float]] = None
    message: str = ""
    remeasured: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # a value such as "ok" is accepted, an unknown word is not

    @property
    def failed(self) -> bool:
        return self.status.failed

    def to_dict(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "baseline_gbps": self.baseline_gbps,
            "ratio": self.ratio,
            "ci95": list(self.ci) if self.ci else None,
            "remeasured": self.remeasured,
            "message": self.message,
            **self.details,
        }



def _figure(x: object) -> str:
    """A re-measure's logged bandwidth (a number in the log) as every view prints one."""
    return format_gbps(x) if isinstance(x, (int, float)) else str(x)


def _of_baseline(gbps: object, c: "Comparison") -> str:
    """`` (0.94x)``: a run's figure against the baseline's, "" where it is not a number."""
    if not isinstance(gbps, (int, float)) or not c.baseline_median_gbps > 0:
        return ""
    return f" ({gbps / c.baseline_median_gbps:.3g}x)"


def now_figure(pooled_gbps: float, runs_gbps: "list[Any]") -> str:
    """Today's figure in a verdict's headline, saying what it is: the run's (``1.82``), or the runs' pooled
    figure with the runs it pools (``5.02 (pooled: 1.82, 13.8)``: their geometric mean, as the decision pools
    them, a figure no run measured; beyond three runs their range, ``(pooled over 4 runs, 1.82 to 13.8)``, the
    line below the headline listing each) -- the unit after it is the headline's."""
    figures = [x for x in runs_gbps if isinstance(x, (int, float))]
    if len(figures) < 2:
        return format_gbps(pooled_gbps)
    if len(figures) <= 3:
        return f"{format_gbps(pooled_gbps)} (pooled: " + ", ".join(format_gbps(x) for x in figures) + ")"
    return (f"{format_gbps(pooled_gbps)} (pooled over {len(figures)} runs, {format_gbps(min(figures))} to "
            f"{format_gbps(max(figures))})")


def remeasure_meaning(c: "Comparison", first_gbps: float, again_gbps: "list[Any]") -> str:
    """What re-measures that came back near the baseline's speed mean for the verdict, when the first run was
    below the tolerance limit (a flagged first run is measured again: DECISION_RULE step 5); "" where none
    did.  Near: nearer the baseline than the first run, in log (above the geometric mean of the two)."""
    base, limit = c.baseline_median_gbps, 1.0 - c.tolerance
    if not base > 0 or not 0 < first_gbps / base < limit:
        return ""
    first = first_gbps / base
    ratios = [x / base for x in again_gbps if isinstance(x, (int, float)) and x > 0]
    back = [r for r in ratios if math.log(r) > math.log(first) / 2]
    if not back:
        return ""
    shown = ", ".join(f"{r:.3g}x" for r in back)
    if len(back) == len(ratios):
        which = "the re-measure" if len(back) == 1 else f"all {len(back)} re-measures"
        what = (f"the first run's drop did not repeat: {which} came back at {shown}, nearer the baseline than the "
                f"first run ({first:.3g}x)")
    else:
        what = (f"the slowdown comes and goes (another load on the machine, a clock that drops?): {len(back)} of "
                f"{len(ratios)} re-measures came back at {shown}, nearer the baseline than the first run "
                f"({first:.3g}x)")
    if c.status is Status.REGRESSION:
        return f"{what}; the verdict pools every run, and even so its upper bound is below the limit: it fails"
    return f"{what}; with every run pooled the drop is not shown beyond the tolerance: not a regression"


def _step_line(m: "Measurement", first_gbps: float, now_gbps: float, ratio: float) -> str:
    """What the change costs a training step, for a measurement that gives its time per step
    (``info["step_comm_s"]``; named by ``info["step_label"]``, else its op): today's step time (that of the
    runs pooled: the first run's scaled by its bandwidth over the pooled median's) against the baseline's
    (today's times the ratio of today's bandwidth to the baseline's); "" for any other measurement."""
    info = getattr(m, "info", None) or {}
    step = info.get("step_comm_s")
    if not isinstance(step, (int, float)) or not step > 0 or not (ratio > 0 and now_gbps > 0):
        return ""
    now = float(step) * first_gbps / now_gbps
    base = now * ratio
    label = info.get("step_label") or m.op
    return (f"{label} takes {describe_us(now * 1e6)} instead of {describe_us(base * 1e6)} ({now / base - 1:+.1%}) "
            "per training step")


def _node_of(m: "Measurement") -> Optional[int]:
    """The node of a measurement of one node of a job (``info["node"]``), None for any other."""
    node = (getattr(m, "info", None) or {}).get("node")
    return None if node is None else int(node)


def case_group(op: str) -> str:
    """The group whose common shift a case belongs to: "collective" for what runs over a process group (the
    collectives, the training-step patterns, the node pairs), "copy" for the copies (the op's spec says)."""
    from ..ops.specs import op_group

    return op_group(op)


def case_kind(op: str) -> str:
    """The kind of a case for its class (``gate.levels.case_class``): "collective", "host" (host<->device
    copies) or "peer" (copies between devices), as the op's spec says."""
    from ..ops.specs import op_kind

    return op_kind(op)


class _Remeasures:
    """The re-measures of one case, each in a new process state (``Gate.judge``'s ``remeasure``): their runs go
    to the decision, their measurements to the tail verdict (which pools their single ops) and their records to
    the report (the re-measure whole, samples and single ops: ``gpucomm compare`` replays it from the JSON)."""

    def __init__(self, nodeid: str, remeasure: Optional[Callable[[], "Remeasure"]]) -> None:
        self.nodeid = nodeid
        self.remeasure = remeasure
        self.log: list[dict[str, object]] = []
        self.ms: list["Measurement"] = []

    @property
    def call(self) -> Optional[Callable[[], tuple["RunLocation", bool]]]:
        """What the decision calls to measure again; None where the case cannot be measured again."""
        return self.again if self.remeasure is not None else None

    def again(self) -> tuple["RunLocation", bool]:
        """Measure the case again: its run and whether it drew a new process state."""
        from .decision import run_location

        assert self.remeasure is not None
        r = self.remeasure()
        loc = run_location(r.measurement.samples_gbps, f"{self.nodeid}: re-measure")
        self.ms.append(r.measurement)
        self.log.append({"median_gbps": loc.gbps, "fresh": r.fresh, "how": r.how,
                         **({"measurement": r.measurement.to_dict(with_samples=True)}
                            if hasattr(r.measurement, "to_dict") else {})})
        return loc, r.fresh


class Gate:
    """Holds the loaded baseline for the session and judges measurements."""

    def __init__(self, settings: GateSettings) -> None:
        self.settings = settings
        self.path: Optional[Path] = None
        self.baseline: Optional[Baseline] = None  # None also when the file does not exist yet (saving)
        self.n_comparisons = 1
        self.n_tail_comparisons = 0  # of n_comparisons, the tails tested (cases whose baseline runs have sketches)
        self.env_diff: list[tuple[str, object, object]] = []
        self.device_changes: list["DeviceChange"] = []  # per device, what changed in the GPUs and links
        self.fingerprint: dict[str, object] = {}  # this run's (use)
        #: the baseline's run this one's environment is compared with (use: its newest of the same source)
        self.baseline_fingerprint: Optional[dict[str, object]] = None
        self.run_id = uuid.uuid4().hex[:12]  # under pytest-xdist only the controller saves: one run
        #: the baseline fitted (:meth:`fitted`), once per file, spreads' source and prior
        self._fitted: Optional[FittedBaseline] = None
        #: a job across nodes (launched mode): "<nodes>x<ranks per node>", part of every case key (case_key)
        self.layout = ""
        #: where a baseline of one session takes its spreads from (use_spreads_of), and what it says of that
        self._spread_source: Optional[Baseline] = None
        self.spread_note = ""
        #: the spread prior of the corpus (gate.prior), for the one-session cases no file of this hardware covers
        self._corpus: Optional["CorpusPrior"] = None
        #: per level class, the first runs' log ratios judged so far this session (decision.Floors.cases)
        self._scatter: dict[str, list[float]] = {}
        self._every: dict[str, list[float]] = {}  # the same over the whole run, where it is known first (preview)
        self.located: Optional[Located] = None  # where the file was found (load)
        self.machine: Optional[MachineFit] = None  # the file's runs of this machine (use; gate.machines)

    def adopt(self, path: Path) -> None:
        """Save into ``path``, a baseline resolved elsewhere (by the pytest-xdist workers)."""
        self.path = Path(path)

    @property
    def active(self) -> bool:
        """A baseline was asked for (``--gpu-baseline``)."""
        return self.settings.spec is not None

    @property
    def pooled_nodes(self) -> set[int]:
        """The nodes judged against the pooled runs of every node although the mode is "own" (none of their
        own): ``FittedBaseline.pooled_nodes``."""
        return self._fitted.pooled_nodes if self._fitted is not None else set()

    @property
    def loaded(self) -> bool:
        """The baseline file was resolved (it may not exist yet when this run saves it)."""
        return self.path is not None

    # -- set-up, after collection ------------------------------------------------------------------
    def load(self, detected_model: Optional[str], fingerprint: dict[str, Any], nodeids: set[str]) -> None:
        """Resolve and read the baseline; errors become usage errors that name the file."""
        from .machines import auto_refusal, fit_machine
        from .names import locate_baseline
        from .schema import BaselineError
        from .store import load_baseline

        spec = self.settings.spec
        if spec is None:
            raise RuntimeError("Gate.load: no baseline was asked for (GateSettings.spec is None)")
        try:
            found = locate_baseline(spec, search_dirs=list(self.settings.search_dirs), detected_model=detected_model,
                                    must_exist=not self.settings.save, shipped_dir=self.settings.shipped_dir)
            baseline = load_baseline(found.path) if found.path.exists() or not self.settings.save else None
            if found.origin == "shipped" and found.auto and baseline is not None:
                fit = fit_machine(baseline, fingerprint)  # auto takes a shipped file of this machine only
                if not fit.matches:
                    raise BaselineError(auto_refusal(found, fit))
            self.located = found
            self.use(found.path, baseline, fingerprint, nodeids)
        except BaselineError as e:
            raise GateUsageError(f"--gpu-baseline={spec}: {e}") from None

    def use(self, path: Path, baseline: Optional["Baseline"], fingerprint: dict[str, Any], nodeids: set[str]) -> None:
        """Judge against ``baseline`` (read from ``path``; None: it does not exist yet), for a run of the tests
        ``nodeids`` in the environment ``fingerprint``: what :meth:`load` does once it has read the file, and
        what ``gpucomm compare`` does with a baseline or a report it read itself.  Only the file's runs of this
        machine are used, and a file of the other kind is refused (``gate.machines.MATCH_RULE``:
        :class:`~.machines.MachineMismatch`)."""
        from ..env.device_state import device_changes
        from ..env.fingerprint import VOLATILE_KEYS, diff_fingerprints
        from .machines import fit_machine

        self.machine = fit_machine(baseline, fingerprint) if baseline is not None else None
        self.fingerprint = dict(fingerprint or {})
        self.path, self.baseline = Path(path), self.machine.baseline if self.machine is not None else None
        self._fitted, self._corpus, self._scatter, self._every = None, None, {}, {}
        if self.baseline is not None:
            # floor-only cases are checked against their floor, not tested: they spend no alpha; a case of one
            # node's runs (a node-local copy of a job) is judged on each node of the job: one comparison each
            node_runs = {r.run_id for r in self.baseline.runs if r.node is not None}
            nodes = max(1, len((fingerprint or {}).get("nodes") or {}))

            def looks(e: "CaseEntry") -> int:
                return nodes if any(r.run_id in node_runs for r in e.runs) else 1

            gated = sum(looks(e) for e in self.baseline.cases.values() if e.has_runs and e.test_id in nodeids)
            self.n_tail_comparisons = sum(looks(e) for e in self.baseline.cases.values()
                                          if e.test_id in nodeids and any(r.tail is not None for r in e.runs))
            self.n_comparisons = max(1, gated + self.n_tail_comparisons)
            # another host of the same kind (a CI runner pool) is not an environment change
            self.baseline_fingerprint = latest = self.baseline.latest_fingerprint(like=fingerprint)
            self.env_diff = diff_fingerprints(latest, fingerprint, ignore=VOLATILE_KEYS | {"host"})
            self.device_changes = device_changes(latest, fingerprint)
            self._find_spreads(str((fingerprint or {}).get("model") or ""), fingerprint)

    def _find_spreads(self, model: str, fingerprint: dict[str, Any]) -> None:
        """For a baseline with cases of one session: the file of the same hardware (``<model name>.json`` in
        the search folders), when it is another file with runs of this machine in two sessions or more
        (``use_spreads_of``); else, on a GPU, the corpus prior (``gate.prior``, :meth:`use_corpus`)."""
        from .machines import fit_machine
        from .names import baseline_name_for_model
        from .schema import BaselineError
        from .store import load_baseline

        b = self.baseline
        if b is None:
            return
        session_of = {r.run_id: r.session or r.run_id for r in b.runs}
        if not any(len({session_of.get(r.run_id, r.run_id) for r in e.runs}) == 1 for e in b.cases.values() if e.runs):
            return
        name = baseline_name_for_model(model) if model else None
        shipped = (self.settings.shipped_dir,) if self.settings.shipped_dir is not None else ()
        for d in (self.settings.search_dirs + shipped) if name is not None else ():
            path = Path(d) / f"{name}.json"
            if not path.is_file() or (self.path is not None and path.resolve() == self.path.resolve()):
                continue
            try:
                src = fit_machine(load_baseline(path), fingerprint).baseline  # its runs of this machine, if any
            except BaselineError:
                break
            if len({r.session or r.run_id for r in src.runs}) >= 2:
                self.use_spreads_of(src, f"{path} ({plural(len(src.runs), 'run')} in "
                                         f"{plural(len({r.session or r.run_id for r in src.runs}), 'session')})")
            break
        # the corpus prior: the one-session cases' spreads where no file lends them, and on a GPU the residuals'
        # session part at the levels in any case (a file of the same hardware lends the cases' spreads only)
        if (fingerprint or {}).get("kind") == "gpu" and self.settings.prior_path is not None:
            self.use_corpus(self.settings.prior_path)

    def use_corpus(self, path: Path) -> None:
        """Where no file of the same hardware lends its spreads, the one-session cases of a trusted class take
        them from the corpus prior in ``path`` (``gate.prior``); a prior file that is missing or damaged is a
        usage error naming it, never a silent fallback to assumed spreads."""
        from .prior import PriorError, load_prior
        from .schema import BaselineError

        try:
            self._corpus = load_prior(path)
        except PriorError as e:
            raise BaselineError(str(e)) from None
        self._fitted = None

    def use_spreads_of(self, source: Optional["Baseline"], why: str = "") -> None:
        """Where the baseline has cases of one session only, take their session and run spreads from
        ``source`` (a file of the same hardware, with runs in several sessions): the same case's, else the
        median of its class's cases of its op (DECISION_RULE step 2).  ``why`` names the file for the header."""
        self._spread_source, self.spread_note, self._fitted = source, why, None

    def fitted(self) -> FittedBaseline:
        """The baseline fitted (:class:`~.baseline_fit.FittedBaseline`: every measured case's model and its
        class's prior, DECISION_RULE steps 1-2), made once, again only where the spreads' source or the prior
        changes."""
        if self._fitted is None:
            from .baseline_fit import FittedBaseline

            assert self.baseline is not None
            self._fitted = FittedBaseline(self.baseline, self.path, self.settings.nodes, self._spread_source,
                                          self._corpus)
        return self._fitted

    def node_case(self, key: str, node: Optional[int]) -> str:
        """The key a measurement of case ``key`` on ``node`` is judged under (``FittedBaseline.node_case``)."""
        return self.fitted().node_case(key, node)

    def case_model(self, key: str) -> Optional[tuple["CaseModel", "Prior"]]:
        """The model of case ``key`` and its class's prior (the cause test's spreads); None where the baseline
        has no measured runs of it."""
        return self.fitted().models.get(key) if self.baseline is not None else None

    def commons(self) -> dict[str, dict[str, Any]]:
        """Per group, how far the baseline runs' common offset moves (``levels.Common`` as a dict, what the
        session's shift is judged against)."""
        if self.baseline is None:
            return {}
        return dict(self.fitted().commons)

    def header_lines(self) -> list[str]:
        """The lines about the baseline for the session header (none when the gate is off)."""
        from ..env.fingerprint import format_fingerprint_diff

        if not self.active or self.path is None:
            return []
        start = self._start() if self.baseline is None else None
        found = [self.located.header_line(len(start["cases"]) if start else 0)] if self.located else []
        found = [line for line in found if line]
        if self.baseline is None:
            return [f"gpucomm baseline: {self.path} does not exist yet; this run will create it (--gpu-baseline-save)",
                    *found]
        b = self.baseline
        last = b.runs[-1].date if b.runs else "never"
        runs = plural(len(b.runs), "run")
        sessions = {r.session or r.run_id for r in b.runs}
        if b.runs:
            runs += f" in {plural(len(sessions), 'session')}"
        most = max((len(e.runs) for e in b.cases.values()), default=0)
        if 0 < most < len(b.runs):  # runs that saved only some cases, or older runs beyond K for some
            runs += f", at most {most} per case"
        lines = [
            f"gpucomm baseline: {self.path} ({b.source}, {runs}, {len(b.cases)} cases, last recorded "
            f"{last}); {self.n_comparisons} gated comparisons"
            + (f" ({self.n_tail_comparisons} of them tails)" if self.n_tail_comparisons else "")
            + f", alpha {self.settings.alpha:g} (Bonferroni), tolerance {self.settings.tolerance:.0%}"
            + (f", tail tolerance {self.settings.tail_tolerance:g}" if self.n_tail_comparisons else ""),
            *found, *(self.machine.header_lines() if self.machine is not None else []),
        ]
        if b.source == "published":
            lines.append(f"gpucomm baseline source: {b.source_detail}")
        lines += self._node_lines()
        lines += self._one_session_lines()
        if b.runs:
            if self.env_diff:
                lines.append("gpucomm environment changed since the baseline: "
                             + format_fingerprint_diff(self.env_diff))
            else:
                lines.append("gpucomm environment: same as when the baseline was recorded")
        return lines

    def _node_lines(self) -> list[str]:
        """In a job across nodes, or with a baseline of one: how each node's measurements are judged
        (``--gpu-baseline-nodes``), and, judging each node against its own runs, the nodes of this job with
        none in the baseline (judged against every node's runs pooled); none on one host."""
        b = self.baseline
        assert b is not None
        recorded = sorted({r.node for r in b.runs if r.node is not None})
        every = (self.fingerprint or {}).get("nodes")
        job = {int(n): fp for n, fp in every.items()} if isinstance(every, dict) else {}
        if not recorded and len(job) < 2:
            return []
        head = "gpucomm baseline nodes: "
        if self.settings.nodes == "pooled":
            return [f"{head}every node judged against every node's runs pooled (--gpu-baseline-nodes=pooled)"]
        if not recorded:
            return [f"{head}the baseline has no runs of one node: every node judged against all its runs pooled"]
        lines = [f"{head}each node judged against its own runs and at its own levels (--gpu-baseline-nodes=own)"]
        nodes = ", ".join(map(str, recorded))
        for n in sorted(set(job) - set(recorded)):
            host = job[n].get("host") if isinstance(job[n], dict) else None
            lines.append(f"{head}node {n}" + (f" ({host})" if host else "") + " is new (no runs of its own in the "
                         f"baseline): judged against nodes {nodes} pooled")
        return lines

    def _one_session_lines(self) -> list[str]:
        """The header's lines on the cases recorded in one session: where their spreads come from (a file of
        the same hardware, the corpus prior, this baseline's cases of their op in several sessions:
        ``FittedBaseline.lent``), and how many have them assumed (not gated)."""
        b = self.baseline
        if b is None or not b.runs:
            return []
        fitted = self.fitted()
        one = [k for k, (m, _) in fitted.models.items() if m.sessions == 1]
        if not one:
            return []
        lent = [fitted.lent.get(k) for k in one]
        sources = (("file", self.spread_note), ("corpus", self._corpus.note() if self._corpus is not None else ""),
                   ("baseline", "this baseline's cases of their op in several sessions"))
        lines = [f"gpucomm baseline: {plural(lent.count(kind), 'case')} of one session borrow their spreads from "
                 f"{text}" for kind, text in sources if lent.count(kind)]
        assumed = lent.count(None)
        if assumed:
            from .decision import FALLBACK_SESSION_SPREAD

            why = ("no file of this hardware with runs in several sessions, and no prior for this kind of machine"
                   if self._corpus is None and not self.spread_note else
                   "no runs of their class and op in several sessions lend them spreads (this baseline, "
                   + ("the file of this hardware" if self.spread_note else "the corpus prior") + ")")
            lines.append(f"gpucomm baseline WARNING: {plural(assumed, 'case')} of one session (one host boot "
                         f"and day) cannot be judged: {why}; the spread between sessions is assumed "
                         f"({FALLBACK_SESSION_SPREAD:.1%}) and they are not gated; record runs in more sessions")
        return lines

    def preview(self, items: list[tuple[str, "Measurement"]]) -> None:
        """Every measurement of the run known before the first verdict (``gpucomm compare``): the scatter of
        each class's cases (``decision.Floors.cases``) is taken over all of them, not only over those judged
        before (as in a live run)."""
        from .cases import case_key, node_key
        from .decision import run_location
        from .levels import case_class

        if self.baseline is None:
            return
        models = self.fitted().models
        every: dict[str, list[float]] = {}
        for nodeid, m in items:
            key = case_key(nodeid, m.op, m.size_bytes, m.dtype, m.world_size, self.layout)
            key = self.node_case(key, _node_of(m)) if key in self.baseline.cases else key
            if key in models and m.samples_gbps:
                loc = run_location(m.samples_gbps, f"{nodeid}: this run's samples").loc
                klass = node_key(case_class(case_kind(m.op), m.size_bytes), _node_of(m))
                every.setdefault(klass, []).append(loc - models[key][0].center)
        self._every = every

    # -- the decision ------------------------------------------------------------------------------
    def judge(self, nodeid: str, m: Measurement, tolerance: Optional[float],
              remeasure: Optional[Callable[[], "Remeasure"]], tail_tolerance: Optional[float] = None,
              fold: Optional[Callable[[int], Optional[Measurement]]] = None) -> Verdict:
        """The verdict on one measurement of test ``nodeid``; ``tolerance`` and ``tail_tolerance`` override the
        session's (the @bandwidth marker's), ``remeasure`` measures the case again in a new process state when
        it looks like a regression (DECISION_RULE step 5) or like a heavier tail; the two verdicts share the
        re-measures (the tail pools those the median verdict made before it asks for more).  ``fold(i)``
        measures the case in its i-th other process group (None: no more): a case of a folded class
        (``levels.FOLDED_CLASSES``) is measured in ``settings.folds`` groups before its verdict, which pools
        them (the tail verdict reads the first run and the re-measures only)."""
        from .cases import case_key
        from .decision import run_location

        if self.baseline is None:
            return Verdict(Status.NEW, message="no baseline yet")
        key = case_key(nodeid, m.op, m.size_bytes, m.dtype, m.world_size, self.layout)
        entry = self.baseline.cases.get(key)
        if entry is None:
            if self.settings.strict:  # a failure's message starts with its status, as REGRESSION's does
                return Verdict(Status.NEW_STRICT, message=f"NEW (--gpu-baseline-strict): {self._what(m)}: not in "
                                                          f"the baseline\n  no entry for {key} in {self.path}")
            return Verdict(Status.NEW, message=f"not in the baseline: no entry for {key} in {self.path}")
        tol = self.settings.tolerance if tolerance is None else tolerance
        first = run_location(m.samples_gbps, f"{nodeid}: this run's samples")
        again = _Remeasures(nodeid, remeasure)
        if entry.floor_only and entry.floor_gbps is not None:  # floor_only: no run, a floor
            return self._judge_floor(m, first, entry.floor_gbps, again, tol)
        node = _node_of(m)
        key = self.node_case(key, node)  # a node's measurement: judged as that node's (the module doc)
        v, pooled, below = self._judge_median(nodeid, key, m, first, again, tol, fold)
        if node is not None:
            v.details.update(node=node, host=str(m.info.get("host") or ""),
                             baseline_nodes="pooled" if self.settings.nodes == "pooled" or node in self.pooled_nodes
                             else "own")
        tol_tail = self.settings.tail_tolerance if tail_tolerance is None else tail_tolerance
        entry = self.fitted().view.cases.get(key, entry)  # the node's own sketches
        return self._judge_tail(nodeid, entry, m, v, again, tol_tail, below[len(pooled):])

    def baseline_ratio(self, nodeid: str, m: Measurement) -> Optional[float]:
        """``m``'s run location (median bandwidth) over the baseline's centre of the case of test ``nodeid``,
        without re-measures or a verdict (what another engine's figure of a failing case says); None where the
        baseline has no measured runs of the case."""
        from .cases import case_key
        from .decision import run_location

        if self.baseline is None:
            return None
        model = self.case_model(case_key(nodeid, m.op, m.size_bytes, m.dtype, m.world_size, self.layout))
        if model is None:
            return None
        return math.exp(run_location(m.samples_gbps, f"{nodeid}: this run's samples").loc - model[0].center)

    def _judge_floor(self, m: Measurement, first: RunLocation, floor_gbps: float, again: "_Remeasures",
                     tol: float) -> Verdict:
        """The verdict on a published case (a floor, no run: ``gate.floors``)."""
        from .floors import check_floor

        assert self.baseline is not None
        fc = check_floor(first, floor_gbps, again.call, tolerance=tol, max_remeasures=self.settings.max_remeasures)
        v = Verdict(fc.status, baseline_gbps=floor_gbps, ratio=fc.ratio, remeasured=fc.runs_now - 1,
                    details={"tolerance": tol, "remeasures": again.log})
        v.message = f"{self._what(m)}: {fc.reason}"
        if fc.failed:
            v.message = (f"FLOOR: {self._what(m)}: {1 - fc.ratio:.1%} below the published floor "
                         f"{fc.floor_gbps:.4g} GB/s\n  below the published floor: {fc.reason}\n"
                         f"  source: {self.baseline.source_detail}")
        return v

    def _judge_median(self, nodeid: str, key: str, m: Measurement, first: RunLocation, again: "_Remeasures",
                      tol: float, fold: Optional[Callable[[int], Optional[Measurement]]]
                      ) -> tuple[Verdict, list[str], list[str]]:
        """The median's verdict on a case with measured baseline runs (``decision.judge``, with its folds and
        re-measures), and the lines of its message: what was pooled, and those below the first line."""
        from .cases import node_key
        from .decision import CASE_ALPHA_SHARE, class_scatter, judge
        from .levels import case_class

        model, prior = self.fitted().models[key]
        fold_log, fold_locs = self._folds(nodeid, m, fold)
        klass = node_key(case_class(case_kind(m.op), m.size_bytes), _node_of(m))  # a node's class is its own
        seen = self._scatter.setdefault(klass, [])
        j = judge(first, model, prior, again.call, tolerance=tol, alpha=self.settings.alpha * CASE_ALPHA_SHARE,
                  n_comparisons=self.n_comparisons, max_remeasures=self.settings.max_remeasures, folds=fold_locs,
                  class_spread=class_scatter(self._every.get(klass, seen)))
        seen.append(first.loc - model.center)
        c = j.comparison
        status = c.status
        if status is Status.NOT_GATED and self.settings.strict:
            status = Status.NOT_GATED_STRICT
        v = Verdict(status, baseline_gbps=c.baseline_median_gbps, ratio=c.ratio, ci=(c.ci_low, c.ci_high),
                    remeasured=j.remeasured,
                    details={"alpha": c.alpha, "tolerance": c.tolerance, "upper_bound": c.upper_bound,
                             "lower_bound": c.lower_bound,
                             "detectable_drop": c.detectable_drop, "gated": c.gated, "runs_pooled": c.runs_now,
                             "prediction_sd": c.spread.sd, "baseline_runs": c.baseline_runs,
                             "baseline_sessions": c.baseline_sessions, "group": case_group(m.op), "case": key,
                             "log_ratio": math.log(c.ratio), "remeasures": again.log,
                             "spread_assumed": c.spread.assumed, "spread_floor": c.spread.floor,
                             "runs_now_var": c.spread.runs_now,
                             "folds": 1 + len(fold_log), "fold_runs": fold_log})
        pooled: list[str] = []
        if _node_of(m) in self.pooled_nodes:
            assert self.baseline is not None
            pooled.append(f"node {_node_of(m)} has no runs of its own in baseline {self.baseline.name}: judged "
                          "against the runs of every node pooled")
        if fold_log:
            pooled.append(f"measured in {1 + len(fold_log)} process groups: {format_gbps(first.gbps)}, "
                          + ", ".join(format_gbps(a['median_gbps']) for a in fold_log) + " GB/s")
        if again.log:
            how = "; ".join(f"{_figure(a['median_gbps'])} GB/s{_of_baseline(a['median_gbps'], c)} {a['how']}"
                            for a in again.log)
            pooled.append(f"first run {format_gbps(first.gbps)} GB/s{_of_baseline(first.gbps, c)}, measured again: "
                          f"{how}")
            meaning = remeasure_meaning(c, first.gbps, [a["median_gbps"] for a in again.log])
            pooled += [meaning] if meaning else []
        v.details["runs_gbps"] = [first.gbps, *(a["median_gbps"] for a in fold_log),
                                  *(a["median_gbps"] for a in again.log)]
        below = self._median_message(v, c, m, first, again.ms, pooled)
        return v, pooled, below

    def _median_message(self, v: Verdict, c: "Comparison", m: Measurement, first: RunLocation,
                        again_ms: list[Measurement], pooled: list[str]) -> list[str]:
        """Set the median verdict's message: for a failure, what, where and how much on its first line (about
        100 characters) and the evidence below it, which this returns (the runs pooled, what changed since the
        baseline, what the change costs a training step, the devices' likely causes)."""
        from ..env.fingerprint import format_fingerprint_diff
        from .cause import likely_causes
        from .reasons import comparison_reason

        assert self.baseline is not None
        reason = comparison_reason(c)
        env = format_fingerprint_diff(self.env_diff) if self.env_diff else "nothing in the fingerprint"
        step = _step_line(m, first.gbps, c.current_median_gbps, c.ratio)
        below = [f"  {p}" for p in pooled] + [f"  changed since the baseline was recorded: {env}"]
        below += [f"  {step}"] if step else []
        state = likely_causes(self.device_changes, m, [m, *again_ms], self.fingerprint)
        below += [f"  {line}" for line in state]
        if v.status is Status.REGRESSION:
            v.message = "\n".join([
                f"REGRESSION: {self._what(m)}: {1 - c.ratio:.1%} drop, "
                f"{now_figure(c.current_median_gbps, v.details['runs_gbps'])} vs "
                f"{format_gbps(c.baseline_median_gbps)} GB/s",
                f"  beyond the {c.tolerance:.0%} tolerance of baseline {self.baseline.name}: {reason}", *below])
        elif v.status is Status.NOT_GATED_STRICT:
            v.message = "\n".join([f"NOT GATED (--gpu-baseline-strict): {self._what(m)}: catches only drops of "
                                   f"{c.detectable_drop:.1%} or more", f"  {reason}", *below[:len(pooled)]])
        else:
            v.message = "; ".join([reason, *pooled, *state])
        return below

    def _judge_tail(self, nodeid: str, entry: "CaseEntry", m: Measurement, v: Verdict, again: "_Remeasures",
                    tol_tail: float, evidence: list[str]) -> Verdict:
        """``v`` (the median's verdict) with the tail verdict added (``gate.tail_verdict``): TAIL where the
        tail is heavier and the median no regression, its message then with ``evidence`` (the median message's
        lines below its first that are not about the runs pooled)."""
        from .decision import CASE_ALPHA_SHARE
        from .tail_verdict import judge_tail

        assert self.baseline is not None
        median_done = len(again.ms)
        looks = max(1, self.settings.max_remeasures) if again.call is not None else 1  # the median verdict's
        tail = judge_tail(nodeid, entry, m, again.ms, again.call if v.status is not Status.REGRESSION else None,
                          tolerance=tol_tail, looks=looks, alpha=self.settings.alpha * CASE_ALPHA_SHARE,
                          n_comparisons=self.n_comparisons, max_remeasures=self.settings.max_remeasures,
                          spread=self._spread, baseline_name=self.baseline.name)
        if tail is None:
            return v
        t, text = tail
        v.details["tail"] = t
        v.remeasured = len(again.ms)
        for a in again.log[median_done:]:
            a["for"] = "tail"
        if t["status"] == Status.TAIL.value:
            if v.status is Status.REGRESSION:
                v.message += "\n  and a heavier tail (TAIL): " + text.replace("\n", "; ")
            else:
                v.status = Status.TAIL
                head, _, rest = text.partition("\n")
                v.message = "\n".join([f"TAIL: {self._what(m)}: {head}", f"  {rest}", f"  the median: {v.message}",
                                        *evidence])
        elif t["status"] != "untested":
            v.message += f"; tail: {t['text']}"
        return v

    def _folds(self, nodeid: str, m: Measurement, fold: Optional[Callable[[int], Optional[Measurement]]]
               ) -> tuple[list[dict[str, Any]], list[RunLocation]]:
        """The case's folds (see :meth:`judge`): each one's record for the report and its run location."""
        from .decision import run_location
        from .levels import FOLDED_CLASSES, case_class

        log: list[dict[str, Any]] = []
        locs: list[RunLocation] = []
        if fold is None or case_class(case_kind(m.op), m.size_bytes) not in FOLDED_CLASSES:
            return log, locs
        for i in range(1, self.settings.folds):
            fm = fold(i)
            if fm is None:
                break
            loc = run_location(fm.samples_gbps, f"{nodeid}: fold {i + 1}")
            locs.append(loc)
            log.append({"median_gbps": loc.gbps, "measurement": fm.to_dict(with_samples=True)})
        return log, locs


    def _spread(self) -> TailSpread:
        """The run-to-run spread of the share of slow ops (``FittedBaseline.tail_spread``)."""
        return self.fitted().tail_spread()

    @staticmethod
    def _what(m: Measurement) -> str:
        return f"{m.op} on {m.where} at {format_size(m.size_bytes)}"

    # -- a file not there yet ----------------------------------------------------------------------
    def _start(self) -> Optional[dict[str, Any]]:
        """What a new file of the user's starts from: the published floors of the shipped file of its name, no
        run of it (``gate.machines.start_document``); None for a file that exists."""
        from .machines import start_document

        return start_document(self.path, self.settings.shipped_dir)
