"""A run saved into a baseline file (``--gpu-baseline-save``): the session's records, as runs of the file.

Saving is not judging: it needs the file, the run's id and the job's layout, not the gate's fitted baseline,
so it lives beside the gate (:mod:`.verdicts`) rather than in it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

from .schema import BaselineError

if TYPE_CHECKING:
    from ..measurement import Measurement


class Recorded(Protocol):
    """What a record offers the save: the measurement and the test's node id (the plugin's ``Record``)."""

    measurement: "Measurement"
    nodeid: str


class SaveError(Exception):
    """The run could not be saved (the file's problem, named): a usage error of ``--gpu-baseline-save``."""


def save_records(path: Path, records: Sequence[Recorded], fingerprint: dict[str, object], date: str, *,
                 name: str, run_id: str, layout: str, max_runs: int,
                 shipped_dir: Optional[Path]) -> int:
    """Add this run's measurements to the baseline file ``path`` (named ``name``); the number of case
    measurements saved.  A file that does not exist yet starts from the published floors of the shipped file
    of its name (``gate.machines.start_document``).

    A job across nodes saves, in one write, one run per node for the measurements of one node (its
    copies, its intra-node group: ``info["node"]``), labelled with the node and its host, and one run for
    the measurements of the whole job: so a case measured on 16 nodes keeps 16 runs of this session, and a
    new node's figure is judged against the spread between nodes as well as between sessions.  Raises
    :class:`SaveError` naming the file's problem."""
    from ..env.hardware import session_label
    from .cases import CaseRecord
    from .machines import start_document
    from .store import RunToSave, save_runs

    # a run per node; a test's other measurements of one case (the groups of one local rank across the
    # nodes) each in a run of their own ("part"), so that none is dropped
    parts: dict[tuple[Optional[int], int], dict[str, CaseRecord]] = {}
    hosts: dict[int, str] = {}
    for r in records:
        node = r.measurement.info.get("node")
        node = None if node is None else int(node)
        if node is not None:
            hosts.setdefault(node, str(r.measurement.info.get("host") or ""))
        cr = CaseRecord.from_measurement(r.measurement, r.nodeid, layout)
        part = 0
        while cr.key in parts.get((node, part), {}):
            part += 1
        parts.setdefault((node, part), {})[cr.key] = cr
    session = session_label(date)
    runs = []
    for (node, part), cases in sorted(parts.items(), key=lambda kv: (-1 if kv[0][0] is None else kv[0][0], kv[0][1])):
        label = run_id + (f"-node{node}" if node is not None else "") + (f"-part{part}" if part else "")
        host = hosts.get(node, "") if node is not None else ""
        # every run holds the job's fingerprint (every node's under "nodes"): the newest run, whichever
        # node it is, is what the next job's environment is compared with
        runs.append(RunToSave(label, date, fingerprint, cases, session, node, host or None))
    try:
        save_runs(path, name=name, runs=runs, max_runs=max_runs, start=start_document(path, shipped_dir))
    except BaselineError as e:
        raise SaveError(f"--gpu-baseline-save: {e}") from None
    return sum(len(c) for c in parts.values())
