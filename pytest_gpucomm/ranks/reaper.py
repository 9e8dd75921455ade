"""What a rank's tasks started outside the rank's process group: found and ended with the rank (issue 49).

A rank worker leads its own process group, and :func:`~.processes.kill_ranks` kills that group; a child that
leaves it (``setsid``, ``start_new_session=True``, ``setpgid``, a daemon's double fork) is not in it.  On Linux
each worker therefore becomes a *child subreaper* (:func:`become_subreaper`, ``PR_SET_CHILD_SUBREAPER``): a
descendant whose parent exits is re-parented to the worker instead of to init, so while the worker lives every
process its tasks started, in any session or group, is in its process tree (``/proc/<pid>/stat`` parent links:
:func:`descendants`).  The worker ends that tree itself before it exits (:func:`end_descendants`: SIGTERM,
SIGKILL after a short grace, reaped), and the controller kills it (:func:`kill_descendants`) before it kills a
worker that is still running (a hung or torn-down pool).  The subreaper is the worker, not pytest: the
controller's other children (and their orphans) are left to whoever reaped them before.

Not covered: a worker that dies abruptly (SIGKILL, a crash, ``os._exit`` in a task) hands what it started to
its parent's nearest subreaper or init, and only its process group is killed then; a process that leaves the
tree some other way (re-parented by a daemon manager, moved to another cgroup by systemd) is not seen.  Off
Linux (no ``prctl``, no ``/proc``) these functions do nothing and only the process group is killed.
Stdlib only (the worker imports it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

__all__ = ["PR_SET_CHILD_SUBREAPER", "END_GRACE_S", "become_subreaper", "descendants", "kill_descendants",
           "end_descendants"]

PR_SET_CHILD_SUBREAPER = 36
#: how long a rank's descendants get to exit after SIGTERM before SIGKILL
END_GRACE_S = 0.5
_ROUNDS = 8  # scans that find something new to signal, at most (a process forking as it is killed)


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); False where the platform has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return False


def _parents() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process in /proc ({} without /proc)."""
    out: dict[int, tuple[int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                text = f.read().decode("ascii", "replace")
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rfind(")") + 2:].split()
        if len(fields) > 1:
            out[int(name)] = (int(fields[1]), fields[0])
    return out


def descendants(pid: int, *, zombies: bool = False) -> list[int]:
    """Every process below ``pid`` in the process tree (children first); zombies only when asked."""
    table = _parents()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    out: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children.get(p, ())
    return [p for p in out if zombies or table[p][1] not in ("Z", "X", "x")]


def _signal(pids: list[int], signum: int) -> None:
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, signum)


def kill_descendants(pid: int) -> list[int]:
    """SIGKILL every living descendant of ``pid`` (a running rank worker, from its controller), scanning
    again until none is left (one forked meanwhile); the pids signalled.  Their zombies are reaped by the
    worker, or by init once the worker is gone."""
    signalled: list[int] = []
    for _ in range(_ROUNDS):
        found = descendants(pid)
        if not found:
            break
        _signal(found, signal.SIGKILL)
        signalled += [p for p in found if p not in signalled]
    return signalled


def _reap_children() -> None:
    """Reap every exited child of this process (the worker's own; it runs no other waiter by then)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except (ChildProcessError, OSError):
            return
        if pid == 0:
            return


def end_descendants(grace_s: float = END_GRACE_S) -> list[int]:
    """In a rank worker about to exit: SIGTERM every living descendant of this process, SIGKILL what is left
    after ``grace_s``, and reap them (this process is their subreaper); the pids signalled."""
    me = os.getpid()
    found = descendants(me)
    if not found:
        return []
    signalled = list(found)
    _signal(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while found and time.monotonic() < deadline:
        time.sleep(0.01)
        _reap_children()
        found = descendants(me)
    for _ in range(_ROUNDS):
        if not found:
            break
        _signal(found, signal.SIGKILL)
        signalled += [p for p in found if p not in signalled]
        time.sleep(0.005)
        _reap_children()
        found = descendants(me)
    deadline = time.monotonic() + grace_s  # SIGKILLed ones re-parented to us as their parents die: reap those too
    while descendants(me, zombies=True) and time.monotonic() < deadline:
        _reap_children()
        time.sleep(0.005)
    _reap_children()
    return signalled
