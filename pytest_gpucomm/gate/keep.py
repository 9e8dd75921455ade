"""Keeping baseline files by hand: ``gpucomm baselines ...`` and ``gpucomm env``, outside a pytest run.

The plugin adds runs to a baseline (``--gpu-baseline-save``) and drops the oldest beyond ``max_runs``; what it
never does is take runs out on request, join the files of two machines or CI pools, or tell what is in a file.
These commands do, with no GPU:

* ``gpucomm baselines list``: one line per baseline file of the directory: name, source (measured or
  published), cases, runs (a job's ``-nodeN``/``-partK`` runs count as one, as ``max_runs`` counts them:
  ``gate.store.run_group``), sessions, the first and last date, and the hardware of its runs' fingerprints.
  A file that cannot be read gets a row saying so and its error on stderr (exit 2, the others still listed).
* ``gpucomm baselines show NAME``: one file: its source, its runs (id, date, session, node/host, the cases each
  holds, hardware, driver and communication library), its cases grouped by op (sizes, runs per case, floors).
* ``gpucomm baselines prune NAME --keep K | --before DATE | --run ID...``: take runs out: keep the newest K
  runs (run groups, as above), remove the runs recorded before DATE (an ISO date or time, UTC when it names no
  zone), or remove the named runs (an id, or a job's id for all its ``-nodeN``/``-partK`` runs).  A removed
  run's samples leave every case; a case left with no run and no floor leaves the file (it could gate nothing),
  a case with a published floor stays, judged on its floor.  A file left with no run is still a valid file
  (the schema allows no cases); the command says so and writes it.
* ``gpucomm baselines merge A B -o C``: the union of two files into C: their runs (a run in both is kept once;
  the same run id with other contents is an error), their cases (a case in both gets the runs of both), the
  larger ``max_runs`` (beyond it the oldest runs of a case go, as a save drops them), their floors (two
  different floors of one case are an error); C's name is its file name, its source "measured" when it holds
  a run.  C may be A or B (merge into a file in place) or a new file; an existing third file is refused, since
  merging would throw its runs away.
* ``gpucomm env [--baseline B]``: this machine's fingerprint (``hardware.detect``/``hardware.fingerprint``; on a
  machine with no GPU, the CPU one) as ``key: value`` lines or ``--json``; with a baseline, what changed since
  its newest run was recorded, as the plugin's header says it (volatile keys and the host name ignored: another
  host of the same kind is not a change).

NAME, A and B are a baseline name (``<dir>/<NAME>.json``; the directory is ``--baseline-dir``, else
``GPUCOMM_BASELINE_DIR`` as for the plugin's ``--gpu-baseline-dir``, else ``./baselines``) or a path, as
``--gpu-baseline`` takes them (``gate.names.resolve_baseline``); ``env --baseline`` also takes a saved report
(``saved.load_reference``).  Every write takes the file's lock, re-reads it under the lock and replaces it
atomically (``gate.store.update_document``, the lock and write of the plugin's save), so a concurrent
``--gpu-baseline-save`` loses nothing; a result that would not load is never written.  ``--dry-run`` prints what
would change and writes nothing; without it the same lines are followed by ``wrote <file>``.  The runs per case
before -> after are counted by transition (``169 cases: 16 -> 3 runs``: a file has hundreds of cases); ``-v``
names every case of each, and the cases removed or left on their floor are always named.

Exit codes: 0 done (also: nothing to change); 2 bad input -- a missing, corrupt or invalid file, a report where
a baseline is expected, an unknown name or run id, conflicting runs or floors, an invalid option value -- or a
file that could not be locked or written.  Each error is one ``gpucomm: error: ...`` line on stderr that names
the value and the file.

Imports: building the parsers imports nothing beyond argparse; running a command imports the store (jsonschema,
filelock) and tabulate, and torch only for ``env`` (hardware detection) and for the NAME ``auto``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, TextIO

from ..units import format_size, plural
from ..vocab import DEFAULT_BASELINE_DIR

__all__ = [
    "BASELINE_DIR_ENV",
    "DEFAULT_BASELINE_DIR",
    "KeepError",
    "add_baselines_parser",
    "run_baselines",
    "add_env_parser",
    "run_env",
    "baseline_dir",
    "read_baseline",
    "hardware_of",
    "prune_document",
    "merge_documents",
]

#: the environment variable of the plugin's ``--gpu-baseline-dir`` (settings.py), read here the same way
BASELINE_DIR_ENV = "GPUCOMM_BASELINE_DIR"
#: where baseline NAMEs are looked up without ``--baseline-dir`` or the variable: ``baselines/`` of the current
#: directory (the plugin's default is ``baselines/`` under the pytest rootdir, which is where one runs pytest)


class KeepError(ValueError):
    """Bad input to a ``baselines``/``env`` command; the message names the value and the file."""


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------


def _common(lock: bool = False, dry_run: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--baseline-dir", metavar="DIR", default=None,
                   help=f"Where baseline NAMEs are looked up. Default: ${BASELINE_DIR_ENV}, else "
                        f"./{DEFAULT_BASELINE_DIR}.")
    if dry_run:
        p.add_argument("--dry-run", action="store_true", help="Print what would change; write nothing.")
        p.add_argument("-v", "--verbose", action="store_true",
                       help="Name every case whose runs change (by default only the counts, and the cases removed).")
    if lock:  # the default is the store's, read when the command runs (building the parser imports no store)
        p.add_argument("--lock-timeout", metavar="SECONDS", default=None,
                       help="How long to wait for the file's lock while a save is in progress. Default: as long "
                            "as the plugin's save waits (gate.store.LOCK_TIMEOUT_S).")
    return p


def add_baselines_parser(subparsers: Any) -> None:
    """Add ``baselines`` (``list``, ``show``, ``prune``, ``merge``) to an argparse ``add_subparsers()`` object."""
    bp = subparsers.add_parser("baselines", help="List, show, prune and merge baseline files.",
                               description="Keep baseline files by hand (exit 0 done, 2 bad input).")
    sub = bp.add_subparsers(dest="baselines_action", metavar="ACTION", required=True)
    p = sub.add_parser("list", parents=[_common()], help="One line per baseline file of the directory.")
    p.set_defaults(func=run_baselines)
    p = sub.add_parser("show", parents=[_common()], help="A baseline's runs and cases.")
    p.add_argument("name", metavar="NAME", help="Baseline name or path to a .json file.")
    p.set_defaults(func=run_baselines)
    p = sub.add_parser("prune", parents=[_common(lock=True, dry_run=True)], help="Remove runs from a baseline.",
                       description="Remove runs: their samples leave every case; a case left with no run and no "
                                   "floor is removed, one with a floor stays.")
    p.add_argument("name", metavar="NAME", help="Baseline name or path to a .json file.")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--keep", metavar="K", help="Keep the newest K runs (a job's -nodeN/-partK runs count as one).")
    how.add_argument("--before", metavar="DATE",
                     help="Remove the runs recorded before DATE (ISO: 2026-12-01 or 2026-12-01T10:00; UTC unless "
                          "it names a zone).")
    how.add_argument("--run", metavar="ID", action="append",
                     help="Remove this run (repeatable); a job's id removes all its -nodeN/-partK runs.")
    p.set_defaults(func=run_baselines)
    p = sub.add_parser("merge", parents=[_common(lock=True, dry_run=True)], help="Join two baselines into one.",
                       description="C gets the runs and cases of A and B; C may be A or B, or a new file.")
    p.add_argument("a", metavar="A", help="Baseline name or path.")
    p.add_argument("b", metavar="B", help="Baseline name or path.")
    p.add_argument("-o", "--output", metavar="C", required=True,
                   help="The merged baseline: a name (in the baseline dir) or a path; A, B or a new file.")
    p.set_defaults(func=run_baselines)


def add_env_parser(subparsers: Any) -> None:
    """Add ``env`` to an argparse ``add_subparsers()`` object."""
    p = subparsers.add_parser("env", parents=[_common()], help="This machine's fingerprint, and what changed "
                              "since a baseline was recorded.")
    p.add_argument("--baseline", metavar="B", default=None,
                   help="A baseline name or path (or a saved report): print the difference from its newest run.")
    p.add_argument("--device", metavar="auto|gpu|cpu", default=None,
                   help="Which devices' fingerprint, as the plugin's --gpucomm-device. Default: GPUCOMM_DEVICE, "
                        "else auto.")
    p.add_argument("--json", action="store_true", help="Print JSON instead of key: value lines.")
    p.set_defaults(func=run_env)


def _error(err: TextIO, message: str) -> int:
    print(f"gpucomm: error: {message}", file=err)
    return 2


def _bad_input_types() -> tuple[type[Exception], ...]:
    from .schema import BaselineError
    from ..report.saved import ReportError

    return (KeepError, BaselineError, ReportError)


def run_baselines(args: argparse.Namespace, out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> int:
    """Run ``gpucomm baselines <action>``; returns the exit code (0 done, 2 bad input)."""
    out = out or sys.stdout
    err = err or sys.stderr
    action = getattr(args, "baselines_action", None)
    try:
        if action == "list":
            return _list(args, out, err)
        if action == "show":
            return _show(args, out)
        if action == "prune":
            return _prune(args, out)
        if action == "merge":
            return _merge(args, out)
        raise KeepError(f"unknown baselines action {action!r}: expected list, show, prune or merge")
    except _bad_input_types() as e:
        return _error(err, str(e))
    except BrokenPipeError:  # the reader went away (| head): not an error of the file
        raise
    except OSError as e:  # writing: a read-only directory, a full disk
        return _error(err, f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))


# ------------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------------


def baseline_dir(args: Any) -> Path:
    """``--baseline-dir``, else ``$GPUCOMM_BASELINE_DIR``, else ``./baselines``."""
    given = getattr(args, "baseline_dir", None)
    return Path(given or os.environ.get(BASELINE_DIR_ENV, "").strip() or DEFAULT_BASELINE_DIR).expanduser()


def _where(args: Any) -> str:
    """Where the baseline directory came from, for messages."""
    if getattr(args, "baseline_dir", None):
        return "given by --baseline-dir"
    if os.environ.get(BASELINE_DIR_ENV, "").strip():
        return f"given by ${BASELINE_DIR_ENV}"
    return f"the default, ./{DEFAULT_BASELINE_DIR}"


def _resolve(spec: str, args: Any, *, must_exist: bool = True) -> Path:
    from .names import BaselineNotFound, resolve_baseline

    model = None
    if (spec or "").strip() == "auto":
        from ..env.hardware import detect

        model = detect().model
    try:
        return resolve_baseline(spec, search_dirs=[baseline_dir(args)], detected_model=model, must_exist=must_exist)
    except BaselineNotFound as e:
        raise BaselineNotFound(f"{e} (the baseline directory: {_where(args)})") from None


def read_baseline(path: Path) -> dict[str, Any]:
    """The checked document of a baseline file (``gate.store``'s reader and errors); a saved report is refused
    as such (KeepError), not as a file with no ``schema``."""
    from .schema import BaselineError
    from .store import read_document

    try:
        return read_document(path)
    except BaselineError:
        if _is_report(path):
            raise KeepError(f"{path}: is a pytest-gpucomm report (--gpucomm-json), not a baseline file: "
                            "'gpucomm baselines' keeps baseline files (a report is compared with one by "
                            "'gpucomm compare')") from None
        raise


def _is_report(path: Path) -> bool:
    from ..report.saved import REPORT_FORMAT, ReportError, read_json

    try:
        doc = read_json(path, "report")
    except ReportError:
        return False
    return isinstance(doc, Mapping) and doc.get("format") == REPORT_FORMAT


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


# ------------------------------------------------------------------------------------------------
# What a file holds
# ------------------------------------------------------------------------------------------------


def hardware_of(fp: Optional[Mapping[str, Any]]) -> str:
    """A fingerprint's hardware in a few words: ``2 x NVIDIA H200``, ``2 nodes x 8 x NVIDIA H200``, ``CPU Intel
    Xeon ...`` (a run with no GPU); ``-`` when the fingerprint does not say."""
    if not fp or not fp.get("model"):
        return "-"
    if fp.get("kind") == "cpu":
        text = f"CPU {fp['model']}"
    else:
        count = fp.get("count")
        text = f"{count} x {fp['model']}" if isinstance(count, int) and count > 0 else str(fp["model"])
    nodes = fp.get("nodes")
    if isinstance(nodes, (Mapping, list)) and len(nodes) > 1:
        text = f"{len(nodes)} nodes x {text}"
    return text


def _groups(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    from .store import run_group

    return list(dict.fromkeys(run_group(r["run_id"]) for r in runs))


def _sessions(runs: Sequence[Mapping[str, Any]]) -> int:
    return len({r.get("session") or r["run_id"] for r in runs})


def _day(date: str) -> str:
    return str(date)[:10] if date else "-"


def _runs_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """Run groups, and the run records when a job saved several (``2 (6 records)``)."""
    groups = len(_groups(runs))
    return f"{groups} ({len(runs)} records)" if groups != len(runs) else str(groups)


def _list(args: Any, out: TextIO, err: TextIO) -> int:
    from tabulate import tabulate

    d = baseline_dir(args)
    if not d.is_dir():
        raise KeepError(f"baseline directory {d} ({_where(args)}) does not exist or is not a directory")
    files = sorted(p for p in d.glob("*.json") if p.is_file() and not p.name.startswith("."))
    if not files:
        print(f"no baselines in {d}", file=out)
        return 0
    rows: list[list[Any]] = []
    bad: list[str] = []
    for p in files:
        try:
            doc = read_baseline(p)
        except _bad_input_types() as e:
            bad.append(str(e))
            rows.append([p.stem, "unreadable", "", "", "", "", "", "see below"])
            continue
        runs = doc["runs"]
        hw = list(dict.fromkeys(hardware_of(r.get("fingerprint")) for r in reversed(runs)))  # newest first
        rows.append([doc["name"] if doc["name"] == p.stem else f"{p.stem} (name {doc['name']})", doc["source"],
                     len(doc["cases"]), _runs_text(runs), _sessions(runs) if runs else 0,
                     _day(runs[0]["date"]) if runs else "-", _day(runs[-1]["date"]) if runs else "-",
                     "; ".join(hw) or "-"])
    print(f"baselines in {d}:", file=out)
    print(tabulate(rows, headers=["name", "source", "cases", "runs", "sessions", "first", "last", "hardware"],
                   tablefmt="simple", disable_numparse=True), file=out)
    for message in bad:
        print(f"gpucomm: error: {message}", file=err)
    return 2 if bad else 0


def _show(args: Any, out: TextIO) -> int:
    path = _resolve(args.name, args)
    doc = read_baseline(path)
    for line in describe_document(doc, path):
        print(line, file=out)
    return 0


def describe_document(doc: Mapping[str, Any], path: Path) -> list[str]:
    """The lines of ``gpucomm baselines show``: summary, runs, cases by op."""
    from tabulate import tabulate

    runs, cases = doc["runs"], doc["cases"]
    lines = [f"baseline {doc['name']} ({path})",
             f"source: {doc['source']}" + (f" -- {doc['source_detail']}" if doc.get("source_detail") else ""),
             f"max_runs: {doc['max_runs']} per case (a job's -nodeN/-partK runs count as one)"]
    if runs:
        lines.append(f"{plural(len(_groups(runs)), 'run')} in {plural(_sessions(runs), 'session')}, "
                     f"{runs[0]['date']} to {runs[-1]['date']}"
                     + (f" ({len(runs)} run records)" if len(runs) != len(_groups(runs)) else ""))
    else:
        lines.append("no measured run")
    floors = sum(1 for c in cases.values() if c.get("floor_gbps") is not None)
    lines.append(f"{plural(len(cases), 'case')}" + (f", {floors} with a floor" if floors else ""))
    if runs:
        held = Counter(r["run_id"] for c in cases.values() for r in c["runs"])
        rows = []
        for r in runs:
            fp = r.get("fingerprint") or {}
            node = r.get("node")
            host = r.get("host") or fp.get("host") or ""
            where = (f"node {node}" + (f" ({host})" if host else "")) if node is not None else (host or "-")
            rows.append([r["run_id"], r["date"], r.get("session") or "-", where, held.get(r["run_id"], 0),
                         hardware_of(fp), fp.get("driver") or "-", fp.get("comm_library") or "-"])
        lines += ["", "runs (oldest first):"]
        lines += tabulate(rows, headers=["run", "date", "session", "node/host", "cases", "hardware", "driver",
                                         "comm library"], tablefmt="simple", disable_numparse=True).splitlines()
    if cases:
        lines += ["", "cases by op:"]
        lines += tabulate(_case_rows(cases), headers=["op", "ranks", "dtype", "layout", "size", "cases", "runs",
                                                      "floor GB/s"],
                          tablefmt="simple", disable_numparse=True).splitlines()
    return lines


def _case_rows(cases: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    """One row per op, ranks, dtype, layout and size (the op named on a group's first row): how many cases
    (tests) hold it, their runs (``16`` or ``3-16``), their floors."""
    at: dict[tuple, list[Mapping[str, Any]]] = {}
    for c in cases.values():
        at.setdefault((c["op"], c["world_size"], c.get("dtype") or "-", c.get("layout") or "", c["size_bytes"]),
                      []).append(c)
    rows: list[list[Any]] = []
    last = None
    for key in sorted(at):
        op, ws, dtype, layout, size = key
        group = at[key]
        counts = sorted(len(c["runs"]) for c in group)
        floors = sorted({float(c["floor_gbps"]) for c in group if c.get("floor_gbps") is not None})
        head = (op, ws, dtype, layout)
        rows.append([op if head != last else "", ws if head != last else "", dtype if head != last else "",
                     layout if head != last else "", format_size(size), len(group),
                     str(counts[0]) if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}",
                     ", ".join(f"{f:g}" for f in floors) or "-"])
        last = head
    return rows


# ------------------------------------------------------------------------------------------------
# prune
# ------------------------------------------------------------------------------------------------


def _parse_keep(value: str) -> int:
    try:
        k = int(str(value).strip())
    except ValueError:
        raise KeepError(f"--keep {value!r}: not a whole number of runs") from None
    if k < 0:
        raise KeepError(f"--keep {value!r}: the number of runs to keep must be >= 0")
    return k


def _lock_timeout(args: Any) -> float:
    """``--lock-timeout`` in seconds (> 0), else the plugin's (``gate.store.LOCK_TIMEOUT_S``)."""
    from .store import LOCK_TIMEOUT_S

    value = getattr(args, "lock_timeout", None)
    if value is None:
        return LOCK_TIMEOUT_S
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise KeepError(f"--lock-timeout {value!r}: not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise KeepError(f"--lock-timeout {value!r}: must be a finite number of seconds > 0")
    return seconds


def _parse_date(value: str, where: str) -> _dt.datetime:
    """An ISO date or date-time (``2026-12-01``, ``2026-12-01T10:00:00+00:00``, a ``Z`` suffix too); UTC when it
    names no zone.  KeepError naming ``where`` otherwise."""
    text = str(value).strip()
    try:
        when = _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise KeepError(f"{where} {value!r}: not an ISO date (2026-12-01, or 2026-12-01T10:00:00 with an "
                        "optional +HH:MM)") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=_dt.timezone.utc)


def prune_document(doc: Mapping[str, Any], path: Path, *, keep: Optional[int] = None,
                   before: Optional[_dt.datetime] = None, run_ids: Sequence[str] = ()) -> dict[str, Any]:
    """A copy of ``doc`` without the runs chosen by exactly one of ``keep`` (keep the newest K run groups),
    ``before`` (remove the runs dated earlier) or ``run_ids`` (remove these runs, or a job id's runs): their
    samples leave every case, and a case left with no run and no floor leaves the file.  KeepError (naming
    ``path``) for an unknown run id or a run whose date is not ISO."""
    from .store import run_group

    if [keep is not None, before is not None, bool(run_ids)].count(True) != 1:
        raise KeepError("prune: give exactly one of --keep, --before, --run")
    new = json.loads(json.dumps(doc))
    runs = new["runs"]
    if keep is not None:
        groups = _groups(runs)
        kept_groups = set(groups[max(0, len(groups) - keep):])
        remove = {r["run_id"] for r in runs if run_group(r["run_id"]) not in kept_groups}
    elif before is not None:
        remove = set()
        for r in runs:
            if _parse_date(r["date"], f"{path}: run {r['run_id']!r} has the date") < before:
                remove.add(r["run_id"])
    else:
        ids = [r["run_id"] for r in runs]
        remove = set()
        for rid in run_ids:
            if rid in ids:
                remove.add(rid)
            elif any(run_group(i) == rid for i in ids):
                remove.update(i for i in ids if run_group(i) == rid)
            else:
                raise KeepError(f"--run {rid!r}: no such run in {path}; its runs are: "
                                + (", ".join(ids) if ids else "none"))
    new["runs"] = [r for r in runs if r["run_id"] not in remove]
    for key in list(new["cases"]):
        case = new["cases"][key]
        case["runs"] = [r for r in case["runs"] if r["run_id"] not in remove]
        if not case["runs"] and case.get("floor_gbps") is None:
            del new["cases"][key]
    return new


def _prune(args: Any, out: TextIO) -> int:
    from .store import update_document

    timeout = _lock_timeout(args)
    path = _resolve(args.name, args)
    if args.keep is not None:
        how: dict[str, Any] = {"keep": _parse_keep(args.keep)}
        said = f"--keep {how['keep']}"
    elif args.before is not None:
        how = {"before": _parse_date(args.before, "--before")}
        said = f"--before {args.before}"
    else:
        how = {"run_ids": list(args.run or [])}
        said = " ".join(f"--run {r}" for r in how["run_ids"])
    doc = read_baseline(path)
    new = prune_document(doc, path, **how)
    print(f"prune {path} ({said}):", file=out)
    if new == doc:
        print("  nothing to remove", file=out)
        return 0
    for line in _change_lines(doc, new, verbose=args.verbose):
        print(line, file=out)
    if args.dry_run:
        print("dry run: nothing written", file=out)
        return 0

    held: list[dict] = []

    def change(current: Optional[dict]) -> Optional[dict]:
        assert current is not None  # update_document reads an existing file (missing_ok is not given)
        held.append(current)
        if current != doc:  # saved to meanwhile: prune what it holds now (an unknown --run id is still an error)
            return prune_document(current, path, **how)
        return new

    written = update_document(path, change, lock_timeout_s=timeout)
    if written is not None and written != new:
        print("  the file changed while this ran; what was pruned from what it held then:", file=out)
        for line in _change_lines(held[-1], written, verbose=args.verbose):
            print(line, file=out)
    print(f"wrote {path}", file=out)
    return 0


def _change_lines(old: Mapping[str, Any], new: Mapping[str, Any], *, verbose: bool) -> list[str]:
    """What pruning ``old`` into ``new`` does: runs removed and kept, cases removed, kept on their floor, and
    the runs per case before -> after (counted by transition; each case named with ``verbose``)."""
    kept = {r["run_id"] for r in new["runs"]}
    gone = [r for r in old["runs"] if r["run_id"] not in kept]
    lines = [f"  runs removed ({len(gone)}): " + (", ".join(f"{r['run_id']} ({r['date']})" for r in gone) or "none"),
             f"  runs kept ({len(new['runs'])}): " + (", ".join(r["run_id"] for r in new["runs"]) or "none")]
    if not new["runs"]:
        lines.append("  every run is removed: the file keeps " + (
            f"{plural(len(new['cases']), 'case')} with a published floor only" if new["cases"] else "no case"))
    removed = [k for k in old["cases"] if k not in new["cases"]]
    floor_only = [k for k in new["cases"] if not new["cases"][k]["runs"] and old["cases"][k]["runs"]]
    moves: dict[tuple[int, int], list[str]] = {}
    for k, case in new["cases"].items():
        before, after = len(old["cases"][k]["runs"]), len(case["runs"])
        if before != after:
            moves.setdefault((before, after), []).append(k)
    lines.append(f"  cases: {len(old['cases'])} -> {len(new['cases'])}")
    for (before, after), keys in sorted(moves.items(), key=lambda kv: (-kv[0][0], -kv[0][1])):
        lines.append(f"    {plural(len(keys), 'case')}: {before} -> {plural(after, 'run')}")
        if verbose:
            lines += [f"      {k}" for k in keys]
    if removed:
        lines.append(f"  {plural(len(removed), 'case')} removed (no run left and no floor):")
        lines += [f"    {k}" for k in removed]
    if floor_only:
        lines.append(f"  {plural(len(floor_only), 'case')} kept on its published floor only (no run left):")
        lines += [f"    {k} (floor {new['cases'][k]['floor_gbps']:g} GB/s)" for k in floor_only]
    return lines


# ------------------------------------------------------------------------------------------------
# merge
# ------------------------------------------------------------------------------------------------


def _date_key(runs: Sequence[Mapping[str, Any]]) -> Optional[dict[str, _dt.datetime]]:
    """run id -> its date, when every date is ISO (else None: the runs keep their files' order)."""
    out = {}
    for r in runs:
        try:
            out[r["run_id"]] = _parse_date(r["date"], "")
        except KeepError:
            return None
    return out


def merge_documents(a: Mapping[str, Any], b: Mapping[str, Any], *, name: str, where_a: str = "A",
                    where_b: str = "B") -> dict[str, Any]:
    """The union of two baseline documents, named ``name`` (see the module docstring for the rules).  KeepError
    naming both files for a run id with other contents in each, or a case with two different floors."""
    from .schema import SCHEMA_VERSION
    from .store import run_group

    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))
    a_runs = {r["run_id"]: r for r in a["runs"]}
    runs = list(a["runs"])
    for r in b["runs"]:
        if r["run_id"] not in a_runs:
            runs.append(r)
        elif a_runs[r["run_id"]] != r:
            differ = sorted(k for k in set(r) | set(a_runs[r["run_id"]]) if r.get(k) != a_runs[r["run_id"]].get(k))
            raise KeepError(f"run {r['run_id']!r} is in both {where_a} and {where_b} with different contents "
                            f"({', '.join(differ)} differ): the same id must be the same run; prune it from one")
    dates = _date_key(runs)
    if dates is not None:
        runs.sort(key=lambda r: dates[r["run_id"]])  # stable: A's before B's at the same time
    order = {r["run_id"]: i for i, r in enumerate(runs)}
    max_runs = max(int(a["max_runs"]), int(b["max_runs"]))
    cases: dict[str, Any] = {}
    for key in list(a["cases"]) + [k for k in b["cases"] if k not in a["cases"]]:
        ca, cb = a["cases"].get(key), b["cases"].get(key)
        if ca is None or cb is None:
            cases[key] = ca if ca is not None else cb
            continue
        fa, fb = ca.get("floor_gbps"), cb.get("floor_gbps")
        if fa is not None and fb is not None and float(fa) != float(fb):
            raise KeepError(f"case {key!r} has the floor {fa:g} GB/s in {where_a} and {fb:g} GB/s in {where_b}: "
                            "keep one (edit or prune the other file)")
        by_id = {r["run_id"]: r for r in ca["runs"]}
        for r in cb["runs"]:
            if r["run_id"] in by_id and by_id[r["run_id"]] != r:
                raise KeepError(f"run {r['run_id']!r} of case {key!r} holds other samples in {where_a} than in "
                                f"{where_b}: the same id must be the same run; prune it from one")
            by_id.setdefault(r["run_id"], r)
        merged = {**cb, **ca}  # A's metadata where both say it; the floor of whichever has one
        merged["runs"] = sorted(by_id.values(), key=lambda r: order.get(r["run_id"], len(order)))
        cases[key] = merged
    for case in cases.values():  # at most max_runs run groups per case, the oldest dropped (as a save does)
        groups = list(dict.fromkeys(run_group(r["run_id"]) for r in case["runs"]))
        if len(groups) > max_runs:
            keep = set(groups[-max_runs:])
            case["runs"] = [r for r in case["runs"] if run_group(r["run_id"]) in keep]
    used = {r["run_id"] for c in cases.values() for r in c["runs"]}
    runs = [r for r in runs if r["run_id"] in used]
    details = list(dict.fromkeys(d for d in (a.get("source_detail", ""), b.get("source_detail", "")) if d))
    extra = {k: v for k, v in {**b, **a}.items()
             if k not in ("schema", "schema_version", "name", "source", "source_detail", "max_runs", "runs", "cases")}
    return {"schema": a["schema"], "schema_version": SCHEMA_VERSION, "name": name,
            "source": "measured" if runs else "published", "source_detail": " ".join(details),
            "max_runs": max_runs, "runs": runs, "cases": cases, **extra}


