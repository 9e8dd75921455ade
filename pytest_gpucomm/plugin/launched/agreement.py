"""What the ranks of a launched job agree on, so that every rank runs the same tests and ends alike: the
collected tests (:func:`agree_on_collection`), whether the gate judges a test's records
(:func:`agree_to_judge`), each phase's outcome of each test (:func:`agree_on_outcome`: the one place where a
test's outcome on this rank becomes the job's) and the session's exit status (:func:`agree_on_exit_status`).

Each is one exchange of :class:`~.exchange.JobExchange`, with its deadline; the hooks that call them are
:class:`~.mode.LaunchedMode`'s.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import pytest

from ...ranks.errors import JobBroken
from .exchange import JobExchange

__all__ = ["agree_on_collection", "agree_to_judge", "agree_on_outcome", "agree_on_exit_status"]


def agree_on_collection(channel: JobExchange, nodeids: Sequence[str]) -> None:
    """Every rank must have collected the same tests in the same order; else every rank stops with a
    pytest.UsageError naming the ranks that differ from rank 0 and the first test where they do.

    Only a digest of each rank's list travels, unless they differ."""
    digest = hashlib.sha256("\n".join(nodeids).encode()).hexdigest()
    digests = channel.allgather(digest, what="collecting the tests")
    if all(d == digests[0] for d in digests):
        return
    # every list, to name the first difference
    lists = channel.allgather(list(nodeids), what="comparing the collected tests")
    first = lists[0]
    groups: dict[str, list[int]] = {}
    for r, d in enumerate(digests):
        groups.setdefault(d, []).append(r)
    lines = [f"gpucomm: the ranks of this {channel.launch.launcher} job collected different tests, so they would "
             f"wait for each other in different collectives; every rank stops here."]
    lines.append(f"  {_where(channel.hosts, groups.pop(digests[0]))}: {len(first)} tests")
    for ranks in groups.values():
        other = lists[ranks[0]]
        i = next((k for k, (a, b) in enumerate(zip(first, other)) if a != b), min(len(first), len(other)))
        a = repr(first[i]) if i < len(first) else "(no more tests)"
        b = repr(other[i]) if i < len(other) else "(no more tests)"
        lines.append(f"  {_where(channel.hosts, ranks)}: {len(other)} tests; first difference at test {i + 1}: "
                     f"rank 0 has {a}, rank {ranks[0]} has {b}")
    lines.append("  Run the same files, options and -k/-m selection on every rank, with the same plugins.")
    raise pytest.UsageError("\n".join(lines))


def agree_to_judge(channel: JobExchange, ok: bool, n_records: int) -> bool:
    """Whether the gate judges a test's records: the gate runs on rank 0 and every rank follows its messages,
    so every rank must enter it or none.  The ranks agree that every body finished (``ok``) with the same
    number of measurements; a body that failed on one rank only (say an assertion on that node's copy) would
    otherwise leave the ranks exchanging different messages.  If not, no rank judges the test, and the
    failing rank's failure is the job's (:func:`agree_on_outcome`)."""
    every = channel.allgather((ok, n_records), what="the test body (to know whether the gate judges it)")
    return all(ok for ok, _ in every) and len({n for _, n in every}) == 1


def agree_on_outcome(channel: JobExchange, report: pytest.TestReport) -> None:
    """Make this rank's report of one phase of a test (set-up, call, tear-down) the job's: if the phase
    failed on any rank, it fails on every rank, with each failing rank's message and where it ran (rank,
    host, device); else if it was skipped on some rank, it is skipped on every rank, with that rank's
    reason.  Every rank runs the same phases, since a failed or skipped set-up is agreed before the call.

    A rank whose own report failed keeps its traceback, and gets a "gpucomm ranks" section naming the
    failing ranks; the others get the failing ranks' messages as their own.  A rank that does not finish
    the phase within ``--gpucomm-timeout`` fails it on the others, named (the session is then broken);
    once broken, reports are left as they are."""
    if channel.broken is not None:
        return
    mine = (report.outcome, report.longreprtext if report.outcome == "failed" else "",
            report.longrepr if report.outcome == "skipped" else None, getattr(report, "wasxfail", None),
            channel.device)
    try:
        every = channel.exchange(mine, what=f"the {report.when} of test {report.nodeid}")
    except Exception as e:  # a rank hung or gone, or the control group broken: named in the message
        report.outcome = "failed"
        report.longrepr = str(e) if isinstance(e, JobBroken) else (
            f"gpucomm: the ranks of this {channel.launch.launcher} job could not agree on the outcome of this "
            f"test's {report.when}: {type(e).__name__}: {e}")
        return
    failed = [(r, m) for r, m in enumerate(every) if m[0] == "failed"]
    if failed:
        ranks = ", ".join(_rank_where(channel.hosts, r, m[4]) for r, m in failed)
        head = (f"gpucomm: {report.when} failed on {ranks} of this {channel.launch.launcher} job of "
                f"{channel.launch.world_size} ranks; it fails on every rank")
        if report.outcome == "failed":
            report.sections.append(("gpucomm ranks", head))
            return
        report.outcome = "failed"
        report.longrepr = "\n\n".join([head] + [f"-- {_rank_where(channel.hosts, r, m[4])}:\n{m[1]}"
                                                  for r, m in failed])
        return
    skipped = [(r, m) for r, m in enumerate(every) if m[0] == "skipped"]
    if skipped and report.outcome != "skipped":
        r, m = skipped[0]
        where = _rank_where(channel.hosts, r, m[4])
        longrepr = m[2]
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            reason = f"{longrepr[2]} (skipped on {where}; agreed by every rank)"
            report.longrepr = (longrepr[0], longrepr[1], reason)
        else:
            report.longrepr = (str(report.location[0]), int(report.location[1] or 0) + 1,
                               f"skipped on {where}; agreed by every rank")
        report.outcome = "skipped"
        if m[3] is not None:
            report.wasxfail = m[3]


def agree_on_exit_status(channel: JobExchange, status: int) -> tuple[int, list[str]]:
    """The job's exit status -- the first rank's (in rank order) that is not 0, else 0 -- so that every
    rank exits with the same code (a failing gate on rank 0, an output it could not write), and a line
    for each rank whose status differs from this one's.  A broken session agrees on nothing: its status
    is 1 (or this rank's, if not 0), as on every rank of a broken job."""
    if channel.broken is None:
        try:
            every = [int(s) for s in channel.allgather(int(status),
                                                       what="the session (the agreement on the exit status)")]
        except JobBroken as e:
            return (status or 1), [str(e)]
    else:
        return (status or 1), []
    agreed = next((s for s in every if s != 0), 0)
    notes = [f"gpucomm: exit status {s} on {_where(channel.hosts, [r])} (this rank: {status}); every rank of the "
             f"job exits with {agreed}" for r, s in enumerate(every) if s != status]
    return agreed, notes


def _where(hosts: Sequence[str], ranks: Sequence[int]) -> str:
    on = sorted({hosts[r] for r in ranks if r < len(hosts)})
    listed = ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {listed}" + (f" (on {', '.join(on[:4])})" if on else "")


def _rank_where(hosts: Sequence[str], rank: int, device: str) -> str:
    host = hosts[rank] if rank < len(hosts) else "?"
    return f"rank {rank} ({host}, {device})"
