"""Keeping baseline files by hand: ``gpucomm baselines list | show NAME | prune NAME ... | merge A B -o C |
add NAME FILE...``, outside a pytest run.

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
filelock) and tabulate, and torch only for the NAME ``auto``.

* ``gpucomm baselines add NAME FILE...``: other tools' result files (nccl-tests / rccl-tests ``-J``, nvbandwidth
  ``-j``) recorded as runs, each file one run (:mod:`.baselines_add`).

The command is in five modules: this one (the parser, ``list`` and ``show``), :mod:`.baselines_prune`,
:mod:`.baselines_merge`, :mod:`.baselines_add`, and what they share with ``gpucomm env``, :mod:`.baseline_files`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, TextIO

from ..text import DEFAULT_WIDTH, command_width, fit, fit_table
from ..units import format_size, plural
from ..vocab import DEFAULT_BASELINE_DIR
from .baseline_files import (BASELINE_DIR_ENV, KeepError, bad_input_types, baseline_dir, baseline_dir_source,
                             common_options, error, print_lines, read_baseline, resolve, run_groups, sessions)
from .baselines_add import add_add_parser, run_add
from .baselines_merge import run_merge
from .baselines_prune import run_prune

if TYPE_CHECKING:
    from .common import Subcommands

__all__ = [
    "DEFAULT_BASELINE_DIR",
    "add_parser",
    "add_baselines_parser",
    "run_baselines",
    "hardware_of",
    "describe_document",
]


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------


def add_parser(sub: "Subcommands") -> None:
    """The ``gpucomm`` command's hook: add ``baselines`` to its subcommands."""
    add_baselines_parser(sub)


def add_baselines_parser(subparsers: "Subcommands") -> None:
    """Add ``baselines`` (``list``, ``show``, ``prune``, ``merge``) to an argparse ``add_subparsers()`` object."""
    bp = subparsers.add_parser("baselines", help="List, show, prune, merge baseline files; add other tools' results.",
                               description="Keep baseline files by hand (exit 0 done, 2 bad input).")
    sub = bp.add_subparsers(dest="baselines_action", metavar="ACTION", required=True)
    p = sub.add_parser("list", parents=[common_options()],
                       help="One line per baseline file of the directory, then of the shipped ones.")
    p.set_defaults(func=run_baselines)
    p = sub.add_parser("show", parents=[common_options()], help="A baseline's runs and cases.")
    p.add_argument("name", metavar="NAME", help="Baseline name or path to a .json file.")
    p.set_defaults(func=run_baselines)
    p = sub.add_parser("prune", parents=[common_options(lock=True, dry_run=True)], help="Remove runs from a baseline.",
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
    p = sub.add_parser("merge", parents=[common_options(lock=True, dry_run=True)], help="Join two baselines into one.",
                       description="C gets the runs and cases of A and B; C may be A or B, or a new file.")
    p.add_argument("a", metavar="A", help="Baseline name or path.")
    p.add_argument("b", metavar="B", help="Baseline name or path.")
    p.add_argument("-o", "--output", metavar="C", required=True,
                   help="The merged baseline: a name (in the baseline dir) or a path; A, B or a new file.")
    p.set_defaults(func=run_baselines)
    add_add_parser(sub, common_options(lock=True, dry_run=True))
    sub.choices["add"].set_defaults(func=run_baselines)


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
            return run_prune(args, out)
        if action == "merge":
            return run_merge(args, out)
        if action == "add":
            return run_add(args, out)
        raise KeepError(f"unknown baselines action {action!r}: expected list, show, prune, merge or add")
    except bad_input_types() as e:
        return error(err, str(e))
    except BrokenPipeError:  # the reader went away (| head): not an error of the file
        raise
    except OSError as e:  # writing: a read-only directory, a full disk
        return error(err, f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))


# ------------------------------------------------------------------------------------------------
# What a file holds
# ------------------------------------------------------------------------------------------------


def hardware_of(fp: Optional[Mapping[str, object]]) -> str:
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


def _day(date: str) -> str:
    return str(date)[:10] if date else "-"


def _runs_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """Run groups, and the run records when a job saved several (``2 (6 records)``)."""
    groups = len(run_groups(runs))
    return f"{groups} ({len(runs)} records)" if groups != len(runs) else str(groups)


