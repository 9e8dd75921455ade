"""``gpucomm baselines add NAME FILE... [--nvbandwidth-size SIZE] [--dry-run]``: record other tools' result files
(nccl-tests / rccl-tests ``-J``, nvbandwidth ``-j``: :mod:`pytest_gpucomm.foreign`) into a baseline, each file
one run, as ``--gpu-baseline-save`` records a session: every file is read and checked first, then all of them
are saved under the file's lock in one atomic write (``gate.store.save_runs``): either every file is recorded or
none is, and a save running beside it loses nothing.

Each run: its id ``<tool>-<start>-<hash>`` (the file's first 8 hex digits of SHA-256: the same file added again
replaces its run, it is not counted twice), its date the file's ``start_time`` (nccl-tests: the machine's local
time, no zone) or, where the file has none (nvbandwidth), the file's modification time in UTC; its session the
host and day (the files hold no boot id), its fingerprint the environment the file holds
(``ForeignRun.env``).  A figure of 0 GB/s (busbw of a collective on one rank) is refused, naming the case."""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..text import command_width
from .baseline_files import KeepError, lock_timeout, print_lines, resolve

if TYPE_CHECKING:
    from ..foreign import ForeignRun
    from ..gate.store import RunToSave

__all__ = ["add_add_parser", "run_add", "run_to_save"]


def add_add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", parent: argparse.ArgumentParser
                   ) -> None:
    p = sub.add_parser("add", parents=[parent], help="Record nccl-tests / rccl-tests / nvbandwidth JSON files.",
                       description="Each FILE (nccl-tests or rccl-tests -J, nvbandwidth -j) becomes one run of the "
                                   "baseline NAME (created if missing); all are saved in one atomic write.")
    p.add_argument("name", metavar="NAME", help="Baseline name (in the baseline dir) or path to a .json file.")
    p.add_argument("files", metavar="FILE", nargs="+", help="A JSON file written by nccl-tests, rccl-tests or "
                                                            "nvbandwidth.")
    p.add_argument("--nvbandwidth-size", metavar="SIZE",
                   help="The buffer size of the nvbandwidth files (their -b; their JSON does not say it). Default: "
                        "nvbandwidth's own, 512MiB.")


def _date_of(run: "ForeignRun", path: Path) -> tuple[str, str]:
    """(the run's date, where it came from)."""
    if run.date:
        return run.date, "its start_time"
    when = _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc).isoformat(timespec="seconds")
    return when, "the file's modification time (the file holds no time)"


def run_to_save(run: "ForeignRun", path: Path, raw: bytes) -> tuple["RunToSave", list[str]]:
    """The run a file is saved as, and what is said of it."""
    from ..gate.cases import CaseRecord
    from ..gate.store import RunToSave

    date, dated_by = _date_of(run, path)
    cases = {}
    for c in run.cases:
        m = c.measurement
        if not (math.isfinite(m.gbps) and m.gbps > 0):  # busbw of a collective on one rank: 2(n-1)/n = 0
            raise KeepError(f"{path}: {c.test_id}: its figure is {m.gbps:g} GB/s (busbw of {m.op} on "
                            f"{m.world_size} rank{'s' if m.world_size != 1 else ''}), nothing to compare with: "
                            "record a run of 2 ranks or more")
        rec = CaseRecord.from_measurement(m, c.test_id)
        cases[rec.key] = rec
    stamp = "".join(ch for ch in date[:19] if ch.isdigit())
    run_id = f"{run.tool}-{stamp}-{hashlib.sha256(raw).hexdigest()[:8]}"
    host = str(run.env.get("host") or "unknown-host")
    session = f"{host}-{run.tool}-{date[:10]}"
    said = [f"{path}: {run.source}, {len(cases)} cases as run {run_id} (date {date}: {dated_by}; session {session})"]
    said += [f"  left out by the reader: {n}" for n in run.notes]
    return RunToSave(run_id=run_id, date=date, fingerprint=dict(run.env), cases=cases, session=session), said


def run_add(args: argparse.Namespace, out: TextIO) -> int:
    from ..foreign import ForeignError, foreign_of
    from ..files.jsontext import parse_json_bytes
    from ..files.reading import read_regular_file
    from ..foreign import MAX_FOREIGN_BYTES
    from ..gate.store import save_runs
    from .common import CommandError, nvbandwidth_size

    try:
        size = nvbandwidth_size(args)
    except CommandError as e:
        raise KeepError(str(e)) from None
    path = resolve(args.name, args, must_exist=False, writes=True)
    timeout = lock_timeout(args)
    runs, said = [], []
    for given in args.files:
        p = Path(given)
        try:
            raw = read_regular_file(p, what="result file", limit=MAX_FOREIGN_BYTES,
                                    limit_name="pytest_gpucomm.foreign.MAX_FOREIGN_BYTES", error=ForeignError)
            run = foreign_of(parse_json_bytes(raw, p, "result file", ForeignError), given, nvbandwidth_size=size)
        except ForeignError as e:
            raise KeepError(str(e)) from None
        run_, lines = run_to_save(run, p, raw)
        runs.append(run_)
        said += lines
    ids = [r.run_id for r in runs]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise KeepError(f"the same file given twice (run {twice[0]}): each file is one run")
    if args.dry_run:
        print_lines(out, said + [f"dry run: {path} not written ({len(runs)} runs would be added)"], command_width())
        return 0
    save_runs(path, name=path.stem, runs=runs, lock_timeout_s=timeout)
    print_lines(out, said + [f"wrote {path} ({len(runs)} runs added)"], command_width())
    return 0
