"""SIGTERM as Ctrl-C: pytest stops as on an interrupt, and the rank workers, their temporary folders and the
reports are dealt with as after Ctrl-C.  Installed at configure where SIGTERM has its default action, put
back at unconfigure."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

__all__ = ["Terminated", "install", "restore"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt."""


_HANDLER_PID = 0  # the process that installed the handler: a forked child gets the default action back
_PREVIOUS_KEY = pytest.StashKey[Any]()


def _on_sigterm(signum: int, frame: Any) -> None:
    if os.getpid() != _HANDLER_PID:  # a child forked from pytest: SIGTERM ends it, as it would without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise Terminated(f"gpucomm: stopped by signal {signal.Signals(signum).name}")


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
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)
