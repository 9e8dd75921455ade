"""The messages of rank failures: what the user reads when work on the ranks fails.

Every report has the same shape: a summary (one or more lines), then one block per rank
concerned::

    --- rank 1 traceback:
        <the rank's text, indented>
    --- rank 0 (pid 4242, exit code 1)
      init_process_group failed:
        <text>
      output tail:
        <text>

:func:`format_report` renders that shape; the ``*_failure`` functions below build the
:mod:`~pytest_gpucomm.ranks.errors` exceptions the pool raises, from the facts it gathered
(tracebacks, stacks, exit codes, output tails).  Stdlib only.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from pytest_gpucomm.ranks.errors import RankCrash, RankError, RankStartError, RankTimeout

__all__ = [
    "RankBlock",
    "format_report",
    "describe_returncode",
    "task_error",
    "task_error_with_stuck",
    "timeout_failure",
    "crash_failure",
    "start_failure",
]

INDENT = "    "


def describe_returncode(code: int | None) -> str:
    """``"exit code 3"``, ``"killed by SIGKILL"`` or ``"still running"`` for a ``Popen.returncode``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


def _indent(text: str, prefix: str = INDENT) -> str:
    text = text.rstrip("\n")
    if not text:
        return prefix + "<empty>"
    return "\n".join(prefix + line for line in text.splitlines())


@dataclass(frozen=True)
class RankBlock:
    """One rank's part of a report.

    Rendered as ``--- rank {rank} {heading}:`` and ``text`` indented below it; with
    ``text=None`` the heading line has no colon and only the ``sections`` follow, each as
    ``  {title}:`` and its text indented.  Sections may also follow a ``text``.
    """

    rank: int
    heading: str
    text: str | None = None
    sections: Sequence[tuple[str, str]] = ()

    def render(self) -> list[str]:
        lines = [f"--- rank {self.rank} {self.heading}" + (":" if self.text is not None else "")]
        if self.text is not None:
            lines.append(_indent(self.text))
        for title, text in self.sections:
            lines.append(f"  {title}:")
            lines.append(_indent(text))
        return lines


def format_report(summary: str | Sequence[str], blocks: Iterable[RankBlock] = ()) -> str:
    """The summary line(s), then every rank block, as one message."""
    lines = [summary] if isinstance(summary, str) else list(summary)
    for block in blocks:
        lines.extend(block.render())
    return "\n".join(lines)


# --------------------------------------------------------------------------- the failures


def task_error(label: str, world_size: int, errors: Mapping[int, str],
               finished: Iterable[int]) -> RankError:
    """The task raised on ``errors``' ranks; every rank answered, the pool is intact."""
    message = format_report(
        f"task {label!r} raised on rank(s) {sorted(errors)} "
        f"(world size {world_size}); ranks {sorted(finished)} finished.",
        (RankBlock(r, "traceback", errors[r]) for r in sorted(errors)),
    )
    return RankError(message, ranks=errors, label=label, tracebacks=errors)


def task_error_with_stuck(label: str, world_size: int, errors: Mapping[int, str],
                          stuck: Sequence[int], finished: Iterable[int],
                          stacks: Mapping[int, str], grace_s: float) -> RankError:
    """The task raised on some ranks and ``stuck`` did not answer within ``grace_s`` afterwards."""
    message = format_report(
        [
            f"task {label!r} raised on rank(s) {sorted(errors)} (world size {world_size}); "
            f"rank(s) {list(stuck)} did not finish within {grace_s:g} s afterwards "
            f"(probably waiting in a collective for the failed rank), so the pool was "
            f"torn down and will restart on the next run.",
            f"finished ranks: {sorted(finished)}",
        ],
        [*(RankBlock(r, "traceback", errors[r]) for r in sorted(errors)),
         *(RankBlock(r, "(stuck) stack", stacks.get(r, "")) for r in stuck)],
    )
    return RankError(message, ranks=errors, label=label, tracebacks=errors, stuck=stuck)


def timeout_failure(label: str, world_size: int, timeout_s: float, hung: Sequence[int],
                    finished: Sequence[int], errors: Mapping[int, str],
                    stacks: Mapping[int, str], tails: Mapping[int, str]) -> RankTimeout:
    """``hung`` did not finish within ``timeout_s``; ``tails`` are their (short) output tails."""
    message = format_report(
        f"task {label!r} timed out after {timeout_s:g} s on rank(s) {list(hung)} "
        f"(world size {world_size}); finished ranks: {list(finished)}. "
        f"The pool was torn down and will restart on the next run.",
        [*(RankBlock(r, "raised", errors[r]) for r in sorted(errors)),
         *(RankBlock(r, "(hung) stack", stacks.get(r, "") or "<no stack dump received>",
                     [(f"rank {r} output tail", tails[r])] if tails.get(r) else [])
           for r in hung)],
    )
    return RankTimeout(message, ranks=hung, label=label, timeout_s=timeout_s,
                       finished=finished, stacks=stacks)


def crash_failure(label: str, world_size: int, dead: Sequence[int],
                  returncodes: Mapping[int, int | None], pids: Mapping[int, int],
                  tails: Mapping[int, str], connection_lost: bool = False) -> RankCrash:
    """The processes of ``dead`` exited while running the task."""
    first = ", ".join(f"rank {r} crashed ({describe_returncode(returncodes[r])})" for r in dead)
    summary = [f"{first} while running {label!r} (world size {world_size}); "
               f"the pool was torn down and will restart on the next run."]
    if connection_lost:
        summary.append("(the control connection to the rank was lost)")
    message = format_report(
        summary, (RankBlock(r, f"(pid {pids[r]}) output tail", tails[r]) for r in dead)
    )
    return RankCrash(message, ranks=dead, label=label, returncodes=returncodes, log_tails=tails)


def start_failure(what: str, *, failed: Iterable[int], ready: Iterable[int], world_size: int,
                  backend: str, device: str, label: str, pids: Mapping[int, int],
                  returncodes: Mapping[int, int | None], init_errors: Mapping[int, str],
                  stacks: Mapping[int, str], tails: Mapping[int, str]) -> RankStartError:
    """Ranks ``failed`` ``what`` (e.g. "failed during start-up") while the pool started."""
    failed, ready = set(failed), set(ready)
    blocks: list[RankBlock] = []
    for r in sorted(failed):
        if r not in pids:  # not spawned
            continue
        sections: list[tuple[str, str]] = []
        if r in init_errors:
            sections.append(("init_process_group failed", init_errors[r]))
        if stacks.get(r):
            sections.append(("stack", stacks[r]))
        sections.append(("output tail", tails.get(r, "")))
        blocks.append(RankBlock(r, f"(pid {pids[r]}, {describe_returncode(returncodes.get(r))})",
                                sections=sections))
    message = format_report(
        [
            f"rank(s) {sorted(failed)} of a {backend}/{device} pool of world size {world_size} "
            f"{what}" + (f" (starting the pool for {label!r})." if label else "."),
            f"ready ranks: {sorted(ready)}; still starting (killed): "
            f"{sorted(set(range(world_size)) - ready - failed)}",
        ],
        blocks,
    )
    return RankStartError(message, ranks=failed, label=label,
                          log_tails={r: tails[r] for r in sorted(failed) if r in tails})
