"""How the ranks of a launched job meet before they make their process groups, and learn of a rank that never
will.

torch's own rendezvous (``init_process_group`` with ``env://`` or ``tcp://``) waits in C++ until every rank
has come, up to the join's timeout (``--gpucomm-timeout``, at least :data:`~.job.JOIN_MIN_S`), and then fails
with a TCPStore error: a rank that ended before it joined -- a collection error or a usage error on that rank
alone, no test collected there, an interrupt, a crash while collecting -- left the others waiting out the
whole timeout (300 s by default) for an INTERNALERROR.  So the ranks meet first, in Python, in the
rendezvous' store itself, made as torch makes it (:meth:`Meeting.connect`: rank 0 serves it, or under
torchrun the agent of node 0 does), and only once every rank has come do they call ``init_process_group``
with that store, which then returns at once (not under torchrun with restarts: :meth:`Meeting.why_not`).
Under the prefix :attr:`Meeting.prefix`:

* a rank that joins sets ``rank/<r>`` to ``join`` and adds 1 to ``count``; the rank whose add makes the world
  sets ``done`` and ``all``;
* a rank that ends its session without joining (:func:`depart`, at the session's end), or whose supervising
  parent saw it end before it came (:mod:`.supervise`), sets ``rank/<r>`` to ``gone``, appends
  ``rank<TAB>host<TAB>how`` to the ``gone`` list, adds 1 to ``count``, and sets ``done`` at once;
* every joining rank waits for ``done`` (looking every :data:`POLL_S`: an interrupt is seen) until the join's
  deadline; finding a rank gone it raises :class:`~pytest_gpucomm.ranks.errors.JobBroken` naming it, its host
  and how it ended (``rank 1 (hostB) ended before it joined the job: 1 error during collection
  (test_x.py: RuntimeError: ...)``), and at the deadline it names the ranks that never came, and says in
  the store that it gave up (a latecomer then does not go on alone);
* each rank adds 1 to ``seen`` once it has read what it needs; the rank that serves the store (rank 0
  outside torchrun) stays, where the job cannot start, until ``seen`` is the world, or the deadline: the
  ranks that come after it learn too.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from ...ranks.errors import JobBroken
from .deaths import absent

if TYPE_CHECKING:
    from ...env.launch import Launch

__all__ = ["Meeting", "arrive", "wait_for_all", "linger", "depart", "gone_message"]

JOIN = "join"
GONE = "gone"
#: how often a rank that waits looks at the store (an interrupt is handled between two looks)
POLL_S = 0.1
#: how long the rank that serves the store waits for the others before it says that it waits
SAY_AFTER_S = 1.0
#: the end of the message of a job that lost a rank before it joined
TAIL = "a job without every rank cannot go on: the session stops here"


@dataclass(frozen=True)
class Meeting:
    """Where and how this rank meets the others: the rendezvous' store at ``host:port``, served by this
    rank where ``serves``; ``me`` is this rank's host; ``timeout_s`` bounds the meeting."""

    host: str
    port: int
    rank: int
    world_size: int
    me: str
    serves: bool
    timeout_s: float
    prefix: str

    @classmethod
    def of(cls, launch: "Launch", timeout_s: float, env: Optional[Mapping[str, str]] = None) -> "Meeting":
        """This rank's meeting in ``launch``; under torchrun the agent of node 0 serves the store where
        ``TORCHELASTIC_USE_AGENT_STORE`` says so (torch's ``_create_c10d_store`` reads the same)."""
        env = os.environ if env is None else env
        agent = launch.launcher == "torchrun" and env.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True"
        return cls(host=launch.master_addr, port=launch.master_port, rank=launch.rank,
                   world_size=launch.world_size, me=launch.host, serves=launch.is_first and not agent,
                   timeout_s=float(timeout_s), prefix="gpucomm/arrival/")

    @staticmethod
    def why_not(launch: "Launch", env: Optional[Mapping[str, str]] = None) -> str:
        """Why the ranks of ``launch`` do not meet first (they join through torch's own rendezvous), or "".
        torchrun with restarts (``--max-restarts``): the agent's store outlives a round of workers, and the
        restart count each node's workers are given is the node's own, so the rounds' keys could not be
        told apart."""
        env = os.environ if env is None else env
        restarts = env.get("TORCHELASTIC_MAX_RESTARTS", "0").strip() or "0"
        if launch.launcher == "torchrun" and restarts != "0":
            return f"torchrun restarts its workers (TORCHELASTIC_MAX_RESTARTS={restarts})"
        return ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Meeting":
        return cls(**json.loads(text))

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def connect(self) -> Any:
        """The rendezvous' TCPStore: served here (on every interface, as torch's) where :attr:`serves`, else a
        client, which waits up to :attr:`timeout_s` for the store to be served.  JobBroken when it cannot."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=self.timeout_s)
        # torch's rendezvous reads USE_LIBUV for the store's server too (the libuv one unless it is "0")
        libuv = os.environ.get("USE_LIBUV", "1") != "0"
        started = time.monotonic()
        try:
            if self.serves:
                return dist.TCPStore(self.host, self.port, None, True, timeout=timeout, wait_for_workers=False,
                                     multi_tenant=True, use_libuv=libuv)
            return dist.TCPStore(self.host, self.port, None, False, timeout=timeout, wait_for_workers=False,
                                 use_libuv=libuv)
        except Exception as e:  # noqa: BLE001 - torch's store errors have no common base over versions
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if self.serves:
                summary = f"gpucomm: rank 0 cannot serve the job's rendezvous at {self.address}"
                why = f"{summary} ({first})"
            else:
                summary = (f"gpucomm: rank {self.rank} ({self.me}) could not reach the job's rendezvous at "
                           f"{self.address} in {time.monotonic() - started:.0f} s")
                why = (f"{summary} ({first}): the rank or torchrun agent that serves it (rank 0, or node 0's agent) "
                       "has not started, or ended before it could")
            raise _broken(f"{why}; {TAIL}", summary, [], self) from None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def arrive(store: Any, m: Meeting, how: Optional[str] = None) -> None:
    """This rank has come: to join (``how`` None), or to say that it ends without joining, ``how``; a rank
    that ends without joining needs nothing more from the store (it is counted as ``seen`` at once)."""
    p = m.prefix
    if how is None:
        store.set(f"{p}rank/{m.rank}", JOIN)
    else:
        _say_gone(store, m, how)
    if store.add(f"{p}count", 1) >= m.world_size:
        store.set(f"{p}all", "1")
        store.set(f"{p}done", "1")
    elif how is not None:
        store.set(f"{p}done", GONE)
    if how is not None:
        store.add(f"{p}seen", 1)


def _say_gone(store: Any, m: Meeting, how: str) -> None:
    """Record that this rank ends without joining, ``how``: its own key, and a line of the ``gone`` list that
    the waiting ranks read in one request."""
    line = "\t".join((str(m.rank), m.me, " ".join(how.split())))
    store.set(f"{m.prefix}rank/{m.rank}", f"{GONE}\t{line}")
    append = getattr(store, "append", None)
    if append is not None:
        append(f"{m.prefix}gone", line + "\n")


def _gone(store: Any, m: Meeting) -> dict[int, tuple[str, str]]:
    """The ranks that said they end without joining, in the order they said it: rank -> (host, how)."""
    out: dict[int, tuple[str, str]] = {}
    if getattr(store, "append", None) is not None:
        lines = _text(store.get(f"{m.prefix}gone")).splitlines() if store.check([f"{m.prefix}gone"]) else []
    else:  # pragma: no cover - a torch without Store.append: every rank's key
        keys = [f"{m.prefix}rank/{r}" for r in range(m.world_size)]
        lines = [_text(store.get(k)).partition("\t")[2] for k in keys
                 if store.check([k]) and _text(store.get(k)).startswith(GONE + "\t")]
    for line in lines:
        rank, host, how = (line.split("\t", 2) + ["", ""])[:3]
        if rank.isdigit() and int(rank) != m.rank:
            out.setdefault(int(rank), (host, how))
    return out


def _missing(store: Any, m: Meeting) -> list[int]:
    """The ranks that have not come (only when the meeting's time is up)."""
    return absent(store, [f"{m.prefix}rank/{r}" for r in range(m.world_size)])


def gone_message(gone: Mapping[int, tuple[str, str]]) -> str:
    """``gpucomm: rank 1 (hostB) ended before it joined the job: how; ...; <TAIL>``"""
    each = "; ".join(f"rank {r} ({host}) ended before it joined the job: {how}" for r, (host, how) in gone.items())
    return f"gpucomm: {each}; {TAIL}"


def _ranks(ranks: list[int]) -> str:
    named = ", ".join(str(r) for r in ranks[:8]) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {named}"


def _until(ready: Callable[[], bool], deadline: float) -> bool:
    """Ask ``ready()`` (one store request) every :data:`POLL_S` until it says yes or ``deadline``
    (``time.monotonic()``); whether it did.  A store's own blocking wait cannot be interrupted, and one that
    times out writes a warning of torch's to stderr each time."""
    while True:
        if ready():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(POLL_S, left))


