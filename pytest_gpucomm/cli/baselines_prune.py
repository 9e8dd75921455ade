"""``gpucomm baselines prune NAME --keep K | --before DATE | --run ID...``: take runs out of a baseline file
(the rules are :mod:`.baselines`' docstring), under its lock, on what it holds then."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, TextIO

from ..units import plural
from .baseline_files import KeepError, lock_timeout, parse_date, read_baseline, resolve, run_groups

__all__ = ["prune_document", "run_prune"]


def _parse_keep(value: str) -> int:
    try:
        k = int(str(value).strip())
    except ValueError:
        raise KeepError(f"--keep {value!r}: not a whole number of runs") from None
    if k < 0:
        raise KeepError(f"--keep {value!r}: the number of runs to keep must be >= 0")
    return k


def prune_document(doc: Mapping[str, Any], path: Path, *, keep: Optional[int] = None,
                   before: Optional[_dt.datetime] = None, run_ids: Sequence[str] = ()) -> dict[str, Any]:
    """A copy of ``doc`` without the runs chosen by exactly one of ``keep`` (keep the newest K run groups),
    ``before`` (remove the runs dated earlier) or ``run_ids`` (remove these runs, or a job id's runs): their
    samples leave every case, and a case left with no run and no floor leaves the file.  KeepError (naming
    ``path``) for an unknown run id or a run whose date is not ISO."""
    from ..gate.store import run_group

    if [keep is not None, before is not None, bool(run_ids)].count(True) != 1:
        raise KeepError("prune: give exactly one of --keep, --before, --run")
    new = json.loads(json.dumps(doc))
    runs = new["runs"]
    if keep is not None:
        groups = run_groups(runs)
        kept_groups = set(groups[max(0, len(groups) - keep):])
        remove = {r["run_id"] for r in runs if run_group(r["run_id"]) not in kept_groups}
    elif before is not None:
        remove = set()
        for r in runs:
            if parse_date(r["date"], f"{path}: run {r['run_id']!r} has the date") < before:
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


def run_prune(args: argparse.Namespace, out: TextIO) -> int:
    from ..gate.store import update_document

    timeout = lock_timeout(args)
    path = resolve(args.name, args, writes=True)
    if args.keep is not None:
        how: dict[str, Any] = {"keep": _parse_keep(args.keep)}
        said = f"--keep {how['keep']}"
    elif args.before is not None:
        how = {"before": parse_date(args.before, "--before")}
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
