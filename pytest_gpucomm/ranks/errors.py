"""Exceptions raised when work handed to rank processes fails.

Every exception is a :class:`RankFailure`. Each carries

* ``ranks`` -- the tuple of ranks that failed (sorted), and ``rank`` -- the
  first of them (or ``None`` when no particular rank is to blame),
* ``label`` -- what was running (usually the pytest node id),
* a multi-line message naming the rank(s), the label and what happened.

The exceptions stay picklable (pytest-xdist and friends send exceptions
between processes), so they keep their state in ``__dict__`` and rebuild
from it.
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = [
    "JobBroken",
    "RankFailure",
    "RankError",
    "RankTimeout",
    "RankCrash",
    "RankStartError",
]


def _rebuild(cls: type["RankFailure"], message: str, state: dict[str, object]) -> "RankFailure":
    obj = Exception.__new__(cls)
    Exception.__init__(obj, message)
    obj.__dict__.update(state)
    return obj


class RankFailure(Exception):
    """Base class: something went wrong on one or more rank processes."""

    def __init__(self, message: str, *, ranks: Iterable[int] = (), label: str = "") -> None:
        super().__init__(message)
        self.ranks: tuple[int, ...] = tuple(sorted(set(ranks)))
        self.rank: int | None = self.ranks[0] if self.ranks else None
        self.label: str = label

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))


class RankError(RankFailure):
    """A task raised an exception on one or more ranks.

    ``tracebacks`` maps each failing rank to its formatted traceback text.
    ``stuck`` lists ranks that did not answer within the grace period after the
    failure (usually blocked in a collective waiting for the failed rank); the
    pool was torn down when it is non-empty.
    """

    def __init__(
        self,
        message: str,
        *,
        ranks: Iterable[int],
        label: str = "",
        tracebacks: Mapping[int, str] | None = None,
        stuck: Iterable[int] = (),
    ) -> None:
        super().__init__(message, ranks=ranks, label=label)
        self.tracebacks: dict[int, str] = dict(tracebacks or {})
        self.stuck: tuple[int, ...] = tuple(sorted(stuck))


class RankTimeout(RankFailure):
    """A task did not finish on every rank within its timeout.

    ``ranks`` are the hung ranks, ``timeout_s`` the timeout in seconds,
    ``finished`` the ranks that answered, and ``stacks`` maps each hung rank to its Python stack dump (faulthandler).
    """

    def __init__(
        self,
        message: str,
        *,
        ranks: Iterable[int],
        label: str = "",
        timeout_s: float = 0.0,
        finished: Iterable[int] = (),
        stacks: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(message, ranks=ranks, label=label)
        self.timeout_s: float = timeout_s
        self.finished: tuple[int, ...] = tuple(sorted(finished))
        self.stacks: dict[int, str] = dict(stacks or {})


class JobBroken(RankTimeout):
    """Ranks of a launched job did not arrive at a control exchange by its deadline (hung or gone), or the
    exchange itself failed.  A hung communicator cannot be recovered: the session that raised it is broken
    and ends.  ``ranks`` are the ranks that did not arrive (empty where they could not be told)."""


class RankCrash(RankFailure):
    """A rank process died while running a task.

    ``returncodes`` maps each dead rank to its ``Popen.returncode`` (negative
    for a signal); ``log_tails`` maps each dead rank to the tail of its
    captured stdout/stderr.
    """

    def __init__(
        self,
        message: str,
        *,
        ranks: Iterable[int],
        label: str = "",
        returncodes: Mapping[int, int | None] | None = None,
        log_tails: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(message, ranks=ranks, label=label)
        self.returncodes: dict[int, int | None] = dict(returncodes or {})
        self.log_tails: dict[int, str] = dict(log_tails or {})


class RankStartError(RankFailure):
    """The rank processes could not be started / did not all become ready.

    ``log_tails`` maps each failing rank to the tail of its captured output.
    """

    def __init__(
        self,
        message: str,
        *,
        ranks: Iterable[int],
        label: str = "",
        log_tails: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(message, ranks=ranks, label=label)
        self.log_tails: dict[int, str] = dict(log_tails or {})