def _wait(store: Any, key: str, deadline: float) -> bool:
    """Wait for ``key`` until ``deadline``; whether it came."""
    return _until(lambda: bool(store.check([key])), deadline)


def _all_seen(store: Any, m: Meeting, deadline: float) -> bool:
    """Wait until every rank has read what it needs from the meeting (``seen``), or ``deadline``."""
    return _until(lambda: int(store.add(f"{m.prefix}seen", 0)) >= m.world_size, deadline)


def _broken(message: str, summary: str, ranks: list[int], m: Meeting) -> JobBroken:
    e = JobBroken(message, ranks=ranks, label="joining the job", timeout_s=m.timeout_s)
    e.summary = summary  # type: ignore[attr-defined]  # the first line of pytest's end of the session
    return e


def wait_for_all(store: Any, m: Meeting, deadline: float, started: Optional[float] = None) -> None:
    """After :func:`arrive` to join: return once every rank has come to join; raise JobBroken at once when a
    rank says it ends without joining (naming it and how), or at ``deadline`` naming the ranks that never
    came (``started``: when this rank began to meet, for the time it waited).  A rank that gives up at the
    deadline says so in the store, as a rank that ends without joining: a latecomer does not go on alone.
    The rank that serves the store stays until every rank has read what it needs (or the deadline)."""
    started = time.monotonic() if started is None else started
    p = m.prefix
    try:
        came = _wait(store, f"{p}done", deadline)
        gone = _gone(store, m) if came else {}
        if not gone and store.check([f"{p}all"]):
            store.add(f"{p}seen", 1)
            return
        missing = [] if gone else _missing(store, m)
        waited = time.monotonic() - started
        if not gone:
            _say_gone(store, m, f"it gave up waiting for {_ranks(missing) if missing else 'the others'} after "
                                f"{waited:.0f} s")
            store.set(f"{p}done", GONE)
        store.add(f"{p}seen", 1)
    except Exception as e:  # noqa: BLE001 - the store gone (its server ended)
        raise _broken(f"gpucomm: rank {m.rank} ({m.me}) lost the job's rendezvous at {m.address} while the ranks met "
                      f"({type(e).__name__}: {e}): the rank that served it has probably ended; {TAIL}",
                      f"gpucomm: rank {m.rank} ({m.me}) lost the job's rendezvous at {m.address}", [], m) from None
    if gone:
        message = gone_message(gone)
        r, (host, _) = next(iter(gone.items()))
        more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
        summary = f"gpucomm: rank {r} ({host}) ended before it joined the job{more}"
    else:
        who = _ranks(missing) if missing else "some ranks"
        summary = f"gpucomm: {who} did not come to join the job within {waited:.0f} s"
        message = (f"{summary} (not started, hung, or ended without a word: the launcher's log says which); "
                   f"{TAIL}")
    linger(store, m, deadline)
    raise _broken(message, summary, list(gone) or missing, m)


