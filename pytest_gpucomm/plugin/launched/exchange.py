"""The deadline-aware control exchange of a launched job: every rank's object, gathered over the job's gloo
control group, with a deadline, and a rank that does not arrive named.

Every control exchange (a task's outcomes, a test's outcome, the exit status, the collected tests, and
:meth:`JobExchange.allgather` for any other control message) goes through :meth:`JobExchange.exchange`:

* each rank announces its arrival in the job's c10d store (the TCPStore of the rendezvous, under the job's
  own prefix ``gpucomm/<token>``, the token drawn by rank 0 when the job is joined): it sets
  ``arrive/<seq>/<rank>``, adds 1 to ``arrive/<seq>``, and the rank whose add makes the count the world size
  sets ``done/<seq>``; every rank waits for ``done/<seq>`` until the deadline (a
  task's ``timeout_s``, from ``@rank_timeout`` or ``--gpucomm-timeout``; ``--gpucomm-timeout`` for the
  others), then exchanges the data over the gloo control group.  ``seq`` counts the exchanges, alike on
  every rank; only the counter is waited on, and the per-rank keys are read only when the wait fails (by
  halves, ``check`` of many keys at once).  Each rank deletes its key of two exchanges back, rank 0 the
  counter and ``done`` key, so the store does not grow with the session.  The ranks gather ``what`` with
  their objects: ranks out of step (one interrupted between two exchanges) break the session, named;
* a rank that dies is announced in the store by its supervising parent or a rank on its machine
  (:mod:`.deaths`, :mod:`.supervise`), which wakes every rank's watcher (below): the watcher sets the
  ``done`` key of the exchange its rank waits in, and the woken ranks, finding fewer arrivals than the
  world, name the dead ranks and how they ended (``rank 3 (hostB, cuda:1) died: killed by SIGKILL``) and
  break the session at once, without blaming the ranks that had not arrived yet;
* on a timeout (or a store that went away) the waiting ranks raise :class:`JobBroken`, which names the ranks
  that did not arrive with their host and device, fails the test, and marks the session broken: no further
  collective exchange (later phases and the exit status are not agreed, ``close`` skips its barrier and
  does not destroy the communicators), and the plugin stops the session (exit status 1).  They also set
  ``abort/<rank>`` for each missing rank;
* on every rank a :class:`Watchdog` thread, armed for each task and exchange at its deadline plus
  :data:`GRACE_S`, and a watcher thread blocked on this rank's ``abort/<rank>`` key (on a connection of its
  own, ``Store.clone()``: a store client serves one operation at a time), end a hung rank:
  :data:`GRACE_S` after the deadline or after the others named it, it writes which rank, host and what it
  did not finish, and the Python stacks of all its threads, to the stderr it had when the session began,
  then ``os._exit(1)``.  The grace lets the waiting ranks report first.  Once broken, a rank that has not
  ended :data:`END_S` later is ended the same way, so nothing is left behind.

The job's process groups themselves are :mod:`.job`'s; what the ranks agree on through this exchange is
:mod:`.agreement`'s.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import threading
import time
from typing import Any, Callable, Optional, Sequence

from ...env.launch import Launch
from ...ranks.errors import JobBroken
from .deaths import DEAD, PeerWatch, absent, dead_ranks, describe_deaths
from .supervise import left

__all__ = ["JobExchange", "Watchdog", "GRACE_S", "END_S", "main_thread_state"]

#: after its deadline (or after the other ranks named it as hung), a rank waits this long before its
#: watchdog ends it, so that the waiting ranks report the failure first
GRACE_S = 10.0
#: once the session is broken, a rank that has not ended within this long is ended by its watchdog
END_S = 60.0
#: a watcher's wait for its abort key is renewed this often (a store wait needs a timeout)
_WATCH_S = 24 * 3600.0
#: when the control group fails in an exchange (a rank gone), how long to wait for the news of a death
DEATH_NEWS_S = 5.0
#: at a task's deadline, how long the ranks wait for each other's word on where they are (:func:`main_thread_state`)
STATE_S = 5.0
#: a rank named as hung by the others is ended this soon: the ranks blocked in a collective with it are freed
#: only by its end (its connections closing), and the namers' message is written before the name is sent
HUNG_END_S = 1.0
#: the value of ``abort/<rank>`` that names the rank as hung (followed by the message)
HUNG = "hung "
#: a source line that waits for the other ranks (a collective's or a stream's wait), where the innermost Python
#: frame of a rank's main thread is not in torch.distributed itself
_WAITS = (".wait(", "synchronize(", "barrier(")


def main_thread_state(frames: Optional[dict[int, Any]] = None) -> tuple[str, str]:
    """Where this process's main thread is: ``("wait", where)`` in torch.distributed or at a line that waits
    for other ranks (a work's ``.wait()``, a ``synchronize()``, a ``barrier()``): it waits for the others;
    else ``("busy", where)``: it runs code of its own (a sleep, a loop, a lock), so the ranks that wait for
    it wait for this rank.  ``where``: ``function (file:line)`` of its innermost Python frame."""
    import linecache
    import sys

    frames = sys._current_frames() if frames is None else frames
    frame = frames.get(threading.main_thread().ident or -1)
    if frame is None:
        return "busy", "no Python frame"
    code = frame.f_code
    where = f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"
    f = frame
    while f is not None:
        if f"{os.sep}torch{os.sep}distributed{os.sep}" in f.f_code.co_filename:
            return "wait", where
        f = f.f_back
    line = linecache.getline(code.co_filename, frame.f_lineno)
    return ("wait" if any(w in line for w in _WAITS) else "busy"), where


def _store_text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Watchdog:
    """One daemon thread that ends this process when it is stuck past a deadline.

    :meth:`arm` sets the deadline of the task or exchange under way (:meth:`disarm` clears it); :meth:`final`
    sets a deadline that only moves earlier and is never cleared (a rank named as hung, a broken session).
    When a deadline passes, the thread writes the reason and the Python stacks of every thread to ``fd``
    (unbuffered) and calls ``os._exit(1)``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._cond = threading.Condition()
        self._armed: Optional[tuple[float, str]] = None
        self._final: Optional[tuple[float, str]] = None
        #: run (in this thread) when the armed deadline passes, before the process is ended: it may re-arm
        self._check: Optional[tuple[float, Callable[[], None]]] = None
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self._firing = threading.Lock()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpucomm-watchdog", daemon=True)
            self._thread.start()

    def arm(self, deadline: float, why: str, check: Optional[tuple[float, Callable[[], None]]] = None) -> None:
        """End this process at ``deadline`` (``time.monotonic()``) unless :meth:`disarm` comes first;
        ``check``: (when, what) -- ``what()`` runs in the watchdog's thread at ``when`` (before ``deadline``)
        unless :meth:`disarm` comes first, and may :meth:`arm` again."""
        with self._cond:
            self._armed = (deadline, why)
            self._check = check
            self._start()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._armed = None
            self._check = None

    def final(self, deadline: float, why: str) -> None:
        """End this process at ``deadline`` whatever happens (an earlier final deadline is kept)."""
        with self._cond:
            if self._final is None or deadline < self._final[0]:
                self._final = (deadline, why)
            self._start()
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._armed = self._final = None
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                check = self._check
                due = min((d for d in (self._armed, self._final) if d is not None), default=None)
                if check is not None and (due is None or check[0] < due[0]):
                    left = check[0] - time.monotonic()
                    if left > 0:
                        self._cond.wait(left)
                        continue
                    self._check = None
                    due = None
                elif due is None:
                    self._cond.wait()
                    continue
                else:
                    left = due[0] - time.monotonic()
                    if left > 0:
                        self._cond.wait(left)
                        continue
            if due is None and check is not None:
                try:
                    check[1]()
                except Exception:  # a store gone: the armed deadline still ends this rank
                    pass
                continue
            if due is not None:
                self.fire(due[1])

    def fire(self, why: str) -> None:
        """Write ``why`` and every thread's stack to ``fd``, then end the process with status 1."""
        if not self._firing.acquire(blocking=False):
            return
        left()  # this end is the watchdog's, not a death for the supervising parent to announce
        try:
            os.write(self.fd, f"\n{why}\nPython stacks of every thread (pid {os.getpid()}):\n".encode(errors="replace"))
            faulthandler.dump_traceback(file=self.fd, all_threads=True)
            os.write(self.fd, b"\n")
        finally:
            os._exit(1)


class JobExchange:
    """This rank's side of the job's control exchange; see the module docstring.

    ``device`` (this rank's), ``hosts`` and ``devices`` (every rank's, ordered by rank) name the ranks in
    messages; :class:`~.job.LaunchedSession` sets them when it joins the job, and :meth:`connect` gives the
    control group and the store.  ``broken`` says why the session is broken (a rank hung or gone: no further
    collective exchange), None while it is sound."""

    def __init__(self, launch: Launch, timeout_s: float) -> None:
        self.launch = launch
        self.timeout_s = timeout_s
        self.device = ""
        self.hosts: tuple[str, ...] = ()
        self.devices: tuple[str, ...] = ()
        self.nodes: tuple[int, ...] = ()  # every rank's node
        #: the ranks named as hung at a task's deadline, with the message (the first rank's to name them)
        self.hung: Optional[tuple[str, list[int]]] = None
        self.control: Any = None  # the gloo group of control messages
        self.broken: Optional[str] = None
        self._closing = False
        self._store: Any = None
        self._watcher: Optional[threading.Thread] = None
        self._peers: Optional[PeerWatch] = None
        self._seq = 0
        self._waiting: Optional[int] = None  # the exchange whose ``done`` key this rank waits for
        #: another rank died (its death announced, :mod:`.deaths`): no exchange waits any more
        self.death_seen = False
        try:  # the stderr of the session's start (pytest's capture is suspended now): a hung rank writes there
            fd = os.dup(2)
        except OSError:  # pragma: no cover - no stderr at all
            fd = 2
        self.watchdog = Watchdog(fd)

    def connect(self, control: Any, store: Any) -> None:
        """Exchange over the gloo group ``control``, with arrivals in ``store`` (the job's, prefixed), and
        start this rank's watcher."""
        self.control = control
        self._store = store
        self._watch()

    def _me(self) -> str:
        la = self.launch
        return f"rank {la.rank} ({la.host}, {self.device or '?'})"

    def _ranks(self, ranks: Sequence[int]) -> str:
        """``rank 3 (hostB, cuda:1)``, or ``ranks 2 (hostB, cuda:0), 3 (hostB, cuda:1)`` (8 at most named)."""
        named = [f"{r} ({self.hosts[r] if r < len(self.hosts) else '?'}, "
                 f"{self.devices[r] if r < len(self.devices) else '?'})" for r in ranks[:8]]
        more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
        return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(named)}{more}"

    def _named(self, ranks: Sequence[int]) -> str:
        """``rank 1 (node 1, host vm, cpu)``, or ``ranks 1 (...), 3 (...)``: with each rank's node."""
        def one(r: int) -> str:
            node = f"node {self.nodes[r]}, " if r < len(self.nodes) else ""
            return (f"{r} ({node}host {self.hosts[r] if r < len(self.hosts) else '?'}, "
                    f"{self.devices[r] if r < len(self.devices) else '?'})")

        more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
        return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(one(r) for r in ranks[:8])}{more}"

    def _store_address(self) -> str:
        store = self._store
        for _ in range(8):  # PrefixStores around the TCPStore
            if hasattr(store, "host") and hasattr(store, "port"):
                return f"{store.host}:{store.port}"
            store = getattr(store, "underlying_store", None)
            if store is None:
                break
        return f"{self.launch.master_addr}:{self.launch.master_port}"

    def _watch(self) -> None:
        """Start this rank's watcher: a thread blocked on ``abort/<rank>`` over a store connection of its own.
        Woken with a message (the other ranks named this rank as hung), it has the watchdog end this process
        GRACE_S later; woken by another rank's death (``dead <rank>``, :mod:`.deaths`), it wakes the exchange
        this rank waits in (which then names the dead); woken with an empty value (this rank's own close), it
        ends; if the store goes away
        while the session runs, the job is over: the watchdog ends this rank if it has not ended within the
        timeout."""
        clone = getattr(self._store, "clone", None)
        if clone is None:  # an older torch: the watchdog of each task and exchange still ends a hung rank
            return
        try:
            store = clone()  # a connection of its own: a store client serves one operation at a time
        except Exception:  # a store that cannot be cloned: as above
            return
        key = f"abort/{self.launch.rank}"

        def watch() -> None:
            while True:
                try:
                    store.wait([key], datetime.timedelta(seconds=_WATCH_S))
                    message = store.get(key).decode(errors="replace")
                except Exception as e:
                    if "timeout" in str(e).lower() and not self._closing:
                        continue
                    if not self._closing:
                        self.watchdog.final(
                            time.monotonic() + self.timeout_s + GRACE_S,
                            f"gpucomm: {self._me()}: the job's store ({self._store_address()}) went away while "
                            f"the session ran ({type(e).__name__}: {e}); the job is over, and this rank did not "
                            f"end within {self.timeout_s + GRACE_S:g} s: it exits (status 1)")
                    return
                if message.startswith(DEAD):
                    self._on_death(store)
                elif message.startswith(HUNG):
                    self.watchdog.final(
                        time.monotonic() + HUNG_END_S,
                        f"{message[len(HUNG):]}\ngpucomm: this is {self._me()}, named as hung by the other ranks, "
                        "which wait for it in a collective: it exits (status 1)")
                elif message:
                    self.watchdog.final(
                        time.monotonic() + GRACE_S,
                        f"{message}\ngpucomm: this is {self._me()}, named by the other ranks: it did not end "
                        f"within {GRACE_S:g} s of that and exits (status 1)")
                return

        self._watcher = threading.Thread(target=watch, name="gpucomm-abort-watcher", daemon=True)
        self._watcher.start()

    def _on_death(self, store: Any) -> None:
        """Another rank died: no exchange waits for it any more (the one under way is woken: its ``done`` key
        set), and this rank ends within the timeout and END_S if the session does not end first."""
        self.death_seen = True
        seq = self._waiting  # read after death_seen is set; the exchange sets it before it reads death_seen
        if seq is not None:
            try:
                store.set(f"done/{seq}", "dead")
            except Exception:  # the store gone: the wait fails by itself
                pass
        self.watchdog.final(time.monotonic() + self.timeout_s + END_S,
                            f"gpucomm: {self._me()}: a rank of the job died, and this rank did not end within "
                            f"{self.timeout_s + END_S:g} s: it exits (status 1)")

    def watch_peers(self, idents: Sequence[Any]) -> None:
        """Watch the processes of the ranks on this machine (``idents``: every rank's
        :func:`.deaths.ident`): one that is gone is announced as dead (:class:`~.deaths.PeerWatch`)."""
        clone = getattr(self._store, "clone", None)
        if clone is not None:
            self._peers = PeerWatch(self.launch.rank, idents, clone)

    def stop_watching(self) -> None:
        """Wake this rank's watcher (an empty ``abort/<rank>``) and wait for it to end: a thread still blocked
        in the store when the interpreter finalizes, and woken then (the store's host ending), would abort the
        process (C++ unwinding through a thread that Python ends)."""
        self._closing = True
        if self._peers is not None:
            self._peers.stop()
        if self._watcher is None:
            return
        try:
            self._store.set(f"abort/{self.launch.rank}", "")
        except Exception:  # the store gone: the watcher's wait fails and it ends by itself
            pass
        self._watcher.join(timeout=5)

    def _break(self, message: str, what: str, timeout_s: float, ranks: Sequence[int] = ()) -> JobBroken:
        """Mark the session broken; the error to raise."""
        if self.broken is None:
            self.broken = message
            self.watchdog.final(time.monotonic() + END_S,
                                f"gpucomm: {self._me()}: the session stopped ({message}), and this rank did not "
                                f"end within {END_S:g} s: it exits (status 1)")
        finished = [r for r in range(self.launch.world_size) if r not in set(ranks)]
        return JobBroken(message, ranks=ranks, label=what, timeout_s=timeout_s, finished=finished)

    def _missing(self, seq: int, ranks: list[int]) -> list[int]:
        """The ranks without their ``arrive/<seq>/<rank>`` key, found by halves."""
        return [ranks[i] for i in absent(self._store, [f"arrive/{seq}/{r}" for r in ranks])]

    def _arrive(self, seq: int, deadline: float, what: str, timeout_s: float) -> None:
        """Announce this rank at exchange ``seq`` and wait until every rank has, or raise :class:`JobBroken`
        naming the ranks that died (at once, when their death is announced) or that did not arrive by
        ``deadline``."""
        store, rank, world = self._store, self.launch.rank, self.launch.world_size
        error = "a rank of the job died"
        try:
            if seq >= 2:  # every rank is past exchange seq - 2: its keys are not needed any more
                store.delete_key(f"arrive/{seq - 2}/{rank}")
                if rank == 0:
                    store.delete_key(f"arrive/{seq - 2}")
                    store.delete_key(f"done/{seq - 2}")
            store.set(f"arrive/{seq}/{rank}", "1")
            if store.add(f"arrive/{seq}", 1) >= world:
                store.set(f"done/{seq}", "1")
                return
            self._waiting = seq  # before death_seen is read: the watcher reads them the other way round
            try:
                if not self.death_seen:
                    store.wait([f"done/{seq}"], datetime.timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
            finally:
                self._waiting = None
            if store.add(f"arrive/{seq}", 0) >= world:  # not woken by a death
                return
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        deaths = self._deaths()
        if deaths:
            raise self._break(self._died(deaths, what), what, timeout_s, list(deaths))
        try:
            if store.add(f"arrive/{seq}", 0) >= world:  # the last rank arrived as the wait gave up
                return
            missing: Optional[list[int]] = self._missing(seq, list(range(world)))
        except Exception as e:
            missing, error = None, f"{type(e).__name__}: {e}"
        tail = "a hung communicator cannot be recovered: the session stops here"
        if missing:
            message = f"gpucomm: {self._ranks(missing)} did not finish {what} within {timeout_s:g} s; {tail}"
            first = next(r for r in range(world) if r not in set(missing))
            for r in missing if rank == first else ():  # one rank tells them; their watchers end them after
                try:  # the grace that lets this report come first
                    store.set(f"abort/{r}", message)
                except Exception:
                    break
        elif missing is None:
            message = (f"gpucomm: {self._me()} lost the job's store ({self._store_address()}) while waiting for "
                       f"every rank to finish {what} ({error}): the rank or launcher that served it (rank 0, or "
                       f"the torchrun agent of node 0) has probably ended; {tail}")
        else:
            message = f"gpucomm: the ranks could not meet to exchange {what} ({error}); {tail}"
        raise self._break(message, what, timeout_s, missing or ())

    def _deaths(self, wait_s: float = 0.0) -> dict[int, str]:
        """The ranks announced as dead (:mod:`.deaths`), waiting up to ``wait_s`` for the news of one."""
        end = time.monotonic() + wait_s
        while True:
            try:
                deaths = dead_ranks(self._store)
            except Exception:  # the store gone
                return {}
            if deaths or time.monotonic() >= end:
                return deaths
            time.sleep(0.2)

    def _died(self, deaths: dict[int, str], what: str) -> str:
        return (f"gpucomm: {describe_deaths(deaths, lambda r: self._ranks([r]))} (the other ranks were at {what}); "
                "a job with a dead rank cannot go on: the session stops here")

    def exchange(self, obj: Any, *, what: str, timeout_s: Optional[float] = None,
                 deadline: Optional[float] = None) -> list[Any]:
        """Every rank's ``obj`` (picklable), ordered by rank, once every rank has arrived; ``what`` names
        what a rank that does not arrive by ``deadline`` (``time.monotonic()``; default: ``timeout_s`` from
        now, ``--gpucomm-timeout`` by default) did not finish, and must be the same on every rank (ranks out
        of step, say one stopped by a signal between two exchanges, break the session, named).  Raises
        :class:`JobBroken` then, and at once when the session is already broken."""
        import torch.distributed as dist

        timeout = self.timeout_s if timeout_s is None else timeout_s
        if self.broken is not None:
            raise JobBroken(self.broken, ranks=(), label=what, timeout_s=timeout)
        if self.hung is not None:  # named at the task's deadline: the task ended when the hung rank did
            self._seq += 1
            raise self._break(self.hung[0], what, timeout, self.hung[1])
        if deadline is None:
            deadline = time.monotonic() + timeout
        seq = self._seq
        self._seq += 1
        self.watch(deadline, what, timeout)
        try:
            self._arrive(seq, deadline, what, timeout)
            out: list[Any] = [None] * self.launch.world_size
            try:
                dist.all_gather_object(out, (what, obj), group=self.control)
            except Exception as e:
                deaths = self._deaths(DEATH_NEWS_S)  # a rank that died in the gather: its news takes a moment
                raise self._break(self._died(deaths, what) if deaths else (
                    f"gpucomm: the control group failed while the ranks exchanged {what} ({type(e).__name__}: "
                    f"{e}); a rank has probably ended; a hung communicator cannot be recovered: the session "
                    "stops here"), what, timeout, list(deaths)) from None
            apart = [r for r, (w, _) in enumerate(out) if w != what]
            if apart:
                raise self._break(f"gpucomm: the ranks fell out of step: {self._ranks(apart)} exchanged "
                                  f"{out[apart[0]][0]} where {self._me()} exchanged {what}; the session stops here",
                                  what, timeout, apart)
            return [o for _, o in out]
        finally:
            self.watchdog.disarm()

    def watch(self, deadline: float, what: str, timeout_s: float, task: bool = False) -> None:
        """Arm the watchdog: this rank ends GRACE_S after ``deadline`` unless ``watchdog.disarm()`` first.
        ``task``: a task runs (its ranks may block in a collective until the deadline): at the deadline the
        ranks tell each other where they are, and the ones that wait name the hung ones
        (:meth:`_at_deadline`)."""
        why = (f"gpucomm: {self._me()} did not finish {what} within {timeout_s:g} s (and {GRACE_S:g} s "
               "of grace); a hung rank cannot be recovered: it exits (status 1)")
        seq = self._seq  # the exchange that ends the task: alike on every rank
        check = (deadline, lambda: self._at_deadline(seq, what, timeout_s, deadline, why)) if task else None
        self.watchdog.arm(deadline + GRACE_S, why, check)

    def _at_deadline(self, seq: int, what: str, timeout_s: float, deadline: float, why: str) -> None:
        """At a task's deadline (in the watchdog's thread): say in the store where this rank is (waiting for
        the others in a collective, or busy in code of its own, :func:`main_thread_state`), read where the
        others are (arrived at the exchange that ends the task counts as waiting), and name the ranks that
        are busy or did not answer within :data:`STATE_S`: they are hung.  The first verdict in the store is
        every rank's: it is sent to the hung ranks, which end at once (their end frees the collective the
        others block in), and the exchange that ends the task raises it.  A rank that is hung itself, or
        whose ranks all wait, keeps its deadline's end."""
        if self._store is None or self.broken is not None:
            return
        store = self._store.clone()
        rank, world = self.launch.rank, self.launch.world_size
        kind, where = main_thread_state()
        store.set(f"state/{seq}/{rank}", f"{kind}\t{where}")
        if kind != "wait":
            return
        states: dict[int, tuple[str, str]] = {}
        end = time.monotonic() + STATE_S
        while True:
            for r in range(world):
                if r in states:
                    continue
                if store.check([f"arrive/{seq}/{r}"]):
                    states[r] = ("wait", "at the exchange")
                elif store.check([f"state/{seq}/{r}"]):
                    k, _, w = store.get(f"state/{seq}/{r}").decode(errors="replace").partition("\t")
                    states[r] = (k, w)
            if len(states) == world or time.monotonic() >= end:
                break
            time.sleep(0.1)
        hung = [r for r in range(world) if states.get(r, ("",))[0] != "wait"]
        if not hung:  # every rank waits: a communicator that hangs by itself; the deadline's end stands
            return
        where_text = "; ".join(f"rank {r} in {states[r][1]}" if r in states else
                               f"rank {r} did not answer within {STATE_S:g} s" for r in hung)
        message = (f"gpucomm: {self._named(hung)} did not reach the end of {what}: hung ({where_text}, "
                   f"{timeout_s:g} s after the task started; the other ranks waited for it in a collective); "
                   "a hung communicator cannot be recovered: the session stops here")
        value = _store_text(store.compare_set(f"hung/{seq}", "", message))  # the first verdict is every rank's
        self.hung = (value, hung)
        for r in hung:
            try:  # not a death when its end is seen: it was ended as hung
                store.compare_set(f"dead/{r}", "", f"{time.time():.3f}\tended as hung")
                store.set(f"abort/{r}", HUNG + value)
            except Exception:
                break
        self.watchdog.arm(time.monotonic() + GRACE_S + END_S,
                          f"gpucomm: {self._me()} named {self._named(hung)} as hung in {what}, but stayed blocked "
                          f"{GRACE_S + END_S:g} s after that; a hung rank cannot be recovered: it exits (status 1)")

    def allgather(self, obj: Any, what: str = "a control message") -> list[Any]:
        """Every rank's ``obj``, ordered by rank, over the control group (picklable objects), within
        ``--gpucomm-timeout``; see :meth:`exchange`."""
        return self.exchange(obj, what=what)

    def broadcast(self, obj: Any = None) -> Any:
        """Global rank 0's ``obj`` on every rank (the others' ``obj`` is ignored), over the control group."""
        return self.allgather(obj if self.launch.is_first else None)[0]

    def release_fd(self) -> None:
        """Close the watchdog's copy of stderr (once it can no longer fire)."""
        if self.watchdog.fd > 2:
            try:
                os.close(self.watchdog.fd)
            except OSError:  # pragma: no cover
                pass
            self.watchdog.fd = 2

    def close(self) -> bool:
        """Stop the watcher, then wait for every rank at the last barrier (bounded by the timeout) and stop the
        watchdog; False, without the barrier, when the session is broken (a rank it waits for may never come):
        the watchdog's END_S bound stays."""
        import torch.distributed as dist

        left()  # from here this rank's end is no death (its supervising parent announces none)
        self.stop_watching()
        if self.broken is not None:
            return False
        self.watch(time.monotonic() + self.timeout_s, "the end of the session (the last barrier)", self.timeout_s)
        try:
            dist.barrier(group=self.control)
        except Exception:  # pragma: no cover - a rank gone: leave anyway
            pass
        self.watchdog.stop()
        self.release_fd()
        return True
