"""Which machines a baseline's runs were recorded on, and whether this run's machine is one of them.

A machine's shape is read from a run's fingerprint (``env.hardware.fingerprint``): its kind ("gpu", or "cpu" for
the CPU variants), the device model, how many devices, and the link type of each pair of GPUs (``topology``).
A file's runs are grouped by shape (the shipped ``h200.json``: 2 x NVIDIA H200 linked NV18, and 1 x NVIDIA
H200); a published file has no run, and has the shape its cases name (:func:`published_shape`).
:func:`fit_machine` applies :data:`MATCH_RULE`.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from ..units import plural
from .names import baseline_name_for_model
from .schema import BaselineError

if TYPE_CHECKING:
    from .names import Located
    from .store import Baseline

__all__ = ["MATCH_RULE", "MachineMismatch", "Shape", "MachineFit", "fit_machine", "published_shape",
           "auto_refusal", "floors_document", "start_document"]

MATCH_RULE = """\
1. Kind.  A run of the CPU variants is never gated against GPU runs, nor a GPU run against CPU runs: a file
   whose runs (or, for a published file, whose cases' devices) are all of the other kind is refused,
   whatever named it (NAME, PATH or auto); runs of the other kind in a file of both are set aside.
2. Shape.  Where the file has runs of this machine's shape (the same kind, model, device count and links
   between each pair of GPUs), every case is judged against those runs only, and the file's runs of other
   shapes are set aside (the header says how many).  A 1-GPU host's host<->device copies are judged against
   the 1-GPU sessions of h200.json, not against the 2-GPU machine's: their figures differ with the machine,
   and mixed into one case they would pass for a spread between sessions and widen the gate of both.
3. No run of this shape.  auto does not take a shipped file: the user records their own (the message says
   how).  A NAME or PATH, or a file of the user's own folder that auto named, is taken as asked (a new
   machine checked against a known one), judged against all its runs of this kind, and the header warns,
   naming what differs.
A run whose fingerprint has no kind (a file of an older plugin, or made by hand) has no known shape: it is
kept, and counts neither for nor against a match.  A published file (no runs) matches on the chip of its
name and the number of GPUs its cases name; its links are not known."""


class MachineMismatch(BaselineError):
    """A baseline of the other kind (GPU runs for a run of the CPU variants, or the reverse)."""


def _links(links: tuple[tuple[str, str], ...]) -> str:
    """``NV18``, ``NV18 (28 pairs)`` or ``NV18 (12 pairs), SYS (16 pairs)``."""
    counts = Counter(t for _, t in links)
    if len(counts) == 1 and len(links) == 1:
        return next(iter(counts))
    return ", ".join(f"{t} ({plural(n, 'pair')})" for t, n in sorted(counts.items()))


@dataclass(frozen=True)
class Shape:
    """A machine as a baseline sees it: kind ("gpu" or "cpu"), model, device count, and the link type of each
    pair of GPUs (sorted ``("0-1", "NV18")`` pairs).  ``published``: read from a published file's cases, whose
    model is the chip of the file's name and whose links are not known."""

    kind: str
    model: str
    count: int
    links: tuple[tuple[str, str], ...] = ()
    published: bool = False

    @classmethod
    def of(cls, fingerprint: Optional[Mapping[str, Any]]) -> Optional["Shape"]:
        """The shape of a fingerprint, or None when it has no kind."""
        fp = fingerprint if isinstance(fingerprint, Mapping) else {}
        kind = fp.get("kind")
        if kind not in ("gpu", "cpu"):
            return None
        topology = fp.get("topology") if kind == "gpu" else None
        links = tuple(sorted((str(k), str(v)) for k, v in topology.items())) if isinstance(topology, Mapping) else ()
        try:
            count = int(fp.get("count") or 0)
        except (TypeError, ValueError):
            count = 0
        return cls(str(kind), str(fp.get("model") or ""), count, links)

    def describe(self) -> str:
        """``2 x NVIDIA H200 linked NV18``, ``8 x mi300x (published figures)``, ``the CPU variants (2 logical
        host devices)``."""
        if self.kind == "cpu":
            return f"the CPU variants ({plural(self.count, 'logical host device')})"
        what = f"{self.count} x {self.model}" if self.count else self.model
        if self.published:
            return f"{what} (published figures)"
        return what + (f" linked {_links(self.links)}" if self.links else "")

    def fits(self, mine: "Shape") -> bool:
        """Whether this shape of a file is the machine ``mine`` (:data:`MATCH_RULE`)."""
        if self.kind != mine.kind:
            return False
        if self.published:
            return _chip(self.model) == _chip(mine.model) and self.count == mine.count
        return (self.model, self.count, self.links) == (mine.model, mine.count, mine.links)

    def differences(self, mine: "Shape") -> list[str]:
        """What differs between this shape of a file and the machine ``mine``, one phrase each."""
        out = []
        same_model = _chip(self.model) == _chip(mine.model) if self.published else self.model == mine.model
        if not same_model:
            out.append(f"model {self.model} in the baseline, {mine.model} here")
        devices = "GPUs" if self.kind == "gpu" else "devices"
        if self.count != mine.count:
            out.append(f"{self.count} {devices} in the baseline, {mine.count} here")
        elif not self.published and self.links != mine.links:
            out.append(f"links {_links(self.links) if self.links else 'not known'} in the baseline, "
                       f"{_links(mine.links) if mine.links else 'not known'} here")
        return out