def _merge(args: Any, out: TextIO) -> int:
    from .store import update_document

    timeout = _lock_timeout(args)
    pa, pb = _resolve(args.a, args), _resolve(args.b, args)
    pc = _resolve(args.output, args, must_exist=False)
    if _same_file(pa, pb):
        raise KeepError(f"A and B are the same file ({pa}): nothing to merge")
    if pc.suffix != ".json":
        raise KeepError(f"-o {args.output}: {pc} is not a .json file (a baseline is <NAME>.json)")
    into = "a" if _same_file(pc, pa) else "b" if _same_file(pc, pb) else None
    if into is None and pc.exists():
        raise KeepError(f"-o {args.output}: {pc} exists and is neither A ({pa}) nor B ({pb}): merging into it would "
                        "replace its runs; give a new file, or merge C itself with A or B (merge C A -o C)")
    a, b = read_baseline(pa), read_baseline(pb)
    merged = merge_documents(a, b, name=pc.stem, where_a=str(pa), where_b=str(pb))
    print(f"merge {pa} + {pb} -> {pc}" + (" (in place)" if into else "") + ":", file=out)
    for line in _merge_lines(a, b, merged, verbose=args.verbose):
        print(line, file=out)
    if args.dry_run:
        print("dry run: nothing written", file=out)
        return 0

    def change(current: Optional[dict]) -> dict:
        if into is None:
            if current is not None:  # created since the check above
                raise KeepError(f"-o {args.output}: {pc} was created while this ran: not replaced")
            return merged
        assert current is not None
        return merge_documents(current if into == "a" else a, current if into == "b" else b, name=pc.stem,
                               where_a=str(pa), where_b=str(pb))

    written = update_document(pc, change, lock_timeout_s=timeout, missing_ok=True)
    if written is not None and written != merged:
        print(f"  ({pc} changed while this ran: merged what it held then)", file=out)
    print(f"wrote {pc}", file=out)
    return 0


