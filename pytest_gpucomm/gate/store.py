"""The baseline store: the raw bandwidth samples of the last K runs of each benchmark case, per hardware.

A baseline is one JSON file, ``<NAME>.json`` (``h200.json``, ``mi300x.json``, ...), written and read only
through this module.  Format (``schema_version`` 2, checked with :data:`.schema.JSON_SCHEMA` via ``jsonschema``; a
file of version 1 is upgraded on read, :mod:`pytest_gpucomm.files.formats`, and a save writes it back as 2)::

    {
      "schema": "pytest-gpucomm-baseline",   # fixed identifier: anything else is not a baseline file
      "schema_version": 2,                   # integer; a newer one than this plugin knows is refused
      "name": "h200",                        # the baseline's name (usually the GPU model short name)
      "source": "measured",                  # "measured" (recorded by --gpu-baseline-save) or "published"
      "source_detail": "",                   # free text; for "published": where the figures come from
      "max_runs": 24,                        # K: how many runs each case keeps (the oldest are dropped; a
                                             # job's runs of its nodes, <id>-node<N>, count as one: run_group)
      "runs": [                              # the runs that cases refer to, oldest first
        {"run_id": "20240607T101500-ab12", "date": "2024-06-07T10:15:00+00:00",
         "session": "vm-3f2a9c1e-2024-06-07",   # optional: the occasion (host boot, day) it was recorded on
         "node": 1, "host": "gpu-a17",           # optional: a job across nodes saves one run per node
         "fingerprint": {"driver": "550.54", "nccl": "2.20.5", ...}}   # any JSON object
      ],
      "cases": {
        "<case key>": {                      # see case_key()
          "test_id": "tests/test_comm.py::test_all_reduce[16MiB]",
          "op": "all_reduce", "size_bytes": 16777216, "world_size": 2,
          "dtype": "float32",                # or null for copies
          "devices": ["cuda:0", "cuda:1"],
          "layout": "2x8",                   # optional: <nodes>x<ranks per node> of a job across nodes
          "runs": [                          # oldest first, at most max_runs
            {"run_id": "20240607T101500-ab12",
             "samples_gbps": [171.2, 170.9, ...],          # per-iteration bandwidth, GB/s (1e9 B/s), > 0
             "summary": {"median_gbps": 171.0, "p50_us": 98.1, "p99_us": 101.5, "cv": 0.01, "n": 50},
             "tail": {"n": 9800, "p50_us": 20.1,           # optional: the run's single ops, each timed on
                      "ratios": {"0.9": 1.04, "0.99": 1.15, "0.999": 1.6},   # its own (sketches.TailSketch:
                      "max_ratio": 2.9}}                    # quantile / median per level, slowest op / median)
          ],
          "floor_gbps": 44.0                 # optional; published cases: the minimum acceptable median
        }
      }
    }

Rules beyond the JSON types: a case with no runs must have ``floor_gbps`` (a published figure); a case
with runs is checked statistically against them (``gate.decision.compare``), and keeps its floor as well.
Unknown extra keys are kept on read and ignored, so a later minor addition does not break older readers.

A run's ``tail`` is what the tail verdict (TAIL) compares today's single ops with: saved for each case whose
measurement has single ops (``info["tail"]``: the collectives), absent for the others and in files recorded
before it existed, which load as before (their cases are judged on the median only).  It is an optional
field of schema_version 1, not a new version: the schema never closed a run's fields, so a reader of an
earlier version loads a file with tails and ignores them, and its saves keep the earlier runs' tails (a run
is merged as a whole).  Its rules: ``n`` >= 1, ``p50_us`` > 0, each ratio in [1, max_ratio], levels in (0, 1).

Writing (:func:`save_run`) takes an exclusive lock (``<file>.lock``, via ``filelock``), re-reads the file,
merges this run in, and replaces the file atomically (temporary file in the same directory, fsync,
``os.replace``, fsync of the directory), so concurrent savers (xdist workers, parallel CI jobs on a
shared directory) lose nothing and a crash never leaves a half-written baseline; the temporary files of a
saver killed mid-write are removed by the next save (under the lock, and only if no live writer holds
them).  A corrupt existing file is never overwritten: fix or remove it by hand.  A whole document built
elsewhere (a published baseline: ``benchmarks/make_published.py``) starts from :func:`new_document` and is
written with :func:`write_document`, which checks it as :func:`load_baseline` would before it replaces
anything.  Any other change of an existing file (``gpucomm baselines prune``/``merge``) goes through
:func:`update_document`: the same lock, re-read and atomic write as :func:`save_run`, for an arbitrary change.

Reading is bounded (:mod:`pytest_gpucomm.files.reading`): only a regular file is read (a FIFO, device or
socket is refused before it is opened, and the open cannot block), at most :data:`MAX_BASELINE_BYTES`,
nested at most :data:`MAX_NESTING` deep; anything else is a :class:`BaselineError` that names the file.

This module imports ``jsonschema`` and ``filelock``: :mod:`pytest_gpucomm.gate` imports it only on use.
The file's pieces live beside this module: what a valid document is (the JSON schema and the checks beyond it,
:mod:`.schema`), which file a NAME or ``auto`` means (:mod:`.names`), and a case's key and its record in the
run being saved (:mod:`.cases`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import jsonschema
from filelock import FileLock, Timeout

from ..env.fingerprint import latest_of_source
from ..files.atomic import remove_stale_temp_files, write_atomic
from ..files.formats import upgrade_baseline
from ..files.jsontext import json_path, parse_json_bytes
from ..files.reading import read_regular_file
from ..vocab import DEFAULT_MAX_RUNS
from .cases import CaseRecord
from .schema import (MAX_NESTING, SCHEMA_ID, SCHEMA_VALIDATOR, SCHEMA_VERSION, BaselineError, check_finite,
                     check_samples, check_tails, describe_error, nesting_depth_exceeds, tail_sketch, too_deep)

if TYPE_CHECKING:
    from ..sketches import TailSketch

__all__ = [
    "LOCK_TIMEOUT_S",
    "MAX_BASELINE_BYTES",
    "CaseRun",
    "CaseEntry",
    "RunRecord",
    "Baseline",
    "RunToSave",
    "save_runs",
    "load_baseline",
    "save_run",
    "new_document",
    "dumps_document",
    "write_document",
    "update_document",
    "read_document",
    "check_document",
    "MAX_BASELINE_NAME",
    "to_baseline",
    "merge_run",
    "run_group",
]

LOCK_TIMEOUT_S = 120.0
#: the largest baseline file read (the shipped h200.json, 19 runs x 169 cases, is 6.6 MB); a larger one is refused
MAX_BASELINE_BYTES = 256 * 1024 * 1024


# ------------------------------------------------------------------------------------------------
# What a file holds, read
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """A run of the file's ``runs``: its id, date, the environment's fingerprint, and where it was recorded."""

    run_id: str
    date: str
    fingerprint: dict[str, object]
    session: Optional[str] = None  # runs of one session are one session's evidence (gate.decision.fit_case)
    node: Optional[int] = None  # a job across nodes: the node whose measurements this run holds (host below)
    host: Optional[str] = None


@dataclass(frozen=True)
class CaseRun:
    """One run of a case: its samples (GB/s), their summary, and the sketch of its single ops."""

    run_id: str
    samples_gbps: list[float]
    summary: dict[str, object]
    tail: Optional[TailSketch] = None  # the run's single ops, None where it has none


@dataclass
class CaseEntry:
    """A case of the file (its key, what it measures) with its runs, oldest first, and its published floor."""

    key: str
    test_id: str
    op: str
    size_bytes: int
    world_size: int
    dtype: Optional[str]
    devices: list[str]
    runs: list[CaseRun]  # oldest first
    floor_gbps: Optional[float] = None
    layout: str = ""  # "<nodes>x<ranks per node>" of a job across nodes, "" on one host

    @property
    def runs_gbps(self) -> list[list[float]]:
        """The samples of each stored run, oldest first: what ``decision.compare`` takes."""
        return [list(r.samples_gbps) for r in self.runs]

    @property
    def has_runs(self) -> bool:
        return bool(self.runs)

    @property
    def floor_only(self) -> bool:
        """A published case without measured runs: checked with ``floors.check_floor``."""
        return not self.runs and self.floor_gbps is not None


@dataclass
class Baseline:
    """A baseline file read (:func:`load_baseline`): its name, source, ``max_runs``, runs and cases."""

    path: Path
    name: str
    source: str
    source_detail: str
    max_runs: int
    runs: list[RunRecord]  # oldest first
    cases: dict[str, CaseEntry]  # case key -> its entry
    schema_version: int = SCHEMA_VERSION
    #: the document as read (the curves and plots read the file's layout); None for a Baseline made otherwise
    doc: Optional[dict[str, Any]] = field(default=None, repr=False, compare=False)

    def latest_fingerprint(self, like: Optional[Mapping[str, object]] = None) -> Optional[dict[str, object]]:
        """The fingerprint of the newest run recorded in the file, or None when there is none; with ``like``
        (today's fingerprint), the newest run of the same source (``env.fingerprint.latest_of_source``)."""
        i = latest_of_source([r.fingerprint for r in self.runs], like)
        return dict(self.runs[i].fingerprint) if i is not None else None



# ------------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------------


#: the name a size refusal gives the limit (``files.reading``)
MAX_BASELINE_NAME = "pytest_gpucomm.gate.store.MAX_BASELINE_BYTES"


#: digests of the baseline texts this process has read and found valid, at most :data:`_VALID_TEXTS_KEPT`: the same
#: bytes read again are parsed and upgraded, not checked again.  Checking is a pure function of the text, and most of a
#: read's time (0.66 s of the shipped h200.json's, 0.12 s of it parsing); a pytest-xdist controller reads again the file
#: its workers read, and the project's tests read the same few files over a thousand times in one process.
_valid_texts: set[bytes] = set()
_VALID_TEXTS_KEPT = 64


def read_document(path: Path) -> dict:
    """Read, parse and validate a baseline file; every problem becomes a BaselineError naming the file.  A
    file larger than :data:`MAX_BASELINE_BYTES` is refused by its size, before a byte of it is read."""
    path = Path(path)
    raw = read_regular_file(path, what="baseline", limit=int(MAX_BASELINE_BYTES), limit_name=MAX_BASELINE_NAME,
                            error=BaselineError)
    doc = parse_json_bytes(raw, path, "baseline file", BaselineError, too_deep=lambda: too_deep(path))
    digest = hashlib.blake2b(raw, digest_size=20).digest()
    if digest in _valid_texts and isinstance(doc, dict):  # a text checked before: a baseline document
        return upgrade_baseline(doc, str(path), BaselineError)
    doc = check_document(path, doc)
    if len(_valid_texts) >= _VALID_TEXTS_KEPT:
        _valid_texts.clear()
    _valid_texts.add(digest)
    return doc


def check_document(path: Path, doc: object) -> dict:
    """The parsed JSON ``doc`` of the file ``path`` as a baseline document (a version 1 upgraded), checked as
    :func:`read_document` checks a file it read; BaselineError naming ``path`` and the first problem.  For a
    reader that read the bytes itself, within :data:`MAX_BASELINE_BYTES` (``report.saved.load_reference``:
    a file that may be a baseline or a report is read once)."""
    path = Path(path)
    if nesting_depth_exceeds(doc, MAX_NESTING):
        raise too_deep(path)
    if not isinstance(doc, dict):
        raise BaselineError(f"{path}: not a pytest-gpucomm baseline: the top level is a {type(doc).__name__}, "
                            f"expected an object")
    if doc.get("schema") != SCHEMA_ID:
        if "schema" not in doc:
            raise BaselineError(f"{path}: not a pytest-gpucomm baseline: no \"schema\" field (expected {SCHEMA_ID!r})")
        raise BaselineError(
            f"{path}: not a pytest-gpucomm baseline: \"schema\" is {doc.get('schema')!r}, expected {SCHEMA_ID!r}"
        )
    doc = upgrade_baseline(doc, str(path), BaselineError)  # a newer version refused, an earlier one upgraded
    errors = sorted(SCHEMA_VALIDATOR.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        err = jsonschema.exceptions.best_match(errors) or errors[0]
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise BaselineError(f"{path}: invalid baseline: at {json_path(err.absolute_path)}: {describe_error(err)}{more}")
    check_samples(path, doc)
    check_tails(path, doc)
    check_finite(path, doc)
    return doc


def to_baseline(path: Path, doc: dict) -> Baseline:
    runs = [RunRecord(r["run_id"], r["date"], dict(r.get("fingerprint") or {}), r.get("session"), r.get("node"),
                      r.get("host")) for r in doc["runs"]]
    cases = {}
    for key, c in doc["cases"].items():
        cases[key] = CaseEntry(
            key=key,
            test_id=c["test_id"],
            op=c["op"],
            size_bytes=int(c["size_bytes"]),
            world_size=int(c["world_size"]),
            dtype=c.get("dtype"),
            devices=list(c.get("devices") or []),
            runs=[CaseRun(r["run_id"], [float(v) for v in r["samples_gbps"]], dict(r.get("summary") or {}),
                          tail_sketch(path, r["tail"], ["cases", key, "runs", i, "tail"]) if "tail" in r else None)
                  for i, r in enumerate(c["runs"])],
            floor_gbps=float(c["floor_gbps"]) if c.get("floor_gbps") is not None else None,
            layout=str(c.get("layout") or ""),
        )
    return Baseline(
        path=Path(path),
        name=doc["name"],
        source=doc["source"],
        source_detail=doc.get("source_detail", ""),
        max_runs=int(doc["max_runs"]),
        runs=runs,
        cases=cases,
        schema_version=int(doc["schema_version"]),
        doc=doc,
    )


def load_baseline(path: Path) -> Baseline:
    """Read and validate a baseline file.  Raises BaselineError (naming the file and the problem)."""
    return to_baseline(Path(path), read_document(Path(path)))


# ------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------


def new_document(name: str, max_runs: int = DEFAULT_MAX_RUNS) -> dict[str, Any]:
    """An empty baseline document (no runs, no cases, source "measured") in the file's layout."""
    return {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "source": "measured",
        "source_detail": "",
        "max_runs": max_runs,
        "runs": [],
        "cases": {},
    }


def _clean_summary(summary: Mapping[str, Any]) -> dict:
    out: dict[str, Any] = {}
    for k, v in dict(summary or {}).items():
        if k == "n":
            out[k] = int(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v) if math.isfinite(float(v)) else None
        else:
            out[k] = v
    return {k: v for k, v in out.items() if v is not None}


def merge_run(doc: dict, *, run_id: str, date: str, fingerprint: Mapping, cases: Mapping[str, CaseRecord],
              max_runs: int, session: Optional[str] = None, node: Optional[int] = None,
              host: Optional[str] = None) -> dict:
    doc["max_runs"] = max_runs
    if doc.get("source") == "published" and cases:
        # Measured runs now decide the cases they cover; floors stay for the cases still without runs.
        doc["source"] = "measured"
        doc["source_detail"] = (doc.get("source_detail", "") + f" Measured runs added from {date} on; published "
                                "floors are kept for the cases that have no measured run.").strip()
    if not any(r["run_id"] == run_id for r in doc["runs"]):
        doc["runs"].append({"run_id": run_id, "date": date, **({"session": session} if session else {}),
                            **({"node": int(node)} if node is not None else {}),
                            **({"host": host} if host else {}),
                            "fingerprint": json.loads(json.dumps(dict(fingerprint)))})
    for key, rec in cases.items():
        samples = [float(v) for v in rec.samples_gbps]
        bad = [v for v in samples if not (math.isfinite(v) and v > 0)]
        if not samples or bad:
            raise ValueError(
                f"case {key!r}: samples_gbps must be a non-empty list of positive finite numbers"
                + (f" (got {bad[0]!r})" if bad else " (got none)")
            )
        old = dict(doc["cases"].get(key) or {})
        summary = _clean_summary(rec.summary)
        summary.setdefault("n", len(samples))
        runs = [r for r in old.pop("runs", []) if r["run_id"] != run_id]  # a re-save of the same run
        runs.append({"run_id": run_id, "samples_gbps": samples, "summary": summary,
                     **({"tail": json.loads(json.dumps(dict(rec.tail)))} if rec.tail else {})})
        floor = old.pop("floor_gbps", None)
        for k in ("test_id", "op", "size_bytes", "world_size", "dtype", "devices", "layout"):
            old.pop(k, None)
        # metadata first, then runs, then the floor (if any), then fields this version does not know
        doc["cases"][key] = {
            "test_id": rec.test_id,
            "op": rec.op,
            "size_bytes": int(rec.size_bytes),
            "world_size": int(rec.world_size),
            "dtype": rec.dtype,
            "devices": [str(d) for d in rec.devices],
            **({"layout": rec.layout} if rec.layout else {}),
            "runs": runs,
            **({"floor_gbps": floor} if floor is not None else {}),
            **old,
        }
    for entry in doc["cases"].values():
        groups = list(dict.fromkeys(run_group(r["run_id"]) for r in entry["runs"]))
        if len(groups) > max_runs:  # the oldest runs go, a job's runs of its nodes together (run_group)
            keep = set(groups[-max_runs:])
            entry["runs"] = [r for r in entry["runs"] if run_group(r["run_id"]) in keep]
    used = {r["run_id"] for entry in doc["cases"].values() for r in entry["runs"]}
    doc["runs"] = [r for r in doc["runs"] if r["run_id"] in used]
    return doc


def dumps_document(doc: dict[str, object]) -> str:
    """Indented JSON with each samples list on one line (readable, diff-friendly, not 1 number a line)."""
    placeholders: dict[str, str] = {}
    shallow = json.loads(json.dumps(doc))
    for ci, entry in enumerate(shallow["cases"].values()):
        for ri, run in enumerate(entry["runs"]):
            tag = f"@@samples-{ci}-{ri}@@"
            placeholders[json.dumps(tag)] = json.dumps(run["samples_gbps"], allow_nan=False)
            run["samples_gbps"] = tag
    text = json.dumps(shallow, indent=2, allow_nan=False)
    return re.sub(r'"@@samples-\d+-\d+@@"', lambda m: placeholders[m.group(0)], text) + "\n"


_PART_OF_A_RUN = re.compile(r"(-node[0-9]+)?(-part[0-9]+)?$")


def run_group(run_id: str) -> str:
    """The run a saved run belongs to: a job across nodes saves ``<id>-node<N>`` per node and ``<id>-part<K>``
    for a test's further groups (``gate.recording.save_records``); ``max_runs`` counts such a job as one run, so
    that a save of 16 or 32 nodes neither trims itself nor pushes out the earlier sessions of a case."""
    return _PART_OF_A_RUN.sub("", run_id) or run_id


@dataclass(frozen=True)
class RunToSave:
    """One run for :func:`save_runs`: its cases (case_key -> CaseRecord) and what the run record says
    (see the format above); ``node``/``host`` for the run of one node of a job across nodes."""

    run_id: str
    date: str
    fingerprint: Mapping[str, object]
    cases: Mapping[str, CaseRecord]
    session: Optional[str] = None
    node: Optional[int] = None
    host: Optional[str] = None


def save_run(
    path: Path,
    *,
    name: str,
    run_id: str,
    date: str,
    fingerprint: Mapping[str, object],
    cases: Mapping[str, CaseRecord],
    max_runs: int = DEFAULT_MAX_RUNS,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    session: Optional[str] = None,
) -> None:
    """Add this run's samples to the baseline at ``path`` (created if missing).

    Under an exclusive lock on ``<path>.lock``: re-read the file (a corrupt one raises BaselineError and
    is left untouched), append this run to every case in ``cases`` (a case already holding ``run_id`` has
    that run replaced, so xdist workers of one session can each save their own cases under one run id),
    keep the cases not run this time, keep at most ``max_runs`` runs per case (oldest dropped), drop run
    records no case refers to any more, and write atomically.  A published case that gains measured runs
    keeps its ``floor_gbps``.  ``cases`` maps case_key(...) to CaseRecord.  ``session`` labels the occasion
    the run was recorded on (``hardware.session_label``).
    """
    save_runs(path, name=name, runs=[RunToSave(run_id, date, fingerprint, cases, session)], max_runs=max_runs,
              lock_timeout_s=lock_timeout_s)


def save_runs(path: Path, *, name: str, runs: Sequence[RunToSave], max_runs: int = DEFAULT_MAX_RUNS,
              lock_timeout_s: float = LOCK_TIMEOUT_S, start: Optional[Mapping[str, object]] = None) -> None:
    """:func:`save_run` for several runs at once (a job across nodes saves one run per node), under one lock
    and in one atomic write: either every run is saved or none is.  A file not there yet starts from ``start``
    (a document without runs: the published floors of a shipped file, ``gate.machines.start_document``), else
    empty."""
    path = Path(path)
    if isinstance(max_runs, bool) or int(max_runs) != max_runs or max_runs < 1:
        raise ValueError(f"max_runs must be a whole number >= 1, got {max_runs!r}")
    if not runs:
        raise ValueError("no run to save")
    for run in runs:
        if not run.run_id:
            raise ValueError("run_id must be a non-empty string")
        if not isinstance(run.fingerprint, Mapping):
            raise ValueError(f"fingerprint must be a mapping, got {type(run.fingerprint).__name__}")
        if nesting_depth_exceeds(run.fingerprint, MAX_NESTING - 3):  # it sits at $.runs[i].fingerprint
            raise ValueError(f"fingerprint is nested deeper than {MAX_NESTING - 3} levels: a baseline file nests "
                             f"at most {MAX_NESTING} deep")
        for key, rec in run.cases.items():
            if key != rec.key:
                raise ValueError(f"case key {key!r} does not match its record (expected {rec.key!r})")
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path) + ".lock", timeout=lock_timeout_s)
    try:
        with lock:
            # Holding the lock, no other saver is writing: temporary files of this baseline left beside it
            # are a killed saver's (a live write_document's are locked and kept).
            remove_stale_temp_files(path)
            if path.exists():
                doc = read_document(path)
            else:
                doc = {**start, "max_runs": int(max_runs)} if start else new_document(name, int(max_runs))
            for run in runs:
                doc = merge_run(doc, run_id=run.run_id, date=run.date, fingerprint=run.fingerprint,
                                cases=run.cases, max_runs=int(max_runs), session=run.session, node=run.node,
                                host=run.host)
            errors = list(SCHEMA_VALIDATOR.iter_errors(doc))
            if errors:  # a bug or bad input: never write a file that would not load
                e = errors[0]
                raise BaselineError(f"{path}: refusing to write an invalid baseline: "
                                    f"at {json_path(e.absolute_path)}: {e.message}")
            try:
                check_tails(path, doc)
                check_finite(path, doc)
            except BaselineError as e:
                raise BaselineError(f"refusing to write: {e}") from None
            write_atomic(path, dumps_document(doc))
    except Timeout:
        raise BaselineError(
            f"{path}: could not lock {path}.lock within {lock_timeout_s:g} s (another save in progress?)"
        ) from None