def _chip(model: str) -> str:
    return baseline_name_for_model(model) or model.strip().lower()


_DEVICE = re.compile(r"(cuda|cpu):(\d+)")


def published_shape(baseline: "Baseline") -> Optional[Shape]:
    """The machine a published file (no runs) is for, from its cases: GPUs where their devices are ``cuda:N``
    (the CPU variants for ``cpu:N``), as many as the highest device index or world size names, of the chip of
    the file's name; None where the cases name no device, or devices of both kinds."""
    kinds: set[str] = set()
    count = 0
    for e in baseline.cases.values():
        for d in e.devices:
            m = _DEVICE.fullmatch(d)
            if m:
                kinds.add("gpu" if m.group(1) == "cuda" else "cpu")
                count = max(count, int(m.group(2)) + 1)
        count = max(count, e.world_size)
    if len(kinds) != 1:
        return None
    return Shape(kinds.pop(), baseline.name, count, published=True)


def _describe_shapes(shapes: Mapping[Shape, int]) -> str:
    return " and ".join(s.describe() + (f" ({plural(n, 'run')})" if n else "") for s, n in shapes.items())


@dataclass
class MachineFit:
    """A baseline fitted to this run's machine (:func:`fit_machine`): ``baseline`` holds the runs this machine
    is judged against; ``shapes`` the file's shapes and their runs; ``match`` the shape of this machine among
    them (None: none is, or nothing tells); ``set_aside`` the runs left out, per shape; ``differences`` what
    differs from the file's nearest shape where none matches."""

    baseline: "Baseline"
    mine: Optional[Shape] = None
    shapes: dict[Shape, int] = field(default_factory=dict)
    match: Optional[Shape] = None
    set_aside: dict[Shape, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    @property
    def known(self) -> bool:
        """Whether the file and this run both have a known shape (a match can be told)."""
        return self.mine is not None and bool(self.shapes)

    @property
    def matches(self) -> bool:
        """This machine is one the file was recorded on, or nothing tells otherwise."""
        return self.match is not None or not self.known

    def header_lines(self) -> list[str]:
        if not self.known:
            return []
        assert self.mine is not None
        name = self.baseline.path.name
        if self.match is None:
            return [f"gpucomm baseline WARNING: {name} holds figures of {_describe_shapes(self.shapes)}, not of "
                    f"this machine ({self.mine.describe()}): {'; '.join(self.differences)}; judged against it "
                    f"as asked (record your own with --gpu-baseline-save to gate this machine against itself)"]
        if not self.set_aside:
            return []
        return [f"gpucomm baseline machine: {self.match.describe()}, as this one: judged against its "
                f"{plural(self.shapes[self.match], 'run')}; {_describe_shapes(self.set_aside)} set aside"]


def fit_machine(baseline: "Baseline", fingerprint: Optional[Mapping[str, Any]]) -> MachineFit:
    """The runs of ``baseline`` that this run's machine (its ``fingerprint``) is judged against, by
    :data:`MATCH_RULE`; :class:`MachineMismatch` for a file of the other kind."""
    mine = Shape.of(fingerprint)
    groups: dict[Optional[Shape], list[str]] = {}
    for r in baseline.runs:
        groups.setdefault(Shape.of(r.fingerprint), []).append(r.run_id)
    known = {s: ids for s, ids in groups.items() if s is not None}
    shapes = {s: len(ids) for s, ids in known.items()}
    if not baseline.runs:
        pub = published_shape(baseline)
        shapes = {pub: 0} if pub is not None else {}
    fit = MachineFit(baseline, mine, shapes)
    if mine is None or not shapes:
        return fit
    if mine.kind not in {s.kind for s in shapes}:
        raise MachineMismatch(_kind_message(baseline, mine, shapes))
    fit.match = next((s for s in shapes if s.fits(mine)), None)
    keep = [s for s in shapes if s.kind == mine.kind and (fit.match is None or s == fit.match)]
    if fit.match is None:
        nearest = max(keep, key=lambda s: (shapes[s], s.count == mine.count))
        fit.differences = nearest.differences(mine)
    fit.set_aside = {s: n for s, n in shapes.items() if s not in keep}
    if fit.set_aside:
        kept = {i for s in keep for i in known.get(s, [])} | set(groups.get(None, []))
        fit.baseline = _with_runs(baseline, kept)
    return fit


def _kind_message(baseline: "Baseline", mine: Shape, shapes: Mapping[Shape, int]) -> str:
    name = baseline.path.name
    theirs = _describe_shapes(shapes)
    if mine.kind == "cpu":
        return (f"{name} holds GPU figures ({theirs}), and this run measures {mine.describe()}: a CPU figure "
                "gated against a GPU one says nothing.  If this machine has GPUs, torch does not see them (pass "
                "--gpucomm-device=gpu, so that a run without them fails instead); to gate the CPU variants, record "
                "a baseline of them under another name (--gpu-baseline=NAME --gpu-baseline-save)")
    return (f"{name} holds runs of the CPU variants ({theirs}), and this run measures on {mine.describe()}: a "
            "GPU figure gated against a CPU one says nothing; record a baseline of this machine under another "
            "name (--gpu-baseline=NAME --gpu-baseline-save)")


def auto_refusal(located: "Located", fit: MachineFit) -> str:
    """Why ``auto`` does not take the shipped file it found, and what to do: the file's machines, this one,
    what differs, the command that records the user's own and where it goes."""
    assert fit.mine is not None
    name = located.path.stem
    folder = located.folders[0] if located.folders else "your baseline folder"
    return (f"the baseline {name} shipped with pytest-gpucomm ({located.path}) holds figures of "
            f"{_describe_shapes(fit.shapes)}, not of this machine ({fit.mine.describe()}): "
            f"{'; '.join(fit.differences)}.  auto takes a shipped baseline only for the machine it was recorded "
            f"on: record your own by adding --gpu-baseline-save to this command and running it 4 times or more, "
            f"on 2 days or more (each day is a session of the baseline); the runs go to {folder}/{name}.json, "
            f"which auto takes first from then on.  Or judge against the shipped file anyway with "
            f"--gpu-baseline={name} (the header then says what differs)")


def _with_runs(baseline: "Baseline", keep: set[str]) -> "Baseline":
    """``baseline`` with only the runs ``keep`` (its document too, which the curves and plots read); a case
    left with no run and no floor is dropped (this machine has no baseline for it: ``new``)."""
    cases = {}
    for key, e in baseline.cases.items():
        runs = [r for r in e.runs if r.run_id in keep]
        if runs or e.floor_gbps is not None:
            cases[key] = dataclasses.replace(e, runs=runs)
    doc = baseline.doc
    if doc is not None:
        doc = {**doc, "runs": [r for r in doc["runs"] if r["run_id"] in keep],
               "cases": {k: {**c, "runs": [r for r in c["runs"] if r["run_id"] in keep]}
                         for k, c in doc["cases"].items() if k in cases}}
    return dataclasses.replace(baseline, runs=[r for r in baseline.runs if r.run_id in keep], cases=cases, doc=doc)


def floors_document(doc: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """What a user's new file of a shipped file's name starts from: the shipped file's published floors
    (chip figures, not another machine's runs), without any run; None where it has no floor (it starts
    empty)."""
    cases = {k: {**c, "runs": []} for k, c in doc["cases"].items() if c.get("floor_gbps") is not None}
    if not cases:
        return None
    return {**doc, "runs": [], "cases": cases}


def start_document(path: Optional[Path], shipped_dir: Optional[Path]) -> Optional[dict[str, object]]:
    """What a save into ``path``, a file not there yet, starts from: the published floors of the shipped file
    of its name in ``shipped_dir`` (:func:`floors_document`); None (it starts empty) where there is none, or
    where ``path`` exists or is that shipped file."""
    if path is None or shipped_dir is None or Path(path).exists():
        return None
    theirs = Path(shipped_dir) / Path(path).name
    if not theirs.is_file():
        return None
    from .store import read_document

    try:
        return floors_document(read_document(theirs))
    except BaselineError:
        return None