def _merge_lines(a: Mapping[str, Any], b: Mapping[str, Any], merged: Mapping[str, Any], *,
                 verbose: bool) -> list[str]:
    ids_a, ids_b = {r["run_id"] for r in a["runs"]}, {r["run_id"] for r in b["runs"]}
    kept = {r["run_id"] for r in merged["runs"]}
    lines = [f"  runs: {len(ids_a - ids_b)} only in A, {len(ids_b - ids_a)} only in B, {len(ids_a & ids_b)} in both: "
             f"{plural(len(_groups(merged['runs'])), 'run')} in {plural(_sessions(merged['runs']), 'session')}"]
    dropped = [r for r in a["runs"] + [r for r in b["runs"] if r["run_id"] not in ids_a] if r["run_id"] not in kept]
    if dropped:
        lines.append(f"  runs dropped beyond max_runs {merged['max_runs']} (the oldest): "
                     + ", ".join(f"{r['run_id']} ({r['date']})" for r in dropped))
    ka, kb = set(a["cases"]), set(b["cases"])
    lines.append(f"  cases: {len(ka - kb)} only in A, {len(kb - ka)} only in B, {len(ka & kb)} in both: "
                 f"{len(merged['cases'])} cases, max_runs {merged['max_runs']}")
    moves: dict[tuple[int, int, int], list[str]] = {}
    for k in sorted(ka & kb):
        counts = (len(a["cases"][k]["runs"]), len(b["cases"][k]["runs"]), len(merged["cases"][k]["runs"]))
        moves.setdefault(counts, []).append(k)
    for (na, nb, n), keys in sorted(moves.items(), reverse=True):
        lines.append(f"    {plural(len(keys), 'case')} in both: {na} + {nb} -> {plural(n, 'run')}")
        if verbose:
            lines += [f"      {k}" for k in keys]
    return lines


