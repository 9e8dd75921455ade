"""The spread prior of the corpus: how far a case moves between sessions and between runs on hardware the gate
has never seen, learned from every machine the project holds runs of (DECISION_RULE step 2).

    python -m pytest_gpucomm.gate.prior baselines/h200.json baselines/h100.json [-o PATH] [--leave-out TEXT]

A baseline of one session (a first recording, a report taken as a baseline) cannot measure how far a case moves
from one session (boot, day) to the next.  Where no file of the same hardware with runs in several sessions is
found, the gate borrows that spread, and the run-to-run spread, from this prior: per class of cases (the levels'
classes, ``levels.case_class``: copies between GPUs, host<->device copies and collectives, up to 1 MiB and
above), the empirical-Bayes prior of Smyth (2004, ``decision.prior_of_variances``) fitted to every case of that
class on every machine of the corpus with runs in two sessions or more: each case's session part (the variance of
its session means less the runs' share, on sessions - 1 degrees of freedom) and its run part (the pooled variance
of its runs within sessions, less their own error).  The prior's degrees of freedom carry how much those spreads
differ from case to case and from machine to machine: where the machines disagree, they are few, the quantile of
the gate's bound is large and the case is not gated.

A class is **trusted** only where at least :data:`MIN_MACHINES` machines hold runs of it in several sessions: the
fit of a class seen on one machine cannot be checked on a machine it did not see.  A class not trusted gives no
prior, and its one-session cases stay not gated (their spread is assumed).  The calibration checks the prior
leave-one-machine-out (``python -m pytest_gpucomm.gate.calibration --corpus FILE...``): each machine's sessions,
one at a time, judged as a one-session baseline with the prior fitted on the other machines only.

The fitted prior ships as ``pytest_gpucomm/gate/spread_prior.json`` (:data:`PRIOR_FILE`), written by this module's
command from the shipped baselines; ``tests/test_gate_prior.py`` keeps the two equal.  Reading it imports nothing
heavy; fitting imports numpy and scipy.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from ..files.atomic import write_atomic
from ..files.reading import read_regular_file
from ..text import command_width, fit

if TYPE_CHECKING:  # numpy and scipy: imported where a prior is fitted or used
    from .calibration import Case
    from .decision import CaseModel, Prior

__all__ = ["PRIOR_FILE", "SCHEMA", "MIN_MACHINES", "ClassPrior", "CorpusPrior", "PriorError", "fit_corpus",
           "load_prior", "prior_path", "corpus_of_files", "say", "main"]

PRIOR_FILE = Path(__file__).with_name("spread_prior.json")
SCHEMA = "pytest-gpucomm-spread-prior"
#: 2: each class names the ops it was fitted on (``ops``), and lends its spreads to those only
SCHEMA_VERSION = 2
#: a class's prior is trusted (used) only where this many machines hold runs of it in several sessions
MIN_MACHINES = 2
#: the prior file is small (a few KiB): a larger one is not this file
MAX_PRIOR_BYTES = 1 << 20


class PriorError(Exception):
    """A prior file that is missing, unreadable or not a prior: the message names the file."""


@dataclass(frozen=True)
class ClassPrior:
    """One class's prior: the session part and the run part of a case's spread (variances of log bandwidth)
    with their degrees of freedom, the machines and cases it was fitted on, whether it is trusted, and the ops it
    covers (``ops``: those of its cases on as many machines as trust needs).  A one-session case of another op
    borrows nothing from it: an op the corpus never saw in several sessions may move far more from boot to boot
    than the ops it did (on one H100, the both-ways host copies moved 7-16 % between two boots where the one-way
    copies of the same class moved under 1 %), and a spread borrowed from them cried wolf."""

    klass: str
    session_s2: float
    session_df: float
    run_s2: float
    run_df: float
    machines: tuple[str, ...]
    cases: int
    trusted: bool
    residual_s2: float = 0.0  # the part of a case's residual (levels) drawn once per session
    residual_df: float = 0.0
    ops: tuple[str, ...] = ()

    def as_prior(self) -> "Prior":
        """The prior a one-session case's model is judged with (``decision.Prior``)."""
        from .decision import Prior

        return Prior(self.session_s2, self.session_df, run_s2=self.run_s2, run_df=self.run_df)

    def describe(self) -> str:
        """``host<->device copies <= 1 MiB: session 1.2% (3 df), run 0.6% (12 df), 40 cases of 3 machines``."""
        def part(s2: float, df: float) -> str:
            return f"{math.sqrt(max(s2, 0.0)):.2%} ({'inf' if math.isinf(df) else f'{df:.0f}'} df)"

        return (f"{self.klass}: session {part(self.session_s2, self.session_df)}, run {part(self.run_s2, self.run_df)}"
                f", residual {part(self.residual_s2, self.residual_df)}"
                f", {self.cases} cases of {len(self.machines)} machine{'s' if len(self.machines) != 1 else ''}"
                + (f" ({', '.join(self.ops)})" if self.trusted
                   else f" (not trusted: fewer than {MIN_MACHINES} machines)"))