def linger(store: object, m: Meeting, deadline: float, say: Optional[Callable[[str], None]] = None) -> None:
    """Where this rank serves the store: stay until every rank has come and read what it needs (``seen``), or
    ``deadline``; ``say`` is told
    once, with a line for the user, when that takes more than :data:`SAY_AFTER_S`."""
    if not m.serves:
        return
    try:
        if _all_seen(store, m, min(deadline, time.monotonic() + SAY_AFTER_S)):
            return
        if say is not None:
            left = max(deadline - time.monotonic(), 0)
            say(f"gpucomm: rank 0 serves the job's rendezvous ({m.address}): it waits up to {left:.0f} s for "
                f"every rank to come and learn that the job cannot start ({len(_missing(store, m))} not come yet)")
        _all_seen(store, m, deadline)
    except Exception:  # noqa: BLE001 - nothing more to wait for
        pass



def depart(m: Meeting, how: str, deadline: Optional[float] = None,
           say: Optional[Callable[[str], None]] = None) -> bool:
    """Tell the job that this rank ends without joining it, ``how``, and where it serves the store, stay until
    every rank has come (or ``deadline``: the meeting's timeout from now by default; ``say``: as
    :func:`linger`'s).  Never raises; whether the news was written."""
    if deadline is None:
        deadline = time.monotonic() + m.timeout_s
    try:
        store = m.connect()
        arrive(store, m, how)
    except Exception:  # noqa: BLE001 - no store to tell (its server never came): the others time out
        return False
    linger(store, m, deadline, say)
    return True
