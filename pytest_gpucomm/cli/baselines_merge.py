"""``gpucomm baselines merge A B -o C``: the union of two baseline files (the rules are :mod:`.baselines`'
docstring), written under C's lock."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, TextIO

from ..units import plural
from .baseline_files import KeepError, lock_timeout, parse_date, read_baseline, resolve, run_groups, sessions

__all__ = ["merge_documents", "run_merge"]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _date_key(runs: Sequence[Mapping[str, Any]]) -> Optional[dict[str, _dt.datetime]]:
    """run id -> its date, when every date is ISO (else None: the runs keep their files' order)."""
    out = {}
    for r in runs:
        try:
            out[r["run_id"]] = parse_date(r["date"], "")
        except KeepError:
            return None
    return out


def merge_documents(a: Mapping[str, Any], b: Mapping[str, Any], *, name: str, where_a: str = "A",
                    where_b: str = "B") -> dict[str, Any]:
    """The union of two baseline documents, named ``name`` (see the module docstring for the rules).  KeepError
    naming both files for a run id with other contents in each, or a case with two different floors."""
    from ..gate.schema import SCHEMA_VERSION
    from ..gate.store import run_group

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


def run_merge(args: argparse.Namespace, out: TextIO) -> int:
    from ..gate.store import update_document

    timeout = lock_timeout(args)
    pa, pb = resolve(args.a, args), resolve(args.b, args)
    pc = resolve(args.output, args, must_exist=False, writes=True)
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
             f"{plural(len(run_groups(merged['runs'])), 'run')} in {plural(sessions(merged['runs']), 'session')}"]
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