@dataclass(frozen=True)
class CorpusPrior:
    """The fitted prior of a corpus (a kind of hardware: ``gpu``): per class a :class:`ClassPrior`."""

    kind: str
    classes: dict[str, ClassPrior]
    machines: tuple[str, ...]
    path: Optional[Path] = None

    def trusted(self, klass: str) -> Optional[ClassPrior]:
        """The class's prior where it is trusted, else None."""
        p = self.classes.get(klass)
        return p if p is not None and p.trusted else None

    def prior_for(self, klass: str, sessions: int, op: str) -> Optional["Prior"]:
        """The ``decision.Prior`` a case of op ``op`` and level class ``klass`` whose baseline runs come from
        ``sessions`` sessions takes from the corpus: its class's, where it is trusted, covers the op and the case
        has one session; else None."""
        p = self.trusted(klass) if sessions == 1 else None
        return p.as_prior() if p is not None and op in p.ops else None

    def residual_sessions(self) -> dict[tuple[str, str], tuple[float, float]]:
        """Per trusted class and each op it covers, the residuals' session part (``levels.LevelFit.sessions``)."""
        return {(k, op): (p.residual_s2, p.residual_df) for k, p in self.classes.items()
                if p.trusted and p.residual_df > 0 for op in p.ops}

    def note(self) -> str:
        """What the header says of it: the machines and the classes it covers."""
        covered = sorted(f"{k} ({', '.join(p.ops)})" for k, p in self.classes.items() if p.trusted)
        return (f"the corpus prior of {len(self.machines)} machines ({', '.join(self.machines)}; "
                f"{self.path.name if self.path else 'fitted'}), trusted for {', '.join(covered) or 'no class'}")

    def to_document(self) -> dict[str, object]:
        def num(x: float) -> object:
            return None if math.isinf(x) else x

        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "kind": self.kind,
                "min_machines": MIN_MACHINES, "machines": list(self.machines),
                "classes": {k: {"session_s2": p.session_s2, "session_df": num(p.session_df), "run_s2": p.run_s2,
                                "run_df": num(p.run_df), "residual_s2": p.residual_s2,
                                "residual_df": num(p.residual_df), "machines": list(p.machines), "cases": p.cases,
                                "trusted": p.trusted, "ops": list(p.ops), "text": p.describe()}
                            for k, p in sorted(self.classes.items())}}


# ------------------------------------------------------------------------------------------------
# fitting
# ------------------------------------------------------------------------------------------------
Estimate = tuple[float, float, float, float, float, float]


