"""SIGTERM as Ctrl-C: pytest stops as on an interrupt, and the rank workers, their temporary folders and the
reports are dealt with as after Ctrl-C.  Installed at configure where SIGTERM has its default action, put
back at unconfigure.

Two SIGTERMs within :data:`TWICE_S` are one (a launched rank's supervising parent passes on the SIGTERM that
a launcher's ``killpg`` also sent to the rank).  A launched rank that has left its job (:func:`ignore_from_now`)
ignores SIGTERM to the end: the launcher, which stops a node's other ranks as soon as one exits with a
failure, would otherwise end it during its exit, with another status than the job's."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType
from typing import Any, Optional

import pytest

__all__ = ["Terminated", "install", "restore", "ignore_from_now"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt."""


_HANDLER_PID = 0  # the process that installed the handler: a forked child gets the default action back
_PREVIOUS_KEY = pytest.StashKey[Any]()
#: two SIGTERMs within this many seconds are one
TWICE_S = 1.0
_LAST = [float("-inf")]  # when the last SIGTERM came (time.monotonic())
_IGNORING = [False]  # a launched rank that left its job: SIGTERM ignored to the end


def _on_sigterm(signum: int, frame: Optional[FrameType]) -> None:
    if os.getpid() != _HANDLER_PID:  # a child forked from pytest: SIGTERM ends it, as it would without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    now, last = time.monotonic(), _LAST[0]
    _LAST[0] = now
    if _IGNORING[0] or now - last < TWICE_S:
        return
    raise Terminated(f"gpucomm: stopped by signal {signal.Signals(signum).name}")


def ignore_from_now() -> None:
    """SIGTERM is ignored from now to the end of this process (a launched rank that has left its job)."""
    _IGNORING[0] = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def install(config: pytest.Config) -> None:
    """Turn SIGTERM into :class:`Terminated` in this process (from the main thread, and only where SIGTERM
    has its default action: another handler is left alone)."""
    global _HANDLER_PID
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        _HANDLER_PID = os.getpid()
        config.stash[_PREVIOUS_KEY] = signal.signal(signal.SIGTERM, _on_sigterm)


def restore(config: pytest.Config) -> None:
    """Put back the handler :func:`install` replaced."""
    previous = config.stash.get(_PREVIOUS_KEY, None)
    if previous is not None and threading.current_thread() is threading.main_thread() and not _IGNORING[0]:
        signal.signal(signal.SIGTERM, previous)
