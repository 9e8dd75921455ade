"""Messages between the pool (controller) and a rank worker, over the control connection.

Both sides send these objects with ``multiprocessing.connection.Connection.send`` (pickle) and
dispatch on their type.  Stdlib only: the worker imports this module before torch.

worker -> controller
    :class:`Hello` right after connecting, :class:`Ready` once the process group is initialised,
    :class:`InitError` when that failed, :class:`TaskOk` / :class:`TaskError` per task, :class:`Bye`
    on shutdown.
controller -> worker
    :class:`Task`, :class:`Shutdown`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

__all__ = [
    "Hello",
    "Ready",
    "InitError",
    "Task",
    "TaskOk",
    "TaskError",
    "Shutdown",
    "Bye",
    "FromWorker",
    "ToWorker",
]


@dataclass(frozen=True)
class Hello:
    """First message of a worker: which rank (and process) this connection belongs to."""

    rank: int
    pid: int


@dataclass(frozen=True)
class Ready:
    """The worker's process group is initialised; it now waits for tasks."""

    rank: int


@dataclass(frozen=True)
class InitError:
    """Initialising the process group failed on ``rank``; the worker exits after sending this."""

    rank: int
    traceback: str


@dataclass(frozen=True)
class Task:
    """Run ``spec`` (``"module:function"``) as ``fn(ctx, **kwargs)``.

    ``sys_path`` is the controller's current ``sys.path``; the worker puts its entries first so that
    task modules in directories added after the pool started (pytester) import.
    """

    task_id: int
    spec: str
    kwargs: dict[str, object] = field(default_factory=dict)
    sys_path: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TaskOk:
    """The task returned ``result`` on this rank."""

    task_id: int
    result: object


@dataclass(frozen=True)
class TaskError:
    """The task raised on this rank (or its result could not be sent); ``traceback`` is the text.

    ``task_id`` is None for a message the worker did not understand.
    """

    task_id: int | None
    traceback: str


@dataclass(frozen=True)
class Shutdown:
    """Destroy the process group and exit."""


@dataclass(frozen=True)
class Bye:
    """The worker's last message before it exits after :class:`Shutdown`."""

    rank: int


FromWorker = Union[Hello, Ready, InitError, TaskOk, TaskError, Bye]
ToWorker = Union[Task, Shutdown]