def _estimates(cases: Sequence["Case"], session: Mapping[str, int]) -> dict[str, list[tuple[str, Estimate]]]:
    """Per class, each case's op and (session part, its df, run part, its df, its residual's session part, its
    df) from one machine's runs (``cases``: ``calibration.Case``); cases in fewer than two sessions, or without two
    runs in one, give none.  The residual is the levels' (``levels.residuals``: the case's log deviation less
    its class's offset in the run)."""
    from .decision import RunLocation, fit_case
    from .levels import residuals

    models: dict[str, "CaseModel"] = {}
    devs: dict[str, dict[str, float]] = {}
    for c in cases:
        ids = sorted(c.runs)
        model = fit_case([c.runs[r] for r in ids], [str(session[r]) for r in ids])
        if c.member is not None:
            models[c.key] = model
            for r in ids:
                devs.setdefault(r, {})[c.key] = c.runs[r].loc - model.center
    members = {c.key: c.member for c in cases if c.member is not None}
    res: dict[str, dict[str, float]] = {}
    for r, dev in devs.items():
        for k, x in residuals(dev, members)[0].items():
            res.setdefault(k, {})[r] = x
    out: dict[str, list[tuple[str, Estimate]]] = {}
    for key, model in models.items():
        if model.sessions < 2 or not math.isfinite(model.within2):
            continue
        ids = sorted(res.get(key, {}))
        rm = fit_case([RunLocation(res[key][r], 0.0, 1) for r in ids], [str(session[r]) for r in ids])
        out.setdefault(members[key].klass, []).append((members[key].op, (
            model.between2 - model.within2 * model.inv_n, float(model.sessions - 1),
            model.within2 - model.mean_se2, float(model.within_df),
            rm.between2 - rm.within2 * rm.inv_n, float(rm.sessions - 1))))
    return out


def fit_corpus(machines: Mapping[str, tuple[Sequence["Case"], Mapping[str, int]]], kind: str = "gpu",
               min_machines: int = MIN_MACHINES) -> CorpusPrior:
    """The prior of the machines ``machines`` (name -> its cases, ``calibration.Case``, and the session of each
    run id): per class, Smyth's prior of the session parts and of the run parts over every case of every
    machine that has runs of the class in several sessions, trusted where ``min_machines`` machines hold them
    (the calibration fits one machine's prior on its own runs with 1), for the ops that as many
    machines hold."""
    from .decision import MIN_SPREAD, prior_of_variances

    floor = MIN_SPREAD ** 2  # the gate's spread is never below it: smaller differences between cases do not count
    per: dict[str, list[tuple[str, str, Estimate]]] = {}  # class -> (machine, op, estimate) of every case
    for name, (cases, session) in machines.items():
        for klass, found in _estimates(cases, session).items():
            per.setdefault(klass, []).extend((name, op, p) for op, p in found)
    classes = {}
    for klass, rows in per.items():
        # the ops held in several sessions by as many machines as trust needs; the class is fitted on their
        # cases alone, the spreads it lends
        on: dict[str, set[str]] = {}
        for name, op, _ in rows:
            on.setdefault(op, set()).add(name)
        ops = tuple(sorted(op for op, names_of in on.items() if len(names_of) >= min_machines))
        # a class with no op so held lends nothing: fitted on all its cases, for what the command prints
        pts = [(name, p) for name, op, p in rows if op in ops or not ops]
        names = tuple(sorted({n for n, _ in pts}))
        sess = prior_of_variances((max(p[0], floor), p[1]) for _, p in pts)
        run = prior_of_variances((max(p[2], floor), p[3]) for _, p in pts)
        res = prior_of_variances((max(p[4], floor), p[5]) for _, p in pts)
        trusted = len(names) >= min_machines and sess.df > 0 and run.df > 0
        classes[klass] = ClassPrior(klass, sess.s2, sess.df, run.s2, run.df, names, len(pts), trusted,
                                    res.s2, res.df, ops)
    used = tuple(sorted({n for p in classes.values() for n in p.machines}))
    return CorpusPrior(kind, classes, used)


def corpus_of_files(paths: Sequence[Path], leave_out: Sequence[str] = ()
                    ) -> dict[str, tuple[list["Case"], dict[str, int]]]:
    """The GPU machines of the baseline files ``paths`` (``gate.machines.Shape``; several per file), each with
    its cases and the session of each run (labels, else runs within an hour), less those whose description
    contains a text of ``leave_out``."""
    from .calibration import load_cases, machines_of, sessions_of

    out: dict[str, tuple[list["Case"], dict[str, int]]] = {}
    for path in paths:
        for shape, _ in machines_of(Path(path)):
            name = shape.describe()
            if shape.kind != "gpu" or any(t in name for t in leave_out):
                continue
            cases, dates, labels = load_cases(Path(path), shape)
            session = sessions_of(dates, 60.0, labels)
            if name in out:  # the same machine in two files: its runs together, sessions kept apart
                old_cases, old_session = out[name]
                offset = max(old_session.values(), default=-1) + 1
                old_session.update({r: s + offset for r, s in session.items()})
                old_cases.extend(cases)
            else:
                out[name] = (cases, session)
    return out


