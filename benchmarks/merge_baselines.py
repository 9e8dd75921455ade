"""Add the runs of baseline files recorded elsewhere into a baseline file (as the one-H200 sessions were
added to ``baselines/h200.json``).

    python benchmarks/merge_baselines.py TARGET SOURCE [SOURCE ...] [--max-runs N] [--dry-run]

Every run of every SOURCE (its fingerprint, date and session label) and its cases' samples are added to
TARGET, oldest first; a run id already in TARGET is refused, as is a case whose metadata (op, size, world,
dtype) differ.  A case keeps at most the TARGET's ``max_runs`` runs, its oldest dropped first, as
``--gpu-baseline-save`` does; the command says how many were dropped.  The result is validated as a baseline
file before it replaces TARGET (written atomically).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def merge(target: dict, source: dict, where: str) -> tuple[int, int, int]:
    """Merge ``source`` into ``target`` in place: (runs added, case runs added, case runs dropped)."""
    have = {r["run_id"] for r in target["runs"]}
    clash = [r["run_id"] for r in source["runs"] if r["run_id"] in have]
    if clash:
        raise SystemExit(f"{where}: run {clash[0]} is already in the target")
    target["runs"] = sorted(target["runs"] + source["runs"], key=lambda r: r["date"])
    added = dropped = 0
    for key, e in source["cases"].items():
        t = target["cases"].setdefault(key, {**e, "runs": []})
        for field in ("op", "size_bytes", "world_size", "dtype"):
            if t.get(field) != e.get(field):
                raise SystemExit(f"{where}: case {key}: {field} {e.get(field)!r} where the target has {t.get(field)!r}")
        t["runs"] = t["runs"] + e["runs"]
        added += len(e["runs"])
        over = len(t["runs"]) - int(target["max_runs"])
        if over > 0:
            t["runs"] = t["runs"][over:]
            dropped += over
    kept = {r["run_id"] for e in target["cases"].values() for r in e["runs"]}
    target["runs"] = [r for r in target["runs"] if r["run_id"] in kept]
    return len(source["runs"]), added, dropped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", type=Path)
    p.add_argument("sources", type=Path, nargs="+")
    p.add_argument("--dry-run", action="store_true", help="say what would be added; write nothing")
    p.add_argument("--max-runs", type=int, default=None, help="raise the TARGET's max_runs to this first")
    args = p.parse_args(argv)

    from pytest_gpucomm.files.atomic import write_atomic
    from pytest_gpucomm.gate.schema import BaselineError
    from pytest_gpucomm.gate.store import dumps_document, load_baseline

    try:
        load_baseline(args.target)
        for s in args.sources:
            load_baseline(s)
    except BaselineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    doc = json.loads(args.target.read_text(encoding="utf-8"))
    if args.max_runs is not None:
        if args.max_runs < int(doc["max_runs"]):
            p.error(f"--max-runs {args.max_runs}: below the target's {doc['max_runs']} (runs would be dropped)")
        doc["max_runs"] = args.max_runs
    for s in args.sources:
        runs, added, dropped = merge(doc, json.loads(s.read_text(encoding="utf-8")), str(s))
        print(f"{s}: {runs} runs, {added} case runs added, {dropped} oldest case runs dropped (max_runs "
              f"{doc['max_runs']})")
    if args.dry_run:
        return 0
    write_atomic(args.target, dumps_document(doc), check=load_baseline)
    print(f"wrote {args.target}: {len(doc['runs'])} runs, {len(doc['cases'])} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