def _list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The baseline directory's files, then those shipped with the package (marked so; one the directory has
    a file of the same name for is marked as not taken)."""
    from ..gate.shipped import SHIPPED, shipped_folder

    d = baseline_dir(args)
    shipped = shipped_folder("baselines")
    if shipped is not None and d.is_dir() and d.resolve() == shipped.resolve():
        shipped = None  # a checkout's own baselines/: listed once, as the directory
    given = bool(getattr(args, "baseline_dir", None) or os.environ.get(BASELINE_DIR_ENV, "").strip())
    bad: list[str] = []
    width = command_width()
    if d.is_dir():
        files = _files(d)
        print_lines(out, [f"baselines in {d}:" if files else f"no baselines in {d}"], width)
        if files:
            print_lines(out, _table(files, bad, set(), width))
    elif given or shipped is None:
        raise KeepError(f"baseline directory {d} ({baseline_dir_source(args)}) does not exist or is not a directory")
    else:
        print_lines(out, [f"no baselines in {d} (it does not exist)"], width)
    if shipped is not None and _files(shipped):
        mine = {p.stem for p in _files(d)} if d.is_dir() else set()
        print_lines(out, [f"baselines {SHIPPED} ({shipped}), taken when {d} has none of the name:"], width)
        print_lines(out, _table(_files(shipped), bad, mine, width))
    for message in bad:
        print(f"gpucomm: error: {message}", file=err)
    return 2 if bad else 0


def _files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*.json") if p.is_file() and not p.name.startswith("."))


def _table(files: list[Path], bad: list[str], shadowed: set[str], width: int) -> list[str]:
    """One row per file (``bad`` gets the message of each that cannot be read); a name in ``shadowed`` is
    marked as not taken (a file of the baseline directory has it); laid out to fit ``width``."""
    rows: list[list[object]] = []
    for p in files:
        name = p.stem + (" (not taken: yours is)" if p.stem in shadowed else "")
        try:
            doc = read_baseline(p)
        except bad_input_types() as e:
            bad.append(str(e))
            rows.append([name, "unreadable", "", "", "", "", "", "see below"])
            continue
        runs = doc["runs"]
        hw = list(dict.fromkeys(hardware_of(r.get("fingerprint")) for r in reversed(runs)))  # newest first
        rows.append([name if doc["name"] == p.stem else f"{name} (name {doc['name']})", doc["source"],
                     len(doc["cases"]), _runs_text(runs), sessions(runs) if runs else 0,
                     _day(runs[0]["date"]) if runs else "-", _day(runs[-1]["date"]) if runs else "-",
                     "; ".join(hw) or "-"])
    return fit_table(rows, ["name", "source", "cases", "runs", "sessions", "first", "last", "hardware"], width,
                     leave_out=["sessions", "first", "source", "hardware"])


def _show(args: argparse.Namespace, out: TextIO) -> int:
    path = resolve(args.name, args)
    doc = read_baseline(path)
    print_lines(out, describe_document(doc, path, command_width()))
    return 0


def describe_document(doc: Mapping[str, Any], path: Path, width: int = DEFAULT_WIDTH) -> list[str]:
    """The lines of ``gpucomm baselines show``: summary, runs, cases by op, fitted to ``width`` (the prose
    wrapped, the tables laid out to fit; a run's date to the minute, as the table shows it, the summary
    line's in full)."""
    runs, cases = doc["runs"], doc["cases"]
    lines = [f"baseline {doc['name']} ({path})",
             f"source: {doc['source']}" + (f" -- {doc['source_detail']}" if doc.get("source_detail") else ""),
             f"max_runs: {doc['max_runs']} per case (a job's -nodeN/-partK runs count as one)"]
    if runs:
        lines.append(f"{plural(len(run_groups(runs)), 'run')} in {plural(sessions(runs), 'session')}, "
                     f"{runs[0]['date']} to {runs[-1]['date']}"
                     + (f" ({len(runs)} run records)" if len(runs) != len(run_groups(runs)) else ""))
    else:
        lines.append("no measured run")
    floors = sum(1 for c in cases.values() if c.get("floor_gbps") is not None)
    lines.append(f"{plural(len(cases), 'case')}" + (f", {floors} with a floor" if floors else ""))
    lines = fit(lines, width)
    if runs:
        held = Counter(r["run_id"] for c in cases.values() for r in c["runs"])
        rows = []
        for r in runs:
            fp = r.get("fingerprint") or {}
            node = r.get("node")
            host = r.get("host") or fp.get("host") or ""
            where = (f"node {node}" + (f" ({host})" if host else "")) if node is not None else (host or "-")
            rows.append([r["run_id"], str(r["date"])[:16].replace("T", " "), r.get("session") or "-", where,
                         held.get(r["run_id"], 0), hardware_of(fp), fp.get("driver") or "-",
                         fp.get("comm_library") or "-"])
        lines += ["", "runs (oldest first):"]
        lines += fit_table(rows, ["run", "date", "session", "node/host", "cases", "hardware", "driver", "library"],
                           width, leave_out=["node/host", "session", "driver", "hardware"])
    if cases:
        lines += ["", "cases by op:"]
        lines += fit_table(_case_rows(cases), ["op", "ranks", "dtype", "layout", "size", "cases", "runs",
                                               "floor GB/s"], width,
                           leave_out=["layout", "dtype", "cases", "floor GB/s"])
    return lines


def _case_rows(cases: Mapping[str, Mapping[str, Any]]) -> list[list[object]]:
    """One row per op, ranks, dtype, layout and size (the op named on a group's first row): how many cases
    (tests) hold it, their runs (``16`` or ``3-16``), their floors."""
    at: dict[tuple, list[Mapping[str, Any]]] = {}
    for c in cases.values():
        at.setdefault((c["op"], c["world_size"], c.get("dtype") or "-", c.get("layout") or "", c["size_bytes"]),
                      []).append(c)
    rows: list[list[object]] = []
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