# ------------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------------
def prior_path(value: Optional[str]) -> Optional[Path]:
    """The prior file that ``--gpu-baseline-prior`` names: None (not given) is the shipped one, "none" none."""
    if value is None:
        return PRIOR_FILE
    return None if value.strip().lower() == "none" else Path(value).expanduser()


def load_prior(path: Path = PRIOR_FILE) -> CorpusPrior:
    """Read a prior file; a file that is missing, too large, not JSON or not a prior is a :class:`PriorError`
    that names it."""
    where = f"the spread prior {path}"
    try:
        text = read_regular_file(path, what="spread prior", limit=MAX_PRIOR_BYTES, limit_name="its size limit",
                                 error=PriorError).decode("utf-8", errors="replace")
    except PriorError as e:
        hint = ("; it ships with pytest-gpucomm: reinstall the package, or write it with "
                "python -m pytest_gpucomm.gate.prior" if not Path(path).exists() else "")
        raise PriorError(f"{e}{hint}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise PriorError(f"{where} is not valid JSON ({e})") from None
    try:
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"its schema is {doc.get('schema') if isinstance(doc, dict) else type(doc).__name__!r}, "
                             f"not {SCHEMA!r}")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"schema_version {doc.get('schema_version')!r}; this plugin reads {SCHEMA_VERSION} (write "
                             "it again with python -m pytest_gpucomm.gate.prior BASELINE... -o PATH)")
        classes = {str(klass): _class_prior(str(klass), c) for klass, c in doc["classes"].items()}
        return CorpusPrior(str(doc["kind"]), classes, tuple(map(str, doc["machines"])), Path(path))
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise PriorError(f"{where} is not a valid spread prior: {what}") from None


def _class_prior(klass: str, c: Mapping[str, Any]) -> ClassPrior:
    """One class of a prior file (its fields checked: a bad one raises ValueError or KeyError)."""
    def num(name: str) -> float:
        x = c[name]
        if x is None:
            return math.inf
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
            raise ValueError(f"class {klass!r}: {name} must be a number >= 0, got {x!r}")
        return float(x)

    ops = c["ops"]
    if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
        raise ValueError(f"class {klass!r}: ops must be a list of op names, got {ops!r}")
    return ClassPrior(klass, num("session_s2"), num("session_df"), num("run_s2"), num("run_df"),
                      tuple(map(str, c["machines"])), int(c["cases"]), bool(c["trusted"]), num("residual_s2"),
                      num("residual_df"), tuple(ops))


# ------------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------------
def say(line: str) -> None:
    """Print one of the gate commands' lines (this one's and ``gate.calibration``'s) wrapped to the terminal
    (``text.command_width``: 120 columns when unknown) as every ``gpucomm`` command's are (``text.fit``)."""
    print("\n".join(fit([line], command_width())))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pytest_gpucomm.gate.prior", description=__doc__.splitlines()[0])
    ap.add_argument("baselines", nargs="+", type=Path, help="baseline files with measured runs (the corpus)")
    ap.add_argument("-o", "--output", type=Path, default=None,
                    help="write the prior here (JSON); without it, print the classes")
    ap.add_argument("--leave-out", action="append", default=[], metavar="TEXT",
                    help="leave out the machines whose description contains TEXT (more than once)")
    args = ap.parse_args(argv)
    from .schema import BaselineError

    try:
        prior = fit_corpus(corpus_of_files(args.baselines, args.leave_out))
    except (BaselineError, OSError) as e:
        print(f"gpucomm prior: error: {e}", file=sys.stderr)
        return 2
    say(f"{len(prior.machines)} machines: {', '.join(prior.machines) or 'none'}")
    for p in sorted(prior.classes.values(), key=lambda p: p.klass):
        say(f"  {p.describe()}")
    if args.output is not None:
        write_atomic(args.output, json.dumps(prior.to_document(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