# ------------------------------------------------------------------------------------------------
# env
# ------------------------------------------------------------------------------------------------


def _flat(obj: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """``(dotted.key, value)`` for each leaf of a fingerprint; an empty object or list is one leaf, ``(none)``."""
    if isinstance(obj, Mapping):
        if not obj and prefix:
            yield prefix, "(none)"
        for k, v in obj.items():
            yield from _flat(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list):
        if not obj:
            yield prefix, "(none)"
        for i, v in enumerate(obj):
            yield from _flat(v, f"{prefix}.{i}")
    else:
        yield prefix, obj


def run_env(args: argparse.Namespace, out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> int:
    """Run ``gpucomm env``: this machine's fingerprint, and with ``--baseline`` what changed since the
    baseline's newest run; returns the exit code (0 done, 2 bad input)."""
    from ..env.fingerprint import VOLATILE_KEYS, diff_fingerprints, format_fingerprint_diff
    from ..env.hardware import detect, fingerprint

    out = out or sys.stdout
    err = err or sys.stderr
    device, where = getattr(args, "device", None), "--device"
    if device is None:
        device, where = os.environ.get("GPUCOMM_DEVICE") or "auto", "the GPUCOMM_DEVICE environment variable"
    if device not in ("auto", "gpu", "cpu"):
        return _error(err, f"invalid device {device!r} (from {where}): expected auto, gpu or cpu")
    try:
        info = detect(device)
    except RuntimeError as e:  # gpu asked for, none seen
        return _error(err, str(e))
    fp = fingerprint(info)
    result: Optional[dict[str, Any]] = None
    if getattr(args, "baseline", None):
        from ..report.saved import load_reference

        try:
            ref = load_reference(args.baseline, search_dirs=[baseline_dir(args)], detected_model=info.model)
        except _bad_input_types() as e:
            return _error(err, f"--baseline {args.baseline}: {e}")
        runs = ref.doc["runs"]
        if not runs:
            result = {"name": ref.name, "path": str(ref.path), "run_id": None, "date": None, "same": None,
                      "changes": [], "text": f"{ref.describe()} has no measured run: no fingerprint to compare with"}
        else:
            last = runs[-1]
            # as the plugin's header (Gate.load): another host of the same kind is not an environment change
            diff = diff_fingerprints(last.get("fingerprint") or {}, fp, ignore=VOLATILE_KEYS | {"host"})
            recorded = f"{ref.describe()} was recorded (run {last['run_id']}, {last['date']})"
            said = (f"environment changed since {recorded}: {plural(len(diff), 'change')}\n"
                    + "\n".join(f"  {format_fingerprint_diff([d])}" for d in diff) if diff
                    else f"environment: same as when {recorded}")
            result = {"name": ref.name, "path": str(ref.path), "run_id": last["run_id"], "date": last["date"],
                      "same": not diff, "text": said,
                      "changes": [{"key": k, "baseline": None if _absent(o) else o, "now": None if _absent(n) else n}
                                  for k, o, n in diff]}
    if getattr(args, "json", False):
        print(json.dumps({"fingerprint": fp, "baseline": result}, indent=2, default=str), file=out)
        return 0
    print(f"this machine: {info.headline()}", file=out)
    for k, v in _flat(fp):
        print(f"{k}: {v}", file=out)
    if result is not None:
        print("", file=out)
        print(result["text"], file=out)
    return 0


def _absent(v: Any) -> bool:
    from ..env.fingerprint import ABSENT

    return v is ABSENT
