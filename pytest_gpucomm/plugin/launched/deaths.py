"""How the ranks of a launched job learn that one of them died, and of what.

In the job's store, under the exchange's prefix (:mod:`.exchange`):

* ``dead/<rank>`` says how the rank ended (``killed by SIGKILL``, ``exit code 7``), with the time; it is set
  once, by whoever learned it first: the rank's supervising parent (:mod:`.supervise`), which saw the end,
  or a rank on the same host that found the rank's process gone (:class:`PeerWatch`, the fallback where a
  rank has no supervisor, or its supervisor itself was killed); ``deaths`` counts them and ``death/<i>``
  names the i-th;
* then ``abort/<rank>`` of every other rank is set to ``dead <rank>``: the thread of each rank that waits on
  that key (:class:`~.exchange.JobExchange`) wakes, and so does an exchange it waits in, at once.

The ranks that wait then name the dead ranks (:func:`dead_ranks`), first death first, and only them: a rank
that merely had not arrived yet is not blamed.

A rank's process is watched on the same machine only: the same boot and the same pid namespace (a container
with the host's name but pids of its own is another machine here), and the process's start time tells a
reused pid apart.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Optional, Sequence

from .supervise import supervisor_pid

__all__ = ["DEAD", "absent", "announce", "dead_ranks", "describe_deaths", "ident", "PeerWatch"]

#: the value of ``abort/<rank>`` that says another rank died (``dead 3``)
DEAD = "dead "
#: how often a rank looks at the processes of the ranks on its machine
POLL_S = 1.0


def announce(store: Any, rank: int, world_size: int, how: str) -> None:
    """Record in ``store`` (the job's, prefixed) that ``rank`` ended, ``how``, unless someone did first, and
    wake every other rank."""
    value = f"{time.time():.3f}\t{how}"
    if _text(store.compare_set(f"dead/{rank}", "", value)) == value:  # the first to tell: counted
        store.set(f"death/{store.add('deaths', 1)}", str(rank))
    keys = [f"abort/{r}" for r in range(world_size) if r != rank]
    values = [f"{DEAD}{rank}"] * len(keys)
    multi_set = getattr(store, "multi_set", None)
    if multi_set is not None:
        multi_set(keys, values)
    else:  # pragma: no cover - an older torch
        for k, v in zip(keys, values):
            store.set(k, v)


def dead_ranks(store: Any) -> dict[int, str]:
    """Every rank recorded as dead in ``store`` -> how it ended, first death first."""
    out = []
    for i in range(1, int(store.add("deaths", 0)) + 1):
        if not store.check([f"death/{i}"]):  # counted, not written yet
            continue
        r = int(_text(store.get(f"death/{i}")))
        _, _, how = _text(store.get(f"dead/{r}")).partition("\t")
        out.append((i, r, how))  # the counter orders the deaths as they were told (a clock's ms can tie)
    return {r: how for _, r, how in sorted(out)}


def absent(store: Any, keys: Sequence[str]) -> list[int]:
    """The indices of ``keys`` not set in ``store``, found by halves (``check`` of many keys at once: one
    request where every key is there)."""
    def search(lo: int, hi: int) -> list[int]:
        if lo >= hi or store.check(list(keys[lo:hi])):
            return []
        if hi - lo == 1:
            return [lo]
        mid = (lo + hi) // 2
        return search(lo, mid) + search(mid, hi)

    return search(0, len(keys))


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def describe_deaths(deaths: dict[int, str], name: Callable[[int], str]) -> str:
    """``rank 3 (hostB, cuda:1) died: killed by SIGKILL; rank 2 (...) died: ...``; ``name(r)`` names rank r."""
    return "; ".join(f"{name(r)} died: {how}" for r, how in deaths.items())


def _machine() -> str:
    """This boot of this machine and its pid namespace, or "" where they cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def _start_time(pid: int) -> Optional[int]:
    """The start time of a live process ``pid`` (clock ticks since boot), None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X", "x"):
        return None
    return int(fields[19])


def ident() -> tuple[str, int, Optional[int]]:
    """(machine, pid, start time) of the process that stands for this rank: its supervising parent where it
    has one (the child dies with it), else this process."""
    pid = supervisor_pid() or os.getpid()
    return _machine(), pid, _start_time(pid)


class PeerWatch:
    """A daemon thread that looks, every :data:`POLL_S`, at the processes of the other ranks on this machine
    (``idents``: every rank's :func:`ident`), and announces a rank whose process is gone."""

    def __init__(self, rank: int, idents: Sequence[tuple[str, int, Optional[int]]],
                 store: Callable[[], object]) -> None:
        me = idents[rank][0] if rank < len(idents) else ""
        self.peers = {r: (pid, start) for r, (machine, pid, start) in enumerate(idents)
                      if r != rank and me and machine == me and start is not None}
        self.world_size = len(idents)
        self._store = store  # a store connection of its own, made when first needed
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.peers:
            self._thread = threading.Thread(target=self._run, name="gpucomm-peer-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            for r, (pid, start) in list(self.peers.items()):
                if _start_time(pid) == start:
                    continue
                del self.peers[r]
                try:
                    announce(self._store(), r, self.world_size,
                             f"its process (pid {pid}, on this machine) is gone; how it ended is its launcher's to "
                             "tell")
                except Exception:  # the store gone: the job is over
                    return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * POLL_S)
