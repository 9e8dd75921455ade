"""Launched mode: this pytest process is one rank of a job started by torchrun, srun or mpirun, and every
rank runs pytest, the same tests in the same order.

* :mod:`.mode`: the mode as a plugin registered at configure (:class:`LaunchedMode`, its hooks), the options
  that would make the ranks diverge;
* :mod:`.job`: this rank's side of the job (:class:`LaunchedSession`: the job's process groups, its layout,
  the ``process_group`` fixture's executors, every node's fingerprint);
* :mod:`.exchange`: the deadline-aware control exchange over which the ranks talk, and the watchdog that
  ends a hung rank (:class:`JobExchange`, :class:`Watchdog`);
* :mod:`.agreement`: what the ranks agree on through it (the collected tests, each test's outcome, whether
  the gate judges a test, the exit status);
* :mod:`.gate`: the gate on global rank 0, which the other ranks follow;
* :mod:`.logs`: where the ranks other than 0 write (their rank logs);
* :mod:`.supervise` and :mod:`.deaths`: a rank's supervising parent, which sees how the rank ends, and how
  the other ranks learn of a death and name it.

Imports no torch until the job is joined.
"""

from ...ranks.errors import JobBroken
from .exchange import END_S, GRACE_S, JobExchange, Watchdog
from .job import JOIN_MIN_S, LaunchedSession
from .logs import redirect_output
from .mode import XDIST_REFUSAL, LaunchedMode, diverging_options

__all__ = ["LaunchedMode", "LaunchedSession", "JobExchange", "JobBroken", "Watchdog", "diverging_options",
           "redirect_output", "XDIST_REFUSAL", "GRACE_S", "END_S", "JOIN_MIN_S"]
