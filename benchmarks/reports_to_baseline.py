"""Add the runs of pytest-gpucomm JSON reports (``--gpucomm-json``) to a baseline file, as ``--gpu-baseline-save``
would have saved them: each case's first measurement (the gate's re-measures are not saved), the report's
fingerprint and date, all of them one session (a boot) labelled ``--session``.

    python benchmarks/reports_to_baseline.py TARGET REPORT [REPORT ...] --session LABEL [--max-runs N]

Used for the A/A runs of a boot whose gate runs are the evidence (issue 43: the H100's eighth boot, where
the time for recording runs was spent on the gate runs).  A report without rows, a row without samples, or a
run id already in TARGET is refused; the file is validated and written atomically (``gate.store.save_runs``).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_gpucomm.files.jsontext import parse_json_bytes  # noqa: E402
from pytest_gpucomm.files.reading import read_regular_file  # noqa: E402
from pytest_gpucomm.gate.cases import CaseRecord  # noqa: E402
from pytest_gpucomm.gate.schema import BaselineError  # noqa: E402
from pytest_gpucomm.gate.store import RunToSave, read_document, save_runs  # noqa: E402
from pytest_gpucomm.measurement import Measurement  # noqa: E402
from pytest_gpucomm.report.saved import MAX_REPORT_BYTES  # noqa: E402


def run_of(report: Path, session: str) -> RunToSave:
    """The report's first measurements as one run of ``session``; its id from the report's content.  A file
    that cannot be read as JSON is refused naming it, as every reader of a report does (``files.reading``)."""
    raw = read_regular_file(report, what="report", limit=MAX_REPORT_BYTES, limit_name="MAX_REPORT_BYTES",
                            error=SystemExit)
    doc = parse_json_bytes(raw, report, "report", SystemExit)
    if not isinstance(doc, dict):
        raise SystemExit(f"{report}: not a pytest-gpucomm JSON report (its JSON is not an object)")
    rows = doc.get("rows") or []
    if not rows:
        raise SystemExit(f"{report}: no rows")
    cases = {}
    for row in rows:
        if not row.get("samples_s"):
            raise SystemExit(f"{report}: {row.get('test')} has no samples")
        rec = CaseRecord.from_measurement(Measurement.from_dict(row), row["test"])
        cases[rec.key] = rec
    run_id = hashlib.sha256(raw).hexdigest()[:12]
    fingerprint = doc["fingerprint"]
    return RunToSave(run_id, str(fingerprint["date"]), fingerprint, cases, session)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("reports", type=Path, nargs="+")
    ap.add_argument("--session", required=True, help="the session label of these runs (one boot)")
    ap.add_argument("--max-runs", type=int, default=None, help="runs kept per case (default: the target's)")
    args = ap.parse_args(argv)
    try:
        return add(args)
    except BaselineError as e:  # a target that is not a baseline file, or runs it cannot take: named, nothing written
        print(f"reports_to_baseline: {e}", file=sys.stderr)
        return 2


def add(args: argparse.Namespace) -> int:
    target = read_document(args.target)
    runs = [run_of(p, args.session) for p in args.reports]
    have = {r["run_id"] for r in target["runs"]}
    for r in runs:
        if r.run_id in have:
            raise SystemExit(f"{args.target}: run {r.run_id} is already there")
    max_runs = args.max_runs or int(target["max_runs"])
    save_runs(args.target, name=str(target["name"]), runs=runs, max_runs=max_runs)
    print(f"{args.target}: added {len(runs)} runs of session {args.session} "
          f"({', '.join(str(len(r.cases)) for r in runs)} cases), at most {max_runs} runs a case")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