def write_document(path: Path, doc: dict[str, object]) -> None:
    """Write a whole baseline document to ``path`` (as :func:`dumps_document` lays it out), atomically.

    The text goes to a temporary file in the same directory, which is read back as :func:`load_baseline`
    reads a file (schema, samples and floors positive and finite) before ``os.replace`` puts it in place:
    an invalid document raises :class:`BaselineError` and never replaces an existing file, and a crash
    never leaves a half-written one.  No lock is taken: this is for generating a file, not for merging runs
    into a shared one (:func:`save_run` does that).
    """
    path = Path(path)
    if nesting_depth_exceeds(doc, MAX_NESTING):
        raise BaselineError(f"{path}: refusing to write an invalid baseline: it is nested deeper than "
                            f"{MAX_NESTING} levels")

    def check(tmp: Path) -> None:
        try:
            load_baseline(tmp)
        except BaselineError as e:  # it names the temporary file, which is gone by the time it is read
            raise BaselineError(f"{path}: refusing to write an invalid baseline: {e}") from None

    write_atomic(path, dumps_document(doc), check)


def update_document(path: Path, change: Callable[[Optional[dict]], Optional[dict]], *,
                    lock_timeout_s: float = LOCK_TIMEOUT_S, missing_ok: bool = False) -> Optional[dict]:
    """Change the baseline file at ``path`` as :func:`save_run` does: under its lock, on what it holds now.

    Under an exclusive lock on ``<path>.lock`` (the one :func:`save_runs` takes, so a save and a change never
    interleave): re-read the file (a missing one is a BaselineError, or ``None`` is passed with
    ``missing_ok``; a corrupt one raises BaselineError and is left untouched), call ``change(doc)``, check the
    document it returns as :func:`load_baseline` checks a file (schema, samples and floors positive and finite,
    tails, nesting), and write it atomically.  An invalid result raises BaselineError ("refusing to write")
    and the file is left as it was; ``change`` returning ``None`` writes nothing (nothing to do), and an
    exception it raises passes through with nothing written.  Returns the document written, or ``None``.
    A lock not had within ``lock_timeout_s`` seconds is a BaselineError naming the lock file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path) + ".lock", timeout=lock_timeout_s)
    try:
        with lock:
            remove_stale_temp_files(path)  # a killed writer's leftovers: see save_runs
            if path.exists() or not missing_ok:
                current: Optional[dict] = read_document(path)
            else:
                current = None
            doc = change(current)
            if doc is None:
                return None
            _check_to_write(path, doc)
            write_atomic(path, dumps_document(doc))
            return doc
    except Timeout:
        raise BaselineError(
            f"{path}: could not lock {path}.lock within {lock_timeout_s:g} s (another save in progress?)"
        ) from None


def _check_to_write(path: Path, doc: object) -> None:
    """What :func:`read_document` checks of a file, on a document about to be written: BaselineError
    ("refusing to write an invalid baseline") naming ``path`` and the first problem."""
    at = f"{path}: refusing to write an invalid baseline"
    if nesting_depth_exceeds(doc, MAX_NESTING):
        raise BaselineError(f"{at}: it is nested deeper than {MAX_NESTING} levels")
    if not isinstance(doc, dict):
        raise BaselineError(f"{at}: the document is a {type(doc).__name__}, not an object")
    version = doc.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise BaselineError(f"{at}: schema_version {version} is newer than this pytest-gpucomm writes "
                            f"({SCHEMA_VERSION})")
    errors = sorted(SCHEMA_VALIDATOR.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        err = jsonschema.exceptions.best_match(errors) or errors[0]
        raise BaselineError(f"{at}: at {json_path(err.absolute_path)}: {describe_error(err)}")
    try:
        check_samples(path, doc)
        check_tails(path, doc)
        check_finite(path, doc)
    except BaselineError as e:
        raise BaselineError(f"refusing to write: {e}") from None
